//! Byte-range lock requests (`Flock`, `FlockTest`) served and parked (the table and the
//! parked requests are `Mdt::flocks`, flocks.rs).
//!
//! A request is served where the handler first sees it (`Handler::park`: in memory, no
//! disk, no other server), never on a service thread. One that must wait is parked: it is
//! queued on its service again when a lock on its file changes, and answered
//! [`MdsReply::FlockBlocked`] when its wait is over (the client asks again), so a wait of
//! any length holds no thread and no request outlives the client's RPC timeout.

use crate::flocks::{Waiter, FLOCK_WAITERS_MAX};
use crate::mdt::Mdt;
use nacre_ldlm::flock::{FlockKind, Owner, SetOutcome};
use nacre_net::Incoming;
use nacre_types::Status;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, FLOCK_WAIT_MS_MAX};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// True for the requests served here.
pub(crate) fn is_flock(opcode: u16) -> bool {
    const OPS: [u16; 2] = [0x022c, 0x022d];
    OPS.contains(&opcode)
}

/// Serves a `Flock` or `FlockTest` request now, or parks it.
pub(crate) fn serve(mdt: &Arc<Mdt>, req: Incoming, call: MdsCall) {
    let started = Instant::now();
    let op = (call.op.opcode() & 0xff) as usize - 1;
    let result = run(mdt, &req, &call);
    let us = started.elapsed().as_micros() as u64;
    mdt.md_stats.record(op, us, 0);
    mdt.job_stats
        .record(nacre_types::jobid::clamp(&call.jobid), op, us, 0);
    match result {
        Ok(Some(reply)) => respond(mdt, req, &call, Ok(reply)),
        Ok(None) => park(mdt, req, call),
        Err(s) => respond(mdt, req, &call, Err(s)),
    }
}

/// The answer, or `None` if the request waits.
fn run(mdt: &Mdt, req: &Incoming, call: &MdsCall) -> Result<Option<MdsReply>, Status> {
    mdt.exports.heard_from(&call.client)?;
    // After a restart, the locks held before it are set again first.
    let reclaim = matches!(call.op, MdsOp::Flock { reclaim: true, .. });
    if mdt.recovery.active() && !reclaim {
        return Err(Status::InProgress);
    }
    let owner = |o: u64| Owner {
        client: call.client,
        owner: o,
    };
    match call.op {
        MdsOp::FlockTest {
            fid,
            owner: o,
            kind,
            start,
            end,
        } => {
            if start > end || kind == FlockKind::Unlock {
                return Err(Status::Inval);
            }
            let held = mdt.flocks.table.test(fid, owner(o), kind, (start, end));
            Ok(Some(MdsReply::FlockHeld(held)))
        }
        MdsOp::Flock {
            fid,
            owner: o,
            pid,
            kind,
            start,
            end,
            wait_ms,
            ..
        } => {
            if start > end {
                return Err(Status::Inval);
            }
            let wait = wait_ms > 0;
            match mdt
                .flocks
                .table
                .set(fid, owner(o), pid, kind, (start, end), wait)
            {
                SetOutcome::Granted => {
                    // A release, a downgrade or a narrower range may let waiters in.
                    mdt.flocks.wake(fid);
                    Ok(Some(MdsReply::Done))
                }
                SetOutcome::Conflict(_) if !wait => Err(Status::Again),
                SetOutcome::Conflict(_) if req.resubmits() == u8::MAX => {
                    // Woken too often to count: the client asks again.
                    Ok(Some(MdsReply::FlockBlocked))
                }
                SetOutcome::Conflict(_) => Ok(None),
                SetOutcome::Deadlock => Err(Status::Deadlock),
                SetOutcome::TooMany => Err(Status::NoLock),
            }
        }
        _ => Err(Status::Proto),
    }
}

fn respond(mdt: &Mdt, req: Incoming, call: &MdsCall, r: Result<MdsReply, Status>) {
    let xid = req.header.xid;
    req.respond(crate::execute::answer(
        mdt,
        call,
        xid,
        crate::route::to_outgoing(r),
    ));
}

fn park(mdt: &Arc<Mdt>, req: Incoming, call: MdsCall) {
    let MdsOp::Flock {
        fid,
        owner,
        kind,
        start,
        end,
        wait_ms,
        ..
    } = call.op
    else {
        return respond(mdt, req, &call, Err(Status::Proto));
    };
    let owner = Owner {
        client: call.client,
        owner,
    };
    let deadline = Instant::now() + Duration::from_millis(wait_ms.min(FLOCK_WAIT_MS_MAX));
    let mut p = mdt.flocks.parked.lock();
    if p.count >= FLOCK_WAITERS_MAX {
        drop(p);
        mdt.flocks.table.stop_waiting(owner);
        return respond(mdt, req, &call, Ok(MdsReply::FlockBlocked));
    }
    p.count += 1;
    p.by_fid.entry(fid).or_default().push(Waiter {
        req,
        call,
        owner,
        deadline,
    });
    let start_timer = !std::mem::replace(&mut p.timer, true);
    drop(p);
    // The lock in the way may have gone between the check and the parking (its release
    // found no one to wake): looked at again now that the request is parked.
    if mdt
        .flocks
        .table
        .test(fid, owner, kind, (start, end))
        .is_none()
    {
        mdt.flocks.wake(fid);
    }
    mdt.flocks.wake.notify_all();
    if start_timer {
        start_timer_thread(Arc::downgrade(mdt));
    }
}

/// Answers parked requests whose wait is over; sleeps until the next deadline and ends
/// when nothing is parked (the next parked request starts another).
fn start_timer_thread(mdt: Weak<Mdt>) {
    let spawned = std::thread::Builder::new()
        .name("mdt-flock-waits".into())
        .spawn(move || loop {
            let Some(m) = mdt.upgrade() else { return };
            let mut p = m.flocks.parked.lock();
            let now = Instant::now();
            let mut due = Vec::new();
            let mut next = now + Duration::from_secs(1);
            let mut count = 0;
            for waiters in p.by_fid.values_mut() {
                let (late, keep): (Vec<_>, Vec<_>) =
                    waiters.drain(..).partition(|w| w.deadline <= now);
                due.extend(late);
                for w in &keep {
                    next = next.min(w.deadline);
                }
                count += keep.len();
                *waiters = keep;
            }
            p.by_fid.retain(|_, w| !w.is_empty());
            p.count = count;
            if due.is_empty() {
                if p.count == 0 {
                    p.timer = false;
                    return;
                }
                m.flocks.wake.wait_until(&mut p, next);
                continue;
            }
            drop(p);
            for w in due {
                m.flocks.table.stop_waiting(w.owner);
                respond(&m, w.req, &w.call, Ok(MdsReply::FlockBlocked));
            }
        });
    if let Err(e) = spawned {
        tracing::error!("no thread for byte-range lock waits: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::Fid;

    #[test]
    fn the_flock_opcodes_are_those_of_the_flock_requests() {
        let fid = Fid::ROOT;
        let set = MdsOp::Flock {
            fid,
            owner: 1,
            pid: 2,
            kind: FlockKind::Read,
            start: 0,
            end: 0,
            wait_ms: 0,
            reclaim: false,
        };
        let test = MdsOp::FlockTest {
            fid,
            owner: 1,
            kind: FlockKind::Read,
            start: 0,
            end: 0,
        };
        assert!(is_flock(set.opcode()) && is_flock(test.opcode()));
        assert!(!is_flock(MdsOp::GetAttr { fid }.opcode()));
    }
}
