//! Has the kernel forget what a revoked metadata lock covered, before the lock is
//! cancelled: attributes through `FUSE_NOTIFY_INVAL_INODE` (attributes only, which takes no
//! inode lock), entries through `FUSE_NOTIFY_INVAL_ENTRY` on a thread of their own (and
//! those that wait for this mount's own changes on another).
//!
//! An entry invalidation takes the parent directory's inode lock. That lock may be held by
//! this very mount's own change in the directory, waiting at the MDT for the change that
//! revoked our lock, which waits for our cancel: so the callback thread waits at most
//! [`ENTRY_INVAL_WAIT_MS`] for the entry invalidations, then cancels anyway. The kernel
//! may then use the stale entries until this mount's own change in that directory returns
//! (documented in docs/locking.md). Entries in a directory this mount is changing itself
//! right now (a rename, create, unlink... under way: see [`Invalidator::changing`]) are not
//! waited for at all: they are invalidated when that change is done, and the lock is
//! cancelled at once — a cross-MDT change calls back its own mount's locks on the other
//! MDTs (the mount is another client there), and each such callback would otherwise wait
//! out the bound. The kernel protects attributes itself against a reply
//! that crosses an invalidation (its attribute version), and an entry reply in flight holds
//! the directory's lock shared, so an entry invalidation waits for it and removes it.

use crossbeam_channel::{bounded, Receiver, Sender};
use fuser::{INodeNo, Notifier};
use nacre_ldlm::client::Revoked;
use nacre_ldlm::msg::{DOM, LAYOUT, UPDATE};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Longest the callback thread waits for entry invalidations before it cancels the lock.
pub const ENTRY_INVAL_WAIT_MS: u64 = 250;
/// Longest the data lock revoker waits for the kernel to drop a file's cached data before
/// it cancels the lock (the pages this mount is writing stay locked by the kernel until
/// the write is done, and that write may wait at the OST for this very cancel).
pub const DATA_INVAL_WAIT_MS: u64 = 250;
/// Batches of file data invalidations queued at most.
const DATA_BATCHES_QUEUED_MAX: usize = 1024;
/// Batches of entry invalidations queued at most (past it, the callback thread waits).
const ENTRY_BATCHES_QUEUED_MAX: usize = 64;
/// Entry invalidations kept for one directory until this mount's change in it is done
/// (past it, they are sent and waited for as any other).
const DEFERRED_PER_DIR_MAX: usize = 4_096;
/// Directories whose listing the kernel may cache at once (past it, listings are not
/// cached).
pub const CACHED_DIRS_MAX: usize = 65_536;

type Batch = (Vec<(u64, OsString)>, Sender<()>);
/// File data to drop — (inode, offset, length; 0, 0: all of it) — and who waits for it.
type DataBatch = (Vec<(u64, i64, i64)>, Sender<()>);

/// Counters of invalidations sent to the kernel.
#[derive(Default)]
pub struct InvalStats {
    /// Inodes whose attributes were invalidated.
    pub inodes: AtomicU64,
    /// Entries invalidated.
    pub entries: AtomicU64,
    /// Callback threads that stopped waiting for an entry invalidation.
    pub entry_waits_cut: AtomicU64,
    /// Entry invalidations kept until this mount's own change in their directory was done.
    pub entries_deferred: AtomicU64,
    /// Directory listings the kernel cached that were invalidated.
    pub listings: AtomicU64,
    /// Files whose cached data was dropped (data lock callbacks).
    pub data: AtomicU64,
    /// Data lock revocations that stopped waiting for the kernel to drop the data.
    pub data_waits_cut: AtomicU64,
}

