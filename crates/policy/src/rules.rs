//! The rules file (TOML): the file system, where the engine keeps its state, its limits,
//! and the rules, each a set of conditions on files and an action (docs/policy.md).
//!
//! ```toml
//! fs = "10.0.0.1@tcp:/nacre"
//! state_dir = "/var/lib/nacre/policy"
//!
//! [engine]
//! interval = "5m"
//! bandwidth = "500M"
//! files_per_s = 200
//!
//! [[rule]]
//! name = "cold-flash"
//! action = "migrate"
//! pool = "capacity"
//! in_pool = ["flash"]
//! larger_than = "1M"
//! not_accessed_for = "1d"
//!
//! [[rule]]
//! name = "flash-full"
//! action = "migrate"
//! pool = "capacity"
//! fill = { pool = "flash", above = 80, below = 60 }
//! ```

use crate::PolicyError;
use globset::{Glob, GlobBuilder, GlobMatcher};
use nacre_types::units::{parse_duration_s, parse_size};
use nacre_types::PoolName;
use serde::Deserialize;
use std::path::PathBuf;

/// Most rules one file holds.
pub const RULES_MAX: usize = 256;
/// Most files one run acts on at once.
pub const JOBS_MAX: usize = 64;
/// Shortest interval between evaluations.
pub const INTERVAL_S_MIN: u64 = 1;

/// The rules file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    fs: String,
    state_dir: PathBuf,
    #[serde(default)]
    engine: RawEngine,
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    interval: Option<String>,
    bandwidth: Option<String>,
    files_per_s: Option<u64>,
    jobs: Option<usize>,
    metrics: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    action: String,
    pool: Option<String>,
    stripe_count: Option<i32>,
    stripe_size: Option<String>,
    report: Option<PathBuf>,
    #[serde(default)]
    path: Vec<String>,
    #[serde(default)]
    in_pool: Vec<String>,
    larger_than: Option<String>,
    smaller_than: Option<String>,
    #[serde(default)]
    uid: Vec<u32>,
    #[serde(default)]
    gid: Vec<u32>,
    #[serde(default)]
    user: Vec<String>,
    #[serde(default)]
    group: Vec<String>,
    #[serde(default)]
    project: Vec<u32>,
    #[serde(default)]
    jobid: Vec<String>,
    not_accessed_for: Option<String>,
    not_modified_for: Option<String>,
    older_than: Option<String>,
    accessed_within: Option<String>,
    modified_within: Option<String>,
    fill: Option<RawFill>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFill {
    pool: String,
    above: f64,
    below: f64,
}

/// A parsed, checked rules file.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file system: `MGS_NID:/FSNAME` or a path in a Nacre mount.
    pub fs: String,
    /// Where the engine keeps its index and status.
    pub state_dir: PathBuf,
    /// Seconds between evaluations of the rules (`run` without `--once`).
    pub interval_s: u64,
    /// Bytes per second all actions move together (0: no limit).
    pub bandwidth: u64,
    /// Files per second all actions act on together (0: no limit).
    pub files_per_s: u64,
    /// Files acted on at once.
    pub jobs: usize,
    /// Address of `/metrics`, if any.
    pub metrics: Option<std::net::SocketAddr>,
    /// The rules, in the file's order.
    pub rules: Vec<Rule>,
}

/// What a rule does to the files it selects.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Migrate to a pool (online, docs/migrate.md), optionally restriped.
    Migrate {
        /// The pool the files go to.
        pool: PoolName,
        /// New stripe count (0: the current one).
        stripe_count: i32,
        /// New stripe size (0: the current one).
        stripe_size: u32,
    },
    /// Remove every name of the file (a scratch tier's purge).
    Purge,
    /// List the file (to the `report` file, or the engine's output).
    Report {
        /// File the lines are appended to (None: standard output).
        to: Option<PathBuf>,
    },
}

impl Action {
    /// The action's name in rules and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Migrate { .. } => "migrate",
            Action::Purge => "purge",
            Action::Report { .. } => "report",
        }
    }
}

/// "While pool P is above A% full, take files until it is below B%".
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fill {
    /// The pool watched (the rule's files are taken from it).
    pub pool: PoolName,
    /// Percent full at which the rule starts.
    pub above: f64,
    /// Percent full it brings the pool down to.
    pub below: f64,
}

