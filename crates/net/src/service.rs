//! Service pools: per-CPU-partition bounded request queues, each drained by its own service
//! threads, and the request/reply types handlers see.

pub use crate::incoming::{Incoming, Outgoing};
pub(crate) use crate::incoming::{ReplySink, Requeue, TcpReplier};
use crate::queue::{Taken, WaitQueue};
use nacre_types::Status;
use nacre_wire::Header;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Instant;

/// One CPU partition a service runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePartition {
    /// The partition's index in the process's CPU partition table.
    pub cpt: usize,
    /// CPUs its threads are pinned to (empty: not pinned).
    pub cpus: Vec<usize>,
}

/// Settings of one service (MGS, MDS, OSS).
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Name, used for thread names and statistics.
    pub name: String,
    /// CPU partitions the service runs on: a thread pool and a queue each.
    pub partitions: Vec<ServicePartition>,
    /// Threads started per partition (Lustre's `threads_min`).
    pub threads_min: usize,
    /// Most threads per partition, started while every thread is busy and requests wait
    /// (Lustre's `threads_max`).
    pub threads_max: usize,
    /// Requests queued per partition before readers block (back-pressure to the sockets).
    pub queue_depth: usize,
}

impl ServiceConfig {
    /// `partitions` partitions of fixed `threads` threads each, not pinned.
    pub fn unpinned(name: &str, partitions: usize, threads: usize, queue_depth: usize) -> Self {
        ServiceConfig {
            name: name.into(),
            partitions: (0..partitions.max(1))
                .map(|cpt| ServicePartition {
                    cpt,
                    cpus: Vec::new(),
                })
                .collect(),
            threads_min: threads.max(1),
            threads_max: threads.max(1),
            queue_depth,
        }
    }
}

/// How a request arriving on a connection of CPU partition `cpt` picks the partition that
/// serves it (Lustre's `portal_rotor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotor {
    /// The connection's (its network interface's) partition.
    Off,
    /// Round-robin over the service's partitions, request by request.
    On,
    /// By the object or FID the request works on, so one object's requests stay on one
    /// partition (falls back to the connection's partition for requests without one).
    Hash,
}

impl std::str::FromStr for Rotor {
    type Err = String;
    fn from_str(s: &str) -> Result<Rotor, String> {
        match s.trim() {
            "off" | "0" => Ok(Rotor::Off),
            "on" | "1" => Ok(Rotor::On),
            "hash" | "3" => Ok(Rotor::Hash),
            other => Err(format!("portal_rotor '{other}': use off, on or hash")),
        }
    }
}

impl std::fmt::Display for Rotor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rotor::Off => "off",
            Rotor::On => "on",
            Rotor::Hash => "hash",
        })
    }
}

/// Serves requests of one service.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request; called concurrently from the service's threads.
    fn handle(&self, req: &Incoming) -> Outgoing;

    /// A key naming what `req` works on (an object, a FID), for the hash rotor; None if the
    /// request has none. Called on the connection's reader thread: keep it cheap.
    fn affinity(&self, _req: &Incoming) -> Option<u64> {
        None
    }

    /// What the request is, for naming fault points (`mds.create`, `oss.write`): the
    /// service then offers `NAME.drop_request`, `NAME.drop_reply` and
    /// `NAME.after_commit_before_reply`. Only asked while a fault point is armed.
    fn fault_name(&self, _req: &Incoming) -> Option<String> {
        None
    }

    /// Offered every request first: a handler that answers it later (a long poll) keeps it
    /// and returns `None`, then calls [`Incoming::respond`] from any thread; `Some` hands it
    /// back to be handled now.
    fn park(&self, req: Incoming) -> Option<Incoming> {
        Some(req)
    }

    /// The request's QoS weight (0: none): weighted requests are taken from the service
    /// queue before plain ones (up to their weight in a row while plain ones wait). Called
    /// on the connection's reader thread: keep it cheap.
    fn weight(&self, _req: &Incoming) -> u32 {
        0
    }

    /// True if `req` may be served together with others of its kind
    /// ([`Handler::handle_batch`]): a service thread that takes it also takes the requests
    /// queued right behind it for which this is true, up to the pool's `batch_max`, and
    /// while `batch_threads_max` threads serve such batches it wakes no other thread. Say
    /// it of short requests only: one that keeps its thread long (a large read) holds up
    /// the batch served with it. Called once per request, on the connection's reader
    /// thread, before the request is queued: keep it cheap.
    fn batchable(&self, _req: &Incoming) -> bool {
        false
    }

    /// True if the request `header` announces should be handed to this handler while its
    /// bulk still arrives ([`Incoming::stream`], [`crate::stream`]): for a handler that
    /// can start on the first part (an OST writing a large write to its disk). Called on
    /// the connection's reader thread once the body is read: keep it cheap.
    fn streams(&self, _header: &Header) -> bool {
        false
    }

    /// Handles several requests [`Handler::batchable`] said may go together, in one turn
    /// of one thread (e.g. their disk reads submitted at once): an outgoing reply each, in
    /// order. By default, one by one.
    fn handle_batch(&self, reqs: &[&Incoming]) -> Vec<Outgoing> {
        reqs.iter().map(|r| self.handle(r)).collect()
    }
}

