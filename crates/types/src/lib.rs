//! Nacre's shared vocabulary, used by every other crate.
//!
//! This crate owns the identifiers (FIDs, object ids, NIDs, xids, transnos), the RAID0 layout and
//! its stripe arithmetic, file attributes, the status codes carried on the wire, the limits every
//! layer enforces, and an aligned buffer for direct I/O. It performs no I/O and has no state, so
//! everything here is deterministic and unit-testable (sizes and durations as people write them
//! included).

pub mod attr;
pub mod buf;
pub mod crc;
pub mod cred;
pub mod dirstripe;
pub mod fid;
pub mod jobid;
pub mod layout;
pub mod limits;
pub mod nid;
pub mod quota;
pub mod run;
pub mod status;
pub mod target;
pub mod units;

pub use attr::{Attr, FileKind, SetAttr, StatFs, TimeSpec};
pub use buf::AlignedBuf;
pub use cred::{Cred, Owner};
pub use fid::{Fid, ObjectId};
pub use layout::{Layout, LayoutError, PoolName, StripeChunk, StripeObject};
pub use nid::{Nid, NidError};
pub use quota::{QuotaCheck, QuotaId, QuotaKind};
pub use status::Status;
pub use target::{
    fs_slot, target_id, target_index, target_name, target_slot, TargetKind, TARGET_INDEX_MAX,
};
