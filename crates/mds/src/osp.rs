//! The MDS's view of the other targets (Lustre's OSP): configuration from the MGS, one
//! connection per OST, cached free space, and the object-placement policy; and one connection
//! per other MDT, for cross-MDT operations.
//!
//! Placement follows Lustre's QoS allocator in spirit: when free space is balanced (the
//! emptiest and fullest OST differ by under 17% of the emptiest) OSTs are taken round-robin,
//! in an order that alternates between servers (as Lustre's `lod_qos_calc_rr`: consecutive
//! files, and a striped file's stripes, go to different OSS processes first); otherwise they
//! are drawn at random, weighted by available bytes.

use nacre_net::rpc::{call, RpcError};
use nacre_net::{Connection, NetConfig};
use nacre_types::layout::StripeSpec;
use nacre_types::PoolName;
use nacre_types::{Nid, StatFs, Status};
use nacre_wire::mgs::{FsConfig, MgsReply, MgsRequest, PoolSpill};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Most OSTs asked for their free space at once by one refresh.
pub const STATFS_PROBES_IN_FLIGHT_MAX: usize = 16;

/// OST `index`'s free space, if it answers (through `conn`) before the connection's
/// recovery timeout.
fn statfs_of(conn: &Arc<Connection>, index: u32) -> Option<StatFs> {
    let req = OssCall::server(OssRequest::StatFs);
    match call::<_, OssReply>(conn, OssRequest::StatFs.opcode(), index, &req) {
        Ok(OssReply::StatFs(s)) => Some(s),
        _ => None,
    }
}

/// Free-space imbalance (percent) above which placement is weighted instead of round-robin.
pub const QOS_THRESHOLD_PERCENT: u64 = 17;

/// A pool as an MDT uses it: its member OST indices and its spilling.
type PoolEntry = (Vec<u32>, Option<PoolSpill>);

struct OstEntry {
    nid: Option<Nid>,
    /// None for the placeholder OSTs of a detached pool.
    conn: Option<Arc<Connection>>,
    statfs: Option<StatFs>,
}

/// What runs a change of the pools: called with what installs it, which it calls once it
/// may (an MDT first calls back the delegations whose holders placed files by the old
/// pools).
pub type PoolsHook = Box<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

/// The OSTs of one file system, as seen from an MDT.
pub struct OstPool {
    fsname: String,
    mgs: Arc<Connection>,
    net: NetConfig,
    osts: RwLock<BTreeMap<u32, OstEntry>>,
    mdts: RwLock<BTreeMap<u32, (Nid, Arc<Connection>)>>,
    /// The uuids of the file system's MDTs: their requests are a peer's, not a client's.
    peers: RwLock<std::collections::HashSet<[u8; 16]>>,
    config_version: RwLock<u64>,
    /// OST pools (the MGS's): name → member OST indices and spilling.
    pools: RwLock<HashMap<PoolName, PoolEntry>>,
    /// Layouts allocated in a pool's spill target because the pool was full.
    pub spilled: AtomicU64,
    /// Runs a change of the pools, which it installs itself once it may
    /// ([`OstPool::before_pools_change`]).
    pools_hook: std::sync::OnceLock<PoolsHook>,
    /// Held while a configuration is applied: one at a time, in order.
    applying: std::sync::Mutex<()>,
    /// True while a change of the pools is being installed.
    pools_changing: std::sync::atomic::AtomicBool,
    rr_cursor: AtomicUsize,
    /// No MGS and no OST servers: the configuration never changes.
    detached: bool,
}

