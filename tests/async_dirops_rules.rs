//! The rules a delegation's holder checks creates by, and what happens to what it answered
//! when one changes (docs/locking.md, "Delegated directories"; crates/mds/src/delegations.rs):
//! a quota limit, a change of the nodemaps (installed only once every delegation is back;
//! shown with each process a host of its own, as nodemaps apply by address),
//! a QoS rule capping creates, a change of the OST pools (likewise waited for).

use super::async_dirops::{
    async_mount, counter, delegated_dir, hold_sender, inodes_of, names, numbered_and_first,
    release_sender, until_counter,
};
use nacre_testkit::{lfsck_clean, mkfs, nacre_ok, ClientMount, Form, NetLab, Spec, TestFs};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A quota limit set while a mount holds a delegation calls it back (a holder checks no
/// quota): the creates it answered before are made and counted even past the limit (the
/// application has those files), none is lost, the mount asks for no delegation while a
/// limit stands, and the MDT refuses the user's next create `EDQUOT`.
#[test]
fn a_quota_limit_calls_delegations_back() {
    let fsname = "asyncq";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let a = async_mount(&fs);
    fs::set_permissions(fs.scratch(), fs::Permissions::from_mode(0o755)).unwrap();
    let home = a.mnt.join("home");
    fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(4300), Some(4300)).unwrap();
    let in_home = |script: &str| {
        let script = format!("cd {} && {script}", home.display());
        super::nodemap::as_user(4300, 4300, "4300", &["sh", "-c", &script])
    };
    let (ok, err) = in_home(": > first");
    assert!(ok, "{err}");
    until_counter(&a, fsname, "pending", 0);
    hold_sender(&a);
    let (ok, err) = in_home("for i in 0 1 2 3 4 5 6 7 8 9; do : > p$i; done");
    assert!(ok, "{err}");
    assert_eq!(counter(&a, fsname, "pending"), 10, "answered by the mount");
    assert_eq!(counter(&a, fsname, "directories"), 1);
    // Below what the user has already: home, first, and the ten answered.
    nacre_ok(&["setquota", "-u", "4300", "-I", "5", &src]);
    until_counter(&a, fsname, "directories", 0);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(
        counter(&a, fsname, "lost"),
        0,
        "made past the limit, not refused"
    );
    let want = numbered_and_first("p", 10);
    assert_eq!(names(&fs.path("home")), want);
    assert_eq!(
        inodes_of(&src, "4300"),
        12,
        "home, first and the ten, counted exactly"
    );
    release_sender(&a);
    let answered = counter(&a, fsname, "answered");
    let (ok, err) = in_home(": > over");
    assert!(!ok && err.contains("quota"), "past the limit: {err}");
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered,
        "asked of the MDT"
    );
    assert_eq!(counter(&a, fsname, "directories"), 0, "none while limited");
    drop(a);
    lfsck_clean(&src);
}

/// A change of the nodemaps calls every delegation back (a holder checks creates with the
/// ids its old nodemap let through): the creates it answered before are sent while it
/// gives it back, none is lost.
#[test]
fn a_nodemap_change_calls_delegations_back() {
    let fsname = "asyncnm";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let mut fs = fs;
    let mgs = &fs.servers_mut()[0];
    nacre_tests::trusted_default(mgs);
    nacre_tests::enforced(&[mgs]);
    let mgs_pid = mgs.pid();
    let (a, da) = delegated_dir(&fs);
    hold_sender(&a);
    for i in 0..5 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 5, "answered by the mount");
    assert_eq!(counter(&a, fsname, "directories"), 1);
    // Any change: a nodemap for addresses no client here has.
    let pid = mgs_pid.to_string();
    nacre_ok(&["nodemap", "--pid", &pid, "add", "elsewhere"]);
    until_counter(&a, fsname, "directories", 0);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    let want = numbered_and_first("p", 5);
    assert_eq!(names(&fs.path("d")), want);
    release_sender(&a);
    drop(a);
    lfsck_clean(&fs.source());
}

/// A QoS rule capping the rate of creates calls every delegation back (a holder answers
/// creates without a request the rule could hold): what was answered before is sent while
/// the mount gives it back, none is lost, and while the rule stands no directory is
/// delegated (the next create goes to the MDT, through the rule's queue).
#[test]
fn a_qos_rule_capping_creates_calls_delegations_back() {
    let fsname = "asyncqos";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_dir(&fs);
    hold_sender(&a);
    for i in 0..5 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 5, "answered by the mount");
    assert_eq!(counter(&a, fsname, "directories"), 1);
    let add = [
        "qos",
        "add",
        "cap",
        "--op",
        "create",
        "--ops-rate",
        "1000",
        &src,
    ];
    nacre_ok(&add);
    super::qos::rules_reach(fsname, 1);
    until_counter(&a, fsname, "directories", 0);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    assert_eq!(names(&fs.path("d")), numbered_and_first("p", 5));
    release_sender(&a);
    let answered = counter(&a, fsname, "answered");
    // A directory never delegated (d's is not asked again for a while after its callback).
    let e = a.mnt.join("e");
    fs::create_dir(&e).unwrap();
    fs::File::create(e.join("first")).unwrap();
    fs::File::create(e.join("capped")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered,
        "asked of the MDT while the rule stands"
    );
    assert_eq!(counter(&a, fsname, "directories"), 0);
    drop(a);
    lfsck_clean(&src);
}

