//! A mount answering creates itself in directories delegated to it (`--async-dirops`,
//! issue 44 item 2; crates/client/src/delegated.rs): what becomes of the creates it
//! answered and has not sent when its delegation goes in each way — it is evicted, the
//! MDT restarts, it removes the directory, it changes the directory's mode — a deferred
//! handle on a file whose mode forbids the access it was opened for, what the kernel keeps
//! under a delegation, three mounts creating in one directory at once, and a kill -9 of
//! the mount or of the MDT while a batch is inside the MDT's transaction (fault point
//! `mds.batch.made`). The mount's sender is held at a fault point
//! (`client.delegated.sender~hold`) to keep creates answered and not sent for as long as
//! a test needs.

use nacre_testkit::{fail_loc, get_param, lfsck_clean, nacre_ok, ClientMount, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A mount of `fs` answering creates itself, at `scratch/mnt_a`.
pub(crate) fn async_mount(fs: &TestFs) -> ClientMount {
    let mnt = fs.scratch().join("mnt_a");
    fs::create_dir_all(&mnt).unwrap();
    fs.mount_another(&mnt, &["--async-dirops", "true"])
}

/// One counter of the mount's `llite.FS.async_dirops`.
pub(crate) fn counter(m: &ClientMount, fsname: &str, what: &str) -> u64 {
    async_counter(m.pid(), fsname, what)
}

/// One counter of `llite.FS.async_dirops` of the mount process `pid`.
pub(crate) fn async_counter(pid: Option<u32>, fsname: &str, what: &str) -> u64 {
    let text = get_param(pid, &format!("llite.{fsname}.async_dirops"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} "))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}

/// Waits (30 s at most) until the mount's counter `what` is `want`.
pub(crate) fn until_counter(m: &ClientMount, fsname: &str, what: &str, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = counter(m, fsname, what);
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what} stays {now}, not {want}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The names in `dir`, sorted.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

pub(crate) fn numbered(prefix: &str, n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    v.sort();
    v
}

/// A mount answering creates itself, and its directory `d` delegated to it: a file
/// `first` made there and sent (a directory's first create may go to the MDT).
pub(crate) fn delegated_dir(fs: &TestFs) -> (ClientMount, PathBuf) {
    let a = async_mount(fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    fs::File::create(da.join("first")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    (a, da)
}

/// `PREFIX0` to `PREFIX<n-1>` and `first`, sorted.
pub(crate) fn numbered_and_first(prefix: &str, n: usize) -> Vec<String> {
    let mut v = numbered(prefix, n);
    v.push("first".into());
    v.sort();
    v
}

/// MDT0000 of `fsname` waits one second for a lock callback's answer (then evicts).
pub(crate) fn short_callbacks(fsname: &str) {
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("ldlm.namespaces.mdt-{fsname}-MDT0000.callback_timeout_ms=1000"),
    ]);
}

/// Holds the mount's sender: what it answers from now on stays pending.
pub(crate) fn hold_sender(m: &ClientMount) {
    fail_loc(
        m.pid().expect("mount process"),
        "client.delegated.sender~hold",
    );
}

pub(crate) fn release_sender(m: &ClientMount) {
    fail_loc(m.pid().expect("mount process"), "0");
}

/// A mount evicted while holding creates it answered and never sent loses exactly those:
/// no other client ever sees them, what it sent (an fsync of the directory) stays, the
/// lost ones are counted, and the mount goes on creating as a new client. The eviction
/// reaches the mount inside a request of its own (its lock poll): what it answered is
/// dropped there, not sent (a send from there waited for itself).
#[test]
fn an_evicted_mount_loses_only_the_creates_it_never_sent() {
    let fsname = "asyncev";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    for i in 0..10 {
        fs::File::create(da.join(format!("s{i}"))).unwrap();
    }
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    hold_sender(&a);
    for i in 0..10 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 10, "answered, not sent");
    short_callbacks(fsname);
    let pid = a.pid().expect("the mount's process") as i32;
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The other client's listing calls the delegation back; the stopped mount does not
    // answer and is evicted.
    let seen = names(&fs.path("d"));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(seen, numbered("s", 10), "only what was sent");
    release_sender(&a);
    until_counter(&a, fsname, "lost", 10);
    until_counter(&a, fsname, "pending", 0);
    // A new client now: it creates again, and the others see it.
    let mut f = fs::File::create(da.join("after")).unwrap();
    f.write_all(b"after the eviction").unwrap();
    drop(f);
    fs::File::open(&da).unwrap().sync_all().unwrap();
    assert_eq!(fs::read(fs.path("d/after")).unwrap(), b"after the eviction");
    let mut want = numbered("s", 10);
    want.push("after".into());
    want.sort();
    assert_eq!(names(&fs.path("d")), want);
    drop(a);
    lfsck_clean(&fs.source());
}

/// A create the mount answers after the MDT evicted it, before it heard (its lock poll held
/// at a fault point: it missed the callback that evicted it), is lost with the rest of
/// what it never sent, and the first use of its handle, which is how the mount hears,
/// fails `EIO` as any handle opened before an eviction (it was `ENOENT`: the open of the
/// file that was never made).
#[test]
fn a_create_answered_after_an_unheard_eviction_fails_its_first_write_eio() {
    let fsname = "asyncuh";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    short_callbacks(fsname);
    fail_loc(
        a.pid().expect("mount process"),
        "client.lock_poll.blocking~hold",
    );
    // The other client's listing calls the delegation back; the mount never hears and is
    // evicted once the callback times out.
    assert_eq!(names(&fs.path("d")), ["first"]);
    let answered = counter(&a, fsname, "answered");
    let mut f = fs::File::create(da.join("late")).unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "answered by the mount"
    );
    let err = f.write_all(b"x").and_then(|_| f.sync_all()).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    drop(f);
    release_sender(&a);
    until_counter(&a, fsname, "lost", 1);
    assert_eq!(names(&fs.path("d")), ["first"], "never made");
    drop(a);
    lfsck_clean(&fs.source());
}

/// A delegated directory whose new files are opened at the MDT right after their create
/// (written through their OST objects) has the mount stop answering its creates after
/// eight: each cost a batch of its own before that open, and the open, a round trip more
/// than the MDT's create with open. The files after are made by the MDT, under a lock the
/// mount answers their stats with (no request, as without the option); a directory of
/// empty files goes on being answered; every file reads back through the other mount.
#[test]
fn creates_followed_by_writes_go_to_the_mdt_after_a_few() {
    let fsname = "asyncwf";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    let before = counter(&a, fsname, "answered");
    for i in 0..40 {
        fs::write(da.join(format!("w{i}")), nacre_testkit::pattern(i, 5000)).unwrap();
    }
    // Eight at most with `first` (answered, never opened) counted among them.
    let answered = counter(&a, fsname, "answered") - before;
    assert!((1..=8).contains(&answered), "{answered} of 40 answered");
    let reads = nacre_testkit::md_requests(fsname, &["getattr", "lookup"]);
    for i in 8..40 {
        assert_eq!(fs::metadata(da.join(format!("w{i}"))).unwrap().len(), 5000);
    }
    assert_eq!(
        nacre_testkit::md_requests(fsname, &["getattr", "lookup"]) - reads,
        0,
        "stats of the files the MDT made here asked it"
    );
    let e = a.mnt.join("e");
    fs::create_dir(&e).unwrap();
    let before = counter(&a, fsname, "answered");
    for i in 0..20 {
        fs::File::create(e.join(format!("p{i}"))).unwrap();
    }
    assert!(
        counter(&a, fsname, "answered") - before >= 19,
        "empty files answered"
    );
    for i in 0..40 {
        let f = fs.path(&format!("d/w{i}"));
        assert_eq!(
            fs::read(&f).unwrap(),
            nacre_testkit::pattern(i, 5000),
            "{f:?}"
        );
    }
    drop(a);
    lfsck_clean(&fs.source());
}

/// Creates answered and not sent when the MDT is killed -9 are sent once it is back (the
/// restarted MDT refuses the delegation at lock replay: the mount's sender sends them
/// after the recovery, not the replay itself): every one is there, with the FID the mount
/// answered, and nothing is lost.
#[test]
fn creates_answered_before_an_mdt_restart_are_made_after_it() {
    let fsname = "asyncrs";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    hold_sender(&a);
    for i in 0..20 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 20);
    assert_eq!(
        fs::metadata(da.join("p7")).unwrap().len(),
        0,
        "answered here before it is sent"
    );
    let mds = &mut fs.servers_mut()[0];
    mds.kill9();
    mds.restart();
    release_sender(&a);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    let want = numbered_and_first("p", 20);
    assert_eq!(names(&fs.path("d")), want, "the other mount sees them all");
    drop(a);
    lfsck_clean(&fs.source());
}

