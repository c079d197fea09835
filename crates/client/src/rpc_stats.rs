//! Per-OST RPC statistics of a client (Lustre's `osc.*.rpc_stats`): pages per bulk RPC and
//! RPCs in flight when each was sent, for reads and writes.

use nacre_params::hist::rw_table;
use nacre_params::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};

/// RPC statistics of one OST connection.
#[derive(Default)]
pub struct OscRpcStats {
    read_pages: Histogram,
    write_pages: Histogram,
    read_in_flight: Histogram,
    write_in_flight: Histogram,
    reads_active: AtomicU64,
    writes_active: AtomicU64,
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
}

/// Cumulative counters of one OST connection, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OscTotals {
    /// Bulk read RPCs sent.
    pub read_rpcs: u64,
    /// Bulk write RPCs sent.
    pub write_rpcs: u64,
    /// Bytes asked for by read RPCs.
    pub read_bytes: u64,
    /// Bytes sent by write RPCs.
    pub write_bytes: u64,
    /// Read RPCs in flight now.
    pub reads_active: u64,
    /// Write RPCs in flight now.
    pub writes_active: u64,
}

impl OscRpcStats {
    /// Notes a bulk RPC being sent.
    pub fn sent(&self, write: bool, bytes: u64) {
        let (pages, flight, active) = if write {
            (
                &self.write_pages,
                &self.write_in_flight,
                &self.writes_active,
            )
        } else {
            (&self.read_pages, &self.read_in_flight, &self.reads_active)
        };
        pages.add(bytes.div_ceil(4096));
        let total = if write {
            &self.write_bytes
        } else {
            &self.read_bytes
        };
        total.fetch_add(bytes, Ordering::Relaxed);
        flight.add(active.fetch_add(1, Ordering::Relaxed) + 1);
    }

    /// Notes a bulk RPC's reply.
    pub fn done(&self, write: bool) {
        let active = if write {
            &self.writes_active
        } else {
            &self.reads_active
        };
        let _ = active.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    /// Cumulative counters.
    pub fn totals(&self) -> OscTotals {
        OscTotals {
            read_rpcs: self.read_pages.total(),
            write_rpcs: self.write_pages.total(),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            reads_active: self.reads_active.load(Ordering::Relaxed),
            writes_active: self.writes_active.load(Ordering::Relaxed),
        }
    }

    /// Lustre-style rendering.
    pub fn render(&self) -> String {
        let mut s = nacre_params::hist::snapshot_line();
        s += &format!(
            "read RPCs in flight:  {}\n",
            self.reads_active.load(Ordering::Relaxed)
        );
        s += &format!(
            "write RPCs in flight: {}\n",
            self.writes_active.load(Ordering::Relaxed)
        );
        s += "                           read      |     write";
        s += &rw_table(
            "pages per rpc",
            "rpcs",
            &self.read_pages,
            &self.write_pages,
            |v| v.to_string(),
        );
        s += &rw_table(
            "rpcs in flight",
            "rpcs",
            &self.read_in_flight,
            &self.write_in_flight,
            |v| v.to_string(),
        );
        s
    }

    /// Zeroes the histograms.
    pub fn clear(&self) {
        for h in [
            &self.read_pages,
            &self.write_pages,
            &self.read_in_flight,
            &self.write_in_flight,
        ] {
            h.clear();
        }
        self.read_bytes.store(0, Ordering::Relaxed);
        self.write_bytes.store(0, Ordering::Relaxed);
    }
}
