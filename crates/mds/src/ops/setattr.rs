//! SetAttr: mode, owner, project, size hint and times. Regular-file sizes are changed on the OSTs by the
//! client before this call; the MDS records the change times.
//!
//! Set-id bits go as the kernel clears them on a local file system (`setattr_prepare`,
//! `should_remove_suid`, `setattr_should_drop_sgid`): a truncate by a caller other than
//! root, a chown of anything but a directory (by anyone), and a write
//! ([`SetAttr::kill_suidgid`], sent by the client before the data) clear set-user-ID, and
//! set-group-ID where group-execute is set or the caller is neither root nor in the file's
//! group; a chmod by a caller other than root outside the file's group drops
//! set-group-ID. With
//! `FUSE_HANDLE_KILLPRIV_V2` the kernel leaves all of this to the file system: the MDT
//! does it here, as a side effect of a change the caller may make, never as a chmod in
//! the caller's name (which its owner check would refuse).

use crate::mdt::Tx;
use nacre_types::{Fid, FileKind, SetAttr, Status};
use nacre_wire::mds::MdsReply;

/// Applies `set` to `fid`.
pub fn run(tx: &mut Tx<'_>, fid: Fid, set: &SetAttr) -> Result<MdsReply, Status> {
    let mut rec = tx.inode(fid)?;
    let before = rec.attr.clone();
    // Bytes on the MDT are cut (or zero-extended) with the size; those on OSTs by the
    // client (a refusal below discards this with the rest of the transaction).
    let mut dom_stored = None;
    if let (Some(size), FileKind::Regular) = (set.size, rec.attr.kind) {
        dom_stored = crate::ops::dom::truncate(tx, &mut rec, size)?;
    }
    let a = &mut rec.attr;
    if let Some(size) = set.size {
        tx.mdt.sizes.changed(fid);
        match a.kind {
            FileKind::Directory => return Err(Status::IsDir),
            FileKind::Regular => {}
            _ => return Err(Status::Inval),
        }
        a.size = size;
        if set.mtime.is_none() {
            a.mtime = tx.now;
        }
    }
    let root = tx.cred.is_root();
    if let Some(perm) = set.perm {
        a.perm = perm & 0o7777;
        let group = set.gid.unwrap_or(a.gid);
        if !root && !tx.cred.in_group(group) {
            a.perm &= !nacre_types::attr::S_ISGID;
        }
    }
    let chown = set.uid.is_some() || set.gid.is_some();
    let kill = set.kill_suidgid
        || (set.size.is_some() && !root)
        || (chown && a.kind != FileKind::Directory);
    if kill && set.perm.is_none() && a.kind != FileKind::Directory {
        let in_group = root || tx.cred.in_group(before.gid);
        a.perm = nacre_types::attr::kill_privs(a.perm, in_group);
    }
    if let Some(uid) = set.uid {
        a.uid = uid;
    }
    if let Some(gid) = set.gid {
        a.gid = gid;
    }
    if let Some(inherit) = set.proj_inherit {
        if inherit && a.kind != FileKind::Directory {
            return Err(Status::Inval);
        }
        a.proj_inherit = inherit;
    }
    if let Some(project) = set.project {
        a.project = project;
    }
    if let Some(t) = set.atime {
        a.atime = t;
    }
    if let Some(t) = set.mtime {
        a.mtime = t;
    }
    a.ctime = set.ctime.unwrap_or(tx.now);
    // The objects follow their file's owner, group and project (for quotas, and to tell
    // whose data they hold).
    if set.uid.is_some() || set.gid.is_some() || set.project.is_some() {
        if let Some(layout) = &rec.layout {
            let owner = nacre_types::Owner::of(&rec.attr);
            tx.queue_owner_change(layout, owner);
            // Its bytes on the MDT move to the new owner's usage in this transaction (as
            // on OSTs, a change of owner is not refused for the new owner's quota).
            if layout.dom_end() > 0 {
                let stored = match dom_stored {
                    Some(n) => n,
                    None => tx.store().dom(fid)?.len(),
                };
                tx.recount_dom(&before, &rec.attr, stored);
            }
        }
    }
    tx.recount_inode(&before, &rec.attr);
    tx.put_inode(&rec);
    Ok(MdsReply::Attr(rec.attr))
}
