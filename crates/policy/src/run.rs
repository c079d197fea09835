//! The engine as a process (`nacre policy run`): the state directory (locked, one engine
//! per directory), the follower thread that keeps the index current, rule evaluations
//! every interval (or once), the status file `nacre policy status` reads, and the
//! counters rendered for `/metrics`.

use crate::engine::{Engine, RuleRun, RuleTotals};
use crate::follow::{self, FollowStats, Follower};
use crate::index::Index;
use crate::rules::Config;
use crate::PolicyError;
use nacre_client::Client;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Pause of the follower when no record is new.
pub const FOLLOW_POLL_MS: u64 = 500;
/// How often a running engine writes its status file between evaluations.
pub const STATUS_MS: u64 = 2_000;
/// Pause before the follower tries again after an error (a server restarting).
pub const RETRY_MS: u64 = 2_000;
/// The status file in the state directory.
pub const STATUS_FILE: &str = "status.json";
const LOCK_FILE: &str = "lock";

/// How a run goes.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Catch up, evaluate every rule once, stop.
    pub once: bool,
    /// Say what would be done, do nothing (the index is still kept current).
    pub dry_run: bool,
    /// Scan the whole file system again first.
    pub rescan: bool,
}

/// A per-rule metric family: name, type, help, value.
type RuleFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&RuleTotals) -> u64,
);

/// What `/metrics` and the status file show, live.
#[derive(Default)]
pub struct Live {
    /// Following.
    pub follow: FollowStats,
    /// Per rule: name, action, counters.
    pub rules: parking_lot::Mutex<Vec<(String, &'static str, RuleTotals)>>,
    /// Files and bytes indexed.
    pub index_files: std::sync::atomic::AtomicU64,
    /// Bytes the index takes on disk.
    pub index_disk_bytes: std::sync::atomic::AtomicU64,
}

impl Live {
    /// The counters as OpenMetrics families.
    pub fn render(&self, out: &mut String) {
        let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let rules = self.rules.lock().clone();
        let fams: [RuleFamily; 5] = [
            (
                "nacre_policy_rule_files",
                "counter",
                "Files a rule acted on.",
                |t| t.files,
            ),
            (
                "nacre_policy_rule_bytes",
                "counter",
                "Bytes of the files a rule acted on.",
                |t| t.bytes,
            ),
            (
                "nacre_policy_rule_failures",
                "counter",
                "Actions of a rule that failed.",
                |t| t.failures,
            ),
            (
                "nacre_policy_rule_skipped",
                "counter",
                "Candidates that no longer matched when looked at again.",
                |t| t.skipped,
            ),
            (
                "nacre_policy_rule_matched",
                "gauge",
                "Files a rule selected at its last evaluation.",
                |t| t.matched_last,
            ),
        ];
        for (name, kind, help, get) in fams {
            let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
            let suffix = if kind == "counter" { "_total" } else { "" };
            for (rule, action, t) in &rules {
                let _ = writeln!(
                    out,
                    "{name}{suffix}{{rule=\"{}\",action=\"{action}\"}} {}",
                    esc(rule),
                    get(t)
                );
            }
        }
        let f = &self.follow;
        for (name, kind, help, v) in [
            (
                "nacre_policy_records",
                "counter",
                "Changelog records applied to the index.",
                f.records.load(Ordering::Relaxed),
            ),
            (
                "nacre_policy_inode_stats",
                "counter",
                "Inodes asked of the MDTs for the index.",
                f.stats.load(Ordering::Relaxed),
            ),
            (
                "nacre_policy_index_files",
                "gauge",
                "Regular files in the index.",
                self.index_files.load(Ordering::Relaxed),
            ),
            (
                "nacre_policy_index_disk_bytes",
                "gauge",
                "Bytes the index takes on disk.",
                self.index_disk_bytes.load(Ordering::Relaxed),
            ),
        ] {
            let suffix = if kind == "counter" { "_total" } else { "" };
            let _ = writeln!(
                out,
                "# TYPE {name} {kind}\n# HELP {name} {help}\n{name}{suffix} {v}"
            );
        }
    }
}

/// The status file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Status {
    /// The engine's process.
    pub pid: u32,
    /// Seconds since the epoch of this status.
    pub updated: i64,
    /// Regular files indexed.
    pub files: u64,
    /// Directories indexed.
    pub dirs: u64,
    /// Bytes the index takes on disk.
    pub index_disk_bytes: u64,
    /// Per pool: (pool, files, bytes).
    pub pools: Vec<(String, u64, u64)>,
    /// Per MDT: (index, consumer id, next record).
    pub changelogs: Vec<(u32, u32, u64)>,
    /// Records applied by this run.
    pub records: u64,
    /// Per rule: (name, action, totals).
    pub rules: Vec<(String, String, RuleTotals)>,
    /// The last evaluation.
    pub last: Vec<RuleRun>,
}

