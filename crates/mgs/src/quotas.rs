//! The quota master (docs/quota.md): limits and grace times kept durably, and the grants
//! each target holds, so that no id's targets together ever hold more than its limit.
//! Targets report each second what they use and hold ([`SyncReport`]); a master that
//! restarted learns the grants again from those reports (and from every acquire), and
//! until a target has reported it counts that target as holding its last known grant.

use crate::store::{decode, read_envelope, write_envelope, StoreError};
use nacre_types::{PoolName, QuotaId, QuotaKind, TargetKind};
use nacre_wire::quota::{
    decide, is_near, qunit, Acquire, Grant, Limited, QuotaEntry, QuotaKey, QuotaLimits, QuotaView,
    Resource, SyncAnswer, SyncReport, GRACE_DEFAULT_S, LIMITS_PER_FS_MAX,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;

/// An id's limits and when its soft limits were passed (seconds since the epoch; 0: not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    /// The limits.
    pub limits: QuotaLimits,
    /// When the block soft limit was passed.
    pub block_soft_since: u64,
    /// When the inode soft limit was passed.
    pub inode_soft_since: u64,
}

/// One file system's quotas as kept on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsQuotas {
    /// Bumped on every change of limits.
    pub version: u64,
    /// Grace times, seconds (0: the default).
    pub block_grace_s: u64,
    /// See `block_grace_s`.
    pub inode_grace_s: u64,
    /// Limited ids (over the file system, or a pool's OSTs).
    pub limits: BTreeMap<QuotaKey, Limit>,
}

/// Every file system's quotas.
pub type Saved = BTreeMap<String, FsQuotas>;

/// What one target holds and uses of one id.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    usage: u64,
    granted: u64,
}

/// A quota slave: its target (kind and index) and what it counts there (an MDT has two).
type Target = ((TargetKind, u32), Resource);
/// What each target holds of one key of one file system.
type HeldBy = HashMap<(String, QuotaKey), HashMap<Target, Held>>;

/// The master.
pub struct QuotaMaster {
    path: PathBuf,
    saved: Mutex<Saved>,
    /// (fsname, key) → target → held.
    held: Mutex<HeldBy>,
    /// (fsname, target) → the version of the limits it was last told.
    told: Mutex<HashMap<(String, Target), u64>>,
}

/// Why a quota change is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuotaError {
    /// A soft limit above its hard one.
    #[error("a soft limit is above its hard limit")]
    SoftAboveHard,
    /// Past the number of limited ids.
    #[error("too many limited ids (at most {LIMITS_PER_FS_MAX})")]
    TooMany,
    /// Limits on root's user or group.
    #[error("root's usage is counted but never limited")]
    Root,
    /// Inode limits on a pool.
    #[error("a pool's limits are on blocks only (pools are sets of OSTs)")]
    PoolInodes,
    /// Not saved.
    #[error("the MGS could not save the quotas")]
    Io,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl FsQuotas {
    fn grace(&self, resource: Resource) -> u64 {
        let g = match resource {
            Resource::Inodes => self.inode_grace_s,
            Resource::Blocks => self.block_grace_s,
        };
        if g == 0 {
            GRACE_DEFAULT_S
        } else {
            g
        }
    }
}

impl QuotaMaster {
    /// The master keeping its limits in `path`.
    pub fn open(path: PathBuf) -> Result<QuotaMaster, StoreError> {
        let saved = load_quotas(&path)?;
        Ok(QuotaMaster {
            path,
            saved: Mutex::new(saved),
            held: Mutex::new(HashMap::new()),
            told: Mutex::new(HashMap::new()),
        })
    }

    fn save(&self, saved: &Saved) -> Result<(), QuotaError> {
        save_quotas(&self.path, saved).map_err(|e| {
            tracing::error!("MGS cannot save quotas: {e}");
            QuotaError::Io
        })
    }

