//! Saved replies (table `replies`): `[4] postcard(SavedReply)`, the reply of a change saved
//! with it for a resend (exactly once). Versions read: 4 (now: the protocol version of the
//! body), 3 (no protocol: 6), 2 (no pre-versions either: none), 1 (no transaction number
//! either: 0).

use super::versions::{from_postcard, PlainRecord, Record, RecordError};
use nacre_types::{Fid, Status};
use serde::{Deserialize, Serialize};

/// A reply saved with the change it reports.
///
/// The fields are stored in this order (postcard): `protocol` comes after `transno`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedReply {
    /// Status code.
    pub status: i32,
    /// Encoded reply body (an `MdsReply`, in protocol `protocol`; empty with an error).
    pub body: Vec<u8>,
    /// The change's transaction number (0: none, not replayable).
    pub transno: u64,
    /// The protocol version `body` is encoded in ([`nacre_wire::PROTOCOL_VERSION`] when it
    /// was saved).
    pub protocol: u16,
    /// Versions of the inodes the change touched, before it: a resent request's answer
    /// carries them like the first one, so its replay is version-checked too.
    pub pre_versions: Vec<(Fid, u64)>,
}

impl SavedReply {
    /// The reply to save for `result`, in this nacre's protocol (no transaction number, no
    /// versions: set them for a change clients replay).
    pub fn of(result: &Result<nacre_wire::mds::MdsReply, Status>) -> SavedReply {
        SavedReply {
            status: result.as_ref().err().map_or(0, |s| s.code()),
            body: result
                .as_ref()
                .map(nacre_wire::encode_body)
                .unwrap_or_default(),
            transno: 0,
            protocol: nacre_wire::PROTOCOL_VERSION,
            pre_versions: Vec::new(),
        }
    }
}

/// Saved replies with the protocol version of their body.
const SAVED_REPLY_VERSION: u8 = 4;
/// Saved replies with versions, before the protocol version of the body.
const SAVED_REPLY_VERSION_NO_PROTOCOL: u8 = 3;
/// Saved replies with a transaction number and no versions.
const SAVED_REPLY_VERSION_NO_VERSIONS: u8 = 2;
/// Saved replies with neither a transaction number nor versions.
const SAVED_REPLY_VERSION_NO_TRANSNO: u8 = 1;

/// The protocol every saved reply before version 4 was encoded in: the protocol when
/// version 4 came (fixed: it is what those records hold, whatever the protocol is now).
pub(crate) const PROTOCOL_OF_OLD_SAVED_REPLIES: u16 = 6;

/// Saved replies as version 3 stored them (no protocol version).
#[derive(Deserialize)]
struct V3 {
    status: i32,
    body: Vec<u8>,
    transno: u64,
    pre_versions: Vec<(Fid, u64)>,
}

/// Saved replies as version 2 stored them (no versions).
#[derive(Deserialize)]
struct V2 {
    status: i32,
    body: Vec<u8>,
    transno: u64,
}

/// Saved replies as version 1 stored them (no transaction number).
#[derive(Deserialize)]
struct V1 {
    status: i32,
    body: Vec<u8>,
}

impl Record for SavedReply {
    const NAME: &'static str = "saved reply";
    const VERSION: u8 = SAVED_REPLY_VERSION;

    fn decode_version(version: u8, body: &[u8]) -> Result<SavedReply, RecordError> {
        let old =
            |status: i32, body: Vec<u8>, transno: u64, pre_versions: Vec<(Fid, u64)>| SavedReply {
                status,
                body,
                transno,
                protocol: PROTOCOL_OF_OLD_SAVED_REPLIES,
                pre_versions,
            };
        match version {
            SAVED_REPLY_VERSION => from_postcard(Self::NAME, body),
            SAVED_REPLY_VERSION_NO_PROTOCOL => from_postcard::<V3>(Self::NAME, body)
                .map(|v| old(v.status, v.body, v.transno, v.pre_versions)),
            SAVED_REPLY_VERSION_NO_VERSIONS => from_postcard::<V2>(Self::NAME, body)
                .map(|v| old(v.status, v.body, v.transno, Vec::new())),
            SAVED_REPLY_VERSION_NO_TRANSNO => {
                from_postcard::<V1>(Self::NAME, body).map(|v| old(v.status, v.body, 0, Vec::new()))
            }
            v => Err(RecordError::unknown_version(Self::NAME, v)),
        }
    }
}

impl PlainRecord for SavedReply {}
