//! Directories a mount answers itself in a directory delegated to it (`--async-dirops`,
//! issue 44 item 2; crates/client/src/delegated/mod.rs, `Client::mkdir_delegated`): made
//! by the MDT as its own mkdir makes them (owner, group and set-group-id inheritance, times,
//! the parent's link count, quotas, changelog records), kept through a kill -9 of the MDT
//! and lost with a mount killed before it sent them; answered only where the MDT's own
//! mkdir would make a plain directory of its MDT (a default directory striping, set before
//! the delegation or by another mount while it is held, sends them to the MDT); and what
//! the MDT accepts of a raw client's directory items.

use super::async_dirops::{
    async_mount, counter, delegated_dir, hold_sender, names, numbered_and_first, release_sender,
    root_inodes, until_counter,
};
use super::batch::{item, nth, polls, Session};
use super::growth::fid_at;
use nacre_ldlm::msg::{DELEGATION, UPDATE};
use nacre_testkit::raw::RawConn;
use nacre_testkit::{dir_mdt, fail_loc, lfsck_clean, nacre_ok, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, FileKind, Status};
use nacre_wire::mds::{BatchCreate, MdsOp, MdsReply};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// What a stat shows of a directory: mode, owner, group, links, size, inode, mtime.
fn shown(p: &Path) -> (u32, u32, u32, u64, u64, u64, i64, i64) {
    assert!(
        fs::metadata(p).is_ok_and(|m| m.is_dir()),
        "{} is a directory",
        p.display()
    );
    stat_shown(p)
}

/// What a stat shows of any inode: mode, owner, group, links, size, inode, mtime.
pub(crate) fn stat_shown(p: &Path) -> (u32, u32, u32, u64, u64, u64, i64, i64) {
    let m = fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (
        m.mode(),
        m.uid(),
        m.gid(),
        m.nlink(),
        m.size(),
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
    )
}

/// Directories made by a mount in a directory it holds are answered there and sent later
/// (the counters say so); the kernel keeps what the mount answered (a stat right after
/// sends nothing), and it is what the MDT made (another mount's stat): the set-group-id parent's group and bit,
/// the times, the inode; the parent's link count counts them; the quota counts them; the
/// changelog has a MKDIR record each; the first create in one has it delegated, so what is
/// made in it is answered too; they are directories as any other (a file made in one,
/// another removed).
#[test]
fn mkdirs_answered_by_the_mount_are_made_as_the_mdt_makes_them() {
    let fsname = "amkdir";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    std::os::unix::fs::chown(&da, None, Some(4321)).unwrap();
    fs::set_permissions(&da, fs::Permissions::from_mode(0o2777)).unwrap();
    fs::File::create(da.join("first")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(nacre_ok(&["changelog", "register", &src]).trim(), "cl1");
    let inodes = root_inodes(&src);
    let answered = counter(&a, fsname, "answered");
    hold_sender(&a);
    let mut made: Vec<String> = (0..40).map(|i| format!("s{i}")).collect();
    for n in &made {
        fs::create_dir(da.join(n)).unwrap();
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(da.join("private"))
        .unwrap();
    made.push("private".into());
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 41,
        "answered by the mount"
    );
    assert_eq!(counter(&a, fsname, "pending"), 41, "and not sent");
    let here: Vec<_> = made.iter().map(|n| shown(&da.join(n))).collect();
    assert_eq!(
        counter(&a, fsname, "pending"),
        41,
        "the stats showed what the mount answered"
    );
    release_sender(&a);
    // The holder's own stat of the parent: its links as the MDT counts them now.
    assert_eq!(fs::metadata(&da).unwrap().nlink(), 2 + 41, "on the holder");
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    let mut want = made.clone();
    want.push("first".into());
    want.sort();
    let db = fs.path("d");
    assert_eq!(names(&db), want, "the other mount sees them all");
    for (n, h) in made.iter().zip(&here) {
        assert_eq!(shown(&db.join(n)), *h, "{n}: as the mount answered it");
    }
    let s0 = fs::metadata(db.join("s0")).unwrap();
    assert_eq!(
        (s0.mode() & 0o7777, s0.gid(), s0.nlink()),
        (0o2755, 4321, 2),
        "the parent's group and set-group-id bit"
    );
    assert_eq!(
        fs::metadata(db.join("private")).unwrap().mode() & 0o7777,
        0o2700
    );
    assert_eq!(
        fs::metadata(&db).unwrap().nlink(),
        2 + 41,
        "each links its parent"
    );
    assert_eq!(root_inodes(&src), inodes + 41, "the quota counts them");
    let records = nacre_ok(&["changelog", "read", &src, "--json"]);
    let mkdirs = records
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["type"] == "MKDIR")
        .count();
    assert_eq!(mkdirs, 41, "a MKDIR record each");
    // The first create in one has it delegated here (it is empty): every create and
    // mkdir in it is answered too.
    let answered = counter(&a, fsname, "answered");
    for i in 0..5 {
        fs::write(da.join(format!("s2/f{i}")), b"answered").unwrap();
    }
    fs::create_dir(da.join("s2/deeper")).unwrap();
    fs::File::create(da.join("s2/deeper/g")).unwrap();
    assert_eq!(counter(&a, fsname, "answered"), answered + 7);
    fs::File::open(da.join("s2")).unwrap().sync_all().unwrap();
    assert_eq!(
        names(&db.join("s2")),
        vec!["deeper", "f0", "f1", "f2", "f3", "f4"]
    );
    assert_eq!(names(&db.join("s2/deeper")), vec!["g"]);
    assert_eq!(fs::read(db.join("s2/f3")).unwrap(), b"answered");
    // Directories as any other.
    fs::write(da.join("s0/f"), b"in an answered directory").unwrap();
    assert_eq!(
        fs::read(db.join("s0/f")).unwrap(),
        b"in an answered directory"
    );
    fs::remove_dir(da.join("s1")).unwrap();
    assert!(!db.join("s1").exists());
    assert_eq!(fs::metadata(&db).unwrap().nlink(), 2 + 40);
    drop(a);
    lfsck_clean(&src);
}

