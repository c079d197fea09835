//! A bounded blocking FIFO for service requests: a mutex, a deque and two condition variables.
//!
//! Service threads wait on it without spinning: a spinning channel's idle receivers
//! (crossbeam's backoff yields the CPU in a loop before parking) cost a fifth of both cores
//! in `perf` under a small-RPC load on this 2-core machine, CPU the busy threads needed.
//! parking_lot's condition variables, because they wake with a system call only when a
//! thread waits (std's makes one on every notify: two per request and two per reply here).

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How an item was taken from the queue, against the other kind waiting beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// In its order: nothing of the other kind waited.
    InOrder,
    /// A weighted item taken while plain ones that came before it waited.
    Ahead,
    /// A plain item taken while weighted ones waited: its turn after a run of their weight.
    PlainTurn,
}

struct State<T> {
    /// Plain items, and whether each is batchable (served with those queued behind it).
    items: VecDeque<(T, bool)>,
    /// Weighted items (QoS weights) and their weights.
    weighted: VecDeque<(T, u32)>,
    /// Weighted items taken in a row while plain ones waited.
    run: u32,
    closed: bool,
    /// Threads serving a batchable item (and the batch they took with it) now.
    batching: usize,
    /// Batchable items queued without waking a thread (left to those serving batches), at
    /// most: a thread is woken for one when fewer serve batches.
    held: usize,
}

/// A bounded multi-producer, multi-consumer queue that blocks instead of spinning.
pub(crate) struct WaitQueue<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
    /// Threads that may serve batchable items at once: past it, a batchable item wakes no
    /// thread; one of those serving batches takes it with the next batch.
    batchers_max: AtomicUsize,
}

