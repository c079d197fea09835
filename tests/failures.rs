//! Bad input and failures get clear errors and lose nothing.

use nacre_testkit::{
    free_port, mkfs, nacre, pattern, ClientMount, Embedded, Form, ServerProc, Spec, TestFs,
};
use std::fs;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn unreachable_mgs_fails_the_mount_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = nacre(&[
        "mount",
        &format!("127.0.0.1:{}@tcp:/x", free_port()),
        dir.path().to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        stderr(&out).contains("cannot reach the MGS"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_targets_and_configurations_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let nid = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "demo", None, &d("mgs"));
    mkfs("--mdt", 0, "demo", Some(&nid), &d("mdt0"));
    mkfs("--ost", 0, "demo", Some(&nid), &d("ost0"));
    // Formatting twice is refused; an OST needs an MGS NID; fsnames are checked.
    let again = nacre(&[
        "mkfs",
        "--ost",
        "--index",
        "0",
        "--fsname",
        "demo",
        "--mgsnode",
        &nid,
        d("ost0").to_str().unwrap(),
    ]);
    assert!(
        stderr(&again).contains("already holds target demo-OST0000"),
        "{}",
        stderr(&again)
    );
    let no_mgs = nacre(&[
        "mkfs",
        "--ost",
        "--index",
        "1",
        "--fsname",
        "demo",
        d("x").to_str().unwrap(),
    ]);
    assert!(
        stderr(&no_mgs).contains("--mgsnode is required"),
        "{}",
        stderr(&no_mgs)
    );
    let bad_name = nacre(&["mkfs", "--mgs", "--fsname", "a/b", d("y").to_str().unwrap()]);
    assert!(
        stderr(&bad_name).contains("fsname 'a/b'"),
        "{}",
        stderr(&bad_name)
    );
    // A server refuses a target of another file system.
    let other = nacre(&[
        "server",
        "--insecure",
        "--listen",
        "127.0.0.1:0",
        "--fsname",
        "other",
        "--target",
        d("ost0").to_str().unwrap(),
    ]);
    assert!(
        stderr(&other).contains("belongs to file system 'demo', not 'other'"),
        "{}",
        stderr(&other)
    );
    // A directory that was never formatted.
    let unformatted = nacre(&[
        "server",
        "--insecure",
        "--listen",
        "127.0.0.1:0",
        "--target",
        root.path().to_str().unwrap(),
    ]);
    assert!(
        stderr(&unformatted).contains("not a formatted Nacre target"),
        "{}",
        stderr(&unformatted)
    );
    let _server = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0")], &[]);
    // A second target claiming index 0 is refused by the MGS.
    mkfs("--ost", 0, "demo", Some(&nid), &d("impostor"));
    let steal = nacre(&[
        "server",
        "--insecure",
        "--listen",
        "127.0.0.1:0",
        "--target",
        d("impostor").to_str().unwrap(),
    ]);
    assert!(!steal.status.success());
    assert!(
        stderr(&steal).contains("registered by another target"),
        "{}",
        stderr(&steal)
    );
    // Mounting a file system the MGS does not know.
    fs::create_dir(d("m")).unwrap();
    let unknown = nacre(&["mount", &format!("{nid}:/nosuch"), d("m").to_str().unwrap()]);
    assert!(
        stderr(&unknown).contains("not known to the MGS"),
        "{}",
        stderr(&unknown)
    );
    // Bad mount options.
    let bad_opt = nacre(&[
        "mount",
        &format!("{nid}:/demo"),
        d("m").to_str().unwrap(),
        "--max-rpc-size",
        "64M",
    ]);
    assert!(
        stderr(&bad_opt).contains("max_rpc_size"),
        "{}",
        stderr(&bad_opt)
    );
}

#[test]
fn full_ost_gives_enospc_and_others_keep_working() {
    let fs = Embedded::unstarted(2, &[]);
    let _small = nacre_testkit::Tmpfs::mount(&fs.data.join("ost1"), "8m");
    fs.up();
    let on = |name: &str, ost: &str| {
        let p = fs.path(name);
        nacre_testkit::nacre_ok(&["setstripe", "-c", "1", "-i", ost, p.to_str().unwrap()]);
        p
    };
    let full = on("full", "1");
    let mut f = fs::OpenOptions::new().write(true).open(&full).unwrap();
    let chunk = vec![7u8; 1 << 20];
    let mut err = None;
    for _ in 0..32 {
        if let Err(e) = f.write_all(&chunk) {
            err = Some(e);
            break;
        }
    }
    let err = err.expect("writing 32 MiB to an 8 MiB OST must fail");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    drop(f);
    // The other OST keeps working, and the namespace too.
    let ok = on("ok", "0");
    let data = pattern(9, 16 << 20);
    fs::write(&ok, &data).unwrap();
    assert!(fs::read(&ok).unwrap() == data);
    fs::remove_file(&full).unwrap();
}

#[test]
fn malformed_frames_drop_the_connection_and_the_server_keeps_serving() {
    let root = tempfile::tempdir().unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let nid = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "fz", None, &d("mgs"));
    mkfs("--mdt", 0, "fz", Some(&nid), &d("mdt0"));
    mkfs("--ost", 0, "fz", Some(&nid), &d("ost0"));
    let server = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0")], &[]);
    let client = ClientMount::mount(&format!("{nid}:/fz"), &d("mnt"), &[]);
    fs::write(client.mnt.join("before"), b"b").unwrap();
    for seed in 0..50u64 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut junk = pattern(seed, 64 + (seed as usize * 37) % 4000);
        if seed % 2 == 0 {
            // A valid magic followed by garbage exercises the header checksum path.
            junk[..4].copy_from_slice(b"NACR");
        }
        let _ = s.write_all(&junk);
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "server must drop a connection that sent garbage");
    }
    // A well-formed header announcing an oversized body and bulk (its checksum right) is
    // refused before any allocation: the connection is dropped and counted.
    let bad_before = net_stat(server.pid(), "frames_bad");
    for (body_len, bulk_len) in [(u32::MAX, 0), (0, u32::MAX)] {
        let mut h = nacre_wire::Header::request(0x0201, 0, 7);
        h.body_len = body_len;
        h.bulk_len = bulk_len;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&h.encode()).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "an oversized frame drops its connection");
    }
    assert_eq!(
        net_stat(server.pid(), "frames_bad"),
        bad_before + 2,
        "each oversized header counted in frames_bad"
    );
    fs::write(client.mnt.join("after"), b"a").unwrap();
    assert_eq!(fs::read(client.mnt.join("before")).unwrap(), b"b");
    assert_eq!(fs::read(client.mnt.join("after")).unwrap(), b"a");
}

