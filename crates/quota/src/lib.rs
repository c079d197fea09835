//! A target's quota slave (docs/quota.md): the ids whose limits cover this target's resource
//! (an OST's bytes, an MDT's inodes or its bytes of data on the MDT), over the whole file
//! system or over a pool this OST is one of, the grant the master gave it for each, and the
//! changes under way.
//!
//! A change that would take an id's usage here past its grant asks the master for more first
//! (`Slave::reserve`, blocking, for OSTs); if the master has none to give, the change fails
//! with `EDQUOT`. A change an MDT makes under its write lock uses `Slave::check_now` instead,
//! which never blocks: when grant must be asked for first it answers `EINPROGRESS` and asks
//! in the background, so the client's resend finds it. Each second the target reports
//! its usage and grants (`Slave::report`) and learns the limited ids and the grant it may
//! keep (`Slave::apply`).
//!
//! The slave does not talk to the network itself: its owner (the server process) gives it a
//! `Link` to the master.

use nacre_types::{PoolName, QuotaId, Status, TargetKind};
use nacre_wire::quota::{Acquire, Grant, QuotaKey, Resource, SyncAnswer, SyncReport};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Times a refused acquire that the master says to retry is asked again.
pub const ACQUIRE_RETRIES_MAX: u32 = 4;
/// Pause before asking again (the other targets report once a second).
pub const ACQUIRE_RETRY_MS: u64 = 600;

/// How a slave reaches the quota master.
pub trait Link: Send + Sync {
    /// Sends an acquire and returns the master's answer.
    fn acquire(&self, a: &Acquire) -> Result<Grant, Status>;
}

#[derive(Default)]
struct State {
    /// Keys the master refused lately (until the next report): changes fail at once.
    denied: HashSet<QuotaKey>,
    /// Keys whose grant is being asked for in the background.
    asking: HashSet<QuotaKey>,
    /// Limited keys → grant held here.
    grants: HashMap<QuotaKey, u64>,
    /// Amounts reserved by changes under way, per key.
    reserved: HashMap<QuotaKey, u64>,
    /// Keys near their limit (writes of their data are made synchronously).
    near: HashSet<QuotaKey>,
    /// The pools of the limited keys (each id's pool keys are these).
    pools: Vec<PoolName>,
    /// Version of the limits last applied (0: none yet).
    version: u64,
}

impl State {
    /// The limited keys of `ids` (over the file system and each pool limited here).
    fn keys(&self, ids: &[QuotaId]) -> Vec<QuotaKey> {
        let mut keys = Vec::with_capacity(ids.len() * (1 + self.pools.len()));
        for id in ids {
            let global = std::iter::once(PoolName::NONE);
            for pool in global.chain(self.pools.iter().copied()) {
                let k = QuotaKey { id: *id, pool };
                if self.grants.contains_key(&k) {
                    keys.push(k);
                }
            }
        }
        keys
    }
}

/// The slave of one target.
pub struct Slave {
    fsname: String,
    target: (TargetKind, u32),
    resource: Resource,
    state: Mutex<State>,
    link: OnceLock<Arc<dyn Link>>,
}

/// Amounts reserved for one change; given back by [`Slave::release`].
#[must_use = "a reservation is released once the change is made"]
pub struct Reservation(Vec<(QuotaKey, u64)>);

impl Slave {
    /// The slave of `target` of `fsname` counting `resource` there.
    pub fn new(fsname: &str, target: (TargetKind, u32), resource: Resource) -> Slave {
        Slave {
            fsname: fsname.to_string(),
            target,
            resource,
            state: Mutex::new(State::default()),
            link: OnceLock::new(),
        }
    }

    /// Connects the slave to its master (once).
    pub fn set_link(&self, link: Arc<dyn Link>) {
        let _ = self.link.set(link);
    }

    /// True if some id is limited here (otherwise changes need no check).
    pub fn any_limited(&self) -> bool {
        !self.state.lock().grants.is_empty()
    }

    /// Which of `ids` (a user, a group, a project) are near a limit: bits 1, 2, 4 in
    /// their order. OSTs tell writers of their data to write synchronously.
    pub fn near(&self, ids: &[QuotaId]) -> u8 {
        let st = self.state.lock();
        if st.near.is_empty() {
            return 0;
        }
        let mut bits = 0;
        for (i, id) in ids.iter().enumerate().take(8) {
            let global = std::iter::once(PoolName::NONE);
            if global
                .chain(st.pools.iter().copied())
                .any(|pool| st.near.contains(&QuotaKey { id: *id, pool }))
            {
                bits |= 1 << i;
            }
        }
        bits
    }

