//! Keeping a FUSE thread free: requests that may wait for a server leave the last free
//! FUSE thread for a pool of helper threads.
//!
//! The kernel hands requests to the FUSE threads (`MountOptions::threads`), each reading
//! `/dev/fuse` in turn. A request waiting for a server in recovery holds its thread, so with
//! every FUSE thread waiting, nothing else is read: a stat, or a read of a file whose
//! servers are up, waited behind them (Lustre's kernel client blocks only the caller). Here
//! a FUSE thread runs a request itself while another FUSE thread is free ([`Lanes`]); the
//! last free one hands its request to [`Helpers`] and goes back to reading, so there is
//! always a thread reading `/dev/fuse`. Requests are copied only on that path (a write's
//! data, a name): the common case stays zero-copy. A thread's lane is freed when its work
//! is done, just before its reply ([`leave`]), not after: the reply wakes the application,
//! which may run first, and a thread counted busy then would send requests to helpers for
//! nothing (measured: half the stat rate on two cores).
//!
//! Helpers start on demand, up to [`HELPER_THREADS_MAX`], and exit after
//! [`HELPER_IDLE_MS`] without work, so an idle mount holds none.

use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most helper threads (requests waiting for servers at once beyond this queue up). The
/// kernel keeps at most `max_background` (64) asynchronous requests outstanding; the rest
/// are synchronous, one per calling thread.
pub const HELPER_THREADS_MAX: usize = 256;
/// A helper with no work for this long exits.
pub const HELPER_IDLE_MS: u64 = 10_000;

thread_local! {
    /// A request handler runs on this thread: a panic here is caught, not fatal.
    static CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True while this thread runs a FUSE request handler, whose panic is contained: the
/// process's panic hook lets it unwind instead of stopping the process.
pub fn panic_contained() -> bool {
    CONTAINED.with(|c| c.get())
}

/// Runs FUSE request handler `f`; if it panics (a broken invariant in the client), the
/// request's reply, dropped unsent while unwinding, answers EIO, the panic is logged, and
/// the thread goes on serving. Locks the handlers take do not poison (parking_lot), so
/// other requests are not hurt by one that panicked holding one.
pub fn contain(f: impl FnOnce()) {
    CONTAINED.with(|c| c.set(true));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(false));
    if let Err(payload) = outcome {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        PANICS.fetch_add(1, Ordering::Relaxed);
        tracing::error!("a FUSE request handler panicked ({what}); answered EIO, serving on");
    }
}

/// FUSE request handlers that panicked (and were answered EIO) in this process.
pub static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Counts FUSE threads busy running a request themselves.
pub struct Lanes {
    busy: Arc<AtomicUsize>,
    threads: usize,
}

/// A FUSE thread running a request itself; frees its lane when dropped.
pub struct Lane(Arc<AtomicUsize>);

impl Drop for Lane {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    /// The lane the request running on this FUSE thread holds.
    static HELD: RefCell<Option<Lane>> = const { RefCell::new(None) };
}

/// Frees the lane of the request running on this thread, if it holds one: called when its
/// work is done, just before its reply is sent. Sending the reply wakes the application,
/// which on a small node often runs before this thread gets back to reading `/dev/fuse`;
/// a lane kept until then would count a thread as busy that has nothing left to wait for
/// (and needlessly send the next requests to helpers).
pub fn leave() {
    let lane = HELD.with(|h| h.borrow_mut().take());
    drop(lane);
}

impl Lanes {
    /// Lanes for `threads` FUSE threads.
    pub fn new(threads: usize) -> Lanes {
        Lanes {
            busy: Arc::new(AtomicUsize::new(0)),
            threads: threads.max(1),
        }
    }

    /// A lane if another FUSE thread stays free to read requests; `None` for the last one.
    pub fn enter(&self) -> Option<Lane> {
        let busy = self.busy.fetch_add(1, Ordering::AcqRel) + 1;
        if busy < self.threads {
            Some(Lane(Arc::clone(&self.busy)))
        } else {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            None
        }
    }

    /// Runs request handler `f` on this thread holding `lane` until it returns or calls
    /// [`leave`]; a panic in it is contained ([`contain`]).
    pub fn run_inline(lane: Lane, f: impl FnOnce()) {
        HELD.with(|h| *h.borrow_mut() = Some(lane));
        contain(f);
        leave();
    }
}

type Job<S> = Box<dyn FnOnce(&S) + Send>;

struct Queue<S> {
    jobs: VecDeque<Job<S>>,
    /// Helpers running.
    threads: usize,
    /// Helpers waiting for work.
    idle: usize,
    /// Most helpers running at once so far.
    threads_peak: usize,
    closing: bool,
}