#[test]
fn server_config_file_is_read_and_checked() {
    let root = tempfile::tempdir().unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let nid = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "cf", None, &d("mgs"));
    mkfs("--mdt", 0, "cf", Some(&nid), &d("mdt0"));
    mkfs("--ost", 0, "cf", Some(&nid), &d("ost0"));
    let conf = d("server.conf");
    fs::write(
        &conf,
        format!(
            "# one process, three targets\nlisten = 127.0.0.1:{port}\nfsname = cf\ninsecure = true\ntarget = {}\ntarget = {}\ntarget = {}  # data\n",
            d("mgs").display(),
            d("mdt0").display(),
            d("ost0").display()
        ),
    )
    .unwrap();
    let args = vec![
        "server".to_string(),
        "--config".into(),
        conf.display().to_string(),
    ];
    let _server = ServerProc::spawn(args, format!("127.0.0.1:{port}"));
    let client = ClientMount::mount(&format!("{nid}:/cf"), &d("mnt"), &[]);
    fs::write(client.mnt.join("x"), b"configured").unwrap();
    assert_eq!(fs::read(client.mnt.join("x")).unwrap(), b"configured");
    let bad = d("bad.conf");
    fs::write(&bad, "listen = 127.0.0.1:0\nthreads = 4\n").unwrap();
    let out = nacre(&["server", "--config", bad.to_str().unwrap()]);
    assert!(
        stderr(&out).contains("bad.conf:2: unknown key 'threads'"),
        "{}",
        stderr(&out)
    );
}

