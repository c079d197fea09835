//! The management server (MGS).
//!
//! It owns the configuration of every file system it manages: which targets exist, their
//! uuids, and the NIDs serving them. Servers register their targets at start; clients and
//! MDTs fetch the configuration (`FsConfig`: targets, NIDs and OST pools, versioned;
//! `GetConfig`). The MGS is never on the data or metadata path.
//!
//! Invariants: one uuid per (fsname, kind, index), so a second target cannot steal an index;
//! the configuration version only grows; every change is on disk before it is acknowledged
//! (store.rs: a checksummed file, written to a temporary file, synced, renamed over the old
//! one).
//!
//! * OST pools: `change_pool` (`nacre pool` through the control socket of the MGS's
//!   process; docs/pools.md).
//! * Persistent parameters: `nacre ctl set_param -P NAME=VALUE` reaches the MGS through its
//!   process's control socket; the MGS keeps them in `mgs-params` (crc32c-protected,
//!   replaced atomically). Every server process applies the set before it serves and asks
//!   for a new version once a second (`GetParams`), so a change reaches every target within
//!   seconds and survives restarts. Names carry the fsname, so one set serves every file
//!   system of an MGS.
//! * `nodemaps`: the nodemaps and revoked client keys (`change_nodemap`; servers fetch them
//!   with `GetNodemaps`).
//! * `audit`: who changed what (`mgs.audit`), numbered within the MGS's run and read by the
//!   MDTs with `AuditRead` for their changelogs.
//! * `quotas`: the quota master: limits and grace times kept durably, grants per target, the
//!   start of soft limits' grace (docs/quota.md).
//! * `qos`: the QoS master: rules kept durably, each class's rate split among targets by
//!   their reported demand (docs/qos.md).
//! * `watch`: imperative recovery. Registrations and pool changes are events; clients' and
//!   MDTs' long polls (`WaitTargets`) are parked through the network layer's
//!   `Handler::park` and answered when a target restarts or the configuration changes.

/// Who asks what comes through the control socket, as the audit trail names it.
pub const CONTROL_SOCKET: &str = "the control socket (root on this host)";

pub mod audit;
#[cfg(test)]
mod format_tests;
pub mod nodemaps;
pub mod qos;
pub mod quotas;
pub mod store;
pub mod watch;

use nacre_net::{Handler, Incoming, Outgoing};
use nacre_types::{PoolName, Status};
use nacre_wire::mgs::{
    FsConfig, MgsReply, MgsRequest, PoolInfo, PoolSpill, TargetInfo, TargetKind, POOLS_PER_FS_MAX,
};
use nacre_wire::quota::Resource;
use nacre_wire::{decode_body, encode_body};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use store::StoreError;

/// A change of an OST pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolChange {
    /// Makes the pool (empty).
    New,
    /// Adds these OSTs.
    Add(Vec<u32>),
    /// Takes these OSTs out.
    Remove(Vec<u32>),
    /// Removes the pool (it must be empty, and no pool spill into it).
    Destroy,
    /// Sets (or with `None` ends) the pool's spilling into another pool.
    Spill(Option<PoolSpill>),
}

/// Why a pool change is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    /// No pool name.
    #[error("no pool name given")]
    NoName,
    /// The file system is not known here.
    #[error("file system {0} is not known to this MGS")]
    NoFs(String),
    /// `new` of a pool that exists.
    #[error("pool {0} already exists")]
    Exists(PoolName),
    /// The pool does not exist.
    #[error("pool {0} does not exist")]
    NoPool(PoolName),
    /// `destroy` of a pool with OSTs.
    #[error("pool {0} still has OSTs: remove them first")]
    NotEmpty(PoolName),
    /// An OST that is not registered.
    #[error("OST index {0} is not an OST of the file system")]
    NoOst(u32),
    /// An OST already in the pool.
    #[error("OST{0:04x} is already in pool {1}")]
    Member(u32, PoolName),
    /// An OST not in the pool.
    #[error("OST{0:04x} is not in pool {1}")]
    NotMember(u32, PoolName),
    /// A spill into the pool itself, to a pool that does not exist, or a threshold out of
    /// 1 to 100.
    #[error("spilling needs another existing pool and a threshold of 1 to 100 percent")]
    BadSpill,
    /// `destroy` of a pool others spill into.
    #[error("pool {1} spills into pool {0}: end that first")]
    SpilledInto(PoolName, PoolName),
    /// Past [`POOLS_PER_FS_MAX`].
    #[error("a file system has at most {POOLS_PER_FS_MAX} pools")]
    TooMany,
    /// The configuration could not be saved.
    #[error("the MGS could not save its configuration (see its log)")]
    Io,
}

