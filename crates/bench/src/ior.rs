//! An IOR-like bandwidth driver.
//!
//! Geometry as IOR's: each of `tasks` writes `segments` blocks of `block` bytes in `transfer`
//! sized calls. With one shared file, segment `s` of task `t` starts at
//! `(s * tasks + t) * block`; with a file per process (`-F`) at `s * block` of the task's own
//! file. With `-C` every task reads back the data of task `t + 1`, so no client reads what it
//! wrote from its own cache.
//!
//! Data check: every 8-byte word written holds `offset / 8 ^ writer << 40 ^ seed << 56`, so a
//! reader knows exactly what each word must be and counts every mismatch (`-W` after writing,
//! `-R` on reading).

use crate::stats::Summary;
use crate::storage::{Api, Storage};
use crate::team::{Job, Placement, Recorder, Sample, Team, Workload};
use crate::{io_err, BenchError};
use nacre_types::AlignedBuf;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Most tasks one run may start.
pub const TASKS_MAX: usize = 4096;
/// Largest transfer size.
pub const TRANSFER_BYTES_MAX: u64 = 1 << 30;

/// Parameters, named after IOR's flags.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IorParams {
    /// `-o`: test file (with `-F`, a `.NNNNNNNN` task suffix is added).
    pub path: PathBuf,
    /// `-N`: tasks.
    pub tasks: usize,
    /// `-t`: bytes per I/O call.
    pub transfer: u64,
    /// `-b`: contiguous bytes per task per segment.
    pub block: u64,
    /// `-s`: segments.
    pub segments: u64,
    /// `-F`: file per process.
    pub file_per_proc: bool,
    /// `-C`: read back another task's data.
    pub reorder: bool,
    /// `-e`: fsync before closing after a write.
    pub fsync: bool,
    /// `-i`: iterations.
    pub iterations: u32,
    /// `-w`: write phase.
    pub write: bool,
    /// `-r`: read phase.
    pub read: bool,
    /// `-W`: re-read and check right after writing.
    pub check_write: bool,
    /// `-R`: check data while reading.
    pub check_read: bool,
    /// `--direct`: O_DIRECT.
    pub direct: bool,
    /// `-k`: keep the files.
    pub keep: bool,
    /// `-G`: data signature seed.
    pub seed: u64,
    /// With `-C`, task `t` reads the data of task `t + reorder_shift` (set by the run: the
    /// tasks per host on several hosts, as IOR shifts by tasks per node; 1 in one process).
    #[serde(default)]
    pub reorder_shift: usize,
}

impl IorParams {
    /// Checks the geometry.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Params(m));
        if self.tasks == 0 || self.tasks > TASKS_MAX {
            return bad(format!("tasks must be 1..={TASKS_MAX}"));
        }
        if self.transfer == 0 || self.transfer > TRANSFER_BYTES_MAX {
            return bad(format!(
                "transfer size must be 1..={TRANSFER_BYTES_MAX} bytes"
            ));
        }
        if self.block < self.transfer || !self.block.is_multiple_of(self.transfer) {
            return bad(format!(
                "block size {} must be a multiple of transfer size {}",
                self.block, self.transfer
            ));
        }
        if !self.transfer.is_multiple_of(8) {
            return bad("transfer size must be a multiple of 8 bytes (data check words)".into());
        }
        if self.direct && !self.transfer.is_multiple_of(4096) {
            return bad("O_DIRECT needs a transfer size that is a multiple of 4 KiB".into());
        }
        if self.segments == 0 || self.iterations == 0 {
            return bad("segments and iterations must be at least 1".into());
        }
        if !self.write && !self.read {
            return bad("nothing to do: give -w and/or -r".into());
        }
        Ok(())
    }

    fn file_of(&self, task: usize) -> PathBuf {
        if self.file_per_proc {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{task:08}"));
            PathBuf::from(p)
        } else {
            self.path.clone()
        }
    }

    fn offset(&self, task: usize, segment: u64, k: u64) -> u64 {
        let base = if self.file_per_proc {
            segment * self.block
        } else {
            (segment * self.tasks as u64 + task as u64) * self.block
        };
        base + k * self.transfer
    }

    fn bytes_per_task(&self) -> u64 {
        self.block * self.segments
    }
}

