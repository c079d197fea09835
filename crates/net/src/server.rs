//! The TCP side of a server: an acceptor per address, and a bounded set of network threads
//! ([`crate::reactor`]) reading every connection and feeding the [`Router`]. The router is
//! also registered for in-process connections.

use crate::frame::RawFrame;
use crate::reactor::{BudgetPermit, FrameSink, NetLimits, NetStats, NewConn, Reactor};
use crate::router::Router;
use crate::sec::handshake::{self, Session};
use crate::sec::{
    FsKey, Level, ServerKeys, HANDSHAKES_MAX, HANDSHAKES_PER_ADDR_MAX, HANDSHAKE_TIMEOUT_MS_DEFAULT,
};
use crate::service::{Incoming, Outgoing, ReplySink, ServicePool, TcpReplier};
use crate::stream::BulkStream;
use crate::{local, NetError};
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_types::AlignedBuf;
use nacre_wire::Header;
use nacre_wire::Service;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One address a server listens on, and the CPU partitions serving its connections (the
/// partitions its network interface is bound to, as `networks="tcp0(eth0)[0]"` says; empty:
/// connections are spread over all partitions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// Address (port 0: any free port).
    pub addr: SocketAddr,
    /// CPU partitions of the interface.
    pub cpts: Vec<usize>,
}

/// A listening server: one or more addresses (interfaces), any number of services.
pub struct Server {
    addrs: Vec<SocketAddr>,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    reactor: Arc<Reactor>,
    acceptors: Mutex<Vec<JoinHandle<()>>>,
    /// The listening sockets (clones), shut down to wake the acceptors.
    listeners: Mutex<Vec<TcpListener>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts accepting. The router is also
    /// registered for in-process connections.
    pub fn bind(addr: SocketAddr, bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_all(
            &[Listen {
                addr,
                cpts: Vec::new(),
            }],
            bulk_len_max,
        )
    }

    /// Binds every address of `listens` (a port 0 after the first takes the first's port)
    /// and starts accepting on each.
    pub fn bind_all(listens: &[Listen], bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_with(listens, bulk_len_max, false)
    }

    /// Like [`Server::bind_all`] for a server that adds its services after binding: until
    /// `router().set_starting(false)`, requests for a service not added yet wait for it
    /// instead of failing with ENOSYS (clients reconnecting to a restarted server at once).
    pub fn bind_starting(listens: &[Listen], bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_with(listens, bulk_len_max, true)
    }

    fn bind_with(
        listens: &[Listen],
        bulk_len_max: u32,
        starting: bool,
    ) -> Result<Arc<Server>, NetError> {
        Server::bind_limited(listens, bulk_len_max, starting, NetLimits::default())
    }

    /// Binds every address of `listens` and serves their connections within `limits`
    /// (network threads, connection cap, frame deadline, receive budget, reply timeout);
    /// `starting` as for [`Server::bind_starting`].
    pub fn bind_limited(
        listens: &[Listen],
        bulk_len_max: u32,
        starting: bool,
        limits: NetLimits,
    ) -> Result<Arc<Server>, NetError> {
        Server::bind_secure(listens, bulk_len_max, starting, limits, Security::default())
    }

    /// [`Server::bind_limited`] requiring, when `security` holds keys, the handshake of
    /// [`crate::sec`] on every connection before anything else is read from it.
    pub fn bind_secure(
        listens: &[Listen],
        bulk_len_max: u32,
        starting: bool,
        limits: NetLimits,
        security: Security,
    ) -> Result<Arc<Server>, NetError> {
        assert!(!listens.is_empty(), "a server needs an address");
        let mut listeners = Vec::new();
        let mut port = 0;
        for l in listens {
            let mut addr = l.addr;
            if addr.port() == 0 {
                addr.set_port(port);
            }
            let listener = TcpListener::bind(addr)?;
            port = listener.local_addr()?.port();
            listeners.push((listener, l.cpts.clone()));
        }
        let addrs = listeners
            .iter()
            .map(|(l, _)| l.local_addr())
            .collect::<Result<Vec<_>, _>>()?;
        Server::serve(listeners, addrs, bulk_len_max, starting, limits, security)
    }

    /// A server reachable from this process only, at `addr` (which nothing binds): no
    /// socket is opened, so nothing outside the process can send it a request (`nacre up`
    /// without `--listen`). `starting` as for [`Server::bind_starting`].
    pub fn in_process(
        addr: SocketAddr,
        starting: bool,
        limits: NetLimits,
    ) -> Result<Arc<Server>, NetError> {
        Server::serve(
            Vec::new(),
            vec![addr],
            0,
            starting,
            limits,
            Security::default(),
        )
    }

