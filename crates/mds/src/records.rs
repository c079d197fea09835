//! On-disk records of an MDT and the keys that find them.
//!
//! Tables (fjall keyspaces):
//! * `inodes`:  FID key (16 bytes) → `[version] postcard(InodeRecord)`
//! * `dirents`: parent FID key ++ name → `[version] postcard(DirentRecord)`; name order
//! * `xattrs`:  FID key ++ name → value
//! * `replies`: client uuid (16) ++ xid (8, big-endian) → `[3] postcard(SavedReply)` (with
//!   the change's transaction number and the versions it found; version 2 had no
//!   versions, version 1 no transaction number)
//! * `clients`: client uuid (16) → empty: clients given transaction numbers, waited for
//!   after a restart
//!
//! Inodes are stored as `[3] version (8, big-endian) postcard(InodeRecord)`: the version is
//! the transno of the inode's last change (version checks at replay); `[1]` records (before
//! versions) read as version 0.
//! * `destroy`: OST index (4) ++ object seq (8) ++ object id (8) → empty: objects to destroy
//! * `meta`:    name → value: allocation limits
//! * `dirstripes`: FID key (16) → `[version] postcard(DirStripe)`: the shards of a striped
//!   directory whose master inode is here
//! * `dirdefaults`: FID key (16) → `[version] postcard(DirDefault)`: how new subdirectories
//!   of a directory here are striped (`setdirstripe -D`)
//! * `remote_links`: FID (16) ++ parent FID (16) ++ name → empty: entries on other MDTs that
//!   count as links of an inode here (hard links across MDTs; makes adding and dropping such
//!   a link idempotent)
//! * `intents`: FID key (16) → `[version] postcard(IntentRecord)`: cross-MDT operations this
//!   MDT coordinates whose remote update is not yet known to be applied (docs/dne.md)
//! * `frozen`: FID key (16) → empty: inodes a directory migration holds (no change to them
//!   until it ends; requests get `EINPROGRESS` and are resent)
//! * `moved`: FID key (16) → new FID key (16): inodes a migration moved to another MDT (their
//!   old FIDs answer `ESTALE`, so clients look the name up again)
//! * `links`: FID (16) ++ parent FID (16) ++ name → empty: the entries here naming an inode
//!   (links.rs, for `fid2path`)
//! * `changelog`, `changelog_users`: records of changes and their consumers (changelog.rs)
//! * `relayouts`: FID key (16) → online file migrations in progress (relayout.rs)
//! * `quota_usage`: quota id (5) → inodes it has here (quota.rs)

use nacre_types::layout::StripeSpec;
use nacre_types::{Attr, Fid, FileKind, Layout, ObjectId, Status};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Table names.
pub const INODES: &str = "inodes";
/// Directory entries.
pub const DIRENTS: &str = "dirents";
/// Extended attributes.
pub const XATTRS: &str = "xattrs";
/// Saved replies for reply reconstruction.
pub const REPLIES: &str = "replies";
/// OST objects waiting to be destroyed.
pub const DESTROY: &str = "destroy";
/// Allocation state.
pub const META: &str = "meta";
/// Pending cross-MDT operations coordinated by this MDT.
pub const INTENTS: &str = "intents";
/// Stripe layouts of the striped directories whose master inode is here.
pub const DIRSTRIPES: &str = "dirstripes";
/// Defaults for new subdirectories (`setdirstripe -D`) of directories here.
pub const DIRDEFAULTS: &str = "dirdefaults";
/// Entries on other MDTs counted as links of an inode here: FID ++ parent FID ++ name.
pub const REMOTE_LINKS: &str = "remote_links";
/// Inodes held by a directory migration.
pub const FROZEN: &str = "frozen";
/// Inodes moved away by a migration: old FID → new FID.
pub const MOVED: &str = "moved";
/// Inodes unlinked while open (orphans), keyed by FID: found at start without a scan.
pub const ORPHANS: &str = "orphans";
/// Clients that were given transaction numbers (Lustre's `last_rcvd` client slots): after
/// a restart the MDT waits for them to replay. Client uuid (16) → empty.
pub const CLIENTS: &str = "clients";
/// Ownership changes of OST objects not yet made on their OSTs (owners.rs): destroy-style key
/// (OST, object) → the [`nacre_types::Owner`] bytes.
pub const OWNERS: &str = "owners";
/// Inodes per user, group and project (quota.rs).
pub const QUOTA_USAGE: &str = "quota_usage";
/// Online file migrations in progress (relayout.rs).
pub const RELAYOUTS: &str = "relayouts";
/// Changelog records by number (changelog.rs).
pub const CHANGELOG: &str = "changelog";
/// Registered changelog consumers by id (changelog.rs).
pub const CHANGELOG_USERS: &str = "changelog_users";
/// The link index: the entries naming each inode (links.rs).
pub const LINKS: &str = "links";
/// Every table of an MDT.
pub const TABLES: [&str; 20] = [
    QUOTA_USAGE,
    RELAYOUTS,
    CHANGELOG,
    CHANGELOG_USERS,
    LINKS,
    OWNERS,
    CLIENTS,
    INODES,
    DIRENTS,
    XATTRS,
    REPLIES,
    DESTROY,
    META,
    INTENTS,
    DIRSTRIPES,
    DIRDEFAULTS,
    REMOTE_LINKS,
    FROZEN,
    MOVED,
    ORPHANS,
];

