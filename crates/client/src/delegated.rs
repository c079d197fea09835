//! Creates this client answers itself in a directory the MDT delegated to it (issue 44
//! item 2; docs/plans/round-trips.md, R2 step C; docs/locking.md, "Delegated
//! directories"), sent later many per request (`CreateBatch`) with FIDs the MDT granted it.
//!
//! A create is answered here only when nothing the MDT could say later can differ: the
//! directory is known complete under this client's lock (the name is new), delegated to
//! it (no other client can add the name or look), the caller may write and search it and
//! claims only its own owner and one of its groups (`perm::check`'s rules, from the
//! directory's attributes as delegated), and the MDT enforces no inode quota (it refuses
//! the delegation then). What was answered is sent: when 256 are pending, before any other
//! request of this client that names the directory or one of the new files, before the
//! delegation is given back (a callback: another client looks), by `fsync`/`syncfs`
//! ([`Client::flush_delegated_all`]), and within [`DELEGATED_SEND_MS`] by a background
//! thread. Until the MDT commits them they are kept for replay as any change; a client
//! that dies before sending them loses them, and no other client ever saw them.

use crate::{Client, Result};
use nacre_types::cred::{Cred, MAY_EXEC, MAY_WRITE};
use nacre_types::{Attr, Fid, FileKind, TimeSpec};
use nacre_wire::mds::{BatchCreate, MdsOp, CREATE_BATCH_ITEMS_MAX};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set-group-id on a directory: its new files take its group.
const SGID: u32 = 0o2000;
/// Longest a create answered here waits before it is sent.
pub const DELEGATED_SEND_MS: u64 = 50;
/// FIDs asked for at a time.
const FID_GRANT_ASK: u32 = 4096;
/// Directories whose delegation was refused, remembered (then asked again).
const REFUSED_MAX: usize = 4096;

/// One delegated directory.
struct Dir {
    /// Its attributes as delegated, kept current with what was answered here.
    attr: Attr,
    /// Creates answered and not sent yet, and the credentials they were checked with.
    items: Vec<BatchCreate>,
    cred: Option<Cred>,
    /// Files answered and not yet known to the MDT (sent or not), with their attributes.
    answered: HashMap<Fid, Attr>,
    /// When the oldest item not sent was answered.
    since: Option<Instant>,
    /// Held while a batch of this directory is on its way: a request that needs it waits.
    sending: Arc<Mutex<()>>,
}

/// The delegated directories and this client's FID grants.
#[derive(Default)]
pub struct Delegated {
    dirs: Mutex<HashMap<Fid, Dir>>,
    refused: Mutex<HashSet<Fid>>,
    /// Per MDT: the FID range being used (sequence, next object id, end) and the
    /// incarnation of this client it was granted to (an eviction retires grants).
    fids: Mutex<HashMap<u32, (u64, u64, u64, u64)>>,
    /// Items answered and not yet sent, all directories.
    pending: AtomicUsize,
    /// Directories held (`dirs.len()`), read without the lock by every request's hook.
    held: AtomicUsize,
    /// Counters.
    pub stats: DelegatedStats,
}

/// What the delegated path did.
#[derive(Default)]
pub struct DelegatedStats {
    /// Creates answered here.
    pub answered: AtomicU64,
    /// Batches sent.
    pub batches: AtomicU64,
    /// Creates the MDT refused after they were answered (lost: logged).
    pub lost: AtomicU64,
}

impl Client {
    /// Answers creates in delegated directories here (`on`), or sends every create to the
    /// MDT (the default).
    pub fn set_async_dirops(&self, on: bool) {
        self.async_dirops.store(on, Ordering::Release);
    }

    /// Whether creates in delegated directories are answered here.
    pub fn async_dirops(&self) -> bool {
        self.async_dirops.load(Ordering::Acquire)
    }