/// The lock sink of a FUSE mount.
pub struct Invalidator {
    notifier: Notifier,
    entries: Sender<Batch>,
    /// Entries invalidated once the kernel lets go of their directory (after this mount's
    /// own change in it), on a thread of their own: one of them may wait for this mount's
    /// next change in that directory, which must not hold up a callback's invalidations.
    entries_later: Sender<Batch>,
    data: Sender<DataBatch>,
    /// Directories (inode numbers) whose listing the kernel may cache: their `UPDATE`
    /// lock's callback drops the listing too.
    dirs: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Directories (inode numbers) this mount is changing now, with the entry
    /// invalidations kept for the end of those changes.
    busy: parking_lot::Mutex<std::collections::HashMap<u64, Busy>>,
    /// Counters.
    pub stats: Arc<InvalStats>,
}

/// A directory this mount is changing: how many of its changes are under way, and the
/// entries to invalidate once none is.
#[derive(Default)]
struct Busy {
    changes: u32,
    deferred: Vec<(u64, OsString)>,
}

/// This mount's change of one or two directories, under way while it lives (from
/// [`Invalidator::changing`]); dropped after the change's reply went to the kernel.
pub struct Changing {
    inval: Arc<Invalidator>,
    dirs: Vec<u64>,
}

impl Drop for Changing {
    fn drop(&mut self) {
        let mut later = Vec::new();
        {
            let mut busy = self.inval.busy.lock();
            for dir in &self.dirs {
                let Some(b) = busy.get_mut(dir) else {
                    continue;
                };
                b.changes -= 1;
                if b.changes == 0 {
                    let b = busy.remove(dir).expect("present");
                    later.extend(b.deferred);
                }
            }
        }
        if !later.is_empty() {
            let (done, _) = bounded(1);
            let _ = self.inval.entries_later.send((later, done));
        }
    }
}