/// A cross-MDT operation this MDT coordinates, committed with its local changes (or before
/// them, for removals) and deleted once the remote MDT has applied its part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentRecord {
    /// The intent's own key: the FID of the inode it creates or removes, or a FID reserved
    /// for it (link changes, of which one inode may have several in flight).
    pub key: Fid,
    /// The MDT that must apply `update`.
    pub mdt: u32,
    /// What it must apply.
    pub update: nacre_wire::mds::RemoteUpdate,
    /// Directory holding the entry concerned (on this MDT).
    pub parent: Fid,
    /// The entry's name.
    pub name: Vec<u8>,
    /// The client request to answer when recovery finishes the operation: (client uuid, xid).
    pub reply_to: Option<([u8; 16], u64)>,
    /// A link across MDTs: the attributes of the inode it names (for the entry's kind and
    /// the reply).
    pub attr: Option<Attr>,
    /// Removal of a striped directory: every shard (its MDT, attributes, default file
    /// striping, default for subdirectories), destroyed before the master and recreated as
    /// they were if one turns out not empty.
    pub shards: Vec<(
        u32,
        Attr,
        Option<StripeSpec>,
        Option<nacre_types::dirstripe::DirDefault>,
    )>,
    /// A directory migration (`key` the directory): its new FID on MDT `mdt`.
    pub migrate_to: Option<Fid>,
}

const RECORD_VERSION: u8 = 1;

/// An inode as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeRecord {
    /// Attributes (size is a hint for regular files; OSTs are authoritative).
    pub attr: Attr,
    /// Objects of a regular file.
    pub layout: Option<Layout>,
    /// Default striping a directory gives new files.
    pub dir_default: Option<StripeSpec>,
    /// Target of a symlink.
    pub symlink: Option<Vec<u8>>,
    /// Parent of a directory (for rename loop checks and "..").
    pub parent: Option<Fid>,
    /// Unlinked while open: kept until the last close.
    pub orphan: bool,
}

/// A directory entry as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirentRecord {
    /// Child.
    pub fid: Fid,
    /// Child kind (for readdir's d_type without reading the inode).
    pub kind: FileKind,
}

/// A migration in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayoutRecord {
    /// The new objects (the generation is set at the swap).
    pub new: Layout,
    /// The generation of the layout being replaced.
    pub old_generation: u32,
    /// The fence window is open: the old objects are (being) fenced on their OSTs, layout
    /// requests wait.
    pub fenced: bool,
}

/// A reply saved with the change it reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedReply {
    /// Status code.
    pub status: i32,
    /// Encoded reply body.
    pub body: Vec<u8>,
    /// The change's transaction number (0: none, not replayable).
    pub transno: u64,
    /// Versions of the inodes the change touched, before it: a resent request's answer
    /// carries them like the first one, so its replay is version-checked too.
    pub pre_versions: Vec<(Fid, u64)>,
}

