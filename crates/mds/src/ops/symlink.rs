//! Symlink: an inode holding a path.

use crate::mdt::{check_name, Tx};
use nacre_types::limits::SYMLINK_BYTES_MAX;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Creates symlink `name` → `target` in `parent`.
pub fn run(
    tx: &mut Tx<'_>,
    parent_fid: Fid,
    name: &[u8],
    target: &[u8],
    uid: u32,
    gid: u32,
) -> Result<MdsReply, Status> {
    check_name(name)?;
    if target.is_empty() {
        return Err(Status::NoEnt);
    }
    if target.len() > SYMLINK_BYTES_MAX {
        return Err(Status::NameTooLong);
    }
    let mut parent = tx.dir(parent_fid)?;
    if tx.lookup(parent_fid, name)?.is_some() {
        return Err(Status::Exist);
    }
    let mut rec = super::create::new_inode(tx, &parent, FileKind::Symlink, 0o777, uid, gid);
    rec.attr.size = target.len() as u64;
    rec.symlink = Some(target.to_vec());
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_inode(&rec);
    tx.put_dirent(parent_fid, name, rec.attr.fid, FileKind::Symlink);
    tx.count_inodes(&rec.attr, 1)?;
    Ok(super::entry(&rec))
}
