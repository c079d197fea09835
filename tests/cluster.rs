//! Whole file systems: several client mounts of one file system and restarts on both forms;
//! kill -9 of a server process and hosts in network namespaces on the networked form.

use nacre_testkit::{
    free_port, mkfs, nacre_ok, on_both_forms, pattern, sh, ClientMount, Form, ServerProc, TestFs,
};
use std::fs::{self, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

fn two_clients_write_disjoint_ranges_of_one_file(form: Form) {
    let a = TestFs::start(form, 4);
    let b = a.mount_another(&a.scratch().join("b"), &[]);
    let file_a = a.mnt.join("shared");
    let file_b = b.mnt.join("shared");
    nacre_ok(&[
        "setstripe",
        "-c",
        "4",
        "-S",
        "64K",
        file_a.to_str().unwrap(),
    ]);
    let block = 64 * 1024;
    let blocks = 48;
    let expected = pattern(11, block * blocks);
    let writer = |path: PathBuf, parity: usize, data: Vec<u8>| {
        std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            for i in (parity..blocks).step_by(2) {
                f.write_all_at(&data[i * block..(i + 1) * block], (i * block) as u64)
                    .unwrap();
            }
            f.sync_all().unwrap();
        })
    };
    let ta = writer(file_a.clone(), 0, expected.clone());
    let tb = writer(file_b.clone(), 1, expected.clone());
    ta.join().unwrap();
    tb.join().unwrap();
    for path in [&file_a, &file_b] {
        assert_eq!(fs::metadata(path).unwrap().len(), expected.len() as u64);
        assert!(
            fs::read(path).unwrap() == expected,
            "{} sees wrong bytes",
            path.display()
        );
    }
    // The objects live on both OSS processes.
    let l: serde_json::Value = serde_json::from_str(&nacre_ok(&[
        "getstripe",
        "--json",
        file_a.to_str().unwrap(),
    ]))
    .unwrap();
    let osts: Vec<u64> = l["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["ost"].as_u64().unwrap())
        .collect();
    assert!(
        osts.iter().any(|&o| o < 2) && osts.iter().any(|&o| o >= 2),
        "{osts:?}"
    );

    // After A extends the file and closes, B sees the new size and bytes at once.
    let mut f = OpenOptions::new().write(true).open(&file_a).unwrap();
    f.seek(SeekFrom::End(0)).unwrap();
    f.write_all(b"tail from a").unwrap();
    drop(f);
    assert_eq!(
        fs::metadata(&file_b).unwrap().len(),
        expected.len() as u64 + 11
    );
    let back = fs::read(&file_b).unwrap();
    assert_eq!(&back[expected.len()..], b"tail from a");
    // Namespace changes are visible across clients immediately.
    fs::create_dir(a.mnt.join("dir")).unwrap();
    fs::write(a.mnt.join("dir/x"), b"1").unwrap();
    fs::rename(a.mnt.join("dir/x"), a.mnt.join("dir/y")).unwrap();
    assert!(!b.mnt.join("dir/x").exists());
    assert_eq!(fs::read(b.mnt.join("dir/y")).unwrap(), b"1");
    fs::set_permissions(
        b.mnt.join("dir/y"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        fs::metadata(a.mnt.join("dir/y")).unwrap().mode() & 0o777,
        0o600
    );
}

fn restart_brings_back_all_data(form: Form) {
    let mut fs = TestFs::start(form, 3);
    let big = pattern(5, 5 << 20);
    fs::create_dir_all(fs.path("a/b")).unwrap();
    fs::write(fs.path("a/b/big"), &big).unwrap();
    nacre_ok(&[
        "setstripe",
        "-c",
        "3",
        fs.path("a/striped").to_str().unwrap(),
    ]);
    fs::write(fs.path("a/striped"), &big).unwrap();
    std::os::unix::fs::symlink("b/big", fs.path("a/link")).unwrap();
    sh(&format!(
        "setfattr -n user.k -v v {}",
        fs.path("a").display()
    ));
    fs.stop();
    assert!(!nacre_testkit::sh("cat /proc/mounts").contains(fs.mnt.to_str().unwrap()));
    fs.resume();
    assert_eq!(fs::read(fs.path("a/b/big")).unwrap(), big);
    assert_eq!(fs::read(fs.path("a/striped")).unwrap(), big);
    assert_eq!(fs::read(fs.path("a/link")).unwrap(), big);
    assert_eq!(
        sh(&format!(
            "getfattr -n user.k --only-values {}",
            fs.path("a").display()
        )),
        "v"
    );
    // New files after restart get fresh FIDs and objects, not reused ones.
    fs::write(fs.path("new"), b"n").unwrap();
    assert_eq!(fs::read(fs.path("a/b/big")).unwrap(), big);
    assert_ne!(
        fs::metadata(fs.path("new")).unwrap().ino(),
        fs::metadata(fs.path("a/b/big")).unwrap().ino()
    );
}

use std::os::unix::fs::MetadataExt;

#[test]
fn kill9_of_the_server_during_writes_loses_nothing_acknowledged() {
    let root = tempfile::Builder::new()
        .prefix("nacre-kill")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let port = free_port();
    let nid = format!("127.0.0.1:{port}@tcp");
    mkfs("--mgs", 0, "kill", None, &d("mgs"));
    mkfs("--mdt", 0, "kill", Some(&nid), &d("mdt0"));
    mkfs("--ost", 0, "kill", Some(&nid), &d("ost0"));
    mkfs("--ost", 1, "kill", Some(&nid), &d("ost1"));
    let mut server = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0"), &d("ost1")], &[]);
    let client = ClientMount::mount(&format!("{nid}:/kill"), &d("mnt"), &[]);
    let dir = client.mnt.clone();
    let writer = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for i in 0..60u64 {
            let p = dir.join(format!("file{i}"));
            let data = pattern(i, 256 * 1024 + i as usize * 100);
            let mut f = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&p)
                .unwrap();
            f.write_all(&data).unwrap();
            f.sync_all().unwrap();
            acked.push(i);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        acked
    });
    std::thread::sleep(std::time::Duration::from_millis(400));
    server.kill9();
    std::thread::sleep(std::time::Duration::from_millis(500));
    server.restart();
    let acked = writer
        .join()
        .expect("writer must not fail across the restart");
    assert_eq!(acked.len(), 60);
    for i in acked {
        let data = pattern(i, 256 * 1024 + i as usize * 100);
        assert!(
            fs::read(client.mnt.join(format!("file{i}"))).unwrap() == data,
            "file{i} damaged"
        );
    }
    // And after a second kill -9, everything fsync'd is still there, read by a fresh mount.
    server.kill9();
    server.restart();
    let fresh = ClientMount::mount(&format!("{nid}:/kill"), &d("mnt2"), &[]);
    assert_eq!(fs::read_dir(&fresh.mnt).unwrap().count(), 60);
    assert_eq!(
        fs::read(fresh.mnt.join("file59")).unwrap(),
        pattern(59, 256 * 1024 + 5900)
    );
}