/// The MGS state and request handler.
pub struct Mgs {
    path: PathBuf,
    configs: Mutex<BTreeMap<String, FsConfig>>,
    params_path: PathBuf,
    params: Mutex<store::ParamSets>,
    nodemaps_path: PathBuf,
    nodemaps: Mutex<nacre_wire::nodemap::NodemapSet>,
    watch: watch::Watch,
    /// The quota master.
    pub quotas: quotas::QuotaMaster,
    /// The QoS master.
    pub qos: qos::QosMaster,
    /// Who changed what (`mgs.audit`).
    pub audit: audit::AuditLog,
}

/// Persistent parameters kept per file system at most.
pub const PARAMS_PER_FS_MAX: usize = 1024;

impl Mgs {
    /// Opens the MGS whose target directory is `dir`.
    pub fn open(dir: &Path) -> Result<Mgs, StoreError> {
        let path = dir.join("mgs-config");
        let configs = store::load(&path)?;
        let params_path = dir.join("mgs-params");
        let params = store::load_params(&params_path)?;
        let nodemaps_path = dir.join("mgs-nodemaps");
        let nodemaps = store::load_nodemaps(&nodemaps_path)?;
        let quotas = quotas::QuotaMaster::open(dir.join("mgs-quotas"))?;
        let qos = qos::QosMaster::open(dir.join("mgs-qos"))?;
        Ok(Mgs {
            path,
            configs: Mutex::new(configs),
            params_path,
            params: Mutex::new(params),
            nodemaps_path,
            quotas,
            qos,
            nodemaps: Mutex::new(nodemaps),
            watch: watch::Watch::default(),
            audit: audit::AuditLog::default(),
        })
        .inspect(Mgs::publish_servers)
    }

    /// Registers (or re-registers) a target.
    pub fn register(&self, target: TargetInfo) -> Result<u64, Status> {
        self.register_from(target, None)
    }

    /// Registers a target for a peer that proved no key, at address `from` (None: a server
    /// role proved, or this process). A target already known keeps its addresses unless
    /// the peer is at one of them (its NIDs or service nodes: its own server or its
    /// failover partner) or at another registered server's address: a client cannot move a
    /// server's target to itself. Re-registering a target as it is changes nothing; the
    /// first registration of a new index is taken on trust, as everything is without keys.
    pub fn register_from(&self, target: TargetInfo, from: Option<IpAddr>) -> Result<u64, Status> {
        if let Some(ip) = from {
            self.check_mover(&target, ip)?;
        }
        let (fsname, kind, index) = (target.fsname.clone(), target.kind, target.index);
        let version = self.register_config(target)?;
        self.publish_servers();
        if kind != TargetKind::Mgt {
            // A (re)start: clients waiting on the MGS reconnect to it now.
            self.watch.started(&fsname, kind, index);
        }
        Ok(version)
    }

    /// The keyless rule of [`Mgs::register_from`].
    fn check_mover(&self, target: &TargetInfo, ip: IpAddr) -> Result<(), Status> {
        let ip = ip.to_canonical();
        let has = |nids: &[nacre_types::Nid]| nids.iter().any(|n| n.ip().to_canonical() == ip);
        let configs = self.configs.lock().expect("configs");
        let known = configs.get(&target.fsname).and_then(|c| {
            let list = match target.kind {
                TargetKind::Mdt => &c.mdts,
                TargetKind::Ost => &c.osts,
                TargetKind::Mgt => return None,
            };
            list.iter().find(|t| t.index == target.index).cloned()
        });
        let Some(known) = known else {
            return Ok(());
        };
        let moved = known.nids != target.nids || known.servicenodes != target.servicenodes;
        if !moved
            || has(&known.nids)
            || has(&known.servicenodes)
            || nacre_net::caller::is_server_addr(ip)
        {
            return Ok(());
        }
        nacre_net::caller::refused(|| {
            format!(
                "MGS: refused {ip} (no key, not a server's address) moving {} from {:?} to {:?}",
                target.name(),
                known.nids,
                target.nids
            )
        });
        Err(Status::Perm)
    }

