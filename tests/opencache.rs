//! Cached opens under `OPEN` locks (nacre_client::opencache, docs/locking.md "Opens"): a
//! file a mount opens for reading again and again is opened at the MDT once, and its
//! closes keep the open; whatever takes a link away from the file — on any mount, this
//! one too — has the kept opens closed first, so the file is removed at once instead of
//! staying an orphan; what the kernel checks at an open (permissions) and what a read
//! returns follow other mounts' changes.

use nacre_testkit::{
    get_param, inodes_used, lfsck_clean, md_requests, on_both_forms, wait_for, Form, Spec, TestFs,
};
use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The open cache's counters of the mount served by process `pid`.
fn open_cache(pid: Option<u32>, fsname: &str) -> HashMap<String, u64> {
    get_param(pid, &format!("llite.{fsname}.open_cache"))
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn second_mount(fs: &TestFs) -> (PathBuf, nacre_testkit::ClientMount) {
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let m = fs.mount_another(&mnt, &[]);
    (mnt, m)
}

/// Opens `path` for reading `n` times, reading it whole each time.
fn read_times(path: &Path, n: usize, want: &[u8]) {
    for i in 0..n {
        let got = fs::read(path).unwrap_or_else(|e| panic!("read {i} of {path:?}: {e}"));
        assert!(got == want, "read {i} of {path:?} differs");
    }
}

/// Waits until every open of the mount served by `pid` is a kept one and at least one is
/// kept: the kernel releases a file after `close(2)` returned, so the last read's open may
/// still be held (and would leave a file removed now an orphan until its release).
fn wait_kept(pid: Option<u32>, fsname: &str) -> HashMap<String, u64> {
    let mut c = HashMap::new();
    wait_for("the reads' releases", || {
        c = open_cache(pid, fsname);
        c["kept_now"] >= 1 && c["kept_now"] == c["open_at_mdts"]
    });
    c
}

fn names(form: Form, n: u32) -> String {
    match form {
        Form::Embedded => format!("opene{n}"),
        Form::Networked => format!("openn{n}"),
    }
}

/// A file opened for reading 30 times is opened and closed at the MDT only until it is
/// hot (3 opens): the rest are answered by the mount (give or take an open that came
/// before the kernel's release of the one before: the release keeps its open too). A file opened once per name is not
/// kept; with the threshold at 0 nothing is.
fn a_file_opened_often_is_opened_at_the_mdt_until_it_is_hot(form: Form) {
    let fsname = names(form, 1);
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(&fsname));
    let pid = fs.client_pid();
    let data = nacre_testkit::pattern(1, 10_000);
    fs::write(fs.path("hot"), &data).unwrap();
    let (opens, closes) = (
        md_requests(&fsname, &["open"]),
        md_requests(&fsname, &["close"]),
    );
    read_times(&fs.path("hot"), 30, &data);
    let opened = md_requests(&fsname, &["open"]) - opens;
    let closed = md_requests(&fsname, &["close"]) - closes;
    assert!(
        opened <= 6 && closed <= 2,
        "30 opens of one file: {opened} opens and {closed} closes at the MDT"
    );
    let c = wait_kept(pid, &fsname);
    assert!(c["hits"] >= 24, "{c:?}");

    // Files opened once each are never kept.
    for i in 0..20 {
        fs::write(fs.path(&format!("once{i}")), &data).unwrap();
    }
    let (opens, closes) = (
        md_requests(&fsname, &["open"]),
        md_requests(&fsname, &["close"]),
    );
    for i in 0..20 {
        read_times(&fs.path(&format!("once{i}")), 1, &data);
    }
    assert_eq!(md_requests(&fsname, &["open"]) - opens, 20);
    assert_eq!(md_requests(&fsname, &["close"]) - closes, 20);

    // Threshold 0: no OPEN lock asked for, every open and close goes to the MDT.
    nacre_testkit::nacre_ok(&[
        "ctl",
        "--pid",
        &pid.unwrap().to_string(),
        "set_param",
        &format!("llite.{fsname}.opencache_threshold_count=0"),
    ]);
    fs::write(fs.path("cold"), &data).unwrap();
    let (opens, closes) = (
        md_requests(&fsname, &["open"]),
        md_requests(&fsname, &["close"]),
    );
    read_times(&fs.path("cold"), 10, &data);
    assert_eq!(md_requests(&fsname, &["open"]) - opens, 10);
    assert_eq!(md_requests(&fsname, &["close"]) - closes, 10);
}

