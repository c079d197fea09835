//! `nacre policy run|status --rules FILE`: the policy engine (docs/policy.md,
//! crates/policy).

use super::changelog::client_of;
use super::*;
use anyhow::Context;
use clap::Subcommand;
use nacre_policy::run::{self, Live, RunOptions};
use nacre_policy::Config;
use nacre_server::daemon;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
    /// Keep the index current from the changelogs and apply the rules every interval
    /// (until SIGTERM or SIGINT), or once. The first run scans the file system.
    Run {
        /// The rules file (TOML).
        #[arg(long)]
        rules: PathBuf,
        /// Catch up with the changelogs, evaluate every rule once, and stop.
        #[arg(long)]
        once: bool,
        /// Print what the rules would do; do nothing.
        #[arg(long)]
        dry_run: bool,
        /// Scan the whole file system again first.
        #[arg(long)]
        rescan: bool,
        /// Serve OpenMetrics at this address (`/metrics`); overrides the rules file.
        #[arg(long)]
        metrics: Option<std::net::SocketAddr>,
        /// With --once: print what each rule did as JSON.
        #[arg(long)]
        json: bool,
    },
    /// What the engine of these rules has indexed and done (its status file).
    Status {
        /// The rules file (TOML).
        #[arg(long)]
        rules: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn policy(cmd: PolicyCommand) -> anyhow::Result<()> {
    match cmd {
        PolicyCommand::Run {
            rules,
            once,
            dry_run,
            rescan,
            metrics,
            json,
        } => {
            daemon::block_stop_signals();
            init_logging();
            let cfg = Config::load(&rules)?;
            let lock = run::lock(&cfg.state_dir)?;
            let client = client_of(&cfg.fs)?;
            let live = Arc::new(Live::default());
            if let Some(addr) = metrics.or(cfg.metrics) {
                let l = live.clone();
                let sources = nacre_server::metrics::Sources {
                    extra: vec![Arc::new(move |out: &mut String| l.render(out))],
                    ..Default::default()
                };
                let bound = nacre_server::metrics::serve(addr, sources)?;
                eprintln!("nacre: policy metrics at http://{bound}/metrics");
            }
            let stop = Arc::new(AtomicBool::new(false));
            let stopper = stop.clone();
            std::thread::spawn(move || {
                daemon::wait_stop(|| false);
                stopper.store(true, Ordering::Relaxed);
            });
            let opts = RunOptions {
                once,
                dry_run,
                rescan,
            };
            let runs = run::run(
                &lock,
                &client,
                &cfg,
                &opts,
                &live,
                &stop,
                Box::new(std::io::stdout()),
            )?;
            if once {
                if json {
                    println!("{}", serde_json::to_string_pretty(&runs)?);
                } else {
                    for r in &runs {
                        let verb = if dry_run { "would act on" } else { "acted on" };
                        let fill = r.fill.map_or(String::new(), |(b, a)| {
                            format!(", pool fill {b:.1}% -> {a:.1}%")
                        });
                        println!(
                            "rule {}: {verb} {} of {} selected ({} bytes), {} failed{fill}",
                            r.rule,
                            if dry_run { r.selected } else { r.acted },
                            r.selected,
                            r.bytes,
                            r.failed
                        );
                    }
                }
                if runs.iter().any(|r| r.failed > 0) {
                    anyhow::bail!("some actions failed (see above)");
                }
            }
            Ok(())
        }
        PolicyCommand::Status { rules, json } => {
            let cfg = Config::load(&rules)?;
            let (s, running) = run::read_status(&cfg.state_dir)
                .with_context(|| format!("rules {}", rules.display()))?;
            if json {
                let mut v = serde_json::to_value(&s)?;
                v["running"] = running.into();
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(());
            }
            println!(
                "engine: {} (pid {}), status of {}",
                if running { "running" } else { "not running" },
                s.pid,
                s.updated
            );
            let per_file = s.index_disk_bytes.checked_div(s.files).unwrap_or(0);
            println!(
                "index: {} files, {} directories, {} bytes on disk ({per_file} per file)",
                s.files, s.dirs, s.index_disk_bytes
            );
            for (pool, files, bytes) in &s.pools {
                println!("  pool {pool}: {files} files, {bytes} bytes");
            }
            for (mdt, user, next) in &s.changelogs {
                println!("changelog MDT{mdt:04x}: consumer cl{user}, next record {next}");
            }
            println!(
                "{:<20} {:<8} {:>10} {:>14} {:>9} {:>9} {:>9} {:>6}",
                "RULE", "ACTION", "FILES", "BYTES", "FAILURES", "SKIPPED", "MATCHED", "RUNS"
            );
            for (name, action, t) in &s.rules {
                println!(
                    "{:<20} {:<8} {:>10} {:>14} {:>9} {:>9} {:>9} {:>6}",
                    name, action, t.files, t.bytes, t.failures, t.skipped, t.matched_last, t.runs
                );
            }
            Ok(())
        }
    }
}
