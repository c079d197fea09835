//! Write-behind under write locks (docs/locking.md, "Write-behind"): page-cache writes a
//! mount holds a write lock and space grant for are kept and written in large RPCs; another
//! mount's read or write calls the lock back, which writes them first, and its stat asks
//! the writer for the size (a glimpse) and leaves the lock; `fsync` writes them and reports
//! what the OSTs refused; a mount evicted while keeping writes loses them and says so, and
//! never writes them after another mount's data.

use nacre_testkit::{get_param, nacre_ok, on_both_forms, Form, Spec, TestFs};
use nacre_tests::wb_stat;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// 47,008 bytes: IOR-hard's record, not a multiple of a page.
const RECORD: usize = 47_008;

fn record(i: usize) -> Vec<u8> {
    (0..RECORD)
        .map(|j| (i as u8).wrapping_mul(7).wrapping_add(j as u8))
        .collect()
}

/// Write RPCs the OSTs of `fs` served so far.
fn ost_writes(fs: &TestFs, fsname: &str) -> u64 {
    let mut total = 0;
    for pid in fs.server_pids() {
        let pid = pid.to_string();
        let out = nacre_testkit::nacre(&[
            "ctl",
            "--pid",
            &pid,
            "get_param",
            "-n",
            &format!("ost.{fsname}-OST*.stats"),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        total += text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "write").then(|| w.next()?.parse::<u64>().ok())?
            })
            .sum::<u64>();
    }
    total
}

fn second_mount(fs: &TestFs) -> (std::path::PathBuf, nacre_testkit::ClientMount) {
    let mnt = fs.scratch().join("other");
    fs::create_dir_all(&mnt).unwrap();
    let m = fs.mount_another(&mnt, &[]);
    (mnt, m)
}

/// The mount process serving `fs.path(..)`: the embedded process, or the client process.
fn first_mount_pid(fs: &TestFs) -> u32 {
    fs.client_pid().expect("the first mount's process")
}

