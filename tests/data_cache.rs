//! File data cached across opens under extent locks on the OST objects (docs/locking.md,
//! "Data locks"): a mount that read a file reads it again from the kernel's page cache, and
//! another mount's write, truncate or hole punch calls its read locks back before it
//! returns, so the next read there — through a descriptor open since before, or a new one
//! — sees it. A mount that does not answer a callback is evicted after the callback timeout
//! and drops its cached data when it runs again.

use nacre_testkit::{nacre, nacre_ok, on_both_forms, Form, Spec, TestFs};
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

const SIZE: usize = 3 << 20;

/// Bytes the OSTs of `fs` read so far (`ost.FS-OSTxxxx.stats`, asked of the server
/// processes only: another test may have a client process stopped).
fn ost_read_bytes(fs: &TestFs, fsname: &str) -> u64 {
    ost_reads(fs, fsname).1
}

/// Reads the OSTs of `fs` served so far, and their bytes (as [`ost_read_bytes`]).
fn ost_reads(fs: &TestFs, fsname: &str) -> (u64, u64) {
    let (mut count, mut total) = (0, 0);
    for pid in fs.server_pids() {
        let pid = pid.to_string();
        let out = nacre(&[
            "ctl",
            "--pid",
            &pid,
            "get_param",
            "-n",
            &format!("ost.{fsname}-OST*.stats"),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        // "read_bytes N samples [bytes] SUM".
        for l in text.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.first() == Some(&"read_bytes") && w.len() >= 5 {
                count += w[1].parse::<u64>().unwrap_or(0);
                total += w[4].parse::<u64>().unwrap_or(0);
            }
        }
    }
    (count, total)
}

/// One counter of OST `i`'s lock namespace (`ldlm.namespaces.ost-FS-OSTxxxx.stats`).
fn ost_ldlm(fsname: &str, i: u32, what: &str) -> u64 {
    let text = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("ldlm.namespaces.ost-{fsname}-OST{i:04x}.stats"),
    ]);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}

fn content(seed: u8) -> Vec<u8> {
    (0..SIZE)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Reads `p` whole (a new open each time) until a whole read costs the OSTs less than a
/// tenth of the file (the kernel keeps its data across opens; it may still drop a page
/// now and then). Panics if it never does within 30 s.
fn until_cached(fs: &TestFs, fsname: &str, p: &Path, want: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = ost_read_bytes(fs, fsname);
        assert!(fs::read(p).unwrap() == want, "{p:?} read wrong data");
        if ost_read_bytes(fs, fsname) - before < want.len() as u64 / 10 {
            return;
        }
        if Instant::now() >= deadline {
            let ldlm = nacre_ok(&[
                "ctl",
                "get_param",
                &format!("ldlm.namespaces.*{fsname}-OST0000*.stats"),
            ]);
            panic!("the data of {p:?} is never kept across opens; locks:\n{ldlm}");
        }
    }
}

fn second_mount(fs: &TestFs) -> (std::path::PathBuf, nacre_testkit::ClientMount) {
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let m = fs.mount_another(&mnt, &[]);
    (mnt, m)
}

fn striped(fs: &TestFs, rel: &str) {
    let p = fs.path(rel);
    let path = p.to_str().unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", path]);
}

/// A file system of 2 OSTs named `fsname` whose OSTs never narrow locks for contention
/// (`contention_ms=0`): what a test of cached data expects of its locks holds every run.
fn two_osts_uncontended(form: Form, fsname: &str) -> TestFs {
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    for i in 0..2 {
        nacre_ok(&[
            "ctl",
            "set_param",
            &format!("ldlm.namespaces.ost-{fsname}-OST{i:04x}.contention_ms=0"),
        ]);
    }
    fs
}