    /// Tells this process's network layer the addresses of every registered server, so
    /// peers without keys at those addresses act as servers (docs/security.md).
    fn publish_servers(&self) {
        let configs = self.configs.lock().expect("configs");
        for (fs, c) in configs.iter() {
            nacre_net::caller::install_servers(fs, c.server_addrs());
        }
    }

    fn register_config(&self, target: TargetInfo) -> Result<u64, Status> {
        let mut configs = self.configs.lock().expect("configs");
        let slot = nacre_types::fs_slot(&target.fsname);
        if let Some(other) = configs
            .keys()
            .find(|fs| **fs != target.fsname && nacre_types::fs_slot(fs) == slot)
        {
            // Frames name a file system by its slot: two sharing one could not be told
            // apart on a server serving both, nor kept apart by their keys here.
            tracing::warn!(
                "refusing {}: file system '{}' shares its frame slot {slot} with '{other}', \
                 which this MGS manages (rename one)",
                target.name(),
                target.fsname
            );
            return Err(Status::NotUniq);
        }
        let config = configs
            .entry(target.fsname.clone())
            .or_insert_with(|| FsConfig {
                fsname: target.fsname.clone(),
                ..FsConfig::default()
            });
        let list = match target.kind {
            TargetKind::Mdt => &mut config.mdts,
            TargetKind::Ost => &mut config.osts,
            TargetKind::Mgt => return Ok(config.version),
        };
        match list.iter_mut().find(|t| t.index == target.index) {
            Some(existing) if existing.uuid != target.uuid => {
                tracing::warn!(
                    "refusing {}: index already used by target uuid {}",
                    target.name(),
                    existing.uuid
                );
                return Err(Status::Exist);
            }
            Some(existing)
                if existing.nids == target.nids && existing.servicenodes == target.servicenodes =>
            {
                return Ok(config.version)
            }
            Some(existing) => {
                existing.nids = target.nids.clone();
                existing.servicenodes = target.servicenodes.clone();
            }
            None => {
                list.push(target.clone());
                list.sort_by_key(|t| t.index);
            }
        }
        config.version += 1;
        let version = config.version;
        if let Err(e) = store::save(&self.path, &configs) {
            tracing::error!("MGS cannot save configuration: {e}");
            return Err(Status::Io);
        }
        tracing::info!(
            "registered {} at {:?} (config version {version})",
            target.name(),
            target.nids
        );
        Ok(version)
    }

    /// Stores (or with an empty value removes) a persistent parameter of `fsname`; returns the
    /// new set. Later settings of the same name replace earlier ones.
    pub fn set_param(
        &self,
        fsname: &str,
        name: &str,
        value: &str,
    ) -> Result<(u64, Vec<(String, String)>), Status> {
        if name.is_empty() || name.len() > 256 || value.len() > 4096 || name.contains(['=', '\n']) {
            return Err(Status::Inval);
        }
        if let Some(local) = nacre_params::local_only_match(name) {
            // Test instruments are armed on one process by its root, never cluster-wide.
            tracing::warn!("{fsname}: set_param -P {name}: refused, {local} is set locally only");
            return Err(Status::Inval);
        }
        let mut all = self.params.lock().expect("params");
        let (version, list) = all.entry(fsname.to_string()).or_default();
        list.retain(|(n, _)| n != name);
        if !value.is_empty() {
            if list.len() >= PARAMS_PER_FS_MAX {
                return Err(Status::NoSpc);
            }
            list.push((name.to_string(), value.to_string()));
        }
        *version += 1;
        let result = (*version, list.clone());
        if let Err(e) = store::save_params(&self.params_path, &all) {
            tracing::error!("MGS cannot save parameters: {e}");
            return Err(Status::Io);
        }
        tracing::info!(
            "{fsname}: set_param -P {name}={value} (version {})",
            result.0
        );
        Ok(result)
    }

    /// Persistent parameters of `fsname`.
    pub fn params(&self, fsname: &str) -> (u64, Vec<(String, String)>) {
        self.params
            .lock()
            .expect("params")
            .get(fsname)
            .cloned()
            .unwrap_or_default()
    }

