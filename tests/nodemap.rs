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
pub(crate) fn as_user(uid: u32, gid: u32, groups: &str, args: &[&str]) -> (bool, String) {
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

use nacre_tests::{enforced, nodemap};

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
    let mgs_proc = &mds;
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

    nodemap(mgs_proc, &["add", "squash"]);
    nodemap(
        mgs_proc,
        &["add_range", "--name", "squash", "--range", &h[3].addr],
    );
    // Once a nodemap exists, an address none holds is refused, until the administrator
    // makes a `default` nodemap for them (here: trusted).
    nacre_tests::enforced(&[&mds, &oss]);
    wait_for("the unlisted admin client refused", || {
        errno_of(fs::write(a("unlisted"), b"x")) == Some(libc::EACCES)
    });
    nacre_tests::trusted_default(mgs_proc);
    nacre_tests::enforced(&[&mds, &oss]);
    wait_for("the default nodemap's client served", || {
        fs::write(a("unlisted"), b"x").is_ok()
    });
    nodemap(
        mgs_proc,
        &[
            "modify",
            "--name",
            "squash",
            "--property",
            "trusted",
            "--value",
            "1",
        ],
    );
    nodemap(mgs_proc, &["add", "ro"]);
    nodemap(
        mgs_proc,
        &["add_range", "--name", "ro", "--range", &h[4].addr],
    );
    for p in ["admin", "trusted"] {
        nodemap(
            mgs_proc,
            &["modify", "--name", "ro", "--property", p, "--value", "1"],
        );
    }
    nodemap(mgs_proc, &["add", "tenant"]);
    nodemap(
        mgs_proc,
        &["add_range", "--name", "tenant", "--range", &h[5].addr],
    );
    nodemap(
        mgs_proc,
        &[
            "modify",
            "--name",
            "tenant",
            "--property",
            "offset",
            "--value",
            "100000",
        ],
    );
    let list = nacre_ok(&["nodemap", "--pid", &mds.pid().to_string(), "list"]);
    assert!(
        list.contains("tenant: ranges=") && list.contains("offset=100000"),
        "{list}"
    );

    let squashed = ClientMount::mount_in(&h[3].prefix(), &source, &d("squashed"), &[]);
    let ro = ClientMount::mount_in(&h[4].prefix(), &source, &d("ro"), &[]);
    let tenant = ClientMount::mount_in(&h[5].prefix(), &source, &d("tenant"), &[]);
    // A client whose root is squashed mounts nosuid,nodev unless it says otherwise; an
    // admin nodemap's client keeps the kernel's defaults.
    for (m, nosuid_nodev) in [
        (&squashed, true),
        (&tenant, true),
        (&ro, false),
        (&admin, false),
    ] {
        let flags = mount_flags(&m.mnt);
        assert_eq!(
            flags.contains("nosuid") && flags.contains("nodev"),
            nosuid_nodev,
            "{}: {flags}",
            m.mnt.display()
        );
    }
    let said = ClientMount::mount_in(&h[5].prefix(), &source, &d("said"), &["-o", "suid,dev"]);
    let flags = mount_flags(&said.mnt);
    assert!(
        !flags.contains("nosuid") && !flags.contains("nodev"),
        "{flags}"
    );
    drop(said);

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
    nodemap(
        mgs_proc,
        &[
            "modify",
            "--name",
            "ro",
            "--property",
            "readonly",
            "--value",
            "1",
        ],
    );
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
    check_removed_nodemap_restores(mgs_proc, &a("pub"), &t("pub"));
}

/// Removing the nodemap returns its client to unmapped: a file it makes is its own uid.
fn check_removed_nodemap_restores(
    mgs_proc: &nacre_testkit::ServerProc,
    admin_dir: &Path,
    tenant_dir: &Path,
) {
    nodemap(mgs_proc, &["del", "tenant"]);
    let f = tenant_dir.join("after-del");
    let path = f.to_str().unwrap().to_string();
    wait_for("the tenant unmapped", || {
        let _ = fs::remove_file(&f);
        as_user(1000, 1000, "1000", &["touch", &path]).0
            && fs::metadata(admin_dir.join("after-del")).is_ok_and(|m| m.uid() == 1000)
    });
}