#[test]
fn hosts_in_network_namespaces_form_one_file_system() {
    let lab = nacre_testkit::NetLab::new(4);
    let (mds_host, oss_host, client_a, client_b) =
        (&lab.hosts[0], &lab.hosts[1], &lab.hosts[2], &lab.hosts[3]);
    let root = tempfile::Builder::new()
        .prefix("nacre-netns")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let mgs_nid = format!("{}@tcp", mds_host.addr);
    mkfs("--mgs", 0, "ns", None, &d("mgs"));
    mkfs("--mdt", 0, "ns", Some(&mgs_nid), &d("mdt0"));
    mkfs("--ost", 0, "ns", Some(&mgs_nid), &d("ost0"));
    mkfs("--ost", 1, "ns", Some(&mgs_nid), &d("ost1"));
    let _mds = mds_host.server(&[&d("mgs"), &d("mdt0")], &[]);
    let _oss = oss_host.server(&[&d("ost0"), &d("ost1")], &[]);
    let source = format!("{mgs_nid}:/ns");
    let a = ClientMount::mount_in(&client_a.prefix(), &source, &d("a"), &[]);
    let b = ClientMount::mount_in(&client_b.prefix(), &source, &d("b"), &[]);
    let data = pattern(77, 3 << 20);
    fs::create_dir(a.mnt.join("wide")).unwrap();
    nacre_ok(&[
        "setstripe",
        "-c",
        "2",
        "-S",
        "64K",
        a.mnt.join("wide").to_str().unwrap(),
    ]);
    fs::write(a.mnt.join("wide/f"), &data).unwrap();
    assert_eq!(
        fs::metadata(b.mnt.join("wide/f")).unwrap().len(),
        data.len() as u64
    );
    assert!(
        fs::read(b.mnt.join("wide/f")).unwrap() == data,
        "client B reads A's bytes"
    );
    for ost in ["ost0", "ost1"] {
        let used = sh(&format!("du -sb {}/O | cut -f1", d(ost).display()));
        assert!(
            used.trim().parse::<u64>().unwrap() >= (1 << 20),
            "{ost} holds half the file"
        );
    }
    let df = nacre_ok(&["df", a.mnt.to_str().unwrap()]);
    assert!(df.contains("ns-OST0001_UUID"), "{df}");
}

on_both_forms!(
    two_clients_write_disjoint_ranges_of_one_file,
    restart_brings_back_all_data,
);
