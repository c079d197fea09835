//! Byte-range locks (`fcntl`) and `flock` across mounts: held at the file's MDT, so a lock
//! taken through one mount stops a conflicting one through another, a waiter is let in
//! when the holder lets go, a close or a killed holder releases them, a deadlock between
//! two mounts is refused, and a waiter can be interrupted or killed.

use nacre_testkit::{nacre_ok, on_both_forms, Form, Spec, TestFs};
use std::fs;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn lock_arg(typ: i32, start: i64, len: i64) -> libc::flock {
    // SAFETY: plain data, all zeroes is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = typ as i16;
    l.l_whence = libc::SEEK_SET as i16;
    l.l_start = start;
    l.l_len = len;
    l
}

/// `fcntl(F_SETLK or F_SETLKW)`.
fn setlk(f: &fs::File, typ: i32, start: i64, len: i64, wait: bool) -> std::io::Result<()> {
    let l = lock_arg(typ, start, len);
    let cmd = if wait { libc::F_SETLKW } else { libc::F_SETLK };
    // SAFETY: a valid descriptor and a valid flock.
    match unsafe { libc::fcntl(f.as_raw_fd(), cmd, &l) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `fcntl(F_GETLK)`: the lock in the way, as the kernel reports it.
fn getlk(f: &fs::File, typ: i32, start: i64, len: i64) -> libc::flock {
    let mut l = lock_arg(typ, start, len);
    // SAFETY: a valid descriptor and a valid flock.
    assert_eq!(
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETLK, &mut l) },
        0
    );
    l
}

fn flock(f: &fs::File, op: i32) -> std::io::Result<()> {
    // SAFETY: a valid descriptor.
    match unsafe { libc::flock(f.as_raw_fd(), op) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn rw(p: &std::path::Path) -> fs::File {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap()
}

/// `granted` and `waiting` of the MDT's byte-range locks.
fn flocks(fsname: &str) -> (u64, u64) {
    let text = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("ldlm.namespaces.mdt-{fsname}-MDT0000.flocks"),
    ]);
    let get = |k: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} "))?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text}"))
    };
    (get("granted"), get("waiting"))
}

fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::yield_now();
    }
}

fn locks_hold_across_mounts(form: Form) {
    let fsname = match form {
        Form::Embedded => "flocke1",
        Form::Networked => "flockn1",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    fs::write(fs.path("f"), vec![0u8; 4096]).unwrap();
    let a = rw(&fs.path("f"));
    let b = rw(&other_mnt.join("f"));

    // A write lock on bytes 0..100 through the first mount.
    setlk(&a, libc::F_WRLCK, 0, 100, false).unwrap();
    let e = setlk(&b, libc::F_WRLCK, 50, 10, false).unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)),
        "{e}"
    );
    assert!(setlk(&b, libc::F_RDLCK, 99, 1, false).is_err());
    // Past its range: free.
    setlk(&b, libc::F_RDLCK, 200, 100, false).unwrap();
    let held = getlk(&b, libc::F_RDLCK, 10, 1);
    assert_eq!(i32::from(held.l_type), libc::F_WRLCK);
    assert_eq!((held.l_start, held.l_len), (0, 100));
    assert_eq!(held.l_pid as u32, std::process::id());
    let free = getlk(&b, libc::F_WRLCK, 150, 10);
    assert_eq!(i32::from(free.l_type), libc::F_UNLCK);
    assert_eq!(flocks(fsname).0, 2);

    // A waiter through the other mount is let in when the holder lets go.
    let b = Arc::new(b);
    let got = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (b, got) = (b.clone(), got.clone());
        std::thread::spawn(move || {
            setlk(&b, libc::F_WRLCK, 0, 10, true).unwrap();
            got.store(true, Ordering::SeqCst);
        })
    };
    until("the waiter is parked at the MDT", || flocks(fsname).1 == 1);
    assert!(!got.load(Ordering::SeqCst), "granted over a held lock");
    setlk(&a, libc::F_UNLCK, 0, 100, false).unwrap();
    waiter.join().unwrap();
    assert!(got.load(Ordering::SeqCst));
    assert_eq!(flocks(fsname).1, 0);
    let e = setlk(&a, libc::F_RDLCK, 5, 1, false).unwrap_err();
    assert!(matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::EACCES)
    ));

    // Closing the holder's descriptor releases its POSIX locks.
    drop(Arc::try_unwrap(b).unwrap());
    until("the lock is free after the close", || {
        setlk(&a, libc::F_WRLCK, 0, 10, false).is_ok()
    });
    setlk(&a, libc::F_UNLCK, 0, 10, false).unwrap();

    // flock(): exclusive across mounts, released by close.
    let b = rw(&other_mnt.join("f"));
    flock(&a, libc::LOCK_EX).unwrap();
    let e = flock(&b, libc::LOCK_EX | libc::LOCK_NB).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EWOULDBLOCK));
    drop(a);
    until("flock is free after the holder closed", || {
        flock(&b, libc::LOCK_EX | libc::LOCK_NB).is_ok()
    });
    flock(&b, libc::LOCK_UN).unwrap();
    drop(b);
    until("no locks left", || flocks(fsname) == (0, 0));

    // A holder killed -9 loses its lock (its descriptors are closed by the kernel). `-o`:
    // the command it runs does not inherit the locked descriptor.
    let g = fs.path("g");
    fs::write(&g, b"x").unwrap();
    let mut holder = std::process::Command::new("flock")
        .args(["-o", "-x"])
        .arg(&g)
        .args(["sleep", "600"])
        .spawn()
        .unwrap();
    let b = rw(&other_mnt.join("g"));
    until("the holder holds", || {
        assert!(holder.try_wait().unwrap().is_none(), "flock(1) ended");
        // Taken while the holder is not there yet: let go again, so it can.
        match flock(&b, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => flock(&b, libc::LOCK_UN).map(|()| false).unwrap(),
            Err(_) => true,
        }
    });
    holder.kill().unwrap();
    holder.wait().unwrap();
    until("the killed holder's lock is released", || {
        flock(&b, libc::LOCK_EX | libc::LOCK_NB).is_ok()
    });
}