/// A process creating and writing files in delegated directories while the MDT is killed
/// -9 and restarted goes on: the write that finds a delegation lost (the restarted MDT
/// refuses it at lock replay) has the kernel forget the files answered under it without
/// waiting for their pages, one of which the kernel holds locked for that very write (it
/// hung there for good). Five files per directory, each directory made under its parent's
/// delegation and delegated in turn (below `Dir::writes_follow`'s eight, so every file is
/// answered by the mount); the writer goes on until files were written after the restart.
/// Every file reads back through the other mount.
#[test]
fn writes_in_a_delegated_directory_go_on_through_an_mdt_restart() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let fsname = "asyncwr";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    const PER_DIR: u64 = 5;
    let (written, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let writer = {
        let (da, written, stop) = (da.clone(), written.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                let g = da.join(format!("g{}", n / PER_DIR));
                if n % PER_DIR == 0 {
                    fs::create_dir(&g).unwrap();
                }
                fs::write(g.join(format!("w{n}")), nacre_testkit::pattern(n, 5000)).unwrap();
                n += 1;
                written.store(n, Ordering::Release);
            }
            done_tx.send(n).unwrap();
        })
    };
    nacre_testkit::wait_for("100 files", || written.load(Ordering::Acquire) >= 100);
    let mds = &mut fs.servers_mut()[0];
    mds.kill9();
    mds.restart();
    let at_restart = written.load(Ordering::Acquire);
    // A hang stops the writer: this times out.
    nacre_testkit::wait_for("100 files written after the restart", || {
        written.load(Ordering::Acquire) >= at_restart + 100
    });
    stop.store(true, Ordering::Release);
    let n = done_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    writer.join().unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    for i in 0..n {
        let f = fs.path(&format!("d/g{}/w{i}", i / PER_DIR));
        assert_eq!(
            fs::read(&f).unwrap(),
            nacre_testkit::pattern(i, 5000),
            "{f:?}"
        );
    }
    drop(a);
    lfsck_clean(&fs.source());
}

