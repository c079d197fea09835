//! GetAttr: an inode's attributes, with the layout of a regular file.

use crate::mdt::Mdt;
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsReply;

/// Returns the attributes of `fid`.
pub fn run(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    Ok(super::entry(&mdt.inode(fid)?))
}