/// Helper threads running jobs on a shared state `S`.
pub struct Helpers<S> {
    state: Arc<S>,
    queue: Mutex<Queue<S>>,
    work: Condvar,
    threads_max: usize,
    idle: Duration,
}

impl<S: Send + Sync + 'static> Helpers<S> {
    /// A pool over `state`, at most `threads_max` helpers, each exiting after `idle`
    /// without work.
    pub fn new(state: Arc<S>, threads_max: usize, idle: Duration) -> Arc<Helpers<S>> {
        Arc::new(Helpers {
            state,
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
                threads_peak: 0,
                closing: false,
            }),
            work: Condvar::new(),
            threads_max: threads_max.max(1),
            idle,
        })
    }

    /// Runs `job` on a helper: a waiting one, else a new one (up to the limit), else the
    /// first to finish its job.
    pub fn submit(self: &Arc<Self>, job: impl FnOnce(&S) + Send + 'static) {
        let mut q = self.queue.lock();
        q.jobs.push_back(Box::new(job));
        // Each waiting helper takes one job: start one for each job beyond them.
        if q.jobs.len() > q.idle && q.threads < self.threads_max {
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("fuse-helper".into())
                .spawn(move || me.serve());
            match spawned {
                Ok(_) => {
                    q.threads += 1;
                    q.threads_peak = q.threads_peak.max(q.threads);
                }
                // Out of threads: the running helpers take it in turn.
                Err(e) => tracing::warn!("cannot start a FUSE helper thread: {e}"),
            }
        }
        drop(q);
        self.work.notify_one();
    }

    fn serve(&self) {
        let mut q = self.queue.lock();
        loop {
            if let Some(job) = q.jobs.pop_front() {
                drop(q);
                contain(|| job(&self.state));
                q = self.queue.lock();
                continue;
            }
            if q.closing {
                break;
            }
            q.idle += 1;
            let waited = self.work.wait_for(&mut q, self.idle);
            q.idle -= 1;
            if waited.timed_out() && q.jobs.is_empty() {
                break;
            }
        }
        q.threads -= 1;
    }

    /// (helpers running, most ever running at once).
    pub fn threads(&self) -> (usize, usize) {
        let q = self.queue.lock();
        (q.threads, q.threads_peak)
    }

    /// Lets helpers exit once the queue is empty (at unmount), dropping their state.
    pub fn close(&self) {
        self.queue.lock().closing = true;
        self.work.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn the_last_free_lane_is_refused_and_freed_lanes_come_back() {
        let lanes = Lanes::new(3);
        let a = lanes.enter().expect("first");
        let b = lanes.enter().expect("second");
        assert!(lanes.enter().is_none(), "the third thread must stay free");
        drop(a);
        let c = lanes.enter().expect("a lane again");
        drop((b, c));
        // A lane held by a running request is freed by `leave`, before the request returns.
        let one = lanes.enter().expect("a lane");
        Lanes::run_inline(one, || {
            let _second = lanes.enter().expect("a second lane");
            assert!(lanes.enter().is_none());
            leave();
            assert!(
                lanes.enter().is_some(),
                "leave frees the running request's lane"
            );
        });
        assert!(
            Lanes::new(1).enter().is_none(),
            "one thread: never run inline"
        );
    }

    #[test]
    fn blocked_jobs_do_not_hold_up_others_and_idle_helpers_exit() {
        let pool = Helpers::new(Arc::new(7u32), 16, Duration::from_millis(200));
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let (done, finished) = mpsc::channel();
        // Eight jobs wait (as for a dead server)...
        for _ in 0..8 {
            let (gate, done) = (Arc::clone(&gate), done.clone());
            pool.submit(move |_| {
                gate.lock().recv().unwrap();
                done.send(0u32).unwrap();
            });
        }
        // ...and another still runs at once.
        let d = done.clone();
        pool.submit(move |s| d.send(*s).unwrap());
        assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok(7));
        for _ in 0..8 {
            release.send(()).unwrap();
        }
        for _ in 0..8 {
            assert_eq!(finished.recv_timeout(Duration::from_secs(10)), Ok(0));
        }
        let (_, peak) = pool.threads();
        assert!((9..=16).contains(&peak), "peak {peak}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.threads().0 > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "idle helpers must exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn jobs_beyond_the_limit_wait_for_a_helper() {
        let pool = Helpers::new(Arc::new(()), 2, Duration::from_secs(5));
        let (done, finished) = mpsc::channel();
        for i in 0..20u32 {
            let done = done.clone();
            pool.submit(move |_| done.send(i).unwrap());
        }
        let mut got: Vec<u32> = (0..20)
            .map(|_| finished.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        got.sort();
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        assert!(pool.threads().1 <= 2);
        pool.close();
    }
}