/// Inodes user `uid` owns, as the quota accounting counts them.
pub(crate) fn inodes_of(src: &str, uid: &str) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&nacre_ok(&["quota", "--json", "-u", uid, src])).unwrap();
    v[0]["inodes"].as_u64().unwrap()
}

/// Inodes root owns, as the quota accounting counts them.
pub(crate) fn root_inodes(src: &str) -> u64 {
    inodes_of(src, "0")
}

/// How often the armed fault point of server process `pid` fired.
pub(crate) fn fired(pid: u32) -> u64 {
    get_param(Some(pid), "fail_fired").trim().parse().unwrap()
}

/// Waits (30 s at most) until `pid`'s armed point fired.
pub(crate) fn until_fired(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fired(pid) == 0 {
        assert!(Instant::now() < deadline, "the point never fired");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A mount killed -9 while the MDT runs a batch of its creates (held inside the
/// batch's transaction, every item made, nothing committed) leaves the batch whole: the
/// MDT finishes it, the other mount sees every file once the dead mount is evicted, the
/// inode quota counts exactly those files, and the namespace checker finds nothing.
#[test]
fn a_mount_killed_with_a_batch_in_flight_leaves_it_whole() {
    let fsname = "asynckc";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_dir(&fs);
    let before = root_inodes(&src);
    hold_sender(&a);
    for i in 0..20 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 20);
    let mds = fs.server_pids()[0];
    fail_loc(mds, "mds.batch.made~hold");
    release_sender(&a);
    until_fired(mds);
    let pid = a.pid().expect("the mount's process") as i32;
    // SAFETY: a signal to a child process of this test.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    fail_loc(mds, "0");
    short_callbacks(fsname);
    // The listing calls the dead mount's delegation back; it is evicted.
    let want = numbered_and_first("p", 20);
    assert_eq!(names(&fs.path("d")), want, "the batch, whole");
    assert_eq!(
        root_inodes(&src),
        before + 20,
        "the quota counts exactly them"
    );
    drop(a);
    lfsck_clean(&src);
}

/// An MDT killed -9 inside a batch's transaction (every item made, nothing committed)
/// loses the batch; the mount, never answered, sends it again to the restarted MDT:
/// every file is made once, nothing is counted lost, the inode quota counts exactly the
/// files, and the namespace checker finds nothing.
#[test]
fn an_mdt_killed_inside_a_batch_makes_it_once_back() {
    let fsname = "asynckm";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_dir(&fs);
    let before = root_inodes(&src);
    hold_sender(&a);
    for i in 0..20 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
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
    assert_eq!(names(&fs.path("d")), want, "the other mount sees them all");
    assert_eq!(
        root_inodes(&src),
        before + 20,
        "the quota counts exactly them"
    );
    drop(a);
    lfsck_clean(&src);
}

/// The holder's own removal of a subdirectory it answered creates in is refused
/// `ENOTEMPTY` (the removal names only the parent: every pending create is sent before
/// it); its own chmod of a delegated directory gives the delegation back (the mode
/// decides who may create there; nothing calls the holder's own lock back); a create
/// with mode 0444 opened for writing writes, as on a local file system.
#[test]
fn the_holders_own_changes_see_the_creates_it_answered() {
    let fsname = "asyncown";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let sub = a.mnt.join("d/sub");
    fs::create_dir_all(&sub).unwrap();
    hold_sender(&a);
    fs::File::create(sub.join("x")).unwrap();
    assert_eq!(counter(&a, fsname, "pending"), 1);
    let err = fs::remove_dir(&sub).expect_err("sub is not empty");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY), "{err}");
    assert_eq!(counter(&a, fsname, "pending"), 0, "sent before the rmdir");
    // Its own chmod: the delegation goes back (pending creates sent first).
    fs::File::create(sub.join("y")).unwrap();
    // d (its mkdir of sub was answered) and sub.
    let held = counter(&a, fsname, "directories");
    assert!(held >= 2, "{held} delegated");
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(counter(&a, fsname, "pending"), 0, "sent before the chmod");
    assert_eq!(
        counter(&a, fsname, "directories"),
        held - 1,
        "sub given back at the chmod"
    );
    // 0444, opened for writing by its creator: writable, as the kernel allows.
    let answered = counter(&a, fsname, "answered");
    let ro = a.mnt.join("d/readonly");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&ro)
        .unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "answered by the mount"
    );
    f.write_all(b"written through a 0444 create").unwrap();
    drop(f);
    release_sender(&a);
    assert_eq!(
        fs::read(fs.path("d/readonly")).unwrap(),
        b"written through a 0444 create"
    );
    assert_eq!(names(&fs.path("d/sub")), vec!["x", "y"]);
    // A user's own directory (delegated to its owner only): a create with mode 0444
    // opened for writing (`umask 222`, then `>`) writes, as the kernel allows its creator
    // (the mount leaves it to the MDT, which opens it with the create); a plain one is
    // answered by the mount.
    fs::set_permissions(fs.scratch(), fs::Permissions::from_mode(0o755)).unwrap();
    let home = a.mnt.join("home");
    fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(4300), Some(4300)).unwrap();
    let answered = counter(&a, fsname, "answered");
    let script = format!(
        "cd {} && umask 222 && echo written > ro && umask 022 && echo plain > plain",
        home.display()
    );
    let (ok, err) = super::nodemap::as_user(4300, 4300, "4300", &["sh", "-c", &script]);
    assert!(ok, "{err}");
    assert_eq!(fs::read(fs.path("home/ro")).unwrap(), b"written\n");
    assert_eq!(fs::read(fs.path("home/plain")).unwrap(), b"plain\n");
    let ro = fs::metadata(fs.path("home/ro")).unwrap();
    assert_eq!((ro.permissions().mode() & 0o777, ro.uid()), (0o444, 4300));
    assert!(
        counter(&a, fsname, "answered") > answered,
        "the owner's plain create was answered by the mount"
    );
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&fs.source());
}