/// A counter of a server process's `net.stats`.
fn net_stat(pid: u32, name: &str) -> u64 {
    nacre_ok(&[
        "ctl",
        "--pid",
        &pid.to_string(),
        "get_param",
        "-n",
        "net.stats",
    ])
    .lines()
    .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
    .and_then(|v| v.trim().parse().ok())
    .unwrap_or_else(|| panic!("no {name} in net.stats"))
}

#[test]
fn a_nodemap_sets_the_security_level_of_its_clients() {
    let lab = NetLab::new(3);
    let h = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix("nacre-nodemap")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let key = d("key");
    let k = key.to_str().unwrap();
    nacre_ok(&["keygen", "nmlvl", "-o", k, "--level", "integrity"]);
    let mgs_nid = format!("{}@tcp", h[0].addr);
    mkfs("--mgs", 0, "nmlvl", None, &d("mgs"));
    mkfs("--mdt", 0, "nmlvl", Some(&mgs_nid), &d("mdt0"));
    mkfs("--ost", 0, "nmlvl", Some(&mgs_nid), &d("ost0"));
    let server = h[0].server(&[&d("mgs"), &d("mdt0"), &d("ost0")], &["--key", k]);
    let mgs_proc = &server;
    nodemap(mgs_proc, &["add", "secret-lab"]);
    nodemap(
        mgs_proc,
        &["add_range", "--name", "secret-lab", "--range", &h[2].addr],
    );
    for p in ["admin", "trusted"] {
        nodemap(
            mgs_proc,
            &[
                "modify",
                "--name",
                "secret-lab",
                "--property",
                p,
                "--value",
                "1",
            ],
        );
    }
    nodemap(
        mgs_proc,
        &[
            "modify",
            "--name",
            "secret-lab",
            "--property",
            "level",
            "--value",
            "privacy",
        ],
    );
    // The plain client's address is in no nodemap: the default one, trusted.
    nacre_tests::trusted_default(mgs_proc);
    enforced(&[&server]);
    let source = format!("{mgs_nid}:/nmlvl");
    let before = net_stat(server.pid(), "handshakes_privacy");
    let ck = nacre_testkit::derived_key(&key, &d("client.key"), "client", None);
    let k = ck.to_str().unwrap();
    let plain = ClientMount::mount_in(&h[1].prefix(), &source, &d("plain"), &["--key", k]);
    assert_eq!(
        net_stat(server.pid(), "handshakes_privacy"),
        before,
        "the key's level"
    );
    let lab_mount = ClientMount::mount_in(&h[2].prefix(), &source, &d("lab"), &["--key", k]);
    let data = nacre_testkit::pattern(5, 3 << 20);
    fs::write(lab_mount.mnt.join("f"), &data).unwrap();
    assert!(
        fs::read(plain.mnt.join("f")).unwrap() == data,
        "privacy data intact"
    );
    assert!(
        net_stat(server.pid(), "handshakes_privacy") > before,
        "the lab's connections are private"
    );
    assert!(net_stat(server.pid(), "handshakes_integrity") > 0);
    assert_eq!(net_stat(server.pid(), "frames_unauthentic"), 0);
}

/// `nacre path2fid PATH` on a mount.
fn fid_of(path: &Path) -> String {
    nacre_ok(&["path2fid", path.to_str().unwrap()])
        .trim()
        .to_string()
}