impl SavedReply {
    /// The reply to save for `result` (no transaction number, no versions: set them for a
    /// change clients replay).
    pub fn of(result: &Result<nacre_wire::mds::MdsReply, Status>) -> SavedReply {
        SavedReply {
            status: result.as_ref().err().map_or(0, |s| s.code()),
            body: result
                .as_ref()
                .map(nacre_wire::encode_body)
                .unwrap_or_default(),
            transno: 0,
            pre_versions: Vec::new(),
        }
    }
}

/// Version byte of saved replies with versions (2 had a transno only, 1 neither).
const SAVED_REPLY_VERSION: u8 = 3;
/// Version byte of saved replies with a transaction number and no versions.
const SAVED_REPLY_VERSION_2: u8 = 2;

/// Encodes a saved reply (`[3] postcard(SavedReply)`).
pub fn encode_saved(saved: &SavedReply) -> Vec<u8> {
    let mut out = vec![SAVED_REPLY_VERSION];
    out.extend(postcard::to_allocvec(saved).expect("in-memory serialization"));
    out
}

/// Decodes a saved reply of either version; damage is an I/O error, never a panic.
pub fn decode_saved(bytes: &[u8]) -> Result<SavedReply, Status> {
    #[derive(Deserialize)]
    struct V1 {
        status: i32,
        body: Vec<u8>,
    }
    #[derive(Deserialize)]
    struct V2 {
        status: i32,
        body: Vec<u8>,
        transno: u64,
    }
    let damaged = |e: postcard::Error| {
        tracing::error!("damaged saved reply: {e}");
        Status::Io
    };
    match bytes.split_first() {
        Some((&SAVED_REPLY_VERSION, rest)) => postcard::from_bytes(rest).map_err(damaged),
        Some((&SAVED_REPLY_VERSION_2, rest)) => postcard::from_bytes::<V2>(rest)
            .map(|v| SavedReply {
                status: v.status,
                body: v.body,
                transno: v.transno,
                pre_versions: Vec::new(),
            })
            .map_err(damaged),
        Some((&RECORD_VERSION, _)) => decode::<V1>(bytes).map(|v| SavedReply {
            status: v.status,
            body: v.body,
            transno: 0,
            pre_versions: Vec::new(),
        }),
        _ => {
            tracing::error!("saved reply with unknown version");
            Err(Status::Io)
        }
    }
}

/// Key of a remote link record.
pub fn remote_link_key(fid: Fid, parent: Fid, name: &[u8]) -> Vec<u8> {
    let mut k = fid.to_key().to_vec();
    k.extend_from_slice(&parent.to_key());
    k.extend_from_slice(name);
    k
}

/// The key of `fid`'s link from `parent` by `name` (the `links` index).
pub fn link_key(fid: Fid, parent: Fid, name: &[u8]) -> Vec<u8> {
    crate::records::remote_link_key(fid, parent, name)
}

/// Encodes a record with its version byte.
pub fn encode<T: Serialize>(rec: &T) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    out.extend(postcard::to_allocvec(rec).expect("in-memory serialization"));
    out
}

/// Version byte of inode records: the inode's version, then the record (6: projects; 5:
/// layouts have a generation; 4: before generations; 3: before pools; 1: before versions,
/// and before pools).
const INODE_RECORD_VERSION: u8 = 6;
/// Inode records from before projects (no project ID, no inheritance flag).
const INODE_RECORD_VERSION_NO_PROJECTS: u8 = 5;
/// Inode records from before layout generations (with pools and the inode's version).
const INODE_RECORD_VERSION_NO_GENERATIONS: u8 = 4;
/// Inode records from before pools, with the inode's version.
const INODE_RECORD_VERSION_NO_POOLS: u8 = 3;

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

