//! A client's connection to one server: many RPCs in flight, replies matched by xid,
//! reconnect and resend (same xid, `FLAG_RESEND`) when the link breaks, until a deadline.
//!
//! Multi-rail: a server may have several NIDs (interfaces). The connection asks the server
//! for all of them on first use (discovery, [`nacre_wire::OP_DISCOVER`]) and keeps one TCP
//! link per NID, a *rail*. Requests go round-robin over the healthy rails. A rail whose link
//! breaks, or that does not answer a request within `rail_timeout_ms`, is marked down, its
//! requests are resent on the other rails, and a background thread reconnects it; traffic
//! returns to it once it links up again (health).

mod link;
mod pending;
mod rails;

use crate::frame::{write_sealed, NoSigPipe};
use crate::queue::{oneshot, OneshotReceiver};
use crate::sec::FsKey;
use crate::{NetError, Reply, Request};
use link::{abort_link, Link};
use nacre_types::limits::{RPCS_IN_FLIGHT_DEFAULT, RPC_SIZE_BYTES_DEFAULT};
use nacre_types::AlignedBuf;
use nacre_types::Nid;
use nacre_wire::header::FLAG_BULK_CHECKSUM;
use nacre_wire::Header;
use parking_lot::{Condvar, Mutex};
pub use pending::PendingReply;
use rails::Rail;
pub use rails::{RailInfo, RAILS_MAX, RAIL_CONNECT_TIMEOUT_MS, RAIL_RETRY_MS};
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