impl<T> WaitQueue<T> {
    /// An empty queue holding at most `capacity` items (at least 1).
    pub(crate) fn new(capacity: usize) -> WaitQueue<T> {
        WaitQueue {
            state: Mutex::new(State {
                items: VecDeque::with_capacity(capacity.min(1024)),
                weighted: VecDeque::new(),
                run: 0,
                closed: false,
                batching: 0,
                held: 0,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity: capacity.max(1),
            batchers_max: AtomicUsize::new(usize::MAX),
        }
    }

    /// Sets how many threads may serve batchable items at once (at least 1).
    pub(crate) fn set_batchers_max(&self, n: usize) {
        self.batchers_max.store(n.max(1), Ordering::Relaxed);
    }

    /// Appends `item`, waiting while the queue is full; gives it back if the queue is closed.
    #[cfg(test)]
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        self.send_weighted(item, 0, false).map(|_| ())
    }

    /// Appends `item` of `weight` (0: none), waiting while the queue is full. Weighted
    /// items are taken before plain ones: up to `weight` in a row while plain ones wait,
    /// then one plain one (so plain ones never starve). A plain `batchable` item wakes no
    /// thread while `batchers_max` threads serve batches: the first of them back takes it
    /// (several requests served in one turn of one thread cost one wake-up, one disk
    /// submission and one reply write per connection, instead of one each). Whether a
    /// thread was woken.
    pub(crate) fn send_weighted(&self, item: T, weight: u32, batchable: bool) -> Result<bool, T> {
        let mut s = self.state.lock();
        while s.items.len() + s.weighted.len() >= self.capacity && !s.closed {
            self.not_full.wait(&mut s);
        }
        if s.closed {
            return Err(item);
        }
        let wake = weight != 0 || !batchable || s.batching < self.batchers_max();
        if !wake {
            s.held += 1;
        }
        if weight == 0 {
            s.items.push_back((item, batchable));
        } else {
            s.weighted.push_back((item, weight));
        }
        drop(s);
        if wake {
            self.not_empty.notify_one();
        }
        Ok(wake)
    }

    /// Threads that may serve batchable items at once.
    pub(crate) fn batchers_max(&self) -> usize {
        self.batchers_max.load(Ordering::Relaxed)
    }

    /// The next item (see [`WaitQueue::send_weighted`]), waiting while the queue is empty;
    /// None once it is closed and drained.
    #[cfg(test)]
    pub(crate) fn recv(&self) -> Option<T> {
        self.recv_weighted().map(|(item, _, _)| item)
    }

    /// [`WaitQueue::recv`], how it was taken against the other kind waiting beside it
    /// ([`Taken`]), and whether it is batchable: then the caller serves batches until
    /// [`WaitQueue::batch_done`]. Wakes another thread for a batchable item held back
    /// ([`WaitQueue::send_weighted`]) once fewer than `batchers_max` threads serve batches.
    pub(crate) fn recv_weighted(&self) -> Option<(T, Taken, bool)> {
        let mut s = self.state.lock();
        loop {
            let weighted_first = s
                .weighted
                .front()
                .is_some_and(|(_, w)| s.items.is_empty() || s.run < *w);
            let taken = if weighted_first {
                let ahead = !s.items.is_empty();
                s.run = if ahead { s.run + 1 } else { 0 };
                let turn = if ahead { Taken::Ahead } else { Taken::InOrder };
                s.weighted.pop_front().map(|(item, _)| (item, turn, false))
            } else {
                s.run = 0;
                let turn = match s.weighted.is_empty() {
                    true => Taken::InOrder,
                    false => Taken::PlainTurn,
                };
                s.items
                    .pop_front()
                    .map(|(item, batchable)| (item, turn, batchable))
            };
            if let Some(t) = taken {
                if t.2 {
                    s.batching += 1;
                }
                s.held = s.held.min(s.items.len());
                let more = s.held > 0 && s.batching < self.batchers_max();
                if more {
                    s.held -= 1;
                }
                drop(s);
                self.not_full.notify_one();
                if more {
                    self.not_empty.notify_one();
                }
                return Some(t);
            }
            if s.closed {
                return None;
            }
            self.not_empty.wait(&mut s);
        }
    }

    /// Takes, without waiting, up to `max` plain batchable items from the front of the
    /// queue (none while weighted items wait: those keep their turn).
    pub(crate) fn take_more(&self, max: usize) -> Vec<T> {
        let mut s = self.state.lock();
        let mut taken = Vec::new();
        if !s.weighted.is_empty() {
            return taken;
        }
        while taken.len() < max && s.items.front().is_some_and(|(_, batchable)| *batchable) {
            taken.extend(s.items.pop_front().map(|(t, _)| t));
        }
        s.held = s.held.min(s.items.len());
        drop(s);
        for _ in 0..taken.len() {
            self.not_full.notify_one();
        }
        taken
    }

    /// The caller finished serving the batchable item [`WaitQueue::recv_weighted`] gave it
    /// (and the batch it took with it).
    pub(crate) fn batch_done(&self) {
        let mut s = self.state.lock();
        assert!(s.batching > 0, "a batch done was begun");
        s.batching -= 1;
    }

    /// Refuses further items and wakes every waiter; queued items are still received.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

/// The reply slot of one request: one value, handed from the thread that receives the reply
/// to the one waiting for it, without spinning (see the module note).
struct Slot<T> {
    state: Mutex<(Option<T>, bool)>,
    ready: Condvar,
}

/// The sending end of [`oneshot`]; dropping it unsent wakes the receiver with `Disconnected`.
pub(crate) struct OneshotSender<T>(std::sync::Arc<Slot<T>>);

/// The receiving end of [`oneshot`].
pub(crate) struct OneshotReceiver<T>(std::sync::Arc<Slot<T>>);

/// A channel for exactly one value (a reply).
pub(crate) fn oneshot<T>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    let slot = std::sync::Arc::new(Slot {
        state: Mutex::new((None, false)),
        ready: Condvar::new(),
    });
    (OneshotSender(slot.clone()), OneshotReceiver(slot))
}

impl<T> OneshotSender<T> {
    /// Delivers the value (a second value replaces an unreceived first).
    pub(crate) fn send(&self, value: T) {
        self.0.state.lock().0 = Some(value);
        self.0.ready.notify_one();
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        self.0.state.lock().1 = true;
        self.0.ready.notify_one();
    }
}

impl<T> OneshotReceiver<T> {
    /// The value, waiting at most `timeout`.
    pub(crate) fn recv_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<T, crossbeam_channel::RecvTimeoutError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut s = self.0.state.lock();
        loop {
            if let Some(v) = s.0.take() {
                return Ok(v);
            }
            if s.1 {
                return Err(crossbeam_channel::RecvTimeoutError::Disconnected);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(crossbeam_channel::RecvTimeoutError::Timeout);
            }
            self.0.ready.wait_until(&mut s, deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_items_go_first_up_to_their_weight_then_one_plain() {
        let q = WaitQueue::new(16);
        for i in 0..3 {
            q.send_weighted(i, 0, false).unwrap();
        }
        for i in 10..15 {
            q.send_weighted(i, 2, false).unwrap();
        }
        let order: Vec<(i32, Taken)> = (0..8)
            .map(|_| q.recv_weighted().map(|(i, turn, _)| (i, turn)).unwrap())
            .collect();
        use Taken::*;
        assert_eq!(
            order,
            vec![
                (10, Ahead),
                (11, Ahead),
                (0, PlainTurn),
                (12, Ahead),
                (13, Ahead),
                (1, PlainTurn),
                (14, Ahead),
                (2, InOrder)
            ]
        );
        // Alone, a weighted item went ahead of no one.
        q.send_weighted(20, 5, false).unwrap();
        assert_eq!(q.recv_weighted(), Some((20, InOrder, false)));
    }

    #[test]
    fn take_more_takes_the_front_run_of_batchable_items_and_leaves_weighted_turns_alone() {
        let q = WaitQueue::new(16);
        // `send` is not batchable; the test sends the others with their flag.
        let send = |i: i32| q.send_weighted(i, 0, i % 2 == 0).unwrap();
        for i in [2, 4, 6, 7, 8] {
            send(i);
        }
        // Up to the first that is not batchable, at most `max`.
        assert_eq!(q.recv_weighted(), Some((2, Taken::InOrder, true)));
        assert_eq!(q.take_more(8), vec![4, 6]);
        assert_eq!(q.take_more(8), Vec::<i32>::new());
        q.batch_done();
        assert_eq!(q.recv(), Some(7));
        assert_eq!(q.take_more(0), Vec::<i32>::new());
        send(10);
        send(12);
        assert_eq!(q.take_more(1), vec![8]);
        // A weighted item waiting: nothing is taken past it.
        q.send_weighted(11, 3, false).unwrap();
        assert_eq!(q.take_more(8), Vec::<i32>::new());
        assert_eq!(q.recv(), Some(11));
        assert_eq!(q.take_more(8), vec![10, 12]);
    }
    use std::sync::Arc;

    #[test]
    fn fifo_bounded_and_drained_after_close() {
        let q = Arc::new(WaitQueue::new(2));
        q.send(1).unwrap();
        q.send(2).unwrap();
        // A third send waits until a receive makes room.
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.send(3));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!t.is_finished(), "send waits while the queue is full");
        assert_eq!(q.recv(), Some(1));
        t.join().unwrap().unwrap();
        q.close();
        assert_eq!(q.send(4), Err(4), "closed: refused, given back");
        assert_eq!(q.recv(), Some(2));
        assert_eq!(q.recv(), Some(3));
        assert_eq!(q.recv(), None);
    }