/// Inode records as format 5 stored them (no project, no inheritance flag).
mod before_projects {
    use super::AttrNoProject;
    use nacre_types::layout::StripeSpec;
    use nacre_types::{Fid, Layout};
    use serde::Deserialize;

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
                layout: self.layout,
                dir_default: self.dir_default,
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
    use nacre_types::layout::StripeSpec;
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
                layout: self.layout.map(|l| nacre_types::Layout {
                    stripe_size: l.stripe_size,
                    objects: l.objects,
                    pool: l.pool,
                    generation: 0,
                }),
                dir_default: self.dir_default,
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
                layout: self.layout.map(|l| nacre_types::Layout {
                    stripe_size: l.stripe_size,
                    objects: l.objects,
                    pool: PoolName::NONE,
                    generation: 0,
                }),
                dir_default: self.dir_default.map(|d| super::StripeSpec {
                    stripe_count: d.stripe_count,
                    stripe_size: d.stripe_size,
                    start_ost: d.start_ost,
                    pool: PoolName::NONE,
                }),
                symlink: self.symlink,
                parent: self.parent,
                orphan: self.orphan,
            }
        }
    }
}

/// Encodes an inode with its version (the transno of its last change).
pub fn encode_inode(rec: &InodeRecord, version: u64) -> Vec<u8> {
    let mut out = vec![INODE_RECORD_VERSION];
    out.extend_from_slice(&version.to_be_bytes());
    out.extend(postcard::to_allocvec(rec).expect("in-memory serialization"));
    out
}

/// The version stored with an inode record (0 for records from before versions).
pub fn inode_version(bytes: &[u8]) -> u64 {
    match bytes.split_first() {
        Some((
            &(INODE_RECORD_VERSION
            | INODE_RECORD_VERSION_NO_PROJECTS
            | INODE_RECORD_VERSION_NO_GENERATIONS
            | INODE_RECORD_VERSION_NO_POOLS),
            rest,
        )) if rest.len() >= 8 => u64::from_be_bytes(rest[..8].try_into().expect("8 bytes")),
        _ => 0,
    }
}

/// An inode record stored before pools, read as one now.
fn decode_inode_before_pools(body: &[u8]) -> Result<InodeRecord, Status> {
    postcard::from_bytes::<before_pools::InodeRecord>(body)
        .map(before_pools::InodeRecord::upgrade)
        .map_err(|e| {
            tracing::error!("damaged MDT record: {e}");
            Status::Io
        })
}

/// Decodes a record; a damaged record is an I/O error, never a panic. Inode records of
/// earlier formats are read as they are now.
pub fn decode<T: DeserializeOwned + 'static>(bytes: &[u8]) -> Result<T, Status> {
    let as_t = |rec: InodeRecord| -> Result<T, Status> {
        let any: Box<dyn std::any::Any> = Box::new(rec);
        any.downcast::<T>().map(|b| *b).map_err(|_| Status::Io)
    };
    let inode = std::any::TypeId::of::<T>() == std::any::TypeId::of::<InodeRecord>();
    match bytes.split_first() {
        Some((&INODE_RECORD_VERSION_NO_PROJECTS, rest)) if inode && rest.len() >= 8 => {
            let old =
                postcard::from_bytes::<before_projects::InodeRecord>(&rest[8..]).map_err(|e| {
                    tracing::error!("damaged MDT record: {e}");
                    Status::Io
                })?;
            as_t(old.upgrade())
        }
        Some((&INODE_RECORD_VERSION_NO_GENERATIONS, rest)) if inode && rest.len() >= 8 => {
            let old = postcard::from_bytes::<before_generations::InodeRecord>(&rest[8..]).map_err(
                |e| {
                    tracing::error!("damaged MDT record: {e}");
                    Status::Io
                },
            )?;
            as_t(old.upgrade())
        }
        Some((&INODE_RECORD_VERSION_NO_POOLS, rest)) if inode && rest.len() >= 8 => {
            as_t(decode_inode_before_pools(&rest[8..])?)
        }
        Some((&RECORD_VERSION, rest)) if inode => as_t(decode_inode_before_pools(rest)?),
        Some((&INODE_RECORD_VERSION, rest)) if rest.len() >= 8 => postcard::from_bytes(&rest[8..])
            .map_err(|e| {
                tracing::error!("damaged MDT record: {e}");
                Status::Io
            }),
        Some((&RECORD_VERSION, rest)) => postcard::from_bytes(rest).map_err(|e| {
            tracing::error!("damaged MDT record: {e}");
            Status::Io
        }),
        _ => {
            tracing::error!("MDT record with unknown version");
            Err(Status::Io)
        }
    }
}