    /// Sets `key`'s limits (all 0: removes them); durable before it returns.
    pub fn set(&self, fsname: &str, key: QuotaKey, limits: QuotaLimits) -> Result<(), QuotaError> {
        let id = key.id;
        let root = id.id == 0 && matches!(id.kind, QuotaKind::User | QuotaKind::Group);
        if root && !limits.is_none() {
            return Err(QuotaError::Root);
        }
        let bad = |soft: u64, hard: u64| hard != 0 && soft > hard;
        if bad(limits.block_soft, limits.block_hard) || bad(limits.inode_soft, limits.inode_hard) {
            return Err(QuotaError::SoftAboveHard);
        }
        if !key.pool.is_none() && (limits.inode_soft != 0 || limits.inode_hard != 0) {
            return Err(QuotaError::PoolInodes);
        }
        let mut saved = self.saved.lock().expect("quotas");
        let mut next = saved.clone();
        let fs = next.entry(fsname.to_string()).or_default();
        if limits.is_none() {
            fs.limits.remove(&key);
        } else {
            if !fs.limits.contains_key(&key) && fs.limits.len() >= LIMITS_PER_FS_MAX {
                return Err(QuotaError::TooMany);
            }
            let e = fs.limits.entry(key).or_default();
            e.limits = limits;
        }
        fs.version += 1;
        self.save(&next)?;
        *saved = next;
        tracing::info!("{fsname}: quota of {key} set to {limits:?}");
        Ok(())
    }

    /// Sets the grace times (seconds; 0: the default of a week).
    pub fn set_grace(&self, fsname: &str, block_s: u64, inode_s: u64) -> Result<(), QuotaError> {
        let mut saved = self.saved.lock().expect("quotas");
        let mut next = saved.clone();
        let fs = next.entry(fsname.to_string()).or_default();
        fs.block_grace_s = block_s;
        fs.inode_grace_s = inode_s;
        fs.version += 1;
        self.save(&next)?;
        *saved = next;
        Ok(())
    }

    /// True if `key` of `fsname` has limits.
    fn is_limited(&self, fsname: &str, key: QuotaKey) -> bool {
        let saved = self.saved.lock().expect("quotas");
        saved
            .get(fsname)
            .is_some_and(|fs| fs.limits.contains_key(&key))
    }

    /// The grace times and `ids`' limits and grants (over the file system, then each pool
    /// with limits on the id); `targets` are the file system's, of which those not told
    /// the latest limits are counted.
    pub fn view(&self, fsname: &str, ids: &[QuotaId], targets: &[(TargetKind, u32)]) -> QuotaView {
        let fs = {
            let saved = self.saved.lock().expect("quotas");
            saved.get(fsname).cloned().unwrap_or_default()
        };
        let held = self.held.lock().expect("held");
        let keys = ids.iter().flat_map(|id| {
            let pools = fs
                .limits
                .range(QuotaKey::global(*id)..)
                .take_while(|(k, _)| k.id == *id)
                .filter(|(k, _)| !k.pool.is_none())
                .map(|(k, _)| *k);
            std::iter::once(QuotaKey::global(*id)).chain(pools)
        });
        let entries = keys
            .map(|key| {
                let l = fs.limits.get(&key).copied().unwrap_or_default();
                let granted = |resource: Resource| -> u64 {
                    held.get(&(fsname.to_string(), key)).map_or(0, |m| {
                        m.iter()
                            .filter(|(t, _)| t.1 == resource)
                            .map(|(_, h)| h.granted)
                            .sum()
                    })
                };
                QuotaEntry {
                    key,
                    limits: l.limits,
                    block_soft_since: l.block_soft_since,
                    inode_soft_since: l.inode_soft_since,
                    block_granted: granted(Resource::Blocks),
                    inode_granted: granted(Resource::Inodes),
                }
            })
            .collect();
        drop(held);
        let told = self.told.lock().expect("told");
        // A target is synced once each of its slaves is (an MDT has two).
        let unsynced = targets
            .iter()
            .filter(|t| {
                let slaves = match t.0 {
                    TargetKind::Mdt => &[Resource::Inodes, Resource::Blocks][..],
                    _ => &[Resource::Blocks][..],
                };
                slaves.iter().any(|r| {
                    told.get(&(fsname.to_string(), (**t, *r)))
                        .copied()
                        .unwrap_or(0)
                        < fs.version
                })
            })
            .count() as u32;
        QuotaView {
            block_grace_s: fs.grace(Resource::Blocks),
            inode_grace_s: fs.grace(Resource::Inodes),
            entries,
            unsynced,
        }
    }

