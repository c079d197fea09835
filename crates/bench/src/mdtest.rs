//! An mdtest-like metadata driver (and mdsrate's mknod-only create mode).
//!
//! Each iteration builds a directory tree (`-z` depth, `-b` branching) per task with `-u`, or one
//! shared tree otherwise, then runs the phases in mdtest's order — directory create/stat/remove,
//! file create/stat/read/remove — each between barriers, and removes the tree. Items go to the
//! tree's leaves round-robin; a rate is items of all tasks divided by the phase's wall time.

use crate::stats::Summary;
use crate::{io_err, BenchError};
use serde::Serialize;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

/// Most tasks one run may start.
pub const TASKS_MAX: usize = 4096;
/// Most leaf directories of one tree.
pub const TREE_LEAVES_MAX: u64 = 1 << 16;

/// Parameters, named after mdtest's flags.
#[derive(Clone, Debug, Serialize)]
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
    /// Parameters.
    pub params: MdtestParams,
    /// Each iteration.
    pub iterations: Vec<IterationResult>,
    /// Per phase: rate summary over iterations.
    pub summary: Vec<(String, Summary)>,
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

fn mknod(path: &Path) -> std::io::Result<()> {
    let c =
        CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: valid NUL-terminated path.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFREG | 0o644, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn item_op(p: &MdtestParams, phase: &str, path: &Path, payload: &[u8]) -> Result<(), BenchError> {
    match phase {
        "Directory creation" => std::fs::create_dir(path).map_err(|e| io_err("mkdir", path, e)),
        "Directory stat" | "File stat" => std::fs::metadata(path)
            .map(|_| ())
            .map_err(|e| io_err("stat", path, e)),
        "Directory removal" => std::fs::remove_dir(path).map_err(|e| io_err("rmdir", path, e)),
        "File creation" if p.mknod => mknod(path).map_err(|e| io_err("mknod", path, e)),
        "File creation" => {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| io_err("create", path, e))?;
            if !payload.is_empty() {
                f.write_all(payload).map_err(|e| io_err("write", path, e))?;
            }
            Ok(())
        }
        "File read" => {
            let mut f = std::fs::File::open(path).map_err(|e| io_err("open", path, e))?;
            if p.read_bytes > 0 {
                let mut buf = vec![0u8; p.read_bytes as usize];
                let n = f.read(&mut buf).map_err(|e| io_err("read", path, e))?;
                let _ = n;
            }
            Ok(())
        }
        "File removal" => std::fs::remove_file(path).map_err(|e| io_err("unlink", path, e)),
        _ => Ok(()),
    }
}

/// Runs `work(task)` on every task between barriers; returns the wall time.
fn timed(
    tasks: usize,
    work: impl Fn(usize) -> Result<(), BenchError> + Sync,
) -> Result<f64, BenchError> {
    let barrier = Barrier::new(tasks + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    let r = work(t);
                    barrier.wait();
                    r
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        let secs = start.elapsed().as_secs_f64();
        for h in handles {
            h.join().expect("task thread")?;
        }
        Ok(secs)
    })
}

/// Runs the benchmark; `progress` is called after each phase with (iteration, phase, rate).
pub fn run(
    p: &MdtestParams,
    mut progress: impl FnMut(u32, &str, f64),
) -> Result<MdtestReport, BenchError> {
    p.validate()?;
    std::fs::create_dir_all(&p.dir).map_err(|e| io_err("mkdir", &p.dir, e))?;
    let trees = if p.unique_dir { p.tasks } else { 1 };
    let payload = vec![0x5au8; p.write_bytes as usize];
    let mut phases: Vec<&str> = Vec::new();
    if !p.files_only {
        phases.extend(["Directory creation", "Directory stat", "Directory removal"]);
    }
    if !p.dirs_only {
        phases.extend(["File creation", "File stat", "File read", "File removal"]);
    }
    let mut iterations = Vec::new();
    for it in 0..p.iterations {
        let mut result = IterationResult {
            iteration: it,
            phases: Vec::new(),
        };
        let tree_dirs: usize = (0..trees).map(|t| p.tree_dirs(t).len()).sum();
        let secs = timed(trees, |t| {
            for d in p.tree_dirs(t) {
                std::fs::create_dir(&d).map_err(|e| io_err("mkdir", &d, e))?;
            }
            Ok(())
        })?;
        result.phases.push((
            "Tree creation".into(),
            tree_dirs as u64,
            secs,
            tree_dirs as f64 / secs.max(1e-9),
        ));
        for phase in &phases {
            let kind = if phase.starts_with("Directory") {
                "dir"
            } else {
                "file"
            };
            let secs = timed(p.tasks, |t| {
                let leaves = p.leaf_dirs(t);
                for i in 0..p.items {
                    item_op(p, phase, &p.item(&leaves, t, i, kind), &payload)?;
                }
                Ok(())
            })?;
            let n = p.items * p.tasks as u64;
            let rate = n as f64 / secs.max(1e-9);
            progress(it, phase, rate);
            result.phases.push((phase.to_string(), n, secs, rate));
        }
        let secs = timed(trees, |t| {
            for d in p.tree_dirs(t).iter().rev() {
                std::fs::remove_dir(d).map_err(|e| io_err("rmdir", d, e))?;
            }
            Ok(())
        })?;
        result.phases.push((
            "Tree removal".into(),
            tree_dirs as u64,
            secs,
            tree_dirs as f64 / secs.max(1e-9),
        ));
        iterations.push(result);
    }
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
        params: p.clone(),
        iterations,
        summary,
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