/// Key of a directory entry.
pub fn dirent_key(parent: Fid, name: &[u8]) -> Vec<u8> {
    let mut k = parent.to_key().to_vec();
    k.extend_from_slice(name);
    k
}

/// Key of an extended attribute.
pub fn xattr_key(fid: Fid, name: &[u8]) -> Vec<u8> {
    dirent_key(fid, name)
}

/// Key of a saved reply.
pub fn reply_key(client: &[u8; 16], xid: u64) -> Vec<u8> {
    let mut k = client.to_vec();
    k.extend_from_slice(&xid.to_be_bytes());
    k
}

/// Key of a changelog consumer (`changelog_users`).
pub fn changelog_user_key(id: u32) -> Vec<u8> {
    id.to_be_bytes().to_vec()
}

/// Key of a pending object destroy.
pub fn destroy_key(ost: u32, object: ObjectId) -> Vec<u8> {
    let mut k = ost.to_be_bytes().to_vec();
    k.extend_from_slice(&object.seq.to_be_bytes());
    k.extend_from_slice(&object.id.to_be_bytes());
    k
}

/// Parses a destroy key.
pub fn parse_destroy_key(k: &[u8]) -> Option<(u32, ObjectId)> {
    if k.len() != 20 {
        return None;
    }
    let ost = u32::from_be_bytes(k[..4].try_into().ok()?);
    let seq = u64::from_be_bytes(k[4..12].try_into().ok()?);
    let id = u64::from_be_bytes(k[12..20].try_into().ok()?);
    Some((ost, ObjectId { seq, id }))
}

#[cfg(test)]
mod version_tests {
    use super::*;
    use proptest::prelude::*;

    fn inode() -> InodeRecord {
        InodeRecord {
            attr: Attr {
                fid: Fid::ROOT,
                kind: FileKind::Regular,
                perm: 0o644,
                uid: 1,
                gid: 2,
                nlink: 1,
                size: 0,
                blocks: 0,
                atime: nacre_types::TimeSpec::default(),
                mtime: nacre_types::TimeSpec::default(),
                ctime: nacre_types::TimeSpec::default(),
                rdev: 0,
                project: 0,
                proj_inherit: false,
            },
            layout: None,
            dir_default: None,
            symlink: None,
            parent: None,
            orphan: false,
        }
    }

