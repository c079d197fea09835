//! `nacre key`: rotate a file system's server key while its servers run (on each server
//! node, as root): `add` a new master key beside the one in use, `use` it, `retire` the old
//! one (docs/security.md, "Rotating the server key").

use anyhow::bail;
use clap::Subcommand;
use nacre_server::ctl::{ask, CtlRequest};
use nacre_server::key_admin::KEY_ANSWERED;
use std::path::PathBuf;

/// A key rotation step.
#[derive(Subcommand)]
pub(crate) enum KeyCommand {
    /// The master keys each server process of this node holds (the one in use first).
    List,
    /// Step 1 on every server: take connections proved with keys made from the new master
    /// key in FILE (and capabilities made with it) beside the key in use.
    Add {
        /// The new server key (`nacre keygen FSNAME -o FILE`).
        file: PathBuf,
    },
    /// Step 2, once every server holds it: this server's own connections and the
    /// capabilities it makes use the key in FILE.
    Use {
        /// The new server key.
        file: PathBuf,
    },
    /// Step 3, once every server uses the new key: forget master key ID (as `list` shows
    /// it): connections proved with keys made from it are dropped; their clients read
    /// their key files again.
    Retire {
        /// The file system.
        fsname: String,
        /// The master key's id (16 hex digits).
        id: String,
    },
}

pub(crate) fn key(cmd: KeyCommand, pid: Option<u32>) -> anyhow::Result<()> {
    let pattern = match &cmd {
        KeyCommand::List => "list".to_string(),
        KeyCommand::Add { file } | KeyCommand::Use { file } => {
            // The server reads the file itself (it must be root's, mode 0600).
            let file = std::fs::canonicalize(file)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let verb = if matches!(cmd, KeyCommand::Add { .. }) {
                "add"
            } else {
                "use"
            };
            format!("{verb} {}", file.display())
        }
        KeyCommand::Retire { fsname, id } => format!("retire {fsname} {id}"),
    };
    let req = CtlRequest {
        op: "key".into(),
        pattern,
        value: None,
    };
    let mut answered = 0;
    let mut failed = Vec::new();
    for (p, reply) in ask(&req, pid)? {
        if let Some(e) = reply.error {
            failed.push(format!("process {p}: {e}"));
            continue;
        }
        if !reply.params.iter().any(|(k, _)| k == KEY_ANSWERED) {
            continue;
        }
        answered += 1;
        for (k, v) in reply.params.iter().filter(|(k, _)| k != KEY_ANSWERED) {
            println!("process {p}: {k} {v}");
        }
    }
    for f in &failed {
        eprintln!("nacre: {f}");
    }
    if !failed.is_empty() {
        bail!("{} server process(es) refused", failed.len());
    }
    if answered == 0 {
        bail!("no server process of this node serves that file system with a key");
    }
    Ok(())
}
