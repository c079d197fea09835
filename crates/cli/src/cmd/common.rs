//! Helpers every command shares: logging, mount sources.

use anyhow::Context;
use nacre_types::Nid;

pub(crate) fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lsm_tree=warn,fjall=warn"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

pub(crate) fn parse_source(s: &str) -> anyhow::Result<(Nid, String)> {
    let (nid, fs) = s.rsplit_once(":/").with_context(|| {
        format!("bad source '{s}': expected MGS_NID:/FSNAME (e.g. 10.0.0.1@tcp:/demo)")
    })?;
    Ok((nid.parse()?, fs.to_string()))
}