/// One phase of one iteration.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseResult {
    /// "write" or "read".
    pub op: &'static str,
    /// Iteration number.
    pub iteration: u32,
    /// Bytes moved by all tasks.
    pub bytes: u64,
    /// MiB/s over the whole phase (open to close of all tasks).
    pub bw_mib: f64,
    /// Transfers per second.
    pub iops: f64,
    /// Mean seconds per transfer.
    pub latency_s: f64,
    /// Slowest task's open time.
    pub open_s: f64,
    /// Slowest task's transfer time.
    pub xfer_s: f64,
    /// Slowest task's close (and fsync) time.
    pub close_s: f64,
    /// Wall time of the phase.
    pub total_s: f64,
}

/// A whole run.
#[derive(Debug, Serialize)]
pub struct IorReport {
    /// Interface used (`POSIX`, `NACRE`).
    pub api: &'static str,
    /// Hosts the tasks ran on (empty: this process).
    pub hosts: Vec<String>,
    /// Parameters.
    pub params: IorParams,
    /// Every phase of every iteration.
    pub phases: Vec<PhaseResult>,
    /// Per operation: bandwidth and IOPS summaries over iterations.
    pub summary: Vec<(String, Summary, Summary)>,
    /// Data check errors (words that differed).
    pub check_errors: u64,
    /// First data check error, if any.
    pub first_error: Option<String>,
    /// Progress samples (for charts).
    pub samples: Vec<Sample>,
}

fn word(offset: u64, writer: usize, seed: u64) -> u64 {
    (offset / 8) ^ ((writer as u64) << 40) ^ (seed << 56)
}

fn fill(buf: &mut [u8], offset: u64, writer: usize, seed: u64) {
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(offset + 8 * i as u64, writer, seed).to_le_bytes());
    }
}

/// Counts words of `buf` that differ from what `writer` wrote at `offset`.
fn check_words(
    buf: &[u8],
    offset: u64,
    writer: usize,
    seed: u64,
    first: &Mutex<Option<String>>,
) -> u64 {
    let mut errors = 0;
    for (i, chunk) in buf.chunks_exact(8).enumerate() {
        let at = offset + 8 * i as u64;
        let want = word(at, writer, seed);
        let got = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        if got != want {
            errors += 1;
            let mut f = first.lock().expect("first error");
            if f.is_none() {
                *f = Some(format!(
                    "offset {at}: expected {want:#018x}, found {got:#018x}"
                ));
            }
        }
    }
    errors
}

/// A phase command sent to every task.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum IorCmd {
    /// Write (`write`) or read, checking the data if `check`, with data signature `seed`.
    Io {
        /// Write phase.
        write: bool,
        /// Check data read.
        check: bool,
        /// Data signature of this iteration.
        seed: u64,
    },
    /// Remove the test files.
    Remove,
}

/// What tasks report of a phase: slowest times and data check errors.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct IorOut {
    open: f64,
    xfer: f64,
    close: f64,
    errors: u64,
    first: Option<String>,
}

/// The IOR workload as a team runs it.
pub struct IorWork {
    p: IorParams,
}

impl IorWork {
    /// The workload of `p`.
    pub fn new(p: IorParams) -> IorWork {
        IorWork { p }
    }

    /// One task's side of a phase: `write`, or read (checking if `check`) the data of the
    /// task `reorder_shift` ahead with `-C`.
    fn io(
        &self,
        task: usize,
        write: bool,
        check: bool,
        seed: u64,
        storage: &dyn Storage,
        done: &AtomicU64,
    ) -> Result<IorOut, BenchError> {
        let p = &self.p;
        let source = if !write && p.reorder {
            (task + p.reorder_shift.max(1)) % p.tasks
        } else {
            task
        };
        let path = p.file_of(source);
        let mut out = IorOut::default();
        let first = Mutex::new(None);
        let t0 = Instant::now();
        let file = storage.open(&path, write, p.direct)?;
        out.open = t0.elapsed().as_secs_f64();
        let mut buf = AlignedBuf::zeroed(p.transfer as usize);
        let t1 = Instant::now();
        for s in 0..p.segments {
            for k in 0..p.block / p.transfer {
                let off = p.offset(source, s, k);
                if write {
                    fill(&mut buf, off, source, seed);
                    file.write_all_at(&buf, off)
                        .map_err(|e| io_err("write", &path, e))?;
                } else {
                    file.read_exact_at(&mut buf, off)
                        .map_err(|e| io_err("read", &path, e))?;
                    if check {
                        out.errors += check_words(&buf, off, source, seed, &first);
                    }
                }
                done.fetch_add(p.transfer, Ordering::Relaxed);
            }
        }
        out.xfer = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        if write && p.fsync {
            file.sync_all().map_err(|e| io_err("fsync", &path, e))?;
        }
        file.close().map_err(|e| io_err("close", &path, e))?;
        out.close = t2.elapsed().as_secs_f64();
        out.first = first.into_inner().expect("first error");
        Ok(out)
    }
}

