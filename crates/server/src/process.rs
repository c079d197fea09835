//! Assembles a server process from formatted target directories.

use crate::target_params::{clear_with, parse_count};
use anyhow::{bail, Context};
use nacre_cpt::CptTable;

use nacre_mds::MdsHandler;
use nacre_mgs::Mgs;
use nacre_net::{Server, ServiceConfig, ServicePartition, ServicePool};
use nacre_osd::Label;
use nacre_oss::OssHandler;
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_types::{Nid, TargetKind};
use nacre_wire::Service;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Default background journal sync period of an MDT (bounds what a power loss can take
/// from acknowledged but not fsync'd metadata).
pub const COMMIT_INTERVAL_MS_DEFAULT: u64 = 1_000;
pub use crate::mgs_sync::{PARAMS_ALL_FS, PARAM_SYNC_MS};

/// Refuses to serve two file systems whose names share a slot: their frames could not be
/// told apart ([`nacre_types::fs_slot`]).
fn check_slots(labels: &[Label]) -> anyhow::Result<()> {
    let mut seen: Vec<(u16, &str)> = Vec::new();
    for l in labels.iter().filter(|l| l.kind != TargetKind::Mgt) {
        let slot = nacre_types::fs_slot(&l.fsname);
        match seen.iter().find(|(s, _)| *s == slot) {
            Some((_, other)) if *other != l.fsname => bail!(
                "file systems '{other}' and '{}' share frame slot {slot}, so one process \
                 cannot serve both: serve them from separate processes, or rename one",
                l.fsname
            ),
            Some(_) => {}
            None => seen.push((slot, &l.fsname)),
        }
    }
    Ok(())
}

/// What a server process serves.
#[derive(Clone, Debug)]
pub struct ServerSpec {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// NID to advertise (defaults to the listen address).
    pub nid: Option<Nid>,
    /// Formatted target directories.
    pub targets: Vec<PathBuf>,
    /// Targets of failover pairs this server stands by for (its partner's primaries).
    pub standby: Vec<PathBuf>,
    /// Take a standby target over when its server dies (else only by `nacre failover`).
    pub auto_failover: bool,
    /// Start with no target: the process serves roles added after (`add_role`).
    pub without_targets: bool,
    /// Multi-mount protection update interval of failover targets.
    pub mmp_interval_ms: u64,
    /// MGS NID, overriding the targets' labels.
    pub mgsnode: Option<Nid>,
    /// Refuse targets of any other file system.
    pub fsname: Option<String>,
    /// MDS service threads per CPU partition: started, most.
    pub mds_threads: (usize, usize),
    /// OSS service threads per CPU partition: started, most.
    pub oss_threads: (usize, usize),
    /// CPU partitions (Lustre's `cpu_npartitions`; 0: automatic from the topology).
    pub cpu_npartitions: usize,
    /// Lustre's `cpu_pattern`, overriding `cpu_npartitions`.
    pub cpu_pattern: Option<String>,
    /// Partitions the OSS service runs on (Lustre's `oss_cpts`; None: all).
    pub oss_cpts: Option<Vec<usize>>,
    /// Partitions the OSS I/O service `ost_io` runs on (Lustre's `oss_io_cpts`; None: as
    /// `oss_cpts`).
    pub oss_io_cpts: Option<Vec<usize>>,
    /// Partitions the MDS service runs on (`mds_cpts`; None: all).
    pub mds_cpts: Option<Vec<usize>>,
    /// Partitions the MDS readpage service runs on (Lustre's `mds_rdpg_num_cpts`; None: as
    /// `mds_cpts`).
    pub mds_rdpg_cpts: Option<Vec<usize>>,
    /// Interfaces to listen on and their partitions (`tcp0(eth0)[0],...`; None: `listen`).
    pub networks: Option<String>,
    /// How requests are spread over a service's partitions.
    pub portal_rotor: nacre_net::Rotor,
    /// MDT replies wait for the journal sync (otherwise: after the journal write).
    pub mdt_sync_on_reply: bool,
    /// How often an MDT syncs its journal in the background.
    pub commit_interval_ms: u64,
    /// OSTs write and read aligned data with O_DIRECT (bypassing the page cache).
    pub ost_direct_io: bool,
    /// Limits of the connections (threads 0: one network thread per CPU partition).
    pub net_limits: nacre_net::NetLimits,
    /// Keys of the file systems served: with any, every connection must prove it holds
    /// the key of the file system it names (docs/security.md).
    pub keys: nacre_net::sec::ServerKeys,
    /// Serve this process's own clients only: no socket is bound, `listen` is only the
    /// address they reach the servers at (`nacre up` without `--listen`).
    pub in_process_only: bool,
}

impl ServerSpec {
    /// A spec with default thread counts.
    pub fn new(listen: SocketAddr, targets: Vec<PathBuf>) -> ServerSpec {
        ServerSpec {
            listen,
            nid: None,
            targets,
            standby: Vec::new(),
            auto_failover: false,
            without_targets: false,
            mmp_interval_ms: nacre_osd::mmp::MMP_INTERVAL_MS_DEFAULT,
            mgsnode: None,
            fsname: None,
            mds_threads: (MDS_THREADS_MIN_DEFAULT, MDS_THREADS_MAX_DEFAULT),
            oss_threads: (OSS_THREADS_MIN_DEFAULT, OSS_THREADS_MAX_DEFAULT),
            cpu_npartitions: 0,
            cpu_pattern: None,
            oss_cpts: None,
            oss_io_cpts: None,
            mds_cpts: None,
            mds_rdpg_cpts: None,
            keys: nacre_net::sec::ServerKeys::default(),
            in_process_only: false,
            networks: None,
            portal_rotor: nacre_net::Rotor::Off,
            mdt_sync_on_reply: false,
            commit_interval_ms: COMMIT_INTERVAL_MS_DEFAULT,
            ost_direct_io: true,
            net_limits: nacre_net::NetLimits {
                threads: 0,
                ..Default::default()
            },
        }
    }
}

/// A running server process.
pub struct ServerProcess {
    server: Arc<Server>,
    nid: Nid,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    targets: Arc<crate::targets::Targets>,
    oss: Arc<OssHandler>,
    mds: Arc<MdsHandler>,
    registry: nacre_params::Registry,
    sources: crate::metrics::Sources,
    mgs: Option<Arc<Mgs>>,
    /// Every NID this process listens on (the first is the primary).
    nids: Vec<Nid>,
    cpts: Arc<CptTable>,
}

/// The connection limits, with one network thread per CPU partition unless given.
fn limits(spec: &ServerSpec, table: &CptTable) -> nacre_net::NetLimits {
    let mut l = spec.net_limits;
    if l.threads == 0 {
        l.threads = table.len().max(1);
    }
    l
}

/// What connections must show: the keys of the file systems served.
/// A client's connection gets the level of its nodemap, if that sets one, else its key's.
fn security(spec: &ServerSpec) -> nacre_net::server::Security {
    use nacre_net::sec::Level;
    // The keys `nacre key add|use|retire` rotate while the process runs.
    nacre_net::sec::serve_keys(&spec.keys);
    nacre_net::server::Security {
        keys: spec.keys.clone(),
        level_for: Arc::new(|key, peer| {
            nacre_wire::nodemap::active()
                .find(peer.ip())
                .and_then(|m| m.level)
                .and_then(Level::from_code)
                .unwrap_or(key.level())
        }),
        ..Default::default()
    }
}

/// Binds the listen address, or every interface of `networks` on the listen port.
fn bind(spec: &ServerSpec, table: &CptTable) -> anyhow::Result<(Arc<Server>, Vec<Nid>)> {
    if spec.in_process_only {
        anyhow::ensure!(
            spec.networks.is_none(),
            "networks: a file system served in-process only listens on no interface"
        );
        let server = Server::in_process(spec.listen, true, limits(spec, table))?;
        return Ok((server, vec![Nid::tcp(spec.listen)]));
    }
    let Some(networks) = &spec.networks else {
        let listen = nacre_net::Listen {
            addr: spec.listen,
            cpts: Vec::new(),
        };
        // Starting: requests wait for the services added below instead of ENOSYS.
        let server = Server::bind_secure(
            &[listen],
            BULK_BYTES_MAX,
            true,
            limits(spec, table),
            security(spec),
        )
        .with_context(|| format!("cannot listen on {}", spec.listen))?;
        let nid = Nid::tcp(server.addr());
        return Ok((server, vec![nid]));
    };
    let nis = nacre_net::ni::parse_networks(networks).map_err(anyhow::Error::msg)?;
    let mut listens = Vec::new();
    let mut nets = Vec::new();
    for ni in &nis {
        if let Some(bad) = ni.cpts.iter().find(|&&c| c >= table.len()) {
            bail!(
                "networks: {} is bound to CPU partition {bad}, but the table has {}",
                ni.ifname,
                table.len()
            );
        }
        let ip = nacre_net::ni::interface_addr(&ni.ifname).map_err(anyhow::Error::msg)?;
        listens.push(nacre_net::Listen {
            addr: SocketAddr::new(ip, spec.listen.port()),
            cpts: ni.cpts.clone(),
        });
        nets.push(ni.net);
    }
    let server = Server::bind_secure(
        &listens,
        BULK_BYTES_MAX,
        true,
        limits(spec, table),
        security(spec),
    )
    .with_context(|| format!("cannot listen on the interfaces of networks={networks}"))?;
    let nids = server
        .addrs()
        .iter()
        .zip(nets)
        .map(|(a, net)| Nid { addr: *a, net })
        .collect();
    Ok((server, nids))
}

/// MDS threads started per partition.
pub const MDS_THREADS_MIN_DEFAULT: usize = 8;
/// Most MDS threads per partition.
pub const MDS_THREADS_MAX_DEFAULT: usize = 64;
/// OSS threads started per partition.
pub const OSS_THREADS_MIN_DEFAULT: usize = 4;
/// Most OSS threads per partition.
pub const OSS_THREADS_MAX_DEFAULT: usize = 32;
/// Threads per partition (started, most) of the small services: `ost`, `ost_create`,
/// `mdt_readpage` (grown and set at run time like the others).
pub const SMALL_SERVICE_THREADS: (usize, usize) = (1, 8);
/// Requests queued per partition of a service.
pub const SERVICE_QUEUE_DEPTH: usize = 1024;

/// A service pool on the partitions `cpts` of `table` (all if None), threads pinned.
fn pool(
    name: &str,
    table: &CptTable,
    cpts: Option<&[usize]>,
    threads: (usize, usize),
    handler: Arc<dyn nacre_net::Handler>,
) -> anyhow::Result<Arc<ServicePool>> {
    let all: Vec<usize> = (0..table.len()).collect();
    let chosen = cpts.unwrap_or(&all);
    if chosen.is_empty() {
        bail!("{name}: no CPU partitions to run on");
    }
    let mut partitions = Vec::new();
    for &cpt in chosen {
        if cpt >= table.len() {
            bail!(
                "{name}: CPU partition {cpt} does not exist (the table has {})",
                table.len()
            );
        }
        partitions.push(ServicePartition {
            cpt,
            cpus: table.partition(cpt).cpus.clone(),
        });
    }
    let (min, max) = threads;
    if min == 0 || min > max || max > nacre_net::service::THREADS_PER_PARTITION_MAX {
        bail!(
            "{name}: threads_min {min} / threads_max {max}: need 1 <= min <= max <= {}",
            nacre_net::service::THREADS_PER_PARTITION_MAX
        );
    }
    let config = ServiceConfig {
        name: name.into(),
        partitions,
        threads_min: min,
        threads_max: max,
        queue_depth: SERVICE_QUEUE_DEPTH,
    };
    Ok(ServicePool::start(config, handler))
}

impl ServerProcess {
    /// Starts serving the targets of `spec`.
    pub fn start(spec: ServerSpec) -> anyhow::Result<ServerProcess> {
        let mut labels = Vec::new();
        for dir in spec.targets.iter().chain(&spec.standby) {
            let label = Label::read(dir)?;
            if let Some(fs) = &spec.fsname {
                if &label.fsname != fs {
                    bail!(
                        "target {} in {} belongs to file system '{}', not '{fs}'",
                        label.name(),
                        dir.display(),
                        label.fsname
                    );
                }
            }
            if spec.standby.contains(dir) && label.servicenodes.is_empty() {
                bail!(
                    "--standby {}: {} has no service nodes, so only its own server may serve it \
                     (format it with --servicenode for each server of the pair)",
                    dir.display(),
                    label.name()
                );
            }
            labels.push(label);
        }
        if labels.is_empty() && !spec.without_targets {
            bail!("no targets to serve (give --target DIR)");
        }
        let topo = nacre_cpt::Topology::read()?;
        let cpts = CptTable::configure(spec.cpu_pattern.as_deref(), spec.cpu_npartitions, &topo)?;
        let (server, nids) = bind(&spec, &cpts)?;

        server.router().set_rotor(spec.portal_rotor);
        let nid = spec.nid.unwrap_or(nids[0]);
        // Discovery hands out reachable NIDs only: the advertised one first, never 0.0.0.0.
        let mut reachable = vec![nid];
        reachable.extend(
            nids.iter()
                .filter(|n| !n.ip().is_unspecified() && **n != nid),
        );
        reachable.retain(|n| !n.ip().is_unspecified());
        server.router().set_nids(reachable);
        let has_mgs = labels.iter().any(|l| l.kind == TargetKind::Mgt);
        let registry = nacre_params::Registry::default();
        let sources = crate::metrics::Sources::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (oss, mds) = (
            Arc::new(OssHandler::default()),
            Arc::new(MdsHandler::default()),
        );
        let targets = crate::targets::Targets::new(
            nid,
            nids.clone(),
            spec.mgsnode,
            has_mgs.then_some(nid),
            oss.clone(),
            mds.clone(),
            registry.clone(),
            sources.clone(),
            crate::targets::RunOpts {
                ost_direct_io: spec.ost_direct_io,
                mdt_sync_on_reply: spec.mdt_sync_on_reply,
                commit_interval_ms: spec.commit_interval_ms,
                mmp_interval_ms: spec.mmp_interval_ms,
                auto_failover: spec.auto_failover,
            },
            stop.clone(),
        );
        let mut process = ServerProcess {
            server,
            nid,
            nids,
            cpts: Arc::new(cpts),
            stop,
            threads: Vec::new(),
            targets,
            oss,
            mds,
            registry,
            sources,
            mgs: None,
        };
        process.register_node_params(&spec);
        // Every server process serves the network self-test, on the partitions like the other
        // services, so `nacre selftest --test null` measures a partitioned service.
        let selftest = pool(
            "selftest",
            &process.cpts.clone(),
            None,
            (1, 4),
            Arc::new(nacre_net::selftest::SelftestHandler),
        )?;
        process.track_service("net.selftest", &selftest);
        process.server.add_service(Service::Net, selftest);
        for (dir, label) in spec.targets.iter().zip(&labels) {
            if label.kind == TargetKind::Mgt {
                // The MGS does not fail over (no multi-mount protection): its label is
                // raised to this release's format version before its files are opened.
                label
                    .clone()
                    .upgrade(dir)
                    .with_context(|| format!("raising the format version of {}", dir.display()))?;
                let mgs = Arc::new(Mgs::open(dir)?);
                process.mgs = Some(mgs.clone());
                // Who changed what at this MGS (the last records; all are in the log).
                let audited = mgs.clone();
                process
                    .registry
                    .add_fn("mgs.audit", move || audited.audit.text());
                let p = pool("mgs", &process.cpts.clone(), Some(&[0]), (2, 8), mgs)?;
                process.track_service("mgs.MGS.mgs", &p);
                process.server.add_service(Service::Mgs, p);
                tracing::info!("MGS started at {nid}");
            }
        }
        let mgs_of = |label: &Label| -> anyhow::Result<Nid> {
            spec.mgsnode
                .or(label.mgsnode)
                .or(has_mgs.then_some(nid))
                .with_context(|| {
                    format!(
                        "{} has no MGS NID: format it with --mgsnode or pass --mgsnode",
                        label.name()
                    )
                })
        };
        check_slots(&labels)?;
        let mut mgs_by_fs: Vec<(String, Nid)> = Vec::new();
        for label in labels.iter().filter(|l| l.kind != TargetKind::Mgt) {
            if !mgs_by_fs.iter().any(|(fs, _)| *fs == label.fsname) {
                mgs_by_fs.push((label.fsname.clone(), mgs_of(label)?));
            }
        }
        // Without keys, roles come from addresses: learn the servers' (a process with no
        // target, a data mover, from the file system it works for).
        let mut learn_from = mgs_by_fs.clone();
        if let (true, Some(fs), Some(mgs)) = (learn_from.is_empty(), &spec.fsname, spec.mgsnode) {
            learn_from.push((fs.clone(), mgs));
        }
        // The MGS is a server too (its own process knows itself by its addresses).
        let mut mgs_ips: Vec<std::net::IpAddr> = learn_from.iter().map(|(_, n)| n.ip()).collect();
        if has_mgs {
            mgs_ips.extend(process.nids.iter().map(|n| n.ip()));
        }
        nacre_net::caller::install_servers(nacre_net::caller::MGS_SERVERS, mgs_ips);
        learn_servers_on_demand(&learn_from);
        process.start_targets(&spec, &labels)?;
        if mgs_by_fs.is_empty() {
            if let Some(first) = labels.first() {
                mgs_by_fs.push((String::new(), mgs_of(first)?));
            }
        }
        if !mgs_by_fs.is_empty() {
            process.start_param_sync(mgs_by_fs);
        }
        process.server.router().set_starting(false);
        Ok(process)
    }

    /// Adds the pools of the `kind` service (OSS or MDS) if any target (served or stood by
    /// for) needs them, and the failover service if any target has service nodes. Called
    /// after the targets of that kind started: until then the router holds their requests
    /// (the process is starting) rather than answering that the target is not here.
    fn add_target_services(
        &mut self,
        spec: &ServerSpec,
        labels: &[Label],
        kind: TargetKind,
    ) -> anyhow::Result<()> {
        let (oss, mds) = (self.oss.clone(), self.mds.clone());
        if kind == TargetKind::Ost && labels.iter().any(|l| l.kind == TargetKind::Ost) {
            // Three pools, as Lustre's OSS has: `ost_io` for data, `ost_create` for the MDT's
            // object requests, `ost` for the rest (glimpse, statfs), so small requests never
            // queue behind bulk I/O.
            let handler: Arc<dyn nacre_net::Handler> = oss;
            let io_cpts = spec.oss_io_cpts.as_ref().or(spec.oss_cpts.as_ref());
            let io = pool(
                "ost_io",
                &self.cpts,
                io_cpts.map(Vec::as_slice),
                spec.oss_threads,
                handler.clone(),
            )?;
            self.track_service("ost.OSS.ost_io", &io);
            let create = pool(
                "ost_create",
                &self.cpts,
                spec.oss_cpts.as_deref(),
                SMALL_SERVICE_THREADS,
                handler.clone(),
            )?;
            self.track_service("ost.OSS.ost_create", &create);
            let ost = pool(
                "ost",
                &self.cpts,
                spec.oss_cpts.as_deref(),
                SMALL_SERVICE_THREADS,
                handler,
            )?;
            self.track_service("ost.OSS.ost", &ost);
            self.server.add_service(Service::Oss, ost);
            self.server.add_portal(&nacre_wire::oss::IO_OPCODES, io);
            self.server
                .add_portal(&nacre_wire::oss::CREATE_OPCODES, create);
            self.server
                .router()
                .run_inline(&nacre_wire::oss::INLINE_OPCODES);
        }
        if kind == TargetKind::Mdt && labels.iter().any(|l| l.kind == TargetKind::Mdt) {
            // Two pools, as Lustre's MDS has: `mdt` for namespace requests, `mdt_readpage`
            // for directory pages and closes, so a listing never waits behind a create storm.
            let handler: Arc<dyn nacre_net::Handler> = mds;
            let p = pool(
                "mdt",
                &self.cpts,
                spec.mds_cpts.as_deref(),
                spec.mds_threads,
                handler.clone(),
            )?;
            self.track_service("mds.MDS.mdt", &p);
            self.server.add_service(Service::Mds, p);
            let rdpg_cpts = spec.mds_rdpg_cpts.as_ref().or(spec.mds_cpts.as_ref());
            let readpage = pool(
                "mdt_readpage",
                &self.cpts,
                rdpg_cpts.map(Vec::as_slice),
                SMALL_SERVICE_THREADS,
                handler,
            )?;
            self.track_service("mds.MDS.mdt_readpage", &readpage);
            self.server
                .add_portal(&nacre_wire::mds::READPAGE_OPCODES, readpage);
            self.server
                .router()
                .run_inline(&nacre_wire::mds::INLINE_OPCODES);
        }
        if kind == TargetKind::Mdt && labels.iter().any(|l| !l.servicenodes.is_empty()) {
            let handler = Arc::new(crate::targets::FailoverService {
                targets: Arc::downgrade(&self.targets),
            });
            // Takeovers wait for the partner's record: a few threads, off the data path.
            let p = pool("failover", &self.cpts.clone(), Some(&[0]), (1, 4), handler)?;
            self.track_service("failover.failover", &p);
            self.server.add_service(Service::Failover, p);
        }
        Ok(())
    }

    /// Serves `service` with `handler` on a pool of `threads` (min, max) threads on the
    /// first CPU partition: a role composed from outside the server crates (the data
    /// mover, built on the client library, which these crates never depend on).
    pub fn add_role(
        &mut self,
        service: Service,
        name: &str,
        threads: (usize, usize),
        handler: Arc<dyn nacre_net::Handler>,
    ) -> anyhow::Result<()> {
        let p = pool(name, &self.cpts.clone(), Some(&[0]), threads, handler)?;
        self.track_service(&format!("{name}.{name}"), &p);
        self.server.add_service(service, p);
        Ok(())
    }

    /// Starts the targets: MDTs after OSTs (an MDT asks the OSTs for their usage at start),
    /// each kind's services once its targets are in. A target of a failover pair that its
    /// partner serves is stood by for instead.
    fn start_targets(&mut self, spec: &ServerSpec, labels: &[Label]) -> anyhow::Result<()> {
        for kind in [TargetKind::Ost, TargetKind::Mdt] {
            for (dir, label) in spec.targets.iter().zip(labels) {
                if label.kind != kind {
                    continue;
                }
                match self.targets.serve(dir.clone(), label.clone()) {
                    Ok(()) => {}
                    Err(e) if crate::targets::in_use(&e) => {
                        tracing::warn!("{}: {e:#}; standing by for it", label.name());
                        self.targets.add_standby(
                            dir.clone(),
                            label.clone(),
                            "partner serves it".into(),
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
            self.add_target_services(spec, labels, kind)?;
        }
        for (dir, label) in spec.standby.iter().zip(&labels[spec.targets.len()..]) {
            self.targets
                .add_standby(dir.clone(), label.clone(), "partner's primary".into());
        }
        Ok(())
    }

    /// The parameters of this process (`nacre ctl get_param`).
    pub fn registry(&self) -> &nacre_params::Registry {
        &self.registry
    }

    /// The once-a-second sync with the MGS ([`crate::mgs_sync::start`]).
    fn start_param_sync(&mut self, mgs_by_fs: Vec<(String, Nid)>) {
        let t = crate::mgs_sync::start(
            mgs_by_fs,
            self.registry.clone(),
            self.oss.clone(),
            self.mds.clone(),
            self.stop.clone(),
        );
        self.threads.push(t);
    }

    /// How `nacre ctl set_param -P` stores a parameter through this process's MGS, if any.
    pub fn persist_fn(&self) -> Option<crate::ctl::Persist> {
        let mgs = self.mgs.clone()?;
        Some(Arc::new(move |name: &str, value: &str| {
            // A parameter naming a target of a file system this MGS does not manage
            // (`osd.other-OST0000.x`) is left to that file system's MGS.
            if let Some(fs) = param_fsname(name) {
                mgs.config(fs)?;
            }
            Some(
                mgs.set_param_local(PARAMS_ALL_FS, name, value)
                    .map(|_| ())
                    .map_err(|s| format!("{name}: {s}")),
            )
        }))
    }

    /// `nacre nodemap` through this process's MGS (nodemap_admin.rs).
    pub fn nodemap_fn(&self) -> Option<crate::nodemap_admin::NodemapAdmin> {
        Some(crate::nodemap_admin::admin(
            self.mgs.clone()?,
            self.mds.clone(),
        ))
    }

    /// `nacre pool` through this process's MGS (pool_admin.rs).
    pub fn pool_fn(&self) -> Option<crate::ctl::PoolAdmin> {
        let mgs = self.mgs.clone()?;
        Some(crate::pool_admin::admin(mgs, self.targets.clone()))
    }

    /// What `/metrics` exports for this process.
    /// Publishes a service's partition counters as `{prefix}.threads_started` and
    /// `{prefix}.partition_stats` (writing 0 clears) and in `/metrics`.
    fn track_service(&mut self, prefix: &str, pool: &Arc<ServicePool>) {
        let a = pool.clone();
        self.registry
            .add_fn(format!("{prefix}.threads_started"), move || {
                a.partition_stats()
                    .iter()
                    .map(|c| c.threads.load(Ordering::Relaxed))
                    .sum::<u64>()
                    .to_string()
            });
        let (a, b) = (pool.clone(), pool.clone());
        self.registry.add_rw(
            format!("{prefix}.partition_stats"),
            move || crate::metrics::partition_table(&a),
            move |v| {
                clear_with(v, || {
                    b.partition_stats().iter().for_each(|c| c.clear());
                })
            },
        );
        let (a, b) = (pool.clone(), pool.clone());
        self.registry.add_rw(
            format!("{prefix}.threads_min"),
            move || a.threads_min().to_string(),
            move |v| b.set_threads_min(parse_count(v)?),
        );
        let (a, b) = (pool.clone(), pool.clone());
        self.registry.add_rw(
            format!("{prefix}.threads_max"),
            move || a.threads_max().to_string(),
            move |v| b.set_threads_max(parse_count(v)?),
        );
        let (a, b) = (pool.clone(), pool.clone());
        self.registry.add_rw(
            format!("{prefix}.batch_max"),
            move || a.batch_max().to_string(),
            move |v| b.set_batch_max(parse_count(v)?),
        );
        let (a, b) = (pool.clone(), pool.clone());
        self.registry.add_rw(
            format!("{prefix}.batch_threads_max"),
            move || a.batch_threads_max().to_string(),
            move |v| b.set_batch_threads_max(parse_count(v)?),
        );
        let a = pool.clone();
        self.registry.add_fn(format!("{prefix}.cpts"), move || {
            let cpts: Vec<String> = a
                .config()
                .partitions
                .iter()
                .map(|p| p.cpt.to_string())
                .collect();
            format!("[{}]", cpts.join(","))
        });
        self.sources
            .services
            .push((pool.config().name.clone(), pool.clone()));
    }

    /// Node-wide network and partition parameters (Lustre's libcfs and lnet ones).
    fn register_node_params(&self, spec: &ServerSpec) {
        let r = &self.registry;
        register_fault_params(r);
        let t = self.cpts.clone();
        r.add_fn("cpu_partition_table", move || {
            t.render().trim_end().to_string()
        });
        let n = self.cpts.len();
        r.add_fn("cpu_npartitions", move || n.to_string());
        let stats = self.server.net_stats();
        r.add_fn("net.stats", move || stats.text());
        // The version of the nodemaps this process enforces (the MGS's, within a second).
        r.add_fn("nodemap.version", || {
            nacre_wire::nodemap::active().version.to_string()
        });

        let l = self.server.limits();
        r.add_fn("net.limits", move || {
            format!(
                "net_threads: {}\nconns_max: {}\nframe_timeout_ms: {}\nbulk_budget_bytes: {}\n\
                 reply_timeout_ms: {}",
                l.threads,
                l.conns_max,
                l.frame_timeout_ms,
                l.budget_bytes(),
                l.reply_timeout_ms
            )
        });
        let pattern = spec.cpu_pattern.clone().unwrap_or_default();
        r.add_fn("cpu_pattern", move || pattern.clone());
        let (a, b) = (self.server.router().clone(), self.server.router().clone());
        r.add_rw(
            "net.run_inline",
            move || u8::from(a.inline_on()).to_string(),
            move |v| {
                b.set_inline_on(crate::target_params::parse_bool(v)?);
                Ok(())
            },
        );
        let (a, b) = (self.server.router().clone(), self.server.router().clone());
        r.add_rw(
            "net.stream_bulk",
            move || u8::from(a.stream_on()).to_string(),
            move |v| {
                b.set_stream_on(crate::target_params::parse_bool(v)?);
                Ok(())
            },
        );
        let (a, b) = (self.server.router().clone(), self.server.router().clone());
        r.add_rw(
            "portal_rotor",
            move || a.rotor().to_string(),
            move |v| {
                b.set_rotor(v.parse()?);
                Ok(())
            },
        );
        // The interfaces' sockets are bound at start; changing them means a restart (as
        // Lustre's `networks` module option needs LNet reloaded).
        let networks = spec.networks.clone().unwrap_or_default();
        r.add_rw(
            "networks",
            move || networks.clone(),
            |_| {
                Err(
                    "networks cannot change at run time: restart the server with the new \
                     --networks (its sockets are bound at start)"
                        .into(),
                )
            },
        );
        let n = self.cpts.len();
        r.add_rw(
            "buffer_pools",
            move || buffer_pool_table(n),
            |v| clear_with(v, nacre_types::buf::clear_pool_stats),
        );
        let nids: Vec<String> = self.nids.iter().map(Nid::to_string).collect();
        r.add_fn("nids", move || nids.join("\n"));
    }

    pub fn metrics_sources(&self) -> crate::metrics::Sources {
        self.sources.clone()
    }

    /// The advertised NID.
    pub fn nid(&self) -> Nid {
        self.nid
    }

    /// Labels of the targets served now.
    pub fn labels(&self) -> Vec<Label> {
        self.targets.served_labels()
    }

    /// Labels of the targets stood by for.
    pub fn standby_labels(&self) -> Vec<Label> {
        self.targets.standby_labels()
    }

    /// Stops every service and background thread.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // A clean stop that hangs (a journal sync on a dead disk, a call to a dead peer), for
        // the test of the stop bound: armed as `server.shutdown~MS`, it pauses here.
        nacre_net::fault::hit("server.shutdown");
        // Background threads first: they may be talking to targets of this very process, whose
        // addresses stop answering once the server is down (a call would then retry for the
        // whole recovery window).
        self.targets.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.server.shutdown();
    }
}

/// The large-buffer pools of each CPU partition and the shared one (`buffer_pools`).
fn buffer_pool_table(partitions: usize) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "{:<6} {:>10} {:>10} {:>10} {:>14}\n",
        "cpt", "hits", "misses", "released", "pooled_bytes"
    );
    let rows = (0..partitions)
        .map(|p| (p.to_string(), Some(p)))
        .chain(std::iter::once(("shared".to_string(), None)));
    for (name, p) in rows {
        let st = nacre_types::buf::pool_stats(p);
        let _ = writeln!(
            s,
            "{name:<6} {:>10} {:>10} {:>10} {:>14}",
            st.hits, st.misses, st.released, st.pooled_bytes
        );
    }
    s.trim_end().to_string()
}

/// Without keys, a peer's role is its address's: lets a request of a server this process
/// does not know yet (one started or moved since the last once-a-second sync) be judged
/// again after fetching each file system's configuration from its MGS.
fn learn_servers_on_demand(mgs_by_fs: &[(String, Nid)]) {
    let conns: Vec<(String, Arc<nacre_net::Connection>)> = mgs_by_fs
        .iter()
        .map(|(fs, mgs)| {
            let config = crate::targets::osp_net_config().for_fs(fs);
            (fs.clone(), nacre_net::Connection::new(*mgs, config))
        })
        .collect();
    // Known before any target serves (a restarted MDT's peers resend at once).
    for (fs, conn) in &conns {
        crate::mgs_sync::learn_servers(conn, fs);
    }
    nacre_net::caller::set_servers_refresher(move || {
        for (fs, conn) in &conns {
            crate::mgs_sync::learn_servers(conn, fs);
        }
    });
}

/// `fail_loc` (the armed fault points, Lustre's name: `NAME`, `NAME@N`, `NAME~MS`,
/// `NAME~hold`, comma-separated; `+SPEC` arms beside those armed, `-NAME` disarms one, `0`
/// disarms all: nacre_net::fault) and `fail_fired` (how often they fired since the last
/// change), for recovery tests.
pub fn register_fault_params(r: &nacre_params::Registry) {
    r.add_rw("fail_loc", nacre_net::fault::armed_spec, |v| {
        nacre_net::fault::arm(v);
        Ok(())
    });
    r.add_fn("fail_fired", || nacre_net::fault::fired().to_string());
}

/// The file system a parameter name is about, when its target component names one literally
/// (`osd.demo-OST0001.direct_io` → `demo`; `osd.*.direct_io` → None).
pub fn param_fsname(name: &str) -> Option<&str> {
    let target = name.split('.').nth(1)?;
    let (fs, rest) = target.rsplit_once('-')?;
    let literal = |s: &str| !s.is_empty() && !s.contains(['*', '?', '[']);
    (literal(fs) && (rest.starts_with("OST") || rest.starts_with("MDT"))).then_some(fs)
}

#[cfg(test)]
mod tests {
    use super::param_fsname;

    #[test]
    fn parameters_name_their_file_system() {
        assert_eq!(param_fsname("osd.demo-OST0001.direct_io"), Some("demo"));
        assert_eq!(param_fsname("osd.my-fs-OST000?.direct_io"), Some("my-fs"));
        assert_eq!(param_fsname("mdt.demo-MDT0000.sync_on_reply"), Some("demo"));
        assert_eq!(param_fsname("osd.*.direct_io"), None);
        assert_eq!(param_fsname("osd.d*-OST0000.direct_io"), None);
        assert_eq!(param_fsname("jobid_var"), None);
    }
}