/// Reads the status file of the engine using `state_dir`, and whether that engine still
/// runs.
pub fn read_status(state_dir: &Path) -> Result<(Status, bool), PolicyError> {
    let path = state_dir.join(STATUS_FILE);
    let text = std::fs::read(&path).map_err(|e| {
        PolicyError::Index(format!(
            "{}: {e} (has `nacre policy run` ever run with these rules?)",
            path.display()
        ))
    })?;
    let s: Status = serde_json::from_slice(&text)
        .map_err(|e| PolicyError::Index(format!("{}: {e}", path.display())))?;
    let running = lock_holder(state_dir).is_some();
    Ok((s, running))
}

/// The pid of the engine holding `state_dir`'s lock, if one does.
fn lock_holder(state_dir: &Path) -> Option<String> {
    let f = std::fs::File::open(state_dir.join(LOCK_FILE)).ok()?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => None,
        Err(_) => Some(
            std::fs::read_to_string(state_dir.join(LOCK_FILE))
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
    }
}

/// One engine's hold on its state directory (released when dropped).
pub struct StateLock {
    _file: std::fs::File,
    dir: PathBuf,
}

/// Takes `state_dir`'s lock for this process: [`PolicyError::Busy`] if another engine
/// holds it. Taken before anything else the run starts (its `/metrics` address too).
pub fn lock(state_dir: &Path) -> Result<StateLock, PolicyError> {
    std::fs::create_dir_all(state_dir)
        .map_err(|e| PolicyError::Index(format!("{}: {e}", state_dir.display())))?;
    let path = state_dir.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .open(&path)
        .map_err(|e| PolicyError::Index(format!("{}: {e}", path.display())))?;
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(PolicyError::Busy(pid.trim().to_string()));
    }
    f.set_len(0)
        .and_then(|()| {
            std::io::Write::write_all(&mut &f, std::process::id().to_string().as_bytes())
        })
        .map_err(|e| PolicyError::Index(format!("{}: {e}", path.display())))?;
    Ok(StateLock {
        _file: f,
        dir: state_dir.to_path_buf(),
    })
}

fn write_status(
    state_dir: &Path,
    client: &Client,
    ix: &Index,
    live: &Live,
    last: &[RuleRun],
) -> Result<(), PolicyError> {
    let mut changelogs = Vec::new();
    for mdt in follow::known_mdts(client) {
        if let Some(user) = follow::consumer(ix, mdt)? {
            changelogs.push((mdt, user, follow::position(ix, mdt)?));
        }
    }
    let s = Status {
        pid: std::process::id(),
        updated: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        files: ix.files(),
        dirs: ix.dirs() as u64,
        index_disk_bytes: ix.disk_bytes(),
        pools: ix
            .totals()
            .into_iter()
            .map(|(p, t)| (Index::pool_label(&p).to_string(), t.files, t.bytes))
            .collect(),
        changelogs,
        records: live.follow.records.load(Ordering::Relaxed),
        rules: live
            .rules
            .lock()
            .iter()
            .map(|(n, a, t)| (n.clone(), a.to_string(), t.clone()))
            .collect(),
        last: last.to_vec(),
    };
    live.index_files.store(s.files, Ordering::Relaxed);
    live.index_disk_bytes
        .store(s.index_disk_bytes, Ordering::Relaxed);
    let tmp: PathBuf = state_dir.join(format!("{STATUS_FILE}.tmp"));
    let body = serde_json::to_vec_pretty(&s).map_err(|e| PolicyError::Index(e.to_string()))?;
    std::fs::write(&tmp, body)
        .and_then(|()| std::fs::rename(&tmp, state_dir.join(STATUS_FILE)))
        .map_err(|e| PolicyError::Index(format!("{}: {e}", tmp.display())))
}