    /// Registers the router under `addrs` for in-process connections and accepts on
    /// `listeners`.
    fn serve(
        listeners: Vec<(TcpListener, Vec<usize>)>,
        addrs: Vec<SocketAddr>,
        bulk_len_max: u32,
        starting: bool,
        limits: NetLimits,
        security: Security,
    ) -> Result<Arc<Server>, NetError> {
        let router = Arc::new(Router::default());
        router.set_starting(starting);
        for a in &addrs {
            local::register(*a, &router);
        }
        let reactor = Reactor::start(limits, Arc::new(NetStats::default()), "socknal_sd")?;
        let server = Arc::new(Server {
            addrs,
            router: router.clone(),
            stopping: Arc::new(AtomicBool::new(false)),
            reactor,
            acceptors: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
        });
        let bulk_len_max = bulk_len_max.min(BULK_BYTES_MAX);
        let security = Arc::new(security);
        let handshakes = Arc::new(Mutex::new(Pending::default()));
        for (listener, cpts) in listeners {
            if let Ok(clone) = listener.try_clone() {
                server.listeners.lock().expect("listeners").push(clone);
            }
            let accept = Accept {
                listener,
                cpts,
                router: router.clone(),
                stopping: server.stopping.clone(),
                reactor: server.reactor.clone(),
                bulk_len_max,
                security: security.clone(),
                handshakes: handshakes.clone(),
            };
            let t = std::thread::Builder::new()
                .name("acceptor".into())
                .spawn(move || accept.run())
                .expect("spawn acceptor");
            server.acceptors.lock().expect("acceptors").push(t);
        }
        Ok(server)
    }

    /// The first bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every bound address.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// What the server's connections did that it had to stop (refusals, timeouts).
    pub fn net_stats(&self) -> Arc<NetStats> {
        self.reactor.stats.clone()
    }

    /// The limits its connections are served within.
    pub fn limits(&self) -> NetLimits {
        self.reactor.limits
    }

    /// The request router (rotor setting).
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Adds a service.
    pub fn add_service(&self, service: Service, pool: Arc<ServicePool>) {
        self.router.add(service, pool);
    }

    /// Serves the requests of `opcodes` by `pool` (a separate portal of a service).
    pub fn add_portal(&self, opcodes: &[u16], pool: Arc<ServicePool>) {
        self.router.add_portal(opcodes, pool);
    }

