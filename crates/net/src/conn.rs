//! A client's connection to one server NID: many RPCs in flight, replies matched by xid,
//! reconnect and resend (same xid, `FLAG_RESEND`) when the link breaks, until a deadline.

use crate::frame::{read_frame, write_frame};
use crate::router::Router;
use crate::{local, NetError, Reply, Request};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use nacre_types::limits::{BULK_BYTES_MAX, RPCS_IN_FLIGHT_DEFAULT, RPC_SIZE_BYTES_DEFAULT};
use nacre_types::Nid;
use nacre_wire::header::{FLAG_BULK_CHECKSUM, FLAG_RESEND};
use nacre_wire::Header;
use std::collections::HashMap;
use std::io::BufReader;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Client-side network settings (Lustre names where Lustre has them).
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// RPCs one connection keeps in flight at once.
    pub max_rpcs_in_flight: usize,
    /// Most bulk bytes per RPC.
    pub max_rpc_size: u32,
    /// How long a first connection attempt may take.
    pub connect_timeout_ms: u64,
    /// How long to wait for one reply on a live connection.
    pub rpc_timeout_ms: u64,
    /// How long to keep reconnecting and resending after a connection breaks.
    pub recovery_timeout_ms: u64,
    /// Checksum bulk data (crc32c) on the wire.
    pub bulk_checksum: bool,
}

impl Default for NetConfig {
    fn default() -> NetConfig {
        NetConfig {
            max_rpcs_in_flight: RPCS_IN_FLIGHT_DEFAULT,
            max_rpc_size: RPC_SIZE_BYTES_DEFAULT,
            connect_timeout_ms: 5_000,
            rpc_timeout_ms: 120_000,
            recovery_timeout_ms: 300_000,
            bulk_checksum: true,
        }
    }
}

type ReplySender = Sender<Result<Reply, NetError>>;

struct TcpLink {
    writer: Mutex<TcpStream>,
    /// Requests awaiting replies, each with the in-flight slot it occupies.
    pending: Mutex<HashMap<u64, (ReplySender, Option<SlotPermit>)>>,
    alive: AtomicBool,
}

enum Link {
    Tcp(Arc<TcpLink>),
    Local(Arc<Router>),
}

impl Link {
    fn alive(&self) -> bool {
        match self {
            Link::Tcp(l) => l.alive.load(Ordering::Acquire),
            Link::Local(_) => true,
        }
    }
}

/// Counting semaphore bounding RPCs in flight.
struct Slots {
    free: Mutex<usize>,
    cv: Condvar,
}

struct SlotPermit {
    slots: Arc<Slots>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        *self.slots.free.lock().expect("slots") += 1;
        self.slots.cv.notify_one();
    }
}

/// A connection to one server. Cheap to share (`Arc`); thread-safe.
pub struct Connection {
    nid: Nid,
    config: NetConfig,
    link: Mutex<Option<Arc<Link>>>,
    next_xid: AtomicU64,
    slots: Arc<Slots>,
}

/// A request in flight; [`PendingReply::wait`] returns its reply.
pub struct PendingReply {
    conn: Arc<Connection>,
    header: Header,
    request: Request,
    rx: Receiver<Result<Reply, NetError>>,
}

impl Connection {
    /// A connection that links up on first use.
    pub fn new(nid: Nid, config: NetConfig) -> Arc<Connection> {
        let xid_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Arc::new(Connection {
            nid,
            slots: Arc::new(Slots {
                free: Mutex::new(config.max_rpcs_in_flight.max(1)),
                cv: Condvar::new(),
            }),
            config,
            link: Mutex::new(None),
            next_xid: AtomicU64::new(xid_base),
        })
    }

    /// A connection that is linked now, retrying until `connect_timeout_ms` passes.
    pub fn connect(nid: Nid, config: NetConfig) -> Result<Arc<Connection>, NetError> {
        let conn = Connection::new(nid, config);
        let deadline = Instant::now() + Duration::from_millis(conn.config.connect_timeout_ms);
        conn.link_until(deadline)?;
        Ok(conn)
    }

    /// Peer NID.
    pub fn nid(&self) -> Nid {
        self.nid
    }