fn small_writes_are_kept_and_gathered(form: Form) {
    let fsname = match form {
        Form::Embedded => "wbe1",
        Form::Networked => "wbn1",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let pid = Some(first_mount_pid(&fs));
    let p = fs.path("f");
    // The first write goes through and brings a write lock and space grant; the next ones
    // are kept.
    let mut f = fs::File::create(&p).unwrap();
    let before = ost_writes(&fs, fsname);
    let n = 200;
    let mut want = Vec::new();
    for i in 0..n {
        let r = record(i);
        f.write_all(&r).unwrap();
        want.extend_from_slice(&r);
    }
    let kept = wb_stat(fsname, pid, "writes_kept");
    assert!(kept >= n as u64 - 5, "only {kept} of {n} writes were kept");
    // Kept data is counted in the size this mount sees before it is written.
    assert_eq!(fs::metadata(&p).unwrap().len(), want.len() as u64);
    f.sync_all().unwrap();
    assert_eq!(wb_stat(fsname, pid, "dirty_bytes"), 0);
    let rpcs = ost_writes(&fs, fsname) - before;
    assert!(
        rpcs <= 30,
        "{n} writes of {RECORD} bytes took {rpcs} write RPCs (not gathered)"
    );
    drop(f);
    assert!(fs::read(&p).unwrap() == want);
}

fn another_mount_sees_kept_writes_at_once(form: Form) {
    let fsname = match form {
        Form::Embedded => "wbe2",
        Form::Networked => "wbn2",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let pid = Some(first_mount_pid(&fs));
    let (other_mnt, _other) = second_mount(&fs);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    let mut f = fs::File::create(&a).unwrap();
    let mut want = Vec::new();
    for i in 0..40 {
        let r = record(i);
        f.write_all(&r).unwrap();
        want.extend_from_slice(&r);
    }
    // The file is still open and its data kept (no process is started meanwhile: its
    // close-on-exec would flush the kept writes): the other mount's stat and read call the
    // write locks back, which writes it.
    assert_eq!(fs::metadata(&b).unwrap().len(), want.len() as u64);
    assert!(
        fs::read(&b).unwrap() == want,
        "the other mount read old data"
    );
    assert!(wb_stat(fsname, pid, "writes_kept") >= 30);
    assert!(wb_stat(fsname, pid, "flush_rpcs") >= 1);
    // More kept writes, then a write through the other mount in their middle: both land,
    // in the order they were made.
    let r = record(99);
    f.write_all_at(&r, 10_000).unwrap();
    want[10_000..10_000 + RECORD].copy_from_slice(&r);
    let w = fs::OpenOptions::new().write(true).open(&b).unwrap();
    w.write_all_at(b"other", 20_000).unwrap();
    drop(w);
    want[20_000..20_005].copy_from_slice(b"other");
    drop(f);
    assert!(fs::read(&a).unwrap() == want);
    assert!(fs::read(&b).unwrap() == want);
}

fn truncate_and_o_direct_see_kept_writes(form: Form) {
    let fsname = match form {
        Form::Embedded => "wbe3",
        Form::Networked => "wbn3",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let p = fs.path("f");
    let mut f = fs::File::create(&p).unwrap();
    for i in 0..20 {
        f.write_all(&record(i)).unwrap();
    }
    // A truncate through another descriptor: kept data past it must not come back.
    let t = fs::OpenOptions::new().write(true).open(&p).unwrap();
    t.set_len(5_000).unwrap();
    drop(t);
    drop(f);
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), 5_000);
    assert!(got[..] == record(0)[..5_000]);
    // An O_DIRECT read sees what is kept.
    let mut f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.write_all(&[3u8; 8192]).unwrap();
    use std::os::unix::fs::OpenOptionsExt;
    let d = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let mut buf = nacre_types::AlignedBuf::zeroed(8192);
    assert_eq!(d.read_at(&mut buf, 0).unwrap(), 8192);
    assert!(
        buf.iter().all(|b| *b == 3),
        "an O_DIRECT read missed kept data"
    );
    drop(f);
}

fn appends_from_two_mounts_never_overwrite(form: Form) {
    let fsname = match form {
        Form::Embedded => "wbe5",
        Form::Networked => "wbn5",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let (other_mnt, _other) = second_mount(&fs);
    let p = fs.path("log");
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", p.to_str().unwrap()]);
    const LEN: usize = 1_000;
    const EACH: usize = 150;
    let appender = |path: std::path::PathBuf, tag: u8| {
        std::thread::spawn(move || {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            for i in 0..EACH {
                let mut rec = format!("{}{i:06}", tag as char).into_bytes();
                rec.resize(LEN - 1, tag);
                rec.push(b'\n');
                f.write_all(&rec).unwrap();
            }
        })
    };
    let a = appender(p.clone(), b'A');
    let b = appender(other_mnt.join("log"), b'B');
    a.join().unwrap();
    b.join().unwrap();
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), 2 * EACH * LEN, "appends overwrote each other");
    let mut seen = std::collections::HashSet::new();
    for rec in got.chunks(LEN) {
        let tag = rec[0];
        assert!(
            tag == b'A' || tag == b'B',
            "a torn record: {:?}",
            &rec[..16]
        );
        assert!(rec[7..LEN - 1].iter().all(|c| *c == tag), "a torn record");
        assert!(seen.insert(rec[..7].to_vec()), "a record twice");
    }
    assert_eq!(seen.len(), 2 * EACH);
    assert_eq!(
        fs::metadata(other_mnt.join("log")).unwrap().len(),
        got.len() as u64
    );
}

/// A counter of a mount's data locks, summed over its OSTs
/// (`ldlm.namespaces.FS-OSTxxxx-osc.stats`).
fn osc_lock_stat(fsname: &str, pid: u32, what: &str) -> u64 {
    let text = get_param(
        Some(pid),
        &format!("ldlm.namespaces.{fsname}-OST*-osc.stats"),
    );
    let mut lines = text
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{what} ")))
        .peekable();
    assert!(lines.peek().is_some(), "no {what} in {text}");
    lines.map(|n| n.trim().parse::<u64>().unwrap()).sum()
}

