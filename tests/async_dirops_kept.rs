//! What a mount answering creates itself (`--async-dirops`) keeps of the small files it
//! made once their creates are sent (crates/client/src/delegated/kept.rs): their owner's
//! opens, reads, stats and closes of them are answered by the mount while it holds the
//! directory's delegation (mdtest hard's read phase without a request), the reads are
//! recorded as access times at the MDT (`AccessBatch`, relatime), and another client
//! that reaches such a file by its FID alone calls the delegation back before its change
//! runs, so the holder never answers from what it kept once that is stale.

use super::async_dirops::{async_mount, counter, hold_sender, release_sender, until_counter};
use super::async_dirops_data::{delegated_small_dir, first_create, write_small};
use super::batch::{served, Session};
use super::dom::dom_dir;
use super::growth::fid_at;
use super::nodemap::as_user;
use nacre_testkit::{md_requests, param_field, pattern, wait_for, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status, TimeSpec};
use nacre_wire::mds::{BatchAccess, MdsOp, ACCESS_BATCH_ITEMS_MAX};
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// The MDT's count of `what` in `mdt.FS-MDT0000.atime`.
fn atime_stat(fsname: &str, what: &str) -> u64 {
    param_field(&format!("mdt.{fsname}-MDT0000.atime"), what)
}

/// Waits until the MDT has written the accesses recorded so far (its next flush).
fn until_atimes_flushed(fsname: &str) {
    let flushed = atime_stat(fsname, "flushes");
    wait_for("the MDT's flush of access times", || {
        atime_stat(fsname, "flushes") > flushed
    });
}