impl OstPool {
    /// A pool fed by the MGS at `mgs`; its connections name `fsname`'s targets and prove
    /// its key ([`NetConfig::for_fs`]).
    pub fn new(fsname: &str, mgs: Nid, net: NetConfig) -> OstPool {
        let net = net.for_fs(fsname);
        OstPool {
            fsname: fsname.into(),
            mgs: Connection::new(mgs, net.clone()),
            net,
            osts: RwLock::new(BTreeMap::new()),
            mdts: RwLock::new(BTreeMap::new()),
            peers: RwLock::new(std::collections::HashSet::new()),
            config_version: RwLock::new(0),
            pools: RwLock::new(HashMap::new()),
            spilled: AtomicU64::new(0),
            pools_hook: std::sync::OnceLock::new(),
            applying: std::sync::Mutex::new(()),
            pools_changing: std::sync::atomic::AtomicBool::new(false),
            rr_cursor: AtomicUsize::new(0),
            detached: false,
        }
    }

    /// A pool of `osts` OST indices with no servers behind them, for driving an MDT alone
    /// (mds-survey): layouts get object ids, but nothing is ever sent to an OST.
    pub fn detached(fsname: &str, osts: u32) -> OstPool {
        let unused = Nid::tcp(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let mut pool = OstPool::new(fsname, unused, NetConfig::default());
        pool.detached = true;
        {
            let mut map = pool.osts.write().expect("osts");
            for index in 0..osts {
                map.insert(
                    index,
                    OstEntry {
                        nid: None,
                        conn: None,
                        statfs: None,
                    },
                );
            }
        }
        pool
    }

    /// Waits at the MGS (at most `wait_ms`) for a change of the file system's targets or
    /// configuration (a pool changed) after event `after` (None: the first call, answered
    /// at once). Returns the newest event's number and whether anything happened since
    /// `after`; the caller refreshes then.
    pub fn watch(&self, after: Option<u64>, wait_ms: u32) -> Result<(u64, bool), RpcError> {
        if self.detached {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(wait_ms)));
            return Ok((0, false));
        }
        let req = MgsRequest::WaitTargets {
            fsname: self.fsname.clone(),
            after: after.unwrap_or(u64::MAX),
            wait_ms: if after.is_some() { wait_ms } else { 0 },
        };
        match call::<_, MgsReply>(&self.mgs, req.opcode(), 0, &req)? {
            MgsReply::Targets { seq, started } => Ok((seq, after.is_some() && !started.is_empty())),
            _ => Err(RpcError::Status(Status::Proto)),
        }
    }

    /// Fetches the configuration, from a request's path (a transaction may be open: the
    /// store's lock held): asks no OST for its free space (one down would hold the request
    /// for a recovery timeout; the watch thread's refresh does), never waits for another
    /// refresh, and leaves a change of the pools, whose installation waits for delegations
    /// to come back (and may evict, which takes the store's lock), to
    /// [`OstPool::refresh_installing`] (the watch thread, a pool command).
    pub fn refresh(&self) -> Result<(), RpcError> {
        self.refresh_with(false, false)
    }

    /// [`OstPool::refresh`], installing a change of the pools too (through the hook:
    /// [`OstPool::before_pools_change`]) and waiting for any other refresh under way:
    /// returns once the configuration fetched, or a newer one, is in place. Never from a
    /// request's path.
    pub fn refresh_installing(&self) -> Result<(), RpcError> {
        self.refresh_with(true, true)
    }

    /// [`OstPool::refresh_installing`] without asking the OSTs for their free space: at an
    /// MDT's start, when its OSTs may not be up yet (each one down cost a whole recovery
    /// timeout, 10 s, before the MDT served anything). The next refresh asks them.
    pub fn install_config(&self) -> Result<(), RpcError> {
        self.refresh_with(true, false)
    }

    fn refresh_with(&self, installing: bool, probe: bool) -> Result<(), RpcError> {
        if self.detached {
            return Ok(());
        }
        let req = MgsRequest::GetConfig {
            fsname: self.fsname.clone(),
        };
        let config = match call::<_, MgsReply>(&self.mgs, req.opcode(), 0, &req) {
            Ok(MgsReply::Config(c)) => c,
            Ok(_) => return Err(RpcError::Status(Status::Proto)),
            Err(RpcError::Status(Status::NoEnt)) => FsConfig::default(),
            Err(e) => return Err(e),
        };
        self.apply_config(&config, installing);
        if !probe {
            return Ok(());
        }
        let conns: Vec<(u32, Arc<Connection>)> = self
            .osts
            .read()
            .expect("osts")
            .iter()
            .filter_map(|(i, e)| Some((*i, e.conn.clone()?)))
            .collect();
        // Asked together (a batch at a time): OSTs that are down cost one recovery timeout,
        // not one each.
        for batch in conns.chunks(STATFS_PROBES_IN_FLIGHT_MAX) {
            let answers: Vec<(u32, Option<StatFs>)> = std::thread::scope(|scope| {
                let mut inline = Vec::new();
                let mut asked = Vec::new();
                for (index, conn) in batch {
                    let ask = move || (*index, statfs_of(conn, *index));
                    match std::thread::Builder::new()
                        .name("ost-statfs".into())
                        .spawn_scoped(scope, ask)
                    {
                        Ok(h) => asked.push(h),
                        // No thread to be had: asked from here, in turn.
                        Err(_) => inline.push(ask()),
                    }
                }
                inline.extend(asked.into_iter().filter_map(|h| h.join().ok()));
                inline
            });
            let mut osts = self.osts.write().expect("osts");
            for (index, statfs) in answers {
                if let Some(e) = osts.get_mut(&index) {
                    e.statfs = statfs;
                }
            }
        }
        Ok(())
    }

    /// From now on, a change of the pools is installed by `hook` (once; later calls are
    /// ignored).
    pub fn before_pools_change(&self, hook: PoolsHook) {
        let _ = self.pools_hook.set(hook);
    }

    /// True while a change of the pools is being installed.
    pub fn pools_changing(&self) -> bool {
        self.pools_changing.load(Ordering::Acquire)
    }

    /// Applies `config`; `installing`: see [`OstPool::refresh_installing`]. Otherwise the
    /// targets are taken, and the version and pools only if the pools did not change.
    fn apply_config(&self, config: &FsConfig, installing: bool) {
        // One configuration applied at a time, each in full before the next: a caller
        // that installs returns once the configuration it fetched, or a newer one, is in
        // place (a pool command's refresh waits for the watch thread's apply of the same
        // change, and with it for the delegations that change calls back). A poisoned
        // lock (a panic in a hook) is taken over: the state it guards is whole.
        let _one = match installing {
            true => Some(self.applying.lock().unwrap_or_else(|e| e.into_inner())),
            false => match self.applying.try_lock() {
                Ok(g) => Some(g),
                // Another apply is under way (perhaps waiting for delegations): it takes
                // this configuration or a newer one.
                Err(_) => return,
            },
        };
        let mut version = self.config_version.write().expect("version");
        // Versions only grow: one fetched before a newer one was applied is stale.
        if config.version <= *version && config.version != 0 {
            return;
        }
        let pools: HashMap<PoolName, PoolEntry> = config
            .pools
            .iter()
            .map(|p| (p.name, (p.osts.clone(), p.spill)))
            .collect();
        let current = self.pools.read().expect("pools").clone();
        if current != pools {
            // Only a pool that lost OSTs, went, or changed its spilling can refuse a file a
            // delegation's holder placed by it: such a change waits for the delegations
            // (the hook); one that only adds is installed at once.
            let narrows = current.iter().any(|(name, (members, spill))| {
                pools.get(name).is_none_or(|(now, now_spill)| {
                    now_spill != spill || !members.iter().all(|m| now.contains(m))
                })
            });
            let hook = self.pools_hook.get().filter(|_| narrows);
            if hook.is_some() && !installing {
                // Left, with the version, to the watch thread (woken by the same change,
                // or within OST_REFRESH_MS) or the pool command; the targets are taken.
                drop(version);
                self.apply_targets(config);
                return;
            }
            // The hook may wait (for delegations to come back, at most their callback
            // timeout): the version's readers are not held meanwhile (another apply waits
            // for this one, on `applying`).
            drop(version);
            let mut install = || *self.pools.write().expect("pools") = pools.clone();
            match hook {
                Some(hook) => {
                    self.pools_changing.store(true, Ordering::Release);
                    // Cleared even if the hook panics (no directory would be delegated again).
                    struct Clear<'a>(&'a std::sync::atomic::AtomicBool);
                    impl Drop for Clear<'_> {
                        fn drop(&mut self) {
                            self.0.store(false, Ordering::Release);
                        }
                    }
                    let _clear = Clear(&self.pools_changing);
                    hook(&mut install);
                }
                None => install(),
            }
            version = self.config_version.write().expect("version");
        }
        *version = config.version;
        drop(version);
        self.apply_targets(config);
    }

    /// Takes the MDTs and OSTs `config` names.
    fn apply_targets(&self, config: &FsConfig) {
        self.peers.write().expect("peers").extend(
            config
                .mdts
                .iter()
                .filter_map(|t| uuid::Uuid::parse_str(&t.uuid).ok())
                .map(|u| *u.as_bytes()),
        );
        {
            let mut mdts = self.mdts.write().expect("mdts");
            for t in &config.mdts {
                let Some(&nid) = t.nids.first() else { continue };
                match mdts.get_mut(&t.index) {
                    // Moved to the partner of its failover pair: requests in flight follow.
                    Some((n, conn)) => {
                        conn.set_servers(nid, &t.servicenodes);
                        *n = nid;
                    }
                    None => {
                        let conn = Connection::new(nid, self.net.clone());
                        conn.set_servers(nid, &t.servicenodes);
                        mdts.insert(t.index, (nid, conn));
                    }
                }
            }
        }
        let mut osts = self.osts.write().expect("osts");
        for t in &config.osts {
            let Some(&nid) = t.nids.first() else { continue };
            if let Some(e) = osts.get_mut(&t.index) {
                if let Some(conn) = &e.conn {
                    conn.set_servers(nid, &t.servicenodes);
                    e.nid = Some(nid);
                    continue;
                }
            }
            let stale = osts.get(&t.index).is_none_or(|e| e.nid != Some(nid));
            if stale {
                let conn = Connection::new(nid, self.net.clone());
                conn.set_servers(nid, &t.servicenodes);
                osts.insert(
                    t.index,
                    OstEntry {
                        nid: Some(nid),
                        conn: Some(conn),
                        statfs: None,
                    },
                );
            }
        }
    }

    /// Resolves `spec` against the OSTs known (those of `pool` if it names one: a start
    /// OST must be one of them), asking the MGS again first if the
    /// request needs more OSTs than are known or names a pool not known (an OST may have
    /// registered, a pool been made or given OSTs, since the last refresh). `EINVAL` for a
    /// request no OST set can meet or a pool that does not exist; `ENOSPC` for a pool with
    /// no OSTs.
    pub fn resolve(
        &self,
        spec: StripeSpec,
        base: StripeSpec,
        pool: PoolName,
    ) -> Result<(u16, u32, Option<u32>), Status> {
        let attempt = || -> Result<(u16, u32, Option<u32>), Status> {
            let members = self.members(pool)?;
            if members.is_empty() {
                return Err(Status::NoSpc);
            }
            // The start OST is an OST index: one of the set's members.
            let start = match spec.over(base).start_ost {
                s if s < 0 => None,
                s if members.contains(&(s as u32)) => Some(s as u32),
                _ => return Err(Status::Inval),
            };
            let any_start = |s: StripeSpec| StripeSpec { start_ost: -1, ..s };
            // An inherited count larger than the set (a pool that lost OSTs since its
            // directory was set up) is cut to the set, as Lustre does; one asked for is not.
            let mut base = any_start(base);
            if spec.stripe_count == 0 && base.stripe_count > members.len() as i32 {
                base.stripe_count = members.len() as i32;
            }
            let (count, size, _) = any_start(spec)
                .resolve(base, members.len() as u32)
                .map_err(|_| Status::Inval)?;
            Ok((count, size, start))
        };
        match attempt() {
            Ok(r) => Ok(r),
            Err(_) => {
                if let Err(e) = self.refresh() {
                    tracing::debug!("OST refresh: {e}");
                }
                attempt()
            }
        }
    }

    /// The OSTs known of `pool` (all OSTs for none); `EINVAL` if no such pool is known.
    fn members(&self, pool: PoolName) -> Result<Vec<u32>, Status> {
        let osts = self.osts.read().expect("osts");
        if pool.is_none() {
            return Ok(osts.keys().copied().collect());
        }
        let pools = self.pools.read().expect("pools");
        let (members, _) = pools.get(&pool).ok_or(Status::Inval)?;
        Ok(members
            .iter()
            .copied()
            .filter(|i| osts.contains_key(i))
            .collect())
    }

    /// The pool a new layout asked for in `pool` goes to: its spill target while `pool` is
    /// at least its threshold full (by the OSTs' free space as last refreshed, every few
    /// seconds, plus what destroys queued on them will free: `pending`), else `pool`
    /// itself. One hop: the target's own spilling is not followed.
    pub fn spill_target(&self, pool: PoolName, pending: impl Fn(u32) -> u64) -> PoolName {
        let to = self.spill_target_uncounted(pool, pending);
        if to != pool {
            self.spilled.fetch_add(1, Ordering::Relaxed);
        }
        to
    }

    /// [`OstPool::spill_target`] for a check that places nothing (not counted in
    /// [`OstPool::spilled`]).
    pub fn spill_target_uncounted(&self, pool: PoolName, pending: impl Fn(u32) -> u64) -> PoolName {
        if pool.is_none() {
            return pool;
        }
        let Some((members, Some(spill))) = self.pools.read().expect("pools").get(&pool).cloned()
        else {
            return pool;
        };
        let osts = self.osts.read().expect("osts");
        let (mut total, mut free) = (0u128, 0u128);
        for (i, s) in members
            .iter()
            .filter_map(|i| Some((*i, osts.get(i)?.statfs?)))
        {
            total += u128::from(s.bytes_total);
            let avail = s.bytes_avail.saturating_add(pending(i));
            free += u128::from(avail.min(s.bytes_total));
        }
        let full = total > 0 && (total - free) * 100 >= u128::from(spill.threshold_pct) * total;
        if full {
            return spill.to;
        }
        pool
    }

    /// The pools known: name → member OST indices.
    pub fn pools(&self) -> Vec<(PoolName, Vec<u32>)> {
        let mut v: Vec<_> = self
            .pools
            .read()
            .expect("pools")
            .iter()
            .map(|(n, (m, _))| (*n, m.clone()))
            .collect();
        v.sort();
        v
    }

    /// Connection to MDT `index` (asking the MGS again if it is not known yet).
    pub fn mdt(&self, index: u32) -> Result<Arc<Connection>, Status> {
        let known = |pool: &OstPool| {
            pool.mdts
                .read()
                .expect("mdts")
                .get(&index)
                .map(|(_, c)| c.clone())
        };
        if let Some(c) = known(self) {
            return Ok(c);
        }
        if let Err(e) = self.refresh() {
            tracing::debug!("MDT refresh: {e}");
        }
        known(self).ok_or(Status::NoDev)
    }

    /// True if `uuid` is one of the file system's MDTs (as known from the last refresh).
    pub fn is_peer(&self, uuid: &[u8; 16]) -> bool {
        self.peers.read().expect("peers").contains(uuid)
    }

    /// Indexes of the MDTs known (this one included once registered).
    pub fn mdt_indexes(&self) -> Vec<u32> {
        self.mdts.read().expect("mdts").keys().copied().collect()
    }

    /// Number of OSTs known.
    pub fn count(&self) -> u32 {
        self.osts.read().expect("osts").len() as u32
    }

    /// Connection to an OST.
    pub fn conn(&self, index: u32) -> Option<Arc<Connection>> {
        self.osts
            .read()
            .expect("osts")
            .get(&index)
            .and_then(|e| e.conn.clone())
    }

    /// Picks `count` distinct OSTs of `pool` (any OST for none), starting at `start` if
    /// given.
    pub fn choose(
        &self,
        count: usize,
        start: Option<u32>,
        pool: PoolName,
    ) -> Result<Vec<u32>, Status> {
        let indices = self.members(pool)?;
        let osts = self.osts.read().expect("osts");
        if count == 0 || count > indices.len() {
            return Err(if indices.is_empty() {
                Status::NoSpc
            } else {
                Status::Inval
            });
        }
        if let Some(start) = start {
            let pos = indices
                .iter()
                .position(|&i| i == start)
                .ok_or(Status::Inval)?;
            return Ok((0..count)
                .map(|k| indices[(pos + k) % indices.len()])
                .collect());
        }
        let avail: Vec<u64> = indices
            .iter()
            .map(|i| osts[i].statfs.map_or(1, |s| s.bytes_avail.max(1)))
            .collect();
        let max = *avail.iter().max().expect("non-empty");
        let min = *avail.iter().min().expect("non-empty");
        if (max - min) * 100 <= max * QOS_THRESHOLD_PERCENT {
            let order = across_servers(&indices, |i| osts[&i].nid.map(|n| n.addr));
            let pos = self.rr_cursor.fetch_add(count, Ordering::Relaxed);
            return Ok((0..count).map(|k| order[(pos + k) % order.len()]).collect());
        }
        Ok(weighted_pick(&indices, &avail, count))
    }
}

