//! Mkdir: a new directory; the parent gains a link (the child's "..").

use crate::mdt::{check_name, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

pub use nacre_types::limits::DIR_NLINK_MAX;

/// The checks of a new subdirectory `name` of `parent_fid` (local or remote): a valid new
/// name in a directory that can take one more link. Returns the parent.
pub fn check_new(tx: &Tx<'_>, parent_fid: Fid, name: &[u8]) -> Result<InodeRecord, Status> {
    check_name(name)?;
    let parent = tx.dir(parent_fid)?;
    if tx.lookup(parent_fid, name)?.is_some() {
        return Err(Status::Exist);
    }
    if parent.attr.nlink >= DIR_NLINK_MAX {
        return Err(Status::MLink);
    }
    Ok(parent)
}

/// Creates directory `name` in `parent`.
pub fn run(
    tx: &mut Tx<'_>,
    parent_fid: Fid,
    name: &[u8],
    perm: u32,
    uid: u32,
    gid: u32,
) -> Result<MdsReply, Status> {
    let mut parent = check_new(tx, parent_fid, name)?;
    let mut rec = super::create::new_inode(tx, &parent, FileKind::Directory, perm, uid, gid);
    rec.parent = Some(parent_fid);
    // A new directory takes its parent's default layout, as Lustre's do (its files are laid
    // out as its parent's would be); the root's default is the file system's, which every
    // directory without one of its own follows as it changes, so it is not copied.
    if parent_fid != Fid::ROOT {
        rec.dir_default = parent.dir_default.clone();
    }
    parent.attr.nlink += 1;
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_inode(&rec);
    tx.put_dirent(parent_fid, name, rec.attr.fid, FileKind::Directory);
    tx.count_inodes(&rec.attr, 1)?;
    Ok(super::entry(&rec))
}
