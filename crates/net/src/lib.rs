//! Nacre's network layer, in the manner of LNet and ptlrpc.
//!
//! * [`frame`] reads and writes frames on a byte stream, bounding every length before
//!   allocating and receiving bulk data straight into page-aligned buffers.
//! * [`Connection`] is a client's link to one server NID: many RPCs in flight
//!   (`max_rpcs_in_flight`), replies matched by xid, reconnect and resend with the same xid when
//!   the link breaks. It uses the in-process transport when the server lives in the same process.
//! * [`Server`] accepts connections and hands requests to [`ServicePool`]s: per-CPU-partition
//!   bounded queues, each drained by its own service threads, as Lustre's ptlrpc services are.
//!
//! Invariants: a reply is delivered to the caller that owns its xid and to no one else; a
//! connection that sends a malformed frame is dropped, never allowed to stall others.

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