/// Directories answered and not sent when the MDT is killed -9 inside their batch's
/// transaction are made once after its restart (the mount, never answered, sends them
/// again); those a mount answered and never sent die with it (kill -9): no other mount
/// ever sees them, the parent's link count and the quota count only what was made, and
/// the namespace checker finds nothing.
#[test]
fn answered_mkdirs_outlive_an_mdt_kill_and_die_with_their_mount() {
    let fsname = "amkdirk";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_dir(&fs);
    let inodes = root_inodes(&src);
    hold_sender(&a);
    for i in 0..20 {
        fs::create_dir(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 20);
    let mds = &mut fs.servers_mut()[0];
    fail_loc(mds.pid(), "mds.batch.made");
    release_sender(&a);
    assert!(
        mds.wait_exit(Duration::from_secs(30)),
        "the MDT did not die"
    );
    mds.restart();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    let want = numbered_and_first("p", 20);
    let db = fs.path("d");
    assert_eq!(names(&db), want, "made once");
    assert_eq!(fs::metadata(&db).unwrap().nlink(), 22);
    assert_eq!(root_inodes(&src), inodes + 20);
    // Answered, never sent: gone with the mount (in a directory it made since: the
    // restart ended what it knew of d).
    let (da2, db2) = (a.mnt.join("d2"), fs.path("d2"));
    fs::create_dir(&da2).unwrap();
    fs::File::create(da2.join("first")).unwrap();
    fs::File::open(&da2).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    hold_sender(&a);
    for i in 0..10 {
        fs::create_dir(da2.join(format!("q{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 10, "answered, not sent");
    let pid = a.pid().expect("the mount's process") as i32;
    // SAFETY: a signal to a child process of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    super::async_dirops::short_callbacks(fsname);
    // The listing calls the dead mount's delegation back; it is evicted.
    assert_eq!(names(&db2), vec!["first"], "none of what was never sent");
    assert_eq!(fs::metadata(&db2).unwrap().nlink(), 2);
    assert_eq!(names(&db), want);
    assert_eq!(root_inodes(&src), inodes + 22, "d2 and its file");
    drop(a);
    lfsck_clean(&src);
}

/// Gives `d` a default directory striping: its new subdirectories are placed on MDT1.
fn placed_on_mdt1(d: &Path) {
    nacre_ok(&[
        "setdirstripe",
        "-D",
        "-c",
        "1",
        "-i",
        "1",
        d.to_str().unwrap(),
    ]);
}

/// Where the MDT's own mkdir would not make a plain directory of the parent's MDT (a
/// default directory striping: `setdirstripe -D`), the mount never answers one: not in a
/// directory delegated with the default already set (the delegation says so), nor after
/// another client sets it while the delegation is held (the change calls it back first:
/// a raw client's `SetDirDefault` by FID, which reads nothing of the directory before).
/// Each such mkdir lands where the default places it (MDT1), and nothing is lost.
#[test]
fn a_default_directory_striping_sends_mkdirs_to_the_mdt() {
    let fsname = "amkdird";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).mdts(2).fsname(fsname));
    let mds = fs.servers_mut()[0].listen.clone();
    let a = async_mount(&fs);
    // Set before the delegation.
    let ea = a.mnt.join("e");
    fs::create_dir(&ea).unwrap();
    placed_on_mdt1(&ea);
    fs::File::create(ea.join("first")).unwrap();
    fs::File::create(ea.join("second")).unwrap();
    let answered = counter(&a, fsname, "answered");
    assert!(answered >= 1, "files are answered in e");
    fs::create_dir(ea.join("x")).unwrap();
    assert_eq!(counter(&a, fsname, "answered"), answered, "not the mkdir");
    assert_eq!(dir_mdt(&fs.path("e/x")), 1, "placed by the default");
    // Set by another client while the delegation is held.
    let (da, db) = (a.mnt.join("d"), fs.path("d"));
    fs::create_dir(&da).unwrap();
    let d_fid = fid_at(&da);
    fs::File::create(da.join("first")).unwrap();
    fs::File::create(da.join("second")).unwrap();
    let answered = counter(&a, fsname, "answered");
    fs::create_dir(da.join("before")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "answered before the default"
    );
    let mut raw = Session::open(&mds, fsname, [0x64; 16]);
    let default = nacre_types::dirstripe::DirDefault {
        count: 1,
        start: 1,
        hash: nacre_types::dirstripe::DirHash::AllChar,
        max_inherit: 1,
    };
    let set = MdsOp::SetDirDefault {
        fid: d_fid,
        default: Some(default),
    };
    assert_eq!(raw.call(set).0, 0);
    fs::create_dir(da.join("after")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "not after it"
    );
    assert_eq!(dir_mdt(&db.join("before")), 0);
    assert_eq!(dir_mdt(&db.join("after")), 1, "placed by the default");
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&fs.source());
}

/// The kernel of the mount that answered a mkdir keeps the directory's attributes for as
/// long as it holds the parent's delegation; another client that changes the directory
/// by its FID alone (no name looked up in the parent) has the delegation called back
/// first, so the holder's next stat shows the change: a raw client's mkdir in it (the link
/// it adds), and a raw client's rename into it from a directory of MDT1 (MDT0's half of
/// the rename adds the entry: its times).
#[test]
fn a_change_by_fid_in_an_answered_directory_reaches_its_holder() {
    let fsname = "amkdirf";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).mdts(2).fsname(fsname));
    let mds0 = fs.servers_mut()[0].listen.clone();
    let mds1 = fs.servers_mut()[1].listen.clone();
    let a = async_mount(&fs);
    let answered_in = |name: &str| {
        let d = a.mnt.join(name);
        fs::create_dir(&d).unwrap();
        fs::File::create(d.join("first")).unwrap();
        let before = counter(&a, fsname, "answered");
        fs::create_dir(d.join("x")).unwrap();
        assert_eq!(counter(&a, fsname, "answered"), before + 1, "{name}/x");
        fs::File::open(&d).unwrap().sync_all().unwrap();
        d.join("x")
    };
    let (x1, x2) = (answered_in("d1"), answered_in("d2"));
    let (x1_fid, x2_fid) = (fid_at(&x1), fid_at(&x2));
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(fs::metadata(&x1).unwrap().nlink(), 2);
    let times = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.mtime(), m.mtime_nsec())
    };
    let x2_before = times(&x2);
    let held = counter(&a, fsname, "directories");
    // A mkdir in x1 by its FID.
    let mut raw = Session::open(&mds0, fsname, [0x65; 16]);
    let mkdir = MdsOp::Mkdir {
        parent: x1_fid,
        name: b"by_fid".to_vec(),
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    assert_eq!(raw.call(mkdir).0, 0);
    assert_eq!(
        counter(&a, fsname, "directories"),
        held - 1,
        "d1's delegation called back"
    );
    assert_eq!(
        fs::metadata(&x1).unwrap().nlink(),
        3,
        "the holder sees the new link"
    );
    assert_eq!(names(&x1), vec!["by_fid"]);
    // A rename into x2 by its FID, sent to MDT1, which holds the source.
    let far = fs.path("far");
    nacre_ok(&["mkdir", "-i", "1", far.to_str().unwrap()]);
    fs::write(far.join("f"), b"from afar").unwrap();
    let far_fid = fid_at(&far);
    let mut r1 = RawConn::connect(&mds1, fsname, [0x66; 16]).unwrap();
    r1.send_mds(1, MdsOp::Connect).unwrap();
    assert_eq!(r1.recv().unwrap().header.status, 0);
    let rename = MdsOp::Rename {
        src_parent: far_fid,
        src_name: b"f".to_vec(),
        dst_parent: x2_fid,
        dst_name: b"f".to_vec(),
        noreplace: true,
    };
    r1.send_mds(1, rename).unwrap();
    assert_eq!(r1.recv().unwrap().header.status, 0, "the rename");
    assert_eq!(
        counter(&a, fsname, "directories"),
        held - 2,
        "d2's delegation called back"
    );
    assert_ne!(
        times(&x2),
        x2_before,
        "the holder sees the new entry's time"
    );
    assert_eq!(names(&x2), vec!["f"]);
    assert_eq!(fs::read(x2.join("f")).unwrap(), b"from afar");
    drop(a);
    lfsck_clean(&fs.source());
}

