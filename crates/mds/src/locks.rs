//! The MDT's use of its lock namespace (`nacre_ldlm`): locks granted with the replies that
//! asked for them (intents), the bits every change revokes before it runs, and the
//! callback polls of clients.
//!
//! What each change revokes (exclusively, on the server; the requester's own locks stay,
//! as its kernel applies its own changes):
//!
//! | change | revoked |
//! |---|---|
//! | create, mknod, mkdir, symlink (any form), a batch of creates | parent UPDATE |
//! | link | parent UPDATE, inode UPDATE |
//! | unlink, rmdir | parent UPDATE, the inode's LOOKUP, UPDATE and OPEN |
//! | rename | both parents' UPDATE, both inodes' LOOKUP and UPDATE, OPEN of the one renamed over |
//! | setattr, xattr changes, an open for writing | inode UPDATE |
//! | a write of data on the MDT, a truncate | inode UPDATE and DOM |
//! | setstripe | inode UPDATE and LAYOUT |
//! | migration to another MDT | parent UPDATE, the inode's LOOKUP, UPDATE and OPEN |
//! | a peer MDT's update | what it changes here (a directory's new parent: its LOOKUP and UPDATE; a link dropped or renamed over: the inode's LOOKUP, UPDATE and OPEN) |
//!
//! `OPEN` (a cached open, msg.rs) is revoked from the requester too: its client closes
//! the cached open before the change runs, so a file unlinked is not kept as an orphan.
//!
//! A regular file's UPDATE lock also covers its size, so it is granted only while no
//! other client holds the file open for writing (an open for writing revokes the others'):
//! the holder's kernel sees its own writes, and no one else's can happen.

use crate::mdt::Mdt;
use nacre_ldlm::msg::{
    LockRef, BITS_ALL, DELEGATION, DOM, ENTRY_BITS, LAYOUT, LOOKUP, OPEN, REFS_PER_MESSAGE_MAX,
    UPDATE,
};
use nacre_net::{Incoming, Outgoing};
use nacre_types::cred::{MAY_READ, MAY_WRITE};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::encode_body;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::sync::Arc;

