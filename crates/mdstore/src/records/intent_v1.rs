//! The intent record as version 1 stored it, before composite layouts: `[1]
//! postcard(IntentRecord)` with plain stripe requests ([`StripeSpec`]) where version 2 has
//! layout requests ([`LayoutSpec`]: a `CreateDir`'s default for new files, each shard's
//! default), and plain RAID0 layouts ([`PlainLayout`]) where it has composite ones (a moved
//! inode's). A frozen copy, read only: postcard has no field tags, so every type here keeps
//! the variants and fields of `nacre_wire::mds::RemoteUpdate`, `AdoptEntry`, `MovedInode`
//! and the record as version 1 wrote them, in their order, and never changes. The types
//! that did not change with composite layouts (`Attr`, `Fid`, `FileKind`, `DirStripe`,
//! `DirDefault`, `StripeSpec`) are used as they are. [`IntentRecord::upgrade`] makes the
//! record of today: a stripe request a one-component request to the end of the file, a
//! plain layout one component over the whole file.

use super::inode::before_components::PlainLayout;
use nacre_types::dirstripe::{DirDefault, DirStripe};
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, Fid, FileKind};
use nacre_wire::mds;
use serde::Deserialize;

/// An intent record as version 1 stored it (today's [`super::IntentRecord`], field for
/// field).
#[derive(Deserialize)]
pub(super) struct IntentRecord {
    key: Fid,
    mdt: u32,
    update: RemoteUpdate,
    parent: Fid,
    name: Vec<u8>,
    reply_to: Option<([u8; 16], u64)>,
    attr: Option<Attr>,
    /// Each shard's default for new files: a plain stripe request.
    shards: Vec<(u32, Attr, Option<StripeSpec>, Option<DirDefault>)>,
    migrate_to: Option<Fid>,
}

impl IntentRecord {
    /// The record it is now: its stripe requests as one-component layout requests, its
    /// layouts as one component over the whole file; nothing else changes.
    pub(super) fn upgrade(self) -> super::IntentRecord {
        super::IntentRecord {
            key: self.key,
            mdt: self.mdt,
            update: self.update.upgrade(),
            parent: self.parent,
            name: self.name,
            reply_to: self.reply_to,
            attr: self.attr,
            shards: self
                .shards
                .into_iter()
                .map(|(mdt, attr, files, dirs)| (mdt, attr, files.map(LayoutSpec::plain), dirs))
                .collect(),
            migrate_to: self.migrate_to,
        }
    }
}

/// `nacre_wire::mds::RemoteUpdate` as version 1 of the record stored it: every variant, in
/// its order (postcard stores a variant's index), each with its fields in their order.
/// Only `CreateDir`'s `dir_default` and, through `Adopt`'s entries, a moved inode's layout
/// differ from today's.
#[derive(Deserialize)]
enum RemoteUpdate {
    /// As today's, but for a plain stripe request as the default for new files.
    CreateDir {
        attr: Attr,
        parent: Fid,
        dir_default: Option<StripeSpec>,
        stripe: Option<DirStripe>,
        default: Option<DirDefault>,
    },
    /// As today's.
    DestroyDir { fid: Fid },
    /// As today's.
    AddLink {
        fid: Fid,
        parent: Fid,
        name: Vec<u8>,
    },
    /// As today's.
    InsertEntry {
        fid: Fid,
        kind: FileKind,
        parent: Fid,
        name: Vec<u8>,
        noreplace: bool,
        replaces: Option<Fid>,
    },
    /// As today's.
    SetParent { fid: Fid, parent: Fid },
    /// As today's.
    DropLink {
        fid: Fid,
        parent: Fid,
        name: Vec<u8>,
    },
    /// As today's.
    Freeze {
        fid: Fid,
        parent: Fid,
        name: Vec<u8>,
        to: Fid,
    },
    /// As today's, but for entries of version 1's shape ([`AdoptEntry`]).
    Adopt {
        dir: Fid,
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        entries: Vec<AdoptEntry>,
    },
    /// As today's.
    Repoint {
        parent: Fid,
        name: Vec<u8>,
        from: Fid,
        to: Fid,
    },
}

impl RemoteUpdate {
    /// The update it is now: the same variant with the same fields, a stripe request as a
    /// one-component layout request, a moved inode's layout as one component.
    fn upgrade(self) -> mds::RemoteUpdate {
        match self {
            RemoteUpdate::CreateDir {
                attr,
                parent,
                dir_default,
                stripe,
                default,
            } => mds::RemoteUpdate::CreateDir {
                attr,
                parent,
                dir_default: dir_default.map(LayoutSpec::plain),
                stripe,
                default,
            },
            RemoteUpdate::DestroyDir { fid } => mds::RemoteUpdate::DestroyDir { fid },
            RemoteUpdate::AddLink { fid, parent, name } => {
                mds::RemoteUpdate::AddLink { fid, parent, name }
            }
            RemoteUpdate::InsertEntry {
                fid,
                kind,
                parent,
                name,
                noreplace,
                replaces,
            } => mds::RemoteUpdate::InsertEntry {
                fid,
                kind,
                parent,
                name,
                noreplace,
                replaces,
            },
            RemoteUpdate::SetParent { fid, parent } => mds::RemoteUpdate::SetParent { fid, parent },
            RemoteUpdate::DropLink { fid, parent, name } => {
                mds::RemoteUpdate::DropLink { fid, parent, name }
            }
            RemoteUpdate::Freeze {
                fid,
                parent,
                name,
                to,
            } => mds::RemoteUpdate::Freeze {
                fid,
                parent,
                name,
                to,
            },
            RemoteUpdate::Adopt {
                dir,
                xattrs,
                entries,
            } => mds::RemoteUpdate::Adopt {
                dir,
                xattrs,
                entries: entries.into_iter().map(AdoptEntry::upgrade).collect(),
            },
            RemoteUpdate::Repoint {
                parent,
                name,
                from,
                to,
            } => mds::RemoteUpdate::Repoint {
                parent,
                name,
                from,
                to,
            },
        }
    }
}

/// `nacre_wire::mds::AdoptEntry` as version 1 stored it (its inode of version 1's shape).
#[derive(Deserialize)]
struct AdoptEntry {
    name: Vec<u8>,
    kind: FileKind,
    fid: Fid,
    inode: Option<MovedInode>,
}

impl AdoptEntry {
    /// The entry it is now.
    fn upgrade(self) -> mds::AdoptEntry {
        mds::AdoptEntry {
            name: self.name,
            kind: self.kind,
            fid: self.fid,
            inode: self.inode.map(MovedInode::upgrade),
        }
    }
}

/// `nacre_wire::mds::MovedInode` as version 1 stored it: a plain RAID0 layout.
#[derive(Deserialize)]
struct MovedInode {
    attr: Attr,
    layout: Option<PlainLayout>,
    symlink: Option<Vec<u8>>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl MovedInode {
    /// The inode it is now: its layout one component over the whole file.
    fn upgrade(self) -> mds::MovedInode {
        mds::MovedInode {
            attr: self.attr,
            layout: self.layout.map(PlainLayout::upgrade),
            symlink: self.symlink,
            xattrs: self.xattrs,
        }
    }
}
