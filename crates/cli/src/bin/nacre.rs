//! `nacre`: servers, mounts and admin commands of the Nacre parallel file system.

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use nacre_cli::server::{ServerProcess, ServerSpec};
use nacre_cli::{admin, daemon, size::parse_size};
use nacre_client::{Client, ClientConfig};
use nacre_fuse::MountOptions;
use nacre_net::NetConfig;
use nacre_osd::Label;
use nacre_types::{Nid, TargetKind};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "nacre",
    version,
    about = "Nacre: a user-space parallel file system in the manner of Lustre"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Format (first time) and start a whole file system in one process, and mount it.
    Up(UpArgs),
    /// Unmount a file system started by `up` or `mount`, and stop its process cleanly.
    Down {
        /// Mount point.
        mountpoint: PathBuf,
    },
    /// Format a target directory (MGS, MDT or OST).
    Mkfs(MkfsArgs),
    /// Serve formatted targets.
    Server(ServerArgs),
    /// Mount a file system: `nacre mount MGS_NID:/FSNAME MOUNTPOINT`.
    Mount(MountArgs),
    /// Unmount (same as `down`).
    Umount {
        /// Detach at once even if the servers are gone: abort the mount's FUSE connection,
        /// unmount lazily, stop (or kill) its process; in under 2 s.
        #[arg(short = 'f', long)]
        force: bool,
        /// Mount point.
        mountpoint: PathBuf,
    },
    /// Create a directory, on a chosen MDT with -i (a remote directory, like `lfs mkdir -i`).
    Mkdir {
        /// MDT index of the new directory (its inode and entries); -1: the MDS chooses by
        /// free inodes; default: the parent's.
        #[arg(short = 'i', long = "mdt-index", allow_hyphen_values = true)]
        mdt: Option<i64>,
        /// Stripe the directory over this many MDTs (-1: all), its entries spread by name
        /// hash (a striped directory, like `lfs mkdir -c`).
        #[arg(short = 'c', long = "mdt-count", allow_hyphen_values = true)]
        count: Option<i64>,
        /// Name hash of a striped directory: fnv_1a_64 (default) or all_char.
        #[arg(short = 'H', long = "mdt-hash")]
        hash: Option<String>,
        /// Permission bits, octal.
        #[arg(short, long, default_value = "755")]
        mode: String,
        /// The directory to create.
        path: PathBuf,
    },
    /// Move a directory tree to another MDT online, like `lfs migrate -m`: each directory's
    /// inode and entries, with the inodes of its files (file data stays on the OSTs).
    Migrate {
        /// MDT to move to.
        #[arg(short = 'm', long = "mdt-index")]
        mdt: u32,
        /// Only DIR itself (with its files), not the directories beneath it.
        #[arg(short = 'd', long = "directory")]
        dir_only: bool,
        /// Print each directory moved.
        #[arg(short, long)]
        verbose: bool,
        /// The directory.
        path: PathBuf,
    },
    /// Show where directories live and how they are striped, like `lfs getdirstripe`.
    Getdirstripe {
        /// Show the default for new subdirectories instead.
        #[arg(short = 'D', long = "default")]
        default: bool,
        /// Directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Create a striped directory, or with -D set a directory's default for new
    /// subdirectories (like `lfs setdirstripe`).
    Setdirstripe {
        /// Set the default for new subdirectories of DIR (an existing directory).
        #[arg(short = 'D', long = "default")]
        default: bool,
        /// Remove DIR's default.
        #[arg(short = 'd', long = "delete")]
        delete: bool,
        /// Shards (-1: every MDT; 1 with -i: place new subdirectories on that MDT).
        #[arg(
            short = 'c',
            long = "mdt-count",
            allow_hyphen_values = true,
            default_value_t = 1
        )]
        count: i64,
        /// MDT of the first shard (-1: the MDS picks).
        #[arg(short = 'i', long = "mdt-index", allow_hyphen_values = true)]
        mdt: Option<i64>,
        /// Name hash: fnv_1a_64 (default) or all_char.
        #[arg(short = 'H', long = "mdt-hash")]
        hash: Option<String>,
        /// Levels of subdirectories that inherit the default (-1: all).
        #[arg(long = "max-inherit", allow_hyphen_values = true,
              default_value_t = nacre_types::dirstripe::DIR_DEFAULT_MAX_INHERIT)]
        max_inherit: i32,
        /// The directory.
        path: PathBuf,
    },
    /// Set the striping of a new file, an empty file, or a directory's default.
    Setstripe(SetstripeArgs),
    /// Show the layout of a file or the default striping of a directory.
    Getstripe {
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Parameters and statistics of this node's nacre processes, like `lctl`.
    Ctl {
        /// Only the nacre process with this pid (a node may run several).
        #[arg(long)]
        pid: Option<u32>,
        #[command(subcommand)]
        cmd: CtlCommand,
    },
    /// Benchmarks: IOR-like bandwidth and mdtest-like metadata runs on any path.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Network self-test (like lnet_selftest): ping, null, bulk write or bulk read RPCs to
    /// server processes for a duration, with RPC/s and MiB/s per peer; `--from` runs it from
    /// a group of client hosts at once.
    Selftest(SelftestArgs),
    /// Live view of the busiest jobs, clients and targets (like lltop).
    Top {
        /// Servers' metrics addresses (host:port, comma separated) to read instead of this
        /// node's processes.
        #[arg(long, value_delimiter = ',')]
        servers: Vec<String>,
        /// Seconds between readings.
        #[arg(short = 'd', long, default_value_t = 2.0)]
        interval: f64,
        /// Screens to show, then exit (default: until interrupted).
        #[arg(short = 'n', long)]
        count: Option<u32>,
        /// Rows per table.
        #[arg(long, default_value_t = 10)]
        rows: usize,
        /// Only targets of this file system.
        #[arg(long)]
        fsname: Option<String>,
        /// Plain output without clearing the screen (default when stdout is not a terminal).
        #[arg(short = 'b', long)]
        batch: bool,
    },
    /// Check the namespace across every MDT, like `lctl lfsck_start -t namespace`: reports
    /// entries naming no inode, inodes no entry names, wrong link counts and wrong `..`.
    /// Exits 1 when it finds any.
    Lfsck {
        /// Check the namespace (the only check so far).
        #[arg(long, required = true)]
        namespace: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// `MGS_NID:/FSNAME`, e.g. `10.0.0.1@tcp:/demo`.
        source: String,
    },
    /// Move a target of a failover pair to the other server (Lustre: unmount it on one
    /// server, mount it on the partner): the server holding it releases it cleanly if it
    /// answers, then the partner takes it over under multi-mount protection and
    /// registers; clients follow through the MGS.
    Failover {
        /// MGS NID.
        #[arg(long)]
        mgsnode: Nid,
        /// The server to move it to (default: its other service node).
        #[arg(long)]
        to: Option<Nid>,
        /// Target name, e.g. `demo-OST0001`.
        target: String,
    },
    /// Show usage per MDT and OST, like `lfs df`.
    Df {
        /// Human-readable sizes.
        #[arg(short = 'H', long = "human-readable", short_alias = 'h')]
        human: bool,
        /// Inodes instead of blocks.
        #[arg(short, long)]
        inodes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// A path inside the file system (default: every Nacre mount).
        path: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum CtlCommand {
    /// List parameter names (wildcards per dotted component: `osd.*.brw_stats`).
    #[command(name = "list_param")]
    List {
        /// Patterns (default: everything).
        patterns: Vec<String>,
    },
    /// Show parameter values.
    #[command(name = "get_param")]
    Get {
        /// Values only, without names.
        #[arg(short = 'n')]
        values_only: bool,
        /// Patterns.
        #[arg(required = true)]
        patterns: Vec<String>,
    },
    /// Set parameters: `NAME=VALUE` (statistics: `=0` clears them).
    #[command(name = "set_param")]
    Set {
        /// Persistent: store through the MGS (run on the MGS node); every server applies it
        /// now and at every start.
        #[arg(short = 'P')]
        persistent: bool,
        /// Assignments.
        #[arg(required = true)]
        assignments: Vec<String>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
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
struct TeamArgs {
    /// Interface (IOR's -a): POSIX (paths on a mount) or NACRE (native client library, no
    /// FUSE; paths are inside the file system, e.g. /ior/file).
    #[arg(short = 'a', long = "api", default_value = "POSIX")]
    api: String,
    /// MGS NID for -a NACRE.
    #[arg(long)]
    mgs: Option<String>,
    /// File system name for -a NACRE.
    #[arg(long, default_value = "nacre")]
    fsname: String,
    /// Client hosts, comma separated; the -N tasks are spread over them in blocks, one worker
    /// process per host. A {host} in the path is replaced with each host's name.
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<String>,
    /// Command prefix that runs a command on {host}.
    #[arg(long, default_value = "ssh {host}")]
    launcher: String,
    /// Address of this machine the hosts' workers connect back to (IP:PORT; port 0 = any).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Milliseconds the workers may take to start and connect.
    #[arg(long, default_value_t = 30_000)]
    worker_timeout_ms: u64,
    /// Write a chart of bandwidth (or ops) over time, per phase, to this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Show a live progress line even when stderr is not a terminal.
    #[arg(long)]
    progress: bool,
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
struct SurveyArgs {
    /// OST directory (repeatable); safe beside a running server.
    #[arg(long = "ost", required = true)]
    osts: Vec<PathBuf>,
    /// Objects per OST.
    #[arg(short = 'o', long, default_value_t = 4)]
    objects: u64,
    /// Threads per OST.
    #[arg(short = 't', long, default_value_t = 4)]
    threads: usize,
    /// Record size (K/M).
    #[arg(short = 'r', long, default_value = "1M")]
    record: String,
    /// Bytes per object (K/M/G).
    #[arg(short = 's', long, default_value = "256M")]
    size: String,
    /// Use the O_DIRECT path, as OSTs do by default.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    direct: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MdsSurveyArgs {
    /// New or empty directory for the scratch MDT, on the device to measure (removed after).
    dir: PathBuf,
    /// Files in all (mds-survey's file_count).
    #[arg(long = "files", default_value_t = 100_000)]
    files: u64,
    /// Directories (dir_count).
    #[arg(long = "dirs", default_value_t = 1)]
    dirs: u32,
    /// Threads (thrhi).
    #[arg(long = "threads", default_value_t = 4)]
    threads: usize,
    /// Tests (tests_str), space or comma separated.
    #[arg(long, default_value = "create lookup md_getattr setxattr destroy")]
    tests: String,
    /// OSTs each file gets an object on (placeholders: nothing is sent to an OST).
    #[arg(long, default_value_t = 1)]
    stripe_count: u32,
    /// Reply only after the journal sync (as --mdt-sync-on-reply).
    #[arg(long)]
    sync_on_reply: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SelftestArgs {
    /// Peers (server NIDs, comma separated).
    #[arg(long, value_delimiter = ',', required = true)]
    to: Vec<String>,
    /// ping (network layer), null (empty RPC through a service thread), brw_write or
    /// brw_read.
    #[arg(long, default_value = "brw_write")]
    test: String,
    /// Bulk bytes per RPC (K/M).
    #[arg(long, default_value = "1M")]
    size: String,
    /// RPCs in flight per peer (per client host).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Checksum bulk data (crc32c), as file I/O does by default.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    checksum: bool,
    /// Use every NID the peers report (multi-rail); false: only the NIDs given.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    discovery: bool,
    /// Client group: hosts to run the test from at once (comma separated).
    #[arg(long, value_delimiter = ',')]
    from: Vec<String>,
    /// Command prefix that runs a command on {host}.
    #[arg(long, default_value = "ssh {host}")]
    launcher: String,
    /// Address of this machine the client hosts' workers connect back to.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// No live progress line.
    #[arg(short = 'q')]
    quiet: bool,
}

#[derive(Args)]
struct IorArgs {
    /// Write phase.
    #[arg(short = 'w')]
    write: bool,
    /// Read phase.
    #[arg(short = 'r')]
    read: bool,
    /// Transfer size (bytes per call; K/M/G).
    #[arg(short = 't', default_value = "1m")]
    transfer: String,
    /// Block size (contiguous bytes per task per segment).
    #[arg(short = 'b', default_value = "16m")]
    block: String,
    /// Segments.
    #[arg(short = 's', default_value_t = 1)]
    segments: u64,
    /// File per process (otherwise one shared file).
    #[arg(short = 'F')]
    file_per_proc: bool,
    /// Reorder tasks: read back another task's data.
    #[arg(short = 'C')]
    reorder: bool,
    /// fsync after writing.
    #[arg(short = 'e')]
    fsync: bool,
    /// Iterations.
    #[arg(short = 'i', default_value_t = 1)]
    iterations: u32,
    /// Barriers between phases (always on; accepted for IOR compatibility).
    #[arg(short = 'g')]
    barriers: bool,
    /// Tasks.
    #[arg(short = 'N', default_value_t = 1)]
    tasks: usize,
    /// Check data after writing.
    #[arg(short = 'W')]
    check_write: bool,
    /// Check data while reading.
    #[arg(short = 'R')]
    check_read: bool,
    /// Keep the test files.
    #[arg(short = 'k')]
    keep: bool,
    /// Data signature seed.
    #[arg(short = 'G', default_value_t = 0)]
    seed: u64,
    /// O_DIRECT.
    #[arg(long)]
    direct: bool,
    /// Test file.
    #[arg(short = 'o')]
    path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(short = 'q')]
    quiet: bool,
    #[command(flatten)]
    team: TeamArgs,
}

#[derive(Args)]
struct MdtestArgs {
    /// Working directory.
    #[arg(short = 'd')]
    dir: PathBuf,
    /// Items per task.
    #[arg(short = 'n', default_value_t = 1000)]
    items: u64,
    /// A directory tree per task.
    #[arg(short = 'u')]
    unique_dir: bool,
    /// Bytes written into each file.
    #[arg(short = 'w', default_value_t = 0)]
    write_bytes: u64,
    /// Bytes read from each file.
    #[arg(short = 'e', default_value_t = 0)]
    read_bytes: u64,
    /// Files only.
    #[arg(short = 'F')]
    files_only: bool,
    /// Directories only.
    #[arg(short = 'D')]
    dirs_only: bool,
    /// Iterations.
    #[arg(short = 'i', default_value_t = 1)]
    iterations: u32,
    /// Tree depth.
    #[arg(short = 'z', default_value_t = 0)]
    depth: u32,
    /// Tree branching factor.
    #[arg(short = 'b', default_value_t = 1)]
    branch: u32,
    /// Tasks.
    #[arg(short = 'N', default_value_t = 1)]
    tasks: usize,
    /// mdsrate-style: create with mknod only.
    #[arg(long)]
    mknod: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(short = 'q')]
    quiet: bool,
    #[command(flatten)]
    team: TeamArgs,
}

#[derive(Args)]
struct UpArgs {
    /// Directory holding the targets (created and formatted on first use).
    dir: PathBuf,
    /// Where to mount.
    #[arg(long)]
    mount: PathBuf,
    /// Number of OSTs.
    #[arg(long, default_value_t = 4)]
    osts: u32,
    /// Number of MDTs (MDT0 holds the root; the others take remote and striped directories).
    #[arg(long, default_value_t = 1)]
    mdts: u32,
    /// File system name.
    #[arg(long, default_value = "nacre")]
    fsname: String,
    /// Address the servers listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    targets_opts: TargetOpts,
    /// Stay in the foreground.
    #[arg(long)]
    foreground: bool,
}

#[derive(Args, Clone)]
struct TargetOpts {
    /// MDT replies wait for the journal sync (power-loss safe without fsync; slower).
    #[arg(long)]
    mdt_sync_on_reply: bool,
    /// Background journal sync period of MDTs, in ms.
    #[arg(long, default_value_t = nacre_cli::server::COMMIT_INTERVAL_MS_DEFAULT)]
    commit_interval_ms: u64,
    /// OSTs bypass the page cache (O_DIRECT) for aligned I/O.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    ost_direct_io: bool,
    /// Serve OpenMetrics at http://ADDR/metrics.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// CPU partitions (Lustre's cpu_npartitions; 0: automatic from NUMA nodes and cores).
    #[arg(long, default_value_t = 0)]
    cpu_npartitions: usize,
    /// Lustre's cpu_pattern, e.g. "0[0-3] 1[4-7]" or the NUMA form "N 0[0] 1[1]".
    #[arg(long)]
    cpu_pattern: Option<String>,
    /// Partitions the OSS services run on, e.g. "[0,1]" (Lustre's oss_cpts).
    #[arg(long)]
    oss_cpts: Option<String>,
    /// Partitions the OSS I/O service ost_io runs on (Lustre's oss_io_cpts; default: oss_cpts).
    #[arg(long)]
    oss_io_cpts: Option<String>,
    /// Partitions the MDS services run on, e.g. "[0]".
    #[arg(long)]
    mds_cpts: Option<String>,
    /// Partitions the MDS readpage service runs on (Lustre's mds_rdpg_num_cpts style;
    /// default: mds_cpts).
    #[arg(long)]
    mds_rdpg_cpts: Option<String>,
    /// OSS threads started per partition.
    #[arg(long, default_value_t = nacre_cli::server::OSS_THREADS_MIN_DEFAULT)]
    oss_threads_min: usize,
    /// Most OSS threads per partition.
    #[arg(long, default_value_t = nacre_cli::server::OSS_THREADS_MAX_DEFAULT)]
    oss_threads_max: usize,
    /// MDS threads started per partition.
    #[arg(long, default_value_t = nacre_cli::server::MDS_THREADS_MIN_DEFAULT)]
    mds_threads_min: usize,
    /// Most MDS threads per partition.
    #[arg(long, default_value_t = nacre_cli::server::MDS_THREADS_MAX_DEFAULT)]
    mds_threads_max: usize,
    /// Interfaces and their partitions, e.g. "tcp0(eth0)[0],tcp1(eth1)[1]"; the server
    /// listens on each interface's address at the --listen port.
    #[arg(long)]
    networks: Option<String>,
    /// How requests spread over a service's partitions: off (the interface's), on
    /// (round-robin), hash (by object/FID).
    #[arg(long, default_value = "off")]
    portal_rotor: String,
}

impl TargetOpts {
    /// Applies a config-file key; false if the key is not one of these options.
    fn set(&mut self, key: &str, v: &str) -> anyhow::Result<bool> {
        let num = |v: &str| -> anyhow::Result<usize> {
            v.parse().with_context(|| format!("'{v}' is not a number"))
        };
        match key {
            "cpu_npartitions" => self.cpu_npartitions = num(v)?,
            "cpu_pattern" => self.cpu_pattern = Some(v.trim_matches('"').to_string()),
            "oss_cpts" => self.oss_cpts = Some(v.to_string()),
            "mds_cpts" => self.mds_cpts = Some(v.to_string()),
            "oss_io_cpts" => self.oss_io_cpts = Some(v.to_string()),
            "mds_rdpg_cpts" => self.mds_rdpg_cpts = Some(v.to_string()),
            "oss_threads_min" => self.oss_threads_min = num(v)?,
            "oss_threads_max" => self.oss_threads_max = num(v)?,
            "mds_threads_min" => self.mds_threads_min = num(v)?,
            "mds_threads_max" => self.mds_threads_max = num(v)?,
            "networks" => self.networks = Some(v.trim_matches('"').to_string()),
            "portal_rotor" => self.portal_rotor = v.to_string(),
            "metrics" => self.metrics = Some(v.parse()?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Parses a partition list like Lustre's `oss_cpts="[0,1]"` (brackets optional).
fn parse_cpts(name: &str, v: &Option<String>) -> anyhow::Result<Option<Vec<usize>>> {
    let Some(v) = v else { return Ok(None) };
    let inner = v
        .trim()
        .trim_matches('"')
        .trim_start_matches('[')
        .trim_end_matches(']');
    nacre_cpt::parse_cpu_list(inner)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("{name}={v}: {e}"))
}

#[derive(Args, Clone)]
struct ClientArgs {
    /// Checksum bulk data on the wire (crc32c).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    checksum: bool,
    /// RPCs in flight per target connection.
    #[arg(long, default_value_t = 8)]
    max_rpcs_in_flight: usize,
    /// Largest bulk RPC (K/M suffixes).
    #[arg(long, default_value = "4M")]
    max_rpc_size: String,
    /// Read-ahead per sequential O_DIRECT reader (K/M suffixes; 0 turns it off).
    #[arg(long, default_value = "4M")]
    max_read_ahead: String,
    /// FUSE threads.
    #[arg(long, default_value_t = 4)]
    fuse_threads: usize,
    /// Attribute cache timeout in ms (0 = revalidate every stat).
    #[arg(long, default_value_t = 0)]
    attr_timeout_ms: u64,
    /// Name cache timeout in ms.
    #[arg(long, default_value_t = 0)]
    entry_timeout_ms: u64,
    /// Learn servers' other NIDs (rails) from the servers themselves.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    discovery: bool,
    /// With several rails: ms without an answer before a rail is declared down and its
    /// requests move to another rail.
    #[arg(long, default_value_t = 10_000)]
    rail_timeout_ms: u64,
    /// ms without a reply before the client drops the connection and resends (Lustre's
    /// `timeout`); a server that lost a request or its reply is asked again.
    #[arg(long, default_value_t = 120_000)]
    rpc_timeout_ms: u64,
    /// ms between pings of each MDT, which evicts a client silent for its
    /// `evict_timeout_ms` (default 150000); 0: no pings.
    #[arg(long, default_value_t = nacre_client::PING_INTERVAL_MS_DEFAULT)]
    ping_interval_ms: u64,
}

#[derive(Args)]
struct MkfsArgs {
    /// Format a management target.
    #[arg(long, group = "kind")]
    mgs: bool,
    /// Format a metadata target.
    #[arg(long, group = "kind")]
    mdt: bool,
    /// Format an object storage target.
    #[arg(long, group = "kind")]
    ost: bool,
    /// Target index.
    #[arg(long, default_value_t = 0)]
    index: u32,
    /// File system name.
    #[arg(long)]
    fsname: String,
    /// MGS NID (e.g. 10.0.0.1@tcp).
    #[arg(long)]
    mgsnode: Option<Nid>,
    /// A server that may serve this target (repeat for each server of its failover pair,
    /// as Lustre's `--servicenode`); enables multi-mount protection.
    #[arg(long = "servicenode")]
    servicenodes: Vec<Nid>,
    /// Overwrite an existing label.
    #[arg(long)]
    reformat: bool,
    /// Target directory.
    dir: PathBuf,
}

#[derive(Args)]
struct ServerArgs {
    /// Config file (`key = value` lines: listen, nid, target, mgsnode, fsname, and the
    /// server options by their Lustre names: cpu_npartitions, cpu_pattern, oss_cpts, mds_cpts,
    /// {oss,mds}_threads_{min,max}, networks, portal_rotor, metrics).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// NID to advertise (default: the listen address).
    #[arg(long)]
    nid: Option<Nid>,
    /// Formatted target directory (repeatable).
    #[arg(long = "target")]
    targets: Vec<PathBuf>,
    /// A target of a failover pair to stand by for: its partner serves it; this server
    /// takes it over on `nacre failover`, or by itself with `--failover auto` (repeatable).
    #[arg(long = "standby")]
    standby: Vec<PathBuf>,
    /// `auto`: take a standby target over when its server dies (its protection record stops
    /// moving); `manual`: only on `nacre failover`.
    #[arg(long, default_value = "manual", value_parser = ["manual", "auto"])]
    failover: String,
    /// Multi-mount protection update interval of failover targets (a takeover waits
    /// 2 x this + 1 s for a record that looks alive).
    #[arg(long, default_value_t = nacre_osd::mmp::MMP_INTERVAL_MS_DEFAULT)]
    mmp_interval_ms: u64,
    /// MGS NID (overrides the labels).
    #[arg(long)]
    mgsnode: Option<Nid>,
    /// Refuse targets of other file systems.
    #[arg(long)]
    fsname: Option<String>,
    #[command(flatten)]
    targets_opts: TargetOpts,
}

#[derive(Args)]
struct MountArgs {
    /// `MGS_NID:/FSNAME`, e.g. `10.0.0.1@tcp:/demo`.
    source: String,
    /// Mount point.
    mountpoint: PathBuf,
    /// Serve the client's OpenMetrics (per-OST RPCs, bytes, in flight) at http://ADDR/metrics.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    client: ClientArgs,
    /// Stay in the foreground.
    #[arg(long)]
    foreground: bool,
}

#[derive(Args)]
struct SetstripeArgs {
    /// Stripe count (-1: all OSTs, 0: default).
    #[arg(
        short = 'c',
        long = "stripe-count",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    count: i64,
    /// Stripe size (K/M/G suffixes; 0: default).
    #[arg(short = 'S', long = "stripe-size", default_value = "0")]
    size: String,
    /// First OST index (-1: chosen by the MDS).
    #[arg(short = 'i', long = "stripe-index", default_value_t = -1, allow_hyphen_values = true)]
    index: i64,
    /// File or directory.
    path: PathBuf,
}

fn client_config(a: &ClientArgs) -> anyhow::Result<(ClientConfig, MountOptions)> {
    let max_rpc_size = parse_size(&a.max_rpc_size).map_err(anyhow::Error::msg)?;
    if max_rpc_size < 4096 || max_rpc_size > u64::from(nacre_types::limits::BULK_BYTES_MAX) {
        bail!("max_rpc_size must be between 4K and 16M");
    }
    if a.max_rpcs_in_flight == 0 || a.max_rpcs_in_flight > 256 {
        bail!("max_rpcs_in_flight must be between 1 and 256");
    }
    let net = NetConfig {
        max_rpcs_in_flight: a.max_rpcs_in_flight,
        max_rpc_size: max_rpc_size as u32,
        bulk_checksum: a.checksum,
        discovery: a.discovery,
        rail_timeout_ms: a.rail_timeout_ms.clamp(100, 3_600_000),
        rpc_timeout_ms: a.rpc_timeout_ms.clamp(100, 3_600_000),
        ..NetConfig::default()
    };
    let opts = MountOptions {
        threads: a.fuse_threads.clamp(1, 64),
        attr_timeout: Duration::from_millis(a.attr_timeout_ms),
        entry_timeout: Duration::from_millis(a.entry_timeout_ms),
        ..MountOptions::default()
    };
    let readahead_bytes = parse_size(&a.max_read_ahead).map_err(anyhow::Error::msg)?;
    if readahead_bytes > 1 << 30 {
        bail!("max_read_ahead must be at most 1G");
    }
    Ok((
        ClientConfig {
            net,
            readahead_bytes,
            ping_interval_ms: a.ping_interval_ms,
        },
        opts,
    ))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lsm_tree=warn,fjall=warn"));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

fn check_mountpoint(mnt: &Path) -> anyhow::Result<()> {
    if daemon::is_mounted(mnt) {
        bail!("{} is already a Nacre mount", mnt.display());
    }
    if !mnt.is_dir() {
        bail!("mount point {} is not a directory", mnt.display());
    }
    Ok(())
}

/// Formats what is missing under `dir` for `up`: MGS, MDTs 0..mdts, OSTs 0..osts.
fn format_up(dir: &Path, fsname: &str, mdts: u32, osts: u32) -> anyhow::Result<Vec<PathBuf>> {
    let mut targets = Vec::new();
    let mut add = |sub: String, kind: TargetKind, index: u32| -> anyhow::Result<()> {
        let path = dir.join(sub);
        match Label::read(&path) {
            Ok(l) if l.fsname != fsname => bail!(
                "{} holds target {} of file system '{}', not '{fsname}'",
                path.display(),
                l.name(),
                l.fsname
            ),
            Ok(_) => {}
            Err(nacre_osd::LabelError::NotFormatted(_)) => {
                Label::new(kind, index, fsname, None)?.write(&path, false)?
            }
            Err(e) => return Err(e.into()),
        }
        targets.push(path);
        Ok(())
    };
    add("mgs".into(), TargetKind::Mgt, 0)?;
    // A directory formatted earlier keeps all its targets: a target is never dropped.
    let existing = |prefix: &str| {
        (0..)
            .take_while(|i| {
                dir.join(format!("{prefix}{i}"))
                    .join(nacre_osd::label::LABEL_FILE)
                    .exists()
            })
            .count() as u32
    };
    for (prefix, kind, wanted, flag) in [
        ("mdt", TargetKind::Mdt, mdts, "--mdts"),
        ("ost", TargetKind::Ost, osts, "--osts"),
    ] {
        let have = existing(prefix);
        if have > wanted {
            tracing::warn!(
                "{} holds {have} {}s; serving all of them ({flag} {wanted} ignored)",
                dir.display(),
                prefix.to_uppercase()
            );
        }
        for i in 0..wanted.max(have) {
            add(format!("{prefix}{i}"), kind, i)?;
        }
    }
    Ok(targets)
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    if a.osts == 0 {
        bail!("--osts must be at least 1");
    }
    if a.mdts == 0 || a.mdts > nacre_types::fid::MDT_COUNT_MAX {
        bail!("--mdts must be 1..={}", nacre_types::fid::MDT_COUNT_MAX);
    }
    nacre_osd::label::check_fsname(&a.fsname)?;
    if !a.foreground {
        check_mountpoint(&a.mount)?;
        std::fs::create_dir_all(&a.dir)
            .with_context(|| format!("cannot create {}", a.dir.display()))?;
        let dir = std::fs::canonicalize(&a.dir)?;
        daemon::detach(&a.mount, &dir.join("nacre.log"))?;
        println!(
            "nacre: file system '{}' mounted at {} (data in {})",
            a.fsname,
            a.mount.display(),
            dir.display()
        );
        return Ok(());
    }
    daemon::block_stop_signals();
    init_logging();
    std::fs::create_dir_all(&a.dir)?;
    let targets = format_up(&a.dir, &a.fsname, a.mdts, a.osts)?;
    let mut spec = ServerSpec::new(a.listen, targets);
    spec.fsname = Some(a.fsname.clone());
    let (servers, _ctl) = start_servers(spec, &a.targets_opts)?;
    let (config, opts) = client_config(&a.client)?;
    let client = Client::mount(servers.nid(), &a.fsname, config)?;
    let mut sources = servers.metrics_sources();
    sources.clients.push(client.clone());
    serve_metrics(a.targets_opts.metrics, sources)?;
    serve_mount(client, &a.mount, &opts, servers.registry())?;
    servers.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// Starts the servers of `spec` with the target options, their control socket and (if asked)
/// their metrics endpoint.
fn start_servers(
    mut spec: ServerSpec,
    t: &TargetOpts,
) -> anyhow::Result<(ServerProcess, nacre_cli::ctl::CtlServer)> {
    spec.mdt_sync_on_reply = t.mdt_sync_on_reply;
    spec.commit_interval_ms = t.commit_interval_ms;
    spec.ost_direct_io = t.ost_direct_io;
    spec.cpu_npartitions = t.cpu_npartitions;
    spec.cpu_pattern = t.cpu_pattern.clone();
    spec.oss_cpts = parse_cpts("oss_cpts", &t.oss_cpts)?;
    spec.mds_cpts = parse_cpts("mds_cpts", &t.mds_cpts)?;
    spec.oss_io_cpts = parse_cpts("oss_io_cpts", &t.oss_io_cpts)?;
    spec.mds_rdpg_cpts = parse_cpts("mds_rdpg_cpts", &t.mds_rdpg_cpts)?;
    spec.oss_threads = (t.oss_threads_min, t.oss_threads_max);
    spec.mds_threads = (t.mds_threads_min, t.mds_threads_max);
    spec.networks = t.networks.clone();
    spec.portal_rotor = t.portal_rotor.parse().map_err(anyhow::Error::msg)?;
    let servers = ServerProcess::start(spec)?;
    let sources = servers.metrics_sources();
    let ctl = nacre_cli::ctl::serve(nacre_cli::ctl::CtlSources {
        registry: servers.registry().clone(),
        persist: servers.persist_fn(),
        metrics: Some(Arc::new(move || nacre_cli::metrics::render(&sources))),
    })?;
    Ok((servers, ctl))
}

/// Serves `/metrics` at `addr`, if given.
fn serve_metrics(
    addr: Option<SocketAddr>,
    sources: nacre_cli::metrics::Sources,
) -> anyhow::Result<()> {
    if let Some(addr) = addr {
        let bound = nacre_cli::metrics::serve(addr, sources)?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    Ok(())
}

/// How long an unmount waits for the MDTs to acknowledge the client's disconnect.
const DISCONNECT_WAIT_MS: u64 = 5_000;

fn serve_mount(
    client: Arc<Client>,
    mnt: &Path,
    opts: &MountOptions,
    registry: &nacre_params::Registry,
) -> anyhow::Result<()> {
    register_client_params(registry, &client, opts);
    let me = client.clone();
    let handle = nacre_fuse::mount(client, mnt, opts)
        .with_context(|| format!("cannot mount at {}", mnt.display()))?;
    let pidfile = daemon::write_pidfile(mnt)?;
    tracing::info!("mounted at {}", mnt.display());
    daemon::wait_stop(|| handle.is_finished());
    daemon::bound_stop(format!("mount at {}", mnt.display()));
    tracing::info!("unmounting {}", mnt.display());
    let _ = handle.unmount();
    // As Lustre's clients do at umount: the MDTs release this client's state now.
    me.disconnect(Duration::from_millis(DISCONNECT_WAIT_MS));
    let _ = std::fs::remove_file(pidfile);
    Ok(())
}

fn mkfs(a: MkfsArgs) -> anyhow::Result<()> {
    let kind = match (a.mgs, a.mdt, a.ost) {
        (true, _, _) => TargetKind::Mgt,
        (_, true, _) => TargetKind::Mdt,
        (_, _, true) => TargetKind::Ost,
        _ => bail!("give one of --mgs, --mdt, --ost"),
    };
    if kind != TargetKind::Mgt && a.mgsnode.is_none() {
        bail!("--mgsnode is required for an {}", kind.as_str());
    }
    let mut label = Label::new(kind, a.index, &a.fsname, a.mgsnode)?;
    if !a.servicenodes.is_empty() {
        if kind == TargetKind::Mgt {
            bail!("--servicenode: an MGS target does not fail over");
        }
        if a.servicenodes.len() > nacre_osd::label::SERVICENODES_MAX {
            bail!(
                "at most {} --servicenode",
                nacre_osd::label::SERVICENODES_MAX
            );
        }
        label.servicenodes = a.servicenodes.clone();
    }
    label.write(&a.dir, a.reformat)?;
    println!(
        "formatted {} (uuid {}) in {}",
        label.name(),
        label.uuid,
        a.dir.display()
    );
    Ok(())
}

fn server(mut a: ServerArgs) -> anyhow::Result<()> {
    daemon::block_stop_signals();
    init_logging();
    let mut listen = a.listen;
    let mut nid = a.nid;
    let mut targets = a.targets;
    let mut mgsnode = a.mgsnode;
    let mut fsname = a.fsname;
    if let Some(path) = &a.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("{}:{}: expected key = value", path.display(), n + 1))?;
            let (k, v) = (k.trim(), v.trim());
            let bad = |e: &dyn std::fmt::Display| {
                anyhow::anyhow!("{}:{}: {k}: {e}", path.display(), n + 1)
            };
            match k {
                "listen" => listen = Some(v.parse().map_err(|e| bad(&e))?),
                "nid" => nid = Some(v.parse().map_err(|e| bad(&e))?),
                "target" => targets.push(PathBuf::from(v)),
                "standby" => a.standby.push(PathBuf::from(v)),
                "failover" if v == "auto" || v == "manual" => a.failover = v.to_string(),
                "mmp_interval_ms" => a.mmp_interval_ms = v.parse().map_err(|e| bad(&e))?,
                "mgsnode" => mgsnode = Some(v.parse().map_err(|e| bad(&e))?),
                "fsname" => fsname = Some(v.to_string()),
                _ => {
                    if !a.targets_opts.set(k, v).map_err(|e| bad(&e))? {
                        bail!("{}:{}: unknown key '{k}'", path.display(), n + 1)
                    }
                }
            }
        }
    }
    let listen = listen.context("give --listen ADDR:PORT (or `listen =` in the config file)")?;
    let mut spec = ServerSpec::new(listen, targets);
    spec.standby = a.standby.clone();
    spec.auto_failover = a.failover == "auto";
    spec.mmp_interval_ms = a.mmp_interval_ms;
    spec.nid = nid;
    spec.mgsnode = mgsnode;
    spec.fsname = fsname;
    let (servers, _ctl) = start_servers(spec, &a.targets_opts)?;
    serve_metrics(a.targets_opts.metrics, servers.metrics_sources())?;
    let mut names: Vec<String> = servers.labels().iter().map(Label::name).collect();
    if names.is_empty() {
        names.push("no targets".into());
    }
    let standby: Vec<String> = servers.standby_labels().iter().map(Label::name).collect();
    let standby = if standby.is_empty() {
        String::new()
    } else {
        format!(", standing by for {}", standby.join(", "))
    };
    tracing::info!("serving {} at {}{standby}", names.join(", "), servers.nid());
    println!(
        "nacre server: serving {} at {}{standby}",
        names.join(", "),
        servers.nid()
    );
    daemon::wait_stop(|| false);
    daemon::bound_stop(format!("server at {}", servers.nid()));
    servers.shutdown();
    Ok(())
}

fn lfsck(source: &str, json: bool) -> anyhow::Result<()> {
    let (nid, fsname) = parse_source(source)?;
    let client = Client::mount(nid, &fsname, nacre_client::ClientConfig::default())?;
    let report = client.lfsck_namespace()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "lfsck namespace of {fsname}: {} inodes, {} entries, {} inconsistencies",
            report.inodes,
            report.dirents,
            report.findings.len()
        );
        for f in &report.findings {
            println!("{:<9} {} {}", f.kind, f.fid, f.detail);
        }
    }
    if !report.findings.is_empty() {
        bail!(
            "{} namespace inconsistencies in {fsname}",
            report.findings.len()
        );
    }
    Ok(())
}

fn parse_source(s: &str) -> anyhow::Result<(Nid, String)> {
    let (nid, fs) = s.rsplit_once(":/").with_context(|| {
        format!("bad source '{s}': expected MGS_NID:/FSNAME (e.g. 10.0.0.1@tcp:/demo)")
    })?;
    Ok((nid.parse()?, fs.to_string()))
}

fn mount(a: MountArgs) -> anyhow::Result<()> {
    let (nid, fsname) = parse_source(&a.source)?;
    let (config, opts) = client_config(&a.client)?;
    if !a.foreground {
        check_mountpoint(&a.mountpoint)?;
        let pf = daemon::pidfile(&a.mountpoint);
        let log = pf.with_extension("log");
        daemon::detach(&a.mountpoint, &log)?;
        println!(
            "nacre: {fsname} from {nid} mounted at {}",
            a.mountpoint.display()
        );
        return Ok(());
    }
    daemon::block_stop_signals();
    init_logging();
    let client = Client::mount(nid, &fsname, config)?;
    serve_metrics(
        a.metrics,
        nacre_cli::metrics::Sources {
            clients: vec![client.clone()],
            ..Default::default()
        },
    )?;
    let registry = nacre_params::Registry::default();
    let _ctl = nacre_cli::ctl::serve(nacre_cli::ctl::CtlSources {
        registry: registry.clone(),
        persist: None,
        metrics: None,
    })?;
    serve_mount(client, &a.mountpoint, &opts, &registry)
}

/// Commands that print and end die quietly of SIGPIPE when their reader goes away, as `ls`
/// does under `| head`; daemons keep SIGPIPE ignored (Rust's default) so a closed socket or
/// log pipe is an error they handle, not their death.
fn quiet_on_closed_pipe(command: &Command) {
    if is_daemon(command) {
        return;
    }
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The long-running commands: servers and mounts.
fn is_daemon(command: &Command) -> bool {
    matches!(
        command,
        Command::Up(_) | Command::Server(_) | Command::Mount(_)
    )
}

fn main() {
    let cli = Cli::parse();
    quiet_on_closed_pipe(&cli.command);
    nacre_cli::panics::install(is_daemon(&cli.command));
    let result = match cli.command {
        Command::Up(a) => up(a),
        Command::Umount {
            force: true,
            mountpoint,
        } => daemon::force_stop(&mountpoint),
        Command::Down { mountpoint } | Command::Umount { mountpoint, .. } => {
            daemon::stop(&mountpoint)
        }
        Command::Mkfs(a) => mkfs(a),
        Command::Server(a) => server(a),
        Command::Mount(a) => mount(a),
        Command::Mkdir {
            mdt,
            count,
            hash,
            mode,
            path,
        } => u32::from_str_radix(&mode, 8)
            .with_context(|| format!("bad mode '{mode}': expected octal, e.g. 755"))
            .and_then(|mode| match count {
                Some(c) => admin::mkdir_striped(&path, c, mdt, hash.as_deref(), mode & 0o7777),
                None if hash.is_some() => bail!("-H needs -c (a striped directory)"),
                None => admin::mkdir(&path, mdt, mode & 0o7777),
            }),
        Command::Migrate {
            mdt,
            dir_only,
            verbose,
            path,
        } => admin::migrate(&path, mdt, dir_only, verbose),
        Command::Getdirstripe { default, paths } => match default {
            true => admin::getdirstripe_default(&paths),
            false => admin::getdirstripe(&paths),
        },
        Command::Setdirstripe {
            default,
            delete,
            count,
            mdt,
            hash,
            max_inherit,
            path,
        } => {
            if delete {
                admin::set_dir_default(&path, None)
            } else if default {
                admin::set_dir_default(
                    &path,
                    Some(admin::DirDefaultArgs {
                        count,
                        start: mdt.unwrap_or(-1),
                        hash: hash.as_deref(),
                        max_inherit,
                    }),
                )
            } else {
                admin::mkdir_striped(&path, count, mdt, hash.as_deref(), 0o755)
            }
        }
        Command::Setstripe(a) => parse_size(&a.size)
            .map_err(anyhow::Error::msg)
            .and_then(|size| admin::setstripe(&a.path, a.count, size, a.index)),
        Command::Getstripe { paths, json } => getstripe(&paths, json),
        Command::Ctl { pid, cmd } => ctl(cmd, pid),
        Command::Bench(BenchCommand::Ior(a)) => bench_ior(a),
        Command::Bench(BenchCommand::Mdtest(a)) => bench_mdtest(a),
        Command::Top {
            servers,
            interval,
            count,
            rows,
            fsname,
            batch,
        } => {
            use std::io::IsTerminal;
            if !(0.1..=3600.0).contains(&interval) {
                Err(anyhow::anyhow!("interval must be 0.1..=3600 seconds"))
            } else {
                nacre_cli::top::run(&nacre_cli::top::TopOptions {
                    servers,
                    interval: std::time::Duration::from_secs_f64(interval),
                    count,
                    rows,
                    fsname,
                    batch: batch || !std::io::stdout().is_terminal(),
                })
            }
        }
        Command::Selftest(a) => selftest(a),
        Command::Bench(BenchCommand::Survey(a)) => bench_survey(a),
        Command::Bench(BenchCommand::MdsSurvey(a)) => bench_mds_survey(a),
        Command::Bench(BenchCommand::Worker { connect, index }) => {
            nacre_bench::team::worker_main(connect, index).map_err(Into::into)
        }
        Command::Df {
            human,
            inodes,
            json,
            path,
        } => df(path, human, inodes, json),
        Command::Lfsck { source, json, .. } => lfsck(&source, json),
        Command::Failover {
            mgsnode,
            to,
            target,
        } => nacre_cli::targets::failover(mgsnode, &target, to).map(|s| println!("{s}")),
    };
    if let Err(e) = result {
        eprintln!("nacre: {e:#}");
        std::process::exit(1);
    }
}

fn getstripe(paths: &[PathBuf], json: bool) -> anyhow::Result<()> {
    for p in paths {
        let v = admin::layout(p)?;
        if json {
            println!("{v}");
        } else {
            print!("{}", admin::format_layout(p, &v));
        }
    }
    Ok(())
}

fn df(path: Option<PathBuf>, human: bool, inodes: bool, json: bool) -> anyhow::Result<()> {
    let mounts: Vec<PathBuf> = match path {
        Some(p) => vec![p],
        None => daemon::nacre_mounts().into_iter().map(|(p, _)| p).collect(),
    };
    if mounts.is_empty() {
        bail!("no Nacre file system is mounted");
    }
    for m in mounts {
        let v = admin::usage(&m)?;
        if json {
            println!("{v}");
        } else {
            println!("{}", admin::format_df(&m, &v, human, inodes));
        }
    }
    Ok(())
}

fn bench_ior(a: IorArgs) -> anyhow::Result<()> {
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

fn bench_mdtest(a: MdtestArgs) -> anyhow::Result<()> {
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

fn ctl_ask(
    op: &str,
    pattern: &str,
    value: Option<&str>,
    pid: Option<u32>,
) -> anyhow::Result<Vec<(String, String)>> {
    let req = nacre_cli::ctl::CtlRequest {
        op: op.into(),
        pattern: pattern.into(),
        value: value.map(str::to_string),
    };
    let mut out = Vec::new();
    let replies = nacre_cli::ctl::ask(&req, pid)?;
    if let (Some(want), true) = (pid, replies.is_empty()) {
        bail!("no nacre process {want} answers on this node");
    }
    for (pid, reply) in replies {
        if let Some(e) = reply.error {
            bail!("process {pid}: {e}");
        }
        out.extend(reply.params);
    }
    out.sort();
    Ok(out)
}

fn ctl(c: CtlCommand, pid: Option<u32>) -> anyhow::Result<()> {
    match c {
        CtlCommand::List { patterns } => {
            let patterns = if patterns.is_empty() {
                (1..=4).map(|n| vec!["*"; n].join(".")).collect()
            } else {
                patterns
            };
            for p in patterns {
                for (name, _) in ctl_ask("list", &p, None, pid)? {
                    println!("{name}");
                }
            }
        }
        CtlCommand::Get {
            values_only,
            patterns,
        } => {
            for p in patterns {
                let found = ctl_ask("get", &p, None, pid)?;
                if found.is_empty() {
                    bail!("{p}: no such parameter on this node");
                }
                for (name, value) in found {
                    match (values_only, value.contains('\n')) {
                        (true, _) => println!("{}", value.trim_end()),
                        (false, true) => println!("{name}=\n{}", value.trim_end()),
                        (false, false) => println!("{name}={value}"),
                    }
                }
            }
        }
        CtlCommand::Set {
            persistent,
            assignments,
        } => {
            for a in assignments {
                let (name, value) = a
                    .split_once('=')
                    .with_context(|| format!("'{a}': expected NAME=VALUE"))?;
                if persistent {
                    if ctl_ask("set_persistent", name, Some(value), pid)?.is_empty() {
                        bail!("set_param -P: no MGS runs on this node (run it on the MGS node)");
                    }
                    println!("{name}={value} (persistent)");
                    continue;
                }
                let set = ctl_ask("set", name, Some(value), pid)?;
                if set.is_empty() {
                    bail!("{name}: no such parameter on this node");
                }
                for (n, v) in set {
                    println!("{n}={v}");
                }
            }
        }
    }
    Ok(())
}

/// Client-side parameters: `jobid_var`, and the client's view of its file system.
fn register_client_params(r: &nacre_params::Registry, client: &Arc<Client>, opts: &MountOptions) {
    nacre_cli::server::register_fault_params(r);

    let (get, set) = (opts.jobid_var.clone(), opts.jobid_var.clone());
    r.add_rw(
        "jobid_var",
        move || get.read().clone(),
        move |v| {
            let v = v.trim();
            if v.is_empty() || v.len() > 64 || v.contains(['=', '\0']) {
                return Err(
                    "expected an environment variable name, procname_uid or disable".into(),
                );
            }
            *set.write() = v.to_string();
            Ok(())
        },
    );
    for t in client.osts() {
        let (a, b) = (client.rpc_stats(t.index), client.rpc_stats(t.index));
        r.add_rw(
            format!("osc.{}-osc.rpc_stats", t.name()),
            move || a.render(),
            move |v| {
                if v.trim() != "0" {
                    return Err("statistics accept only 0 (clear)".into());
                }
                b.clear();
                Ok(())
            },
        );
    }
    let fs = client.fsname().to_string();
    let targets = client
        .fs_config()
        .mdts
        .iter()
        .map(|t| {
            (
                format!("mdc.{fs}-MDT{:04x}-mdc", t.index),
                format!("MDT{:04x}", t.index),
            )
        })
        .chain(client.osts().iter().map(|t| {
            (
                format!("osc.{fs}-OST{:04x}-osc", t.index),
                format!("OST{:04x}", t.index),
            )
        }))
        .collect::<Vec<_>>();
    for (param, target) in targets {
        let c = client.clone();
        r.add_fn(format!("{param}.import"), move || c.import(&target));
    }
    let c = client.clone();
    r.add_fn("peers", move || {
        let mut s = String::new();
        for (name, conn) in c.connections() {
            s += &format!("{name} {}:\n", conn.nid());
            for r in conn.rails() {
                s += &format!(
                    "  - nid: {} state: {} source: {} rpcs: {} bytes: {} failures: {}\n",
                    r.nid,
                    if r.healthy { "up" } else { "down" },
                    if r.discovered { "discovery" } else { "config" },
                    r.rpcs,
                    r.bytes,
                    r.failures
                );
            }
        }
        s.trim_end().to_string()
    });
    let c = client.clone();
    let fs = client.fsname().to_string();
    r.add_fn(format!("llite.{fs}.osts"), move || {
        c.osts()
            .iter()
            .map(|t| format!("{} {:?}", t.name(), t.nids))
            .collect::<Vec<_>>()
            .join("\n")
    });
}

fn selftest(a: SelftestArgs) -> anyhow::Result<()> {
    use nacre_net::selftest::{format_report, run, SelftestParams};
    use std::io::{IsTerminal, Write};
    let size = u32::try_from(parse_size(&a.size).map_err(anyhow::Error::msg)?)
        .map_err(|_| anyhow::anyhow!("size too large"))?;
    if !(0.1..=86_400.0).contains(&a.duration) {
        bail!("duration must be 0.1..=86400 seconds");
    }
    let live = !a.quiet && !a.json && std::io::stderr().is_terminal();
    if !a.from.is_empty() {
        let t = nacre_bench::selftest::GroupTest {
            peers: a.to.clone(),
            test: a.test.clone(),
            size,
            concurrency: a.concurrency,
            duration_ms: (a.duration * 1000.0) as u64,
            checksum: a.checksum,
            discovery: a.discovery,
        };
        let placement = nacre_bench::team::Placement {
            hosts: a.from.clone(),
            launcher: a.launcher.clone(),
            listen: a.listen,
            connect_timeout_ms: 30_000,
        };
        let bulk = a.test.starts_with("brw");
        let recorder = nacre_bench::team::Recorder::new(
            live,
            if bulk { "MiB" } else { "RPC" },
            if bulk { (1u64 << 20) as f64 } else { 1.0 },
        );
        let results = nacre_bench::selftest::run_group(&t, &placement, recorder)?;
        if a.json {
            println!("{}", serde_json::to_string_pretty(&results)?);
        } else {
            print!("{}", nacre_bench::selftest::format_group(&a.from, &results));
        }
        if results.iter().flat_map(|n| &n.peers).any(|p| p.rpcs == 0) {
            bail!("a client host completed no RPCs to a peer");
        }
        return Ok(());
    }
    let peers =
        a.to.iter()
            .map(|t| {
                t.parse::<Nid>()
                    .map_err(|e| anyhow::anyhow!("bad NID '{t}': {e}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
    let params = SelftestParams {
        peers,
        kind: a.test.parse().map_err(anyhow::Error::msg)?,
        size,
        concurrency: a.concurrency,
        duration: std::time::Duration::from_secs_f64(a.duration),
        net: NetConfig {
            bulk_checksum: a.checksum,
            discovery: a.discovery,
            ..NetConfig::default()
        },
    };
    let results = run(&params, |rpcs, bytes, secs| {
        if live {
            eprint!(
                "\r{:.0} s: {:.1} RPC/s, {:.2} MiB/s   ",
                secs,
                rpcs as f64 / secs,
                bytes as f64 / (1 << 20) as f64 / secs
            );
            let _ = std::io::stderr().flush();
        }
    })?;
    if live {
        eprintln!();
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", format_report(&params, &results));
    }
    if results.iter().any(|r| r.rpcs == 0) {
        bail!("a peer completed no RPCs");
    }
    Ok(())
}

fn bench_mds_survey(a: MdsSurveyArgs) -> anyhow::Result<()> {
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

fn bench_survey(a: SurveyArgs) -> anyhow::Result<()> {
    let size = |s: &str| parse_size(s).map_err(anyhow::Error::msg);
    let params = nacre_bench::survey::SurveyParams {
        osts: a.osts,
        objects: a.objects,
        threads: a.threads,
        record: size(&a.record)?,
        size: size(&a.size)?,
        direct: a.direct,
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
