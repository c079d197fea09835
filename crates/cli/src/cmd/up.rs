//! `nacre up`: the embedded form, MGS, MDTs, OSTs and a client mount in one process.

use super::*;
use anyhow::{bail, Context};
use clap::Args;
use nacre_client::Client;
use nacre_osd::Label;
use nacre_server::daemon;
use nacre_server::process::ServerSpec;
use nacre_types::TargetKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub(crate) struct UpArgs {
    /// Directory holding the targets (created and formatted on first use).
    pub(crate) dir: PathBuf,
    /// Where to mount.
    #[arg(long)]
    pub(crate) mount: PathBuf,
    /// Number of OSTs.
    #[arg(long, default_value_t = 4)]
    pub(crate) osts: u32,
    /// Number of MDTs (MDT0 holds the root; the others take remote and striped directories).
    #[arg(long, default_value_t = 1)]
    pub(crate) mdts: u32,
    /// File system name.
    #[arg(long, default_value = "nacre")]
    pub(crate) fsname: String,
    /// Address the servers listen on for other processes' clients and tools (port 0: any
    /// free port). Without it no socket is opened: only this process's own mount reaches
    /// the servers. With it, connections must prove the file system's key (`--key`, else
    /// `KEY_DIR/FSNAME.key`, made there if missing), unless `--insecure`.
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// With --listen: serve the port without a key (any local user can then act as a
    /// client of its address; said at every start). `NACRE_INSECURE=1` sets it.
    #[arg(long, env = "NACRE_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) insecure: bool,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    #[command(flatten)]
    pub(crate) targets_opts: TargetOpts,
    /// Stay in the foreground.
    #[arg(long)]
    pub(crate) foreground: bool,
}

pub(crate) fn check_mountpoint(mnt: &Path) -> anyhow::Result<()> {
    if daemon::is_mounted(mnt) {
        bail!("{} is already a Nacre mount", mnt.display());
    }
    if !mnt.is_dir() {
        bail!("mount point {} is not a directory", mnt.display());
    }
    Ok(())
}

/// Formats what is missing under `dir` for `up`: MGS, MDTs 0..mdts, OSTs 0..osts.
pub(crate) fn format_up(
    dir: &Path,
    fsname: &str,
    mdts: u32,
    osts: u32,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut targets = Vec::new();
    let mut add = |sub: String, kind: TargetKind, index: u32| -> anyhow::Result<()> {
        let path = dir.join(sub);
        match Label::read(&path) {
            Ok(l) if l.fsname != fsname => bail!(
                "{} holds target {} of file system '{}', not '{fsname}'",
                path.display(),
                l.name(),
                l.fsname
            ),
            Ok(_) => {}
            Err(nacre_osd::LabelError::NotFormatted(_)) => {
                Label::new(kind, index, fsname, None)?.write(&path, false)?
            }
            Err(e) => return Err(e.into()),
        }
        targets.push(path);
        Ok(())
    };
    add("mgs".into(), TargetKind::Mgt, 0)?;
    // A directory formatted earlier keeps all its targets: a target is never dropped.
    let existing = |prefix: &str| {
        (0..)
            .take_while(|i| {
                dir.join(format!("{prefix}{i}"))
                    .join(nacre_osd::label::LABEL_FILE)
                    .exists()
            })
            .count() as u32
    };
    for (prefix, kind, wanted, flag) in [
        ("mdt", TargetKind::Mdt, mdts, "--mdts"),
        ("ost", TargetKind::Ost, osts, "--osts"),
    ] {
        let have = existing(prefix);
        if have > wanted {
            tracing::warn!(
                "{} holds {have} {}s; serving all of them ({flag} {wanted} ignored)",
                dir.display(),
                prefix.to_uppercase()
            );
        }
        for i in 0..wanted.max(have) {
            add(format!("{prefix}{i}"), kind, i)?;
        }
    }
    Ok(targets)
}

/// The address `nacre up`'s own clients reach its servers at when it listens on no port
/// (nothing binds it: the in-process transport only).
const IN_PROCESS_ADDR: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    0,
));

/// Makes the server key of `fsname` in the key directory if there is none there, for
/// `nacre up --listen` (its other clients on this host find it there).
fn up_key(fsname: &str) -> anyhow::Result<()> {
    if nacre_cli::keys::from_dir(fsname)?.is_some() {
        return Ok(());
    }
    let dir = nacre_cli::keys::make_key_dir()?;
    let path = nacre_net::sec::key_path(&dir, fsname);
    let key = nacre_net::sec::FsKey::generate(fsname, nacre_net::sec::Level::Bulk)?;
    key.save(&path)?;
    tracing::info!(
        "wrote the server key of {fsname} to {}: clients and tools on this host find it \
         there; make client keys from it for other hosts (`nacre keygen --from`)",
        path.display()
    );
    Ok(())
}

pub(crate) fn up(a: UpArgs) -> anyhow::Result<()> {
    if a.osts == 0 {
        bail!("--osts must be at least 1");
    }
    if a.mdts == 0 || a.mdts > nacre_types::fid::MDT_COUNT_MAX {
        bail!("--mdts must be 1..={}", nacre_types::fid::MDT_COUNT_MAX);
    }
    nacre_osd::label::check_fsname(&a.fsname)?;
    if !a.foreground {
        check_mountpoint(&a.mount)?;
        std::fs::create_dir_all(&a.dir)
            .with_context(|| format!("cannot create {}", a.dir.display()))?;
        let dir = std::fs::canonicalize(&a.dir)?;
        daemon::detach(&a.mount, &dir.join("nacre.log"), &crate::command_args())?;
        println!(
            "nacre: file system '{}' mounted at {} (data in {})",
            a.fsname,
            a.mount.display(),
            dir.display()
        );
        return Ok(());
    }
    daemon::block_stop_signals();
    init_logging();
    std::fs::create_dir_all(&a.dir)?;
    let targets = format_up(&a.dir, &a.fsname, a.mdts, a.osts)?;
    let mut spec = ServerSpec::new(a.listen.unwrap_or(IN_PROCESS_ADDR), targets);
    spec.fsname = Some(a.fsname.clone());
    match a.listen {
        None => {
            // Nothing to be insecure about (NACRE_INSECURE may be set for other commands).
            if a.insecure {
                tracing::info!("--insecure: nothing to serve keyless without --listen");
            }
            spec.in_process_only = true;
        }
        Some(_) => {
            spec.keys = super::server::server_keys(&[])?;
            if !a.insecure && spec.keys.get(&a.fsname).is_none() {
                up_key(&a.fsname)?;
            }
            super::server::find_keys(&mut spec, a.insecure)?;
        }
    }
    let (servers, _ctl) = start_servers(spec, &a.targets_opts)?;
    let (config, opts) = client_config(&a.client)?;
    let client = Client::mount(servers.nid(), &a.fsname, config)?;
    let mut sources = servers.metrics_sources();
    sources.extra.push(client_families(client.clone()));
    serve_metrics(a.targets_opts.metrics, sources)?;
    serve_mount(client, &a.mount, &opts, servers.registry())?;
    servers.shutdown();
    tracing::info!("stopped");
    Ok(())
}
