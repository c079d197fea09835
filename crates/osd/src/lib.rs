//! Target storage, the layer Lustre calls the OSD.
//!
//! * [`label`]: the label every formatted target carries (fsname, kind, index, uuid, format
//!   version), checksummed, so a server refuses a target of another file system.
//! * [`ObjectStore`]: an OST's objects as files on a local file system, with an O_DIRECT path
//!   for aligned I/O that bypasses the page cache, and buffered I/O for the rest.
//! * [`mmp`]: multi-mount protection, so a target on shared storage is served by one server
//!   of its failover pair at a time.
//! * [`csum`]: checksums of stored data (crc32c per 4 KiB chunk), checked on every read.
//! * [`usage`]: space used per user, group and project (quotas).
//! * `ranges`: which chunks of which objects a change holds, so changes of disjoint parts
//!   of one object run together.
//!
//! Invariant: an object that does not exist reads as empty (size 0); writes create it.

pub mod csum;
pub mod label;
pub mod mmp;

pub mod objects;
mod ranges;
mod uring;
pub mod usage;

pub use label::{Label, LabelError};
pub use objects::{ObjectStore, OsdError};