    /// The effective limit of `id` for slaves counting `resource` with `total` used: the hard limit,
    /// or the soft one once it has been passed for longer than the grace time (the time
    /// it was passed is recorded, durably, and cleared when usage falls back under it).
    /// Also says whether the id is past its soft limit (then grants carry no unit beyond
    /// what is asked: every change past the soft limit asks the master, so the end of
    /// the grace time stops the next one).
    fn effective(&self, fsname: &str, id: QuotaKey, resource: Resource, total: u64) -> (u64, bool) {
        let mut saved = self.saved.lock().expect("quotas");
        let Some(fs) = saved.get_mut(fsname) else {
            return (0, false);
        };
        let grace = fs.grace(resource);
        let Some(l) = fs.limits.get_mut(&id) else {
            return (0, false);
        };
        let (soft, hard) = l.limits.of(resource);
        let since = match resource {
            Resource::Inodes => &mut l.inode_soft_since,
            Resource::Blocks => &mut l.block_soft_since,
        };
        let before = *since;
        if soft > 0 && total > soft {
            if *since == 0 {
                *since = now_s();
            }
        } else {
            *since = 0;
        }
        let passed = *since;
        if passed != before {
            let copy = saved.clone();
            if let Err(e) = self.save(&copy) {
                tracing::error!("{fsname}: grace start of {id} not saved: {e}");
            }
        }
        if passed != 0 && now_s().saturating_sub(passed) >= grace {
            return (if hard == 0 { soft } else { soft.min(hard) }, true);
        }
        (hard, passed != 0)
    }

    /// A target asks for more grant of a key; `targets` share it (the file system's
    /// targets of its kind, or the pool's OSTs; 0: the asking target is not one of them,
    /// and nothing limits it there).
    pub fn acquire(&self, a: &Acquire, targets: usize) -> Grant {
        // Only limited keys are tracked (what a peer names cannot grow the master's memory).
        if targets == 0 || !self.is_limited(&a.fsname, a.key) {
            return decide(0, 0, a.usage, a.want, targets, a.resource);
        }
        let key = (a.fsname.clone(), a.key);
        let me: Target = (a.target, a.resource);
        let (others, total) = {
            let mut held = self.held.lock().expect("held");
            let m = held.entry(key.clone()).or_default();
            m.insert(
                me,
                Held {
                    usage: a.usage,
                    granted: a.granted,
                },
            );
            let others: u64 = m
                .iter()
                .filter(|(t, _)| t.1 == a.resource && **t != me)
                .map(|(_, h)| h.granted.max(h.usage))
                .sum();
            let total: u64 = m
                .iter()
                .filter(|(t, _)| t.1 == a.resource)
                .map(|(_, h)| h.usage)
                .sum();
            (others, total)
        };
        let (limit, over_soft) =
            self.effective(&a.fsname, a.key, a.resource, total.saturating_add(a.want));
        let mut g = decide(limit, others, a.usage, a.want, targets, a.resource);
        g.near = is_near(a.resource, limit, total.saturating_add(a.want), over_soft);
        if over_soft && g.ok {
            g.granted = g.granted.min(a.usage.saturating_add(a.want));
        }
        let mut held = self.held.lock().expect("held");
        if let Some(m) = held.get_mut(&key) {
            if !g.ok {
                // Others may hold grant they do not use: it comes back at their next report.
                let others_used: u64 = m
                    .iter()
                    .filter(|(t, _)| t.1 == a.resource && **t != me)
                    .map(|(_, h)| h.usage)
                    .sum();
                g.retry = others_used < others
                    && a.usage.saturating_add(a.want) <= limit.saturating_sub(others_used);
            }
            if let Some(h) = m.get_mut(&me) {
                h.granted = g.granted.max(h.usage);
            }
        }
        g
    }

