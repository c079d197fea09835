//! The client's side: the locks it holds on one target, the names it handed the kernel
//! under each, callbacks that arrived before their grant, and least-recently-used order.

use crate::msg::{LockRef, LOOKUP, UPDATE};
use nacre_types::Fid;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Default bound on the locks a client holds per target (`lru_size`): a scan of up to this
/// many files (IO500's stat phases, an `ls -l` of a large tree) stays in the kernel's cache.
/// About 150 bytes each here and as much on the server, whose
/// [`crate::server::LOCKS_MAX_DEFAULT`] is four times this.
pub const LRU_SIZE_DEFAULT: usize = 1 << 20;
/// Names (dentries) remembered per lock for invalidation; past it, more names under the
/// lock are not cached by the kernel.
pub const NAMES_PER_LOCK_MAX: usize = 16;
/// Names that do not exist remembered per directory lock (negative entries the kernel
/// caches under it); past it, more absent names are not cached.
pub const ABSENT_NAMES_PER_LOCK_MAX: usize = 256;
/// Handles of callbacks that came before their grant, remembered so that grant is refused.
const EARLY_REMEMBERED_MAX: usize = 4_096;

/// What a lock no longer covers: the kernel must forget it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revoked {
    /// The lock.
    pub lock: LockRef,
    /// Entries (parent, name) handed to the kernel under its `LOOKUP` bit.
    pub names: Vec<(Fid, Vec<u8>)>,
    /// Lost rather than given back: the server holds it no more (an eviction, a restart
    /// that refused its replay) or cannot be reached; nothing is sent to it about the lock.
    pub lost: bool,
}

struct Held {
    lock: LockRef,
    names: Vec<(Fid, Vec<u8>)>,
    used: u64,
}

#[derive(Default)]
struct State {
    held: HashMap<u64, Held>,
    by_fid: HashMap<Fid, Vec<u64>>,
    lru: BTreeMap<u64, u64>,
    tick: u64,
    early: HashSet<u64>,
    early_order: VecDeque<u64>,
}

impl State {
    fn take(&mut self, handle: u64) -> Option<Revoked> {
        let h = self.held.remove(&handle)?;
        self.lru.remove(&h.used);
        if let Some(v) = self.by_fid.get_mut(&h.lock.fid) {
            v.retain(|x| *x != handle);
            if v.is_empty() {
                self.by_fid.remove(&h.lock.fid);
            }
        }
        Some(Revoked {
            lock: h.lock,
            names: h.names,
            lost: false,
        })
    }

    fn touch(&mut self, handle: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(h) = self.held.get_mut(&handle) {
            self.lru.remove(&h.used);
            h.used = tick;
            self.lru.insert(tick, handle);
        }
    }
}

/// Counters of a client's namespace.
#[derive(Default)]
pub struct ClientStats {
    /// Locks received with replies.
    pub grants: AtomicU64,
    /// Callbacks received.
    pub callbacks: AtomicU64,
    /// Locks given back because the LRU was full.
    pub lru_cancels: AtomicU64,
}

/// The locks a client holds on one target.
pub struct ClientLocks {
    state: Mutex<State>,
    /// Most locks held (`lru_size`); the least recently used past it are cancelled.
    pub lru_size: AtomicUsize,
    /// Counters.
    pub stats: ClientStats,
}

impl Default for ClientLocks {
    fn default() -> Self {
        ClientLocks {
            state: Mutex::default(),
            lru_size: AtomicUsize::new(LRU_SIZE_DEFAULT),
            stats: ClientStats::default(),
        }
    }
}

impl ClientLocks {
    /// Locks held now.
    pub fn count(&self) -> usize {
        self.state.lock().held.len()
    }

    /// A reply carried `lock`: true if it is now held; false if it was called back already
    /// (the callback came first: what it covers must not be cached).
    pub fn granted(&self, lock: LockRef) -> bool {
        let mut s = self.state.lock();
        if s.early.remove(&lock.handle) {
            return false;
        }
        self.stats.grants.fetch_add(1, Ordering::Relaxed);
        if let std::collections::hash_map::Entry::Vacant(e) = s.held.entry(lock.handle) {
            e.insert(Held {
                lock,
                names: Vec::new(),
                used: 0,
            });
            s.by_fid.entry(lock.fid).or_default().push(lock.handle);
        }
        s.touch(lock.handle);
        true
    }

