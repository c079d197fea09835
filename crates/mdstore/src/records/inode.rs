//! Inode records (table `inodes`): `[v] inode version (8, big-endian) postcard(InodeRecord)`,
//! the inode version being the transno of the inode's last change (version checks at
//! replay). Versions read: 7 (now: composite layouts), 6 (plain RAID0 layouts: one
//! component over the whole file), 5 (no project: 0, not inherited), 4 (no layout
//! generation: 0), 3 (no pools: none), 1 (as 3, and no inode version: 0). There was no 2.

use super::versions::{from_postcard, Record, RecordError};
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, Fid, FileKind, Layout};
use serde::{Deserialize, Serialize};

/// An inode as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeRecord {
    /// Attributes (size is a hint for regular files; OSTs are authoritative).
    pub attr: Attr,
    /// Objects of a regular file.
    pub layout: Option<Layout>,
    /// Default layout a directory gives new files (plain or composite).
    pub dir_default: Option<LayoutSpec>,
    /// Target of a symlink.
    pub symlink: Option<Vec<u8>>,
    /// Parent of a directory (for rename loop checks and "..").
    pub parent: Option<Fid>,
    /// Unlinked while open: kept until the last close.
    pub orphan: bool,
}

/// Version byte of inode records: the inode's version, then the record (7: composite
/// layouts; 6: projects; 5: layouts have a generation; 4: before generations; 3: before
/// pools; 1: before versions, and before pools).
pub(crate) const INODE_RECORD_VERSION: u8 = 7;
/// Inode records from before composite layouts (plain RAID0 layouts).
pub(crate) const INODE_RECORD_VERSION_PLAIN_LAYOUTS: u8 = 6;
/// Inode records from before projects (no project ID, no inheritance flag).
pub(crate) const INODE_RECORD_VERSION_NO_PROJECTS: u8 = 5;
/// Inode records from before layout generations (with pools and the inode's version).
pub(crate) const INODE_RECORD_VERSION_NO_GENERATIONS: u8 = 4;
/// Inode records from before pools, with the inode's version.
pub(crate) const INODE_RECORD_VERSION_NO_POOLS: u8 = 3;
/// Inode records from before inode versions (and before pools): no inode version.
pub(crate) const INODE_RECORD_VERSION_NO_VERSIONS: u8 = 1;

impl Record for InodeRecord {
    const NAME: &'static str = "inode record";
    const VERSION: u8 = INODE_RECORD_VERSION;

    fn decode_version(version: u8, body: &[u8]) -> Result<InodeRecord, RecordError> {
        match version {
            INODE_RECORD_VERSION => from_postcard(Self::NAME, after_inode_version(body)?),
            INODE_RECORD_VERSION_PLAIN_LAYOUTS => from_postcard::<before_components::InodeRecord>(
                Self::NAME,
                after_inode_version(body)?,
            )
            .map(before_components::InodeRecord::upgrade),
            INODE_RECORD_VERSION_NO_PROJECTS => from_postcard::<before_projects::InodeRecord>(
                Self::NAME,
                after_inode_version(body)?,
            )
            .map(before_projects::InodeRecord::upgrade),
            INODE_RECORD_VERSION_NO_GENERATIONS => {
                from_postcard::<before_generations::InodeRecord>(
                    Self::NAME,
                    after_inode_version(body)?,
                )
                .map(before_generations::InodeRecord::upgrade)
            }
            INODE_RECORD_VERSION_NO_POOLS => {
                from_postcard::<before_pools::InodeRecord>(Self::NAME, after_inode_version(body)?)
                    .map(before_pools::InodeRecord::upgrade)
            }
            INODE_RECORD_VERSION_NO_VERSIONS => {
                from_postcard::<before_pools::InodeRecord>(Self::NAME, body)
                    .map(before_pools::InodeRecord::upgrade)
            }
            v => Err(RecordError::unknown_version(Self::NAME, v)),
        }
    }
}

/// The record after the inode's version (8 bytes), which every version but 1 keeps
/// before it.
fn after_inode_version(body: &[u8]) -> Result<&[u8], RecordError> {
    body.get(8..).ok_or_else(|| RecordError::Damaged {
        what: InodeRecord::NAME,
        detail: "shorter than its inode version".to_string(),
    })
}

/// Encodes an inode with its version (the transno of its last change).
pub fn encode_inode(rec: &InodeRecord, version: u64) -> Vec<u8> {
    let mut out = vec![INODE_RECORD_VERSION];
    out.extend_from_slice(&version.to_be_bytes());
    out.extend(postcard::to_allocvec(rec).expect("in-memory serialization"));
    out
}

/// The version stored with an inode record (0 for records from before versions, and for
/// bytes that are no inode record of a version this nacre reads).
pub fn inode_version(bytes: &[u8]) -> u64 {
    match bytes.split_first() {
        Some((
            &(INODE_RECORD_VERSION
            | INODE_RECORD_VERSION_PLAIN_LAYOUTS
            | INODE_RECORD_VERSION_NO_PROJECTS
            | INODE_RECORD_VERSION_NO_GENERATIONS
            | INODE_RECORD_VERSION_NO_POOLS),
            rest,
        )) => rest
            .get(..8)
            .and_then(|v| <[u8; 8]>::try_from(v).ok())
            .map_or(0, u64::from_be_bytes),
        _ => 0,
    }
}

/// Attributes as inode record formats 1 to 5 stored them (no project: project 0).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct AttrNoProject {
    fid: Fid,
    kind: FileKind,
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    blocks: u64,
    atime: nacre_types::TimeSpec,
    mtime: nacre_types::TimeSpec,
    ctime: nacre_types::TimeSpec,
    rdev: u32,
}

