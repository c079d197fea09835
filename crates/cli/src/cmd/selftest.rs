//! `nacre selftest`: the network alone (Lustre's lnet_selftest): ping and bulk RPCs against
//! servers.

use anyhow::bail;
use clap::Args;
use nacre_cli::size::parse_size;
use nacre_net::NetConfig;
use nacre_types::Nid;

#[derive(Args)]
pub(crate) struct SelftestArgs {
    /// Peers (server NIDs, comma separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) to: Vec<String>,
    /// ping (network layer), null (empty RPC through a service thread), brw_write or
    /// brw_read.
    #[arg(long, default_value = "brw_write")]
    pub(crate) test: String,
    /// Bulk bytes per RPC (K/M).
    #[arg(long, default_value = "1M")]
    pub(crate) size: String,
    /// RPCs in flight per peer (per client host).
    #[arg(long, default_value_t = 8)]
    pub(crate) concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) duration: f64,
    /// Checksum bulk data (crc32c), as file I/O does by default.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) checksum: bool,
    /// Use every NID the peers report (multi-rail); false: only the NIDs given.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) discovery: bool,
    /// Client group: hosts to run the test from at once (comma separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) from: Vec<String>,
    /// Command prefix that runs a command on {host}.
    #[arg(long, default_value = "ssh {host}")]
    pub(crate) launcher: String,
    /// Address of this machine the client hosts' workers connect back to.
    #[arg(long)]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No live progress line.
    #[arg(short = 'q')]
    pub(crate) quiet: bool,
}

pub(crate) fn selftest(a: SelftestArgs) -> anyhow::Result<()> {
    use nacre_net::selftest::{format_report, run, SelftestParams};
    use std::io::{IsTerminal, Write};
    let size = u32::try_from(parse_size(&a.size).map_err(anyhow::Error::msg)?)
        .map_err(|_| anyhow::anyhow!("size too large"))?;
    if !(0.1..=86_400.0).contains(&a.duration) {
        bail!("duration must be 0.1..=86400 seconds");
    }
    let live = !a.quiet && !a.json && std::io::stderr().is_terminal();
    if !a.from.is_empty() {
        let t = nacre_bench::selftest::GroupTest {
            peers: a.to.clone(),
            test: a.test.clone(),
            size,
            concurrency: a.concurrency,
            duration_ms: (a.duration * 1000.0) as u64,
            checksum: a.checksum,
            discovery: a.discovery,
        };
        let placement = nacre_bench::team::Placement {
            hosts: a.from.clone(),
            launcher: a.launcher.clone(),
            listen: a.listen,
            connect_timeout_ms: 30_000,
        };
        let bulk = a.test.starts_with("brw");
        let recorder = nacre_bench::team::Recorder::new(
            live,
            if bulk { "MiB" } else { "RPC" },
            if bulk { (1u64 << 20) as f64 } else { 1.0 },
        );
        let results = nacre_bench::selftest::run_group(&t, &placement, recorder)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&results)?);
        } else {
            print!("{}", nacre_bench::selftest::format_group(&a.from, &results));
        }
        if results.iter().flat_map(|n| &n.peers).any(|p| p.rpcs == 0) {
            bail!("a client host completed no RPCs to a peer");
        }
        return Ok(());
    }
    let peers =
        a.to.iter()
            .map(|t| {
                t.parse::<Nid>()
                    .map_err(|e| anyhow::anyhow!("bad NID '{t}': {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
    let params = SelftestParams {
        peers,
        kind: a.test.parse().map_err(anyhow::Error::msg)?,
        size,
        concurrency: a.concurrency,
        duration: std::time::Duration::from_secs_f64(a.duration),
        net: NetConfig {
            bulk_checksum: a.checksum,
            discovery: a.discovery,
            ..NetConfig::default()
        },
    };
    let results = run(&params, |rpcs, bytes, secs| {
        if live {
            eprint!(
                "\r{:.0} s: {:.1} RPC/s, {:.2} MiB/s   ",
                secs,
                rpcs as f64 / secs,
                bytes as f64 / (1 << 20) as f64 / secs
            );
            let _ = std::io::stderr().flush();
        }
    })?;
    if live {
        eprintln!();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", format_report(&params, &results));
    }
    if results.iter().any(|r| r.rpcs == 0) {
        bail!("a peer completed no RPCs");
    }
    Ok(())
}
