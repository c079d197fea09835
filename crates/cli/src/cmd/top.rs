//! `nacre top`: the busiest jobs, clients and targets, live (like `lltop`).

use nacre_cli::top::{run, TopOptions};
use std::io::IsTerminal;

/// Runs `nacre top`; `interval` in seconds (0.1 to 3600).
pub(crate) fn top(
    servers: Vec<String>,
    interval: f64,
    count: Option<u32>,
    rows: usize,
    fsname: Option<String>,
    batch: bool,
) -> anyhow::Result<()> {
    if !(0.1..=3600.0).contains(&interval) {
        anyhow::bail!("interval must be 0.1..=3600 seconds");
    }
    run(&TopOptions {
        servers,
        interval: std::time::Duration::from_secs_f64(interval),
        count,
        rows,
        fsname,
        batch: batch || !std::io::stdout().is_terminal(),
    })
}
