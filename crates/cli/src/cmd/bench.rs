//! `nacre bench`: IOR- and mdtest-like runs, obdfilter-survey and mds-survey, and the worker
//! process of multi-host runs.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use nacre_cli::size::parse_size;
use std::path::PathBuf;

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// IOR-like: `nacre bench ior -w -r -t 1m -b 64m -s 4 -F -C -e -i 3 -N 4 -o /mnt/nacre/ior`.
    Ior(IorArgs),
    /// mdtest-like: `nacre bench mdtest -n 1000 -u -N 4 -d /mnt/nacre/md`.
    Mdtest(MdtestArgs),
    /// obdfilter-survey-like: drive OST directories directly (no client, no network).
    Survey(SurveyArgs),
    /// mds-survey-like: drive a scratch MDT directly (no client, no network).
    MdsSurvey(MdsSurveyArgs),
    /// A benchmark worker process (started by `--hosts` runs through the launcher).
    #[command(hide = true)]
    Worker {
        /// Leader address.
        #[arg(long)]
        connect: std::net::SocketAddr,
        /// This host's index in `--hosts`.
        #[arg(long)]
        index: usize,
    },
}

/// Where and through what benchmark tasks run, and what they record.
#[derive(Args)]
pub(crate) struct TeamArgs {
    /// Interface (IOR's -a): POSIX (paths on a mount) or NACRE (native client library, no
    /// FUSE; paths are inside the file system, e.g. /ior/file).
    #[arg(short = 'a', long = "api", default_value = "POSIX")]
    pub(crate) api: String,
    /// MGS NID for -a NACRE.
    #[arg(long)]
    pub(crate) mgs: Option<String>,
    /// File system name for -a NACRE.
    #[arg(long, default_value = "nacre")]
    pub(crate) fsname: String,
    /// Client hosts, comma separated; the -N tasks are spread over them in blocks, one worker
    /// process per host. A {host} in the path is replaced with each host's name.
    #[arg(long, value_delimiter = ',')]
    pub(crate) hosts: Vec<String>,
    /// Command prefix that runs a command on {host}.
    #[arg(long, default_value = "ssh {host}")]
    pub(crate) launcher: String,
    /// Address of this machine the hosts' workers connect back to (IP:PORT; port 0 = any).
    #[arg(long)]
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// Milliseconds the workers may take to start and connect.
    #[arg(long, default_value_t = 30_000)]
    pub(crate) worker_timeout_ms: u64,
    /// Write a chart of bandwidth (or ops) over time, per phase, to this SVG file.
    #[arg(long)]
    pub(crate) plot: Option<PathBuf>,
    /// Show a live progress line even when stderr is not a terminal.
    #[arg(long)]
    pub(crate) progress: bool,
}

impl TeamArgs {
    fn api(&self) -> anyhow::Result<nacre_bench::storage::Api> {
        match self.api.to_ascii_uppercase().as_str() {
            "POSIX" => Ok(nacre_bench::storage::Api::Posix),
            "NACRE" => Ok(nacre_bench::storage::Api::Nacre {
                mgs: self
                    .mgs
                    .clone()
                    .context("-a NACRE needs --mgs NID (the MGS to mount from)")?,
                fsname: self.fsname.clone(),
            }),
            other => bail!("unknown API '{other}': use POSIX or NACRE"),
        }
    }

    fn placement(&self) -> nacre_bench::team::Placement {
        nacre_bench::team::Placement {
            hosts: self.hosts.clone(),
            launcher: self.launcher.clone(),
            listen: self.listen,
            connect_timeout_ms: self.worker_timeout_ms,
        }
    }

    /// Writes the `--plot` chart of `samples`, if one was asked for.
    fn plot(
        &self,
        title: &str,
        unit: &str,
        scale: f64,
        samples: &[nacre_bench::team::Sample],
    ) -> anyhow::Result<()> {
        let Some(path) = &self.plot else {
            return Ok(());
        };
        let svg = nacre_bench::plot::svg(title, unit, scale, samples);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
    }

    fn recorder(&self, quiet: bool, unit: &'static str, scale: f64) -> nacre_bench::team::Recorder {
        use std::io::IsTerminal;
        let live = !quiet && (self.progress || std::io::stderr().is_terminal());
        nacre_bench::team::Recorder::new(live, unit, scale)
    }
}

