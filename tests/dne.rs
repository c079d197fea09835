//! Distributed namespace: several MDTs, in one server process or each in its own, on their
//! own addresses.

use nacre_testkit::{free_port, mkfs, nacre, nacre_ok, ClientMount, Embedded, ServerProc};

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
