//! Recovery (Lustre's recovery-small / replay-single style): every modifying operation
//! through a FUSE mount, with its request dropped, its reply dropped, or its server killed
//! after the change committed and before the reply; each must end exactly once, with no
//! error to the application.

use nacre_testkit::{free_port, free_port_at, mkfs, nacre_ok, ClientMount, ServerProc};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Client RPC timeout for these tests: a lost request or reply is resent after this.
const RPC_TIMEOUT_MS: &str = "1500";

/// MGS + OST in one process, MDT0 in another, one FUSE client.
struct Cluster {
    // Fields drop in this order: the clients unmount while their servers still run.
    second: Option<ClientMount>,
    client: ClientMount,
    source: String,
    mds: ServerProc,
    oss: ServerProc,
    _root: tempfile::TempDir,
}

impl Cluster {
    fn start(fsname: &str) -> Cluster {
        let root = tempfile::Builder::new()
            .prefix(&format!("nacre-recovery-{fsname}"))
            .tempdir_in(nacre_testkit::test_dir())
            .unwrap();
        let d = |n: &str| root.path().join(n);
        let port = free_port();
        let mgs = format!("127.0.0.1:{port}@tcp");
        mkfs("--mgs", 0, fsname, None, &d("mgs"));
        mkfs("--ost", 0, fsname, Some(&mgs), &d("ost0"));
        mkfs("--mdt", 0, fsname, Some(&mgs), &d("mdt0"));
        let oss = ServerProc::start(port, &[&d("mgs"), &d("ost0")], &[]);
        let listen = format!("127.0.0.2:{}", free_port_at("127.0.0.2"));
        let mds = ServerProc::start_at(&listen, &[&d("mdt0")], &[]);
        let source = format!("{mgs}:/{fsname}");
        let client = ClientMount::mount(&source, &d("mnt"), &["--rpc-timeout-ms", RPC_TIMEOUT_MS]);
        Cluster {
            second: None,
            client,
            source,
            mds,
            oss,
            _root: root,
        }
    }

    /// Mounts a second client (its own process, cache and connections).
    fn mount_second(&mut self) -> PathBuf {
        let mnt = self._root.path().join("mnt2");
        self.second = Some(ClientMount::mount(
            &self.source,
            &mnt,
            &["--rpc-timeout-ms", RPC_TIMEOUT_MS],
        ));
        mnt
    }
}

/// One operation under test: its fault-point name, what to prepare, what to run, what to
/// check after.
struct Op {
    name: &'static str,
    server: &'static str,
    prepare: fn(&Path),
    run: fn(&Path) -> std::io::Result<()>,
    check: fn(&Path),
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(p)
        .output()
        .unwrap();
    out.status.success().then_some(out.stdout)
}

