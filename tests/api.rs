//! The node's client API from Rust (`nacre-api`), on the networked form: an application
//! reaches the `nacre mount` process over its Unix socket (named by the mount's
//! `user.nacre.api`), never through FUSE; its identity is the kernel's; a process killed
//! mid-write leaves no open file behind it at the MDT.

use nacre_api::{Error, Node};
use nacre_testkit::{get_param, nacre_ok, pattern, wait_for, Form, Spec, TestFs};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn errno<T: std::fmt::Debug>(r: Result<T, Error>) -> i32 {
    r.expect_err("an error").errno()
}

/// The open handles the MDTs of `fs` hold for clients.
fn open_handles(fs: &TestFs) -> u64 {
    let pid = fs.server_pids()[0];
    get_param(Some(pid), "mdt.*.exports")
        .lines()
        .filter_map(|l| l.rsplit_once("open_handles: "))
        .filter_map(|(_, n)| n.trim().parse::<u64>().ok())
        .sum()
}

#[test]
fn data_namespace_and_striping_through_the_node_api() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("apin"));
    let node = Node::connect(&fs.mnt).unwrap();
    assert_eq!(node.fsname(), "apin");

    // Data: pieces of odd sizes at odd offsets, read back through the API and the mount.
    let data = pattern(11, (9 << 20) + 4321);
    let f = node.create("big", 0o644).unwrap();
    let mut at = 0;
    let mut step = 1;
    while at < data.len() {
        let end = (at + step * 77_777).min(data.len());
        assert_eq!(f.write_at(&data[at..end], at as u64).unwrap(), end - at);
        at = end;
        step = step % 40 + 3;
    }
    f.fsync().unwrap();
    assert_eq!(f.stat().unwrap().size, data.len() as u64);
    f.close().unwrap();
    // Read through the mount first: its read locks then cover the file, and the API's
    // read past the end (cut into several RPCs) must still stop at the end (regression:
    // the parts past it came back as zeros).
    assert!(
        std::fs::read(fs.path("big")).unwrap() == data,
        "the mount reads it"
    );
    let g = node.open("/big", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len() + 100];
    assert_eq!(
        g.read_at(&mut back, 0).unwrap(),
        data.len(),
        "short at the end"
    );
    assert!(back[..data.len()] == data[..]);
    let mut mid = [0u8; 1000];
    g.read_at(&mut mid, 5_000_000).unwrap();
    assert_eq!(mid[..], data[5_000_000..5_001_000]);
    // A file written through the mount is read through the API, and the other way
    // round after an API write over bytes the mount's page cache holds.
    std::fs::write(fs.path("viafuse"), b"through the kernel").unwrap();
    let v = node.open("viafuse", libc::O_RDWR, 0).unwrap();
    let mut buf = [0u8; 64];
    let n = v.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"through the kernel");
    v.write_all_at(b"THROUGH", 0).unwrap();
    v.close().unwrap();
    assert_eq!(
        std::fs::read(fs.path("viafuse")).unwrap(),
        b"THROUGH the kernel"
    );

    // Read, Write and Seek on a file's own position; readv/writev; O_APPEND.
    let mut c = node
        .open("cursor", libc::O_RDWR | libc::O_CREAT, 0o600)
        .unwrap();
    c.write_all(b"hello ").unwrap();
    c.write_all(b"world").unwrap();
    c.seek(SeekFrom::Start(6)).unwrap();
    let mut w = String::new();
    c.read_to_string(&mut w).unwrap();
    assert_eq!(w, "world");
    let (mut a, mut b) = ([0u8; 3], [0u8; 8]);
    let n = c
        .readv_at(
            &mut [
                std::io::IoSliceMut::new(&mut a),
                std::io::IoSliceMut::new(&mut b),
            ],
            0,
        )
        .unwrap();
    assert_eq!((n, &a, &b[..8]), (11, b"hel", &b"lo world"[..]));
    c.writev_at(
        &[std::io::IoSlice::new(b"J"), std::io::IoSlice::new(b"ELLO")],
        0,
    )
    .unwrap();
    drop(c);
    let ap = node
        .open("cursor", libc::O_WRONLY | libc::O_APPEND, 0)
        .unwrap();
    ap.write_all_at(b"!", 0).unwrap();
    ap.close().unwrap();
    assert_eq!(std::fs::read(fs.path("cursor")).unwrap(), b"JELLO world!");
    let t = node.open("cursor", libc::O_RDWR, 0).unwrap();
    t.set_len(5).unwrap();
    assert_eq!(node.stat("cursor").unwrap().size, 5);

    // The namespace.
    node.mkdir("d", 0o755).unwrap();
    node.mkdir("d/e", 0o700).unwrap();
    for i in 0..1500 {
        node.create(format!("d/f{i:04}"), 0o644).unwrap();
    }
    let names: Vec<String> = node
        .readdir("d")
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    assert_eq!(names.len(), 1501, "every entry over several pages");
    assert!(names.contains(&"e".into()) && names.contains(&"f1499".into()));
    let st = node.stat("d/e").unwrap();
    assert_eq!(st.mode & libc::S_IFMT, libc::S_IFDIR);
    let kernel = std::fs::metadata(fs.path("d/e")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.ino, kernel.ino(), "the inode number the mount shows");
    assert_eq!(node.stat("/").unwrap().ino, 1);
    node.rename("d/f0000", "d/e/moved").unwrap();
    node.link("d/e/moved", "d/hard").unwrap();
    assert_eq!(node.stat("d/hard").unwrap().nlink, 2);
    node.symlink("e/moved", "d/sym").unwrap();
    assert_eq!(node.readlink("d/sym").unwrap(), b"e/moved");
    assert_eq!(
        node.lstat("d/sym").unwrap().mode & libc::S_IFMT,
        libc::S_IFLNK
    );
    assert_eq!(
        node.stat("d/sym").unwrap().ino,
        node.stat("d/hard").unwrap().ino
    );
    assert_eq!(node.stat("d/e/../e/./moved").unwrap().nlink, 2);
    assert_eq!(
        node.stat("../../d/hard").unwrap().nlink,
        2,
        ".. stops at the root"
    );
    assert!(std::fs::symlink_metadata(fs.path("d/sym")).is_ok());
    assert_eq!(errno(node.stat("nope")), libc::ENOENT);
    assert_eq!(errno(node.stat("big/x")), libc::ENOTDIR);
    assert_eq!(errno(node.mkdir("d", 0o755)), libc::EEXIST);
    assert_eq!(
        errno(node.open("big", libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o644)),
        libc::EEXIST
    );
    assert_eq!(errno(node.open("d", libc::O_RDONLY, 0)), libc::EISDIR);
    assert_eq!(errno(node.rmdir("d")), libc::ENOTEMPTY);
    assert_eq!(errno(node.unlink("d/e")), libc::EISDIR);
    assert_eq!(errno(node.open("nope", libc::O_RDONLY, 0)), libc::ENOENT);
    node.unlink("d/sym").unwrap();
    node.unlink("d/hard").unwrap();
    node.unlink("d/e/moved").unwrap();
    node.rmdir("d/e").unwrap();
    assert!(!fs.path("d/e").exists());
    // A symbolic link out of the file system cannot be followed by the node's client.
    std::os::unix::fs::symlink("/etc", fs.path("out")).unwrap();
    assert_eq!(errno(node.stat("out/passwd")), libc::EXDEV);

    // Striping: made through the API, seen by `nacre getstripe`.
    node.setstripe("striped", 2, 1 << 20, None, 0o644).unwrap();
    let s = node.getstripe("striped").unwrap();
    assert_eq!((s.count, s.size), (2, 1 << 20));
    assert_ne!(s.osts[0], s.osts[1]);
    let l: serde_json::Value = serde_json::from_str(&nacre_ok(&[
        "getstripe",
        "--json",
        fs.path("striped").to_str().unwrap(),
    ]))
    .unwrap();
    assert_eq!(l["stripe_count"], 2);
    let one = pattern(5, 3 << 20);
    let w = node.open("striped", libc::O_WRONLY, 0).unwrap();
    w.write_all_at(&one, 0).unwrap();
    w.close().unwrap();
    assert!(std::fs::read(fs.path("striped")).unwrap() == one);
    assert_eq!(
        errno(node.setstripe("bad", 9, 1 << 20, None, 0o644)),
        libc::EINVAL,
        "more stripes than OSTs"
    );
    assert!(!fs.path("bad").exists(), "nothing half made");
}

