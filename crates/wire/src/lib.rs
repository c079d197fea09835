//! The Nacre wire format (docs/wire-protocol.md has the byte layout).
//!
//! Every message is a frame: a fixed 48-byte little-endian header (`header::Header`) with
//! its own crc32c, then a body (a `postcard`-encoded message of one service's enum) with a
//! body crc32c, then optional bulk data (file contents) with a bulk crc32c when the sender
//! asks for it (`FLAG_BULK_CHECKSUM`, on by default; `--checksum false` per mount). The
//! header holds magic `NACR`, version, opcode (`service << 8 | operation`), flags, status,
//! target (`slot << 16 | index`: the file system's slot and the target's index), body
//! length, xid, bulk length and the three checksums.
//!
//! A receiver checks magic, version, header checksum and both lengths against limits (body
//! at most 1 MiB, bulk at most the receiver's `max_rpc_size` ceiling of 16 MiB) before it
//! reads or allocates anything; then the body checksum; then the bulk checksum. Any failure
//! drops the connection. `Header::check_bulk_chunked` checks a request's bulk chunk by chunk
//! and keeps each 4 KiB chunk's crc32c for the object store; `Header::seal_known` seals a
//! reply whose bulk checksum is known already (from the store's own check). Decoding is
//! total: bad bytes give a `WireError`, never a panic.
//!
//! One message enum per service, the opcode's high byte:
//!
//! * service 0, the network layer itself: ping (`OP_PING`), discovery (`OP_DISCOVER`) and
//!   the self-test (`selftest`);
//! * 1 `mgs`: registration, the configuration (`FsConfig`, OST pools included), target
//!   events, parameters, nodemaps, quota and QoS traffic with the masters, audit records;
//! * 2 `mds`: an `MdsCall` (client uuid, lowest xid still unanswered, job id, credentials,
//!   lock bits wanted) around one `MdsOp`, answered by an `MdsAnswer` (transno,
//!   `last_committed`, epoch, versions, lock, capabilities) around one `MdsReply`;
//!   `mds/remote.rs` holds what MDTs send each other, `mds/changelog.rs` changelog records;
//! * 3 `oss`: an `OssCall` (client uuid, job id, credentials, capability) around one
//!   `OssRequest`, answered by an `OssReply`; data travels as bulk, never in the body;
//! * 4 `failover`: take over or release a target of a failover pair;
//! * 5 `mover`: stage requests (`nacre stage`);
//! * 6 `api`: the node's client API to local applications.
//!
//! Which service pool serves an opcode is said here too: `mds::READPAGE_OPCODES`
//! (`mdt_readpage`), `oss::IO_OPCODES` (`ost_io`), `oss::CREATE_OPCODES` (`ost_create`), and
//! the short requests a server serves on its network thread (`mds::INLINE_OPCODES`,
//! `oss::INLINE_OPCODES`).
//!
//! Also here:
//!
//! * `nodemap`: nodemaps (address ranges, id mapping both ways) and the set a server process
//!   enforces, installed by its sync with the MGS;
//! * `roles`: the roles (client, server, admin) and who may send each opcode;
//! * `capa`: object capabilities, made by MDTs with opens and checked by OSTs;
//! * `ring`: the shared-memory layout of the node API's rings (header, entries, buffers);
//! * `quota`: quota messages between slaves, the master and tools, and the master's grant
//!   arithmetic (docs/quota.md);
//! * `qos`: QoS rules, the demand and share messages, and the split of a rate by demand
//!   (docs/qos.md).

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
pub mod version;

pub use header::{Header, HEADER_BYTES};

/// Current protocol version, carried in every header (2: requests carry credentials and
/// object owners; 3: metadata locks — intents, grants, callback polls and cancels; 4:
/// readdirplus, byte-range locks; 5: extent locks on OST objects — client uuids at OSTs,
/// read locks granted with reads, callback polls and cancels; 6: version negotiation; 7:
/// composite layouts — a layout is components by file extent; 8: components instantiated as
/// the file grows — layouts with components that have no objects yet, `LayoutIntent`; 9:
/// block quotas of data on the MDT — quota slaves name what they count, an MDT's quota usage
/// and checks carry its bytes; 10: creates with FIDs the client gives — `GrantFids`,
/// `CreateBatch`; 11: a batch's creates carry the time the client answered them; 12:
/// unlinks answered by the client, sent many per request — `UnlinkBatch`; 13: a batch's
/// creates carry the bytes their creator wrote (data on the MDT), `DelegateDir` says how
/// many may come; 14: reads the client answered itself are recorded as accesses —
/// `AccessBatch`; 15: a close says whether it moves the file's times — `Close::touch`; 16:
/// directories answered by the client — `BatchCreate::kind`, `Delegated::mkdirs`; 17: locks
/// granted with a batch's creates — `MdsAnswer::locks`).
pub const PROTOCOL_VERSION: u16 = 17;

/// Oldest protocol version this side speaks (docs/formats.md, "Negotiation"): a frame of a
/// version in `PROTOCOL_VERSION_MIN..=PROTOCOL_VERSION` is decoded; one outside it is read
/// whole and answered `EPROTO` with this side's range ([`version`]). 7: a protocol-6 peer
/// would read a composite layout as a plain one; 8: a protocol-7 peer would take a component
/// without objects for a hole it may write into; 9: a protocol-8 quota slave or tool would
/// misread the quota messages; 10: one range per release (the tools and messages name a
/// single version), though 10 only added requests; 11: a protocol-10 `CreateBatch` has no
/// times; 12: one range per release (12 only added `UnlinkBatch`); 13: a protocol-12
/// `CreateBatch` item has no bytes; 14: one range per release (14 only added `AccessBatch`);
/// 16: a protocol-15 `CreateBatch` item has no kind; 17: a protocol-16 answer has no
/// `locks`. Both sides of a file system upgrade together (docs/formats.md, "Negotiation").
pub const PROTOCOL_VERSION_MIN: u16 = 17;

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
