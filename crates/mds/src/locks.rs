//! The MDT's use of its lock namespace (`nacre_ldlm`): locks granted with the replies that
//! asked for them (intents), the bits every change revokes before it runs, and the
//! callback polls of clients.
//!
//! What each change revokes (exclusively, on the server; the requester's own locks stay,
//! as its kernel applies its own changes):
//!
//! | change | revoked |
//! |---|---|
//! | create, mknod, mkdir, symlink (any form) | parent UPDATE |
//! | link | parent UPDATE, inode UPDATE |
//! | unlink, rmdir | parent UPDATE, the inode's LOOKUP and UPDATE |
//! | rename | both parents' UPDATE, both inodes' LOOKUP and UPDATE |
//! | setattr, xattr changes, an open for writing | inode UPDATE |
//! | setstripe | inode UPDATE and LAYOUT |
//! | directory migration | parent UPDATE, the directory's LOOKUP and UPDATE |
//! | a peer MDT's update | what it changes here |
//!
//! A regular file's UPDATE lock also covers its size, so it is granted only while no
//! other client holds the file open for writing (an open for writing revokes the others'):
//! the holder's kernel sees its own writes, and no one else's can happen.

use crate::mdt::Mdt;
use nacre_ldlm::msg::{LockRef, BITS_ALL, LAYOUT, LOOKUP, REFS_PER_MESSAGE_MAX, UPDATE};
use nacre_net::{Incoming, Outgoing};
use nacre_types::cred::MAY_WRITE;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::encode_body;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::sync::Arc;

/// The inodes and bits `call` changes, with names resolved as they are now.
fn targets(mdt: &Mdt, op: &MdsOp) -> Vec<(Fid, u8)> {
    let child = |parent: Fid, name: &[u8]| -> Option<Fid> {
        mdt.lookup(parent, name).ok().flatten().map(|d| d.fid)
    };
    let mut t = Vec::new();
    match op {
        MdsOp::Create {
            parent,
            name,
            access,
            ..
        } => {
            t.push((*parent, UPDATE));
            if access & MAY_WRITE != 0 {
                if let Some(c) = child(*parent, name) {
                    t.push((c, UPDATE));
                }
            }
        }
        MdsOp::Mkdir { parent, .. }
        | MdsOp::MkdirOn { parent, .. }
        | MdsOp::MkdirStriped { parent, .. }
        | MdsOp::Symlink { parent, .. } => t.push((*parent, UPDATE)),
        MdsOp::Link { fid, parent, .. } => {
            t.push((*parent, UPDATE));
            t.push((*fid, UPDATE));
        }
        MdsOp::Unlink { parent, name } | MdsOp::Rmdir { parent, name } => {
            t.push((*parent, UPDATE));
            if let Some(c) = child(*parent, name) {
                t.push((c, LOOKUP | UPDATE));
            }
        }
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ..
        } => {
            t.push((*src_parent, UPDATE));
            t.push((*dst_parent, UPDATE));
            for c in [child(*src_parent, src_name), child(*dst_parent, dst_name)]
                .into_iter()
                .flatten()
            {
                t.push((c, LOOKUP | UPDATE));
            }
        }
        MdsOp::SetAttr { fid, .. }
        | MdsOp::SetXattr { fid, .. }
        | MdsOp::RemoveXattr { fid, .. } => t.push((*fid, UPDATE)),
        MdsOp::Open { fid, access } if access & MAY_WRITE != 0 => t.push((*fid, UPDATE)),
        MdsOp::SetLayout { fid, .. } => t.push((*fid, UPDATE | LAYOUT)),
        MdsOp::Migrate { fid, parent, .. } => {
            t.push((*parent, UPDATE));
            t.push((*fid, LOOKUP | UPDATE));
        }
        MdsOp::Update(u) => match u {
            RemoteUpdate::CreateDir { .. } => {}
            RemoteUpdate::DestroyDir { fid } => t.push((*fid, BITS_ALL)),
            RemoteUpdate::AddLink { fid, .. } | RemoteUpdate::SetParent { fid, .. } => {
                t.push((*fid, UPDATE))
            }
            RemoteUpdate::DropLink { fid, .. } => t.push((*fid, LOOKUP | UPDATE)),
            RemoteUpdate::InsertEntry {
                parent, replaces, ..
            } => {
                t.push((*parent, UPDATE));
                if let Some(r) = replaces {
                    t.push((*r, LOOKUP | UPDATE));
                }
            }
            RemoteUpdate::Freeze { fid, parent, .. } => {
                t.push((*parent, UPDATE));
                t.push((*fid, LOOKUP | UPDATE));
            }
            RemoteUpdate::Adopt { dir, .. } => t.push((*dir, UPDATE)),
            RemoteUpdate::Repoint { parent, from, .. } => {
                t.push((*parent, UPDATE));
                t.push((*from, LOOKUP | UPDATE));
            }
        },
        _ => {}
    }
    // Only inodes of this MDT have locks here.
    t.retain(|(fid, _)| fid.mdt_index() == mdt.label.index || *fid == Fid::ROOT);
    t
}