/// The helper run as another process (uid 1000, or killed mid-write): does what
/// `NACRE_API_PROBE` says, on the mount at `NACRE_API_MOUNT`.
#[test]
#[ignore]
fn probe() {
    let (Ok(what), Ok(mnt)) = (
        std::env::var("NACRE_API_PROBE"),
        std::env::var("NACRE_API_MOUNT"),
    ) else {
        return;
    };
    let node = Node::connect(&mnt).unwrap();
    match what.as_str() {
        "read-secret" => {
            let e = errno(node.open("secret", libc::O_RDONLY, 0));
            println!("errno {e}");
            let own = node.create("home/mine", 0o600).unwrap();
            own.write_all_at(b"mine", 0).unwrap();
            own.close().unwrap();
            println!("made");
        }
        "ring-forever" => {
            let f = node.create("dying-ring", 0o644).unwrap();
            let mut ring = node.ring(16, 16 << 20).unwrap();
            ring.buffers().fill(9);
            println!("writing");
            let mut done = Vec::new();
            let mut at = 0u64;
            loop {
                while ring.in_flight() < 16 {
                    let slot = at % 16;
                    ring.prep_write(&f, at << 20, slot << 20, 1 << 20, at)
                        .unwrap();
                    ring.submit();
                    at += 1;
                }
                done.clear();
                ring.wait(1, &mut done, None).unwrap();
            }
        }
        "outlive-client" => {
            // SIGPIPE's default disposition, as a C program has: a write to the socket of
            // a node client that died must be an error, not this process's death.
            // SAFETY: sets one signal's disposition; nothing else here handles SIGPIPE.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
            node.stat("here").unwrap();
            println!("connected");
            let mut go = String::new();
            std::io::stdin().read_line(&mut go).unwrap();
            for _ in 0..3 {
                println!("errno {}", errno(node.stat("here")));
            }
        }
        "write-forever" => {
            let f = node.create("dying", 0o644).unwrap();
            let chunk = vec![7u8; 1 << 20];
            println!("writing");
            let mut at = 0;
            loop {
                f.write_all_at(&chunk, at).unwrap();
                at += chunk.len() as u64;
            }
        }
        _ => panic!("unknown probe {what}"),
    }
}

