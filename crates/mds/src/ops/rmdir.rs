//! Rmdir: remove an empty directory.

use crate::mdt::{check_name, Tx};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// True if directory `fid` has no entries.
pub fn is_empty(tx: &Tx<'_>, fid: Fid) -> Result<bool, Status> {
    tx.store().dir_is_empty(fid)
}

/// Removes directory `name` from `parent`.
pub fn run(tx: &mut Tx<'_>, parent_fid: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    if name == b"." {
        return Err(Status::Inval);
    }
    if name == b".." {
        return Err(Status::NotEmpty);
    }
    check_name(name)?;
    let mut parent = tx.dir(parent_fid)?;
    let dirent = tx.lookup(parent_fid, name)?.ok_or(Status::NoEnt)?;
    if dirent.kind != FileKind::Directory {
        return Err(Status::NotDir);
    }
    if !is_empty(tx, dirent.fid)? {
        return Err(Status::NotEmpty);
    }
    let rec = tx.inode(dirent.fid)?;
    tx.del_dirent(parent_fid, name);
    parent.attr.nlink = parent.attr.nlink.saturating_sub(1).max(2);
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.remove_inode(&rec)?;
    Ok(MdsReply::Done)
}