    /// Settings.
    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// Sends a request and returns at once; the reply is collected with
    /// [`PendingReply::wait`]. Blocks while `max_rpcs_in_flight` requests are outstanding.
    pub fn start(self: &Arc<Self>, request: Request) -> Result<PendingReply, NetError> {
        let xid = self.alloc_xid();
        self.start_xid(xid, request)
    }

    /// Reserves the next xid, for callers that must know it before building the request
    /// (the MDC tracks which xids have replies).
    pub fn alloc_xid(&self) -> u64 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Like [`Connection::start`] with an xid from [`Connection::alloc_xid`].
    pub fn start_xid(
        self: &Arc<Self>,
        xid: u64,
        request: Request,
    ) -> Result<PendingReply, NetError> {
        let permit = self.acquire_slot();
        let mut header = Header::request(request.opcode, request.target, xid);
        if self.config.bulk_checksum {
            header.flags |= FLAG_BULK_CHECKSUM;
        }
        let rx = match self.send(&header, &request, Some(permit)) {
            Ok(rx) => rx,
            Err(NetError::Disconnected(_)) | Err(NetError::Unreachable { .. }) => {
                let (tx, rx) = bounded(1);
                let _ = tx.send(Err(NetError::Disconnected(self.nid.to_string())));
                rx
            }
            Err(e) => return Err(e),
        };
        Ok(PendingReply {
            conn: self.clone(),
            header,
            request,
            rx,
        })
    }

    /// Sends a request and waits for its reply.
    pub fn call(self: &Arc<Self>, request: Request) -> Result<Reply, NetError> {
        self.start(request)?.wait()
    }

    /// Sends a ping and waits for the answer.
    pub fn ping(self: &Arc<Self>) -> Result<(), NetError> {
        let req = Request {
            opcode: nacre_wire::OP_PING,
            target: 0,
            body: Vec::new(),
            bulk: None,
            inline: true,
        };
        self.call(req).map(|_| ())
    }

    fn acquire_slot(&self) -> SlotPermit {
        let mut free = self.slots.free.lock().expect("slots");
        while *free == 0 {
            free = self.slots.cv.wait(free).expect("slots");
        }
        *free -= 1;
        SlotPermit {
            slots: self.slots.clone(),
        }
    }

    fn current_link(&self) -> Result<Arc<Link>, NetError> {
        let mut guard = self.link.lock().expect("link");
        if let Some(link) = guard.as_ref() {
            if link.alive() {
                return Ok(link.clone());
            }
        }
        let link = Arc::new(self.open_link()?);
        *guard = Some(link.clone());
        Ok(link)
    }

