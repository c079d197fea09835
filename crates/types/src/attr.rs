//! File attributes as the MDS stores them and the client reports them.

use crate::fid::Fid;
use serde::{Deserialize, Serialize};

/// Seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct TimeSpec {
    /// Whole seconds.
    pub sec: i64,
    /// Nanoseconds, below 1e9.
    pub nsec: u32,
}

impl TimeSpec {
    /// The current wall-clock time.
    pub fn now() -> TimeSpec {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        TimeSpec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }

    /// Converts to a `SystemTime` (times before the epoch are clamped to it).
    pub fn to_system_time(self) -> std::time::SystemTime {
        let secs = self.sec.max(0) as u64;
        std::time::UNIX_EPOCH + std::time::Duration::new(secs, self.nsec.min(999_999_999))
    }

    /// Converts from a `SystemTime`.
    pub fn from_system_time(t: std::time::SystemTime) -> TimeSpec {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => TimeSpec {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(e) => TimeSpec {
                sec: -(e.duration().as_secs() as i64),
                nsec: 0,
            },
        }
    }
}

/// Kind of namespace object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    /// Regular file, data on OSTs.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link; target stored on the MDT.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Unix socket.
    Socket,
}

impl FileKind {
    /// The S_IFMT bits for this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => libc::S_IFREG,
            FileKind::Directory => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::CharDevice => libc::S_IFCHR,
            FileKind::BlockDevice => libc::S_IFBLK,
            FileKind::Socket => libc::S_IFSOCK,
        }
    }

    /// The kind named by the S_IFMT bits of `mode`.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Some(FileKind::Regular),
            libc::S_IFDIR => Some(FileKind::Directory),
            libc::S_IFLNK => Some(FileKind::Symlink),
            libc::S_IFIFO => Some(FileKind::Fifo),
            libc::S_IFCHR => Some(FileKind::CharDevice),
            libc::S_IFBLK => Some(FileKind::BlockDevice),
            libc::S_IFSOCK => Some(FileKind::Socket),
            _ => None,
        }
    }
}

/// Attributes of one inode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    /// Identity.
    pub fid: Fid,
    /// Kind.
    pub kind: FileKind,
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Hard links.
    pub nlink: u32,
    /// Size in bytes. For regular files the MDS value is a hint; the client glimpses OSTs.
    pub size: u64,
    /// Allocated 512-byte blocks.
    pub blocks: u64,
    /// Last access.
    pub atime: TimeSpec,
    /// Last data modification.
    pub mtime: TimeSpec,
    /// Last status change.
    pub ctime: TimeSpec,
    /// Device number for device nodes.
    pub rdev: u32,
    /// Project ID (quotas, `nacre project`; 0: none).
    pub project: u32,
    /// A directory whose new entries take its project, and new subdirectories this flag too
    /// (Lustre's `PROJINHERIT`).
    pub proj_inherit: bool,
}

impl Attr {
    /// Full `st_mode`: type bits and permission bits.
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | (self.perm & 0o7777)
    }
}

/// A request to change attributes; `None` leaves a field as it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeSpec>,
    /// New modification time.
    pub mtime: Option<TimeSpec>,
    /// New change time (otherwise the server sets it to now).
    pub ctime: Option<TimeSpec>,
    /// `atime`/`mtime` are "now" (`utimensat` with `UTIME_NOW`, `touch`): the owner or anyone
    /// who may write the file may set them; explicit times need the owner.
    pub times_now: bool,
    /// The change comes through a descriptor open for writing (`ftruncate`): the write
    /// permission was checked at open, as the kernel does.
    pub from_open: bool,
    /// New project ID (root only).
    pub project: Option<u32>,
    /// A directory's new project inheritance: new entries take its project (root only).
    pub proj_inherit: Option<bool>,
    /// Clear set-user-ID, and set-group-ID where group-execute is set, as a write by a
    /// caller without `CAP_FSETID` does (the kernel says so with
    /// `FUSE_WRITE_KILL_SUIDGID`): anyone who may write the file may ask it, the owner or
    /// not.
    pub kill_suidgid: bool,
}

/// Set-user-ID (`S_ISUID`).
pub const S_ISUID: u32 = 0o4000;
/// Set-group-ID (`S_ISGID`).
pub const S_ISGID: u32 = 0o2000;
/// Group-execute (`S_IXGRP`).
pub const S_IXGRP: u32 = 0o0010;

/// The permission bits `perm` keeps once a write, truncate or chown cleared the set-id
/// bits as Linux does (`should_remove_suid`, `setattr_should_drop_sgid`): set-user-ID goes;
/// set-group-ID goes where group-execute is set, and without it too when the caller is
/// neither in the file's group nor privileged (`in_group_or_capable`).
pub fn kill_privs(perm: u32, in_group_or_capable: bool) -> u32 {
    let mut p = perm & !S_ISUID;
    if p & S_IXGRP != 0 || !in_group_or_capable {
        p &= !S_ISGID;
    }
    p
}

/// True if `perm` has a set-id bit a write may clear ([`kill_privs`]).
pub fn has_setid(perm: u32) -> bool {
    perm & (S_ISUID | S_ISGID) != 0
}

/// A stored access time this old (seconds) is refreshed by the next access (relatime).
pub const RELATIME_S: i64 = 86_400;

/// True if an access at `now` to a file with `attr` is to be recorded, as Linux's
/// `relatime` decides: the stored access time is not after the last modification or
/// change, or is [`RELATIME_S`] old or more (the MDT and a mount answering reads itself
/// apply the same rule).
pub fn relatime_due(attr: &Attr, now: crate::TimeSpec) -> bool {
    attr.atime <= attr.mtime || attr.atime <= attr.ctime || now.sec - attr.atime.sec >= RELATIME_S
}

/// Capacity of one target (or a whole file system).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StatFs {
    /// Total bytes.
    pub bytes_total: u64,
    /// Free bytes.
    pub bytes_free: u64,
    /// Bytes available to unprivileged users.
    pub bytes_avail: u64,
    /// Total inodes (or objects).
    pub files_total: u64,
    /// Free inodes.
    pub files_free: u64,
    /// Preferred I/O size.
    pub block_size: u32,
}
