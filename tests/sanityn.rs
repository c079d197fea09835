//! Several mounts of one file system, in the style of Lustre's sanityn: what one mount
//! changes is seen at once by the others that cached it (their locks are called back), with
//! three mounts (one change calls back two holders) and across MDTs (a cross-MDT change
//! calls back locks on every MDT it touches, and never those of the mount that asked for
//! it, whose own kernel applies the change). Each runs on the embedded form, the networked
//! form, and the networked form with every mount answering creates, unlinks and mkdirs
//! itself in the directories delegated to it (`--async-dirops true`).

use nacre_testkit::{
    dir_mdt, get_param, inodes_used, lfsck_clean, nacre_ok, ClientMount, Form, Spec, TestFs,
};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The form a test runs on, and how its mounts are made.
#[derive(Clone, Copy)]
enum Mounts {
    /// `nacre up`.
    Embedded,
    /// Server processes and client processes over TCP.
    Networked,
    /// The networked form, every mount with `--async-dirops true`.
    Async,
}

impl Mounts {
    /// The name of test `n`'s file system on these mounts.
    fn fsname(self, n: u32) -> String {
        let kind = match self {
            Mounts::Embedded => "e",
            Mounts::Networked => "n",
            Mounts::Async => "a",
        };
        format!("syn{kind}{n}")
    }

    /// Test `n`'s file system on these mounts, its first mount made as the others.
    fn start(self, n: u32, spec: Spec) -> TestFs {
        let form = match self {
            Mounts::Embedded => Form::Embedded,
            Mounts::Networked | Mounts::Async => Form::Networked,
        };
        let spec = spec.fsname(&self.fsname(n)).mount_args(self.args());
        TestFs::start_with(form, spec)
    }

    /// Options of every mount.
    fn args(self) -> &'static [&'static str] {
        match self {
            Mounts::Async => &["--async-dirops", "true"],
            _ => &[],
        }
    }
}

/// Another client process mounting `fs` at `scratch/NAME`, as `m` makes mounts.
fn mount(fs: &TestFs, m: Mounts, name: &str) -> (PathBuf, ClientMount) {
    let mnt = fs.scratch().join(name);
    fs::create_dir_all(&mnt).unwrap();
    let c = fs.mount_another(&mnt, m.args());
    (mnt, c)
}

/// One counter of a mount's `llite.FS.lock_cache` (`pid`: its process).
fn lock_cache(fsname: &str, pid: u32, what: &str) -> u64 {
    let text = get_param(Some(pid), &format!("llite.{fsname}.lock_cache"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}

/// Lays `path` out (again) over 2 OSTs in 64 KiB stripes (`nacre setstripe`).
fn two_stripes(path: &Path) {
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", path.to_str().unwrap()]);
}

/// Stats and reads `p` a few times, so the mount caches its entry, attributes and data.
fn cache(p: &Path) -> Vec<u8> {
    for _ in 0..3 {
        fs::metadata(p).unwrap();
    }
    fs::read(p).unwrap();
    fs::read(p).unwrap()
}

/// A file two mounts cache is written, extended, truncated and unlinked on a third: both
/// see each change at once.
fn a_change_on_one_mount_reaches_two_others_that_cache_it(m: Mounts) {
    let fs = m.start(1, Spec::osts(2));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let (c_mnt, _c) = mount(&fs, m, "c");
    let a = fs.path("f");
    let others = [b_mnt.join("f"), c_mnt.join("f")];
    two_stripes(&a);
    let first = nacre_testkit::pattern(1, 200_000);
    fs::write(&a, &first).unwrap();
    for p in &others {
        assert_eq!(cache(p), first);
    }

    // Overwrite in the middle (both stripes), through the first mount.
    let patch = nacre_testkit::pattern(2, 70_000);
    let mut expect = first.clone();
    expect[50_000..120_000].copy_from_slice(&patch);
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all_at(&patch, 50_000).unwrap();
    }
    for p in &others {
        assert_eq!(fs::read(p).unwrap(), expect, "{p:?} kept old data");
        cache(p);
    }

    // Extend (append) and see the new size and bytes.
    let tail = nacre_testkit::pattern(3, 30_000);
    fs::OpenOptions::new()
        .append(true)
        .open(&a)
        .unwrap()
        .write_all(&tail)
        .unwrap();
    expect.extend_from_slice(&tail);
    for p in &others {
        assert_eq!(fs::metadata(p).unwrap().len(), expect.len() as u64);
        assert_eq!(fs::read(p).unwrap(), expect, "{p:?} missed the append");
        cache(p);
    }

    // Truncate to a size inside the first stripe.
    fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .unwrap()
        .set_len(1_000)
        .unwrap();
    for p in &others {
        assert_eq!(fs::metadata(p).unwrap().len(), 1_000);
        assert_eq!(fs::read(p).unwrap(), &expect[..1_000]);
        cache(p);
    }

    // A write on one of the caching mounts reaches the other two.
    fs::write(&others[0], b"from b").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"from b");
    assert_eq!(fs::read(&others[1]).unwrap(), b"from b");
    cache(&others[1]);
    cache(&a);

    // Unlinked on the first mount: gone on both others.
    fs::remove_file(&a).unwrap();
    for p in &others {
        assert!(fs::metadata(p).is_err(), "{p:?} still seen after unlink");
    }
}

