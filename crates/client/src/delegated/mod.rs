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
//!
//! A delegation goes in one of two ways ([`nacre_ldlm::client::Revoked::lost`]). Given
//! back (a callback, the LRU, this client's own change of the directory's attributes):
//! no create is answered in it from then on, and what was answered is sent before the
//! lock is cancelled. Lost (an eviction, a restart of the MDT, an MDT out of reach): never
//! sent from there (that runs inside a request): after an eviction what was answered is
//! lost with the FIDs it was given (the MDT retired them); otherwise the sender thread
//! sends it once the MDT answers again.

use crate::{Client, Result};
use nacre_types::cred::{Cred, MAY_EXEC, MAY_WRITE};
use nacre_types::limits::DIR_NLINK_MAX;
use nacre_types::{Attr, Fid, FileKind, TimeSpec};
use nacre_wire::mds::{BatchAccess, BatchCreate, BatchUnlink, MdsOp, CREATE_BATCH_ITEMS_MAX};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod data;
mod kept;
mod send;
mod unlink;

/// Set-group-id on a directory: its new files take its group.
const SGID: u32 = 0o2000;
/// Longest a create answered here waits before it is sent.
pub const DELEGATED_SEND_MS: u64 = 50;
/// FIDs asked for at a time.
const FID_GRANT_ASK: u32 = 4096;
/// Directories whose delegation was refused or called back, remembered (then asked again).
const REFUSED_MAX: usize = 4096;
/// How long a directory whose delegation was refused or called back is not asked for
/// again: two clients creating in one directory do not take it from each other at every
/// create.
const ASK_AGAIN_MS: u64 = 1000;
/// Most creates answered here and not known committed to be made (not sent or on their
/// way), all directories: below a grant of FIDs, so what is not made yet spans at most two
/// grants (the MDT keeps each client's newest four). Past it, creates go to the MDT.
pub const DELEGATED_PENDING_MAX: usize = FID_GRANT_ASK as usize / 2;
/// Regular files answered in a delegated directory before [`Dir::writes_follow`] judges
/// whether answering them pays.
const FILES_JUDGED_AFTER: u32 = 8;
/// Most files answered in one delegated directory whose entry and attributes the kernel
/// may keep for as long as the delegation is held (each is forgotten when it goes), and
/// whose unlink the mount may answer: IO500's directories of 190,000 files fit (with 16,384
/// their removal ran at 4,530/s, most unlinks going to the MDT). About 100 bytes each; a
/// delegation given back has the kernel forget them all first.
pub const DELEGATED_COVERED_MAX: usize = 262_144;
/// Directories made here under a delegation remembered (past it, one is forgotten: its
/// files go to the MDT) so that the first create in one takes its delegation.
const FRESH_MAX: usize = 4096;
/// How long a batch the MDT does not answer is tried again before what it holds is
/// counted lost.
const RETRY_MS_MAX: u64 = 60_000;

/// A change answered here and not sent yet, in the order it was answered.
#[derive(Clone)]
enum Item {
    Create(BatchCreate),
    Unlink(BatchUnlink),
}

impl Dir {
    /// True once at least half of the regular files answered here had their handle opened
    /// at the MDT right after (after [`FILES_JUDGED_AFTER`]): each such file cost a batch
    /// of its own, sent before that open, and the open — a round trip more than the MDT's
    /// own create with open, and no lock on the file to answer its stats with. Creates of
    /// regular files then go to the MDT for as long as the delegation is held (mkdirs and
    /// unlinks are still answered here). mdtest's hard phase on a directory whose files
    /// start on OSTs is such a load; its easy phase (empty files) and small files carried
    /// by their creates (a component on the MDT) are not.
    fn writes_follow(&self) -> bool {
        self.answered_files >= FILES_JUDGED_AFTER
            && self.opened_files.saturating_mul(2) >= self.answered_files
    }
}

