//! `nacre server`: a server process for the targets given, and the target options `up` shares.

use super::*;
use anyhow::{bail, Context};
use clap::Args;
use nacre_osd::Label;
use nacre_server::daemon;
use nacre_server::process::{ServerProcess, ServerSpec};
use nacre_types::Nid;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone)]
pub(crate) struct TargetOpts {
    /// MDT replies wait for the journal sync (power-loss safe without fsync; slower).
    #[arg(long)]
    pub(crate) mdt_sync_on_reply: bool,
    /// Background journal sync period of MDTs, in ms.
    #[arg(long, default_value_t = nacre_server::process::COMMIT_INTERVAL_MS_DEFAULT)]
    pub(crate) commit_interval_ms: u64,
    /// OSTs bypass the page cache (O_DIRECT) for aligned I/O.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) ost_direct_io: bool,
    /// Serve OpenMetrics at http://ADDR/metrics.
    #[arg(long)]
    pub(crate) metrics: Option<SocketAddr>,
    /// CPU partitions (Lustre's cpu_npartitions; 0: automatic from NUMA nodes and cores).
    #[arg(long, default_value_t = 0)]
    pub(crate) cpu_npartitions: usize,
    /// Lustre's cpu_pattern, e.g. "0[0-3] 1[4-7]" or the NUMA form "N 0[0] 1[1]".
    #[arg(long)]
    pub(crate) cpu_pattern: Option<String>,
    /// Partitions the OSS services run on, e.g. "[0,1]" (Lustre's oss_cpts).
    #[arg(long)]
    pub(crate) oss_cpts: Option<String>,
    /// Partitions the OSS I/O service ost_io runs on (Lustre's oss_io_cpts; default: oss_cpts).
    #[arg(long)]
    pub(crate) oss_io_cpts: Option<String>,
    /// Partitions the MDS services run on, e.g. "[0]".
    #[arg(long)]
    pub(crate) mds_cpts: Option<String>,
    /// Partitions the MDS readpage service runs on (Lustre's mds_rdpg_num_cpts style;
    /// default: mds_cpts).
    #[arg(long)]
    pub(crate) mds_rdpg_cpts: Option<String>,
    /// OSS threads started per partition.
    #[arg(long, default_value_t = nacre_server::process::OSS_THREADS_MIN_DEFAULT)]
    pub(crate) oss_threads_min: usize,
    /// Most OSS threads per partition.
    #[arg(long, default_value_t = nacre_server::process::OSS_THREADS_MAX_DEFAULT)]
    pub(crate) oss_threads_max: usize,
    /// MDS threads started per partition.
    #[arg(long, default_value_t = nacre_server::process::MDS_THREADS_MIN_DEFAULT)]
    pub(crate) mds_threads_min: usize,
    /// Most MDS threads per partition.
    #[arg(long, default_value_t = nacre_server::process::MDS_THREADS_MAX_DEFAULT)]
    pub(crate) mds_threads_max: usize,
    /// Interfaces and their partitions, e.g. "tcp0(eth0)[0],tcp1(eth1)[1]"; the server
    /// listens on each interface's address at the --listen port.
    #[arg(long)]
    pub(crate) networks: Option<String>,
    /// How requests spread over a service's partitions: off (the interface's), on
    /// (round-robin), hash (by object/FID).
    #[arg(long, default_value = "off")]
    pub(crate) portal_rotor: String,
    /// Network threads reading every connection (0: one per CPU partition).
    #[arg(long, default_value_t = 0)]
    pub(crate) net_threads: usize,
    /// Open connections at most; past it a connection is refused and logged.
    #[arg(long, default_value_t = nacre_net::reactor::CONNS_MAX_DEFAULT)]
    pub(crate) conns_max: usize,
    /// A request frame must arrive whole within this many ms of its first byte.
    #[arg(long, default_value_t = nacre_net::reactor::FRAME_TIMEOUT_MS_DEFAULT)]
    pub(crate) frame_timeout_ms: u64,
    /// Bytes of request frames being received at once (bodies and bulk), e.g. 512M.
    #[arg(long, default_value = "512M")]
    pub(crate) bulk_budget: String,
    /// A reply a client does not take within this many ms drops its connection.
    #[arg(long, default_value_t = nacre_net::reactor::REPLY_TIMEOUT_MS_DEFAULT)]
    pub(crate) reply_timeout_ms: u64,
}

