//! The network self-test, lnet_selftest's equivalent: measures the network layer alone — no
//! file system service, no disk — between this process and server processes.
//!
//! Every nacre server process answers the self-test opcodes: it adds a [`SelftestHandler`]
//! pool for [`nacre_wire::Service::Net`] on its CPU partitions (pings are answered by the
//! router of any [`crate::Server`]). [`run`] drives one test from here to a list of peers:
//! `concurrency` RPCs in flight per peer, for a duration, and reports RPCs and bytes per second
//! per peer.

use crate::service::{Handler, Incoming, Outgoing};
use crate::{Connection, NetConfig, NetError, Request};
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_types::{AlignedBuf, Nid, Status};
use nacre_wire::selftest::{BrwRead, OP_SELFTEST_BRW_READ, OP_SELFTEST_BRW_WRITE};
use nacre_wire::{decode_body, encode_body, OP_PING};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most RPCs in flight per peer.
pub const CONCURRENCY_MAX: usize = 256;
/// Longest test.
pub const DURATION_MS_MAX: u64 = 24 * 3600 * 1000;

/// Server side: answers bulk read and write tests.
pub struct SelftestHandler;

impl Handler for SelftestHandler {
    fn handle(&self, req: &Incoming) -> Outgoing {
        match req.header.opcode {
            OP_SELFTEST_BRW_WRITE => Outgoing::ok(Vec::new()),
            OP_SELFTEST_BRW_READ => match decode_body::<BrwRead>(&req.body) {
                Ok(r) if r.bytes <= BULK_BYTES_MAX => {
                    let mut buf = AlignedBuf::for_overwrite(r.bytes as usize);
                    buf.fill(0xa5);
                    Outgoing {
                        status: Status::Ok,
                        body: Vec::new(),
                        bulk: Some(buf),
                    }
                }
                Ok(_) => Outgoing::error(Status::Inval),
                Err(_) => Outgoing::error(Status::Proto),
            },
            _ => Outgoing::error(Status::NoSys),
        }
    }
}

/// What to test (lnet_selftest's `ping`, `brw write`, `brw read`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TestKind {
    /// Empty requests and replies answered by the network layer itself: RPC rate.
    Ping,
    /// Empty requests served by a service thread (queue, partition, thread hand-off): the
    /// small-RPC rate of a service.
    Null,
    /// Bulk data to the peer.
    BrwWrite,
    /// Bulk data from the peer.
    BrwRead,
}

impl std::str::FromStr for TestKind {
    type Err = String;
    fn from_str(s: &str) -> Result<TestKind, String> {
        match s {
            "ping" => Ok(TestKind::Ping),
            "null" => Ok(TestKind::Null),
            "brw_write" | "write" => Ok(TestKind::BrwWrite),
            "brw_read" | "read" => Ok(TestKind::BrwRead),
            other => Err(format!(
                "unknown test '{other}': use ping, null, brw_write or brw_read"
            )),
        }
    }
}

/// A test run.
#[derive(Clone, Debug)]
pub struct SelftestParams {
    /// Peers to test against.
    pub peers: Vec<Nid>,
    /// Test.
    pub kind: TestKind,
    /// Bulk bytes per RPC (brw tests).
    pub size: u32,
    /// RPCs in flight per peer.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// Network settings (checksums, timeouts).
    pub net: NetConfig,
}

/// One peer's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PeerResult {
    /// Peer.
    pub nid: String,
    /// RPCs completed.
    pub rpcs: u64,
    /// Bulk bytes moved.
    pub bytes: u64,
    /// Failed RPCs.
    pub errors: u64,
    /// Seconds measured.
    pub secs: f64,
    /// RPCs per second.
    pub rpc_per_s: f64,
    /// MiB per second.
    pub mib_per_s: f64,
}

/// Why a test could not run.
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    /// Bad parameters.
    #[error("{0}")]
    Params(String),
    /// A peer could not be reached (the error names it).
    #[error("{1}")]
    Unreachable(Nid, NetError),
    /// A peer accepted the connection but did not answer a ping.
    #[error("{0} does not answer pings: {1}")]
    NoPing(Nid, NetError),
}

impl SelftestParams {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), SelftestError> {
        let bad = |m: String| Err(SelftestError::Params(m));
        if self.peers.is_empty() {
            return bad("no peers to test".into());
        }
        if self.concurrency == 0 || self.concurrency > CONCURRENCY_MAX {
            return bad(format!("concurrency must be 1..={CONCURRENCY_MAX}"));
        }
        let bulk = matches!(self.kind, TestKind::BrwWrite | TestKind::BrwRead);
        if bulk && (self.size == 0 || self.size > BULK_BYTES_MAX) {
            return bad(format!("size must be 1..={BULK_BYTES_MAX} bytes"));
        }
        if self.duration.is_zero() || self.duration.as_millis() > u128::from(DURATION_MS_MAX) {
            return bad("duration must be above 0 and at most a day".into());
        }
        Ok(())
    }

    fn request(&self, bulk: &Option<Arc<AlignedBuf>>) -> Request {
        let (opcode, body) = match self.kind {
            TestKind::Ping => (OP_PING, Vec::new()),
            TestKind::Null => (OP_SELFTEST_BRW_WRITE, Vec::new()),
            TestKind::BrwWrite => (OP_SELFTEST_BRW_WRITE, Vec::new()),
            TestKind::BrwRead => (
                OP_SELFTEST_BRW_READ,
                encode_body(&BrwRead { bytes: self.size }),
            ),
        };
        Request {
            opcode,
            target: 0,
            body,
            bulk: bulk.clone(),
            inline: false,
        }
    }
}

