//! Byte-range locks across clients (`fcntl` POSIX locks and `flock`, kept by the file's
//! MDT: crates/mds/src/flocks.rs): set, test, release; a wait is a parked request at the
//! MDT, asked again each time its wait there is over.

use crate::*;
use nacre_ldlm::flock::{Flock, FlockKind, Owner};
use nacre_wire::mds::MdsReply;
use std::time::Instant;

/// Pause before asking again when the MDT answered a waiting request at once (it could
/// not park it: too many waiters).
const FLOCK_RETRY_PAUSE_MS: u64 = 10;

impl Client {
    /// Sets (or with [`FlockKind::Unlock`] releases) `owner`'s lock on bytes `start..=end`
    /// of `fid`. Without `wait`, another owner's lock in the way is `EAGAIN`; with it, the
    /// call returns once the lock is held (`EDEADLK` if waiting would deadlock).
    pub fn flock(
        &self,
        fid: Fid,
        owner: u64,
        pid: u32,
        kind: FlockKind,
        (start, end): (u64, u64),
        wait: bool,
    ) -> Result<()> {
        if start > end {
            return Err(Status::Inval.into());
        }
        let mdc = self.mdc(fid.mdt_index())?;
        let wait_ms = if wait { self.lock_poll_wait_ms() } else { 0 };
        loop {
            let asked = Instant::now();
            let op = MdsOp::Flock {
                fid,
                owner,
                pid,
                kind,
                start,
                end,
                wait_ms,
                reclaim: false,
            };
            match mdc.call(op)? {
                MdsReply::Done => {
                    let mine = Owner {
                        client: mdc::OWN,
                        owner,
                    };
                    mdc.flocks.set(fid, mine, pid, kind, (start, end), false);
                    return Ok(());
                }
                MdsReply::FlockBlocked => {
                    if asked.elapsed().as_millis() < u128::from(wait_ms / 2) {
                        std::thread::sleep(Duration::from_millis(FLOCK_RETRY_PAUSE_MS));
                    }
                }
                _ => return Err(Status::Proto.into()),
            }
        }
    }

    /// The lock of another owner that would stop `owner`'s lock of `kind` on `start..=end`
    /// of `fid` (`F_GETLK`), if any.
    pub fn flock_test(
        &self,
        fid: Fid,
        owner: u64,
        kind: FlockKind,
        (start, end): (u64, u64),
    ) -> Result<Option<Flock>> {
        let op = MdsOp::FlockTest {
            fid,
            owner,
            kind,
            start,
            end,
        };
        match self.mdc(fid.mdt_index())?.call(op)? {
            MdsReply::FlockHeld(l) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// True if `owner` holds byte-range locks on `fid` through this client.
    pub fn flock_held(&self, fid: Fid, owner: u64) -> bool {
        self.mdc(fid.mdt_index())
            .is_ok_and(|m| m.flocks.held(fid).iter().any(|l| l.owner.owner == owner))
    }
}
