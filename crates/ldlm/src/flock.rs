//! Byte-range locks across clients (`fcntl` POSIX locks; `flock` as whole-file byte-range
//! locks, as NFS does): the table one target keeps of them.
//!
//! An owner is a client and the lock owner the kernel names within it (a process's files
//! for POSIX locks, an open file for `flock`). Locks of one owner never conflict with each
//! other: a new lock replaces the owner's locks on its range (splitting them), an unlock
//! removes the owner's locks on its range, and adjacent or overlapping locks of one owner
//! and kind merge — POSIX's rules. Two owners' locks conflict where they overlap and either
//! is a write lock. A request that would wait records what it waits for; a wait that would
//! close a cycle of owners waiting for each other is refused (`EDEADLK`), as the kernel does
//! for local locks.

use nacre_types::Fid;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Most byte-range locks one table holds (past it, new locks are refused with `ENOLCK`).
pub const FLOCKS_MAX: usize = 1 << 20;

/// A client's uuid.
pub type ClientId = [u8; 16];

/// Who holds a lock: a client and the lock owner within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Owner {
    /// The client.
    pub client: ClientId,
    /// The owner the kernel named (opaque, unique within the client).
    pub owner: u64,
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FlockKind {
    /// Shared (`F_RDLCK`, `LOCK_SH`).
    Read,
    /// Exclusive (`F_WRLCK`, `LOCK_EX`).
    Write,
    /// Release (`F_UNLCK`, `LOCK_UN`).
    Unlock,
}

/// A lock held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flock {
    /// Holder.
    pub owner: Owner,
    /// The holder's process id, as `F_GETLK` reports it (0 for a process of another node).
    pub pid: u32,
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive; `u64::MAX`: to the end of the file, however it grows).
    pub end: u64,
    /// Exclusive.
    pub write: bool,
}

impl Flock {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.start <= end && start <= self.end
    }
}

/// What [`FlockTable::set`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// Done: the owner holds (or no longer holds) the range.
    Granted,
    /// Another owner's lock is in the way (the first found); nothing changed.
    Conflict(Flock),
    /// Waiting would close a cycle of owners waiting for each other.
    Deadlock,
    /// The table is full.
    TooMany,
}

/// The byte-range locks of one target.
#[derive(Default)]
pub struct FlockTable {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: HashMap<Fid, Vec<Flock>>,
    /// Owners waiting, and the owner each waits for.
    waits: HashMap<Owner, Owner>,
    count: usize,
}

impl State {
    fn conflict(
        &self,
        fid: Fid,
        owner: Owner,
        kind: FlockKind,
        start: u64,
        end: u64,
    ) -> Option<Flock> {
        if kind == FlockKind::Unlock {
            return None;
        }
        let write = kind == FlockKind::Write;
        self.files
            .get(&fid)?
            .iter()
            .copied()
            .find(|l| l.owner != owner && l.overlaps(start, end) && (write || l.write))
    }

    /// True if `blocker` waits, directly or through others, for `waiter`.
    fn waits_for(&self, blocker: Owner, waiter: Owner) -> bool {
        let mut at = blocker;
        for _ in 0..=self.waits.len() {
            if at == waiter {
                return true;
            }
            match self.waits.get(&at) {
                Some(&next) => at = next,
                None => return false,
            }
        }
        false
    }
}

impl FlockTable {
    /// An empty table.
    pub fn new() -> FlockTable {
        FlockTable::default()
    }

    /// Locks held now.
    pub fn count(&self) -> usize {
        self.state.lock().count
    }

    /// Owners waiting now.
    pub fn waiting(&self) -> usize {
        self.state.lock().waits.len()
    }