    /// Reserves `amount` for each of `ids` that is limited (over the file system and each
    /// pool), whose usage here is given by `usage`; asks the master for more grant where
    /// needed (blocking: never call it under a lock other requests need). `EDQUOT` if a
    /// limit leaves no room.
    pub fn reserve(
        &self,
        ids: &[QuotaId],
        amount: u64,
        usage: impl Fn(QuotaId) -> u64,
    ) -> Result<Reservation, Status> {
        let keys = self.state.lock().keys(ids);
        let mut taken = Vec::new();
        for key in keys {
            match self.reserve_one(key, amount, &usage) {
                Ok(true) => taken.push((key, amount)),
                Ok(false) => {}
                Err(e) => {
                    self.release(Reservation(taken));
                    return Err(e);
                }
            }
        }
        Ok(Reservation(taken))
    }

    /// Reserves without asking the master: `Ok(None)` if some id needs more grant first
    /// (the caller may ask for it with [`Slave::reserve`] outside its lock and try again).
    pub fn try_reserve(
        &self,
        ids: &[QuotaId],
        amount: u64,
        usage: impl Fn(QuotaId) -> u64,
    ) -> Option<Reservation> {
        // Usage is read without the state's lock (see `reserve_one`).
        let used: Vec<u64> = ids.iter().map(|q| usage(*q)).collect();
        let used_of = |q: QuotaId| ids.iter().position(|i| *i == q).map_or(0, |k| used[k]);
        let mut st = self.state.lock();
        let keys = st.keys(ids);
        let fits = keys.iter().all(|k| {
            let g = st.grants.get(k).copied().unwrap_or(u64::MAX);
            let r = st.reserved.get(k).copied().unwrap_or(0);
            used_of(k.id).saturating_add(r).saturating_add(amount) <= g
        });
        if !fits {
            return None;
        }
        let mut taken = Vec::new();
        for k in keys {
            *st.reserved.entry(k).or_insert(0) += amount;
            taken.push((k, amount));
        }
        Some(Reservation(taken))
    }

    /// For a change made under a lock (an MDT's transaction): whether `amount` more of
    /// each of `ids` fits the grants held now. `Err(EDQUOT)` for an id the master refused
    /// lately; `Err(EINPROGRESS)` when grant must be asked for first — asked in the
    /// background here, so the caller's resend finds it.
    pub fn check_now(
        self: &Arc<Self>,
        ids: &[QuotaId],
        amount: u64,
        usage: impl Fn(QuotaId) -> u64,
    ) -> Result<(), Status> {
        let short: Vec<(QuotaKey, u64)> = {
            let st = self.state.lock();
            st.keys(ids)
                .into_iter()
                .filter_map(|k| {
                    let g = *st.grants.get(&k)?;
                    let used =
                        usage(k.id).saturating_add(st.reserved.get(&k).copied().unwrap_or(0));
                    (used.saturating_add(amount) > g).then_some((k, used))
                })
                .collect()
        };
        if short.is_empty() {
            return Ok(());
        }
        let mut st = self.state.lock();
        if short.iter().any(|(id, _)| st.denied.contains(id)) {
            return Err(Status::DQuot);
        }
        for (id, used) in short {
            if st.asking.insert(id) {
                let me = self.clone();
                std::thread::spawn(move || {
                    let r = me.reserve_one(id, amount, &|_| used);
                    let mut st = me.state.lock();
                    st.asking.remove(&id);
                    match r {
                        Ok(true) => {
                            let v = st.reserved.entry(id).or_insert(0);
                            *v = v.saturating_sub(amount);
                            if *v == 0 {
                                st.reserved.remove(&id);
                            }
                        }
                        Ok(false) => {}
                        Err(Status::DQuot) => {
                            st.denied.insert(id);
                        }
                        Err(e) => tracing::warn!("{id}: quota grant not obtained: {e}"),
                    }
                });
            }
        }
        Err(Status::InProgress)
    }

