//! Target storage, the layer Lustre calls the OSD.
//!
//! Invariant: an object that does not exist reads as empty (size 0); writes create it.
//!
//! * `label`: the label every formatted target carries in `DIR/nacre-label` (fsname, kind,
//!   index, uuid, format version, MGS NID, and the service nodes of a failover pair),
//!   checksummed, so a server refuses a target of another file system.
//! * `mmp`: multi-mount protection, so a target on shared storage is served by one server of
//!   its failover pair at a time: a sequence record the owner renews, takers watch, and a
//!   lease checked per request.
//! * `ObjectStore` (objects.rs): an OST's objects as files on a local file system,
//!   `ROOT/O/<seq>/d<id % 32>/<id>`. Aligned I/O goes through an O_DIRECT descriptor (no page
//!   cache on the OSS; `osd.*.direct_io`), unaligned parts through a buffered descriptor of
//!   the same file. At most 1024 objects are kept open. An object records its owner in the
//!   `user.nacre.owner` extended attribute (12 bytes; one of another length is a newer
//!   nacre's: never overwritten). `read_many` reads several objects at once.
//! * `uring`: the reads of `read_many` submitted together on the thread's own io_uring: one
//!   system call and one sleep for all, every completion reaped before it returns. A thread
//!   whose kernel refuses io_uring reads one by one.
//! * `csum`: crc32c per 4 KiB chunk of stored data in `<id>.crc` (the current and the
//!   previous checksum of each chunk, written before the data), verified on every read. A
//!   read from the start of a chunk keeps the chunks' checksums appended
//!   (`nacre_types::crc::append`) as its buffer's `known_crc32c`, which the reply's frame
//!   takes instead of a second pass over the data (`Header::seal_known`). A write's whole
//!   chunks take the checksums the network thread kept when it checked the request's bulk
//!   chunk by chunk (`Header::check_bulk_chunked`, `ObjectStore::write_buf`).
//! * `ranges`: range locks: the chunks of an object each change holds. A write of whole
//!   chunks of an object with an owner holds only its chunks, so the pieces of a large write
//!   and the writers of a shared file's object write together; every other change holds the
//!   whole object. The space accounting of changes that ran together is settled once, when
//!   the last lets go.
//! * `dioalign`: whether the file system under a store takes Nacre's direct I/O (its
//!   `STATX_DIOALIGN` against Nacre's 4 KiB alignment); a store whose file system asks for
//!   more runs buffered.
//! * `usage`: bytes used per user, group and project, charged by every change and counted
//!   again from the objects at every start (quotas).

pub mod csum;
pub mod dioalign;
pub mod label;
pub mod mmp;

pub mod objects;
mod ranges;
mod uring;
pub mod usage;

pub use label::{Label, LabelError};
pub use objects::{ObjectStore, OsdError};