    /// Changes the OST pools of `fsname` (`nacre pool`): the change is on disk before it
    /// returns, and an event (`TargetKind::Mgt`, index 0: "the configuration changed")
    /// has every MDT and client fetch the configuration again at once. Returns the pools.
    /// Pools are changed through the control socket: root on the MGS host, as the audit
    /// trail records it.
    pub fn change_pool(
        &self,
        fsname: &str,
        pool: PoolName,
        change: PoolChange,
    ) -> Result<Vec<PoolInfo>, PoolError> {
        let what = format!("pool {pool} {change:?}");
        let r = self.change_pool_unrecorded(fsname, pool, change);
        let outcome = match &r {
            Ok(_) => Ok(()),
            Err(PoolError::Io) => Err(Status::Io),
            Err(_) => Err(Status::Inval),
        };
        self.audit.record(fsname, CONTROL_SOCKET, &what, outcome);
        r
    }

    fn change_pool_unrecorded(
        &self,
        fsname: &str,
        pool: PoolName,
        change: PoolChange,
    ) -> Result<Vec<PoolInfo>, PoolError> {
        if pool.is_none() {
            return Err(PoolError::NoName);
        }
        let mut configs = self.configs.lock().expect("configs");
        let config = configs
            .get_mut(fsname)
            .ok_or_else(|| PoolError::NoFs(fsname.to_string()))?;
        let at = config.pools.iter().position(|p| p.name == pool);
        match (change, at) {
            (PoolChange::New, Some(_)) => return Err(PoolError::Exists(pool)),
            (PoolChange::New, None) => {
                if config.pools.len() >= POOLS_PER_FS_MAX {
                    return Err(PoolError::TooMany);
                }
                config.pools.push(PoolInfo {
                    name: pool,
                    osts: Vec::new(),
                    spill: None,
                });
                config.pools.sort_by_key(|p| p.name);
            }
            (_, None) => return Err(PoolError::NoPool(pool)),
            (PoolChange::Destroy, Some(i)) => {
                if !config.pools[i].osts.is_empty() {
                    return Err(PoolError::NotEmpty(pool));
                }
                if let Some(from) = config
                    .pools
                    .iter()
                    .find(|p| p.spill.is_some_and(|s| s.to == pool))
                {
                    return Err(PoolError::SpilledInto(pool, from.name));
                }
                config.pools.remove(i);
            }
            (PoolChange::Spill(spill), Some(i)) => {
                if let Some(s) = spill {
                    let exists = config.pools.iter().any(|p| p.name == s.to);
                    if s.to == pool || !exists || !(1..=100).contains(&s.threshold_pct) {
                        return Err(PoolError::BadSpill);
                    }
                }
                config.pools[i].spill = spill;
            }
            (PoolChange::Add(osts), Some(i)) => {
                let known: Vec<u32> = config.osts.iter().map(|t| t.index).collect();
                if let Some(o) = osts.iter().find(|o| !known.contains(o)) {
                    return Err(PoolError::NoOst(*o));
                }
                let members = &mut config.pools[i].osts;
                if let Some(o) = osts.iter().find(|o| members.contains(o)) {
                    return Err(PoolError::Member(*o, pool));
                }
                members.extend(osts);
                members.sort_unstable();
            }
            (PoolChange::Remove(osts), Some(i)) => {
                let members = &mut config.pools[i].osts;
                if let Some(o) = osts.iter().find(|o| !members.contains(o)) {
                    return Err(PoolError::NotMember(*o, pool));
                }
                members.retain(|m| !osts.contains(m));
            }
        }
        config.version += 1;
        let pools = config.pools.clone();
        if let Err(e) = store::save(&self.path, &configs) {
            tracing::error!("MGS cannot save configuration: {e}");
            return Err(PoolError::Io);
        }
        drop(configs);
        tracing::info!("{fsname}: pool {pool} changed");
        self.watch.started(fsname, TargetKind::Mgt, 0);
        Ok(pools)
    }

    /// Stores a persistent parameter asked through the control socket (`nacre set_param
    /// -P` on the MGS host), recorded in the audit trail.
    pub fn set_param_local(
        &self,
        fsname: &str,
        name: &str,
        value: &str,
    ) -> Result<(u64, Vec<(String, String)>), Status> {
        let r = self.set_param(fsname, name, value);
        let what = format!("set_param fs={fsname:?} {name:?}={value:?}");
        let outcome = r.as_ref().map(|_| ()).map_err(|s| *s);
        self.audit.record(fsname, CONTROL_SOCKET, &what, outcome);
        r
    }

