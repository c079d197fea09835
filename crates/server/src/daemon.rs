//! Background mounts: detach, wait until mounted, stop on a signal or an external unmount.

use anyhow::{bail, Context};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where pid files of running mounts live.
pub use nacre_types::run::RUN_DIR;
/// How long `up`/`mount` wait for the background process to mount.
pub const MOUNT_WAIT_MS: u64 = 120_000;
/// How long `down` waits for the process to finish after asking it to stop.
pub const STOP_WAIT_MS: u64 = 60_000;
/// Most milliseconds a server or mount spends stopping cleanly after its stop signal (journals
/// synced, protection records marked clean, clients told). Past it, whatever is stuck (a call
/// to a dead peer, a thread in a retry) is abandoned and the process exits, as a kill -9
/// would, which loses nothing acknowledged; so SIGTERM stops a process within 5 s whatever
/// its peers do.
pub const STOP_GRACE_MS: u64 = 4_000;
/// How long `umount -f` waits for the mount's process after detaching the mount, before
/// SIGKILL.
pub const FORCE_STOP_WAIT_MS: u64 = 1_000;

/// The pid file of the process serving mount `mnt`.
pub fn pidfile(mnt: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(mnt).unwrap_or_else(|_| mnt.to_path_buf());
    nacre_types::run::mount_run_file(&canon, "pid")
}

fn unescape_mountinfo(s: &str) -> String {
    let mut out = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

/// Nacre mounts currently in the mount table: (mount point, fsname).
pub fn nacre_mounts() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let source = f.next()?;
            let target = f.next()?;
            let fstype = f.next()?;
            let ours = fstype == "fuse.nacre" || (fstype == "fuse" && source.starts_with("nacre:"));
            ours.then(|| {
                let fs = source.strip_prefix("nacre:").unwrap_or(source).to_string();
                (PathBuf::from(unescape_mountinfo(target)), fs)
            })
        })
        .collect()
}

/// True if `mnt` is a Nacre mount point.
pub fn is_mounted(mnt: &Path) -> bool {
    let canon = std::fs::canonicalize(mnt).unwrap_or_else(|_| mnt.to_path_buf());
    nacre_mounts().iter().any(|(p, _)| *p == canon)
}

