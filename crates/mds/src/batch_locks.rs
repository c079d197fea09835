//! Locks granted with a batch's creates (`CreateBatch`, protocol 17): the holder of a
//! delegated directory sends the files and directories it answered, and gets, with the
//! MDT's reply, a lock on each one made (the request's `lock_bits`, `LOOKUP | UPDATE |
//! LAYOUT` at most), as a `Create` or `Mkdir` with intent gets one on what it makes. What
//! it knows of them (the kernel's entries and attributes, the sizes of the files it then
//! writes, the subtree under a directory) stays good once the directory's delegation goes,
//! until another client changes one (which calls its lock back), instead of going with the
//! delegation: the kernel drops a directory's whole subtree with its entry.
//!
//! Each lock is taken before the batch runs, while nothing of what it covers can be read
//! by anyone: a change by another client after the batch revokes it, and none can come
//! before (docs/locking.md, "Locks granted with a batch").

use crate::mdt::Mdt;
use nacre_ldlm::msg::{LockRef, ENTRY_BITS};
use nacre_net::Outgoing;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, CREATE_BATCH_ITEMS_MAX};
use std::collections::{HashMap, HashSet};

/// Runs `call` (through `run`) and, for a `CreateBatch` that asked for locks, returns with
/// its answer the locks granted on the files and directories it made (each item's own FID, made
/// now). A lock taken for an item that was not made (refused, or made before) is given
/// back if it was new. Nothing for a caller that may not send the batch at all, nor for a
/// resend of one that ran (`xid`'s saved reply answers it).
pub(crate) fn granted_with(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    run: impl FnOnce() -> Outgoing,
) -> (Outgoing, Vec<LockRef>) {
    let MdsOp::CreateBatch { items, .. } = &call.op else {
        return (run(), Vec::new());
    };
    let bits = call.lock_bits & ENTRY_BITS;
    if bits == 0 || items.len() > CREATE_BATCH_ITEMS_MAX || crate::perm::refuses(mdt, call) {
        return (run(), Vec::new());
    }
    // A resend of a batch that ran (its first answer lost) is answered from its saved
    // reply, whose attributes another client may have changed since: no lock taken now
    // would cover them.
    if mdt.store().saved_reply_or_none(&call.client, xid).is_some() {
        return (run(), Vec::new());
    }
    let mut taken: HashMap<Fid, (LockRef, bool)> = HashMap::new();
    for item in items {
        // Files and directories, the only kinds a batch makes.
        if !matches!(item.kind, FileKind::Regular | FileKind::Directory)
            || item.fid.mdt_index() != mdt.label.index
            || taken.contains_key(&item.fid)
        {
            continue;
        }
        if let Some(granted) = mdt.grant_lock(&call.client, item.fid, bits) {
            taken.insert(item.fid, granted);
        }
    }
    let out = run();
    let made = made_files(&out, items.len());
    let mut locks = Vec::with_capacity(made.len());
    for item in items {
        let Some((lock, new)) = taken.remove(&item.fid) else {
            continue;
        };
        if made.contains(&item.fid) {
            locks.push(lock);
        } else if new {
            mdt.ldlm.release(&call.client, lock.handle);
        }
    }
    (out, locks)
}

/// The files and directories a batch's answer says were made (one result per item, in order).
fn made_files(out: &Outgoing, items: usize) -> HashSet<Fid> {
    if out.status != Status::Ok {
        return HashSet::new();
    }
    match nacre_wire::decode_body::<MdsReply>(&out.body) {
        Ok(MdsReply::Created(results)) if results.len() == items => results
            .into_iter()
            .flatten()
            .filter(|(attr, _)| matches!(attr.kind, FileKind::Regular | FileKind::Directory))
            .map(|(attr, _)| attr.fid)
            .collect(),
        _ => HashSet::new(),
    }
}