#[derive(Default)]
struct Counters {
    rpcs: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
}

/// Runs the test; `tick` is called about every second with (RPCs, bytes, seconds) so far.
pub fn run(
    p: &SelftestParams,
    mut tick: impl FnMut(u64, u64, f64),
) -> Result<Vec<PeerResult>, SelftestError> {
    p.validate()?;
    let mut net = p.net.clone();
    net.max_rpcs_in_flight = p.concurrency;
    net.max_rpc_size = net.max_rpc_size.max(p.size);
    net.recovery_timeout_ms = net.recovery_timeout_ms.min(net.connect_timeout_ms);
    let mut conns = Vec::new();
    for &nid in &p.peers {
        let c = Connection::connect(nid, net.clone())
            .map_err(|e| SelftestError::Unreachable(nid, e))?;
        c.ping().map_err(|e| SelftestError::NoPing(nid, e))?;
        conns.push(c);
    }
    let bulk = (p.kind == TestKind::BrwWrite).then(|| {
        let mut b = AlignedBuf::zeroed(p.size as usize);
        b.fill(0x5a);
        Arc::new(b)
    });
    let counters: Vec<Counters> = p.peers.iter().map(|_| Counters::default()).collect();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let per_rpc_bytes = match p.kind {
        TestKind::Ping | TestKind::Null => 0,
        _ => u64::from(p.size),
    };
    let secs = std::thread::scope(|scope| {
        for (conn, c) in conns.iter().zip(&counters) {
            for _ in 0..p.concurrency {
                let (stop, bulk) = (&stop, &bulk);
                scope.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match conn.call(p.request(bulk)) {
                            Ok(r) if r.status() == Status::Ok => {
                                let got = r.bulk.as_ref().map_or(0, |b| b.len() as u64);
                                if p.kind == TestKind::BrwRead && got != per_rpc_bytes {
                                    c.errors.fetch_add(1, Ordering::Relaxed);
                                    continue;
                                }
                                c.rpcs.fetch_add(1, Ordering::Relaxed);
                                c.bytes.fetch_add(per_rpc_bytes, Ordering::Relaxed);
                            }
                            _ => {
                                c.errors.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                });
            }
        }
        let deadline = start + p.duration;
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep((deadline - now).min(Duration::from_secs(1)));
            let rpcs = counters
                .iter()
                .map(|c| c.rpcs.load(Ordering::Relaxed))
                .sum();
            let bytes = counters
                .iter()
                .map(|c| c.bytes.load(Ordering::Relaxed))
                .sum();
            tick(rpcs, bytes, start.elapsed().as_secs_f64());
        }
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        secs
    });
    Ok(p.peers
        .iter()
        .zip(&counters)
        .map(|(nid, c)| {
            let (rpcs, bytes) = (
                c.rpcs.load(Ordering::Relaxed),
                c.bytes.load(Ordering::Relaxed),
            );
            PeerResult {
                nid: nid.to_string(),
                rpcs,
                bytes,
                errors: c.errors.load(Ordering::Relaxed),
                secs,
                rpc_per_s: rpcs as f64 / secs,
                mib_per_s: bytes as f64 / (1 << 20) as f64 / secs,
            }
        })
        .collect())
}

fn per_rpc_kind(kind: TestKind) -> bool {
    matches!(kind, TestKind::BrwWrite | TestKind::BrwRead)
}

/// lnet_selftest-style text: per peer and total.
pub fn format_report(p: &SelftestParams, results: &[PeerResult]) -> String {
    let mut s = format!(
        "selftest {:?}: size {} bytes, concurrency {} per peer, {:.1} s\n",
        p.kind,
        if per_rpc_kind(p.kind) { p.size } else { 0 },
        p.concurrency,
        p.duration.as_secs_f64()
    );
    s += &format!(
        "{:<28} {:>12} {:>12} {:>10} {:>8}\n",
        "peer", "RPC/s", "MiB/s", "RPCs", "errors"
    );
    for r in results {
        s += &format!(
            "{:<28} {:>12.1} {:>12.2} {:>10} {:>8}\n",
            r.nid, r.rpc_per_s, r.mib_per_s, r.rpcs, r.errors
        );
    }
    let (rpc, mib): (f64, f64) = results
        .iter()
        .fold((0.0, 0.0), |a, r| (a.0 + r.rpc_per_s, a.1 + r.mib_per_s));
    s += &format!("{:<28} {:>12.1} {:>12.2}\n", "total", rpc, mib);
    s
}
