//! The Nacre wire format.
//!
//! Every message is a frame: a fixed 48-byte header ([`header::Header`]) protected by its own
//! crc32c, then a body (a `postcard`-encoded message of one service's enum) protected by a body
//! crc32c, then optional bulk data (file contents) protected by a bulk crc32c when the sender
//! asks for it. The header is checked before anything else is read or allocated, so a receiver
//! never trusts a length it has not bounded. Decoding is total: bad bytes give a [`WireError`],
//! never a panic.
//!
//! One message enum per service: [`mgs`], [`mds`], [`oss`], [`failover`]; the ping ([`OP_PING`]) and the
//! [`selftest`] opcodes belong to the network layer itself.

pub mod api;
pub mod capa;
pub mod failover;
pub mod header;

pub mod mds;
pub mod mgs;
pub mod mover;
pub mod nodemap;
pub mod oss;
pub mod qos;
pub mod quota;
pub mod ring;
pub mod roles;
pub mod selftest;

pub use header::{Header, HEADER_BYTES};

/// Current protocol version, carried in every header (2: requests carry credentials and
/// object owners; 3: metadata locks — intents, grants, callback polls and cancels; 4:
/// readdirplus, byte-range locks; 5: extent locks on OST objects — client uuids at OSTs,
/// read locks granted with reads, callback polls and cancels).
pub const PROTOCOL_VERSION: u16 = 6;

/// Opcode of the network layer's ping (service 0).
pub const OP_PING: u16 = 0x0001;

/// Opcode of peer discovery (service 0): the reply body is the server's NIDs, a postcard
/// `Vec<Nid>`, so a client learns every interface (rail) of the server.
pub const OP_DISCOVER: u16 = 0x0004;

/// Services a server process multiplexes on one connection; the opcode's high byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Service {
    /// Network layer itself (ping).
    Net = 0,
    /// Management server.
    Mgs = 1,
    /// Metadata server.
    Mds = 2,
    /// Object storage server.
    Oss = 3,
    /// Failover control of a server's targets.
    Failover = 4,
    /// The data mover (stage in and out for jobs).
    Mover = 5,
    /// The node's client API to local applications ([`api`]).
    Api = 6,
}

impl Service {
    /// The service an opcode belongs to.
    pub fn of_opcode(opcode: u16) -> Option<Service> {
        match opcode >> 8 {
            0 => Some(Service::Net),
            1 => Some(Service::Mgs),
            2 => Some(Service::Mds),
            3 => Some(Service::Oss),
            4 => Some(Service::Failover),
            5 => Some(Service::Mover),
            6 => Some(Service::Api),
            _ => None,
        }
    }
}

/// Why bytes could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// Header magic is wrong: not a Nacre peer, or a desynchronised stream.
    #[error("bad magic {0:#010x}")]
    BadMagic(u32),
    /// Peer speaks another protocol version.
    #[error("unsupported protocol version {0}")]
    BadVersion(u16),
    /// Header checksum mismatch.
    #[error("header checksum mismatch")]
    HeaderChecksum,
    /// Body checksum mismatch.
    #[error("body checksum mismatch")]
    BodyChecksum,
    /// Bulk data checksum mismatch.
    #[error("bulk checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    BulkChecksum {
        /// Checksum the sender wrote.
        stored: u32,
        /// Checksum of the bytes received.
        computed: u32,
    },
    /// A length exceeds its limit.
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooLong {
        /// Which length.
        what: &'static str,
        /// Length given.
        len: u64,
        /// Limit.
        limit: u64,
    },
    /// Body does not decode as the expected message.
    #[error("malformed body: {0}")]
    Malformed(String),
    /// Opcode unknown to this service.
    #[error("unknown opcode {0:#06x}")]
    UnknownOpcode(u16),
}

/// Encodes a message body.
pub fn encode_body<T: serde::Serialize>(msg: &T) -> Vec<u8> {
    postcard::to_allocvec(msg).expect("in-memory serialization cannot fail")
}

/// Decodes a message body; trailing bytes are an error.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, WireError> {
    let (msg, rest) =
        postcard::take_from_bytes(body).map_err(|e| WireError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(WireError::Malformed(format!(
            "{} trailing bytes",
            rest.len()
        )));
    }
    Ok(msg)
}