/// Files a mount answered stay in its kernel's cache while it holds the delegation: a stat
/// or an unlink there asks the MDT nothing (mdtest's remove phase was a lookup and an
/// unlink per file). When another mount looks, the delegation goes and the kernel forgets
/// them: the other mount's rename and write show at once. 700 files: more than the
/// directory's locks note of the names the kernel first found absent (256 a lock), which
/// are forgotten with those locks anyway.
#[test]
fn the_kernel_keeps_what_a_delegation_covers_and_forgets_it_when_it_goes() {
    use super::batch::served;
    let fsname = "asynckc";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    for i in 0..700 {
        fs::File::create(da.join(format!("f{i}"))).unwrap();
    }
    fs::File::open(&da).unwrap().sync_all().unwrap();
    assert_eq!(counter(&a, fsname, "answered"), 700);
    let asked = || served(fsname, "lookup") + served(fsname, "getattr");
    let before = asked();
    for i in [0, 698, 699] {
        assert_eq!(fs::metadata(da.join(format!("f{i}"))).unwrap().len(), 0);
    }
    fs::remove_file(da.join("f0")).unwrap();
    assert_eq!(asked(), before, "answered from the kernel's cache");
    // The other mount (the test's own) looks: the delegation goes back.
    fs::rename(fs.path("d/f699"), fs.path("d/moved")).unwrap();
    fs::write(fs.path("d/f698"), b"12345").unwrap();
    assert_eq!(
        fs::metadata(da.join("f699")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound,
        "the renamed name is forgotten"
    );
    assert!(fs::metadata(da.join("moved")).is_ok());
    assert_eq!(
        fs::metadata(da.join("f698")).unwrap().len(),
        5,
        "the attributes are forgotten"
    );
    assert_eq!(names(&da).len(), 699);
}

/// Three mounts answering creates themselves make files in one shared directory at once
/// (its delegation goes from one to another at every look of another) and in one of their
/// own each: every mount then lists every name once, none was lost, and the namespace
/// checker finds nothing.
#[test]
fn three_mounts_creating_in_one_directory_agree() {
    let fsname = "async3";
    let spec = Spec::osts(1)
        .fsname(fsname)
        .mount_args(&["--async-dirops", "true"]);
    let fs = TestFs::start_with(Form::Networked, spec);
    let mounts: Vec<ClientMount> = ["b", "c"]
        .iter()
        .map(|n| {
            let mnt = fs.scratch().join(n);
            fs::create_dir_all(&mnt).unwrap();
            fs.mount_another(&mnt, &["--async-dirops", "true"])
        })
        .collect();
    let roots = [fs.mnt.clone(), mounts[0].mnt.clone(), mounts[1].mnt.clone()];
    fs::create_dir(fs.path("shared")).unwrap();
    const EACH: usize = 150;
    let workers: Vec<_> = roots
        .iter()
        .enumerate()
        .map(|(m, root)| {
            let root = root.clone();
            std::thread::spawn(move || {
                let own = root.join(format!("own{m}"));
                fs::create_dir(&own).unwrap();
                for i in 0..EACH {
                    fs::File::create(own.join(format!("f{i}"))).unwrap();
                    fs::File::create(root.join(format!("shared/m{m}-{i}"))).unwrap();
                }
                fs::File::open(&own).unwrap().sync_all().unwrap();
                fs::File::open(root.join("shared"))
                    .unwrap()
                    .sync_all()
                    .unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let mut want: Vec<String> = (0..3)
        .flat_map(|m| (0..EACH).map(move |i| format!("m{m}-{i}")))
        .collect();
    want.sort();
    for root in &roots {
        assert_eq!(names(&root.join("shared")), want, "{}", root.display());
        for m in 0..3 {
            assert_eq!(names(&root.join(format!("own{m}"))), numbered("f", EACH));
        }
    }
    let mut answered = 0;
    for pid in [fs.client_pid(), mounts[0].pid(), mounts[1].pid()] {
        assert_eq!(async_counter(pid, fsname, "lost"), 0, "{pid:?}");
        answered += async_counter(pid, fsname, "answered");
    }
    assert!(
        answered >= 3 * EACH as u64,
        "each mount's own directory: {answered}"
    );
    drop(mounts);
    lfsck_clean(&fs.source());
}

/// A file's times are those the mount answered its create with, before and after the MDT
/// made it (the batch carries them; protocol 11): a stat on another mount afterwards
/// shows what the creator's stat showed.
#[test]
fn times_answered_by_the_mount_stay_once_the_mdt_makes_the_file() {
    let fsname = "asynctm";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    fs::File::create(da.join("f")).unwrap();
    assert_eq!(counter(&a, fsname, "answered"), 1);
    let answered = fs::metadata(da.join("f")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    let made = fs::metadata(fs.path("d/f")).unwrap();
    let times = |m: &fs::Metadata| {
        (
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
            (m.atime(), m.atime_nsec()),
        )
    };
    assert_eq!(times(&made), times(&answered));
}

/// A file the mount answered, still open through the handle of its create, lives on
/// after its name is removed, as on a local file system (the temporary-file idiom:
/// create, unlink, then write and read through the descriptor), whether the unlink was
/// answered by the mount (before or after its create was sent) or by the MDT (its owner
/// changed: what the mount knows of it may be stale); its name is gone for everyone.
#[test]
fn a_file_open_since_its_create_lives_on_after_its_unlink() {
    use std::io::{Read, Seek};
    let fsname = "asynctmp";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    // (sent before the unlink, owner changed: the unlink goes to the MDT)
    for (i, sent, chowned) in [(0, false, false), (1, true, false), (2, false, true)] {
        let name = format!("tmp{i}");
        let answered = counter(&a, fsname, "answered");
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(da.join(&name))
            .unwrap();
        assert_eq!(counter(&a, fsname, "answered"), answered + 1);
        if sent {
            fs::File::open(&da).unwrap().sync_all().unwrap();
        }
        if chowned {
            std::os::unix::fs::chown(da.join(&name), Some(0), Some(0)).unwrap();
        }
        let unlinked = counter(&a, fsname, "unlinked");
        fs::remove_file(da.join(&name)).unwrap();
        let here = u64::from(!chowned);
        assert_eq!(counter(&a, fsname, "unlinked"), unlinked + here, "{name}");
        f.write_all(b"still here").unwrap();
        f.sync_all().unwrap();
        f.rewind().unwrap();
        let mut back = String::new();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "still here", "{name}");
        assert!(!da.join(&name).exists());
        drop(f);
    }
    assert_eq!(
        names(&fs.path("d")),
        vec!["first"],
        "gone for the other mount"
    );
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&fs.source());
}

/// Unlinks answered by the mount: the mount that made 300 files in its directory removes
/// them without a request each (the MDT serves no `unlink`; the unlinks go a batch of up
/// to 256 per request, in order with the creates: a name made, removed and made again
/// ends as the last file made), the other mount sees exactly what remains, the inode quota
/// is back where it was, and the namespace checker finds nothing.
#[test]
fn unlinks_answered_by_the_mount_reach_the_mdt_in_order() {
    use super::batch::served;
    let fsname = "asyncrm";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_dir(&fs);
    let (unlinks, batches) = (served(fsname, "unlink"), served(fsname, "unlink_batch"));
    let inodes = root_inodes(&src);
    let unlinked = counter(&a, fsname, "unlinked");
    for i in 0..300 {
        fs::File::create(da.join(format!("f{i}"))).unwrap();
    }
    for i in 0..300 {
        fs::remove_file(da.join(format!("f{i}"))).unwrap();
    }
    fs::write(da.join("again"), b"old").unwrap();
    fs::remove_file(da.join("again")).unwrap();
    fs::write(da.join("again"), b"new").unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    assert_eq!(counter(&a, fsname, "unlinked"), unlinked + 301);
    assert_eq!(served(fsname, "unlink"), unlinks, "no unlink request");
    let sent = served(fsname, "unlink_batch") - batches;
    assert!((2..=6).contains(&sent), "{sent} unlink batches");
    assert_eq!(names(&fs.path("d")), vec!["again", "first"]);
    assert_eq!(fs::read(fs.path("d/again")).unwrap(), b"new");
    assert_eq!(root_inodes(&src), inodes + 1, "only the last again counted");
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&src);
}

/// Unlinks the mount answered and never sent are lost with its eviction, as its creates
/// are: the files stay, for the other mount and for the evicted one once it is a new
/// client, the lost unlinks are counted, and the namespace checker finds nothing.
#[test]
fn an_evicted_mount_loses_only_the_unlinks_it_never_sent() {
    let fsname = "asyncevu";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    for i in 0..6 {
        fs::File::create(da.join(format!("s{i}"))).unwrap();
    }
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    // One sent, then five answered and held.
    fs::remove_file(da.join("s5")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    hold_sender(&a);
    for i in 0..5 {
        fs::remove_file(da.join(format!("s{i}"))).unwrap();
    }
    assert!(!da.join("s0").exists(), "gone here");
    assert_eq!(counter(&a, fsname, "pending"), 5, "answered, not sent");
    short_callbacks(fsname);
    let pid = a.pid().expect("the mount's process") as i32;
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let seen = names(&fs.path("d"));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(seen, numbered("s", 5), "what was never sent stays");
    release_sender(&a);
    until_counter(&a, fsname, "lost", 5);
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(
        names(&da),
        numbered("s", 5),
        "the evicted mount sees them again"
    );
    drop(a);
    lfsck_clean(&fs.source());
}

/// An MDT killed -9 inside an unlink batch's transaction loses it; the mount, never
/// answered, sends it again to the restarted MDT: every name goes once, nothing is counted
/// lost, the inode quota falls by exactly the files, and the namespace checker finds
/// nothing.
#[test]
fn an_mdt_killed_inside_an_unlink_batch_removes_once_back() {
    let fsname = "asynckmu";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    for i in 0..20 {
        fs::File::create(da.join(format!("p{i}"))).unwrap();
    }
    fs::File::create(da.join("kept")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    let before = root_inodes(&src);
    hold_sender(&a);
    for i in 0..20 {
        fs::remove_file(da.join(format!("p{i}"))).unwrap();
    }
    assert_eq!(counter(&a, fsname, "pending"), 20);
    let mds = &mut fs.servers_mut()[0];
    fail_loc(mds.pid(), "mds.unlink_batch.made");
    release_sender(&a);
    assert!(
        mds.wait_exit(Duration::from_secs(30)),
        "the MDT did not die"
    );
    mds.restart();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    assert_eq!(
        names(&fs.path("d")),
        vec!["kept"],
        "the other mount sees them gone"
    );
    assert_eq!(
        root_inodes(&src),
        before - 20,
        "the quota falls by exactly them"
    );
    drop(a);
    lfsck_clean(&src);
}

/// A name the mount answered the create of, then removed through the MDT (its queue was
/// full) and made anew there (a fifo), is not unlinked from what the mount knew of it: its
/// unlink goes to the MDT and removes the fifo, for every mount, with nothing lost.
#[test]
fn a_name_changed_through_the_mdt_is_not_unlinked_from_a_stale_view() {
    let fsname = "asyncst";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    // Nine directories of 250 answered creates each, held: past the 2,048 the mount keeps
    // (a directory's creates go at 256 each, whatever the sender).
    hold_sender(&a);
    'fill: for d in 0..20 {
        let dir = da.join(format!("s{d}"));
        fs::create_dir(&dir).unwrap();
        for i in 0..250 {
            fs::File::create(dir.join(format!("f{i}"))).unwrap();
            if i % 10 == 9 && counter(&a, fsname, "pending") >= 2048 {
                break 'fill;
            }
        }
    }
    assert_eq!(counter(&a, fsname, "pending"), 2048, "the queue is full");
    let da = da.join("s0");
    // f10: answered by the mount (a directory's first create may go to the MDT).
    let unlinked = counter(&a, fsname, "unlinked");
    fs::remove_file(da.join("f10")).unwrap();
    assert_eq!(counter(&a, fsname, "unlinked"), unlinked, "through the MDT");
    release_sender(&a);
    let fifo = std::ffi::CString::new(da.join("f10").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    fs::remove_file(da.join("f10")).unwrap();
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    assert!(
        !fs.path("d/s0/f10").exists(),
        "the fifo is gone for the other mount"
    );
    drop(a);
    lfsck_clean(&fs.source());
}

/// Every file a mount answered the create of in a directory delegated to it, past the old
/// bound of 16,384 per directory, has its unlink answered by the mount too (none reaches the
/// MDT as an `unlink`). Regression: IO500's mdtest easy directories (190,000 files each) were
/// removed at 4,530/s, most of their unlinks going to the MDT one by one.
#[test]
fn unlinks_of_more_than_16384_answered_files_are_answered_too() {
    const FILES: usize = 30_000;
    let fsname = "asbig";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let a = async_mount(&fs);
    let d = a.mnt.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        fs::File::create(d.join(format!("f{i}"))).unwrap();
    }
    let answered = counter(&a, fsname, "answered");
    assert!(
        answered > 16_384 + 1_000,
        "only {answered} creates answered by the mount"
    );
    let unlinks = nacre_testkit::md_requests(fsname, &["unlink"]);
    for i in 0..FILES {
        fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    let sent = nacre_testkit::md_requests(fsname, &["unlink"]) - unlinks;
    assert_eq!(counter(&a, fsname, "unlinked"), answered);
    assert_eq!(
        sent as usize,
        FILES - answered as usize,
        "unlinks sent to the MDT"
    );
    fs::File::open(&d).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(counter(&a, fsname, "lost"), 0);
    assert_eq!(fs::read_dir(fs.path("d")).unwrap().count(), 0);
    drop(a);
    lfsck_clean(&fs.source());
}
