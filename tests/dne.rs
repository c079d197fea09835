//! Distributed namespace: several MDTs, in one server process or each in its own, on their
//! own addresses.

use nacre_testkit::{free_port, mkfs, nacre, nacre_ok, ClientMount, Embedded, ServerProc};
use nacre_types::{Fid, FileKind};

#[test]
fn mdts_in_separate_processes_are_served_and_listed() {
    let root = tempfile::Builder::new()
        .prefix("nacre-dne")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let mgs = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "dne", None, &d("mgs"));
    for i in 0..3 {
        mkfs("--mdt", i, "dne", Some(&mgs), &d(&format!("mdt{i}")));
    }
    mkfs("--ost", 0, "dne", Some(&mgs), &d("ost0"));
    let _first = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0")], &[]);
    // MDT1 and MDT2 in a second process on another address.
    let _second = ServerProc::start_at(
        &format!("127.0.0.2:{}", free_port()),
        &[&d("mdt1"), &d("mdt2")],
        &[],
    );
    let client = ClientMount::mount(&format!("{mgs}:/dne"), &d("mnt"), &[]);
    std::fs::write(d("mnt").join("f"), b"hello").unwrap();
    let df = nacre_ok(&["df", "-i", d("mnt").to_str().unwrap()]);
    for i in 0..3 {
        let name = format!("dne-MDT{i:04x}");
        let row = df
            .lines()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| panic!("no {name} in\n{df}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        let used: u64 = cols[2].parse().unwrap();
        if i == 0 {
            assert!(used >= 2, "MDT0 holds the root and f: {row}");
        }
    }
    // As `lfs df -i`: OSTs are listed too (their object counts), the summary counts MDT inodes.
    assert!(df.contains("dne-OST0000"), "{df}");
    drop(client);
    // An MDT index FIDs cannot name is refused when formatting.
    let out = nacre(&[
        "mkfs",
        "--mdt",
        "--index",
        "5000",
        "--fsname",
        "dne",
        "--mgsnode",
        &mgs,
        d("big").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MDT index 5000 is too large"), "{err}");
}

#[test]
fn up_serves_several_mdts() {
    let fs = Embedded::start_with(1, &["--mdts", "3"]);
    let df = nacre_ok(&["df", "-i", fs.mnt.to_str().unwrap()]);
    for i in 0..3 {
        assert!(df.contains(&format!("MDT{i:04x}")), "{df}");
    }
    let bad = nacre(&[
        "up",
        fs.path("other").to_str().unwrap(),
        "--mount",
        fs.mnt.to_str().unwrap(),
        "--mdts",
        "0",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--mdts must be 1..=2048"));
}

/// Exit status and stdout of `nacre lfsck --namespace SOURCE`.
fn lfsck(source: &str) -> (bool, String) {
    let out = nacre(&["lfsck", "--namespace", source]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn lfsck_finds_nothing_after_real_operations_and_names_injected_damage() {
    use std::os::unix::fs::MetadataExt;
    let root = tempfile::Builder::new()
        .prefix("nacre-lfsck")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let mgs = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "ck", None, &d("mgs"));
    mkfs("--ost", 0, "ck", Some(&mgs), &d("ost0"));
    mkfs("--mdt", 0, "ck", Some(&mgs), &d("mdt0"));
    let _mgs_oss = ServerProc::start(port, &[&d("mgs"), &d("ost0")], &[]);
    let mut mds = ServerProc::start_at(&format!("127.0.0.2:{}", free_port()), &[&d("mdt0")], &[]);
    let source = format!("{mgs}:/ck");
    let client = ClientMount::mount(&source, &d("mnt"), &[]);
    let m = d("mnt");
    // Every kind of namespace change.
    std::fs::create_dir_all(m.join("a/b/c")).unwrap();
    std::fs::create_dir(m.join("gone")).unwrap();
    for i in 0..10 {
        std::fs::write(m.join(format!("a/f{i}")), b"x").unwrap();
    }
    std::fs::hard_link(m.join("a/f0"), m.join("a/b/link")).unwrap();
    std::os::unix::fs::symlink("a/f1", m.join("sym")).unwrap();
    std::fs::rename(m.join("a/f2"), m.join("a/b/c/moved")).unwrap();
    std::fs::rename(m.join("a/b/c"), m.join("c2")).unwrap();
    std::fs::remove_file(m.join("a/f3")).unwrap();
    std::fs::remove_dir(m.join("gone")).unwrap();
    // Unlinked while open: an orphan on purpose, not a finding.
    let open = std::fs::File::open(m.join("a/f4")).unwrap();
    std::fs::remove_file(m.join("a/f4")).unwrap();
    let (ok, out) = lfsck(&source);
    assert!(ok, "{out}");
    assert!(out.contains(" 0 inconsistencies"), "{out}");
    drop(open);
    let victim = Fid::from_ino(std::fs::metadata(m.join("a/f5")).unwrap().ino()).unwrap();
    drop(client);
    // Damage the stopped MDT's store directly: an entry naming nothing, a wrong link count.
    mds.kill9();
    {
        use nacre_kv::KvStore;
        use nacre_mds::records::{self, DirentRecord, InodeRecord};
        let kv = nacre_kv::FjallStore::open(&d("mdt0").join("db"), &records::TABLES).unwrap();
        let mut b = nacre_kv::Batch::new();
        let ghost = Fid::new(nacre_types::fid::FID_SEQ_NORMAL, 0xdead);
        b.put(
            records::DIRENTS,
            records::dirent_key(Fid::ROOT, b"ghost"),
            records::encode(&DirentRecord {
                fid: ghost,
                kind: FileKind::Regular,
            }),
        );
        let raw = kv.get(records::INODES, &victim.to_key()).unwrap().unwrap();
        let mut rec: InodeRecord = records::decode(&raw).unwrap();
        rec.attr.nlink += 1;
        b.put(
            records::INODES,
            victim.to_key().to_vec(),
            records::encode(&rec),
        );
        let t = kv.commit(b).unwrap();
        kv.wait_durable(t).unwrap();
    }
    mds.restart();
    let (ok, out) = lfsck(&source);
    assert!(!ok, "findings make lfsck fail: {out}");
    assert!(out.contains(" 2 inconsistencies"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("dangling") && l.contains("'ghost'")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("nlink") && l.contains(&victim.to_string())),
        "{out}"
    );
}
