//! The targets a server process serves, and those it stands by for (failover pairs).
//!
//! A target formatted with service nodes (`nacre mkfs --servicenode A --servicenode B`) can
//! be served by either server of the pair, which both reach its directory (shared storage).
//! The one serving it holds it under multi-mount protection ([`nacre_osd::mmp`]); the
//! other stands by: it watches the protection record and, with `--failover auto`, takes
//! the target over when the record stops moving (its server died). `nacre failover`
//! moves a target on purpose through the failover service ([`FailoverService`]): the
//! serving server releases it (journal synced, record marked clean), the partner takes it.
//! A server that finds another one took a target it served (it was stopped or cut off for
//! longer than the takeover wait) exits at once, without writing anything more: its other
//! targets fail over too, which is what its partner expects of a node in that state.

use crate::metrics::Sources;
pub use crate::stopping::sleep_unless;
use crate::target_params::{register_mdt_params, register_ost_params};
use anyhow::{bail, Context};
use nacre_mds::mdt::Mdt;
use nacre_mds::osp::OstPool;
use nacre_mds::MdsHandler;
use nacre_net::rpc::{call, RpcError};
use nacre_net::{Connection, Handler, Incoming, NetConfig, Outgoing};
use nacre_osd::mmp::{self, Guard, MmpError, MmpState};
use nacre_osd::Label;
use nacre_oss::{OssHandler, OstTarget};
use nacre_types::{Nid, Status, TargetKind};
use nacre_wire::failover::{FailoverReply, FailoverRequest, TARGET_NAME_BYTES_MAX};
use nacre_wire::mgs::{MgsReply, MgsRequest, TargetInfo};
use nacre_wire::{decode_body, encode_body};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::mdt_threads::{CONFIG_WATCH_WAIT_MS, INTENT_RETRY_MS, OST_REFRESH_MS};
/// Longest a release waits for requests in progress on the target to finish.
pub const RELEASE_DRAIN_MS: u64 = 10_000;
/// Exit status of a server that found a target it served taken over by its partner.
pub const EXIT_FENCED: i32 = 75;

/// How targets run (from the server's options).
#[derive(Clone, Debug)]
pub struct RunOpts {
    /// OSTs use O_DIRECT for aligned I/O.
    pub ost_direct_io: bool,
    /// MDT replies wait for the journal sync.
    pub mdt_sync_on_reply: bool,
    /// MDT background journal sync period.
    pub commit_interval_ms: u64,
    /// Multi-mount protection update interval.
    pub mmp_interval_ms: u64,
    /// Take over a standby target when its server dies, without an administrator.
    pub auto_failover: bool,
}

struct Served {
    dir: PathBuf,
    label: Label,
    guard: Option<Arc<Guard>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    mdt: Option<Arc<Mdt>>,
    since: Instant,
}

struct Standby {
    dir: PathBuf,
    label: Label,
    /// Why it is not served (shown in `failover.status`).
    why: String,
}

/// Every target of a server process: served or standing by.
pub struct Targets {
    nid: Nid,
    nids: Vec<Nid>,
    /// `--mgsnode`, overriding the labels.
    mgsnode: Option<Nid>,
    /// This process's own MGS, for targets whose label names none.
    local_mgs: Option<Nid>,
    oss: Arc<OssHandler>,
    mds: Arc<MdsHandler>,
    registry: nacre_params::Registry,
    sources: Sources,
    opts: RunOpts,
    served: Mutex<BTreeMap<String, Served>>,
    standby: Mutex<BTreeMap<String, Standby>>,
    /// Targets being taken over or released now (one move per target at a time; moves of
    /// different targets run at once, as an MDT's start may need an OST moving with it).
    moving: Mutex<std::collections::BTreeSet<String>>,
    stop: Arc<AtomicBool>,
    me: Weak<Targets>,
}

