//! GetAttr: an inode's attributes.

use crate::mdt::Mdt;
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsReply;

/// Returns the attributes of `fid`.
pub fn run(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    Ok(MdsReply::Attr(mdt.inode(fid)?.attr))
}
