//! Cluster-wide quality of service (docs/qos.md): rules that cap the requests per second and
//! bytes per second of a job, user, group, project, client NID or operation across every
//! MDT and OST of a file system together, and the messages with which targets and the MGS
//! share each rule's rate.
//!
//! A rule matches requests by what they carry; each distinct value of what it matches by
//! (a job id, a uid, ...) is a *class* with the rule's rate of its own (Lustre's TBF
//! classes). Each target enforces a share of a class's rate; each second it reports what
//! the class asked of it ([`QosReport`]) and the MGS splits the rate among the targets in
//! proportion to those demands ([`split`]), so the targets together never pass the rate.

use crate::nodemap::NidRange;
use serde::{Deserialize, Serialize};

/// Most rules a file system has.
pub const QOS_RULES_MAX: usize = 256;
/// Longest rule name.
pub const QOS_NAME_BYTES_MAX: usize = 32;
/// Most values one criterion of a rule lists.
pub const QOS_VALUES_MAX: usize = 64;
/// Longest job pattern or operation name.
pub const QOS_VALUE_BYTES_MAX: usize = 128;
/// Largest weight.
pub const QOS_WEIGHT_MAX: u32 = 64;
/// Longest class name a report may carry (a target's classes are made of at most a few
/// bounded values; longer ones are not counted).
pub const QOS_CLASS_BYTES_MAX: usize = 1_024;
/// Most classes one report names (a target reports its busiest).
pub const QOS_CLASSES_PER_REPORT_MAX: usize = 4_096;

/// One rule (`nacre qos add`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosRule {
    /// Its name (letters, digits, `_`, `-`, `.`).
    pub name: String,
    /// Job id patterns (`*` and `?` wildcards); empty: any job.
    pub jobs: Vec<String>,
    /// Users; empty: any.
    pub uids: Vec<u32>,
    /// Groups (the request's primary group); empty: any.
    pub gids: Vec<u32>,
    /// Projects (of the object written or read on an OST; of the directory a new entry is
    /// made in on an MDT); empty: any.
    pub projects: Vec<u32>,
    /// Client address ranges; empty: any.
    pub nids: Vec<NidRange>,
    /// Operation names (`create`, `write`, `getattr`, ... as `md_stats` and `stats` name
    /// them); empty: any.
    pub ops: Vec<String>,
    /// Requests per second of each class, over every target (0: no cap).
    pub ops_per_s: u64,
    /// Bytes per second of each class (writes and reads; 0: no cap).
    pub bytes_per_s: u64,
    /// Seconds of its rate a class may use at once after being idle (at least 1).
    pub burst_s: u32,
    /// Weight (0: none, at most [`QOS_WEIGHT_MAX`]): when a target's service threads are
    /// all busy, its requests are taken from the queue before unweighted ones, up to this
    /// many in a row while unweighted ones wait.
    pub weight: u32,
}

/// A file system's rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosRules {
    /// Bumped on every change.
    pub version: u64,
    /// The rules, by name; a request takes the first that matches it.
    pub rules: Vec<QosRule>,
}

/// Why a rule is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QosRuleError {
    /// Bad name.
    #[error("rule name '{0}' must be 1 to {QOS_NAME_BYTES_MAX} letters, digits, '_', '-' or '.'")]
    Name(String),
    /// No cap and no weight.
    #[error("a rule caps requests (--ops-rate) or bytes (--bytes-rate) per second, or weighs them (--weight)")]
    NoCap,
    /// Weight past its bound.
    #[error("a weight is at most {QOS_WEIGHT_MAX}")]
    Weight,
    /// Too many values or too long a value.
    #[error(
        "a criterion lists at most {QOS_VALUES_MAX} values of at most {QOS_VALUE_BYTES_MAX} bytes"
    )]
    TooBig,
}

impl QosRule {
    /// Checks a rule before it is kept.
    pub fn check(&self) -> Result<(), QosRuleError> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= QOS_NAME_BYTES_MAX
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !name_ok {
            return Err(QosRuleError::Name(self.name.chars().take(64).collect()));
        }
        if self.ops_per_s == 0 && self.bytes_per_s == 0 && self.weight == 0 {
            return Err(QosRuleError::NoCap);
        }
        if self.weight > QOS_WEIGHT_MAX {
            return Err(QosRuleError::Weight);
        }
        let counts = [
            self.jobs.len(),
            self.uids.len(),
            self.gids.len(),
            self.projects.len(),
            self.nids.len(),
            self.ops.len(),
        ];
        let long = self
            .jobs
            .iter()
            .chain(&self.ops)
            .any(|v| v.len() > QOS_VALUE_BYTES_MAX);
        if counts.iter().any(|n| *n > QOS_VALUES_MAX) || long {
            return Err(QosRuleError::TooBig);
        }
        Ok(())
    }
}

/// What one class asked of one target in the last period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosDemand {
    /// The rule's name.
    pub rule: String,
    /// The class.
    pub class: String,
    /// Requests that arrived, and those still waiting.
    pub ops: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// A target's report to the MGS (each second).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosReport {
    /// File system name.
    pub fsname: String,
    /// The target (kind, index).
    pub target: (nacre_types::TargetKind, u32),
    /// Version of the rules it enforces.
    pub version: u64,
    /// Its classes with demand.
    pub demands: Vec<QosDemand>,
}