impl TargetOpts {
    /// Applies a config-file key; false if the key is not one of these options.
    fn set(&mut self, key: &str, v: &str) -> anyhow::Result<bool> {
        let num = |v: &str| -> anyhow::Result<usize> {
            v.parse().with_context(|| format!("'{v}' is not a number"))
        };
        match key {
            "cpu_npartitions" => self.cpu_npartitions = num(v)?,
            "cpu_pattern" => self.cpu_pattern = Some(v.trim_matches('"').to_string()),
            "oss_cpts" => self.oss_cpts = Some(v.to_string()),
            "mds_cpts" => self.mds_cpts = Some(v.to_string()),
            "oss_io_cpts" => self.oss_io_cpts = Some(v.to_string()),
            "mds_rdpg_cpts" => self.mds_rdpg_cpts = Some(v.to_string()),
            "oss_threads_min" => self.oss_threads_min = num(v)?,
            "oss_threads_max" => self.oss_threads_max = num(v)?,
            "mds_threads_min" => self.mds_threads_min = num(v)?,
            "mds_threads_max" => self.mds_threads_max = num(v)?,
            "networks" => self.networks = Some(v.trim_matches('"').to_string()),
            "portal_rotor" => self.portal_rotor = v.to_string(),
            "metrics" => self.metrics = Some(v.parse()?),
            "net_threads" => self.net_threads = num(v)?,
            "conns_max" => self.conns_max = num(v)?,
            "frame_timeout_ms" => self.frame_timeout_ms = num(v)? as u64,
            "bulk_budget" => self.bulk_budget = v.to_string(),
            "reply_timeout_ms" => self.reply_timeout_ms = num(v)? as u64,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Parses a partition list like Lustre's `oss_cpts="[0,1]"` (brackets optional).
pub(crate) fn parse_cpts(name: &str, v: &Option<String>) -> anyhow::Result<Option<Vec<usize>>> {
    let Some(v) = v else { return Ok(None) };
    let inner = v
        .trim()
        .trim_matches('"')
        .trim_start_matches('[')
        .trim_end_matches(']');
    nacre_cpt::parse_cpu_list(inner)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{name}={v}: {e}"))
}

#[derive(Args)]
pub(crate) struct ServerArgs {
    /// Config file (`key = value` lines: listen, nid, target, mgsnode, fsname, mover,
    /// mover_jobs, mover_bandwidth, and the
    /// server options by their Lustre names: cpu_npartitions, cpu_pattern, oss_cpts, mds_cpts,
    /// {oss,mds}_threads_{min,max}, networks, portal_rotor, metrics).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// NID to advertise (default: the listen address).
    #[arg(long)]
    pub(crate) nid: Option<Nid>,
    /// Formatted target directory (repeatable).
    #[arg(long = "target")]
    pub(crate) targets: Vec<PathBuf>,
    /// A target of a failover pair to stand by for: its partner serves it; this server
    /// takes it over on `nacre failover`, or by itself with `--failover auto` (repeatable).
    #[arg(long = "standby")]
    pub(crate) standby: Vec<PathBuf>,
    /// `auto`: take a standby target over when its server dies (its protection record stops
    /// moving); `manual`: only on `nacre failover`.
    #[arg(long, default_value = "manual", value_parser = ["manual", "auto"])]
    pub(crate) failover: String,
    /// Multi-mount protection update interval of failover targets (a takeover waits
    /// 2 x this + 1 s for a record that looks alive).
    #[arg(long, default_value_t = nacre_osd::mmp::MMP_INTERVAL_MS_DEFAULT)]
    pub(crate) mmp_interval_ms: u64,
    /// MGS NID (overrides the labels).
    #[arg(long)]
    pub(crate) mgsnode: Option<Nid>,
    /// Refuse targets of other file systems (with `--mover` and no targets: the file
    /// system the mover works on).
    #[arg(long)]
    pub(crate) fsname: Option<String>,
    /// Run the data mover role (docs/stage.md), its queue kept in this directory:
    /// `nacre stage` requests are served here and run with online migration.
    #[arg(long)]
    pub(crate) mover: Option<PathBuf>,
    /// Files the data mover moves at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) mover_jobs: usize,
    /// Bytes per second the data mover moves at most (`500M`; 0: no limit).
    #[arg(long, default_value = "0")]
    pub(crate) mover_bandwidth: String,
    /// Serve without a key when none is given or found in the key directory
    /// (`DIR/FSNAME.key`): who a peer is then comes from its address alone, and any process
    /// that reaches the port acts as a client (said at every start). Without it, a server
    /// with no key refuses to start. `NACRE_INSECURE=1` sets it.
    #[arg(long, env = "NACRE_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) insecure: bool,
    #[command(flatten)]
    pub(crate) targets_opts: TargetOpts,
}

/// Starts the servers of `spec` with the target options, their control socket and (if asked)
/// their metrics endpoint.
pub(crate) fn start_servers(
    mut spec: ServerSpec,
    t: &TargetOpts,
) -> anyhow::Result<(ServerProcess, nacre_server::ctl::CtlServer)> {
    spec.mdt_sync_on_reply = t.mdt_sync_on_reply;
    spec.commit_interval_ms = t.commit_interval_ms;
    spec.ost_direct_io = t.ost_direct_io;
    spec.cpu_npartitions = t.cpu_npartitions;
    spec.cpu_pattern = t.cpu_pattern.clone();
    spec.oss_cpts = parse_cpts("oss_cpts", &t.oss_cpts)?;
    spec.mds_cpts = parse_cpts("mds_cpts", &t.mds_cpts)?;
    spec.oss_io_cpts = parse_cpts("oss_io_cpts", &t.oss_io_cpts)?;
    spec.mds_rdpg_cpts = parse_cpts("mds_rdpg_cpts", &t.mds_rdpg_cpts)?;
    spec.oss_threads = (t.oss_threads_min, t.oss_threads_max);
    spec.mds_threads = (t.mds_threads_min, t.mds_threads_max);
    spec.networks = t.networks.clone();
    spec.net_limits = nacre_net::NetLimits {
        threads: t.net_threads,
        conns_max: t.conns_max.max(1),
        frame_timeout_ms: t.frame_timeout_ms.clamp(100, 3_600_000),
        bulk_budget_bytes: nacre_cli::size::parse_size(&t.bulk_budget)
            .map_err(|e| anyhow::anyhow!("bulk_budget: {e}"))?,
        reply_timeout_ms: t.reply_timeout_ms.clamp(100, 3_600_000),
    };
    spec.portal_rotor = t.portal_rotor.parse().map_err(anyhow::Error::msg)?;
    let servers = ServerProcess::start(spec)?;
    let sources = servers.metrics_sources();
    let ctl = nacre_server::ctl::serve(nacre_server::ctl::CtlSources {
        registry: servers.registry().clone(),
        persist: servers.persist_fn(),
        pools: servers.pool_fn(),
        nodemaps: servers.nodemap_fn(),
        metrics: Some(Arc::new(move || nacre_server::metrics::render(&sources))),
    })?;
    Ok((servers, ctl))
}

/// Serves `/metrics` at `addr`, if given.
pub(crate) fn serve_metrics(
    addr: Option<SocketAddr>,
    sources: nacre_server::metrics::Sources,
) -> anyhow::Result<()> {
    if let Some(addr) = addr {
        let bound = nacre_server::metrics::serve(addr, sources)?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    Ok(())
}

/// The keys a server requires: those given with `--key` and the config file's `key =`
/// lines, each a server (or admin) key, which holds the file system's master secret; the
/// first becomes the key of its own connections to other servers, which prove the server
/// role.
pub(crate) fn server_keys(config_keys: &[PathBuf]) -> anyhow::Result<nacre_net::sec::ServerKeys> {
    use nacre_net::sec::Role;
    let mut keys = nacre_net::sec::ServerKeys::default();
    let given = config_keys
        .iter()
        .map(|p| nacre_net::sec::FsKey::load(p).map(|k| (p.display().to_string(), Some(k))))
        .collect::<Result<Vec<_>, _>>()?;
    let from_flags = nacre_cli::keys::all()
        .into_iter()
        .map(|k| ("--key".to_string(), Some((*k).clone())));
    let mut paths = config_keys.iter();
    for (from, k) in given.into_iter().chain(from_flags) {
        let path = paths.next();
        let Some(k) = k else { continue };
        let Some(as_server) = k.as_role(Role::Server) else {
            anyhow::bail!(
                "{from}: a client key of {} cannot serve its targets: give the server its \
                 file system's server key (`nacre keygen --role server`)",
                k.fsname()
            );
        };
        match path {
            // Read again from there if the servers retire it (a key rotation).
            Some(p) => nacre_net::sec::add_key_from(as_server.clone(), p),
            None => nacre_net::sec::add_key(as_server.clone()),
        }
        keys.add(as_server)?;
    }
    Ok(keys)
}

/// The file systems `spec` serves: its targets' and standby targets' (their labels), and
/// `--fsname`'s.
fn served_fsnames(spec: &ServerSpec) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = spec.fsname.iter().cloned().collect();
    for dir in spec.targets.iter().chain(&spec.standby) {
        let label = Label::read(dir).with_context(|| format!("cannot serve {}", dir.display()))?;
        if !names.contains(&label.fsname) {
            names.push(label.fsname);
        }
    }
    Ok(names)
}

/// Completes the server's keys from the key directory (`DIR/FSNAME.key` of each file
/// system served and given no key): a file system still without one refuses the start,
/// unless `insecure`, which serves it keyless and says so at every start.
pub(crate) fn find_keys(spec: &mut ServerSpec, insecure: bool) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    for fs in served_fsnames(spec)? {
        if spec.keys.get(&fs).is_some() {
            continue;
        }
        if !insecure {
            if let Some(k) = nacre_cli::keys::from_dir(&fs)? {
                anyhow::ensure!(
                    k.is_master(),
                    "{}: a client key of {fs} cannot serve its targets: put the file \
                     system's server key there (`nacre mkfs --mgs` made it)",
                    nacre_net::sec::key_path(&nacre_cli::keys::key_dir(), &fs).display()
                );
                // Its own connections prove the server role (an admin key there would
                // make them an administrator's, refused what servers ask).
                let k = k
                    .as_role(nacre_net::sec::Role::Server)
                    .expect("a master key takes any role");
                let path = nacre_net::sec::key_path(&nacre_cli::keys::key_dir(), &fs);
                nacre_net::sec::add_key_from(k.clone(), &path);
                spec.keys.add(k)?;
                continue;
            }
        }
        missing.push(fs);
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !insecure {
        let dir = nacre_cli::keys::key_dir();
        bail!(
            "no key of {} (looked for {}): copy the server key `nacre mkfs --mgs` made to \
             that path, give --key FILE, or start with --insecure to serve without a key \
             (any process that reaches this server's port then acts as a client, or as a \
             server from a server's address; docs/security.md)",
            missing.join(", "),
            missing
                .iter()
                .map(|fs| nacre_net::sec::key_path(&dir, fs).display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // Said at every start: without a key, who a peer is comes from its address alone.
    tracing::warn!(
        "--insecure: serving {} without a file-system key: any process that reaches this \
         server's port speaks as a client of its address, and the OSTs check nothing \
         (every object is readable and writable by it); give each server the file \
         system's key (`nacre keygen`, `--key`; docs/security.md)",
        missing.join(", ")
    );
    Ok(())
}

pub(crate) fn server(mut a: ServerArgs) -> anyhow::Result<()> {
    daemon::block_stop_signals();
    init_logging();
    let mut listen = a.listen;
    let mut nid = a.nid;
    let mut targets = a.targets;
    let mut mgsnode = a.mgsnode;
    let mut fsname = a.fsname.clone();
    let mut mover = a.mover.clone();
    let mut config_keys = Vec::new();
    if let Some(path) = &a.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("{}:{}: expected key = value", path.display(), n + 1))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |e: &dyn std::fmt::Display| {
                anyhow::anyhow!("{}:{}: {k}: {e}", path.display(), n + 1)
            };
            match k {
                "listen" => listen = Some(v.parse().map_err(|e| bad(&e))?),
                "nid" => nid = Some(v.parse().map_err(|e| bad(&e))?),
                "target" => targets.push(PathBuf::from(v)),
                "standby" => a.standby.push(PathBuf::from(v)),
                "failover" if v == "auto" || v == "manual" => a.failover = v.to_string(),
                "mmp_interval_ms" => a.mmp_interval_ms = v.parse().map_err(|e| bad(&e))?,
                "mgsnode" => mgsnode = Some(v.parse().map_err(|e| bad(&e))?),
                "fsname" => fsname = Some(v.to_string()),
                "mover" => mover = Some(PathBuf::from(v)),
                "mover_jobs" => a.mover_jobs = v.parse().map_err(|e| bad(&e))?,
                "mover_bandwidth" => a.mover_bandwidth = v.to_string(),
                "key" => config_keys.push(PathBuf::from(v)),
                "insecure" => a.insecure = v.parse().map_err(|e| bad(&e))?,
                _ => {
                    if !a.targets_opts.set(k, v).map_err(|e| bad(&e))? {
                        bail!("{}:{}: unknown key '{k}'", path.display(), n + 1)
                    }
                }
            }
        }
    }
    let listen = listen.context("give --listen ADDR:PORT (or `listen =` in the config file)")?;
    let mut spec = ServerSpec::new(listen, targets);
    spec.standby = a.standby.clone();
    spec.auto_failover = a.failover == "auto";
    spec.without_targets = mover.is_some();
    spec.mmp_interval_ms = a.mmp_interval_ms;
    spec.nid = nid;
    spec.mgsnode = mgsnode;
    spec.fsname = fsname.clone();
    spec.keys = server_keys(&config_keys)?;
    find_keys(&mut spec, a.insecure)?;
    let (mut servers, _ctl) = start_servers(spec, &a.targets_opts)?;
    let mover = match &mover {
        Some(dir) => Some(start_mover(
            &mut servers,
            dir,
            (a.mover_jobs, &a.mover_bandwidth),
            mgsnode,
            fsname.clone(),
        )?),
        None => None,
    };
    serve_metrics(a.targets_opts.metrics, servers.metrics_sources())?;
    let mut names: Vec<String> = servers.labels().iter().map(Label::name).collect();
    if mover.is_some() {
        names.push("the data mover".into());
    }
    if names.is_empty() {
        names.push("no targets".into());
    }
    let standby: Vec<String> = servers.standby_labels().iter().map(Label::name).collect();
    let standby = if standby.is_empty() {
        String::new()
    } else {
        format!(", standing by for {}", standby.join(", "))
    };
    tracing::info!("serving {} at {}{standby}", names.join(", "), servers.nid());
    println!(
        "nacre server: serving {} at {}{standby}",
        names.join(", "),
        servers.nid()
    );
    daemon::notify_ready();
    daemon::wait_stop(|| false);
    daemon::notify_stopping();
    if let Some(m) = &mover {
        m.stop();
    }
    daemon::bound_stop(format!("server at {}", servers.nid()));
    servers.shutdown();
    Ok(())
}

/// Starts the data mover role in `servers`: its queue in `dir`, its network service, and
/// its thread (`jobs` files at once, `bandwidth` bytes per second at most), which mounts the file system (its MGS and name from `--mgsnode` and
/// `--fsname`, else from the targets served) with the client library.
fn start_mover(
    servers: &mut ServerProcess,
    dir: &std::path::Path,
    (jobs, bandwidth): (usize, &str),
    mgsnode: Option<Nid>,
    fsname: Option<String>,
) -> anyhow::Result<Arc<nacre_mover::Mover>> {
    let labels = servers.labels();
    let mgs = match mgsnode.or_else(|| labels.iter().find_map(|l| l.mgsnode)) {
        Some(m) => m,
        None if labels
            .iter()
            .any(|l| l.kind == nacre_types::TargetKind::Mgt) =>
        {
            servers.nid()
        }
        None => anyhow::bail!("--mover: give --mgsnode NID (no target here names the MGS)"),
    };
    let fsname = fsname
        .or_else(|| labels.first().map(|l| l.fsname.clone()))
        .context("--mover: give --fsname NAME (no target here names the file system)")?;
    let cfg = nacre_mover::MoverConfig {
        jobs: jobs.clamp(1, 64),
        bandwidth: nacre_cli::size::parse_size(bandwidth)
            .map_err(|e| anyhow::anyhow!("--mover-bandwidth: {e}"))?,
    };
    let connect: nacre_mover::Connect = Box::new(move || {
        nacre_client::Client::mount(mgs, &fsname, nacre_client::ClientConfig::default())
    });
    let mover = nacre_mover::Mover::open(dir, cfg, connect)?;
    servers.add_role(nacre_wire::Service::Mover, "mover", (1, 4), mover.service())?;
    mover.start()?;
    tracing::info!("data mover: queue in {}", dir.display());
    Ok(mover)
}
