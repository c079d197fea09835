//! Range locks of objects: which chunks of which objects a change is rewriting now.
//!
//! A change of an object (its data together with the checksums of the chunks it touches,
//! see [`crate::csum`]) holds the chunks it rewrites, so changes of disjoint chunk ranges of
//! one object run at once: the pieces of a large write sent together, or the writers of a
//! shared file whose parts fall in one object, go to the disk together instead of one
//! after the other. A change that may touch chunks outside its own range (an unaligned
//! write that grows the object, a truncate, a hole) holds the whole object.
//!
//! Space accounting rides on the locks: the space an object holds is measured when the
//! first change of a run of overlapping-in-time changes takes its range, and again when the
//! last one lets go, so changes running together are charged their sum once (each measuring
//! its own before and after would count the others' blocks too).
//!
//! A waiter for a whole object holds off new ranges of it, so a stream of small writes
//! cannot starve a truncate. [`RangeLocks::freeze`] holds off every change of every object
//! (the quota check counts a store at rest).

use nacre_types::ObjectId;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// The whole of an object, as a chunk range.
pub(crate) const WHOLE: Range<u64> = 0..u64::MAX;

#[derive(Default)]
struct Held {
    /// Chunk ranges held now.
    ranges: Vec<Range<u64>>,
    /// Changes waiting for the whole object.
    whole_waiting: usize,
    /// The object's space when the first of the changes now running took its range (for
    /// changes that are charged).
    space_before: Option<u64>,
}

#[derive(Default)]
struct State {
    held: HashMap<ObjectId, Held>,
    /// Set by [`RangeLocks::freeze`]: no new range is taken.
    frozen: bool,
}

/// The range locks of one object store.
#[derive(Default)]
pub(crate) struct RangeLocks {
    state: Mutex<State>,
    freed: Condvar,
    /// Ranges taken while another range of the same object was held.
    together: AtomicU64,
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

impl RangeLocks {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.freed.wait(s).unwrap_or_else(|e| e.into_inner())
    }

    /// Takes chunks `range` of `object`, waiting while a change holds any of them (a
    /// [`WHOLE`] range conflicts with every other). `space`, for a change that is charged:
    /// measures the object's space, called (with the locks' state held) if no other change
    /// of the object is running, so the measure is of the object before all of them.
    pub(crate) fn take(
        &self,
        object: ObjectId,
        range: Range<u64>,
        space: Option<&dyn Fn() -> Option<u64>>,
    ) {
        assert!(!range.is_empty(), "a change holds at least one chunk");
        let whole = range == WHOLE;
        let mut s = self.state();
        let mut counted = false;
        loop {
            let busy = s.frozen
                || s.held.get(&object).is_some_and(|h| {
                    h.ranges.iter().any(|r| overlaps(r, &range)) || (!whole && h.whole_waiting > 0)
                });
            if !busy {
                break;
            }
            if whole && !counted {
                s.held.entry(object).or_default().whole_waiting += 1;
                counted = true;
            }
            s = self.wait(s);
        }
        let h = s.held.entry(object).or_default();
        if counted {
            h.whole_waiting -= 1;
        }
        if h.ranges.is_empty() {
            h.space_before = space.and_then(|f| f());
        } else {
            self.together.fetch_add(1, Ordering::Relaxed);
        }
        h.ranges.push(range);
    }

    /// Ranges taken while another range of the same object was held, since start.
    pub(crate) fn together(&self) -> u64 {
        self.together.load(Ordering::Relaxed)
    }

    /// Lets go of chunks `range` of `object` (taken by [`RangeLocks::take`]). When it was
    /// the last change of the object running and the first measured the space,
    /// `settle(space_before)` is called with the locks' state held, to charge what all of
    /// them changed.
    pub(crate) fn give(&self, object: ObjectId, range: Range<u64>, settle: &dyn Fn(u64)) {
        let mut s = self.state();
        let h = s
            .held
            .get_mut(&object)
            .expect("a range given back was taken");
        let at = h
            .ranges
            .iter()
            .position(|r| *r == range)
            .expect("a range given back was taken");
        h.ranges.swap_remove(at);
        if h.ranges.is_empty() {
            if let Some(before) = h.space_before.take() {
                settle(before);
            }
            if h.whole_waiting == 0 {
                s.held.remove(&object);
            }
        }
        drop(s);
        self.freed.notify_all();
    }

