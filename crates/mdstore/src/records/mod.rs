//! On-disk records of an MDT and the keys that find them.
//!
//! Every record starts with a version byte of its own type ([`Record::VERSION`]; the types
//! share no version numbers) and is read by its type's decoder of that version
//! ([`decode_record`]), so an old record is read as the current type (upgrade on read) and
//! written in the current version when it changes ([`encode_record`]). A version newer than
//! this nacre reads is [`RecordError::TooNew`], not damage: the request touching it gets
//! `EIO`, and a pass over a table stops on it (docs/formats.md, "Records").
//!
//! | table | key | value | versions read |
//! |---|---|---|---|
//! | `inodes` | FID (16) | `[v] inode version (8, BE) postcard(InodeRecord)` | 7; 6, 5, 4, 3, 1 (inode.rs) |
//! | `dirents` | parent FID ++ name (name order) | `[1] postcard(DirentRecord)` | 1 |
//! | `replies` | client uuid (16) ++ xid (8, BE) | `[4] postcard(SavedReply)` | 4; 3, 2, 1 (saved_reply.rs) |
//! | `intents` | FID (16) | `[2] postcard(IntentRecord)` | 2; 1 (before composite layouts) |
//! | `relayouts` | FID (16) | `[2] postcard(RelayoutRecord)` | 2; 1 (plain layouts) |
//! | `dirstripes` | FID (16) | `[1] postcard(DirStripe)` | 1 |
//! | `dirdefaults` | FID (16) | `[1] postcard(DirDefault)` | 1 |
//! | `changelog` | number (8, BE) | `[1] postcard(ChangelogRecord)` | 1 |
//! | `changelog_users` | id (4, BE) | `[1] postcard(UserRecord)` | 1 (changelog_state.rs) |
//! | `dom` | FID (16) | `[1] bytes` | 1 (dom.rs: data on the MDT) |
//!
//! A new version of a type: raise its `VERSION`, keep a decoder of the old shape in its
//! `decode_version` (a `before_*` module, as inode.rs has), and add the new version's stored
//! sample to tests.rs (every version's sample keeps decoding).
//!
//! What each table holds:
//! * `inodes`: the inode's version is the transno of its last change (version checks at
//!   replay); `[1]` records (before versions) read as version 0.
//! * `dirents`: a directory's entries, in name order.
//! * `xattrs`:  FID key ++ name → value
//! * `replies`: the reply of a change (its transaction number, the versions it found, the
//!   protocol of its body), sent again to a resend
//! * `clients`: client uuid (16) → empty: clients given transaction numbers, waited for
//!   after a restart
//! * `destroy`: OST index (4) ++ object seq (8) ++ object id (8) → empty: objects to destroy
//! * `meta`:    name → value: allocation limits
//! * `dirstripes`: the shards of a striped directory whose master inode is here
//! * `dirdefaults`: how new subdirectories of a directory here are striped
//!   (`setdirstripe -D`)
//! * `remote_links`: FID (16) ++ parent FID (16) ++ name → empty: entries on other MDTs that
//!   count as links of an inode here (hard links across MDTs; makes adding and dropping such
//!   a link idempotent)
//! * `intents`: cross-MDT operations this MDT coordinates whose remote update is not yet
//!   known to be applied (docs/dne.md)
//! * `frozen`: FID key (16) → empty: inodes a directory migration holds (no change to them
//!   until it ends; requests get `EINPROGRESS` and are resent)
//! * `moved`: FID key (16) → new FID key (16): inodes a migration moved to another MDT (their
//!   old FIDs answer `ESTALE`, so clients look the name up again)
//! * `links`: FID (16) ++ parent FID (16) ++ name → empty: the entries here naming an inode
//!   (links.rs, for `fid2path`)
//! * `changelog`, `changelog_users`: records of changes and their consumers (changelog.rs)
//! * `relayouts`: online file migrations in progress (relayout.rs)
//! * `quota_usage`: quota id (5) → inodes it has here (quota.rs)
//! * `quota_dom_bytes`: quota id (5) → bytes of data on the MDT it has here, each file's
//!   counted in whole 4 KiB blocks (store/dom_quota.rs)

mod dom;
mod inode;
mod intent_v1;
mod saved_reply;
#[cfg(test)]
mod tests;
mod versions;

