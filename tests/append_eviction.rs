//! `O_APPEND` across mounts when an OST evicts the appending mount while its append holds
//! the file's write locks (docs/locking.md, "O_APPEND across mounts"): the append starts
//! again under new locks and lands after what the other mount wrote — however the mount
//! learns of its eviction (its lock poll refused, or the append's own lock request refused)
//! and whichever OST of a striped file evicted it. Networked: the mounts are processes of
//! their own, the OSTs another.

use crate::async_dirops::until_fired;
use nacre_testkit::{fail_loc, get_param, nacre_ok, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The networked form of `fsname` with `osts` OSTs and a second mount (a process of its
/// own): the file system, its first mount's process, the second mount (its point and
/// handle), and file `log` as each mount names it.
fn two_mounts(
    fsname: &str,
    osts: u32,
) -> (
    TestFs,
    u32,
    (PathBuf, nacre_testkit::ClientMount),
    (PathBuf, PathBuf),
) {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(osts).fsname(fsname));
    let pid = fs.client_pid().expect("the first mount's process");
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let other = fs.mount_another(&mnt, &[]);
    let logs = (fs.path("log"), mnt.join("log"));
    (fs, pid, (mnt, other), logs)
}

/// Lock callbacks of OST `index` of `fsname` time out after 1 s, and a lock is called back
/// at once (no contention delay): the held mount is evicted quickly.
fn evict_fast(fsname: &str, index: u32) {
    for (name, value) in [("callback_timeout_ms", "1000"), ("contention_ms", "0")] {
        nacre_ok(&[
            "ctl",
            "set_param",
            &format!("ldlm.namespaces.ost-{fsname}-OST{index:04x}.{name}={value}"),
        ]);
    }
}

/// How often the mount `pid` was made a new client of OST `index` (it learned that the OST
/// evicted it).
fn resets(pid: u32, fsname: &str, index: u32) -> u64 {
    let text = get_param(
        Some(pid),
        &format!("ldlm.namespaces.{fsname}-OST{index:04x}-osc.stats"),
    );
    text.lines()
        .find_map(|l| l.strip_prefix("resets ")?.trim().parse().ok())
        .expect("resets in the mount's lock stats")
}

/// Waits until the mount `pid` learned of an eviction by OST `index` (resets past `before`).
fn until_reset(pid: u32, fsname: &str, index: u32, before: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while resets(pid, fsname, index) == before {
        assert!(
            Instant::now() < deadline,
            "the held mount never learns it was evicted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Appends `data` to `path` and syncs it, on a thread of its own.
fn appending(path: PathBuf, data: Vec<u8>) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        let mut f = fs::OpenOptions::new().append(true).open(&path)?;
        f.write_all(&data)?;
        f.sync_all()
    })
}

/// Appends `data` to `path` through this thread.
fn append(path: &std::path::Path, data: &[u8]) {
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// An append held after it read the file's size under its write locks (fault point
/// `client.append.sized`), while the OST evicts its mount (the held append keeps the lock in
/// use, so the callback goes unanswered) and another mount appends at that size: when it
/// goes on, it appends after the other mount's bytes, never over them. It finds its locks
/// gone and starts again under new ones; before, its write went through as the mount's new
/// identity at the size read under the evicted one's locks.
#[test]
fn an_append_whose_locks_an_eviction_took_lands_after_the_others() {
    let fsname = "wbn9";
    let (_fs, pid, (_other_mnt, _other), (a, b)) = two_mounts(fsname, 1);
    nacre_tests::write_synced(&a, &[b'x'; 100]);
    evict_fast(fsname, 0);
    let before = resets(pid, fsname, 0);
    fail_loc(pid, "client.append.sized~hold");
    let appender = appending(a, vec![b'A'; 10]);
    until_fired(pid);
    // The other mount's append calls back the held lock; the OST evicts this mount once the
    // callback times out, and the append goes at 100.
    append(&b, &[b'B'; 50]);
    // The held mount learns of its eviction (its next poll of the OST is refused) before
    // its append goes on.
    until_reset(pid, fsname, 0, before);
    fail_loc(pid, "0");
    appender
        .join()
        .unwrap()
        .expect("the append goes on under new locks");
    let got = fs::read(&b).unwrap();
    assert_eq!(&got[..100], &[b'x'; 100][..], "the first bytes");
    assert_eq!(
        &got[100..150],
        &[b'B'; 50][..],
        "the other mount's append was overwritten"
    );
    assert_eq!(&got[150..], &[b'A'; 10][..], "the held append, after it");
}

/// The mount learns of its eviction from its own append's lock request, not from its lock
/// poll (held at `client.ost_poll.evicted`, the poll's refusal not yet acted on): a second
/// append, to a file it holds no lock on, is refused as the evicted identity; the refusal
/// makes the mount a new client of the OST (once) and the append asks again and lands.
/// Before, the refusal reached the application as `ESHUTDOWN` (os error 108). The first
/// append, held meanwhile with its size read, then lands after the other mount's.
#[test]
fn an_append_that_hears_of_its_eviction_from_a_refusal_starts_again() {
    let fsname = "wbr1";
    let (fs, pid, (other_mnt, _other), (a, b)) = two_mounts(fsname, 1);
    nacre_tests::write_synced(&a, &[b'x'; 100]);
    // Made by the other mount: the first holds no lock on its object.
    nacre_tests::write_synced(&other_mnt.join("log2"), &[b'y'; 20]);
    evict_fast(fsname, 0);
    let before = resets(pid, fsname, 0);
    // The first append is held (the second goes through the point), and so is the lock
    // poll once it hears of the eviction.
    fail_loc(
        pid,
        "client.append.sized~hold@1,client.ost_poll.evicted~hold",
    );
    let held = appending(a, vec![b'A'; 10]);
    until_fired(pid);
    append(&b, &[b'B'; 50]);
    // The OST evicted the first mount (the other's append went through); its poll is held
    // where it heard so, and the second append is refused as the evicted identity.
    let second = appending(fs.path("log2"), vec![b'C'; 30]);
    until_reset(pid, fsname, 0, before);
    // The new identity's first poll goes on (the OST grants locks to a client that polls).
    fail_loc(pid, "-client.ost_poll.evicted");
    second
        .join()
        .unwrap()
        .expect("an append refused as evicted asks again");
    let mut want = vec![b'y'; 20];
    want.extend_from_slice(&[b'C'; 30]);
    assert_eq!(fs::read(other_mnt.join("log2")).unwrap(), want);
    fail_loc(pid, "0");
    held.join()
        .unwrap()
        .expect("the held append goes on under new locks");
    assert_eq!(
        resets(pid, fsname, 0),
        before + 1,
        "one eviction learned more than once"
    );
    let mut want = vec![b'x'; 100];
    want.extend_from_slice(&[b'B'; 50]);
    want.extend_from_slice(&[b'A'; 10]);
    assert_eq!(fs::read(&b).unwrap(), want);
}

/// A file striped over two OSTs: the append holds both objects' locks and reads the size;
/// the other mount writes past it on the second object only, so only the second OST evicts
/// the appending mount. The held append must not land at the size it read, on the first
/// object whose lock still stands: it starts again and lands after the other mount's bytes.
#[test]
fn an_append_striped_over_two_osts_lands_after_a_write_one_of_them_evicted_it_for() {
    let fsname = "wbs2";
    let (_fs, pid, (_other_mnt, _other), (a, b)) = two_mounts(fsname, 2);
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", a.to_str().unwrap()]);
    nacre_tests::write_synced(&a, &[b'x'; 100]);
    evict_fast(fsname, 0);
    evict_fast(fsname, 1);
    // The index of the OST holding the second object.
    let out = nacre_ok(&["getstripe", a.to_str().unwrap()]);
    let second_ost = second_object_ost(&out);
    let before = resets(pid, fsname, second_ost);
    let first_before = resets(pid, fsname, 1 - second_ost);
    fail_loc(pid, "client.append.sized~hold");
    let appender = appending(a, vec![b'A'; 10]);
    until_fired(pid);
    let at = 65_536 + 1_000;
    let f = fs::OpenOptions::new().write(true).open(&b).unwrap();
    f.write_all_at(&[b'B'; 50], at).unwrap();
    f.sync_all().unwrap();
    drop(f);
    until_reset(pid, fsname, second_ost, before);
    fail_loc(pid, "0");
    appender
        .join()
        .unwrap()
        .expect("the append goes on under new locks");
    assert_eq!(
        resets(pid, fsname, 1 - second_ost),
        first_before,
        "the first OST did not evict the mount"
    );
    let got = fs::read(&b).unwrap();
    let end = at as usize + 50;
    assert_eq!(got.len(), end + 10, "the append is not at the end");
    assert_eq!(&got[..100], &[b'x'; 100][..]);
    assert!(
        got[100..at as usize].iter().all(|&c| c == 0),
        "the held append landed at the size it read"
    );
    assert_eq!(&got[at as usize..end], &[b'B'; 50][..]);
    assert_eq!(&got[end..], &[b'A'; 10][..], "the held append, after it");
}

/// The OST index of a two-stripe file's second object, from `nacre getstripe`'s listing.
fn second_object_ost(getstripe: &str) -> u32 {
    let osts: Vec<u32> = getstripe
        .lines()
        .filter_map(|l| {
            let first = l.split_whitespace().next()?;
            first.parse().ok()
        })
        .collect();
    assert_eq!(osts.len(), 2, "two objects in {getstripe}");
    osts[1]
}
