//! Counters and power-of-two histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Buckets of a histogram: bucket `i` counts values in `[2^(i-1), 2^i)`, bucket 0 counts 0.
pub const BUCKETS: usize = 48;

/// A lock-free power-of-two histogram of unsigned values.
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The bucket of `value`.
pub fn bucket_of(value: u64) -> usize {
    if value == 0 {
        0
    } else {
        ((64 - value.leading_zeros()) as usize).min(BUCKETS - 1)
    }
}

/// The smallest value of bucket `i`.
pub fn bucket_floor(i: usize) -> u64 {
    if i == 0 {
        0
    } else {
        1u64 << (i - 1)
    }
}

impl Histogram {
    /// Counts one value.
    pub fn add(&self, value: u64) {
        self.buckets[bucket_of(value)].fetch_add(1, Ordering::Relaxed);
    }

    /// Non-zero buckets as (floor, count).
    pub fn snapshot(&self) -> Vec<(u64, u64)> {
        self.buckets
            .iter()
            .enumerate()
            .map(|(i, b)| (bucket_floor(i), b.load(Ordering::Relaxed)))
            .filter(|(_, c)| *c > 0)
            .collect()
    }

    /// Total count.
    pub fn total(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Zeroes every bucket.
    pub fn clear(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
    }
}

/// `snapshot_time:         SECS.NSECS (secs.nsecs)`, the first line of Lustre's histogram files.
pub fn snapshot_line() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "snapshot_time:         {}.{:09} (secs.nsecs)\n",
        now.as_secs(),
        now.subsec_nanos()
    )
}

/// Count, sum, min and max of one operation's latency (microseconds) and of its bytes.
#[derive(Default)]
pub struct OpCounter {
    /// Operations.
    pub count: AtomicU64,
    /// Sum of latencies, µs.
    pub sum_us: AtomicU64,
    /// Smallest latency, µs (u64::MAX before the first).
    pub min_us: AtomicU64,
    /// Largest latency, µs.
    pub max_us: AtomicU64,
    /// Bytes moved.
    pub bytes: AtomicU64,
}

/// Per-operation statistics of a target (Lustre's `stats` / `md_stats`).
pub struct OpStats {
    names: &'static [&'static str],
    ops: Vec<OpCounter>,
    since: Mutex<Instant>,
}

impl OpStats {
    /// Statistics for the operations `names`.
    pub fn new(names: &'static [&'static str]) -> OpStats {
        let ops = names
            .iter()
            .map(|_| OpCounter {
                min_us: AtomicU64::new(u64::MAX),
                ..OpCounter::default()
            })
            .collect();
        OpStats {
            names,
            ops,
            since: Mutex::new(Instant::now()),
        }
    }

    /// Counts one `op` that took `us` microseconds and moved `bytes`.
    pub fn record(&self, op: usize, us: u64, bytes: u64) {
        let Some(c) = self.ops.get(op) else { return };
        c.count.fetch_add(1, Ordering::Relaxed);
        c.sum_us.fetch_add(us, Ordering::Relaxed);
        c.min_us.fetch_min(us, Ordering::Relaxed);
        c.max_us.fetch_max(us, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Count of `op`.
    pub fn count(&self, op: usize) -> u64 {
        self.ops
            .get(op)
            .map_or(0, |c| c.count.load(Ordering::Relaxed))
    }

    /// Operation names.
    pub fn names(&self) -> &'static [&'static str] {
        self.names
    }

    /// Counters of `op`.
    pub fn counter(&self, op: usize) -> Option<&OpCounter> {
        self.ops.get(op)
    }

    /// Lustre-style text: `snapshot_time`, then `name count samples [usecs] min max sum`.
    pub fn render(&self) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let elapsed = self.since.lock().expect("since").elapsed().as_secs_f64();
        let mut s = format!(
            "snapshot_time             {}.{:09} secs.nsecs\n",
            now.as_secs(),
            now.subsec_nanos()
        );
        s += &format!("elapsed_time              {elapsed:.6} secs\n");
        for (name, c) in self.names.iter().zip(&self.ops) {
            let n = c.count.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            s += &format!(
                "{name:<25} {n} samples [usecs] {} {} {}\n",
                c.min_us.load(Ordering::Relaxed),
                c.max_us.load(Ordering::Relaxed),
                c.sum_us.load(Ordering::Relaxed)
            );
            let b = c.bytes.load(Ordering::Relaxed);
            if b > 0 {
                s += &format!("{:<25} {n} samples [bytes] {b}\n", format!("{name}_bytes"));
            }
        }
        s
    }

    /// Zeroes everything.
    pub fn clear(&self) {
        for c in &self.ops {
            c.count.store(0, Ordering::Relaxed);
            c.sum_us.store(0, Ordering::Relaxed);
            c.min_us.store(u64::MAX, Ordering::Relaxed);
            c.max_us.store(0, Ordering::Relaxed);
            c.bytes.store(0, Ordering::Relaxed);
        }
        *self.since.lock().expect("since") = Instant::now();
    }
}

/// `4K`, `1M`, `2G` style labels for power-of-two byte buckets.
pub fn size_label(v: u64) -> String {
    match v {
        v if v >= 1 << 30 => format!("{}G", v >> 30),
        v if v >= 1 << 20 => format!("{}M", v >> 20),
        v if v >= 1 << 10 => format!("{}K", v >> 10),
        v => v.to_string(),
    }
}

/// A Lustre-style two-column (read | write) histogram table.
pub fn rw_table(
    title: &str,
    unit: &str,
    r: &Histogram,
    w: &Histogram,
    label: fn(u64) -> String,
) -> String {
    let (rs, ws) = (r.snapshot(), w.snapshot());
    let (rt, wt) = (r.total().max(1), w.total().max(1));
    let mut keys: Vec<u64> = rs.iter().chain(ws.iter()).map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut s = format!("\n{title:<22} {unit:<6} % cum % |  {unit:<6} % cum %\n");
    let (mut rc, mut wc) = (0u64, 0u64);
    for k in keys {
        let rn = rs.iter().find(|(b, _)| *b == k).map_or(0, |(_, n)| *n);
        let wn = ws.iter().find(|(b, _)| *b == k).map_or(0, |(_, n)| *n);
        rc += rn;
        wc += wn;
        s += &format!(
            "{:<22} {:<6} {:>3} {:>3}   | {:<6} {:>3} {:>3}\n",
            format!("{}:", label(k)),
            rn,
            rn * 100 / rt,
            rc * 100 / rt,
            wn,
            wn * 100 / wt,
            wc * 100 / wt
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 1);
        assert_eq!(bucket_of(1 << 20), 21);
        assert_eq!(bucket_floor(21), 1 << 20);
        assert_eq!(bucket_of((1 << 21) - 1), 21);
        let h = Histogram::default();
        for _ in 0..100 {
            h.add(1 << 20);
        }
        assert_eq!(h.snapshot(), vec![(1 << 20, 100)]);
        h.clear();
        assert_eq!(h.total(), 0);
    }

    #[test]
    fn op_stats() {
        let s = OpStats::new(&["read", "write"]);
        s.record(1, 10, 4096);
        s.record(1, 30, 4096);
        assert_eq!(s.count(1), 2);
        let text = s.render();
        assert!(
            text.contains("write                     2 samples [usecs] 10 30 40"),
            "{text}"
        );
        assert!(!text.contains("read "), "{text}");
        s.clear();
        assert_eq!(s.count(1), 0);
    }
}
