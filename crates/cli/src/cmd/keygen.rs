//! `nacre keygen`: a new file-system key (Lustre's `lgss_sk -w`), or a key of another role
//! made from a file system's server key (docs/security.md: roles).

use anyhow::{bail, Context};
use clap::Args;
use nacre_net::sec::{FsKey, Level, Role};
use std::path::PathBuf;

/// `nacre keygen FSNAME -o FILE [--level LEVEL]` (a new server key), or
/// `nacre keygen --from SERVER_KEY --role client|admin [--name N] [--nodemap NM] -o FILE`.
#[derive(Args)]
pub(crate) struct KeygenArgs {
    /// The file system the key is for (a new server key; with --from, the file system is
    /// the one of that key).
    pub(crate) fsname: Option<String>,
    /// Where to write it (made with mode 0600; an existing file is never overwritten).
    #[arg(short = 'o', long)]
    pub(crate) output: PathBuf,
    /// How servers protect connections: none (the handshake proves the key; frames as
    /// they are), integrity (a MAC on every message), bulk (on bulk data too) or privacy
    /// (everything encrypted, AES-256-GCM).
    #[arg(long, default_value = "bulk")]
    pub(crate) level: String,
    /// The role its holder acts as: server (MDS, OSS, MGS: a new file-system key, or with
    /// --from the same one), admin (failover, quota, QoS, mover jobs, parameters) or
    /// client (mounts and tools on client nodes).
    #[arg(long, default_value = "server")]
    pub(crate) role: String,
    /// The file system's server (or admin) key, which admin and client keys are made from.
    #[arg(long)]
    pub(crate) from: Option<PathBuf>,
    /// A client key's name (the node or group of nodes it is given to; in server logs).
    #[arg(long, default_value = "client")]
    pub(crate) name: String,
    /// The nodemap a client key is bound to: its holder is held to that nodemap, and
    /// refused from addresses another nodemap names (default: its address decides).
    #[arg(long)]
    pub(crate) nodemap: Option<String>,
}

pub(crate) fn keygen(a: KeygenArgs) -> anyhow::Result<()> {
    let role = Role::parse(&a.role)
        .ok_or_else(|| anyhow::anyhow!("--role {}: expected client, server or admin", a.role))?;
    let key = match &a.from {
        Some(from) => {
            let master = FsKey::load(from).with_context(|| format!("--from {}", from.display()))?;
            if let Some(fs) = a.fsname.as_deref().filter(|fs| *fs != master.fsname()) {
                bail!(
                    "--from {} is a key of {}, not of {fs}",
                    from.display(),
                    master.fsname()
                );
            }
            match role {
                Role::Client => master.client_key(&a.name, a.nodemap.as_deref())?,
                _ => master.as_role(role).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--from {} is a client key: {role} keys are made from the file \
                         system's server key",
                        from.display()
                    )
                })?,
            }
        }
        None => {
            let Some(fsname) = &a.fsname else {
                bail!("name the file system (a new server key), or give --from SERVER_KEY");
            };
            if role != Role::Server {
                bail!(
                    "a {role} key is made from the file system's server key: \
                     nacre keygen --from SERVER_KEY --role {role} -o FILE"
                );
            }
            let level = Level::parse(&a.level).ok_or_else(|| {
                anyhow::anyhow!(
                    "--level {}: expected none, integrity, bulk or privacy",
                    a.level
                )
            })?;
            FsKey::generate(fsname, level)?
        }
    };
    if role != Role::Client && a.nodemap.is_some() {
        bail!("--nodemap binds a client key; a {role} key is never mapped");
    }
    // Key file format 1, no `format` line (`nacre_net::sec::KEY_FILE_FORMAT`): keys made
    // here are read by older nacres too, as long as no line is added that they lack.
    key.save(&a.output)?;
    let give = match role {
        Role::Server => {
            "give it to its servers (and keep it from clients: it makes every other key)"
        }
        Role::Admin => "give it to administrators' hosts only",
        Role::Client => "give it to its client nodes",
    };
    println!(
        "wrote the {role} key of {} (level {}, master key {}) to {}: {give}, with --key \
         (readable by root only)",
        key.fsname(),
        key.level(),
        key.master_id()
            .map_or("unnamed".to_string(), |m| m.to_string()),
        a.output.display()
    );
    Ok(())
}