impl Targets {
    /// An empty set; `nids` are advertised for every target (the primary first).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        nid: Nid,
        nids: Vec<Nid>,
        mgsnode: Option<Nid>,
        local_mgs: Option<Nid>,
        oss: Arc<OssHandler>,
        mds: Arc<MdsHandler>,
        registry: nacre_params::Registry,
        sources: Sources,
        opts: RunOpts,
        stop: Arc<AtomicBool>,
    ) -> Arc<Targets> {
        let t = Arc::new_cyclic(|me| Targets {
            nid,
            nids,
            mgsnode,
            local_mgs,
            oss,
            mds,
            registry,
            sources,
            opts,
            served: Mutex::new(BTreeMap::new()),
            standby: Mutex::new(BTreeMap::new()),
            moving: Mutex::new(std::collections::BTreeSet::new()),
            stop,
            me: me.clone(),
        });
        let weak = Arc::downgrade(&t);
        t.registry.add_fn("failover.status", move || {
            weak.upgrade().map(|t| t.status()).unwrap_or_default()
        });
        let weak = Arc::downgrade(&t);
        t.registry.add_fn("devices", move || {
            weak.upgrade().map(|t| t.devices()).unwrap_or_default()
        });
        t
    }

    /// `devices` (`nacre ctl dl`, as Lustre's `lctl dl`): the MGS if this process runs it,
    /// then every target served or stood by for, with its file system and the slot its
    /// frames name.
    pub fn devices(&self) -> String {
        let mut out = String::new();
        let mut n = 0;
        if self.local_mgs.is_some() {
            out += &format!("{n:3} UP mgs MGS\n");
            n += 1;
        }
        let line = |n: usize, state: &str, l: &Label| {
            format!(
                "{n:3} {state} {} {} fs={} slot={} uuid={}\n",
                l.kind.as_str().to_ascii_lowercase(),
                l.name(),
                l.fsname,
                nacre_types::fs_slot(&l.fsname),
                l.uuid
            )
        };
        for s in self.served.lock().expect("served").values() {
            out += &line(n, "UP", &s.label);
            n += 1;
        }
        for s in self.standby.lock().expect("standby").values() {
            out += &line(n, "ST", &s.label);
            n += 1;
        }
        out.trim_end().to_string()
    }

    fn mgs_of(&self, label: &Label) -> anyhow::Result<Nid> {
        self.mgsnode
            .or(label.mgsnode)
            .or(self.local_mgs)
            .with_context(|| {
                format!(
                    "{} has no MGS NID: format it with --mgsnode or pass --mgsnode",
                    label.name()
                )
            })
    }

    fn target_info(&self, label: &Label) -> TargetInfo {
        TargetInfo {
            kind: label.kind,
            index: label.index,
            fsname: label.fsname.clone(),
            uuid: label.uuid.clone(),
            nids: if self.nids.contains(&self.nid) {
                self.nids.clone()
            } else {
                std::iter::once(self.nid).chain(self.nids.clone()).collect()
            },
            servicenodes: label.servicenodes.clone(),
        }
    }

    /// Labels of the targets served now.
    pub fn served_labels(&self) -> Vec<Label> {
        let served = self.served.lock().expect("served");
        served.values().map(|s| s.label.clone()).collect()
    }

    /// Labels of the targets stood by for.
    pub fn standby_labels(&self) -> Vec<Label> {
        let standby = self.standby.lock().expect("standby");
        standby.values().map(|s| s.label.clone()).collect()
    }

    /// MDTs served now.
    pub fn mdts(&self) -> Vec<Arc<Mdt>> {
        let served = self.served.lock().expect("served");
        served.values().filter_map(|s| s.mdt.clone()).collect()
    }

    /// Marks `name` as moving until the returned guard drops; fails if it already is.
    fn start_move(&self, name: &str) -> anyhow::Result<MoveGuard<'_>> {
        if !self.moving.lock().expect("moving").insert(name.to_string()) {
            bail!("{name} is being moved already");
        }
        Ok(MoveGuard {
            targets: self,
            name: name.to_string(),
        })
    }

    /// Starts serving the target in `dir`. A target of a failover pair is taken under
    /// multi-mount protection first, which waits while its record looks alive. Then its
    /// label is raised to this release's format version if it is older
    /// ([`Label::upgrade`]), before anything in the target is written.
    pub fn serve(&self, dir: PathBuf, mut label: Label) -> anyhow::Result<()> {
        let name = label.name();
        let _moving = self.start_move(&name)?;
        if self.served.lock().expect("served").contains_key(&name) {
            return Ok(());
        }
        let guard = if label.servicenodes.is_empty() {
            None
        } else {
            let g = Guard::acquire(&dir, &self.nid.to_string(), self.opts.mmp_interval_ms)?;
            let n = name.clone();
            g.on_fence(move || {
                tracing::error!(
                    "{n}: another server of its failover pair took it over; exiting without \
                     writing anything more (its other targets fail over too)"
                );
                // SAFETY: _exit ends the process at once, without running destructors that
                // could flush state into a target another server now owns.
                unsafe { libc::_exit(EXIT_FENCED) };
            });
            Some(g)
        };
        // Once the target is ours (no partner writes it) and before it is opened (opening
        // an MDT writes): from here on no older nacre opens it (docs/formats.md).
        let upgraded = label
            .upgrade(&dir)
            .with_context(|| format!("raising the format version of {}", dir.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut served = Served {
            dir: dir.clone(),
            label: label.clone(),
            guard: guard.clone(),
            stop: stop.clone(),
            threads: Vec::new(),
            mdt: None,
            since: Instant::now(),
        };
        let started = upgraded.and_then(|_| match label.kind {
            TargetKind::Ost => self.start_ost(&dir, &label, guard.clone()),
            TargetKind::Mdt => self.start_mdt(&dir, &label, guard.clone(), &mut served),
            TargetKind::Mgt => Err(anyhow::anyhow!("an MGS target does not fail over")),
        });
        let registered =
            started.and_then(|()| register(self.mgs_of(&label)?, self.target_info(&label)));
        if let Err(e) = registered {
            self.unserve(served, false);
            return Err(e);
        }
        self.standby.lock().expect("standby").remove(&name);
        self.served
            .lock()
            .expect("served")
            .insert(name.clone(), served);
        tracing::info!("{name} started");
        Ok(())
    }

    fn start_ost(
        &self,
        dir: &std::path::Path,
        label: &Label,
        guard: Option<Arc<Guard>>,
    ) -> anyhow::Result<()> {
        let target = OstTarget::open(dir, label.clone())
            .with_context(|| format!("opening {}", dir.display()))?;
        target.store.set_direct_io(self.opts.ost_direct_io);
        let target = Arc::new(target);
        register_ost_params(&self.registry, &target);
        self.sources
            .osts
            .write()
            .expect("sources")
            .push(target.clone());
        self.oss.add_guarded(target, guard);
        Ok(())
    }

    fn start_mdt(
        &self,
        dir: &std::path::Path,
        label: &Label,
        guard: Option<Arc<Guard>>,
        served: &mut Served,
    ) -> anyhow::Result<()> {
        let mgs = self.mgs_of(label)?;
        let kv = nacre_kv::FjallStore::open(&dir.join("db"), &nacre_mdstore::records::TABLES)
            .with_context(|| format!("opening the metadata store of {}", label.name()))?;
        let osts = Arc::new(OstPool::new(&label.fsname, mgs, osp_net_config()));
        // The OSTs' free space comes with the next refresh: they usually start after it.
        if let Err(e) = osts.install_config() {
            tracing::warn!("{}: cannot fetch the OST list yet: {e}", label.name());
        }
        let mdt = Mdt::open(label.clone(), dir, Arc::new(kv), osts)
            .map_err(|s| anyhow::anyhow!("opening {}: {s}", label.name()))?;
        mdt.set_sync_on_reply(self.opts.mdt_sync_on_reply);
        let mdt = Arc::new(mdt);
        nacre_mds::delegations::watch_pools(&mdt);
        register_mdt_params(&self.registry, &mdt);
        self.sources
            .mdts
            .write()
            .expect("sources")
            .push(mdt.clone());
        self.mds.add_guarded(mdt.clone(), guard);
        served.threads =
            crate::mdt_threads::spawn(&mdt, &served.stop, self.opts.commit_interval_ms);
        served.mdt = Some(mdt);
        Ok(())
    }

    /// Takes a target out of service: requests get `ENODEV` (clients move to the partner),
    /// its threads end, its journal is synced and its store closed; then, if `clean`, its
    /// protection record is marked clean so the partner takes it at once.
    fn unserve(&self, s: Served, clean: bool) {
        let name = s.label.name();
        match s.label.kind {
            TargetKind::Ost => {
                self.oss.remove_target(s.label.target_id());
                self.sources
                    .osts
                    .write()
                    .expect("sources")
                    .retain(|o| o.label.name() != name);
            }
            TargetKind::Mdt => {
                self.mds.remove_target(s.label.target_id());
                self.sources
                    .mdts
                    .write()
                    .expect("sources")
                    .retain(|m| m.label.name() != name);
            }
            TargetKind::Mgt => {}
        }
        for prefix in [
            "osd",
            "ost",
            "mdt",
            "ldlm.namespaces.mdt-",
            "ldlm.namespaces.ost-",
        ] {
            let dot = if prefix.ends_with('-') { "" } else { "." };
            self.registry
                .remove_prefix(&format!("{prefix}{dot}{name}."));
        }
        s.stop.store(true, Ordering::SeqCst);
        if let Some(m) = &s.mdt {
            m.kick_destroyer();
        }
        for t in s.threads {
            let _ = t.join();
        }
        if let Some(mdt) = s.mdt {
            if let Err(e) = mdt.commit_pass(nacre_kv::Ticket(0)) {
                tracing::error!("{name}: journal sync at release failed: {e}");
            }
            // Requests in progress hold the MDT; its store closes with the last of them.
            let deadline = Instant::now() + Duration::from_millis(RELEASE_DRAIN_MS);
            while Arc::strong_count(&mdt) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if Arc::strong_count(&mdt) > 1 {
                tracing::warn!(
                    "{name}: still in use after {RELEASE_DRAIN_MS} ms; not marking it clean"
                );
                return;
            }
            drop(mdt);
        }
        if clean {
            if let Some(g) = s.guard {
                if let Err(e) = g.release() {
                    tracing::error!("{name}: cannot mark the protection record clean: {e}");
                }
            }
        }
    }

    /// Stops serving target `name` cleanly and stands by for it.
    pub fn release(&self, name: &str) -> anyhow::Result<()> {
        let _moving = self.start_move(name)?;
        let s = {
            let mut served = self.served.lock().expect("served");
            match served.get(name) {
                None if self.standby.lock().expect("standby").contains_key(name) => return Ok(()),
                None => bail!("{name} is not served here"),
                Some(s) if s.guard.is_none() => bail!(
                    "{name} has no service nodes: it cannot fail over (format it with --servicenode)"
                ),
                Some(_) => served.remove(name).expect("present"),
            }
        };
        let (dir, label) = (s.dir.clone(), s.label.clone());
        self.unserve(s, true);
        tracing::info!("{name} released");
        self.add_standby(dir, label, "released".into());
        Ok(())
    }

    /// Stands by for the target in `dir` (served by its partner, or to be).
    pub fn add_standby(&self, dir: PathBuf, label: Label, why: String) {
        let name = label.name();
        let fresh = self
            .standby
            .lock()
            .expect("standby")
            .insert(
                name.clone(),
                Standby {
                    dir: dir.clone(),
                    label,
                    why,
                },
            )
            .is_none();
        if fresh && self.opts.auto_failover {
            self.watch(name, dir);
        }
    }

    /// Automatic failover: watches a standby target's protection record and takes the
    /// target when the record stops moving for the takeover wait (its server died).
    fn watch(&self, name: String, dir: PathBuf) {
        let me = self.me.clone();
        let interval = self.opts.mmp_interval_ms;
        let stop = self.stop.clone();
        let spawned = std::thread::Builder::new()
            .name("failover-watch".into())
            .spawn(move || {
                let mut watch = None;
                loop {
                    if sleep_unless(&stop, Duration::from_millis(interval)) {
                        return;
                    }
                    let Some(t) = me.upgrade() else { return };
                    let label = match t.standby.lock().expect("standby").get(&name) {
                        Some(s) => s.label.clone(),
                        None => return, // served now
                    };
                    if watch.is_none() {
                        watch = mmp::Watch::new(&dir).ok();
                    }
                    let Some(w) = watch.as_mut() else { continue };
                    let (rec, still) = match w.poll() {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::warn!("{name}: cannot read its protection record: {e}");
                            continue;
                        }
                    };
                    // A clean record was released on purpose: an administrator moves it.
                    let dead = rec.is_some_and(|r| r.state == MmpState::Active)
                        && still >= Duration::from_millis(mmp::takeover_wait_ms(interval));
                    if !dead {
                        continue;
                    }
                    tracing::warn!(
                        "{name}: its server stopped updating the protection record {} ms ago; taking it over",
                        still.as_millis()
                    );
                    match t.serve(dir.clone(), label) {
                        Ok(()) => return,
                        Err(e) => tracing::warn!("{name}: takeover failed: {e:#}"),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("no failover watch thread: {e}");
        }
    }

    /// Takes over standby target `name`.
    pub fn takeover(&self, name: &str) -> anyhow::Result<()> {
        let found = self
            .standby
            .lock()
            .expect("standby")
            .get(name)
            .map(|s| (s.dir.clone(), s.label.clone()));
        match found {
            Some((dir, label)) => self.serve(dir, label),
            None if self.served.lock().expect("served").contains_key(name) => Ok(()),
            None => bail!("this server does not stand by for {name} (give it --standby DIR)"),
        }
    }

    /// `failover.status`: each target, served or standing by, with its protection record.
    pub fn status(&self) -> String {
        let mut out = String::new();
        for (name, s) in self.served.lock().expect("served").iter() {
            let mmp = if s.guard.is_some() { "mmp" } else { "no mmp" };
            out += &format!(
                "{name}: serving ({mmp}) for {} s, {}\n",
                s.since.elapsed().as_secs(),
                s.dir.display()
            );
        }
        for (name, s) in self.standby.lock().expect("standby").iter() {
            let owner = mmp::MmpFile::open(&s.dir)
                .and_then(|f| f.read())
                .map(|r| match r {
                    Some(r) if r.state == MmpState::Active => {
                        format!("owner {} pid {} seq {}", r.owner, r.pid, r.seq)
                    }
                    Some(_) => "clean".into(),
                    None => "never served".into(),
                })
                .unwrap_or_else(|e| format!("record unreadable: {e}"));
            let mode = if self.opts.auto_failover {
                "auto"
            } else {
                "manual"
            };
            out += &format!("{name}: standby ({mode}; {}), {owner}\n", s.why);
        }
        out.trim_end().to_string()
    }

    /// Stops every target (journals synced; protection records marked clean).
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let all: Vec<Served> = std::mem::take(&mut *self.served.lock().expect("served"))
            .into_values()
            .collect();
        for s in &all {
            s.stop.store(true, Ordering::SeqCst);
            if let Some(m) = &s.mdt {
                m.kick_destroyer();
            }
        }
        for s in all {
            self.unserve(s, true);
        }
    }
}

struct MoveGuard<'a> {
    targets: &'a Targets,
    name: String,
}

impl Drop for MoveGuard<'_> {
    fn drop(&mut self) {
        self.targets
            .moving
            .lock()
            .expect("moving")
            .remove(&self.name);
    }
}