/// Revokes, before `call` runs, the other clients' locks on what it changes; evicts the
/// clients that did not cancel in time. Holds new grants of those bits off until the
/// returned hold is dropped (after the change).
pub(crate) fn revoke_for<'a>(
    mdt: &'a Mdt,
    call: &MdsCall,
) -> Option<nacre_ldlm::server::Revocation<'a>> {
    let mut t = targets(mdt, &call.op);
    if t.is_empty() {
        return None;
    }
    let mut hold = mdt.ldlm.revoke(Some(&call.client), &t);
    // A name may have been rebound while the callbacks were out: revoke the new inode too.
    loop {
        let now = targets(mdt, &call.op);
        let extra: Vec<(Fid, u8)> = now.into_iter().filter(|x| !t.contains(x)).collect();
        if extra.is_empty() {
            break;
        }
        drop(hold);
        t.extend(extra);
        hold = mdt.ldlm.revoke(Some(&call.client), &t);
    }
    for c in &hold.late {
        crate::export::evict_now(mdt, c, "did not cancel a called-back lock in time");
    }
    Some(hold)
}

/// Grants `client` `bits` of `fid` if it can: a regular file's UPDATE only while no other
/// client writes it. Checked after the grant: an open for writing registers its writer
/// before its revocation ends, so either the check sees it or the revocation calls the
/// new lock back.
fn grant(mdt: &Mdt, client: &[u8; 16], fid: Fid, bits: u8) -> Option<(LockRef, bool)> {
    let (lock, new) = mdt.ldlm.try_grant(client, fid, bits)?;
    if lock.bits & UPDATE != 0 && mdt.sizes.written_by_others(fid, client) {
        if new {
            mdt.ldlm.release(client, lock.handle);
        }
        let rest = lock.bits & !UPDATE;
        if rest == 0 {
            return None;
        }
        return mdt.ldlm.try_grant(client, fid, rest);
    }
    Some((lock, new))
}

/// The entry a reply names, if it is one.
fn entry_of(out: &Outgoing) -> Option<(Fid, FileKind)> {
    if out.status != Status::Ok {
        return None;
    }
    match nacre_wire::decode_body::<MdsReply>(&out.body).ok()? {
        MdsReply::Entry { attr, .. } => Some((attr.fid, attr.kind)),
        _ => None,
    }
}

