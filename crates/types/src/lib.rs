//! Nacre's shared vocabulary, used by every other crate. It performs no I/O and has no
//! state, so everything here is deterministic and unit-testable.
//!
//! * `fid`: FIDs (sequence, object id, version; each MDT allocates from sequences it owns,
//!   the root has a well-known FID, FIDs map one-to-one onto inode numbers) and OST object
//!   ids.
//! * `nid`: network identifiers, `ADDRESS@NETWORK` (an explicit port is accepted).
//! * `target`: target kinds and names, a file system's frame slot (from its name), and the
//!   frame's target field: `target_id` = `slot << 16 | index`.
//! * `layout`: composite layouts of RAID0 components by file extent, and their stripe
//!   arithmetic (default: one component of 1 stripe of 1 MiB).
//! * `dirstripe`: striped directories (Lustre's LMV) and their name hashes `fnv_1a_64` and
//!   `all_char`.
//! * `attr`: `Attr`, `SetAttr`, `StatFs`, `FileKind`.
//! * `status`: status codes carried in reply headers, and their errnos at the client edge.
//! * `limits`: the limits every layer enforces (names 255 bytes, bodies 1 MiB, bulk 16 MiB,
//!   stripe counts 2000, ...); names carry their unit last.
//! * `cred`: `Cred`, a caller's uid, gid and up to 128 supplementary groups; the thread's
//!   current credentials (`set_current`, `with`; a thread that set none sends the process's
//!   own); the permission-bits rule (`permits`). `Owner`: an object's uid, gid and project.
//! * `quota`: `QuotaId`, a user, group or project, and who may see its usage.
//! * `jobid`: the job id the current thread's RPCs carry.
//! * `run`: a mount's run-time file names, `/run/nacre/<mount point>.pid|log|api.sock`.
//! * `buf`: `AlignedBuf`, a buffer aligned for O_DIRECT and bulk data, or a view of
//!   memory another owns (`AlignedBuf::external`, e.g. the region of a ring a reply lands
//!   in). Large buffers are recycled through bounded per-size pools, one set per CPU
//!   partition: a thread declares its partition, and a buffer returns to the pool it came
//!   from. A buffer carries the crc32c of its bytes and of each 4 KiB chunk when whoever
//!   filled it had them; any change forgets them.
//! * `crc`: crc32c over 4 KiB chunks: each chunk's checksum, appended into the whole's by a
//!   table per byte, so no one passes over the bytes twice.
//! * `page`: the memory page size where it matters (`page_bytes`, `whole_pages`): 4 KiB
//!   on x86-64, often 64 KiB on aarch64.
//! * `units`: sizes with K/M/G/T suffixes and durations with s/m/h/d/w, as people write them.

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
pub mod page;
pub mod quota;
pub mod run;
pub mod status;
pub mod target;
pub mod units;

pub use attr::{Attr, FileKind, SetAttr, StatFs, TimeSpec};
pub use buf::AlignedBuf;
pub use cred::{Cred, Owner};
pub use fid::{Fid, ObjectId};
pub use layout::{Component, Layout, LayoutError, PoolName, StripeChunk, StripeObject};
pub use nid::{Nid, NidError};
pub use quota::{QuotaCheck, QuotaId, QuotaKind};
pub use status::Status;
pub use target::{
    fs_slot, target_id, target_index, target_name, target_slot, TargetKind, TARGET_INDEX_MAX,
};
