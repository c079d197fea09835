//! Test harness: runs the real `nacre` binary as separate processes — an embedded file system
//! (`nacre up`), server processes on their own TCP ports, client mounts — and cleans up after
//! them, unmounting even when a test fails. Nothing here is a mock.
//!
//! * testfs.rs: `TestFs`, one file system in either form users run: embedded (`nacre up`,
//!   in-process transport) or networked (an MGS+MDT0 server process on 127.0.0.1, further
//!   MDTs in one on 127.0.0.4, OSTs split over OSS processes on 127.0.0.2 and 127.0.0.3, and a
//!   separate `nacre mount` process, all over TCP). `on_both_forms!` runs a test written
//!   against it as `embedded::NAME` and `networked::NAME`.
//! * small.rs: a networked file system whose OSTs may sit on size-limited tmpfs mounts.
//! * layout.rs: what `nacre getstripe --json` says of a path.
//! * `raw`: a bare protocol client on one TCP connection (many connections, or misbehaving
//!   ones). `proxy`: a proxy that records and may tamper with a client's frames. `hostile`:
//!   a proxy that turns replies into well-formed but hostile content.
//!
//! The mount tests in `tests/` run on both forms; one that needs a single form says why
//! (fault points in one of several server processes, network namespaces, the `nacre up`
//! command itself). Among them: POSIX (`posix.rs`), striping verified on the OSTs (`striping.rs`),
//! cp/tar/rsync/git/make/fio (`tools.rs`), several mounts, restarts, kill -9 and hosts in
//! network namespaces (`cluster.rs`), bad input and full OSTs (`failures.rs`), the
//! benchmark drivers and their data check against a corrupted object (`bench.rs`), two and
//! three mounts of one file system in the style of Lustre's sanityn (`sanityn.rs`,
//! `locking.rs`, `opencache.rs`, `data_cache.rs`, `writeback.rs`, `flock.rs`), a
//! model-checked random operation test on two mounts (`coherence.rs`), racer (`racer.rs`),
//! and a file per feature (`dne.rs`, `recovery.rs`, `quota.rs`, `qos.rs`, `security.rs`,
//! ...).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod hostile;
pub mod imports;
mod layout;
pub mod proxy;
pub mod raw;
mod small;
mod testfs;
pub use layout::pool_of;
pub use small::{fill_percent, scrape, SmallFs};
pub use testfs::{Form, Spec, TestFs};

/// The tests package's directory (`tests/` of the clone being tested): the one `cargo test`
/// names when it runs the test (`CARGO_MANIFEST_DIR`), else the one the test was built in.
/// A test binary may have been built in another clone sharing the target directory (CI
/// builds in a fresh clone), so a path fixed at build time could name files that are gone
/// or are another clone's.
pub fn tests_dir() -> PathBuf {
    package_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests"))
}

/// The directory of the package whose test is running: the one `cargo test` names when it
/// runs the test (`CARGO_MANIFEST_DIR` at run time), else `built`, the one the test was
/// built in (`env!("CARGO_MANIFEST_DIR")`), which may be another clone's (see [`tests_dir`]).
pub fn package_dir(built: &str) -> PathBuf {
    match std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) {
        Some(dir) if dir.join("Cargo.toml").is_file() => dir,
        _ => Path::new(built).to_path_buf(),
    }
}

/// The `nacre` binary: `$NACRE_BIN`, or the one built next to the running test.
pub fn nacre_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("NACRE_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let bin = dir.join("nacre");
    assert!(
        bin.exists(),
        "{} not built: run `cargo build -p nacre-cli` or set NACRE_BIN",
        bin.display()
    );
    bin
}

/// The `nacre` binary client mounts run: `$NACRE_CLIENT_BIN`, else [`nacre_bin`] (the
/// mixed-architecture runs of scripts/test-aarch64.sh give servers and clients binaries of
/// two architectures).
pub fn nacre_client_bin() -> PathBuf {
    match std::env::var_os("NACRE_CLIENT_BIN") {
        Some(p) => PathBuf::from(p),
        None => nacre_bin(),
    }
}

/// Runs `nacre ARGS` to completion.
pub fn nacre(args: &[&str]) -> Output {
    Command::new(nacre_bin())
        .args(args)
        .output()
        .expect("run nacre")
}