impl AttrNoProject {
    fn upgrade(self) -> Attr {
        Attr {
            fid: self.fid,
            kind: self.kind,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            size: self.size,
            blocks: self.blocks,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            rdev: self.rdev,
            project: 0,
            proj_inherit: false,
        }
    }

    /// `a` as the old formats stored it (for tests of their reading).
    #[cfg(test)]
    pub(crate) fn of(a: &Attr) -> AttrNoProject {
        AttrNoProject {
            fid: a.fid,
            kind: a.kind,
            perm: a.perm,
            uid: a.uid,
            gid: a.gid,
            nlink: a.nlink,
            size: a.size,
            blocks: a.blocks,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            rdev: a.rdev,
        }
    }
}

/// Inode records as format 6 stored them (plain RAID0 layouts).
pub(crate) mod before_components {
    use nacre_types::layout::{LayoutSpec, StripeSpec};
    use nacre_types::{Attr, Fid, Layout, PoolName, StripeObject};
    use serde::{Deserialize, Serialize};

    /// A plain RAID0 layout as formats 5 and 6 stored it.
    #[derive(Serialize, Deserialize)]
    pub(crate) struct PlainLayout {
        pub(crate) stripe_size: u32,
        pub(crate) objects: Vec<StripeObject>,
        pub(crate) pool: PoolName,
        pub(crate) generation: u32,
    }

    impl PlainLayout {
        /// The layout it is now: one component over the whole file.
        pub(crate) fn upgrade(self) -> Layout {
            Layout {
                generation: self.generation,
                ..Layout::raid0(self.stripe_size, self.objects, self.pool)
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(crate) struct InodeRecord {
        pub(crate) attr: Attr,
        pub(crate) layout: Option<PlainLayout>,
        pub(crate) dir_default: Option<StripeSpec>,
        pub(crate) symlink: Option<Vec<u8>>,
        pub(crate) parent: Option<Fid>,
        pub(crate) orphan: bool,
    }

    impl InodeRecord {
        pub(crate) fn upgrade(self) -> super::InodeRecord {
            super::InodeRecord {
                attr: self.attr,
                layout: self.layout.map(PlainLayout::upgrade),
                dir_default: self.dir_default.map(LayoutSpec::plain),
                symlink: self.symlink,
                parent: self.parent,
                orphan: self.orphan,
            }
        }
    }
}

/// Inode records as format 5 stored them (no project, no inheritance flag).
mod before_projects {
    use super::before_components::PlainLayout;
    use super::AttrNoProject;
    use nacre_types::layout::{LayoutSpec, StripeSpec};
    use nacre_types::Fid;
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct InodeRecord {
        attr: AttrNoProject,
        layout: Option<PlainLayout>,
        dir_default: Option<StripeSpec>,
        symlink: Option<Vec<u8>>,
        parent: Option<Fid>,
        orphan: bool,
    }

    impl InodeRecord {
        pub fn upgrade(self) -> super::InodeRecord {
            super::InodeRecord {
                attr: self.attr.upgrade(),
                layout: self.layout.map(PlainLayout::upgrade),
                dir_default: self.dir_default.map(LayoutSpec::plain),
                symlink: self.symlink,
                parent: self.parent,
                orphan: self.orphan,
            }
        }
    }
}

/// Inode records as format 4 stored them (layouts without a generation: generation 0).
mod before_generations {
    use super::AttrNoProject;
    use nacre_types::layout::{LayoutSpec, StripeSpec};
    use nacre_types::{Fid, PoolName, StripeObject};
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Layout {
        stripe_size: u32,
        objects: Vec<StripeObject>,
        pool: PoolName,
    }

    #[derive(Deserialize)]
    pub struct InodeRecord {
        attr: AttrNoProject,
        layout: Option<Layout>,
        dir_default: Option<StripeSpec>,
        symlink: Option<Vec<u8>>,
        parent: Option<Fid>,
        orphan: bool,
    }

    impl InodeRecord {
        pub fn upgrade(self) -> super::InodeRecord {
            super::InodeRecord {
                attr: self.attr.upgrade(),
                layout: self
                    .layout
                    .map(|l| nacre_types::Layout::raid0(l.stripe_size, l.objects, l.pool)),
                dir_default: self.dir_default.map(LayoutSpec::plain),
                symlink: self.symlink,
                parent: self.parent,
                orphan: self.orphan,
            }
        }
    }
}

/// Inode records as formats 1 and 3 stored them (no pool names).
mod before_pools {
    use super::AttrNoProject;
    use nacre_types::layout::LayoutSpec;
    use nacre_types::{Fid, PoolName, StripeObject};
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Layout {
        stripe_size: u32,
        objects: Vec<StripeObject>,
    }

    #[derive(Deserialize)]
    struct StripeSpec {
        stripe_count: i32,
        stripe_size: u32,
        start_ost: i32,
    }

    #[derive(Deserialize)]
    pub struct InodeRecord {
        attr: AttrNoProject,
        layout: Option<Layout>,
        dir_default: Option<StripeSpec>,
        symlink: Option<Vec<u8>>,
        parent: Option<Fid>,
        orphan: bool,
    }

    impl InodeRecord {
        pub fn upgrade(self) -> super::InodeRecord {
            super::InodeRecord {
                attr: self.attr.upgrade(),
                layout: self
                    .layout
                    .map(|l| nacre_types::Layout::raid0(l.stripe_size, l.objects, PoolName::NONE)),
                dir_default: self.dir_default.map(|d| {
                    LayoutSpec::plain(super::StripeSpec {
                        stripe_count: d.stripe_count,
                        stripe_size: d.stripe_size,
                        start_ost: d.start_ost,
                        pool: PoolName::NONE,
                    })
                }),
                symlink: self.symlink,
                parent: self.parent,
                orphan: self.orphan,
            }
        }
    }
}