fn probe_cmd(prefix: &[&str], what: &str, mnt: &std::path::Path) -> Command {
    let exe = std::env::current_exe().unwrap();
    let mut c = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    c.args([
        "--exact",
        &nacre_tests::test_name(module_path!(), "probe"),
        "--ignored",
        "--nocapture",
    ])
    .env("NACRE_API_PROBE", what)
    .env("NACRE_API_MOUNT", mnt);
    c
}

#[test]
fn identity_is_the_kernels_and_a_killed_process_leaves_nothing_open() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("apii"));
    // Root's 0600 file: uid 1000 cannot read it through the API; its own file is its own.
    std::fs::write(fs.path("secret"), b"root only").unwrap();
    std::fs::set_permissions(fs.path("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(fs.path("home")).unwrap();
    std::fs::set_permissions(fs.path("home"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let setpriv = [
        "setpriv",
        "--reuid=1000",
        "--regid=1000",
        "--clear-groups",
        "--",
    ];
    let out = probe_cmd(&setpriv, "read-secret", &fs.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(&format!("errno {}", libc::EACCES)), "{text}");
    assert!(text.contains("made"), "{text}");
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(fs.path("home/mine")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (1000, 1000),
        "made as the kernel says it called"
    );

    // A writer killed -9 mid-write: its session's open file is closed at the MDT.
    let before = open_handles(&fs);
    let mut child = probe_cmd(&[], "write-forever", &fs.mnt)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    while !line.contains("writing") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    wait_for("the writer's data arriving", || {
        std::fs::metadata(fs.path("dying")).is_ok_and(|m| m.len() >= 4 << 20)
    });
    assert!(open_handles(&fs) > before, "the writer's open at the MDT");
    child.kill().unwrap();
    child.wait().unwrap();
    let stats = |k: &str| -> u64 {
        get_param(fs.client_pid(), "llite.apii.api_stats")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    wait_for("the killed session gone", || stats("sessions") == 0);
    assert_eq!(stats("files_open"), 0);
    assert!(stats("orphaned_files") >= 1);
    wait_for("no open left at the MDT", || open_handles(&fs) <= before);
    // The file is whole up to what was acknowledged, and usable by others at once.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(fs.path("dying"))
        .unwrap();
    f.write_all(b"after").unwrap();
    std::fs::remove_file(fs.path("dying")).unwrap();
}

/// An application (SIGPIPE at its default, as C programs run) whose node client is killed
/// -9 under it gets ENOTCONN from its next calls, instead of dying of SIGPIPE on the socket
/// the client left. (Regression: the API wrote with a plain `writev`.)
#[test]
fn an_application_outlives_its_node_client() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("apip"));
    std::fs::write(fs.path("here"), b"x").unwrap();
    let second = fs.data.join("second");
    let mount = nacre_testkit::ClientMount::mount(&fs.source(), &second, &[]);
    let mount_pid = mount.pid().expect("the second mount's process");
    let mut child = probe_cmd(&[], "outlive-client", &second)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("connected") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    // SAFETY: kill(2) of the mount process this test started.
    assert_eq!(unsafe { libc::kill(mount_pid as i32, libc::SIGKILL) }, 0);
    wait_for("the node client gone", || {
        !std::path::Path::new(&format!("/proc/{mount_pid}")).exists()
    });
    writeln!(child.stdin.take().unwrap(), "go").unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "the application died: {status:?}\n{rest}");
    let errnos: Vec<&str> = rest.lines().filter(|l| l.starts_with("errno ")).collect();
    assert_eq!(
        errnos,
        vec![format!("errno {}", libc::ENOTCONN).as_str(); 3],
        "{rest}"
    );
    drop(mount);
}

#[test]
fn without_a_mount_the_library_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = Node::connect(dir.path()).err().expect("no mount here");
    assert_eq!(e.errno(), libc::ENOTCONN);
    assert!(e.to_string().contains("names no node API"), "{e}");
}