    /// Changes the nodemaps; durable before it returns. Returns the set afterwards.
    pub fn change_nodemap(
        &self,
        change: nodemaps::NodemapChange,
    ) -> Result<nacre_wire::nodemap::NodemapSet, nodemaps::NodemapError> {
        let mut set = self.nodemaps.lock().expect("nodemaps");
        let mut next = set.clone();
        let what = format!("{change:?}");
        // A key's revocation concerns its file system (its changelog records it); other
        // nodemap changes every file system's, and none's changelog.
        let fs = match &change {
            nodemaps::NodemapChange::RevokeKey(k) | nodemaps::NodemapChange::UnrevokeKey(k) => {
                k.fsname.clone()
            }
            _ => String::new(),
        };
        // Nodemaps are changed through the control socket: root on the MGS host.
        let who = CONTROL_SOCKET;
        if let Err(e) = nodemaps::apply(&mut next, change) {
            self.audit
                .record(&fs, who, &format!("nodemap {what}"), Err(Status::Inval));
            return Err(e);
        }
        if let Err(e) = store::save_nodemaps(&self.nodemaps_path, &next) {
            tracing::error!("MGS cannot save nodemaps: {e}");
            self.audit
                .record(&fs, who, &format!("nodemap {what}"), Err(Status::Io));
            return Err(nodemaps::NodemapError::Io);
        }
        self.audit
            .record(&fs, who, &format!("nodemap {what}"), Ok(()));
        *set = next.clone();
        tracing::info!("nodemap change: {what}");
        Ok(next)
    }

    /// Every nodemap.
    pub fn nodemaps(&self) -> nacre_wire::nodemap::NodemapSet {
        self.nodemaps.lock().expect("nodemaps").clone()
    }

    /// Refuses a peer whose nodemap is not an admin one (its root is squashed: it may not
    /// change quotas).
    /// Administration (quotas, QoS): the network layer let only servers and administrators
    /// through; a keyless peer's nodemap must also be an admin one.
    fn admin_peer(&self, caller: &nacre_net::Caller) -> Result<(), Status> {
        match caller.nodemap()? {
            Some(m) if !m.admin => Err(Status::Perm),
            _ => Ok(()),
        }
    }

    /// Every target registered for `fsname`.
    fn all_targets(&self, fsname: &str) -> Vec<(TargetKind, u32)> {
        self.config(fsname).map_or(Vec::new(), |c| {
            c.mdts
                .iter()
                .chain(&c.osts)
                .map(|t| (t.kind, t.index))
                .collect()
        })
    }

    /// How many slaves share the quota keys of `pool` of `target`'s slave counting
    /// `resource`: with no pool, those counting it for `fsname` (bytes: every OST and MDT;
    /// inodes: every MDT; at least 1); with one, the pool's OSTs, or `None` if `target` is
    /// not one of them (an MDT's bytes are under no pool's limit).
    fn sharing(
        &self,
        fsname: &str,
        target: (TargetKind, u32),
        resource: Resource,
        pool: PoolName,
    ) -> Option<usize> {
        let config = self.config(fsname);
        if pool.is_none() {
            // Bytes are counted by every OST and by every MDT (data on the MDT).
            return Some(
                config
                    .map_or(1, |c| match resource {
                        Resource::Inodes => c.mdts.len(),
                        Resource::Blocks => c.osts.len() + c.mdts.len(),
                    })
                    .max(1),
            );
        }
        let config = config?;
        let members = &config.pool(pool)?.osts;
        (target.0 == TargetKind::Ost && members.contains(&target.1)).then_some(members.len())
    }

    /// The configuration of `fsname`.
    pub fn config(&self, fsname: &str) -> Option<FsConfig> {
        self.configs.lock().expect("configs").get(fsname).cloned()
    }
}

/// The status of a refused QoS change.
fn qos_status(e: qos::QosError) -> Status {
    match e {
        qos::QosError::Rule(_) => Status::Inval,
        qos::QosError::NoRule => Status::NoEnt,
        qos::QosError::TooMany => Status::TooBig,
        qos::QosError::Io => Status::Io,
    }
}

impl Handler for Mgs {
    fn park(&self, req: Incoming) -> Option<Incoming> {
        match decode_body::<MgsRequest>(&req.body) {
            Ok(MgsRequest::WaitTargets {
                fsname,
                after,
                wait_ms,
            }) => {
                self.watch.poll(req, fsname, after, wait_ms);
                None
            }
            _ => Some(req),
        }
    }