/// Three mounts append records to one striped file with `O_APPEND`: none overwrites
/// another, none is torn.
fn appends_from_three_mounts_never_overwrite(m: Mounts) {
    let fs = m.start(2, Spec::osts(2));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let (c_mnt, _c) = mount(&fs, m, "c");
    let p = fs.path("log");
    two_stripes(&p);
    const LEN: usize = 3_000;
    const EACH: usize = 100;
    let writers: Vec<_> = [
        (p.clone(), b'A'),
        (b_mnt.join("log"), b'B'),
        (c_mnt.join("log"), b'C'),
    ]
    .into_iter()
    .map(|(path, tag)| {
        std::thread::spawn(move || {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            for i in 0..EACH {
                let mut rec = format!("{}{i:06}", tag as char).into_bytes();
                rec.resize(LEN - 1, tag);
                rec.push(b'\n');
                f.write_all(&rec).unwrap();
            }
        })
    })
    .collect();
    for w in writers {
        w.join().unwrap();
    }
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), 3 * EACH * LEN, "appends overwrote each other");
    let mut seen = std::collections::HashSet::new();
    for rec in got.chunks(LEN) {
        let tag = rec[0];
        assert!(b"ABC".contains(&tag), "a torn record: {:?}", &rec[..16]);
        assert!(rec[7..LEN - 1].iter().all(|c| *c == tag), "a torn record");
        assert!(seen.insert(rec[..7].to_vec()), "a record twice");
    }
    assert_eq!(seen.len(), 3 * EACH);
    for m in [&b_mnt, &c_mnt] {
        assert_eq!(fs::read(m.join("log")).unwrap(), got);
    }
}

/// Renames between directories of two MDTs, of files and of a directory that lives on a
/// third MDT: another mount that cached the old names sees them gone and the new ones at
/// once (the inode's own MDT calls back its entry), and the renaming mount's own locks are
/// not called back (its kernel, which holds both directories during the rename, would make
/// the callback wait for the rename that waits for it).
fn renames_across_mdts_are_seen_at_once_and_never_wait_on_the_renamer(m: Mounts) {
    let fsname = &m.fsname(3);
    let fs = m.start(3, Spec::osts(1).mdts(3));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let a = |rel: &str| fs.path(rel);
    let b = |rel: &str| b_mnt.join(rel);
    fs::create_dir(a("x")).unwrap();
    nacre_ok(&["mkdir", "-i", "1", a("y").to_str().unwrap()]);
    nacre_ok(&["mkdir", "-i", "2", a("x/d").to_str().unwrap()]);
    assert_eq!(
        (dir_mdt(&a("x")), dir_mdt(&a("y")), dir_mdt(&a("x/d"))),
        (0, 1, 2)
    );
    fs::write(a("x/d/inside"), b"in d").unwrap();
    const FILES: usize = 10;
    for i in 0..FILES {
        fs::write(a(&format!("x/f{i}")), format!("{i}")).unwrap();
    }
    let renamer = fs.client_pid().expect("the first mount's process");
    let waits_cut = lock_cache(fsname, renamer, "entry_waits_cut");
    let deferred = lock_cache(fsname, renamer, "entries_deferred");

    for round in 0..3 {
        let (from, to) = if round % 2 == 0 {
            ("x", "y")
        } else {
            ("y", "x")
        };
        // Both mounts cache the names (and the first its directories' entries).
        for m in [&a as &dyn Fn(&str) -> PathBuf, &b] {
            for _ in 0..2 {
                fs::metadata(m(&format!("{from}/d"))).unwrap();
                fs::metadata(m(&format!("{from}/d/inside"))).unwrap();
                for i in 0..FILES {
                    fs::metadata(m(&format!("{from}/f{i}"))).unwrap();
                }
            }
        }
        fs::rename(a(&format!("{from}/d")), a(&format!("{to}/d"))).unwrap();
        for i in 0..FILES {
            fs::rename(a(&format!("{from}/f{i}")), a(&format!("{to}/f{i}"))).unwrap();
        }
        assert!(
            fs::metadata(b(&format!("{from}/d"))).is_err(),
            "round {round}: the directory of the third MDT is still seen where it was"
        );
        assert_eq!(fs::read(b(&format!("{to}/d/inside"))).unwrap(), b"in d");
        assert_eq!(dir_mdt(&b(&format!("{to}/d"))), 2);
        for i in 0..FILES {
            assert!(
                fs::metadata(b(&format!("{from}/f{i}"))).is_err(),
                "round {round}: f{i} is still seen where it was"
            );
            assert_eq!(
                fs::read_to_string(b(&format!("{to}/f{i}"))).unwrap(),
                i.to_string()
            );
        }
        let ino = fs::metadata(a(&format!("{to}/d"))).unwrap().ino();
        assert_eq!(fs::metadata(b(&format!("{to}/d"))).unwrap().ino(), ino);
    }
    assert_eq!(
        lock_cache(fsname, renamer, "entry_waits_cut"),
        waits_cut,
        "a callback to the renaming mount waited for its own rename"
    );
    // Its own locks on the MDTs that did not coordinate were called back (it is another
    // client there): what they covered in the directories it was renaming in went after.
    assert!(lock_cache(fsname, renamer, "entries_deferred") > deferred);
    lfsck_clean(&fs.source());
}