    #[test]
    fn oneshot_delivers_times_out_and_disconnects() {
        use crossbeam_channel::RecvTimeoutError;
        use std::time::Duration;
        let (tx, rx) = oneshot();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            tx.send(7);
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(7));
        t.join().unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Disconnected),
            "sent once, sender gone"
        );
        let (tx, rx) = oneshot::<u8>();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        drop(tx);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected),
            "dropped unsent"
        );
    }

    #[test]
    fn close_wakes_waiting_receivers() {
        let q: Arc<WaitQueue<u32>> = Arc::new(WaitQueue::new(4));
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || q.recv())
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(50));
        q.close();
        for w in waiters {
            assert_eq!(w.join().unwrap(), None);
        }
    }

    #[test]
    fn a_batchable_item_wakes_no_thread_while_enough_serve_batches() {
        let q = WaitQueue::new(16);
        q.set_batchers_max(1);
        // No one serves a batch: a batchable item wakes a thread.
        assert_eq!(q.send_weighted(1, 0, true), Ok(true));
        assert_eq!(q.recv_weighted(), Some((1, Taken::InOrder, true)));
        // Now one does: the next batchable one is left to it, plain and weighted ones
        // wake a thread as always.
        assert_eq!(q.send_weighted(2, 0, true), Ok(false));
        assert_eq!(q.send_weighted(3, 0, false), Ok(true));
        assert_eq!(q.send_weighted(4, 7, true), Ok(true));
        // The batch done, the thread back takes the weighted one first, then the rest in
        // order; taking a batchable item makes it serve a batch again.
        q.batch_done();
        assert_eq!(q.recv_weighted(), Some((4, Taken::Ahead, false)));
        assert_eq!(q.recv_weighted(), Some((2, Taken::InOrder, true)));
        assert_eq!(q.send_weighted(5, 0, true), Ok(false));
        q.batch_done();
        assert_eq!(q.recv_weighted(), Some((3, Taken::InOrder, false)));
        assert_eq!(q.recv_weighted(), Some((5, Taken::InOrder, true)));
        q.batch_done();
        // With room for two, a second thread is woken.
        q.set_batchers_max(2);
        assert_eq!(q.send_weighted(6, 0, true), Ok(true));
        assert_eq!(q.recv_weighted(), Some((6, Taken::InOrder, true)));
        assert_eq!(q.send_weighted(7, 0, true), Ok(true));
        assert_eq!(q.recv_weighted(), Some((7, Taken::InOrder, true)));
        assert_eq!(q.send_weighted(8, 0, true), Ok(false));
    }

    /// Threads serving like a service pool's (a batchable item and the batchable ones
    /// behind it, then `batch_done`), items of both kinds from a sender: every item is
    /// served, none left behind by a thread woken for none of them.
    #[test]
    fn held_batchable_items_are_never_left_behind() {
        const ITEMS: u32 = 20_000;
        for batchers in [1, 2] {
            let q: Arc<WaitQueue<u32>> = Arc::new(WaitQueue::new(64));
            q.set_batchers_max(batchers);
            let (done_tx, done_rx) = crossbeam_channel::unbounded();
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (q, done) = (q.clone(), done_tx.clone());
                    std::thread::spawn(move || {
                        while let Some((item, _, batching)) = q.recv_weighted() {
                            let mut got = vec![item];
                            if batching {
                                got.extend(q.take_more(3));
                            }
                            if item % 97 == 0 {
                                // A slow one now and then, as a disk read may be.
                                std::thread::yield_now();
                            }
                            for i in got {
                                done.send(i).unwrap();
                            }
                            if batching {
                                q.batch_done();
                            }
                        }
                    })
                })
                .collect();
            for i in 0..ITEMS {
                q.send_weighted(i, 0, i % 3 != 0).unwrap();
            }
            let mut seen = vec![false; ITEMS as usize];
            for _ in 0..ITEMS {
                let i = done_rx
                    .recv_timeout(std::time::Duration::from_secs(30))
                    .expect("every item is served (none left waiting for a thread)");
                assert!(!std::mem::replace(&mut seen[i as usize], true), "{i} twice");
            }
            q.close();
            for t in threads {
                t.join().unwrap();
            }
        }
    }
}
