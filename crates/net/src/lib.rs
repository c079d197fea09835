//! Nacre's network layer, in the manner of LNet and ptlrpc.
//!
//! Invariants: a reply is delivered to the caller that owns its xid and to no one else; a
//! connection that sends a malformed frame is dropped, never allowed to stall others; a
//! handler never takes its caller's identity from a request body.
//!
//! Threads. A server reads every connection from a bounded set of network threads
//! (`reactor`, named `socknal_sd_NN`, one per CPU partition by default), not a thread per
//! connection; they parse frames, check them and hand each request to its service pool,
//! whose service threads (`SERVICE_PP_NNN`) run the handler and write the reply. A client
//! process reads all its connections' replies from one such thread (`rpc_reader_00`); the
//! thread that sends a request writes its frame itself.
//!
//! The modules:
//!
//! * `frame`: frame I/O on byte streams: vectored writes of header, body and bulk, sealed in
//!   order (`write_sealed`; `write_sealed_many` writes several replies on one connection in
//!   one system call), bounded reads, bulk received straight into page-aligned buffers.
//!   Sockets are written through `NoSigPipe` (`send`/`sendmsg` with `MSG_NOSIGNAL`), never
//!   raising SIGPIPE.
//! * `conn`: `Connection`, a client's link to one server: xids, RPCs in flight
//!   (`max_rpcs_in_flight`), replies matched by xid, reconnect and resend with the same xid
//!   (`FLAG_RESEND`) when the link breaks or a reply is late, until a deadline; a failover
//!   list of the servers that may serve the target. `start_into`: a reply's bulk is received
//!   into memory the caller registered, which the network thread asks the connection's
//!   `FrameSink` for (`bulk_into`) when the frame's header arrives. Peer discovery and
//!   multi-rail: one TCP link per server NID, requests round-robin over healthy rails, a
//!   rail that breaks or does not answer within `rail_timeout_ms` is marked down and its
//!   requests resent on the others; blocked writes time out after the rail timeout. A
//!   server in the same process is reached through the in-process transport.
//! * `reactor`: the network threads: epoll, frames parsed incrementally, for servers and
//!   clients alike. A request's bulk is checked chunk by chunk and the chunks' checksums are
//!   kept with the buffer for the object store.
//! * `limits`: `NetLimits` (connection cap, frame deadline, receive budget, reply send
//!   timeout), `NetStats`, and the `Budget` a frame's bytes are taken from before anything is
//!   allocated (docs/hardening.md).
//! * `caller`: who sent a request (`Caller`, on every `Incoming`): the role and key identity
//!   its connection's handshake proved, or without keys the role of its address (a
//!   registered server's address is a server), and the nodemap it is held to. The role
//!   table (`nacre_wire::roles`) is checked per request before routing.
//! * `sec`: shared-key security (docs/security.md). `sec/mod.rs`: keys with roles (server and
//!   admin keys hold the file system's master secret, client keys a secret derived for their
//!   name and nodemap) and protection levels. `sec/keyring.rs`: the process's own keys and
//!   the capability keys derived from them, read again from their file when servers say
//!   their master was retired. `sec/served.rs`: the master keys a server checks proofs with,
//!   and their rotation at run time (`nacre key add|use|retire` through the control socket,
//!   `key_admin.rs` in `nacre-server`). `sec/handshake.rs`: the handshake, run by the
//!   acceptor on a thread of its own (at most 64 at once), and by a `Connection` before a
//!   link is used. `sec/session.rs`: each connection's `Sealer`/`Opener`: MAC or AES-GCM per
//!   frame, a trailer of tags between body and bulk, checked by the network thread before
//!   delivery.
//! * `server`: `Server`: an acceptor per address, the network threads, and the router, also
//!   registered for in-process connections. A server listens on several interfaces, each
//!   bound to its partitions. While a server process starts (`Server::bind_starting`), the
//!   router holds requests for services not added yet.
//! * `ni`: network interfaces (`networks="tcp0(eth0)[0]"`) and their addresses.
//! * `router`: sends a request to its opcode's portal pool (`mdt_readpage`, `ost_io`,
//!   `ost_create`) or else to its service's pool; answers pings and discovery itself; serves
//!   the short opcodes a service names (`run_inline`) on the network thread
//!   (`net.run_inline`, on by default).
//! * `service`: `ServicePool`: a pinned thread pool and a bounded queue per CPU partition,
//!   threads grown from `threads_min` to `threads_max` under load, live partition counters.
//!   The portal rotor picks the partition: the connection's interface, round-robin, or a
//!   hash of the request's object or FID (`Handler::affinity`). A service thread offers each
//!   request to `Handler::park` first: a handler may park it and later queue it on its
//!   service again (`Incoming::resubmit`). A thread that takes a request its handler calls
//!   `batchable` also takes the batchable requests queued right behind it (up to the pool's
//!   `batch_max`, 16; none while a fault point is armed) and serves them with one
//!   `Handler::handle_batch`, each offered to `park` first as alone; the replies going back
//!   on one connection are written together. While `batch_threads_max` threads of a
//!   partition serve batches (default: one per CPU of the partition, at least 2), a
//!   batchable request wakes no other thread and goes with the next batch of one of them.
//! * `queue`: the service queues and reply slots, which block on a mutex and condition
//!   variable instead of spinning. A request with a weight (`Handler::weight`: a QoS rule's)
//!   is taken first, up to its weight in a row while unweighted ones wait, then one
//!   unweighted one, so nothing starves.
//! * `incoming`: a request as a handler sees it (`Incoming`: resubmitted, released by QoS
//!   with `Incoming::qos_release`, answered) and its reply's way back: to an in-process
//!   caller, or written on its TCP connection, shared by the threads replying there.
//! * `local`: the in-process transport: no socket, no copy, no checksum. A request marked
//!   `Request::inline` runs its handler in the calling thread.
//! * `rpc`: typed calls: encode, send, check the status, decode.
//! * `fault`: named fault points for recovery tests (kill, drop, pause, corrupt), armed by
//!   `NACRE_FAULT` at start or `fail_loc` through the control socket. Every service offers
//!   `SVC.OP.drop_request`, `drop_reply`, `unknown` (answered `EPROTO` as by an older
//!   server) and `after_commit_before_reply` for every request;
//!   `frame` offers `net.corrupt_body` and `net.corrupt_bulk` (docs/recovery.md).
//! * `selftest`: the network self-test: its handler, which every server process runs as a
//!   partitioned `selftest` service, and `run`, which drives ping, null and bulk read and
//!   write (brw) tests.