/// Replies going back on one connection: the connection, its peer, and the replies with
/// their sealed headers.
type LinkReplies = (Arc<TcpReplier>, String, Vec<(Header, Outgoing)>);

/// Most requests one service thread serves in one batch ([`Handler::handle_batch`]) by
/// default: the rest of the queue is left to the other threads (`{service}.batch_max`).
pub const BATCH_REQUESTS_DEFAULT: usize = 16;
/// The most `batch_max` may be set to.
pub const BATCH_REQUESTS_MAX: usize = 64;

/// Fewest threads of a partition serving batches at once by default (`batch_threads_max`).
pub const BATCH_THREADS_MIN: usize = 2;

/// A partition's default `batch_threads_max`: a thread per CPU it runs on (an unpinned
/// partition: [`BATCH_THREADS_MIN`]), at least [`BATCH_THREADS_MIN`]. A batchable request
/// that arrives while that many threads serve batches wakes no other thread: it waits for
/// the next batch of one of them. Measured on 2 cores (docs/tuning.md): random 4 KiB reads
/// at 4x32 in flight took 39-48 µs of CPU each with 1 or 2, 58 with no limit (every
/// request woke one of up to 32 threads, which served it alone).
fn batch_threads_default(spec: &ServicePartition) -> usize {
    spec.cpus.len().max(BATCH_THREADS_MIN)
}

/// Serves `reqs` (more than one, all batchable, taken together from the queue) with one
/// call of [`Handler::handle_batch`]: each offered to `park` first, as alone. `handled` is
/// called once per request, before its reply goes.
fn serve_batch(handler: &dyn Handler, reqs: Vec<Incoming>, handled: &dyn Fn()) {
    let mut now = Vec::with_capacity(reqs.len());
    for req in reqs {
        match handler.park(req) {
            Some(req) => now.push(req),
            None => handled(),
        }
    }
    let outs = {
        let refs: Vec<&Incoming> = now.iter().collect();
        handler.handle_batch(&refs)
    };
    assert_eq!(outs.len(), now.len(), "a reply per request of a batch");
    let mut alone = Vec::new();
    // Replies going back on one TCP connection are written together: one system call,
    // one wake-up of the client's reader for all of them.
    let mut by_link: Vec<LinkReplies> = Vec::new();
    for (req, out) in now.into_iter().zip(outs) {
        handled();
        let ReplySink::Tcp(replier) = &req.reply_to else {
            alone.push((req, out));
            continue;
        };
        let header = req.reply_header(&out);
        match by_link.iter_mut().find(|(r, _, _)| Arc::ptr_eq(r, replier)) {
            Some((_, _, frames)) => frames.push((header, out)),
            None => by_link.push((replier.clone(), req.peer.clone(), vec![(header, out)])),
        }
    }
    for (replier, peer, frames) in by_link {
        replier.send_many(&peer, &frames);
    }
    for (req, out) in alone {
        req.reply(out);
    }
}

