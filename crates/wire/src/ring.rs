//! The rings of the node API's fast path (docs/api.md): one shared-memory file (a memfd the
//! application makes and hands to the node's client once) holds a submission ring, a
//! completion ring and the buffers the requests read into and write from, so an
//! application thread keeps many requests in flight with no system call per request and no
//! copy between its buffers and the node's client.
//!
//! ```text
//! offset                       what
//! 0                            RingHeader (one cache line per field written by one side)
//! RING_SQ_OFFSET               entries × Sqe       (written by the application)
//! sq end                       entries × Cqe       (written by the node's client)
//! buffers_offset(entries)      the buffers (4 KiB aligned)
//! ```
//!
//! Indices run freely (wrapping u32) and are taken modulo `entries` (a power of two). The
//! application publishes submissions by storing `sq_tail` (release); the node's client
//! publishes completions by storing `cq_tail`. Whoever finds nothing to do sets its
//! `*_sleeping` flag, looks once more, and sleeps on its eventfd; the other side writes that
//! eventfd only when it sees the flag — so a busy ring makes no system calls.
//!
//! Nothing in the shared memory is trusted by the node's client: an entry is copied out and
//! checked (its buffer within the buffers, its handle the session's) before use, and the
//! sizes come from the setup request, not from the memory.

/// Most entries of a ring.
pub const RING_ENTRIES_MAX: u32 = 4096;
/// Most bytes of a ring's buffers.
pub const RING_BUFFER_BYTES_MAX: u64 = 1 << 32;
/// Where the submission entries start.
pub const RING_SQ_OFFSET: usize = 4096;
/// Page alignment of the buffers.
pub const RING_PAGE_BYTES: usize = 4096;

/// Read `len` bytes at `offset` of `handle` into the buffers at `buf_offset`.
pub const RING_OP_READ: u8 = 1;
/// Write `len` bytes from the buffers at `buf_offset` to `handle` at `offset`.
pub const RING_OP_WRITE: u8 = 2;
/// Make `handle`'s file durable.
pub const RING_OP_FSYNC: u8 = 3;

/// A cache line holding one atomic counter (no false sharing between the two sides).
#[repr(C, align(64))]
pub struct Line {
    /// The counter.
    pub v: std::sync::atomic::AtomicU32,
}

/// The header at the start of a ring's memory.
#[repr(C)]
pub struct RingHeader {
    /// Submissions published by the application.
    pub sq_tail: Line,
    /// Submissions taken by the node's client.
    pub sq_head: Line,
    /// Completions published by the node's client.
    pub cq_tail: Line,
    /// Completions taken by the application.
    pub cq_head: Line,
    /// 1 while the node's client sleeps waiting for submissions.
    pub server_sleeping: Line,
    /// 1 while the application sleeps waiting for completions.
    pub app_sleeping: Line,
}

/// A submission (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sqe {
    /// `RING_OP_*`.
    pub op: u8,
    /// Zero.
    pub pad: [u8; 3],
    /// Bytes to move.
    pub len: u32,
    /// Given back in the completion.
    pub user_data: u64,
    /// The file's handle in the session.
    pub handle: u64,
    /// Offset in the file.
    pub offset: u64,
    /// Offset in the ring's buffers.
    pub buf_offset: u64,
    /// Zero.
    pub reserved: u64,
}

/// A completion (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cqe {
    /// The submission's `user_data`.
    pub user_data: u64,
    /// Bytes moved, or a negative errno.
    pub result: i64,
}

const _: () = assert!(std::mem::size_of::<RingHeader>() <= RING_SQ_OFFSET);
const _: () = assert!(std::mem::size_of::<Sqe>() == 48);
const _: () = assert!(std::mem::size_of::<Cqe>() == 16);

/// Where the completion entries of a ring of `entries` start.
pub fn cq_offset(entries: u32) -> usize {
    RING_SQ_OFFSET + entries as usize * std::mem::size_of::<Sqe>()
}