fn ops() -> Vec<Op> {
    vec![
        Op {
            name: "create",
            server: "mds",
            prepare: |_| {},
            // O_EXCL: run twice, it would fail with EEXIST.
            run: |d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(d.join("new"))
                    .map(|_| ())
            },
            check: |d| assert!(d.join("new").is_file()),
        },
        Op {
            name: "mkdir",
            server: "mds",
            prepare: |_| {},
            run: |d| std::fs::create_dir(d.join("sub")),
            check: |d| assert!(d.join("sub").is_dir()),
        },
        Op {
            name: "unlink",
            server: "mds",
            prepare: |d| std::fs::write(d.join("gone"), b"x").unwrap(),
            run: |d| std::fs::remove_file(d.join("gone")),
            check: |d| assert!(!d.join("gone").exists()),
        },
        Op {
            name: "rmdir",
            server: "mds",
            prepare: |d| std::fs::create_dir(d.join("empty")).unwrap(),
            run: |d| std::fs::remove_dir(d.join("empty")),
            check: |d| assert!(!d.join("empty").exists()),
        },
        Op {
            name: "rename",
            server: "mds",
            prepare: |d| std::fs::write(d.join("from"), b"moving").unwrap(),
            run: |d| std::fs::rename(d.join("from"), d.join("to")),
            check: |d| {
                assert!(!d.join("from").exists());
                assert_eq!(std::fs::read(d.join("to")).unwrap(), b"moving");
            },
        },
        Op {
            name: "link",
            server: "mds",
            prepare: |d| std::fs::write(d.join("orig"), b"linked").unwrap(),
            run: |d| std::fs::hard_link(d.join("orig"), d.join("again")),
            check: |d| {
                assert_eq!(std::fs::metadata(d.join("orig")).unwrap().nlink(), 2);
                assert_eq!(std::fs::read(d.join("again")).unwrap(), b"linked");
            },
        },
        Op {
            name: "symlink",
            server: "mds",
            prepare: |_| {},
            run: |d| std::os::unix::fs::symlink("target", d.join("sym")),
            check: |d| {
                assert_eq!(
                    std::fs::read_link(d.join("sym")).unwrap(),
                    PathBuf::from("target")
                )
            },
        },
        Op {
            name: "setattr",
            server: "mds",
            prepare: |d| std::fs::write(d.join("mode"), b"x").unwrap(),
            run: |d| {
                std::fs::set_permissions(d.join("mode"), std::fs::Permissions::from_mode(0o600))
            },
            check: |d| {
                let m = std::fs::metadata(d.join("mode")).unwrap().permissions();
                assert_eq!(m.mode() & 0o7777, 0o600);
            },
        },
        Op {
            name: "setxattr",
            server: "mds",
            prepare: |d| std::fs::write(d.join("tagged"), b"x").unwrap(),
            run: |d| {
                let out = std::process::Command::new("setfattr")
                    .args(["-n", "user.tag", "-v", "0x7879"])
                    .arg(d.join("tagged"))
                    .output()?;
                match out.status.success() {
                    true => Ok(()),
                    false => Err(std::io::Error::other(
                        String::from_utf8_lossy(&out.stderr).into_owned(),
                    )),
                }
            },
            check: |d| assert_eq!(xattr(&d.join("tagged"), "user.tag").unwrap(), b"xy"),
        },
        Op {
            name: "write",
            server: "oss",
            prepare: |d| std::fs::write(d.join("data"), b"").unwrap(),
            run: |d| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(d.join("data"))?;
                // O_APPEND: a write applied twice would show twice.
                f.write_all(&[7u8; 100_000])?;
                f.sync_all()
            },
            check: |d| assert_eq!(std::fs::read(d.join("data")).unwrap(), vec![7u8; 100_000]),
        },
        Op {
            name: "punch",
            server: "oss",
            prepare: |d| std::fs::write(d.join("long"), vec![1u8; 300_000]).unwrap(),
            run: |d| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(d.join("long"))?
                    .set_len(1000)
            },
            check: |d| {
                assert_eq!(std::fs::read(d.join("long")).unwrap(), vec![1u8; 1000]);
            },
        },
    ]
}

/// Arms fault point `spec` in a running server through its control socket.
fn arm(server: &ServerProc, spec: &str) {
    let pid = server.pid().to_string();
    nacre_ok(&[
        "ctl",
        "--pid",
        &pid,
        "set_param",
        &format!("fail_loc={spec}"),
    ]);
}

/// How often the server's armed point fired.
fn fired(server: &ServerProc) -> u64 {
    let pid = server.pid().to_string();
    let v = nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "fail_fired"]);
    v.trim().parse().unwrap()
}