    fn handle(&self, req: &Incoming) -> Outgoing {
        let request: MgsRequest = match decode_body(&req.body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("MGS: bad request from {}: {e}", req.peer);
                return Outgoing::error(Status::Proto);
            }
        };
        if let Some(fs) = request.fsname() {
            let named = nacre_types::target_slot(req.header.target);
            if named != 0 && named != nacre_types::fs_slot(fs) {
                tracing::warn!(
                    "MGS: {} asked about file system {fs} in a frame of another (slot \
                     {named}): refused",
                    req.peer
                );
                return Outgoing::error(Status::Access);
            }
        }
        if request.opcode() != req.header.opcode {
            // The role table judged the header's opcode: the body must be that request.
            nacre_net::caller::refused(|| {
                format!(
                    "MGS: refused {:#06x} from {}: {}",
                    req.header.opcode,
                    req.caller.describe(),
                    nacre_net::caller::refusal_reason(Status::Proto)
                )
            });
            return Outgoing::error(Status::Proto);
        }
        let audited =
            audit::what(&request).map(|what| (request.fsname().unwrap_or("").to_string(), what));
        let reply = match request {
            MgsRequest::Register(target) => {
                let from = match req.caller.proved() {
                    None => req.caller.addr().map(|a| a.ip()),
                    Some(_) => None,
                };
                self.register_from(target, from)
                    .map(|version| MgsReply::Registered { version })
            }
            MgsRequest::GetConfig { fsname } => self
                .config(&fsname)
                .map(MgsReply::Config)
                .ok_or(Status::NoEnt),
            MgsRequest::SetParam {
                fsname,
                name,
                value,
            } => self
                .set_param(&fsname, &name, &value)
                .map(|(version, params)| MgsReply::Params { version, params }),
            MgsRequest::GetParams { fsname } => {
                let (version, params) = self.params(&fsname);
                Ok(MgsReply::Params { version, params })
            }
            MgsRequest::GetNodemaps => Ok(MgsReply::Nodemaps(self.nodemaps())),
            MgsRequest::QuotaSet {
                fsname,
                key,
                limits,
            } => self
                .admin_peer(&req.caller)
                .and_then(|()| {
                    let known = key.pool.is_none()
                        || self
                            .config(&fsname)
                            .is_some_and(|c| c.pool(key.pool).is_some());
                    if !known {
                        return Err(Status::NoEnt);
                    }
                    self.quotas.set(&fsname, key, limits).map_err(|e| match e {
                        quotas::QuotaError::Io => Status::Io,
                        quotas::QuotaError::TooMany => Status::TooBig,
                        quotas::QuotaError::SoftAboveHard
                        | quotas::QuotaError::Root
                        | quotas::QuotaError::PoolInodes => Status::Inval,
                    })
                })
                .map(|()| {
                    MgsReply::Quotas(self.quotas.view(
                        &fsname,
                        &[key.id],
                        &self.all_targets(&fsname),
                    ))
                }),
            MgsRequest::QuotaGrace {
                fsname,
                block_s,
                inode_s,
            } => self
                .admin_peer(&req.caller)
                .and_then(|()| {
                    self.quotas
                        .set_grace(&fsname, block_s, inode_s)
                        .map_err(|_| Status::Io)
                })
                .map(|()| {
                    MgsReply::Quotas(self.quotas.view(&fsname, &[], &self.all_targets(&fsname)))
                }),
            MgsRequest::QuotaGet { fsname, ids } => {
                if ids.len() > nacre_wire::oss::QUOTA_IDS_MAX {
                    Err(Status::TooBig)
                } else {
                    Ok(MgsReply::Quotas(self.quotas.view(
                        &fsname,
                        &ids,
                        &self.all_targets(&fsname),
                    )))
                }
            }
            MgsRequest::QuotaAcquire(a) => {
                let n = self
                    .sharing(&a.fsname, a.target, a.resource, a.key.pool)
                    .unwrap_or(0);
                Ok(MgsReply::QuotaGrant(self.quotas.acquire(&a, n)))
            }
            MgsRequest::QuotaSync(r) => Ok(MgsReply::QuotaSynced(self.quotas.sync(&r, |pool| {
                self.sharing(&r.fsname, r.target, r.resource, pool)
            }))),
            MgsRequest::QosSet { fsname, rule } => self
                .admin_peer(&req.caller)
                .and_then(|()| self.qos.set(&fsname, rule).map_err(qos_status))
                .map(MgsReply::QosRules),
            MgsRequest::QosDel { fsname, name } => self
                .admin_peer(&req.caller)
                .and_then(|()| self.qos.del(&fsname, &name).map_err(qos_status))
                .map(MgsReply::QosRules),
            MgsRequest::QosGet { fsname } => Ok(MgsReply::QosRules(self.qos.get(&fsname))),
            MgsRequest::QosSync(r) => {
                let n = self.all_targets(&r.fsname).len() as u32;
                Ok(MgsReply::QosShares(self.qos.sync(&r, n.max(1))))
            }
            MgsRequest::AuditRead {
                fsname,
                epoch,
                after,
            } => {
                let (epoch, records) = self.audit.since(&fsname, epoch, after);
                Ok(MgsReply::Audit { epoch, records })
            }
            // Taken by `park` before it gets here.
            MgsRequest::WaitTargets { .. } => Err(Status::Proto),
        };
        if let Some((fsname, what)) = audited {
            let outcome = reply.as_ref().map(|_| ()).map_err(|s| *s);
            self.audit
                .record(&fsname, &req.caller.describe(), &what, outcome);
        }
        match reply {
            Ok(r) => Outgoing::ok(encode_body(&r)),
            Err(s) => Outgoing::error(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ost(index: u32, uuid: &str) -> TargetInfo {
        TargetInfo {
            kind: TargetKind::Ost,
            index,
            fsname: "demo".into(),
            uuid: uuid.into(),
            nids: vec!["127.0.0.1:7000@tcp".parse().unwrap()],
            servicenodes: Vec::new(),
        }
    }

    #[test]
    fn persistent_params_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mgs = Mgs::open(dir.path()).unwrap();
            mgs.set_param("demo", "osd.*.direct_io", "0").unwrap();
            mgs.set_param("demo", "mdt.*.sync_on_reply", "1").unwrap();
            mgs.set_param("demo", "osd.*.direct_io", "1").unwrap();
            assert_eq!(mgs.set_param("demo", "bad=name", "1"), Err(Status::Inval));
        }
        let mgs = Mgs::open(dir.path()).unwrap();
        let (version, params) = mgs.params("demo");
        assert_eq!(version, 3);
        assert_eq!(
            params,
            vec![
                ("mdt.*.sync_on_reply".into(), "1".into()),
                ("osd.*.direct_io".into(), "1".into())
            ]
        );
        assert_eq!(mgs.params("other"), (0, vec![]));
    }

