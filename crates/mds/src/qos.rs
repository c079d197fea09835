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

/// `Some(req)` to serve now; `None` when the scheduler holds it (or answered it).
pub fn admit(mdt: &Mdt, req: Incoming) -> Option<Incoming> {
    if !mdt.qos.active() || req.qos_admitted() {
        return Some(req);
    }
    let op = (req.header.opcode & 0xff) as usize;
    let Some(op) = op
        .checked_sub(1)
        .and_then(|i| crate::stats::MD_OPS.get(i))
        .filter(|op| QOS_OPS.contains(op))
    else {
        return Some(req);
    };
    let Ok(call) = decode_body::<MdsCall>(&req.body) else {
        return Some(req);
    };
    // Another server's requests (an MDT's to its peers) are never held.
    if mdt.osts.is_peer(&call.client) {
        return Some(req);
    }
    let facts = Facts {
        job: &call.jobid,
        uid: call.cred.uid,
        gid: call.cred.gid,
        project: 0,
        nid: nacre_qos::peer_ip(&req.peer),
        op,
        bytes: 0,
    };
    match mdt.qos.admit(req, &facts) {
        Admit::Go(req) => Some(req),
        Admit::Held => None,
    }
}