/// A change of the OST pools waits for every delegation to come back before it is
/// installed (a holder answered creates the MDT places in the directory's pool): files
/// answered before `pool remove` emptied the directory's pool are made in it, none is
/// lost, and once the pool has no OST left no directory placing files in it is
/// delegated, so the next create there is refused `ENOSPC` by the MDT itself.
#[test]
fn a_pool_change_waits_for_delegations() {
    let fsname = "asyncpool";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let pool = format!("{fsname}.fast");
    nacre_ok(&["pool", "new", &pool]);
    nacre_ok(&["pool", "add", &pool, "OST1"]);
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    nacre_ok(&["setstripe", "-c", "1", "-p", "fast", da.to_str().unwrap()]);
    fs::File::create(da.join("first")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    hold_sender(&a);
    for i in 0..5 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 5, "answered by the mount");
    assert_eq!(counter(&a, fsname, "directories"), 1);
    // Returns once the MDT installed the change: after the delegation came back.
    nacre_ok(&["pool", "remove", &pool, "OST1"]);
    assert_eq!(counter(&a, fsname, "directories"), 0, "given back first");
    assert_eq!(counter(&a, fsname, "pending"), 0, "sent while given back");
    assert_eq!(counter(&a, fsname, "lost"), 0);
    for i in 0..5 {
        let made = fs.path(&format!("d/p{i}"));
        assert_eq!(nacre_testkit::pool_of(&made), ("fast".to_string(), vec![1]));
    }
    release_sender(&a);
    let answered = counter(&a, fsname, "answered");
    // A directory never delegated, whose pool loses its OSTs: its delegation is refused.
    let slow = format!("{fsname}.slow");
    nacre_ok(&["pool", "new", &slow]);
    nacre_ok(&["pool", "add", &slow, "OST0"]);
    let e = a.mnt.join("e");
    fs::create_dir(&e).unwrap();
    nacre_ok(&["setstripe", "-c", "1", "-p", "slow", e.to_str().unwrap()]);
    nacre_ok(&["pool", "remove", &slow, "OST0"]);
    let err = fs::File::create(e.join("none")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered,
        "refused by the MDT"
    );
    drop(a);
    lfsck_clean(&fs.source());
}

/// A change of the nodemaps that squashes the holder's root (the `default` nodemap's
/// `admin` turned off), each process a host of its own (nodemaps apply by address): the
/// change is installed only once the delegation is back, so the creates the holder
/// answered as root before it are made as root, none lost; after it, root's next create
/// there goes to the MDT as the squashed user and is refused (`EACCES`, root's 0755
/// directory). Installed first, the MDT refused the answered creates (checked: 5 lost).
#[test]
fn a_nodemap_change_squashing_the_holder_waits_for_what_it_answered() {
    let lab = NetLab::new(3);
    let h = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix("nacre-asyncns")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let (fsname, mgs_nid) = ("asyncns", format!("{}@tcp", h[0].addr));
    mkfs("--mgs", 0, fsname, None, &d("mgs"));
    mkfs("--mdt", 0, fsname, Some(&mgs_nid), &d("mdt0"));
    mkfs("--ost", 0, fsname, Some(&mgs_nid), &d("ost0"));
    let mds = h[0].server(&[&d("mgs"), &d("mdt0")], &[]);
    let oss = h[1].server(&[&d("ost0")], &[]);
    nacre_tests::trusted_default(&mds);
    nacre_tests::enforced(&[&mds, &oss]);
    let source = format!("{mgs_nid}:/{fsname}");
    let a = ClientMount::mount_in(
        &h[2].prefix(),
        &source,
        &d("a"),
        &["--async-dirops", "true"],
    );
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    fs::File::create(da.join("first")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    hold_sender(&a);
    for i in 0..5 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 5, "answered by the mount");
    assert_eq!(counter(&a, fsname, "directories"), 1);
    // Returns once the MGS's process (serving the MDT) enforces it.
    nacre_tests::nodemap(
        &mds,
        &[
            "modify",
            "--name",
            "default",
            "--property",
            "admin",
            "--value",
            "0",
        ],
    );
    assert_eq!(counter(&a, fsname, "directories"), 0);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    assert_eq!(names(&da), numbered_and_first("p", 5));
    // Seen from a server's address (no nodemap applies): made as root.
    let check = ClientMount::mount_in(&h[1].prefix(), &source, &d("check"), &[]);
    for i in 0..5 {
        let m = fs::metadata(check.mnt.join(format!("d/p{i}"))).unwrap();
        assert_eq!(m.uid(), 0, "p{i}");
    }
    assert_eq!(
        fs::File::create(da.join("after")).unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied,
        "root squashed now"
    );
    release_sender(&a);
}
