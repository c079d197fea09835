//! Lookup: a name in a directory to its inode.

use crate::mdt::{check_name, Mdt};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::MdsReply;

/// Resolves `name` in `parent`.
pub fn run(mdt: &Mdt, parent: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    let dir = mdt.inode(parent)?;
    if dir.attr.kind != FileKind::Directory {
        return Err(Status::NotDir);
    }
    if name == b".." {
        let up = dir.parent.unwrap_or(Fid::ROOT);
        if up.mdt_index() != mdt.label.index {
            return Ok(MdsReply::Remote { fid: up });
        }
        return Ok(super::entry(&mdt.inode(up)?));
    }
    if name == b"." {
        return Ok(super::entry(&dir));
    }
    check_name(name)?;
    let dirent = mdt.lookup(parent, name)?.ok_or(Status::NoEnt)?;
    if dirent.fid.mdt_index() != mdt.label.index {
        // A remote directory: its inode is on another MDT, which the client asks next.
        return Ok(MdsReply::Remote { fid: dirent.fid });
    }
    Ok(super::entry(&mdt.inode(dirent.fid)?))
}
