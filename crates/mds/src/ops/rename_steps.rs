//! The steps of a rename across MDTs (an intent's remote part, driven by crate::dne): each
//! idempotent, so a crash anywhere re-runs them. The coordinator that commits the intent is
//! ops/rename_remote.rs.

use crate::mdt::Mdt;
use crate::peers::{peer_call, send_until};
use nacre_mdstore::records::IntentRecord;
use nacre_net::fault;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsOp, MdsReply, RemoteUpdate};
use std::time::Instant;

/// The steps of a rename across MDTs, each idempotent so a crash anywhere re-runs them: the
/// inode's MDT counts the new entry (when it is not the target's), the target MDT puts the
/// entry (undoing the count if it refuses), this MDT removes the source entry, and the
/// inode's MDT drops the source entry's link (when the inode is not here). `finish_owed`
/// finishes an intent of this MDT that a step applied here waits for (`dne::finish`).
pub(crate) fn rename_steps(
    mdt: &Mdt,
    intent: &IntentRecord,
    deadline: Instant,
    finish_owed: &dyn Fn(&Mdt, Fid) -> Result<(), Status>,
) -> Result<(), Status> {
    let RemoteUpdate::InsertEntry {
        fid, parent, name, ..
    } = &intent.update
    else {
        unreachable!("rename_steps on an InsertEntry intent");
    };
    let (here, home, target) = (mdt.label.index, fid.mdt_index(), intent.mdt);
    let send = |at: u32, update: RemoteUpdate| {
        if at == here {
            // A rename between directories of this MDT (an inode of another MDT moves or is
            // replaced): the entry's part is this MDT's own, applied as a peer would.
            crate::ops::remote_update::apply(mdt, &update, finish_owed).map(|_| ())
        } else {
            send_until(mdt, at, update, deadline)
        }
    };
    let new_link = || RemoteUpdate::AddLink {
        fid: *fid,
        parent: *parent,
        name: name.clone(),
    };
    let moving_dir = matches!(
        intent.update,
        RemoteUpdate::InsertEntry {
            kind: FileKind::Directory,
            ..
        }
    );
    if home != target && !moving_dir {
        send(home, new_link())?;
    }
    let mut update = intent.update.clone();
    if let RemoteUpdate::InsertEntry {
        replaces,
        noreplace: false,
        kind: FileKind::Directory,
        ..
    } = &mut update
    {
        // Over an empty directory of a third MDT: destroyed there first (ENOTEMPTY stops
        // the rename with nothing changed), then the entry replaced.
        if let Some(victim) = third_mdt_victim(mdt, target, *parent, name, *fid)? {
            send(victim.mdt_index(), RemoteUpdate::DestroyDir { fid: victim })?;
            fault::point("mds.rename_remote.after_victim_destroyed");
            *replaces = Some(victim);
        }
    }
    if let Err(s) = send(target, update) {
        if matches!(s, Status::Again | Status::NoDev) {
            return Err(s);
        }
        if home != target && !moving_dir {
            let RemoteUpdate::AddLink { fid, parent, name } = new_link() else {
                unreachable!()
            };
            send(home, RemoteUpdate::DropLink { fid, parent, name })?;
        }
        return Err(s);
    }
    if moving_dir {
        // A directory: its `..` follows; its old parent loses the subdirectory link.
        let moved = (|| {
            send(
                home,
                RemoteUpdate::SetParent {
                    fid: *fid,
                    parent: *parent,
                },
            )?;
            let mut tx = mdt.begin();
            if tx.lookup(intent.parent, &intent.name)?.map(|d| d.fid) == Some(*fid) {
                tx.del_dirent(intent.parent, &intent.name);
                let mut dir = tx.dir(intent.parent)?;
                dir.attr.nlink = dir.attr.nlink.saturating_sub(1).max(2);
                tx.touch(&mut dir);
                tx.put_inode(&dir);
                note_rename(&mut tx, intent, *fid, *parent, name);
                tx.commit_durable()?;
            }
            Ok(())
        })();
        return moved.map_err(|s: Status| {
            tracing::warn!(
                "{}: move of directory {fid} to finish later: {s}",
                mdt.label.name()
            );
            Status::Again
        });
    }
    // From here on the rename happens: any failure is retried (the intent stays).
    finish_rename(mdt, intent, *fid, here, home, &send).map_err(|s| {
        tracing::warn!("{}: rename of {fid} to finish later: {s}", mdt.label.name());
        Status::Again
    })
}