/// Every operation with its request dropped, its reply dropped, and its server killed after
/// the commit and before the reply: it returns success once, with the expected result.
#[test]
fn every_modifying_operation_survives_lost_messages_and_a_kill_before_the_reply() {
    let mut c = Cluster::start("rec");
    let mnt = c.client.mnt.clone();
    let faults = ["drop_request", "drop_reply", "after_commit_before_reply"];
    for (i, op) in ops().iter().enumerate() {
        for fault in faults {
            let point = format!("{}.{}.{fault}", op.server, op.name);
            let dir = mnt.join(format!("{}-{fault}-{i}", op.name));
            std::fs::create_dir(&dir).unwrap();
            (op.prepare)(&dir);
            let victim = if op.server == "mds" {
                &mut c.mds
            } else {
                &mut c.oss
            };
            arm(victim, &point);
            let run = op.run;
            let path = dir.clone();
            let worker = std::thread::spawn(move || run(&path));
            if fault == "after_commit_before_reply" {
                assert!(
                    victim.wait_exit(Duration::from_secs(30)),
                    "{point} never reached"
                );
                victim.restart_disarmed();
            }
            let result = worker.join().unwrap();
            assert!(result.is_ok(), "{point}: {result:?}");
            if fault != "after_commit_before_reply" {
                assert_eq!(fired(victim), 1, "{point} did not fire exactly once");
                arm(victim, "0");
            }
            (op.check)(&dir);
        }
    }
    // Everything still works, with nothing armed.
    c.mds.restart_disarmed();
    c.oss.restart_disarmed();
    std::fs::write(mnt.join("after"), b"fine").unwrap();
    assert_eq!(std::fs::read(mnt.join("after")).unwrap(), b"fine");
}

/// A bit flipped on the wire, in a frame's body or bulk, in either direction, is caught by
/// the frame checksums: the damaged frame is never used, the link is dropped and the
/// request resent, and the application sees correct data and no error.
#[test]
fn a_bit_flipped_on_the_wire_is_detected_and_the_rpc_resent() {
    let c = Cluster::start("wire");
    let mnt = c.client.mnt.clone();
    let data = nacre_testkit::pattern(7, 3 << 20);
    std::fs::write(mnt.join("f"), &data).unwrap();
    let client_pid = c.client.pid().expect("client pid");
    let on_client = |spec: &str| {
        let pid = client_pid.to_string();
        nacre_ok(&[
            "ctl",
            "--pid",
            &pid,
            "set_param",
            &format!("fail_loc={spec}"),
        ]);
    };
    let client_fired = || {
        let pid = client_pid.to_string();
        let v = nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "fail_fired"]);
        v.trim().parse::<u64>().unwrap()
    };
    // Server to client: a read's data (bulk), then a metadata reply (body).
    arm(&c.oss, "net.corrupt_bulk");
    drop_caches(&mnt.join("f"));
    let got = std::fs::read(mnt.join("f")).unwrap();
    let first_bad = got.iter().zip(&data).position(|(a, b)| a != b);
    assert!(
        got == data,
        "read data damaged: {} bytes, first bad at {first_bad:?}",
        got.len()
    );
    assert_eq!(fired(&c.oss), 1);
    arm(&c.oss, "0");
    arm(&c.mds, "net.corrupt_body");
    std::fs::create_dir(mnt.join("d")).unwrap();
    assert!(mnt.join("d").is_dir());
    assert_eq!(fired(&c.mds), 1);
    arm(&c.mds, "0");
    // Client to server: a write's data (bulk), then a metadata request (body).
    on_client("net.corrupt_bulk");
    let new = nacre_testkit::pattern(8, 2 << 20);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(mnt.join("g")).unwrap();
        f.write_all(&new).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(client_fired(), 1);
    on_client("0");
    drop_caches(&mnt.join("g"));
    assert!(
        std::fs::read(mnt.join("g")).unwrap() == new,
        "written data damaged"
    );
    on_client("net.corrupt_body");
    std::fs::write(mnt.join("h"), b"small").unwrap();
    assert_eq!(client_fired(), 1);
    on_client("0");
    assert_eq!(std::fs::read(mnt.join("h")).unwrap(), b"small");
}

/// Makes the next read of `p` go to the servers (the kernel's page cache dropped).
fn drop_caches(_p: &Path) {
    nacre_testkit::sh("sync; echo 3 > /proc/sys/vm/drop_caches");
}

