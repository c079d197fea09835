//! `nacre mount`: a client mount in its own process; the client options `up` shares.

use super::*;
use anyhow::{bail, Context};
use clap::Args;
use nacre_cli::size::parse_size;
use nacre_client::{Client, ClientConfig};
use nacre_fuse::MountOptions;
use nacre_net::NetConfig;
use nacre_server::daemon;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Clone)]
pub(crate) struct ClientArgs {
    /// Checksum bulk data on the wire (crc32c).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) checksum: bool,
    /// RPCs in flight per target connection.
    #[arg(long, default_value_t = nacre_types::limits::RPCS_IN_FLIGHT_DEFAULT)]
    pub(crate) max_rpcs_in_flight: usize,
    /// Largest bulk RPC (K/M suffixes).
    #[arg(long, default_value = "4M")]
    pub(crate) max_rpc_size: String,
    /// Read-ahead per sequential O_DIRECT reader (K/M suffixes; 0 turns it off).
    #[arg(long, default_value = "4M")]
    pub(crate) max_read_ahead: String,
    /// FUSE threads.
    #[arg(long, default_value_t = 4)]
    pub(crate) fuse_threads: usize,
    /// Attribute cache timeout in ms for attributes no metadata lock covers (0 = revalidate
    /// every stat); what a lock covers is cached until the lock goes.
    #[arg(long, default_value_t = 0)]
    pub(crate) attr_timeout_ms: u64,
    /// Name cache timeout in ms for entries no metadata lock covers.
    #[arg(long, default_value_t = 0)]
    pub(crate) entry_timeout_ms: u64,
    /// List directories with readdirplus: every entry's attributes come with the listing,
    /// cached under locks, so the stats of an `ls -l` cost nothing more. `auto`: only where
    /// the caller stats what it lists (scans that do not stat get plain pages; stats in
    /// name order after a whole listing come from pages fetched ahead). `false`: plain
    /// listings only, a lookup per name stat'ed.
    #[arg(long, default_value = "true")]
    pub(crate) readdirplus: nacre_fuse::Readdirplus,
    /// Answer creates, mkdirs and unlinks in directories the MDT delegates to this mount
    /// here, sending them many per request within 50 ms (docs/locking.md, "Delegated
    /// directories"); false: every create waits for the MDT.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) async_dirops: bool,
    /// Keep file data in the page cache across opens, under read locks on the OST objects
    /// (called back when another client writes); false: dropped at every open.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) data_cache: bool,
    /// Open a writer's handle (write-only, or by a create that found the file empty) for
    /// direct I/O, where the kernel allows it (Linux 6.6+): each write is one request to
    /// the mount and the file's writers are not serialised on the kernel's inode lock;
    /// writes are still kept as write-behind. false: writers use the page cache.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) direct_writes: bool,
    /// Learn servers' other NIDs (rails) from the servers themselves.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) discovery: bool,
    /// With several rails: ms without an answer before a rail is declared down and its
    /// requests move to another rail.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) rail_timeout_ms: u64,
    /// ms without a reply before the client drops the connection and resends (Lustre's
    /// `timeout`); a server that lost a request or its reply is asked again.
    #[arg(long, default_value_t = 120_000)]
    pub(crate) rpc_timeout_ms: u64,
    /// ms between pings of each MDT, which evicts a client silent for its
    /// `evict_timeout_ms` (default 150000); 0: no pings.
    #[arg(long, default_value_t = nacre_client::PING_INTERVAL_MS_DEFAULT)]
    pub(crate) ping_interval_ms: u64,
}

#[derive(Args)]
pub(crate) struct MountArgs {
    /// `MGS_NID:/FSNAME`, e.g. `10.0.0.1@tcp:/demo`.
    pub(crate) source: String,
    /// Mount point.
    pub(crate) mountpoint: PathBuf,
    /// Serve the client's OpenMetrics (per-OST RPCs, bytes, in flight) at http://ADDR/metrics.
    #[arg(long)]
    pub(crate) metrics: Option<SocketAddr>,
    #[command(flatten)]
    pub(crate) client: ClientArgs,
    /// Stay in the foreground.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// What the kernel enforces on the mount, as mount(8) says it: `ro`, `nosuid`, `nodev`,
    /// `noexec`, `sync`, `noatime` (or `rw`, `suid`, `dev`, `exec`, `async`, `relatime`:
    /// the defaults), separated by commas.
    #[arg(short = 'o', long = "options", default_value = "")]
    pub(crate) options: String,
}

