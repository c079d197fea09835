//! Service pools: per-CPU-partition bounded request queues, each drained by its own service
//! threads, and the request/reply types handlers see.

use crate::frame::write_frame;
use crate::{NetError, Reply};
use crossbeam_channel::{bounded, Receiver, Sender};
use nacre_types::{AlignedBuf, Status};
use nacre_wire::header::{FLAG_BULK_CHECKSUM, FLAG_REPLY};
use nacre_wire::Header;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

/// Settings of one service (MGS, MDS, OSS).
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Name, used for thread names and statistics.
    pub name: String,
    /// CPU partitions the service runs on.
    pub partitions: usize,
    /// Service threads per partition.
    pub threads_per_partition: usize,
    /// Requests queued per partition before readers block (back-pressure to the sockets).
    pub queue_depth: usize,
}

/// A request as a service thread sees it.
pub struct Incoming {
    /// Header.
    pub header: Header,
    /// Encoded body.
    pub body: Vec<u8>,
    /// Bulk data sent with the request.
    pub bulk: Option<Arc<AlignedBuf>>,
    /// Peer description for logs (address or "local").
    pub peer: String,
    pub(crate) reply_to: ReplySink,
}

/// What a handler returns.
pub struct Outgoing {
    /// Status.
    pub status: Status,
    /// Encoded reply body (empty for errors).
    pub body: Vec<u8>,
    /// Bulk data (reads).
    pub bulk: Option<AlignedBuf>,
}

impl Outgoing {
    /// An error reply.
    pub fn error(status: Status) -> Outgoing {
        Outgoing {
            status,
            body: Vec::new(),
            bulk: None,
        }
    }

    /// A success reply with an encoded body.
    pub fn ok(body: Vec<u8>) -> Outgoing {
        Outgoing {
            status: Status::Ok,
            body,
            bulk: None,
        }
    }
}

/// Serves requests of one service.
pub trait Handler: Send + Sync + 'static {
    /// Handles one request; called concurrently from the service's threads.
    fn handle(&self, req: &Incoming) -> Outgoing;
}

pub(crate) enum ReplySink {
    Tcp(Arc<Mutex<TcpStream>>),
    Local(Sender<Result<Reply, NetError>>),
}

impl Incoming {
    pub(crate) fn reply(self, out: Outgoing) {
        let mut header = self.header;
        header.flags = FLAG_REPLY | (self.header.flags & FLAG_BULK_CHECKSUM);
        header.status = out.status.code();
        match self.reply_to {
            ReplySink::Local(tx) => {
                header.body_len = out.body.len() as u32;
                header.bulk_len = out.bulk.as_ref().map_or(0, |b| b.len() as u32);
                let _ = tx.send(Ok(Reply {
                    header,
                    body: out.body,
                    bulk: out.bulk,
                }));
            }
            ReplySink::Tcp(writer) => {
                let checksum = self.header.flags & FLAG_BULK_CHECKSUM != 0;
                header.seal(&out.body, out.bulk.as_deref(), checksum);
                let mut w = writer.lock().expect("reply writer");
                if let Err(e) = write_frame(&mut *w, &header, &out.body, out.bulk.as_deref()) {
                    tracing::debug!("reply to {} lost: {e}", self.peer);
                }
            }
        }
    }
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
}