/// A small deterministic generator (xorshift64*), so a failing flood can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Sends `bytes` on a new connection to `addr` while draining whatever comes back, then
/// closes; returns once the server closed or 2 s passed.
fn blast(addr: &str, bytes: &[u8]) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        panic!("server at {addr} refused a connection");
    };
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut r = s.try_clone().unwrap();
    let drain = std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
    });
    let _ = s.write_all(bytes); // the server may drop us half way: that is its answer
    let _ = s.shutdown(std::net::Shutdown::Write);
    drain.join().unwrap();
}

/// Random bytes, headers with random fields, oversized lengths and well-sealed frames with
/// random bodies for every opcode of every service, on many connections to a live MDS and
/// OSS: they drop such connections (or answer with errors) and keep serving the mount.
#[test]
fn servers_flooded_with_random_frames_drop_them_and_keep_serving() {
    use nacre_wire::Header;
    let c = Cluster::start("flood");
    let mnt = c.client.mnt.clone();
    std::fs::write(mnt.join("before"), b"ok").unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut frames = 0;
    for server in [&c.oss, &c.mds] {
        let addr = server.nid().trim_end_matches("@tcp").to_string();
        // Pure noise, and noise after a valid magic.
        for _ in 0..8 {
            let n = rng.below(200_000) as usize;
            blast(&addr, &rng.bytes(n));
            let mut b = b"NACR".to_vec();
            b.extend(rng.bytes(n));
            blast(&addr, &b);
        }
        // Headers with one field random (checksum made right), lengths at and past limits.
        for _ in 0..64 {
            let mut h = Header::request(rng.below(0x400) as u16, rng.below(4) as u32, 1);
            h.seal(b"", None, true);
            match rng.below(4) {
                0 => h.body_len = rng.next() as u32,
                1 => h.bulk_len = rng.next() as u32,
                2 => h.flags = rng.next() as u32,
                _ => h.version = rng.next() as u16,
            }
            let mut b = h.encode().to_vec();
            let n = rng.below(4096) as usize;
            b.extend(rng.bytes(n));
            blast(&addr, &b);
        }
        // Well-formed frames with random bodies (and sometimes bulk) for every opcode of
        // every service, many per connection: every body decoder meets garbage.
        for service in 0u16..4 {
            let mut stream = Vec::new();
            for op in 0u16..64 {
                for _ in 0..4 {
                    let opcode = (service << 8) | op;
                    let mut h = Header::request(opcode, rng.below(2) as u32, rng.next());
                    let n = rng.below(512) as usize;
                    let body = rng.bytes(n);
                    let bulk = (rng.below(4) == 0).then(|| rng.bytes(4096));
                    h.seal(&body, bulk.as_deref(), true);
                    stream.extend(h.encode());
                    stream.extend(&body);
                    stream.extend(bulk.unwrap_or_default());
                    frames += 1;
                }
            }
            blast(&addr, &stream);
        }
    }
    assert!(frames > 2000);
    // Both servers alive and serving: old data reads, new data writes, metadata works.
    let mut c = c;
    assert!(c.oss.try_wait().is_none(), "OSS died");
    assert!(c.mds.try_wait().is_none(), "MDS died");
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"ok");
    std::fs::create_dir(mnt.join("after")).unwrap();
    let data = nacre_testkit::pattern(3, 1 << 20);
    std::fs::write(mnt.join("after/f"), &data).unwrap();
    drop_caches(&mnt.join("after/f"));
    assert!(std::fs::read(mnt.join("after/f")).unwrap() == data);
}