    /// A target's report: its usage and grants are recorded; it is told which keys are
    /// limited for its resource and how much grant it may keep of each (its usage and one
    /// unit; nothing for a key no longer limited). `sharing(pool)`: how many targets share
    /// the reporting target's keys of `pool` (none: the file system's targets of its kind),
    /// `None` if it is not one of the pool's.
    pub fn sync(&self, r: &SyncReport, sharing: impl Fn(PoolName) -> Option<usize>) -> SyncAnswer {
        let me: Target = (r.target, r.resource);
        let (version, limited): (u64, Vec<(QuotaKey, usize)>) = {
            let saved = self.saved.lock().expect("quotas");
            match saved.get(&r.fsname) {
                Some(fs) => (
                    fs.version,
                    fs.limits
                        .iter()
                        .filter(|(_, l)| {
                            let (soft, hard) = l.limits.of(r.resource);
                            soft > 0 || hard > 0
                        })
                        .filter_map(|(q, _)| Some((*q, sharing(q.pool)?)))
                        .collect(),
                ),
                None => (0, Vec::new()),
            }
        };
        // Usage and grants as reported (the lock is not held while limits are read: the
        // limits' lock is never taken inside this one's).
        let totals: Vec<(QuotaKey, usize, Held, u64)> = {
            let mut held = self.held.lock().expect("held");
            // Only the ids limited now are recorded (a report names at most those).
            for (id, usage, granted) in &r.ids {
                if !limited.iter().any(|(l, _)| l == id) {
                    continue;
                }
                held.entry((r.fsname.clone(), *id)).or_default().insert(
                    me,
                    Held {
                        usage: *usage,
                        granted: *granted,
                    },
                );
            }
            limited
                .iter()
                .map(|(id, targets)| {
                    let m = held.get(&(r.fsname.clone(), *id));
                    let mine = m.and_then(|m| m.get(&me)).copied().unwrap_or_default();
                    let total: u64 = m.map_or(0, |m| {
                        m.iter()
                            .filter(|(t, _)| t.1 == r.resource)
                            .map(|(_, h)| h.usage)
                            .sum()
                    });
                    (*id, *targets, mine, total)
                })
                .collect()
        };
        // Each keeps its usage and a unit of the room left under the effective limit (a
        // soft limit past its grace time leaves none).
        let limited: Vec<Limited> = totals
            .into_iter()
            .map(|(id, targets, mine, total)| {
                let (limit, over_soft) = self.effective(&r.fsname, id, r.resource, total);
                let room = if over_soft {
                    0
                } else if limit == 0 {
                    u64::MAX / 4
                } else {
                    limit.saturating_sub(total)
                };
                let keep = mine
                    .usage
                    .saturating_add(qunit(r.resource, room, targets).min(room))
                    .min(mine.granted.max(mine.usage));
                Limited {
                    key: id,
                    keep,
                    near: is_near(r.resource, limit, total, over_soft),
                }
            })
            .collect();
        // Only for a file system with quotas (a peer's names cannot grow the map).
        if version != 0 {
            self.told
                .lock()
                .expect("told")
                .insert((r.fsname.clone(), me), version);
        }
        // The target keeps no more than told: counted so at once.
        let mut held = self.held.lock().expect("held");
        for l in &limited {
            if let Some(h) = held
                .get_mut(&(r.fsname.clone(), l.key))
                .and_then(|m| m.get_mut(&me))
            {
                h.granted = h.granted.min(l.keep).max(h.usage);
            }
        }
        SyncAnswer { version, limited }
    }
}

// Kept on disk (the MGS directory's `mgs-quotas`).

const QUOTAS_MAGIC: &[u8; 4] = b"NMGQ";
/// Format of the quota limits: 2 keys limits by id and pool (1: by id alone).
const QUOTAS_FORMAT_VERSION: u32 = 2;

