//! A client's connection to one server: many RPCs in flight, replies matched by xid,
//! reconnect and resend (same xid, `FLAG_RESEND`) when the link breaks, until a deadline.
//!
//! Multi-rail: a server may have several NIDs (interfaces). The connection asks the server
//! for all of them on first use (discovery, [`nacre_wire::OP_DISCOVER`]) and keeps one TCP
//! link per NID, a *rail*. Requests go round-robin over the healthy rails. A rail whose link
//! breaks, or that does not answer a request within `rail_timeout_ms`, is marked down, its
//! requests are resent on the other rails, and a background thread reconnects it; traffic
//! returns to it once it links up again (health).

use crate::frame::{write_sealed, NoSigPipe, RawFrame};
use crate::queue::{oneshot, OneshotReceiver, OneshotSender};
use crate::reactor::{BudgetPermit, FrameSink, NetLimits, NetStats, NewConn, Reactor};
use crate::router::Router;
use crate::sec::session::Sealer;
use crate::sec::{FsKey, SecError};
use crate::{local, NetError, Reply, Request};
use crossbeam_channel::RecvTimeoutError;
use nacre_types::limits::{BULK_BYTES_MAX, RPCS_IN_FLIGHT_DEFAULT, RPC_SIZE_BYTES_DEFAULT};
use nacre_types::AlignedBuf;
use nacre_types::Nid;
use nacre_wire::header::{FLAG_BULK_CHECKSUM, FLAG_RESEND};
use nacre_wire::Header;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
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
    /// Ask the server for its other NIDs and use them as extra rails.
    pub discovery: bool,
    /// With several rails: a rail that has not answered a request within this time is
    /// declared down and the request is resent on another rail.
    pub rail_timeout_ms: u64,
    /// The file system's key: every link opens with the handshake of [`crate::sec`] (None:
    /// no handshake, for servers that require none). Defaults to the process's key
    /// ([`crate::sec::default_key`]).
    pub key: Option<Arc<FsKey>>,
    /// The file system whose targets this connection's frames name
    /// ([`nacre_types::fs_slot`]; 0: its key's, or none). Set by [`NetConfig::for_fs`].
    pub fs_slot: u16,
}

impl NetConfig {
    /// This configuration for a connection of file system `fsname`: every frame names the
    /// file system's slot beside its target's index, and every link proves a key of
    /// `fsname`: the one set if it is, else the process's (if it holds keys).
    pub fn for_fs(mut self, fsname: &str) -> NetConfig {
        self.fs_slot = nacre_types::fs_slot(fsname);
        if self.key.as_ref().is_none_or(|k| k.fsname() != fsname) {
            if let Some(k) = crate::sec::key_for(fsname) {
                self.key = Some(k);
            }
        }
        self
    }

    /// The slot the frames name: the one set, else the key's file system's, else none.
    fn slot(&self) -> u16 {
        match (self.fs_slot, &self.key) {
            (0, Some(k)) => nacre_types::fs_slot(k.fsname()),
            (s, _) => s,
        }
    }
}

/// Most rails (NIDs) one connection uses.
pub const RAILS_MAX: usize = 8;
/// How often a down rail is retried.
pub const RAIL_RETRY_MS: u64 = 500;
/// Connect timeout when (re)linking a secondary rail.
pub const RAIL_CONNECT_TIMEOUT_MS: u64 = 1_000;

impl Default for NetConfig {
    fn default() -> NetConfig {
        NetConfig {
            max_rpcs_in_flight: RPCS_IN_FLIGHT_DEFAULT,
            max_rpc_size: RPC_SIZE_BYTES_DEFAULT,
            connect_timeout_ms: 5_000,
            rpc_timeout_ms: 120_000,
            recovery_timeout_ms: 300_000,
            bulk_checksum: true,
            discovery: true,
            rail_timeout_ms: 10_000,
            key: crate::sec::default_key(),
            fs_slot: 0,
        }
    }
}

type ReplySender = OneshotSender<Result<Reply, NetError>>;

/// A request awaiting its reply: who waits, the in-flight slot it occupies, and where its
/// reply's bulk is to land if the caller said ([`Connection::start_into`]).
type Awaited = (ReplySender, Option<SlotPermit>, Option<AlignedBuf>);