pub(crate) fn client_config(a: &ClientArgs) -> anyhow::Result<(ClientConfig, MountOptions)> {
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
        readdirplus: a.readdirplus,
        data_cache: a.data_cache,
        direct_writes: a.direct_writes,
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

/// How long an unmount waits for the MDTs to acknowledge the client's disconnect.
pub(crate) const DISCONNECT_WAIT_MS: u64 = 5_000;

pub(crate) fn serve_mount(
    client: Arc<Client>,
    mnt: &Path,
    opts: &MountOptions,
    registry: &nacre_params::Registry,
) -> anyhow::Result<()> {
    register_client_params(registry, &client, opts);
    let me = client.clone();
    let handle = nacre_fuse::mount(client, mnt, opts)
        .with_context(|| format!("cannot mount at {}", mnt.display()))?;
    let (inval, c) = (handle.invalidations(), me.clone());
    registry.add_fn(format!("llite.{}.lock_cache", me.fsname()), move || {
        use std::sync::atomic::Ordering::Relaxed;
        format!(
            "complete_dirs {}\ndir_attrs_kept_hits {}\ninodes_invalidated {}\n\
             entries_invalidated {}\nentry_waits_cut {}\nentries_deferred {}\n\
             listings_invalidated {}\nfile_data_invalidated {}\ndata_waits_cut {}",
            c.complete_dirs(),
            c.dir_attr_hits(),
            inval.inodes.load(Relaxed),
            inval.entries.load(Relaxed),
            inval.entry_waits_cut.load(Relaxed),
            inval.entries_deferred.load(Relaxed),
            inval.listings.load(Relaxed),
            inval.data.load(Relaxed),
            inval.data_waits_cut.load(Relaxed)
        )
    });
    let c = me.clone();
    registry.add_fn(format!("llite.{}.open_cache", me.fsname()), move || {
        use std::sync::atomic::Ordering::Relaxed;
        let (s, kept_now) = c.open_cache();
        format!(
            "kept_now {kept_now}\nopen_at_mdts {}\nhits {}\nkept {}\n\
             closed_on_callback {}\nclosed_for_room {}\nlocks_asked {}",
            c.opens_at_mdts(),
            s.hits.load(Relaxed),
            s.kept.load(Relaxed),
            s.closed_on_callback.load(Relaxed),
            s.closed_for_room.load(Relaxed),
            s.asked.load(Relaxed)
        )
    });
    let (a, b) = (me.clone(), me.clone());
    registry.add_rw(
        format!("llite.{}.opencache_threshold_count", me.fsname()),
        move || a.open_cache_threshold().to_string(),
        move |v| {
            let n: u32 = v
                .trim()
                .parse()
                .map_err(|_| "expected a count of opens (0: no open cache)".to_string())?;
            b.set_open_cache_threshold(n);
            Ok(())
        },
    );
    let c = me.clone();
    registry.add_fn(format!("llite.{}.writeback", me.fsname()), move || {
        use std::sync::atomic::Ordering::Relaxed;
        let (s, dirty) = c.writeback_stats();
        format!(
            "dirty_bytes {dirty}\nwrites_kept {}\nwrites_through {}\nflush_rpcs {}\n\
             flush_rpcs_of_runs {}\nflush_runs {}\nflush_bytes {}\ndirty_waits {}\n\
             lost_bytes {}\nwrites_quota_sync {}",
            s.kept.load(Relaxed),
            s.through.load(Relaxed),
            s.rpcs.load(Relaxed),
            s.rpcs_of_runs.load(Relaxed),
            s.runs.load(Relaxed),
            s.bytes.load(Relaxed),
            s.waits.load(Relaxed),
            s.lost_bytes.load(Relaxed),
            s.quota_sync.load(Relaxed)
        )
    });
    let d = me.clone();
    registry.add_fn(format!("llite.{}.async_dirops", me.fsname()), move || {
        d.async_dirops_text()
    });
    let api = super::node_api::start(&me, mnt, &handle, opts, registry)?;
    let pidfile = daemon::write_pidfile(mnt)?;
    tracing::info!("mounted at {}", mnt.display());
    daemon::notify_ready();
    daemon::wait_stop(|| handle.is_finished());
    daemon::notify_stopping();
    daemon::bound_stop(format!("mount at {}", mnt.display()));
    tracing::info!("unmounting {}", mnt.display());
    api.stop();
    let _ = handle.unmount();
    // As Lustre's clients do at umount: the MDTs release this client's state now.
    me.disconnect(Duration::from_millis(DISCONNECT_WAIT_MS));
    let _ = std::fs::remove_file(pidfile);
    Ok(())
}

/// A client whose root its nodemap squashes mounts `nosuid,nodev` unless `options` say
/// `suid` or `dev`: root here is not root there, yet a set-user-ID file or a device node
/// another client made would act as its owner or open a device on this node.
fn squashed_defaults(
    client: &Client,
    options: &str,
    flags: &mut nacre_fuse::KernelFlags,
) -> anyhow::Result<()> {
    if !client.root_squashed()? {
        return Ok(());
    }
    let said = |o: &str| options.split(',').any(|x| x == o);
    let mut added = Vec::new();
    if !said("suid") && !flags.nosuid {
        flags.nosuid = true;
        added.push("nosuid");
    }
    if !said("dev") && !flags.nodev {
        flags.nodev = true;
        added.push("nodev");
    }
    if !added.is_empty() {
        tracing::info!(
            "this node's root is squashed by its nodemap: mounted {} (`-o suid,dev` to \
             override)",
            added.join(",")
        );
    }
    Ok(())
}

pub(crate) fn mount(a: MountArgs) -> anyhow::Result<()> {
    let (nid, fsname) = parse_source(&a.source)?;
    // The client proves the key of `fsname` (NetConfig::for_fs, in Client::mount).
    let (config, mut opts) = client_config(&a.client)?;
    opts.flags = nacre_fuse::KernelFlags::parse(&a.options).map_err(anyhow::Error::msg)?;
    if !a.foreground {
        check_mountpoint(&a.mountpoint)?;
        let pf = daemon::pidfile(&a.mountpoint);
        let log = pf.with_extension("log");
        daemon::detach(&a.mountpoint, &log, &crate::command_args())?;
        println!(
            "nacre: {fsname} from {nid} mounted at {}",
            a.mountpoint.display()
        );
        return Ok(());
    }
    daemon::block_stop_signals();
    init_logging();
    let client = Client::mount(nid, &fsname, config)?;
    squashed_defaults(&client, &a.options, &mut opts.flags)?;
    client.set_noatime(opts.flags.noatime);
    client.set_async_dirops(a.client.async_dirops);
    serve_metrics(
        a.metrics,
        nacre_server::metrics::Sources {
            extra: vec![client_families(client.clone())],
            ..Default::default()
        },
    )?;
    let registry = nacre_params::Registry::default();
    let _ctl = nacre_server::ctl::serve(nacre_server::ctl::CtlSources {
        registry: registry.clone(),
        persist: None,
        pools: None,
        nodemaps: None,
        metrics: None,
    })?;
    serve_mount(client, &a.mountpoint, &opts, &registry)
}

/// `ldlm.namespaces.FS-MDTxxxx-mdc.*`: the locks this client holds on one MDT.
fn register_client_ldlm_params(
    r: &nacre_params::Registry,
    client: &Arc<Client>,
    fs: &str,
    index: u32,
) {
    let ns = format!("ldlm.namespaces.{fs}-MDT{index:04x}-mdc");
    let of = move |c: &Client| c.lock_stats().into_iter().find(|s| s.0 == index);
    let c = client.clone();
    r.add_fn(format!("{ns}.lock_count"), move || {
        of(&c).map_or(0, |s| s.1).to_string()
    });
    let c = client.clone();
    r.add_fn(format!("{ns}.stats"), move || {
        let (_, held, _, grants, callbacks, lru) = of(&c).unwrap_or_default();
        format!("granted {held}\ngrants {grants}\ncallbacks {callbacks}\nlru_cancels {lru}")
    });
    let (a, b) = (client.clone(), client.clone());
    r.add_rw(
        format!("{ns}.lru_size"),
        move || {
            of(&a)
                .map_or(nacre_ldlm::client::LRU_SIZE_DEFAULT, |s| s.2)
                .to_string()
        },
        move |v| {
            let n = nacre_server::target_params::parse_count(v)?;
            b.set_lru_size(index, n).map_err(|e| e.to_string())
        },
    );
}

/// `ldlm.namespaces.FS-OSTxxxx-osc.*`: the data locks this client holds on one OST.
fn register_client_osc_ldlm_params(
    r: &nacre_params::Registry,
    client: &Arc<Client>,
    fs: &str,
    index: u32,
) {
    let ns = format!("ldlm.namespaces.{fs}-OST{index:04x}-osc");
    let of = move |c: &Client| c.data_lock_stats().into_iter().find(|s| s.0 == index);
    let c = client.clone();
    r.add_fn(format!("{ns}.lock_count"), move || {
        of(&c).map_or(0, |s| s.1).to_string()
    });
    let c = client.clone();
    r.add_fn(format!("{ns}.stats"), move || {
        let (_, held, _, [grants, callbacks, cancels, lru, resets, glimpses, replayed, refused]) =
            of(&c).unwrap_or_default();
        format!(
            "granted {held}\ngrants {grants}\ncallbacks {callbacks}\ncancels {cancels}\n\
             lru_cancels {lru}\nresets {resets}\nglimpses {glimpses}\nreplayed {replayed}\n\
             replay_refused {refused}"
        )
    });
    let c = client.clone();
    r.add_fn(format!("{ns}.server_epoch"), move || {
        c.data_epoch(index).to_string()
    });
    let c = client.clone();
    r.add_fn(
        format!("osc.{fs}-OST{index:04x}.cur_grant_bytes"),
        move || c.cur_grant_bytes(index).to_string(),
    );
    let (a, b) = (client.clone(), client.clone());
    r.add_rw(
        format!("{ns}.lru_size"),
        move || {
            of(&a)
                .map_or(nacre_client::datalocks::DATA_LRU_SIZE_DEFAULT, |s| s.2)
                .to_string()
        },
        move |v| {
            let n = nacre_server::target_params::parse_count(v)?;
            b.set_data_lru_size(index, n);
            Ok(())
        },
    );
}

/// Client-side parameters: `jobid_var`, and the client's view of its file system.
pub(crate) fn register_client_params(
    r: &nacre_params::Registry,
    client: &Arc<Client>,
    opts: &MountOptions,
) {
    nacre_server::process::register_fault_params(r);

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
        // Fixed for the mount's life (`--max-rpcs-in-flight`).
        let c = client.clone();
        r.add_fn(format!("{param}.max_rpcs_in_flight"), move || {
            c.net_config().max_rpcs_in_flight.to_string()
        });
    }
    for t in client.fs_config().mdts {
        register_client_ldlm_params(r, client, &fs, t.index);
    }
    for t in client.fs_config().osts {
        register_client_osc_ldlm_params(r, client, &fs, t.index);
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

/// The client's metric families for a `/metrics` scrape: bulk RPCs, bytes and RPCs in flight
/// per OST connection.
pub(crate) fn client_families(client: Arc<Client>) -> nacre_server::metrics::ExtraFamilies {
    Arc::new(move |out: &mut String| render_client(out, &client))
}

fn render_client(out: &mut String, c: &Client) {
    use nacre_server::metrics::escape;
    use std::fmt::Write as _;
    type Field = fn(&nacre_client::rpc_stats::OscTotals) -> (u64, u64);
    let families: [(&str, &str, &str, Field); 3] = [
        (
            "nacre_osc_rpcs",
            "counter",
            "Bulk RPCs a client sent, per OST.",
            |t| (t.read_rpcs, t.write_rpcs),
        ),
        (
            "nacre_osc_bytes",
            "counter",
            "Bulk bytes a client moved, per OST.",
            |t| (t.read_bytes, t.write_bytes),
        ),
        (
            "nacre_osc_rpcs_in_flight",
            "gauge",
            "Bulk RPCs in flight now, per OST.",
            |t| (t.reads_active, t.writes_active),
        ),
    ];
    for (name, kind, help, field) in families {
        let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
        let suffix = if kind == "counter" { "_total" } else { "" };
        for ost in c.osts() {
            let (r, w) = field(&c.rpc_stats(ost.index).totals());
            for (op, v) in [("read", r), ("write", w)] {
                let _ = writeln!(
                    out,
                    "{name}{suffix}{{fs=\"{}\",ost=\"{}\",op=\"{op}\"}} {v}",
                    escape(c.fsname()),
                    escape(&ost.name())
                );
            }
        }
    }
}

/// Options of the mount(8) convention that mount(8) and systemd consume: accepted and
/// ignored. The kernel's flags (`ro`, `nosuid`, `nodev`, `noexec`, `sync`, `noatime` and
/// their opposites) are passed on (`-o`) and honoured.
const GENERIC_OPTIONS: &[&str] = &[
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner", "group",
];

/// Access-time options Nacre does not honour yet: accepted with a warning, not silently
/// (`noatime`, `atime` and `relatime` are kernel flags: honoured).
const ATIME_OPTIONS_NOT_HONOURED: &[&str] = &["norelatime", "strictatime", "lazytime"];

/// Nacre's own mount options as `-o key=value` (the `nacre mount` long options, `_` or
/// `-` between words).
const NACRE_OPTIONS: &[&str] = &[
    "checksum",
    "max_rpcs_in_flight",
    "max_rpc_size",
    "max_read_ahead",
    "fuse_threads",
    "attr_timeout_ms",
    "entry_timeout_ms",
    "readdirplus",
    "async_dirops",
    "data_cache",
    "direct_writes",
    "discovery",
    "rail_timeout_ms",
    "rpc_timeout_ms",
    "ping_interval_ms",
    "metrics",
    "key",
];

/// `mount.nacre SOURCE DIR [-sfnv] [-o OPTIONS]`, as mount(8) (and so fstab and systemd's
/// mount units) runs it: the `nacre mount` command line it stands for, or `None` for `-f`
/// (fake: check only). Generic options are ignored; Nacre's are `key=value`; anything else
/// is refused (unless `-s`, sloppy).
pub(crate) fn helper_argv(args: &[String]) -> anyhow::Result<Option<Vec<String>>> {
    let mut positional = Vec::new();
    let (mut fake, mut sloppy) = (false, false);
    let mut options = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.extend(
                it.next()
                    .context("-o needs a list of options")?
                    .split(',')
                    .map(str::to_string),
            ),
            "-f" => fake = true,
            "-s" => sloppy = true,
            "-n" | "-v" => {}
            s if s.starts_with("-o") => options.extend(s[2..].split(',').map(str::to_string)),
            s if s.starts_with('-') => bail!("unknown flag {s}"),
            s => positional.push(s.to_string()),
        }
    }
    let [source, dir] = positional.as_slice() else {
        bail!("usage: mount.nacre MGS_NID:/FSNAME DIR [-o OPTIONS]");
    };
    let mut argv = vec![
        "nacre".to_string(),
        "mount".into(),
        source.clone(),
        dir.clone(),
    ];
    let mut kernel = Vec::new();
    for o in options.iter().filter(|o| !o.is_empty()) {
        let (key, value) = o.split_once('=').unwrap_or((o.as_str(), ""));
        let key = key.replace('-', "_");
        if GENERIC_OPTIONS.contains(&key.as_str()) || key.starts_with("x-") || key == "comment" {
            continue;
        }
        if nacre_fuse::KernelFlags::default().take(&key) {
            kernel.push(key);
            continue;
        }
        if ATIME_OPTIONS_NOT_HONOURED.contains(&key.as_str()) {
            eprintln!(
                "mount.nacre: {key} is not honoured yet: the MDT records access times at \
                 close, as relatime would"
            );
            continue;
        }
        if NACRE_OPTIONS.contains(&key.as_str()) && !value.is_empty() {
            argv.push(format!("--{}", key.replace('_', "-")));
            argv.push(value.to_string());
        } else if !sloppy {
            bail!(
                "unknown mount option '{o}' (Nacre's: {})",
                NACRE_OPTIONS.join(", ")
            );
        }
    }
    if !kernel.is_empty() {
        argv.push("-o".into());
        argv.push(kernel.join(","));
    }
    parse_source(source)?;
    Ok((!fake).then_some(argv))
}