impl PartitionStats {
    /// Clears the cumulative counters (not the live gauges).
    pub fn clear(&self) {
        self.queued_max
            .store(self.queued.load(Ordering::Relaxed), Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        self.busy_ns.store(0, Ordering::Relaxed);
        self.wait_ns.store(0, Ordering::Relaxed);
    }
}

/// A pool of service threads for one service, one bounded queue per CPU partition.
pub struct ServicePool {
    config: ServiceConfig,
    handler: Arc<dyn Handler>,
    queues: RwLock<Vec<Sender<(Incoming, Instant)>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    partitions: Vec<Arc<PartitionStats>>,
    /// Requests handled, for statistics.
    pub requests_handled: AtomicU64,
    /// Of those, requests handled inline in the caller's thread (in-process clients).
    pub requests_inline: AtomicU64,
}

impl ServicePool {
    /// Starts the service threads.
    pub fn start(config: ServiceConfig, handler: Arc<dyn Handler>) -> Arc<ServicePool> {
        assert!(config.partitions > 0 && config.threads_per_partition > 0);
        let partitions: Vec<Arc<PartitionStats>> = (0..config.partitions)
            .map(|_| Arc::new(PartitionStats::default()))
            .collect();
        let pool = Arc::new(ServicePool {
            config: config.clone(),
            handler: handler.clone(),
            queues: RwLock::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            partitions: partitions.clone(),
            requests_handled: AtomicU64::new(0),
            requests_inline: AtomicU64::new(0),
        });
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for (cpt, stats) in partitions.iter().enumerate() {
            let (tx, rx) = bounded::<(Incoming, Instant)>(config.queue_depth);
            queues.push(tx);
            for n in 0..config.threads_per_partition {
                let rx: Receiver<(Incoming, Instant)> = rx.clone();
                let handler = handler.clone();
                let weak = Arc::downgrade(&pool);
                let counters = stats.clone();
                let name = format!("{}_{cpt:02}_{n:03}", config.name);
                let t = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || {
                        let stats = counters;
                        for (req, queued_at) in rx.iter() {
                            let started = Instant::now();
                            stats.queued.fetch_sub(1, Ordering::Relaxed);
                            stats.busy.fetch_add(1, Ordering::Relaxed);
                            let waited = started.duration_since(queued_at).as_nanos() as u64;
                            stats.wait_ns.fetch_add(waited, Ordering::Relaxed);
                            let out = handler.handle(&req);
                            req.reply(out);
                            let busy = started.elapsed().as_nanos() as u64;
                            stats.busy_ns.fetch_add(busy, Ordering::Relaxed);
                            stats.busy.fetch_sub(1, Ordering::Relaxed);
                            stats.requests.fetch_add(1, Ordering::Relaxed);
                            if let Some(pool) = weak.upgrade() {
                                pool.requests_handled.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                    .expect("spawn service thread");
                stats.threads.fetch_add(1, Ordering::Relaxed);
                threads.push(t);
            }
        }
        *pool.queues.write().expect("queues") = queues;
        *pool.threads.lock().expect("threads") = threads;
        pool
    }

    /// Queues a request on partition `cpt_hint % partitions`; blocks while that queue is full.
    pub(crate) fn dispatch(&self, req: Incoming, cpt_hint: usize) {
        let queues = self.queues.read().expect("queues");
        if queues.is_empty() {
            req.reply(Outgoing::error(Status::NoSys));
            return;
        }
        let cpt = cpt_hint % queues.len();
        let tx = queues[cpt].clone();
        drop(queues);
        let stats = &self.partitions[cpt];
        let depth = stats.queued.fetch_add(1, Ordering::Relaxed) + 1;
        stats.queued_max.fetch_max(depth, Ordering::Relaxed);
        if let Err(e) = tx.send((req, Instant::now())) {
            stats.queued.fetch_sub(1, Ordering::Relaxed);
            e.into_inner().0.reply(Outgoing::error(Status::NoSys));
        }
    }

    /// Counters of each CPU partition, in partition order.
    pub fn partition_stats(&self) -> &[Arc<PartitionStats>] {
        &self.partitions
    }

    /// Handles a request in the calling thread (in-process requests marked inline).
    pub(crate) fn run_inline(&self, req: Incoming) {
        let out = self.handler.handle(&req);
        req.reply(out);
        self.requests_handled.fetch_add(1, Ordering::Relaxed);
        self.requests_inline.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops accepting requests and joins the threads once queued requests are done.
    pub fn stop(&self) {
        self.queues.write().expect("queues").clear();
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