pub use dom::{decode_dom, dom_charged_bytes, encode_dom};
pub use inode::{encode_inode, inode_version, InodeRecord};
pub use saved_reply::SavedReply;
pub use versions::{decode_record, encode_record, from_postcard, PlainRecord, Record, RecordError};

use nacre_types::dirstripe::{DirDefault, DirStripe};
use nacre_types::layout::LayoutSpec;
use nacre_types::{Attr, Fid, FileKind, Layout, ObjectId};
use nacre_wire::mds::changelog::ChangelogRecord;
use serde::{Deserialize, Serialize};

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
/// The bytes of files' components on the MDT (data on the MDT, dom.rs).
pub const DOM: &str = "dom";
/// Bytes of data on the MDT per user, group and project (store/dom_quota.rs).
pub const QUOTA_DOM_BYTES: &str = "quota_dom_bytes";
/// FID ranges granted to clients (store/fid_grants.rs): client uuid (16) + the grant's
/// first allocation number (8, big-endian) → count (4, big-endian) and a bitmap of the
/// FIDs used (a bit per FID, from the first).
pub const FID_GRANTS: &str = "fid_grants";
/// Every table of an MDT.
pub const TABLES: [&str; 23] = [
    FID_GRANTS,
    DOM,
    QUOTA_DOM_BYTES,
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
    /// Removal of a striped directory: every shard (its MDT, attributes, default layout of
    /// new files, default for subdirectories), destroyed before the master and recreated as
    /// they were if one turns out not empty.
    pub shards: Vec<(
        u32,
        Attr,
        Option<LayoutSpec>,
        Option<nacre_types::dirstripe::DirDefault>,
    )>,
    /// A directory migration (`key` the directory): its new FID on MDT `mdt`.
    pub migrate_to: Option<Fid>,
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

/// Implements [`Record`] and [`PlainRecord`] for a type stored as `[1] postcard(type)`, of
/// which version 1 is the only one (its first change adds a version and its old decoder).
macro_rules! plain_record_v1 {
    ($t:ty, $name:literal) => {
        impl Record for $t {
            const NAME: &'static str = $name;
            const VERSION: u8 = 1;

            fn decode_version(version: u8, body: &[u8]) -> Result<$t, RecordError> {
                match version {
                    1 => from_postcard(Self::NAME, body),
                    v => Err(RecordError::unknown_version(Self::NAME, v)),
                }
            }
        }

        impl PlainRecord for $t {}
    };
}

plain_record_v1!(DirentRecord, "dirent record");

/// Intent records: 2 (layout requests and composite layouts), 1 (before composite layouts:
/// plain stripe requests and plain RAID0 layouts, read by intent_v1.rs as one component over
/// the whole file).
impl Record for IntentRecord {
    const NAME: &'static str = "intent record";
    const VERSION: u8 = 2;

    fn decode_version(version: u8, body: &[u8]) -> Result<IntentRecord, RecordError> {
        match version {
            2 => from_postcard(Self::NAME, body),
            1 => from_postcard::<intent_v1::IntentRecord>(Self::NAME, body)
                .map(intent_v1::IntentRecord::upgrade),
            v => Err(RecordError::unknown_version(Self::NAME, v)),
        }
    }
}

impl PlainRecord for IntentRecord {}

/// Relayout records: 2 (composite layouts), 1 (plain RAID0 layouts).
impl Record for RelayoutRecord {
    const NAME: &'static str = "relayout record";
    const VERSION: u8 = 2;

    fn decode_version(version: u8, body: &[u8]) -> Result<RelayoutRecord, RecordError> {
        /// A relayout record as version 1 stored it.
        #[derive(Deserialize)]
        struct PlainRelayout {
            new: inode::before_components::PlainLayout,
            old_generation: u32,
            fenced: bool,
        }
        match version {
            2 => from_postcard(Self::NAME, body),
            1 => from_postcard::<PlainRelayout>(Self::NAME, body).map(|r| RelayoutRecord {
                new: r.new.upgrade(),
                old_generation: r.old_generation,
                fenced: r.fenced,
            }),
            v => Err(RecordError::unknown_version(Self::NAME, v)),
        }
    }
}

impl PlainRecord for RelayoutRecord {}
plain_record_v1!(DirStripe, "directory stripe record");
plain_record_v1!(DirDefault, "directory default record");
plain_record_v1!(ChangelogRecord, "changelog record");

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
