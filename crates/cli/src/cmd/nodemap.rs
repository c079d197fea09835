//! `nacre nodemap`: client address ranges mapped to a policy (Lustre's `lctl nodemap_*`):
//! root squash, uid/gid offset and mapping, read-only, the security level. Kept by the MGS
//! (run on the MGS node, as `lctl nodemap_*` are); every server enforces a change within a
//! second (docs/security.md).

use anyhow::bail;
use clap::Subcommand;
use nacre_server::nodemap_admin::NODEMAP_ANSWERED;

#[derive(Subcommand)]
pub(crate) enum NodemapCommand {
    /// Make a nodemap (it applies to no client until it has a range).
    Add {
        /// Name.
        name: String,
    },
    /// Remove a nodemap: its clients are treated as unmapped again.
    Del {
        /// Name.
        name: String,
    },
    /// Add client addresses: `10.0.0.5`, `10.0.0.5-10.0.0.9`, `10.0.0.0/24`.
    #[command(name = "add_range")]
    AddRange {
        /// Nodemap.
        #[arg(long)]
        name: String,
        /// Addresses.
        #[arg(long)]
        range: String,
    },
    /// Remove client addresses (as added).
    #[command(name = "del_range")]
    DelRange {
        /// Nodemap.
        #[arg(long)]
        name: String,
        /// Addresses.
        #[arg(long)]
        range: String,
    },
    /// Set a property: admin (root stays root), trusted (ids as sent), readonly (0/1);
    /// squash_uid, squash_gid, offset (numbers); level (none, integrity, bulk, privacy,
    /// default); fileset (a subtree, /projects/a, as its clients' whole file system; /
    /// for all of it).
    Modify {
        /// Nodemap.
        #[arg(long)]
        name: String,
        /// Property.
        #[arg(long)]
        property: String,
        /// Value.
        #[arg(long)]
        value: String,
    },
    /// Map a client id to a file-system id: `--idtype uid --idmap 500:7000`.
    #[command(name = "add_idmap")]
    AddIdmap {
        /// Nodemap.
        #[arg(long)]
        name: String,
        /// uid or gid.
        #[arg(long)]
        idtype: String,
        /// CLIENT:FS.
        #[arg(long)]
        idmap: String,
    },
    /// Revoke a client key (`nacre keygen --role client --name NAME [--nodemap NM]`):
    /// every server refuses its handshakes and drops its connections within a second;
    /// other keys go on. Give its holders a key of another name.
    #[command(name = "revoke_key")]
    RevokeKey(KeyRef),
    /// Take a revocation back.
    #[command(name = "unrevoke_key")]
    UnrevokeKey(KeyRef),
    /// Remove an id mapping.
    #[command(name = "del_idmap")]
    DelIdmap {
        /// Nodemap.
        #[arg(long)]
        name: String,
        /// uid or gid.
        #[arg(long)]
        idtype: String,
        /// CLIENT:FS.
        #[arg(long)]
        idmap: String,
    },
    /// Show the nodemaps (or one).
    List {
        /// Nodemap.
        name: Option<String>,
    },
}

/// Asks the nodemap operation of the MGS process `pid`, or of the one MGS process of this
/// node (several: the caller must choose, before anything changes).
fn ask(
    verb: &str,
    name: &str,
    arg: &str,
    pid: Option<u32>,
) -> anyhow::Result<Vec<(String, String)>> {
    let req = |op: &str, pattern: String, value: &str| nacre_server::ctl::CtlRequest {
        op: op.into(),
        pattern,
        value: Some(value.to_string()),
    };
    let pid = match pid {
        Some(p) => p,
        None => {
            let mgs: Vec<u32> = nacre_server::ctl::ask(&req("nodemap", "list".into(), ""), None)?
                .into_iter()
                .filter(|(_, r)| r.params.iter().any(|(k, _)| k == NODEMAP_ANSWERED))
                .map(|(p, _)| p)
                .collect();
            match mgs.as_slice() {
                [] => bail!("no MGS runs on this node (run nacre nodemap on the MGS node)"),
                [one] => *one,
                many => bail!(
                    "{} MGS processes run on this node (pids {many:?}): choose one with --pid",
                    many.len()
                ),
            }
        }
    };
    let request = format!("{verb} {name}");
    let replies =
        nacre_server::ctl::ask(&req("nodemap", request.trim_end().into(), arg), Some(pid))?;
    let Some((_, reply)) = replies.into_iter().next() else {
        bail!("no nacre process {pid} answers on this node");
    };
    if let Some(e) = reply.error {
        bail!("{e}");
    }
    if !reply.params.iter().any(|(k, _)| k == NODEMAP_ANSWERED) {
        bail!("process {pid} runs no MGS");
    }
    Ok(reply
        .params
        .into_iter()
        .filter(|(k, _)| k != NODEMAP_ANSWERED)
        .collect())
}

/// A client key, as `revoke_key` and `unrevoke_key` name it.
#[derive(clap::Args)]
pub(crate) struct KeyRef {
    /// The file system of the key.
    #[arg(long)]
    fsname: String,
    /// The key's name.
    #[arg(long = "key-name")]
    key_name: String,
    /// The nodemap the key is bound to, if it is.
    #[arg(long)]
    nodemap: Option<String>,
}

impl KeyRef {
    /// The key as the MGS names it: `FSNAME:NAME[@NODEMAP]`.
    fn arg(&self) -> String {
        match &self.nodemap {
            Some(m) => format!("{}:{}@{m}", self.fsname, self.key_name),
            None => format!("{}:{}", self.fsname, self.key_name),
        }
    }
}

pub(crate) fn nodemap(cmd: NodemapCommand, pid: Option<u32>) -> anyhow::Result<()> {
    let (verb, name, arg) = match cmd {
        NodemapCommand::Add { name } => ("add", name, String::new()),
        NodemapCommand::Del { name } => ("del", name, String::new()),
        NodemapCommand::AddRange { name, range } => ("add_range", name, range),
        NodemapCommand::DelRange { name, range } => ("del_range", name, range),
        NodemapCommand::Modify {
            name,
            property,
            value,
        } => ("modify", name, format!("{property}={value}")),
        NodemapCommand::AddIdmap {
            name,
            idtype,
            idmap,
        } => ("add_idmap", name, format!("{idtype}:{idmap}")),
        NodemapCommand::DelIdmap {
            name,
            idtype,
            idmap,
        } => ("del_idmap", name, format!("{idtype}:{idmap}")),
        NodemapCommand::List { name } => ("list", name.unwrap_or_default(), String::new()),
        NodemapCommand::RevokeKey(k) => ("revoke_key", String::new(), k.arg()),
        NodemapCommand::UnrevokeKey(k) => ("unrevoke_key", String::new(), k.arg()),
    };
    let answers = ask(verb, &name, &arg, pid)?;
    match verb {
        "list" => {
            for (n, d) in &answers {
                println!("{n}: {d}");
            }
        }
        "del" => println!("{name}: removed"),
        "revoke_key" => println!("revoked {arg}: servers refuse it within a second"),
        "unrevoke_key" => println!("{arg} is no longer revoked"),
        _ => {
            for (n, d) in answers.iter().filter(|(n, _)| *n == name) {
                println!("{n}: {d}");
            }
        }
    }
    Ok(())
}
