//! Bytes a mount answering creates itself (`--async-dirops`) keeps with them, in a
//! directory whose new files start with a component on the MDT (`setstripe -E 64K -L mdt
//! -E -1 -c 2`; issue 44 item 1, a small file's write carried by its create;
//! crates/client/src/delegated/data.rs): the create, write and close of a small file are
//! one item of a batch, no write request at all; a write past what a create may carry goes
//! as any other; an MDT killed -9 inside the batch, or after acknowledging it, loses no
//! byte; a change of the directory's (or the file system's) default layout calls the
//! delegation back, since the delegation said how many bytes creates there may carry; a
//! handle still deferred from its create when the delegation goes is opened at the MDT
//! (another mount's unlink leaves the file to it, as an orphan).

use super::async_dirops::{async_mount, counter, hold_sender, release_sender, until_counter};
use super::batch::served;
use super::dom::{dom_default, dom_dir};
use nacre_testkit::{fail_loc, lfsck_clean, nacre_ok, pattern, ClientMount, Form, Spec, TestFs};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes `uid` owns, as the quota accounting counts them (OSTs and MDTs).
fn bytes_of(src: &str, uid: &str) -> u64 {
    let v: serde_json::Value =
        serde_json::from_str(&nacre_ok(&["quota", "--json", "-u", uid, src])).unwrap();
    v[0]["bytes"].as_u64().unwrap()
}

/// A mount answering creates itself, and directory `s` (files start on the MDT) delegated
/// to it: made by it (so it knows it complete), a first file made there and sent.
pub(crate) fn delegated_small_dir(fs: &TestFs) -> (ClientMount, PathBuf) {
    let a = async_mount(fs);
    let da = a.mnt.join("s");
    dom_dir(&da);
    first_create(&da);
    (a, da)
}

/// Makes file `first` in `dir` (a directory's first create asks for its delegation) and
/// sends it.
pub(crate) fn first_create(dir: &Path) {
    fs::File::create(dir.join("first")).unwrap();
    fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// Writes `n` files `PREFIX<i>` of 3,901 bytes (mdtest hard's) into `dir`.
pub(crate) fn write_small(dir: &Path, prefix: &str, n: u64) {
    for i in 0..n {
        fs::write(dir.join(format!("{prefix}{i}")), pattern(i, 3901)).unwrap();
    }
}

/// Checks through another path that `dir` holds `n` files `PREFIX<i>` of 3,901 bytes as
/// [`write_small`] wrote them, each one 4 KiB block on the MDT.
fn check_small(dir: &Path, prefix: &str, n: u64) {
    for i in 0..n {
        let f = dir.join(format!("{prefix}{i}"));
        assert_eq!(fs::read(&f).unwrap(), pattern(i, 3901), "{f:?}");
        assert_eq!(fs::metadata(&f).unwrap().blocks(), 8, "{f:?}");
    }
}

/// Files written right after their create go to the MDT with it: no `DomWrite` at all, the
/// mount counts each write kept, the holder's own stat sees the size before anything is
/// sent, and another mount reads every byte (a hole between two writes reads as zeros);
/// the quota counts their bytes exactly; a file written past what a create carries (64
/// KiB) is opened at the MDT and written as any other.
#[test]
fn a_small_files_bytes_go_with_its_create() {
    let fsname = "asyncdt";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let src = fs.source();
    let (a, da) = delegated_small_dir(&fs);
    let (writes, bytes) = (served(fsname, "dom_write"), bytes_of(&src, "0"));
    hold_sender(&a);
    write_small(&da, "f", 20);
    let holey = fs::File::create(da.join("holey")).unwrap();
    holey.write_all_at(b"head", 0).unwrap();
    holey.write_all_at(b"tail", 5000).unwrap();
    drop(holey);
    assert_eq!(counter(&a, fsname, "pending"), 21, "answered, not sent");
    assert_eq!(counter(&a, fsname, "written"), 22, "every write kept");
    assert_eq!(fs::metadata(da.join("f3")).unwrap().len(), 3901);
    release_sender(&a);
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    assert_eq!(
        served(fsname, "dom_write"),
        writes,
        "the bytes came with the creates"
    );
    let s = fs.path("s");
    check_small(&s, "f", 20);
    let mut want = b"head".to_vec();
    want.resize(5000, 0);
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(s.join("holey")).unwrap(), want);
    assert_eq!(
        bytes_of(&src, "0") - bytes,
        20 * 4096 + 8192,
        "the quota counts exactly their blocks on the MDT"
    );
    // Past what a create carries: through the MDT and the OSTs.
    fs::write(da.join("big"), pattern(99, 100_000)).unwrap();
    assert_eq!(fs::read(s.join("big")).unwrap(), pattern(99, 100_000));
    assert_eq!(counter(&a, fsname, "written"), 22, "not kept");
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&src);
}