/// Another mount's stat of a file this mount keeps writes for asks this mount for the size
/// (a glimpse) instead of calling its write lock back: the stat sees the kept bytes, this
/// mount keeps its lock and goes on keeping writes, and the other mount's read (which does
/// call the lock back) reads them all.
fn a_stat_elsewhere_asks_the_writer_for_the_size_and_leaves_its_lock(form: Form) {
    let fsname = match form {
        Form::Embedded => "wbe6",
        Form::Networked => "wbn6",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let pid = first_mount_pid(&fs);
    let (other_mnt, _other) = second_mount(&fs);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", a.to_str().unwrap()]);
    let mut f = fs::OpenOptions::new().write(true).open(&a).unwrap();
    let mut want = Vec::new();
    for i in 0..40 {
        let r = record(i);
        f.write_all(&r).unwrap();
        want.extend_from_slice(&r);
    }
    let callbacks = osc_lock_stat(fsname, pid, "callbacks");
    let glimpses = osc_lock_stat(fsname, pid, "glimpses");
    assert_eq!(fs::metadata(&b).unwrap().len(), want.len() as u64);
    assert!(
        osc_lock_stat(fsname, pid, "glimpses") > glimpses,
        "the writer was not glimpsed"
    );
    assert_eq!(
        osc_lock_stat(fsname, pid, "callbacks"),
        callbacks,
        "a stat called the writer's locks back"
    );
    // The writer still holds its locks: its next writes are kept too.
    let kept = wb_stat(fsname, Some(pid), "writes_kept");
    for i in 40..50 {
        let r = record(i);
        f.write_all(&r).unwrap();
        want.extend_from_slice(&r);
    }
    // (Counted per object: a write across a stripe boundary is kept as two.)
    assert!(wb_stat(fsname, Some(pid), "writes_kept") >= kept + 10);
    assert_eq!(fs::metadata(&b).unwrap().len(), want.len() as u64);
    assert!(
        fs::read(&b).unwrap() == want,
        "the other mount read old data"
    );
    assert!(osc_lock_stat(fsname, pid, "callbacks") > callbacks);
    drop(f);
    assert!(fs::read(&a).unwrap() == want);
}

on_both_forms!(
    appends_from_two_mounts_never_overwrite,
    a_stat_elsewhere_asks_the_writer_for_the_size_and_leaves_its_lock,
    small_writes_are_kept_and_gathered,
    another_mount_sees_kept_writes_at_once,
    truncate_and_o_direct_see_kept_writes
);

/// A mount stopped while it keeps writes is evicted at the OST when another mount writes
/// there: its kept writes are dropped — never written after the other mount's data — and
/// its next `fsync` reports EIO. Networked only: the stopped client is a process of its own.
#[test]
fn an_evicted_mount_loses_its_kept_writes_and_says_so() {
    let fsname = "wbn4";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let (other_mnt, other) = second_mount(&fs);
    let (a, b) = (fs.path("f"), other_mnt.join("f"));
    fs::write(&a, vec![1u8; RECORD]).unwrap();
    for (name, value) in [("callback_timeout_ms", "1000"), ("contention_ms", "0")] {
        nacre_ok(&[
            "ctl",
            "set_param",
            &format!("ldlm.namespaces.ost-{fsname}-OST0000.{name}={value}"),
        ]);
    }
    // The other mount writes once, which has it poll the OST for callbacks.
    fs::write(&b, vec![1u8; RECORD]).unwrap();
    let stats = |what: &str| -> u64 {
        let text = nacre_ok(&[
            "ctl",
            "get_param",
            "-n",
            &format!("ldlm.namespaces.ost-{fsname}-OST0000.stats"),
        ]);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{what} "))?.trim().parse().ok())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats("clients") < 2 {
        assert!(Instant::now() < deadline, "the other mount never polls");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nor does it keep writes before it knows the OST's start (its first poll's answer).
    let pid = other.pid().expect("the other mount's process");
    let epoch = format!("ldlm.namespaces.{fsname}-OST0000-osc.server_epoch");
    while get_param(Some(pid), &epoch).trim() == "0" {
        assert!(
            Instant::now() < deadline,
            "the other mount never learns the OST's start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A read here calls the other mount's write lock back (a stat would not: it only
    // asks for the size), so its next write goes through.
    assert_eq!(fs::read(&a).unwrap(), vec![1u8; RECORD]);
    let w = fs::OpenOptions::new().write(true).open(&a).unwrap();
    // Its first write brings a write lock, its second is kept (no process is started while
    // the file is open here: its close-on-exec would flush it).
    let bf = fs::OpenOptions::new().write(true).open(&b).unwrap();
    bf.write_all_at(&[2u8; 100], 0).unwrap();
    bf.write_all_at(&[2u8; 100], 1_000).unwrap();
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let written = w.write_all_at(&[9u8; 10], 1_000);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    written.unwrap();
    drop(w);
    let err = bf
        .sync_all()
        .expect_err("the evicted mount's fsync must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    drop(bf);
    let got = fs::read(&a).unwrap();
    assert_eq!(
        &got[1_000..1_010],
        &[9u8; 10],
        "the kept write landed after"
    );
    assert_eq!(
        &got[..100],
        &[2u8; 100],
        "the write that went through is there"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::read(&b).unwrap() != got {
        assert!(
            Instant::now() < deadline,
            "the evicted mount reads stale data"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One field of `ost.FS-OST0000.recovery_status` on the OSS process `pid` (asked of that
/// process only: a stopped mount would not answer).
fn recovery_field(fsname: &str, pid: u32, what: &str) -> String {
    let text = get_param(Some(pid), &format!("ost.{fsname}-OST0000.recovery_status"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what}: ")))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}

/// Waits until the OSS `pid` has held at least one request for its recovery.
fn wait_until_held(fsname: &str, pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while recovery_field(fsname, pid, "requests_held") == "0" {
        assert!(
            Instant::now() < deadline,
            "no request held by the OST's recovery"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An OSS killed and restarted under a mount that keeps writes (Lustre's recovery window):
/// until the mount took its locks back, another mount's write to one of its files and
/// another's stat wait (answered `EINPROGRESS`, sent again); then the kept writes land
/// first, the other mount's write after them, and the stat sees the kept data's size.
/// Networked only: the OSS and the mounts are processes of their own (the embedded form
/// restarts its clients with its servers).
#[test]
fn an_ost_restart_waits_for_kept_writes_before_others_read_or_write() {
    let fsname = "wbn7";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let pid = first_mount_pid(&fs);
    let (other_mnt, _other) = second_mount(&fs);
    let (f1, f2) = (fs.path("f1"), fs.path("f2"));
    let mut w1 = fs::File::create(&f1).unwrap();
    let mut w2 = fs::File::create(&f2).unwrap();
    // Opened by the other mount now: its write below then needs only the OST (an open
    // while this mount is stopped would wait for it at the MDT until it is evicted), and
    // so does its stat of f1 (the file is open for writing here: its size is glimpsed).
    let other = fs::OpenOptions::new()
        .write(true)
        .open(other_mnt.join("f2"))
        .unwrap();
    let other_f1 = other_mnt.join("f1");
    fs::metadata(&other_f1).unwrap();
    let (mut want1, mut want2) = (Vec::new(), Vec::new());
    for i in 0..4 {
        let r = record(i);
        w1.write_all(&r).unwrap();
        want1.extend_from_slice(&r);
        let r = record(50 + i);
        w2.write_all(&r).unwrap();
        want2.extend_from_slice(&r);
    }
    // Right after the last writes (kept for a second before they are written): the mount
    // stops, the OSS is killed and started again, the other mount writes f2 and stats f1.
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let oss = fs.servers_mut().len() - 1;
    fs.servers_mut()[oss].kill9();
    fs.servers_mut()[oss].restart();
    let oss_pid = fs.servers_mut()[oss].pid();
    assert_eq!(recovery_field(fsname, oss_pid, "status"), "RECOVERING");
    let writer = std::thread::spawn(move || {
        other.write_all_at(&[7u8; 100], 0).unwrap();
        other
    });
    let stat = std::thread::spawn(move || fs::metadata(other_f1).unwrap().len());
    wait_until_held(fsname, oss_pid);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    drop(writer.join().unwrap());
    assert_eq!(
        stat.join().unwrap(),
        want1.len() as u64,
        "a stat during the OST's recovery missed kept writes"
    );
    w1.sync_all()
        .expect("kept writes under a lock taken back land");
    w2.sync_all()
        .expect("kept writes under a lock taken back land");
    drop((w1, w2));
    assert!(fs::read(other_mnt.join("f1")).unwrap() == want1);
    want2[..100].copy_from_slice(&[7u8; 100]);
    assert!(
        fs::read(other_mnt.join("f2")).unwrap() == want2,
        "the other mount's write must land after the kept writes it waited for"
    );
    assert!(osc_lock_stat(fsname, pid, "replayed") >= 2);
    assert_eq!(osc_lock_stat(fsname, pid, "replay_refused"), 0);
    assert_eq!(recovery_field(fsname, oss_pid, "status"), "COMPLETE");
    assert_eq!(recovery_field(fsname, oss_pid, "clients_back"), "1");
}

/// Kept writes keep their space across an OST restart on a full OST (Lustre's grant at
/// reconnect): another mount filling the OST meanwhile waits for the OST's recovery, the
/// first mount claims back the space its kept writes were granted with its lock replay, and
/// every kept write lands while the filler meets `ENOSPC`. (Under the recovery gate, a
/// kept write without its claim would race the filler for the space; the claim and the
/// space held back until it comes are shown deterministically by nacre-oss's unit tests.)
#[test]
fn kept_writes_keep_their_space_when_a_full_ost_restarts() {
    let fsname = "wbn8";
    let mut small = nacre_testkit::SmallFs::start(fsname, &[Some("48m")]);
    let a = small.mount("a");
    let b = small.mount("b");
    let pid = a.pid().expect("the first mount's process");
    // Opened now: writing it below needs only the OST (a create while the first mount is
    // stopped would wait for its lock on the directory until it is evicted).
    let mut filler = fs::File::create(b.mnt.join("filler")).unwrap();
    // Eight files of 512 KiB, each less than an RPC: kept (a second) after the first write
    // of each brought a write lock and space grant.
    let mut files = Vec::new();
    for i in 0..8 {
        let p = a.mnt.join(format!("f{i}"));
        let mut f = fs::File::create(&p).unwrap();
        let data = nacre_testkit::pattern(i, 512 << 10);
        for piece in data.chunks(64 << 10) {
            f.write_all(piece).unwrap();
        }
        files.push((p, f, data));
    }
    let kept = wb_stat(fsname, Some(pid), "dirty_bytes");
    // SAFETY: signals to a child process of this test.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    assert!(kept >= 1 << 20, "too little kept to show anything: {kept}");
    small.oss.kill9();
    small.oss.restart();
    // The other mount fills the OST: it waits for the OST's recovery, which waits for the
    // first mount.
    let fill = std::thread::spawn(move || {
        let chunk = vec![9u8; 1 << 20];
        (0..64)
            .find_map(|_| filler.write_all(&chunk).err())
            .or_else(|| filler.sync_all().err())
    });
    let oss_pid = small.oss.pid();
    wait_until_held(fsname, oss_pid);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let full = fill
        .join()
        .unwrap()
        .expect("64 MiB must not fit in a 48 MiB OST");
    assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
    for (p, f, data) in files {
        f.sync_all()
            .unwrap_or_else(|e| panic!("kept writes to {} lost their space: {e}", p.display()));
        drop(f);
        let name = p.file_name().unwrap();
        let got = fs::read(b.mnt.join(name)).unwrap();
        let first_bad = got.iter().zip(&data).position(|(x, y)| x != y);
        assert!(
            got == data,
            "{name:?}: {} bytes read, {} written, first difference at {first_bad:?}",
            got.len(),
            data.len()
        );
    }
}

/// Buffered writes fill a small OST (64 MiB) past 85% without `ENOSPC`: the mount's grant
/// stays within half of the OST's free space, so the writes its cache cannot cover still
/// find room (before, repeated top-ups let the grant creep up to all of the free space, and
/// writes failed with the OST 19% full).
#[test]
fn buffered_writes_fill_a_small_ost_without_early_enospc() {
    let small = nacre_testkit::SmallFs::start("wbsm", &[Some("64m")]);
    let m = small.mount("mnt");
    let used = || nacre_testkit::fill_percent(&small.osts[0]);
    let mut written = Vec::new();
    while used() < 85.0 {
        let i = written.len();
        assert!(i < 32, "64 MiB not 85% full after {i} files of 2 MiB");
        let p = m.mnt.join(format!("f{i}"));
        let data = nacre_testkit::pattern(i as u64, 2 << 20);
        fs::write(&p, &data).unwrap_or_else(|e| panic!("file {i}, OST {:.1}% full: {e}", used()));
        written.push((p, data));
    }
    for (p, data) in &written {
        assert_eq!(&fs::read(p).unwrap(), data, "{}", p.display());
    }
}
