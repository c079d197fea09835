//! Data on the MDT (Lustre's DoM): the bytes of a file's first component when its layout
//! puts that component on the MDT (`setstripe -E 64K -L mdt -E -1 -c 4`), stored in the
//! `dom` table beside the inode (nacre_mdstore::records::dom). A write changes the bytes,
//! the file's size and its times in one transaction with a saved reply, so it is replayed
//! after a restart like any change; a truncate cuts or zero-extends them in the
//! transaction that sets the size. The MDT holds one copy, as it holds the namespace. The
//! bytes count for their owner's block quotas (reserved before the request runs:
//! `crate::quota::reserve_dom`).
//!
//! Invariant: the bytes stored are as long as the file is inside the component
//! (`min(size, component end)`), except where a write past the component left a hole
//! below its end (the client then reads zeros up to the file's size, which its OSTs say).

use crate::mdt::{Mdt, Tx};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsReply, DOM_RPC_BYTES_MAX};

/// The end of `fid`'s component on the MDT, checked to be a regular file that has one.
fn dom_end_of(rec: &nacre_mdstore::records::InodeRecord) -> Result<u64, Status> {
    match rec.attr.kind {
        FileKind::Regular => {}
        FileKind::Directory => return Err(Status::IsDir),
        _ => return Err(Status::Inval),
    }
    match rec.layout.as_ref().map(|l| l.dom_end()) {
        Some(end) if end > 0 => Ok(end),
        // No component on the MDT: its bytes are on its OSTs (a migration may have moved
        // them there since the caller read the layout: it reads it again, as after an
        // OST's fence).
        _ => Err(Status::Stale),
    }
}

/// Checks a range against the component's end and the largest RPC.
fn check_range(offset: u64, len: u64, dom_end: u64) -> Result<(), Status> {
    let end = offset.checked_add(len).ok_or(Status::Inval)?;
    if len > u64::from(DOM_RPC_BYTES_MAX) || end > dom_end {
        return Err(Status::Inval);
    }
    Ok(())
}

/// `MdsOp::DomRead`: the bytes stored in `offset..offset + len` (short where they end).
pub fn read(mdt: &Mdt, fid: Fid, offset: u64, len: u32) -> Result<MdsReply, Status> {
    let rec = mdt.inode(fid)?;
    let dom_end = dom_end_of(&rec)?;
    check_range(offset, u64::from(len), dom_end)?;
    let stored = mdt.store().dom(fid)?;
    let from = (offset as usize).min(stored.len());
    let to = (offset as usize + len as usize).min(stored.len());
    Ok(MdsReply::DomData(stored[from..to].to_vec()))
}

/// `MdsOp::DomWrite`: `data` at `offset` (a hole before it zero-filled), the size raised to
/// the write's end, the modification and change times now, set-id bits cleared for a
/// writer other than root.
pub fn write(tx: &mut Tx<'_>, fid: Fid, offset: u64, data: &[u8]) -> Result<MdsReply, Status> {
    let mut rec = tx.inode(fid)?;
    let dom_end = dom_end_of(&rec)?;
    check_range(offset, data.len() as u64, dom_end)?;
    let mut stored = tx.store().dom(fid)?;
    let old_len = stored.len();
    let end = offset as usize + data.len();
    if stored.len() < end {
        stored.resize(end, 0);
    }
    stored[offset as usize..end].copy_from_slice(data);
    tx.put_dom(&rec.attr, old_len, &stored);
    tx.mdt.sizes.changed(fid);
    let a = &mut rec.attr;
    if !data.is_empty() {
        a.size = a.size.max(end as u64);
    }
    a.mtime = tx.now;
    a.ctime = tx.now;
    a.blocks = blocks_of(stored.len());
    // The kernel's `file_remove_privs`, made in the write's own transaction whoever sends
    // it: a writer other than root clears set-user-ID, and set-group-ID as Linux does.
    if !data.is_empty() && !tx.cred.is_root() && nacre_types::attr::has_setid(a.perm) {
        let in_group = tx.cred.in_group(a.gid);
        a.perm = nacre_types::attr::kill_privs(a.perm, in_group);
    }
    let attr = rec.attr.clone();
    tx.put_inode(&rec);
    Ok(MdsReply::Attr(attr))
}

/// `MdsOp::DomAppend`: `data` at the file's end, which the MDT knows (every byte of the
/// file is on it); `EFBIG` where the file has objects or the bytes would pass the
/// component's end.
pub fn append(tx: &mut Tx<'_>, fid: Fid, data: &[u8]) -> Result<MdsReply, Status> {
    let rec = tx.inode(fid)?;
    let dom_end = dom_end_of(&rec)?;
    if data.len() > DOM_RPC_BYTES_MAX as usize {
        return Err(Status::Inval);
    }
    let at = rec.attr.size;
    let all_here = rec.layout.as_ref().is_some_and(|l| l.object_count() == 0);
    if !all_here || at.saturating_add(data.len() as u64) > dom_end {
        return Err(Status::FBig);
    }
    write(tx, fid, at, data)
}

/// A truncate of a file with a component on the MDT to `size` (in the transaction that
/// sets it): its stored bytes cut to `size`, or zero-extended to it up to the component's
/// end. How many bytes are stored after it (`None`: the file has none on the MDT).
pub fn truncate(
    tx: &mut Tx<'_>,
    rec: &mut nacre_mdstore::records::InodeRecord,
    size: u64,
) -> Result<Option<usize>, Status> {
    let dom_end = match rec.layout.as_ref().map(|l| l.dom_end()) {
        Some(end) if end > 0 => end,
        _ => return Ok(None),
    };
    let fid = rec.attr.fid;
    let mut stored = tx.store().dom(fid)?;
    let want = size.min(dom_end) as usize;
    if stored.len() != want {
        let old_len = stored.len();
        stored.resize(want, 0);
        tx.put_dom(&rec.attr, old_len, &stored);
    }
    rec.attr.blocks = blocks_of(stored.len());
    Ok(Some(stored.len()))
}

/// The 512-byte blocks a file's bytes on the MDT take, as its quotas count them (its
/// blocks on OSTs are counted by glimpses).
fn blocks_of(stored: usize) -> u64 {
    nacre_mdstore::records::dom_charged_bytes(stored) / 512
}