    /// Gives a reservation back (the change is made and counted, or failed).
    pub fn release(&self, r: Reservation) {
        if r.0.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        for (id, amount) in r.0 {
            if let Some(v) = st.reserved.get_mut(&id) {
                *v = v.saturating_sub(amount);
                if *v == 0 {
                    st.reserved.remove(&id);
                }
            }
        }
    }

    /// Reserves `amount` of `id` (a key: true) if it is limited here, asking for grant
    /// first when it is short.
    fn reserve_one(
        &self,
        id: QuotaKey,
        amount: u64,
        usage: &impl Fn(QuotaId) -> u64,
    ) -> Result<bool, Status> {
        let mut retries = 0;
        loop {
            // Usage is read before the state's lock is taken: the target's own lock (an
            // MDT's write lock) may be needed to read it, and is held by changes that
            // then take the state's lock (Slave::check_now).
            let now = usage(id.id);
            let (used, granted) = {
                let mut st = self.state.lock();
                let Some(&granted) = st.grants.get(&id) else {
                    return Ok(false);
                };
                let r = st.reserved.get(&id).copied().unwrap_or(0);
                let used = now.saturating_add(r);
                if used.saturating_add(amount) <= granted {
                    *st.reserved.entry(id).or_insert(0) += amount;
                    return Ok(true);
                }
                (used, granted)
            };
            let Some(link) = self.link.get() else {
                // No master known yet: nothing is limited here for sure; let it through
                // rather than fail every change (the report that names limits brings the
                // link first).
                return Ok(false);
            };
            let g = link.acquire(&Acquire {
                fsname: self.fsname.clone(),
                target: self.target,
                resource: self.resource,
                key: id,
                usage: used,
                granted,
                want: amount,
            })?;
            {
                let mut st = self.state.lock();
                if let Some(held) = st.grants.get_mut(&id) {
                    *held = g.granted;
                }
                if g.near {
                    st.near.insert(id);
                } else {
                    st.near.remove(&id);
                }
            }
            if g.ok {
                continue;
            }
            if g.retry && retries < ACQUIRE_RETRIES_MAX {
                retries += 1;
                std::thread::sleep(Duration::from_millis(ACQUIRE_RETRY_MS));
                continue;
            }
            tracing::debug!("{id}: quota exceeded on {:?}", self.target);
            return Err(Status::DQuot);
        }
    }

    /// What to tell the master: each limited key's usage (with changes under way) and grant.
    pub fn report(&self, usage: impl Fn(QuotaId) -> u64) -> SyncReport {
        // Usage is read without the state's lock (see `reserve_one`).
        let held: Vec<(QuotaKey, u64, u64)> = {
            let st = self.state.lock();
            st.grants
                .iter()
                .map(|(id, g)| (*id, st.reserved.get(id).copied().unwrap_or(0), *g))
                .collect()
        };
        SyncReport {
            fsname: self.fsname.clone(),
            target: self.target,
            resource: self.resource,
            ids: held
                .into_iter()
                .map(|(id, r, g)| (id, usage(id.id).saturating_add(r), g))
                .collect(),
        }
    }

    /// The master's answer to a report: the limited keys, the grant each may keep, and
    /// which are near their limit.
    pub fn apply(&self, a: &SyncAnswer) {
        let mut st = self.state.lock();
        st.denied.clear();
        let mut grants = HashMap::with_capacity(a.limited.len());
        let mut pools = Vec::new();
        for l in &a.limited {
            let held = st.grants.get(&l.key).copied().unwrap_or(0);
            grants.insert(l.key, held.min(l.keep));
            if !l.key.pool.is_none() && !pools.contains(&l.key.pool) {
                pools.push(l.key.pool);
            }
        }
        st.near = a.limited.iter().filter(|l| l.near).map(|l| l.key).collect();
        st.grants = grants;
        st.pools = pools;
        st.version = a.version;
    }

    /// The grant held of each limited key, in order.
    pub fn grants(&self) -> Vec<(QuotaKey, u64)> {
        let st = self.state.lock();
        let mut v: Vec<(QuotaKey, u64)> = st.grants.iter().map(|(k, g)| (*k, *g)).collect();
        v.sort_unstable();
        v
    }

