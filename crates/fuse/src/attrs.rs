//! Conversions between Nacre attributes and FUSE's.

use fuser::{FileAttr, FileType, INodeNo};
use nacre_types::{Attr, FileKind};

/// FUSE file type of a Nacre kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Socket => FileType::Socket,
    }
}

/// FUSE attributes of a Nacre inode.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(crate::ino_of(a.fid)),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime.to_system_time(),
        mtime: a.mtime.to_system_time(),
        ctime: a.ctime.to_system_time(),
        crtime: a.ctime.to_system_time(),
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 1 << 20,
        flags: 0,
    }
}

/// A negative entry: node id 0, which the kernel caches as "no such name" for the entry
/// timeout given with it.
pub fn absent_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: std::time::UNIX_EPOCH,
        mtime: std::time::UNIX_EPOCH,
        ctime: std::time::UNIX_EPOCH,
        crtime: std::time::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 1 << 20,
        flags: 0,
    }
}

/// What a readdirplus entry carries when this mount has no current attributes for it (an
/// inode of another MDT, one changed since its page was read, a directory the caller may
/// read but not search): its inode number and kind for the listing, and a size the kernel
/// refuses as attributes (above `i64::MAX`), so it lists the name without caching an entry
/// or attributes for it (the kernel drops the link and forgets the node); a later stat
/// looks the name up.
pub fn listed_only_attr(ino: u64, kind: FileKind) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: u64::MAX,
        kind: file_type(kind),
        ..absent_attr()
    }
}
