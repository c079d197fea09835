//! The version of every stored record (docs/formats.md, "Records"): each record type has
//! its own version byte ([`Record::VERSION`], the newest it reads and the one it writes) and
//! its own decoder of each version it ever wrote ([`Record::decode_version`]), so types
//! never share version numbers. A record of a newer version than this nacre reads is
//! [`RecordError::TooNew`], never taken for damage: a pass over a table stops on it rather
//! than skip it.

use nacre_types::Status;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Why a stored record could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Written by a newer nacre (or after a downgrade past the target's label): not damage,
    /// never skipped, repaired or overwritten.
    #[error(
        "MDT {what} version {found} is newer than this nacre reads (up to {newest}): upgrade nacre"
    )]
    TooNew {
        /// The record type ([`Record::NAME`]).
        what: &'static str,
        /// The version byte found.
        found: u8,
        /// The newest version this nacre reads ([`Record::VERSION`]).
        newest: u8,
    },
    /// Bytes no version of the type decodes: empty, a version that never existed, or a
    /// body that does not decode as its version says.
    #[error("damaged MDT {what}: {detail}")]
    Damaged {
        /// The record type ([`Record::NAME`]).
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
}

impl RecordError {
    /// A version byte no version of `what` ever had (at most its newest: not too new).
    pub fn unknown_version(what: &'static str, version: u8) -> RecordError {
        RecordError::Damaged {
            what,
            detail: format!("unknown version {version}"),
        }
    }

    /// True if the record is of a newer version than this nacre reads.
    pub fn is_too_new(&self) -> bool {
        matches!(self, RecordError::TooNew { .. })
    }

    /// Logs the error once, naming the MDT `mdt` ("MDT0000"), and gives the status of the
    /// request or pass that met it: `EIO`.
    pub fn logged(self, mdt: &str) -> Status {
        tracing::error!("{mdt}: {self}");
        Status::Io
    }
}

impl From<RecordError> for Status {
    /// `EIO`, the error logged (without the MDT's name: for callers that do not know it;
    /// those that do use [`RecordError::logged`]).
    fn from(e: RecordError) -> Status {
        tracing::error!("{e}");
        Status::Io
    }
}

/// A record type stored as `[version] bytes`, with its version and its decoders.
pub trait Record: Sized {
    /// What the record is, in messages ("inode record").
    const NAME: &'static str;
    /// The version this nacre writes, and the newest it reads.
    const VERSION: u8;
    /// Decodes `body`, the bytes after the version byte, stored at `version` (at most
    /// [`Record::VERSION`]: [`decode_record`] refuses newer ones first). A version the type
    /// never had, or a body that does not decode, is [`RecordError::Damaged`]; never a panic.
    fn decode_version(version: u8, body: &[u8]) -> Result<Self, RecordError>;
}

/// A record stored as `[VERSION] postcard(record)` (every record but inodes, which keep the
/// inode's version between the byte and the record: `encode_inode`).
pub trait PlainRecord: Record + Serialize {}

/// Encodes `rec` in the current version of its type: `[VERSION] postcard(rec)`.
pub fn encode_record<T: PlainRecord>(rec: &T) -> Vec<u8> {
    let mut out = vec![T::VERSION];
    out.extend(postcard::to_allocvec(rec).expect("in-memory serialization"));
    out
}

/// Decodes a stored record of type `T` of any version `T` reads, as the current type
/// (upgrade on read); a newer version is [`RecordError::TooNew`].
pub fn decode_record<T: Record>(bytes: &[u8]) -> Result<T, RecordError> {
    let Some((&version, body)) = bytes.split_first() else {
        return Err(RecordError::Damaged {
            what: T::NAME,
            detail: "empty".to_string(),
        });
    };
    if version > T::VERSION {
        return Err(RecordError::TooNew {
            what: T::NAME,
            found: version,
            newest: T::VERSION,
        });
    }
    T::decode_version(version, body)
}

/// `body` as postcard of `U` (one version's shape of the record `what`).
pub fn from_postcard<U: DeserializeOwned>(
    what: &'static str,
    body: &[u8],
) -> Result<U, RecordError> {
    postcard::from_bytes(body).map_err(|e| RecordError::Damaged {
        what,
        detail: e.to_string(),
    })
}
