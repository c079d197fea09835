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

/// A pool of service threads for one service, one bounded queue per CPU partition.
pub struct ServicePool {
    config: ServiceConfig,
    handler: Arc<dyn Handler>,
    queues: RwLock<Vec<Sender<Incoming>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Requests handled, for statistics.
    pub requests_handled: AtomicU64,
}

impl ServicePool {
    /// Starts the service threads.
    pub fn start(config: ServiceConfig, handler: Arc<dyn Handler>) -> Arc<ServicePool> {
        assert!(config.partitions > 0 && config.threads_per_partition > 0);
        let pool = Arc::new(ServicePool {
            config: config.clone(),
            handler: handler.clone(),
            queues: RwLock::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            requests_handled: AtomicU64::new(0),
        });
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for cpt in 0..config.partitions {
            let (tx, rx) = bounded::<Incoming>(config.queue_depth);
            queues.push(tx);
            for n in 0..config.threads_per_partition {
                let rx: Receiver<Incoming> = rx.clone();
                let handler = handler.clone();
                let weak = Arc::downgrade(&pool);
                let name = format!("{}_{cpt:02}_{n:03}", config.name);
                let t = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || {
                        for req in rx.iter() {
                            let out = handler.handle(&req);
                            req.reply(out);
                            if let Some(pool) = weak.upgrade() {
                                pool.requests_handled.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                    .expect("spawn service thread");
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
        let tx = queues[cpt_hint % queues.len()].clone();
        drop(queues);
        if let Err(e) = tx.send(req) {
            e.into_inner().reply(Outgoing::error(Status::NoSys));
        }
    }

    /// Handles a request in the calling thread (in-process requests marked inline).
    pub(crate) fn run_inline(&self, req: Incoming) {
        let out = self.handler.handle(&req);
        req.reply(out);
        self.requests_handled.fetch_add(1, Ordering::Relaxed);
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