/// Run by `a_fileset_is_its_clients_whole_file_system` inside the fileset client's network
/// namespace (the test binary started again there): a native-library client sends the FIDs
/// it is given in `NACRE_PROBE_FIDS` (`name=FID,...`) as they are, and prints the errno
/// each gets (0: served).
#[test]
#[ignore = "a helper the fileset test runs in a network namespace"]
fn fileset_probe_with_raw_fids() {
    let mgs: nacre_types::Nid = std::env::var("NACRE_PROBE_MGS").unwrap().parse().unwrap();
    let fsname = std::env::var("NACRE_PROBE_FS").unwrap();
    let mut config = nacre_client::ClientConfig::default();
    let key = std::env::var("NACRE_PROBE_KEY").unwrap();
    config.net.key = Some(std::sync::Arc::new(
        nacre_net::sec::FsKey::load(Path::new(&key)).unwrap(),
    ));
    let client = nacre_client::Client::mount(mgs, &fsname, config).unwrap();
    println!("PROBE root {}", client.root().unwrap());
    // Objects read straight from their OSTs, by id (`name=STRIPE_SIZE:OST:SEQ:ID`), with
    // whatever capability this client was given for them (none for objects outside).
    for pair in std::env::var("NACRE_PROBE_OBJECTS").unwrap().split(',') {
        let (name, o) = pair.split_once('=').unwrap();
        let n: Vec<u64> = o.split(':').map(|x| x.parse().unwrap()).collect();
        if name.starts_with("inside") {
            // As any reader would: the layout comes from the MDT (with capabilities).
            let fid: nacre_types::Fid = std::env::var("NACRE_PROBE_INSIDE_FID")
                .unwrap()
                .parse()
                .unwrap();
            client.getattr(fid).unwrap();
            let _ = client.open(fid, nacre_types::cred::MAY_READ);
        }
        let layout = nacre_types::Layout::raid0(
            n[0] as u32,
            vec![nacre_types::layout::StripeObject {
                ost: n[1] as u32,
                object: nacre_types::ObjectId {
                    seq: n[2],
                    id: n[3],
                },
            }],
            nacre_types::PoolName::NONE,
        );
        let errno = match nacre_client::osc::read(&client, &layout, 0, 4) {
            Ok(_) => 0,
            Err(e) => e.errno(),
        };
        println!("PROBE {name} {errno}");
    }
    for pair in std::env::var("NACRE_PROBE_FIDS").unwrap().split(',') {
        let (name, fid) = pair.split_once('=').unwrap();
        let fid: nacre_types::Fid = fid.parse().unwrap();
        let errno = match client.getattr(fid) {
            Ok(_) => 0,
            Err(e) => e.errno(),
        };
        println!("PROBE {name} {errno}");
    }
}

