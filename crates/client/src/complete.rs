//! Directories this client knows completely: one it created itself and has held an UPDATE
//! lock on ever since (a new directory is empty, and every later change by another client
//! would have revoked the lock), with the names its own changes put in it. A lookup of a
//! name such a directory does not hold is answered "no such entry" without asking the MDT
//! — the lookup the kernel sends before every create of a new name.
//!
//! Completeness goes with the lock (a callback, the LRU, an eviction, a new link to the
//! MDT): the lock sink forgets the directory before the kernel is told and the lock is
//! cancelled, so a change by another client, which waits for that cancel, is never missed.

use nacre_types::Fid;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// Names remembered across all complete directories; past it, the directory that would
/// grow is forgotten (its lookups go to the MDT again).
pub const COMPLETE_NAMES_MAX: usize = 262_144;
/// Complete directories remembered at most; past it, new ones are not recorded.
pub const COMPLETE_DIRS_MAX: usize = 16_384;

#[derive(Default)]
struct State {
    dirs: HashMap<Fid, HashSet<Vec<u8>>>,
    names: usize,
}

/// The complete directories of one client.
#[derive(Default)]
pub struct Complete {
    state: Mutex<State>,
}

impl Complete {
    /// `dir` was just created by this client, under an UPDATE lock: empty and complete.
    pub fn made(&self, dir: Fid) {
        let mut s = self.state.lock();
        if s.dirs.len() < COMPLETE_DIRS_MAX {
            s.dirs.entry(dir).or_default();
        }
    }

    /// `dir` is known completely.
    pub fn knows(&self, dir: Fid) -> bool {
        self.state.lock().dirs.contains_key(&dir)
    }

    /// True if `dir` is complete and holds no `name`.
    pub fn absent(&self, dir: Fid, name: &[u8]) -> bool {
        self.state
            .lock()
            .dirs
            .get(&dir)
            .is_some_and(|names| !names.contains(name))
    }

    /// This client put `name` in `dir`.
    pub fn added(&self, dir: Fid, name: &[u8]) {
        let mut s = self.state.lock();
        if !s.dirs.contains_key(&dir) {
            return;
        }
        if s.names >= COMPLETE_NAMES_MAX {
            if let Some(names) = s.dirs.remove(&dir) {
                s.names -= names.len();
            }
            return;
        }
        let added = s.dirs.get_mut(&dir).expect("present").insert(name.to_vec());
        if added {
            s.names += 1;
        }
    }

    /// This client took `name` out of `dir`.
    pub fn removed(&self, dir: Fid, name: &[u8]) {
        let mut s = self.state.lock();
        let removed = s.dirs.get_mut(&dir).is_some_and(|names| names.remove(name));
        if removed {
            s.names -= 1;
        }
    }

    /// `dir` is no longer known completely (its lock went, or a change this client could
    /// not follow name by name).
    pub fn forget(&self, dir: Fid) {
        let mut s = self.state.lock();
        if let Some(names) = s.dirs.remove(&dir) {
            s.names -= names.len();
        }
    }

    /// Directories known completely now.
    pub fn len(&self) -> usize {
        self.state.lock().dirs.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_directory_answers_for_names_it_does_not_hold() {
        let c = Complete::default();
        let d = Fid::new(0x2_0000_0400, 9);
        assert!(!c.absent(d, b"x"), "unknown directories answer nothing");
        c.made(d);
        assert!(c.absent(d, b"x"));
        c.added(d, b"x");
        assert!(!c.absent(d, b"x"));
        c.removed(d, b"x");
        assert!(c.absent(d, b"x"));
        c.forget(d);
        assert!(!c.absent(d, b"x"));
        assert!(c.is_empty());
    }
}
