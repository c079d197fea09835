//! Modification and change times through writes (POSIX: `write` marks both). The writer
//! sees them move at once; other mounts once the writer's close reached the MDT (the MDT
//! moves them at the close of a handle that wrote, or at a writer's eviction); a `utimes`
//! after the writes wins.

use nacre_testkit::{nacre_ok, on_both_forms, wait_for, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// (mtime, ctime) in nanoseconds.
fn times(p: &Path) -> (i128, i128) {
    let m = fs::metadata(p).unwrap();
    times_of(&m)
}

fn times_of(m: &fs::Metadata) -> (i128, i128) {
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    (ns(m.mtime(), m.mtime_nsec()), ns(m.ctime(), m.ctime_nsec()))
}

fn writes_move_the_modification_and_change_times(form: Form) {
    let fsname = match form {
        Form::Embedded => "timese",
        Form::Networked => "timesn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let a = fs.path("f");
    let b = other_mnt.join("f");

    fs::File::create(&a).unwrap();
    let (m0, c0) = times(&a);
    assert_eq!(times(&b), (m0, c0), "both mounts see the create's times");

    // The writer sees its write's times while it holds the file open...
    let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    f.write_all(b"one").unwrap();
    let (m1, c1) = times_of(&f.metadata().unwrap());
    assert!(
        m1 > m0 && c1 > c0,
        "during the writes: {m1} {c1} after {m0} {c0}"
    );
    drop(f);
    // ...and after it closed it.
    let (m2, _) = times(&a);
    assert!(m2 > m0, "after the close: {m2} after {m0}");
    // The other mount once the close reached the MDT (the kernel sends it after close(2)
    // returned); then both mounts agree (the writer's kernel forgot what it kept).
    wait_for("the other mount sees the write's times", || {
        let (m, c) = times(&b);
        m > m0 && c > c0
    });
    wait_for("both mounts agree on the times", || times(&a) == times(&b));
    assert_eq!(fs::read(&b).unwrap(), b"one");
    // Rewritten by the same mount (make's case: the file it wrote before is newer again).
    let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    f.write_all(b"uno").unwrap();
    drop(f);
    let (m2b, c2b) = times(&a);
    assert!(m2b > m2, "rewritten: {m2b} after {m2}");
    wait_for("the other mount sees the rewrite's times", || {
        times(&b) == times(&a)
    });
    assert!(times(&b).1 >= c2b);
    assert_eq!(fs::read(&b).unwrap(), b"uno");
    fs::write(&a, b"one").unwrap();
    wait_for("both mounts agree again", || times(&a) == times(&b));

    // An append moves them again; a read does not.
    let (m3, c3) = times(&a);
    let mut f = fs::OpenOptions::new().append(true).open(&b).unwrap();
    f.write_all(b" two").unwrap();
    drop(f);
    wait_for(
        "the append's times are seen from the writer's mount",
        || {
            let (m, c) = times(&a);
            m > m3 && c > c3
        },
    );
    wait_for("both mounts agree after the append", || {
        times(&a) == times(&b)
    });
    let (m4, c4) = times(&a);
    assert_eq!(fs::read(&a).unwrap(), b"one two");
    assert_eq!(times(&a), (m4, c4), "a read moved the times");
    assert_eq!(times(&b), (m4, c4), "a read moved the times");

    // A utimes after the writes wins, on both mounts.
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    f.set_modified(old).unwrap();
    drop(f);
    assert_eq!(fs::metadata(&a).unwrap().modified().unwrap(), old);
    assert_eq!(fs::metadata(&b).unwrap().modified().unwrap(), old);

    // A truncate through a path moves them.
    let (m5, _) = times(&a);
    assert_eq!(m5, 1_000_000_000 * 1_000_000_000);
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&b)
        .unwrap();
    assert_eq!(fs::metadata(&a).unwrap().len(), 0);
    let (m6, c6) = times(&a);
    assert!(m6 > m4 && c6 > c4, "after a truncate: {m6} {c6}");
}

/// A writer evicted while it holds its file open, having written: the MDT moves the times
/// as at a close (what it wrote came before the eviction). Every target of the file system
/// waits one second for a callback's answer (the stat before the chmod asks the stopped
/// writer for the size through the OST, which waited 30 s by default).
fn an_evicted_writers_file_takes_new_times(form: Form) {
    let fsname = match form {
        Form::Embedded => "timeeve",
        Form::Networked => "timeevn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let writer_mnt = fs.scratch().join("writer");
    fs::create_dir_all(&writer_mnt).unwrap();
    let writer = fs.mount_another(&writer_mnt, &[]);
    fs::File::create(fs.path("f")).unwrap();
    let (m0, c0) = times(&fs.path("f"));

    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(writer_mnt.join("f"))
        .unwrap();
    f.write_all(b"written before the eviction").unwrap();
    f.sync_all().unwrap();
    assert_eq!(
        times(&fs.path("f")),
        (m0, c0),
        "not closed, not evicted yet"
    );
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("ldlm.namespaces.*-{fsname}-*.callback_timeout_ms=1000"),
    ]);
    let pid = writer.pid().expect("the writer mount's process") as i32;
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The chmod calls the stopped writer's lock on the file back: it is evicted.
    let mut perm = fs::metadata(fs.path("f")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
    fs::set_permissions(fs.path("f"), perm).unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let (m1, c1) = times(&fs.path("f"));
    assert!(m1 > m0 && c1 > c0, "after the eviction: {m1} {c1}");
    assert_eq!(
        fs::read(fs.path("f")).unwrap(),
        b"written before the eviction"
    );
    drop(f);
}

/// Waits until no client holds a file of `fsname` open for writing at its MDT (the mount's
/// release comes after close(2) returned).
fn writers_closed(fsname: &str) {
    wait_for("the mount's writes are closed at the MDT", || {
        let sizes = nacre_testkit::get_param(None, &format!("mdt.{fsname}-MDT0000.sizes"));
        sizes.lines().any(|l| l == "writing 0")
    });
}

/// Times set after the writes stay: a `futimens` through the handle that wrote, before its
/// close, is what the file keeps (the close moves nothing; POSIX: the last change of the
/// times is the `futimens`), seen by another mount too; a write after the `futimens` moves
/// them again at the close. Found by tests/policy.rs under load: a `utimes` right after
/// close(2), before the mount's release reached the MDT, was overwritten by that close.
fn times_set_after_the_writes_stay(form: Form) {
    let fsname = match form {
        Form::Embedded => "timesse",
        Form::Networked => "timessn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);

    let mut f = fs::File::create(&a).unwrap();
    f.write_all(b"written").unwrap();
    f.set_modified(old).unwrap();
    drop(f);
    writers_closed(fsname);
    assert_eq!(fs::metadata(&a).unwrap().modified().unwrap(), old);
    assert_eq!(fs::metadata(&b).unwrap().modified().unwrap(), old);

    // Written after the futimens: the close moves them.
    let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    f.set_modified(old).unwrap();
    f.write_all(b"again").unwrap();
    drop(f);
    writers_closed(fsname);
    assert!(fs::metadata(&a).unwrap().modified().unwrap() > old);
    wait_for("the other mount sees the write after the futimens", || {
        fs::metadata(&b).unwrap().modified().unwrap() > old
    });
}

on_both_forms!(
    writes_move_the_modification_and_change_times,
    an_evicted_writers_file_takes_new_times,
    times_set_after_the_writes_stay
);
