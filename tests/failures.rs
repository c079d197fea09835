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
    let small = fs.data.join("ost1");
    fs::create_dir_all(&small).unwrap();
    nacre_testkit::sh(&format!(
        "mount -t tmpfs -o size=8m nacre-test-full {}",
        small.display()
    ));
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unmount(small.clone());
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
    let _server = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0")], &[]);
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
    // An oversized frame header is refused before any allocation.
    let mut h = [0u8; 48];
    h[..4].copy_from_slice(b"NACR");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.write_all(&h);
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
            "# one process, three targets\nlisten = 127.0.0.1:{port}\nfsname = cf\ntarget = {}\ntarget = {}\ntarget = {}  # data\n",
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
