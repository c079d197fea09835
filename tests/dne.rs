//! Distributed namespace: several MDTs, in one server process or each in its own, on their
//! own addresses.
//!
//! Tests without faults run on both forms (`on_both_forms!`). Tests that arm fault points in
//! one MDT, kill or pause one MDT process, or place hosts in network namespaces need each
//! target in its own process, so they run on the networked form only.

use nacre_testkit::{
    dir_mdt, free_port, free_port_at, inodes_used, lfsck_clean, mkfs, nacre, nacre_ok,
    on_both_forms, ClientMount, Form, ServerProc, Spec, TestFs,
};
use nacre_types::{Fid, FileKind};
use std::time::Duration;

/// A scratch directory with a formatted MGS for file system `fsname` in `mgs/`, the MGS port
/// to serve it on, and its NID.
fn scratch(fsname: &str) -> (tempfile::TempDir, u16, String) {
    let root = tempfile::Builder::new()
        .prefix(&format!("nacre-dne-{fsname}"))
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let port = free_port();
    mkfs("--mgs", 0, fsname, None, &root.path().join("mgs"));
    (root, port, format!("127.0.0.1:{port}@tcp"))
}

#[test]
fn mdts_in_separate_processes_are_served_and_listed() {
    let (root, port, mgs) = scratch("dne");
    let d = |n: &str| root.path().join(n);
    for i in 0..3 {
        mkfs("--mdt", i, "dne", Some(&mgs), &d(&format!("mdt{i}")));
    }
    mkfs("--ost", 0, "dne", Some(&mgs), &d("ost0"));
    let _first = ServerProc::start(port, &[&d("mgs"), &d("mdt0"), &d("ost0")], &[]);
    // MDT1 and MDT2 in a second process on another address.
    let _second = ServerProc::start_at(
        &format!("127.0.0.2:{}", free_port_at("127.0.0.2")),
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

fn several_mdts_are_served_and_listed(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(3));
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
    let (root, port, mgs) = scratch("ck");
    let d = |n: &str| root.path().join(n);
    mkfs("--ost", 0, "ck", Some(&mgs), &d("ost0"));
    mkfs("--mdt", 0, "ck", Some(&mgs), &d("mdt0"));
    let _mgs_oss = ServerProc::start(port, &[&d("mgs"), &d("ost0")], &[]);
    let mut mds = ServerProc::start_at(
        &format!("127.0.0.2:{}", free_port_at("127.0.0.2")),
        &[&d("mdt0")],
        &[],
    );
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
        use nacre_mdstore::records::{self, DirentRecord, InodeRecord};
        let kv = nacre_kv::FjallStore::open(&d("mdt0").join("db"), &records::TABLES).unwrap();
        let mut b = nacre_kv::Batch::new();
        let ghost = Fid::new(nacre_types::fid::FID_SEQ_NORMAL, 0xdead);
        b.put(
            records::DIRENTS,
            records::dirent_key(Fid::ROOT, b"ghost"),
            records::encode_record(&DirentRecord {
                fid: ghost,
                kind: FileKind::Regular,
            }),
        );
        let raw = kv.get(records::INODES, &victim.to_key()).unwrap().unwrap();
        let mut rec: InodeRecord = records::decode_record(&raw).unwrap();
        rec.attr.nlink += 1;
        b.put(
            records::INODES,
            victim.to_key().to_vec(),
            records::encode_inode(&rec, records::inode_version(&raw)),
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

/// MGS + OST in one process, MDT0 and MDT1 each in their own, on their own addresses.
struct Dne {
    root: tempfile::TempDir,
    mgs: String,
    _mgs_oss: ServerProc,
    mdt0: ServerProc,
    mdt1: ServerProc,
}

impl Dne {
    fn start(fsname: &str, fault0: Option<&str>, fault1: Option<&str>) -> Dne {
        let (root, port, mgs) = scratch(fsname);
        let d = |n: &str| root.path().join(n);
        mkfs("--ost", 0, fsname, Some(&mgs), &d("ost0"));
        mkfs("--mdt", 0, fsname, Some(&mgs), &d("mdt0"));
        mkfs("--mdt", 1, fsname, Some(&mgs), &d("mdt1"));
        let mgs_oss = ServerProc::start(port, &[&d("mgs"), &d("ost0")], &[]);
        let start = |addr: &str, dir: &str, fault: Option<&str>| {
            let listen = format!("{addr}:{}", free_port_at(addr));
            match fault {
                Some(f) => ServerProc::start_armed(&listen, &[&d(dir)], &[], f),
                None => ServerProc::start_at(&listen, &[&d(dir)], &[]),
            }
        };
        let mdt0 = start("127.0.0.2", "mdt0", fault0);
        let mdt1 = start("127.0.0.3", "mdt1", fault1);
        Dne {
            mgs,
            _mgs_oss: mgs_oss,
            mdt0,
            mdt1,
            root,
        }
    }

    fn mount(&self, fsname: &str) -> ClientMount {
        ClientMount::mount(
            &format!("{}:/{fsname}", self.mgs),
            &self.root.path().join("mnt"),
            &[],
        )
    }

    fn lfsck_clean(&self, fsname: &str) {
        lfsck_clean(&format!("{}:/{fsname}", self.mgs));
    }
}

fn remote_directories_live_on_their_mdt(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(2).fsname("rdir"));
    let client = &fs;
    let m = client.mnt.clone();
    let remote = m.join("remote");
    let before = inodes_used(&m, 1);
    nacre_ok(&["mkdir", "-i", "1", remote.to_str().unwrap()]);
    assert!(std::fs::metadata(&remote).unwrap().is_dir());
    for i in 0..20 {
        std::fs::write(remote.join(format!("f{i}")), format!("{i}")).unwrap();
    }
    std::fs::create_dir(remote.join("sub")).unwrap();
    assert_eq!(
        inodes_used(&m, 1),
        before + 22,
        "the directory, its 20 files and its subdirectory are MDT1's inodes"
    );
    let mut names: Vec<String> = std::fs::read_dir(&remote)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 21);
    assert_eq!(std::fs::read_to_string(remote.join("f7")).unwrap(), "7");
    assert_eq!(
        std::fs::canonicalize(remote.join("sub/..")).unwrap(),
        std::fs::canonicalize(&remote).unwrap()
    );
    let root_names: Vec<_> = std::fs::read_dir(&m).unwrap().collect();
    assert_eq!(root_names.len(), 1, "the entry is MDT0's");
    lfsck_clean(&fs.source());
    // Not empty: refused, nothing lost.
    let err = std::fs::remove_dir(&remote).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    assert_eq!(std::fs::read_dir(&remote).unwrap().count(), 21);
    // Hard links across MDTs: a name in MDT0's root for a file of MDT1.
    std::fs::hard_link(remote.join("f1"), m.join("hard")).unwrap();
    assert_eq!(std::fs::read_to_string(m.join("hard")).unwrap(), "1");
    std::fs::remove_file(remote.join("f1")).unwrap();
    assert_eq!(
        std::fs::read_to_string(m.join("hard")).unwrap(),
        "1",
        "the other name keeps it"
    );
    lfsck_clean(&fs.source());
    std::fs::remove_file(m.join("hard")).unwrap();
    std::fs::write(remote.join("f1"), "1").unwrap();
    // A remote directory's entry renamed within its directory.
    std::fs::rename(&remote, m.join("renamed")).unwrap();
    std::fs::rename(m.join("renamed"), &remote).unwrap();
    assert_eq!(std::fs::read_dir(&remote).unwrap().count(), 21);
    // Files and directories rename across MDTs (and back).
    std::fs::rename(remote.join("f0"), m.join("f0")).unwrap();
    assert_eq!(std::fs::read_to_string(m.join("f0")).unwrap(), "0");
    std::fs::rename(m.join("f0"), remote.join("f0")).unwrap();
    assert_eq!(std::fs::read_to_string(remote.join("f0")).unwrap(), "0");
    std::fs::rename(remote.join("sub"), m.join("sub")).unwrap();
    assert_eq!(
        std::fs::canonicalize(m.join("sub/..")).unwrap(),
        std::fs::canonicalize(&m).unwrap()
    );
    lfsck_clean(&fs.source());
    // Over an empty directory of the target's MDT it replaces it; over a non-empty one it is
    // refused, nothing changed.
    std::fs::create_dir_all(remote.join("sub/full")).unwrap();
    let err = std::fs::rename(m.join("sub"), remote.join("sub")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    assert!(m.join("sub").is_dir() && remote.join("sub/full").is_dir());
    std::fs::remove_dir(remote.join("sub/full")).unwrap();
    std::fs::rename(m.join("sub"), remote.join("sub")).unwrap();
    assert!(!m.join("sub").exists());
    assert_eq!(std::fs::read_dir(&remote).unwrap().count(), 21);
    // A directory may not move beneath itself, across MDTs either.
    let err = std::fs::rename(&remote, remote.join("sub/inside")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    std::fs::remove_dir_all(&remote).unwrap();
    assert!(!remote.exists());
    // The kernel sends a file's release after close() returns: a file unlinked before its
    // release arrives is kept (open-unlinked) until then.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while inodes_used(&m, 1) != before && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(inodes_used(&m, 1), before);
    lfsck_clean(&fs.source());
    // An MDT index that does not exist is a clear error.
    let out = nacre(&["mkdir", "-i", "7", m.join("x").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MDT index 7 does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // -i of the parent's own MDT is an ordinary directory.
    nacre_ok(&["mkdir", "-i", "0", m.join("local").to_str().unwrap()]);
    assert!(m.join("local").is_dir());
    lfsck_clean(&fs.source());
}

/// One cross-MDT operation (remote and striped mkdir/rmdir, hard link and unlink across
/// MDTs), the coordinating or the participating MDT killed at a named point of it, the MDT
/// restarted: the operation completes for the application (no error) and the namespace is
/// consistent.
#[test]
fn remote_mkdir_and_rmdir_survive_a_kill_at_every_step() {
    // (operation, victim MDT, fault point)
    let cases = [
        ("mkdir", 0, "mds.mkdir_remote.after_local_commit"),
        (
            "mkdir",
            1,
            "mds.update_create_dir.after_commit_before_reply",
        ),
        ("mkdir", 0, "mds.mkdir_remote.after_remote_apply"),
        ("rmdir", 0, "mds.rmdir_remote.after_intent"),
        (
            "rmdir",
            1,
            "mds.update_destroy_dir.after_commit_before_reply",
        ),
        ("rmdir", 0, "mds.rmdir_remote.after_remote_apply"),
        // A directory striped over MDT0 and MDT1 (master on MDT0).
        ("mkdir-c", 0, "mds.mkdir_striped.after_local_commit"),
        (
            "mkdir-c",
            1,
            "mds.update_create_dir.after_commit_before_reply",
        ),
        ("mkdir-c", 0, "mds.mkdir_remote.after_remote_apply"),
        ("rmdir-c", 0, "mds.rmdir_striped.after_intent"),
        (
            "rmdir-c",
            1,
            "mds.update_destroy_dir.after_commit_before_reply",
        ),
        ("rmdir-c", 0, "mds.rmdir_remote.after_remote_apply"),
        // A hard link in MDT0's root to a file of MDT1, and its removal.
        ("link", 0, "mds.link_remote.after_intent"),
        ("link", 1, "mds.update_add_link.after_commit_before_reply"),
        ("link", 0, "mds.link_remote.after_remote_apply"),
        ("unlink", 0, "mds.unlink_remote.after_local_commit"),
        (
            "unlink",
            1,
            "mds.update_drop_link.after_commit_before_reply",
        ),
        ("unlink", 0, "mds.unlink_remote.after_remote_apply"),
        // A file renamed from MDT0's root into MDT1's directory, and one back.
        ("rename", 0, "mds.rename_remote.after_intent"),
        (
            "rename",
            1,
            "mds.update_insert_entry.after_commit_before_reply",
        ),
        ("rename", 0, "mds.rename_remote.after_remote_apply"),
        ("rename-back", 1, "mds.rename_remote.after_intent"),
        (
            "rename-back",
            0,
            "mds.update_insert_entry.after_commit_before_reply",
        ),
        // A directory of MDT0 moved into MDT1's directory.
        ("rename-dir", 0, "mds.rename_remote.after_intent"),
        (
            "rename-dir",
            1,
            "mds.update_insert_entry.after_commit_before_reply",
        ),
        (
            "rename-dir",
            0,
            "mds.update_set_parent.after_commit_before_reply",
        ),
        ("rename-dir", 0, "mds.rename_remote.after_remote_apply"),
    ];
    for (op, victim, point) in cases {
        let fsname = "kill";
        let (f0, f1) = if victim == 0 {
            (Some(point), None)
        } else {
            (None, Some(point))
        };
        let mut fs = Dne::start(fsname, f0, f1);
        let client = fs.mount(fsname);
        let dir = client.mnt.join("remote");
        let mkdir_args: &[&str] = if op.ends_with("-c") {
            &["mkdir", "-c", "2", "-i", "0"]
        } else {
            &["mkdir", "-i", "1"]
        };
        let file = dir.join("f");
        let link = client.mnt.join("l");
        let moved = client.mnt.join("a");
        if op.starts_with("rename") {
            nacre_ok(&["mkdir", "-i", "1", dir.to_str().unwrap()]);
            if op == "rename-dir" {
                std::fs::create_dir(&moved).unwrap();
                std::fs::write(moved.join("inner"), b"moving").unwrap();
            } else {
                let from = if op == "rename" { &moved } else { &file };
                std::fs::write(from, b"moving").unwrap();
            }
        }
        if op == "link" || op == "unlink" {
            nacre_ok(&["mkdir", "-i", "1", dir.to_str().unwrap()]);
            std::fs::write(&file, b"data").unwrap();
            if op == "unlink" {
                std::fs::hard_link(&file, &link).unwrap();
            }
        }
        if op.starts_with("rmdir") {
            // The directory to remove (the armed point is rmdir's, so this passes it by).
            let mut args = mkdir_args.to_vec();
            args.push(dir.to_str().unwrap());
            nacre_ok(&args);
            for i in 0..6 {
                std::fs::write(dir.join(format!("tmp{i}")), b"x").unwrap();
                std::fs::remove_file(dir.join(format!("tmp{i}"))).unwrap();
            }
        }
        let mkdir_args: Vec<String> = mkdir_args.iter().map(|a| a.to_string()).collect();
        let path = dir.clone();
        let worker = std::thread::spawn(move || match op {
            "mkdir" | "mkdir-c" => {
                let mut args: Vec<&str> = mkdir_args.iter().map(String::as_str).collect();
                args.push(path.to_str().unwrap());
                let out = nacre(&args);
                (
                    out.status.success(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            }
            "link" => match std::fs::hard_link(path.join("f"), path.parent().unwrap().join("l")) {
                Ok(()) => (true, String::new()),
                Err(e) => (false, e.to_string()),
            },
            "unlink" => match std::fs::remove_file(path.parent().unwrap().join("l")) {
                Ok(()) => (true, String::new()),
                Err(e) => (false, e.to_string()),
            },
            "rename" | "rename-dir" => {
                match std::fs::rename(path.parent().unwrap().join("a"), path.join("a")) {
                    Ok(()) => (true, String::new()),
                    Err(e) => (false, e.to_string()),
                }
            }
            "rename-back" => {
                match std::fs::rename(path.join("f"), path.parent().unwrap().join("a")) {
                    Ok(()) => (true, String::new()),
                    Err(e) => (false, e.to_string()),
                }
            }
            _ => match std::fs::remove_dir(&path) {
                Ok(()) => (true, String::new()),
                Err(e) => (false, e.to_string()),
            },
        });
        let killed = if victim == 0 {
            &mut fs.mdt0
        } else {
            &mut fs.mdt1
        };
        assert!(
            killed.wait_exit(Duration::from_secs(30)),
            "{op}: MDT{victim} never reached {point}"
        );
        killed.restart_disarmed();
        let (ok, err) = worker.join().unwrap();
        assert!(ok, "{op} with MDT{victim} killed at {point} failed: {err}");
        match op {
            "mkdir" | "mkdir-c" => {
                assert!(dir.is_dir(), "{point}");
                for i in 0..6 {
                    std::fs::write(dir.join(format!("after{i}")), b"y").unwrap();
                }
                assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 6, "{point}");
                assert_eq!(std::fs::read(dir.join("after3")).unwrap(), b"y");
            }
            "link" => {
                use std::os::unix::fs::MetadataExt;
                let (a, b) = (
                    std::fs::metadata(&file).unwrap(),
                    std::fs::metadata(&link).unwrap(),
                );
                assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "{point}");
                assert_eq!(std::fs::read(&link).unwrap(), b"data");
            }
            "unlink" => {
                use std::os::unix::fs::MetadataExt;
                assert!(!link.exists(), "{point}");
                assert_eq!(std::fs::metadata(&file).unwrap().nlink(), 1, "{point}");
            }
            "rename-dir" => {
                use std::os::unix::fs::MetadataExt;
                assert!(!moved.exists(), "{point}: the old name is gone");
                assert_eq!(
                    std::fs::read(dir.join("a/inner")).unwrap(),
                    b"moving",
                    "{point}"
                );
                assert_eq!(std::fs::metadata(&dir).unwrap().nlink(), 3, "{point}");
                assert_eq!(
                    std::fs::canonicalize(dir.join("a/..")).unwrap(),
                    std::fs::canonicalize(&dir).unwrap()
                );
            }
            "rename" | "rename-back" => {
                use std::os::unix::fs::MetadataExt;
                let (gone, there) = if op == "rename" {
                    (moved.clone(), dir.join("a"))
                } else {
                    (file.clone(), moved.clone())
                };
                assert!(!gone.exists(), "{point}: the old name is gone");
                assert_eq!(std::fs::read(&there).unwrap(), b"moving", "{point}");
                assert_eq!(std::fs::metadata(&there).unwrap().nlink(), 1, "{point}");
            }
            _ => assert!(!dir.exists(), "{point}"),
        }
        fs.lfsck_clean(fsname);
        drop(client);
    }
}

fn mkdir_minus_one_spreads_directories_over_the_mdts(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(3).fsname("plc"));
    assert_eq!(dir_mdt(&fs.mnt), 0, "the root is MDT0's");
    let placement = |mode: &str| {
        nacre_ok(&[
            "ctl",
            "set_param",
            &format!("mdt.plc-MDT0000.mkdir_placement={mode}"),
        ]);
        let mut count = [0u32; 3];
        for i in 0..9 {
            let dir = fs.mnt.join(format!("{mode}{i}"));
            nacre_ok(&["mkdir", "-i", "-1", dir.to_str().unwrap()]);
            std::fs::write(dir.join("f"), b"x").unwrap();
            count[dir_mdt(&dir) as usize] += 1;
        }
        count
    };
    assert_eq!(placement("round_robin"), [3, 3, 3]);
    // Every MDT here has the same free inodes (one disk): space placement goes round-robin
    // while they are balanced, as Lustre's does.
    assert_eq!(placement("space"), [3, 3, 3]);
    let bad = nacre(&[
        "ctl",
        "set_param",
        "mdt.plc-MDT0000.mkdir_placement=sideways",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("use space or round_robin"));
    let (ok, out) = lfsck(&fs.source());
    assert!(ok, "{out}");
}

/// Everyday tools in a remote directory and across the MDT boundary: cp -a of a tree with
/// files, symlinks, nested directories and modes, diff -r, find, mv inside it, chmod, rm -rf.
fn everyday_tools_work_in_remote_directories(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(2).fsname("tools"));
    let client = &fs;
    let m = client.mnt.display().to_string();
    let src = fs.scratch().join("src");
    let src = src.display();
    nacre_testkit::sh(&format!(
        "mkdir -p {src}/a/b/c {src}/e && for i in $(seq 1 40); do head -c $((i * 997)) \
         /dev/urandom > {src}/a/f$i; done && echo hi > {src}/a/b/c/deep && ln -s ../a/f1 \
         {src}/e/link && chmod 640 {src}/a/f2 && chmod 700 {src}/a/b"
    ));
    nacre_ok(&["mkdir", "-i", "1", &format!("{m}/r")]);
    nacre_testkit::sh(&format!(
        "cp -a {src} {m}/r/copy && diff -r {src} {m}/r/copy"
    ));
    let count = nacre_testkit::sh(&format!("find {m}/r/copy | wc -l"));
    assert_eq!(
        count.trim(),
        "47",
        "every entry copied: 5 directories, 41 files, a symlink"
    );
    let link = std::fs::read_link(format!("{m}/r/copy/e/link")).unwrap();
    assert_eq!(link.to_str().unwrap(), "../a/f1");
    nacre_testkit::sh(&format!(
        "mv {m}/r/copy/a/f3 {m}/r/copy/e/f3 && mv {m}/r/copy/a/b {m}/r/copy/e/b && \
         chmod 600 {m}/r/copy/e/f3 && test -f {m}/r/copy/e/b/c/deep"
    ));
    // A tree moved out of the remote directory crosses MDTs (a directory rename across MDTs).
    nacre_testkit::sh(&format!("mv {m}/r/copy/e {m}/e && test -f {m}/e/b/c/deep"));
    lfsck_clean(&fs.source());
    nacre_testkit::sh(&format!("rm -rf {m}/r {m}/e"));
    assert_eq!(std::fs::read_dir(&client.mnt).unwrap().count(), 0);
    lfsck_clean(&fs.source());
}

/// Eight hosts in network namespaces: four MDS hosts (MGS with MDT0 on the first), two OSS
/// hosts, two client hosts running an mdtest-like load in one directory striped over the four
/// MDTs (tasks spread over both client hosts, as mpirun would); a remote directory made under
/// a directory of MDT1 with its inode on MDT3 (MDS host to MDS host). Every MDT takes a share
/// of the files; the checker, run from a client host, is clean.
#[test]
fn four_mds_hosts_two_oss_hosts_two_client_hosts() {
    let lab = nacre_testkit::NetLab::new(8);
    let h = &lab.hosts;
    let (root, _, _) = scratch("ns8");
    let d = |n: &str| root.path().join(n);
    let mgs = format!("{}@tcp", h[0].addr);
    // The MGS scratch() formatted is served on host 0.
    for i in 0..4 {
        mkfs("--mdt", i, "ns8", Some(&mgs), &d(&format!("mdt{i}")));
    }
    for i in 0..2 {
        mkfs("--ost", i, "ns8", Some(&mgs), &d(&format!("ost{i}")));
    }
    let _servers = [
        h[0].server(&[&d("mgs"), &d("mdt0")], &[]),
        h[1].server(&[&d("mdt1")], &[]),
        h[2].server(&[&d("mdt2")], &[]),
        h[3].server(&[&d("mdt3")], &[]),
        h[4].server(&[&d("ost0")], &[]),
        h[5].server(&[&d("ost1")], &[]),
    ];
    let source = format!("{mgs}:/ns8");
    let a = ClientMount::mount_in(&h[6].prefix(), &source, &d("a"), &[]);
    let b = ClientMount::mount_in(&h[7].prefix(), &source, &d("b"), &[]);
    for k in 0..4 {
        nacre_ok(&[
            "mkdir",
            "-i",
            &k.to_string(),
            a.mnt.join(format!("d{k}")).to_str().unwrap(),
        ]);
    }
    for k in 0..4 {
        assert_eq!(dir_mdt(&a.mnt.join(format!("d{k}"))), k);
    }
    // Coordinated by MDT1 (host 1), created on MDT3 (host 3).
    let nested = b.mnt.join("d1/on3");
    nacre_ok(&["mkdir", "-i", "3", nested.to_str().unwrap()]);
    assert_eq!(dir_mdt(&nested), 3);
    // One directory striped over the four MDTs; mdtest's tree root inside it inherits the
    // striping (setdirstripe -D), so all the tasks' files share one striped directory.
    let shared = a.mnt.join("shared");
    nacre_ok(&["mkdir", "-c", "4", "-i", "0", shared.to_str().unwrap()]);
    nacre_ok(&[
        "setdirstripe",
        "-D",
        "-c",
        "4",
        "-i",
        "0",
        shared.to_str().unwrap(),
    ]);
    nacre_ok(&["ctl", "set_param", "mdt.ns8-*.md_stats=0"]);
    let hosts = format!("{},{}", h[6].netns, h[7].netns);
    let listen = format!("{}:0", h[6].addr);
    let out = h[6].nacre(&[
        "bench",
        "mdtest",
        "-a",
        "NACRE",
        "--mgs",
        &mgs,
        "--fsname",
        "ns8",
        "-N",
        "4",
        "-F",
        "-q",
        "--json",
        "--hosts",
        &hosts,
        "--launcher",
        "nsenter --net=/run/netns/{host}",
        "--listen",
        &listen,
        "-d",
        "/shared",
        "-n",
        "100",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2);
    let phases = v["iterations"][0]["phases"].as_array().unwrap();
    for phase in ["File creation", "File stat", "File removal"] {
        let p = phases.iter().find(|p| p[0] == phase).unwrap();
        assert_eq!(p[1], 400, "{phase}: 4 tasks x 100");
    }
    // mdtest's tree root inherited the striping: its 400 creates went to every MDT.
    let creates: Vec<u64> = (0..4)
        .map(|k| {
            let stats = nacre_ok(&[
                "ctl",
                "get_param",
                "-n",
                &format!("mdt.ns8-MDT{k:04x}.md_stats"),
            ]);
            stats
                .lines()
                .find_map(|l| l.strip_prefix("create "))
                .and_then(|l| l.split_whitespace().next())
                .map_or(0, |n| n.parse().unwrap())
        })
        .collect();
    assert_eq!(creates.iter().sum::<u64>(), 400, "{creates:?}");
    assert!(
        creates.iter().all(|&n| n >= 40),
        "every MDT takes a share: {creates:?}"
    );
    // A directory made from the other client host in the striped directory is striped too.
    let mine = b.mnt.join("shared/mine");
    std::fs::create_dir(&mine).unwrap();
    assert_eq!(stripe_count(&mine), 4);
    let check = h[6].nacre(&["lfsck", "--namespace", &source]);
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && out.contains(" 0 inconsistencies"),
        "{out}"
    );
    // Both clients see the whole namespace.
    let mut names: Vec<String> = std::fs::read_dir(&b.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["d0", "d1", "d2", "d3", "shared"]);
}

fn striped_directories_spread_names_and_list_as_one(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(3).fsname("strp"));
    let m = &fs.mnt;
    let dir = m.join("s");
    nacre_ok(&["mkdir", "-c", "3", "-i", "1", dir.to_str().unwrap()]);
    let layout = nacre_ok(&["getdirstripe", dir.to_str().unwrap()]);
    assert!(
        layout.starts_with("lmv_stripe_count: 3 lmv_stripe_offset: 1 lmv_hash_type: fnv_1a_64"),
        "{layout}"
    );
    let shard_mdts: Vec<&str> = layout
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(shard_mdts, ["1", "2", "0"], "{layout}");
    let before: Vec<u64> = (0..3).map(|k| inodes_used(m, k)).collect();
    for i in 0..300 {
        std::fs::write(dir.join(format!("file.{i}")), format!("{i}")).unwrap();
    }
    let grown: Vec<u64> = (0..3u32)
        .map(|k| inodes_used(m, k) - before[k as usize])
        .collect();
    assert_eq!(grown.iter().sum::<u64>(), 300);
    assert!(
        grown.iter().all(|&n| n > 60),
        "names spread over the shards: {grown:?}"
    );
    let list = |d: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut names = list(&dir);
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!((n, names.len()), (300, 300), "every name once");
    assert_eq!(
        std::fs::read_to_string(dir.join("file.123")).unwrap(),
        "123"
    );
    // Listings while another client process creates: no name twice, none created before the
    // listing began missing.
    let more = dir.clone();
    let creator = std::thread::spawn(move || {
        for i in 0..300 {
            std::fs::write(more.join(format!("new.{i}")), b"n").unwrap();
        }
    });
    for _ in 0..10 {
        let existing: std::collections::BTreeSet<String> = list(&dir).into_iter().collect();
        let again = list(&dir);
        let unique: std::collections::BTreeSet<&String> = again.iter().collect();
        assert_eq!(unique.len(), again.len(), "no duplicates during creates");
        for e in &existing {
            assert!(unique.contains(e), "{e} vanished from a listing");
        }
    }
    creator.join().unwrap();
    assert_eq!(list(&dir).len(), 600);
    // Subdirectories of a striped directory are ordinary directories in a shard.
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/x"), b"x").unwrap();
    assert_eq!(std::fs::read(dir.join("sub/x")).unwrap(), b"x");
    let (ok, out) = lfsck(&fs.source());
    assert!(ok, "{out}");
    let err = std::fs::remove_dir(&dir).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    assert_eq!(list(&dir).len(), 601, "a refused rmdir loses nothing");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!dir.exists());
    // -c -1: every MDT; -H all_char; a count beyond the MDTs is refused clearly.
    let all = m.join("all");
    nacre_ok(&["mkdir", "-c", "-1", "-H", "all_char", all.to_str().unwrap()]);
    let layout = nacre_ok(&["getdirstripe", all.to_str().unwrap()]);
    assert!(
        layout.contains("lmv_stripe_count: 3") && layout.contains("all_char"),
        "{layout}"
    );
    std::fs::write(all.join("ab"), b"1").unwrap();
    let out = nacre(&["mkdir", "-c", "5", m.join("five").to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stripe count 5: the file system has 3 MDTs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = nacre(&[
        "mkdir",
        "-c",
        "2",
        "-H",
        "crc",
        m.join("h").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("use fnv_1a_64 or all_char"));
    std::fs::remove_dir_all(&all).unwrap();
    let (ok, out) = lfsck(&fs.source());
    assert!(ok && out.contains(" 0 inconsistencies"), "{out}");
}

/// The stripe count `nacre getdirstripe` reports for `dir`.
fn stripe_count(dir: &std::path::Path) -> u64 {
    let out = nacre_ok(&["getdirstripe", dir.to_str().unwrap()]);
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn setdirstripe_default_shapes_new_subdirectories(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(3).fsname("dflt"));
    let m = &fs.mnt;
    let a = m.join("a");
    std::fs::create_dir(&a).unwrap();
    nacre_ok(&[
        "setdirstripe",
        "-D",
        "-c",
        "3",
        "--max-inherit",
        "2",
        a.to_str().unwrap(),
    ]);
    let shown = nacre_ok(&["getdirstripe", "-D", a.to_str().unwrap()]);
    assert!(
        shown.contains("lmv_stripe_count: 3") && shown.contains("lmv_max_inherit: 2"),
        "{shown}"
    );
    assert_eq!(
        stripe_count(&a),
        0,
        "a default does not stripe the directory itself"
    );
    std::fs::create_dir_all(a.join("b/c/d")).unwrap();
    assert_eq!(stripe_count(&a.join("b")), 3);
    assert_eq!(
        stripe_count(&a.join("b/c")),
        3,
        "inherited one level further"
    );
    assert_eq!(
        stripe_count(&a.join("b/c/d")),
        0,
        "max-inherit 2 stops here"
    );
    let shown = nacre_ok(&["getdirstripe", "-D", a.join("b").to_str().unwrap()]);
    assert!(shown.contains("lmv_max_inherit: 1"), "{shown}");
    for i in 0..60 {
        std::fs::write(a.join(format!("b/c/f{i}")), b"x").unwrap();
    }
    assert_eq!(std::fs::read_dir(a.join("b/c")).unwrap().count(), 61);
    // -c 1 -i 2: new subdirectories are placed on MDT2.
    let b = m.join("placed");
    std::fs::create_dir(&b).unwrap();
    nacre_ok(&[
        "setdirstripe",
        "-D",
        "-c",
        "1",
        "-i",
        "2",
        b.to_str().unwrap(),
    ]);
    std::fs::create_dir(b.join("x")).unwrap();
    assert_eq!((dir_mdt(&b.join("x")), stripe_count(&b.join("x"))), (2, 0));
    // -d removes the default.
    nacre_ok(&["setdirstripe", "-d", a.to_str().unwrap()]);
    std::fs::create_dir(a.join("plain")).unwrap();
    assert_eq!(stripe_count(&a.join("plain")), 0);
    assert!(nacre_ok(&["getdirstripe", "-D", a.to_str().unwrap()]).contains("no default"));
    let bad = nacre(&["setdirstripe", "-D", "-c", "4", a.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("stripe count 4"));
    let (ok, out) = lfsck(&fs.source());
    assert!(ok && out.contains(" 0 inconsistencies"), "{out}");
    std::fs::remove_dir_all(&a).unwrap();
    std::fs::remove_dir_all(&b).unwrap();
    let (ok, out) = lfsck(&fs.source());
    assert!(ok, "{out}");
}

/// Inode number and link count of `p`.
fn ino_nlink(p: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.ino(), m.nlink())
}

fn migrate_moves_a_tree_to_another_mdt_and_back(form: Form) {
    use std::io::{Read, Seek, Write};
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(2).fsname("migr"));
    let client = &fs;
    let m = client.mnt.clone();
    let top = m.join("proj");
    std::fs::create_dir_all(top.join("sub/deeper")).unwrap();
    let data = |i: usize| format!("file {i} ").repeat(1000 + i).into_bytes();
    for i in 0..40 {
        std::fs::write(top.join(format!("f{i}")), data(i)).unwrap();
    }
    std::fs::write(top.join("sub/inner"), b"inner").unwrap();
    std::fs::write(top.join("sub/deeper/deepest"), b"deepest").unwrap();
    std::os::unix::fs::symlink("f1", top.join("link-to-f1")).unwrap();
    xattr_set(&top.join("f2"), "user.tag", b"two");
    xattr_set(&top, "user.dirtag", b"top");
    // Two names of one inode: it stays on its MDT, both entries move.
    std::fs::hard_link(top.join("f3"), top.join("f3-again")).unwrap();
    // A file of MDT1 linked into the tree.
    let elsewhere = m.join("elsewhere");
    nacre_ok(&["mkdir", "-i", "1", elsewhere.to_str().unwrap()]);
    std::fs::write(elsewhere.join("far"), b"far away").unwrap();
    std::fs::hard_link(elsewhere.join("far"), top.join("far")).unwrap();
    // A file held open across the migration: it stays where it is and keeps working.
    let mut open = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(top.join("open"))
        .unwrap();
    open.write_all(b"before ").unwrap();
    assert_eq!(dir_mdt(&top), 0);
    let (used0, used1) = (inodes_used(&m, 0), inodes_used(&m, 1));

    let out = nacre_ok(&["migrate", "-m", "1", "-v", top.to_str().unwrap()]);
    assert!(out.contains("migrated 3 directories to MDT0001"), "{out}");
    for d in [&top, &top.join("sub"), &top.join("sub/deeper")] {
        assert_eq!(dir_mdt(d), 1, "{}", d.display());
    }
    for i in 0..40 {
        assert_eq!(std::fs::read(top.join(format!("f{i}"))).unwrap(), data(i));
    }
    assert_eq!(std::fs::read(top.join("sub/inner")).unwrap(), b"inner");
    assert_eq!(
        std::fs::read(top.join("sub/deeper/deepest")).unwrap(),
        b"deepest"
    );
    assert_eq!(
        std::fs::read_link(top.join("link-to-f1")).unwrap().to_str(),
        Some("f1")
    );
    assert_eq!(std::fs::read(top.join("link-to-f1")).unwrap(), data(1));
    assert_eq!(xattr_get(&top.join("f2"), "user.tag"), b"two");
    assert_eq!(xattr_get(&top, "user.dirtag"), b"top");
    let (a, b) = (ino_nlink(&top.join("f3")), ino_nlink(&top.join("f3-again")));
    assert_eq!((a.0, a.1), (b.0, 2));
    assert_eq!(ino_nlink(&elsewhere.join("far")).1, 2);
    assert_eq!(
        ino_nlink(&top.join("far")).0,
        ino_nlink(&elsewhere.join("far")).0
    );
    assert_eq!(std::fs::read(top.join("far")).unwrap(), b"far away");
    // `..` of a moved subdirectory is the moved directory.
    assert_eq!(
        std::fs::canonicalize(top.join("sub/deeper/../..")).unwrap(),
        std::fs::canonicalize(&top).unwrap()
    );
    // The open file: writes through the old handle land, reads by name see them.
    open.write_all(b"after").unwrap();
    open.sync_all().unwrap();
    open.rewind().unwrap();
    let mut back = String::new();
    open.read_to_string(&mut back).unwrap();
    assert_eq!(back, "before after");
    assert_eq!(std::fs::read(top.join("open")).unwrap(), b"before after");
    drop(open);
    // Inodes moved: 3 directories, 40 files but f3 (hard-linked), sub/inner, deepest, the
    // symlink; f3, `far` (MDT1's already) and the open file stayed.
    let moved = 3 + 39 + 2 + 1;
    assert_eq!(inodes_used(&m, 0), used0 - moved);
    assert_eq!(inodes_used(&m, 1), used1 + moved);
    lfsck_clean(&fs.source());
    // The tree keeps working: create, rename, remove in the moved directories.
    std::fs::write(top.join("new"), b"new").unwrap();
    std::fs::rename(top.join("f5"), top.join("sub/f5")).unwrap();
    std::fs::remove_file(top.join("f6")).unwrap();
    assert_eq!(std::fs::read(top.join("sub/f5")).unwrap(), data(5));

    // Back to MDT0 with -d: the top directory and its files only.
    let out = nacre_ok(&["migrate", "-m", "0", "-d", top.to_str().unwrap()]);
    assert!(out.contains("migrated 1 directories to MDT0000"), "{out}");
    assert_eq!(dir_mdt(&top), 0);
    assert_eq!(dir_mdt(&top.join("sub")), 1);
    assert_eq!(std::fs::read(top.join("f7")).unwrap(), data(7));
    assert_eq!(std::fs::read(top.join("new")).unwrap(), b"new");
    assert_eq!(ino_nlink(&top.join("f3")).1, 2);
    lfsck_clean(&fs.source());

    // Clear errors for what cannot be done.
    let bad = nacre(&["migrate", "-m", "7", top.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does not exist"));
    let striped = m.join("striped");
    nacre_ok(&["mkdir", "-c", "2", striped.to_str().unwrap()]);
    let bad = nacre(&["migrate", "-m", "1", striped.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("striped"));
    let bad = nacre(&["migrate", "-m", "1", top.join("f7").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a directory"));
}

fn xattr_set(p: &std::path::Path, name: &str, value: &[u8]) {
    let out = std::process::Command::new("setfattr")
        .args(["-n", name, "-v"])
        .arg(format!(
            "0x{}",
            value.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ))
        .arg(p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn xattr_get(p: &std::path::Path, name: &str) -> Vec<u8> {
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", name])
        .arg(p)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    out.stdout
}

fn migrate_is_online_for_writers_and_listers(form: Form) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(2).fsname("migon"));
    let client = &fs;
    let top = client.mnt.join("busy");
    std::fs::create_dir(&top).unwrap();
    for i in 0..1500 {
        std::fs::write(top.join(format!("seed{i:04}")), b"seed").unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    // A writer creating and renaming files in the directory the whole time (its changes
    // wait while the directory is frozen, and go on after).
    let writer = {
        let (top, stop, created) = (top.clone(), stop.clone(), created.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let f = top.join(format!("live{i}"));
                std::fs::write(&f, format!("live {i}")).map_err(|e| format!("create {i}: {e}"))?;
                if i % 3 == 0 {
                    std::fs::rename(&f, top.join(format!("renamed{i}")))
                        .map_err(|e| format!("rename {i}: {e}"))?;
                }
                i += 1;
                created.store(i, Ordering::Relaxed);
            }
            Ok::<usize, String>(i)
        })
    };
    // A lister walking it the whole time: every listing complete, without repeats. (On the
    // writer's own mount: while the writer's create is held, the kernel holds the
    // directory's lock for it, and this mount's listings wait too.)
    let listing_of = |dir: &std::path::Path| -> Result<usize, String> {
        let names: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| format!("opendir: {e}"))?
            .map(|e| e.map(|e| e.file_name().into_string().unwrap()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("readdir: {e}"))?;
        let seeds = names.iter().filter(|n| n.starts_with("seed")).count();
        let unique: std::collections::HashSet<_> = names.iter().collect();
        if seeds != 1500 || unique.len() != names.len() {
            return Err(format!(
                "listing saw {seeds} seeds, {} names, {} unique",
                names.len(),
                unique.len()
            ));
        }
        Ok(names.len())
    };
    let lister = {
        let (top, stop) = (top.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut listings = 0;
            while !stop.load(Ordering::Relaxed) {
                listing_of(&top)?;
                listings += 1;
            }
            Ok::<usize, String>(listings)
        })
    };
    nacre_testkit::wait_for("the writer's first files", || {
        created.load(Ordering::Relaxed) >= 20
    });
    // The migration held once its entries are adopted (the directory frozen, the new one
    // not yet named) until the test lets it go on.
    let coordinator = fs.server_pids()[0];
    let fail_loc = |spec: &str| nacre_testkit::fail_loc(coordinator, spec);
    fail_loc("mds.migrate.after_adopt~hold");
    let migration = {
        let top = top.clone();
        std::thread::spawn(move || nacre_ok(&["migrate", "-m", "1", top.to_str().unwrap()]))
    };
    nacre_testkit::wait_for("the migration held with its directory frozen", || {
        nacre_testkit::get_param(Some(coordinator), "fail_fired").trim() != "0"
    });
    // Another client, mounted now (nothing of the directory in its caches), finds names
    // and lists the directory: the MDT serves lookups and listings of a frozen directory.
    let late = fs.scratch().join("late");
    std::fs::create_dir_all(&late).unwrap();
    let other = fs.mount_another(&late, &[]);
    let there = other.mnt.join("busy");
    for i in (0..1500).step_by(30) {
        let p = there.join(format!("seed{i:04}"));
        let meta = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(
            meta.is_file() && meta.len() == 4,
            "{}: {meta:?}",
            p.display()
        );
    }
    let listed = listing_of(&there).unwrap();
    assert!(!migration.is_finished(), "the migration was not held");
    fail_loc("0");
    migration.join().unwrap();
    drop(other);
    let during = created.load(Ordering::Relaxed);
    nacre_testkit::wait_for("the writer going on after the migration", || {
        created.load(Ordering::Relaxed) > during + 10
    });
    stop.store(true, Ordering::Relaxed);
    let made = writer.join().unwrap().unwrap();
    let listings = lister.join().unwrap().unwrap();
    eprintln!(
        "during the migration another mount listed {listed} names; {listings} listings \
         on the writer's mount; {made} files written"
    );
    assert!(made > during, "the writer goes on after the migration");
    assert_eq!(dir_mdt(&top), 1);
    for i in 0..made {
        let name = if i % 3 == 0 {
            format!("renamed{i}")
        } else {
            format!("live{i}")
        };
        assert_eq!(
            std::fs::read(top.join(&name)).unwrap(),
            format!("live {i}").as_bytes(),
            "{name}"
        );
        assert!(!(i % 3 == 0 && top.join(format!("live{i}")).exists()));
    }
    assert_eq!(std::fs::read_dir(&top).unwrap().count(), 1500 + made);
    lfsck_clean(&fs.source());
}

#[test]
fn migrate_survives_a_kill_at_every_step() {
    // (direction, victim MDT, fault point). "there": a directory of MDT0 (entry on MDT0)
    // moves to MDT1, MDT0 coordinating. "back": a directory of MDT1 whose entry is on MDT0
    // moves to MDT0, MDT1 coordinating (the entry is held and repointed remotely).
    let cases = [
        ("there", 0, "mds.migrate.after_intent"),
        (
            "there",
            1,
            "mds.update_create_dir.after_commit_before_reply@2",
        ),
        ("there", 1, "mds.update_adopt.after_commit_before_reply"),
        ("there", 0, "mds.migrate.after_adopt"),
        ("back", 1, "mds.migrate.after_intent"),
        ("back", 0, "mds.update_freeze.after_commit_before_reply"),
        ("back", 1, "mds.migrate.after_freeze"),
        ("back", 0, "mds.update_adopt.after_commit_before_reply"),
        ("back", 0, "mds.update_drop_link.after_commit_before_reply"),
        ("back", 0, "mds.update_repoint.after_commit_before_reply"),
        ("back", 1, "mds.migrate.after_repoint"),
    ];
    for (way, victim, point) in cases {
        let fsname = "mkill";
        println!("row: migrate {way}, MDT{victim} killed at {point}");
        let (f0, f1) = if victim == 0 {
            (Some(point), None)
        } else {
            (None, Some(point))
        };
        let mut fs = Dne::start(fsname, f0, f1);
        let client = fs.mount(fsname);
        let dir = client.mnt.join("d");
        let (from, to) = if way == "there" { (0, 1) } else { (1, 0) };
        nacre_ok(&["mkdir", "-i", &from.to_string(), dir.to_str().unwrap()]);
        std::fs::create_dir(dir.join("sub")).unwrap();
        for i in 0..30 {
            std::fs::write(dir.join(format!("f{i}")), format!("data {i}")).unwrap();
        }
        std::fs::hard_link(dir.join("f0"), dir.join("f0-link")).unwrap();
        // A file of the target MDT linked in (its link moves from a remote to a local
        // entry).
        let other = client.mnt.join("other");
        nacre_ok(&["mkdir", "-i", &to.to_string(), other.to_str().unwrap()]);
        std::fs::write(other.join("o"), b"other").unwrap();
        std::fs::hard_link(other.join("o"), dir.join("o")).unwrap();
        let path = dir.clone();
        let worker = std::thread::spawn(move || {
            nacre(&["migrate", "-m", &to.to_string(), path.to_str().unwrap()])
        });
        let killed = if victim == 0 {
            &mut fs.mdt0
        } else {
            &mut fs.mdt1
        };
        assert!(
            killed.wait_exit(Duration::from_secs(30)),
            "{way}: MDT{victim} never reached {point}"
        );
        killed.restart_disarmed();
        let out = worker.join().unwrap();
        assert!(
            out.status.success(),
            "migrate {way} with MDT{victim} killed at {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(dir_mdt(&dir), to, "{point}");
        assert_eq!(dir_mdt(&dir.join("sub")), to, "{point}");
        for i in 0..30 {
            assert_eq!(
                std::fs::read(dir.join(format!("f{i}"))).unwrap(),
                format!("data {i}").as_bytes(),
                "{point}"
            );
        }
        assert_eq!(ino_nlink(&dir.join("f0-link")).1, 2, "{point}");
        assert_eq!(ino_nlink(&other.join("o")).1, 2, "{point}");
        assert_eq!(std::fs::read(dir.join("o")).unwrap(), b"other", "{point}");
        fs.lfsck_clean(fsname);
        drop(client);
    }
}

#[test]
fn crossing_directory_moves_cannot_build_a_loop() {
    // Both MDTs pause 1.5 s after a directory move's loop check: without a rename lock,
    // moving a (MDT0) into b (MDT1) and b into a at the same time from two clients would
    // both pass the check and leave a and b inside each other, cut off from the root. (Two
    // mounts: one kernel serialises cross-directory renames in its own mount.)
    let pause = "mds.rename.after_loop_check~1500";
    let fs = Dne::start("loop", Some(pause), Some(pause));
    let client = fs.mount("loop");
    let other = ClientMount::mount(
        &format!("{}:/loop", fs.mgs),
        &fs.root.path().join("mnt2"),
        &[],
    );
    let m = client.mnt.clone();
    std::fs::create_dir(m.join("p")).unwrap();
    nacre_ok(&["mkdir", "-i", "1", m.join("q").to_str().unwrap()]);
    std::fs::create_dir(m.join("p/a")).unwrap();
    std::fs::create_dir(m.join("q/b")).unwrap();
    std::fs::write(m.join("p/a/in-a"), b"a").unwrap();
    std::fs::write(m.join("q/b/in-b"), b"b").unwrap();
    let (ma, mb) = (m.clone(), other.mnt.clone());
    let one = std::thread::spawn(move || std::fs::rename(ma.join("p/a"), ma.join("q/b/a")));
    std::thread::sleep(Duration::from_millis(200));
    let two = std::thread::spawn(move || std::fs::rename(mb.join("q/b"), mb.join("p/a/b")));
    let (one, two) = (one.join().unwrap(), two.join().unwrap());
    let refused = [&one, &two]
        .iter()
        .filter(|r| r.as_ref().err().and_then(|e| e.raw_os_error()) == Some(22))
        .count();
    assert_eq!(
        (one.is_ok() as u32 + two.is_ok() as u32, refused),
        (1, 1),
        "exactly one move happens, the other is refused with EINVAL: {one:?} {two:?}"
    );
    // Both directories are still reachable from the root, with their files.
    let files: Vec<_> = walk(&m)
        .into_iter()
        .filter(|p| p.ends_with("in-a") || p.ends_with("in-b"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    fs.lfsck_clean("loop");
    // A move inside a remote directory, across parents, needs no copy (no EXDEV).
    std::fs::create_dir_all(m.join("q/x/y")).unwrap();
    std::fs::create_dir(m.join("q/z")).unwrap();
    std::fs::rename(m.join("q/x/y"), m.join("q/z/y")).unwrap();
    assert!(m.join("q/z/y").is_dir());
    fs.lfsck_clean("loop");
}

/// Every path beneath `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}

#[test]
fn a_directory_moved_over_an_empty_directory_of_a_third_mdt_replaces_it() {
    // Plain, then with the coordinator killed after the victim is destroyed, then with the
    // victim's MDT killed after destroying it, before answering.
    let kills = [
        None,
        Some((0, "mds.rename_remote.after_victim_destroyed")),
        Some((2, "mds.update_destroy_dir.after_commit_before_reply")),
    ];
    for kill in kills {
        let (root, port, mgs) = scratch("third");
        let d = |n: &str| root.path().join(n);
        mkfs("--ost", 0, "third", Some(&mgs), &d("ost0"));
        for i in 0..3 {
            mkfs("--mdt", i, "third", Some(&mgs), &d(&format!("mdt{i}")));
        }
        let _mgs_oss = ServerProc::start(port, &[&d("mgs"), &d("ost0")], &[]);
        let mut mdts: Vec<ServerProc> = (0..3)
            .map(|i| {
                let ip = format!("127.0.0.{}", i + 2);
                let listen = format!("{ip}:{}", free_port_at(&ip));
                let dir = d(&format!("mdt{i}"));
                match kill {
                    Some((victim, point)) if victim == i => {
                        ServerProc::start_armed(&listen, &[&dir], &[], point)
                    }
                    _ => ServerProc::start_at(&listen, &[&dir], &[]),
                }
            })
            .collect();
        let client = ClientMount::mount(&format!("{mgs}:/third"), &d("mnt"), &[]);
        let m = client.mnt.clone();
        std::fs::create_dir_all(m.join("src/d")).unwrap();
        std::fs::create_dir_all(m.join("src/e")).unwrap();
        std::fs::write(m.join("src/d/file"), b"moved").unwrap();
        let dst = m.join("dst");
        nacre_ok(&["mkdir", "-i", "1", dst.to_str().unwrap()]);
        // Entries on MDT1, inodes on MDT2.
        nacre_ok(&["mkdir", "-i", "2", dst.join("victim").to_str().unwrap()]);
        nacre_ok(&["mkdir", "-i", "2", dst.join("full").to_str().unwrap()]);
        std::fs::write(dst.join("full/keep"), b"keep").unwrap();
        let used2 = inodes_used(&m, 2);
        // MDT0 coordinates, MDT1 holds the target entry, MDT2 the directory replaced.
        let (from, to) = (m.join("src/d"), dst.join("victim"));
        let worker = std::thread::spawn(move || std::fs::rename(from, to));
        if let Some((victim, point)) = kill {
            let killed = &mut mdts[victim as usize];
            assert!(
                killed.wait_exit(Duration::from_secs(30)),
                "MDT{victim} never reached {point}"
            );
            killed.restart_disarmed();
        }
        worker.join().unwrap().unwrap();
        assert!(!m.join("src/d").exists());
        assert_eq!(std::fs::read(dst.join("victim/file")).unwrap(), b"moved");
        assert_eq!(dir_mdt(&dst.join("victim")), 0);
        assert_eq!(
            inodes_used(&m, 2),
            used2 - 1,
            "the replaced directory is gone"
        );
        // Not empty: refused, nothing changed.
        let err = std::fs::rename(m.join("src/e"), dst.join("full")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(39), "{err}");
        assert!(m.join("src/e").is_dir());
        assert_eq!(std::fs::read(dst.join("full/keep")).unwrap(), b"keep");
        let (ok, out) = lfsck(&format!("{mgs}:/third"));
        assert!(ok && out.contains(" 0 inconsistencies"), "{kill:?}: {out}");
        drop(client);
    }
}

on_both_forms!(
    remote_directories_live_on_their_mdt,
    everyday_tools_work_in_remote_directories,
    migrate_moves_a_tree_to_another_mdt_and_back,
    migrate_is_online_for_writers_and_listers,
    several_mdts_are_served_and_listed,
    mkdir_minus_one_spreads_directories_over_the_mdts,
    striped_directories_spread_names_and_list_as_one,
    setdirstripe_default_shapes_new_subdirectories,
);
