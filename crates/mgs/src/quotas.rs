//! The quota master (docs/quota.md): limits and grace times kept durably, and the grants
//! each target holds, so that no id's targets together ever hold more than its limit.
//! Targets report each second what they use and hold ([`SyncReport`]); a master that
//! restarted learns the grants again from those reports (and from every acquire), and
//! until a target has reported it counts that target as holding its last known grant.

use nacre_types::{QuotaId, QuotaKind, TargetKind};
use nacre_wire::quota::{
    decide, qunit, Acquire, Grant, QuotaEntry, QuotaLimits, QuotaView, SyncAnswer, SyncReport,
    GRACE_DEFAULT_S, LIMITS_PER_FS_MAX,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
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
    /// Limited ids.
    pub limits: BTreeMap<QuotaId, Limit>,
}

/// Every file system's quotas.
pub type Saved = BTreeMap<String, FsQuotas>;

/// What one target holds and uses of one id.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    usage: u64,
    granted: u64,
}

/// A target: its kind and index.
type Target = (TargetKind, u32);
/// What each target holds of one id of one file system.
type HeldBy = HashMap<(String, QuotaId), HashMap<Target, Held>>;

/// The master.
pub struct QuotaMaster {
    path: PathBuf,
    saved: Mutex<Saved>,
    /// (fsname, id) → target → held.
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
    fn grace(&self, kind: TargetKind) -> u64 {
        let g = match kind {
            TargetKind::Mdt => self.inode_grace_s,
            _ => self.block_grace_s,
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
    pub fn open(path: PathBuf) -> Result<QuotaMaster, crate::store::StoreError> {
        let saved = crate::store::load_quotas(&path)?;
        Ok(QuotaMaster {
            path,
            saved: Mutex::new(saved),
            held: Mutex::new(HashMap::new()),
            told: Mutex::new(HashMap::new()),
        })
    }

    fn save(&self, saved: &Saved) -> Result<(), QuotaError> {
        crate::store::save_quotas(&self.path, saved).map_err(|e| {
            tracing::error!("MGS cannot save quotas: {e}");
            QuotaError::Io
        })
    }

    /// Sets `id`'s limits (all 0: removes them); durable before it returns.
    pub fn set(&self, fsname: &str, id: QuotaId, limits: QuotaLimits) -> Result<(), QuotaError> {
        let root = id.id == 0 && matches!(id.kind, QuotaKind::User | QuotaKind::Group);
        if root && !limits.is_none() {
            return Err(QuotaError::Root);
        }
        let bad = |soft: u64, hard: u64| hard != 0 && soft > hard;
        if bad(limits.block_soft, limits.block_hard) || bad(limits.inode_soft, limits.inode_hard) {
            return Err(QuotaError::SoftAboveHard);
        }
        let mut saved = self.saved.lock().expect("quotas");
        let mut next = saved.clone();
        let fs = next.entry(fsname.to_string()).or_default();
        if limits.is_none() {
            fs.limits.remove(&id);
        } else {
            if !fs.limits.contains_key(&id) && fs.limits.len() >= LIMITS_PER_FS_MAX {
                return Err(QuotaError::TooMany);
            }
            let e = fs.limits.entry(id).or_default();
            e.limits = limits;
        }
        fs.version += 1;
        self.save(&next)?;
        *saved = next;
        tracing::info!("{fsname}: quota of {id} set to {limits:?}");
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

    /// True if `id` of `fsname` has limits.
    fn is_limited(&self, fsname: &str, id: QuotaId) -> bool {
        let saved = self.saved.lock().expect("quotas");
        saved
            .get(fsname)
            .is_some_and(|fs| fs.limits.contains_key(&id))
    }

    /// The grace times and `ids`' limits and grants; `targets` are the file system's, of
    /// which those not told the latest limits are counted.
    pub fn view(&self, fsname: &str, ids: &[QuotaId], targets: &[(TargetKind, u32)]) -> QuotaView {
        let fs = {
            let saved = self.saved.lock().expect("quotas");
            saved.get(fsname).cloned().unwrap_or_default()
        };
        let held = self.held.lock().expect("held");
        let entries = ids
            .iter()
            .map(|id| {
                let l = fs.limits.get(id).copied().unwrap_or_default();
                let granted = |kind: TargetKind| -> u64 {
                    held.get(&(fsname.to_string(), *id)).map_or(0, |m| {
                        m.iter()
                            .filter(|(t, _)| t.0 == kind)
                            .map(|(_, h)| h.granted)
                            .sum()
                    })
                };
                QuotaEntry {
                    id: *id,
                    limits: l.limits,
                    block_soft_since: l.block_soft_since,
                    inode_soft_since: l.inode_soft_since,
                    block_granted: granted(TargetKind::Ost),
                    inode_granted: granted(TargetKind::Mdt),
                }
            })
            .collect();
        drop(held);
        let told = self.told.lock().expect("told");
        let unsynced = targets
            .iter()
            .filter(|t| told.get(&(fsname.to_string(), **t)).copied().unwrap_or(0) < fs.version)
            .count() as u32;
        QuotaView {
            block_grace_s: fs.grace(TargetKind::Ost),
            inode_grace_s: fs.grace(TargetKind::Mdt),
            entries,
            unsynced,
        }
    }

    /// The effective limit of `id` for targets of `kind` with `total` used: the hard limit,
    /// or the soft one once it has been passed for longer than the grace time (the time
    /// it was passed is recorded, durably, and cleared when usage falls back under it).
    /// Also says whether the id is past its soft limit (then grants carry no unit beyond
    /// what is asked: every change past the soft limit asks the master, so the end of
    /// the grace time stops the next one).
    fn effective(&self, fsname: &str, id: QuotaId, kind: TargetKind, total: u64) -> (u64, bool) {
        let mut saved = self.saved.lock().expect("quotas");
        let Some(fs) = saved.get_mut(fsname) else {
            return (0, false);
        };
        let grace = fs.grace(kind);
        let Some(l) = fs.limits.get_mut(&id) else {
            return (0, false);
        };
        let (soft, hard) = l.limits.of(kind);
        let since = match kind {
            TargetKind::Mdt => &mut l.inode_soft_since,
            _ => &mut l.block_soft_since,
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

    /// A target asks for more grant of an id.
    pub fn acquire(&self, a: &Acquire, targets: usize) -> Grant {
        // Only limited ids are tracked (what a peer names cannot grow the master's memory).
        if !self.is_limited(&a.fsname, a.id) {
            return decide(0, 0, a.usage, a.want, targets, a.target.0);
        }
        let key = (a.fsname.clone(), a.id);
        let (others, total) = {
            let mut held = self.held.lock().expect("held");
            let m = held.entry(key.clone()).or_default();
            m.insert(
                a.target,
                Held {
                    usage: a.usage,
                    granted: a.granted,
                },
            );
            let others: u64 = m
                .iter()
                .filter(|(t, _)| t.0 == a.target.0 && **t != a.target)
                .map(|(_, h)| h.granted.max(h.usage))
                .sum();
            let total: u64 = m
                .iter()
                .filter(|(t, _)| t.0 == a.target.0)
                .map(|(_, h)| h.usage)
                .sum();
            (others, total)
        };
        let (limit, over_soft) =
            self.effective(&a.fsname, a.id, a.target.0, total.saturating_add(a.want));
        let mut g = decide(limit, others, a.usage, a.want, targets, a.target.0);
        if over_soft && g.ok {
            g.granted = g.granted.min(a.usage.saturating_add(a.want));
        }
        let mut held = self.held.lock().expect("held");
        if let Some(m) = held.get_mut(&key) {
            if !g.ok {
                // Others may hold grant they do not use: it comes back at their next report.
                let others_used: u64 = m
                    .iter()
                    .filter(|(t, _)| t.0 == a.target.0 && **t != a.target)
                    .map(|(_, h)| h.usage)
                    .sum();
                g.retry = others_used < others
                    && a.usage.saturating_add(a.want) <= limit.saturating_sub(others_used);
            }
            if let Some(h) = m.get_mut(&a.target) {
                h.granted = g.granted.max(h.usage);
            }
        }
        g
    }

    /// A target's report: its usage and grants are recorded; it is told which ids are
    /// limited for its resource and how much grant it may keep of each (its usage and one
    /// unit; nothing for an id no longer limited).
    pub fn sync(&self, r: &SyncReport, targets: usize) -> SyncAnswer {
        let (version, limited): (u64, Vec<(QuotaId, QuotaLimits)>) = {
            let saved = self.saved.lock().expect("quotas");
            match saved.get(&r.fsname) {
                Some(fs) => (
                    fs.version,
                    fs.limits
                        .iter()
                        .filter(|(_, l)| {
                            let (soft, hard) = l.limits.of(r.target.0);
                            soft > 0 || hard > 0
                        })
                        .map(|(q, l)| (*q, l.limits))
                        .collect(),
                ),
                None => (0, Vec::new()),
            }
        };
        // Usage and grants as reported (the lock is not held while limits are read: the
        // limits' lock is never taken inside this one's).
        let totals: Vec<(QuotaId, Held, u64)> = {
            let mut held = self.held.lock().expect("held");
            // Only the ids limited now are recorded (a report names at most those).
            for (id, usage, granted) in &r.ids {
                if !limited.iter().any(|(l, _)| l == id) {
                    continue;
                }
                held.entry((r.fsname.clone(), *id)).or_default().insert(
                    r.target,
                    Held {
                        usage: *usage,
                        granted: *granted,
                    },
                );
            }
            limited
                .iter()
                .map(|(id, _)| {
                    let m = held.get(&(r.fsname.clone(), *id));
                    let mine = m
                        .and_then(|m| m.get(&r.target))
                        .copied()
                        .unwrap_or_default();
                    let total: u64 = m.map_or(0, |m| {
                        m.iter()
                            .filter(|(t, _)| t.0 == r.target.0)
                            .map(|(_, h)| h.usage)
                            .sum()
                    });
                    (*id, mine, total)
                })
                .collect()
        };
        // Each keeps its usage and a unit of the room left under the effective limit (a
        // soft limit past its grace time leaves none).
        let limited: Vec<(QuotaId, u64)> = totals
            .into_iter()
            .map(|(id, mine, total)| {
                let (limit, over_soft) = self.effective(&r.fsname, id, r.target.0, total);
                let room = if over_soft {
                    0
                } else if limit == 0 {
                    u64::MAX / 4
                } else {
                    limit.saturating_sub(total)
                };
                let keep = mine
                    .usage
                    .saturating_add(qunit(r.target.0, room, targets).min(room))
                    .min(mine.granted.max(mine.usage));
                (id, keep)
            })
            .collect();
        // Only for a file system with quotas (a peer's names cannot grow the map).
        if version != 0 {
            self.told
                .lock()
                .expect("told")
                .insert((r.fsname.clone(), r.target), version);
        }
        // The target keeps no more than told: counted so at once.
        let mut held = self.held.lock().expect("held");
        for (id, keep) in &limited {
            if let Some(h) = held
                .get_mut(&(r.fsname.clone(), *id))
                .and_then(|m| m.get_mut(&r.target))
            {
                h.granted = h.granted.min(*keep).max(h.usage);
            }
        }
        SyncAnswer { version, limited }
    }
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
                    id,
                    QuotaLimits {
                        block_soft: 2,
                        block_hard: 1,
                        ..Default::default()
                    }
                ),
                Err(QuotaError::SoftAboveHard)
            );
            m.set("fs", id, limits).unwrap();
            let root = QuotaId {
                kind: QuotaKind::Group,
                id: 0,
            };
            assert_eq!(m.set("fs", root, limits), Err(QuotaError::Root));
        }
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        assert_eq!(m.view("fs", &[id], &[]).entries[0].limits, limits);
        let ask = |ost: u32, usage: u64, granted: u64, want: u64| {
            m.acquire(
                &Acquire {
                    fsname: "fs".into(),
                    target: (TargetKind::Ost, ost),
                    id,
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
                ids: vec![(id, 4 * mib, a.granted)],
            },
            2,
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
                ids: vec![(id, mib, a.granted)],
            },
            2,
        );
        assert_eq!(s.limited.len(), 1);
        assert!(s.limited[0].1 <= a.granted && s.limited[0].1 >= mib);
        m.set("fs", id, QuotaLimits::default()).unwrap();
        let s = m.sync(
            &SyncReport {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                ids: vec![],
            },
            2,
        );
        assert!(s.limited.is_empty());
    }
}

#[cfg(test)]
mod grace_tests {
    use super::*;
    use nacre_types::QuotaKind;

    #[test]
    fn past_its_grace_a_soft_limit_takes_back_the_grant() {
        let dir = tempfile::tempdir().unwrap();
        let m = QuotaMaster::open(dir.path().join("q")).unwrap();
        let id = QuotaId {
            kind: QuotaKind::User,
            id: 1001,
        };
        let mib = 1u64 << 20;
        m.set_grace("fs", 1, 0).unwrap();
        let limits = QuotaLimits {
            block_soft: 2 * mib,
            block_hard: 100 * mib,
            ..Default::default()
        };
        m.set("fs", id, limits).unwrap();
        let g = m.acquire(
            &Acquire {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                id,
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
            ids: vec![(id, usage, g.granted)],
        };
        // Past the soft limit: its grace starts, and the target keeps only what it uses
        // (each change past the soft limit asks the master).
        let s = m.sync(&report(3 * mib), 2);
        assert_eq!(s.limited, vec![(id, 3 * mib)]);
        let more = m.acquire(
            &Acquire {
                fsname: "fs".into(),
                target: (TargetKind::Ost, 0),
                id,
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
                id,
                usage: 4 * mib,
                granted: 4 * mib,
                want: mib,
            },
            2,
        );
        assert!(!late.ok, "{late:?}");
    }
}
