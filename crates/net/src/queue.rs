//! A bounded blocking FIFO for service requests: a mutex, a deque and two condition variables.
//!
//! Service threads wait on it without spinning: a spinning channel's idle receivers
//! (crossbeam's backoff yields the CPU in a loop before parking) cost a fifth of both cores
//! in `perf` under a small-RPC load on this 2-core machine, CPU the busy threads needed.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

struct State<T> {
    items: VecDeque<T>,
    /// Weighted items (QoS weights) and their weights.
    weighted: VecDeque<(T, u32)>,
    /// Weighted items taken in a row while plain ones waited.
    run: u32,
    closed: bool,
}

/// A bounded multi-producer, multi-consumer queue that blocks instead of spinning.
pub(crate) struct WaitQueue<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
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
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    /// Appends `item`, waiting while the queue is full; gives it back if the queue is closed.
    #[cfg(test)]
    pub(crate) fn send(&self, item: T) -> Result<(), T> {
        self.send_weighted(item, 0)
    }

    /// Appends `item` of `weight` (0: none), waiting while the queue is full. Weighted
    /// items are taken before plain ones: up to `weight` in a row while plain ones wait,
    /// then one plain one (so plain ones never starve).
    pub(crate) fn send_weighted(&self, item: T, weight: u32) -> Result<(), T> {
        let mut s = self.state.lock().expect("queue");
        while s.items.len() + s.weighted.len() >= self.capacity && !s.closed {
            s = self.not_full.wait(s).expect("queue");
        }
        if s.closed {
            return Err(item);
        }
        if weight == 0 {
            s.items.push_back(item);
        } else {
            s.weighted.push_back((item, weight));
        }
        drop(s);
        self.not_empty.notify_one();
        Ok(())
    }

    /// The next item (see [`WaitQueue::send_weighted`]), waiting while the queue is empty;
    /// None once it is closed and drained.
    #[cfg(test)]
    pub(crate) fn recv(&self) -> Option<T> {
        self.recv_weighted().map(|(item, _)| item)
    }

    /// [`WaitQueue::recv`], and whether the item went ahead of plain items that waited.
    pub(crate) fn recv_weighted(&self) -> Option<(T, bool)> {
        let mut s = self.state.lock().expect("queue");
        loop {
            let weighted_first = s
                .weighted
                .front()
                .is_some_and(|(_, w)| s.items.is_empty() || s.run < *w);
            let taken = if weighted_first {
                let ahead = !s.items.is_empty();
                s.run = if ahead { s.run + 1 } else { 0 };
                s.weighted.pop_front().map(|(item, _)| (item, ahead))
            } else {
                s.run = 0;
                s.items.pop_front().map(|item| (item, false))
            };
            if let Some(t) = taken {
                drop(s);
                self.not_full.notify_one();
                return Some(t);
            }
            if s.closed {
                return None;
            }
            s = self.not_empty.wait(s).expect("queue");
        }
    }

    /// Takes, without waiting, up to `max` plain items from the front of the queue for as
    /// long as `fits` accepts them (none while weighted items wait: those keep their turn).
    pub(crate) fn take_more(&self, max: usize, fits: impl Fn(&T) -> bool) -> Vec<T> {
        let mut s = self.state.lock().expect("queue");
        let mut taken = Vec::new();
        if !s.weighted.is_empty() {
            return taken;
        }
        while taken.len() < max && s.items.front().is_some_and(&fits) {
            taken.extend(s.items.pop_front());
        }
        drop(s);
        for _ in 0..taken.len() {
            self.not_full.notify_one();
        }
        taken
    }

    /// Refuses further items and wakes every waiter; queued items are still received.
    pub(crate) fn close(&self) {
        self.state.lock().expect("queue").closed = true;
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
        self.0.state.lock().expect("oneshot").0 = Some(value);
        self.0.ready.notify_one();
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        self.0.state.lock().expect("oneshot").1 = true;
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
        let mut s = self.0.state.lock().expect("oneshot");
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
            s = self
                .0
                .ready
                .wait_timeout(s, deadline - now)
                .expect("oneshot")
                .0;
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
            q.send_weighted(i, 0).unwrap();
        }
        for i in 10..15 {
            q.send_weighted(i, 2).unwrap();
        }
        let order: Vec<(i32, bool)> = (0..8).map(|_| q.recv_weighted().unwrap()).collect();
        assert_eq!(
            order,
            vec![
                (10, true),
                (11, true),
                (0, false),
                (12, true),
                (13, true),
                (1, false),
                (14, true),
                (2, false)
            ]
        );
        // Alone, a weighted item went ahead of no one.
        q.send_weighted(20, 5).unwrap();
        assert_eq!(q.recv_weighted(), Some((20, false)));
    }

    #[test]
    fn take_more_takes_the_front_run_that_fits_and_leaves_weighted_turns_alone() {
        let q = WaitQueue::new(16);
        for i in [2, 4, 6, 7, 8] {
            q.send(i).unwrap();
        }
        // Up to the first that does not fit, at most `max`.
        assert_eq!(q.take_more(8, |i| i % 2 == 0), vec![2, 4, 6]);
        assert_eq!(q.take_more(8, |i| i % 2 == 0), Vec::<i32>::new());
        assert_eq!(q.recv(), Some(7));
        assert_eq!(q.take_more(0, |_| true), Vec::<i32>::new());
        q.send(10).unwrap();
        assert_eq!(q.take_more(1, |_| true), vec![8]);
        // A weighted item waiting: nothing is taken past it.
        q.send_weighted(11, 3).unwrap();
        assert_eq!(q.take_more(8, |_| true), Vec::<i32>::new());
        assert_eq!(q.recv(), Some(11));
        assert_eq!(q.take_more(8, |_| true), vec![10]);
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
}
