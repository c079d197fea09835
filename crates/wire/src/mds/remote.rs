//! The messages MDTs send each other for cross-MDT operations (docs/dne.md).

use nacre_types::layout::LayoutSpec;
use nacre_types::{Attr, Fid, FileKind, Layout};
use serde::{Deserialize, Serialize};

/// One MDT's part of a cross-MDT operation, sent by the coordinating MDT (docs/dne.md).
/// Applying one twice is the same as once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteUpdate {
    /// Create directory inode `attr.fid` (whose entry is `parent`'s, on the coordinator)
    /// unless it exists.
    CreateDir {
        /// Attributes of the new directory (its FID from [`MdsOp::AllocFid`]).
        attr: Attr,
        /// Directory holding its entry.
        parent: Fid,
        /// Default striping for files created in it (the coordinator's effective default
        /// there, as the file system default lives on MDT0).
        dir_default: Option<LayoutSpec>,
        /// For the master of a striped directory: its shards.
        stripe: Option<nacre_types::dirstripe::DirStripe>,
        /// Default for its own new subdirectories (inherited from its parent's).
        default: Option<nacre_types::dirstripe::DirDefault>,
    },
    /// Destroy directory inode `fid` if it is empty (`ENOTEMPTY` otherwise); done if absent.
    DestroyDir {
        /// The directory.
        fid: Fid,
    },
    /// Count entry (`parent`, `name`) on the coordinator as a link of non-directory inode
    /// `fid` (a hard link across MDTs); done if already counted.
    AddLink {
        /// The inode.
        fid: Fid,
        /// Directory of the entry (on the coordinator).
        parent: Fid,
        /// Name of the entry.
        name: Vec<u8>,
    },
    /// Put entry (`parent`, `name`) → `fid` on the receiving MDT, the target of a rename
    /// across MDTs: done if it already names `fid`; `EEXIST` with `noreplace`; over a
    /// directory `EISDIR` (moving a directory: an empty one of the receiving MDT is replaced,
    /// `ENOTEMPTY` if not empty; one of another MDT only when it is `replaces`, already
    /// destroyed there by the coordinator; `EXDEV` if striped or elsewhere otherwise), over a
    /// non-directory when moving one `ENOTDIR`; otherwise the entry it replaces loses its
    /// link. A non-directory living on the receiving MDT gains a link here; a directory adds
    /// to its new parent's link count.
    InsertEntry {
        /// The inode.
        fid: Fid,
        /// Its kind.
        kind: FileKind,
        /// Directory (on the receiving MDT).
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Refuse to replace an existing entry.
        noreplace: bool,
        /// A directory of another MDT the entry named, destroyed there already (it was
        /// empty): the entry is replaced without touching it.
        replaces: Option<Fid>,
    },
    /// Set directory `fid`'s `..` to `parent` (a directory moved across MDTs).
    SetParent {
        /// The directory.
        fid: Fid,
        /// Its new parent.
        parent: Fid,
    },
    /// Stop counting entry (`parent`, `name`) as a link of `fid` (it was removed); the inode
    /// goes with its last link (kept while open). Done if not counted.
    DropLink {
        /// The inode.
        fid: Fid,
        /// Directory of the entry (on the coordinator).
        parent: Fid,
        /// Name of the entry.
        name: Vec<u8>,
    },
    /// Migration: hold entry (`parent`, `name`) while directory `fid` moves to `to` — no
    /// rename or removal of an entry naming `fid` until [`RemoteUpdate::Repoint`]. Done if
    /// it names `to` already; `ENOENT` if it names neither.
    Freeze {
        /// The directory being moved.
        fid: Fid,
        /// Directory of its entry (on the receiving MDT).
        parent: Fid,
        /// Name of its entry.
        name: Vec<u8>,
        /// Its new FID.
        to: Fid,
    },
    /// Migration: put the moved directory `dir`'s entries (and attributes `xattrs`) here;
    /// an entry carrying its inode gets a new inode of this MDT. Entries already present
    /// are kept as they are (idempotent by name). Reply: [`MdsReply::Adopted`], the FID each
    /// entry names here, in order.
    Adopt {
        /// The new directory (created by [`RemoteUpdate::CreateDir`]).
        dir: Fid,
        /// The directory's extended attributes.
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        /// Entries, at most [`ADOPT_ENTRIES_MAX`].
        entries: Vec<AdoptEntry>,
    },
    /// Migration: entry (`parent`, `name`) now names `to` instead of `from` (and is no
    /// longer held). Done if it names `to` already.
    Repoint {
        /// Directory of the entry.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Old FID of the directory.
        from: Fid,
        /// New FID.
        to: Fid,
    },
}

/// Most entries in one [`RemoteUpdate::Adopt`].
pub const ADOPT_ENTRIES_MAX: usize = 1024;

/// One entry of a directory being migrated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Kind.
    pub kind: FileKind,
    /// The inode it names now.
    pub fid: Fid,
    /// The inode itself when it moves too (it gets a new FID on the receiving MDT).
    pub inode: Option<MovedInode>,
}

/// An inode moving to another MDT with its directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedInode {
    /// Attributes (the FID is replaced by the receiving MDT's).
    pub attr: Attr,
    /// Objects of a regular file (they stay where they are).
    pub layout: Option<Layout>,
    /// Target of a symlink.
    pub symlink: Option<Vec<u8>>,
    /// Extended attributes.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RemoteUpdate {
    /// The inode the update is about.
    pub fn fid(&self) -> Fid {
        match self {
            RemoteUpdate::CreateDir { attr, .. } => attr.fid,
            RemoteUpdate::DestroyDir { fid }
            | RemoteUpdate::AddLink { fid, .. }
            | RemoteUpdate::InsertEntry { fid, .. }
            | RemoteUpdate::SetParent { fid, .. }
            | RemoteUpdate::DropLink { fid, .. }
            | RemoteUpdate::Freeze { fid, .. } => *fid,
            RemoteUpdate::Adopt { dir, .. } => *dir,
            RemoteUpdate::Repoint { parent, .. } => *parent,
        }
    }
}
