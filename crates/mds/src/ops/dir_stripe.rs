//! Directory stripe layouts and defaults: `getdirstripe`, `setdirstripe -D`.

use crate::mdt::{Mdt, Tx};
use crate::peers::peer_call;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsOp, MdsReply};

/// The default for new subdirectories of directory `fid`, if this MDT holds it.
pub fn dir_default(
    mdt: &Mdt,
    fid: Fid,
) -> Result<Option<nacre_types::dirstripe::DirDefault>, Status> {
    mdt.store().dir_default(fid)
}

/// Sets (None: removes) directory `fid`'s default for new subdirectories.
pub fn set_dir_default(
    tx: &mut Tx<'_>,
    fid: Fid,
    default: Option<nacre_types::dirstripe::DirDefault>,
) -> Result<MdsReply, Status> {
    tx.dir(fid)?;
    match default {
        Some(d) => {
            if d.count == 0 || d.count < -1 || d.max_inherit < -1 {
                return Err(Status::Inval);
            }
            tx.put_dir_default(fid, &d)
        }
        None => tx.del_dir_default(fid),
    }
    Ok(MdsReply::Done)
}

/// The stripe layout of directory `fid`, if this MDT holds it and it is striped.
pub fn dir_stripe(
    mdt: &Mdt,
    fid: Fid,
) -> Result<Option<nacre_types::dirstripe::DirStripe>, Status> {
    mdt.store().dir_stripe(fid)
}

/// The stripe layout of directory `fid`, wherever it lives.
pub fn stripe_of(mdt: &Mdt, fid: Fid) -> Result<Option<nacre_types::dirstripe::DirStripe>, Status> {
    if fid.mdt_index() == mdt.label.index {
        return dir_stripe(mdt, fid);
    }
    match peer_call(mdt, fid.mdt_index(), MdsOp::GetDirStripe { fid })? {
        MdsReply::DirStripe(s) => Ok(s),
        _ => Err(Status::Proto),
    }
}