/// `indices` (in index order) reordered so that consecutive ones are on different servers
/// while more than one server has some left: the first OST of each server (`server`: its
/// address; None, an OST with no server known, is a server of its own), then the second of
/// each, and so on. With OST0 and OST1 on one OSS and OST2 and OST3 on another: 0, 2, 1, 3.
pub(crate) fn across_servers<S: Eq>(
    indices: &[u32],
    server: impl Fn(u32) -> Option<S>,
) -> Vec<u32> {
    let mut groups: Vec<(Option<S>, Vec<u32>)> = Vec::new();
    for &i in indices {
        let s = server(i);
        match groups.iter_mut().find(|(g, _)| s.is_some() && *g == s) {
            Some((_, members)) => members.push(i),
            None => groups.push((s, vec![i])),
        }
    }
    let deepest = groups.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
    let mut out = Vec::with_capacity(indices.len());
    for rank in 0..deepest {
        out.extend(groups.iter().filter_map(|(_, m)| m.get(rank)));
    }
    assert_eq!(out.len(), indices.len(), "every OST keeps one place");
    out
}

/// Draws `count` distinct indices at random, each with probability proportional to its weight.
pub(crate) fn weighted_pick(indices: &[u32], weights: &[u64], count: usize) -> Vec<u32> {
    let mut pool: Vec<(u32, u64)> = indices
        .iter()
        .copied()
        .zip(weights.iter().copied())
        .collect();
    let mut out = Vec::with_capacity(count);
    while out.len() < count && !pool.is_empty() {
        let total: u64 = pool.iter().map(|(_, w)| *w).sum();
        let mut r = fastrand::u64(0..total.max(1));
        let mut pick = pool.len() - 1;
        for (k, (_, w)) in pool.iter().enumerate() {
            if r < *w {
                pick = k;
                break;
            }
            r -= *w;
        }
        out.push(pool.swap_remove(pick).0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_alternates_between_servers() {
        // OST0, OST1 on server A; OST2, OST3 on B; OST4 on C; OST5 with no server known.
        let server = |i: u32| match i {
            0 | 1 => Some('A'),
            2 | 3 => Some('B'),
            4 => Some('C'),
            _ => None,
        };
        assert_eq!(across_servers(&[0, 1, 2, 3], server), vec![0, 2, 1, 3]);
        assert_eq!(
            across_servers(&[0, 1, 2, 3, 4, 5], server),
            vec![0, 2, 4, 5, 1, 3]
        );
        // A pool's members, as listed.
        assert_eq!(across_servers(&[1, 3, 0], server), vec![1, 3, 0]);
        assert_eq!(across_servers(&[], server), Vec::<u32>::new());

        // The MDT's placement: two OSS processes with two OSTs each.
        let osp = OstPool::detached("demo", 4);
        for (ost, port) in [(0, 1), (1, 1), (2, 2), (3, 2)] {
            let nid = Nid::tcp(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
            osp.osts.write().unwrap().get_mut(&ost).unwrap().nid = Some(nid);
        }
        let singles: Vec<u32> = (0..4)
            .flat_map(|_| osp.choose(1, None, PoolName::NONE).unwrap())
            .collect();
        assert_eq!(singles, vec![0, 2, 1, 3]);
        assert_eq!(osp.choose(2, None, PoolName::NONE).unwrap(), vec![0, 2]);
        // A start OST given: from it, in index order (as `setstripe -i` asks).
        assert_eq!(osp.choose(2, Some(1), PoolName::NONE).unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_pool_spills_by_its_fill_counting_pending_destroys() {
        let osp = OstPool::detached("demo", 3);
        let (flash, cap) = (
            PoolName::new("flash").unwrap(),
            PoolName::new("cap").unwrap(),
        );
        let spill = PoolSpill {
            to: cap,
            threshold_pct: 80,
        };
        osp.pools
            .write()
            .unwrap()
            .extend([(flash, (vec![0, 1], Some(spill))), (cap, (vec![2], None))]);
        let stat = |avail| StatFs {
            bytes_total: 100,
            bytes_free: avail,
            bytes_avail: avail,
            files_total: 0,
            files_free: 0,
            block_size: 4096,
        };
        let set = |ost: u32, avail| {
            osp.osts.write().unwrap().get_mut(&ost).unwrap().statfs = Some(stat(avail));
        };
        set(0, 10);
        set(1, 30);
        // 160 of 200 bytes used: 80%, the threshold.
        assert_eq!(osp.spill_target(flash, |_| 0), cap);
        assert_eq!(osp.spilled.load(Ordering::Relaxed), 1);
        // A check that places nothing (a delegation's `placeable`) is not a spill.
        assert_eq!(osp.spill_target_uncounted(flash, |_| 0), cap);
        assert_eq!(osp.spilled.load(Ordering::Relaxed), 1);
        // 10 bytes on OST0 are about to be freed: 75%.
        assert_eq!(
            osp.spill_target(flash, |o| if o == 0 { 10 } else { 0 }),
            flash
        );
        // No spilling set, or no pool: as asked.
        assert_eq!(osp.spill_target(cap, |_| 0), cap);
        assert_eq!(osp.spill_target(PoolName::NONE, |_| 0), PoolName::NONE);
        // Allocation stays in the pool's OSTs.
        for _ in 0..10 {
            let got = osp.choose(1, None, cap).unwrap();
            assert_eq!(got, vec![2]);
        }
        assert_eq!(osp.choose(2, None, flash).unwrap().len(), 2);
        assert_eq!(osp.choose(1, Some(2), flash), Err(Status::Inval));
        let at = |start_ost| StripeSpec {
            start_ost,
            ..StripeSpec::default()
        };
        assert_eq!(
            osp.resolve(at(2), StripeSpec::default(), flash),
            Err(Status::Inval)
        );
        assert_eq!(
            osp.resolve(at(1), StripeSpec::default(), flash)
                .map(|r| r.2),
            Ok(Some(1))
        );
        assert_eq!(
            osp.resolve(
                at(-1),
                StripeSpec::default(),
                PoolName::new("none").unwrap()
            ),
            Err(Status::Inval)
        );
    }

    #[test]
    fn weighted_pick_prefers_free_osts_and_is_distinct() {
        let mut hits = [0u32; 3];
        for _ in 0..3000 {
            let p = weighted_pick(&[0, 1, 2], &[100, 100, 800], 1);
            hits[p[0] as usize] += 1;
        }
        assert!(hits[2] > hits[0] * 4, "{hits:?}");
        let two = weighted_pick(&[0, 1, 2], &[1, 1, 1], 3);
        let mut sorted = two.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2]);
    }
}
