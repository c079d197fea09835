//! OST statistics: per-operation counts and latencies (`ost.*.stats`) and Lustre's
//! `brw_stats` histograms (`osd.*.brw_stats`): pages per bulk, disk I/O size, I/O time and
//! I/Os in flight, for reads and writes.

use nacre_params::hist::{bucket_floor, rw_table as table, size_label};
use nacre_params::{Histogram, OpStats};
use std::sync::atomic::{AtomicU64, Ordering};

/// Operation names of `ost.*.stats`, indexed by the OSS opcode's low byte - 1.
pub const OST_OPS: &[&str] = &[
    "write",
    "read",
    "glimpse",
    "punch",
    "fallocate",
    "sync",
    "destroy",
    "statfs",
    "setowner",
    "getowner",
    "lock_poll",
    "lock_cancel",
    "disconnect",
    "enqueue",
    "glimpse_answer",
    "lock_replay",
    "fence",
    "data_version",
    "quota_usage",
    "quota_check",
    "write_runs",
];

/// Histograms of one direction.
#[derive(Default)]
pub struct BrwDirection {
    /// 4 KiB pages per bulk RPC.
    pub pages: Histogram,
    /// Bytes per disk I/O.
    pub size: Histogram,
    /// Milliseconds per I/O.
    pub time_ms: Histogram,
    /// I/Os in flight when one starts.
    pub in_flight: Histogram,
    active: AtomicU64,
}

/// `brw_stats` of one OST.
#[derive(Default)]
pub struct BrwStats {
    /// Reads.
    pub read: BrwDirection,
    /// Writes.
    pub write: BrwDirection,
}

/// A started I/O; [`BrwDirection::end`] records it.
pub struct IoStart {
    started: std::time::Instant,
}

impl BrwDirection {
    /// Notes the start of an I/O.
    pub fn begin(&self) -> IoStart {
        let now = self.active.fetch_add(1, Ordering::Relaxed);
        self.in_flight.add(now + 1);
        IoStart {
            started: std::time::Instant::now(),
        }
    }

    /// Records a finished I/O of `bytes`.
    pub fn end(&self, start: IoStart, bytes: u64) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.pages.add(bytes.div_ceil(4096));
        self.size.add(bytes);
        self.time_ms.add(start.started.elapsed().as_millis() as u64);
    }

    fn clear(&self) {
        self.pages.clear();
        self.size.clear();
        self.time_ms.clear();
        self.in_flight.clear();
    }
}

impl BrwStats {
    /// Lustre-style rendering.
    pub fn render(&self) -> String {
        let mut s = nacre_params::hist::snapshot_line();
        s += "                           read      |     write";
        s += &table(
            "pages per bulk r/w",
            "rpcs",
            &self.read.pages,
            &self.write.pages,
            |v| v.to_string(),
        );
        s += &table(
            "disk I/O size",
            "ios",
            &self.read.size,
            &self.write.size,
            size_label,
        );
        s += &table(
            "I/O time (1/1000s)",
            "ios",
            &self.read.time_ms,
            &self.write.time_ms,
            |v| v.to_string(),
        );
        s += &table(
            "disk I/Os in flight",
            "ios",
            &self.read.in_flight,
            &self.write.in_flight,
            |v| v.to_string(),
        );
        s
    }

    /// Zeroes every histogram.
    pub fn clear(&self) {
        self.read.clear();
        self.write.clear();
    }
}

/// Count of writes in the `disk I/O size` bucket holding `bytes` (for tests and tools).
pub fn write_size_count(b: &BrwStats, bytes: u64) -> u64 {
    let floor = bucket_floor(nacre_params::hist::bucket_of(bytes));
    b.write
        .size
        .snapshot()
        .iter()
        .find(|(k, _)| *k == floor)
        .map_or(0, |(_, n)| *n)
}

/// New `ost.*.stats`.
pub fn new_op_stats() -> OpStats {
    OpStats::new(OST_OPS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hundred_one_mib_writes_land_in_the_1m_bucket() {
        let b = BrwStats::default();
        for _ in 0..100 {
            let io = b.write.begin();
            b.write.end(io, 1 << 20);
        }
        assert_eq!(write_size_count(&b, 1 << 20), 100);
        let text = b.render();
        assert!(text.contains("1M:"), "{text}");
        assert!(text.contains("256:"), "pages per bulk: {text}");
        b.clear();
        assert_eq!(write_size_count(&b, 1 << 20), 0);
    }
}