struct TcpLink {
    /// The stream and, on a protected link, what seals its frames in the order written.
    writer: Mutex<(TcpStream, Option<Sealer>)>,
    /// Requests awaiting replies, each with the in-flight slot it occupies and where its
    /// reply's bulk is to land, if the caller said.
    pending: Mutex<HashMap<u64, Awaited>>,
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
        *self.slots.free.lock() += 1;
        self.slots.cv.notify_one();
    }
}

/// One NID of the peer, its state and the link to it.
struct Rail {
    info: RailInfo,
    link: Option<Arc<Link>>,
}

impl Rail {
    fn new(nid: Nid, discovered: bool) -> Rail {
        Rail {
            info: RailInfo {
                nid,
                healthy: true,
                discovered,
                rpcs: 0,
                bytes: 0,
                failures: 0,
            },
            link: None,
        }
    }
}

/// What `get_param peers` shows of one rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailInfo {
    /// The rail's NID.
    pub nid: Nid,
    /// Usable now (false while down: a recovery thread is relinking it).
    pub healthy: bool,
    /// Learnt by discovery.
    pub discovered: bool,
    /// Requests handed to it.
    pub rpcs: u64,
    /// Bulk bytes sent on it.
    pub bytes: u64,
    /// Times it was declared down.
    pub failures: u64,
}

/// Connection states shown in `*.import` (Lustre's import states, those that apply).
pub mod import_state {
    /// Never linked yet.
    pub const NEW: &str = "NEW";
    /// Linked; requests flow.
    pub const FULL: &str = "FULL";
    /// The link broke or could not be made; requests wait and are resent.
    pub const DISCONN: &str = "DISCONN";
    /// The server evicted this client; it reconnects as a new one.
    pub const EVICTED: &str = "EVICTED";
}

/// State changes kept per connection.
pub const IMPORT_HISTORY_MAX: usize = 16;

/// A connection's state and its recent changes (`*.import`).
#[derive(Clone, Debug)]
pub struct ImportStatus {
    /// Current state (see [`import_state`]).
    pub state: &'static str,
    /// (when, state entered), oldest first, at most [`IMPORT_HISTORY_MAX`].
    pub history: Vec<(std::time::SystemTime, &'static str)>,
    /// Links made to the server (the first connection and every reconnection).
    pub connects: u64,
    /// Restarts of the server the MGS announced ([`Connection::relink`]).
    pub restarts_heard: u64,
    /// Switches to another server of the failover list.
    pub failovers: u64,
}

/// A connection to one server. Cheap to share (`Arc`); thread-safe.
pub struct Connection {
    import: Mutex<ImportStatus>,
    /// The servers that may serve the target, and the one in use (failover).
    servers: Mutex<Servers>,
    config: NetConfig,
    rails: Mutex<Vec<Rail>>,
    rr: AtomicUsize,
    discovered: AtomicBool,
    next_xid: AtomicU64,
    slots: Arc<Slots>,
    /// The file-system slot every frame names ([`NetConfig::for_fs`]), fixed at creation.
    fs_slot: u16,
    me: std::sync::Weak<Connection>,
}

/// The failover list of a connection: every server that may serve its target (Lustre's
/// import connection list), the one in use first.
struct Servers {
    list: Vec<Nid>,
    active: usize,
}

/// Most servers in a connection's failover list.
pub const FAILOVER_SERVERS_MAX: usize = 8;

/// Pause before resending a request the server answered "not served here" (its target is
/// moving to a partner): a few retries a second, never a spin.
pub const MOVED_RETRY_MS: u64 = 250;

/// A request in flight; [`PendingReply::wait`] returns its reply.
pub struct PendingReply {
    conn: Arc<Connection>,
    header: Header,
    request: Request,
    rx: OneshotReceiver<Result<Reply, NetError>>,
    /// The rail and link it went out on (None: not sent).
    sent_on: Option<(usize, Arc<Link>)>,
}

impl Connection {
    /// A connection that links up on first use.
    pub fn new(nid: Nid, config: NetConfig) -> Arc<Connection> {
        let xid_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Arc::new_cyclic(|me| Connection {
            import: Mutex::new(ImportStatus {
                state: import_state::NEW,
                history: Vec::new(),
                connects: 0,
                restarts_heard: 0,
                failovers: 0,
            }),
            servers: Mutex::new(Servers {
                list: vec![nid],
                active: 0,
            }),
            slots: Arc::new(Slots {
                free: Mutex::new(config.max_rpcs_in_flight.max(1)),
                cv: Condvar::new(),
            }),
            fs_slot: config.slot(),
            config,
            rails: Mutex::new(vec![Rail::new(nid, false)]),
            rr: AtomicUsize::new(0),
            discovered: AtomicBool::new(false),
            next_xid: AtomicU64::new(xid_base),
            me: me.clone(),
        })
    }