/// Regression: `nacre ctl --pid P set_param` set the parameter in every nacre process of the
/// node and only filtered what it printed, so arming one server disarmed another test's.
#[test]
fn set_param_with_a_pid_changes_only_that_process() {
    let c = Cluster::start("onlypid");
    let get = |s: &ServerProc| {
        let pid = s.pid().to_string();
        nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "fail_loc"])
    };
    arm(&c.mds, "test.nowhere.drop_reply");
    assert_eq!(get(&c.mds).trim(), "test.nowhere.drop_reply");
    assert_eq!(get(&c.oss).trim(), "", "the other process was changed too");
    arm(&c.oss, "test.elsewhere@3");
    assert_eq!(get(&c.oss).trim(), "test.elsewhere@3");
    assert_eq!(get(&c.mds).trim(), "test.nowhere.drop_reply");
    arm(&c.mds, "0");
    assert_eq!(get(&c.mds).trim(), "");
    // A pid that is no nacre process is an error, not a silent no-op.
    let out = nacre_testkit::nacre(&["ctl", "--pid", "1", "get_param", "fail_loc"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no nacre process 1"));
}

/// A bit flipped in a stored object on the OST's disk: reading the damaged 4 KiB gives
/// EIO (never the damaged bytes), the rest of the file and other files read, the OST counts
/// it in `osd.*.checksum_errors`, and rewriting the range heals the file.
#[test]
fn a_bit_flipped_in_a_stored_object_is_an_error_not_data() {
    let c = Cluster::start("rot");
    let mnt = c.client.mnt.clone();
    let data = nacre_testkit::pattern(11, 1 << 20);
    std::fs::write(mnt.join("victim"), &data).unwrap();
    std::fs::write(mnt.join("bystander"), &data).unwrap();
    let l: serde_json::Value = serde_json::from_str(&nacre_ok(&[
        "getstripe",
        "--json",
        mnt.join("victim").to_str().unwrap(),
    ]))
    .unwrap();
    let o = &l["objects"][0];
    let (seq, id) = (o["seq"].as_u64().unwrap(), o["id"].as_u64().unwrap());
    let object = c
        ._root
        .path()
        .join(format!("ost0/O/{seq}/d{}/{id}", id % 32));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&object)
            .unwrap();
        f.write_all_at(&[data[300_000] ^ 0x01], 300_000).unwrap();
        f.sync_all().unwrap();
    }
    drop_caches(&mnt.join("victim"));
    let err = std::fs::read(mnt.join("victim")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // The chunks before the damage still read, and so does the other file.
    {
        use std::io::Read;
        let mut head = vec![0u8; 262_144];
        let mut f = std::fs::File::open(mnt.join("victim")).unwrap();
        f.read_exact(&mut head).unwrap();
        assert!(head[..] == data[..262_144]);
    }
    assert!(std::fs::read(mnt.join("bystander")).unwrap() == data);
    let oss_pid = c.oss.pid().to_string();
    let errors = nacre_ok(&[
        "ctl",
        "--pid",
        &oss_pid,
        "get_param",
        "-n",
        "osd.rot-OST0000.checksum_errors",
    ]);
    assert!(errors.trim().parse::<u64>().unwrap() >= 1, "{errors}");
    // Rewriting the file heals it.
    std::fs::write(mnt.join("victim"), &data).unwrap();
    drop_caches(&mnt.join("victim"));
    assert!(std::fs::read(mnt.join("victim")).unwrap() == data);
}

