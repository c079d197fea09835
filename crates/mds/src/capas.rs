//! Capabilities given with answers (crates/wire/src/capa.rs, docs/security.md): an answer
//! that hands a client a regular file's layout carries a capability for each of its objects
//! only if that client holds the file open here — for reading, or for reading and writing
//! as it was opened — bound to the key identity that asked. A lookup, getattr or layout of
//! a file the client has not opened gives no authority over its data. Servers and admins
//! need none (the OSTs serve their roles), and without a file-system key there is nothing
//! to make them with.

use crate::mdt::Mdt;
use nacre_net::{Incoming, Outgoing};
use nacre_types::{Fid, Status};
use nacre_wire::capa::{holder_of, Capa, CAPAS_PER_ANSWER_MAX, CAPA_READ, CAPA_WRITE};
use nacre_wire::mds::{LayoutInfo, MdsAnswer, MdsCall, MdsOp, MdsReply};
use nacre_wire::roles::Role;

/// `out` (the answer to `call`) with the capabilities its layout calls for.
pub fn attach(mdt: &Mdt, req: &Incoming, call: &MdsCall, out: Outgoing) -> Outgoing {
    if out.status != Status::Ok || matches!(req.caller.role(), Role::Server | Role::Admin) {
        return out;
    }
    // Only answers that can carry a layout of a file the caller holds open are opened up.
    let wanted = match &call.op {
        MdsOp::Open { fid, .. } | MdsOp::GetAttr { fid } | MdsOp::GetLayout { fid } => {
            mdt.exports.holds_open(&call.client, *fid)
        }
        MdsOp::Create { open, .. } => *open,
        _ => false,
    };
    if !wanted {
        return out;
    }
    let Some(key) = nacre_net::sec::capability_key(&mdt.label.fsname) else {
        return out;
    };
    // A body from a saved reply is in this protocol (dne::outgoing refuses one of another
    // with `EPROTO`, which the status check above skips).
    let Ok(mut a) = nacre_wire::decode_body::<MdsAnswer>(&out.body) else {
        return out;
    };
    let (fid, layout) = match (&a.reply, &call.op) {
        (
            MdsReply::Entry {
                attr,
                layout: Some(l),
                ..
            },
            _,
        ) => (attr.fid, l),
        (MdsReply::Layout(LayoutInfo::File(l)), MdsOp::GetLayout { fid }) => (*fid, l),
        _ => return out,
    };
    let ops = ops_held(mdt, &call.client, fid);
    if ops == 0 {
        return out;
    }
    let holder = holder_of(&req.caller.tenant());
    let lifetime_s = mdt
        .capa_lifetime_s
        .load(std::sync::atomic::Ordering::Relaxed);
    a.capas = layout
        .objects()
        .take(CAPAS_PER_ANSWER_MAX)
        .map(|o| {
            let what = (fid, o.ost, o.object);
            Capa::issue_for(&key, what, layout.generation, ops, holder, lifetime_s)
        })
        .collect();
    Outgoing {
        body: nacre_wire::encode_body(&a),
        ..out
    }
}

/// What `client`'s opens of `fid` here allow: reading if one was opened for reading,
/// writing if one was opened for writing (an open for neither allows nothing).
fn ops_held(mdt: &Mdt, client: &[u8; 16], fid: Fid) -> u8 {
    let mut ops = 0;
    if mdt.exports.holds_read_open(client, fid) {
        ops |= CAPA_READ;
    }
    if mdt.exports.holds_write_open(client, fid) {
        ops |= CAPA_WRITE;
    }
    ops
}