    /// Stops accepting, closes connections and stops the service threads.
    pub fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        for a in &self.addrs {
            local::unregister(*a);
        }
        // Shutting a listening socket down wakes its accept() at once, even when its address
        // has gone (an interface removed): connecting to it would fail and leave the acceptor
        // blocked forever.
        for l in self.listeners.lock().expect("listeners").drain(..) {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid listening socket fd owned by `l`.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
        }
        for t in self.acceptors.lock().expect("acceptors").drain(..) {
            let _ = t.join();
        }
        self.reactor.stop();
        self.router.stop();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Picks the level of a connection to a file system from a peer (nodemaps).
pub type LevelFor = Arc<dyn Fn(&FsKey, &SocketAddr) -> Level + Send + Sync>;

/// What a server requires of its connections: the keys of the file systems it serves (none:
/// no handshake), the level each connection gets, and how long a handshake may take.
#[derive(Clone)]
pub struct Security {
    /// Keys by file system.
    pub keys: ServerKeys,
    /// The level a connection from `peer` to a file system gets (default: the key's own).
    pub level_for: LevelFor,
    /// Longest a handshake may take.
    pub handshake_timeout_ms: u64,
}

impl Default for Security {
    fn default() -> Security {
        Security {
            keys: ServerKeys::default(),
            level_for: Arc::new(|k, _| k.level()),
            handshake_timeout_ms: HANDSHAKE_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// The handshakes running now, in all and per source address: at most
/// [`HANDSHAKES_MAX`], and [`HANDSHAKES_PER_ADDR_MAX`] from one address, so silent
/// connections from one host cannot hold every handshake slot.
#[derive(Default)]
struct Pending {
    total: usize,
    by_addr: std::collections::HashMap<std::net::IpAddr, usize>,
}

impl Pending {
    /// Takes a slot for a handshake from `ip`, or says why none is free.
    fn begin(&mut self, ip: Option<std::net::IpAddr>) -> Result<(), String> {
        if self.total >= HANDSHAKES_MAX {
            return Err(format!(
                "{HANDSHAKES_MAX} handshakes running (handshakes_max)"
            ));
        }
        if let Some(ip) = ip {
            let n = self.by_addr.entry(ip).or_insert(0);
            if *n >= HANDSHAKES_PER_ADDR_MAX {
                return Err(format!(
                    "{n} handshakes from its address running (handshakes_per_addr_max)"
                ));
            }
            *n += 1;
        }
        self.total += 1;
        Ok(())
    }

    /// Gives back the slot of a handshake from `ip`.
    fn end(&mut self, ip: Option<std::net::IpAddr>) {
        self.total -= 1;
        if let Some(ip) = ip {
            if let Some(n) = self.by_addr.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    self.by_addr.remove(&ip);
                }
            }
        }
    }
}

/// An acceptor: takes connections off one listening address, refuses them past the cap, and
/// hands the others to the network threads (after their handshake, when keys are required:
/// run on a thread of its own, at most [`HANDSHAKES_MAX`] at once, so a slow or silent peer
/// never holds up the accepting of others).
struct Accept {
    listener: TcpListener,
    cpts: Vec<usize>,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    reactor: Arc<Reactor>,
    bulk_len_max: u32,
    security: Arc<Security>,
    handshakes: Arc<Mutex<Pending>>,
}

impl Accept {
    fn run(self) {
        let mut partition = 0usize;
        for stream in self.listener.incoming() {
            if self.stopping.load(Ordering::SeqCst) {
                break;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    // Out of descriptors or memory: wait a little rather than spin.
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            let peer = stream
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| "?".into());
            let stats = self.reactor.stats.clone();
            let open = stats.conns_open.load(Ordering::Relaxed);
            if open >= self.reactor.limits.conns_max as u64 {
                stats.conns_refused.fetch_add(1, Ordering::Relaxed);
                log_refusal(&peer, open);
                drop(stream);
                continue;
            }
            stats.conns_accepted.fetch_add(1, Ordering::Relaxed);
            let _ = stream.set_nodelay(true);
            let cpt = match self.cpts.is_empty() {
                true => partition,
                false => self.cpts[partition % self.cpts.len()],
            };
            partition = partition.wrapping_add(1);
            if !self.security.keys.required() {
                self.hand_over(stream, peer, cpt, None);
                continue;
            }
            let ip = stream.peer_addr().ok().map(|a| a.ip().to_canonical());
            if let Err(why) = self.handshakes.lock().expect("handshakes").begin(ip) {
                stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                stats.handshakes_busy.fetch_add(1, Ordering::Relaxed);
                crate::caller::log_refusal(|| format!("refusing a handshake from {peer}: {why}"));
                continue;
            }
            let me = self.clone_parts();
            let spawned = std::thread::Builder::new()
                .name("handshake".into())
                .spawn(move || {
                    me.handshake(stream, peer, cpt);
                    me.handshakes.lock().expect("handshakes").end(ip);
                });
            if spawned.is_err() {
                self.handshakes.lock().expect("handshakes").end(ip);
            }
        }
    }

    /// What a handshake thread needs of the acceptor.
    fn clone_parts(&self) -> Arc<Handover> {
        Arc::new(Handover {
            router: self.router.clone(),
            reactor: self.reactor.clone(),
            bulk_len_max: self.bulk_len_max,
            security: self.security.clone(),
            handshakes: self.handshakes.clone(),
        })
    }