    #[test]
    fn inodes_carry_their_version_and_old_records_read_as_version_0() {
        let rec = inode();
        let new = encode_inode(&rec, 42);
        assert_eq!(decode::<InodeRecord>(&new).unwrap(), rec);
        assert_eq!(inode_version(&new), 42);
        // Records of the formats before pools read as they are now.
        #[derive(serde::Serialize)]
        struct OldLayout {
            stripe_size: u32,
            objects: Vec<nacre_types::StripeObject>,
        }
        let object = nacre_types::StripeObject {
            ost: 3,
            object: ObjectId { seq: 0, id: 9 },
        };
        let old_body = (
            AttrNoProject::of(&rec.attr),
            Some(OldLayout {
                stripe_size: 1 << 20,
                objects: vec![object],
            }),
            Some((2i32, 65536u32, -1i32)),
            None::<Vec<u8>>,
            Some(Fid::ROOT),
            false,
        );
        let want = InodeRecord {
            layout: Some(Layout {
                stripe_size: 1 << 20,
                objects: vec![object],
                pool: nacre_types::PoolName::NONE,
                generation: 0,
            }),
            dir_default: Some(StripeSpec {
                stripe_count: 2,
                stripe_size: 65536,
                start_ost: -1,
                pool: nacre_types::PoolName::NONE,
            }),
            parent: Some(Fid::ROOT),
            ..rec.clone()
        };
        let mut v1 = vec![RECORD_VERSION];
        v1.extend(postcard::to_allocvec(&old_body).unwrap());
        assert_eq!(decode::<InodeRecord>(&v1).unwrap(), want);
        assert_eq!(inode_version(&v1), 0);
        let mut v3 = vec![INODE_RECORD_VERSION_NO_POOLS];
        v3.extend_from_slice(&17u64.to_be_bytes());
        v3.extend(postcard::to_allocvec(&old_body).unwrap());
        assert_eq!(decode::<InodeRecord>(&v3).unwrap(), want);
        assert_eq!(inode_version(&v3), 17);
        // Format 4 (pools, no layout generation) reads as generation 0.
        #[derive(serde::Serialize)]
        struct PooledLayout {
            stripe_size: u32,
            objects: Vec<nacre_types::StripeObject>,
            pool: nacre_types::PoolName,
        }
        let flash = nacre_types::PoolName::new("flash").unwrap();
        let v4_body = (
            AttrNoProject::of(&rec.attr),
            Some(PooledLayout {
                stripe_size: 1 << 20,
                objects: vec![object],
                pool: flash,
            }),
            None::<StripeSpec>,
            None::<Vec<u8>>,
            None::<Fid>,
            false,
        );
        let mut v4 = vec![INODE_RECORD_VERSION_NO_GENERATIONS];
        v4.extend_from_slice(&23u64.to_be_bytes());
        v4.extend(postcard::to_allocvec(&v4_body).unwrap());
        let read = decode::<InodeRecord>(&v4).unwrap();
        let l = read.layout.unwrap();
        assert_eq!((l.pool, l.generation, l.objects), (flash, 0, vec![object]));
        assert_eq!(inode_version(&v4), 23);
        // Format 5 (generations, no projects) reads as project 0, no inheritance.
        let v5_body = (
            AttrNoProject::of(&rec.attr),
            want.layout.clone(),
            None::<StripeSpec>,
            None::<Vec<u8>>,
            None::<Fid>,
            false,
        );
        let mut v5 = vec![INODE_RECORD_VERSION_NO_PROJECTS];
        v5.extend_from_slice(&29u64.to_be_bytes());
        v5.extend(postcard::to_allocvec(&v5_body).unwrap());
        let read = decode::<InodeRecord>(&v5).unwrap();
        assert_eq!((read.attr.project, read.attr.proj_inherit), (0, false));
        assert_eq!(read.layout, want.layout);
        assert_eq!(inode_version(&v5), 29);
        // A generation, a project and its inheritance survive the round trip.
        let mut moved = rec.clone();
        moved.layout = Some(Layout {
            generation: 7,
            ..want.layout.clone().unwrap()
        });
        moved.attr.project = 4242;
        moved.attr.proj_inherit = true;
        assert_eq!(
            decode::<InodeRecord>(&encode_inode(&moved, 1)).unwrap(),
            moved
        );
        // Other records of version 1 are read as they are.
        let dirent = DirentRecord {
            fid: Fid::ROOT,
            kind: FileKind::Directory,
        };
        assert_eq!(decode::<DirentRecord>(&encode(&dirent)).unwrap(), dirent);
        for n in 0..new.len() {
            assert!(decode::<InodeRecord>(&new[..n]).is_err(), "{n} bytes");
        }
        let saved = SavedReply {
            status: 0,
            body: vec![1, 2],
            transno: 9,
            pre_versions: vec![(Fid::ROOT, 7)],
        };
        assert_eq!(decode_saved(&encode_saved(&saved)).unwrap(), saved);
        // Version 2 (no versions) still reads.
        let mut v2 = vec![2u8];
        v2.extend(postcard::to_allocvec(&(0i32, vec![1u8, 2], 9u64)).unwrap());
        let old = decode_saved(&v2).unwrap();
        assert_eq!((old.transno, old.pre_versions.len()), (9, 0));
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<InodeRecord>(&bytes);
            let _ = inode_version(&bytes);
            let _ = decode_saved(&bytes);
        }
    }
}