    /// A handle on `attr`'s file, made by [`Client::create_delegated`], for `access`: not
    /// open at the MDT until [`Client::undefer`].
    pub fn open_deferred(&self, attr: &Attr, access: u8) -> Result<crate::OpenFile> {
        // A slot of its own: the file's shared slot is made by the open at the MDT, with
        // the layout that open gives (layouts.rs keeps the first handle's).
        let slot = Arc::new(crate::layouts::LayoutSlot::new(attr.fid, None, false));
        let mut f = crate::OpenFile::with_slot(slot)
            .owned_by(attr)
            .with_access(access);
        f.incarnation = self.mdc(attr.fid.mdt_index())?.incarnation();
        f.deferred = true;
        Ok(f)
    }

    /// The handle `file` stands for, opened at the MDT (its creation sent first): what a
    /// deferred handle becomes before it is used for anything but its close.
    pub fn undefer(&self, file: &crate::OpenFile) -> Result<crate::OpenFile> {
        let (_, mut f) = self.open(file.fid, file.access)?;
        if file.append {
            f.set_append();
        }
        if file.kernel_kills_privs {
            f.set_kernel_kills_privs();
        }
        Ok(f)
    }

    /// Creates regular file `name` in `parent` on the delegated path if it applies: its
    /// attributes, or `None` (create it with the MDT). See the module documentation.
    pub fn create_delegated(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Option<Attr>> {
        if !self.async_dirops()
            || name.is_empty()
            || name.len() > nacre_types::limits::NAME_BYTES_MAX
            || name.contains(&b'/')
            || name == b"."
            || name == b".."
            || !self.complete.absent(parent, name)
        {
            return Ok(None);
        }
        let Some(dir) = self.delegation_of(parent)? else {
            return Ok(None);
        };
        let cred = nacre_types::cred::current();
        if !cred.is_root() {
            let may = nacre_types::cred::permits(
                &cred,
                dir.perm,
                dir.uid,
                dir.gid,
                true,
                MAY_WRITE | MAY_EXEC,
            );
            let sgid = dir.perm & SGID != 0;
            if !may || uid != cred.uid || !(cred.in_group(gid) || sgid) {
                return Ok(None);
            }
        }
        let fid = self.delegated_fid(parent.mdt_index())?;
        let now = TimeSpec::now();
        let attr = Attr {
            fid,
            kind: FileKind::Regular,
            perm: perm & 0o7777,
            uid,
            gid: if dir.perm & SGID != 0 { dir.gid } else { gid },
            nlink: 1,
            size: 0,
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            project: if dir.proj_inherit { dir.project } else { 0 },
            proj_inherit: false,
        };
        let item = BatchCreate {
            fid,
            name: name.to_vec(),
            perm: attr.perm,
            uid,
            gid,
        };
        let full = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&parent) else {
                // Called back meanwhile: the MDT creates it.
                return Ok(None);
            };
            if d.cred.as_ref().is_some_and(|c| *c != cred) && !d.items.is_empty() {
                drop(dirs);
                self.flush_delegated(parent)?;
                return self.create_delegated(parent, name, perm, uid, gid);
            }
            d.cred = Some(cred);
            d.items.push(item);
            d.answered.insert(fid, attr.clone());
            d.since.get_or_insert_with(Instant::now);
            d.attr.mtime = now;
            d.attr.ctime = now;
            d.items.len() >= CREATE_BATCH_ITEMS_MAX
        };
        if self.delegated.pending.fetch_add(1, Ordering::AcqRel) == 0 {
            if let Some(t) = self.delegated_sender.get() {
                t.unpark();
            }
        }
        self.delegated
            .stats
            .answered
            .fetch_add(1, Ordering::Relaxed);
        self.complete.added(parent, name);
        if full {
            self.flush_delegated(parent)?;
        }
        Ok(Some(attr))
    }

    /// The attributes of `dir` as delegated to this client, asking the MDT for the
    /// delegation if it has not been refused lately.
    fn delegation_of(&self, dir: Fid) -> Result<Option<Attr>> {
        if let Some(d) = self.delegated.dirs.lock().get(&dir) {
            return Ok(Some(d.attr.clone()));
        }
        if self.delegated.refused.lock().contains(&dir) {
            return Ok(None);
        }
        use nacre_ldlm::msg::{DELEGATION, UPDATE};
        let asked = self
            .mdc(dir.mdt_index())?
            .call_with(MdsOp::DelegateDir { fid: dir }, UPDATE | DELEGATION);
        let attr = match asked {
            Ok((nacre_wire::mds::MdsReply::Attr(a), Some(l)))
                if l.bits & DELEGATION != 0 && l.fid == dir =>
            {
                a
            }
            _ => {
                let mut r = self.delegated.refused.lock();
                if r.len() >= REFUSED_MAX {
                    r.clear();
                }
                r.insert(dir);
                return Ok(None);
            }
        };
        self.start_delegated_sender();
        let d = Dir {
            attr: attr.clone(),
            items: Vec::new(),
            cred: None,
            answered: HashMap::new(),
            since: None,
            sending: Arc::new(Mutex::new(())),
        };
        let mut dirs = self.delegated.dirs.lock();
        dirs.entry(dir).or_insert(d);
        self.delegated.held.store(dirs.len(), Ordering::Release);
        Ok(Some(attr))
    }

    /// A FID of this client's grants on MDT `mdt`, asking for more when they are used up.
    fn delegated_fid(&self, mdt: u32) -> Result<Fid> {
        let incarnation = self.mdc(mdt)?.incarnation();
        let mut fids = self.delegated.fids.lock();
        if let Some((seq, next, end, inc)) = fids.get_mut(&mdt) {
            if *next < *end && *inc == incarnation {
                // Below `end`, which is at most u32::MAX + 1: an object id.
                let f = Fid::new(*seq, *next as u32);
                *next += 1;
                return Ok(f);
            }
        }
        let (first, count) = self.grant_fids(mdt, FID_GRANT_ASK)?;
        let end = u64::from(first.oid) + u64::from(count);
        let incarnation = self.mdc(mdt)?.incarnation();
        fids.insert(mdt, (first.seq, u64::from(first.oid) + 1, end, incarnation));
        Ok(first)
    }

    /// Sends the creates answered in `dir` and not sent yet, and waits for any batch of it
    /// already on its way. A file the MDT refused (it should not: logged, counted) is
    /// forgotten with the directory's complete listing.
    pub fn flush_delegated(&self, dir: Fid) -> Result<()> {
        let Some(sending) = self
            .delegated
            .dirs
            .lock()
            .get(&dir)
            .map(|d| d.sending.clone())
        else {
            return Ok(());
        };
        let _one = sending.lock();
        let (items, cred) = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&dir) else {
                return Ok(());
            };
            d.since = None;
            (std::mem::take(&mut d.items), d.cred.clone())
        };
        if items.is_empty() {
            return Ok(());
        }
        let n = items.len();
        let fids: Vec<Fid> = items.iter().map(|i| i.fid).collect();
        let names: Vec<Vec<u8>> = items.iter().map(|i| i.name.clone()).collect();
        let cred = cred.unwrap_or_else(nacre_types::cred::current);
        let sent = nacre_types::cred::with(cred, || self.create_batch(dir, items));
        self.delegated.pending.fetch_sub(n, Ordering::AcqRel);
        self.delegated.stats.batches.fetch_add(1, Ordering::Relaxed);
        if let Some(d) = self.delegated.dirs.lock().get_mut(&dir) {
            for f in &fids {
                d.answered.remove(f);
            }
        }
        let lost: Vec<String> = match &sent {
            Ok(results) => results
                .iter()
                .zip(&names)
                .filter_map(|(r, name)| {
                    r.as_ref()
                        .err()
                        .map(|s| format!("{} ({s})", String::from_utf8_lossy(name)))
                })
                .collect(),
            Err(e) => vec![format!("all {n} ({e})")],
        };
        if !lost.is_empty() {
            self.delegated
                .stats
                .lost
                .fetch_add(lost.len() as u64, Ordering::Relaxed);
            self.complete.forget(dir);
            tracing::warn!(
                "creates answered in delegated directory {dir} refused by the MDT: {}",
                lost.join(", ")
            );
        }
        sent.map(|_| ())
    }

    /// Sends every delegated directory's pending creates (`fsync`, `syncfs`, unmount).
    pub fn flush_delegated_all(&self) -> Result<()> {
        let dirs: Vec<Fid> = self.delegated.dirs.lock().keys().copied().collect();
        let mut first_err = Ok(());
        for d in dirs {
            if let Err(e) = self.flush_delegated(d) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        }
        first_err
    }

    /// The attributes of a file this client answered the create of and the MDT does not
    /// know yet: they are exact (no one else can see it; a handle used for anything but its
    /// close opens it at the MDT first).
    pub fn delegated_attr(&self, fid: Fid) -> Option<Attr> {
        if self.delegated.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let dirs = self.delegated.dirs.lock();
        dirs.values().find_map(|d| d.answered.get(&fid).cloned())
    }

    /// Before request `op` goes to an MDT: sends the pending creates it depends on (of the
    /// directory it names, or that made a file it names).
    pub(crate) fn before_request(&self, op: &MdsOp) {
        if matches!(
            op,
            MdsOp::CreateBatch { .. }
                | MdsOp::GrantFids { .. }
                | MdsOp::DelegateDir { .. }
                | MdsOp::LockPoll { .. }
                | MdsOp::LockCancel { .. }
                | MdsOp::Ping
        ) || self.delegated.held.load(Ordering::Acquire) == 0
        {
            return;
        }
        // A commit of everything: everything answered goes first.
        if matches!(op, MdsOp::Sync) {
            if let Err(e) = self.flush_delegated_all() {
                tracing::warn!("sending delegated creates before a sync: {e}");
            }
            return;
        }
        let mut named = Vec::with_capacity(2);
        named.extend(op.key_fid());
        match op {
            MdsOp::Rename { dst_parent, .. } => named.push(*dst_parent),
            MdsOp::Link { fid, .. } => named.push(*fid),
            _ => {}
        }
        let due: Vec<Fid> = {
            let dirs = self.delegated.dirs.lock();
            dirs.iter()
                .filter(|(dir, d)| {
                    named
                        .iter()
                        .any(|f| (*f == **dir && !d.items.is_empty()) || d.answered.contains_key(f))
                })
                .map(|(dir, _)| *dir)
                .collect()
        };
        for dir in due {
            if let Err(e) = self.flush_delegated(dir) {
                tracing::warn!("sending the creates of {dir} before a request: {e}");
            }
        }
    }

    /// The delegation of `dir` is called back (or lost): what was answered is sent first,
    /// then it is forgotten.
    pub(crate) fn delegation_gone(&self, dir: Fid) {
        if let Err(e) = self.flush_delegated(dir) {
            tracing::warn!("sending the creates of {dir} as its delegation goes: {e}");
        }
        let mut dirs = self.delegated.dirs.lock();
        dirs.remove(&dir);
        self.delegated.held.store(dirs.len(), Ordering::Release);
    }

    /// Starts the thread that sends what waited [`DELEGATED_SEND_MS`] (once). It sleeps
    /// while nothing is pending (woken by the first create answered, or each second to see
    /// whether its client is gone).
    fn start_delegated_sender(&self) {
        if self.delegated_sender_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.me.clone();
        let started = std::thread::Builder::new()
            .name("delegated-send".into())
            .spawn(move || loop {
                let idle = me
                    .upgrade()
                    .is_none_or(|c| c.delegated.pending.load(Ordering::Acquire) == 0);
                if idle {
                    std::thread::park_timeout(Duration::from_secs(1));
                } else {
                    std::thread::sleep(Duration::from_millis(DELEGATED_SEND_MS / 2));
                }
                let Some(client) = me.upgrade() else { return };
                let due: Vec<Fid> = client
                    .delegated
                    .dirs
                    .lock()
                    .iter()
                    .filter(|(_, d)| {
                        d.since.is_some_and(|t| {
                            t.elapsed() >= Duration::from_millis(DELEGATED_SEND_MS)
                        })
                    })
                    .map(|(f, _)| *f)
                    .collect();
                for dir in due {
                    if let Err(e) = client.flush_delegated(dir) {
                        tracing::warn!("sending the creates of {dir}: {e}");
                    }
                }
            });
        match started {
            Ok(h) => {
                let _ = self.delegated_sender.set(h.thread().clone());
            }
            Err(e) => tracing::warn!("no thread to send delegated creates: {e}"),
        }
    }
}