/// Runs `req` through `handler`, calls `handled` (the counters: a client that has its
/// reply sees them include its request), and replies, passing the request's fault points
/// when one is armed (`net.drop_request`, `net.drop_reply` for any request; the handler's
/// named ones).
fn serve_one(handler: &dyn Handler, req: Incoming, handled: impl FnOnce()) {
    let Some(req) = handler.park(req) else {
        handled();
        return;
    };
    if !crate::fault::armed_any() {
        let out = handler.handle(&req);
        handled();
        req.reply(out);
        return;
    }
    let name = handler.fault_name(&req);
    let hit = |what: &str| {
        crate::fault::hit(&format!("net.{what}"))
            || name
                .as_ref()
                .is_some_and(|n| crate::fault::hit(&format!("{n}.{what}")))
    };
    if hit("drop_request") {
        handled();
        return; // as if lost on the way: no reply, the client times out and resends
    }
    // Answered as a server of a release that does not know the request (its body does
    // not decode: `EPROTO`, empty body), for the tests of a client's way back to what
    // older servers take.
    if hit("unknown") {
        handled();
        req.reply(Outgoing::error(Status::Proto));
        return;
    }
    // A broken invariant in a service thread, for the test of the panic policy: the process
    // must stop at once rather than serve on half alive.
    assert!(
        !hit("panic"),
        "fault point {}.panic",
        name.as_deref().unwrap_or("net")
    );
    let out = handler.handle(&req);
    handled();
    if let Some(n) = &name {
        crate::fault::point(&format!("{n}.after_commit_before_reply"));
    }
    if hit("drop_reply") {
        return;
    }
    req.reply(out);
}

/// Live counters of one CPU partition of a service (Lustre's `req_qdepth`, `req_active`,
/// `req_waittime`, `threads_started`), read by `get_param` and `/metrics`.
#[derive(Debug, Default)]
pub struct PartitionStats {
    /// Service threads started.
    pub threads: AtomicU64,
    /// Threads handling a request right now.
    pub busy: AtomicU64,
    /// Requests waiting in the queue right now.
    pub queued: AtomicU64,
    /// Most requests ever waiting at once.
    pub queued_max: AtomicU64,
    /// Requests handled by this partition's threads.
    pub requests: AtomicU64,
    /// Nanoseconds threads spent handling requests (thread use = rate / threads).
    pub busy_ns: AtomicU64,
    /// Nanoseconds requests waited in the queue for a thread.
    pub wait_ns: AtomicU64,
    /// Weighted requests (QoS weights) taken before plain ones that waited longer.
    pub weighted_ahead: AtomicU64,
    /// Plain requests taken while weighted ones waited: one after each run of their weight
    /// (so that plain requests never starve).
    pub plain_turns: AtomicU64,
    /// Turns in which a thread served several requests at once ([`Handler::handle_batch`]).
    pub batches: AtomicU64,
    /// Requests served in those turns.
    pub batched: AtomicU64,
}