fn publish(live: &Live, engine: &Engine<'_>, cfg: &Config) {
    *live.rules.lock() = cfg
        .rules
        .iter()
        .zip(&engine.counters)
        .map(|(r, c)| (r.name.clone(), r.action.name(), c.totals()))
        .collect();
}

/// Runs the engine over `client`'s file system until `stop` (or once): the index kept
/// current by a follower thread, the rules evaluated every interval.
pub fn run(
    lock: &StateLock,
    client: &Client,
    cfg: &Config,
    opts: &RunOptions,
    live: &Live,
    stop: &AtomicBool,
    out: Box<dyn std::io::Write + Send + '_>,
) -> Result<Vec<RuleRun>, PolicyError> {
    if lock.dir != cfg.state_dir {
        return Err(PolicyError::Index(format!(
            "locked {}, not the rules' {}",
            lock.dir.display(),
            cfg.state_dir.display()
        )));
    }
    let ix = Index::open(&cfg.state_dir)?;
    let follower = Follower::new(client, &ix, &live.follow);
    if opts.rescan {
        follower.scan()?;
    }
    follower.start()?;
    follower.catch_up()?;
    let engine = Engine::new(client, &ix, cfg, out)?;
    publish(live, &engine, cfg);
    write_status(&cfg.state_dir, client, &ix, live, &[])?;
    if opts.once {
        let runs = engine.evaluate(opts.dry_run)?;
        publish(live, &engine, cfg);
        // What the actions changed, in the index before the status says so.
        follower.catch_up()?;
        write_status(&cfg.state_dir, client, &ix, live, &runs)?;
        return Ok(runs);
    }
    let follow_done = AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) && !follow_done.load(Ordering::Relaxed) {
                match follower.catch_up() {
                    Ok(0) => std::thread::sleep(Duration::from_millis(FOLLOW_POLL_MS)),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!("policy: following the changelogs: {e}");
                        std::thread::sleep(Duration::from_millis(RETRY_MS));
                    }
                }
            }
        });
        let mut last = Vec::new();
        let mut next = Instant::now();
        let mut evaluated = false;
        let mut status_at = Instant::now()
            .checked_sub(Duration::from_millis(STATUS_MS))
            .unwrap_or_else(Instant::now);
        let r = loop {
            if stop.load(Ordering::Relaxed) {
                break Ok(last);
            }
            if Instant::now() >= next {
                match engine.evaluate(opts.dry_run) {
                    Ok(runs) => last = runs,
                    Err(e) => tracing::warn!("policy: evaluation: {e}"),
                }
                publish(live, &engine, cfg);
                next = Instant::now() + Duration::from_secs(cfg.interval_s);
                evaluated = true;
            }
            if evaluated || status_at.elapsed() >= Duration::from_millis(STATUS_MS) {
                evaluated = false;
                status_at = Instant::now();
                if let Err(e) = write_status(&cfg.state_dir, client, &ix, live, &last) {
                    tracing::warn!("policy: status: {e}");
                }
            }
            std::thread::sleep(Duration::from_millis(FOLLOW_POLL_MS));
        };
        follow_done.store(true, Ordering::Relaxed);
        r
    });
    result
}