/// A mount started before the file system's targets have registered with the MGS (a script
/// starting servers and clients together) waits for them, within its connect timeout,
/// instead of failing at once (regression: "file system has no MDT0 registered" from the
/// bench scripts, whose mount follows its MGS+MDT process at once); with none coming it
/// fails with a clear error after the wait.
#[test]
fn a_mount_waits_for_mdt0_to_register() {
    let root = tempfile::Builder::new()
        .prefix("nacre-mdt0wait")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let nid = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "mw", None, &d("mgs"));
    mkfs("--mdt", 0, "mw", Some(&nid), &d("mdt0"));
    mkfs("--ost", 0, "mw", Some(&nid), &d("ost0"));
    let _mgs = ServerProc::start(port, &[&d("mgs")], &[]);
    let source = format!("{nid}:/mw");
    fs::create_dir_all(d("none")).unwrap();
    let started = Instant::now();
    let out = nacre(&["mount", &source, d("none").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("is not known to the MGS"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() >= Duration::from_secs(4), "waited for it");
    // Started first, the mount is asking when MDT0 and the OST come up.
    let mnt = d("mnt");
    let mount = std::thread::spawn(move || ClientMount::mount(&source, &mnt, &[]));
    let _servers = ServerProc::start(free_port(), &[&d("mdt0"), &d("ost0")], &[]);
    let client = mount.join().expect("mounted once MDT0 registered");
    fs::write(client.mnt.join("x"), b"waited").unwrap();
    assert_eq!(fs::read(client.mnt.join("x")).unwrap(), b"waited");
}

/// Regression: a server whose listen address disappeared (interface removed) used to hang on
/// SIGTERM, its acceptor blocked in accept() while shutdown tried to wake it by connecting.
#[test]
fn server_stops_after_its_address_is_gone() {
    let lab = nacre_testkit::NetLab::new(1);
    let host = &lab.hosts[0];
    let root = tempfile::Builder::new()
        .prefix("nacre-gone")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let mgs = root.path().join("mgs");
    nacre_testkit::mkfs("--mgs", 0, "gone", None, &mgs);
    let mut server = host.server(&[&mgs], &[]);
    nacre_testkit::sh(&format!(
        "ip netns exec {} ip addr flush dev $(ip netns exec {} ls /sys/class/net | grep -v lo)",
        host.netns, host.netns
    ));
    let pid = server.pid() as i32;
    let started = std::time::Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let exited = loop {
        match server.try_wait() {
            Some(_) => break true,
            None if started.elapsed() > std::time::Duration::from_secs(10) => break false,
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    assert!(exited, "the server did not stop within 10 s of SIGTERM");
}

/// The panic policy of server threads: a service thread that hits a broken invariant (the
/// fault point `net.panic`, armed in the OSS through its control socket) stops its process at
/// once, not half alive; the OSS started again serves the write the client was waiting for.
/// Networked only: in the embedded form the same policy stops the one process, mount and all.
#[test]
fn a_panicking_server_thread_stops_its_process() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1));
    let oss = &mut fs.servers_mut()[1];
    let pid = oss.pid().to_string();
    nacre_testkit::nacre_ok(&["ctl", "--pid", &pid, "set_param", "fail_loc=net.panic"]);
    let p = fs.path("f");
    let data = pattern(9, 1 << 20);
    let writer = {
        let (p, data) = (p.clone(), data.clone());
        std::thread::spawn(move || fs::write(&p, &data))
    };
    let oss = &mut fs.servers_mut()[1];
    assert!(
        oss.wait_exit(Duration::from_secs(10)),
        "the OSS kept running after a service thread panicked"
    );
    use std::os::unix::process::ExitStatusExt;
    let status = oss.try_wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
    oss.restart();
    writer.join().unwrap().unwrap();
    assert!(fs::read(&p).unwrap() == data);
}

/// Sends SIGTERM to server `i` of `fs` and returns how long it took to exit (panics past 30 s).
fn terminate(fs: &mut TestFs, i: usize) -> Duration {
    let started = Instant::now();
    let server = &mut fs.servers_mut()[i];
    assert!(
        server.terminate(Duration::from_secs(30)),
        "server {} ignored SIGTERM",
        server.listen
    );
    started.elapsed()
}

/// A connection to `listen` that sent the first 20 bytes of a frame header and went quiet.
fn half_frame(listen: &str) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(listen).unwrap();
    s.write_all(&b"NACR"[..]).unwrap();
    s.write_all(&[1u8; 16]).unwrap();
    s
}

