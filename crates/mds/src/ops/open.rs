//! Open and Close: the MDS counts openers so a file unlinked while open keeps its objects until
//! the last close (POSIX), as Lustre's orphan handling does.

use crate::mdt::{Mdt, Tx};
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsReply;

/// Registers `client` as an opener and returns the inode with its layout.
pub fn open(mdt: &Mdt, client: &[u8; 16], fid: Fid) -> Result<MdsReply, Status> {
    let rec = mdt.inode(fid)?;
    mdt.add_open(client, fid);
    Ok(super::entry(&rec))
}

/// Drops an opener; removes the inode if it was an orphan and this was the last opener.
/// Returns true if the transaction has changes to commit.
pub fn close(tx: &mut Tx<'_>, fid: Fid) -> Result<bool, Status> {
    if !tx.mdt.drop_open(fid) {
        return Ok(false);
    }
    match tx.inode(fid) {
        Ok(rec) if rec.orphan => {
            tx.remove_inode(&rec)?;
            Ok(true)
        }
        Ok(_) | Err(Status::NoEnt) => Ok(false),
        Err(e) => Err(e),
    }
}
