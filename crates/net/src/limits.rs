//! What a server's connections may hold and what they did that it had to stop: the
//! limits of the network threads ([`NetLimits`], docs/hardening.md), their counters
//! ([`NetStats`]) and the receive budget frames take their bytes from ([`Budget`]).

use nacre_types::limits::{BODY_BYTES_MAX, BULK_BYTES_MAX};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default cap on open connections per server.
pub const CONNS_MAX_DEFAULT: usize = 16_384;
/// Default deadline for a frame that has started to arrive.
pub const FRAME_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default budget of bytes for frames being received, per server.
pub const BULK_BUDGET_BYTES_DEFAULT: u64 = 512 << 20;
/// Default send timeout of replies.
pub const REPLY_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// The limits of a server's connections (docs/hardening.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetLimits {
    /// Network threads (0: one).
    pub threads: usize,
    /// Open connections at most; more are refused.
    pub conns_max: usize,
    /// A frame must arrive whole within this long of its first byte.
    pub frame_timeout_ms: u64,
    /// Bytes of frames being received at once (bodies and bulk), per server.
    pub bulk_budget_bytes: u64,
    /// A reply that cannot be written within this long drops its connection.
    pub reply_timeout_ms: u64,
}

impl Default for NetLimits {
    fn default() -> NetLimits {
        NetLimits {
            threads: 1,
            conns_max: CONNS_MAX_DEFAULT,
            frame_timeout_ms: FRAME_TIMEOUT_MS_DEFAULT,
            bulk_budget_bytes: BULK_BUDGET_BYTES_DEFAULT,
            reply_timeout_ms: REPLY_TIMEOUT_MS_DEFAULT,
        }
    }
}

impl NetLimits {
    /// The budget actually used: at least one largest frame, so every frame can be taken.
    pub fn budget_bytes(&self) -> u64 {
        self.bulk_budget_bytes
            .max(u64::from(BULK_BYTES_MAX) + u64::from(BODY_BYTES_MAX))
    }
}

/// What a server's connections did that it had to stop: counters read by `get_param` and
/// `/metrics`.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Connections open now.
    pub conns_open: AtomicU64,
    /// Connections accepted since start.
    pub conns_accepted: AtomicU64,
    /// Connections refused at the cap.
    pub conns_refused: AtomicU64,
    /// Connections dropped for a frame that did not arrive in time.
    pub frames_timed_out: AtomicU64,
    /// Connections dropped for a malformed frame.
    pub frames_bad: AtomicU64,
    /// Connections dropped for a reply they did not read in time.
    pub replies_timed_out: AtomicU64,
    /// Frames that waited for the budget.
    pub budget_waits: AtomicU64,
    /// Bytes of the budget held now.
    pub budget_held_bytes: AtomicU64,
    /// Connections refused in their handshake (no key, a wrong key, a replayed handshake,
    /// or past [`crate::sec::HANDSHAKES_MAX`] at once).
    pub handshakes_refused: AtomicU64,
    /// Of those, connections refused because every handshake slot, or every slot of their
    /// source address, was taken.
    pub handshakes_busy: AtomicU64,
    /// Connections dropped for a frame that failed its integrity or privacy check.
    pub frames_unauthentic: AtomicU64,
    /// Requests refused because their sender's role may not send them
    /// ([`nacre_wire::roles::need_of`]).
    pub requests_refused_role: AtomicU64,
    /// Handshakes completed, by the level the connection got (none, integrity, bulk,
    /// privacy).
    pub handshakes_by_level: [AtomicU64; 4],
    /// Requests of a protocol version this server does not speak, answered `EPROTO` with
    /// its range (nacre_wire::version).
    pub requests_refused_version: AtomicU64,
    /// Requests handed to their handler while their bulk was arriving ([`crate::stream`]).
    pub frames_streamed: AtomicU64,
    /// Of those, the ones whose bulk is arriving now (at most [`crate::stream::STREAMS_MAX`]).
    pub frames_streaming: AtomicU64,
}

impl NetStats {
    /// The counters as `name: value` lines.
    pub fn text(&self) -> String {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "conns_open: {}\nconns_accepted: {}\nconns_refused: {}\nframes_timed_out: {}\n\
             frames_bad: {}\nreplies_timed_out: {}\nbudget_waits: {}\nbudget_held_bytes: {}\n\
             handshakes_refused: {}\nframes_unauthentic: {}\nhandshakes_none: {}\n\
             handshakes_integrity: {}\nhandshakes_bulk: {}\nhandshakes_privacy: {}\n\
             requests_refused_role: {}\nrequests_refused_caller: {}\nhandshakes_busy: {}\n\
             requests_refused_version: {}\nframes_streamed: {}\nframes_streaming: {}",
            v(&self.conns_open),
            v(&self.conns_accepted),
            v(&self.conns_refused),
            v(&self.frames_timed_out),
            v(&self.frames_bad),
            v(&self.replies_timed_out),
            v(&self.budget_waits),
            v(&self.budget_held_bytes),
            v(&self.handshakes_refused),
            v(&self.frames_unauthentic),
            v(&self.handshakes_by_level[0]),
            v(&self.handshakes_by_level[1]),
            v(&self.handshakes_by_level[2]),
            v(&self.handshakes_by_level[3]),
            v(&self.requests_refused_role),
            crate::caller::refused_by_handlers(),
            v(&self.handshakes_busy),
            v(&self.requests_refused_version),
            v(&self.frames_streamed),
            v(&self.frames_streaming),
        )
    }
}

/// The bytes frames being received may hold, shared by a server's connections.
pub(crate) struct Budget {
    avail: AtomicU64,
    stats: Arc<NetStats>,
}

impl Budget {
    pub(crate) fn new(bytes: u64, stats: Arc<NetStats>) -> Arc<Budget> {
        Arc::new(Budget {
            avail: AtomicU64::new(bytes),
            stats,
        })
    }

    /// Takes `n` bytes if they are free.
    pub(crate) fn try_take(self: &Arc<Self>, n: u64) -> Option<BudgetPermit> {
        let mut cur = self.avail.load(Ordering::Acquire);
        loop {
            if cur < n {
                return None;
            }
            match self.avail.compare_exchange_weak(
                cur,
                cur - n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.stats.budget_held_bytes.fetch_add(n, Ordering::Relaxed);
                    return Some(BudgetPermit {
                        budget: self.clone(),
                        bytes: n,
                    });
                }
                Err(now) => cur = now,
            }
        }
    }
}

/// Bytes of the budget a received frame holds until its request is dropped.
pub struct BudgetPermit {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        self.budget.avail.fetch_add(self.bytes, Ordering::AcqRel);
        self.budget
            .stats
            .budget_held_bytes
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}
