//! `nacre selftest` between groups of nodes: the test of [`nacre_net::selftest`] run at once
//! from every host of a client group (one worker per host, started through the launcher like
//! the IOR and mdtest tasks), against a group of servers; results per client host and peer.

use crate::storage::Storage;
use crate::team::{Job, Placement, Recorder, Team, Workload};
use crate::BenchError;
use nacre_net::selftest::{run, PeerResult, SelftestParams, TestKind};
use nacre_net::NetConfig;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A test as sent to every client host.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GroupTest {
    /// Server NIDs.
    pub peers: Vec<String>,
    /// `ping`, `null`, `brw_write` or `brw_read`.
    pub test: String,
    /// Bulk bytes per RPC.
    pub size: u32,
    /// RPCs in flight per peer, per client host.
    pub concurrency: usize,
    /// Milliseconds to run.
    pub duration_ms: u64,
    /// Bulk checksums.
    pub checksum: bool,
    /// Multi-rail discovery.
    pub discovery: bool,
}

impl GroupTest {
    fn params(&self) -> Result<SelftestParams, BenchError> {
        let peers = self
            .peers
            .iter()
            .map(|p| {
                p.parse()
                    .map_err(|e| BenchError::Params(format!("bad NID '{p}': {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SelftestParams {
            peers,
            kind: self.test.parse().map_err(BenchError::Params)?,
            size: self.size,
            concurrency: self.concurrency,
            duration: Duration::from_millis(self.duration_ms),
            net: NetConfig {
                bulk_checksum: self.checksum,
                discovery: self.discovery,
                ..NetConfig::default()
            },
        })
    }
}

/// One client host's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeResult {
    /// The host's task index (its place in `--from`).
    pub node: usize,
    /// Per peer.
    pub peers: Vec<PeerResult>,
}

/// The selftest as a team workload: one task per client host.
pub struct SelftestWork {
    t: GroupTest,
}

impl SelftestWork {
    /// The workload of `t`.
    pub fn new(t: GroupTest) -> SelftestWork {
        SelftestWork { t }
    }
}

impl Workload for SelftestWork {
    type Cmd = ();
    type Out = Vec<NodeResult>;

    fn task(
        &self,
        _cmd: &(),
        task: usize,
        _storage: &dyn Storage,
        done: &AtomicU64,
    ) -> Result<Vec<NodeResult>, BenchError> {
        let p = self.t.params()?;
        let bulk = matches!(p.kind, TestKind::BrwRead | TestKind::BrwWrite);
        let peers = run(&p, |rpcs, bytes, _| {
            done.store(if bulk { bytes } else { rpcs }, Ordering::Relaxed);
        })
        .map_err(|e| BenchError::Params(e.to_string()))?;
        Ok(vec![NodeResult { node: task, peers }])
    }

    fn merge(into: &mut Vec<NodeResult>, other: Vec<NodeResult>) {
        into.extend(other);
        into.sort_by_key(|n| n.node);
    }
}

/// Runs `t` from every host of `placement` at once.
pub fn run_group(
    t: &GroupTest,
    placement: &Placement,
    recorder: Recorder,
) -> Result<Vec<NodeResult>, BenchError> {
    t.params()?
        .validate()
        .map_err(|e| BenchError::Params(e.to_string()))?;
    if placement.hosts.is_empty() {
        return Err(BenchError::Params("no client hosts (--from)".into()));
    }
    let work = SelftestWork::new(t.clone());
    let hosts = placement.hosts.len();
    let mut team = Team::start(
        &work,
        Job::new("selftest", &t)?,
        hosts,
        &crate::storage::Api::Posix,
        placement,
        recorder,
    )?;
    let bulk = t.test.starts_with("brw");
    let per_s = if bulk { 1u64 << 20 } else { 1 };
    let expected = t.duration_ms / 1000 * per_s * hosts as u64;
    let (out, _) = team.phase(&t.test, &(), expected)?;
    Ok(out)
}

/// Text report: a row per client host and peer, then the total.
pub fn format_group(hosts: &[String], results: &[NodeResult]) -> String {
    let mut s = format!(
        "{:<20} {:<28} {:>12} {:>12} {:>10} {:>8}\n",
        "from", "to", "RPC/s", "MiB/s", "RPCs", "errors"
    );
    let (mut rpc, mut mib) = (0.0, 0.0);
    for n in results {
        for p in &n.peers {
            s += &format!(
                "{:<20} {:<28} {:>12.1} {:>12.2} {:>10} {:>8}\n",
                hosts.get(n.node).map_or("?", String::as_str),
                p.nid,
                p.rpc_per_s,
                p.mib_per_s,
                p.rpcs,
                p.errors
            );
            rpc += p.rpc_per_s;
            mib += p.mib_per_s;
        }
    }
    s += &format!("{:<20} {:<28} {rpc:>12.1} {mib:>12.2}\n", "total", "");
    s
}