    /// Records a state change (a repeat of the current state is not one).
    pub fn note_state(&self, state: &'static str) {
        let mut i = self.import.lock();
        if state == import_state::FULL {
            i.connects += 1;
        }
        if i.state == state {
            return;
        }
        i.state = state;
        i.history.push((std::time::SystemTime::now(), state));
        if i.history.len() > IMPORT_HISTORY_MAX {
            i.history.remove(0);
        }
    }

    /// Drops every link to the server now (its server restarted, says the MGS): requests in
    /// flight on them are resent at once on a new link instead of waiting out their timeout.
    pub fn relink(&self) {
        let mut rails = self.rails.lock();
        for r in rails.iter_mut() {
            if let Some(Link::Tcp(tcp)) = r.link.take().as_deref() {
                abort_link(tcp);
            }
        }
        drop(rails);
        self.import.lock().restarts_heard += 1;
        self.note_state(import_state::DISCONN);
    }

    /// Links made to the server so far (a change means a new link, maybe to a restarted
    /// server).
    pub fn links_made(&self) -> u64 {
        self.import.lock().connects
    }

    /// The state and its history.
    pub fn import_status(&self) -> ImportStatus {
        self.import.lock().clone()
    }

    /// A connection that is linked now, retrying until `connect_timeout_ms` passes.
    pub fn connect(nid: Nid, config: NetConfig) -> Result<Arc<Connection>, NetError> {
        let conn = Connection::new(nid, config);
        let deadline = Instant::now() + Duration::from_millis(conn.config.connect_timeout_ms);
        conn.link_until(deadline)?;
        conn.discover();
        Ok(conn)
    }

    /// NID of the server in use.
    pub fn nid(&self) -> Nid {
        let s = self.servers.lock();
        s.list[s.active]
    }

    /// The failover list: every server that may serve the target, the one in use first.
    pub fn servers(&self) -> Vec<Nid> {
        let s = self.servers.lock();
        let n = s.list.len();
        (0..n).map(|k| s.list[(s.active + k) % n]).collect()
    }

    /// Sets the failover list from the configuration: `current` serves the target now,
    /// `others` may. If `current` is not the server in use, switches to it (requests in
    /// flight are resent there).
    pub fn set_servers(&self, current: Nid, others: &[Nid]) {
        let mut list = vec![current];
        for n in others {
            if !list.contains(n) && list.len() < FAILOVER_SERVERS_MAX {
                list.push(*n);
            }
        }
        let mut s = self.servers.lock();
        let moved = s.list[s.active] != current;
        s.list = list;
        s.active = 0;
        drop(s);
        if moved {
            self.switch_rails(current);
        }
    }

    /// Switches to the next server of the failover list (the one in use stopped answering
    /// for the target); false if there is no other.
    pub fn fail_over(&self) -> bool {
        let mut s = self.servers.lock();
        if s.list.len() < 2 {
            return false;
        }
        s.active = (s.active + 1) % s.list.len();
        let next = s.list[s.active];
        drop(s);
        self.switch_rails(next);
        true
    }

    /// Drops every link and rail, and starts over with one rail to `nid`.
    fn switch_rails(&self, nid: Nid) {
        let mut rails = self.rails.lock();
        let from = rails.first().map(|r| r.info.nid);
        for r in rails.iter_mut() {
            if let Some(Link::Tcp(tcp)) = r.link.take().as_deref() {
                abort_link(tcp);
            }
        }
        *rails = vec![Rail::new(nid, false)];
        self.discovered.store(false, Ordering::Release);
        drop(rails);
        if let Some(from) = from.filter(|f| *f != nid) {
            tracing::info!("failing over from {from} to {nid}");
        }
        self.import.lock().failovers += 1;
        self.note_state(import_state::DISCONN);
    }

