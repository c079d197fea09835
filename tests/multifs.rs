//! Several file systems on the same server processes (networked form: one process serves
//! the MGS and both file systems' MDT0000, another both file systems' OST0000 and
//! OST0001, each file system with its own key; a mount process per file system over TCP).
//! Every frame names its file system's slot beside the target index, so the two OST0000s
//! stay apart: data, names, pools, quotas, QoS rules and keys of one never reach the
//! other, across a kill -9 of both server processes; `nacre df` and `nacre ctl dl` show
//! each. Two file systems whose names share a slot are refused by a server process.

use nacre_net::rpc::{call, RpcError};
use nacre_net::{Connection, NetConfig};
use nacre_testkit::{
    get_param, mkfs, nacre, nacre_ok, object_of, pattern, test_dir, wait_for, ClientMount,
    ServerProc,
};
use nacre_types::{fs_slot, Status};
use nacre_wire::mgs::{MgsReply, MgsRequest};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const A: &str = "multa";
const B: &str = "multb";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Bytes allocated to object files under an OST directory.
fn object_bytes(ost: &Path) -> u64 {
    let mut total = 0;
    let mut dirs = vec![ost.join("O")];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            if meta.is_dir() {
                dirs.push(p);
            } else if name.bytes().all(|b| b.is_ascii_digit()) {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

/// Writes `data` to `path` and fsyncs it (so it is on the OSTs, not in write-behind).
fn write_synced(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// `nacre keygen FSNAME -o PATH --level LEVEL`.
fn keygen(dir: &Path, fsname: &str, level: &str) -> PathBuf {
    let p = dir.join(fsname);
    nacre_ok(&["keygen", fsname, "-o", s(&p), "--level", level]);
    p
}

/// Files uid 1000 creates in `dir` (up to `most`) before the first failure, and its error.
fn creates_as_1000(dir: &Path, most: usize) -> (usize, String) {
    for n in 0..most {
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid=1000",
                "--regid=1000",
                "--clear-groups",
                "--",
                "touch",
            ])
            .arg(dir.join(format!("f{n}")))
            .output()
            .unwrap();
        if !out.status.success() {
            return (n, String::from_utf8_lossy(&out.stderr).into_owned());
        }
    }
    (most, String::new())
}

/// A native connection proving `key`, its frames naming file system slot `slot`.
fn native(nid: &str, key: &Path, slot: u16) -> std::sync::Arc<Connection> {
    let key = nacre_net::sec::FsKey::load(key).unwrap();
    let net = NetConfig {
        key: Some(std::sync::Arc::new(key)),
        fs_slot: slot,
        connect_timeout_ms: 5_000,
        recovery_timeout_ms: 5_000,
        ..NetConfig::default()
    };
    Connection::connect(nid.parse().unwrap(), net).unwrap()
}

#[test]
fn two_file_systems_on_the_same_server_processes_stay_apart() {
    let root = tempfile::Builder::new()
        .prefix("nacre-multifs")
        .tempdir_in(test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    std::fs::create_dir(&keys).unwrap();
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Different keys and levels: A's frames carry a MAC, B's are encrypted.
    let (ka, kb) = (keygen(&keys, A, "integrity"), keygen(&keys, B, "privacy"));
    let mds_listen = format!("127.0.0.1:{}", nacre_testkit::free_port_at("127.0.0.1"));
    let oss_listen = format!("127.0.0.2:{}", nacre_testkit::free_port_at("127.0.0.2"));
    let mgs = format!("{mds_listen}@tcp");
    mkfs("--mgs", 0, A, None, &d("mgs"));
    for fs in [A, B] {
        mkfs("--mdt", 0, fs, Some(&mgs), &d(&format!("{fs}-mdt0")));
        for i in 0..2 {
            mkfs("--ost", i, fs, Some(&mgs), &d(&format!("{fs}-ost{i}")));
        }
    }
    let keyargs = ["--key", s(&ka), "--key", s(&kb)];
    let mut mds = ServerProc::start_at(
        &mds_listen,
        &[&d("mgs"), &d("multa-mdt0"), &d("multb-mdt0")],
        &keyargs,
    );
    let oss_dirs: Vec<PathBuf> = [A, B]
        .iter()
        .flat_map(|fs| (0..2).map(move |i| format!("{fs}-ost{i}")))
        .map(|n| d(&n))
        .collect();
    let refs: Vec<&Path> = oss_dirs.iter().map(PathBuf::as_path).collect();
    let mut oss = ServerProc::start_at(&oss_listen, &refs, &keyargs);
    let (src_a, src_b) = (format!("{mgs}:/{A}"), format!("{mgs}:/{B}"));
    let (mnt_a, mnt_b) = (d("mnt-a"), d("mnt-b"));
    let ma = ClientMount::mount(&src_a, &mnt_a, &["--key", s(&ka)]);
    let mb = ClientMount::mount(&src_b, &mnt_b, &["--key", s(&kb)]);
    let with_keys = |args: &[&str]| -> String {
        let mut all = keyargs.to_vec();
        all.extend_from_slice(args);
        nacre_ok(&all)
    };

    // `nacre ctl dl`: each process lists its devices, each with its file system and slot.
    let dl_oss = nacre_ok(&["ctl", "--pid", &oss.pid().to_string(), "dl"]);
    for fs in [A, B] {
        for i in 0..2 {
            let line = dl_oss
                .lines()
                .find(|l| l.contains(&format!(" {fs}-OST000{i} ")))
                .unwrap_or_else(|| panic!("{fs}-OST000{i} missing from dl:\n{dl_oss}"));
            assert!(line.contains(" UP ost "), "{line}");
            assert!(
                line.contains(&format!("fs={fs} slot={}", fs_slot(fs))),
                "{line}"
            );
        }
    }
    assert_ne!(fs_slot(A), fs_slot(B));
    let dl_mds = nacre_ok(&["ctl", "--pid", &mds.pid().to_string(), "dl"]);
    assert!(dl_mds.contains(" UP mgs MGS"), "{dl_mds}");
    assert!(dl_mds.contains(" multa-MDT0000 ") && dl_mds.contains(" multb-MDT0000 "));

    // Data and names: the same path in both, each its own bytes on its own OSTs.
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", s(&mnt_a.join("big"))]);
    let (data_a, data_b) = (pattern(1, 8 << 20), pattern(2, 6 << 20));
    let before_b: u64 = (0..2)
        .map(|i| object_bytes(&d(&format!("multb-ost{i}"))))
        .sum();
    write_synced(&mnt_a.join("big"), &data_a);
    let a_bytes: u64 = (0..2)
        .map(|i| object_bytes(&d(&format!("multa-ost{i}"))))
        .sum();
    let after_b: u64 = (0..2)
        .map(|i| object_bytes(&d(&format!("multb-ost{i}"))))
        .sum();
    assert!(a_bytes >= 8 << 20, "A's 8 MiB on A's OSTs: {a_bytes}");
    assert_eq!(after_b, before_b, "nothing of A's reached B's OSTs");
    assert!(
        !mnt_b.join("big").exists(),
        "A's file seen through B's mount"
    );
    write_synced(&mnt_b.join("big"), &data_b);
    std::fs::write(mnt_a.join("only-a"), b"a").unwrap();
    assert!(std::fs::read(mnt_a.join("big")).unwrap() == data_a);
    assert!(std::fs::read(mnt_b.join("big")).unwrap() == data_b);
    assert!(!mnt_b.join("only-a").exists());

    // `nacre df`: every mount, each with its own targets and usage.
    let df = nacre_ok(&["df"]);
    for fs in [A, B] {
        for t in ["MDT0000", "OST0000", "OST0001"] {
            assert!(df.contains(&format!("{fs}-{t}")), "{fs}-{t} missing:\n{df}");
        }
    }
    for (mnt, fs) in [(&mnt_a, A), (&mnt_b, B)] {
        let v: serde_json::Value =
            serde_json::from_str(&nacre_ok(&["df", "--json", s(mnt)])).unwrap();
        assert_eq!(v["fsname"], fs);
        let names: Vec<&str> = v["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names.iter().all(|n| n.starts_with(&format!("{fs}-"))),
            "{names:?}"
        );
    }

    // Pools: A's pool lives in A only.
    nacre_ok(&["pool", "new", "multa.flash"]);
    nacre_ok(&["pool", "add", "multa.flash", "OST1"]);
    wait_for("A's mount sees its pool", || {
        nacre(&["setstripe", "-p", "flash", s(&mnt_a.join("inflash"))])
            .status
            .success()
    });
    std::fs::write(mnt_a.join("inflash"), b"flash").unwrap();
    assert_eq!(
        object_of(&mnt_a.join("inflash")).0,
        1,
        "A's pool is A's OST1"
    );
    let out = nacre(&["setstripe", "-p", "flash", s(&mnt_b.join("noflash"))]);
    assert!(!out.status.success(), "B has no pool flash");

    // Quotas: a limit on A leaves uid 1000 unlimited on B.
    for m in [&mnt_a, &mnt_b] {
        std::fs::create_dir(m.join("home")).unwrap();
        std::fs::set_permissions(m.join("home"), std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    with_keys(&["setquota", "-u", "1000", "-I", "4", &src_a]);
    let (made_a, err) = creates_as_1000(&mnt_a.join("home"), 20);
    assert!(made_a <= 4, "A's inode limit of 4 let {made_a} through");
    assert!(err.contains("Disk quota exceeded"), "{err}");
    let (made_b, err) = creates_as_1000(&mnt_b.join("home"), 12);
    assert_eq!(made_b, 12, "B has no limit: {err}");
    let qb = serde_json::from_str::<serde_json::Value>(&with_keys(&[
        "quota", "--json", "-u", "1000", &src_b,
    ]))
    .unwrap()[0]
        .clone();
    assert_eq!(qb["inode_hard"], 0, "{qb}");
    assert_eq!(qb["inodes"], 12, "{qb}");

    // QoS: A's rule is held by A's MDT only.
    with_keys(&[
        "qos",
        "add",
        "slowa",
        "--uid",
        "1000",
        "--ops-rate",
        "50",
        &src_a,
    ]);
    assert!(with_keys(&["qos", "list", &src_a]).contains("slowa"));
    assert!(!with_keys(&["qos", "list", &src_b]).contains("slowa"));
    // Lookups by uid 1000 of names that do not exist (each one a request to the MDT).
    let mut n = 0;
    let mut lookups_as_1000 = |home: &Path| {
        for _ in 0..20 {
            n += 1;
            let _ = std::process::Command::new("setpriv")
                .args([
                    "--reuid=1000",
                    "--regid=1000",
                    "--clear-groups",
                    "--",
                    "stat",
                ])
                .arg(home.join(format!("none{n}")))
                .output()
                .unwrap();
        }
    };
    wait_for("A's MDT holds uid 1000's requests by A's rule", || {
        lookups_as_1000(&mnt_a.join("home"));
        get_param(Some(mds.pid()), "mdt.multa-MDT0000.qos_stats").contains("slowa")
    });
    lookups_as_1000(&mnt_b.join("home"));
    let stats_b = get_param(Some(mds.pid()), "mdt.multb-MDT0000.qos_stats");
    assert!(!stats_b.contains("slowa"), "{stats_b}");

    // Keys: A's key does not reach B. A mount of B given only A's key fails at once...
    let mnt_x = d("mnt-x");
    std::fs::create_dir(&mnt_x).unwrap();
    let out = nacre(&["--key", s(&ka), "mount", "--foreground", &src_b, s(&mnt_x)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "B mounted with A's key");
    assert!(err.contains("no key of file system 'multb'"), "{err}");
    // ...and a native client proving A's key, its frames naming B, is refused by both
    // server processes (EACCES), while the same connection naming A is served.
    let to_oss = native(&format!("{oss_listen}@tcp"), &ka, fs_slot(B));
    let statfs = OssCall::current(OssRequest::StatFs);
    let r = call::<_, OssReply>(&to_oss, statfs.req.opcode(), 0, &statfs);
    assert!(matches!(r, Err(RpcError::Status(Status::Access))), "{r:?}");
    let to_oss = native(&format!("{oss_listen}@tcp"), &ka, fs_slot(A));
    let r = call::<_, OssReply>(&to_oss, statfs.req.opcode(), 0, &statfs);
    assert!(matches!(r, Ok(OssReply::StatFs(_))), "{r:?}");
    let get_b = MgsRequest::GetConfig { fsname: B.into() };
    for slot in [fs_slot(B), fs_slot(A)] {
        let to_mgs = native(&mgs, &ka, slot);
        let r = call::<_, MgsReply>(&to_mgs, get_b.opcode(), 0, &get_b);
        assert!(matches!(r, Err(RpcError::Status(Status::Access))), "{r:?}");
    }

    // A kill -9 of both server processes: both file systems come back, each its own.
    oss.kill9();
    mds.kill9();
    mds.restart();
    oss.restart();
    for (m, data) in [(&mnt_a, &data_a), (&mnt_b, &data_b)] {
        wait_for("the mount back after the restart", || {
            std::fs::read(m.join("big")).is_ok_and(|d| d == *data)
        });
        write_synced(&m.join("after"), m.to_str().unwrap().as_bytes());
    }
    assert_eq!(
        std::fs::read(mnt_a.join("after")).unwrap(),
        s(&mnt_a).as_bytes()
    );
    assert_eq!(
        std::fs::read(mnt_b.join("after")).unwrap(),
        s(&mnt_b).as_bytes()
    );
    assert!(!mnt_b.join("only-a").exists() && mnt_a.join("only-a").exists());
    drop((ma, mb));
}

/// Two names whose slots collide (found by search: about 1 pair in 65,535).
fn colliding_names() -> (String, String) {
    let mut seen = std::collections::HashMap::new();
    for n in 0.. {
        let name = format!("c{n}");
        if let Some(other) = seen.insert(fs_slot(&name), name.clone()) {
            return (other, name);
        }
    }
    unreachable!()
}

#[test]
fn a_server_process_refuses_two_file_systems_sharing_a_slot() {
    let (x, y) = colliding_names();
    assert_eq!(fs_slot(&x), fs_slot(&y));
    let root = tempfile::Builder::new()
        .prefix("nacre-multifs")
        .tempdir_in(test_dir())
        .unwrap();
    let (dx, dy) = (root.path().join("x"), root.path().join("y"));
    mkfs("--ost", 0, &x, Some("127.0.0.1:1@tcp"), &dx);
    mkfs("--ost", 0, &y, Some("127.0.0.1:1@tcp"), &dy);
    let listen = format!("127.0.0.1:{}", nacre_testkit::free_port_at("127.0.0.1"));
    let out = std::process::Command::new("timeout")
        .args(["60"])
        .arg(nacre_testkit::nacre_bin())
        .args([
            "server",
            "--insecure",
            "--listen",
            &listen,
            "--target",
            s(&dx),
            "--target",
            s(&dy),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a process served both: {err}");
    assert!(
        err.contains(&format!("share frame slot {}", fs_slot(&x))),
        "{err}"
    );
}