impl Item {
    /// Its name in the directory.
    fn name(&self) -> &[u8] {
        match self {
            Item::Create(c) => &c.name,
            Item::Unlink(u) => &u.name,
        }
    }
}

/// A file or directory answered under a delegation whose entry and attributes the kernel
/// was let keep.
struct Covered {
    fid: Fid,
    /// Its owner, for the sticky bit's rule; `None` once this client changed it (its unlink
    /// then goes to the MDT).
    owner: Option<u32>,
    /// Its batch brought its own lock, and its attributes as answered here (send.rs): its
    /// entry stays in the kernel when the delegation goes, for as long as that lock.
    locked: bool,
}

/// A file made under a delegation, as the MDT answered its create, and the bytes it
/// carried: its whole contents (kept.rs).
struct Kept {
    attr: Attr,
    data: Arc<Vec<u8>>,
}

/// One delegated directory.
struct Dir {
    /// Its attributes as delegated, kept current with what was answered here.
    attr: Attr,
    /// The `DELEGATION` lock: a create is answered only while it is held.
    lock: u64,
    /// The incarnation of this client at its MDT when it was delegated (an eviction ends
    /// it, and the FIDs given under it).
    incarnation: u64,
    /// Going (given back or lost): nothing more is answered in it.
    closing: bool,
    /// How many bytes from byte 0 a file answered here may carry with its create (the
    /// MDT's word for as long as the delegation is held: `MdsReply::Delegated`).
    data_bytes_max: u32,
    /// Whether subdirectories made here may be answered here (the MDT's word, as
    /// `data_bytes_max`).
    mkdirs: bool,
    /// Items of a batch on its way (the requests that need them wait for it).
    in_flight: usize,
    /// Since when its batches fail (the MDT out of reach).
    failing_since: Option<Instant>,
    /// Files answered here whose entry and attributes the kernel was let keep, by name:
    /// while the delegation is held no other client can reach them (only through this
    /// directory, which calls it back); forgotten by the kernel when it goes.
    covered: HashMap<Vec<u8>, Covered>,
    /// Changes answered and not sent yet, in order, and the credentials they were checked
    /// with.
    items: Vec<Item>,
    cred: Option<Cred>,
    /// Files answered and not yet known to the MDT (sent or not), with their attributes.
    answered: HashMap<Fid, Attr>,
    /// Regular files answered here since it was delegated, and how many of their handles
    /// were opened at the MDT since ([`Dir::writes_follow`]).
    answered_files: u32,
    opened_files: u32,
    /// Files whose unlink was answered and is not known made yet (sent or not).
    unlinking: HashSet<Fid>,
    /// Files made here whose attributes and whole contents are kept (kept.rs).
    kept: HashMap<Fid, Kept>,
    /// Reads answered here from what is kept, to be recorded at the MDT (kept.rs).
    accessed: Vec<BatchAccess>,
    /// Files answered and not made whose name this mount is removing or removed: no open
    /// of them is answered here any more (kept.rs; at most one per file answered, each
    /// dropped as its create is made).
    removing: HashSet<Fid>,
    /// When the oldest item not sent was answered.
    since: Option<Instant>,
    /// Held while a batch of this directory is on its way: a request that needs it waits.
    sending: Arc<Mutex<()>>,
}

/// The delegated directories and this client's FID grants.
#[derive(Default)]
pub struct Delegated {
    dirs: Mutex<HashMap<Fid, Dir>>,
    /// Directories not to ask for again before the instant given.
    refused: Mutex<HashMap<Fid, Instant>>,
    /// Per MDT: the FID range being used (sequence, next object id, end) and the
    /// incarnation of this client it was granted to (an eviction retires grants).
    fids: Mutex<HashMap<u32, (u64, u64, u64, u64)>>,
    /// Items answered and not known made (not sent, or on their way), all directories.
    pending: AtomicUsize,
    /// Bytes written into files answered here that their creates carry, not known made
    /// yet, all directories (at most [`DELEGATED_DATA_BYTES_MAX`]).
    data_bytes: AtomicUsize,
    /// Bytes of files made under delegations kept (at most [`DELEGATED_KEPT_BYTES_MAX`]).
    kept_bytes: AtomicUsize,
    /// Directories held (`dirs.len()`), read without the lock by every request's hook.
    held: AtomicUsize,
    /// Directories this mount made under a delegation, with their parents and how many
    /// restarts of their MDT this client had recovered from then: the first create in one
    /// has it delegated (it is empty then, if the MDT has not restarted since).
    fresh: Mutex<HashMap<Fid, (Fid, u64)>>,
    /// Counters.
    pub stats: DelegatedStats,
}