    /// Settings.
    pub fn config(&self) -> &NetConfig {
        &self.config
    }

    /// The rails to the peer and their state.
    pub fn rails(&self) -> Vec<RailInfo> {
        self.rails.lock().iter().map(|r| r.info.clone()).collect()
    }

    /// Asks the peer for its NIDs (once) and adds the unknown ones as rails. Peers that do
    /// not answer discovery, and in-process peers, keep one rail.
    pub fn discover(&self) {
        if !self.config.discovery || self.discovered.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let local = matches!(self.rails.lock()[0].link.as_deref(), Some(Link::Local(_)));
        if local {
            return;
        }
        let req = Request {
            opcode: nacre_wire::OP_DISCOVER,
            target: 0,
            body: Vec::new(),
            bulk: None,
            inline: true,
        };
        let nids: Vec<Nid> = match me.call(req) {
            Ok(r) if r.status() == nacre_types::Status::Ok => {
                nacre_wire::decode_body(&r.body).unwrap_or_default()
            }
            _ => return,
        };
        let mut rails = self.rails.lock();
        for nid in nids {
            if rails.len() >= RAILS_MAX {
                break;
            }
            if rails.iter().any(|r| r.info.nid == nid) {
                continue;
            }
            tracing::debug!("{}: discovered rail {nid}", self.nid());
            rails.push(Rail::new(nid, true));
        }
    }

    /// Sends a request and returns at once; the reply is collected with
    /// [`PendingReply::wait`]. Blocks while `max_rpcs_in_flight` requests are outstanding.
    pub fn start(self: &Arc<Self>, request: Request) -> Result<PendingReply, NetError> {
        let xid = self.alloc_xid();
        self.start_xid(xid, request)
    }

    /// Like [`Connection::start`], the reply's bulk received straight into `into` (memory
    /// the caller registered, e.g. a ring's buffer) when it arrives on a TCP link and fits:
    /// the reply's `bulk` is then `into` itself. A resend, or the in-process transport,
    /// receives into a fresh buffer as usual. The caller must not reuse the memory behind
    /// `into` until `into` (and every buffer over it) is dropped — the network thread may
    /// still hold it after a request it filled timed out.
    pub fn start_into(
        self: &Arc<Self>,
        request: Request,
        into: AlignedBuf,
    ) -> Result<PendingReply, NetError> {
        let xid = self.alloc_xid();
        self.start_xid_with(xid, request, Some(into))
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
        self.start_xid_with(xid, request, None)
    }

