//! Unlink: remove a non-directory name; the inode goes with its last link, or becomes an
//! orphan kept until its last opener closes it.

use crate::mdt::{check_name, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Drops one link of `rec` (already detached from its name).
pub fn drop_link(tx: &mut Tx<'_>, mut rec: InodeRecord) -> Result<(), Status> {
    rec.attr.nlink = rec.attr.nlink.saturating_sub(1);
    rec.attr.ctime = tx.now;
    if rec.attr.nlink > 0 {
        tx.put_inode(&rec);
    } else if tx.mdt.is_open(rec.attr.fid) {
        tx.mark_orphan(&mut rec);
    } else {
        tx.remove_inode(&rec)?;
    }
    Ok(())
}

/// Removes `name` from `parent`.
pub fn run(tx: &mut Tx<'_>, parent_fid: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    check_name(name)?;
    let mut parent = tx.dir(parent_fid)?;
    let dirent = tx.lookup(parent_fid, name)?.ok_or(Status::NoEnt)?;
    if dirent.kind == FileKind::Directory {
        return Err(Status::IsDir);
    }
    let rec = tx.inode(dirent.fid)?;
    tx.del_dirent(parent_fid, name);
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    drop_link(tx, rec)?;
    Ok(MdsReply::Done)
}