/// Whether an error from [`Targets::serve`] means another server holds the target.
pub fn in_use(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<MmpError>(),
        Some(MmpError::InUse { .. } | MmpError::Raced { .. })
    )
}

/// The failover service every server process with a failover target runs (`nacre
/// failover` talks to it).
pub struct FailoverService {
    /// The process's targets.
    pub targets: Weak<Targets>,
}

impl Handler for FailoverService {
    fn handle(&self, req: &Incoming) -> Outgoing {
        let Some(targets) = self.targets.upgrade() else {
            return Outgoing::error(Status::Shutdown);
        };
        let r: FailoverRequest = match decode_body::<FailoverRequest>(&req.body) {
            // The role table judged the header's opcode: the body must be that request.
            Ok(r) if r.opcode() == req.header.opcode => r,
            _ => return Outgoing::error(Status::Proto),
        };
        if r.target().len() > TARGET_NAME_BYTES_MAX {
            return Outgoing::error(Status::NameTooLong);
        }
        let started = Instant::now();
        let result = match &r {
            FailoverRequest::Takeover { target } => {
                tracing::info!("{target}: takeover asked by {}", req.peer);
                targets.takeover(target)
            }
            FailoverRequest::Release { target } => {
                tracing::info!("{target}: release asked by {}", req.peer);
                targets.release(target)
            }
        };
        match result {
            Ok(()) => Outgoing::ok(encode_body(&FailoverReply::Done {
                target: r.target().to_string(),
                took_ms: started.elapsed().as_millis() as u64,
            })),
            Err(e) => {
                tracing::warn!("{}: {e:#}", r.target());
                let known = targets
                    .served_labels()
                    .iter()
                    .chain(&targets.standby_labels())
                    .any(|l| l.name() == r.target());
                Outgoing::error(if in_use(&e) {
                    Status::Again
                } else if !known {
                    Status::NoEnt
                } else {
                    Status::Io
                })
            }
        }
    }
}