/// SIGTERM stops every `nacre server` within 5 s whatever its peers do, in either stop order:
/// OSSes stopped before the MDS (whose OST connections then retry), a client frozen
/// mid-write (SIGSTOP), connections that sent half a frame and went quiet, a clean stop that
/// hangs (fault point `server.shutdown~60000` in the MDS); then `nacre
/// umount -f` detaches the mount whose servers are all gone in under 2 s.
#[test]
fn sigterm_stops_servers_within_5_s_and_umount_f_detaches_within_2_s() {
    for oss_first in [true, false] {
        let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2));
        let client = fs.client_pid().expect("client process");
        let p = fs.path("big");
        let writer = {
            let p = p.clone();
            std::thread::spawn(move || {
                std::process::Command::new("dd")
                    .args(["if=/dev/zero", "bs=1M", "count=4096", "oflag=direct"])
                    .arg(format!("of={}", p.display()))
                    .status()
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while fs::metadata(&p).map_or(0, |m| m.len()) < 8 << 20 {
            assert!(Instant::now() < deadline, "the writer made no progress");
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: signalling the test's own client process.
        unsafe { libc::kill(client as i32, libc::SIGSTOP) };
        let listens: Vec<String> = fs.servers_mut().iter().map(|s| s.listen.clone()).collect();
        // A clean stop that would hang for a minute (a sync on a dead disk, a call to a dead
        // peer): the process must still be gone within 5 s.
        let mds = fs.servers_mut()[0].pid().to_string();
        nacre_testkit::nacre_ok(&[
            "ctl",
            "--pid",
            &mds,
            "set_param",
            "fail_loc=server.shutdown~60000",
        ]);
        let _quiet: Vec<_> = listens.iter().map(|l| half_frame(l)).collect();
        let order: Vec<usize> = match oss_first {
            true => vec![1, 2, 0],
            false => vec![0, 1, 2],
        };
        for i in order {
            let took = terminate(&mut fs, i);
            eprintln!(
                "SIGTERM to {} (OSSes first: {oss_first}): stopped in {took:?}",
                listens[i]
            );
            assert!(
                took < Duration::from_secs(5),
                "server {} took {took:?} to stop (OSSes first: {oss_first})",
                listens[i]
            );
        }
        // SAFETY: as above.
        unsafe { libc::kill(client as i32, libc::SIGCONT) };
        let started = Instant::now();
        let out = nacre(&["umount", "-f", fs.mnt.to_str().unwrap()]);
        let took = started.elapsed();
        eprintln!("umount -f with every server gone: {took:?}");
        assert!(out.status.success(), "umount -f: {}", stderr(&out));
        assert!(took < Duration::from_secs(2), "umount -f took {took:?}");
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
        assert!(!mounts.contains(fs.mnt.to_str().unwrap()), "{mounts}");
        let status = writer.join().unwrap().unwrap();
        assert!(!status.success(), "dd cannot have finished 4 GiB");
    }
}

/// A counter of a process's `net.stats`.
fn net_stat(pid: u32, name: &str) -> u64 {
    let text = nacre_testkit::get_param(Some(pid), "net.stats");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in net.stats: {text}"))
}

/// An MDT started while its OSTs do not answer (their OSS processes stopped: the ports
/// accept, nothing replies; as when the MDS host boots before its OSS hosts) serves at
/// within 8 s, less than one recovery timeout (10 s): its start asked each OST for its
/// free space and waited out a recovery timeout for each (the suite's restarts cost 21 s
/// each with two OSTs). The OSTs are then found by the next refresh, and the file system works.
#[test]
fn an_mdt_serves_at_once_while_its_osts_do_not_answer() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("mdtfirst"));
    fs::write(fs.path("f"), b"before").unwrap();
    let servers = fs.servers_mut();
    let oss: Vec<i32> = servers[1..].iter().map(|s| s.pid() as i32).collect();
    let signal = |sig: i32| {
        for pid in &oss {
            // SAFETY: signals to child processes of this test.
            unsafe { libc::kill(*pid, sig) };
        }
    };
    signal(libc::SIGSTOP);
    let (tx, rx) = std::sync::mpsc::channel();
    let started = std::thread::scope(|s| {
        let mdt = &mut servers[0];
        s.spawn(move || {
            mdt.restart();
            let _ = tx.send(());
        });
        let started = rx.recv_timeout(Duration::from_secs(8));
        signal(libc::SIGCONT);
        started
    });
    assert!(
        started.is_ok(),
        "the MDT did not serve within 8 s while its OSTs did not answer"
    );
    assert_eq!(fs::read(fs.path("f")).unwrap(), b"before");
    fs::write(fs.path("g"), b"after").unwrap();
    assert_eq!(fs::read(fs.path("g")).unwrap(), b"after");
}
