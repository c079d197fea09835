//! Unlinks of many names in one directory, each of the file the client saw it lead to
//! ([`nacre_wire::mds::MdsOp::UnlinkBatch`]): one transaction, one transno.

use super::batch::client_time;
use crate::mdt::{check_name, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_net::fault;
use nacre_types::{FileKind, Status};
use nacre_wire::mds::{BatchUnlink, MdsReply, UNLINK_BATCH_ITEMS_MAX};

/// Removes `items` from `parent`, in order. Each is checked first (the name leads to the
/// item's FID, a file of this MDT, not a directory): one that fails is answered its error
/// and changes nothing; the permission to remove each was checked before the transaction
/// (crate::perm). What goes with a file's last link goes as with an unlink.
pub fn run(
    tx: &mut Tx<'_>,
    parent: nacre_types::Fid,
    items: &[BatchUnlink],
) -> Result<MdsReply, Status> {
    if items.is_empty() || items.len() > UNLINK_BATCH_ITEMS_MAX {
        return Err(Status::Inval);
    }
    // Each item reads the store as it was before the batch: a name or a file twice would
    // drop a link twice (counts falling twice, a file left with no name).
    let mut fids = std::collections::HashSet::with_capacity(items.len());
    if super::batch::repeats(items.iter().map(|i| &i.name[..]))
        || !items.iter().all(|i| fids.insert(i.fid))
    {
        return Err(Status::Inval);
    }
    let mut dir = tx.dir(parent)?;
    let mut results = Vec::with_capacity(items.len());
    let mut latest = None;
    for item in items {
        let rec = match checked(tx, &dir, item) {
            Ok(rec) => rec,
            Err(s) => {
                results.push(Err(s));
                continue;
            }
        };
        // Past the checks, a failure is the store's: the whole batch fails.
        tx.del_dirent(parent, &item.name);
        super::unlink::drop_link(tx, rec)?;
        latest = latest.max(client_time(tx.now, item.time));
        results.push(Ok(()));
    }
    if results.iter().any(Result::is_ok) {
        super::batch::date_dir(tx, &mut dir, latest);
    }
    // Everything removed, nothing committed: a kill here loses the whole batch, which the
    // client (never answered) sends again.
    fault::point("mds.unlink_batch.made");
    Ok(MdsReply::Unlinked(results))
}

/// The inode `item` removes a link of, if it may go: its name leads to its FID, of a file
/// (not a directory) of this MDT.
fn checked(tx: &mut Tx<'_>, dir: &InodeRecord, item: &BatchUnlink) -> Result<InodeRecord, Status> {
    check_name(&item.name)?;
    let dirent = tx.lookup(dir.attr.fid, &item.name)?.ok_or(Status::NoEnt)?;
    if dirent.fid != item.fid {
        return Err(Status::Stale);
    }
    if dirent.kind == FileKind::Directory {
        return Err(Status::IsDir);
    }
    if dirent.fid.mdt_index() != tx.mdt.label.index {
        return Err(Status::XDev);
    }
    tx.inode(dirent.fid)
}