/// A two-client case (Lustre's replay-dual): client A's operation commits but its reply is
/// lost; before A resends, client B undoes or changes what A did; A's resend must get A's
/// saved answer and not run again over B's change.
struct Dual {
    name: &'static str,
    prepare: fn(&Path),
    a: fn(&Path) -> std::io::Result<()>,
    committed: fn(&Path) -> bool,
    b: fn(&Path) -> std::io::Result<()>,
    check: fn(&Path),
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn duals() -> Vec<Dual> {
    use std::fs;
    use std::os::unix::fs::symlink;
    vec![
        Dual {
            name: "create",
            prepare: |_| {},
            a: |d| {
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(d.join("x"))
                    .map(|_| ())
            },
            committed: |d| d.join("x").exists(),
            b: |d| fs::remove_file(d.join("x")),
            check: |d| assert!(!d.join("x").exists(), "create ran twice"),
        },
        Dual {
            name: "mkdir",
            prepare: |_| {},
            a: |d| fs::create_dir(d.join("x")),
            committed: |d| d.join("x").is_dir(),
            b: |d| fs::remove_dir(d.join("x")),
            check: |d| assert!(!d.join("x").exists(), "mkdir ran twice"),
        },
        Dual {
            name: "unlink",
            prepare: |d| fs::write(d.join("x"), b"old").unwrap(),
            a: |d| fs::remove_file(d.join("x")),
            committed: |d| !d.join("x").exists(),
            b: |d| fs::write(d.join("x"), b"new"),
            check: |d| assert_eq!(fs::read(d.join("x")).unwrap(), b"new", "unlink ran twice"),
        },
        Dual {
            name: "rename",
            prepare: |d| fs::write(d.join("f"), b"f").unwrap(),
            a: |d| fs::rename(d.join("f"), d.join("g")),
            committed: |d| d.join("g").exists(),
            b: |d| fs::rename(d.join("g"), d.join("f")),
            check: |d| {
                assert!(
                    d.join("f").exists() && !d.join("g").exists(),
                    "rename ran twice"
                )
            },
        },
        Dual {
            name: "link",
            prepare: |d| fs::write(d.join("f"), b"f").unwrap(),
            a: |d| fs::hard_link(d.join("f"), d.join("h")),
            committed: |d| d.join("h").exists(),
            b: |d| fs::remove_file(d.join("h")),
            check: |d| {
                assert!(!d.join("h").exists(), "link ran twice");
                assert_eq!(fs::metadata(d.join("f")).unwrap().nlink(), 1);
            },
        },
        Dual {
            name: "symlink",
            prepare: |_| {},
            a: |d| symlink("t", d.join("s")),
            committed: |d| d.join("s").symlink_metadata().is_ok(),
            b: |d| fs::remove_file(d.join("s")),
            check: |d| assert!(d.join("s").symlink_metadata().is_err(), "symlink ran twice"),
        },
        Dual {
            name: "setattr",
            prepare: |d| {
                fs::write(d.join("f"), b"f").unwrap();
                fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
            },
            a: |d| fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o600)),
            committed: |d| mode_of(&d.join("f")) == 0o600,
            b: |d| fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o640)),
            check: |d| assert_eq!(mode_of(&d.join("f")), 0o640, "setattr ran twice"),
        },
    ]
}

/// Two clients: A's reply is lost after its change committed, B changes the same names
/// before A resends; every A operation succeeds once and B's change stands.
#[test]
fn a_resent_request_does_not_run_again_over_another_clients_change() {
    let mut c = Cluster::start("dual");
    let mnt_a = c.client.mnt.clone();
    let mnt_b = c.mount_second();
    for (i, op) in duals().iter().enumerate() {
        let dir = format!("{}-{i}", op.name);
        std::fs::create_dir(mnt_a.join(&dir)).unwrap();
        let (da, db) = (mnt_a.join(&dir), mnt_b.join(&dir));
        (op.prepare)(&da);
        let point = format!("mds.{}.drop_reply", op.name);
        arm(&c.mds, &point);
        let a = op.a;
        let path = da.clone();
        let started = std::time::Instant::now();
        let worker = std::thread::spawn(move || a(&path));
        // B sees A's change (the reply to A is lost), and acts before A's resend.
        while !(op.committed)(&db) {
            assert!(
                !worker.is_finished(),
                "{point}: A finished before its change showed"
            );
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{point}: no change"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let b_result = (op.b)(&db);
        let b_done = started.elapsed();
        assert!(b_result.is_ok(), "{point}: B: {b_result:?}");
        let a_result = worker.join().unwrap();
        assert!(a_result.is_ok(), "{point}: A: {a_result:?}");
        assert_eq!(fired(&c.mds), 1, "{point} did not fire");
        arm(&c.mds, "0");
        // B must have acted inside A's wait, else this row proves nothing.
        assert!(
            b_done < Duration::from_millis(RPC_TIMEOUT_MS.parse().unwrap()),
            "{point}: B acted only after {b_done:?}"
        );
        (op.check)(&da);
        (op.check)(&db);
    }
}
