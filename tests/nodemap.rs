//! Nodemaps on the networked form, with each client a host of its own (a network
//! namespace and address): a squashed client's root cannot read a 0600 file of root, a
//! read-only client can change nothing (refused by the MDT, and by the OSTs for a file it
//! opened before), a client with an id offset creates files owned by the offset ids and
//! sees its own ids back, and an untrusted client's supplementary groups are the MDS's,
//! not what it sends.

use nacre_testkit::{mkfs, nacre_ok, wait_for, ClientMount, NetLab};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

/// `setpriv` runs `args` as `uid`:`gid` with supplementary `groups`; its status and stderr.
fn as_user(uid: u32, gid: u32, groups: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            &format!("--groups={groups}"),
            "--",
        ])
        .args(args)
        .output()
        .expect("run setpriv");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn nodemap(args: &[&str]) {
    let mut a = vec!["nodemap"];
    a.extend_from_slice(args);
    nacre_ok(&a);
}

/// Waits until every server process enforces the MGS's newest nodemaps (each fetches them
/// within a second; the MGS's own process at once).
fn enforced(servers: &[&nacre_testkit::ServerProc]) {
    let version = |pid: u32| -> u64 {
        nacre_ok(&[
            "ctl",
            "--pid",
            &pid.to_string(),
            "get_param",
            "-n",
            "nodemap.version",
        ])
        .trim()
        .parse()
        .unwrap_or(0)
    };
    let pids: Vec<u32> = servers.iter().map(|s| s.pid()).collect();
    let newest = version(pids[0]);
    wait_for("every server enforcing the nodemaps", || {
        pids.iter().all(|p| version(*p) >= newest)
    });
}

