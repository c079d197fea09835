//! Lazy access times on the MDT (crates/mds/src/atime.rs): a read records the access where
//! Linux's relatime would (the access time not after the last change, or a day old), the MDT
//! writes it within seconds, and another mount sees it; a read soon after an access already
//! recorded, with no change since, changes nothing.

use nacre_testkit::{md_requests, on_both_forms, wait_for, Form, Spec, TestFs};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn touch(flag: &str, when: &str, path: &Path) {
    let st = Command::new("touch")
        .args([flag, "-d", when])
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A line of `mdt.FS-MDT0000.atime`.
fn atime_stat(fsname: &str, what: &str) -> u64 {
    nacre_testkit::param_field(&format!("mdt.{fsname}-MDT0000.atime"), what)
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn reads_record_access_times_lazily(form: Form) {
    let fsname = match form {
        Form::Embedded => "atimee",
        Form::Networked => "atimen",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other = fs.scratch().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let _b = fs.mount_another(&other, &[]);
    let (a, b) = (fs.path("a"), fs.path("b"));
    for p in [&a, &b] {
        std::fs::write(p, b"data").unwrap();
        touch("-m", "3 days ago", p);
        touch("-a", "2 days ago", p);
    }
    // Reads of `paths`, then their closes at the MDT (the kernel releases a file after
    // close(2) returned), then the MDT's next flush of what they recorded.
    let read = |paths: &[&Path]| {
        let before = md_requests(fsname, &["close"]);
        for p in paths {
            assert_eq!(std::fs::read(p).unwrap(), b"data");
        }
        let n = before + paths.len() as u64;
        wait_for("the reads' closes at the MDT", || {
            md_requests(fsname, &["close"]) >= n
        });
        let flushed = atime_stat(fsname, "flushes");
        wait_for("the access times' flush", || {
            atime_stat(fsname, "flushes") > flushed
        });
    };
    let atime = |name: &str| {
        let m = std::fs::metadata(other.join(name)).unwrap();
        (m.atime(), m.atime_nsec())
    };
    // A read 2 days after the last one is recorded; the other mount (which never looked at
    // the file before) sees it.
    let started = now_s();
    read(&[&a]);
    let first = atime("a");
    assert!(
        first.0 >= started - 1 && first.0 <= now_s() + 1,
        "the read's access time was not recorded: {first:?}, read at {started}"
    );
    // Read again soon after, with no change since: not recorded (relatime); `b`'s read in
    // the same round is, so the flush it waits for has run.
    read(&[&a, &b]);
    assert!(atime("b").0 >= started - 1, "b's access not recorded");
    // Seen by a mount that never cached `a` (the other one keeps what it saw under its lock).
    let third = fs.scratch().join("third");
    std::fs::create_dir_all(&third).unwrap();
    let _c = fs.mount_another(&third, &[]);
    let m = std::fs::metadata(third.join("a")).unwrap();
    assert_eq!(
        (m.atime(), m.atime_nsec()),
        first,
        "a read after the last access, within a day and with no change since, was recorded"
    );
    // A mount with `-o noatime` records no access: its read of `c` (last accessed two days
    // ago) leaves the access time as it was, while `d`, read through the first mount in
    // the same round, is recorded (so the flush waited for has run).
    let quiet = fs.scratch().join("quiet");
    std::fs::create_dir_all(&quiet).unwrap();
    let _q = fs.mount_another(&quiet, &["-o", "noatime"]);
    let (c, d) = (fs.path("c"), fs.path("d"));
    for p in [&c, &d] {
        std::fs::write(p, b"data").unwrap();
        touch("-m", "3 days ago", p);
        touch("-a", "2 days ago", p);
    }
    let two_days_ago = std::fs::metadata(&c).unwrap().atime();
    read(&[&quiet.join("c"), &d]);
    let fourth = fs.scratch().join("fourth");
    std::fs::create_dir_all(&fourth).unwrap();
    let _f = fs.mount_another(&fourth, &[]);
    let seen = |name: &str| std::fs::metadata(fourth.join(name)).unwrap().atime();
    assert!(seen("d") >= started - 1, "d's access not recorded");
    assert_eq!(
        seen("c"),
        two_days_ago,
        "a noatime mount's read was recorded"
    );
}

on_both_forms!(reads_record_access_times_lazily);
