//! Limits enforced by every layer. Names carry their unit last.

/// Longest file name component, as in POSIX NAME_MAX.
pub const NAME_BYTES_MAX: usize = 255;
/// Upper bound on a directory's link count (subdirectories + 2), as ext4's: a mkdir past
/// it is refused `EMLINK`.
pub const DIR_NLINK_MAX: u32 = 65_000;
/// Longest symlink target (PATH_MAX).
pub const SYMLINK_BYTES_MAX: usize = 4096;
/// Longest extended attribute name (XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest extended attribute value (XATTR_SIZE_MAX).
pub const XATTR_VALUE_BYTES_MAX: usize = 65536;
/// Most OSTs a file may be striped over.
pub const STRIPE_COUNT_MAX: u16 = 2000;
/// Smallest stripe size (one page, as Lustre's 64 KiB minimum is relaxed for tests).
pub const STRIPE_SIZE_BYTES_MIN: u32 = 64 * 1024;
/// Largest stripe size (4 GiB - 64 KiB, as in Lustre).
pub const STRIPE_SIZE_BYTES_MAX: u32 = u32::MAX - 65535;
/// Largest message body (the serialized request or reply, not bulk data).
pub const BODY_BYTES_MAX: u32 = 1024 * 1024;
/// Largest bulk transfer one RPC may carry (the `max_rpc_size` ceiling).
pub const BULK_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Default `max_rpc_size`: bulk bytes per RPC.
pub const RPC_SIZE_BYTES_DEFAULT: u32 = 4 * 1024 * 1024;
/// Default `max_rpcs_in_flight` per connection. Lustre's is 8, a figure of slower disks
/// and networks: with flash OSTs, 8 per OST left sequential and small random reads short of
/// what the OSTs give (docs/tuning.md, "RPCs in flight").
pub const RPCS_IN_FLIGHT_DEFAULT: usize = 32;
/// Most directory entries one readdir RPC returns.
pub const READDIR_ENTRIES_MAX: u32 = 4096;
/// Alignment Nacre keeps for direct I/O on the OSTs' file systems (buffers, offsets and
/// lengths): at least their logical block size (512 B or 4 KiB on ext4 and XFS as usually
/// formatted), not the memory page size, which may be 64 KiB (crate::page). Each OST asks
/// its file system (`statx` `STATX_DIOALIGN`, nacre_osd::dioalign) and runs buffered if it
/// wants more.
pub const DIRECT_IO_ALIGN_BYTES: usize = 4096;
/// Largest file offset Nacre accepts (Lustre's 2^63 - 1 limit, kept below i64::MAX for pwrite).
pub const FILE_BYTES_MAX: u64 = (1u64 << 62) - 1;