/// One file system's quotas as format 1 kept them (limits by id, before pool limits).
#[derive(serde::Deserialize)]
struct FsQuotasByIdOnly {
    version: u64,
    block_grace_s: u64,
    inode_grace_s: u64,
    limits: std::collections::BTreeMap<nacre_types::QuotaId, Limit>,
}

/// Loads the quota limits (none if the file does not exist yet).
pub(crate) fn load_quotas(path: &Path) -> Result<Saved, StoreError> {
    match read_envelope(path, QUOTAS_MAGIC, 1..=QUOTAS_FORMAT_VERSION)? {
        Some((1, payload)) => {
            let old: std::collections::BTreeMap<String, FsQuotasByIdOnly> = decode(path, &payload)?;
            Ok(old
                .into_iter()
                .map(|(fs, q)| {
                    let limits = q
                        .limits
                        .into_iter()
                        .map(|(id, l)| (nacre_wire::quota::QuotaKey::global(id), l))
                        .collect();
                    let q = FsQuotas {
                        version: q.version,
                        block_grace_s: q.block_grace_s,
                        inode_grace_s: q.inode_grace_s,
                        limits,
                    };
                    (fs, q)
                })
                .collect())
        }
        Some((_, payload)) => decode(path, &payload),
        None => Ok(Default::default()),
    }
}

/// Saves the quota limits durably.
pub(crate) fn save_quotas(path: &Path, saved: &Saved) -> Result<(), StoreError> {
    let payload = postcard::to_allocvec(saved).expect("in-memory serialization");
    write_envelope(path, QUOTAS_MAGIC, QUOTAS_FORMAT_VERSION, &payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_survive_a_restart_and_grants_stay_within_them() {
        let dir = tempfile::tempdir().unwrap();
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 1000,
        };
        let key = QuotaKey::global(id);
        let mib = 1u64 << 20;
        let limits = QuotaLimits {
            block_hard: 10 * mib,
            ..Default::default()
        };
        {
            let m = QuotaMaster::open(dir.path().join("q")).unwrap();
            assert_eq!(
                m.set(
                    "fs",
                    key,
                    QuotaLimits {
                        block_soft: 2,
                        block_hard: 1,
                        ..Default::default()
                    }
                ),
                Err(QuotaError::SoftAboveHard)
            );
            m.set("fs", key, limits).unwrap();
            let root = QuotaId {
                kind: QuotaKind::Group,
                id: 0,
            };
            assert_eq!(
                m.set("fs", QuotaKey::global(root), limits),
                Err(QuotaError::Root)
            );
        }
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        assert_eq!(m.view("fs", &[id], &[]).entries[0].limits, limits);
        let ask = |ost: u32, usage: u64, granted: u64, want: u64| {
            m.acquire(
                &Acquire {
                    fsname: "fs".into(),
                    target: (TargetKind::Ost, ost),
                    resource: Resource::Blocks,
                    key,
                    usage,
                    granted,
                    want,
                },
                2,
            )
        };
        let a = ask(0, 0, 0, 4 * mib);
        assert!(a.ok);
        // OST0 took a unit more than it needs: OST1 is told to ask again after OST0's
        // next report, which gives the unused grant back.
        let b = ask(1, 0, 0, 4 * mib);
        assert!(!b.ok && b.retry, "{b:?}");
        m.sync(
            &SyncReport {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                ids: vec![(key, 4 * mib, a.granted)],
            },
            |_| Some(2),
        );
        let b = ask(1, 0, 0, 4 * mib);
        assert!(b.ok, "{b:?}");
        let held = m.view("fs", &[id], &[]).entries[0].block_granted;
        assert!(held <= 10 * mib && held >= 8 * mib, "{held}");
        // OST1 cannot have more than what OST0 leaves.
        let c = ask(1, 4 * mib, b.granted, 10 * mib);
        assert!(!c.ok && !c.retry, "{c:?}");
        // A sync tells each target what it may keep; a removed limit frees every id.
        let s = m.sync(
            &SyncReport {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                ids: vec![(key, mib, a.granted)],
            },
            |_| Some(2),
        );
        assert_eq!(s.limited.len(), 1);
        assert!(s.limited[0].keep <= a.granted && s.limited[0].keep >= mib);
        m.set("fs", key, QuotaLimits::default()).unwrap();
        let s = m.sync(
            &SyncReport {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                ids: vec![],
            },
            |_| Some(2),
        );
        assert!(s.limited.is_empty());
    }
}

