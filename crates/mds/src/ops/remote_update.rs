//! Updates a coordinating MDT sends to this one (docs/dne.md): `MdsOp::AllocFid` reserves a FID
//! here, `MdsOp::Update` applies one `RemoteUpdate` idempotently and durably.

use crate::mdt::Mdt;
use crate::ops::dir_stripe::dir_stripe;
use nacre_mdstore::records::{InodeRecord, IntentRecord};
use nacre_net::fault;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsOp, MdsReply, RemoteUpdate};

/// Participant: reserves one of this MDT's FIDs for an inode a peer will ask it to create,
/// refusing when it has no room for one more inode.
pub fn alloc_fid(mdt: &Mdt) -> Result<MdsReply, Status> {
    if mdt.statfs()?.files_free == 0 {
        return Err(Status::NoSpc);
    }
    let mut tx = mdt.begin();
    let fid = tx.new_fid();
    tx.commit_durable()?;
    Ok(MdsReply::Fid(fid))
}

/// Participant: applies a peer's update, idempotently, durable before the reply. The
/// updates of a directory migration are not for it (execute.rs sends them to
/// crate::migrate). An intent the update leaves this MDT owing is driven by `finish_owed`
/// (the callers pass `dne::finish` with no wait).
pub fn apply(
    mdt: &Mdt,
    update: &RemoteUpdate,
    finish_owed: &dyn Fn(&Mdt, Fid) -> Result<(), Status>,
) -> Result<MdsReply, Status> {
    let mut tx = mdt.begin();
    // Checked under the write lock, which a migration holds while it freezes.
    if mdt.held_by_migration(&MdsOp::Update(update.clone())) {
        return Err(Status::InProgress);
    }
    let mut owed: Option<(Fid, IntentRecord)> = None;
    match update {
        RemoteUpdate::CreateDir {
            attr,
            parent,
            dir_default,
            stripe,
            default,
        } => {
            if attr.fid.mdt_index() != mdt.label.index || attr.kind != FileKind::Directory {
                return Err(Status::Inval);
            }
            if tx.inode(attr.fid).is_ok() {
                return Ok(MdsReply::Done);
            }
            tx.put_inode(&InodeRecord {
                attr: attr.clone(),
                layout: None,
                dir_default: dir_default.clone(),
                symlink: None,
                parent: Some(*parent),
                orphan: false,
            });
            if let Some(stripe) = stripe {
                tx.put_dir_stripe(attr.fid, stripe);
            }
            if let Some(default) = default {
                tx.put_dir_default(attr.fid, default);
            }
            tx.count_inodes(attr, 1)?;
        }
        RemoteUpdate::DestroyDir { fid } => {
            let rec = match tx.inode(*fid) {
                Err(Status::NoEnt) => return Ok(MdsReply::Done),
                r => r?,
            };
            if rec.attr.kind != FileKind::Directory {
                return Err(Status::NotDir);
            }
            if !crate::ops::rmdir::is_empty(&tx, *fid)? {
                return Err(Status::NotEmpty);
            }
            tx.remove_inode(&rec)?;
        }
        RemoteUpdate::AddLink { fid, parent, name } => {
            if mdt.store().has_remote_link(*fid, *parent, name)? {
                return Ok(MdsReply::Done);
            }
            let mut rec = tx.inode(*fid)?;
            if rec.attr.kind == FileKind::Directory {
                return Err(Status::Perm);
            }
            if rec.orphan || rec.attr.nlink == 0 {
                return Err(Status::NoEnt);
            }
            if rec.attr.nlink >= crate::ops::link::LINK_COUNT_MAX {
                return Err(Status::MLink);
            }
            rec.attr.nlink += 1;
            rec.attr.ctime = tx.now;
            tx.put_inode(&rec);
            tx.put_remote_link(*fid, *parent, name);
        }
        RemoteUpdate::InsertEntry {
            fid,
            kind,
            parent,
            name,
            noreplace,
            replaces,
        } => {
            crate::mdt::check_name(name)?;
            let mut dir = tx.dir(*parent)?;
            let moving_dir = *kind == FileKind::Directory;
            let victim = match tx.lookup(*parent, name)? {
                Some(e) if e.fid == *fid => return Ok(MdsReply::Done),
                Some(_) if *noreplace => return Err(Status::Exist),
                // A directory of another MDT the coordinator found empty and destroyed.
                Some(e) if moving_dir && *replaces == Some(e.fid) => Some(e),
                Some(e) if e.kind == FileKind::Directory && moving_dir => {
                    // An empty directory of this MDT may be replaced; one elsewhere or
                    // striped cannot be checked and removed in this transaction.
                    if e.fid.mdt_index() != mdt.label.index || dir_stripe(mdt, e.fid)?.is_some() {
                        return Err(Status::XDev);
                    }
                    if !crate::ops::rmdir::is_empty(&tx, e.fid)? {
                        return Err(Status::NotEmpty);
                    }
                    Some(e)
                }
                Some(e) if e.kind == FileKind::Directory => return Err(Status::IsDir),
                Some(_) if moving_dir => return Err(Status::NotDir),
                other => other,
            };
            if moving_dir {
                // A replaced directory gives its subdirectory link to the moved one.
                if victim.is_none() {
                    if dir.attr.nlink >= crate::ops::mkdir::DIR_NLINK_MAX {
                        return Err(Status::MLink);
                    }
                    dir.attr.nlink += 1;
                }
            } else if fid.mdt_index() == mdt.label.index {
                let mut rec = tx.inode(*fid)?;
                rec.attr.nlink += 1;
                rec.attr.ctime = tx.now;
                tx.put_inode(&rec);
            }
            tx.put_dirent(*parent, name, *fid, *kind);
            tx.touch(&mut dir);
            tx.put_inode(&dir);
            if let Some(v) = victim {
                if *replaces == Some(v.fid) {
                    // Destroyed on its own MDT already.
                } else if v.kind == FileKind::Directory {
                    let rec = tx.inode(v.fid)?;
                    tx.remove_inode(&rec)?;
                } else if v.fid.mdt_index() == mdt.label.index {
                    let rec = tx.inode(v.fid)?;
                    crate::ops::unlink::drop_link(&mut tx, rec)?;
                } else {
                    // The replaced entry named an inode of another MDT: this MDT now owes
                    // that one a DropLink, through an intent of its own.
                    let key = tx.new_fid();
                    let intent = IntentRecord {
                        key,
                        mdt: v.fid.mdt_index(),
                        update: RemoteUpdate::DropLink {
                            fid: v.fid,
                            parent: *parent,
                            name: name.clone(),
                        },
                        parent: *parent,
                        name: name.clone(),
                        reply_to: None,
                        shards: Vec::new(),
                        attr: None,
                        migrate_to: None,
                    };
                    tx.put_intent(&intent);
                    owed = Some((key, intent));
                }
            }
        }
        RemoteUpdate::SetParent { fid, parent } => match tx.inode(*fid) {
            Ok(mut rec) => {
                if rec.parent == Some(*parent) {
                    return Ok(MdsReply::Done);
                }
                rec.parent = Some(*parent);
                rec.attr.ctime = tx.now;
                tx.put_inode(&rec);
            }
            // Removed meanwhile: nothing to point anywhere.
            Err(Status::NoEnt) => return Ok(MdsReply::Done),
            Err(s) => return Err(s),
        },
        RemoteUpdate::DropLink { fid, parent, name } => {
            if !mdt.store().has_remote_link(*fid, *parent, name)? {
                return Ok(MdsReply::Done);
            }
            tx.del_remote_link(*fid, *parent, name);
            match tx.inode(*fid) {
                Ok(rec) => crate::ops::unlink::drop_link(&mut tx, rec)?,
                Err(Status::NoEnt) => {}
                Err(s) => return Err(s),
            }
        }
        // Applied by crate::migrate (execute.rs dispatches them there).
        RemoteUpdate::Freeze { .. } | RemoteUpdate::Adopt { .. } | RemoteUpdate::Repoint { .. } => {
            return Err(Status::Proto)
        }
    }
    let destroys = std::mem::take(&mut tx.destroys);
    tx.commit_durable()?;
    mdt.queue_destroys(destroys);
    if let Some((key, intent)) = owed {
        mdt.intents.lock().expect("intents").insert(key, intent);
        if let Err(s) = finish_owed(mdt, key) {
            tracing::debug!("{}: replaced entry's link pending: {s}", mdt.label.name());
        }
    }
    fault::point(match update {
        RemoteUpdate::CreateDir { .. } => "mds.update_create_dir.after_commit_before_reply",
        RemoteUpdate::DestroyDir { .. } => "mds.update_destroy_dir.after_commit_before_reply",
        RemoteUpdate::AddLink { .. } => "mds.update_add_link.after_commit_before_reply",
        RemoteUpdate::InsertEntry { .. } => "mds.update_insert_entry.after_commit_before_reply",
        RemoteUpdate::SetParent { .. } => "mds.update_set_parent.after_commit_before_reply",
        RemoteUpdate::DropLink { .. } => "mds.update_drop_link.after_commit_before_reply",
        _ => "mds.update.after_commit_before_reply",
    });
    Ok(MdsReply::Done)
}
