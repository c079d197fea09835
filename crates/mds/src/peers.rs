//! Calls to the other MDTs of the file system, as a peer MDT: one call, retried calls until
//! a deadline, and the list of MDTs.

use crate::mdt::Mdt;
use nacre_net::rpc::{call, RpcError};
use nacre_types::Status;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::time::{Duration, Instant};

/// How long a client request waits for an unreachable remote MDT before the coordinator
/// answers `EAGAIN` and leaves the operation to recovery.
pub const PEER_WAIT_MS_MAX: u64 = 60_000;
/// Pause between attempts to reach a remote MDT.
pub(crate) const PEER_RETRY_MS: u64 = 500;

/// Sends `op` to MDT `index` as a peer MDT.
pub(crate) fn peer_call(mdt: &Mdt, index: u32, op: MdsOp) -> Result<MdsReply, Status> {
    let conn = mdt.osts.mdt(index)?;
    let c = MdsCall {
        lock_bits: 0,
        client: mdt.peer_uuid,
        replied_below: 0,
        jobid: format!("{}-peer", mdt.label.name()),
        cred: nacre_types::Cred::root(),
        op,
    };
    match call::<_, nacre_wire::mds::MdsAnswer>(&conn, c.op.opcode(), index, &c) {
        Ok(r) => Ok(r.reply),
        // Held by a migration there: try again, as when unreachable.
        Err(RpcError::Status(Status::InProgress)) => Err(Status::Again),
        Err(RpcError::Status(s)) => Err(s),
        Err(e) => {
            tracing::warn!("{}: MDT{index:04x} unreachable: {e}", mdt.label.name());
            Err(Status::Again)
        }
    }
}

/// The MDTs of the file system (this one included), sorted; asks the MGS again when fewer
/// than `at_least` are known (MDTs registered since the last refresh).
pub(crate) fn mdt_list(mdt: &Mdt, at_least: usize) -> Vec<u32> {
    let list = || {
        let mut l = mdt.osts.mdt_indexes();
        if !l.contains(&mdt.label.index) {
            l.push(mdt.label.index);
            l.sort_unstable();
        }
        l
    };
    let l = list();
    if l.len() >= at_least {
        return l;
    }
    if let Err(e) = mdt.osts.refresh() {
        tracing::debug!("MDT refresh: {e}");
    }
    list()
}

/// How many MDTs the file system has, as far as this MDT knows.
pub fn mdt_count(mdt: &Mdt) -> usize {
    mdt_list(mdt, 0).len()
}

/// Sends `update` to MDT `at`, retrying while it is unreachable until `deadline`.
pub(crate) fn send_until(
    mdt: &Mdt,
    at: u32,
    update: RemoteUpdate,
    deadline: Instant,
) -> Result<(), Status> {
    ask_until(mdt, at, update, deadline).map(|_| ())
}

/// [`send_until`], returning the reply.
pub(crate) fn ask_until(
    mdt: &Mdt,
    at: u32,
    update: RemoteUpdate,
    deadline: Instant,
) -> Result<MdsReply, Status> {
    loop {
        match peer_call(mdt, at, MdsOp::Update(update.clone())) {
            Err(Status::Again) | Err(Status::NoDev) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
            }
            other => return other,
        }
    }
}
