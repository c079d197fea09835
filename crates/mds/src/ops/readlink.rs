//! ReadLink: a symlink's target.

use crate::mdt::Mdt;
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsReply;

/// Returns the target of symlink `fid`.
pub fn run(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    let rec = mdt.inode(fid)?;
    rec.symlink.map(MdsReply::Target).ok_or(Status::Inval)
}