/// Settings of `nacre failover`'s connections: a dead server is given up on quickly; a
/// takeover may wait for the partner's protection record (seconds).
fn admin_net(rpc_timeout_ms: u64) -> nacre_net::NetConfig {
    nacre_net::NetConfig {
        connect_timeout_ms: 3_000,
        rpc_timeout_ms,
        recovery_timeout_ms: 5_000,
        ..nacre_net::NetConfig::default()
    }
}

/// Longest a takeover may take before `nacre failover` gives up waiting for it.
pub const TAKEOVER_WAIT_MS_MAX: u64 = 300_000;

/// `nacre failover`: moves `target` (`demo-OST0001`) of a failover pair to `to`, or to its
/// other service node: the server holding it releases it (if it answers), then the
/// partner takes it over. Returns what happened, for the administrator.
pub fn failover(mgs: Nid, target: &str, to: Option<Nid>) -> anyhow::Result<String> {
    use nacre_net::rpc::{call, RpcError};
    use nacre_wire::mgs::{MgsReply, MgsRequest};
    let (fsname, suffix) = target.rsplit_once('-').with_context(|| {
        format!("bad target name '{target}': expected FSNAME-OST0001 or FSNAME-MDT0000")
    })?;
    let (kind, index) = match (suffix.get(..3), suffix.get(3..)) {
        (Some("OST"), Some(i)) => (TargetKind::Ost, i),
        (Some("MDT"), Some(i)) => (TargetKind::Mdt, i),
        _ => bail!("bad target name '{target}': expected FSNAME-OST0001 or FSNAME-MDT0000"),
    };
    let index = u32::from_str_radix(index, 16)
        .with_context(|| format!("bad target index in '{target}'"))?;
    let mgs_conn = nacre_net::Connection::connect(mgs, admin_net(30_000).for_fs(fsname))
        .with_context(|| format!("cannot reach the MGS at {mgs}"))?;
    let req = MgsRequest::GetConfig {
        fsname: fsname.to_string(),
    };
    let config = match call::<_, MgsReply>(&mgs_conn, req.opcode(), 0, &req) {
        Ok(MgsReply::Config(c)) => c,
        Ok(_) => bail!("unexpected reply from the MGS"),
        Err(e) => bail!("cannot fetch the configuration of '{fsname}' from {mgs}: {e}"),
    };
    let list = if kind == TargetKind::Ost {
        &config.osts
    } else {
        &config.mdts
    };
    let info = list
        .iter()
        .find(|t| t.index == index)
        .with_context(|| format!("{target} is not registered with the MGS at {mgs}"))?;
    if info.servicenodes.is_empty() {
        bail!("{target} has no service nodes: it cannot fail over (format it with --servicenode)");
    }
    let current = info.nids.first().copied();
    let dest = match to {
        Some(n) => n,
        None => info
            .servicenodes
            .iter()
            .find(|n| !info.nids.contains(n))
            .copied()
            .with_context(|| {
                format!("{target}: no other service node than {current:?}; give --to")
            })?,
    };
    let mut out = String::new();
    if let Some(cur) = current.filter(|c| *c != dest) {
        let conn = nacre_net::Connection::new(cur, admin_net(60_000).for_fs(fsname));
        let req = FailoverRequest::Release {
            target: target.to_string(),
        };
        match call::<_, FailoverReply>(&conn, req.opcode(), 0, &req) {
            Ok(_) => out += &format!("{target}: released by {cur}\n"),
            Err(RpcError::Status(Status::NoEnt)) => {
                out += &format!("{target}: {cur} does not serve it\n")
            }
            Err(e) => {
                out += &format!(
                    "{target}: {cur} did not release it ({e}); the partner takes it under \
                     multi-mount protection\n"
                )
            }
        }
    }
    let conn = nacre_net::Connection::new(dest, admin_net(TAKEOVER_WAIT_MS_MAX).for_fs(fsname));
    let req = FailoverRequest::Takeover {
        target: target.to_string(),
    };
    match call::<_, FailoverReply>(&conn, req.opcode(), 0, &req) {
        Ok(FailoverReply::Done { took_ms, .. }) => {
            out += &format!("{target}: now served by {dest} (takeover took {took_ms} ms)");
            Ok(out)
        }
        Err(RpcError::Status(Status::Again)) => bail!(
            "{out}{target}: {dest} refused: another server is alive on it (its protection record \
             moves)"
        ),
        Err(RpcError::Status(Status::NoEnt)) => {
            bail!("{out}{target}: {dest} does not stand by for it (start it with --standby DIR)")
        }
        Err(e) => bail!("{out}{target}: takeover by {dest} failed: {e}"),
    }
}