#[test]
fn a_fileset_is_its_clients_whole_file_system() {
    let lab = NetLab::new(4);
    let h = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix("nacre-nodemap")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let key = d("key");
    let k = key.to_str().unwrap();
    nacre_ok(&["keygen", "nmfs", "-o", k, "--level", "integrity"]);
    let mgs_nid = format!("{}@tcp", h[0].addr);
    mkfs("--mgs", 0, "nmfs", None, &d("mgs"));
    mkfs("--mdt", 0, "nmfs", Some(&mgs_nid), &d("mdt0"));
    mkfs("--mdt", 1, "nmfs", Some(&mgs_nid), &d("mdt1"));
    mkfs("--ost", 0, "nmfs", Some(&mgs_nid), &d("ost0"));
    let mds0 = h[0].server(&[&d("mgs"), &d("mdt0"), &d("ost0")], &["--key", k]);
    let mds1 = h[1].server(&[&d("mdt1")], &["--key", k]);
    let mgs_proc = &mds0;
    let source = format!("{mgs_nid}:/nmfs");
    let admin = ClientMount::mount_in(&h[2].prefix(), &source, &d("admin"), &["--key", k]);
    let a = |p: &str| admin.mnt.join(p);
    // /projects/a lives on MDT1 (its inodes are checked across MDTs); b and top are outside.
    fs::create_dir(a("projects")).unwrap();
    nacre_ok(&["mkdir", "-i", "1", a("projects/a").to_str().unwrap()]);
    fs::create_dir(a("projects/a/sub")).unwrap();
    fs::write(a("projects/a/sub/data"), b"inside").unwrap();
    fs::create_dir(a("projects/b")).unwrap();
    fs::write(a("projects/b/secret"), b"outside").unwrap();
    fs::write(a("top"), b"outside too").unwrap();
    // A hard link into the fileset makes that file reachable from it.
    fs::write(a("projects/b/shared"), b"linked in").unwrap();
    fs::hard_link(a("projects/b/shared"), a("projects/a/shared")).unwrap();

    nodemap(mgs_proc, &["add", "proj-a"]);
    nodemap(
        mgs_proc,
        &["add_range", "--name", "proj-a", "--range", &h[3].addr],
    );
    for p in ["admin", "trusted"] {
        nodemap(
            mgs_proc,
            &[
                "modify",
                "--name",
                "proj-a",
                "--property",
                p,
                "--value",
                "1",
            ],
        );
    }
    nodemap(
        mgs_proc,
        &[
            "modify",
            "--name",
            "proj-a",
            "--property",
            "fileset",
            "--value",
            "/projects/a",
        ],
    );
    enforced(&[&mds0, &mds1]);

    // The tenant's nodes hold a client key bound to its nodemap.
    let tenant_key = nacre_testkit::derived_key(&key, &d("proj-a.key"), "client", Some("proj-a"));
    let k = tenant_key.to_str().unwrap();
    let proj = ClientMount::mount_in(&h[3].prefix(), &source, &d("proj"), &["--key", k]);
    let p = |x: &str| proj.mnt.join(x);
    let mut names: Vec<String> = fs::read_dir(&proj.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["shared", "sub"], "the mount's root is the fileset");
    assert_eq!(fs::read(p("sub/data")).unwrap(), b"inside");
    fs::write(p("sub/new"), b"made inside").unwrap();
    assert_eq!(fs::read(a("projects/a/sub/new")).unwrap(), b"made inside");
    assert_eq!(fid_of(&proj.mnt), fid_of(&a("projects/a")));

    // The native library, sending raw FIDs from the fileset client's address.
    let fids = [
        ("inside_file", fid_of(&a("projects/a/sub/data"))),
        ("inside_dir", fid_of(&a("projects/a/sub"))),
        ("hard_linked", fid_of(&a("projects/b/shared"))),
        ("outside_file", fid_of(&a("projects/b/secret"))),
        ("outside_dir", fid_of(&a("projects/b"))),
        ("parent", fid_of(&a("projects"))),
        ("fs_root", fid_of(&admin.mnt)),
        ("top", fid_of(&a("top"))),
    ];
    let list: Vec<String> = fids.iter().map(|(n, f)| format!("{n}={f}")).collect();
    // The first object of a file inside and of one outside, as the admin client sees them.
    let object = |path: &Path| -> String {
        let v: serde_json::Value =
            serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()]))
                .unwrap();
        let o = &v["objects"][0];
        format!("{}:{}:{}:{}", v["stripe_size"], o["ost"], o["seq"], o["id"])
    };
    let objects = [
        format!("inside_object={}", object(&a("projects/a/sub/data"))),
        format!("outside_object={}", object(&a("projects/b/secret"))),
        format!("top_object={}", object(&a("top"))),
    ];
    let out = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", h[3].netns))
        .arg(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            &nacre_tests::test_name(module_path!(), "fileset_probe_with_raw_fids"),
            "--nocapture",
        ])
        .env("NACRE_PROBE_MGS", &mgs_nid)
        .env("NACRE_PROBE_FS", "nmfs")
        .env("NACRE_PROBE_FIDS", list.join(","))
        .env("NACRE_PROBE_OBJECTS", objects.join(","))
        .env("NACRE_PROBE_INSIDE_FID", fid_of(&a("projects/a/sub/data")))
        .env("NACRE_PROBE_KEY", k)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("PROBE {name} ")))
            .unwrap_or_else(|| panic!("no probe {name}: {text}"))
            .to_string()
    };
    assert_eq!(probe("root"), fid_of(&a("projects/a")), "told its root");
    for inside in ["inside_file", "inside_dir", "hard_linked", "inside_object"] {
        assert_eq!(probe(inside), "0", "{inside}");
    }
    for outside in [
        "outside_file",
        "outside_dir",
        "parent",
        "fs_root",
        "top",
        "outside_object",
        "top_object",
    ] {
        assert_eq!(
            probe(outside),
            libc::EACCES.to_string(),
            "{outside} is refused"
        );
    }
}

/// The kernel's per-mount flags of the mount at `mnt` (`/proc/self/mountinfo`'s sixth
/// field, e.g. `rw,nosuid,nodev,relatime`).
fn mount_flags(mnt: &Path) -> String {
    let want = mnt.to_str().unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[4] == want)
        .map(|f| f[5].to_string())
        .unwrap_or_else(|| panic!("{want} is not mounted"))
}