impl Workload for IorWork {
    type Cmd = IorCmd;
    type Out = IorOut;

    fn task(
        &self,
        cmd: &IorCmd,
        task: usize,
        storage: &dyn Storage,
        done: &AtomicU64,
    ) -> Result<IorOut, BenchError> {
        match *cmd {
            IorCmd::Io { write, check, seed } => self.io(task, write, check, seed, storage, done),
            IorCmd::Remove => {
                if self.p.file_per_proc || task == 0 {
                    storage.remove_quietly(&self.p.file_of(task));
                }
                Ok(IorOut::default())
            }
        }
    }

    fn merge(into: &mut IorOut, o: IorOut) {
        into.open = into.open.max(o.open);
        into.xfer = into.xfer.max(o.xfer);
        into.close = into.close.max(o.close);
        into.errors += o.errors;
        if into.first.is_none() {
            into.first = o.first;
        }
    }
}

fn phase_result(
    p: &IorParams,
    op: &'static str,
    iteration: u32,
    o: &IorOut,
    wall: f64,
) -> PhaseResult {
    let bytes = p.bytes_per_task() * p.tasks as u64;
    let ops = (bytes / p.transfer) as f64;
    let total = wall.max(1e-9);
    PhaseResult {
        op,
        iteration,
        bytes,
        bw_mib: bytes as f64 / (1 << 20) as f64 / total,
        iops: ops / total,
        latency_s: o.xfer / (ops / p.tasks as f64).max(1.0),
        open_s: o.open,
        xfer_s: o.xfer,
        close_s: o.close,
        total_s: wall,
    }
}

/// Runs the benchmark as threads of this process on POSIX paths; `progress` is called after
/// each phase.
pub fn run(p: &IorParams, progress: impl FnMut(&PhaseResult)) -> Result<IorReport, BenchError> {
    run_on(
        p,
        &Api::Posix,
        &Placement::default(),
        Recorder::new(false, "MiB", (1 << 20) as f64),
        progress,
    )
}

/// Runs the benchmark through `api` with tasks placed as `placement` says; `recorder`
/// samples progress (its samples end up in the report).
pub fn run_on(
    p: &IorParams,
    api: &Api,
    placement: &Placement,
    recorder: Recorder,
    mut progress: impl FnMut(&PhaseResult),
) -> Result<IorReport, BenchError> {
    p.validate()?;
    let mut p = p.clone();
    let hosts = placement.hosts.len();
    p.reorder_shift = if hosts > 1 {
        (p.tasks / hosts).max(1)
    } else {
        1
    };
    let work = IorWork::new(p.clone());
    let mut team = Team::start(
        &work,
        Job::new("ior", &p)?,
        p.tasks,
        api,
        placement,
        recorder,
    )?;
    let total = p.bytes_per_task() * p.tasks as u64;
    let mut phases = Vec::new();
    let mut errors = 0;
    let mut first_error = None;
    let mut note = |o: &IorOut| {
        errors += o.errors;
        if first_error.is_none() {
            first_error.clone_from(&o.first);
        }
    };
    for it in 0..p.iterations {
        let seed = p.seed.wrapping_add(u64::from(it)) & 0xff;
        if p.write {
            let cmd = IorCmd::Io {
                write: true,
                check: false,
                seed,
            };
            let (o, wall) = team.phase(&format!("write {it}"), &cmd, total)?;
            let r = phase_result(&p, "write", it, &o, wall);
            progress(&r);
            phases.push(r);
            if p.check_write {
                let cmd = IorCmd::Io {
                    write: false,
                    check: true,
                    seed,
                };
                let (o, _) = team.phase(&format!("wcheck {it}"), &cmd, total)?;
                note(&o);
            }
        }
        if p.read {
            let cmd = IorCmd::Io {
                write: false,
                check: p.check_read,
                seed,
            };
            let (o, wall) = team.phase(&format!("read {it}"), &cmd, total)?;
            note(&o);
            let r = phase_result(&p, "read", it, &o, wall);
            progress(&r);
            phases.push(r);
        }
        if !p.keep && p.write {
            team.phase(&format!("remove {it}"), &IorCmd::Remove, 0)?;
        }
    }
    let samples = std::mem::take(&mut team.recorder.samples);
    drop(team);
    let mut summary = Vec::new();
    for op in ["write", "read"] {
        let bw: Vec<f64> = phases
            .iter()
            .filter(|r| r.op == op)
            .map(|r| r.bw_mib)
            .collect();
        let iops: Vec<f64> = phases
            .iter()
            .filter(|r| r.op == op)
            .map(|r| r.iops)
            .collect();
        if !bw.is_empty() {
            summary.push((op.to_string(), Summary::of(&bw), Summary::of(&iops)));
        }
    }
    Ok(IorReport {
        api: api.name(),
        hosts: placement.hosts.clone(),
        params: p,
        phases,
        summary,
        check_errors: errors,
        first_error,
        samples,
    })
}