/// How long a target keeps trying to reach the MGS at start.
pub const REGISTER_TIMEOUT_MS: u64 = 60_000;

/// Registers a target with the MGS, retrying while the MGS is unreachable.
pub fn register(mgs: Nid, target: TargetInfo) -> anyhow::Result<()> {
    let net = NetConfig {
        connect_timeout_ms: REGISTER_TIMEOUT_MS,
        recovery_timeout_ms: REGISTER_TIMEOUT_MS,
        ..NetConfig::default()
    }
    .for_fs(&target.fsname);
    let conn =
        Connection::connect(mgs, net).with_context(|| format!("cannot reach the MGS at {mgs}"))?;
    let name = target.name();
    let req = MgsRequest::Register(target);
    match call::<_, MgsReply>(&conn, req.opcode(), 0, &req) {
        Ok(_) => Ok(()),
        Err(RpcError::Status(Status::Exist)) => {
            bail!("MGS at {mgs} refused {name}: that index is registered by another target (different uuid)")
        }
        Err(RpcError::Status(Status::NotUniq)) => bail!(
            "MGS at {mgs} refused {name}: it manages another file system whose name shares \
             this one's frame slot (rename one, or give it its own MGS)"
        ),
        Err(e) => bail!("registering {name} with the MGS at {mgs}: {e}"),
    }
}

/// Network settings of an MDT's connections to OSTs and the MGS: give up within seconds, as
/// every caller (free-space refresh, object destroy, layout checks) retries later.
pub fn osp_net_config() -> NetConfig {
    NetConfig {
        connect_timeout_ms: 5_000,
        rpc_timeout_ms: 30_000,
        recovery_timeout_ms: 10_000,
        ..NetConfig::default()
    }
}