    /// Sets `owner`'s lock of `kind` on bytes `start..=end` of `fid`. With `wait`, a
    /// conflict is recorded as the owner waiting for the holder (until it is granted or
    /// [`FlockTable::stop_waiting`]), unless that would be a deadlock.
    pub fn set(
        &self,
        fid: Fid,
        owner: Owner,
        pid: u32,
        kind: FlockKind,
        (start, end): (u64, u64),
        wait: bool,
    ) -> SetOutcome {
        assert!(start <= end, "a range ends before it starts");
        let mut s = self.state.lock();
        if let Some(c) = s.conflict(fid, owner, kind, start, end) {
            if wait {
                if s.waits_for(c.owner, owner) {
                    s.waits.remove(&owner);
                    return SetOutcome::Deadlock;
                }
                s.waits.insert(owner, c.owner);
            }
            return SetOutcome::Conflict(c);
        }
        s.waits.remove(&owner);
        let locks: &[Flock] = s.files.get(&fid).map_or(&[], Vec::as_slice);
        let before = locks.len();
        // The owner's locks on the range go (split where they stick out).
        let mut kept = Vec::with_capacity(locks.len() + 2);
        for &l in locks {
            if l.owner != owner || !l.overlaps(start, end) {
                kept.push(l);
                continue;
            }
            if l.start < start {
                kept.push(Flock {
                    end: start - 1,
                    ..l
                });
            }
            if l.end > end {
                kept.push(Flock {
                    start: end + 1,
                    ..l
                });
            }
        }
        if kind != FlockKind::Unlock {
            let write = kind == FlockKind::Write;
            let (mut start, mut end) = (start, end);
            // Adjacent locks of the owner and kind merge into the new one.
            kept.retain(|l| {
                let touches = l.owner == owner
                    && l.write == write
                    && l.start <= end.saturating_add(1)
                    && start <= l.end.saturating_add(1);
                if touches {
                    start = start.min(l.start);
                    end = end.max(l.end);
                }
                !touches
            });
            kept.push(Flock {
                owner,
                pid,
                start,
                end,
                write,
            });
        }
        let after = kept.len();
        if after > before && s.count + (after - before) > FLOCKS_MAX {
            return SetOutcome::TooMany;
        }
        s.count = s.count + after - before;
        match kept.is_empty() {
            true => s.files.remove(&fid),
            false => s.files.insert(fid, kept),
        };
        SetOutcome::Granted
    }

    /// The first lock of another owner that a lock of `kind` on `start..=end` would
    /// conflict with (`F_GETLK`).
    pub fn test(
        &self,
        fid: Fid,
        owner: Owner,
        kind: FlockKind,
        (start, end): (u64, u64),
    ) -> Option<Flock> {
        self.state.lock().conflict(fid, owner, kind, start, end)
    }

    /// `owner` no longer waits (its request was answered otherwise or went away).
    pub fn stop_waiting(&self, owner: Owner) {
        self.state.lock().waits.remove(&owner);
    }

    /// Releases every lock `owner` holds on `fid` (its file was closed): true if it held
    /// some.
    pub fn drop_owner(&self, fid: Fid, owner: Owner) -> bool {
        let held = self
            .state
            .lock()
            .files
            .get(&fid)
            .is_some_and(|l| l.iter().any(|l| l.owner == owner));
        self.set(fid, owner, 0, FlockKind::Unlock, (0, u64::MAX), false);
        held
    }

    /// Releases every lock of `client` (evicted or gone): the files where some were held.
    pub fn drop_client(&self, client: &ClientId) -> Vec<Fid> {
        let mut s = self.state.lock();
        let mut freed = Vec::new();
        let mut removed = 0;
        s.files.retain(|fid, locks| {
            let n = locks.len();
            locks.retain(|l| l.owner.client != *client);
            if locks.len() < n {
                freed.push(*fid);
                removed += n - locks.len();
            }
            !locks.is_empty()
        });
        s.count -= removed;
        s.waits
            .retain(|w, b| w.client != *client && b.client != *client);
        freed
    }

    /// Every lock held, with its file.
    pub fn all(&self) -> Vec<(Fid, Flock)> {
        let s = self.state.lock();
        s.files
            .iter()
            .flat_map(|(fid, locks)| locks.iter().map(move |l| (*fid, *l)))
            .collect()
    }

    /// The locks held on `fid`, in no particular order.
    pub fn held(&self, fid: Fid) -> Vec<Flock> {
        self.state
            .lock()
            .files
            .get(&fid)
            .cloned()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