/// What the delegated path did.
#[derive(Default)]
pub struct DelegatedStats {
    /// Creates answered here.
    pub answered: AtomicU64,
    /// Unlinks answered here.
    pub unlinked: AtomicU64,
    /// Writes kept to go with their file's create (data on the MDT).
    pub written: AtomicU64,
    /// Opens of files made here answered here (kept.rs).
    pub opened: AtomicU64,
    /// Reads answered from what is kept of files made here (kept.rs).
    pub read: AtomicU64,
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

    /// What the delegated path did, as `llite.FS.async_dirops` shows it: creates answered
    /// here, batches sent, creates lost, creates not known made now, directories held.
    pub fn async_dirops_text(&self) -> String {
        let d = &self.delegated;
        format!(
            "answered {}\nunlinked {}\nwritten {}\nopened {}\nread {}\nbatches {}\nlost {}\npending {}\ndirectories {}",
            d.stats.answered.load(Ordering::Relaxed),
            d.stats.unlinked.load(Ordering::Relaxed),
            d.stats.written.load(Ordering::Relaxed),
            d.stats.opened.load(Ordering::Relaxed),
            d.stats.read.load(Ordering::Relaxed),
            d.stats.batches.load(Ordering::Relaxed),
            d.stats.lost.load(Ordering::Relaxed),
            d.pending.load(Ordering::Relaxed),
            d.held.load(Ordering::Relaxed),
        )
    }

    /// A handle on `attr`'s file, made by [`Client::create_delegated`] in `parent` (None:
    /// a later open of a file kept here), for `access`: not open at the MDT until
    /// [`Client::undefer`].
    pub fn open_deferred(
        &self,
        attr: &Attr,
        parent: Option<Fid>,
        access: u8,
    ) -> Result<crate::OpenFile> {
        // A slot of its own: the file's shared slot is made by the open at the MDT, with
        // the layout that open gives (layouts.rs keeps the first handle's).
        let slot = Arc::new(crate::layouts::LayoutSlot::new(attr.fid, None, false));
        let mut f = crate::OpenFile::with_slot(slot)
            .owned_by(attr)
            .with_access(access);
        f.incarnation = self.mdc(attr.fid.mdt_index())?.incarnation();
        f.deferred = true;
        f.answered_in = parent;
        Ok(f)
    }

    /// The handle `file` stands for, opened at the MDT (its creation sent first): what a
    /// deferred handle becomes before it is used for anything but its close.
    pub fn undefer(&self, file: &crate::OpenFile) -> Result<crate::OpenFile> {
        // As its creator, who was answered it (whoever uses the handle first): the owner,
        // whose class of the mode allowed the access when it was made.
        // Counted where it was answered: a directory whose new files are opened again at
        // the MDT (written through OSTs, mostly) stops answering creates (`Dir::writes_follow`).
        if let Some(dir) = file.answered_in {
            if let Some(d) = self.delegated.dirs.lock().get_mut(&dir) {
                d.opened_files = d.opened_files.saturating_add(1);
            }
        }
        let creator = Cred::new(file.owner.uid, file.owner.gid, Vec::new());
        let opened = nacre_types::cred::with(creator, || self.open(file.fid, file.access));
        // The open may be what told this client it was evicted, its create (answered under
        // the delegation the eviction ended) dropped unsent: the handle is void, as any
        // handle of the client before its eviction (`EIO`), not a file someone removed.
        let (_, mut f) = opened.or_else(|e| {
            self.check_handle(file)?;
            Err(e)
        })?;
        if file.append {
            f.set_append();
        }
        if file.kernel_kills_privs {
            f.set_kernel_kills_privs();
        }
        Ok(f)
    }