/// A file's access and modification times, to the nanosecond.
fn times(path: &Path) -> ((i64, i64), (i64, i64)) {
    let m = fs::metadata(path).unwrap();
    ((m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
}

/// mdtest hard's read phase on files the mount made: each opened read-write (as mdtest
/// opens them), read whole and closed, stat'ed — no open, close, getattr or read reaches
/// the MDT; the reads are recorded as accesses (another mount sees access times after the
/// files' modification); once another mount looked (the delegation called back), the same
/// reads go through the MDT and read the same bytes.
#[test]
fn a_mounts_own_small_files_open_and_read_without_a_request() {
    let fsname = "asynckp";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, da) = delegated_small_dir(&fs);
    write_small(&da, "f", 20);
    fs::File::open(&da).unwrap().sync_all().unwrap();
    until_counter(&a, fsname, "pending", 0);
    let ops = ["open", "close", "getattr", "dom_read"];
    let (before, accesses) = (md_requests(fsname, &ops), served(fsname, "access_batch"));
    let read_all = || {
        for i in 0..20 {
            let path = da.join(format!("f{i}"));
            let mut f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let mut got = Vec::new();
            f.read_to_end(&mut got).unwrap();
            assert_eq!(got, pattern(i, 3901), "{path:?}");
            assert_eq!(f.metadata().unwrap().len(), 3901);
        }
    };
    read_all();
    assert_eq!(
        md_requests(fsname, &ops),
        before,
        "opens, reads, stats and closes answered by the mount"
    );
    assert_eq!(counter(&a, fsname, "opened"), 20);
    assert!(counter(&a, fsname, "read") >= 20);
    wait_for("the accesses sent", || {
        served(fsname, "access_batch") > accesses
    });
    until_atimes_flushed(fsname);
    // Through the test's own mount: its lookup calls the delegation back.
    for i in [0, 7, 19] {
        let (atime, mtime) = times(&fs.path(&format!("s/f{i}")));
        assert!(atime > mtime, "f{i}: read at {atime:?}, made at {mtime:?}");
    }
    until_counter(&a, fsname, "directories", 0);
    read_all();
    assert_eq!(counter(&a, fsname, "opened"), 20, "through the MDT now");
    assert_eq!(counter(&a, fsname, "lost"), 0);
}

/// Another client that opens or changes a file by its FID alone (no name looked up in
/// its directory) calls back the delegation the file was made under, before its change
/// runs: the holder, which answered reads of the file from what it kept, reads the new
/// bytes and sees the new mode.
#[test]
fn a_change_by_fid_from_another_client_calls_the_delegation_back() {
    let fsname = "asynckf";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let mds = fs.servers_mut()[0].listen.clone();
    let (a, da) = delegated_small_dir(&fs);
    // A second directory of its own, delegated too.
    let dt = a.mnt.join("t");
    dom_dir(&dt);
    first_create(&dt);
    assert_eq!(counter(&a, fsname, "directories"), 2);
    write_small(&da, "g", 1);
    write_small(&dt, "h", 1);
    for d in [&da, &dt] {
        fs::File::open(d).unwrap().sync_all().unwrap();
    }
    until_counter(&a, fsname, "pending", 0);
    let (f, h) = (da.join("g0"), dt.join("h0"));
    for p in [&f, &h] {
        assert_eq!(fs::read(p).unwrap(), pattern(0, 3901));
    }
    assert_eq!(counter(&a, fsname, "opened"), 2, "answered by the holder");
    let fid = fid_at(&f);
    let mut other = Session::open(&mds, fsname, [0x71; 16]);
    let write = MdsOp::DomWrite {
        fid,
        offset: 0,
        data: b"CHANGED".to_vec(),
    };
    assert_eq!(other.call(write).0, 0);
    until_counter(&a, fsname, "directories", 1);
    let got = fs::read(&f).unwrap();
    assert_eq!(&got[..7], b"CHANGED", "the holder read what it kept");
    assert_eq!(got[7..], pattern(0, 3901)[7..]);
    // The other directory's file, still answered by the holder; then a chmod by FID.
    assert_eq!(fs::read(&h).unwrap(), pattern(0, 3901));
    assert_eq!(counter(&a, fsname, "opened"), 3, "answered again");
    let chmod = MdsOp::SetAttr {
        fid: fid_at(&h),
        attr: nacre_types::SetAttr {
            perm: Some(0o600),
            ..Default::default()
        },
    };
    assert_eq!(other.call(chmod).0, 0);
    until_counter(&a, fsname, "directories", 0);
    assert_eq!(fs::metadata(&h).unwrap().mode() & 0o7777, 0o600);
}

/// `AccessBatch` spoken by a raw client, as an attacker would: a user who may not read a
/// file it names is refused `EACCES` for the whole batch (nothing recorded), a FID of no
/// file is skipped, an empty or oversized batch is `EINVAL`; a time ahead of the MDT's clock is
/// taken as the MDT's own; a reader's batch is recorded.
#[test]
fn access_batches_are_refused_to_those_who_may_not_read() {
    let fsname = "asyncka";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let mds = fs.servers_mut()[0].listen.clone();
    let (secret, open) = (fs.path("secret"), fs.path("open"));
    for (p, mode) in [(&secret, 0o600), (&open, 0o644)] {
        fs::write(p, b"x").unwrap();
        fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    }
    let (sf, of) = (fid_at(&secret), fid_at(&open));
    let (secret_before, _) = times(&secret);
    let (open_before, _) = times(&open);
    let mut raw = Session::open(&mds, fsname, [0x72; 16]);
    let now = TimeSpec::now();
    let batch = |items: Vec<(Fid, TimeSpec)>| MdsOp::AccessBatch {
        items: items
            .into_iter()
            .map(|(fid, time)| BatchAccess { fid, time })
            .collect(),
    };
    let user = Cred::new(4245, 4245, vec![]);
    let (st, _) =
        nacre_types::cred::with(user.clone(), || raw.call(batch(vec![(of, now), (sf, now)])));
    assert_eq!(st, Status::Access as i32, "a file the user may not read");
    // A file gone since its read is skipped (as the MDT's own flush skips it).
    let gone = Fid::new(of.seq, of.oid + 100_000);
    assert_eq!(raw.call(batch(vec![(gone, now)])).0, 0);
    assert_eq!(raw.call(batch(Vec::new())).0, Status::Inval as i32);
    let many = vec![(of, now); ACCESS_BATCH_ITEMS_MAX + 1];
    assert_eq!(raw.call(batch(many)).0, Status::Inval as i32);
    // Accesses are due (the stored times are the files' creation); one dated an hour
    // ahead of the MDT's clock is taken at the MDT's own time.
    let ahead = TimeSpec {
        sec: now.sec + 3600,
        nsec: 0,
    };
    let (st, _) = nacre_types::cred::with(user, || raw.call(batch(vec![(of, ahead)])));
    assert_eq!(st, 0, "a reader's batch");
    until_atimes_flushed(fsname);
    let after = TimeSpec::now();
    // Through a mount that never looked at the files (this one keeps what it saw).
    let other = fs.scratch().join("other");
    fs::create_dir_all(&other).unwrap();
    let _b = fs.mount_another(&other, &[]);
    let (open_after, _) = times(&other.join("open"));
    assert!(open_after > open_before, "the reader's access was recorded");
    assert!(open_after.0 <= after.sec, "dated ahead: {open_after:?}");
    assert_eq!(
        times(&other.join("secret")).0,
        secret_before,
        "refused: nothing recorded"
    );
}

/// The holder's own chmod or truncate of a file whose create (with its bytes) it has not
/// sent yet: the create goes first, then the change, and what the mount keeps of the file
/// as the create is made is forgotten: the file is opened at the MDT from then on and reads
/// back as changed.
#[test]
fn a_mounts_own_change_of_a_file_not_sent_yet_is_read_back() {
    let fsname = "asynckt";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let (a, da) = delegated_small_dir(&fs);
    hold_sender(&a);
    write_small(&da, "t", 1);
    write_small(&da, "u", 1);
    let (t, u) = (da.join("t0"), da.join("u0"));
    assert_eq!(counter(&a, fsname, "pending"), 2, "answered, not sent");
    // A chmod: its own request sends the creates, then changes the mode.
    fs::set_permissions(&u, fs::Permissions::from_mode(0o600)).unwrap();
    // Asked until the kernel's copy from the chmod's answer is too old to be used (within
    // the jiffy it came in, the kernel answers from it): the mount's answer then.
    assert_eq!(fs::metadata(&u).unwrap().mode() & 0o7777, 0o600);
    // Changed since it was made: opened at the MDT, not answered from what was kept.
    assert_eq!(fs::read(&u).unwrap(), pattern(0, 3901));
    assert_eq!(
        counter(&a, fsname, "opened"),
        0,
        "answered from a stale copy"
    );
    fs::OpenOptions::new()
        .write(true)
        .open(&t)
        .unwrap()
        .set_len(10)
        .unwrap();
    let opened = counter(&a, fsname, "opened");
    release_sender(&a);
    // The kernel asks for the size (its own from the truncate's answer is not kept).
    assert_eq!(fs::metadata(&t).unwrap().len(), 10);
    assert_eq!(fs::read(&t).unwrap(), pattern(0, 3901)[..10]);
    assert_eq!(
        counter(&a, fsname, "opened"),
        opened,
        "answered from a stale copy"
    );
    assert_eq!(fs::read(fs.path("s/t0")).unwrap(), pattern(0, 3901)[..10]);
    assert_eq!(counter(&a, fsname, "lost"), 0);
}

/// A user's descriptor the mount answered the open of reads on after the user's own chmod
/// to 000, as on a local file system: the mount opens it at the MDT before the mode changes
/// (else its first read would open it then, refused `EACCES`).
#[test]
fn a_descriptor_answered_by_the_mount_outlives_a_chmod_of_its_file() {
    let fsname = "asynckc";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let a = async_mount(&fs);
    // The user's own directory, made through the mount (which then knows it complete).
    let public = a.mnt.join("pub");
    fs::create_dir(&public).unwrap();
    fs::set_permissions(&public, fs::Permissions::from_mode(0o777)).unwrap();
    let du = public.join("u");
    let (ok, err) = as_user(4300, 4300, "4300", &["mkdir", du.to_str().unwrap()]);
    assert!(ok, "{err}");
    super::dom::dom_default(&du);
    let path = |n: &str| du.join(n).to_str().unwrap().to_string();
    // Made, then sent by an fsync of the directory (one of the file would open it at the
    // MDT, and the mount would keep nothing of it).
    let script = "head -c 3901 /dev/zero > \"$1\" && sync \"$2\"";
    let dir = du.to_str().unwrap();
    let (ok, err) = as_user(
        4300,
        4300,
        "4300",
        &["sh", "-c", script, "sh", &path("f"), dir],
    );
    assert!(ok, "{err}");
    assert_eq!(counter(&a, fsname, "answered"), 1, "created by the mount");
    let opened = counter(&a, fsname, "opened");
    // The 3,901 bytes read through the descriptor, checked by the script (its status).
    let script = "exec 3< \"$1\" && chmod 000 \"$1\" && n=$(cat <&3 | wc -c) \\
        && { [ \"$n\" = 3901 ] || { echo \"read $n bytes\" >&2; exit 1; }; }";
    let (ok, err) = as_user(4300, 4300, "4300", &["sh", "-c", script, "sh", &path("f")]);
    assert!(ok, "{err}");
    assert_eq!(
        counter(&a, fsname, "opened"),
        opened + 1,
        "the open was the mount's"
    );
}