impl Invalidator {
    /// An invalidator sending through `notifier`, with its entry thread started.
    pub fn start(notifier: Notifier) -> std::io::Result<Arc<Invalidator>> {
        let (tx, rx) = bounded::<Batch>(ENTRY_BATCHES_QUEUED_MAX);
        let stats = Arc::new(InvalStats::default());
        let thread_notifier = notifier.clone();
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("fuse-inval".into())
            .spawn(move || entry_thread(thread_notifier, rx, thread_stats))?;
        let (later_tx, later_rx) = bounded::<Batch>(ENTRY_BATCHES_QUEUED_MAX);
        let (later_notifier, later_stats) = (notifier.clone(), stats.clone());
        std::thread::Builder::new()
            .name("fuse-inval-later".into())
            .spawn(move || entry_thread(later_notifier, later_rx, later_stats))?;
        let (data_tx, data_rx) = bounded::<DataBatch>(DATA_BATCHES_QUEUED_MAX);
        let (data_notifier, data_stats) = (notifier.clone(), stats.clone());
        std::thread::Builder::new()
            .name("fuse-inval-data".into())
            .spawn(move || {
                for (drops, done) in data_rx {
                    for (ino, off, len) in drops {
                        // Offset 0, length 0: every cached page (and the attributes).
                        let _ = data_notifier.inval_inode(INodeNo(ino), off, len);
                        data_stats.data.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = done.send(());
                }
            })?;
        Ok(Arc::new(Invalidator {
            notifier,
            entries: tx,
            entries_later: later_tx,
            data: data_tx,
            dirs: Default::default(),
            busy: Default::default(),
            stats,
        }))
    }

    /// Has the kernel forget what `revoked` covered (see the module's notes on waiting).
    /// A file's pages (bytes on the MDT: a `DOM` lock, or a file answered under a
    /// delegation) are dropped on the data thread, waited for at most
    /// [`DATA_INVAL_WAIT_MS`]: the kernel may hold one of them locked for a write this
    /// mount is serving, perhaps on this very thread (a write that finds its delegation
    /// lost by an MDT's restart), and would never let go of it.
    pub fn forget(&self, revoked: &[Revoked]) {
        let mut pages = Vec::new();
        for r in revoked {
            if r.lock.bits & (UPDATE | LAYOUT | DOM) != 0 {
                let ino = crate::ino_of(r.lock.fid);
                // Offset -1: attributes only; 0: a directory's cached listing (its pages,
                // which the kernel locks only while it fills them) too. ENOENT (the
                // kernel forgot the inode) is fine.
                let listing = r.lock.bits & UPDATE != 0 && self.dirs.lock().remove(&ino);
                let offset = if listing { 0 } else { -1 };
                let _ = self.notifier.inval_inode(INodeNo(ino), offset, 0);
                self.stats.inodes.fetch_add(1, Ordering::Relaxed);
                if listing {
                    self.stats.listings.fetch_add(1, Ordering::Relaxed);
                } else if r.lock.bits & DOM != 0 {
                    pages.push((ino, 0, 0));
                }
            }
        }
        self.drop_pages(pages);
        let entries = self.defer_busy(revoked);
        if entries.is_empty() {
            return;
        }
        let (done_tx, done_rx) = bounded(1);
        if self.entries.send((entries, done_tx)).is_err() {
            return;
        }
        if done_rx
            .recv_timeout(Duration::from_millis(ENTRY_INVAL_WAIT_MS))
            .is_err()
        {
            self.stats.entry_waits_cut.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Invalidator {
    /// Notes that this mount is changing directories `dirs` (inode numbers; the kernel
    /// holds their inode lock until the change's reply) until the guard is dropped.
    pub fn changing(self: &Arc<Self>, dirs: &[u64]) -> Changing {
        let mut dirs = dirs.to_vec();
        dirs.sort_unstable();
        dirs.dedup();
        let mut busy = self.busy.lock();
        for dir in &dirs {
            busy.entry(*dir).or_default().changes += 1;
        }
        Changing {
            inval: self.clone(),
            dirs,
        }
    }

    /// The entries `revoked` covered, but for those in directories this mount is changing
    /// now, which are kept to be invalidated when the change is done. A directory named in
    /// one of those counts too (a directory moved to another parent is locked by the
    /// kernel during the move), for the entries its own lock covers in it.
    fn defer_busy(&self, revoked: &[Revoked]) -> Vec<(u64, OsString)> {
        let mut entries = Vec::new();
        let mut busy = self.busy.lock();
        for r in revoked {
            let named_in_busy = r
                .names
                .iter()
                .map(|(p, _)| crate::ino_of(*p))
                .find(|p| busy.contains_key(p));
            for (parent, name) in &r.names {
                let (parent, name) = (crate::ino_of(*parent), OsString::from_vec(name.clone()));
                let key = match busy.contains_key(&parent) {
                    true => Some(parent),
                    false if parent == crate::ino_of(r.lock.fid) => named_in_busy,
                    false => None,
                };
                match key.and_then(|k| busy.get_mut(&k)) {
                    Some(b) if b.deferred.len() < DEFERRED_PER_DIR_MAX => {
                        b.deferred.push((parent, name));
                        self.stats.entries_deferred.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => entries.push((parent, name)),
                }
            }
        }
        entries
    }

    /// Has the kernel drop the cached data of `files` (a data lock goes): waits at most
    /// [`DATA_INVAL_WAIT_MS`] (see there), then returns; the drop still happens.
    pub fn forget_data(&self, drops: &[nacre_client::datalocks::FileDrop]) {
        if drops.is_empty() {
            return;
        }
        let clamp = |x: u64| x.min(i64::MAX as u64) as i64;
        let inos = drops
            .iter()
            .map(|d| match d.range {
                Some((off, len)) => (crate::ino_of(d.fid), clamp(off), clamp(len.max(1))),
                None => (crate::ino_of(d.fid), 0, 0),
            })
            .collect();
        self.drop_pages(inos);
    }

    /// Has the data thread drop `pages` (inode, offset, length; 0, 0: all of a file's)
    /// and waits at most [`DATA_INVAL_WAIT_MS`] for it (the data thread may be waiting for
    /// a page this caller's own request holds); the drop still happens. A queue still full
    /// then is waited for without a bound: pages left cached after their lock went would
    /// be read stale (the data thread is held up only while a write is served, and
    /// [`DATA_BATCHES_QUEUED_MAX`] callbacks would have to come meanwhile).
    fn drop_pages(&self, pages: Vec<(u64, i64, i64)>) {
        if pages.is_empty() {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(DATA_INVAL_WAIT_MS);
        let (done_tx, done_rx) = bounded(1);
        let queued = match self.data.send_deadline((pages, done_tx), deadline) {
            Ok(()) => true,
            Err(crossbeam_channel::SendTimeoutError::Timeout(batch)) => {
                tracing::warn!("the queue of page drops stays full: waiting for room");
                self.data.send(batch).is_ok()
            }
            Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => false,
        };
        if !queued || done_rx.recv_deadline(deadline).is_err() {
            self.stats.data_waits_cut.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Has the kernel forget entry `parent`/`name` and what it cached of directory `parent`
    /// (attributes, listing): a change made outside the kernel (through the node API),
    /// after which the caller may look through the mount at once. Waits at most
    /// [`DATA_INVAL_WAIT_MS`] for each, then returns (the invalidation still happens).
    pub fn entry_changed_outside(&self, parent: u64, name: OsString) {
        let (done_tx, done_rx) = bounded(1);
        if self.entries.send((vec![(parent, name)], done_tx)).is_ok() {
            let _ = done_rx.recv_timeout(Duration::from_millis(DATA_INVAL_WAIT_MS));
        }
        let (done_tx, done_rx) = bounded(1);
        if self.data.send((vec![(parent, 0, 0)], done_tx)).is_ok() {
            let _ = done_rx.recv_timeout(Duration::from_millis(DATA_INVAL_WAIT_MS));
        }
    }

    /// Has the kernel forget file `ino`'s attributes (they changed without a lock going:
    /// the close of a handle that wrote moved its times at the MDT). Takes no inode lock.
    pub fn attributes(&self, ino: u64) {
        let _ = self.notifier.inval_inode(INodeNo(ino), -1, 0);
        self.stats.inodes.fetch_add(1, Ordering::Relaxed);
    }

    /// Has the kernel drop its cached pages of file `ino` in `offset..offset + len` once
    /// it can (pages read or written without a lock covering them: no callback would drop
    /// them); does not wait (the kernel holds those pages locked until the request that
    /// asks is answered).
    pub fn data_later(&self, ino: u64, offset: u64, len: u64) {
        let clamp = |x: u64| x.min(i64::MAX as u64) as i64;
        let (done, _) = bounded(1);
        let _ = self
            .data
            .try_send((vec![(ino, clamp(offset), clamp(len.max(1)))], done));
    }

    /// Notes that the kernel may cache directory `ino`'s listing (its `UPDATE` lock is held):
    /// false if too many are noted already (then it must not).
    pub fn cache_listing(&self, ino: u64) -> bool {
        let mut dirs = self.dirs.lock();
        dirs.contains(&ino) || (dirs.len() < CACHED_DIRS_MAX && dirs.insert(ino))
    }

    /// Has the kernel forget entry `parent`/`name` once it can (it may be applying a
    /// change to that directory right now); does not wait.
    pub fn entry_later(&self, parent: u64, name: OsString) {
        let (done, _) = bounded(1);
        let _ = self.entries_later.send((vec![(parent, name)], done));
    }
}

fn entry_thread(notifier: Notifier, rx: Receiver<Batch>, stats: Arc<InvalStats>) {
    for (entries, done) in rx {
        for (parent, name) in entries {
            let _ = notifier.inval_entry(INodeNo(parent), &name);
            stats.entries.fetch_add(1, Ordering::Relaxed);
        }
        let _ = done.send(());
    }
}