/// The directory named by (`parent`, `name`) on MDT `target` when its inode lives on a third
/// MDT and it is not striped (a rename of directory `moving` may replace it once it is
/// destroyed there); None otherwise. A victim already destroyed by an earlier run of the
/// same rename (its inode gone, its entry not) counts too.
pub(crate) fn third_mdt_victim(
    mdt: &Mdt,
    target: u32,
    parent: Fid,
    name: &[u8],
    moving: Fid,
) -> Result<Option<Fid>, Status> {
    let lookup = MdsOp::Lookup {
        parent,
        name: name.to_vec(),
    };
    let found = if target == mdt.label.index {
        mdt.lookup(parent, name)?.map(|d| d.fid)
    } else {
        match peer_call(mdt, target, lookup) {
            Ok(MdsReply::Remote { fid }) => Some(fid),
            Ok(_) | Err(Status::NoEnt) => None,
            Err(s) => return Err(s),
        }
    };
    let victim = match found {
        Some(fid) if fid != moving && fid.mdt_index() != target => fid,
        _ => return Ok(None),
    };
    let home = victim.mdt_index();
    match peer_call(mdt, home, MdsOp::GetAttr { fid: victim }) {
        Ok(MdsReply::Attr(attr)) | Ok(MdsReply::Entry { attr, .. }) => {
            if attr.kind != FileKind::Directory || stripe_of_remote(mdt, victim)? {
                return Ok(None);
            }
            Ok(Some(victim))
        }
        Err(Status::NoEnt) => Ok(Some(victim)),
        Ok(_) => Err(Status::Proto),
        Err(s) => Err(s),
    }
}

/// True if directory `fid` (on another MDT) is striped.
pub(crate) fn stripe_of_remote(mdt: &Mdt, fid: Fid) -> Result<bool, Status> {
    match peer_call(mdt, fid.mdt_index(), MdsOp::GetDirStripe { fid })? {
        MdsReply::DirStripe(s) => Ok(s.is_some()),
        _ => Err(Status::Proto),
    }
}

/// The second half of [`rename_steps`]: the source entry and its link.
/// The rename's record, written with the removal of its source entry here (the entry's
/// new side was put by `dst_parent`'s MDT already).
fn note_rename(
    tx: &mut crate::mdt::Tx<'_>,
    intent: &IntentRecord,
    fid: Fid,
    dst_parent: Fid,
    dst_name: &[u8],
) {
    use nacre_wire::mds::changelog::{RecordKind, RenameSource};
    let mut change = crate::changelog_writer::Change::new(
        RecordKind::Rename,
        Fid::default(),
        dst_parent,
        dst_name,
    );
    change.source = Some(RenameSource {
        fid,
        parent: intent.parent,
        name: intent.name.clone(),
    });
    crate::changelog_writer::note_concluded(tx, intent.key, change);
}

pub(crate) fn finish_rename(
    mdt: &Mdt,
    intent: &IntentRecord,
    fid: Fid,
    here: u32,
    home: u32,
    send: &dyn Fn(u32, RemoteUpdate) -> Result<(), Status>,
) -> Result<(), Status> {
    let fid = &fid;
    // The source entry goes (once: only while it still names the inode).
    let mut tx = mdt.begin();
    if tx.lookup(intent.parent, &intent.name)?.map(|d| d.fid) == Some(*fid) {
        tx.del_dirent(intent.parent, &intent.name);
        let mut dir = tx.dir(intent.parent)?;
        tx.touch(&mut dir);
        tx.put_inode(&dir);
        if let RemoteUpdate::InsertEntry { parent, name, .. } = &intent.update {
            note_rename(&mut tx, intent, *fid, *parent, name);
        }
        if home == here {
            let rec = tx.inode(*fid)?;
            crate::ops::unlink::drop_link(&mut tx, rec)?;
        }
        let destroys = std::mem::take(&mut tx.destroys);
        tx.commit_durable()?;
        mdt.queue_destroys(destroys);
    } else {
        drop(tx);
    }
    if home != here {
        send(
            home,
            RemoteUpdate::DropLink {
                fid: *fid,
                parent: intent.parent,
                name: intent.name.clone(),
            },
        )?;
    }
    Ok(())
}
