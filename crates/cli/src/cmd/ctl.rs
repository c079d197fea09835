//! `nacre ctl`: parameters and statistics of the node's nacre processes, over their control sockets
//! (lctl's get_param/set_param/list_param).

use anyhow::{bail, Context};
use clap::Subcommand;

#[derive(Subcommand)]
pub(crate) enum CtlCommand {
    /// List parameter names (wildcards per dotted component: `osd.*.brw_stats`).
    #[command(name = "list_param")]
    List {
        /// Patterns (default: everything).
        patterns: Vec<String>,
    },
    /// Show parameter values.
    #[command(name = "get_param")]
    Get {
        /// Values only, without names.
        #[arg(short = 'n')]
        values_only: bool,
        /// Patterns.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
    /// Set parameters: `NAME=VALUE` (statistics: `=0` clears them).
    #[command(name = "set_param")]
    Set {
        /// Persistent: store through the MGS (run on the MGS node); every server applies it
        /// now and at every start.
        #[arg(short = 'P')]
        persistent: bool,
        /// Assignments.
        #[arg(required = true)]
        assignments: Vec<String>,
    },
    /// List the devices (MGS and targets) of the node's server processes, with their file
    /// systems (lctl's `dl`).
    #[command(name = "dl")]
    Devices,
}

pub(crate) fn ctl_ask(
    op: &str,
    pattern: &str,
    value: Option<&str>,
    pid: Option<u32>,
) -> anyhow::Result<Vec<(String, String)>> {
    let req = nacre_server::ctl::CtlRequest {
        op: op.into(),
        pattern: pattern.into(),
        value: value.map(str::to_string),
    };
    let mut out = Vec::new();
    let replies = nacre_server::ctl::ask(&req, pid)?;
    if let (Some(want), true) = (pid, replies.is_empty()) {
        bail!("no nacre process {want} answers on this node");
    }
    for (pid, reply) in replies {
        if let Some(e) = reply.error {
            bail!("process {pid}: {e}");
        }
        out.extend(reply.params);
    }
    out.sort();
    Ok(out)
}

pub(crate) fn ctl(c: CtlCommand, pid: Option<u32>) -> anyhow::Result<()> {
    match c {
        CtlCommand::List { patterns } => {
            let patterns = if patterns.is_empty() {
                (1..=4).map(|n| vec!["*"; n].join(".")).collect()
            } else {
                patterns
            };
            for p in patterns {
                for (name, _) in ctl_ask("list", &p, None, pid)? {
                    println!("{name}");
                }
            }
        }
        CtlCommand::Get {
            values_only,
            patterns,
        } => {
            for p in patterns {
                let found = ctl_ask("get", &p, None, pid)?;
                if found.is_empty() {
                    bail!("{p}: no such parameter on this node");
                }
                for (name, value) in found {
                    match (values_only, value.contains('\n')) {
                        (true, _) => println!("{}", value.trim_end()),
                        (false, true) => println!("{name}=\n{}", value.trim_end()),
                        (false, false) => println!("{name}={value}"),
                    }
                }
            }
        }
        CtlCommand::Devices => {
            let found = ctl_ask("get", "devices", None, pid)?;
            if found.is_empty() {
                bail!("no nacre server process runs on this node");
            }
            for (_, value) in found {
                if !value.trim().is_empty() {
                    println!("{}", value.trim_end());
                }
            }
        }
        CtlCommand::Set {
            persistent,
            assignments,
        } => {
            for a in assignments {
                let (name, value) = a
                    .split_once('=')
                    .with_context(|| format!("'{a}': expected NAME=VALUE"))?;
                if persistent {
                    if ctl_ask("set_persistent", name, Some(value), pid)?.is_empty() {
                        bail!("set_param -P: no MGS runs on this node (run it on the MGS node)");
                    }
                    println!("{name}={value} (persistent)");
                    continue;
                }
                let set = ctl_ask("set", name, Some(value), pid)?;
                if set.is_empty() {
                    bail!("{name}: no such parameter on this node");
                }
                for (n, v) in set {
                    println!("{n}={v}");
                }
            }
        }
    }
    Ok(())
}
