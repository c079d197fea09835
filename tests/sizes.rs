//! Sizes the MDT knows exactly: a stat of a file no one writes needs no glimpse of its
//! objects, and a stat from any mount still sees the last write, truncate and append.

use nacre_testkit::{on_both_forms, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Glimpses the OST served so far (`ost.FS-OST0000.stats`).
fn glimpses(fsname: &str) -> u64 {
    nacre_testkit::stat_count(&format!("ost.{fsname}-OST0000.stats"), "glimpse")
}

fn size(p: &Path) -> u64 {
    fs::metadata(p).unwrap().len()
}

/// Stats `p` until a stat costs no glimpse (the MDT learned the size in the background),
/// checking each answer; panics after 30 s.
fn until_exact(fsname: &str, p: &Path, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = glimpses(fsname);
        assert_eq!(size(p), want);
        if glimpses(fsname) == before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the MDT never learned the size of {p:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stats_see_every_change_and_cost_no_glimpse_once_known(form: Form) {
    // One name per form: both forms run at once, and `nacre ctl` asks every process here.
    let fsname = match form {
        Form::Embedded => "sizese",
        Form::Networked => "sizesn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let a = fs.path("f");
    let b = other_mnt.join("f");

    // A new file is exactly empty: stats from either mount need no glimpse.
    fs::File::create(&a).unwrap();
    let before = glimpses(fsname);
    for _ in 0..10 {
        assert_eq!(size(&a), 0);
        assert_eq!(size(&b), 0);
    }
    assert_eq!(glimpses(fsname), before, "an empty new file was glimpsed");

    // While a writer holds it, stats glimpse and see its writes.
    let mut w = fs::OpenOptions::new().write(true).open(&a).unwrap();
    w.write_all(&[1u8; 5000]).unwrap();
    let before = glimpses(fsname);
    assert_eq!(size(&b), 5000);
    assert!(
        glimpses(fsname) > before,
        "a file being written must be glimpsed"
    );
    w.write_all(&[2u8; 3000]).unwrap();
    assert_eq!(size(&b), 8000);
    drop(w);
    // After the last writer closed, the MDT learns the size; then stats need no glimpse.
    until_exact(fsname, &b, 8000);
    until_exact(fsname, &a, 8000);

    // A truncate by path from the other mount is seen at once.
    fs::OpenOptions::new()
        .write(true)
        .open(&b)
        .unwrap()
        .set_len(100)
        .unwrap();
    assert_eq!(size(&a), 100);
    let f = fs::OpenOptions::new().write(true).open(&b).unwrap();
    f.set_len(50).unwrap();
    drop(f);
    std::process::Command::new("truncate")
        .args(["-s", "10", b.to_str().unwrap()])
        .status()
        .unwrap();
    assert_eq!(size(&a), 10);
    assert_eq!(size(&b), 10);

    // An append from the other mount, then a reader elsewhere.
    let mut ap = fs::OpenOptions::new().append(true).open(&b).unwrap();
    ap.write_all(b"tail").unwrap();
    drop(ap);
    assert_eq!(size(&a), 14);
    until_exact(fsname, &a, 14);
    let mut want = vec![1u8; 10];
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(&a).unwrap(), want);

    // A writer that wrote nothing leaves the size exact; O_DIRECT writes count as writes.
    drop(fs::OpenOptions::new().write(true).open(&a).unwrap());
    let before = glimpses(fsname);
    assert_eq!(size(&b), 14);
    assert_eq!(glimpses(fsname), before);
    let mut buf = nacre_types::AlignedBuf::zeroed(4096);
    buf.fill(9);
    let d = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&b)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&d, &buf, 8192).unwrap();
    drop(d);
    assert_eq!(size(&a), 12288);
    until_exact(fsname, &a, 12288);

    // The native library writes only through handles opened for writing (the MDT's exact
    // size counts on it).
    let c = nacre_client::Client::mount(
        fs.mgs_nid.parse().unwrap(),
        fsname,
        nacre_client::ClientConfig::default(),
    )
    .unwrap();
    let fid = c.lookup(nacre_types::Fid::ROOT, b"f", false).unwrap().fid;
    let (_, h) = c.open(fid, nacre_types::cred::MAY_READ).unwrap();
    assert_eq!(c.write(&h, 0, b"x").unwrap_err().errno(), libc::EBADF);
    c.close(&h).unwrap();
    assert_eq!(size(&a), 12288);
}

/// mdtest-hard's pattern: files written and closed by one mount, then stat'ed by it. Once
/// the MDT knows their sizes, the writer's stats cost no glimpse either (the writer used to
/// glimpse beside each answer, remembering the size was not exact while it wrote: the OST
/// then asked the writer itself, which held the write locks, for what it kept).
fn a_writers_stats_after_close_cost_no_glimpse(form: Form) {
    let fsname = match form {
        Form::Embedded => "sizese2",
        Form::Networked => "sizesn2",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    fs::create_dir(fs.path("d")).unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("d/f{i}")).collect();
    for n in &names {
        fs::write(fs.path(n), vec![7u8; 3901]).unwrap();
    }
    // Known to the MDT: stats from the other mount, which never glimpsed beside, cost none.
    for n in &names {
        until_exact(fsname, &other_mnt.join(n), 3901);
    }
    let before = glimpses(fsname);
    for n in &names {
        assert_eq!(size(&fs.path(n)), 3901);
    }
    assert_eq!(
        glimpses(fsname),
        before,
        "the writer glimpsed files whose sizes the MDT knew"
    );
}

/// mdtest-hard's read: a one-object file read to its end by a mount that holds a lock on
/// all of it needs no glimpse to know where it ends; where another mount keeps writes past
/// what was read, the reader still learns the size (and reads the hole as zeros).
fn reads_to_the_end_cost_no_glimpse_unless_others_write_beyond(form: Form) {
    let fsname = match form {
        Form::Embedded => "sizese3",
        Form::Networked => "sizesn3",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        fs::write(fs.path(n), vec![i as u8; 3901]).unwrap();
    }
    for n in &names {
        until_exact(fsname, &other_mnt.join(n), 3901);
    }
    let before = glimpses(fsname);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(fs::read(fs.path(n)).unwrap(), vec![i as u8; 3901]);
    }
    assert_eq!(glimpses(fsname), before, "reads to the end were glimpsed");

    // The other mount keeps a write 1 MiB further on: the file goes on past the object's
    // end as this mount last knew it, to the kept write, with a hole between.
    let w = fs::OpenOptions::new()
        .write(true)
        .open(other_mnt.join("f1"))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&w, b"end", 1 << 20).unwrap();
    let got = fs::read(fs.path("f1")).unwrap();
    let mut want = vec![0u8; (1 << 20) + 3];
    want[..3901].fill(1);
    want[(1 << 20)..].copy_from_slice(b"end");
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the hole or the kept write read wrong");
    drop(w);
}

on_both_forms!(
    stats_see_every_change_and_cost_no_glimpse_once_known,
    a_writers_stats_after_close_cost_no_glimpse,
    reads_to_the_end_cost_no_glimpse_unless_others_write_beyond
);
