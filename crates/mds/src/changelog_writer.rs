//! What every change writes to the changelog: the numbered record a change adds to its own
//! transaction (the state it numbers from is changelog_state.rs; the consumers are served
//! by changelog.rs).

use crate::changelog_state::{User, UserRecord, ORIGINS_MAX};
use crate::mdt::{Mdt, Tx};
use nacre_mdstore::records::encode_record;
use nacre_types::{Fid, FileKind};
use nacre_wire::mds::changelog::*;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use std::sync::atomic::Ordering;

pub(crate) fn put_user(tx: &mut Tx<'_>, id: u32, u: &User) {
    tx.put_changelog_user(
        id,
        encode_record(&UserRecord {
            name: u.name.clone(),
            cleared: u.cleared,
        }),
    );
}

/// Who made a change: the fields every record of a request carries.
pub struct Origin<'a> {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// The caller's job.
    pub jobid: &'a str,
}

impl<'a> Origin<'a> {
    /// The origin of `call`.
    pub fn of(call: &'a MdsCall) -> Origin<'a> {
        Origin {
            uid: call.cred.uid,
            gid: call.cred.gid,
            jobid: nacre_types::jobid::clamp(&call.jobid),
        }
    }
}

/// What a change records (the fields but number, time and origin).
pub struct Change {
    /// Kind.
    pub kind: RecordKind,
    /// Flags.
    pub flags: u32,
    /// Inode.
    pub target: Fid,
    /// Directory of the name.
    pub parent: Fid,
    /// Name.
    pub name: Vec<u8>,
    /// A rename's source.
    pub source: Option<RenameSource>,
    /// An xattr change's attribute.
    pub xattr: Vec<u8>,
}

impl Change {
    /// A change of `kind` to `target`, named `name` in `parent`.
    pub fn new(kind: RecordKind, target: Fid, parent: Fid, name: &[u8]) -> Change {
        Change {
            kind,
            flags: 0,
            target,
            parent,
            name: name.to_vec(),
            source: None,
            xattr: Vec::new(),
        }
    }
}

/// Adds `change`'s record to `tx` if some consumer is registered. Called by a change that
/// succeeded, just before its transaction commits.
pub fn note(tx: &mut Tx<'_>, origin: &Origin<'_>, change: Change) {
    let cl = &tx.mdt.changelog;
    if !cl.enabled() {
        return;
    }
    let mut st = cl.state.lock();
    if st.users.is_empty() {
        return;
    }
    let index = st.next;
    st.next += 1;
    let rec = ChangelogRecord {
        index,
        kind: change.kind,
        flags: change.flags,
        time: tx.now,
        target: change.target,
        parent: change.parent,
        name: change.name,
        source: change.source,
        xattr: change.xattr,
        uid: origin.uid,
        gid: origin.gid,
        jobid: origin.jobid.to_string(),
    };
    tx.put_changelog_record(index, &rec, st.next);
    cl.written.fetch_add(1, Ordering::Relaxed);
    // The limit: the consumer furthest behind goes once it is too far behind.
    let max = cl.records_max.load(Ordering::Relaxed).max(1);
    let slowest = st
        .users
        .iter()
        .min_by_key(|(_, u)| u.cleared)
        .map(|(id, u)| (*id, u.cleared));
    if let Some((id, cleared)) = slowest {
        if index.saturating_sub(cleared) > max {
            tracing::warn!(
                "{}: changelog consumer cl{id} is {} records behind (changelog_records_max \
                 {max}): deregistered, its records are freed",
                tx.mdt.label.name(),
                index - cleared
            );
            st.users.remove(&id);
            tx.del_changelog_user(id);
            cl.dropped_users.fetch_add(1, Ordering::Relaxed);
            cl.enabled.store(!st.users.is_empty(), Ordering::Release);
        }
    }
}

/// Remembers who started the cross-MDT operation of intent `key` (its record is written
/// when it concludes: [`note_concluded`]).
pub fn remember_origin(mdt: &Mdt, key: Fid, call: &MdsCall) {
    if !mdt.changelog.enabled() {
        return;
    }
    let o = Origin::of(call);
    let mut origins = mdt.changelog.origins.lock();
    if origins.len() < ORIGINS_MAX {
        origins.insert(key, (o.uid, o.gid, o.jobid.to_string()));
    }
}

/// Records `change`, the local end of the cross-MDT operation of intent `key`, in `tx`.
pub fn note_concluded(tx: &mut Tx<'_>, key: Fid, change: Change) {
    let origin = tx.mdt.changelog.origins.lock().remove(&key);
    let (uid, gid, jobid) = origin.unwrap_or((0, 0, String::new()));
    note(
        tx,
        &Origin {
            uid,
            gid,
            jobid: &jobid,
        },
        change,
    );
}

/// The record a successful modifying `op` makes, noted in `tx` (which holds the change,
/// not yet committed: reads through `tx` still see the namespace as it was before it).
pub fn note_op(tx: &mut Tx<'_>, call: &MdsCall, reply: &MdsReply) {
    if !tx.mdt.changelog.enabled() {
        return;
    }
    let origin = Origin::of(call);
    let entry_fid = match reply {
        MdsReply::Entry { attr, .. } => attr.fid,
        _ => Fid::default(),
    };
    let named = |tx: &Tx<'_>, parent: Fid, name: &[u8]| {
        tx.lookup(parent, name).ok().flatten().map(|d| d.fid)
    };
    // A non-directory whose last name goes (its link count before the change is one).
    let last_link = |tx: &Tx<'_>, fid: Fid| match tx.mdt.inode(fid) {
        Ok(rec) => rec.attr.kind != FileKind::Directory && rec.attr.nlink <= 1,
        // On another MDT: that MDT knows; the record says not.
        Err(_) => false,
    };
    let change = match &call.op {
        MdsOp::CreateBatch { parent, items } => {
            let MdsReply::Created(results) = reply else {
                return;
            };
            for (item, r) in items.iter().zip(results) {
                if let Ok((attr, _)) = r {
                    let kind = match attr.kind {
                        nacre_types::FileKind::Directory => RecordKind::Mkdir,
                        _ => RecordKind::Create,
                    };
                    let c = Change::new(kind, attr.fid, *parent, &item.name);
                    note(tx, &origin, c);
                }
            }
            return;
        }
        MdsOp::UnlinkBatch { parent, items } => {
            let MdsReply::Unlinked(results) = reply else {
                return;
            };
            for (item, r) in items.iter().zip(results) {
                if r.is_ok() {
                    let mut c = Change::new(RecordKind::Unlink, item.fid, *parent, &item.name);
                    if last_link(tx, item.fid) {
                        c.flags |= FLAG_LAST_LINK;
                    }
                    note(tx, &origin, c);
                }
            }
            return;
        }
        MdsOp::Create {
            parent, name, kind, ..
        } => {
            if named(tx, *parent, name).is_some() {
                // An open of what was there: nothing created.
                return;
            }
            let k = match kind {
                FileKind::Regular => RecordKind::Create,
                _ => RecordKind::Mknod,
            };
            Change::new(k, entry_fid, *parent, name)
        }
        MdsOp::Mkdir { parent, name, .. }
        | MdsOp::MkdirOn { parent, name, .. }
        | MdsOp::MkdirStriped { parent, name, .. } => {
            Change::new(RecordKind::Mkdir, entry_fid, *parent, name)
        }
        MdsOp::Symlink { parent, name, .. } => {
            Change::new(RecordKind::SoftLink, entry_fid, *parent, name)
        }
        MdsOp::Link { fid, parent, name } => Change::new(RecordKind::HardLink, *fid, *parent, name),
        MdsOp::Unlink { parent, name } => {
            let Some(fid) = named(tx, *parent, name) else {
                return;
            };
            let mut c = Change::new(RecordKind::Unlink, fid, *parent, name);
            if last_link(tx, fid) {
                c.flags |= FLAG_LAST_LINK;
            }
            c
        }
        MdsOp::Rmdir { parent, name } => {
            let Some(fid) = named(tx, *parent, name) else {
                return;
            };
            Change::new(RecordKind::Rmdir, fid, *parent, name)
        }
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ..
        } => {
            let Some(moved) = named(tx, *src_parent, src_name) else {
                return;
            };
            let replaced = named(tx, *dst_parent, dst_name).filter(|f| *f != moved);
            let mut c = Change::new(
                RecordKind::Rename,
                replaced.unwrap_or_default(),
                *dst_parent,
                dst_name,
            );
            if let Some(r) = replaced {
                c.flags |= FLAG_OVERWRITE;
                if last_link(tx, r) {
                    c.flags |= FLAG_LAST_LINK;
                }
            }
            c.source = Some(RenameSource {
                fid: moved,
                parent: *src_parent,
                name: src_name.clone(),
            });
            c
        }
        MdsOp::SetAttr { fid, attr } => {
            let kind = match attr.size {
                Some(_) => RecordKind::Trunc,
                None => RecordKind::SetAttr,
            };
            Change::new(kind, *fid, Fid::default(), b"")
        }
        MdsOp::SetXattr { fid, name, .. } | MdsOp::RemoveXattr { fid, name } => {
            let mut c = Change::new(RecordKind::Xattr, *fid, Fid::default(), b"");
            c.xattr = name.clone();
            c
        }
        MdsOp::SetLayout { fid, .. } | MdsOp::RelayoutSwap { fid } => {
            Change::new(RecordKind::Layout, *fid, Fid::default(), b"")
        }
        _ => return,
    };
    note(tx, &origin, change);
}

/// Records the close of a handle open for writing of `fid` by `call` in `tx`.
pub fn note_close(tx: &mut Tx<'_>, call: &MdsCall, fid: Fid, written: bool) {
    let mut c = Change::new(RecordKind::Close, fid, Fid::default(), b"");
    if written {
        c.flags |= FLAG_WRITTEN;
    }
    note(tx, &Origin::of(call), c);
}