    fn start_xid_with(
        self: &Arc<Self>,
        xid: u64,
        request: Request,
        into: Option<AlignedBuf>,
    ) -> Result<PendingReply, NetError> {
        if !self.discovered.load(Ordering::Acquire)
            && self.config.discovery
            && self.pick_link(None).is_ok()
        {
            self.discover();
        }
        let permit = self.acquire_slot();
        // A bare index gets the file system's slot; a caller's full target id stays.
        let target = match (self.fs_slot, request.target) {
            (0, t) => t,
            (s, t) if t <= nacre_types::TARGET_INDEX_MAX => nacre_types::target_id(s, t),
            (_, t) => t,
        };
        let mut header = Header::request(request.opcode, target, xid);
        if self.config.bulk_checksum {
            header.flags |= FLAG_BULK_CHECKSUM;
        }
        let (rx, sent_on) = match self.send(&header, &request, Some(permit), into) {
            Ok((rx, on)) => (rx, Some(on)),
            Err(NetError::Disconnected(_)) | Err(NetError::Unreachable { .. }) => {
                let (tx, rx) = oneshot();
                tx.send(Err(NetError::Disconnected(self.nid().to_string())));
                (rx, None)
            }
            Err(e) => return Err(e),
        };
        Ok(PendingReply {
            conn: self.clone(),
            header,
            request,
            rx,
            sent_on,
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
        let mut free = self.slots.free.lock();
        while *free == 0 {
            self.slots.cv.wait(&mut free);
        }
        *free -= 1;
        SlotPermit {
            slots: self.slots.clone(),
        }
    }

    /// A live link on a healthy rail: round-robin over the rails when there are several.
    /// With `charge`, the rail is charged one request of that many bulk bytes.
    fn pick_link(&self, charge: Option<u64>) -> Result<(usize, Arc<Link>), NetError> {
        let mut rails = self.rails.lock();
        let n = rails.len();
        let start = if n > 1 {
            self.rr.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let timeout_of = |i: usize| {
            if i == 0 {
                self.config.connect_timeout_ms
            } else {
                self.config.connect_timeout_ms.min(RAIL_CONNECT_TIMEOUT_MS)
            }
        };
        let mut last_err = None;
        for k in 0..n {
            let i = (start + k) % n;
            if !rails[i].info.healthy {
                continue;
            }
            let had_link = rails[i].link.is_some();
            let live = rails[i].link.clone().filter(|l| l.alive());
            if live.is_none() && had_link {
                // The link broke since the last request.
                self.note_state(import_state::DISCONN);
            }
            let link = match live {
                Some(link) => link,
                None => match self.open_link(rails[i].info.nid, timeout_of(i)) {
                    Ok(link) => {
                        let link = Arc::new(link);
                        rails[i].link = Some(link.clone());
                        self.note_state(import_state::FULL);
                        link
                    }
                    Err(e) => {
                        self.note_state(import_state::DISCONN);
                        if n > 1 {
                            self.rail_down(&mut rails, i);
                        }
                        last_err = Some(e);
                        continue;
                    }
                },
            };
            if let Some(bytes) = charge {
                rails[i].info.rpcs += 1;
                rails[i].info.bytes += bytes;
            }
            return Ok((i, link));
        }
        Err(last_err.unwrap_or_else(|| NetError::Disconnected(self.nid().to_string())))
    }

    /// Marks rail `i` down and starts a thread that relinks it.
    fn rail_down(&self, rails: &mut [Rail], i: usize) {
        if !rails[i].info.healthy {
            return;
        }
        rails[i].info.healthy = false;
        rails[i].info.failures += 1;
        if let Some(Link::Tcp(tcp)) = rails[i].link.take().as_deref() {
            abort_link(tcp);
        }
        tracing::info!("{}: rail {} is down", self.nid(), rails[i].info.nid);
        let weak = self.me.clone();
        let nid = rails[i].info.nid;
        let _ = std::thread::Builder::new()
            .name("rail-recovery".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(RAIL_RETRY_MS));
                let Some(conn) = weak.upgrade() else { return };
                let timeout = conn.config.connect_timeout_ms.min(RAIL_CONNECT_TIMEOUT_MS);
                if let Ok(link) = conn.open_link(nid, timeout) {
                    let mut rails = conn.rails.lock();
                    if let Some(r) = rails.iter_mut().find(|r| r.info.nid == nid) {
                        r.link = Some(Arc::new(link));
                        r.info.healthy = true;
                        tracing::info!("{}: rail {nid} is back", conn.nid());
                    }
                    return;
                }
            });
    }

    /// Declares the rail `link` belongs to down (it did not answer in time), if it is still
    /// that rail's link and the connection has another rail to use.
    fn fail_rail(&self, i: usize, link: &Arc<Link>) {
        let mut rails = self.rails.lock();
        if rails.len() < 2 {
            return;
        }
        let same = rails
            .get(i)
            .and_then(|r| r.link.as_ref())
            .is_some_and(|l| Arc::ptr_eq(l, link));
        if same {
            self.rail_down(&mut rails, i);
        }
    }

    fn link_until(&self, deadline: Instant) -> Result<(usize, Arc<Link>), NetError> {
        loop {
            match self.pick_link(None) {
                Ok(link) => return Ok(link),
                Err(e) if Instant::now() >= deadline => return Err(e),
                // A refused handshake (a wrong key) does not get better by retrying.
                Err(e @ NetError::Refused { .. }) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn open_link(&self, nid: Nid, timeout_ms: u64) -> Result<Link, NetError> {
        match self.open_link_once(nid, timeout_ms) {
            // The servers retired the master its key was made from, and this process read
            // the new key from where its key came from: once more, with that one.
            Err(Retry::KeyReloaded) => self
                .open_link_once(nid, timeout_ms)
                .map_err(|e| e.into_error(nid)),
            r => r.map_err(|e| e.into_error(nid)),
        }
    }

    /// [`Conn::open_link`]'s one attempt.
    fn open_link_once(&self, nid: Nid, timeout_ms: u64) -> Result<Link, Retry> {
        if let Some(router) = local::lookup(nid.addr) {
            return Ok(Link::Local(router));
        }
        let timeout = Duration::from_millis(timeout_ms.max(1));
        let stream =
            TcpStream::connect_timeout(&nid.addr, timeout).map_err(|e| NetError::Unreachable {
                nid: nid.to_string(),
                cause: e.to_string(),
            })?;
        stream.set_nodelay(true)?;
        let session = match &self.config.key {
            Some(key) => {
                let timeout = Duration::from_millis(timeout_ms.max(1));
                // The key that replaced it, if a rotation retired its master.
                let key = crate::sec::keyring::current(key);
                let s =
                    crate::sec::handshake::client(&stream, &key, timeout).map_err(|e| match e {
                        SecError::KeyRetired { reloaded: true, .. } => Retry::KeyReloaded,
                        SecError::Refused(why) | SecError::KeyRetired { why, .. } => {
                            NetError::Refused {
                                nid: nid.to_string(),
                                why,
                            }
                            .into()
                        }
                        other => NetError::Unreachable {
                            nid: nid.to_string(),
                            cause: other.to_string(),
                        }
                        .into(),
                    })?;
                Some(s)
            }
            None => None,
        };
        let (sealer, opener) = match session {
            Some(s) => (Some(s.sealer), Some(s.opener)),
            None => (None, None),
        };
        // A write into a link whose peer stopped reading (a rail gone down, a stuck server)
        // fails after this long instead of blocking forever: the link is then failed like
        // one that stopped answering, and the request goes out again (another rail).
        let write_timeout_ms = self
            .config
            .rail_timeout_ms
            .min(self.config.rpc_timeout_ms)
            .max(1);
        stream.set_write_timeout(Some(Duration::from_millis(write_timeout_ms)))?;
        let link = Arc::new(TcpLink {
            writer: Mutex::new((stream.try_clone()?, sealer)),
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        // Replies are read by the process's network threads, not a thread per connection.
        client_reactor()?.add(NewConn {
            stream,
            peer: nid.to_string(),
            bulk_len_max: BULK_BYTES_MAX,
            sink: Box::new(ReplySink {
                link: link.clone(),
                nid,
            }),
            opener,
        });
        Ok(Link::Tcp(link))
    }

    /// Sends a request. The in-flight slot (`permit`) is held until the reply arrives, not until
    /// the caller collects it, so replies parked un-collected (read-ahead) never starve others.
    #[allow(clippy::type_complexity)]
    fn send(
        &self,
        header: &Header,
        request: &Request,
        permit: Option<SlotPermit>,
        into: Option<AlignedBuf>,
    ) -> Result<(OneshotReceiver<Result<Reply, NetError>>, (usize, Arc<Link>)), NetError> {
        let bulk_bytes = request.bulk.as_ref().map_or(0, |b| b.len() as u64);
        let (rail, link) = self.pick_link(Some(bulk_bytes))?;
        let (tx, rx) = oneshot();
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
                tcp.pending.lock().insert(h.xid, (tx, permit, into));
                let mut guard = tcp.writer.lock();
                let w = &mut *guard;
                if let Err(e) =
                    write_sealed(&mut NoSigPipe(&w.0), &h, &request.body, bulk, w.1.as_mut())
                {
                    drop(guard);
                    tcp.pending.lock().remove(&h.xid);
                    tcp.alive.store(false, Ordering::Release);
                    tracing::debug!("send to {} failed: {e}", self.nid());
                    let mut rails = self.rails.lock();
                    if rails.len() > 1 {
                        self.rail_down(&mut rails, rail);
                    }
                    return Err(NetError::Disconnected(self.nid().to_string()));
                }
            }
        }
        Ok((rx, (rail, link)))
    }

    fn forget(&self, xid: u64) {
        for r in self.rails.lock().iter() {
            if let Some(Link::Tcp(tcp)) = r.link.as_deref() {
                tcp.pending.lock().remove(&xid);
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
        let rail_timeout = Duration::from_millis(conn.config.rail_timeout_ms.max(1));
        let recovery = Duration::from_millis(conn.config.recovery_timeout_ms);
        let mut recovery_deadline: Option<Instant> = None;
        let mut sent_at = Instant::now();
        loop {
            // With several rails, wait one rail timeout at a time: a rail that stays silent
            // is declared down, which fails this request over to another rail.
            let multi = conn.rails.lock().len() > 1;
            let waited = sent_at.elapsed();
            let step = if multi {
                rail_timeout.min(rpc_timeout.saturating_sub(waited))
            } else {
                rpc_timeout.saturating_sub(waited)
            };
            match self.rx.recv_timeout(step) {
                Err(RecvTimeoutError::Timeout) if multi && sent_at.elapsed() < rpc_timeout => {
                    if let Some((i, link)) = &self.sent_on {
                        conn.fail_rail(*i, link);
                    }
                    // The aborted link fails the request; resend below.
                    let deadline =
                        *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                    conn.forget(self.header.xid);
                    self.resend_until(deadline)?;
                    sent_at = Instant::now();
                    continue;
                }
                other => match other {
                    Ok(Ok(reply))
                        if reply.status() == nacre_types::Status::NoDev
                            && conn.servers.lock().list.len() > 1 =>
                    {
                        // The server does not serve the target (any more): it moved to a
                        // partner of the failover pair. Try the next server.
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        if Instant::now() >= deadline {
                            return Ok(reply);
                        }
                        conn.fail_over();
                        std::thread::sleep(Duration::from_millis(MOVED_RETRY_MS));
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                    Ok(Ok(reply)) => return Ok(reply),
                    Ok(Err(NetError::Disconnected(_))) | Err(RecvTimeoutError::Disconnected) => {
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(RecvTimeoutError::Timeout) => {
                        // No answer in time: the request or its reply may be lost. As Lustre's
                        // clients do, drop the link and resend on a new one (the server
                        // answers a request it already ran from its saved reply), until the
                        // recovery deadline.
                        conn.forget(self.header.xid);
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        if Instant::now() >= deadline {
                            return Err(NetError::TimedOut {
                                nid: conn.nid().to_string(),
                                timeout_ms: conn.config.rpc_timeout_ms,
                            });
                        }
                        tracing::info!(
                            "{}: no reply to xid {} in {} ms: reconnecting to resend",
                            conn.nid(),
                            self.header.xid,
                            conn.config.rpc_timeout_ms
                        );
                        if let Some((_, link)) = &self.sent_on {
                            if let Link::Tcp(tcp) = link.as_ref() {
                                abort_link(tcp);
                            }
                        }
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                },
            }
        }
    }

    fn resend_until(&mut self, deadline: Instant) -> Result<(), NetError> {
        self.header.flags |= FLAG_RESEND;
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.conn.send(&self.header, &self.request, None, None) {
                Ok((rx, on)) => {
                    self.rx = rx;
                    self.sent_on = Some(on);
                    return Ok(());
                }
                Err(e @ NetError::Refused { .. }) => return Err(e),
                Err(e) if Instant::now() >= deadline => {
                    return Err(NetError::Unreachable {
                        nid: self.conn.nid().to_string(),
                        cause: e.to_string(),
                    })
                }
                Err(_) => {
                    // The server cannot be reached: its partner may have the target now.
                    self.conn.fail_over();
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(1000));
                }
            }
        }
    }
}

/// Ends a link at once: a reset (SO_LINGER 0) drops unsent data, so a request queued on a
/// dead rail is never delivered late; the reader then fails its pending requests.
fn abort_link(tcp: &TcpLink) {
    tcp.alive.store(false, Ordering::Release);
    let w = tcp.writer.lock();
    let _ = set_linger_zero(&w.0);
    let _ = w.0.shutdown(std::net::Shutdown::Both);
}

fn set_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a correctly sized linger struct.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The network threads reading every client connection of this process (replies now; the
/// requests servers send clients, lock callbacks, next).
fn client_reactor() -> Result<&'static Arc<Reactor>, NetError> {
    static REACTOR: std::sync::OnceLock<Arc<Reactor>> = std::sync::OnceLock::new();
    if let Some(r) = REACTOR.get() {
        return Ok(r);
    }
    let limits = NetLimits {
        threads: 1,
        conns_max: usize::MAX,
        // A reply that has started must finish within the RPC timeout's order of time.
        frame_timeout_ms: 120_000,
        bulk_budget_bytes: 1 << 30,
        reply_timeout_ms: 0,
    };
    let reactor = Reactor::start(limits, Arc::new(NetStats::default()), "rpc_reader")?;
    Ok(REACTOR.get_or_init(|| reactor))
}

/// A client connection's frames: replies, handed to the callers waiting for their xids.
struct ReplySink {
    link: Arc<TcpLink>,
    nid: Nid,
}

impl FrameSink for ReplySink {
    fn frame(&mut self, frame: RawFrame, _permit: Option<BudgetPermit>) -> Result<(), String> {
        if !frame.header.is_reply() {
            return Err("a request frame on a client connection".into());
        }
        let tx = self.link.pending.lock().remove(&frame.header.xid);
        match tx {
            Some((tx, _slot, _into)) => tx.send(Ok(Reply {
                header: frame.header,
                body: frame.body,
                bulk: frame.bulk,
            })),
            // Late (its request timed out and was resent) or never asked for: nobody waits
            // for it, so it reaches no caller.
            None => tracing::warn!(
                "{}: reply to xid {} that no request waits for; dropped",
                self.nid,
                frame.header.xid
            ),
        }
        Ok(())
    }

    fn bulk_into(&mut self, header: &Header) -> Option<AlignedBuf> {
        if !header.is_reply() {
            return None;
        }
        self.link
            .pending
            .lock()
            .get_mut(&header.xid)
            .and_then(|p| p.2.take())
    }

    fn closed(&mut self, cause: &str) {
        // A reply damaged on the way (checksum) or a closed link: the requests in flight on
        // it are resent.
        tracing::debug!("connection to {} ended: {cause}", self.nid);
        self.link.alive.store(false, Ordering::Release);
        let _ = self.link.writer.lock().0.shutdown(std::net::Shutdown::Both);
        for (_, (tx, _slot, _into)) in self.link.pending.lock().drain() {
            tx.send(Err(NetError::Disconnected(self.nid.to_string())));
        }
    }
}

/// Why one attempt to open a link failed.
enum Retry {
    /// The server retired the master key of the key proved, and the process holds a key
    /// of another master now: worth one more attempt.
    KeyReloaded,
    /// Anything else.
    Failed(NetError),
}

impl Retry {
    fn into_error(self, nid: Nid) -> NetError {
        match self {
            Retry::KeyReloaded => NetError::Refused {
                nid: nid.to_string(),
                why: "its key was retired and the key read again in its place is refused \
                      too"
                .into(),
            },
            Retry::Failed(e) => e,
        }
    }
}

impl From<NetError> for Retry {
    fn from(e: NetError) -> Retry {
        Retry::Failed(e)
    }
}

impl From<std::io::Error> for Retry {
    fn from(e: std::io::Error) -> Retry {
        Retry::Failed(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sec::{FsKey, Level};

    #[test]
    fn frames_name_the_slot_of_the_file_system_or_of_the_key() {
        let none = NetConfig {
            key: None,
            ..NetConfig::default()
        };
        assert_eq!(none.slot(), 0, "no file system, no key: no slot");
        let a = none.clone().for_fs("alpha");
        assert_eq!(a.slot(), nacre_types::fs_slot("alpha"));
        let key = Arc::new(FsKey::generate("beta", Level::Integrity).unwrap());
        let keyed = NetConfig {
            key: Some(key.clone()),
            ..none.clone()
        };
        assert_eq!(
            keyed.slot(),
            nacre_types::fs_slot("beta"),
            "the key's file system"
        );
        let kept = keyed.for_fs("beta");
        assert!(
            Arc::ptr_eq(kept.key.as_ref().unwrap(), &key),
            "a matching key stays"
        );
    }
}