/// A rule: conditions (all must hold) and an action.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Name (in counters, metrics and reports).
    pub name: String,
    /// What it does.
    pub action: Action,
    /// Path globs from the file system's root (`/` is the root; `*` stays within one
    /// component, `**` crosses them); any may match.
    pub paths: Vec<(String, GlobMatcher)>,
    /// Pools the file's layout may be in (empty: any).
    pub in_pools: Vec<PoolName>,
    /// Size strictly above.
    pub larger_than: Option<u64>,
    /// Size strictly below.
    pub smaller_than: Option<u64>,
    /// Owners (empty: any): `uid` numbers and `user` names resolved when read.
    pub uids: Vec<u32>,
    /// Groups (empty: any): `gid` numbers and `group` names resolved when read.
    pub gids: Vec<u32>,
    /// Projects (empty: any).
    pub projects: Vec<u32>,
    /// Job id globs (empty: any); matched against the job that created the file or last
    /// wrote it.
    pub jobids: Vec<GlobMatcher>,
    /// Seconds since the last access at least.
    pub not_accessed_for: Option<u64>,
    /// Seconds since the last modification at least.
    pub not_modified_for: Option<u64>,
    /// Seconds since creation at least.
    pub older_than: Option<u64>,
    /// Seconds since the last access at most.
    pub accessed_within: Option<u64>,
    /// Seconds since the last modification at most.
    pub modified_within: Option<u64>,
    /// Acts only while a pool is this full.
    pub fill: Option<Fill>,
}

/// What the conditions look at of one file.
#[derive(Clone, Debug, Default)]
pub struct Facts<'a> {
    /// Path from the root (`/a/b`), if known.
    pub path: Option<&'a str>,
    /// Pool of its layout.
    pub pool: PoolName,
    /// Size in bytes.
    pub size: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Project.
    pub project: u32,
    /// Job that created or last wrote it (empty: unknown).
    pub jobid: &'a str,
    /// Last access, modification and creation, in seconds since the epoch.
    pub atime: i64,
    /// See `atime`.
    pub mtime: i64,
    /// See `atime`.
    pub created: i64,
}

impl Rule {
    /// Whether the rule's conditions hold for a file with `f`, at `now` (seconds since
    /// the epoch).
    pub fn matches(&self, f: &Facts<'_>, now: i64) -> bool {
        let age = |t: i64| now.saturating_sub(t).max(0) as u64;
        let at_least = |limit: Option<u64>, t: i64| limit.is_none_or(|l| age(t) >= l);
        let at_most = |limit: Option<u64>, t: i64| limit.is_none_or(|l| age(t) <= l);
        (self.in_pools.is_empty() || self.in_pools.contains(&f.pool))
            && self.larger_than.is_none_or(|l| f.size > l)
            && self.smaller_than.is_none_or(|l| f.size < l)
            && (self.uids.is_empty() || self.uids.contains(&f.uid))
            && (self.gids.is_empty() || self.gids.contains(&f.gid))
            && (self.projects.is_empty() || self.projects.contains(&f.project))
            && (self.jobids.is_empty() || self.jobids.iter().any(|g| g.is_match(f.jobid)))
            && at_least(self.not_accessed_for, f.atime)
            && at_least(self.not_modified_for, f.mtime)
            && at_least(self.older_than, f.created)
            && at_most(self.accessed_within, f.atime)
            && at_most(self.modified_within, f.mtime)
            && (self.paths.is_empty()
                || f.path
                    .is_some_and(|p| self.paths.iter().any(|(_, g)| g.is_match(p))))
    }

    /// The pools the rule takes files from (a fill rule: its pool).
    pub fn source_pools(&self) -> Vec<PoolName> {
        match (&self.fill, self.in_pools.is_empty()) {
            (Some(f), true) => vec![f.pool],
            _ => self.in_pools.clone(),
        }
    }
}

fn bad(what: impl Into<String>) -> PolicyError {
    PolicyError::Rules(what.into())
}

fn pool_name(rule: &str, p: &str) -> Result<PoolName, PolicyError> {
    // `fsname.pool` as Lustre writes it, or the pool alone.
    let name = p.rsplit('.').next().unwrap_or(p);
    PoolName::new(name).map_err(|e| bad(format!("rule '{rule}': bad pool '{p}': {e}")))
}

