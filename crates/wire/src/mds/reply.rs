//! The metadata service's replies.

use super::{DirEntry, DirPlusEntry, READDIRPLUS_ENTRIES_MAX};
use nacre_types::layout::LayoutSpec;
use nacre_types::{Attr, Fid, FileKind, Layout, StatFs, Status};
use serde::{Deserialize, Serialize};

/// What the namespace checker needs of one inode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeSummary {
    /// Inode.
    pub fid: Fid,
    /// Kind.
    pub kind: FileKind,
    /// Link count as stored.
    pub nlink: u32,
    /// Parent of a directory.
    pub parent: Option<Fid>,
    /// Unlinked while open (kept until the last close; no entry names it).
    pub orphan: bool,
    /// Shards, if it is the master of a striped directory.
    pub shards: Vec<Fid>,
}

/// One stored directory entry, with its directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirentSummary {
    /// Directory.
    pub parent: Fid,
    /// Name.
    pub name: Vec<u8>,
    /// Inode named.
    pub fid: Fid,
    /// Kind recorded in the entry.
    pub kind: FileKind,
}

/// A file's layout or a directory's default striping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutInfo {
    /// A regular file's objects.
    File(Layout),
    /// A directory's default for new files, plain or composite (`None`: inherits the file
    /// system default).
    Dir(Option<LayoutSpec>),
    /// Not a regular file or directory.
    None,
}