pub mod caller;
pub mod conn;
pub mod fault;
pub mod frame;
mod incoming;
pub mod limits;
pub mod local;
pub mod ni;
mod queue;
pub mod reactor;
pub mod router;
pub mod rpc;
pub mod sec;
pub mod selftest;
pub mod server;
pub mod service;
pub mod stream;

pub use caller::Caller;
pub use conn::{import_state, Connection, ImportStatus, NetConfig, PendingReply};

/// The NID of a request's peer as statistics name clients: `ADDR@tcp` for a TCP peer (the
/// port is the client's ephemeral one, so it is left out), `0@lo` for an in-process client.
pub fn peer_nid(peer: &str) -> String {
    match peer.parse::<std::net::SocketAddr>() {
        Ok(a) => format!("{}@tcp", a.ip()),
        Err(_) if peer == "local" => "0@lo".into(),
        Err(_) => peer.to_string(),
    }
}
pub use reactor::{NetLimits, NetStats};
pub use rpc::RpcError;
pub use server::{Listen, Server};
pub use service::{
    Handler, Incoming, Outgoing, PartitionStats, Rotor, ServiceConfig, ServicePartition,
    ServicePool,
};

use nacre_types::AlignedBuf;
use nacre_wire::{Header, WireError};
use std::sync::Arc;

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Could not reach the peer before the deadline.
    #[error("cannot reach {nid}: {cause}")]
    Unreachable {
        /// Peer.
        nid: String,
        /// Last error seen.
        cause: String,
    },
    /// The server refused this side in the handshake (no key, a wrong key), or did not
    /// prove it holds the file system's key.
    #[error("{nid} refused the connection: {why}")]
    Refused {
        /// Peer.
        nid: String,
        /// Why.
        why: String,
    },
    /// The connection broke while the request was in flight.
    #[error("connection to {0} lost")]
    Disconnected(String),
    /// No reply before the RPC timeout.
    #[error("request to {nid} timed out after {timeout_ms} ms")]
    TimedOut {
        /// Peer.
        nid: String,
        /// Timeout.
        timeout_ms: u64,
    },
    /// The peer sent bytes that do not decode.
    #[error("protocol error: {0}")]
    Wire(#[from] WireError),
    /// Local I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// A request as a client sends it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Service and operation.
    pub opcode: u16,
    /// Target index on the server.
    pub target: u32,
    /// Encoded message body.
    pub body: Vec<u8>,
    /// Bulk data to send (shared so a resend can send it again without a copy).
    pub bulk: Option<Arc<AlignedBuf>>,
    /// For the in-process transport: run the handler in the calling thread instead of handing
    /// the request to a service thread. Right for short requests (metadata, glimpses), where a
    /// thread hand-off costs more than the work; wrong for bulk I/O that should proceed on
    /// several OSTs in parallel.
    pub inline: bool,
}

impl Request {
    /// Marks the request as short enough to run inline on the in-process transport.
    pub fn inline(mut self) -> Request {
        self.inline = true;
        self
    }
}

/// A reply as a client receives it.
#[derive(Debug)]
pub struct Reply {
    /// Header (status, xid, lengths).
    pub header: Header,
    /// Encoded message body.
    pub body: Vec<u8>,
    /// Bulk data returned (reads).
    pub bulk: Option<AlignedBuf>,
}

impl Reply {
    /// The reply's status.
    pub fn status(&self) -> nacre_types::Status {
        nacre_types::Status::from_code(self.header.status)
    }
}