#[cfg(test)]
mod tests {
    use super::helper_argv;

    fn argv(s: &str) -> anyhow::Result<Option<Vec<String>>> {
        helper_argv(&s.split_whitespace().map(str::to_string).collect::<Vec<_>>())
    }

    #[test]
    fn mount_helper_turns_fstab_options_into_a_command_line() {
        let a = argv("10.0.0.1@tcp:/demo /mnt -o rw,_netdev,noauto,checksum=false,max-rpc-size=1M")
            .unwrap()
            .unwrap();
        assert_eq!(
            a.join(" "),
            "nacre mount 10.0.0.1@tcp:/demo /mnt --checksum false --max-rpc-size 1M -o rw"
        );
        assert_eq!(argv("10.0.0.1@tcp:/demo /mnt -f").unwrap(), None);
        assert!(argv("10.0.0.1@tcp:/demo /mnt -o bogus=1").is_err());
        assert!(argv("10.0.0.1@tcp:/demo /mnt -s -o bogus=1")
            .unwrap()
            .is_some());
        let flags = argv("10.0.0.1@tcp:/demo /mnt -o ro,nosuid,nodev,noexec,noatime,sync")
            .unwrap()
            .unwrap();
        assert_eq!(
            flags.join(" "),
            "nacre mount 10.0.0.1@tcp:/demo /mnt -o ro,nosuid,nodev,noexec,noatime,sync"
        );
        let keyed = argv("10.0.0.1@tcp:/demo /mnt -o key=/etc/nacre/demo.key").unwrap();
        assert_eq!(
            keyed.unwrap().join(" "),
            "nacre mount 10.0.0.1@tcp:/demo /mnt --key /etc/nacre/demo.key"
        );
        assert!(argv("nonsense /mnt").is_err());
        assert!(argv("10.0.0.1@tcp:/demo").is_err());
    }
}