/// Replies from the MDS. Errors travel in the header status with an empty body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsReply {
    /// Attributes.
    Attr(Attr),
    /// An inode and, for regular files, its layout.
    Entry {
        /// Attributes.
        attr: Attr,
        /// Layout of a regular file.
        layout: Option<Layout>,
        /// A regular file's size and blocks in `attr` are exact (no one writes it and the
        /// MDT knows them): no glimpse is needed.
        size_exact: bool,
    },
    /// Symlink target.
    Target(Vec<u8>),
    /// A page of directory entries.
    Dir {
        /// Entries in name order.
        entries: Vec<DirEntry>,
        /// No entries follow.
        eof: bool,
    },
    /// Extended attribute value.
    Xattr(Vec<u8>),
    /// Extended attribute names.
    XattrNames(Vec<Vec<u8>>),
    /// Layout.
    Layout(LayoutInfo),
    /// Capacity.
    StatFs(StatFs),
    /// Done, nothing to return.
    Done,
    /// A FID reserved by [`MdsOp::AllocFid`].
    Fid(Fid),
    /// A directory's stripe layout (None: not striped).
    DirStripe(Option<nacre_types::dirstripe::DirStripe>),
    /// A directory's default for new subdirectories.
    DirDefault(Option<nacre_types::dirstripe::DirDefault>),
    /// The name is an entry of this MDT for an inode of another MDT: ask that one for it.
    Remote {
        /// The inode (its MDT is `fid.mdt_index()`).
        fid: Fid,
    },
    /// A page of inodes in FID order.
    Inodes {
        /// Inodes.
        inodes: Vec<InodeSummary>,
        /// No inodes follow.
        eof: bool,
    },
    /// A page of directory entries in (parent, name) order.
    Dirents {
        /// Entries.
        dirents: Vec<DirentSummary>,
        /// No entries follow.
        eof: bool,
    },
    /// The FIDs the entries of a [`RemoteUpdate::Adopt`] name on the receiving MDT.
    Adopted(Vec<Fid>),
    /// A directory moved by [`MdsOp::Migrate`].
    Migrated {
        /// Its new FID.
        fid: Fid,
        /// Inodes that moved with it (files, symlinks).
        moved: u64,
        /// Entries whose inodes stayed where they were (subdirectories, open or
        /// hard-linked files, inodes of other MDTs).
        kept: u64,
    },
    /// Locks the client must cancel (answer to [`MdsOp::LockPoll`]).
    Blocking(Vec<nacre_ldlm::msg::LockRef>),
    /// The name does not exist: the answer to a [`MdsOp::Lookup`] that asked for a lock,
    /// which is then on the directory (its UPDATE bit covers the absence).
    NoEntry,
    /// Handles of replayed locks the MDT did not take back (answer to
    /// [`MdsOp::LockReplay`]): the client drops them.
    LocksRefused(Vec<u64>),
    /// Another owner's lock is still in the way after the wait (answer to
    /// [`MdsOp::Flock`]): ask again.
    FlockBlocked,
    /// The lock in the way, if any (answer to [`MdsOp::FlockTest`]).
    FlockHeld(Option<nacre_ldlm::flock::Flock>),
    /// A page of directory entries with attributes and locks (answer to
    /// [`MdsOp::ReadDirPlus`]).
    DirPlus {
        /// Entries in name order.
        entries: Vec<DirPlusEntry>,
        /// No entries follow.
        eof: bool,
    },
    /// A changelog consumer's id (answer to [`MdsOp::ChangelogRegister`]).
    ChangelogUser(u32),
    /// Changelog records in number order (answer to [`MdsOp::ChangelogRead`]).
    Changelog {
        /// The records.
        records: Vec<super::changelog::ChangelogRecord>,
        /// The number to read from next.
        next: u64,
    },
    /// The consumers and the records kept (answer to [`MdsOp::ChangelogUsers`]).
    ChangelogUsers {
        /// Registered consumers.
        users: Vec<super::changelog::ChangelogUser>,
        /// Oldest record kept.
        first: u64,
        /// Number the next record will get.
        next: u64,
    },
    /// A migration's layouts (answer to [`MdsOp::RelayoutBegin`]).
    Relayout {
        /// The file's layout now.
        old: Layout,
        /// The new objects.
        new: Layout,
    },
    /// Inodes as a policy engine indexes them (answer to [`MdsOp::StatMany`] and
    /// [`MdsOp::ScanStats`]), in the order asked or in FID order.
    Stats {
        /// One per inode found.
        stats: Vec<super::changelog::InodeStat>,
        /// No inodes follow (a scan's last page).
        eof: bool,
    },
    /// (OST index, bytes) that queued destroys will free (answer to
    /// [`MdsOp::DestroyPending`]), one per OST with some.
    DestroyPending(Vec<(u32, u64)>),
    /// What each id a [`crate::mds::MdsOp::QuotaUsage`] asked for has on the MDT, in order.
    QuotaUsage {
        /// Inodes.
        inodes: Vec<u64>,
        /// Bytes of data on the MDT (in whole 4 KiB blocks per file).
        dom_bytes: Vec<u64>,
    },
    /// What a [`crate::mds::MdsOp::QuotaCheck`] found (and repaired).
    QuotaCheck {
        /// Of the inode counts.
        inodes: nacre_types::QuotaCheck,
        /// Of the bytes of data on the MDT.
        dom_bytes: nacre_types::QuotaCheck,
    },
    /// Names leading to an inode (answer to [`MdsOp::FidLinks`]).
    Links {
        /// (directory, name) of each entry on this MDT that names the inode.
        links: Vec<(Fid, Vec<u8>)>,
        /// The inode is a shard of this striped directory (its names are the master's).
        shard_of: Option<Fid>,
    },
    /// Answer to [`MdsOp::Connect`].
    Connected {
        /// Changes at every start of the MDT: a client that saw another one must replay.
        epoch: u64,
        /// The MDT waits for its clients' replays (its recovery window is open).
        recovering: bool,
        /// Highest transaction number durable on the MDT.
        last_committed: u64,
        /// Highest transaction number the store held when this incarnation started: a
        /// client's changes above it were lost with the restart (and are replayed, or,
        /// once recovery is over, gone).
        committed_at_start: u64,
        /// The client's root directory: the file system's, or its nodemap's fileset.
        root: Fid,
        /// Root on the client is not root here (its nodemap squashes it): its mounts
        /// default to `nosuid,nodev`.
        squashed: bool,
    },
    /// Bytes of a file's component on the MDT (answer to [`MdsOp::DomRead`]).
    DomData(Vec<u8>),
    /// An open's [`MdsReply::Entry`] with the bytes of the file's component on the MDT
    /// (all the MDT stores: at most [`DOM_OPEN_BYTES_MAX`]), sent only to an open that
    /// asked for a `DOM` lock and was granted one with it: the client reads them from
    /// memory while it holds the lock (and forgets them as it changes them itself).
    OpenData {
        /// Attributes.
        attr: Attr,
        /// Layout.
        layout: Option<Layout>,
        /// The size in `attr` is exact (as [`MdsReply::Entry`]'s).
        size_exact: bool,
        /// Every byte stored on the MDT for the file, from byte 0.
        data: Vec<u8>,
    },
    /// FIDs granted to the caller ([`super::MdsOp::GrantFids`]): `count` FIDs from `first`
    /// on, in one sequence (`first.oid .. first.oid + count`).
    FidRange {
        /// The first FID.
        first: Fid,
        /// How many.
        count: u32,
    },
    /// One result per item of a [`super::MdsOp::CreateBatch`], in order: the new file's
    /// attributes and layout, or why it was not made.
    Created(Vec<Result<(Attr, Option<Layout>), Status>>),
    /// One result per item of a [`super::MdsOp::UnlinkBatch`], in order: removed, or why
    /// not.
    Unlinked(Vec<Result<(), Status>>),
    /// A directory delegated ([`super::MdsOp::DelegateDir`]).
    Delegated {
        /// The directory's attributes under the lock.
        attr: Attr,
        /// How many bytes from byte 0 a file made in it under the delegation may carry
        /// with its create ([`super::BatchCreate::data`]): as long as the component on the
        /// MDT its new files start with, at most [`super::CREATE_DATA_BYTES_MAX`]; 0 where
        /// they start on OSTs. It holds while the delegation does (a change of the
        /// directory's default layout, or of the file system's, calls it back).
        data_bytes_max: u32,
        /// Whether subdirectories made in it under the delegation may be answered by the
        /// holder ([`super::BatchCreate::kind`]): a plain directory of this MDT is what the
        /// MDT's own mkdir would make there (no default directory striping says otherwise).
        /// It holds while the delegation does (a change of the default calls it back).
        mkdirs: bool,
        /// The directory holds no entry: its holder knows it completely from now on (no
        /// other client adds a name while the delegation is held).
        empty: bool,
    },
}