    /// Version of the limits last applied.
    pub fn version(&self) -> u64 {
        self.state.lock().version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::QuotaKind;

    /// A master of one id limited to `limit`, for this slave alone.
    struct Master(u64);

    impl Link for Master {
        fn acquire(&self, a: &Acquire) -> Result<Grant, Status> {
            Ok(nacre_wire::quota::decide(
                self.0, 0, a.usage, a.want, 1, a.resource,
            ))
        }
    }

    #[test]
    fn changes_pass_within_the_limit_and_fail_past_it() {
        let s = Slave::new("fs", (TargetKind::Ost, 0), Resource::Blocks);
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 5,
        };
        let free = QuotaId {
            kind: QuotaKind::Group,
            id: 5,
        };
        // Nothing limited: everything passes without a master.
        assert!(s.reserve(&[id], 1 << 30, |_| 0).is_ok());
        s.apply(&SyncAnswer {
            version: 1,
            limited: vec![nacre_wire::quota::Limited {
                key: QuotaKey::global(id),
                keep: 0,
                near: false,
            }],
        });
        assert!(s.any_limited());
        s.set_link(Arc::new(Master(10 << 20)));
        let used = std::sync::atomic::AtomicU64::new(0);
        let usage = |_| used.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..10 {
            let r = s.reserve(&[id, free], 1 << 20, usage).unwrap();
            used.fetch_add(1 << 20, std::sync::atomic::Ordering::Relaxed);
            s.release(r);
        }
        assert_eq!(s.reserve(&[id, free], 1, usage).err(), Some(Status::DQuot));
        // The report carries usage and grant; a sync that lowers the grant is applied.
        let rep = s.report(usage);
        assert_eq!(rep.ids, vec![(QuotaKey::global(id), 10 << 20, 10 << 20)]);
        s.apply(&SyncAnswer {
            version: 2,
            limited: vec![],
        });
        assert!(s.reserve(&[id], 1, usage).is_ok());
        assert_eq!(s.version(), 2);
    }

    #[test]
    fn a_change_under_a_lock_is_resent_once_grant_came_and_refused_past_the_limit() {
        let s = Arc::new(Slave::new("fs", (TargetKind::Mdt, 0), Resource::Inodes));
        let id = QuotaId {
            kind: QuotaKind::Project,
            id: 9,
        };
        s.set_link(Arc::new(Master(3)));
        s.apply(&SyncAnswer {
            version: 1,
            limited: vec![nacre_wire::quota::Limited {
                key: QuotaKey::global(id),
                keep: 0,
                near: false,
            }],
        });
        let mut used = 0;
        let mut resent = 0;
        loop {
            match s.check_now(&[id], 1, |_| used) {
                Ok(()) => used += 1,
                Err(Status::InProgress) => {
                    resent += 1;
                    assert!(resent < 1000, "no grant came");
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(e) => {
                    assert_eq!(e, Status::DQuot);
                    break;
                }
            }
        }
        assert_eq!(used, 3);
        assert!(resent >= 1);
    }

    #[test]
    fn pool_keys_are_reserved_beside_the_global_one_and_near_ids_are_named() {
        let s = Slave::new("fs", (TargetKind::Ost, 0), Resource::Blocks);
        let user = QuotaId {
            kind: QuotaKind::User,
            id: 7,
        };
        let group = QuotaId {
            kind: QuotaKind::Group,
            id: 7,
        };
        let pool = PoolName::new("flash").unwrap();
        s.set_link(Arc::new(Master(4 << 20)));
        s.apply(&SyncAnswer {
            version: 1,
            limited: vec![
                nacre_wire::quota::Limited {
                    key: QuotaKey::global(group),
                    keep: 0,
                    near: false,
                },
                nacre_wire::quota::Limited {
                    key: QuotaKey { id: user, pool },
                    keep: 0,
                    near: true,
                },
            ],
        });
        // The user's pool limit is near; the group's global one is not.
        assert_eq!(s.near(&[user, group]), 0b01);
        let r = s.reserve(&[user, group], 1 << 20, |_| 0).unwrap();
        let keys: Vec<QuotaKey> = s.report(|_| 0).ids.iter().map(|i| i.0).collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys.contains(&QuotaKey { id: user, pool }));
        s.release(r);
        // Past the pool's limit: refused.
        assert_eq!(
            s.reserve(&[user], 5 << 20, |_| 0).err(),
            Some(Status::DQuot)
        );
    }
}
