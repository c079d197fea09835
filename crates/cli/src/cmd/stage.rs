//! `nacre stage in|out|status|cancel`: requests to a data mover (`nacre server --mover DIR`,
//! docs/stage.md) to move files and trees between pools ahead of a job or after it.

use anyhow::{bail, Context};
use clap::Subcommand;
use nacre_mover::MoverClient;
use nacre_types::{Nid, PoolName};
use nacre_wire::mover::{Direction, StageRequest, StageState, StageStatus};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Environment variable naming the data mover when `--mover` is not given.
pub(crate) const MOVER_ENV: &str = "NACRE_MOVER";
/// How often `--wait` asks the mover.
const WAIT_POLL_MS: u64 = 500;
/// How often `--wait` prints progress.
const WAIT_PRINT_MS: u64 = 5_000;

#[derive(Subcommand)]
pub(crate) enum StageCommand {
    /// Move files and trees into a pool ahead of a job (`--pool flash`).
    In(StageArgs),
    /// Move files and trees out to a pool after a job (`--pool capacity`).
    Out(StageArgs),
    /// Requests and their progress: all, a job's (`--job`) or one (`--id`).
    Status {
        /// Only this job's requests.
        #[arg(long)]
        job: Option<String>,
        /// Only this request.
        #[arg(long)]
        id: Option<u64>,
        /// The data mover (default: $NACRE_MOVER).
        #[arg(long)]
        mover: Option<Nid>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a request (`ID`) or every unfinished request of a job (`--job`); files
    /// already moved stay where they are.
    Cancel {
        /// The request.
        id: Option<u64>,
        /// Every unfinished request of this job.
        #[arg(long)]
        job: Option<String>,
        /// The data mover (default: $NACRE_MOVER).
        #[arg(long)]
        mover: Option<Nid>,
    },
}

#[derive(clap::Args)]
pub(crate) struct StageArgs {
    /// The pool the files go to.
    #[arg(short, long)]
    pool: String,
    /// The job (default: $SLURM_JOB_ID).
    #[arg(long)]
    job: Option<String>,
    /// Wait until the request is over (exit status: whether every file moved).
    #[arg(long)]
    wait: bool,
    /// The data mover (default: $NACRE_MOVER).
    #[arg(long)]
    mover: Option<Nid>,
    /// Print the request's state as JSON (with --wait: when it is over).
    #[arg(long)]
    json: bool,
    /// Files and directories in a Nacre mount.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

fn mover_of(m: Option<Nid>) -> anyhow::Result<MoverClient> {
    let nid = match m {
        Some(n) => n,
        None => std::env::var(MOVER_ENV)
            .ok()
            .with_context(|| {
                format!("no data mover: give --mover NID (a `nacre server --mover DIR`) or set {MOVER_ENV}")
            })?
            .parse()
            .with_context(|| format!("{MOVER_ENV} is not a NID"))?,
    };
    MoverClient::connect(nid).with_context(|| format!("cannot reach the data mover at {nid}"))
}

fn state_json(s: &StageState) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "direction": s.request.direction.name(),
        "pool": s.request.pool.as_str(),
        "job": s.request.job,
        "paths": s.request.paths.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>(),
        "status": s.status.name(),
        "files_total": s.files_total,
        "files_done": s.files_done,
        "files_skipped": s.files_skipped,
        "files_failed": s.files_failed,
        "bytes_total": s.bytes_total,
        "bytes_done": s.bytes_done,
        "submitted": s.submitted_s,
        "finished": s.finished_s,
        "error": s.error,
    })
}

fn state_line(s: &StageState) -> String {
    let pct = match s.bytes_total {
        0 => 100.0,
        t => s.bytes_done as f64 * 100.0 / t as f64,
    };
    format!(
        "{:>5} {:<3} {:<10} {:<12} {:<9} {:>6}/{:<6} files {:>5.1}% of {} bytes{}{}",
        s.id,
        s.request.direction.name(),
        s.request.pool.as_str(),
        if s.request.job.is_empty() {
            "-"
        } else {
            &s.request.job
        },
        s.status.name(),
        s.files_done + s.files_skipped,
        s.files_total,
        pct,
        s.bytes_total,
        if s.files_failed > 0 {
            format!(", {} failed", s.files_failed)
        } else {
            String::new()
        },
        if s.error.is_empty() {
            String::new()
        } else {
            format!(": {}", s.error)
        },
    )
}

/// A mount path as a path from the file system's root (`/a/b`).
fn fs_path(p: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let abs = std::fs::canonicalize(p).with_context(|| p.display().to_string())?;
    let root = super::changelog::mount_root(&abs)?;
    let rel = abs
        .strip_prefix(&root)
        .with_context(|| format!("{} is not under {root}", abs.display()))?;
    let mut out = b"/".to_vec();
    out.extend_from_slice(rel.as_os_str().as_encoded_bytes());
    Ok(out)
}

pub(crate) fn stage(cmd: StageCommand) -> anyhow::Result<()> {
    match cmd {
        StageCommand::In(a) => submit(Direction::In, a),
        StageCommand::Out(a) => submit(Direction::Out, a),
        StageCommand::Status {
            job,
            id,
            mover,
            json,
        } => {
            let states = mover_of(mover)?.status(job, id)?;
            if json {
                let v: Vec<_> = states.iter().map(state_json).collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "{:>5} {:<3} {:<10} {:<12} {:<9} {:>13} PROGRESS",
                    "ID", "DIR", "POOL", "JOB", "STATUS", "FILES"
                );
                for s in &states {
                    println!("{}", state_line(s));
                }
            }
            Ok(())
        }
        StageCommand::Cancel { id, job, mover } => {
            if id.is_none() && job.is_none() {
                bail!("name the request (ID) or the job (--job)");
            }
            let n = mover_of(mover)?.cancel(job, id)?;
            println!("cancelled {n} request(s)");
            Ok(())
        }
    }
}

fn submit(direction: Direction, a: StageArgs) -> anyhow::Result<()> {
    let name = a.pool.rsplit('.').next().unwrap_or(&a.pool);
    let pool = PoolName::new(name).map_err(|e| anyhow::anyhow!("bad pool '{}': {e}", a.pool))?;
    let paths = a
        .paths
        .iter()
        .map(|p| fs_path(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let job = a
        .job
        .or_else(|| std::env::var("SLURM_JOB_ID").ok())
        .unwrap_or_default();
    let m = mover_of(a.mover)?;
    let id = m.submit(StageRequest {
        direction,
        pool,
        job,
        paths,
    })?;
    if !a.wait {
        match a.json {
            true => println!("{}", serde_json::json!({ "id": id })),
            false => println!("{id}"),
        }
        return Ok(());
    }
    let mut printed = Instant::now();
    let s = loop {
        let s = m
            .status(None, Some(id))?
            .pop()
            .with_context(|| format!("request {id} is gone from the mover"))?;
        if s.status.is_final() {
            break s;
        }
        if printed.elapsed() >= Duration::from_millis(WAIT_PRINT_MS) {
            printed = Instant::now();
            eprintln!("{}", state_line(&s));
        }
        std::thread::sleep(Duration::from_millis(WAIT_POLL_MS));
    };
    match a.json {
        true => println!("{}", state_json(&s)),
        false => println!("{}", state_line(&s)),
    }
    if s.status != StageStatus::Done {
        bail!("request {id} {}", s.status.name());
    }
    Ok(())
}
