//! Names back to inodes (what Lustre keeps in each inode's link EA), for `fid2path`: every
//! directory entry of this MDT is also indexed by the inode it names, in the same
//! transaction as the entry. The index lives with the entries (an inode named from another
//! MDT is found in that MDT's index), so no change ever writes it across MDTs.
//!
//! Table `links`: child FID (16) ++ directory FID (16) ++ name → empty. An entry replaced in
//! place (a rename over it) may leave its old inode's link behind: answers are checked
//! against the entries themselves, so a stale link is never returned. An MDT formatted
//! before the index builds it at its start (store/open.rs).

use crate::mdt::Mdt;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::changelog::FID_LINKS_MAX;
use nacre_wire::mds::MdsReply;

pub use nacre_mdstore::records::{link_key, LINKS};

/// `FidLinks`: the (directory, name) pairs of this MDT naming `fid`, and the striped
/// directory `fid` is a shard of, if it is one (a shard has no name of its own).
pub fn links(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    let page = mdt.store().links_of(fid, FID_LINKS_MAX * 2)?;
    let mut links = Vec::new();
    for (parent, name) in page {
        // Only links the entries still say.
        if mdt
            .lookup(parent, &name)
            .ok()
            .flatten()
            .is_some_and(|d| d.fid == fid)
            && links.len() < FID_LINKS_MAX
        {
            links.push((parent, name));
        }
    }
    let shard_of = match mdt.inode(fid) {
        Ok(rec) if links.is_empty() && rec.attr.kind == FileKind::Directory => {
            rec.parent.filter(|p| *p != fid)
        }
        _ => None,
    };
    Ok(MdsReply::Links { links, shard_of })
}