fn glob(rule: &str, g: &str, literal_separator: bool) -> Result<GlobMatcher, PolicyError> {
    let built = if literal_separator {
        GlobBuilder::new(g).literal_separator(true).build()
    } else {
        Glob::new(g)
    };
    built
        .map(|g| g.compile_matcher())
        .map_err(|e| bad(format!("rule '{rule}': bad glob '{g}': {e}")))
}

impl Config {
    /// Reads and checks the rules file at `path`.
    pub fn load(path: &std::path::Path) -> Result<Config, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
        Config::parse(&text).map_err(|e| match e {
            PolicyError::Rules(m) => bad(format!("{}: {m}", path.display())),
            e => e,
        })
    }

    /// Parses and checks rules text: every mistake is an error naming the rule and the
    /// field, nothing is silently ignored.
    pub fn parse(text: &str) -> Result<Config, PolicyError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if raw.rule.len() > RULES_MAX {
            return Err(bad(format!(
                "{} rules: at most {RULES_MAX}",
                raw.rule.len()
            )));
        }
        let size = |rule: &str, field: &str, v: &Option<String>| {
            v.as_deref()
                .map(parse_size)
                .transpose()
                .map_err(|e| bad(format!("rule '{rule}': {field}: {e}")))
        };
        let secs = |rule: &str, field: &str, v: &Option<String>| {
            v.as_deref()
                .map(parse_duration_s)
                .transpose()
                .map_err(|e| bad(format!("rule '{rule}': {field}: {e}")))
        };
        let engine = &raw.engine;
        let interval_s = secs("engine", "interval", &engine.interval)?
            .unwrap_or(300)
            .max(INTERVAL_S_MIN);
        let bandwidth = size("engine", "bandwidth", &engine.bandwidth)?.unwrap_or(0);
        let jobs = engine.jobs.unwrap_or(4);
        if jobs == 0 || jobs > JOBS_MAX {
            return Err(bad(format!("engine: jobs {jobs}: 1 to {JOBS_MAX}")));
        }
        let metrics = engine
            .metrics
            .as_deref()
            .map(|m| {
                m.parse()
                    .map_err(|e| bad(format!("engine: metrics '{m}': {e}")))
            })
            .transpose()?;
        let mut rules = Vec::with_capacity(raw.rule.len());
        for r in &raw.rule {
            let n = r.name.as_str();
            if n.is_empty()
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            {
                return Err(bad(format!(
                    "rule name '{n}': letters, digits, '-', '_' and '.' only"
                )));
            }
            if rules.iter().any(|x: &Rule| x.name == n) {
                return Err(bad(format!("two rules are named '{n}'")));
            }
            let action = match r.action.as_str() {
                "migrate" => {
                    let pool = r
                        .pool
                        .as_deref()
                        .ok_or_else(|| bad(format!("rule '{n}': migrate needs pool")))?;
                    let stripe_size = size(n, "stripe_size", &r.stripe_size)?.unwrap_or(0);
                    Action::Migrate {
                        pool: pool_name(n, pool)?,
                        stripe_count: r.stripe_count.unwrap_or(0),
                        stripe_size: u32::try_from(stripe_size)
                            .map_err(|_| bad(format!("rule '{n}': stripe_size too large")))?,
                    }
                }
                "purge" | "report" if r.pool.is_some() || r.stripe_count.is_some() => {
                    return Err(bad(format!(
                        "rule '{n}': pool and stripe_count are for migrate (in_pool selects)"
                    )))
                }
                "purge" => Action::Purge,
                "report" => Action::Report {
                    to: r.report.clone(),
                },
                other => {
                    return Err(bad(format!(
                        "rule '{n}': action '{other}': migrate, purge or report"
                    )))
                }
            };
            if r.report.is_some() && action.name() != "report" {
                return Err(bad(format!("rule '{n}': report is for action report")));
            }
            let fill = match &r.fill {
                Some(f) => {
                    if !(0.0..=100.0).contains(&f.below)
                        || !(0.0..=100.0).contains(&f.above)
                        || f.below >= f.above
                    {
                        return Err(bad(format!(
                            "rule '{n}': fill: 0 <= below < above <= 100 (percent)"
                        )));
                    }
                    // Reports free nothing: the rule would never stop.
                    if action.name() == "report" {
                        return Err(bad(format!(
                            "rule '{n}': fill needs an action that frees space: migrate or purge"
                        )));
                    }
                    Some(Fill {
                        pool: pool_name(n, &f.pool)?,
                        above: f.above,
                        below: f.below,
                    })
                }
                None => None,
            };
            if let (Some(f), Action::Migrate { pool, .. }) = (&fill, &action) {
                if f.pool == *pool {
                    return Err(bad(format!(
                        "rule '{n}': migrating within the pool it empties frees nothing"
                    )));
                }
            }
            let mut paths = Vec::new();
            for p in &r.path {
                if !p.starts_with('/') {
                    return Err(bad(format!(
                        "rule '{n}': path '{p}': globs start at the file system's root, '/'"
                    )));
                }
                paths.push((p.clone(), glob(n, p, true)?));
            }
            let in_pools = r
                .in_pool
                .iter()
                .map(|p| pool_name(n, p))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(f) = &fill {
                if !in_pools.is_empty() && in_pools != [f.pool] {
                    return Err(bad(format!(
                        "rule '{n}': a fill rule takes files from its pool; in_pool differs"
                    )));
                }
            }
            let mut uids = r.uid.clone();
            let mut gids = r.gid.clone();
            for (names, db, ids, field) in [
                (&r.user, crate::names::Db::User, &mut uids, "user"),
                (&r.group, crate::names::Db::Group, &mut gids, "group"),
            ] {
                for name in names {
                    match crate::names::resolve(db, name) {
                        Ok(Some(id)) => ids.push(id),
                        Ok(None) => {
                            return Err(bad(format!(
                                "rule '{n}': {field} '{name}' is not known here"
                            )))
                        }
                        Err(e) => return Err(bad(format!("rule '{n}': {field} {e}"))),
                    }
                }
            }
            rules.push(Rule {
                name: n.to_string(),
                action,
                paths,
                in_pools,
                larger_than: size(n, "larger_than", &r.larger_than)?,
                smaller_than: size(n, "smaller_than", &r.smaller_than)?,
                uids,
                gids,
                projects: r.project.clone(),
                jobids: r
                    .jobid
                    .iter()
                    .map(|j| glob(n, j, false))
                    .collect::<Result<_, _>>()?,
                not_accessed_for: secs(n, "not_accessed_for", &r.not_accessed_for)?,
                not_modified_for: secs(n, "not_modified_for", &r.not_modified_for)?,
                older_than: secs(n, "older_than", &r.older_than)?,
                accessed_within: secs(n, "accessed_within", &r.accessed_within)?,
                modified_within: secs(n, "modified_within", &r.modified_within)?,
                fill,
            });
        }
        Ok(Config {
            fs: raw.fs,
            state_dir: raw.state_dir,
            interval_s,
            bandwidth,
            files_per_s: engine.files_per_s.unwrap_or(0),
            jobs,
            metrics,
            rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "fs = \"127.0.0.1:1:/t\"\nstate_dir = \"/tmp/x\"\n";

    fn parse(rules: &str) -> Result<Config, PolicyError> {
        Config::parse(&format!("{HEAD}{rules}"))
    }

    #[test]
    fn the_issue_examples_parse_and_match() {
        let c = parse(
            "[engine]\nbandwidth = \"100M\"\nfiles_per_s = 50\n\
             [[rule]]\nname = \"cold\"\naction = \"migrate\"\npool = \"capacity\"\n\
             in_pool = [\"flash\"]\nlarger_than = \"1M\"\nnot_accessed_for = \"1d\"\n\
             [[rule]]\nname = \"full\"\naction = \"migrate\"\npool = \"capacity\"\n\
             fill = { pool = \"flash\", above = 80, below = 60 }\n",
        )
        .unwrap();
        assert_eq!(c.bandwidth, 100 << 20);
        assert_eq!(c.files_per_s, 50);
        let cold = &c.rules[0];
        let flash = PoolName::new("flash").unwrap();
        let now = 10 * 86_400;
        let f = Facts {
            pool: flash,
            size: (1 << 20) + 1,
            atime: now - 86_400,
            ..Facts::default()
        };
        assert!(cold.matches(&f, now));
        assert!(!cold.matches(
            &Facts {
                size: 1 << 20,
                ..f.clone()
            },
            now
        ));
        assert!(!cold.matches(
            &Facts {
                atime: now - 86_399,
                ..f.clone()
            },
            now
        ));
        assert!(!cold.matches(
            &Facts {
                pool: PoolName::NONE,
                ..f.clone()
            },
            now
        ));
        let full = &c.rules[1];
        assert_eq!(full.fill.unwrap().above, 80.0);
        assert_eq!(full.source_pools(), vec![flash]);
    }

    #[test]
    fn the_packaged_example_parses() {
        let c = Config::parse(include_str!("../../../contrib/debian/policy.toml.example")).unwrap();
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.rules[1].fill.unwrap().below, 60.0);
    }

    #[test]
    fn user_and_group_names_resolve() {
        let c = parse("[[rule]]\nname = \"r\"\naction = \"report\"\nuser = [\"root\"]\ngroup = [\"root\"]\nuid = [7]\n")
            .unwrap();
        assert_eq!(c.rules[0].uids, vec![7, 0]);
        assert_eq!(c.rules[0].gids, vec![0]);
    }

    #[test]
    fn paths_owners_and_jobs() {
        let c = parse(
            "[[rule]]\nname = \"r\"\naction = \"report\"\npath = [\"/scratch/*/tmp/**\"]\n\
             uid = [1000]\njobid = [\"train-*\"]\nproject = [42, 43]\n",
        )
        .unwrap();
        let r = &c.rules[0];
        let f = Facts {
            path: Some("/scratch/alice/tmp/a/b.dat"),
            uid: 1000,
            project: 43,
            jobid: "train-42",
            ..Facts::default()
        };
        assert!(r.matches(&f, 0));
        assert!(!r.matches(
            &Facts {
                project: 0,
                ..f.clone()
            },
            0
        ));
        // `*` does not cross a directory.
        assert!(!r.matches(
            &Facts {
                path: Some("/scratch/a/b/tmp/x"),
                ..f.clone()
            },
            0
        ));
        assert!(!r.matches(
            &Facts {
                uid: 1,
                ..f.clone()
            },
            0
        ));
        assert!(!r.matches(
            &Facts {
                jobid: "eval-1",
                ..f.clone()
            },
            0
        ));
        assert!(!r.matches(
            &Facts {
                path: None,
                ..f.clone()
            },
            0
        ));
    }

    #[test]
    fn mistakes_are_named() {
        for (rules, says) in [
            ("[[rule]]\nname = \"a\"\naction = \"move\"\n", "action 'move'"),
            ("[[rule]]\nname = \"a\"\naction = \"migrate\"\n", "migrate needs pool"),
            ("[[rule]]\nname = \"a\"\naction = \"purge\"\nlarger_than = \"1Q\"\n", "larger_than"),
            ("[[rule]]\nname = \"a\"\naction = \"purge\"\nproject = [-3]\n", "project"),
            (
                "[[rule]]\nname = \"a\"\naction = \"purge\"\nuser = [\"no-such-user-nacre-7q\"]\n",
                "user 'no-such-user-nacre-7q' is not known here",
            ),
            ("[[rule]]\nname = \"a\"\naction = \"purge\"\npath = [\"rel/*\"]\n", "root"),
            ("[[rule]]\nname = \"a\"\naction = \"purge\"\nsizes = 1\n", "unknown field"),
            (
                "[[rule]]\nname = \"a\"\naction = \"purge\"\nfill = { pool = \"f\", above = 50, below = 60 }\n",
                "below < above",
            ),
            (
                "[[rule]]\nname = \"a\"\naction = \"migrate\"\npool = \"f\"\nfill = { pool = \"f\", above = 80, below = 60 }\n",
                "frees nothing",
            ),
            (
                "[[rule]]\nname = \"a\"\naction = \"purge\"\n[[rule]]\nname = \"a\"\naction = \"purge\"\n",
                "two rules",
            ),
        ] {
            let e = parse(rules).err().unwrap_or_else(|| panic!("{rules} parsed")).to_string();
            assert!(e.contains(says), "{rules}: {e}");
        }
    }
}