/// Unlinking a file, or renaming another over it, from the mount that keeps its open or
/// from another one, closes the kept open before the change: the inode is gone when the
/// change returns. A file in use by a process there stays readable (an orphan) until it
/// is closed.
fn removing_a_file_closes_its_kept_opens_first(form: Form) {
    let fsname = names(form, 2);
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(&fsname));
    let (other, _m) = second_mount(&fs);
    let pid = fs.client_pid();
    let data = nacre_testkit::pattern(2, 50_000);
    let ways = [
        ("unlink here", false, false),
        ("unlink there", true, false),
        ("rename over here", false, true),
        ("rename over there", true, true),
    ];
    for (i, (how, there, rename)) in ways.into_iter().enumerate() {
        let name = format!("f{i}");
        fs::write(fs.path(&name), &data).unwrap();
        read_times(&fs.path(&name), 5, &data);
        let before = wait_kept(pid, &fsname);
        let root = if there { other.clone() } else { fs.mnt.clone() };
        if rename {
            fs::write(root.join("new"), b"new").unwrap();
        }
        let used = inodes_used(&fs.mnt, 0);
        if rename {
            fs::rename(root.join("new"), root.join(&name)).unwrap();
            assert_eq!(fs::read(fs.path(&name)).unwrap(), b"new", "{how}");
        } else {
            fs::remove_file(root.join(&name)).unwrap();
        }
        assert_eq!(
            inodes_used(&fs.mnt, 0),
            used - 1,
            "{how}: the removed file is still there (kept as an orphan)"
        );
        let after = open_cache(pid, &fsname);
        assert_eq!(after["kept_now"], 0, "{how}: {after:?}");
        assert!(
            after["closed_on_callback"] > before["closed_on_callback"],
            "{how}: {after:?}"
        );
        if rename {
            fs::remove_file(fs.path(&name)).unwrap();
        }
    }

    // In use when another mount unlinks it: still readable, removed at the last close.
    fs::write(fs.path("busy"), &data).unwrap();
    read_times(&fs.path("busy"), 5, &data);
    wait_kept(pid, &fsname);
    let used = inodes_used(&fs.mnt, 0);
    let mut f = fs::File::open(fs.path("busy")).unwrap();
    fs::remove_file(other.join("busy")).unwrap();
    assert_eq!(inodes_used(&fs.mnt, 0), used, "removed while open");
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert!(got == data, "an open file's data changed at its unlink");
    drop(f);
    wait_for("the orphan's removal at its last close", || {
        inodes_used(&fs.mnt, 0) == used - 1
    });
    lfsck_clean(&fs.source());
}

/// While a mount keeps a file's open, the kernel still checks each open against the
/// file's mode as it is now (another mount's chmod reaches it), and reads return what
/// another mount wrote last.
fn a_kept_open_follows_changes_made_elsewhere(form: Form) {
    let fsname = names(form, 3);
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(&fsname));
    let (other, _m) = second_mount(&fs);
    let pid = fs.client_pid();
    let p = fs.path("cfg");
    fs::write(&p, b"version 1").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
    read_times(&p, 5, b"version 1");
    wait_kept(pid, &fsname);
    let cat_as_nobody = || {
        std::process::Command::new("runuser")
            .args(["-u", "nobody", "--", "cat"])
            .arg(&p)
            .output()
            .unwrap()
    };
    let out = cat_as_nobody();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"version 1");
    fs::set_permissions(other.join("cfg"), fs::Permissions::from_mode(0o600)).unwrap();
    let out = cat_as_nobody();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("denied"),
        "nobody read a 0600 file through a kept open: {out:?}"
    );
    fs::write(other.join("cfg"), b"version 2, longer").unwrap();
    read_times(&p, 3, b"version 2, longer");
    let hits = open_cache(pid, &fsname)["hits"];
    assert!(hits >= 4, "{hits} hits");
}

on_both_forms!(
    a_file_opened_often_is_opened_at_the_mdt_until_it_is_hot,
    removing_a_file_closes_its_kept_opens_first,
    a_kept_open_follows_changes_made_elsewhere,
);

/// Kept opens are opens the client replays after an MDT restart, under their replayed
/// locks: an unlink from another mount after the restart still closes them first.
#[test]
fn kept_opens_survive_an_mdt_restart() {
    let fsname = "openn4";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (other, _m) = second_mount(&fs);
    let pid = fs.client_pid();
    let data = nacre_testkit::pattern(4, 20_000);
    fs::write(fs.path("kept"), &data).unwrap();
    read_times(&fs.path("kept"), 5, &data);
    wait_kept(pid, fsname);
    let before = open_cache(pid, fsname);
    fs.servers_mut()[0].restart();
    // Both mounts reconnect (and replay) with their next requests.
    read_times(&fs.path("kept"), 3, &data);
    assert!(fs::metadata(other.join("kept")).is_ok());
    let after = wait_kept(pid, fsname);
    assert!(
        after["hits"] >= before["hits"] + 2
            && after["closed_on_callback"] == before["closed_on_callback"],
        "the kept opens did not outlive the restart: {before:?} then {after:?}"
    );
    let used = inodes_used(&fs.mnt, 0);
    fs::remove_file(other.join("kept")).unwrap();
    assert_eq!(inodes_used(&fs.mnt, 0), used - 1, "kept as an orphan");
    lfsck_clean(&fs.source());
}
