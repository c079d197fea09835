//! QoS on an MDT (docs/qos.md): client namespace requests are matched against the rules and
//! held to this MDT's share of their class's rate before anything else is done with them.

use crate::mdt::Mdt;
use nacre_net::Incoming;
use nacre_qos::Facts;
use nacre_wire::decode_body;
use nacre_wire::mds::{MdsCall, MdsOp};

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
    let project = if mdt.qos.wants_projects() {
        project_of(mdt, &call.op)
    } else {
        0
    };
    Some(Facts {
        job: &call.jobid,
        uid: call.cred.uid,
        gid: call.cred.gid,
        project,
        nid: nacre_qos::peer_ip(&req.peer),
        op,
        bytes: 0,
    })
}

/// The project a request works in (0: none, or not known here): a new entry's (its
/// directory's if the directory passes its project on), or that of the inode it names (for
/// a name in a directory: the directory's). One inode read, only while a rule matches by
/// project.
fn project_of(mdt: &Mdt, op: &MdsOp) -> u32 {
    let (fid, new_entry) = match op {
        MdsOp::Create { parent, .. }
        | MdsOp::Mkdir { parent, .. }
        | MdsOp::Symlink { parent, .. }
        | MdsOp::MkdirOn { parent, .. }
        | MdsOp::MkdirStriped { parent, .. }
        | MdsOp::CreateBatch { parent, .. } => (*parent, true),
        MdsOp::Lookup { parent, .. }
        | MdsOp::Unlink { parent, .. }
        | MdsOp::UnlinkBatch { parent, .. }
        | MdsOp::Rmdir { parent, .. }
        | MdsOp::Link { parent, .. }
        | MdsOp::Rename {
            src_parent: parent, ..
        } => (*parent, false),
        MdsOp::GetAttr { fid, .. }
        | MdsOp::SetAttr { fid, .. }
        | MdsOp::ReadLink { fid }
        | MdsOp::ReadDir { fid, .. }
        | MdsOp::ReadDirPlus { fid, .. }
        | MdsOp::Open { fid, .. }
        | MdsOp::Close { fid, .. }
        | MdsOp::GetXattr { fid, .. }
        | MdsOp::SetXattr { fid, .. }
        | MdsOp::ListXattr { fid }
        | MdsOp::RemoveXattr { fid, .. }
        | MdsOp::SetLayout { fid, .. }
        | MdsOp::GetLayout { fid, .. }
        | MdsOp::LayoutIntent { fid, .. }
        | MdsOp::DomRead { fid, .. }
        | MdsOp::DomWrite { fid, .. }
        | MdsOp::DomAppend { fid, .. }
        | MdsOp::Flock { fid, .. } => (*fid, false),
        _ => return 0,
    };
    match mdt.inode(fid) {
        Ok(i) if new_entry => {
            if i.attr.proj_inherit {
                i.attr.project
            } else {
                0
            }
        }
        Ok(i) => i.attr.project,
        Err(_) => 0,
    }
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
    mdt.qos.admit(req, &facts)
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
