//! Byte-range locks across clients (`fcntl` POSIX locks and `flock`, kept by the file's
//! MDT: crates/mds/src/flocks.rs): set, test, release; a wait is a parked request at the
//! MDT, asked again each time its wait there is over ([`FLOCK_WAIT_SLICE_MS`]), and given
//! up between two asks when the caller says it was interrupted (a signal to the waiting
//! process: `EINTR`, as a local file system's wait would be).

use crate::*;
use nacre_ldlm::flock::{Flock, FlockKind, Owner};
use nacre_wire::mds::MdsReply;
use std::time::Instant;

/// Pause before asking again when the MDT answered a waiting request at once (it could
/// not park it: too many waiters).
const FLOCK_RETRY_PAUSE_MS: u64 = 10;
/// Longest one ask of a waiting lock waits at the MDT: how late a wait notices that it was
/// interrupted.
pub const FLOCK_WAIT_SLICE_MS: u64 = 500;

/// How a lock request waits for another owner's lock in the way: `NoWait` answers
/// `EAGAIN`; `Wait` waits until the lock is held, or until `interrupted` says to give up
/// (`EINTR`; asked between two asks of the MDT).
pub enum FlockWait<'a> {
    /// `F_SETLK`, `LOCK_NB`.
    NoWait,
    /// `F_SETLKW`, blocking `flock`.
    Wait {
        /// True once the waiting process was signalled.
        interrupted: &'a dyn Fn() -> bool,
    },
}

impl Client {
    /// Sets (or with [`FlockKind::Unlock`] releases) `owner`'s lock on bytes `start..=end`
    /// of `fid`, waiting or not as `wait` says: `EDEADLK` if waiting would deadlock,
    /// `EINTR` if the wait was interrupted.
    pub fn flock(
        &self,
        fid: Fid,
        owner: u64,
        pid: u32,
        kind: FlockKind,
        (start, end): (u64, u64),
        wait: FlockWait<'_>,
    ) -> Result<()> {
        if start > end {
            return Err(Status::Inval.into());
        }
        let mdc = self.mdc(fid.mdt_index())?;
        let (wait_ms, interrupted) = match wait {
            FlockWait::NoWait => (0, None),
            FlockWait::Wait { interrupted } => (
                self.lock_poll_wait_ms().min(FLOCK_WAIT_SLICE_MS),
                Some(interrupted),
            ),
        };
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && interrupted.is_some_and(|i| i()) {
                return Err(Status::Intr.into());
            }
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
