//! Reads a client answered itself, recorded as accesses ([`nacre_wire::mds::MdsOp::AccessBatch`]):
//! a mount that holds a directory's delegation answers opens and reads of the files it made
//! there from the bytes it sent with their creates, and tells the MDT which it read and when.
//! Each is recorded as a reader's close records an access (crate::atime: relatime, in
//! memory, written lazily), so policies' access ages hold whoever answered the read. Who may
//! send it is checked first (crate::perm: read permission on every file).

use crate::mdt::Mdt;
use crate::ops::batch::client_time;
use nacre_types::{Status, TimeSpec};
use nacre_wire::mds::{BatchAccess, MdsReply};

/// Records each read of `items` (every file of this MDT, else nothing is; a file gone since
/// is skipped, as the MDT's own flush skips it).
pub fn run(mdt: &Mdt, items: &[BatchAccess]) -> Result<MdsReply, Status> {
    if items.iter().any(|i| i.fid.mdt_index() != mdt.label.index) {
        return Err(Status::XDev);
    }
    let mut recs = Vec::with_capacity(items.len());
    for i in items {
        match mdt.inode(i.fid) {
            Ok(rec) => recs.push((i, rec)),
            Err(Status::NoEnt) => {}
            Err(e) => return Err(e),
        }
    }
    let now = TimeSpec::now();
    for (i, rec) in recs {
        // Never after the MDT's clock, nor far from it: a client cannot date a read ahead.
        let t = client_time(now, i.time)
            .filter(|t| *t <= now)
            .unwrap_or(now);
        if crate::atime::due(&rec.attr, t) {
            mdt.atimes.accessed(i.fid, t);
        }
    }
    Ok(MdsReply::Done)
}
