//! The items of batched namespace changes ([`super::MdsOp::CreateBatch`],
//! [`super::MdsOp::UnlinkBatch`]) and of batched accesses ([`super::MdsOp::AccessBatch`]):
//! what a client that answered them itself sends.

use nacre_types::Fid;
use serde::{Deserialize, Serialize};

/// One file or directory of a [`super::MdsOp::CreateBatch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchCreate {
    /// The FID the client gave it, from one of its grants.
    pub fid: Fid,
    /// A regular file or a plain directory of the batch's MDT (only where the delegation
    /// said so: [`super::MdsReply::Delegated::mkdirs`]); any other kind is refused.
    pub kind: nacre_types::FileKind,
    /// Name in the batch's directory.
    pub name: Vec<u8>,
    /// Permission bits (the client applied its umask).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// When the client answered the create: the file's times and its directory's
    /// modification, so they do not change when the batch arrives (the MDT's own clock
    /// instead when this is more than [`BATCH_TIME_SKEW_MS_MAX`] from it, or invalid).
    pub time: nacre_types::TimeSpec,
    /// The bytes its creator wrote from byte 0 before the batch went (empty: none), kept
    /// on the MDT with the file: only where the file's layout starts with a component on
    /// the MDT at least that long, at most [`CREATE_DATA_BYTES_MAX`], and
    /// [`CREATE_BATCH_DATA_BYTES_MAX`] over the batch; none for a directory.
    pub data: Vec<u8>,
}

/// Most bytes one [`BatchCreate`] carries (a file written further is opened at the MDT and
/// written as any other).
pub const CREATE_DATA_BYTES_MAX: usize = 64 * 1024;

/// Most bytes the items of one [`super::MdsOp::CreateBatch`] carry together (as one
/// [`super::MdsOp::DomWrite`]: well within a request's body).
pub const CREATE_BATCH_DATA_BYTES_MAX: usize = super::DOM_RPC_BYTES_MAX as usize;

/// Furthest a [`BatchCreate`]'s time may be from the MDT's clock to be taken.
pub const BATCH_TIME_SKEW_MS_MAX: u64 = 60_000;

/// Most files in one [`super::MdsOp::CreateBatch`].
pub const CREATE_BATCH_ITEMS_MAX: usize = 256;

/// One name of a [`super::MdsOp::UnlinkBatch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchUnlink {
    /// The file the name must lead to (as the client saw it).
    pub fid: Fid,
    /// Name in the batch's directory.
    pub name: Vec<u8>,
    /// When the client answered the unlink: its directory's modification (the MDT's own
    /// clock instead when this is more than [`BATCH_TIME_SKEW_MS_MAX`] from it, or invalid).
    pub time: nacre_types::TimeSpec,
}

/// Most names in one [`super::MdsOp::UnlinkBatch`].
pub const UNLINK_BATCH_ITEMS_MAX: usize = 256;

/// One read of a [`super::MdsOp::AccessBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchAccess {
    /// The file read.
    pub fid: Fid,
    /// When the client answered the read.
    pub time: nacre_types::TimeSpec,
}

/// Most reads in one [`super::MdsOp::AccessBatch`].
pub const ACCESS_BATCH_ITEMS_MAX: usize = 1024;
