//! QoS on an OST (docs/qos.md): client data requests are matched against the rules and held
//! to this OST's share of their class's rate before anything else is done with them.

use crate::OstTarget;
use nacre_net::Incoming;
use nacre_qos::Facts;
use nacre_wire::decode_body;
use nacre_wire::oss::{OssCall, OssRequest};

/// Operations QoS rules cap (client I/O; lock traffic and server-to-server requests never
/// wait for a rate).
pub const QOS_OPS: &[&str] = &["write", "read", "punch", "fallocate", "sync"];

/// The operation name of a request QoS rules cap, or `None` (a write of many runs is a
/// write to the rules).
fn capped_op(req: &Incoming) -> Option<&'static str> {
    let op = (req.header.opcode & 0xff) as usize;
    op.checked_sub(1)
        .and_then(|i| crate::stats::OST_OPS.get(i))
        .map(|op| match *op {
            "write_runs" => "write",
            op => op,
        })
        .filter(|op| QOS_OPS.contains(op))
}

/// What the rules match of a request of operation `op`.
fn facts<'a>(req: &Incoming, call: &'a OssCall, op: &'static str) -> Facts<'a> {
    let (project, bytes) = match &call.req {
        OssRequest::Write { owner, .. } | OssRequest::WriteRuns { owner, .. } => {
            (owner.project, req.bulk_len().unwrap_or(0))
        }
        OssRequest::Read { len, .. } => (0, u64::from(*len)),
        _ => (0, 0),
    };
    Facts {
        job: &call.jobid,
        uid: call.cred.uid,
        gid: call.cred.gid,
        project,
        nid: nacre_qos::peer_ip(&req.peer),
        op,
        bytes,
    }
}

/// `Some(req)` to serve now; `None` when the scheduler holds it (or answered it).
pub fn admit(ost: &OstTarget, req: Incoming) -> Option<Incoming> {
    if !ost.qos.active() || req.qos_admitted() {
        return Some(req);
    }
    let Some(op) = capped_op(&req) else {
        return Some(req);
    };
    let Ok(call) = decode_body::<OssCall>(&req.body) else {
        return Some(req);
    };
    let facts = facts(&req, &call, op);
    ost.qos.admit(req, &facts)
}

/// The request's QoS weight (on the connection's reader thread; 0 unless a rule weighs).
pub fn weight(ost: &OstTarget, req: &Incoming) -> u32 {
    if !ost.qos.weighted() {
        return 0;
    }
    let Some(op) = capped_op(req) else { return 0 };
    match decode_body::<OssCall>(&req.body) {
        Ok(call) => ost.qos.weight(&facts(req, &call, op)),
        Err(_) => 0,
    }
}