/// Runs `call` (through `run`) and, if it asked for a lock on the entry its reply names
/// and one can be granted, grants it: the lock is taken first, then the entry is read
/// again under it (and its name checked to still lead to it), so a change that starts
/// after the grant revokes it and none before it is missed.
pub(crate) fn with_intent(
    mdt: &Mdt,
    call: &MdsCall,
    run: impl FnOnce() -> Outgoing,
) -> (Outgoing, Option<LockRef>) {
    let bits = call.lock_bits & BITS_ALL;
    let named = match &call.op {
        MdsOp::Lookup { parent, name }
        | MdsOp::Create { parent, name, .. }
        | MdsOp::Mkdir { parent, name, .. }
        | MdsOp::MkdirOn { parent, name, .. }
        | MdsOp::Symlink { parent, name, .. }
        | MdsOp::Link { parent, name, .. } => Some((*parent, name.as_slice())),
        MdsOp::GetAttr { .. } => None,
        _ => return (run(), None),
    };
    if bits == 0 {
        return (run(), None);
    }
    if let MdsOp::GetAttr { fid } = &call.op {
        let Some((lock, new)) = grant(mdt, &call.client, *fid, bits) else {
            return (run(), None);
        };
        let out = run();
        return match entry_of(&out) {
            Some((f, _)) if f == *fid => (out, Some(lock)),
            _ => {
                if new {
                    mdt.ldlm.release(&call.client, lock.handle);
                }
                (out, None)
            }
        };
    }
    let out = run();
    let Some((fid, _)) = entry_of(&out) else {
        return (out, None);
    };
    let Some((lock, new)) = grant(mdt, &call.client, fid, bits) else {
        return (out, None);
    };
    // Read again under the lock: the name must still lead to the inode, and the reply
    // carries the attributes as they are now.
    let (parent, name) = named.expect("named operations only");
    let still = mdt
        .lookup(parent, name)
        .ok()
        .flatten()
        .is_some_and(|d| d.fid == fid);
    let fresh = crate::ops::getattr::run(mdt, fid).map(|r| crate::ops::exact_entry(mdt, r));
    match (still, fresh) {
        (true, Ok(reply)) => (Outgoing::ok(encode_body(&reply)), Some(lock)),
        _ => {
            if new {
                mdt.ldlm.release(&call.client, lock.handle);
            }
            (out, None)
        }
    }
}

/// Parks a client's callback poll in the namespace; the answer goes out when callbacks
/// are due or the wait is over.
pub(crate) fn poll(mdt: &Arc<Mdt>, client: [u8; 16], wait_ms: u64, req: Incoming) {
    // A poll refreshes the client's export but never creates one: a poll still on its way
    // when the client disconnected must not bring it back.
    if let Err(s) = mdt.exports.seen(&client) {
        req.respond(Outgoing::error(s));
        return;
    }
    // Weakly: a parked poll must not keep a released MDT (and its store) alive.
    let m = Arc::downgrade(mdt);
    mdt.ldlm.poll(
        &client,
        wait_ms,
        Box::new(move |refs| {
            let Some(m) = m.upgrade() else {
                req.respond(Outgoing::error(Status::NoDev));
                return;
            };
            let last_committed = m
                .last_committed_transno
                .load(std::sync::atomic::Ordering::Acquire);
            let head = (0u64, last_committed, m.epoch, Vec::<(Fid, u64)>::new());
            let mut body = encode_body(&(head.0, head.1, head.2, head.3, None::<LockRef>));
            body.extend_from_slice(&encode_body(&MdsReply::Blocking(refs)));
            req.respond(Outgoing::ok(body));
        }),
    );
}

/// A client replays the locks it held before the MDT restarted.
pub(crate) fn replay(mdt: &Mdt, client: &[u8; 16], locks: &[LockRef]) -> Result<MdsReply, Status> {
    if locks.len() > REFS_PER_MESSAGE_MAX {
        return Err(Status::TooBig);
    }
    let refused = mdt.ldlm.restore(client, locks);
    if refused.len() < locks.len() {
        tracing::info!(
            "{}: client {} replayed {} locks ({} refused)",
            mdt.label.name(),
            crate::export::client_name(client),
            locks.len(),
            refused.len()
        );
    }
    Ok(MdsReply::LocksRefused(refused))
}

/// A client gives locks back.
pub(crate) fn cancel(mdt: &Mdt, client: &[u8; 16], handles: &[u64]) -> Result<MdsReply, Status> {
    if handles.len() > REFS_PER_MESSAGE_MAX {
        return Err(Status::TooBig);
    }
    mdt.ldlm.cancel(client, handles);
    Ok(MdsReply::Done)
}
