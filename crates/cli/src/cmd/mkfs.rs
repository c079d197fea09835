//! `nacre mkfs`: formats an MGS, MDT or OST directory.

use anyhow::bail;
use clap::Args;
use nacre_net::sec::{FsKey, Level, Role};
use nacre_osd::Label;
use nacre_types::{Nid, TargetKind};
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct MkfsArgs {
    /// Format a management target.
    #[arg(long, group = "kind")]
    pub(crate) mgs: bool,
    /// Format a metadata target.
    #[arg(long, group = "kind")]
    pub(crate) mdt: bool,
    /// Format an object storage target.
    #[arg(long, group = "kind")]
    pub(crate) ost: bool,
    /// Target index.
    #[arg(long, default_value_t = 0)]
    pub(crate) index: u32,
    /// File system name.
    #[arg(long)]
    pub(crate) fsname: String,
    /// MGS NID (e.g. 10.0.0.1@tcp).
    #[arg(long)]
    pub(crate) mgsnode: Option<Nid>,
    /// A server that may serve this target (repeat for each server of its failover pair,
    /// as Lustre's `--servicenode`); enables multi-mount protection.
    #[arg(long = "servicenode")]
    pub(crate) servicenodes: Vec<Nid>,
    /// Overwrite an existing label.
    #[arg(long)]
    pub(crate) reformat: bool,
    /// With --mgs: make no keys (servers then need `--insecure`: any process that reaches
    /// a server's port acts as a client of its address, or as a server from a server's).
    /// `NACRE_INSECURE=1` sets it.
    #[arg(long, env = "NACRE_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) no_key: bool,
    /// With --mgs: the level of the keys made (none, integrity, bulk, privacy).
    #[arg(long, default_value = "bulk")]
    pub(crate) level: String,
    /// Target directory.
    pub(crate) dir: PathBuf,
}

pub(crate) fn mkfs(a: MkfsArgs) -> anyhow::Result<()> {
    let kind = match (a.mgs, a.mdt, a.ost) {
        (true, _, _) => TargetKind::Mgt,
        (_, true, _) => TargetKind::Mdt,
        (_, _, true) => TargetKind::Ost,
        _ => bail!("give one of --mgs, --mdt, --ost"),
    };
    if kind != TargetKind::Mgt && a.mgsnode.is_none() {
        bail!("--mgsnode is required for an {}", kind.as_str());
    }
    if kind == TargetKind::Mgt && !a.no_key {
        // Before anything is formatted: keys left from another server key stop it here.
        check_kept_keys(&a.fsname)?;
    }
    let mut label = Label::new(kind, a.index, &a.fsname, a.mgsnode)?;
    if !a.servicenodes.is_empty() {
        if kind == TargetKind::Mgt {
            bail!("--servicenode: an MGS target does not fail over");
        }
        if a.servicenodes.len() > nacre_osd::label::SERVICENODES_MAX {
            bail!(
                "at most {} --servicenode",
                nacre_osd::label::SERVICENODES_MAX
            );
        }
        label.servicenodes = a.servicenodes.clone();
    }
    // Asked on the command line of another target: a mistake worth saying. Set by
    // `NACRE_INSECURE` (meant for every command, as the bench scripts export it): nothing
    // to do for a target that makes no keys.
    if a.no_key && kind != TargetKind::Mgt && std::env::args().any(|x| x == "--no-key") {
        bail!("--no-key: keys are made with the MGS (`nacre mkfs --mgs`)");
    }
    let level = Level::parse(&a.level).ok_or_else(|| {
        anyhow::anyhow!(
            "--level {}: expected none, integrity, bulk or privacy",
            a.level
        )
    })?;
    label.write(&a.dir, a.reformat)?;
    println!(
        "formatted {} (uuid {}) in {}",
        label.name(),
        label.uuid,
        a.dir.display()
    );
    if kind == TargetKind::Mgt && !a.no_key {
        make_keys(&a.fsname, level)?;
    }
    Ok(())
}

/// Refuses admin and client keys in the key directory made from another server key than
/// the one there (or, with none there, from any: a new one is made): one left from an
/// earlier server key proves nothing to these servers.
fn check_kept_keys(fsname: &str) -> anyhow::Result<()> {
    let dir = nacre_cli::keys::key_dir();
    let server = nacre_cli::keys::from_dir(fsname)?.and_then(|k| k.master_id());
    for role in ["admin", "client"] {
        let path = dir.join(format!("{fsname}-{role}.key"));
        if !path.exists() {
            continue;
        }
        let Some(kept) = FsKey::load(&path)?.master_id() else {
            continue;
        };
        if server != Some(kept) {
            bail!(
                "{} was made from another server key (master {kept}; {}): remove it for a \
                 new one, or put back the server key it was made from",
                path.display(),
                match server {
                    Some(s) => format!("the server key of {fsname} there is master {s}"),
                    None => format!("no server key of {fsname} is there"),
                }
            );
        }
    }
    Ok(())
}

/// The keys of a new file system, in the key directory: the server key `FSNAME.key` (kept
/// if there: keys already given out stay good), an admin key `FSNAME-admin.key` and a first
/// client key `FSNAME-client.key` made from it. Written by `FsKey::save` in key file format
/// 1, with no `format` line (`nacre_net::sec::KEY_FILE_FORMAT`: the line comes only with a
/// line older readers lack), so older nacres on clients read them.
fn make_keys(fsname: &str, level: Level) -> anyhow::Result<()> {
    let dir = nacre_cli::keys::make_key_dir()?;
    let server_path = nacre_net::sec::key_path(&dir, fsname);
    let server = match nacre_cli::keys::from_dir(fsname)? {
        Some(k) if k.is_master() => {
            println!(
                "kept the server key of {fsname} in {}",
                server_path.display()
            );
            k
        }
        Some(_) => bail!(
            "{} is a client key: the MGS host needs the server key of {fsname} there",
            server_path.display()
        ),
        None => {
            let k = FsKey::generate(fsname, level)?;
            k.save(&server_path)?;
            println!(
                "wrote the server key of {fsname} (level {level}) to {}: copy it to \
                 every server's {}",
                server_path.display(),
                server_path.display()
            );
            k
        }
    };
    let others = [
        (
            "admin",
            server.as_role(Role::Admin),
            "administrators' hosts",
        ),
        (
            "client",
            Some(server.client_key("client", None)?),
            "client nodes, as FSNAME.key there",
        ),
    ];
    for (role, key, whom) in others {
        let key = key.expect("a server key makes admin keys");
        let path = dir.join(format!("{fsname}-{role}.key"));
        if path.exists() {
            println!("kept {}", path.display());
            continue;
        }
        key.save(&path)?;
        println!(
            "wrote the {role} key of {fsname} to {}: give it to {}",
            path.display(),
            whom.replace("FSNAME", fsname)
        );
    }
    Ok(())
}