#[derive(Args)]
pub(crate) struct SurveyArgs {
    /// OST directory (repeatable); safe beside a running server.
    #[arg(long = "ost", required = true)]
    pub(crate) osts: Vec<PathBuf>,
    /// Objects per OST.
    #[arg(short = 'o', long, default_value_t = 4)]
    pub(crate) objects: u64,
    /// Threads per OST.
    #[arg(short = 't', long, default_value_t = 4)]
    pub(crate) threads: usize,
    /// Record size (K/M).
    #[arg(short = 'r', long, default_value = "1M")]
    pub(crate) record: String,
    /// Bytes per object (K/M/G).
    #[arg(short = 's', long, default_value = "256M")]
    pub(crate) size: String,
    /// Use the O_DIRECT path, as OSTs do by default.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) direct: bool,
    /// Make each object durable at the end of the write and rewrite phases, inside their
    /// time (to compare with IOR's `-e`).
    #[arg(long)]
    pub(crate) fsync: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct MdsSurveyArgs {
    /// New or empty directory for the scratch MDT, on the device to measure (removed after).
    pub(crate) dir: PathBuf,
    /// Files in all (mds-survey's file_count).
    #[arg(long = "files", default_value_t = 100_000)]
    pub(crate) files: u64,
    /// Directories (dir_count).
    #[arg(long = "dirs", default_value_t = 1)]
    pub(crate) dirs: u32,
    /// Threads (thrhi).
    #[arg(long = "threads", default_value_t = 4)]
    pub(crate) threads: usize,
    /// Tests (tests_str), space or comma separated.
    #[arg(long, default_value = "create lookup md_getattr setxattr destroy")]
    pub(crate) tests: String,
    /// OSTs each file gets an object on (placeholders: nothing is sent to an OST).
    #[arg(long, default_value_t = 1)]
    pub(crate) stripe_count: u32,
    /// Reply only after the journal sync (as --mdt-sync-on-reply).
    #[arg(long)]
    pub(crate) sync_on_reply: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Args)]
pub(crate) struct IorArgs {
    /// Write phase.
    #[arg(short = 'w')]
    pub(crate) write: bool,
    /// Read phase.
    #[arg(short = 'r')]
    pub(crate) read: bool,
    /// Transfer size (bytes per call; K/M/G).
    #[arg(short = 't', default_value = "1m")]
    pub(crate) transfer: String,
    /// Block size (contiguous bytes per task per segment).
    #[arg(short = 'b', default_value = "16m")]
    pub(crate) block: String,
    /// Segments.
    #[arg(short = 's', default_value_t = 1)]
    pub(crate) segments: u64,
    /// File per process (otherwise one shared file).
    #[arg(short = 'F')]
    pub(crate) file_per_proc: bool,
    /// Reorder tasks: read back another task's data.
    #[arg(short = 'C')]
    pub(crate) reorder: bool,
    /// fsync after writing.
    #[arg(short = 'e')]
    pub(crate) fsync: bool,
    /// Iterations.
    #[arg(short = 'i', default_value_t = 1)]
    pub(crate) iterations: u32,
    /// Barriers between phases (always on; accepted for IOR compatibility).
    #[arg(short = 'g')]
    pub(crate) barriers: bool,
    /// Tasks.
    #[arg(short = 'N', default_value_t = 1)]
    pub(crate) tasks: usize,
    /// Check data after writing.
    #[arg(short = 'W')]
    pub(crate) check_write: bool,
    /// Check data while reading.
    #[arg(short = 'R')]
    pub(crate) check_read: bool,
    /// Keep the test files.
    #[arg(short = 'k')]
    pub(crate) keep: bool,
    /// Data signature seed.
    #[arg(short = 'G', default_value_t = 0)]
    pub(crate) seed: u64,
    /// O_DIRECT.
    #[arg(long)]
    pub(crate) direct: bool,
    /// Test file.
    #[arg(short = 'o')]
    pub(crate) path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress lines.
    #[arg(short = 'q')]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) team: TeamArgs,
}

#[derive(Args)]
pub(crate) struct MdtestArgs {
    /// Working directory.
    #[arg(short = 'd')]
    pub(crate) dir: PathBuf,
    /// Items per task.
    #[arg(short = 'n', default_value_t = 1000)]
    pub(crate) items: u64,
    /// A directory tree per task.
    #[arg(short = 'u')]
    pub(crate) unique_dir: bool,
    /// Bytes written into each file.
    #[arg(short = 'w', default_value_t = 0)]
    pub(crate) write_bytes: u64,
    /// Bytes read from each file.
    #[arg(short = 'e', default_value_t = 0)]
    pub(crate) read_bytes: u64,
    /// Files only.
    #[arg(short = 'F')]
    pub(crate) files_only: bool,
    /// Directories only.
    #[arg(short = 'D')]
    pub(crate) dirs_only: bool,
    /// Iterations.
    #[arg(short = 'i', default_value_t = 1)]
    pub(crate) iterations: u32,
    /// Tree depth.
    #[arg(short = 'z', default_value_t = 0)]
    pub(crate) depth: u32,
    /// Tree branching factor.
    #[arg(short = 'b', default_value_t = 1)]
    pub(crate) branch: u32,
    /// Tasks.
    #[arg(short = 'N', default_value_t = 1)]
    pub(crate) tasks: usize,
    /// mdsrate-style: create with mknod only.
    #[arg(long)]
    pub(crate) mknod: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress lines.
    #[arg(short = 'q')]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) team: TeamArgs,
}