    #[test]
    fn nodemaps_survive_reopen_and_are_served() {
        use nacre_wire::nodemap::NidRange;
        let dir = tempfile::tempdir().unwrap();
        {
            let mgs = Mgs::open(dir.path()).unwrap();
            mgs.change_nodemap(nodemaps::NodemapChange::Add("lab".into()))
                .unwrap();
            let range = NidRange::parse("10.1.0.0/16").unwrap();
            mgs.change_nodemap(nodemaps::NodemapChange::AddRange("lab".into(), range))
                .unwrap();
            assert!(mgs
                .change_nodemap(nodemaps::NodemapChange::Del("nope".into()))
                .is_err());
        }
        let mgs = Mgs::open(dir.path()).unwrap();
        let set = mgs.nodemaps();
        assert_eq!(set.version, 2);
        assert_eq!(set.find("10.1.2.3".parse().unwrap()).unwrap().name, "lab");
    }

    #[test]
    fn revoked_keys_survive_reopen_and_a_format_1_file_is_read() {
        use nacre_wire::nodemap::RevokedKey;
        let dir = tempfile::tempdir().unwrap();
        let key = RevokedKey::parse("demo:lab@tenant").unwrap();
        {
            let mgs = Mgs::open(dir.path()).unwrap();
            mgs.change_nodemap(nodemaps::NodemapChange::Add("tenant".into()))
                .unwrap();
            mgs.change_nodemap(nodemaps::NodemapChange::RevokeKey(key.clone()))
                .unwrap();
            assert!(mgs
                .change_nodemap(nodemaps::NodemapChange::RevokeKey(key.clone()))
                .is_err());
            let audit = mgs.audit.text();
            assert!(
                audit.contains("RevokeKey") && audit.contains(": done"),
                "{audit}"
            );
        }
        let mgs = Mgs::open(dir.path()).unwrap();
        let set = mgs.nodemaps();
        assert_eq!(set.revoked, vec![key.clone()]);
        let slot = nacre_types::fs_slot("demo");
        assert!(set.is_revoked(slot, "lab", Some("tenant")));
        assert!(
            !set.is_revoked(slot, "lab", None),
            "another key of that name"
        );
        assert!(!set.is_revoked(nacre_types::fs_slot("other"), "lab", Some("tenant")));
        mgs.change_nodemap(nodemaps::NodemapChange::UnrevokeKey(key))
            .unwrap();
        assert!(mgs.nodemaps().revoked.is_empty());
        // A file of format 1 (before revoked keys) is read, with none.
        let path = dir.path().join("mgs-nodemaps");
        store::save_nodemaps_v1(&path, &set).unwrap();
        let old = store::load_nodemaps(&path).unwrap();
        assert_eq!((old.version, &old.maps), (set.version, &set.maps));
        assert!(old.revoked.is_empty());
    }

