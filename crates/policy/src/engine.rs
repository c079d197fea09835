//! Evaluating the rules over the index and acting on what they select, under the rate
//! limits (docs/policy.md).
//!
//! A rule walks the index in least-recently-accessed order (of the pools it takes files
//! from, else of every pool), a window of candidates at a time. The index may be behind
//! (access times reach it only through records and these checks), so each window is asked
//! of the MDTs again before anything is done: files that no longer match are left (and
//! their rows refreshed), the rest are ordered by their fresh access time and acted on,
//! `jobs` at a time, each action paced by the shared bandwidth and files-per-second limits.
//!
//! A fill rule acts only while its pool is above `above` percent full and stops handing
//! out files once those in flight will bring it to `below`: each file counts with the
//! space it holds before it starts, so parallel actions cannot overshoot by more than one
//! window's last file; the pool's fill counts space that queued destroys will free.

use crate::follow::GLIMPSE_THREADS;
use crate::index::{Change, FileRow, Index};
use crate::rules::{Action, Config, Facts, Rule};
use crate::PolicyError;
use nacre_client::relayout::{MigrateOptions, Pacer};
use nacre_client::Client;
use nacre_types::layout::StripeSpec;
use nacre_types::{Fid, FileKind, PoolName};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Candidates looked at again and acted on together.
pub const WINDOW_FILES: usize = 256;
/// Index entries read per page while selecting.
pub const PAGE_FILES: usize = 4096;

/// What a rule did, since the index was created.
#[derive(Debug, Default, Serialize, Deserialize, Clone, PartialEq, Eq)]
pub struct RuleTotals {
    /// Files the rule acted on.
    pub files: u64,
    /// Bytes those files held.
    pub bytes: u64,
    /// Actions that failed.
    pub failures: u64,
    /// Candidates that no longer matched when looked at again.
    pub skipped: u64,
    /// Files selected by the last evaluation.
    pub matched_last: u64,
    /// Evaluations.
    pub runs: u64,
}

/// A rule's counters, live.
#[derive(Default)]
pub struct RuleCounters {
    files: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
    skipped: AtomicU64,
    matched_last: AtomicU64,
    runs: AtomicU64,
}

impl RuleCounters {
    /// A snapshot.
    pub fn totals(&self) -> RuleTotals {
        RuleTotals {
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            matched_last: self.matched_last.load(Ordering::Relaxed),
            runs: self.runs.load(Ordering::Relaxed),
        }
    }

    fn load(&self, t: &RuleTotals) {
        self.files.store(t.files, Ordering::Relaxed);
        self.bytes.store(t.bytes, Ordering::Relaxed);
        self.failures.store(t.failures, Ordering::Relaxed);
        self.skipped.store(t.skipped, Ordering::Relaxed);
        self.matched_last.store(t.matched_last, Ordering::Relaxed);
        self.runs.store(t.runs, Ordering::Relaxed);
    }
}

/// What one evaluation of a rule did.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct RuleRun {
    /// The rule.
    pub rule: String,
    /// Files selected (a dry run: that would be acted on).
    pub selected: u64,
    /// Files acted on.
    pub acted: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Actions failed.
    pub failed: u64,
    /// Pool fill before and after, for a fill rule (percent).
    pub fill: Option<(f64, f64)>,
}

/// The rules, their counters and pacing, over one index and client.
pub struct Engine<'a> {
    client: &'a Client,
    ix: &'a Index,
    cfg: &'a Config,
    /// Per rule, in the rules' order.
    pub counters: Vec<RuleCounters>,
    bytes: Pacer,
    files: Pacer,
    /// Where reports without a file of their own go.
    out: Mutex<Box<dyn std::io::Write + Send + 'a>>,
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn rule_key(name: &str) -> String {
    format!("rule/{name}")
}

/// One evaluation of one rule in progress.
struct Pass<'r> {
    rule: &'r Rule,
    counters: &'r RuleCounters,
    dry_run: bool,
    now: i64,
    /// A fill rule: the bytes that must leave the pool.
    need: Option<u64>,
    /// Bytes of the files handed out so far.
    reserved: u64,
    run: RuleRun,
}

impl Pass<'_> {
    /// A fill rule has handed out enough.
    fn enough(&self) -> bool {
        self.need.is_some_and(|n| self.reserved >= n)
    }
}

/// A candidate: a file, its row and path, as looked at again.
struct Candidate {
    fid: Fid,
    row: FileRow,
    path: Option<String>,
}

