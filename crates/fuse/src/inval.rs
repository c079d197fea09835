//! Has the kernel forget what a revoked metadata lock covered, before the lock is
//! cancelled: attributes through `FUSE_NOTIFY_INVAL_INODE` (attributes only, which takes no
//! inode lock), entries through `FUSE_NOTIFY_INVAL_ENTRY` on a thread of their own.
//!
//! An entry invalidation takes the parent directory's inode lock. That lock may be held by
//! this very mount's own change in the directory, waiting at the MDT for the change that
//! revoked our lock, which waits for our cancel: so the callback thread waits at most
//! [`ENTRY_INVAL_WAIT_MS`] for the entry invalidations, then cancels anyway. The kernel
//! may then use the stale entries until this mount's own change in that directory returns
//! (documented in docs/locking.md). The kernel protects attributes itself against a reply
//! that crosses an invalidation (its attribute version), and an entry reply in flight holds
//! the directory's lock shared, so an entry invalidation waits for it and removes it.

use crossbeam_channel::{bounded, Receiver, Sender};
use fuser::{INodeNo, Notifier};
use nacre_ldlm::client::Revoked;
use nacre_ldlm::msg::{LAYOUT, UPDATE};
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
const DATA_BATCHES_QUEUED_MAX: usize = 64;
/// Batches of entry invalidations queued at most (past it, the callback thread waits).
const ENTRY_BATCHES_QUEUED_MAX: usize = 64;
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
    data: Sender<DataBatch>,
    /// Directories (inode numbers) whose listing the kernel may cache: their `UPDATE`
    /// lock's callback drops the listing too.
    dirs: parking_lot::Mutex<std::collections::HashSet<u64>>,
    /// Counters.
    pub stats: Arc<InvalStats>,
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
            data: data_tx,
            dirs: Default::default(),
            stats,
        }))
    }

    /// Has the kernel forget what `revoked` covered (see the module's notes on waiting).
    pub fn forget(&self, revoked: &[Revoked]) {
        let mut entries = Vec::new();
        for r in revoked {
            if r.lock.bits & (UPDATE | LAYOUT) != 0 {
                let ino = r.lock.fid.to_ino();
                // Offset -1: attributes only; 0: a directory's cached listing (its pages)
                // too. ENOENT (the kernel forgot the inode) is fine.
                let listing = r.lock.bits & UPDATE != 0 && self.dirs.lock().remove(&ino);
                let offset = if listing { 0 } else { -1 };
                let _ = self.notifier.inval_inode(INodeNo(ino), offset, 0);
                self.stats.inodes.fetch_add(1, Ordering::Relaxed);
                if listing {
                    self.stats.listings.fetch_add(1, Ordering::Relaxed);
                }
            }
            for (parent, name) in &r.names {
                entries.push((parent.to_ino(), OsString::from_vec(name.clone())));
            }
        }
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
    /// Has the kernel drop the cached data of `files` (a data lock goes): waits at most
    /// [`DATA_INVAL_WAIT_MS`] (see there), then returns; the drop still happens.
    pub fn forget_data(&self, drops: &[nacre_client::datalocks::FileDrop]) {
        if drops.is_empty() {
            return;
        }
        let (done_tx, done_rx) = bounded(1);
        let clamp = |x: u64| x.min(i64::MAX as u64) as i64;
        let inos = drops
            .iter()
            .map(|d| match d.range {
                Some((off, len)) => (d.fid.to_ino(), clamp(off), clamp(len.max(1))),
                None => (d.fid.to_ino(), 0, 0),
            })
            .collect();
        if self.data.send((inos, done_tx)).is_err() {
            return;
        }
        if done_rx
            .recv_timeout(Duration::from_millis(DATA_INVAL_WAIT_MS))
            .is_err()
        {
            self.stats.data_waits_cut.fetch_add(1, Ordering::Relaxed);
        }
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
        let _ = self.entries.send((vec![(parent, name)], done));
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
