//! Byte-range locks (`fcntl` POSIX locks, `flock`) across clients, kept by the MDT of the
//! file (the table and its rules: `nacre_ldlm::flock`), and the requests waiting for them
//! (served and parked by flock_serve.rs). Locks live in memory: an evicted or disconnected
//! client's locks are released (and its waiters woken); after a restart of the MDT the
//! holders set them again (docs/locking.md).

use nacre_ldlm::flock::{FlockTable, Owner};
use nacre_net::Incoming;
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsCall;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::time::Instant;

/// Most requests parked waiting for byte-range locks on one MDT (past it, a request that
/// would wait is answered [`MdsReply::FlockBlocked`](nacre_wire::mds::MdsReply::FlockBlocked)
/// at once).
pub const FLOCK_WAITERS_MAX: usize = 65_536;

/// An MDT's byte-range locks and the requests waiting for them.
#[derive(Default)]
pub struct Flocks {
    /// The locks.
    pub table: FlockTable,
    pub(crate) parked: Mutex<Parked>,
    pub(crate) wake: Condvar,
}

#[derive(Default)]
pub(crate) struct Parked {
    pub(crate) by_fid: HashMap<Fid, Vec<Waiter>>,
    pub(crate) count: usize,
    pub(crate) timer: bool,
}

pub(crate) struct Waiter {
    pub(crate) req: Incoming,
    pub(crate) call: MdsCall,
    pub(crate) owner: Owner,
    pub(crate) deadline: Instant,
}

impl Flocks {
    /// Requests waiting now.
    pub fn parked(&self) -> usize {
        self.parked.lock().count
    }

    /// The requests waiting on `fid` go round again (a lock there changed).
    pub(crate) fn wake(&self, fid: Fid) {
        let waiters = {
            let mut p = self.parked.lock();
            let w = p.by_fid.remove(&fid).unwrap_or_default();
            p.count -= w.len();
            w
        };
        for w in waiters {
            w.req.resubmit();
        }
    }

    /// The MDT stops being served here: every waiting request is answered `ENODEV` (its
    /// client moves on to the MDT's new server).
    pub fn shut(&self) {
        let waiters: Vec<Waiter> = {
            let mut p = self.parked.lock();
            p.count = 0;
            p.by_fid.drain().flat_map(|(_, w)| w).collect()
        };
        for w in waiters {
            w.req.respond(nacre_net::Outgoing::error(Status::NoDev));
        }
    }

    /// `client` is gone (evicted or disconnected): its locks are released and the requests
    /// they held up go round again.
    pub fn client_gone(&self, client: &[u8; 16]) {
        for fid in self.table.drop_client(client) {
            self.wake(fid);
        }
    }
}