fn a_mount_keeps_file_data_until_another_mount_changes_it(form: Form) {
    let fsname = match form {
        Form::Embedded => "datae1",
        Form::Networked => "datan1",
    };
    let fs = two_osts_uncontended(form, fsname);
    let (other_mnt, _other) = second_mount(&fs);
    striped(&fs, "f");
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    let first = content(1);
    fs::write(&a, &first).unwrap();

    // The other mount reads it once from the OSTs, then from its page cache.
    until_cached(&fs, fsname, &b, &first);
    let before = ost_read_bytes(&fs, fsname);
    for _ in 0..20 {
        assert!(fs::read(&b).unwrap() == first);
    }
    let read = ost_read_bytes(&fs, fsname) - before;
    assert!(
        read < 2 * SIZE as u64,
        "20 reads of cached data read {read} bytes from the OSTs"
    );
    // A descriptor open across the change.
    let mut held = fs::File::open(&b).unwrap();

    // A write through this mount, in the middle of the second stripe: the other mount's
    // read locks are called back before it returns.
    let callbacks = ost_ldlm(fsname, 0, "callbacks") + ost_ldlm(fsname, 1, "callbacks");
    let mut second = first.clone();
    second[(1 << 20) + 5..(1 << 20) + 4096].fill(0xab);
    let w = fs::OpenOptions::new().write(true).open(&a).unwrap();
    w.write_all_at(&second[(1 << 20) + 5..(1 << 20) + 4096], (1 << 20) + 5)
        .unwrap();
    drop(w);
    assert!(
        ost_ldlm(fsname, 0, "callbacks") + ost_ldlm(fsname, 1, "callbacks") > callbacks,
        "the write called nothing back"
    );
    let mut got = Vec::new();
    held.seek(SeekFrom::Start(0)).unwrap();
    held.read_to_end(&mut got).unwrap();
    assert!(
        got == second,
        "a descriptor open before the write read stale data"
    );
    assert_eq!(fs::read(&b).unwrap(), second, "a new open read stale data");

    // Cached again, then truncated and extended through this mount.
    until_cached(&fs, fsname, &b, &second);
    let w = fs::OpenOptions::new().write(true).open(&a).unwrap();
    w.set_len(1000).unwrap();
    w.set_len(SIZE as u64).unwrap();
    drop(w);
    let mut third = second.clone();
    third[1000..].fill(0);
    assert!(
        fs::read(&b).unwrap() == third,
        "stale data after a truncate"
    );

    // A write through the other mount is its own: its cache stays (no callback to
    // itself) and shows its write.
    until_cached(&fs, fsname, &b, &third);
    let mut fourth = third.clone();
    fourth[10..20].fill(7);
    let w = fs::OpenOptions::new().write(true).open(&b).unwrap();
    w.write_all_at(&fourth[10..20], 10).unwrap();
    drop(w);
    assert!(fs::read(&b).unwrap() == fourth);
    assert!(fs::read(&a).unwrap() == fourth);

    // The other mount reports its locks.
    let pid = _other.pid().expect("the other mount's process").to_string();
    if form == Form::Networked {
        let stats = nacre_ok(&[
            "ctl",
            "--pid",
            &pid,
            "get_param",
            "-n",
            &format!("ldlm.namespaces.{fsname}-OST0000-osc.stats"),
        ]);
        let n = |what: &str| -> u64 {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{what} "))?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {what} in {stats}"))
        };
        assert!(n("grants") >= 1 && n("callbacks") >= 1, "{stats}");
    }
}

fn o_direct_reads_and_writes_bypass_the_cache_but_stay_coherent(form: Form) {
    let fsname = match form {
        Form::Embedded => "datae2",
        Form::Networked => "datan2",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let (other_mnt, _other) = second_mount(&fs);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    let first = content(3);
    fs::write(&a, &first).unwrap();
    until_cached(&fs, fsname, &b, &first);
    // An O_DIRECT write on this mount calls the other mount's locks back like any write.
    let buf = nacre_types::AlignedBuf::copy_from(&[9u8; 4096]);
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&a)
        .unwrap();
    f.write_all_at(&buf, 8192).unwrap();
    drop(f);
    let mut want = first.clone();
    want[8192..12288].fill(9);
    assert!(
        fs::read(&b).unwrap() == want,
        "stale data after an O_DIRECT write"
    );
}

