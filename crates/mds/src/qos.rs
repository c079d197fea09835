//! QoS on an MDT (docs/qos.md): client namespace requests are matched against the rules and
//! held to this MDT's share of their class's rate before anything else is done with them.

use crate::mdt::Mdt;
use nacre_net::Incoming;
use nacre_qos::{Admit, Facts};
use nacre_wire::decode_body;
use nacre_wire::mds::MdsCall;

/// Operations QoS rules cap (a client's namespace requests; lock traffic, recovery and
/// server-to-server requests never wait for a rate).
pub const QOS_OPS: &[&str] = &[
    "getattr",
    "lookup",
    "create",
    "mkdir",
    "symlink",
    "link",
    "unlink",
    "rmdir",
    "rename",
    "setattr",
    "readlink",
    "readdir",
    "open",
    "close",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
    "setlayout",
    "getlayout",
    "statfs",
    "sync",
    "mkdir_remote",
    "mkdir_striped",
    "readdirplus",
    "flock",
];

/// The operation name of a request QoS rules cap, or `None`.
fn capped_op(req: &Incoming) -> Option<&'static str> {
    let op = (req.header.opcode & 0xff) as usize;
    op.checked_sub(1)
        .and_then(|i| crate::stats::MD_OPS.get(i))
        .filter(|op| QOS_OPS.contains(op))
        .copied()
}

/// What the rules match of a client's request of operation `op` (`None` for another
/// server's, never held nor weighed).
fn facts<'a>(mdt: &Mdt, req: &Incoming, call: &'a MdsCall, op: &'static str) -> Option<Facts<'a>> {
    if mdt.osts.is_peer(&call.client) {
        return None;
    }
    Some(Facts {
        job: &call.jobid,
        uid: call.cred.uid,
        gid: call.cred.gid,
        project: 0,
        nid: nacre_qos::peer_ip(&req.peer),
        op,
        bytes: 0,
    })
}

/// `Some(req)` to serve now; `None` when the scheduler holds it (or answered it).
pub fn admit(mdt: &Mdt, req: Incoming) -> Option<Incoming> {
    if !mdt.qos.active() || req.qos_admitted() {
        return Some(req);
    }
    let Some(op) = capped_op(&req) else {
        return Some(req);
    };
    let Ok(call) = decode_body::<MdsCall>(&req.body) else {
        return Some(req);
    };
    let Some(facts) = facts(mdt, &req, &call, op) else {
        return Some(req);
    };
    match mdt.qos.admit(req, &facts) {
        Admit::Go(req) => Some(req),
        Admit::Held => None,
    }
}

/// The request's QoS weight (on the connection's reader thread; 0 unless a rule weighs).
pub fn weight(mdt: &Mdt, req: &Incoming) -> u32 {
    if !mdt.qos.weighted() {
        return 0;
    }
    let Some(op) = capped_op(req) else { return 0 };
    match decode_body::<MdsCall>(&req.body) {
        Ok(call) => facts(mdt, req, &call, op).map_or(0, |f| mdt.qos.weight(&f)),
        Err(_) => 0,
    }
}