/// The MGS's answer: the rules' version, and this target's share of each class's rate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosShares {
    /// Version of the rules (the target fetches them when it has another).
    pub version: u64,
    /// (rule, class, requests per second, bytes per second) this target may serve.
    pub shares: Vec<(String, String, u64, u64)>,
    /// Targets of the file system: a class a target has no share of yet starts with its
    /// rate divided by this.
    pub targets: u32,
}

/// Splits `rate` among targets in proportion to their `demands` (each at least a
/// twentieth of an equal split, so a target whose demand is just starting is not starved;
/// the shares never sum past the rate).
pub fn split(rate: u64, demands: &[u64]) -> Vec<u64> {
    let n = demands.len() as u64;
    if n == 0 || rate == 0 {
        return vec![0; demands.len()];
    }
    let floor = rate / n / 20;
    let rest = rate - floor * n;
    let total: u128 = demands.iter().map(|d| u128::from(*d)).sum();
    demands
        .iter()
        .map(|d| {
            let part = (u128::from(rest) * u128::from(*d))
                .checked_div(total)
                .map_or(rest / n, |p| p as u64);
            floor + part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn rules_are_checked() {
        let ok = QosRule {
            name: "noisy.1".into(),
            jobs: vec!["mdtest*".into()],
            ops_per_s: 1000,
            burst_s: 1,
            ..Default::default()
        };
        assert!(ok.check().is_ok());
        let bad = QosRule {
            name: "x y".into(),
            ops_per_s: 1,
            ..Default::default()
        };
        assert!(matches!(bad.check(), Err(QosRuleError::Name(_))));
        let none = QosRule {
            name: "x".into(),
            ..Default::default()
        };
        assert_eq!(none.check(), Err(QosRuleError::NoCap));
        let big = QosRule {
            uids: (0..100).collect(),
            ..ok
        };
        assert_eq!(big.check(), Err(QosRuleError::TooBig));
    }

    #[test]
    fn a_rate_follows_the_demand_and_never_sums_past_itself() {
        assert_eq!(split(1000, &[100, 0]), vec![975, 25]);
        assert_eq!(split(1000, &[0, 0]), vec![500, 500]);
        assert_eq!(split(1000, &[]), Vec::<u64>::new());
        let s = split(1000, &[1, 1, 2]);
        assert!(s.iter().sum::<u64>() <= 1000);
        assert!(s[2] > s[0]);
    }

    proptest! {
        #[test]
        fn shares_fit_the_rate(rate in 0u64..1 << 40, demands in proptest::collection::vec(0u64..1 << 40, 0..64)) {
            let s = split(rate, &demands);
            prop_assert_eq!(s.len(), demands.len());
            prop_assert!(s.iter().map(|x| u128::from(*x)).sum::<u128>() <= u128::from(rate));
        }

        #[test]
        fn messages_round_trip_and_refuse_truncation(n in any::<u64>(), id in any::<u32>(), name in "[a-z]{1,8}") {
            let rule = QosRule {
                name: name.clone(),
                jobs: vec![format!("{name}*")],
                uids: vec![id],
                gids: vec![id / 2],
                projects: vec![7],
                nids: vec![NidRange::parse("10.0.0.0/24").unwrap()],
                ops: vec!["create".into()],
                ops_per_s: n,
                bytes_per_s: n / 3,
                burst_s: id % 10,
                weight: id % 65,
            };
            let report = QosReport {
                fsname: "fs".into(),
                target: (nacre_types::TargetKind::Ost, id),
                version: n,
                demands: vec![QosDemand { rule: name.clone(), class: "job=a".into(), ops: n, bytes: 1 }],
            };
            let reqs = vec![
                crate::mgs::MgsRequest::QosSet { fsname: "fs".into(), rule: rule.clone() },
                crate::mgs::MgsRequest::QosDel { fsname: "fs".into(), name: name.clone() },
                crate::mgs::MgsRequest::QosGet { fsname: "fs".into() },
                crate::mgs::MgsRequest::QosSync(report),
            ];
            for r in reqs {
                let b = encode_body(&r);
                prop_assert_eq!(decode_body::<crate::mgs::MgsRequest>(&b).unwrap(), r);
                for k in 0..b.len() {
                    prop_assert!(decode_body::<crate::mgs::MgsRequest>(&b[..k]).is_err());
                }
            }
            let replies = vec![
                crate::mgs::MgsReply::QosRules(QosRules { version: n, rules: vec![rule] }),
                crate::mgs::MgsReply::QosShares(QosShares {
                    version: n, shares: vec![(name, "uid=1".into(), n, n / 2)], targets: id,
                }),
            ];
            for r in replies {
                let b = encode_body(&r);
                prop_assert_eq!(decode_body::<crate::mgs::MgsReply>(&b).unwrap(), r);
                for k in 0..b.len() {
                    prop_assert!(decode_body::<crate::mgs::MgsReply>(&b[..k]).is_err());
                }
            }
        }
    }
}