/// The inodes and bits `call` changes, with names resolved as they are now.
pub(crate) fn targets(mdt: &Mdt, op: &MdsOp) -> Vec<(Fid, u8)> {
    let child = |parent: Fid, name: &[u8]| -> Option<Fid> {
        mdt.lookup(parent, name).ok().flatten().map(|d| d.fid)
    };
    let mut t = Vec::new();
    // Nothing looked up for a batch past its bound (refused by perm::check).
    if !crate::ops::batch::within_bounds(op) {
        return t;
    }
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
        | MdsOp::Symlink { parent, .. }
        | MdsOp::CreateBatch { parent, .. } => t.push((*parent, UPDATE)),
        // Taken from every other client before it is granted (its own revocation).
        MdsOp::DelegateDir { fid } => t.push((*fid, UPDATE | DELEGATION)),
        MdsOp::Link { fid, parent, .. } => {
            t.push((*parent, UPDATE));
            t.push((*fid, UPDATE));
        }
        MdsOp::Unlink { parent, name } | MdsOp::Rmdir { parent, name } => {
            t.push((*parent, UPDATE));
            if let Some(c) = child(*parent, name) {
                t.push((c, LOOKUP | UPDATE | OPEN));
            }
        }
        MdsOp::UnlinkBatch { parent, items } => {
            t.push((*parent, UPDATE));
            for i in items {
                if let Some(c) = child(*parent, &i.name) {
                    t.push((c, LOOKUP | UPDATE | OPEN));
                }
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
            // The inode renamed over loses a link: its cached opens go too.
            let src = child(*src_parent, src_name);
            let dst = child(*dst_parent, dst_name);
            if let Some(c) = src {
                t.push((c, LOOKUP | UPDATE));
            }
            if let Some(c) = dst.filter(|d| Some(*d) != src) {
                t.push((c, LOOKUP | UPDATE | OPEN));
            }
        }
        // A write of data on the MDT changes its bytes, and the size and times the UPDATE
        // lock covers; so does a truncate.
        MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => t.push((*fid, UPDATE | DOM)),
        MdsOp::SetAttr { fid, attr } if attr.size.is_some() => t.push((*fid, UPDATE | DOM)),
        MdsOp::SetAttr { fid, .. }
        | MdsOp::SetXattr { fid, .. }
        | MdsOp::RemoveXattr { fid, .. } => t.push((*fid, UPDATE)),
        // A directory's default for new subdirectories: a delegation's holder answers
        // mkdirs by the one it was granted with (`Delegated::mkdirs`), and no delegation is
        // granted while it changes (the revocation's hold).
        MdsOp::SetDirDefault { fid, .. } => t.push((*fid, DELEGATION)),
        MdsOp::Open { fid, access } if access & MAY_WRITE != 0 => t.push((*fid, UPDATE)),
        // A swap also takes a file's bytes off the MDT: pages kept under DOM go.
        MdsOp::SetLayout { fid, .. } | MdsOp::RelayoutSwap { fid } => {
            t.push((*fid, UPDATE | LAYOUT | DOM));
            // The root's default is the file system's, which new files of directories
            // without their own get: each delegation said how many bytes their creates
            // may carry (a directory's own default calls its delegation back by UPDATE).
            let any = mdt.delegated.load(std::sync::atomic::Ordering::Acquire);
            if *fid == Fid::ROOT && any {
                let held = mdt.ldlm.resources_where(|bits| bits & DELEGATION != 0);
                t.extend(held.into_iter().map(|d| (d, DELEGATION)));
            }
        }
        // Components instantiated: the other clients read the grown layout before they
        // use it (their kept writes go out with the callback, to objects that stay). A
        // file already instantiated that far calls nothing back.
        MdsOp::LayoutIntent { fid, end } => {
            let grows = mdt
                .inode(*fid)
                .ok()
                .and_then(|r| r.layout)
                .is_some_and(|l| l.instantiated_end() < *end);
            if grows {
                t.push((*fid, LAYOUT));
            }
        }
        // A migration's fence window and abort: every mount writes what it keeps for the
        // old objects and lets go of the layout before the change runs.
        MdsOp::RelayoutFence { fid } | MdsOp::RelayoutAbort { fid } => t.push((*fid, LAYOUT)),
        MdsOp::Migrate { fid, parent, .. } => {
            t.push((*parent, UPDATE));
            t.push((*fid, LOOKUP | UPDATE | OPEN));
        }
        MdsOp::Update(u) => match u {
            RemoteUpdate::CreateDir { .. } => {}
            RemoteUpdate::DestroyDir { fid } => t.push((*fid, BITS_ALL)),
            RemoteUpdate::AddLink { fid, .. } => t.push((*fid, UPDATE)),
            // A directory moved to another parent: its entry (the name leading to it, and
            // its `..`) is bound anew, here where it lives, whichever MDTs hold the parents.
            RemoteUpdate::SetParent { fid, .. } => t.push((*fid, LOOKUP | UPDATE)),
            RemoteUpdate::DropLink { fid, .. } => t.push((*fid, LOOKUP | UPDATE | OPEN)),
            RemoteUpdate::InsertEntry {
                parent, replaces, ..
            } => {
                t.push((*parent, UPDATE));
                if let Some(r) = replaces {
                    t.push((*r, LOOKUP | UPDATE | OPEN));
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
    // A file reached by its FID (no name looked up in its directory, which would call a
    // delegation of that directory back): its directories' delegations go first, so a
    // holder that keeps what it made there (its attributes, its bytes) forgets it.
    if let Some(fid) = changed_or_opened_file(op) {
        if mdt.delegated.load(std::sync::atomic::Ordering::Acquire) {
            let parents = mdt.store().links_of(fid, DELEGATED_PARENTS_MAX);
            t.extend(parents.into_iter().flatten().map(|(p, _)| (p, DELEGATION)));
        }
    }
    // A directory made by a batch (a FID a client gave it: the holder of its parent's
    // delegation answered its mkdir, and its kernel keeps its attributes while that
    // delegation lasts): a change in it reached by its FID (no name looked up in the
    // parent) calls the parent's delegation back first, so the holder forgets them.
    if mdt.delegated.load(std::sync::atomic::Ordering::Acquire) {
        let granted =
            |d: &&Fid| nacre_mdstore::store::fid_grants::is_granted_range(mdt.label.index, **d);
        for dir in changed_dirs(op).iter().flatten().filter(granted) {
            let parents = mdt.store().links_of(*dir, DELEGATED_PARENTS_MAX);
            t.extend(parents.into_iter().flatten().map(|(p, _)| (p, DELEGATION)));
        }
    }
    // Only inodes of this MDT have locks here.
    t.retain(|(fid, _)| fid.mdt_index() == mdt.label.index || *fid == Fid::ROOT);
    t
}

/// The directories whose entries `op` changes (their times and link counts with them).
fn changed_dirs(op: &MdsOp) -> [Option<Fid>; 2] {
    match op {
        MdsOp::Create { parent, .. }
        | MdsOp::Mkdir { parent, .. }
        | MdsOp::MkdirOn { parent, .. }
        | MdsOp::MkdirStriped { parent, .. }
        | MdsOp::Symlink { parent, .. }
        | MdsOp::Link { parent, .. }
        | MdsOp::Unlink { parent, .. }
        | MdsOp::Rmdir { parent, .. }
        | MdsOp::CreateBatch { parent, .. }
        | MdsOp::UnlinkBatch { parent, .. } => [Some(*parent), None],
        MdsOp::Rename {
            src_parent,
            dst_parent,
            ..
        } => [Some(*src_parent), Some(*dst_parent)],
        // The other MDT's half of a cross-MDT change (a rename's new name, a migration's
        // entries).
        MdsOp::Update(RemoteUpdate::InsertEntry { parent, .. }) => [Some(*parent), None],
        MdsOp::Update(RemoteUpdate::Adopt { dir, .. }) => [Some(*dir), None],
        _ => [None, None],
    }
}

/// Names of a file whose directories' delegations a request on it by FID calls back.
const DELEGATED_PARENTS_MAX: usize = 8;

/// The file an operation opens for writing, changes or links by its FID alone. Only
/// requests of [`CHANGE_OPCODES`]: they are parked while the callback is out, never
/// waited for on a service thread (a holder gives its delegation back with requests of
/// its own). A read-only open changes nothing the holder keeps; a layout's growth or a
/// migration keeps the bytes.
fn changed_or_opened_file(op: &MdsOp) -> Option<Fid> {
    match op {
        MdsOp::Open { fid, access } if access & MAY_WRITE != 0 => Some(*fid),
        MdsOp::DomWrite { fid, .. }
        | MdsOp::DomAppend { fid, .. }
        | MdsOp::SetAttr { fid, .. }
        | MdsOp::SetXattr { fid, .. }
        | MdsOp::RemoveXattr { fid, .. }
        | MdsOp::SetLayout { fid, .. }
        | MdsOp::Link { fid, .. } => Some(*fid),
        _ => None,
    }
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
    // A request the MDT will refuse calls nothing back (nor can a caller flush other
    // clients' caches with changes it may not make); checked only when there is something
    // to call back, as the request's own checks follow.
    if mdt.ldlm.conflicts(Some(&call.client), &t) && crate::perm::refuses(mdt, call) {
        return None;
    }
    let revoke = |t: &[(Fid, u8)]| {
        let hold = mdt.ldlm.revoke(Some(&call.client), t);
        for c in &hold.late {
            crate::eviction::evict_now(mdt, c, "did not cancel a called-back lock in time");
        }
        hold
    };
    let mut hold = revoke(&t);
    // A name may have been rebound while the callbacks were out: revoke the new inode too.
    while hold.waited {
        let now = targets(mdt, &call.op);
        let extra: Vec<(Fid, u8)> = now.into_iter().filter(|x| !t.contains(x)).collect();
        if extra.is_empty() {
            break;
        }
        drop(hold);
        t.extend(extra);
        hold = revoke(&t);
    }
    Some(hold)
}

/// The entry a reply names, if it is one.
fn entry_of(out: &Outgoing) -> Option<(Fid, FileKind)> {
    // A saved reply's body of another protocol never gets here: dne::outgoing answers it
    // `EPROTO`.
    if out.status != Status::Ok {
        return None;
    }
    match nacre_wire::decode_body::<MdsReply>(&out.body).ok()? {
        MdsReply::Entry { attr, .. } => Some((attr.fid, attr.kind)),
        _ => None,
    }
}

/// Grants `bits` of `fid` (the inode `call` names), then runs `call`: the lock goes with
/// the reply if the reply is that inode's entry (an open's: a regular file's).
fn granted_with(
    mdt: &Mdt,
    call: &MdsCall,
    fid: Fid,
    bits: u8,
    run: impl FnOnce() -> Outgoing,
) -> (Outgoing, Option<LockRef>) {
    let Some((lock, new)) = mdt.grant_lock(&call.client, fid, bits) else {
        return (run(), None);
    };
    let out = run();
    let open = matches!(call.op, MdsOp::Open { .. });
    match entry_of(&out) {
        Some((f, kind)) if f == fid && (!open || kind == FileKind::Regular) => (out, Some(lock)),
        _ => {
            if new {
                mdt.ldlm.release(&call.client, lock.handle);
            }
            (out, None)
        }
    }
}

/// The exact (size, blocks) an entry reply gives, if it gives them.
fn exact_of(out: &Outgoing) -> Option<(u64, u64)> {
    if out.status != Status::Ok {
        return None;
    }
    match nacre_wire::decode_body::<MdsReply>(&out.body) {
        Ok(MdsReply::Entry {
            attr,
            size_exact: true,
            ..
        }) => Some((attr.size, attr.blocks)),
        _ => None,
    }
}

/// True if `fid` is a regular file with a component on the MDT.
fn has_dom(mdt: &Mdt, fid: Fid) -> bool {
    mdt.inode(fid)
        .ok()
        .and_then(|r| r.layout)
        .is_some_and(|l| l.dom_end() > 0)
}

/// An open's entry (`out`, answered under a DOM lock taken before it ran) with the bytes
/// the MDT stores for the file, where they fit in the reply.
fn with_dom_data(mdt: &Mdt, fid: Fid, out: Outgoing) -> Outgoing {
    let Ok(MdsReply::Entry {
        attr,
        layout,
        size_exact,
    }) = nacre_wire::decode_body::<MdsReply>(&out.body)
    else {
        return out;
    };
    match mdt.store().dom(fid) {
        Ok(data) if data.len() <= nacre_wire::mds::DOM_OPEN_BYTES_MAX => {
            Outgoing::ok(encode_body(&MdsReply::OpenData {
                attr,
                layout,
                size_exact,
                data,
            }))
        }
        _ => out,
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
    // The bytes of a file on the MDT, under a DOM lock where one can be granted (taken
    // before the read, so a write after the grant revokes it and none before is missed).
    if let MdsOp::DomRead { fid, .. } = &call.op {
        let bits = call.lock_bits & DOM;
        if bits == 0 {
            return (run(), None);
        }
        let Some((lock, new)) = mdt.grant_lock(&call.client, *fid, bits) else {
            return (run(), None);
        };
        let out = run();
        if out.status != Status::Ok {
            if new {
                mdt.ldlm.release(&call.client, lock.handle);
            }
            return (out, None);
        }
        return (out, Some(lock));
    }
    // A delegation: granted first (no other client holds the directory's UPDATE any more:
    // the request's revocation took them), then the directory checked under it.
    if let MdsOp::DelegateDir { fid } = &call.op {
        let wanted = call.lock_bits & (UPDATE | DELEGATION);
        if wanted != UPDATE | DELEGATION {
            return (Outgoing::error(Status::Inval), None);
        }
        // A caller that may not have it is answered why, granted nothing.
        if crate::perm::refuses(mdt, call) {
            return (run(), None);
        }
        let Some((lock, new)) = mdt.ldlm.enqueue(&call.client, *fid, wanted) else {
            return (Outgoing::error(Status::Busy), None);
        };
        if lock.bits & DELEGATION == 0 {
            if new {
                mdt.ldlm.release(&call.client, lock.handle);
            }
            return (Outgoing::error(Status::Busy), None);
        }
        mdt.delegated
            .store(true, std::sync::atomic::Ordering::Release);
        let out = run();
        if out.status != Status::Ok {
            if new {
                mdt.ldlm.release(&call.client, lock.handle);
            }
            return (out, None);
        }
        return (out, Some(lock));
    }
    // A cached open comes only with an open for reading of a regular file; the bytes of
    // its component on the MDT, under a DOM lock, with any open of one (its holder's own
    // writes call back nothing of it: its client forgets them as it writes, crate::dom on
    // the client).
    // The file's LAYOUT with them where asked (its first I/O then reads the layout again
    // from nowhere).
    if let MdsOp::Open { fid, access } = &call.op {
        let mut bits = call.lock_bits & (OPEN | DOM | LAYOUT);
        if bits & DOM != 0 && !has_dom(mdt, *fid) {
            bits &= !DOM;
        }
        // The bytes only to an open that may read them (not one for writing alone).
        if access & MAY_READ == 0 {
            bits &= !DOM;
        }
        if access & MAY_WRITE != 0 {
            bits &= !OPEN;
        }
        if bits == 0 {
            return (run(), None);
        }
        let (out, lock) = granted_with(mdt, call, *fid, bits, run);
        return match lock {
            Some(l) if l.bits & DOM != 0 => (with_dom_data(mdt, *fid, out), Some(l)),
            other => (out, other),
        };
    }
    let bits = call.lock_bits & ENTRY_BITS;
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
        return granted_with(mdt, call, *fid, bits, run);
    }
    // A lookup may find nothing: the directory's UPDATE lock, taken before the read,
    // then covers the absence (the kernel caches a negative entry under it). It is kept
    // only for that answer.
    let dir_lock = match &call.op {
        MdsOp::Lookup { parent, .. }
            if bits & UPDATE != 0 && parent.mdt_index() == mdt.label.index =>
        {
            mdt.grant_lock(&call.client, *parent, UPDATE)
        }
        _ => None,
    };
    let out = run();
    if let Some((lock, new)) = dir_lock {
        if out.status == Status::NoEnt && lock.bits & UPDATE != 0 {
            return (Outgoing::ok(encode_body(&MdsReply::NoEntry)), Some(lock));
        }
        if new {
            mdt.ldlm.release(&call.client, lock.handle);
        }
    }
    let Some((fid, _)) = entry_of(&out) else {
        return (out, None);
    };
    let Some((lock, new)) = mdt.grant_lock(&call.client, fid, bits) else {
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
    let mut fresh = crate::ops::getattr::run(mdt, fid).map(|r| crate::ops::exact_entry(mdt, r));
    // A create's own open made the caller a writer, so the size reads as unknown now; it is
    // what the create said while no one else writes (none of the caller's writes can
    // have come: it has no handle before this reply).
    if let (
        MdsOp::Create { .. },
        Some(size),
        Ok(MdsReply::Entry {
            attr, size_exact, ..
        }),
    ) = (&call.op, exact_of(&out), fresh.as_mut())
    {
        if !*size_exact && !mdt.sizes.written_by_others(fid, &call.client) {
            (attr.size, attr.blocks) = size;
            *size_exact = true;
        }
    }
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

/// Opcodes of the requests that may change what locks cover (the others are never parked).
const CHANGE_OPCODES: [u16; 22] = [
    0x0203, 0x0204, 0x0205, 0x0206, 0x0207, 0x0208, 0x0209, 0x020a, 0x020d, 0x0210, 0x0212, 0x0213,
    0x0219, 0x021b, 0x021c, 0x021e, 0x0220, 0x023f, 0x0240, 0x0242, 0x0243, 0x0244,
];

/// Parks a change that would have to wait for other clients to cancel locks: their
/// callbacks go out now and the request is queued on its service again once they are
/// cancelled (or their clients evicted), so no service thread waits meanwhile. Returns
/// the request if it can run now.
pub(crate) fn park_change(mdt: &Arc<Mdt>, req: Incoming) -> Option<Incoming> {
    if req.resubmits() > 0 {
        return Some(req);
    }
    if !CHANGE_OPCODES.contains(&req.header.opcode) {
        return park_read(mdt, req);
    }
    let Ok(call) = nacre_wire::decode_body::<MdsCall>(&req.body) else {
        return Some(req);
    };
    // Nothing anyone else holds: nothing to wait for (no name resolved for nothing).
    if !mdt.ldlm.may_call_back(&call.client) || mdt.recovery.active() || !call.cred.is_valid() {
        return Some(req);
    }
    let t = targets(mdt, &call.op);
    if t.is_empty()
        || !mdt.ldlm.conflicts(Some(&call.client), &t)
        || crate::perm::refuses(mdt, &call)
    {
        return Some(req);
    }
    park_until_revoked(mdt, &call.client, &t, req);
    None
}

/// Parks a request on a directory delegated to another client (a lookup in it, a listing,
/// its attributes: nacre_ldlm::msg::DELEGATION) until the holder has sent what it answered
/// and cancelled the delegation. Nothing is decoded on an MDT that never delegated.
fn park_read(mdt: &Arc<Mdt>, req: Incoming) -> Option<Incoming> {
    if !mdt.delegated.load(std::sync::atomic::Ordering::Acquire) {
        return Some(req);
    }
    let Ok(call) = nacre_wire::decode_body::<MdsCall>(&req.body) else {
        return Some(req);
    };
    let Some(dir) = call.op.key_fid() else {
        return Some(req);
    };
    let t = [(dir, DELEGATION)];
    if mdt.recovery.active()
        || !mdt.ldlm.conflicts(Some(&call.client), &t)
        || crate::perm::refuses(mdt, &call)
    {
        return Some(req);
    }
    park_until_revoked(mdt, &call.client, &t, req);
    None
}

/// Calls back the other clients' locks on `t` and queues `req` (from `client`) on its
/// service again once they are cancelled, evicting those that did not cancel in time.
fn park_until_revoked(mdt: &Arc<Mdt>, client: &[u8; 16], t: &[(Fid, u8)], req: Incoming) {
    let weak = Arc::downgrade(mdt);
    mdt.ldlm.revoke_later(
        Some(client),
        t,
        Box::new(move |late| {
            if let Some(m) = weak.upgrade() {
                for c in &late {
                    crate::eviction::evict_now(&m, c, "did not cancel a called-back lock in time");
                }
            }
            req.resubmit();
        }),
    );
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
        Box::new(move |due| {
            // No glimpses on an MDT: only locks called back.
            let refs = due.revoke;
            let Some(m) = m.upgrade() else {
                req.respond(Outgoing::error(Status::NoDev));
                return;
            };
            let last_committed = m.store().last_committed_transno();
            let mut body = nacre_wire::mds::MdsAnswer::encode_head(
                0,
                last_committed,
                m.epoch,
                &[],
                None,
                &[],
                None,
            );
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
    // A delegation is never taken back after a restart: it is granted only by
    // `DelegateDir`, after the others' locks were called back (a client claiming one here
    // would shut the others out of the directory's UPDATE for nothing).
    let (delegations, others): (Vec<LockRef>, Vec<LockRef>) =
        locks.iter().partition(|l| l.bits & DELEGATION != 0);
    let mut refused = mdt.ldlm.restore(client, &others);
    refused.extend(delegations.iter().map(|l| l.handle));
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

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_wire::mds::MdsOp;

    /// Every request `targets` can find something in is offered for parking.
    #[test]
    fn change_opcodes_are_the_requests_that_revoke() {
        let f = Fid::ROOT;
        let n = || b"n".to_vec();
        let ops = [
            MdsOp::Create {
                parent: f,
                name: n(),
                kind: FileKind::Regular,
                perm: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                exclusive: false,
                open: false,
                access: 0,
            },
            MdsOp::Mkdir {
                parent: f,
                name: n(),
                perm: 0,
                uid: 0,
                gid: 0,
            },
            MdsOp::Symlink {
                parent: f,
                name: n(),
                target: n(),
                uid: 0,
                gid: 0,
            },
            MdsOp::Link {
                fid: f,
                parent: f,
                name: n(),
            },
            MdsOp::Unlink {
                parent: f,
                name: n(),
            },
            MdsOp::Rmdir {
                parent: f,
                name: n(),
            },
            MdsOp::Rename {
                src_parent: f,
                src_name: n(),
                dst_parent: f,
                dst_name: n(),
                noreplace: false,
            },
            MdsOp::SetAttr {
                fid: f,
                attr: Default::default(),
            },
            MdsOp::Open { fid: f, access: 0 },
            MdsOp::SetXattr {
                fid: f,
                name: n(),
                value: n(),
                flags: 0,
            },
            MdsOp::RemoveXattr { fid: f, name: n() },
            MdsOp::SetLayout {
                fid: f,
                spec: Default::default(),
            },
            MdsOp::MkdirOn {
                parent: f,
                name: n(),
                perm: 0,
                uid: 0,
                gid: 0,
                mdt: 0,
            },
            MdsOp::Update(RemoteUpdate::DropLink {
                fid: f,
                parent: f,
                name: n(),
            }),
            MdsOp::MkdirStriped {
                parent: f,
                name: n(),
                perm: 0,
                uid: 0,
                gid: 0,
                count: 1,
                start: 0,
                hash: nacre_types::dirstripe::DirHash::Fnv1a64,
            },
            MdsOp::Migrate {
                fid: f,
                parent: f,
                name: n(),
                target: 0,
            },
            MdsOp::SetDirDefault {
                fid: f,
                default: None,
            },
            MdsOp::DomWrite {
                fid: f,
                offset: 0,
                data: n(),
            },
            MdsOp::DomAppend { fid: f, data: n() },
            MdsOp::CreateBatch {
                parent: f,
                items: Vec::new(),
            },
            MdsOp::DelegateDir { fid: f },
            MdsOp::UnlinkBatch {
                parent: f,
                items: Vec::new(),
            },
        ];
        let mut codes: Vec<u16> = ops.iter().map(MdsOp::opcode).collect();
        codes.sort_unstable();
        assert_eq!(codes, CHANGE_OPCODES);
    }

    /// A request on a file by FID that calls back its directories' delegations is one the
    /// MDT parks (a service thread waiting for the holder, which gives the delegation back
    /// with requests of its own, could leave none to serve them).
    #[test]
    fn requests_calling_delegations_back_by_fid_are_parked() {
        let f = Fid::ROOT;
        let ops = [
            MdsOp::Open { fid: f, access: 0 },
            MdsOp::Open {
                fid: f,
                access: MAY_WRITE,
            },
            MdsOp::LayoutIntent { fid: f, end: 1 },
            MdsOp::RelayoutFence { fid: f },
            MdsOp::RelayoutSwap { fid: f },
            MdsOp::DomRead {
                fid: f,
                offset: 0,
                len: 1,
            },
            MdsOp::SetAttr {
                fid: f,
                attr: Default::default(),
            },
            MdsOp::Link {
                fid: f,
                parent: f,
                name: b"n".to_vec(),
            },
            MdsOp::DomWrite {
                fid: f,
                offset: 0,
                data: Vec::new(),
            },
        ];
        let calling: Vec<&MdsOp> = ops
            .iter()
            .filter(|op| changed_or_opened_file(op).is_some())
            .collect();
        assert_eq!(calling.len(), 4, "{calling:?}");
        for op in calling {
            assert!(
                CHANGE_OPCODES.contains(&op.opcode()),
                "{op:?} is not parked"
            );
        }
    }
}