/// Most bytes an [`MdsReply::OpenData`] carries (a file storing more on the MDT is answered
/// a plain entry: its reads ask for the bytes).
pub const DOM_OPEN_BYTES_MAX: usize = 64 * 1024;

impl MdsReply {
    /// Checks content a well-formed reply may still get wrong, before a client uses it:
    /// layouts (objects, stripe size), directory stripes (shards), entry names (1 to 255
    /// bytes, no `/` or NUL), page sizes, symlink targets and xattr sizes. The reason on
    /// failure.
    pub fn check(&self) -> Result<(), String> {
        use nacre_types::limits::{
            NAME_BYTES_MAX, READDIR_ENTRIES_MAX, SYMLINK_BYTES_MAX, XATTR_NAME_BYTES_MAX,
            XATTR_VALUE_BYTES_MAX,
        };
        let at_most = |what: &str, n: usize, max: usize| match n > max {
            true => Err(format!("{what} of {n} bytes (at most {max})")),
            false => Ok(()),
        };
        match self {
            MdsReply::Entry {
                layout: Some(l), ..
            }
            | MdsReply::Layout(LayoutInfo::File(l)) => l.check().map_err(|e| e.to_string()),
            MdsReply::OpenData { layout, data, .. } => {
                at_most("data with an open", data.len(), DOM_OPEN_BYTES_MAX)?;
                match layout {
                    Some(l) => l.check().map_err(|e| e.to_string()),
                    None => Err("data with an open of a file without a layout".into()),
                }
            }
            MdsReply::Relayout { old, new } => {
                old.check().map_err(|e| e.to_string())?;
                new.check().map_err(|e| e.to_string())
            }
            MdsReply::Layout(LayoutInfo::Dir(Some(spec))) => {
                spec.check().map_err(|e| e.to_string())
            }
            MdsReply::DirStripe(Some(s)) => s.check(),
            MdsReply::FidRange { first, count } => {
                let end = u64::from(first.oid) + u64::from(*count);
                match *count == 0 || first.oid == 0 || end > u64::from(u32::MAX) + 1 {
                    true => Err(format!("a grant of {count} FIDs from {first}")),
                    false => Ok(()),
                }
            }
            MdsReply::Created(results) => {
                if results.len() > super::CREATE_BATCH_ITEMS_MAX {
                    return Err(format!("{} results of a batch", results.len()));
                }
                results.iter().try_for_each(|r| match r {
                    Ok((_, Some(l))) => l.check().map_err(|e| e.to_string()),
                    _ => Ok(()),
                })
            }
            MdsReply::Delegated { data_bytes_max, .. } => at_most(
                "a delegation's bytes per create",
                *data_bytes_max as usize,
                super::CREATE_DATA_BYTES_MAX,
            ),
            MdsReply::Unlinked(results) if results.len() > super::UNLINK_BATCH_ITEMS_MAX => {
                Err(format!("{} results of an unlink batch", results.len()))
            }
            MdsReply::DomData(d) => at_most(
                "data on the MDT",
                d.len(),
                super::DOM_RPC_BYTES_MAX as usize,
            ),
            MdsReply::QuotaCheck { inodes, dom_bytes }
                if inodes.diffs.len().max(dom_bytes.diffs.len())
                    > nacre_types::QuotaCheck::DIFFS_MAX =>
            {
                Err("a quota check of too many differences".to_string())
            }
            MdsReply::QuotaUsage { inodes, dom_bytes } if inodes.len() != dom_bytes.len() => {
                Err("quota usage of inodes and bytes of different ids".to_string())
            }
            MdsReply::Dir { entries, .. } => {
                if entries.len() > READDIR_ENTRIES_MAX as usize {
                    return Err(format!("directory page of {} entries", entries.len()));
                }
                entries.iter().try_for_each(|e| check_name(&e.name))
            }
            MdsReply::FlockHeld(Some(l)) if l.start > l.end => {
                Err(format!("a byte-range lock from {} to {}", l.start, l.end))
            }
            MdsReply::DirPlus { entries, .. } => {
                if entries.len() > READDIRPLUS_ENTRIES_MAX as usize {
                    return Err(format!("directory page of {} entries", entries.len()));
                }
                entries.iter().try_for_each(|e| {
                    check_name(&e.entry.name)?;
                    if let Some(l) = &e.layout {
                        l.check().map_err(|e| e.to_string())?;
                    }
                    match (&e.attr, &e.lock) {
                        (Some(a), _) if a.fid != e.entry.fid => {
                            Err("attributes of another inode than the entry's".into())
                        }
                        (_, Some(l)) if l.fid != e.entry.fid || !l.is_valid() => {
                            Err("a lock on another inode than the entry's".into())
                        }
                        _ => Ok(()),
                    }
                })
            }
            MdsReply::Target(t) => at_most("symlink target", t.len(), SYMLINK_BYTES_MAX),
            MdsReply::LocksRefused(h) if h.len() > nacre_ldlm::msg::REFS_PER_MESSAGE_MAX => {
                Err(format!("{} refused locks in one answer", h.len()))
            }
            MdsReply::Blocking(refs) => {
                if refs.len() > nacre_ldlm::msg::REFS_PER_MESSAGE_MAX {
                    return Err(format!("{} lock callbacks in one answer", refs.len()));
                }
                match refs.iter().all(|r| r.is_valid()) {
                    true => Ok(()),
                    false => Err("a lock callback with unknown bits".into()),
                }
            }
            MdsReply::Xattr(v) => at_most("xattr value", v.len(), XATTR_VALUE_BYTES_MAX),
            MdsReply::Changelog { records, .. } => {
                let max = super::changelog::CHANGELOG_READ_RECORDS_MAX as usize;
                if records.len() > max {
                    return Err(format!("{} changelog records in one answer", records.len()));
                }
                records.iter().try_for_each(|r| r.check())
            }
            MdsReply::Links { links, .. } => {
                if links.len() > super::changelog::FID_LINKS_MAX {
                    return Err(format!("{} links in one answer", links.len()));
                }
                links.iter().try_for_each(|(_, n)| check_name(n))
            }
            MdsReply::Stats { stats, .. } if stats.len() > super::changelog::STATS_MAX => {
                Err(format!("{} inodes in one answer", stats.len()))
            }
            MdsReply::XattrNames(names) => names
                .iter()
                .try_for_each(|n| at_most("xattr name", n.len(), XATTR_NAME_BYTES_MAX)),
            _ => {
                let _ = NAME_BYTES_MAX;
                Ok(())
            }
        }
    }
}

/// A directory entry's name as a client may hand it to the kernel: 1 to 255 bytes, no `/`
/// or NUL, not `.` or `..` (the client adds those itself).
fn check_name(name: &[u8]) -> Result<(), String> {
    let bad = name.is_empty()
        || name.len() > nacre_types::limits::NAME_BYTES_MAX
        || name.contains(&b'/')
        || name.contains(&0)
        || name == b"."
        || name == b"..";
    match bad {
        true => Err(format!(
            "directory entry name {:?} ({} bytes)",
            String::from_utf8_lossy(&name[..name.len().min(64)]),
            name.len()
        )),
        false => Ok(()),
    }
}
