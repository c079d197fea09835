//! Link: a new name for an existing non-directory inode.

use crate::mdt::{check_name, Tx};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Most hard links to one inode (ext4's limit).
pub const LINK_COUNT_MAX: u32 = 65_000;

/// Links `fid` as `name` in `parent`.
pub fn run(tx: &mut Tx<'_>, fid: Fid, parent_fid: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    check_name(name)?;
    let mut parent = tx.dir(parent_fid)?;
    if fid.mdt_index() != tx.mdt.label.index {
        // The inode is on another MDT: cross-MDT hard links are not supported yet.
        return Err(Status::XDev);
    }
    let mut rec = tx.inode(fid)?;
    if rec.attr.kind == FileKind::Directory {
        return Err(Status::Perm);
    }
    if rec.orphan || rec.attr.nlink == 0 {
        return Err(Status::NoEnt);
    }
    super::project_admits(&parent.attr, &rec.attr)?;
    if rec.attr.nlink >= LINK_COUNT_MAX {
        return Err(Status::MLink);
    }
    if tx.lookup(parent_fid, name)?.is_some() {
        return Err(Status::Exist);
    }
    rec.attr.nlink += 1;
    rec.attr.ctime = tx.now;
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_inode(&rec);
    tx.put_dirent(parent_fid, name, fid, rec.attr.kind);
    Ok(super::entry(&rec))
}