impl PartitionStats {
    /// Clears the cumulative counters (not the live gauges).
    pub fn clear(&self) {
        self.queued_max
            .store(self.queued.load(Ordering::Relaxed), Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        self.busy_ns.store(0, Ordering::Relaxed);
        self.wait_ns.store(0, Ordering::Relaxed);
        self.weighted_ahead.store(0, Ordering::Relaxed);
        self.plain_turns.store(0, Ordering::Relaxed);
        self.batches.store(0, Ordering::Relaxed);
        self.batched.store(0, Ordering::Relaxed);
    }
}

type Queued = (Incoming, Instant);

struct Part {
    spec: ServicePartition,
    queue: Arc<WaitQueue<Queued>>,
}

/// A pool of service threads for one service, one bounded queue per CPU partition.
pub struct ServicePool {
    config: ServiceConfig,
    handler: Arc<dyn Handler>,
    parts: RwLock<Vec<Part>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    partitions: Vec<Arc<PartitionStats>>,
    threads_min: AtomicUsize,
    threads_max: AtomicUsize,
    /// Most requests a thread serves in one batch (1: none batched).
    batch_max: Arc<AtomicUsize>,
    rr: AtomicUsize,
    me: Weak<ServicePool>,
    /// Requests handled, for statistics.
    pub requests_handled: AtomicU64,
    /// Of those, requests handled inline in the caller's thread (in-process clients).
    pub requests_inline: AtomicU64,
}

/// Most threads one partition of a service may run.
pub const THREADS_PER_PARTITION_MAX: usize = 512;

impl ServicePool {
    /// Starts `threads_min` threads per partition.
    pub fn start(config: ServiceConfig, handler: Arc<dyn Handler>) -> Arc<ServicePool> {
        assert!(!config.partitions.is_empty(), "a service needs a partition");
        assert!(config.threads_min > 0 && config.threads_min <= config.threads_max);
        let pool = Arc::new_cyclic(|me| ServicePool {
            partitions: config
                .partitions
                .iter()
                .map(|_| Arc::new(PartitionStats::default()))
                .collect(),
            parts: RwLock::new(
                config
                    .partitions
                    .iter()
                    .map(|spec| Part {
                        spec: spec.clone(),
                        queue: {
                            let q = Arc::new(WaitQueue::new(config.queue_depth));
                            q.set_batchers_max(batch_threads_default(spec));
                            q
                        },
                    })
                    .collect(),
            ),
            threads_min: AtomicUsize::new(config.threads_min),
            threads_max: AtomicUsize::new(config.threads_max.min(THREADS_PER_PARTITION_MAX)),
            batch_max: Arc::new(AtomicUsize::new(BATCH_REQUESTS_DEFAULT)),
            config,
            handler,
            threads: Mutex::new(Vec::new()),
            rr: AtomicUsize::new(0),
            me: me.clone(),
            requests_handled: AtomicU64::new(0),
            requests_inline: AtomicU64::new(0),
        });
        pool.fill_to_min();
        pool
    }

    /// Starts threads until every partition runs at least `threads_min`.
    fn fill_to_min(&self) {
        let min = self.threads_min.load(Ordering::Relaxed);
        for i in 0..self.partitions.len() {
            while self.partitions[i].threads.load(Ordering::Relaxed) < min as u64 {
                if !self.spawn_thread(i) {
                    break;
                }
            }
        }
    }