    fn hand_over(&self, stream: TcpStream, peer: String, cpt: usize, session: Option<Session>) {
        self.clone_parts().hand_over(stream, peer, cpt, session);
    }
}

/// Hands accepted connections to the network threads.
struct Handover {
    router: Arc<Router>,
    reactor: Arc<Reactor>,
    bulk_len_max: u32,
    security: Arc<Security>,
    handshakes: Arc<Mutex<Pending>>,
}

impl Handover {
    /// Runs the server's side of the handshake; a connection that fails it is closed,
    /// nothing of it read past the handshake.
    fn handshake(&self, stream: TcpStream, peer: String, cpt: usize) {
        let addr = stream.peer_addr().ok();
        let sec = &self.security;
        let level_for = |k: &FsKey| match &addr {
            Some(a) => (sec.level_for)(k, a),
            None => k.level(),
        };
        let timeout = Duration::from_millis(sec.handshake_timeout_ms.max(1));
        match handshake::serve(&stream, &sec.keys, level_for, timeout) {
            Ok(session) => {
                let by_level = &self.reactor.stats.handshakes_by_level;
                by_level[usize::from(session.level.code()).min(by_level.len() - 1)]
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "{peer}: handshake for {} at level {} as {}",
                    session.fsname,
                    session.level,
                    session.client
                );
                self.hand_over(stream, peer, cpt, Some(session));
            }
            Err(e) => {
                self.reactor
                    .stats
                    .handshakes_refused
                    .fetch_add(1, Ordering::Relaxed);
                crate::caller::log_refusal(|| {
                    format!("{peer}: connection refused in its handshake: {e}")
                });
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn hand_over(&self, stream: TcpStream, peer: String, cpt: usize, session: Option<Session>) {
        let stats = self.reactor.stats.clone();
        let timeout = Duration::from_millis(self.reactor.limits.reply_timeout_ms.max(1));
        let _ = stream.set_write_timeout(Some(timeout));
        let Ok(write_half) = stream.try_clone() else {
            return;
        };
        let addr = stream.peer_addr().ok();
        let keys = &self.security.keys;
        let (sealer, opener, fs_slot, proved, master) = match session {
            Some(s) => (
                Some(s.sealer),
                Some(s.opener),
                Some(nacre_types::fs_slot(&s.fsname)),
                Some(s.client),
                s.master.map(|m| MasterCheck {
                    fsname: s.fsname,
                    id: m,
                    keys: keys.clone(),
                    // Checked at the first frame: a retirement during the handshake (after
                    // its key was found) is not missed.
                    retired_seen: u64::MAX,
                }),
            ),
            None => (None, None, None, None, None),
        };
        let sink = ServerSink {
            router: self.router.clone(),
            caller: Arc::new(crate::Caller::remote(addr, proved)),
            stats: self.reactor.stats.clone(),
            refused_role: 0,
            peer: peer.clone(),
            cpt,
            replier: Arc::new(TcpReplier::new(write_half, sealer, stats)),
            fs_slot,
            refused: 0,
            refused_version: 0,
            master,
        };
        self.reactor.add(NewConn {
            stream,
            peer,
            bulk_len_max: self.bulk_len_max,
            sink: Box::new(sink),
            opener,
        });
    }
}

fn log_role_refusal(caller: &crate::Caller, opcode: u16, need: nacre_wire::roles::Need) {
    crate::caller::log_refusal(|| {
        format!(
            "refused request {opcode:#06x} from {}: only a {} may send it",
            caller.describe(),
            need.name()
        )
    });
}

fn log_refusal(peer: &str, open: u64) {
    crate::caller::log_refusal(|| {
        format!("refusing a connection from {peer}: {open} connections open (conns_max)")
    });
}

/// A server connection's frames: requests, routed to their service.
struct ServerSink {
    router: Arc<Router>,
    /// Who the peer is (role, proved key, address), for every request it sends.
    caller: Arc<crate::Caller>,
    stats: Arc<NetStats>,
    /// Requests refused for the peer's role (the first is logged).
    refused_role: u64,
    peer: String,
    cpt: usize,
    replier: Arc<TcpReplier>,
    /// The slot of the file system whose key the connection's handshake proved (None: no
    /// handshake): its frames may name that file system's targets only.
    fs_slot: Option<u16>,
    /// Frames refused for naming another file system (the first is logged).
    refused: u64,
    /// Requests refused for their protocol version (the first is logged).
    refused_version: u64,
    /// The master key the connection's handshake was checked with, which a rotation may
    /// retire (None: no handshake).
    master: Option<MasterCheck>,
}

/// A connection's master key, checked again each time the server retires one.
struct MasterCheck {
    fsname: String,
    id: crate::sec::KeyId,
    keys: ServerKeys,
    /// [`ServerKeys::retired`] when last checked.
    retired_seen: u64,
}

impl MasterCheck {
    /// True while the server holds the key (one atomic load per frame while none was
    /// retired since the last check).
    fn held(&mut self) -> bool {
        let now = self.keys.retired();
        if now == self.retired_seen {
            return true;
        }
        self.retired_seen = now;
        self.keys.find(&self.fsname, Some(self.id)).is_some()
    }
}

impl ServerSink {
    /// Answers a request of a protocol version this server does not speak: a reply of the
    /// request's own header version, `EPROTO`, and this server's range as its body
    /// (nacre_wire::version). The connection stays open for a resend in a version both
    /// speak; the first refusal of a connection is logged.
    fn refuse_version(&mut self, header: Header) {
        let ours = nacre_wire::version::Range::OURS;
        if self.refused_version == 0 {
            tracing::warn!(
                "{} speaks protocol {}; this server speaks {}: answered EPROTO with its range",
                self.peer,
                header.version,
                ours
            );
        }
        self.refused_version += 1;
        self.stats
            .requests_refused_version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut header = header;
        header.flags = nacre_wire::header::FLAG_REPLY;
        header.status = nacre_types::Status::Proto.code();
        let body = ours.encode();
        header.seal(&body, None, false);
        self.replier.send(&self.peer, &header, &body, None);
    }
}

impl FrameSink for ServerSink {
    fn frame(&mut self, frame: RawFrame, permit: Option<BudgetPermit>) -> Result<(), String> {
        let bulk = frame.bulk.map(Arc::new);
        self.accept(frame.header, frame.body, (bulk, None), permit)
    }

    fn streams(&mut self, header: &Header) -> bool {
        // Only requests this connection may send, of a version spoken here, for a handler
        // that asked (anything else is judged with its bulk whole, as before).
        !header.is_reply()
            && nacre_wire::version::speaks(header.version)
            && self.caller.may(nacre_wire::roles::need_of(header.opcode))
            && self.router.streams(header)
    }

    fn frame_streamed(
        &mut self,
        header: Header,
        body: Vec<u8>,
        stream: Arc<BulkStream>,
    ) -> Result<(), String> {
        self.accept(header, body, (None, Some(stream)), None)
    }

    fn closed(&mut self, _cause: &str) {
        self.replier.close();
    }
}

impl ServerSink {
    /// A request read (its bulk whole, or arriving into a stream): checked against the
    /// connection's key and role, then routed.
    fn accept(
        &mut self,
        header: Header,
        body: Vec<u8>,
        (bulk, stream): (Option<Arc<AlignedBuf>>, Option<Arc<BulkStream>>),
        permit: Option<BudgetPermit>,
    ) -> Result<(), String> {
        if header.is_reply() {
            return Err("unexpected reply frame".into());
        }
        if let Some(m) = self.master.as_mut() {
            if !m.held() {
                // Its master key was retired by a rotation: dropped here, and its next
                // handshake is told so (the client reads its key again).
                let (who, id) = (self.caller.describe(), m.id);
                crate::caller::refused(|| {
                    format!("{who}: its master key {id} is retired: connection dropped")
                });
                return Err("its master key is retired".into());
            }
        }
        if let (Some(slot), Some(id)) = (self.fs_slot, self.caller.proved()) {
            // A client key revoked since this connection's handshake: dropped here, and
            // its next handshake is refused.
            if id.role == crate::sec::Role::Client
                && nacre_wire::nodemap::active().is_revoked(slot, &id.name, id.nodemap.as_deref())
            {
                let who = self.caller.describe();
                crate::caller::refused(|| format!("{who}: its key is revoked: connection dropped"));
                return Err("its key is revoked".into());
            }
        }
        if !nacre_wire::version::speaks(header.version) {
            self.refuse_version(header);
            return Ok(());
        }
        let req = Incoming {
            header,
            body,
            bulk,
            stream,
            peer: self.peer.clone(),
            caller: self.caller.clone(),
            reply_to: ReplySink::Tcp(self.replier.clone()),
            _budget: permit,
            home: None,
            resubmits: 0,
            qos_admitted: false,
            weight: 0,
        };
        if let Some(slot) = self.fs_slot {
            let named = nacre_types::target_slot(req.header.target);
            if named != slot {
                // The key proves the file system the handshake named, and no other: a
                // frame for another file system's targets (or none) is answered EACCES.
                if self.refused == 0 {
                    tracing::warn!(
                        "{}: a connection proved the key of file system slot {slot} but \
                         named slot {named}: refused",
                        self.peer
                    );
                }
                self.refused += 1;
                req.reply(Outgoing::error(nacre_types::Status::Access));
                return Ok(());
            }
        }
        let need = nacre_wire::roles::need_of(req.header.opcode);
        if self.caller.may(need) {
            self.router.route(req, self.cpt);
            return Ok(());
        }
        // Who may send what: docs/security.md. Refused before the body is decoded; a peer
        // without a key is judged again once the servers' addresses are learnt again (a
        // server that started a moment ago).
        // A starting server process learns its peers' addresses before it adds its
        // services: judge after that, as the request would have waited for its service.
        self.router.wait_for_service(req.header.opcode);
        let first = self.refused_role == 0;
        self.refused_role += 1;
        let (router, stats, caller, cpt) = (
            self.router.clone(),
            self.stats.clone(),
            self.caller.clone(),
            self.cpt,
        );
        crate::caller::after_refresh(
            &self.caller.clone(),
            Box::new(move || match caller.may(need) {
                true => router.route(req, cpt),
                false => {
                    stats.requests_refused_role.fetch_add(1, Ordering::Relaxed);
                    if first {
                        log_role_refusal(&caller, req.header.opcode, need);
                    }
                    req.reply(Outgoing::error(nacre_types::Status::Perm));
                }
            }),
        );
        Ok(())
    }
}