/// IOR-style text: a line per phase, then the summary table.
pub fn format_report(r: &IorReport) -> String {
    let p = &r.params;
    let mut s = format!(
        "IOR-like run: tasks {}, {}, xfer {} KiB, block {} KiB, segments {}, iterations {}, O_DIRECT {}, fsync {}\n\n",
        p.tasks,
        if p.file_per_proc { "file per process" } else { "single shared file" },
        p.transfer / 1024,
        p.block / 1024,
        p.segments,
        p.iterations,
        if p.direct { "yes" } else { "no" },
        if p.fsync { "yes" } else { "no" },
    );
    s += "access    bw(MiB/s)  IOPS        Latency(s)  block(KiB) xfer(KiB)  open(s)    wr/rd(s)   close(s)   total(s)   iter\n";
    s += "------    ---------  ----        ----------  ---------- ---------  --------   --------   --------   --------   ----\n";
    for ph in &r.phases {
        s += &format!(
            "{:<9} {:<10.2} {:<11.1} {:<11.6} {:<10} {:<10} {:<10.6} {:<10.6} {:<10.6} {:<10.6} {}\n",
            ph.op, ph.bw_mib, ph.iops, ph.latency_s, p.block / 1024, p.transfer / 1024, ph.open_s, ph.xfer_s, ph.close_s, ph.total_s, ph.iteration
        );
    }
    s += "\nSummary of all tests:\n";
    s += "Operation   Max(MiB)   Min(MiB)  Mean(MiB)     StdDev   Max(OPs)   Min(OPs)  Mean(OPs)     StdDev\n";
    for (op, bw, iops) in &r.summary {
        s += &format!(
            "{:<10} {:>9.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}\n",
            op, bw.max, bw.min, bw.mean, bw.stddev, iops.max, iops.min, iops.mean, iops.stddev
        );
    }
    if p.check_read || p.check_write {
        s += &format!("\ndata check: {} errors", r.check_errors);
        if let Some(e) = &r.first_error {
            s += &format!(" (first: {e})");
        }
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    fn params(dir: &Path) -> IorParams {
        IorParams {
            path: dir.join("t"),
            tasks: 3,
            transfer: 4096,
            block: 16384,
            segments: 2,
            file_per_proc: false,
            reorder: true,
            fsync: true,
            iterations: 2,
            write: true,
            read: true,
            check_write: true,
            check_read: true,
            direct: false,
            keep: true,
            seed: 7,
            reorder_shift: 0,
        }
    }

    #[test]
    fn shared_file_geometry_and_check() {
        let dir = tempfile::tempdir().unwrap();
        let p = params(dir.path());
        let r = run(&p, |_| {}).unwrap();
        assert_eq!(r.check_errors, 0, "{:?}", r.first_error);
        assert_eq!(
            std::fs::metadata(dir.path().join("t")).unwrap().len(),
            3 * 16384 * 2
        );
        assert_eq!(r.phases.len(), 4);
        assert!(r
            .phases
            .iter()
            .all(|ph| ph.bytes == 3 * 16384 * 2 && ph.bw_mib > 0.0));
    }

    #[test]
    fn corruption_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = params(dir.path());
        p.file_per_proc = true;
        p.iterations = 1;
        p.read = false;
        run(&p, |_| {}).unwrap();
        let victim = dir.path().join("t.00000001");
        let f = OpenOptions::new().write(true).open(&victim).unwrap();
        f.write_all_at(&[0xff; 16], 4096).unwrap();
        p.write = false;
        p.read = true;
        let r = run(&p, |_| {}).unwrap();
        assert_eq!(r.check_errors, 2, "two flipped words");
        assert!(r.first_error.unwrap().contains("offset 4096"));
    }

    #[test]
    fn bad_geometry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = params(dir.path());
        p.block = 5000;
        assert!(matches!(p.validate(), Err(BenchError::Params(_))));
    }
}