    /// True while lock `handle` is held (not called back, cancelled or dropped).
    pub fn holds(&self, handle: u64) -> bool {
        self.state.lock().held.contains_key(&handle)
    }

    /// True if held locks on `fid` cover all of `bits`.
    pub fn covers(&self, fid: Fid, bits: u8) -> bool {
        let mut s = self.state.lock();
        let handles: Vec<u64> = s.by_fid.get(&fid).cloned().unwrap_or_default();
        let mut have = 0;
        for h in &handles {
            have |= s.held[h].lock.bits;
        }
        if have & bits == bits {
            for h in handles {
                s.touch(h);
            }
            return true;
        }
        false
    }

    /// A held lock on `fid` with all of `bits`, if any.
    pub fn holding(&self, fid: Fid, bits: u8) -> Option<u64> {
        let s = self.state.lock();
        s.by_fid
            .get(&fid)?
            .iter()
            .copied()
            .find(|h| s.held[h].lock.bits & bits == bits)
    }

    /// Records that the kernel got entry `parent`/`name` → `fid` to cache: true if a held
    /// `LOOKUP` lock on `fid` now covers it (it will be invalidated with the lock), false if
    /// the kernel must not cache it.
    pub fn cover_name(&self, fid: Fid, parent: Fid, name: &[u8]) -> bool {
        self.cover(fid, LOOKUP, parent, name, NAMES_PER_LOCK_MAX)
    }

    /// Records that the kernel got `parent`/`name` as an entry that does not exist, to
    /// cache: true if a held `UPDATE` lock on directory `dir` (the parent, or its shard)
    /// now covers it (it will be invalidated with the lock), false if the kernel must not
    /// cache it.
    pub fn cover_absent(&self, dir: Fid, parent: Fid, name: &[u8]) -> bool {
        self.cover(dir, UPDATE, parent, name, ABSENT_NAMES_PER_LOCK_MAX)
    }

    fn cover(&self, fid: Fid, bit: u8, parent: Fid, name: &[u8], max: usize) -> bool {
        let mut s = self.state.lock();
        let State { held, by_fid, .. } = &mut *s;
        let Some(handles) = by_fid.get(&fid) else {
            return false;
        };
        for h in handles {
            let held = held.get_mut(h).expect("indexed");
            if held.lock.bits & bit == 0 {
                continue;
            }
            if held.names.iter().any(|(p, n)| *p == parent && n == name) {
                return true;
            }
            if held.names.len() < max {
                held.names.push((parent, name.to_vec()));
                return true;
            }
        }
        false
    }

    /// Callbacks arrived for `refs`: the held ones are dropped and returned (the kernel
    /// forgets what they covered, then they are cancelled); unknown ones are remembered so
    /// that their grant, still on its way, is refused. Every ref is to be cancelled.
    pub fn blocking(&self, refs: &[LockRef]) -> Vec<Revoked> {
        let mut s = self.state.lock();
        self.stats
            .callbacks
            .fetch_add(refs.len() as u64, Ordering::Relaxed);
        let mut out = Vec::new();
        for r in refs {
            match s.take(r.handle) {
                Some(rev) => out.push(rev),
                None => {
                    if s.early.insert(r.handle) {
                        s.early_order.push_back(r.handle);
                    }
                    while s.early_order.len() > EARLY_REMEMBERED_MAX {
                        let old = s.early_order.pop_front().expect("non-empty");
                        s.early.remove(&old);
                    }
                }
            }
        }
        out
    }

    /// The locks held now (to replay them to a restarted server).
    pub fn held(&self) -> Vec<LockRef> {
        self.state.lock().held.values().map(|h| h.lock).collect()
    }