/// A file or directory whose inode lives on another MDT than its directory (moved there by
/// a rename across MDTs, or made there with `mkdir -i`) is renamed within its directory,
/// between directories of that MDT, and replaced by a rename over it (a checkpoint's
/// write-then-rename): each is a plain POSIX rename (they were refused with `EXDEV`), seen
/// at once by another mount, and the replaced file's inode is freed on its own MDT.
fn renames_of_inodes_of_another_mdt_within_one_mdt(m: Mounts) {
    let fs = m.start(4, Spec::osts(1).mdts(2));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let a = |rel: &str| fs.path(rel);
    let b = |rel: &str| b_mnt.join(rel);
    fs::create_dir(a("x")).unwrap();
    nacre_ok(&["mkdir", "-i", "1", a("y").to_str().unwrap()]);
    fs::create_dir(a("y/sub")).unwrap();
    assert_eq!((dir_mdt(&a("x")), dir_mdt(&a("y/sub"))), (0, 1));
    fs::write(a("x/f"), b"first").unwrap();
    fs::rename(a("x/f"), a("y/f")).unwrap();
    let ino = fs::metadata(a("y/f")).unwrap().ino();
    cache(&b("y/f"));

    // Within its directory, then into another directory of the same MDT.
    fs::rename(a("y/f"), a("y/g")).unwrap();
    assert!(
        fs::metadata(b("y/f")).is_err(),
        "the old name is still seen"
    );
    assert_eq!(fs::read(b("y/g")).unwrap(), b"first");
    fs::rename(a("y/g"), a("y/sub/h")).unwrap();
    let m = fs::metadata(b("y/sub/h")).unwrap();
    assert_eq!((m.ino(), m.nlink()), (ino, 1));
    assert_eq!(fs::read(b("y/sub/h")).unwrap(), b"first");
    assert!(fs::metadata(b("y/g")).is_err());

    // Onto another link of itself: nothing happens (POSIX).
    fs::hard_link(a("y/sub/h"), a("y/sub/h2")).unwrap();
    fs::rename(a("y/sub/h"), a("y/sub/h2")).unwrap();
    assert_eq!(fs::metadata(b("y/sub/h")).unwrap().nlink(), 2);
    fs::remove_file(a("y/sub/h2")).unwrap();

    // Replaced by a new file renamed over it: the old inode goes from its MDT.
    let mdt0_before = inodes_used(&fs.path(""), 0);
    fs::write(a("y/tmp"), b"second").unwrap();
    cache(&b("y/sub/h"));
    fs::rename(a("y/tmp"), a("y/sub/h")).unwrap();
    assert_eq!(fs::read(b("y/sub/h")).unwrap(), b"second");
    assert_ne!(fs::metadata(b("y/sub/h")).unwrap().ino(), ino);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while inodes_used(&fs.path(""), 0) != mdt0_before - 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replaced file's inode stays on MDT0: {} -> {}",
            mdt0_before,
            inodes_used(&fs.path(""), 0)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A directory of MDT0 in a directory of MDT1, moved to another directory of MDT1: its
    // `..` follows.
    nacre_ok(&["mkdir", "-i", "0", a("y/rd").to_str().unwrap()]);
    fs::write(a("y/rd/inside"), b"in rd").unwrap();
    fs::rename(a("y/rd"), a("y/sub/rd")).unwrap();
    assert_eq!(dir_mdt(&b("y/sub/rd")), 0);
    assert_eq!(fs::read(b("y/sub/rd/inside")).unwrap(), b"in rd");
    assert_eq!(
        fs::canonicalize(b("y/sub/rd/..")).unwrap(),
        fs::canonicalize(b("y/sub")).unwrap()
    );
    assert!(fs::metadata(b("y/rd")).is_err());
    assert_eq!(
        fs::metadata(a("y")).unwrap().nlink(),
        3,
        "y: itself, ., sub"
    );
    assert_eq!(
        fs::metadata(a("y/sub")).unwrap().nlink(),
        3,
        "sub: itself, ., rd"
    );
    lfsck_clean(&fs.source());
}

