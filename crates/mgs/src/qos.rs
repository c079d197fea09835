//! The QoS master (docs/qos.md): each file system's rules, kept durably, and the split of
//! each class's rate among the targets that serve it, in proportion to what each reports
//! the class asked of it in the last second.

use crate::store::{decode, read_envelope, write_envelope, StoreError};
use nacre_types::TargetKind;
use nacre_wire::qos::{split, QosReport, QosRule, QosRuleError, QosRules, QosShares};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every file system's rules.
pub type Saved = BTreeMap<String, QosRules>;

/// Most classes the master tracks (over every file system); a report naming more is
/// answered for the classes already tracked, and the others keep their default share.
pub const CLASSES_MAX: usize = 65_536;
/// A target's demand older than this no longer counts (it stopped reporting).
pub const DEMAND_STALE_MS: u64 = 3_000;

/// A target: kind and index.
type Target = (TargetKind, u32);
/// (fsname, rule, class) → target → (ops, bytes, when reported).
type Demands = HashMap<(String, String, String), HashMap<Target, (u64, u64, Instant)>>;

/// Why a QoS change is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QosError {
    /// A bad rule.
    #[error(transparent)]
    Rule(#[from] QosRuleError),
    /// No rule of that name.
    #[error("no such rule")]
    NoRule,
    /// Past the number of rules.
    #[error("too many rules (at most {})", nacre_wire::qos::QOS_RULES_MAX)]
    TooMany,
    /// Not saved.
    #[error("the MGS could not save the rules")]
    Io,
}

/// The master.
pub struct QosMaster {
    path: PathBuf,
    saved: Mutex<Saved>,
    demands: Mutex<Demands>,
}

impl QosMaster {
    /// The master keeping its rules in `path`.
    pub fn open(path: PathBuf) -> Result<QosMaster, StoreError> {
        let saved = load_qos(&path)?;
        Ok(QosMaster {
            path,
            saved: Mutex::new(saved),
            demands: Mutex::new(HashMap::new()),
        })
    }

    fn change(
        &self,
        fsname: &str,
        f: impl FnOnce(&mut QosRules) -> Result<(), QosError>,
    ) -> Result<QosRules, QosError> {
        let mut saved = self.saved.lock().expect("qos");
        let mut next = saved.clone();
        let rules = next.entry(fsname.to_string()).or_default();
        f(rules)?;
        rules.version += 1;
        let out = rules.clone();
        save_qos(&self.path, &next).map_err(|e| {
            tracing::error!("MGS cannot save QoS rules: {e}");
            QosError::Io
        })?;
        *saved = next;
        Ok(out)
    }

    /// Adds `rule`, or replaces the one of its name (in its place); durable on return.
    pub fn set(&self, fsname: &str, rule: QosRule) -> Result<QosRules, QosError> {
        rule.check()?;
        let name = rule.name.clone();
        let out = self.change(fsname, |rules| {
            let full = rules.rules.len() >= nacre_wire::qos::QOS_RULES_MAX;
            match rules.rules.iter_mut().find(|r| r.name == rule.name) {
                Some(r) => *r = rule,
                None if full => return Err(QosError::TooMany),
                None => rules.rules.push(rule),
            }
            Ok(())
        })?;
        tracing::info!("{fsname}: QoS rule {name} set");
        Ok(out)
    }

    /// Removes the rule `name`.
    pub fn del(&self, fsname: &str, name: &str) -> Result<QosRules, QosError> {
        let out = self.change(fsname, |rules| {
            let before = rules.rules.len();
            rules.rules.retain(|r| r.name != name);
            if rules.rules.len() == before {
                return Err(QosError::NoRule);
            }
            Ok(())
        })?;
        tracing::info!("{fsname}: QoS rule {name} removed");
        Ok(out)
    }

    /// A file system's rules.
    pub fn get(&self, fsname: &str) -> QosRules {
        let saved = self.saved.lock().expect("qos");
        saved.get(fsname).cloned().unwrap_or_default()
    }