/// Where the buffers of a ring of `entries` start.
pub fn buffers_offset(entries: u32) -> usize {
    let end = cq_offset(entries) + entries as usize * std::mem::size_of::<Cqe>();
    end.div_ceil(RING_PAGE_BYTES) * RING_PAGE_BYTES
}

/// The bytes of a ring of `entries` with `buffer_bytes` of buffers.
pub fn ring_bytes(entries: u32, buffer_bytes: u64) -> u64 {
    buffers_offset(entries) as u64 + buffer_bytes
}

/// Why a ring's sizes are refused.
pub fn check_sizes(entries: u32, buffer_bytes: u64) -> Result<(), &'static str> {
    if entries == 0 || entries > RING_ENTRIES_MAX || !entries.is_power_of_two() {
        return Err("entries must be a power of two from 1 to 4096");
    }
    if buffer_bytes > RING_BUFFER_BYTES_MAX {
        return Err("a ring's buffers are at most 4 GiB");
    }
    Ok(())
}

/// True if `len` bytes at `buf_offset` lie within buffers of `buffer_bytes`.
pub fn within(buf_offset: u64, len: u32, buffer_bytes: u64) -> bool {
    buf_offset
        .checked_add(u64::from(len))
        .is_some_and(|end| end <= buffer_bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn poller_polls_for_short_waits_and_stops_for_long_ones() {
        use std::time::Duration;
        let mut p = super::Poller::default();
        assert_eq!(p.budget(), Duration::ZERO);
        p.learn(Duration::from_micros(10));
        assert!(p.budget() >= Duration::from_micros(10));
        p.learn(Duration::from_micros(500));
        p.learn(Duration::from_micros(500));
        p.learn(Duration::from_micros(500));
        p.learn(Duration::from_micros(500));
        assert_eq!(p.budget(), Duration::ZERO);
        p.learn(Duration::from_micros(400));
        assert_eq!(p.budget(), Duration::ZERO);
        p.learn(Duration::from_micros(30));
        assert!(p.budget() >= Duration::from_micros(30));
        assert!(p.budget() <= Duration::from_nanos(super::POLL_NS_MAX));
    }

    use super::*;

    #[test]
    fn layout_and_bounds() {
        assert_eq!(cq_offset(8), 4096 + 8 * 48);
        assert_eq!(buffers_offset(8) % 4096, 0);
        assert!(buffers_offset(4096) >= cq_offset(4096) + 4096 * 16);
        assert!(check_sizes(32, 1 << 20).is_ok());
        assert!(check_sizes(33, 1 << 20).is_err());
        assert!(check_sizes(0, 0).is_err());
        assert!(check_sizes(8192, 0).is_err());
        assert!(within(10, 10, 20));
        assert!(!within(11, 10, 20));
        assert!(!within(u64::MAX, 1, u64::MAX));
    }
}

/// The longest either side of a ring polls before it sleeps.
pub const POLL_NS_MAX: u64 = 50_000;

/// How long to poll a ring before sleeping, learnt from how long waits were: a wait that
/// ended within [`POLL_NS_MAX`] would have been caught by polling that long (so the next
/// polls about as long, and no wake-up is paid), a longer one would only have burnt the
/// CPU polling (so polling shrinks, to none). A reader at queue depth 1 whose requests
/// each take longer than that sleeps at once and leaves the CPU to the work; a busy ring
/// never sleeps.
#[derive(Clone, Copy, Debug, Default)]
pub struct Poller {
    budget_ns: u64,
}

impl Poller {
    /// How long to poll now.
    pub fn budget(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.budget_ns)
    }

    /// A wait took `waited` (polling and sleeping together).
    pub fn learn(&mut self, waited: std::time::Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.budget_ns = if ns <= POLL_NS_MAX {
            (ns + ns / 4 + 2_000).clamp(self.budget_ns, POLL_NS_MAX)
        } else if self.budget_ns < 4_000 {
            0
        } else {
            self.budget_ns / 2
        };
    }
}