    #[test]
    fn a_keyless_peer_cannot_move_a_servers_target_to_itself() {
        let dir = tempfile::tempdir().unwrap();
        let mgs = Mgs::open(dir.path()).unwrap();
        let at = |ip: &str| TargetInfo {
            fsname: "movefs".into(),
            nids: vec![format!("{ip}:988@tcp").parse().unwrap()],
            ..ost(0, "u0")
        };
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        // First registration of an index: on trust.
        assert_eq!(mgs.register_from(at("10.91.0.2"), ip("10.91.0.2")), Ok(1));
        // A client's address moving it to itself: refused, nothing changed.
        assert_eq!(
            mgs.register_from(at("10.91.0.66"), ip("10.91.0.66")),
            Err(Status::Perm)
        );
        assert_eq!(
            mgs.config("movefs").unwrap().osts[0].nids,
            at("10.91.0.2").nids
        );
        // The same registration again changes nothing and is allowed from anywhere.
        assert_eq!(mgs.register_from(at("10.91.0.2"), ip("10.91.0.66")), Ok(1));
        // Its own server moves it (a new interface).
        assert_eq!(mgs.register_from(at("10.91.0.3"), ip("10.91.0.2")), Ok(2));
        // A proved server role moves it from anywhere.
        assert_eq!(mgs.register_from(at("10.91.0.4"), None), Ok(3));
    }

    #[test]
    fn test_instruments_are_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mgs = Mgs::open(dir.path()).unwrap();
        for name in ["fail_loc", "fail_*", "*"] {
            assert_eq!(
                mgs.set_param("", name, "net.panic"),
                Err(Status::Inval),
                "{name}"
            );
        }
        assert_eq!(mgs.params(""), (0, vec![]));
    }

    #[test]
    fn register_persist_and_refuse_stolen_index() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mgs = Mgs::open(dir.path()).unwrap();
            assert_eq!(mgs.register(ost(0, "a")), Ok(1));
            assert_eq!(mgs.register(ost(1, "b")), Ok(2));
            assert_eq!(mgs.register(ost(1, "b")), Ok(2));
            assert_eq!(mgs.register(ost(1, "c")), Err(Status::Exist));
        }
        let mgs = Mgs::open(dir.path()).unwrap();
        let config = mgs.config("demo").unwrap();
        assert_eq!(config.osts.len(), 2);
        assert_eq!(config.version, 2);
    }

    #[test]
    fn a_file_system_sharing_another_ones_frame_slot_is_refused() {
        let mut seen = std::collections::HashMap::new();
        let (x, y) = (0..)
            .find_map(|n| {
                let name = format!("f{n}");
                seen.insert(nacre_types::fs_slot(&name), name.clone())
                    .map(|other| (other, name))
            })
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mgs = Mgs::open(dir.path()).unwrap();
        let on = |fs: &str, uuid: &str| TargetInfo {
            fsname: fs.into(),
            ..ost(0, uuid)
        };
        assert!(mgs.register(on(&x, "a")).is_ok());
        assert_eq!(mgs.register(on(&y, "b")), Err(Status::NotUniq));
        assert!(mgs.config(&y).is_none(), "nothing of the refused one kept");
        assert!(
            mgs.register(on("demo", "c")).is_ok(),
            "other names still register"
        );
        assert!(mgs.register(on(&x, "d")).is_err(), "x's OST0000 is a's");
    }
}