/// `DelegateDir` as a raw client: whether its holder may answer mkdirs.
fn delegated_mkdirs(s: &mut Session, fid: Fid) -> bool {
    s.0.send_mds_with(0, MdsOp::DelegateDir { fid }, UPDATE | DELEGATION)
        .unwrap();
    let r = s.0.recv().unwrap();
    match r.mds() {
        Some(MdsReply::Delegated { mkdirs, .. }) => mkdirs,
        other => panic!("delegate: status {} {other:?}", r.header.status),
    }
}

/// A raw client speaks `CreateBatch` with directory items as an attacker would. A
/// directory carrying bytes, or an item of any kind but a regular file or a directory, is
/// refused `EINVAL` in its item; a directory where a default directory striping shapes new
/// ones `EOPNOTSUPP` (and a delegation there says its holder may not answer mkdirs); a
/// directory claiming another owner refuses the batch `EPERM`, one in a directory the user
/// may not write `EACCES`. What is made is exactly the legitimate items: a directory with
/// its parent's link, and lfsck finds nothing amiss.
#[test]
fn directory_items_are_made_only_as_the_mdts_own_mkdir_would() {
    let fsname = "bmkdir";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).mdts(2).fsname(fsname));
    let mds = fs.servers_mut()[0].listen.clone();
    let open = fs.path("open");
    let shaped = fs.path("shaped");
    let closed = fs.path("closed");
    for d in [&open, &shaped, &closed] {
        fs::create_dir(d).unwrap();
    }
    for d in [&open, &shaped] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o777)).unwrap();
    }
    placed_on_mdt1(&shaped);
    let (open_fid, shaped_fid, closed_fid) = (fid_at(&open), fid_at(&shaped), fid_at(&closed));
    let mut c = Session::open(&mds, fsname, [0x62; 16]);
    let (first, _) = c.grant(100);
    let of = |i: u32, name: &str, kind: FileKind, owner: u32| BatchCreate {
        kind,
        ..item(nth(first, i), name, owner)
    };
    let user = Cred::new(4242, 4242, vec![]);
    let with_data = BatchCreate {
        data: b"bytes".to_vec(),
        ..of(1, "withdata", FileKind::Directory, 4242)
    };
    let items = vec![
        of(0, "sub", FileKind::Directory, 4242),
        with_data,
        of(2, "link", FileKind::Symlink, 4242),
        of(3, "fifo", FileKind::Fifo, 4242),
        of(4, "file", FileKind::Regular, 4242),
    ];
    let (status, results) = nacre_types::cred::with(user.clone(), || c.batch(open_fid, items));
    assert_eq!(status, 0);
    assert_eq!(
        results,
        vec![
            Ok(nth(first, 0)),
            Err(Status::Inval),
            Err(Status::Inval),
            Err(Status::Inval),
            Ok(nth(first, 4)),
        ]
    );
    let items = vec![of(5, "sub", FileKind::Directory, 4242)];
    let (status, results) = nacre_types::cred::with(user.clone(), || c.batch(shaped_fid, items));
    assert_eq!((status, results), (0, vec![Err(Status::NotSupp)]));
    let items = vec![of(6, "rooted", FileKind::Directory, 0)];
    let (status, _) = nacre_types::cred::with(user.clone(), || c.batch(open_fid, items));
    assert_eq!(status, Status::Perm as i32, "another owner");
    let items = vec![of(7, "x", FileKind::Directory, 4242)];
    let (status, _) = nacre_types::cred::with(user, || c.batch(closed_fid, items));
    assert_eq!(
        status,
        Status::Access as i32,
        "a directory the user may not write"
    );
    assert_eq!(super::async_dirops::names(&open), vec!["file", "sub"]);
    let sub = fs::metadata(open.join("sub")).unwrap();
    assert!(sub.is_dir());
    assert_eq!((sub.uid(), sub.nlink()), (4242, 2));
    assert_eq!(fs::metadata(&open).unwrap().nlink(), 3);
    assert_eq!(fid_at(&open.join("sub")), nth(first, 0));
    assert!(super::async_dirops::names(&shaped).is_empty());
    assert!(super::async_dirops::names(&closed).is_empty());
    fs::create_dir(open.join("sub/inner")).unwrap();
    assert_eq!(fs::metadata(open.join("sub")).unwrap().nlink(), 3);
    // Last (a holder that answers no callback holds up the mount's stats of them).
    let mut d = Session::open(&mds, fsname, [0x63; 16]);
    let mut poller = Session::open(&mds, fsname, [0x63; 16]);
    polls(&mut poller);
    assert!(delegated_mkdirs(&mut d, open_fid));
    assert!(!delegated_mkdirs(&mut d, shaped_fid));
    lfsck_clean(&fs.source());
}