    /// A target's report: its demands are recorded, and it is told its share of each of its
    /// classes' rates. `targets`: the file system's targets.
    pub fn sync(&self, r: &QosReport, targets: u32) -> QosShares {
        let rules = self.get(&r.fsname);
        let now = Instant::now();
        let stale = Duration::from_millis(DEMAND_STALE_MS);
        let mut demands = self.demands.lock().expect("demands");
        demands.retain(|_, by| {
            by.retain(|_, (_, _, at)| now.duration_since(*at) < stale);
            !by.is_empty()
        });
        let mut shares = Vec::new();
        for d in r
            .demands
            .iter()
            .take(nacre_wire::qos::QOS_CLASSES_PER_REPORT_MAX)
        {
            // What a peer names cannot grow the master's memory past its bounds.
            if d.class.len() > nacre_wire::qos::QOS_CLASS_BYTES_MAX {
                continue;
            }
            let Some(rule) = rules.rules.iter().find(|x| x.name == d.rule) else {
                continue;
            };
            let key = (r.fsname.clone(), d.rule.clone(), d.class.clone());
            if !demands.contains_key(&key) && demands.len() >= CLASSES_MAX {
                continue;
            }
            let by = demands.entry(key).or_default();
            by.insert(r.target, (d.ops, d.bytes, now));
            let mut order: Vec<(&Target, &(u64, u64, Instant))> = by.iter().collect();
            order.sort_by_key(|(t, _)| **t);
            let me = order
                .iter()
                .position(|(t, _)| **t == r.target)
                .expect("just recorded");
            let ops: Vec<u64> = order.iter().map(|(_, d)| d.0).collect();
            let bytes: Vec<u64> = order.iter().map(|(_, d)| d.1).collect();
            // Bytes follow the byte demand, or the request demand when none moved bytes.
            let by_bytes = if bytes.iter().any(|b| *b > 0) {
                &bytes
            } else {
                &ops
            };
            shares.push((
                d.rule.clone(),
                d.class.clone(),
                split(rule.ops_per_s, &ops)[me],
                split(rule.bytes_per_s, by_bytes)[me],
            ));
        }
        QosShares {
            version: rules.version,
            shares,
            targets,
        }
    }
}

// Kept on disk (the MGS directory's `mgs-qos`).

const QOS_MAGIC: &[u8; 4] = b"NMQS";
/// Format of the QoS rules file `mgs-qos` (its own: no other file shares it).
const QOS_FORMAT_VERSION: u32 = 1;

/// Loads the QoS rules of every file system (none if the file does not exist yet).
pub(crate) fn load_qos(path: &Path) -> Result<Saved, StoreError> {
    match read_envelope(path, QOS_MAGIC, 1..=QOS_FORMAT_VERSION)? {
        Some((_, payload)) => decode(path, &payload),
        None => Ok(Default::default()),
    }
}

/// Saves the QoS rules durably.
pub(crate) fn save_qos(path: &Path, saved: &Saved) -> Result<(), StoreError> {
    let payload = postcard::to_allocvec(saved).expect("in-memory serialization");
    write_envelope(path, QOS_MAGIC, QOS_FORMAT_VERSION, &payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_wire::qos::QosDemand;

    #[test]
    fn rules_survive_a_restart_and_rates_split_by_demand() {
        let dir = tempfile::tempdir().unwrap();
        let rule = QosRule {
            name: "noisy".into(),
            jobs: vec!["mdtest*".into()],
            ops_per_s: 1000,
            burst_s: 1,
            ..Default::default()
        };
        {
            let m = QosMaster::open(dir.path().join("q")).unwrap();
            assert_eq!(m.set("fs", rule.clone()).unwrap().version, 1);
            assert_eq!(m.del("fs", "nope"), Err(QosError::NoRule));
            let bad = QosRule {
                ops_per_s: 0,
                ..rule.clone()
            };
            assert!(matches!(m.set("fs", bad), Err(QosError::Rule(_))));
        }
        let m = QosMaster::open(dir.path().join("q")).unwrap();
        assert_eq!(m.get("fs").rules, vec![rule]);
        let report = |kind, index, ops| QosReport {
            fsname: "fs".into(),
            target: (kind, index),
            version: 1,
            demands: vec![QosDemand {
                rule: "noisy".into(),
                class: "job=mdtest.1".into(),
                ops,
                bytes: 0,
            }],
        };
        // Alone, MDT0 gets the whole rate; with MDT1 asking three times as much, a quarter.
        let a = m.sync(&report(TargetKind::Mdt, 0, 100), 4);
        assert_eq!(a.shares[0].2, 1000);
        let b = m.sync(&report(TargetKind::Mdt, 1, 300), 4);
        let a = m.sync(&report(TargetKind::Mdt, 0, 100), 4);
        assert!(
            (998..=1000).contains(&(a.shares[0].2 + b.shares[0].2)),
            "{a:?} {b:?}"
        );
        assert!((240..=270).contains(&a.shares[0].2), "{a:?}");
        // A class name past its bound is not tracked.
        let mut long = report(TargetKind::Ost, 1, 5);
        long.demands[0].class = "x".repeat(nacre_wire::qos::QOS_CLASS_BYTES_MAX + 1);
        assert!(m.sync(&long, 4).shares.is_empty());
        // An unknown rule's demand gets nothing.
        let mut other = report(TargetKind::Ost, 0, 5);
        other.demands[0].rule = "gone".into();
        assert!(m.sync(&other, 4).shares.is_empty());
        assert_eq!(m.del("fs", "noisy").unwrap().rules.len(), 0);
    }
}