    /// Creates regular file `name` in `parent` on the delegated path if it applies: its
    /// attributes and whether the kernel may keep them and its entry (until the delegation
    /// goes), or `None` (create it with the MDT). See the module documentation.
    pub fn create_delegated(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Option<(Attr, bool)>> {
        self.answer_delegated(parent, name, FileKind::Regular, perm, uid, gid)
    }

    /// Makes directory `name` in `parent` on the delegated path if it applies (the MDT
    /// said, with the delegation, that its own mkdir would make a plain directory there):
    /// its attributes and whether the kernel may keep them and its entry until the
    /// delegation goes (another client's change in it calls the delegation back first: the
    /// MDT knows it by the FID this client gave it), or `None` (make it with the MDT). A
    /// request naming it sends it first.
    pub fn mkdir_delegated(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Option<(Attr, bool)>> {
        self.answer_delegated(parent, name, FileKind::Directory, perm, uid, gid)
    }

    /// [`Client::create_delegated`] of a file or directory (`kind`).
    fn answer_delegated(
        &self,
        parent: Fid,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Option<(Attr, bool)>> {
        let dir_kind = kind == FileKind::Directory;
        if !self.async_dirops()
            || name.is_empty()
            || name.len() > nacre_types::limits::NAME_BYTES_MAX
            || name.contains(&b'/')
            || name == b"."
            || name == b".."
            || self.delegated.pending.load(Ordering::Acquire) >= DELEGATED_PENDING_MAX
        {
            return Ok(None);
        }
        // Known absent: the directory is known completely (one this mount made, or one it
        // made under a delegation and has now delegated here, empty).
        let absent = self.complete.absent(parent, name)
            || (self.delegate_fresh(parent)? && self.complete.absent(parent, name));
        if !absent {
            return Ok(None);
        }
        let Some((dir, lock, mkdirs)) = self.delegation_of(parent, false)? else {
            return Ok(None);
        };
        if dir_kind && (!mkdirs || dir.nlink.saturating_add(1) >= DIR_NLINK_MAX) {
            return Ok(None);
        }
        // Before a FID is taken for it (checked again below, under the delegation).
        let writes_follow = |dirs: &HashMap<Fid, Dir>| {
            !dir_kind && dirs.get(&parent).is_some_and(Dir::writes_follow)
        };
        if writes_follow(&self.delegated.dirs.lock()) {
            return Ok(None);
        }
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
        let mdc = self.mdc(parent.mdt_index())?;
        let fid = self.delegated_fid(parent.mdt_index())?;
        let now = TimeSpec::now();
        // As the MDT makes them (`ops::create::inode_with_fid`): a set-group-id directory
        // gives its group, and to a subdirectory its set-group-id bit; a directory that
        // passes its project on gives it, and to a subdirectory the inheritance too.
        let sgid = dir.perm & SGID != 0;
        let attr = Attr {
            fid,
            kind,
            perm: (perm & 0o7777) | if sgid && dir_kind { SGID } else { 0 },
            uid,
            gid: if sgid { dir.gid } else { gid },
            nlink: if dir_kind { 2 } else { 1 },
            size: if dir_kind { 4096 } else { 0 },
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
            project: if dir.proj_inherit { dir.project } else { 0 },
            proj_inherit: dir.proj_inherit && dir_kind,
        };
        let item = BatchCreate {
            fid,
            kind,
            name: name.to_vec(),
            perm: attr.perm,
            uid,
            gid,
            time: now,
            data: Vec::new(),
        };
        let full = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&parent) else {
                // Gone meanwhile: the MDT creates it.
                return Ok(None);
            };
            // Checked again under the delegation, now that no one else can add a name or
            // take it: a listing found stale since (another client's create called back
            // the lock it stood on) is forgotten, and the MDT answers. (The FID taken is
            // only skipped.)
            if d.closing
                || d.lock != lock
                || !mdc.locks.holds(lock)
                || !self.complete.absent(parent, name)
                || (dir_kind && d.attr.nlink.saturating_add(1) >= DIR_NLINK_MAX)
                || (!dir_kind && d.writes_follow())
            {
                return Ok(None);
            }
            if d.cred.as_ref().is_some_and(|c| *c != cred)
                && (!d.items.is_empty() || d.in_flight > 0)
            {
                drop(dirs);
                self.flush_delegated(parent)?;
                return self.answer_delegated(parent, name, kind, perm, uid, gid);
            }
            d.cred = Some(cred);
            let covered = d.covered.len() < DELEGATED_COVERED_MAX;
            if covered {
                // A directory's removal is never answered here (rmdir goes to the MDT).
                let owner = (!dir_kind).then_some(uid);
                let locked = false;
                d.covered
                    .insert(name.to_vec(), Covered { fid, owner, locked });
            }
            d.items.push(Item::Create(item));
            if !dir_kind {
                d.answered_files = d.answered_files.saturating_add(1);
            }
            d.answered.insert(fid, attr.clone());
            d.since.get_or_insert_with(Instant::now);
            d.attr.mtime = now;
            d.attr.ctime = now;
            if dir_kind {
                d.attr.nlink += 1;
            }
            // What is kept of its attributes (the kernel asks after every create) gets the
            // change as the MDT will make it; under the delegation's lock, as the item's
            // queueing: a batch taken before this one is not kept as the directory's
            // state after it (send.rs).
            mdc.dir_attrs.changed_here(parent, |a| {
                (a.mtime, a.ctime) = (now, now);
                a.nlink += u32::from(dir_kind);
            });
            // Counted while the item is in the queue's lock: a flush subtracts only what
            // was counted.
            if self.delegated.pending.fetch_add(1, Ordering::AcqRel) == 0 {
                self.wake_delegated_sender();
            }
            (d.items.len() >= CREATE_BATCH_ITEMS_MAX, covered)
        };
        let (full, covered) = full;
        self.delegated
            .stats
            .answered
            .fetch_add(1, Ordering::Relaxed);
        if dir_kind {
            let mut fresh = self.delegated.fresh.lock();
            if fresh.len() >= FRESH_MAX {
                let any = fresh.keys().next().copied();
                any.map(|k| fresh.remove(&k));
            }
            let recoveries = mdc.replay_stats.recoveries.load(Ordering::Acquire);
            fresh.insert(fid, (parent, recoveries));
        }
        self.complete.added(parent, name);
        if full {
            // Answered whatever becomes of the send: what failed is kept and sent again.
            if let Err(e) = self.flush_delegated(parent) {
                tracing::warn!("sending the creates of {parent}: {e}");
            }
        }
        Ok(Some((attr, covered)))
    }

    /// True if `dir` is a directory this mount made under a delegation and has now
    /// delegated here, empty (so known completely): asked once, at the first create in it,
    /// after its parent's batch made it at the MDT.
    fn delegate_fresh(&self, dir: Fid) -> Result<bool> {
        let Some((parent, recoveries)) = self.delegated.fresh.lock().remove(&dir) else {
            return Ok(false);
        };
        let restarted = self
            .mdc(dir.mdt_index())?
            .replay_stats
            .recoveries
            .load(Ordering::Acquire);
        if restarted != recoveries {
            return Ok(false);
        }
        self.flush_delegated(parent)?;
        Ok(self.delegation_of(dir, true)?.is_some())
    }

    /// True if this client answers lookups in `dir` itself: it holds the directory's
    /// delegation, or knows it completely (crate::complete). A statahead there would
    /// only send what it answered (a readdir of a delegated directory sends its batch).
    pub fn answers_lookups_in(&self, dir: Fid) -> bool {
        self.delegated.dirs.lock().contains_key(&dir) || self.complete.knows(dir)
    }

    /// The attributes of `dir` as delegated to this client and the lock it holds it by,
    /// asking the MDT for the delegation if it was not refused or given back lately.
    fn delegation_of(&self, dir: Fid, fresh: bool) -> Result<Option<(Attr, u64, bool)>> {
        if let Some(d) = self.delegated.dirs.lock().get(&dir) {
            return Ok((!d.closing).then(|| (d.attr.clone(), d.lock, d.mkdirs)));
        }
        if self
            .delegated
            .refused
            .lock()
            .get(&dir)
            .is_some_and(|until| Instant::now() < *until)
        {
            return Ok(None);
        }
        use nacre_ldlm::msg::{DELEGATION, UPDATE};
        let mdc = self.mdc(dir.mdt_index())?;
        let asked = mdc.call_with(MdsOp::DelegateDir { fid: dir }, UPDATE | DELEGATION);
        // After the call, which may have found this client evicted and come back as a new
        // one (an eviction after it shows as the lock not held, below).
        let incarnation = mdc.incarnation();
        let (attr, data_bytes_max, mkdirs, empty, lock) = match asked {
            Ok((
                nacre_wire::mds::MdsReply::Delegated {
                    attr,
                    data_bytes_max,
                    mkdirs,
                    empty,
                },
                Some(l),
            )) if l.bits & DELEGATION != 0 && l.fid == dir => {
                (attr, data_bytes_max, mkdirs, empty, l.handle)
            }
            _ => {
                self.ask_later(dir);
                return Ok(None);
            }
        };
        self.start_delegated_sender();
        let d = Dir {
            attr: attr.clone(),
            lock,
            incarnation,
            closing: false,
            data_bytes_max,
            mkdirs,
            in_flight: 0,
            failing_since: None,
            covered: HashMap::new(),
            items: Vec::new(),
            cred: None,
            answered: HashMap::new(),
            answered_files: 0,
            opened_files: 0,
            unlinking: HashSet::new(),
            kept: HashMap::new(),
            accessed: Vec::new(),
            removing: HashSet::new(),
            since: None,
            sending: Arc::new(Mutex::new(())),
        };
        let mut dirs = self.delegated.dirs.lock();
        // Inserted, then the lock looked at: a callback that came between the grant and
        // here (and found no directory to close) leaves the lock not held, and nothing is
        // answered on it.
        if !mdc.locks.holds(lock) || dirs.get(&dir).is_some_and(|d| d.closing) {
            return Ok(None);
        }
        let d = dirs.entry(dir).or_insert(d);
        // A directory made here, empty under the lock: known completely while it is held
        // (the lock sink forgets it when the lock goes, after it takes this table's lock:
        // not before this). Only one made here with no restart of its MDT since: after a
        // restart another mount may hold creates it answered under a delegation the
        // restart ended, not sent yet, in a directory the MDT sees empty.
        if fresh && empty && d.lock == lock {
            self.complete.made(dir);
        }
        let got = (d.attr.clone(), d.lock, d.mkdirs);
        self.delegated.held.store(dirs.len(), Ordering::Release);
        Ok(Some(got))
    }

    /// Does not ask for the delegation of `dir` for [`ASK_AGAIN_MS`].
    fn ask_later(&self, dir: Fid) {
        let now = Instant::now();
        let mut r = self.delegated.refused.lock();
        if r.len() >= REFUSED_MAX {
            r.retain(|_, until| *until > now);
            if r.len() >= REFUSED_MAX {
                r.clear();
            }
        }
        r.insert(dir, now + Duration::from_millis(ASK_AGAIN_MS));
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

    /// Before request `op` goes to an MDT: sends the pending creates it depends on (of the
    /// directory it names, or that made a file it names; of every directory before a
    /// removal or rename of a directory, which names only its parent); gives back the
    /// delegation of a directory whose attributes it changes (they decide who may create
    /// there, and the holder's own change calls nothing back).
    pub(crate) fn before_request(&self, op: &MdsOp) {
        if matches!(
            op,
            MdsOp::CreateBatch { .. }
                | MdsOp::UnlinkBatch { .. }
                | MdsOp::AccessBatch { .. }
                // Only of a handle opened at the MDT (its create sent), and sent by a
                // callback of a batch's own lock (a kept open of a file it removes): it
                // must not wait for that batch.
                | MdsOp::Close { .. }
                | MdsOp::GrantFids { .. }
                | MdsOp::DelegateDir { .. }
                | MdsOp::LockPoll { .. }
                | MdsOp::LockCancel { .. }
                | MdsOp::Ping
        ) || self.delegated.held.load(Ordering::Acquire) == 0
        {
            return;
        }
        // A commit of everything, or a directory removed or moved by the name it has in
        // its parent: everything answered goes first.
        if matches!(
            op,
            MdsOp::Sync | MdsOp::Rmdir { .. } | MdsOp::Rename { .. } | MdsOp::Disconnect
        ) {
            if let Err(e) = self.flush_delegated_all() {
                tracing::warn!("sending delegated creates before a request: {e}");
            }
            if !matches!(op, MdsOp::Rename { .. }) {
                return;
            }
        }
        // Given back: a change of a delegated directory's attributes (they decide who may
        // create there); a rename out of it or a link of a file answered in it (the file
        // becomes reachable by a path that calls nothing back, while the kernel here keeps
        // its attributes).
        let give_back: Vec<Fid> = {
            let dirs = self.delegated.dirs.lock();
            match op {
                // The file system's default layout: every directory's new files may get it
                // (each delegation said how many bytes their creates may carry).
                MdsOp::SetLayout { fid, .. } if *fid == Fid::ROOT => dirs.keys().copied().collect(),
                MdsOp::SetAttr { fid, .. }
                | MdsOp::SetLayout { fid, .. }
                | MdsOp::SetXattr { fid, .. }
                | MdsOp::RemoveXattr { fid, .. }
                | MdsOp::SetDirDefault { fid, .. } => dirs
                    .get_key_value(fid)
                    .map(|(f, _)| *f)
                    .into_iter()
                    .collect(),
                MdsOp::Rename { src_parent, .. } => dirs
                    .get_key_value(src_parent)
                    .map(|(f, _)| *f)
                    .into_iter()
                    .collect(),
                MdsOp::Link { fid, .. } => dirs
                    .iter()
                    .find(|(_, d)| d.covered.values().any(|c| c.fid == *fid))
                    .map(|(dir, _)| *dir)
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            }
        };
        self.stale_covered(op);
        for dir in give_back {
            let lock = self.delegated.dirs.lock().get(&dir).map(|d| d.lock);
            if let (Some(lock), Ok(mdc)) = (lock, self.mdc(dir.mdt_index())) {
                // Through the lock sink, as a callback: what is pending is sent, the kernel
                // forgets what it kept under the delegation, then the lock goes back.
                mdc.give_back(lock);
            }
            // Also when the lock had gone already (its directory still closing).
            self.delegation_gone(dir, false);
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
                    named.iter().any(|f| {
                        (*f == **dir && (!d.items.is_empty() || d.in_flight > 0))
                            || d.answered.contains_key(f)
                            || d.unlinking.contains(f)
                    })
                })
                .map(|(dir, _)| *dir)
                .collect()
        };
        for dir in due {
            if let Err(e) = self.flush_delegated(dir) {
                tracing::warn!("sending the creates of {dir} before a request: {e}");
            }
        }
        // After the sends: a create they made is kept as it is made (kept.rs), and this
        // request may change what was made.
        self.forget_kept(op);
    }
}