/// The C example (examples/c/example.c), built against `libnacre.so` with the flags
/// `pkg-config nacre` gives, run on a networked mount: four threads write 16 MiB striped
/// over two OSTs through one handle; the mount then reads the same bytes.
#[test]
fn the_c_example_builds_with_pkg_config_and_runs_on_a_networked_mount() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("apic"));
    let built = nacre_testkit::nacre_bin().parent().unwrap().to_path_buf();
    let pc = built.join("pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "nacre"])
        .env("PKG_CONFIG_PATH", &pc)
        .output()
        .unwrap();
    assert!(flags.status.success(), "pkg-config nacre: {flags:?}");
    let flags = String::from_utf8(flags.stdout).unwrap();
    let header = std::fs::read_to_string(built.join("include/nacre.h")).unwrap();
    assert!(
        header.contains("#define NACRE_API_VERSION 1"),
        "a versioned header"
    );
    let build = |name: &str| {
        let exe = fs.scratch().join(name);
        let src = nacre_testkit::tests_dir().join(format!("../examples/c/{name}.c"));
        let cc = Command::new("cc")
            .args(["-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src)
            .args(flags.split_whitespace())
            .arg("-lpthread")
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        exe
    };
    let exe = build("example");
    let run = Command::new(&exe).arg(&fs.mnt).arg("c").output().unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("stripes 2 size 1048576"), "{out}");
    assert!(out.ends_with("ok\n"), "{out}");
    let data = std::fs::read(fs.path("c/renamed")).unwrap();
    assert_eq!(data.len(), 16 << 20);
    assert!(data
        .iter()
        .enumerate()
        .all(|(i, b)| *b == ((i * 7 + i / 4096) & 0xff) as u8));

    // The ring driver: two threads, 16 requests in flight each, writes then random reads,
    // every completion checked by the program.
    let bench = build("ringbench");
    let mnt = fs.mnt.to_str().unwrap();
    for (op, bs) in [
        ("write", "1048576"),
        ("randread", "4096"),
        ("randwrite", "4096"),
    ] {
        let run = Command::new(&bench)
            .args([mnt, "rb", op, bs, "16", "2", "64", "1"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{op}: {out}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert!(v["ops_s"].as_f64().unwrap() > 0.0, "{out}");
    }
    assert_eq!(std::fs::metadata(fs.path("rb")).unwrap().len(), 64 << 20);
}

/// A ring write larger than an RPC goes out as several RPCs, each sending its bytes from
/// the ring (a view of the application's buffer, no copy) when they are one run of it —
/// stripes of 4 MiB, as large as an RPC (`max_rpc_size`'s default) — and gathered when
/// they are not (64 KiB stripes: an RPC to one object takes every other 64 KiB of the
/// buffer). Every byte lands either way.
#[test]
fn a_large_ring_write_sends_each_rpc_from_the_ring() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("apiv"));
    let node = Node::connect(&fs.mnt).unwrap();
    let sent = || -> u64 {
        get_param(fs.client_pid(), "llite.apiv.api_stats")
            .lines()
            .find_map(|l| l.strip_prefix("sent_bytes "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let mut ring = node.ring(2, 8 << 20).unwrap();
    for (name, stripe, seed, from_ring) in
        [("wide", 4 << 20, 31, true), ("fine", 64 << 10, 32, false)]
    {
        node.setstripe(name, 2, stripe, None, 0o644).unwrap();
        let f = node.open(name, libc::O_RDWR, 0).unwrap();
        let data = pattern(seed, 8 << 20);
        ring.buffers().copy_from_slice(&data);
        let before = sent();
        ring.prep_write(&f, 0, 0, 8 << 20, 1).unwrap();
        assert_eq!(ring.submit(), 1);
        let mut done = Vec::new();
        ring.wait(1, &mut done, None).unwrap();
        assert_eq!(done[0].result, 8 << 20, "{name}");
        let delta = sent() - before;
        match from_ring {
            true => assert_eq!(delta, 8 << 20, "{name}: every RPC sent from the ring"),
            false => assert_eq!(delta, 0, "{name}: gathered"),
        }
        assert!(
            std::fs::read(fs.path(name)).unwrap() == data,
            "{name}: every byte"
        );
    }
}

/// Rings: one thread keeps 32 requests in flight — a batch of 32 MiB of writes published
/// at once, then 4 KiB reads at random offsets, 32 at a time — and every byte is checked;
/// a full ring, a buffer out of bounds and a bad handle are refused.
#[test]
fn a_ring_keeps_many_requests_in_flight_from_one_thread() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("apir"));
    let node = Node::connect(&fs.mnt).unwrap();
    node.setstripe("r", 2, 1 << 20, None, 0o644).unwrap();
    let f = node.open("r", libc::O_RDWR, 0).unwrap();
    let mut ring = node.ring(32, 32 << 20).unwrap();
    let data = pattern(21, 32 << 20);
    ring.buffers().copy_from_slice(&data);
    for i in 0..32u64 {
        ring.prep_write(&f, i << 20, i << 20, 1 << 20, i).unwrap();
    }
    assert_eq!(errno(ring.prep_write(&f, 0, 0, 1, 99)), libc::EBUSY, "full");
    assert_eq!(ring.submit(), 32);
    let mut done = Vec::new();
    assert_eq!(ring.wait(32, &mut done, None).unwrap(), 32);
    let mut seen: Vec<u64> = done.iter().map(|c| c.user_data).collect();
    seen.sort();
    assert_eq!(seen, (0..32).collect::<Vec<_>>());
    assert!(done.iter().all(|c| c.result == 1 << 20), "{done:?}");
    ring.prep_fsync(&f, 77).unwrap();
    ring.submit();
    done.clear();
    ring.wait(1, &mut done, None).unwrap();
    assert_eq!((done[0].user_data, done[0].result), (77, 0));
    assert!(
        std::fs::read(fs.path("r")).unwrap() == data,
        "the mount reads the ring's writes"
    );

    // 4 KiB reads at random offsets, 32 in flight, each into its own slot of the buffers.
    ring.buffers().fill(0);
    let mut rng = fastrand::Rng::with_seed(5);
    let (mut issued, mut checked) = (0u64, 0u64);
    let mut offsets = vec![0u64; 32];
    let mut free: Vec<u64> = (0..32).collect();
    while checked < 4000 {
        while issued < 4000 && !free.is_empty() {
            let slot = free.pop().unwrap();
            let off = rng.u64(0..(32 << 20) / 4096) * 4096;
            offsets[slot as usize] = off;
            ring.prep_read(&f, off, slot * 4096, 4096, slot).unwrap();
            issued += 1;
        }
        ring.submit();
        done.clear();
        ring.wait(1, &mut done, None).unwrap();
        for c in &done {
            assert_eq!(c.result, 4096);
            let slot = c.user_data as usize;
            let off = offsets[slot] as usize;
            assert!(ring.buffers()[slot * 4096..][..4096] == data[off..off + 4096]);
            free.push(slot as u64);
            checked += 1;
        }
    }
    // Those reads' data was received from the OSTs straight into the ring, and the
    // writes' sent from it (no copy in the node's client); every byte checked.
    let stat = |k: &str| -> u64 {
        get_param(fs.client_pid(), "llite.apir.api_stats")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    assert!(stat("landed_bytes") >= 1000 * 4096, "landed in the ring");
    assert!(stat("sent_bytes") >= 16 << 20, "sent from the ring");
    // Refused: a buffer past the ring's, a handle the session does not have.
    assert_eq!(errno(ring.prep_read(&f, 0, 32 << 20, 1, 1)), libc::EFAULT);
    ring.prep(nacre_wire::ring::Sqe {
        op: nacre_wire::ring::RING_OP_READ,
        len: 10,
        user_data: 5,
        handle: 999_999,
        ..Default::default()
    })
    .unwrap();
    ring.submit();
    done.clear();
    ring.wait(1, &mut done, None).unwrap();
    assert_eq!(done[0].result, -i64::from(libc::EBADF));
    // Past the end: short.
    ring.prep_read(&f, (32 << 20) - 100, 0, 4096, 6).unwrap();
    ring.submit();
    done.clear();
    ring.wait(1, &mut done, None).unwrap();
    assert_eq!(done[0].result, 100);
}

/// A process killed -9 with ring writes in flight leaves no session, ring or open file.
#[test]
fn a_process_killed_with_a_ring_in_flight_leaves_nothing_behind() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("apik"));
    let before = open_handles(&fs);
    let mut child = probe_cmd(&[], "ring-forever", &fs.mnt)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    while !line.contains("writing") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    wait_for("the ring's writes arriving", || {
        std::fs::metadata(fs.path("dying-ring")).is_ok_and(|m| m.len() >= 8 << 20)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let stats = || get_param(fs.client_pid(), "llite.apik.api_stats");
    wait_for("the killed session and its ring gone", || {
        stats().contains("sessions 0\n") && stats().contains("files_open 0\n")
    });
    wait_for("no open left at the MDT", || open_handles(&fs) <= before);
    std::fs::remove_file(fs.path("dying-ring")).unwrap();
}

/// A hostile application offering a ring whose memfd it could still shrink (no seal) is
/// refused `EINVAL`: the mount would otherwise fault (SIGBUS) when the file shrank under
/// its mapping. The mount keeps serving.
#[test]
fn a_ring_memfd_not_sealed_against_shrinking_is_refused() {
    use nacre_wire::api::{ApiReply, ApiRequest, API_VERSION};
    use nacre_wire::{decode_body, encode_body, Header, HEADER_BYTES};
    use rustix::fd::AsFd;
    use std::io::Write as _;
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("apis"));
    let socket = nacre_api::socket_of(&fs.mnt).unwrap();
    let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let mut xid = 0;
    let mut ask = |s: &mut std::os::unix::net::UnixStream, req: &ApiRequest| -> Header {
        xid += 1;
        let body = encode_body(req);
        let mut h = Header::request(req.opcode(), 0, xid);
        h.seal(&body, None, false);
        s.write_all(&h.encode()).unwrap();
        s.write_all(&body).unwrap();
        read_reply(s)
    };
    fn read_reply(s: &mut std::os::unix::net::UnixStream) -> Header {
        let mut head = [0u8; HEADER_BYTES];
        s.read_exact(&mut head).unwrap();
        let h = Header::decode(&head, 1 << 20).unwrap();
        let mut body = vec![0u8; h.body_len as usize];
        s.read_exact(&mut body).unwrap();
        if h.status == 0 {
            decode_body::<ApiReply>(&body).unwrap();
        }
        h
    }
    let hello = ApiRequest::Hello {
        version: API_VERSION,
        attach: None,
    };
    assert_eq!(ask(&mut s, &hello).status, 0);
    let setup = ApiRequest::RingSetup {
        entries: 8,
        buffer_bytes: 1 << 20,
    };
    assert_eq!(ask(&mut s, &setup).status, 0, "asked for the descriptors");
    let len = nacre_wire::ring::ring_bytes(8, 1 << 20);
    let mem = rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&mem, len).unwrap();
    let ev = || rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    let (a, b) = (ev(), ev());
    let fds = [mem.as_fd(), a.as_fd(), b.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &s,
        &[std::io::IoSlice::new(b"R")],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    assert_eq!(read_reply(&mut s).status, libc::EINVAL);
    // The same session, and the node API for everyone, go on.
    assert_eq!(
        ask(
            &mut s,
            &ApiRequest::Stat {
                path: b"/".to_vec(),
                follow: true
            }
        )
        .status,
        0
    );
    let node = Node::connect(&fs.mnt).unwrap();
    let mut ring = node.ring(8, 1 << 20).unwrap();
    assert_eq!(ring.entries(), 8, "a sealed one is taken");
    ring.buffers()[0] = 1;
}

/// `nacre up` and `nacre mount` return only once the mount serves all it serves, its node
/// API too (the kernel shows the mount earlier): an application started right after either
/// reaches the API. The node API's start is held 1.5 s to open the window a loaded machine
/// opened by chance (CI: `socket_of` found no `user.nacre.api` yet).
#[test]
fn a_mount_command_returns_once_its_node_api_serves() {
    for (form, fsname) in [(Form::Embedded, "apiwe"), (Form::Networked, "apiwn")] {
        let spec = Spec::osts(1)
            .fsname(fsname)
            .client_fault("mount.api.start~1500");
        let fs = TestFs::start_with(form, spec);
        let node = Node::connect(&fs.mnt).unwrap_or_else(|e| panic!("{form:?}: {e}"));
        assert_eq!(node.fsname(), fsname);
    }
}