    /// Drops `handles` (the server did not take them back), returning what they covered.
    pub fn remove(&self, handles: &[u64]) -> Vec<Revoked> {
        let mut s = self.state.lock();
        handles
            .iter()
            .filter_map(|h| s.take(*h))
            .map(|r| Revoked { lost: true, ..r })
            .collect()
    }

    /// Drops `handles` for this client to give them back (it cancels them itself),
    /// returning what they covered.
    pub fn take_back(&self, handles: &[u64]) -> Vec<Revoked> {
        let mut s = self.state.lock();
        handles.iter().filter_map(|h| s.take(*h)).collect()
    }

    /// The least recently used locks past `lru_size`, dropped: the caller has the kernel
    /// forget them, then cancels them.
    pub fn lru_excess(&self) -> Vec<Revoked> {
        let max = self.lru_size.load(Ordering::Relaxed);
        let mut s = self.state.lock();
        let mut out = Vec::new();
        while s.held.len() > max {
            let Some((_, handle)) = s.lru.pop_first() else {
                break;
            };
            if let Some(r) = s.take(handle) {
                out.push(r);
            }
        }
        self.stats
            .lru_cancels
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// Every lock, dropped (the client was evicted or the server restarted: none is valid).
    pub fn drain(&self) -> Vec<Revoked> {
        let mut s = self.state.lock();
        let handles: Vec<u64> = s.held.keys().copied().collect();
        let out = handles
            .into_iter()
            .filter_map(|h| s.take(h))
            .map(|r| Revoked { lost: true, ..r })
            .collect();
        s.lru.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(handle: u64, oid: u32, bits: u8) -> LockRef {
        LockRef {
            handle,
            fid: Fid::new(0x2_0000_0400, oid),
            bits,
        }
    }

    #[test]
    fn a_callback_before_its_grant_refuses_the_grant() {
        let c = ClientLocks::default();
        assert!(c.blocking(&[r(7, 1, UPDATE)]).is_empty());
        assert!(!c.granted(r(7, 1, UPDATE)));
        assert!(!c.covers(r(7, 1, UPDATE).fid, UPDATE));
        assert!(c.granted(r(8, 1, UPDATE)));
        assert!(c.covers(r(8, 1, UPDATE).fid, UPDATE));
    }

    #[test]
    fn names_are_returned_with_the_revoked_lock() {
        let c = ClientLocks::default();
        let l = r(1, 5, LOOKUP | UPDATE);
        let parent = Fid::new(0x2_0000_0400, 1);
        assert!(!c.cover_name(l.fid, parent, b"x"), "no lock yet");
        c.granted(l);
        assert!(c.cover_name(l.fid, parent, b"x"));
        assert!(c.cover_name(l.fid, parent, b"x"));
        let rev = c.blocking(&[l]);
        assert_eq!(rev.len(), 1);
        assert_eq!(rev[0].names, vec![(parent, b"x".to_vec())]);
        assert_eq!(c.count(), 0);
    }

    #[test]
    fn absent_names_are_covered_by_the_directory_update_lock() {
        let c = ClientLocks::default();
        let dir = r(3, 9, LOOKUP);
        let parent = dir.fid;
        c.granted(dir);
        assert!(!c.cover_absent(parent, parent, b"nope"), "no UPDATE bit");
        c.granted(r(4, 9, UPDATE));
        assert!(c.cover_absent(parent, parent, b"nope"));
        let gone = c.blocking(&[r(4, 9, UPDATE)]);
        assert_eq!(gone[0].names, vec![(parent, b"nope".to_vec())]);
    }

    #[test]
    fn the_least_recently_used_go_past_the_bound() {
        let c = ClientLocks::default();
        c.lru_size.store(2, Ordering::Relaxed);
        for i in 1..=3 {
            c.granted(r(i, i as u32, UPDATE));
        }
        assert!(c.covers(r(1, 1, UPDATE).fid, UPDATE));
        let gone = c.lru_excess();
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].lock.handle, 2);
        assert_eq!(c.count(), 2);
        assert_eq!(c.drain().len(), 2);
    }
}
