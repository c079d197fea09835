//! A file system's QoS rules made ready to match requests: job patterns compiled once per
//! change of the rules (globset), and the class of a request under the first rule it matches.

use nacre_wire::qos::{QosRule, QosRules};
use std::net::IpAddr;

/// What a target knows of a request, to match it.
#[derive(Clone, Debug, Default)]
pub struct Facts<'a> {
    /// Job id ("" for none).
    pub job: &'a str,
    /// Caller's uid.
    pub uid: u32,
    /// Caller's primary gid.
    pub gid: u32,
    /// Project of what it works on (0: none or not known).
    pub project: u32,
    /// Client address, if known.
    pub nid: Option<IpAddr>,
    /// Operation name (as `md_stats` and `stats` name it).
    pub op: &'a str,
    /// Bytes it moves.
    pub bytes: u64,
}

/// One rule, its job patterns compiled.
struct Compiled {
    rule: QosRule,
    jobs: globset::GlobSet,
}

/// Rules ready to match.
#[derive(Default)]
pub struct Rules {
    version: u64,
    rules: Vec<Compiled>,
}

impl Rules {
    /// Compiles `rules` (a job pattern that does not compile matches nothing, and is said).
    pub fn new(rules: &QosRules) -> Rules {
        let compiled = rules
            .rules
            .iter()
            .map(|r| {
                let mut b = globset::GlobSetBuilder::new();
                for p in &r.jobs {
                    match globset::GlobBuilder::new(p)
                        .literal_separator(false)
                        .build()
                    {
                        Ok(g) => {
                            b.add(g);
                        }
                        Err(e) => tracing::warn!("QoS rule {}: job pattern {p}: {e}", r.name),
                    }
                }
                Compiled {
                    rule: r.clone(),
                    jobs: b.build().unwrap_or_else(|_| globset::GlobSet::empty()),
                }
            })
            .collect();
        Rules {
            version: rules.version,
            rules: compiled,
        }
    }

    /// Version of the rules.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// True if there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// True if some rule caps the rate of requests (`ops_per_s`) and may match one of
    /// operations `ops` (it names one of them, or no operation at all), whatever else it
    /// matches by.
    pub fn caps_any(&self, ops: &[&str]) -> bool {
        self.rules.iter().map(|c| &c.rule).any(|r| {
            r.ops_per_s > 0 && (r.ops.is_empty() || r.ops.iter().any(|o| ops.contains(&&o[..])))
        })
    }

    /// The rule named `name`.
    pub fn rule(&self, name: &str) -> Option<&QosRule> {
        self.rules.iter().map(|c| &c.rule).find(|r| r.name == name)
    }

    /// The first rule a request matches, and its class there (the values of what the rule
    /// matches by, e.g. `job=ior.7,op=write`).
    pub fn classify(&self, f: &Facts<'_>) -> Option<(&QosRule, String)> {
        self.rules
            .iter()
            .find_map(|c| class_of(c, f).map(|class| (&c.rule, class)))
    }
}

fn class_of(c: &Compiled, f: &Facts<'_>) -> Option<String> {
    use std::fmt::Write;
    let r = &c.rule;
    let mut class = String::new();
    let mut add = |what: &str, v: &dyn std::fmt::Display| {
        if !class.is_empty() {
            class.push(',');
        }
        let _ = write!(class, "{what}={v}");
    };
    if !r.jobs.is_empty() {
        if !c.jobs.is_match(f.job) {
            return None;
        }
        add("job", &f.job);
    }
    if !r.uids.is_empty() {
        if !r.uids.contains(&f.uid) {
            return None;
        }
        add("uid", &f.uid);
    }
    if !r.gids.is_empty() {
        if !r.gids.contains(&f.gid) {
            return None;
        }
        add("gid", &f.gid);
    }
    if !r.projects.is_empty() {
        if !r.projects.contains(&f.project) {
            return None;
        }
        add("project", &f.project);
    }
    if !r.nids.is_empty() {
        let ip = f.nid?;
        if !r.nids.iter().any(|n| n.contains(ip)) {
            return None;
        }
        add("nid", &ip);
    }
    if !r.ops.is_empty() {
        if !r.ops.iter().any(|o| o == f.op) {
            return None;
        }
        add("op", &f.op);
    }
    Some(class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_takes_the_first_matching_rule_and_a_class_per_value() {
        let rules = Rules::new(&QosRules {
            version: 3,
            rules: vec![
                QosRule {
                    name: "noisy".into(),
                    jobs: vec!["mdtest*".into(), "*.batch".into()],
                    ops: vec!["create".into(), "unlink".into()],
                    ops_per_s: 1000,
                    burst_s: 1,
                    ..Default::default()
                },
                QosRule {
                    name: "lab".into(),
                    uids: vec![1000, 1001],
                    nids: vec![nacre_wire::nodemap::NidRange::parse("10.0.0.0/24").unwrap()],
                    bytes_per_s: 1 << 30,
                    burst_s: 1,
                    ..Default::default()
                },
            ],
        });
        let f = |job, uid, op, nid: &str| Facts {
            job,
            uid,
            op,
            nid: nid.parse().ok(),
            ..Default::default()
        };
        let class = |f: &Facts<'_>| rules.classify(f).map(|(r, c)| (r.name.clone(), c));
        assert_eq!(
            class(&f("mdtest.1", 5, "create", "")),
            Some(("noisy".into(), "job=mdtest.1,op=create".into()))
        );
        assert_eq!(
            class(&f("x/y.batch", 5, "unlink", "")),
            Some(("noisy".into(), "job=x/y.batch,op=unlink".into()))
        );
        assert_eq!(
            class(&f("mdtest.1", 1000, "getattr", "10.0.0.7")),
            Some(("lab".into(), "uid=1000,nid=10.0.0.7".into()))
        );
        assert_eq!(class(&f("mdtest.1", 1000, "getattr", "10.0.1.7")), None);
        assert_eq!(class(&f("ior", 5, "write", "")), None);
        assert_eq!(rules.version(), 3);
        assert!(rules.rule("lab").is_some());
    }

    #[test]
    fn a_rate_cap_on_an_operation_or_on_every_one_caps_it() {
        let rule = |ops: &[&str], ops_per_s| QosRule {
            name: "r".into(),
            ops: ops.iter().map(|o| o.to_string()).collect(),
            ops_per_s,
            bytes_per_s: 1 << 20,
            weight: 3,
            burst_s: 1,
            ..Default::default()
        };
        let caps = |rules: Vec<QosRule>| {
            Rules::new(&QosRules { version: 1, rules }).caps_any(&["create", "unlink"])
        };
        assert!(caps(vec![rule(&["write"], 0), rule(&["unlink"], 5)]));
        assert!(caps(vec![rule(&[], 5)]), "no operation named: every one");
        assert!(!caps(vec![rule(&["write", "getattr"], 5)]));
        assert!(!caps(vec![rule(&["create"], 0)]), "bytes and weight only");
        assert!(!caps(Vec::new()));
    }
}