/// Bytes carried by creates survive an MDT killed -9 inside their batch's transaction (the
/// mount, never answered, sends the batch again) and one killed -9 right after answering
/// it (the mount replays it): every byte read back through another mount, nothing lost.
#[test]
fn bytes_carried_by_creates_survive_kills_of_the_mdt() {
    let fsname = "asyncdk";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, da) = delegated_small_dir(&fs);
    hold_sender(&a);
    write_small(&da, "p", 20);
    let mds = &mut fs.servers_mut()[0];
    fail_loc(mds.pid(), "mds.batch.made");
    release_sender(&a);
    assert!(
        mds.wait_exit(Duration::from_secs(30)),
        "the MDT did not die"
    );
    mds.restart();
    until_counter(&a, fsname, "pending", 0);
    // Answered, perhaps not committed yet: replayed after the restart.
    write_small(&da, "q", 20);
    until_counter(&a, fsname, "pending", 0);
    let mds = &mut fs.servers_mut()[0];
    mds.kill9();
    mds.restart();
    assert_eq!(counter(&a, fsname, "lost"), 0, "nothing lost");
    let s = fs.path("s");
    check_small(&s, "p", 20);
    check_small(&s, "q", 20);
    drop(a);
    lfsck_clean(&fs.source());
}

/// A delegation says how many bytes creates under it may carry, from the layout the
/// directory's new files get: another mount's change of the directory's default layout,
/// or of the file system's (the root's, which directories without their own inherit),
/// calls it back before it is made; the holder's own change gives it back.
#[test]
fn a_change_of_default_layout_calls_the_delegation_back() {
    let fsname = "asyncdl";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, _) = delegated_small_dir(&fs);
    assert_eq!(counter(&a, fsname, "directories"), 1, "delegated");
    nacre_ok(&["setstripe", "-c", "1", fs.path("s").to_str().unwrap()]);
    until_counter(&a, fsname, "directories", 0);
    // A directory of no default of its own, delegated; then the root's default changes.
    let dt = a.mnt.join("t");
    fs::create_dir(&dt).unwrap();
    first_create(&dt);
    assert_eq!(counter(&a, fsname, "directories"), 1, "delegated");
    dom_default(&fs.mnt);
    until_counter(&a, fsname, "directories", 0);
    // The holder's own change of its directory's default gives the delegation back (its
    // own lock is not called back).
    let du = a.mnt.join("u");
    dom_dir(&du);
    first_create(&du);
    assert_eq!(counter(&a, fsname, "directories"), 1, "delegated");
    nacre_ok(&["setstripe", "-c", "1", du.to_str().unwrap()]);
    until_counter(&a, fsname, "directories", 0);
    drop(a);
}

/// A handle still deferred from its create (not used since) when another mount's unlink
/// calls the delegation back is opened at the MDT before the delegation goes: the file
/// lives on for it as an orphan, as on a local file system (writes and reads through it
/// work after the unlink), and goes with its close.
#[test]
fn a_file_held_open_since_its_create_outlives_another_mounts_unlink() {
    let fsname = "asyncdu";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let a = async_mount(&fs);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    first_create(&da);
    let answered = counter(&a, fsname, "answered");
    let mut held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(da.join("held"))
        .unwrap();
    assert_eq!(
        counter(&a, fsname, "answered"),
        answered + 1,
        "answered here"
    );
    fs::remove_file(fs.path("d/held")).unwrap();
    held.write_all(b"after the unlink").unwrap();
    held.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    held.read_to_string(&mut back).unwrap();
    assert_eq!(back, "after the unlink");
    drop(held);
    assert!(!da.join("held").exists());
    assert_eq!(counter(&a, fsname, "lost"), 0);
    drop(a);
    lfsck_clean(&fs.source());
}