/// Runs `nacre ARGS`, asserting success; returns stdout.
pub fn nacre_ok(args: &[&str]) -> String {
    let out = nacre(args);
    assert!(
        out.status.success(),
        "nacre {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    free_port_at("127.0.0.1")
}

/// A TCP port free on address `ip` right now, taken below the kernel's range of ephemeral
/// ports (`net.ipv4.ip_local_port_range`): a port handed out by binding port 0 is an
/// ephemeral one, which any outgoing connection (another test's client) may take before the
/// server meant to listen on it binds it. (A port free on 127.0.0.1 may be taken on
/// 127.0.0.3 by another test's server: ask the address that will listen.)
///
/// A port is handed out once per test process: a server killed and started again on its
/// port finds it free, not taken by another test that asked for a free port meanwhile.
pub fn free_port_at(ip: &str) -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let low = ephemeral_ports_start();
    if low > PORT_MIN + 1_000 {
        let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..1_000 {
            let port = fastrand::u16(PORT_MIN..low);
            if !handed.contains(&port) && TcpListener::bind((ip, port)).is_ok() {
                handed.push(port);
                return port;
            }
        }
    }
    TcpListener::bind((ip, 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Lowest port [`free_port_at`] hands out.
const PORT_MIN: u16 = 20_000;

/// The first ephemeral port of this machine (32,768 if it cannot be read).
fn ephemeral_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The value of parameter `name` (wildcards allowed) as `nacre ctl get_param -n` prints it,
/// asked of process `pid` only (a stopped process would not answer) or, without, of every
/// nacre process here.
pub fn get_param(pid: Option<u32>, name: &str) -> String {
    let pid = pid.map(|p| p.to_string());
    let mut args = vec!["ctl"];
    if let Some(p) = &pid {
        args.extend(["--pid", p.as_str()]);
    }
    args.extend(["get_param", "-n", name]);
    nacre_ok(&args)
}

/// The number on the line `what N` of parameter `param` (as `mdt.FS-MDT0000.atime`,
/// `.sizes` or `.destroy_pending` print theirs), asked of every nacre process here; panics
/// if there is no such line.
pub fn param_field(param: &str, what: &str) -> u64 {
    let text = get_param(None, param);
    text.lines()
        .find_map(|l| l.strip_prefix(what)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {param}: {text}"))
}

/// Arms fault point `spec` (`NAME`, `NAME@N`, `NAME~MS`, `NAME~hold`; `0` disarms) in the
/// running process `pid` through its control socket (Lustre's `fail_loc`).
pub fn fail_loc(pid: u32, spec: &str) {
    let pid = pid.to_string();
    nacre_ok(&[
        "ctl",
        "--pid",
        &pid,
        "set_param",
        &format!("fail_loc={spec}"),
    ]);
}

/// The sum over a service's CPU partitions of column `column` of its `partition_stats`
/// table (`service` as `mds.MDS.mdt`, `ost.OSS.ost_io`), asked of process `pid`.
pub fn partition_sum(pid: u32, service: &str, column: &str) -> u64 {
    let text = get_param(Some(pid), &format!("{service}.partition_stats"));
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let i = header
        .split_whitespace()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no column {column} in {text}"));
    lines
        .filter(|l| !l.starts_with("inline_requests"))
        .map(|l| {
            let cell = l.split_whitespace().nth(i);
            cell.and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no number in column {column}: {text}"))
        })
        .sum()
}

/// The count of operation `op` in a Lustre-style statistics parameter (`name count samples
/// ...` lines, as `mdt.FS-MDT0000.md_stats` and `ost.FS-OST0000.stats` print them), 0 if
/// it has none yet.
pub fn stat_count(param: &str, op: &str) -> u64 {
    get_param(None, param)
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == op).then(|| w.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

/// Requests of the kinds `ops` MDT0 of `fsname` served so far (`md_stats`).
pub fn md_requests(fsname: &str, ops: &[&str]) -> u64 {
    let param = format!("mdt.{fsname}-MDT0000.md_stats");
    ops.iter().map(|op| stat_count(&param, op)).sum()
}

/// Waits (at most 30 s, looking every 20 ms) until `cond` holds; panics naming `what`.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `nacre lfsck --namespace SOURCE` finds nothing.
pub fn lfsck_clean(source: &str) {
    let out = nacre(&["lfsck", "--namespace", source]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains(" 0 inconsistencies"),
        "{text}"
    );
}

/// (OST, object) of the first stripe of file `path`, as `nacre getstripe --json` reports.
pub fn object_of(path: &Path) -> (u32, nacre_types::ObjectId) {
    let l: serde_json::Value =
        serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap();
    let o = &l["objects"][0];
    (
        o["ost"].as_u64().unwrap() as u32,
        nacre_types::ObjectId {
            seq: o["seq"].as_u64().unwrap(),
            id: o["id"].as_u64().unwrap(),
        },
    )
}

/// The MDT `nacre getdirstripe` reports for directory `dir`.
pub fn dir_mdt(dir: &Path) -> u32 {
    let out = nacre_ok(&["getdirstripe", dir.to_str().unwrap()]);
    out.split_whitespace()
        .skip_while(|w| *w != "lmv_stripe_offset:")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap()
}

/// Inodes in use on MDT `index` of the file system mounted at `mnt` (`nacre df -i`).
pub fn inodes_used(mnt: &Path, index: u32) -> u64 {
    let df = nacre_ok(&["df", "-i", mnt.to_str().unwrap()]);
    let row = df
        .lines()
        .find(|l| l.contains(&format!("-MDT{index:04x}_UUID")))
        .unwrap_or_else(|| panic!("no MDT{index} in {df}"));
    row.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// A size-limited tmpfs mounted on a directory (a small device, to fill); unmounted
/// (lazily) when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it: `8m`) on `dir`, creating it.
    pub fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mkdir tmpfs mount point");
        sh(&format!(
            "mount -t tmpfs -o size={size} nacre-test-tmpfs {}",
            dir.display()
        ));
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Runs a shell command, asserting success; returns stdout.
pub fn sh(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn force_unmount(mnt: &Path) {
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mnt)
        .stderr(Stdio::null())
        .status();
}

/// An embedded file system (`nacre up`) in a temporary directory, mounted; unmounted on drop.
pub struct Embedded {
    /// Holds data directory and mount point.
    pub root: tempfile::TempDir,
    /// Mount point.
    pub mnt: PathBuf,
    /// Data directory.
    pub data: PathBuf,
    /// Extra `nacre up` arguments used (for restarts).
    pub args: Vec<String>,
    /// Environment (`NAME=VALUE`) `nacre up` runs with, e.g. a fault point.
    pub env: Vec<String>,
}

impl Embedded {
    /// Formats and mounts a file system with `osts` OSTs.
    pub fn start(osts: u32) -> Embedded {
        Embedded::start_with(osts, &[])
    }

    /// Like [`Embedded::start`] with extra `nacre up` arguments.
    pub fn start_with(osts: u32, extra: &[&str]) -> Embedded {
        let fs = Embedded::unstarted(osts, extra);
        fs.up();
        fs
    }

    /// Prepares directories without starting (so a test can, say, put an OST on a small
    /// tmpfs first); call [`Embedded::up`] to start.
    pub fn unstarted(osts: u32, extra: &[&str]) -> Embedded {
        let root = tempfile::Builder::new()
            .prefix("nacre-test")
            .tempdir_in(test_dir())
            .expect("tempdir");
        let mnt = root.path().join("mnt");
        let data = root.path().join("data");
        std::fs::create_dir_all(&mnt).expect("mkdir mnt");
        let mut args = vec!["--osts".to_string(), osts.to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Embedded {
            root,
            mnt,
            data,
            args,
            env: Vec::new(),
        }
    }

    /// Runs `nacre up` (again).
    pub fn up(&self) {
        let mut a = vec![
            "up".to_string(),
            self.data.display().to_string(),
            "--mount".into(),
            self.mnt.display().to_string(),
        ];
        a.extend(self.args.iter().cloned());
        if a.iter().any(|x| x == "--listen") && !a.iter().any(|x| x == "--key") {
            a.push("--insecure".into());
        }
        let out = Command::new("env")
            .args(&self.env)
            .arg(nacre_bin())
            .args(&a)
            .output()
            .expect("run nacre up");
        assert!(
            out.status.success(),
            "nacre {a:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `nacre down`.
    pub fn down(&self) {
        nacre_ok(&["down", &self.mnt.display().to_string()]);
    }

    /// Path inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        let log = mount_log(&self.mnt);
        let _ = nacre(&["down", &self.mnt.display().to_string()]);
        force_unmount(&self.mnt);
        forget_log(&log);
    }
}

/// Where tests put their files: `$NACRE_TEST_DIR` or the system temp directory.
pub fn test_dir() -> PathBuf {
    std::env::var_os("NACRE_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A `nacre server` process; killed (SIGKILL) on drop.
pub struct ServerProc {
    child: Child,
    /// Arguments it was started with (for restarts).
    pub args: Vec<String>,
    /// Its listen address.
    pub listen: String,
    /// Command prefix it runs under.
    pub prefix: Vec<String>,
}

impl ServerProc {
    /// Starts `nacre server --listen 127.0.0.1:PORT --target DIR...` and waits until it serves.
    pub fn start(port: u16, targets: &[&Path], extra: &[&str]) -> ServerProc {
        ServerProc::start_at(&format!("127.0.0.1:{port}"), targets, extra)
    }

    /// Starts `nacre server --listen LISTEN --target DIR...` and waits until it serves.
    pub fn start_at(listen: &str, targets: &[&Path], extra: &[&str]) -> ServerProc {
        ServerProc::spawn(server_args(listen, targets, extra), listen.to_string())
    }

    /// Starts `nacre ARGS` (a server command line) listening on `listen`, and waits until it
    /// serves.
    pub fn spawn(args: Vec<String>, listen: String) -> ServerProc {
        ServerProc::spawn_in(&[], args, listen)
    }

    /// Like [`ServerProc::spawn`], run under `prefix` (e.g. `nsenter --net=...`).
    pub fn spawn_in(prefix: &[String], args: Vec<String>, listen: String) -> ServerProc {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(nacre_bin());
                c
            }
            None => Command::new(nacre_bin()),
        };
        let mut child = cmd
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nacre server");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        match lines.next() {
            Some(Ok(l)) if l.contains("serving") => {}
            other => {
                let status = child.wait().ok();
                panic!("nacre server {args:?} did not start: {other:?} (exit {status:?})");
            }
        }
        std::thread::spawn(move || for _ in lines {});
        ServerProc {
            child,
            args,
            listen,
            prefix: prefix.to_vec(),
        }
    }

    /// Starts a server with fault point `fault` armed (`NACRE_FAULT`): it kills itself when
    /// it reaches that point. [`ServerProc::restart_disarmed`] brings it back without.
    pub fn start_armed(listen: &str, targets: &[&Path], extra: &[&str], fault: &str) -> ServerProc {
        let prefix = vec!["env".to_string(), format!("NACRE_FAULT={fault}")];
        ServerProc::spawn_in(
            &prefix,
            server_args(listen, targets, extra),
            listen.to_string(),
        )
    }

    /// Waits (at most `timeout`) for the process to exit; true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.try_wait().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Restarts the server (SIGKILL, then start) with fault point `fault` armed, e.g. after
    /// a test's setup ran unarmed.
    pub fn restart_armed(&mut self, fault: &str) {
        self.prefix
            .retain(|p| p != "env" && !p.starts_with("NACRE_FAULT="));
        self.prefix.push("env".to_string());
        self.prefix.push(format!("NACRE_FAULT={fault}"));
        self.restart();
    }

    /// Restarts the server with no fault point armed.
    pub fn restart_disarmed(&mut self) {
        self.prefix
            .retain(|p| p != "env" && !p.starts_with("NACRE_FAULT="));
        self.restart();
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The server process's pid (for `nacre ctl --pid`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's NID.
    pub fn nid(&self) -> String {
        format!("{}@tcp", self.listen)
    }

    /// Kills the process with SIGKILL and reaps it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the same server again (after [`ServerProc::kill9`]).
    pub fn restart(&mut self) {
        self.kill9();
        // Wait for the port to be free. A listener in another network namespace cannot be
        // probed from here; its sockets left by the kill do not block the new listener
        // (SO_REUSEADDR), only a live process would.
        let other_netns = self.prefix.iter().any(|p| p.starts_with("--net="));
        let deadline = Instant::now() + Duration::from_secs(if other_netns { 0 } else { 20 });
        loop {
            if TcpListener::bind(&self.listen).is_ok() || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let fresh = ServerProc::spawn_in(&self.prefix, self.args.clone(), self.listen.clone());
        let old = std::mem::replace(self, fresh);
        std::mem::forget(old);
    }

    /// Sends SIGTERM and waits (at most `timeout`) for the process to exit; true if it did.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.wait_exit(timeout)
    }

    /// Stops the process with SIGTERM and waits.
    pub fn stop(mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Options from `NACRE_TEST_MOUNT_ARGS` (`--option value` pairs, split at whitespace) for
/// every `nacre mount` a test starts, but those the test gives itself (`extra`): runs the
/// suites with a mount option on everywhere (e.g. `--async-dirops true`) to see what
/// making it the default would change.
fn env_mount_args(extra: &[&str]) -> Vec<String> {
    let Ok(v) = std::env::var("NACRE_TEST_MOUNT_ARGS") else {
        return Vec::new();
    };
    let words: Vec<&str> = v.split_whitespace().collect();
    words
        .chunks(2)
        .filter(|pair| !extra.contains(&pair[0]))
        .flat_map(|pair| pair.iter().map(|w| w.to_string()))
        .collect()
}

/// A `nacre mount` client process; unmounted on drop.
pub struct ClientMount {
    /// Mount point.
    pub mnt: PathBuf,
}

impl ClientMount {
    /// Mounts `source` (e.g. `127.0.0.1:9000@tcp:/demo`) at `mnt`.
    pub fn mount(source: &str, mnt: &Path, extra: &[&str]) -> ClientMount {
        ClientMount::mount_in(&[], source, mnt, extra)
    }

    /// Like [`ClientMount::mount`], with the client process run under `prefix` (for example
    /// `nsenter --net=/run/netns/HOST`, which keeps the mount visible to the test).
    pub fn mount_in(prefix: &[String], source: &str, mnt: &Path, extra: &[&str]) -> ClientMount {
        std::fs::create_dir_all(mnt).expect("mkdir mnt");
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(nacre_client_bin());
                c
            }
            None => Command::new(nacre_client_bin()),
        };
        let out = cmd
            .arg("mount")
            .arg(source)
            .arg(mnt)
            .args(extra)
            .args(env_mount_args(extra))
            .output()
            .expect("run nacre mount");
        assert!(
            out.status.success(),
            "nacre mount failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        ClientMount {
            mnt: mnt.to_path_buf(),
        }
    }
}

impl ClientMount {
    /// The pid of the client process serving this mount (found by its command line).
    pub fn pid(&self) -> Option<u32> {
        let want = self.mnt.display().to_string();
        pid_of_command(|args| args.iter().any(|a| a == "mount") && args.contains(&want))
    }
}

/// The pid of a process whose command line (its arguments) `matches`.
pub fn pid_of_command(matches: impl Fn(&[String]) -> bool) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if matches(&args) {
            return Some(pid);
        }
    }
    None
}

impl ClientMount {
    /// The log of the background mount process (`/run/nacre/<mount point>.log`).
    pub fn log_path(&self) -> PathBuf {
        mount_log(&self.mnt)
    }

    /// Aborts this mount's FUSE connection through fusectl (mounted if needed), as
    /// `echo 1 > /sys/fs/fuse/connections/N/abort` does: every request waiting on it fails
    /// with ENOTCONN at once. Lets a hang detector fail its test instead of hanging with it.
    pub fn abort(&self) -> std::io::Result<()> {
        let ctl = Path::new("/sys/fs/fuse/connections");
        if std::fs::read_dir(ctl)?.next().is_none() {
            // mount(2) itself: the caller may be unable to spawn `mount` (a hung mount makes
            // every exec from a process with files open on it wait).
            let (src, target, kind) = (c"fusectl", c"/sys/fs/fuse/connections", c"fusectl");
            // SAFETY: NUL-terminated strings that outlive the call; no data argument.
            let rc = unsafe {
                libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    kind.as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let want = self.mnt.display().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        // Fields: id parent major:minor root mount-point ...; fusectl names connections by
        // the minor device number.
        let minor = info
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.len() > 4 && f[4] == want)
            .and_then(|f| f[2].split(':').nth(1).map(str::to_string))
            .ok_or_else(|| std::io::Error::other(format!("{want} is not mounted")))?;
        std::fs::write(ctl.join(minor).join("abort"), "1")
    }
}

impl Drop for ClientMount {
    fn drop(&mut self) {
        let log = self.log_path();
        let _ = nacre(&["umount", &self.mnt.display().to_string()]);
        force_unmount(&self.mnt);
        forget_log(&log);
    }
}

/// The log a background mount process at `mnt` writes (`/run/nacre/<mount point>.log`).
pub fn mount_log(mnt: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(mnt).unwrap_or_else(|_| mnt.to_path_buf());
    nacre_types::run::mount_run_file(&canon, "log")
}

/// Removes a stopped mount's log (and API socket, if left), unless the test is failing:
/// a failed test's log stays for its reader; a passing one's would only fill `/run`
/// (a memory file system) run after run.
fn forget_log(log: &Path) {
    if std::thread::panicking() {
        return;
    }
    let _ = std::fs::remove_file(log);
    let _ = std::fs::remove_file(log.with_extension("api.sock"));
}

/// Formats a target with `nacre mkfs`.
pub fn mkfs(kind: &str, index: u32, fsname: &str, mgsnode: Option<&str>, dir: &Path) {
    let index = index.to_string();
    let mut a = vec!["mkfs", kind, "--index", &index, "--fsname", fsname];
    if kind == "--mgs" {
        a.push("--no-key");
    }
    if let Some(m) = mgsnode {
        a.push("--mgsnode");
        a.push(m);
    }
    let d = dir.display().to_string();
    a.push(&d);
    nacre_ok(&a);
}

/// `nacre keygen --from SERVER_KEY --role ROLE ... -o OUT`: a client key named after its
/// file (bound to `nodemap` if given), or an admin key (`role` "admin"), made from a file
/// system's server key, as an administrator hands them out.
pub fn derived_key(server_key: &Path, out: &Path, role: &str, nodemap: Option<&str>) -> PathBuf {
    let name = out.file_name().unwrap().to_string_lossy().to_string();
    let mut a = vec![
        "keygen",
        "--from",
        server_key.to_str().unwrap(),
        "--role",
        role,
        "-o",
        out.to_str().unwrap(),
    ];
    if role == "client" {
        a.extend(["--name", &name]);
    }
    if let Some(m) = nodemap {
        a.extend(["--nodemap", m]);
    }
    nacre_ok(&a);
    out.to_path_buf()
}

/// Deterministic pseudo-random bytes (xorshift), so tests can regenerate expected data.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Hosts on one machine: a network namespace per host, each with a veth into a shared bridge
/// and its own address `10.N.0.(i+1)/24`; with several rails, host `i` has one interface per
/// rail `k`, named `railK` inside its namespace, on rail `k`'s own bridge and subnet
/// `10.N.k.(i+1)/24`. Removed on drop.
pub struct NetLab {
    bridges: Vec<String>,
    /// The hosts.
    pub hosts: Vec<NetHost>,
}

/// One host of a [`NetLab`].
pub struct NetHost {
    /// Namespace name.
    pub netns: String,
    /// The host's address (on rail 0).
    pub addr: String,
    /// Its address on each rail.
    pub addrs: Vec<String>,
}

/// `server --listen LISTEN --target DIR... EXTRA...`.
fn server_args(listen: &str, targets: &[&Path], extra: &[&str]) -> Vec<String> {
    // `--insecure`: the suite's file systems are made with `mkfs --no-key` (a server given
    // `--key` in `extra` uses it all the same); tests/keys.rs covers the keyed default.
    let mut args = vec![
        "server".to_string(),
        "--insecure".into(),
        "--listen".into(),
        listen.to_string(),
    ];
    for t in targets {
        args.push("--target".into());
        args.push(t.display().to_string());
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

impl NetHost {
    /// Starts `nacre server` on this host, listening on its address at port 988, serving
    /// `targets`, with `extra` arguments; waits until it serves.
    pub fn server(&self, targets: &[&Path], extra: &[&str]) -> ServerProc {
        let listen = format!("{}:988", self.addr);
        ServerProc::spawn_in(&self.prefix(), server_args(&listen, targets, extra), listen)
    }

    /// Runs `nacre ARGS` on this host (in its network namespace) and returns its output.
    pub fn nacre(&self, args: &[&str]) -> Output {
        let prefix = self.prefix();
        Command::new(&prefix[0])
            .args(&prefix[1..])
            .arg(nacre_bin())
            .args(args)
            .output()
            .expect("run nacre")
    }

    /// Runs `f` on a thread of this process inside this host's network namespace: the
    /// sockets it opens are this host's (its address, its routes) and stay usable from any
    /// thread after. For tests that speak the protocol themselves from another host.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.netns);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("open the host's namespace");
            // Network namespaces are per thread: this one alone moves.
            let rc =
                unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("the thread in the namespace")
    }

    /// Command prefix that runs a program in this host's network namespace while keeping the
    /// mount namespace (so FUSE mounts stay visible).
    pub fn prefix(&self) -> Vec<String> {
        vec!["nsenter".into(), format!("--net=/run/netns/{}", self.netns)]
    }
}

impl NetLab {
    /// Creates `n` hosts with one interface each.
    pub fn new(n: usize) -> NetLab {
        NetLab::with_rails(n, 1)
    }

    /// Creates `n` hosts with `rails` interfaces each (`rail0`, `rail1`, … with several).
    pub fn with_rails(n: usize, rails: usize) -> NetLab {
        // Names are global (bridges, outer veth ends, namespaces): unique per lab, also for
        // several labs of one test process.
        static LABS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n_lab = LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = (std::process::id() % 1000) * 10 + n_lab % 10;
        let subnet = 16 + (id % 200);
        let mut lab = NetLab {
            bridges: Vec::new(),
            hosts: Vec::new(),
        };
        for k in 0..rails {
            let bridge = if k == 0 {
                format!("nbr{id}")
            } else {
                format!("nbr{id}r{k}")
            };
            sh(&format!(
                "ip link add {bridge} type bridge && ip link set {bridge} up"
            ));
            lab.bridges.push(bridge);
        }
        for i in 0..n {
            let netns = format!("nacre{id}h{i}");
            sh(&format!(
                "ip netns add {netns} && ip netns exec {netns} ip link set lo up"
            ));
            let mut addrs = Vec::new();
            for k in 0..rails {
                let suffix = if k == 0 {
                    String::new()
                } else {
                    format!("r{k}")
                };
                let (inside, outside) = (
                    format!("nv{id}h{i}{suffix}a"),
                    format!("nv{id}h{i}{suffix}b"),
                );
                let addr = format!("10.{subnet}.{k}.{}", i + 1);
                let rename = if rails > 1 {
                    format!(" && ip netns exec {netns} ip link set {inside} name rail{k}")
                } else {
                    String::new()
                };
                let dev = if rails > 1 {
                    format!("rail{k}")
                } else {
                    inside.clone()
                };
                sh(&format!(
                    "ip link add {inside} type veth peer name {outside} \
                     && ip link set {inside} netns {netns} && ip link set {outside} master {} up{rename} \
                     && ip netns exec {netns} ip addr add {addr}/24 dev {dev} \
                     && ip netns exec {netns} ip link set {dev} up",
                    lab.bridges[k]
                ));
                addrs.push(addr);
            }
            lab.hosts.push(NetHost {
                netns,
                addr: addrs[0].clone(),
                addrs,
            });
        }
        lab
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", &h.netns]).status();
        }
        for b in &self.bridges {
            let _ = Command::new("ip").args(["link", "del", b]).status();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_bindable_and_not_ephemeral() {
        let low = super::ephemeral_ports_start();
        for _ in 0..50 {
            let port = super::free_port();
            assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
            if low > super::PORT_MIN + 1_000 {
                assert!((super::PORT_MIN..low).contains(&port), "{port}");
            }
        }
    }
}