    fn link_until(&self, deadline: Instant) -> Result<Arc<Link>, NetError> {
        loop {
            match self.current_link() {
                Ok(link) => return Ok(link),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn open_link(&self) -> Result<Link, NetError> {
        if let Some(router) = local::lookup(self.nid.addr) {
            return Ok(Link::Local(router));
        }
        let timeout = Duration::from_millis(self.config.connect_timeout_ms.max(1));
        let stream = TcpStream::connect_timeout(&self.nid.addr, timeout).map_err(|e| {
            NetError::Unreachable {
                nid: self.nid.to_string(),
                cause: e.to_string(),
            }
        })?;
        stream.set_nodelay(true)?;
        let link = Arc::new(TcpLink {
            writer: Mutex::new(stream.try_clone()?),
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        let reader_link = link.clone();
        let nid = self.nid;
        std::thread::Builder::new()
            .name(format!("rpc-reader-{}", self.nid))
            .spawn(move || read_replies(stream, reader_link, nid))?;
        Ok(Link::Tcp(link))
    }

    /// Sends a request. The in-flight slot (`permit`) is held until the reply arrives, not until
    /// the caller collects it, so replies parked un-collected (read-ahead) never starve others.
    fn send(
        &self,
        header: &Header,
        request: &Request,
        permit: Option<SlotPermit>,
    ) -> Result<Receiver<Result<Reply, NetError>>, NetError> {
        let link = self.current_link()?;
        let (tx, rx) = bounded(1);
        match &*link {
            Link::Local(router) => {
                let mut h = *header;
                h.body_len = request.body.len() as u32;
                h.bulk_len = request.bulk.as_ref().map_or(0, |b| b.len() as u32);
                router.deliver_local(
                    h,
                    request.body.clone(),
                    request.bulk.clone(),
                    tx,
                    request.inline,
                );
                drop(permit);
            }
            Link::Tcp(tcp) => {
                let mut h = *header;
                let bulk = request.bulk.as_deref().map(|b| &b[..]);
                h.seal(&request.body, bulk, header.flags & FLAG_BULK_CHECKSUM != 0);
                tcp.pending
                    .lock()
                    .expect("pending")
                    .insert(h.xid, (tx, permit));
                let mut w = tcp.writer.lock().expect("writer");
                if let Err(e) = write_frame(&mut *w, &h, &request.body, bulk) {
                    drop(w);
                    tcp.pending.lock().expect("pending").remove(&h.xid);
                    tcp.alive.store(false, Ordering::Release);
                    tracing::debug!("send to {} failed: {e}", self.nid);
                    return Err(NetError::Disconnected(self.nid.to_string()));
                }
            }
        }
        Ok(rx)
    }

    fn forget(&self, xid: u64) {
        if let Some(link) = self.link.lock().expect("link").as_ref() {
            if let Link::Tcp(tcp) = &**link {
                tcp.pending.lock().expect("pending").remove(&xid);
            }
        }
    }
}

impl PendingReply {
    /// The request's xid.
    pub fn xid(&self) -> u64 {
        self.header.xid
    }

    /// Waits for the reply. If the connection breaks, reconnects and resends the same xid
    /// (flagged as a resend) until `recovery_timeout_ms` has passed.
    pub fn wait(mut self) -> Result<Reply, NetError> {
        let conn = self.conn.clone();
        let rpc_timeout = Duration::from_millis(conn.config.rpc_timeout_ms);
        let recovery = Duration::from_millis(conn.config.recovery_timeout_ms);
        let mut recovery_deadline: Option<Instant> = None;
        loop {
            match self.rx.recv_timeout(rpc_timeout) {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(NetError::Disconnected(_))) | Err(RecvTimeoutError::Disconnected) => {
                    let deadline =
                        *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                    self.rx = self.resend_until(deadline)?;
                }
                Ok(Err(e)) => return Err(e),
                Err(RecvTimeoutError::Timeout) => {
                    conn.forget(self.header.xid);
                    return Err(NetError::TimedOut {
                        nid: conn.nid.to_string(),
                        timeout_ms: conn.config.rpc_timeout_ms,
                    });
                }
            }
        }
    }

    fn resend_until(
        &mut self,
        deadline: Instant,
    ) -> Result<Receiver<Result<Reply, NetError>>, NetError> {
        self.header.flags |= FLAG_RESEND;
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.conn.send(&self.header, &self.request, None) {
                Ok(rx) => return Ok(rx),
                Err(e) if Instant::now() >= deadline => {
                    return Err(NetError::Unreachable {
                        nid: self.conn.nid.to_string(),
                        cause: e.to_string(),
                    })
                }
                Err(_) => {
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(1000));
                }
            }
        }
    }
}

fn read_replies(stream: TcpStream, link: Arc<TcpLink>, nid: Nid) {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let cause = loop {
        match read_frame(&mut reader, BULK_BYTES_MAX) {
            Ok(Some(frame)) => {
                let tx = link
                    .pending
                    .lock()
                    .expect("pending")
                    .remove(&frame.header.xid);
                if let Some((tx, _permit)) = tx {
                    let reply = Reply {
                        header: frame.header,
                        body: frame.body,
                        bulk: frame.bulk,
                    };
                    let _ = tx.send(Ok(reply));
                }
            }
            Ok(None) => break "closed by peer".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    tracing::debug!("connection to {nid} ended: {cause}");
    link.alive.store(false, Ordering::Release);
    let _ = link
        .writer
        .lock()
        .expect("writer")
        .shutdown(std::net::Shutdown::Both);
    for (_, (tx, _permit)) in link.pending.lock().expect("pending").drain() {
        let _ = tx.send(Err(NetError::Disconnected(nid.to_string())));
    }
}
