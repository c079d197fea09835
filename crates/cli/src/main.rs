//! `nacre`: servers, mounts and admin commands of the Nacre parallel file system.
//!
//! This file holds the command line (clap) and its dispatch; each command lives in
//! `cmd/NAME.rs` with its arguments.

mod cmd;

use clap::{Parser, Subcommand};
use cmd::*;
use nacre_cli::admin;
use nacre_server::daemon;
use nacre_types::Nid;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "nacre",
    version,
    about = "Nacre: a user-space parallel file system in the manner of Lustre"
)]
struct Cli {
    /// A file system's key (made by `nacre keygen`; readable by its owner only): every
    /// connection this command opens proves it holds it. Servers: the keys of the file
    /// systems they serve (repeat for several).
    #[arg(long, global = true, env = "NACRE_KEY", value_name = "FILE")]
    key: Vec<PathBuf>,
    /// Where keys are looked for when none is given (`DIR/FSNAME.key`) and where
    /// `nacre mkfs --mgs` writes the keys it makes.
    #[arg(long, global = true, env = "NACRE_KEY_DIR", value_name = "DIR",
          default_value = nacre_net::sec::KEY_DIR_DEFAULT)]
    key_dir: PathBuf,
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
    /// Re-lay out files online, like `lfs migrate -c/-S/-p`: their data copied to new objects
    /// while they stay open and in use, then the layouts swapped (docs/migrate.md); with
    /// `-m`, move a directory tree to another MDT online, like `lfs migrate -m` (each
    /// directory's inode and entries, with the inodes of its files; data stays put).
    Migrate {
        /// MDT to move a directory tree to.
        #[arg(short = 'm', long = "mdt-index")]
        mdt: Option<u32>,
        /// New stripe count (-1: all OSTs of the pool).
        #[arg(short = 'c', long = "stripe-count", allow_hyphen_values = true)]
        stripe_count: Option<i32>,
        /// New stripe size (e.g. 4M).
        #[arg(short = 'S', long = "stripe-size")]
        stripe_size: Option<String>,
        /// OST pool of the new objects.
        #[arg(short = 'p', long = "pool")]
        pool: Option<String>,
        /// Copy at most this many bytes per second in all (e.g. 200M).
        #[arg(long)]
        bandwidth: Option<String>,
        /// Files migrated at once (1 to 64).
        #[arg(short = 'j', long, default_value_t = 4)]
        jobs: usize,
        /// Print a JSON summary.
        #[arg(long)]
        json: bool,
        /// With -m: only DIR itself (with its files), not the directories beneath it.
        #[arg(short = 'd', long = "directory")]
        dir_only: bool,
        /// Print each directory or file moved.
        #[arg(short, long)]
        verbose: bool,
        /// Files and directories (with -m: one directory).
        #[arg(required = true)]
        paths: Vec<PathBuf>,
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
    /// Check the file system, like `lctl lfsck_start`. `--namespace`: entries naming no
    /// inode, inodes no entry names, wrong link counts and wrong `..` across every MDT
    /// (reported; exits 1 when it finds any). `--quota`: every MDT's and OST's quota usage
    /// against a recount of its inodes and objects, repaired (exits 1 with `--dry-run`
    /// when any differs). Root only.
    #[command(group(clap::ArgGroup::new("check").required(true).args(["namespace", "quota"])))]
    Lfsck {
        /// Check the namespace.
        #[arg(long)]
        namespace: bool,
        /// Check (and repair) the quota usage of every target.
        #[arg(long)]
        quota: bool,
        /// With `--quota`: report differences, repair nothing.
        #[arg(long, requires = "quota")]
        dry_run: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// `MGS_NID:/FSNAME` (e.g. `10.0.0.1@tcp:/demo`) or a path in a Nacre mount.
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
    /// OST pools (Lustre's `lctl pool_*` and `lfs pool_list`): `new`, `add`, `remove`,
    /// `destroy` on the MGS node, `list`.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Changelogs of the MDTs (Lustre's `lctl changelog_register`, `lfs changelog`, `lfs
    /// changelog_clear`, `lctl changelog_deregister`): `register`, `read`, `clear`,
    /// `deregister`, `users`. Root only.
    #[command(subcommand)]
    Changelog(ChangelogCommand),
    /// The policy engine (RobinHood's job, built in): `run` keeps an index from the
    /// changelogs and applies TOML rules (migrate, purge, report) under rate limits,
    /// `status` shows what it indexed and did. Root only.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Stage files and trees in or out for jobs through a data mover (`nacre server
    /// --mover DIR`): `in`, `out`, `status`, `cancel`.
    #[command(subcommand)]
    Stage(StageCommand),
    /// The path of each FID from the file system's root (`lfs fid2path`): `nacre fid2path
    /// /mnt/nacre '[0x200000401:0x1:0x0]'`.
    Fid2path {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// FIDs, as `[0x200000401:0x1:0x0]`.
        #[arg(required = true)]
        fids: Vec<String>,
    },
    /// Project IDs of files and directories, like `lfs project`: list, set (`-p ID`, with
    /// `-s` the inherit flag of directories, `-r` recursively), clear (`-C`), check (`-c`).
    /// Changes are root's.
    Project(cmd::project::ProjectArgs),
    /// What a user, group or project uses, like `lfs quota`: blocks on the OSTs, inodes on
    /// the MDTs (`-v`: per target). Without `-u/-g/-p`: the caller's user and group.
    Quota(cmd::quota::QuotaArgs),
    /// Cluster-wide QoS rules (docs/qos.md): cap the requests and bytes per second of each
    /// job, user, group, project, client or operation a rule matches, over every MDT and
    /// OST together; requests over the rate wait.
    #[command(subcommand)]
    Qos(cmd::qos::QosCommand),
    /// Sets a user's, group's or project's limits, like `lfs setquota`: blocks (`-b` soft,
    /// `-B` hard) and inodes (`-i`, `-I`) across every OST and MDT; 0 is no limit; `-t`
    /// sets the grace times of soft limits. Root on an admin node.
    Setquota(cmd::quota::SetquotaArgs),
    /// The FID of each file (`lfs path2fid`).
    Path2fid {
        /// Paths in a Nacre mount.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Size a checkpoint tier as Sandia sized Astra's: the checkpoint time Daly's rule
    /// allows, the bandwidth 80% of the machine's memory needs in it, and the OSTs and OSS
    /// nodes that takes (from `nacre bench survey` rates, or given).
    Plan(PlanArgs),
    /// Make a file system's key: servers given it (`--key`) refuse every connection that
    /// does not prove it holds it, and protect frames at its level.
    Keygen(KeygenArgs),
    /// Rotate a file system's server key while its servers run (on each server node):
    /// `add` the new key, `use` it, `retire` the old one.
    Key {
        /// One server process only.
        #[arg(long)]
        pid: Option<u32>,
        #[command(subcommand)]
        cmd: KeyCommand,
    },
    /// Client address ranges mapped to a policy, like `lctl nodemap_*`: root squash, id
    /// mapping, read-only, security level, fileset (run on the MGS node).
    Nodemap {
        /// The MGS process (needed when several run on this node).
        #[arg(long)]
        pid: Option<u32>,
        #[command(subcommand)]
        cmd: NodemapCommand,
    },
    /// Show usage per MDT and OST, like `lfs df`.
    // `-h` is human-readable, as in `lfs df -h` and df(1): help is `--help` only.
    #[command(disable_help_flag = true)]
    Df {
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
        /// Human-readable sizes.
        #[arg(short = 'H', long = "human-readable", short_alias = 'h')]
        human: bool,
        /// Inodes instead of blocks.
        #[arg(short, long)]
        inodes: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Only the OSTs of this pool (`POOL` or `FS.POOL`), and the MDTs.
        #[arg(short = 'p', long)]
        pool: Option<String>,
        /// A path inside the file system (default: every Nacre mount; one that does not
        /// answer is named on standard error and skipped).
        path: Option<PathBuf>,
    },
    /// Write man pages and shell completions generated from these definitions (packaging).
    #[command(hide = true)]
    GenDocs {
        /// Directory for man pages (section 1).
        #[arg(long)]
        man: Option<PathBuf>,
        /// Directory for bash, zsh and fish completions.
        #[arg(long)]
        completions: Option<PathBuf>,
    },
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

/// The command's arguments as parsed (without the program name): those given, or those a
/// `mount.nacre` call stands for. A command that runs itself again in the background
/// (`mount`, `up`) passes these.
static COMMAND_ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// The arguments of this command, as parsed.
pub(crate) fn command_args() -> Vec<String> {
    COMMAND_ARGS.get().cloned().unwrap_or_default()
}

/// Parses the command line: as `nacre ...`, or as `mount.nacre SOURCE DIR -o ...` (the name
/// mount(8) runs for `-t nacre`, a link to this binary).
fn parse_command_line() -> Cli {
    let argv: Vec<String> = std::env::args().collect();
    let called = argv
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_string());
    if called.as_deref() != Some("mount.nacre") {
        let _ = COMMAND_ARGS.set(argv[1..].to_vec());
        return Cli::parse();
    }
    match cmd::mount::helper_argv(&argv[1..]) {
        Ok(Some(args)) => {
            let _ = COMMAND_ARGS.set(args[1..].to_vec());
            Cli::parse_from(args)
        }
        Ok(None) => std::process::exit(0),
        Err(e) => {
            eprintln!("mount.nacre: {e:#}");
            std::process::exit(32) // mount(8): mount failure
        }
    }
}

fn main() {
    let cli = parse_command_line();
    quiet_on_closed_pipe(&cli.command);
    nacre_cli::panics::install(is_daemon(&cli.command));
    if let Err(e) = nacre_cli::keys::install(&cli.key, &cli.key_dir) {
        eprintln!("nacre: {e:#}");
        std::process::exit(1);
    }
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
        } => cmd::dirs::mkdir(&path, mdt, count, hash.as_deref(), &mode),
        Command::Migrate {
            mdt,
            stripe_count,
            stripe_size,
            pool,
            bandwidth,
            jobs,
            json,
            dir_only,
            verbose,
            paths,
        } => {
            let relayout = stripe_count.is_some() || stripe_size.is_some() || pool.is_some();
            match (mdt, relayout) {
                (Some(_), true) => Err(anyhow::anyhow!(
                    "-m moves directories between MDTs; -c, -S and -p re-lay out files: \
                     give one or the other"
                )),
                (Some(m), false) if paths.len() == 1 => {
                    admin::migrate(&paths[0], m, dir_only, verbose)
                }
                (Some(_), false) => Err(anyhow::anyhow!("-m moves one directory at a time")),
                (None, false) => Err(anyhow::anyhow!(
                    "nothing to do: give -c, -S or -p (a new layout), or -m (another MDT)"
                )),
                (None, true) => cmd::migrate::migrate_files(
                    cmd::migrate::Request {
                        jobs,
                        stripe_count,
                        stripe_size,
                        pool,
                        bandwidth,
                        verbose,
                        json,
                    },
                    &paths,
                ),
            }
        }
        Command::Getdirstripe { default, paths } => cmd::dirs::getdirstripe(&paths, default),
        Command::Setdirstripe {
            default,
            delete,
            count,
            mdt,
            hash,
            max_inherit,
            path,
        } => cmd::dirs::setdirstripe(
            &path,
            cmd::dirs::SetDirStripe {
                default,
                delete,
                count,
                mdt,
                hash: hash.as_deref(),
                max_inherit,
            },
        ),
        Command::Setstripe(a) => setstripe(a),
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
        } => cmd::top::top(servers, interval, count, rows, fsname, batch),
        Command::Selftest(a) => selftest(a),
        Command::Bench(BenchCommand::Survey(a)) => bench_survey(a),
        Command::Bench(BenchCommand::MdsSurvey(a)) => bench_mds_survey(a),
        Command::Bench(BenchCommand::Worker { connect, index }) => {
            nacre_bench::worker::worker_main(connect, index).map_err(Into::into)
        }
        Command::Df {
            human,
            inodes,
            json,
            pool,
            path,
            help: _,
        } => df(path, human, inodes, json, pool),
        Command::Lfsck {
            source,
            json,
            namespace,
            quota,
            dry_run,
        } => (|| {
            if quota {
                lfsck_quota(&source, json, !dry_run)?;
            }
            if namespace {
                lfsck(&source, json)?;
            }
            Ok(())
        })(),
        Command::Pool(c) => pool(c),
        Command::Plan(a) => plan(a),
        Command::Keygen(a) => keygen(a),
        Command::Key { pid, cmd } => key(cmd, pid),
        Command::Nodemap { pid, cmd } => nodemap(cmd, pid),
        Command::Changelog(c) => changelog(c),
        Command::Policy(c) => policy(c),
        Command::Stage(c) => stage(c),
        Command::Fid2path { fs, fids } => fid2path(&fs, &fids),
        Command::Path2fid { paths } => path2fid(&paths),
        Command::Project(a) => cmd::project::project(a),
        Command::Quota(a) => cmd::quota::quota(a),
        Command::Qos(c) => cmd::qos::qos(c),
        Command::Setquota(a) => cmd::quota::setquota(a),
        Command::GenDocs { man, completions } => cmd::docs::gen_docs(
            <Cli as clap::CommandFactory>::command(),
            man.as_deref(),
            completions.as_deref(),
        ),
        Command::Failover {
            mgsnode,
            to,
            target,
        } => nacre_server::targets::failover(mgsnode, &target, to).map(|s| println!("{s}")),
    };
    if let Err(e) = result {
        eprintln!("nacre: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    /// Every command's arguments are consistent (clap checks names, short flags and groups
    /// only in debug builds, and only for the command used: `df -h` once clashed with help).
    #[test]
    fn every_command_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
