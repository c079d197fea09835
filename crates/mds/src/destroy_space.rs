//! The space the destroys queued and not yet done will free, per OST (`Mdt::destroy_space`;
//! the destroy thread, destroy.rs, marks them done).

use nacre_types::ObjectId;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Objects whose size is remembered at most, queued or about to be (past it, sizes are
/// forgotten: the space they will free is not counted).
pub const DESTROY_SIZES_MAX: usize = 1_048_576;

/// The space destroys queued and not yet done will free, per OST: pool fill levels (pool
/// spilling, policies) count it as free already, so nothing acting on them overshoots. The
/// sizes are the files' at their removal (exact where the MDT knows them, else its hint)
/// and are not stored: destroys queued before a restart count as freeing nothing.
#[derive(Default)]
pub struct DestroySpace {
    state: Mutex<SpaceState>,
}

#[derive(Default)]
struct SpaceState {
    /// Objects of removals not yet committed: their sizes.
    hints: HashMap<(u32, ObjectId), u64>,
    /// Objects queued for destruction: their sizes.
    queued: HashMap<(u32, ObjectId), u64>,
    /// Bytes queued per OST.
    by_ost: HashMap<u32, u64>,
}

impl DestroySpace {
    /// `object` on `ost`, of a file being removed, holds `bytes`.
    pub fn hint(&self, ost: u32, object: ObjectId, bytes: u64) {
        let mut s = self.state.lock();
        if s.hints.len() >= DESTROY_SIZES_MAX {
            // Removals that never committed left their hints: start over.
            s.hints.clear();
        }
        s.hints.insert((ost, object), bytes);
    }

    /// `objects` were queued for destruction (their removal committed).
    pub fn queued(&self, objects: &[(u32, ObjectId)]) {
        let mut s = self.state.lock();
        for o in objects {
            let Some(bytes) = s.hints.remove(o) else {
                continue;
            };
            if s.queued.len() < DESTROY_SIZES_MAX && s.queued.insert(*o, bytes).is_none() {
                *s.by_ost.entry(o.0).or_default() += bytes;
            }
        }
    }

    /// `objects` of `ost` are destroyed.
    pub fn done(&self, ost: u32, objects: &[ObjectId]) {
        let mut s = self.state.lock();
        for o in objects {
            if let Some(bytes) = s.queued.remove(&(ost, *o)) {
                let left = s
                    .by_ost
                    .get(&ost)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(bytes);
                if left == 0 {
                    s.by_ost.remove(&ost);
                } else {
                    s.by_ost.insert(ost, left);
                }
            }
        }
    }

    /// Bytes that destroys queued on `ost` will free.
    pub fn pending(&self, ost: u32) -> u64 {
        self.state.lock().by_ost.get(&ost).copied().unwrap_or(0)
    }

    /// (OST, bytes queued on it), for every OST with some, by OST.
    pub fn by_ost(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .state
            .lock()
            .by_ost
            .iter()
            .map(|(o, b)| (*o, *b))
            .collect();
        v.sort_unstable();
        v
    }

    /// (objects whose size is known, bytes) queued on all OSTs.
    pub fn total(&self) -> (usize, u64) {
        let s = self.state.lock();
        (s.queued.len(), s.by_ost.values().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_is_pending_from_the_queue_to_the_destroy() {
        let d = DestroySpace::default();
        let o = |id| ObjectId { seq: 0, id };
        d.hint(1, o(1), 100);
        d.hint(1, o(2), 50);
        d.hint(2, o(3), 7);
        assert_eq!(d.pending(1), 0, "not committed yet");
        d.queued(&[(1, o(1)), (1, o(2)), (2, o(3)), (2, o(9))]);
        assert_eq!((d.pending(1), d.pending(2)), (150, 7));
        assert_eq!(d.total(), (3, 157));
        d.done(1, &[o(1), o(1)]);
        assert_eq!(d.pending(1), 50);
        d.done(1, &[o(2)]);
        d.done(2, &[o(3)]);
        assert_eq!(d.total(), (0, 0));
    }
}
