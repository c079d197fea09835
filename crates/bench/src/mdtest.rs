//! An mdtest-like metadata driver (and mdsrate's mknod-only create mode).
//!
//! Each iteration builds a directory tree (`-z` depth, `-b` branching) per task with `-u`, or one
//! shared tree otherwise, then runs the phases in mdtest's order — directory create/stat/remove,
//! file create/stat/read/remove — each between barriers, and removes the tree. Items go to the
//! tree's leaves round-robin; a rate is items of all tasks divided by the phase's wall time.

use crate::stats::Summary;
use crate::storage::{Api, Storage};
use crate::team::{Job, Placement, Recorder, Sample, Team, Workload};
use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most tasks one run may start.
pub const TASKS_MAX: usize = 4096;
/// Most leaf directories of one tree.
pub const TREE_LEAVES_MAX: u64 = 1 << 16;

/// Parameters, named after mdtest's flags.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MdtestParams {
    /// `-d`: directory to work in.
    pub dir: PathBuf,
    /// `-N`: tasks.
    pub tasks: usize,
    /// `-n`: items per task.
    pub items: u64,
    /// `-u`: a tree per task.
    pub unique_dir: bool,
    /// `-w`: bytes written into each file at creation.
    pub write_bytes: u64,
    /// `-e`: bytes read from each file in the read phase.
    pub read_bytes: u64,
    /// `-F`: files only.
    pub files_only: bool,
    /// `-D`: directories only.
    pub dirs_only: bool,
    /// `-i`: iterations.
    pub iterations: u32,
    /// `-z`: tree depth.
    pub depth: u32,
    /// `-b`: tree branching factor.
    pub branch: u32,
    /// mdsrate-style creates: `mknod` only, no open/close.
    pub mknod: bool,
}

/// Rates of one iteration, per phase name.
#[derive(Clone, Debug, Serialize)]
pub struct IterationResult {
    /// Iteration number.
    pub iteration: u32,
    /// (phase, items, seconds, items per second).
    pub phases: Vec<(String, u64, f64, f64)>,
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct MdtestReport {
    /// Interface used (`POSIX`, `NACRE`).
    pub api: &'static str,
    /// Hosts the tasks ran on (empty: this process).
    pub hosts: Vec<String>,
    /// Parameters.
    pub params: MdtestParams,
    /// Each iteration.
    pub iterations: Vec<IterationResult>,
    /// Per phase: rate summary over iterations.
    pub summary: Vec<(String, Summary)>,
    /// Progress samples (for charts).
    pub samples: Vec<Sample>,
}

impl MdtestParams {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: &str| Err(BenchError::Params(m.to_string()));
        if self.tasks == 0 || self.tasks > TASKS_MAX {
            return bad("tasks must be 1..=4096");
        }
        if self.items == 0 || self.iterations == 0 {
            return bad("items (-n) and iterations (-i) must be at least 1");
        }
        if self.files_only && self.dirs_only {
            return bad("-F and -D exclude each other");
        }
        if self.branch == 0 && self.depth > 0 {
            return bad("a tree of depth > 0 needs a branching factor (-b) of at least 1");
        }
        if self.leaves() > TREE_LEAVES_MAX {
            return bad("tree too large (at most 65536 leaf directories)");
        }
        if self.mknod && self.write_bytes > 0 {
            return bad("--mknod creates empty files: -w must be 0");
        }
        Ok(())
    }

    fn leaves(&self) -> u64 {
        u64::from(self.branch.max(1)).saturating_pow(self.depth)
    }

    fn tree_root(&self, task: usize) -> PathBuf {
        let id = if self.unique_dir { task } else { 0 };
        self.dir.join(format!("mdtest_tree.{id}"))
    }

    /// Directories of a tree, parents before children.
    fn tree_dirs(&self, task: usize) -> Vec<PathBuf> {
        let mut level = vec![self.tree_root(task)];
        let mut all = level.clone();
        for _ in 0..self.depth {
            let mut next = Vec::new();
            for d in &level {
                for b in 0..self.branch {
                    next.push(d.join(format!("mdtest_tree.{b}")));
                }
            }
            all.extend(next.iter().cloned());
            level = next;
        }
        all
    }