#[cfg(test)]
mod grace_tests {
    use super::*;
    use nacre_types::QuotaKind;

    /// An MDT's bytes (data on the MDT) share an id's block limit with the OSTs; its inode
    /// slave, under the same target, is counted apart.
    #[test]
    fn an_mdt_s_bytes_share_the_block_limit_with_the_osts() {
        let dir = tempfile::tempdir().unwrap();
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 1000,
        };
        let key = QuotaKey::global(id);
        let mib = 1u64 << 20;
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        let limits = QuotaLimits {
            block_hard: 8 * mib,
            inode_hard: 10,
            ..Default::default()
        };
        m.set("fs", key, limits).unwrap();
        let ask = |target: (TargetKind, u32), resource, usage, want| {
            m.acquire(
                &Acquire {
                    fsname: "fs".into(),
                    target,
                    resource,
                    key,
                    usage,
                    granted: 0,
                    want,
                },
                2,
            )
        };
        // 4 MiB and a unit (a quarter of the room): the OST holds 6 MiB of the 8.
        let g = ask((TargetKind::Ost, 0), Resource::Blocks, 0, 4 * mib);
        assert!(g.ok && g.granted == 6 * mib, "{g:?}");
        let g = ask((TargetKind::Mdt, 0), Resource::Blocks, 0, 3 * mib);
        assert!(!g.ok, "{g:?}");
        assert!(g.granted <= 2 * mib, "{g:?}");
        assert!(ask((TargetKind::Mdt, 0), Resource::Blocks, 0, mib).ok);
        // Its inodes are another slave's, limited by inodes alone.
        assert!(ask((TargetKind::Mdt, 0), Resource::Inodes, 0, 10).ok);
        assert!(!ask((TargetKind::Mdt, 0), Resource::Inodes, 10, 1).ok);
        let v = m.view("fs", &[id], &[(TargetKind::Mdt, 0), (TargetKind::Ost, 0)]);
        assert!(v.entries[0].block_granted <= 8 * mib, "{v:?}");
        assert!(v.entries[0].block_granted >= 7 * mib, "{v:?}");
        assert_eq!(v.entries[0].inode_granted, 10, "{v:?}");
    }

    #[test]
    fn past_its_grace_a_soft_limit_takes_back_the_grant() {
        let dir = tempfile::tempdir().unwrap();
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 1001,
        };
        let key = QuotaKey::global(id);
        let mib = 1u64 << 20;
        m.set_grace("fs", 1, 0).unwrap();
        let limits = QuotaLimits {
            block_soft: 2 * mib,
            block_hard: 100 * mib,
            ..Default::default()
        };
        m.set("fs", key, limits).unwrap();
        let g = m.acquire(
            &Acquire {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                key,
                usage: 0,
                granted: 0,
                want: mib,
            },
            2,
        );
        assert!(g.ok && g.granted > 10 * mib, "{g:?}");
        let report = |usage| SyncReport {
            fsname: "fs".into(),
            target: (TargetKind::Ost, 0),
            resource: Resource::Blocks,
            ids: vec![(key, usage, g.granted)],
        };
        // Past the soft limit: its grace starts, and the target keeps only what it uses
        // (each change past the soft limit asks the master).
        let s = m.sync(&report(3 * mib), |_| Some(2));
        assert_eq!(
            s.limited,
            vec![Limited {
                key,
                keep: 3 * mib,
                near: true
            }]
        );
        let more = m.acquire(
            &Acquire {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                key,
                usage: 3 * mib,
                granted: 3 * mib,
                want: mib,
            },
            2,
        );
        assert_eq!((more.ok, more.granted), (true, 4 * mib));
        assert_ne!(m.view("fs", &[id], &[]).entries[0].block_soft_since, 0);
        std::thread::sleep(std::time::Duration::from_millis(2100));
        // Over: nothing more.
        let late = m.acquire(
            &Acquire {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                resource: Resource::Blocks,
                key,
                usage: 4 * mib,
                granted: 4 * mib,
                want: mib,
            },
            2,
        );
        assert!(!late.ok, "{late:?}");
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    #[test]
    fn a_pool_limit_reaches_only_its_osts_and_is_shared_among_them() {
        let dir = tempfile::tempdir().unwrap();
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 1000,
        };
        let flash = PoolName::new("flash").unwrap();
        let key = QuotaKey { id, pool: flash };
        let mib = 1u64 << 20;
        let inodes = QuotaLimits {
            inode_hard: 5,
            ..Default::default()
        };
        assert_eq!(m.set("fs", key, inodes), Err(QuotaError::PoolInodes));
        let limits = QuotaLimits {
            block_hard: 8 * mib,
            ..Default::default()
        };
        m.set("fs", key, limits).unwrap();
        // OST0 and OST1 are the pool's; OST2 is not.
        let sharing = |ost: u32| move |pool: PoolName| (pool.is_none() || ost < 2).then_some(2);
        let report = |ost: u32| SyncReport {
            fsname: "fs".into(),
            target: (TargetKind::Ost, ost),
            resource: Resource::Blocks,
            ids: vec![],
        };
        let a = m.sync(&report(0), sharing(0));
        assert_eq!(a.limited.len(), 1);
        assert_eq!(a.limited[0].key, key);
        assert!(
            a.limited[0].near,
            "8 MiB is within the synchronous-write margin"
        );
        assert!(m.sync(&report(2), sharing(2)).limited.is_empty());
        // Grants over the pool's two OSTs never pass its limit.
        let ask = |ost: u32, want: u64| {
            m.acquire(
                &Acquire {
                    fsname: "fs".into(),
                    target: (TargetKind::Ost, ost),
                    resource: Resource::Blocks,
                    key,
                    usage: 0,
                    granted: 0,
                    want,
                },
                2,
            )
        };
        let g0 = ask(0, 5 * mib);
        assert!(g0.ok && g0.near, "{g0:?}");
        let g1 = ask(1, 5 * mib);
        assert!(!g1.ok, "{g1:?}");
        // Its entry follows the id's own in the view.
        let v = m.view("fs", &[id], &[]);
        assert_eq!(v.entries.len(), 2);
        assert_eq!(v.entries[0].key, QuotaKey::global(id));
        assert_eq!(v.entries[1].key, key);
        assert_eq!(v.entries[1].limits, limits);
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn format_1_quotas_read_as_limits_over_the_whole_file_system() {
        #[derive(serde::Serialize)]
        struct Old {
            version: u64,
            block_grace_s: u64,
            inode_grace_s: u64,
            limits: std::collections::BTreeMap<nacre_types::QuotaId, Limit>,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mgs-quotas");
        let id = nacre_types::QuotaId {
            kind: nacre_types::QuotaKind::Project,
            id: 42,
        };
        let limit = Limit {
            limits: nacre_wire::quota::QuotaLimits {
                block_hard: 1 << 30,
                ..Default::default()
            },
            block_soft_since: 7,
            inode_soft_since: 0,
        };
        let old: std::collections::BTreeMap<String, Old> = [(
            "fs".to_string(),
            Old {
                version: 3,
                block_grace_s: 60,
                inode_grace_s: 0,
                limits: [(id, limit)].into(),
            },
        )]
        .into();
        let payload = postcard::to_allocvec(&old).unwrap();
        write_envelope(&path, QUOTAS_MAGIC, 1, &payload).unwrap();
        let saved = load_quotas(&path).unwrap();
        let fs = &saved["fs"];
        assert_eq!((fs.version, fs.block_grace_s), (3, 60));
        assert_eq!(
            fs.limits.get(&nacre_wire::quota::QuotaKey::global(id)),
            Some(&limit)
        );
        save_quotas(&path, &saved).unwrap();
        assert_eq!(load_quotas(&path).unwrap(), saved);
    }
}