/// The stripe count `nacre getstripe` reports for `path`.
fn stripe_count(path: &Path) -> u64 {
    let out = nacre_ok(&["getstripe", "--json", path.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["stripe_count"]
        .as_u64()
        .unwrap_or_else(|| panic!("no stripe count in {out}"))
}

/// Writes `data` through `f`, then fsyncs and closes it.
fn write_sync_close(mut f: fs::File, data: &[u8]) {
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// An empty file laid out again (`setstripe`) while a mount holds it open for writing: the
/// mount's `LAYOUT` lock is called back, so its writes after go to the new objects (they
/// went to the destroyed old ones: an fsync'ed file read back empty), and writes it still
/// keeps are written first, so the MDT sees the data and refuses the new layout. The same
/// through the mount that holds the file open (its own locks are not called back).
fn a_file_laid_out_again_while_open_keeps_every_write(m: Mounts) {
    let fs = m.start(5, Spec::osts(2));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let data = nacre_testkit::pattern(5, 200_000);
    let open = |p: &Path| {
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(p)
            .unwrap()
    };

    // Laid out again through another mount while open here, then written.
    let f = open(&fs.path("f"));
    assert_eq!(stripe_count(&b_mnt.join("f")), 1);
    two_stripes(&b_mnt.join("f"));
    write_sync_close(f, &data);
    assert_eq!(stripe_count(&b_mnt.join("f")), 2);
    assert_eq!(
        fs::read(b_mnt.join("f")).unwrap(),
        data,
        "writes went astray"
    );
    assert_eq!(fs::read(fs.path("f")).unwrap(), data);

    // Laid out again through the very mount that holds it open.
    let g = open(&fs.path("g"));
    two_stripes(&fs.path("g"));
    write_sync_close(g, &data);
    assert_eq!(stripe_count(&fs.path("g")), 2);
    assert_eq!(
        fs::read(b_mnt.join("g")).unwrap(),
        data,
        "writes went astray"
    );

    // Written (kept by the writer, not yet on the OSTs), then a new layout asked for
    // elsewhere: refused, as for any file with data, and nothing is lost.
    let mut h = open(&fs.path("h"));
    h.write_all(&data[..1000]).unwrap();
    let out = nacre_testkit::nacre(&["setstripe", "-c", "2", b_mnt.join("h").to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "a file with data was laid out again: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    write_sync_close(h, &data[1000..]);
    assert_eq!(stripe_count(&b_mnt.join("h")), 1);
    assert_eq!(fs::read(b_mnt.join("h")).unwrap(), data);
}

/// The names one `getdents64` call on `fd` gives into a buffer of `len` bytes (none: the
/// listing's end).
fn getdents(fd: i32, len: usize) -> Vec<String> {
    let mut buf = vec![0u8; len];
    // SAFETY: the buffer is `len` bytes and lives across the call.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), len) };
    assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
    let mut names = Vec::new();
    let mut at = 0usize;
    while at < n as usize {
        // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
        let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        let name = &buf[at + 19..at + reclen];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        let name = String::from_utf8_lossy(&name[..end]).into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
        at += reclen;
    }
    names
}

/// A listing served from the kernel's cache of it, whose cache another mount's change
/// drops half-way, goes on after the last name it gave: each name there throughout is
/// seen exactly once. (Directory offsets once were indices into each open stream's own
/// page list, so the kernel going on at the cached listing's offset through another
/// stream landed on another name: a DNE migration test saw a name twice.)
fn a_listing_whose_cache_goes_half_way_sees_each_name_once(m: Mounts) {
    let fsname = &m.fsname(6);
    let fs = m.start(6, Spec::osts(1));
    let (b_mnt, _b) = mount(&fs, m, "b");
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        fs::File::create(dir.join(format!("f{i:03}"))).unwrap();
    }
    // Listed whole twice: the second listing (under the directory's lock, taken by the
    // first) fills the kernel's cache.
    for _ in 0..2 {
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 300);
    }
    let pid = fs.client_pid().expect("the mount's process");
    let dropped = lock_cache(fsname, pid, "listings_invalidated");

    let d = fs::File::open(&dir).unwrap();
    use std::os::unix::io::AsRawFd;
    let mut seen = getdents(d.as_raw_fd(), 2048);
    assert!(
        !seen.is_empty() && seen.len() < 200,
        "a first part: {}",
        seen.len()
    );
    // Another mount removes 20 names already read and adds 60 that sort before them all.
    for i in 0..20 {
        fs::remove_file(b_mnt.join(format!("d/f{i:03}"))).unwrap();
    }
    for i in 0..60 {
        fs::File::create(b_mnt.join(format!("d/a{i:03}"))).unwrap();
    }
    nacre_testkit::wait_for("the cached listing dropped", || {
        lock_cache(fsname, pid, "listings_invalidated") > dropped
    });
    loop {
        let more = getdents(d.as_raw_fd(), 2048);
        if more.is_empty() {
            break;
        }
        seen.extend(more);
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a name seen twice: {seen:?}");
    for i in 20..300 {
        let name = format!("f{i:03}");
        assert!(seen.contains(&name), "{name} never seen: {seen:?}");
    }

    // A `telldir` position of one stream, given to `seekdir` on another opened after names
    // were added before it, goes on at the same name.
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let next = |d: *mut libc::DIR| -> String {
        loop {
            // SAFETY: `d` is an open stream; the entry is read before the next call.
            let e = unsafe { libc::readdir(d) };
            assert!(!e.is_null(), "the listing ended early");
            // SAFETY: d_name is NUL-terminated.
            let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
            let name = name.to_string_lossy().into_owned();
            if name != "." && name != ".." {
                return name;
            }
        }
    };
    // SAFETY: plain libc directory streams on a valid path, closed below.
    unsafe {
        let a = libc::opendir(path.as_ptr());
        assert!(!a.is_null());
        for _ in 0..100 {
            next(a);
        }
        let at = libc::telldir(a);
        let expect = next(a);
        for i in 60..90 {
            fs::File::create(b_mnt.join(format!("d/a{i:03}"))).unwrap();
        }
        let b = libc::opendir(path.as_ptr());
        assert!(!b.is_null());
        next(b);
        libc::seekdir(b, at);
        assert_eq!(next(b), expect, "seekdir to another stream's telldir");
        libc::closedir(a);
        libc::closedir(b);
    }
}

/// Each test on each kind of [`Mounts`]: `sanityn::embedded::NAME`, `sanityn::networked::NAME`,
/// `sanityn::async_dirops::NAME`.
macro_rules! on_every_kind_of_mounts {
    ($($name:ident),+ $(,)?) => {
        mod embedded {
            $(#[test]
            fn $name() {
                super::$name(super::Mounts::Embedded)
            })+
        }
        mod networked {
            $(#[test]
            fn $name() {
                super::$name(super::Mounts::Networked)
            })+
        }
        mod async_dirops {
            $(#[test]
            fn $name() {
                super::$name(super::Mounts::Async)
            })+
        }
    };
}

on_every_kind_of_mounts!(
    a_listing_whose_cache_goes_half_way_sees_each_name_once,
    a_change_on_one_mount_reaches_two_others_that_cache_it,
    appends_from_three_mounts_never_overwrite,
    renames_across_mdts_are_seen_at_once_and_never_wait_on_the_renamer,
    renames_of_inodes_of_another_mdt_within_one_mdt,
    a_file_laid_out_again_while_open_keeps_every_write,
);