    fn leaf_dirs(&self, task: usize) -> Vec<PathBuf> {
        let all = self.tree_dirs(task);
        let n = self.leaves() as usize;
        all[all.len() - n..].to_vec()
    }

    fn item(&self, leaves: &[PathBuf], task: usize, i: u64, kind: &str) -> PathBuf {
        leaves[(i % leaves.len() as u64) as usize].join(format!("{kind}.mdtest.{task}.{i}"))
    }
}

/// A phase command: the phase's name (mdtest's, e.g. `File creation`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MdCmd {
    /// Phase name.
    pub phase: String,
}

/// The mdtest workload as a team runs it.
pub struct MdWork {
    p: MdtestParams,
    payload: Vec<u8>,
}

impl MdWork {
    /// The workload of `p`.
    pub fn new(p: MdtestParams) -> MdWork {
        let payload = vec![0x5au8; p.write_bytes as usize];
        MdWork { p, payload }
    }

    fn trees(&self) -> usize {
        if self.p.unique_dir {
            self.p.tasks
        } else {
            1
        }
    }
}

impl Workload for MdWork {
    type Cmd = MdCmd;
    type Out = ();

    fn task(
        &self,
        cmd: &MdCmd,
        t: usize,
        fs: &dyn Storage,
        done: &AtomicU64,
    ) -> Result<(), BenchError> {
        let p = &self.p;
        match cmd.phase.as_str() {
            "Setup" => {
                if t == 0 {
                    fs.mkdir_all(&p.dir)?;
                }
            }
            "Tree creation" if t < self.trees() => {
                for d in p.tree_dirs(t) {
                    fs.mkdir(&d)?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            "Tree removal" if t < self.trees() => {
                for d in p.tree_dirs(t).iter().rev() {
                    fs.rmdir(d)?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            "Tree creation" | "Tree removal" => {}
            phase => {
                let kind = if phase.starts_with("Directory") {
                    "dir"
                } else {
                    "file"
                };
                let leaves = p.leaf_dirs(t);
                for i in 0..p.items {
                    let path = p.item(&leaves, t, i, kind);
                    match phase {
                        "Directory creation" => fs.mkdir(&path)?,
                        "Directory stat" | "File stat" => fs.stat(&path)?,
                        "Directory removal" => fs.rmdir(&path)?,
                        "File creation" if p.mknod => fs.mknod(&path)?,
                        "File creation" => fs.create(&path, &self.payload)?,
                        "File read" => fs.read_head(&path, p.read_bytes as usize)?,
                        "File removal" => fs.unlink(&path)?,
                        other => return Err(BenchError::Params(format!("unknown phase {other}"))),
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    fn merge(_: &mut (), _: ()) {}
}

/// Runs the benchmark as threads of this process on POSIX paths; `progress` is called after
/// each phase with (iteration, phase, rate).
pub fn run(
    p: &MdtestParams,
    progress: impl FnMut(u32, &str, f64),
) -> Result<MdtestReport, BenchError> {
    run_on(
        p,
        &Api::Posix,
        &Placement::default(),
        Recorder::new(false, "ops", 1.0),
        progress,
    )
}

/// Runs the benchmark through `api` with tasks placed as `placement` says.
pub fn run_on(
    p: &MdtestParams,
    api: &Api,
    placement: &Placement,
    recorder: Recorder,
    mut progress: impl FnMut(u32, &str, f64),
) -> Result<MdtestReport, BenchError> {
    p.validate()?;
    let work = MdWork::new(p.clone());
    let mut team = Team::start(
        &work,
        Job::new("mdtest", &p)?,
        p.tasks,
        api,
        placement,
        recorder,
    )?;
    let cmd = |phase: &str| MdCmd {
        phase: phase.to_string(),
    };
    team.phase("Setup", &cmd("Setup"), 0)?;
    let mut phases: Vec<&str> = Vec::new();
    if !p.files_only {
        phases.extend(["Directory creation", "Directory stat", "Directory removal"]);
    }
    if !p.dirs_only {
        phases.extend(["File creation", "File stat", "File read", "File removal"]);
    }
    let tree_dirs: u64 = (0..work.trees()).map(|t| p.tree_dirs(t).len() as u64).sum();
    let mut iterations = Vec::new();
    for it in 0..p.iterations {
        let mut result = IterationResult {
            iteration: it,
            phases: Vec::new(),
        };
        let mut timed = |name: &str, n: u64, result: &mut IterationResult| {
            let ((), secs) = team.phase(name, &cmd(name), n)?;
            let rate = n as f64 / secs.max(1e-9);
            result.phases.push((name.to_string(), n, secs, rate));
            Ok::<f64, BenchError>(rate)
        };
        timed("Tree creation", tree_dirs, &mut result)?;
        for phase in &phases {
            let rate = timed(phase, p.items * p.tasks as u64, &mut result)?;
            progress(it, phase, rate);
        }
        timed("Tree removal", tree_dirs, &mut result)?;
        iterations.push(result);
    }
    let samples = std::mem::take(&mut team.recorder.samples);
    drop(team);
    let mut names: Vec<String> = phases.iter().map(|s| s.to_string()).collect();
    names.extend(["Tree creation".to_string(), "Tree removal".to_string()]);
    let summary = names
        .into_iter()
        .map(|name| {
            let rates: Vec<f64> = iterations
                .iter()
                .flat_map(|i| i.phases.iter().filter(|ph| ph.0 == name).map(|ph| ph.3))
                .collect();
            (name, Summary::of(&rates))
        })
        .collect();
    Ok(MdtestReport {
        api: api.name(),
        hosts: placement.hosts.clone(),
        params: p.clone(),
        iterations,
        summary,
        samples,
    })
}

/// mdtest-style text summary.
pub fn format_report(r: &MdtestReport) -> String {
    let p = &r.params;
    let mut s = format!(
        "mdtest-like run: {} tasks, {} items per task ({} total), {} directory, {}{}\n\n",
        p.tasks,
        p.items,
        p.items * p.tasks as u64,
        if p.unique_dir { "unique" } else { "shared" },
        if p.mknod {
            "mknod creates"
        } else {
            "open/close creates"
        },
        if p.write_bytes > 0 {
            format!(", {} bytes written per file", p.write_bytes)
        } else {
            String::new()
        },
    );
    s += &format!("SUMMARY rate: (of {} iterations)\n", r.iterations.len());
    s += "   Operation                      Max            Min           Mean        Std Dev\n";
    s += "   ---------                      ---            ---           ----        -------\n";
    for (name, sum) in &r.summary {
        s += &format!(
            "   {:<22} {:>14.3} {:>14.3} {:>14.3} {:>14.3}\n",
            name, sum.max, sum.min, sum.mean, sum.stddev
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_every_phase_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let p = MdtestParams {
            dir: dir.path().join("md"),
            tasks: 3,
            items: 20,
            unique_dir: true,
            write_bytes: 100,
            read_bytes: 100,
            files_only: false,
            dirs_only: false,
            iterations: 2,
            depth: 2,
            branch: 2,
            mknod: false,
        };
        let r = run(&p, |_, _, _| {}).unwrap();
        assert_eq!(r.iterations.len(), 2);
        assert_eq!(r.iterations[0].phases.len(), 9);
        assert!(r.iterations[0].phases.iter().all(|ph| ph.3 > 0.0));
        assert_eq!(
            std::fs::read_dir(dir.path().join("md")).unwrap().count(),
            0,
            "everything removed"
        );
        let text = format_report(&r);
        assert!(text.contains("File creation") && text.contains("Tree removal"));
    }

    #[test]
    fn mknod_mode_shared_dir() {
        let dir = tempfile::tempdir().unwrap();
        let p = MdtestParams {
            dir: dir.path().to_path_buf(),
            tasks: 2,
            items: 50,
            unique_dir: false,
            write_bytes: 0,
            read_bytes: 0,
            files_only: true,
            dirs_only: false,
            iterations: 1,
            depth: 0,
            branch: 0,
            mknod: true,
        };
        let r = run(&p, |_, _, _| {}).unwrap();
        assert_eq!(
            r.iterations[0]
                .phases
                .iter()
                .find(|ph| ph.0 == "File creation")
                .unwrap()
                .1,
            100
        );
    }
}
