//! The server side: an acceptor, one reader thread per connection, and per-service pools of
//! service threads grouped by CPU partition, each partition with its own bounded queue.

use crate::frame::{read_frame, write_frame};
use crate::{local, NetError, Reply};
use crossbeam_channel::{bounded, Receiver, Sender};
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_types::{AlignedBuf, Status};
use nacre_wire::header::{FLAG_BULK_CHECKSUM, FLAG_REPLY};
use nacre_wire::{Header, Service, OP_PING};
use std::collections::HashMap;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    reply_to: ReplySink,
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

enum ReplySink {
    Tcp(Arc<Mutex<TcpStream>>),
    Local(Sender<Result<Reply, NetError>>),
}

impl Incoming {
    fn reply(self, out: Outgoing) {
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
    fn dispatch(&self, req: Incoming, cpt_hint: usize) {
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
    fn run_inline(&self, req: Incoming) {
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

/// Routes requests to service pools by the opcode's service byte.
#[derive(Default)]
pub struct Router {
    services: RwLock<HashMap<u8, Arc<ServicePool>>>,
    next_partition: AtomicUsize,
}

impl Router {
    /// Adds (or replaces) the pool serving `service`.
    pub fn add(&self, service: Service, pool: Arc<ServicePool>) {
        self.services
            .write()
            .expect("router")
            .insert(service as u8, pool);
    }

    fn route(&self, req: Incoming, cpt_hint: usize) {
        self.route_with(req, cpt_hint, false)
    }

    fn route_with(&self, req: Incoming, cpt_hint: usize, inline: bool) {
        if req.header.opcode == OP_PING {
            req.reply(Outgoing::ok(Vec::new()));
            return;
        }
        let service = (req.header.opcode >> 8) as u8;
        let pool = self.services.read().expect("router").get(&service).cloned();
        match pool {
            Some(pool) if inline => pool.run_inline(req),
            Some(pool) => pool.dispatch(req, cpt_hint),
            None => req.reply(Outgoing::error(Status::NoSys)),
        }
    }

    /// Delivers an in-process request; the reply arrives on `reply_to`.
    pub(crate) fn deliver_local(
        &self,
        header: Header,
        body: Vec<u8>,
        bulk: Option<Arc<AlignedBuf>>,
        reply_to: Sender<Result<Reply, NetError>>,
        inline: bool,
    ) {
        let req = Incoming {
            header,
            body,
            bulk,
            peer: "local".into(),
            reply_to: ReplySink::Local(reply_to),
        };
        let hint = self.next_partition.fetch_add(1, Ordering::Relaxed);
        self.route_with(req, hint, inline);
    }

    fn stop(&self) {
        let pools: Vec<_> = self
            .services
            .write()
            .expect("router")
            .drain()
            .map(|(_, p)| p)
            .collect();
        for p in pools {
            p.stop();
        }
    }
}

/// A listening server: one address, any number of services.
pub struct Server {
    addr: SocketAddr,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts accepting. The router is also
    /// registered for in-process connections.
    pub fn bind(addr: SocketAddr, bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let router = Arc::new(Router::default());
        local::register(addr, &router);
        let server = Arc::new(Server {
            addr,
            router: router.clone(),
            stopping: Arc::new(AtomicBool::new(false)),
            conns: Arc::new(Mutex::new(Vec::new())),
            acceptor: Mutex::new(None),
        });
        let stopping = server.stopping.clone();
        let conns = server.conns.clone();
        let bulk_len_max = bulk_len_max.min(BULK_BYTES_MAX);
        let t = std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || accept_loop(listener, router, stopping, conns, bulk_len_max))
            .expect("spawn acceptor");
        *server.acceptor.lock().expect("acceptor") = Some(t);
        Ok(server)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a service.
    pub fn add_service(&self, service: Service, pool: Arc<ServicePool>) {
        self.router.add(service, pool);
    }

    /// Stops accepting, closes connections and stops the service threads.
    pub fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        local::unregister(self.addr);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.acceptor.lock().expect("acceptor").take() {
            let _ = t.join();
        }
        for c in self.conns.lock().expect("conns").drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.router.stop();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: TcpListener,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    bulk_len_max: u32,
) {
    let mut partition = 0usize;
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        {
            let mut list = conns.lock().expect("conns");
            list.retain(|c| c.peer_addr().is_ok());
            list.push(clone);
        }
        let router = router.clone();
        let cpt = partition;
        partition += 1;
        let spawned = std::thread::Builder::new()
            .name("conn-reader".into())
            .spawn(move || serve_connection(stream, peer, router, cpt, bulk_len_max));
        if let Err(e) = spawned {
            tracing::warn!("cannot start a connection thread: {e}");
        }
    }
}

fn serve_connection(
    stream: TcpStream,
    peer: String,
    router: Arc<Router>,
    cpt: usize,
    bulk_len_max: u32,
) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let writer = Arc::new(Mutex::new(write_half));
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    loop {
        match read_frame(&mut reader, bulk_len_max) {
            Ok(Some(frame)) if !frame.header.is_reply() => {
                let req = Incoming {
                    header: frame.header,
                    body: frame.body,
                    bulk: frame.bulk.map(Arc::new),
                    peer: peer.clone(),
                    reply_to: ReplySink::Tcp(writer.clone()),
                };
                router.route(req, cpt);
            }
            Ok(Some(_)) => {
                tracing::warn!("{peer}: unexpected reply frame; dropping connection");
                break;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("{peer}: {e}; dropping connection");
                break;
            }
        }
    }
    let _ = writer
        .lock()
        .expect("writer")
        .shutdown(std::net::Shutdown::Both);
}