    /// Starts one more thread on partition index `i`, unless it is at `threads_max`.
    fn spawn_thread(&self, i: usize) -> bool {
        let stats = self.partitions[i].clone();
        let max = self.threads_max.load(Ordering::Relaxed) as u64;
        let claimed = stats
            .threads
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            });
        let Ok(n) = claimed else { return false };
        let (rx, spec) = {
            let parts = self.parts.read().expect("parts");
            let Some(part) = parts.get(i) else {
                stats.threads.fetch_sub(1, Ordering::Relaxed);
                return false;
            };
            (part.queue.clone(), part.spec.clone())
        };
        let handler = self.handler.clone();
        let weak = self.me.clone();
        let batch_max = self.batch_max.clone();
        let name = format!("{}_{:02}_{n:03}", self.config.name, spec.cpt);
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            nacre_types::buf::set_thread_partition(Some(spec.cpt));
            if !spec.cpus.is_empty() {
                if let Err(e) = nacre_cpt::pin_current_thread(&spec.cpus) {
                    tracing::warn!("cannot pin to CPUs {:?}: {e}", spec.cpus);
                }
            }
            while let Some(((req, queued_at), turn, batching)) = rx.recv_weighted() {
                match turn {
                    Taken::Ahead => stats.weighted_ahead.fetch_add(1, Ordering::Relaxed),
                    Taken::PlainTurn => stats.plain_turns.fetch_add(1, Ordering::Relaxed),
                    Taken::InOrder => 0,
                };
                let started = Instant::now();
                // Requests of a kind served together queued right behind: taken now, so
                // one turn of this thread serves them all (none while a fault point is
                // armed: those act on requests one by one).
                let max = batch_max.load(Ordering::Relaxed).saturating_sub(1);
                let more = match max > 0 && batching && !crate::fault::armed_any() {
                    true => rx.take_more(max),
                    false => Vec::new(),
                };
                stats
                    .queued
                    .fetch_sub(1 + more.len() as u64, Ordering::Relaxed);
                stats.busy.fetch_add(1, Ordering::Relaxed);
                let waited: u64 = std::iter::once(queued_at)
                    .chain(more.iter().map(|(_, at)| *at))
                    .map(|at| started.duration_since(at).as_nanos() as u64)
                    .sum();
                stats.wait_ns.fetch_add(waited, Ordering::Relaxed);
                // Counted as each request is handled; the thread is idle again once all
                // of them are.
                let (n, done) = (1 + more.len(), std::cell::Cell::new(0));
                let handled = || {
                    done.set(done.get() + 1);
                    if done.get() == n {
                        let busy = started.elapsed().as_nanos() as u64;
                        stats.busy_ns.fetch_add(busy, Ordering::Relaxed);
                        stats.busy.fetch_sub(1, Ordering::Relaxed);
                    }
                    stats.requests.fetch_add(1, Ordering::Relaxed);
                    if let Some(pool) = weak.upgrade() {
                        pool.requests_handled.fetch_add(1, Ordering::Relaxed);
                    }
                };
                if more.is_empty() {
                    serve_one(&*handler, req, handled);
                } else {
                    let reqs: Vec<Incoming> = std::iter::once(req)
                        .chain(more.into_iter().map(|(r, _)| r))
                        .collect();
                    stats.batches.fetch_add(1, Ordering::Relaxed);
                    stats.batched.fetch_add(n as u64, Ordering::Relaxed);
                    serve_batch(&*handler, reqs, &handled);
                }
                if batching {
                    rx.batch_done();
                }
            }
        });
        match spawned {
            Ok(t) => {
                self.threads.lock().expect("threads").push(t);
                true
            }
            Err(e) => {
                self.partitions[i].threads.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!("cannot start a {} thread: {e}", self.config.name);
                false
            }
        }
    }

    /// The partition index serving a request that arrived on CPT `cpt`, for `rotor` with
    /// affinity key `key`.
    pub(crate) fn choose(&self, rotor: Rotor, cpt: usize, req: &Incoming) -> usize {
        let n = self.partitions.len();
        let of_cpt = |cpt: usize| {
            self.config
                .partitions
                .iter()
                .position(|p| p.cpt == cpt)
                .unwrap_or(cpt % n)
        };
        match rotor {
            Rotor::Off => of_cpt(cpt),
            Rotor::On => self.rr.fetch_add(1, Ordering::Relaxed) % n,
            Rotor::Hash => match self.handler.affinity(req) {
                // Fibonacci hashing spreads sequential object ids.
                Some(k) => (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % n,
                None => of_cpt(cpt),
            },
        }
    }

    /// The handler serving the pool's requests.
    pub(crate) fn handler(&self) -> &Arc<dyn Handler> {
        &self.handler
    }

    /// The handler's QoS weight for `req` ([`Handler::weight`]).
    pub(crate) fn weight_of(&self, req: &Incoming) -> u32 {
        self.handler.weight(req)
    }

    /// Queues a request on partition index `i`; blocks while that queue is full. Starts
    /// another thread there if all are busy and requests wait.
    pub(crate) fn dispatch(&self, mut req: Incoming, i: usize) {
        req.home = Some((self.me.clone() as Weak<dyn Requeue>, i));
        let parts = self.parts.read().expect("parts");
        if parts.is_empty() {
            drop(parts);
            req.reply(Outgoing::error(Status::NoSys));
            return;
        }
        let i = i % parts.len();
        let tx = parts[i].queue.clone();
        drop(parts);
        let stats = &self.partitions[i];
        let depth = stats.queued.fetch_add(1, Ordering::Relaxed) + 1;
        stats.queued_max.fetch_max(depth, Ordering::Relaxed);
        let weight = req.weight;
        let batchable = self.handler.batchable(&req);
        let woke = match tx.send_weighted((req, Instant::now()), weight, batchable) {
            Ok(woke) => woke,
            Err((req, _)) => {
                stats.queued.fetch_sub(1, Ordering::Relaxed);
                req.reply(Outgoing::error(Status::NoSys));
                return;
            }
        };
        // More requests waiting than idle threads: start one more (up to threads_max);
        // not for a request left to the threads serving batches.
        let threads = stats.threads.load(Ordering::Relaxed);
        let idle = threads.saturating_sub(stats.busy.load(Ordering::Relaxed));
        if woke && stats.queued.load(Ordering::Relaxed) > idle {
            self.spawn_thread(i);
        }
    }

    /// Threads started per partition.
    pub fn threads_min(&self) -> usize {
        self.threads_min.load(Ordering::Relaxed)
    }

    /// Most threads per partition.
    pub fn threads_max(&self) -> usize {
        self.threads_max.load(Ordering::Relaxed)
    }

    /// Sets `threads_min` (starting threads now if needed); it may not exceed `threads_max`.
    pub fn set_threads_min(&self, n: usize) -> Result<(), String> {
        if n == 0 || n > self.threads_max() {
            return Err(format!(
                "threads_min must be 1..={} (threads_max)",
                self.threads_max()
            ));
        }
        self.threads_min.store(n, Ordering::Relaxed);
        self.fill_to_min();
        Ok(())
    }

    /// Most requests a thread serves in one batch ([`Handler::handle_batch`]).
    pub fn batch_max(&self) -> usize {
        self.batch_max.load(Ordering::Relaxed)
    }

    /// Most threads of a partition serving batches at once (the largest over partitions).
    pub fn batch_threads_max(&self) -> usize {
        let parts = self.parts.read().expect("parts");
        parts
            .iter()
            .map(|p| p.queue.batchers_max())
            .max()
            .unwrap_or(0)
    }

    /// Sets `batch_threads_max` for every partition (1..=threads_max).
    pub fn set_batch_threads_max(&self, n: usize) -> Result<(), String> {
        if n == 0 || n > THREADS_PER_PARTITION_MAX {
            return Err(format!(
                "batch_threads_max must be 1..={THREADS_PER_PARTITION_MAX}"
            ));
        }
        for p in self.parts.read().expect("parts").iter() {
            p.queue.set_batchers_max(n);
        }
        Ok(())
    }

    /// Sets `batch_max` (1: every request alone).
    pub fn set_batch_max(&self, n: usize) -> Result<(), String> {
        if n == 0 || n > BATCH_REQUESTS_MAX {
            return Err(format!("batch_max must be 1..={BATCH_REQUESTS_MAX}"));
        }
        self.batch_max.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// Sets `threads_max`; running threads beyond it keep running until the service stops.
    pub fn set_threads_max(&self, n: usize) -> Result<(), String> {
        if n < self.threads_min() || n > THREADS_PER_PARTITION_MAX {
            return Err(format!(
                "threads_max must be {}..={THREADS_PER_PARTITION_MAX} (at least threads_min)",
                self.threads_min()
            ));
        }
        self.threads_max.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// Counters of each CPU partition, in partition order.
    pub fn partition_stats(&self) -> &[Arc<PartitionStats>] {
        &self.partitions
    }

    /// Handles a request in the calling thread (in-process requests marked inline).
    pub(crate) fn run_inline(&self, mut req: Incoming) {
        req.home = Some((self.me.clone() as Weak<dyn Requeue>, 0));
        serve_one(&*self.handler, req, || {
            self.requests_handled.fetch_add(1, Ordering::Relaxed);
            self.requests_inline.fetch_add(1, Ordering::Relaxed);
        });
    }

    /// True once [`ServicePool::stop`] ran: no partition takes requests.
    pub fn is_stopped(&self) -> bool {
        self.parts.read().expect("parts").is_empty()
    }

    /// Stops accepting requests and joins the threads once queued requests are done.
    pub fn stop(&self) {
        for p in self.parts.write().expect("parts").drain(..) {
            p.queue.close();
        }
        let threads = std::mem::take(&mut *self.threads.lock().expect("threads"));
        for t in threads {
            let _ = t.join();
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }
}

impl Requeue for ServicePool {
    fn dispatch(&self, req: Incoming, partition: usize) {
        ServicePool::dispatch(self, req, partition);
    }
}