    /// Holds off every change of every object until [`RangeLocks::thaw`]: waits until none
    /// runs.
    pub(crate) fn freeze(&self) {
        let mut s = self.state();
        while s.frozen {
            s = self.wait(s);
        }
        s.frozen = true;
        while s.held.values().any(|h| !h.ranges.is_empty()) {
            s = self.wait(s);
        }
    }

    /// Lets changes run again after [`RangeLocks::freeze`].
    pub(crate) fn thaw(&self) {
        self.state().frozen = false;
        self.freed.notify_all();
    }

    /// Chunk ranges held now, over all objects (for tests and statistics).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.state().held.values().map(|h| h.ranges.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn obj(id: u64) -> ObjectId {
        ObjectId { seq: 0, id }
    }

    /// Runs `f` on a thread; true if it finished within `ms` (it is left running if not).
    fn finishes_within(ms: u64, f: impl FnOnce() + Send + 'static) -> Arc<AtomicBool> {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            f();
            d.store(true, Ordering::SeqCst);
        });
        let until = std::time::Instant::now() + Duration::from_millis(ms);
        while !done.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        done
    }

    #[test]
    fn disjoint_ranges_are_held_together_and_overlapping_ones_wait() {
        let l = Arc::new(RangeLocks::default());
        l.take(obj(1), 0..4, None);
        l.take(obj(1), 4..8, None);
        l.take(obj(2), 0..4, None);
        assert_eq!(l.held(), 3);
        assert_eq!(l.together(), 1);
        let l2 = l.clone();
        let done = finishes_within(50, move || {
            l2.take(obj(1), 3..5, None);
            l2.give(obj(1), 3..5, &|_| {});
        });
        assert!(!done.load(Ordering::SeqCst), "an overlapping range waits");
        l.give(obj(1), 0..4, &|_| {});
        assert!(!done.load(Ordering::SeqCst), "it still overlaps 4..8");
        l.give(obj(1), 4..8, &|_| {});
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !done.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < until,
                "freed ranges let the waiter in"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        l.give(obj(2), 0..4, &|_| {});
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_whole_object_waiter_holds_off_new_ranges() {
        let l = Arc::new(RangeLocks::default());
        l.take(obj(1), 0..1, None);
        let l2 = l.clone();
        let whole = finishes_within(20, move || {
            l2.take(obj(1), WHOLE, None);
            l2.give(obj(1), WHOLE, &|_| {});
        });
        assert!(!whole.load(Ordering::SeqCst));
        let l3 = l.clone();
        let late = finishes_within(20, move || {
            l3.take(obj(1), 5..6, None);
            l3.give(obj(1), 5..6, &|_| {});
        });
        assert!(
            !late.load(Ordering::SeqCst),
            "a disjoint range waits behind the whole-object waiter"
        );
        l.give(obj(1), 0..1, &|_| {});
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !(whole.load(Ordering::SeqCst) && late.load(Ordering::SeqCst)) {
            assert!(std::time::Instant::now() < until, "both got their turn");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn changes_running_together_are_settled_once_against_the_first_measure() {
        let l = RangeLocks::default();
        let measured = std::cell::Cell::new(0);
        let measure = || {
            measured.set(measured.get() + 1);
            Some(100)
        };
        l.take(obj(1), 0..1, Some(&measure));
        l.take(obj(1), 1..2, Some(&measure));
        assert_eq!(measured.get(), 1, "only the first change measures");
        let settled = std::cell::Cell::new(None);
        l.give(obj(1), 0..1, &|b| settled.set(Some(b)));
        assert_eq!(settled.get(), None, "not while another change runs");
        l.give(obj(1), 1..2, &|b| settled.set(Some(b)));
        assert_eq!(settled.get(), Some(100));
    }

    #[test]
    fn a_freeze_waits_for_running_changes_and_holds_off_new_ones() {
        let l = Arc::new(RangeLocks::default());
        l.take(obj(1), 0..1, None);
        let l2 = l.clone();
        let frozen = finishes_within(20, move || l2.freeze());
        assert!(!frozen.load(Ordering::SeqCst), "a freeze waits for changes");
        l.give(obj(1), 0..1, &|_| {});
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !frozen.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < until);
            std::thread::sleep(Duration::from_millis(1));
        }
        let l3 = l.clone();
        let change = finishes_within(20, move || {
            l3.take(obj(2), 0..1, None);
            l3.give(obj(2), 0..1, &|_| {});
        });
        assert!(!change.load(Ordering::SeqCst), "no change while frozen");
        l.thaw();
        while !change.load(Ordering::SeqCst) {
            assert!(std::time::Instant::now() < until);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