fn errno_of(r: std::io::Result<impl Sized>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

#[test]
fn nodemaps_squash_map_and_make_clients_read_only() {
    let lab = NetLab::new(6);
    let h = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix("nacre-nodemap")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let mgs_nid = format!("{}@tcp", h[0].addr);
    mkfs("--mgs", 0, "nmap", None, &d("mgs"));
    mkfs("--mdt", 0, "nmap", Some(&mgs_nid), &d("mdt0"));
    mkfs("--ost", 0, "nmap", Some(&mgs_nid), &d("ost0"));
    mkfs("--ost", 1, "nmap", Some(&mgs_nid), &d("ost1"));
    let mds = h[0].server(&[&d("mgs"), &d("mdt0")], &[]);
    let oss = h[1].server(&[&d("ost0"), &d("ost1")], &[]);
    let source = format!("{mgs_nid}:/nmap");
    let admin = ClientMount::mount_in(&h[2].prefix(), &source, &d("admin"), &[]);
    let a = |p: &str| admin.mnt.join(p);
    // What the unmapped (admin) client makes: a secret of root, a shared directory, a file
    // anyone reads, a directory only group 100050 may enter.
    fs::write(a("secret"), b"root only").unwrap();
    fs::set_permissions(a("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(a("pub")).unwrap();
    fs::set_permissions(a("pub"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(a("open"), b"for all").unwrap();
    fs::create_dir(a("team")).unwrap();
    std::os::unix::fs::chown(a("team"), Some(0), Some(100_050)).unwrap();
    fs::set_permissions(a("team"), fs::Permissions::from_mode(0o070)).unwrap();

    nodemap(&["add", "squash"]);
    nodemap(&["add_range", "--name", "squash", "--range", &h[3].addr]);
    nodemap(&[
        "modify",
        "--name",
        "squash",
        "--property",
        "trusted",
        "--value",
        "1",
    ]);
    nodemap(&["add", "ro"]);
    nodemap(&["add_range", "--name", "ro", "--range", &h[4].addr]);
    for p in ["admin", "trusted"] {
        nodemap(&["modify", "--name", "ro", "--property", p, "--value", "1"]);
    }
    nodemap(&["add", "tenant"]);
    nodemap(&["add_range", "--name", "tenant", "--range", &h[5].addr]);
    nodemap(&[
        "modify",
        "--name",
        "tenant",
        "--property",
        "offset",
        "--value",
        "100000",
    ]);
    let list = nacre_ok(&["nodemap", "list"]);
    assert!(
        list.contains("tenant: ranges=") && list.contains("offset=100000"),
        "{list}"
    );

    let squashed = ClientMount::mount_in(&h[3].prefix(), &source, &d("squashed"), &[]);
    let ro = ClientMount::mount_in(&h[4].prefix(), &source, &d("ro"), &[]);
    let tenant = ClientMount::mount_in(&h[5].prefix(), &source, &d("tenant"), &[]);

    // Root squash: the squashed client's root acts as nobody.
    let s = |p: &str| squashed.mnt.join(p);
    wait_for("root squashed", || {
        errno_of(fs::read(s("secret"))) == Some(libc::EACCES)
    });
    assert_eq!(fs::read(s("open")).unwrap(), b"for all");
    fs::write(s("pub/by-squashed-root"), b"x").unwrap();
    let m = fs::metadata(a("pub/by-squashed-root")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65_534, 65_534), "made as nobody");

    // Read-only: a file opened for writing before the nodemap said so...
    let r = |p: &str| ro.mnt.join(p);
    let mut held = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(r("pub/held"))
        .unwrap();
    nodemap(&[
        "modify",
        "--name",
        "ro",
        "--property",
        "readonly",
        "--value",
        "1",
    ]);
    enforced(&[&mds, &oss]);
    wait_for("the read-only client refused by the MDT", || {
        errno_of(fs::write(r("pub/new"), b"x")) == Some(libc::EROFS)
    });
    assert_eq!(errno_of(fs::remove_file(r("open"))), Some(libc::EROFS));
    assert_eq!(errno_of(fs::create_dir(r("pub/d"))), Some(libc::EROFS));
    assert_eq!(
        errno_of(fs::set_permissions(
            r("open"),
            fs::Permissions::from_mode(0o600)
        )),
        Some(libc::EROFS)
    );
    assert_eq!(fs::read(r("open")).unwrap(), b"for all", "reads still work");
    // ...cannot write its data either: the OSTs refuse it.
    let written = held
        .write_all(&vec![7u8; 1 << 20])
        .and_then(|()| held.sync_all());
    assert_eq!(errno_of(written), Some(libc::EROFS));
    drop(held);
    assert_eq!(
        fs::metadata(a("pub/held")).unwrap().len(),
        0,
        "nothing reached the OSTs"
    );

    // Offset: uid 1000 on the tenant is 101000 in the file system, and sees itself back.
    let t = |p: &str| tenant.mnt.join(p);
    let file = t("pub/by-tenant-1000");
    let path = file.to_str().unwrap();
    wait_for("the tenant's ids mapped", || {
        as_user(1000, 1000, "1000", &["touch", path]).0
            && fs::metadata(a("pub/by-tenant-1000")).is_ok_and(|m| m.uid() == 101_000)
    });
    let m = fs::metadata(a("pub/by-tenant-1000")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (101_000, 101_000),
        "as the admin client sees it"
    );
    let m = fs::metadata(&file).unwrap();
    assert_eq!((m.uid(), m.gid()), (1000, 1000), "as the tenant sees it");
    // Its root is squashed (untrusted, not admin): the secret stays closed.
    assert_eq!(errno_of(fs::read(t("secret"))), Some(libc::EACCES));
    // Group 50 claimed by the client would map to 100050, the team's group; the MDS
    // knows no such membership of 101000, so the team directory stays closed.
    let team = t("team");
    let (ok, err) = as_user(1000, 1000, "1000,50", &["ls", team.to_str().unwrap()]);
    assert!(
        !ok,
        "an untrusted client's claimed group opened the directory"
    );
    assert!(err.contains("Permission denied"), "{err}");
    check_removed_nodemap_restores(&h[5].addr, &a("pub"), &t("pub"));
}

/// Removing the nodemap returns its client to unmapped: a file it makes is its own uid.
fn check_removed_nodemap_restores(_addr: &str, admin_dir: &Path, tenant_dir: &Path) {
    nodemap(&["del", "tenant"]);
    let f = tenant_dir.join("after-del");
    let path = f.to_str().unwrap().to_string();
    wait_for("the tenant unmapped", || {
        let _ = fs::remove_file(&f);
        as_user(1000, 1000, "1000", &["touch", &path]).0
            && fs::metadata(admin_dir.join("after-del")).is_ok_and(|m| m.uid() == 1000)
    });
}
