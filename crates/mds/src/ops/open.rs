//! Open and Close: the MDS counts openers so a file unlinked while open keeps its objects until
//! the last close (POSIX), as Lustre's orphan handling does.

use crate::mdt::{Mdt, Tx};
use nacre_types::{Attr, Fid, Status};
use nacre_wire::mds::MdsReply;

/// Registers `client` as an opener (a writer if `access` asks to write) and returns the inode
/// with its layout (and its exact size, as it was before this open).
pub fn open(mdt: &Mdt, client: &[u8; 16], fid: Fid, access: u8) -> Result<MdsReply, Status> {
    let rec = mdt.inode(fid)?;
    let reply = super::exact_entry(mdt, super::entry(&rec));
    let writer = access & nacre_types::cred::MAY_WRITE != 0;
    mdt.add_open(client, fid, access);
    mdt.sizes.opened(fid, client, writer);
    Ok(reply)
}

/// Drops an opener; removes the inode if it was an orphan and this was the last opener, else
/// records the access if the handle was a reader (`read`: not opened for writing; atime.rs). Returns true if the transaction has changes to commit.
pub fn close(tx: &mut Tx<'_>, fid: Fid, read: bool) -> Result<bool, Status> {
    if !tx.mdt.drop_open(fid) {
        return Ok(false);
    }
    match tx.inode(fid) {
        Ok(rec) if rec.orphan => {
            tx.remove_inode(&rec)?;
            Ok(true)
        }
        // A reader's access, where relatime records one (written lazily: atime.rs).
        Ok(rec) => {
            if read && crate::atime::due(&rec.attr, tx.now) {
                tx.mdt.atimes.accessed(fid, tx.now);
            }
            Ok(false)
        }
        Err(Status::NoEnt) => Ok(false),
        Err(e) => Err(e),
    }
}

/// A handle of `fid` that wrote is closed (or its client is gone): the file's modification
/// and change times move to now, as POSIX's `write` marks them (at the close, in the MDT's
/// clock: every write of that handle came before it). Returns the attributes (their size
/// is the record's, not the file's: crate::sizes), or None if the inode is gone (the close removed an orphan, or another client's unlink did).
pub fn touch_written(tx: &mut Tx<'_>, fid: Fid) -> Result<Option<Attr>, Status> {
    let mut rec = match tx.inode(fid) {
        Ok(rec) => rec,
        Err(Status::NoEnt | Status::Stale) => return Ok(None),
        Err(e) => return Err(e),
    };
    rec.attr.mtime = tx.now;
    rec.attr.ctime = tx.now;
    tx.put_inode(&rec);
    Ok(Some(rec.attr))
}