impl<'a> Engine<'a> {
    /// An engine for `cfg`'s rules; reports go to `out`.
    pub fn new(
        client: &'a Client,
        ix: &'a Index,
        cfg: &'a Config,
        out: Box<dyn std::io::Write + Send + 'a>,
    ) -> Result<Engine<'a>, PolicyError> {
        let counters: Vec<RuleCounters> =
            cfg.rules.iter().map(|_| RuleCounters::default()).collect();
        for (r, c) in cfg.rules.iter().zip(&counters) {
            if let Some(v) = ix.meta(&rule_key(&r.name))? {
                if let Ok(t) = serde_json::from_slice::<RuleTotals>(&v) {
                    c.load(&t);
                }
            }
        }
        Ok(Engine {
            client,
            ix,
            cfg,
            counters,
            bytes: Pacer::new(cfg.bandwidth),
            files: Pacer::new(cfg.files_per_s),
            out: Mutex::new(out),
        })
    }

    /// Evaluates every rule once, acting (or, `dry_run`, printing what it would do).
    pub fn evaluate(&self, dry_run: bool) -> Result<Vec<RuleRun>, PolicyError> {
        let mut runs = Vec::new();
        for (i, rule) in self.cfg.rules.iter().enumerate() {
            let run = self.run_rule(rule, &self.counters[i], dry_run)?;
            let c = &self.counters[i];
            c.runs.fetch_add(1, Ordering::Relaxed);
            c.matched_last.store(run.selected, Ordering::Relaxed);
            let totals =
                serde_json::to_vec(&c.totals()).map_err(|e| PolicyError::Index(e.to_string()))?;
            self.ix
                .apply(vec![Change::Meta(rule_key(&rule.name), totals)])?;
            runs.push(run);
        }
        Ok(runs)
    }

    fn facts<'b>(row: &'b FileRow, path: Option<&'b str>) -> Facts<'b> {
        Facts {
            path,
            pool: row.pool,
            size: row.size,
            uid: row.uid,
            gid: row.gid,
            project: row.project,
            jobid: &row.jobid,
            atime: row.atime,
            mtime: row.mtime,
            created: row.created,
        }
    }

    /// True if `rule`'s action would change nothing for `row` (a migration to where the
    /// file already is).
    fn nothing_to_do(rule: &Rule, row: &FileRow) -> bool {
        matches!(&rule.action, Action::Migrate { pool, .. } if *pool == row.pool)
    }

    fn run_rule(
        &self,
        rule: &Rule,
        c: &RuleCounters,
        dry_run: bool,
    ) -> Result<RuleRun, PolicyError> {
        let mut run = RuleRun {
            rule: rule.name.clone(),
            ..RuleRun::default()
        };
        // A fill rule: how much must go, if anything.
        let mut need: Option<u64> = None;
        if let Some(f) = &rule.fill {
            let fill = self.client.pool_fill(f.pool)?;
            let pct = fill.percent();
            run.fill = Some((pct, pct));
            if pct <= f.above {
                return Ok(run);
            }
            let goal = (fill.bytes_total as f64 * f.below / 100.0) as u64;
            need = Some(fill.bytes_used.saturating_sub(goal));
        }
        let pools: Vec<Option<PoolName>> = match rule.source_pools() {
            p if p.is_empty() => vec![None],
            p => p.into_iter().map(Some).collect(),
        };
        let mut pass = Pass {
            rule,
            counters: c,
            dry_run,
            now: now_s(),
            need,
            reserved: 0,
            run,
        };
        'pools: for pool in pools {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let page = self.ix.lru(pool, after.as_deref(), PAGE_FILES)?;
                let Some((last, _)) = page.last() else { break };
                after = Some(last.clone());
                let full = page.len() == PAGE_FILES;
                let mut window: Vec<Fid> = Vec::new();
                for (_, fid) in page {
                    let Some(row) = self.ix.file(fid)? else {
                        continue;
                    };
                    let path = match rule.paths.is_empty() {
                        true => None,
                        false => self.ix.path(fid)?,
                    };
                    if rule.matches(&Self::facts(&row, path.as_deref()), pass.now)
                        && !Self::nothing_to_do(rule, &row)
                    {
                        window.push(fid);
                    }
                    if window.len() == WINDOW_FILES && self.act_window(&mut pass, &mut window)? {
                        break 'pools;
                    }
                }
                if self.act_window(&mut pass, &mut window)? {
                    break 'pools;
                }
                if !full {
                    break;
                }
            }
        }
        let mut run = pass.run;
        if let (Some(f), Some(_)) = (&rule.fill, need) {
            let after = self.client.pool_fill(f.pool)?.percent();
            if let Some((before, _)) = run.fill {
                run.fill = Some((before, after));
            }
        }
        Ok(run)
    }

    /// Looks at `window` again and acts on what still matches; true once a fill rule has
    /// handed out enough.
    fn act_window(&self, pass: &mut Pass<'_>, window: &mut Vec<Fid>) -> Result<bool, PolicyError> {
        let (rule, c, now) = (pass.rule, pass.counters, pass.now);
        if window.is_empty() {
            return Ok(pass.enough());
        }
        let fids = std::mem::take(window);
        let fresh = self.client.stat_many(&fids, GLIMPSE_THREADS)?;
        let mut by_fid: std::collections::HashMap<Fid, _> =
            fresh.into_iter().map(|s| (s.attr.fid, s)).collect();
        let mut refresh = Vec::new();
        let mut todo = Vec::new();
        for fid in fids {
            let old = self.ix.file(fid)?;
            let Some(s) = by_fid.remove(&fid) else {
                refresh.push(Change::Row(fid, None));
                c.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            if s.attr.kind != FileKind::Regular || s.orphan {
                refresh.push(Change::Row(fid, None));
                c.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let row = crate::follow::row_of(&s, old.as_ref(), None, None);
            if old.as_ref() != Some(&row) {
                refresh.push(Change::Row(fid, Some(row.clone())));
            }
            // The path (names and directories read from the index) only where it is used.
            let mut path = match rule.paths.is_empty() {
                true => None,
                false => self.ix.path(fid)?,
            };
            if !rule.matches(&Self::facts(&row, path.as_deref()), now)
                || Self::nothing_to_do(rule, &row)
            {
                c.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if path.is_none() && (pass.dry_run || matches!(rule.action, Action::Report { .. })) {
                path = self.ix.path(fid)?;
            }
            todo.push(Candidate { fid, row, path });
        }
        self.ix.apply(refresh)?;
        // Least recently accessed first, by what the MDTs say now.
        todo.sort_by_key(|x| (x.row.atime, x.fid));
        // A fill rule hands out files until those in flight free what is needed.
        if pass.need.is_some() {
            let mut keep = 0;
            for x in &todo {
                if pass.enough() {
                    break;
                }
                pass.reserved += x.row.space();
                keep += 1;
            }
            todo.truncate(keep);
        }
        pass.run.selected += todo.len() as u64;
        if pass.dry_run {
            let mut out = self.out.lock().expect("report output");
            for x in &todo {
                let _ = writeln!(
                    out,
                    "would {} {} ({} bytes, pool {}, rule {})",
                    rule.action.name(),
                    x.path.as_deref().unwrap_or("?"),
                    x.row.size,
                    Index::pool_label(&x.row.pool),
                    rule.name
                );
            }
            return Ok(pass.enough());
        }
        let next = AtomicU64::new(0);
        let acted = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let failed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..self.cfg.jobs.min(todo.len()) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(x) = todo.get(i) else { return };
                    self.files.moved(1);
                    match self.act(rule, x) {
                        Ok(()) => {
                            acted.fetch_add(1, Ordering::Relaxed);
                            bytes.fetch_add(x.row.size, Ordering::Relaxed);
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(
                                "policy: rule {}: {} {}: {e}",
                                rule.name,
                                rule.action.name(),
                                x.path.clone().unwrap_or_else(|| x.fid.to_string())
                            );
                        }
                    }
                });
            }
        });
        let (a, b, f) = (acted.into_inner(), bytes.into_inner(), failed.into_inner());
        pass.run.acted += a;
        pass.run.bytes += b;
        pass.run.failed += f;
        c.files.fetch_add(a, Ordering::Relaxed);
        c.bytes.fetch_add(b, Ordering::Relaxed);
        c.failures.fetch_add(f, Ordering::Relaxed);
        Ok(pass.enough())
    }

    fn act(&self, rule: &Rule, x: &Candidate) -> Result<(), PolicyError> {
        match &rule.action {
            Action::Migrate {
                pool,
                stripe_count,
                stripe_size,
            } => {
                let opts = MigrateOptions {
                    spec: StripeSpec {
                        stripe_count: *stripe_count,
                        stripe_size: *stripe_size,
                        start_ost: -1,
                        pool: *pool,
                    },
                };
                self.client.migrate_file(x.fid, &opts, &self.bytes)?;
            }
            Action::Purge => {
                let names = self.ix.names(x.fid)?;
                if names.is_empty() {
                    return Err(PolicyError::Index(format!("{}: no name known", x.fid)));
                }
                for (parent, name) in names {
                    // Only the file looked at: a name that now leads elsewhere stays.
                    match self.client.lookup(parent, &name, false) {
                        Ok(a) if a.fid == x.fid => self.client.unlink(parent, &name)?,
                        Ok(_) => {}
                        Err(e) if e.status() == nacre_types::Status::NoEnt => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Action::Report { to } => {
                let line = format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    rule.name,
                    x.path.as_deref().unwrap_or("?"),
                    x.row.size,
                    Index::pool_label(&x.row.pool),
                    x.row.atime,
                    x.row.uid,
                    x.row.gid,
                    if x.row.jobid.is_empty() {
                        "-"
                    } else {
                        &x.row.jobid
                    },
                );
                match to {
                    Some(path) => {
                        let mut f = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(path)
                            .map_err(|e| PolicyError::Report(format!("{}: {e}", path.display())))?;
                        f.write_all(line.as_bytes())
                            .map_err(|e| PolicyError::Report(format!("{}: {e}", path.display())))?;
                    }
                    None => {
                        let mut out = self.out.lock().expect("report output");
                        out.write_all(line.as_bytes())
                            .map_err(|e| PolicyError::Report(e.to_string()))?;
                    }
                }
            }
        }
        Ok(())
    }
}