/// Records that do not fall on pages (IOR hard's 47,008 bytes), written through one mount
/// (over records it had read, so under its locks) and read back there by a new open: the
/// writes moved the file's modification time, so the kernel dropped what it cached of the
/// file and reads it again — from the OSTs in a few large reads, not a read per record (a
/// page two records share is whole on the OSTs: the client wrote the bytes it kept of it,
/// crates/client/src/edges.rs). Another mount then rewrites bytes across a record boundary:
/// the first mount's next read has the new bytes (its locks were called back, and the kept
/// bytes of those pages went with them).
fn records_a_mount_wrote_are_read_back_in_large_reads(form: Form) {
    const REC: usize = 47_008;
    const RECORDS: usize = 40;
    let fsname = match form {
        Form::Embedded => "edgese",
        Form::Networked => "edgesn",
    };
    let fs = two_osts_uncontended(form, fsname);
    let (other_mnt, _other) = second_mount(&fs);
    striped(&fs, "records");
    let (a, b) = (fs.path("records"), other_mnt.join("records"));
    let mut data = content(7);
    data.truncate(REC * RECORDS);
    let write_records = |data: &[u8]| {
        let f = fs::OpenOptions::new().write(true).open(&a).unwrap();
        // Every other record first, then the rest: each page two records share is
        // written in two parts, as two IOR ranks do.
        for first in [0, 1] {
            for r in (first..RECORDS).step_by(2) {
                f.write_all_at(&data[r * REC..(r + 1) * REC], (r * REC) as u64)
                    .unwrap();
            }
        }
        f.sync_all().unwrap();
    };
    // Written once and read (the mount then holds its locks, the first writes having been
    // made before it had any); its pages dropped from the kernel's cache (as if never
    // read: a page cached before a write in part stays cached), then written again.
    write_records(&content(3)[..REC * RECORDS]);
    until_cached(&fs, fsname, &a, &content(3)[..REC * RECORDS]);
    {
        use std::os::fd::AsRawFd;
        let f = fs::File::open(&a).unwrap();
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
    }
    write_records(&data);
    // The writer's kernel drops its pages when it sees the time its writes moved (FUSE's
    // auto_inval_data: docs/locking.md, "Modification times of written files"), so the
    // read-back comes from the OSTs again — in a few large reads, never one per record or
    // per page a record boundary cut.
    let before = ost_reads(&fs, fsname);
    assert!(fs::read(&a).unwrap() == data, "read back wrong");
    let after = ost_reads(&fs, fsname);
    let (reads, read) = (after.0 - before.0, after.1 - before.1);
    assert!(
        reads <= RECORDS as u64 / 4,
        "reading back {RECORDS} records this mount wrote took {reads} OST reads ({read} bytes)"
    );
    // Another mount rewrites 100 bytes across the boundary of records 3 and 4.
    let at = 4 * REC - 50;
    let new = vec![0xa5u8; 100];
    {
        let f = fs::OpenOptions::new().write(true).open(&b).unwrap();
        f.write_all_at(&new, at as u64).unwrap();
        f.sync_all().unwrap();
    }
    data[at..at + 100].copy_from_slice(&new);
    // The page alone (no read-ahead), the one the two records share: not answered from
    // bytes kept before the other mount's write.
    {
        use std::os::fd::AsRawFd;
        let f = fs::File::open(&a).unwrap();
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        assert_eq!(rc, 0);
        let mut got = vec![0u8; 100];
        f.read_exact_at(&mut got, at as u64).unwrap();
        assert_eq!(
            got, new,
            "the first mount read stale bytes of a shared page"
        );
    }
    assert!(
        fs::read(&a).unwrap() == data,
        "the first mount read stale bytes after another mount's write"
    );
}

on_both_forms!(
    a_mount_keeps_file_data_until_another_mount_changes_it,
    o_direct_reads_and_writes_bypass_the_cache_but_stay_coherent,
    records_a_mount_wrote_are_read_back_in_large_reads
);

/// A mount whose process is stopped cannot give its read locks back: a write elsewhere
/// waits at most the callback timeout, the silent client is evicted at the OST, and once
/// it runs again it is refused there, drops its cached data and reads the new data.
/// Networked only: the stopped client must be a process of its own.
#[test]
fn a_silent_mount_is_evicted_at_the_ost_and_then_drops_its_cached_data() {
    let fsname = "datan3";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (other_mnt, other) = second_mount(&fs);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    let first = content(5);
    fs::write(&a, &first).unwrap();
    until_cached(&fs, fsname, &b, &first);
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("ldlm.namespaces.ost-{fsname}-OST0000.callback_timeout_ms=1000"),
    ]);
    // Opened for writing first: that calls back the other mount's metadata lock on the
    // file (the MDT's own timeout is not what this test is about).
    let w = fs::OpenOptions::new().write(true).open(&a).unwrap();
    let pid = other.pid().expect("the other mount's process") as i32;
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let written = w.write_all_at(&[0xee; 100], 0);
    let took = started.elapsed();
    drop(w);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    written.unwrap();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(15),
        "the write waited {took:?}, not the OST's callback timeout of 1 s"
    );
    assert_eq!(ost_ldlm(fsname, 0, "timeouts"), 1);
    let evicted = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("ldlm.namespaces.ost-{fsname}-OST0000.evicted"),
    ]);
    assert_eq!(evicted.trim(), "1");
    let mut want = first.clone();
    want[..100].fill(0xee);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::read(&b).unwrap() != want {
        assert!(
            Instant::now() < deadline,
            "the evicted mount kept its stale data"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // It caches again, under its new identity.
    until_cached(&fs, fsname, &b, &want);
}
