//! Writing the lazy access times recorded in memory (crate::atime): one transaction, run by
//! the server every [`crate::atime::ATIME_FLUSH_MS`] and at a clean stop.

use crate::mdt::Mdt;
use nacre_types::Status;

/// Writes the recorded accesses (one transaction, not waited for): returns how many
/// inodes took a new access time.
pub fn flush(mdt: &Mdt) -> Result<usize, Status> {
    let pending = mdt.atimes.take();
    if pending.is_empty() {
        return Ok(0);
    }
    let mut tx = mdt.begin();
    let mut n = 0;
    for (fid, t) in pending {
        match tx.inode(fid) {
            Ok(mut rec) if rec.attr.atime < t => {
                rec.attr.atime = t;
                tx.put_inode(&rec);
                n += 1;
            }
            // Gone, moved, or already later: nothing to do.
            Ok(_) | Err(Status::NoEnt | Status::Stale) => {}
            Err(e) => return Err(e),
        }
    }
    if !tx.is_empty() {
        tx.commit()?;
    }
    drop(tx);
    mdt.atimes
        .flushes
        .fetch_add(1, std::sync::atomic::Ordering::Release);
    Ok(n)
}
