//! Rename: move a name, replacing a compatible target atomically.

use crate::mdt::{check_name, Tx};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Most directory levels walked when checking that a directory is not moved under itself.
pub const DEPTH_MAX: usize = 4096;

/// Arguments of a rename.
pub struct RenameArgs<'a> {
    /// Source directory.
    pub src_parent: Fid,
    /// Source name.
    pub src_name: &'a [u8],
    /// Target directory.
    pub dst_parent: Fid,
    /// Target name.
    pub dst_name: &'a [u8],
    /// RENAME_NOREPLACE.
    pub noreplace: bool,
}

/// Fails with EINVAL if `dir` is `ancestor` or lies beneath it.
fn check_not_beneath(tx: &Tx<'_>, dir: Fid, ancestor: Fid) -> Result<(), Status> {
    let mut cur = dir;
    for _ in 0..DEPTH_MAX {
        if cur == ancestor {
            return Err(Status::Inval);
        }
        if cur == Fid::ROOT {
            return Ok(());
        }
        if cur.mdt_index() != tx.mdt.label.index {
            // The path up leaves this MDT: the caller made the whole check across MDTs
            // under the rename lock, or it cannot be made here.
            return if tx.ancestry_checked {
                Ok(())
            } else {
                Err(Status::XDev)
            };
        }
        cur = tx.inode(cur)?.parent.unwrap_or(Fid::ROOT);
    }
    Err(Status::Io)
}

/// Performs the rename.
pub fn run(tx: &mut Tx<'_>, a: RenameArgs<'_>) -> Result<MdsReply, Status> {
    check_name(a.src_name)?;
    check_name(a.dst_name)?;
    let here = tx.mdt.label.index;
    if a.dst_parent.mdt_index() != here {
        return Err(Status::XDev);
    }
    let mut src_dir = tx.dir(a.src_parent)?;
    let same_dir = a.src_parent == a.dst_parent;
    let mut dst_dir = if same_dir {
        None
    } else {
        Some(tx.dir(a.dst_parent)?)
    };
    let src = tx.lookup(a.src_parent, a.src_name)?.ok_or(Status::NoEnt)?;
    // An entry of a directory on another MDT may be renamed within its directory (its `..`
    // does not change); any other move of an inode of another MDT is not supported yet.
    let remote_src = src.fid.mdt_index() != here;
    if remote_src && !(same_dir && src.kind == FileKind::Directory) {
        return Err(Status::XDev);
    }
    if same_dir && a.src_name == a.dst_name {
        return Ok(MdsReply::Done);
    }
    let moving_dir = src.kind == FileKind::Directory;
    if moving_dir && !same_dir {
        check_not_beneath(tx, a.dst_parent, src.fid)?;
    }
    let victim = tx.lookup(a.dst_parent, a.dst_name)?;
    if let Some(v) = &victim {
        if v.fid.mdt_index() != here {
            return Err(Status::XDev);
        }
        if a.noreplace {
            return Err(Status::Exist);
        }
        if v.fid == src.fid {
            return Ok(MdsReply::Done);
        }
        match (moving_dir, v.kind == FileKind::Directory) {
            (true, false) => return Err(Status::NotDir),
            (false, true) => return Err(Status::IsDir),
            (true, true) if !super::rmdir::is_empty(tx, v.fid)? => return Err(Status::NotEmpty),
            _ => {}
        }
    }
    if let (Some(dst), false) = (&dst_dir, remote_src) {
        super::project_admits(&dst.attr, &tx.inode(src.fid)?.attr)?;
    }
    // Every check passed: record the changes.
    tx.del_dirent(a.src_parent, a.src_name);
    tx.put_dirent(a.dst_parent, a.dst_name, src.fid, src.kind);
    if let Some(v) = victim {
        let rec = tx.inode(v.fid)?;
        if v.kind == FileKind::Directory {
            let target_dir = dst_dir.as_mut().unwrap_or(&mut src_dir);
            target_dir.attr.nlink = target_dir.attr.nlink.saturating_sub(1).max(2);
            tx.remove_inode(&rec)?;
        } else {
            super::unlink::drop_link(tx, rec)?;
        }
    }
    if !remote_src {
        let mut moved = tx.inode(src.fid)?;
        moved.attr.ctime = tx.now;
        if moving_dir {
            if let Some(dst_dir) = dst_dir.as_mut() {
                src_dir.attr.nlink = src_dir.attr.nlink.saturating_sub(1).max(2);
                dst_dir.attr.nlink += 1;
                moved.parent = Some(a.dst_parent);
            }
        }
        tx.put_inode(&moved);
    }
    tx.touch(&mut src_dir);
    tx.put_inode(&src_dir);
    if let Some(mut d) = dst_dir {
        tx.touch(&mut d);
        tx.put_inode(&d);
    }
    Ok(MdsReply::Done)
}
