//! Creates of many files in one directory with FIDs the client gave them
//! ([`nacre_wire::mds::MdsOp::CreateBatch`]): one transaction, one transno.

use crate::mdt::{check_name, Tx};
use nacre_mdstore::store::tx::ReplayHint;
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, FileKind, Layout, Status};
use nacre_wire::mds::{BatchCreate, MdsReply, CREATE_BATCH_ITEMS_MAX};

/// Largest reply a batch gives (a frame's body, less room for its envelope).
pub const REPLY_BYTES_MAX: usize = nacre_types::limits::BODY_BYTES_MAX as usize - 64 * 1024;

/// Makes `items` in `parent`; `replayed`: the FIDs and layouts they had when the batch ran
/// before a restart of the MDT (empty if it is not a replay). Each item is checked as a
/// create of the transaction's credentials would be; one that fails is answered its error
/// and changes nothing, the others are made. Items past what fits a reply of
/// [`REPLY_BYTES_MAX`] are left untried, each answered `E2BIG`.
pub fn run(
    tx: &mut Tx<'_>,
    parent: nacre_types::Fid,
    items: &[BatchCreate],
    replayed: &[ReplayHint],
) -> Result<MdsReply, Status> {
    if items.is_empty() || items.len() > CREATE_BATCH_ITEMS_MAX {
        return Err(Status::Inval);
    }
    let mut dir = tx.dir(parent)?;
    let mut results = Vec::with_capacity(items.len());
    let mut made = 0;
    let (mut reply_bytes, mut item_bytes_max) = (0usize, 0usize);
    for item in items {
        // Widely striped layouts: the rest would not fit the reply. Left untried, each
        // answered `E2BIG`: the client sends them again in its next batch.
        if reply_bytes + item_bytes_max > REPLY_BYTES_MAX {
            results.push(Err(Status::TooBig));
            continue;
        }
        let r = create_one(tx, &dir, item, replayed);
        made += usize::from(r.is_ok());
        let bytes = match &r {
            Ok(made) => nacre_wire::encode_body(made).len(),
            Err(_) => 8,
        };
        item_bytes_max = item_bytes_max.max(bytes);
        reply_bytes += bytes;
        results.push(r);
    }
    if made > 0 {
        tx.touch(&mut dir);
        tx.put_inode(&dir);
    }
    Ok(MdsReply::Created(results))
}

fn create_one(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    item: &BatchCreate,
    replayed: &[ReplayHint],
) -> Result<(Attr, Option<Layout>), Status> {
    // The FID is the client's to give: one of its grants, never given before. Taken
    // first: a FID sent is spent, whatever becomes of its item.
    tx.take_granted_fid(item.fid)?;
    check_name(&item.name)?;
    if tx.lookup(dir.attr.fid, &item.name)?.is_some() {
        return Err(Status::Exist);
    }
    if !tx.cred.is_root() {
        super::create::claims(&tx.cred, &dir.attr, item.uid, item.gid)?;
    }
    // A replay names the layout its file had (its objects may hold data written since).
    let hint = replayed.iter().find(|(f, _)| *f == item.fid).cloned();
    match &hint {
        Some(h) => tx.replay = Some(h.clone()),
        None => tx.given_fid = Some(item.fid),
    }
    let made = make(tx, dir, item);
    tx.replay = None;
    tx.given_fid = None;
    made
}

fn make(
    tx: &mut Tx<'_>,
    dir: &nacre_mdstore::records::InodeRecord,
    item: &BatchCreate,
) -> Result<(Attr, Option<Layout>), Status> {
    let perm = item.perm & 0o7777;
    let mut rec = super::create::new_inode(tx, dir, FileKind::Regular, perm, item.uid, item.gid);
    // Object ids allocated for nothing if it fails after are only skipped.
    let layout = tx.new_layout(dir, &LayoutSpec::plain(StripeSpec::default()), 0)?;
    // Counted (and an id the quota master refused stopped) before anything is written.
    tx.count_inodes(&rec.attr, 1)?;
    rec.layout = Some(layout.clone());
    tx.put_inode(&rec);
    tx.put_dirent(dir.attr.fid, &item.name, rec.attr.fid, FileKind::Regular);
    if tx.replay.is_none() && tx.forced_transno.is_none() {
        tx.mdt.sizes.created(rec.attr.fid);
    }
    Ok((rec.attr, Some(layout)))
}