/// Re-runs this command in the background: `args` (the command's arguments, without the
/// program name) with `--foreground` appended, logging to `log`; waits until `mnt` is
/// mounted and the process has written its pid file, which it does last, once the mount
/// serves everything (its node API too). Fails with the log's tail if the background
/// process exits.
pub fn detach(mnt: &Path, log: &Path, args: &[String]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the nacre executable")?;
    let mut args = args.to_vec();
    args.push("--foreground".into());
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let logfile = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(logfile.try_clone()?)
        .stderr(logfile);
    // SAFETY: setsid is async-signal-safe; it detaches the child from our session.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start the background process")?;
    let deadline = Instant::now() + Duration::from_millis(MOUNT_WAIT_MS);
    loop {
        if is_mounted(mnt) && pid_written(mnt) == Some(child.id()) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!(
                "background process exited ({status}) before mounting:\n{}",
                tail(log, 20)
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "timed out waiting for the mount at {}:\n{}",
                mnt.display(),
                tail(log, 20)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pid the pid file of `mnt` names, if it names one.
fn pid_written(mnt: &Path) -> Option<u32> {
    std::fs::read_to_string(pidfile(mnt))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The last `n` lines of a file.
pub fn tail(path: &Path, n: usize) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and every thread it starts later, so one
/// thread can wait for them with [`wait_stop`]. Call first thing in `main`.
pub fn block_stop_signals() {
    let set = stop_signals();
    // SAFETY: plain signal-mask change with an initialised set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// The set {SIGTERM, SIGINT, SIGHUP}.
fn stop_signals() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is valid storage; sigemptyset initialises it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Waits until a stop signal arrives or `finished()` turns true (polled every 100 ms).
pub fn wait_stop(finished: impl Fn() -> bool) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let set = stop_signals();
        let mut sig = 0;
        // SAFETY: sigwait on the set blocked by block_stop_signals.
        unsafe { libc::sigwait(&set, &mut sig) };
        let _ = tx.send(());
    });
    while rx.recv_timeout(Duration::from_millis(100)).is_err() {
        if finished() {
            return;
        }
    }
}

/// Called once the stop signal came, before stopping cleanly: bounds the clean stop by
/// [`STOP_GRACE_MS`] (then the process exits, saying what it abandoned) and makes a second
/// stop signal exit at once.
pub fn bound_stop(what: String) {
    let started = Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::mem::forget(done_tx); // never sent: the watchdog lives as long as the process
    let name = what.clone();
    let _ = std::thread::Builder::new()
        .name("stop-watchdog".into())
        .spawn(move || {
            let _ = done_rx.recv_timeout(Duration::from_millis(STOP_GRACE_MS));
            tracing::warn!(
                "{name}: clean stop unfinished after {} ms (a peer dead or hung); exiting now",
                started.elapsed().as_millis()
            );
            eprintln!("nacre: {name}: clean stop unfinished after {STOP_GRACE_MS} ms; exiting");
            std::process::exit(0);
        });
    let _ = std::thread::Builder::new()
        .name("stop-signal".into())
        .spawn(move || {
            let set = stop_signals();
            let mut sig = 0;
            // SAFETY: sigwait on the set blocked by block_stop_signals.
            unsafe { libc::sigwait(&set, &mut sig) };
            tracing::warn!("{what}: second stop signal; exiting now");
            std::process::exit(0);
        });
}

/// `umount -f`: detaches `mnt` at once whatever its servers do: aborts its FUSE connection
/// (requests waiting for a dead server fail with ENOTCONN now), unmounts it lazily, asks its
/// process to stop and kills it if it has not within [`FORCE_STOP_WAIT_MS`].
pub fn force_stop(mnt: &Path) -> anyhow::Result<()> {
    let pf = pidfile(mnt);
    let pid = std::fs::read_to_string(&pf)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|&p| alive(p));
    let mounted = is_mounted(mnt) || mnt_is_dead(mnt);
    if pid.is_none() && !mounted {
        bail!("{} is not a Nacre mount", mnt.display());
    }
    if let Err(e) = abort_connection(mnt) {
        tracing::debug!("abort of the FUSE connection of {}: {e}", mnt.display());
    }
    if mounted {
        // The mount's own process may unmount first, once its connection is aborted: then
        // the mount is gone, which is what was asked.
        if let Err(e) = lazy_unmount(mnt) {
            if is_mounted(mnt) || mnt_is_dead(mnt) {
                return Err(e);
            }
        }
    }
    if let Some(pid) = pid {
        // SAFETY: signalling the pid the mount recorded.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_millis(FORCE_STOP_WAIT_MS);
        while alive(pid) && !is_zombie(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(pid) && !is_zombie(pid) {
            // SAFETY: as above; the mount is already detached.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    let _ = std::fs::remove_file(&pf);
    Ok(())
}

/// Detaches `mnt` now (`fusermount3 -u -z`); it goes once nothing uses it.
fn lazy_unmount(mnt: &Path) -> anyhow::Result<()> {
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mnt)
        .status()?;
    if !st.success() {
        bail!("fusermount3 -u -z {} failed", mnt.display());
    }
    Ok(())
}

/// Aborts the FUSE connection of `mnt` through fusectl (mounted if needed), as
/// `echo 1 > /sys/fs/fuse/connections/N/abort` does.
fn abort_connection(mnt: &Path) -> anyhow::Result<()> {
    let ctl = Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(ctl)?.next().is_none() {
        let st = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(ctl)
            .status()?;
        if !st.success() {
            bail!("cannot mount fusectl");
        }
    }
    let want = std::fs::canonicalize(mnt).unwrap_or_else(|_| mnt.to_path_buf());
    let want = want.to_string_lossy().into_owned();
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    // Fields: id parent major:minor root mount-point ...; fusectl names a connection by the
    // minor device number.
    let minor = info
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 4 && unescape_mountinfo(f[4]) == want)
        .and_then(|f| f[2].split(':').nth(1).map(str::to_string))
        .with_context(|| format!("{} is not in the mount table", mnt.display()))?;
    std::fs::write(ctl.join(minor).join("abort"), "1")?;
    Ok(())
}

/// Tells the service manager this process is ready (systemd `Type=notify`: units ordered
/// after it start only now). Does nothing when not run by one (`NOTIFY_SOCKET` unset).
pub fn notify_ready() {
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
        tracing::warn!("cannot tell the service manager we are ready: {e}");
    }
}

/// Tells the service manager this process is stopping.
pub fn notify_stopping() {
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
}

/// Writes this process's pid file for `mnt`.
pub fn write_pidfile(mnt: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(RUN_DIR)?;
    let p = pidfile(mnt);
    std::fs::write(&p, std::process::id().to_string())?;
    Ok(p)
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Stops the process serving `mnt` (unmounting it) and waits for it to exit.
pub fn stop(mnt: &Path) -> anyhow::Result<()> {
    let pf = pidfile(mnt);
    let pid = std::fs::read_to_string(&pf)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    match pid {
        Some(pid) if alive(pid) => {
            // SAFETY: sending SIGTERM to a pid we recorded.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_millis(STOP_WAIT_MS);
            while alive(pid) && !is_zombie(pid) {
                if Instant::now() > deadline {
                    bail!(
                        "process {pid} serving {} did not stop within {STOP_WAIT_MS} ms",
                        mnt.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(&pf);
            Ok(())
        }
        _ => {
            let _ = std::fs::remove_file(&pf);
            if is_mounted(mnt) || mnt_is_dead(mnt) {
                return lazy_unmount(mnt);
            }
            bail!("{} is not a Nacre mount", mnt.display())
        }
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn mnt_is_dead(mnt: &Path) -> bool {
    matches!(std::fs::metadata(mnt), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}