pub(crate) fn bench_ior(a: IorArgs) -> anyhow::Result<()> {
    let size = |s: &str| parse_size(s).map_err(anyhow::Error::msg);
    let (write, read) = if a.write || a.read {
        (a.write, a.read)
    } else {
        (true, true)
    };
    let params = nacre_bench::ior::IorParams {
        path: a.path,
        tasks: a.tasks,
        transfer: size(&a.transfer)?,
        block: size(&a.block)?,
        segments: a.segments,
        file_per_proc: a.file_per_proc,
        reorder: a.reorder,
        fsync: a.fsync,
        iterations: a.iterations,
        write,
        read,
        check_write: a.check_write,
        check_read: a.check_read,
        direct: a.direct,
        keep: a.keep,
        seed: a.seed,
        reorder_shift: 0,
    };
    let _ = a.barriers;
    let quiet = a.quiet || a.json;
    let api = a.team.api()?;
    let recorder = a.team.recorder(quiet, "MiB", (1u64 << 20) as f64);
    let report = nacre_bench::ior::run_on(&params, &api, &a.team.placement(), recorder, |ph| {
        if !quiet {
            eprintln!(
                "iteration {} {}: {:.1} MiB/s in {:.3} s",
                ph.iteration, ph.op, ph.bw_mib, ph.total_s
            );
        }
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", nacre_bench::ior::format_report(&report));
    }
    a.team.plot(
        &format!("nacre bench ior: {} tasks, {}", params.tasks, report.api),
        "MiB/s",
        (1u64 << 20) as f64,
        &report.samples,
    )?;
    if report.check_errors > 0 {
        bail!("data check found {} wrong words", report.check_errors);
    }
    Ok(())
}

pub(crate) fn bench_mdtest(a: MdtestArgs) -> anyhow::Result<()> {
    let params = nacre_bench::mdtest::MdtestParams {
        dir: a.dir,
        tasks: a.tasks,
        items: a.items,
        unique_dir: a.unique_dir,
        write_bytes: a.write_bytes,
        read_bytes: a.read_bytes,
        files_only: a.files_only,
        dirs_only: a.dirs_only,
        iterations: a.iterations,
        depth: a.depth,
        branch: a.branch,
        mknod: a.mknod,
    };
    let quiet = a.quiet || a.json;
    let api = a.team.api()?;
    let recorder = a.team.recorder(quiet, "ops", 1.0);
    let report = nacre_bench::mdtest::run_on(
        &params,
        &api,
        &a.team.placement(),
        recorder,
        |it, phase, rate| {
            if !quiet {
                eprintln!("iteration {it} {phase}: {rate:.0} ops/s");
            }
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", nacre_bench::mdtest::format_report(&report));
    }
    a.team.plot(
        &format!("nacre bench mdtest: {} tasks, {}", params.tasks, report.api),
        "ops/s",
        1.0,
        &report.samples,
    )?;
    Ok(())
}

pub(crate) fn bench_mds_survey(a: MdsSurveyArgs) -> anyhow::Result<()> {
    let params = nacre_bench::mds_survey::MdsSurveyParams {
        dir: a.dir,
        files: a.files,
        dirs: a.dirs,
        threads: a.threads,
        tests: a
            .tests
            .split([' ', ','])
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        stripe_count: a.stripe_count,
        sync_on_reply: a.sync_on_reply,
    };
    let quiet = a.json;
    let tests = nacre_bench::mds_survey::run_with(&params, |t| {
        if !quiet {
            eprintln!("{}: {:.0} ops/s", t.test, t.rate);
        }
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&tests)?);
    } else {
        print!(
            "{}",
            nacre_bench::mds_survey::format_report(&params, &tests)
        );
    }
    Ok(())
}

pub(crate) fn bench_survey(a: SurveyArgs) -> anyhow::Result<()> {
    let size = |s: &str| parse_size(s).map_err(anyhow::Error::msg);
    let params = nacre_bench::survey::SurveyParams {
        osts: a.osts,
        objects: a.objects,
        threads: a.threads,
        record: size(&a.record)?,
        size: size(&a.size)?,
        direct: a.direct,
        fsync: a.fsync,
    };
    let quiet = a.json;
    let phases = nacre_bench::survey::run_with(&params, |ph| {
        if !quiet {
            eprintln!("{}: {:.1} MiB/s", ph.op, ph.total_mib);
        }
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&phases)?);
    } else {
        print!("{}", nacre_bench::survey::format_report(&params, &phases));
    }
    Ok(())
}
