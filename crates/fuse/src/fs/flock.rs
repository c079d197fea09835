//! `fcntl` byte-range locks and `flock` across mounts: set and tested at the file's MDT
//! (the client's `flock`), released when their owner closes the file.
//!
//! A POSIX lock belongs to a process (the kernel's lock owner), and closing any of the
//! process's descriptors of the file releases it; the kernel says so through a flush
//! carrying the owner. Nacre opens files without flushes (`FOPEN_NOFLUSH`: nothing is
//! buffered in the mount), except files this mount has locked: so a process that locks a
//! file it then opens again has its locks released by whichever close comes first, as
//! POSIX says. Every lock taken through an open file is released when the file is last
//! closed (its release), which covers the first open (made before any lock, without
//! flushes) and `flock`, whose locks belong to the open file. A lock granted after its
//! file was closed (its process was killed while waiting) is released at once.
//! `flock` locks are whole-file byte-range locks here, as on NFS: they conflict with
//! `fcntl` locks of other owners. A waiting lock request is given up (`EINTR`) once its
//! caller has a signal pending (crate::signals), so a process waiting for a lock held on
//! another mount can be interrupted or killed.

use super::{errno, fid_of, Caller, Shared, OPEN_FLAGS};
use fuser::{Errno, FileHandle, FopenFlags, INodeNo, LockOwner, ReplyEmpty, ReplyLock};
use nacre_client::FlockWait;
use nacre_ldlm::flock::FlockKind;
use nacre_types::Fid;
use std::collections::{HashMap, HashSet};

/// Files this mount has locked, remembered to open them with flushes (past it, the set
/// starts again: later opens of the forgotten ones release their locks at release only).
const LOCKED_FIDS_MAX: usize = 65_536;

/// What the mount knows of the locks taken through it.
#[derive(Default)]
pub(crate) struct MountFlocks {
    /// Lock owners that took locks through each open file (by handle).
    by_handle: HashMap<u64, HashSet<u64>>,
    /// Files locked through this mount.
    fids: HashSet<Fid>,
}

fn kind_of(typ: i32) -> Option<FlockKind> {
    match typ {
        libc::F_RDLCK => Some(FlockKind::Read),
        libc::F_WRLCK => Some(FlockKind::Write),
        libc::F_UNLCK => Some(FlockKind::Unlock),
        _ => None,
    }
}

#[allow(clippy::too_many_arguments)]
impl Shared {
    /// How a file is opened: with flushes if this mount has locked it.
    pub(super) fn open_flags(&self, fid: Fid) -> FopenFlags {
        match self.flocks.lock().fids.contains(&fid) {
            true => OPEN_FLAGS.difference(FopenFlags::FOPEN_NOFLUSH),
            false => OPEN_FLAGS,
        }
    }

    pub(super) fn getlk(
        &self,
        req: &Caller,
        ino: INodeNo,
        owner: LockOwner,
        (start, end): (u64, u64),
        typ: i32,
        reply: ReplyLock,
    ) {
        self.enter(req);
        let (fid, kind) = match (fid_of(ino), kind_of(typ)) {
            (Ok(f), Some(k)) if k != FlockKind::Unlock && start <= end => (f, k),
            _ => return reply.error(Errno::EINVAL),
        };
        match self.client.flock_test(fid, owner.0, kind, (start, end)) {
            Ok(Some(l)) => {
                let typ = if l.write {
                    libc::F_WRLCK
                } else {
                    libc::F_RDLCK
                };
                reply.locked(l.start, l.end, typ, l.pid)
            }
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn setlk(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: FileHandle,
        owner: LockOwner,
        (start, end): (u64, u64),
        (typ, pid): (i32, u32),
        waiter: Option<u32>,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let (fid, kind) = match (fid_of(ino), kind_of(typ)) {
            (Ok(f), Some(k)) if start <= end => (f, k),
            _ => return reply.error(Errno::EINVAL),
        };
        let interrupted = || waiter.is_some_and(crate::signals::pending);
        let wait = match waiter {
            Some(_) => FlockWait::Wait {
                interrupted: &interrupted,
            },
            None => FlockWait::NoWait,
        };
        if let Err(e) = self
            .client
            .flock(fid, owner.0, pid, kind, (start, end), wait)
        {
            return reply.error(errno(&e));
        }
        if kind != FlockKind::Unlock {
            let mut locks = self.flocks.lock();
            // Checked under the lock the release takes after removing the handle: either
            // the release sees this owner, or this sees the handle gone.
            if self.files.lock().contains_key(&fh.0) {
                locks.by_handle.entry(fh.0).or_default().insert(owner.0);
                if locks.fids.len() >= LOCKED_FIDS_MAX {
                    locks.fids.clear();
                }
                locks.fids.insert(fid);
            } else {
                drop(locks);
                self.unlock_all(fid, owner.0);
            }
        }
        reply.ok();
    }

    /// A close of one of the owner's descriptors (files this mount locked are opened with
    /// flushes): its POSIX locks on the file go.
    pub(super) fn flush(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: FileHandle,
        owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        if let Ok(fid) = fid_of(ino) {
            if self.client.flock_held(fid, owner.0) {
                self.unlock_all(fid, owner.0);
            }
        }
        // Writes kept as write-behind reach the OSTs before close(2) returns, which reports
        // what they refused (fs/data.rs).
        if let Ok(file) = self.file(fh) {
            if let Err(e) = self.client.flush_file(file.fid, file.layout().as_ref()) {
                return reply.error(errno(&e));
            }
        }
        reply.ok();
    }

    /// The open file `fh` of `fid` is closed for good: the locks taken through it go.
    pub(super) fn release_flocks(&self, fid: Fid, fh: FileHandle) {
        let owners = self.flocks.lock().by_handle.remove(&fh.0);
        for owner in owners.into_iter().flatten() {
            if self.client.flock_held(fid, owner) {
                self.unlock_all(fid, owner);
            }
        }
    }

    fn unlock_all(&self, fid: Fid, owner: u64) {
        let whole = (0, u64::MAX);
        if let Err(e) =
            self.client
                .flock(fid, owner, 0, FlockKind::Unlock, whole, FlockWait::NoWait)
        {
            // The MDT drops them with this client if it is evicted; until then they stay.
            tracing::warn!("releasing byte-range locks on {fid}: {e}");
        }
    }
}
