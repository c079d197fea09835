//! One file per metadata operation. Read-only operations take the MDT; modifying ones take a
//! [`crate::mdt::Tx`], add their changes to its batch only after every check has passed, and
//! return the reply to save with them.

pub mod access_batch;
pub mod atime_flush;
pub mod batch;
pub mod create;
pub mod dir_stripe;
pub mod dom;
pub mod getattr;
pub mod layout;
pub mod link;
pub mod link_remote;
pub mod lookup;
pub mod mkdir;
pub mod mkdir_remote;
pub mod mkdir_striped;
pub mod open;
pub mod readdir;
pub mod readlink;
pub mod remote_update;
pub mod rename;
pub mod rename_remote;
pub mod rename_steps;
pub mod rmdir;
pub mod rmdir_remote;
pub mod rmdir_striped;
pub mod scan;
pub mod setattr;
pub mod symlink;
pub mod unlink;
pub mod unlink_batch;
pub mod unlink_remote;
pub mod xattr;

use nacre_mdstore::records::InodeRecord;
use nacre_wire::mds::MdsReply;

/// The reply describing an inode: attributes plus a regular file's layout (the size is the
/// MDT's hint; [`exact_entry`] puts in the exact one where it is known).
pub fn entry(rec: &InodeRecord) -> MdsReply {
    MdsReply::Entry {
        attr: rec.attr.clone(),
        layout: rec.layout.clone(),
        size_exact: false,
    }
}

/// A regular file's exact size and blocks, if the MDT knows them: from crate::sizes, or
/// the file's own record where every byte it has is on the MDT (a component on the MDT
/// and no object instantiated: its size is set by the writes and truncates the MDT runs).
pub fn exact_size(
    mdt: &crate::mdt::Mdt,
    attr: &nacre_types::Attr,
    layout: Option<&nacre_types::Layout>,
) -> Option<(u64, u64)> {
    match layout {
        Some(l) if l.dom_end() > 0 && l.object_count() == 0 => Some((attr.size, attr.blocks)),
        _ => mdt.sizes.exact(attr.fid),
    }
}

/// An inode's reply with its exact size, if the MDT knows it (crate::sizes).
pub fn exact_entry(mdt: &crate::mdt::Mdt, reply: MdsReply) -> MdsReply {
    match reply {
        MdsReply::Entry {
            mut attr,
            layout,
            size_exact: false,
        } if attr.kind == nacre_types::FileKind::Regular => {
            match exact_size(mdt, &attr, layout.as_ref()) {
                Some((size, blocks)) => {
                    attr.size = size;
                    attr.blocks = blocks;
                    MdsReply::Entry {
                        attr,
                        layout,
                        size_exact: true,
                    }
                }
                None => MdsReply::Entry {
                    attr,
                    layout,
                    size_exact: false,
                },
            }
        }
        other => other,
    }
}

/// A directory that passes its project on takes in, by rename or hard link, only inodes of
/// that project (`EXDEV` otherwise, as ext4, XFS and Lustre do: a move between projects is
/// a copy, so each project's usage stays its own).
pub fn project_admits(
    dir: &nacre_types::Attr,
    inode: &nacre_types::Attr,
) -> Result<(), nacre_types::Status> {
    if dir.proj_inherit && dir.project != inode.project {
        return Err(nacre_types::Status::XDev);
    }
    Ok(())
}

/// [`project_admits`] for a directory and an inode either of which may be on another MDT.
pub fn project_admits_anywhere(
    mdt: &crate::mdt::Mdt,
    dir: nacre_types::Fid,
    inode: nacre_types::Fid,
) -> Result<(), nacre_types::Status> {
    let attr = |fid: nacre_types::Fid| -> Result<nacre_types::Attr, nacre_types::Status> {
        if fid.mdt_index() == mdt.label.index {
            return Ok(mdt.inode(fid)?.attr);
        }
        match crate::peers::peer_call(
            mdt,
            fid.mdt_index(),
            nacre_wire::mds::MdsOp::GetAttr { fid },
        )? {
            MdsReply::Entry { attr, .. } | MdsReply::Attr(attr) => Ok(attr),
            _ => Err(nacre_types::Status::Proto),
        }
    };
    let dir = attr(dir)?;
    if !dir.proj_inherit {
        return Ok(());
    }
    project_admits(&dir, &attr(inode)?)
}
