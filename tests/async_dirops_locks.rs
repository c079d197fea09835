//! Locks granted with a batch's creates (protocol 17; crates/mds/src/batch_locks.rs): what
//! a mount answering creates itself (`--async-dirops`) knows of the files it made — the
//! kernel's entries and attributes, the sizes of the files it wrote — outlives the
//! directory's delegation, under each file's own lock, until another client changes that
//! file (which calls its lock back).

use super::async_dirops::{counter, delegated_dir, names};
use nacre_testkit::{lfsck_clean, md_requests, pattern, Form, Spec, TestFs};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// Requests that could answer a stat, at every MDT.
fn stat_requests(fsname: &str) -> u64 {
    md_requests(fsname, &["getattr", "lookup"])
}

/// A mount makes 300 empty files and writes 20 more (through the OSTs) in a directory
/// delegated to it; another mount lists the directory, which calls the delegation back.
/// The holder's stats of all 320 files then cost no request (with the delegation alone,
/// the kernel forgot every one of them as it went); another mount's chmod, write, unlink
/// and rename of some of them are seen by the holder at once, and the namespace checker
/// finds nothing.
#[test]
fn files_made_under_a_delegation_stay_known_after_it_goes() {
    let fsname = "asynclk";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    let data = pattern(3, 5000);
    for i in 0..300 {
        fs::File::create(da.join(format!("f{i}"))).unwrap();
    }
    for i in 0..20 {
        fs::write(da.join(format!("w{i}")), &data).unwrap();
    }
    fs::File::open(&da).unwrap().sync_all().unwrap();
    assert!(counter(&a, fsname, "answered") >= 300);
    // The test's own mount lists it: the delegation goes back (its holder sends, then
    // cancels, before the listing is answered).
    let there = fs.path("d");
    assert_eq!(names(&there).len(), 321);
    let before = stat_requests(fsname);
    for i in 0..300 {
        assert_eq!(fs::metadata(da.join(format!("f{i}"))).unwrap().len(), 0);
    }
    for i in 0..20 {
        assert_eq!(fs::metadata(da.join(format!("w{i}"))).unwrap().len(), 5000);
    }
    assert_eq!(
        stat_requests(fsname) - before,
        0,
        "stats of the files made here asked the MDT after the delegation went"
    );
    // Another mount's changes reach the holder through each file's own lock.
    fs::set_permissions(there.join("f5"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(there.join("f6"), b"12345").unwrap();
    fs::write(there.join("w1"), b"123").unwrap();
    fs::remove_file(there.join("f7")).unwrap();
    fs::rename(there.join("f8"), there.join("g8")).unwrap();
    assert_eq!(fs::metadata(da.join("f5")).unwrap().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(da.join("f6")).unwrap().len(), 5);
    assert_eq!(fs::read(da.join("w1")).unwrap(), b"123");
    for gone in ["f7", "f8"] {
        assert_eq!(
            fs::metadata(da.join(gone)).unwrap_err().kind(),
            std::io::ErrorKind::NotFound,
            "{gone}"
        );
    }
    assert_eq!(fs::metadata(da.join("g8")).unwrap().len(), 0);
    assert_eq!(names(&da), names(&there));
    lfsck_clean(&fs.source());
}

/// A mount makes directory `s` in its delegated directory `d`, and `t` in `s` (both
/// answered by the mount), and 200 files in each; another mount lists `d` only, which
/// calls back `d`'s delegation. The holder's stats of all 400 files then cost no request:
/// `s` kept its entry under its own lock from the batch that made it (with the delegation
/// alone, the kernel dropped `s` and everything under it as the delegation went). Another
/// mount's chmod of `s`, its rename, and the removal of an empty directory made there are
/// seen by the holder at once, as the holder's own removal of one is by the other mount,
/// and the namespace checker finds nothing.
#[test]
fn directories_made_under_a_delegation_keep_their_subtrees_after_it_goes() {
    let fsname = "asyncdk";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, da) = delegated_dir(&fs);
    let answered = counter(&a, fsname, "answered");
    let (s, t) = (da.join("s"), da.join("s/t"));
    fs::create_dir(&s).unwrap();
    fs::create_dir(da.join("empty")).unwrap();
    fs::create_dir(da.join("mine")).unwrap();
    for i in 0..200 {
        fs::File::create(s.join(format!("f{i}"))).unwrap();
    }
    fs::create_dir(&t).unwrap();
    for i in 0..200 {
        fs::File::create(t.join(format!("f{i}"))).unwrap();
    }
    fs::File::open(&t).unwrap().sync_all().unwrap();
    assert!(
        counter(&a, fsname, "answered") - answered >= 400,
        "the mount answered too few of the creates itself"
    );
    // The test's own mount lists `d` alone: its delegation goes back; `s` and `t` stay
    // delegated to the holder.
    let there = fs.path("d");
    assert_eq!(names(&there), ["empty", "first", "mine", "s"]);
    let before = stat_requests(fsname);
    for dir in [&s, &t] {
        for i in 0..200 {
            assert_eq!(fs::metadata(dir.join(format!("f{i}"))).unwrap().len(), 0);
        }
    }
    assert_eq!(
        stat_requests(fsname) - before,
        0,
        "stats under a directory made here asked the MDT after its parent's delegation went"
    );
    // Its link count (`t` in it) as both mounts see it.
    assert_eq!(fs::metadata(&s).unwrap().nlink(), 3);
    assert_eq!(fs::metadata(there.join("s")).unwrap().nlink(), 3);
    // The holder's own removal of a directory it made, kept under that directory's lock.
    fs::remove_dir(da.join("mine")).unwrap();
    assert!(!there.join("mine").exists());
    // Another mount's changes of the directories reach the holder through their locks.
    fs::set_permissions(there.join("s"), fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(fs::metadata(&s).unwrap().mode() & 0o777, 0o700);
    fs::remove_dir(there.join("empty")).unwrap();
    assert_eq!(
        fs::metadata(da.join("empty")).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    fs::rename(there.join("s"), there.join("s2")).unwrap();
    assert_eq!(
        fs::metadata(&s).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert_eq!(fs::metadata(da.join("s2/t/f7")).unwrap().len(), 0);
    assert_eq!(names(&da), names(&there));
    assert_eq!(names(&da.join("s2/t")), names(&there.join("s2/t")));
    lfsck_clean(&fs.source());
}