/// Two mounts each holding what the other waits for: the second wait is refused with
/// EDEADLK, the first is let in when the second lets go.
fn a_deadlock_across_mounts_is_refused(form: Form) {
    let fsname = match form {
        Form::Embedded => "flocke2",
        Form::Networked => "flockn2",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    fs::write(fs.path("f"), vec![0u8; 16]).unwrap();
    let a = Arc::new(rw(&fs.path("f")));
    let b = rw(&other_mnt.join("f"));
    setlk(&a, libc::F_WRLCK, 0, 1, false).unwrap();
    setlk(&b, libc::F_WRLCK, 1, 1, false).unwrap();
    let first = {
        let a = a.clone();
        std::thread::spawn(move || setlk(&a, libc::F_WRLCK, 1, 1, true))
    };
    until("the first waits", || flocks(fsname).1 == 1);
    let e = setlk(&b, libc::F_WRLCK, 0, 1, true).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EDEADLK));
    setlk(&b, libc::F_UNLCK, 1, 1, false).unwrap();
    first.join().unwrap().unwrap();
}

/// A process waiting for a lock another mount holds gives up when signalled: a handler
/// sees `EINTR` (Python raises from it), `SIGKILL` ends it (a FUSE request already read
/// by the mount would otherwise keep even a killed process waiting), and the holder keeps
/// its lock.
fn a_waiting_lock_can_be_interrupted_or_killed(form: Form) {
    let fsname = match form {
        Form::Embedded => "flocke4",
        Form::Networked => "flockn4",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    fs::write(fs.path("f"), vec![0u8; 16]).unwrap();
    let a = rw(&fs.path("f"));
    setlk(&a, libc::F_WRLCK, 0, 0, false).unwrap();
    let waiter = |script: &str| {
        std::process::Command::new("python3")
            .args(["-c", script, other_mnt.join("f").to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A handler that raises: the wait ends with EINTR, not a retry.
    let mut p = waiter(
        "import fcntl, signal, sys\n\
         def stop(*_):\n    raise InterruptedError\n\
         signal.signal(signal.SIGUSR1, stop)\n\
         f = open(sys.argv[1], 'r+')\n\
         try:\n    fcntl.lockf(f, fcntl.LOCK_EX)\n    print('locked')\n\
         except InterruptedError:\n    print('interrupted')\n",
    );
    until("the waiter waits", || flocks(fsname).1 == 1);
    // SAFETY: signalling a child process of this test.
    unsafe { libc::kill(p.id() as i32, libc::SIGUSR1) };
    let out = wait_done(p, "interrupted waiter");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "interrupted");
    // Killed while waiting: it ends.
    p = waiter("import fcntl, sys\nfcntl.lockf(open(sys.argv[1], 'r+'), fcntl.LOCK_EX)\n");
    until("the second waiter waits", || flocks(fsname).1 == 1);
    // SAFETY: as above.
    unsafe { libc::kill(p.id() as i32, libc::SIGKILL) };
    let out = wait_done(p, "killed waiter");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    until("no waiter left", || flocks(fsname) == (1, 0));
    // The holder still holds: another mount cannot take it.
    let b = rw(&other_mnt.join("f"));
    let e = setlk(&b, libc::F_WRLCK, 0, 0, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
}

/// The output of `p` once it ended (its end is waited for at most 30 s: a process that
/// cannot be ended is the failure this looks for).
fn wait_done(mut p: std::process::Child, what: &str) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(30);
    while p.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = p.kill();
            panic!("{what} never ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    p.wait_with_output().unwrap()
}

on_both_forms!(
    locks_hold_across_mounts,
    a_deadlock_across_mounts_is_refused,
    a_waiting_lock_can_be_interrupted_or_killed
);

/// A mount killed -9 while a process holds a lock through it: the MDT evicts the silent
/// client after its eviction timeout, which releases the lock, and the process waiting for
/// it on another mount gets it. Networked: the killed client is a process of its own.
#[test]
fn a_killed_mount_loses_its_locks_when_evicted() {
    let fsname = "flockn3";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("mdt.{fsname}-MDT0000.evict_timeout_ms=2000"),
    ]);
    let (b_mnt, c_mnt) = (fs.scratch().join("b"), fs.scratch().join("c"));
    fs::create_dir_all(&b_mnt).unwrap();
    fs::create_dir_all(&c_mnt).unwrap();
    // Both mounts ping often enough not to be taken for silent while they live (the
    // holder's mount, silent for longer than the eviction timeout under load, was evicted
    // before the waiter parked: its lock went early, and the waiter never waited).
    let _b = fs.mount_another(&b_mnt, &["--ping-interval-ms", "300"]);
    let c = fs.mount_another(&c_mnt, &["--ping-interval-ms", "300"]);
    fs::write(fs.path("f"), b"x").unwrap();
    let mut holder = std::process::Command::new("flock")
        .args(["-o", "-x"])
        .arg(c_mnt.join("f"))
        .args(["sleep", "600"])
        .spawn()
        .unwrap();
    until("the holder holds", || flocks(fsname).0 == 1);
    let b = Arc::new(rw(&b_mnt.join("f")));
    let waiter = {
        let b = b.clone();
        std::thread::spawn(move || flock(&b, libc::LOCK_EX))
    };
    until("the waiter is parked", || flocks(fsname).1 == 1);
    // SAFETY: signalling the mount process this test started.
    unsafe { libc::kill(c.pid().expect("mount pid") as i32, libc::SIGKILL) };
    waiter.join().unwrap().unwrap();
    let status = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("mdt.{fsname}-MDT0000.recovery_status"),
    ]);
    // The killed mount, which had the file open, was evicted (the first mount, idle, may
    // have been too); the waiting one was not.
    assert_eq!(
        status.matches("opens_dropped: 1").count(),
        1,
        "the killed mount was not evicted alone: {status}"
    );
    // `nacre df` of every mount names the dead one and still shows the live ones (it
    // failed whole on a dead mount before, and with it any `df` on the machine).
    let df = nacre_testkit::nacre(&["df"]);
    let (out, err) = (
        String::from_utf8_lossy(&df.stdout),
        String::from_utf8_lossy(&df.stderr),
    );
    assert!(df.status.success(), "nacre df: {out}{err}");
    assert!(out.contains(&format!("{fsname}-MDT0000")), "{out}");
    assert!(err.contains(&c_mnt.display().to_string()), "{err}");
    let _ = holder.kill();
    let _ = holder.wait();
}
