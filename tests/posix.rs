//! POSIX behaviour through the real FUSE mount, on both forms (the sanity suite's core).

use nacre_testkit::{on_both_forms, pattern, Form, Spec, TestFs};
use nacre_tests::{as_nobody, c, last_errno};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};

fn files_read_write_truncate_append(form: Form) {
    let fs = TestFs::start(form, 2);
    let p = fs.path("f");
    let data = pattern(1, 3 << 20);
    fs::write(&p, &data).unwrap();
    assert_eq!(fs::read(&p).unwrap(), data);
    assert_eq!(fs::metadata(&p).unwrap().len(), 3 << 20);

    let mut f = OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(1000)).unwrap();
    f.write_all(b"middle").unwrap();
    drop(f);
    let back = fs::read(&p).unwrap();
    assert_eq!(&back[1000..1006], b"middle");
    assert_eq!(&back[..1000], &data[..1000]);

    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(10).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), 10);
    f.set_len(5000).unwrap();
    let back = fs::read(&p).unwrap();
    assert_eq!(back.len(), 5000);
    assert!(
        back[10..].iter().all(|&b| b == 0),
        "extended part must read as zeros"
    );
    drop(f);

    let mut a = OpenOptions::new().append(true).open(&p).unwrap();
    a.write_all(b"END").unwrap();
    drop(a);
    let back = fs::read(&p).unwrap();
    assert_eq!(&back[5000..], b"END");

    // Sparse write far away; hole reads as zeros.
    let mut f = OpenOptions::new().write(true).open(&p).unwrap();
    f.seek(SeekFrom::Start(50 << 20)).unwrap();
    f.write_all(b"far").unwrap();
    f.sync_all().unwrap();
    f.sync_data().unwrap();
    drop(f);
    assert_eq!(fs::metadata(&p).unwrap().len(), (50 << 20) + 3);
    let mut f = File::open(&p).unwrap();
    let mut buf = vec![1u8; 4096];
    f.seek(SeekFrom::Start(20 << 20)).unwrap();
    f.read_exact(&mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    fs::remove_file(&p).unwrap();
    assert_eq!(
        fs::metadata(&p).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
}

fn fallocate_and_direct_io(form: Form) {
    let fs = TestFs::start(form, 2);
    let p = fs.path("pre");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&p)
        .unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: fallocate on an open descriptor.
    assert_eq!(
        unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 8 << 20) },
        0,
        "errno {}",
        last_errno()
    );
    assert_eq!(fs::metadata(&p).unwrap().len(), 8 << 20);
    assert!(fs::metadata(&p).unwrap().blocks() >= (8 << 20) / 512);
    // SAFETY: as above.
    let keep =
        unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 8 << 20, 1 << 20) };
    assert_eq!(keep, 0);
    assert_eq!(fs::metadata(&p).unwrap().len(), 8 << 20);
    drop(f);

    // O_DIRECT with aligned buffers.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    // O_DIRECT needs page-aligned memory: the project's own aligned buffer.
    let mut buf = nacre_types::AlignedBuf::zeroed(1 << 20);
    buf.copy_from_slice(&pattern(7, 1 << 20));
    f.write_all(&buf).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    buf.fill(0);
    f.read_exact(&mut buf).unwrap();
    assert_eq!(&buf[..], &pattern(7, 1 << 20)[..]);
}

fn directories_rename_and_links(form: Form) {
    let fs = TestFs::start(form, 1);
    let d = fs.path("a/b/c");
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("f"), b"x").unwrap();
    assert_eq!(fs::metadata(fs.path("a")).unwrap().nlink(), 3);
    // rmdir of a non-empty directory fails.
    assert_eq!(
        fs::remove_dir(fs.path("a/b")).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    // Rename a directory into another.
    fs::create_dir(fs.path("z")).unwrap();
    fs::rename(fs.path("a/b"), fs.path("z/b")).unwrap();
    assert_eq!(fs::read(fs.path("z/b/c/f")).unwrap(), b"x");
    assert_eq!(fs::metadata(fs.path("a")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(fs.path("z")).unwrap().nlink(), 3);
    // A directory cannot move beneath itself.
    assert_eq!(
        fs::rename(fs.path("z"), fs.path("z/b/c/z"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EINVAL)
    );
    // Rename replacing a file; replacing an empty directory; not a non-empty one.
    fs::write(fs.path("one"), b"1").unwrap();
    fs::write(fs.path("two"), b"2").unwrap();
    fs::rename(fs.path("one"), fs.path("two")).unwrap();
    assert_eq!(fs::read(fs.path("two")).unwrap(), b"1");
    assert!(!fs.path("one").exists());
    fs::create_dir(fs.path("empty")).unwrap();
    fs::rename(fs.path("z/b"), fs.path("empty")).unwrap();
    assert!(fs.path("empty/c/f").exists());
    fs::create_dir(fs.path("full")).unwrap();
    fs::write(fs.path("full/x"), b"").unwrap();
    assert_eq!(
        fs::rename(fs.path("empty"), fs.path("full"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        fs::rename(fs.path("two"), fs.path("full"))
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EISDIR)
    );
    // Hard links and symlinks.
    fs::hard_link(fs.path("two"), fs.path("a/two-link")).unwrap();
    assert_eq!(fs::metadata(fs.path("two")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(fs.path("two")).unwrap().ino(),
        fs::metadata(fs.path("a/two-link")).unwrap().ino()
    );
    fs::remove_file(fs.path("two")).unwrap();
    assert_eq!(fs::read(fs.path("a/two-link")).unwrap(), b"1");
    std::os::unix::fs::symlink("a/two-link", fs.path("sym")).unwrap();
    assert_eq!(
        fs::read_link(fs.path("sym")).unwrap().to_str(),
        Some("a/two-link")
    );
    assert_eq!(fs::read(fs.path("sym")).unwrap(), b"1");
    assert!(fs::symlink_metadata(fs.path("sym"))
        .unwrap()
        .file_type()
        .is_symlink());
    // Names over 255 bytes.
    let long = "n".repeat(256);
    assert_eq!(
        fs::write(fs.path(&long), b"").unwrap_err().raw_os_error(),
        Some(libc::ENAMETOOLONG)
    );
    fs::write(fs.path(&"n".repeat(255)), b"").unwrap();
}

fn unlinked_open_file_keeps_its_data(form: Form) {
    let fs = TestFs::start(form, 1);
    let p = fs.path("tmp");
    fs::write(&p, b"still here").unwrap();
    let mut f = File::open(&p).unwrap();
    fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still here");
}

fn large_directory_readdir(form: Form) {
    let fs = TestFs::start(form, 1);
    let d = fs.path("big");
    fs::create_dir(&d).unwrap();
    let n = 100_000;
    // mknod is a single MDS RPC per entry (no open/close), which keeps this test short.
    for i in 0..n {
        let p = c(&d.join(format!("entry-{i:06}")));
        // SAFETY: valid C string path.
        let rc = unsafe { libc::mknod(p.as_ptr(), libc::S_IFREG | 0o644, 0) };
        assert_eq!(rc, 0, "mknod {i}: errno {}", last_errno());
    }
    let mut names: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), n);
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "readdir returned duplicates");
    assert_eq!(names[0], "entry-000000");
    assert_eq!(names[n - 1], format!("entry-{:06}", n - 1));
}

fn attributes_xattrs_statfs(form: Form) {
    let fs = TestFs::start(form, 2);
    let p = fs.path("attr");
    fs::write(&p, b"abc").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o4711)).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o4711);
    std::os::unix::fs::chown(&p, Some(1234), Some(5678)).unwrap();
    let m = fs::metadata(&p).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    // utimens
    let times = [
        libc::timespec {
            tv_sec: 1_000_000,
            tv_nsec: 5,
        },
        libc::timespec {
            tv_sec: 2_000_000,
            tv_nsec: 7,
        },
    ];
    // SAFETY: valid path and times array.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c(&p).as_ptr(), times.as_ptr(), 0) },
        0
    );
    let m = fs::metadata(&p).unwrap();
    assert_eq!(
        (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec()),
        (1_000_000, 5, 2_000_000, 7)
    );
    // xattrs
    let out = nacre_testkit::sh(&format!(
        "setfattr -n user.color -v blue {0} && setfattr -n user.size -v 42 {0} && getfattr -d {0}",
        p.display()
    ));
    assert!(
        out.contains("user.color=\"blue\"") && out.contains("user.size=\"42\""),
        "{out}"
    );
    let out = nacre_testkit::sh(&format!(
        "setfattr -x user.color {0} && getfattr -d {0}",
        p.display()
    ));
    assert!(!out.contains("color"), "{out}");
    let missing = std::process::Command::new("getfattr")
        .args(["-n", "user.none"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("No such attribute"));
    // statfs totals come from the OSTs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-parameter.
    assert_eq!(unsafe { libc::statvfs(c(&fs.mnt).as_ptr(), &mut st) }, 0);
    assert!(st.f_blocks > 0 && st.f_files > 0);
    assert_eq!(st.f_namemax, 255);
}

fn shared_mmap_reads_and_writes(form: Form) {
    let fs = TestFs::start(form, 1);
    let p = fs.path("mm");
    fs::write(&p, vec![b'a'; 8192]).unwrap();
    let f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: mapping 8 KiB of an open file; unmapped below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    // SAFETY: ptr maps 8192 bytes.
    let map = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), 8192) };
    assert_eq!(map[100], b'a');
    map[4096..4101].copy_from_slice(b"mmap!");
    // SAFETY: same mapping.
    assert_eq!(unsafe { libc::msync(ptr, 8192, libc::MS_SYNC) }, 0);
    // SAFETY: same mapping.
    unsafe { libc::munmap(ptr, 8192) };
    drop(f);
    let back = fs::read(&p).unwrap();
    assert_eq!(&back[4096..4101], b"mmap!");
}

fn permissions_for_root_and_others(form: Form) {
    let fs = TestFs::start(form, 1);
    fs::set_permissions(&fs.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let private = fs.path("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    fs::write(private.join("secret"), b"s").unwrap();
    let (ok, err) = as_nobody(&format!("cat {}", private.join("secret").display()));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, _) = as_nobody(&format!("touch {}/nope", fs.mnt.display()));
    assert!(!ok, "nobody must not create in a 0755 root-owned directory");
    // A world-writable sticky directory: nobody creates, root reads; nobody cannot remove root's file.
    let tmp = fs.path("tmp");
    fs::create_dir(&tmp).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o1777)).unwrap();
    let (ok, err) = as_nobody(&format!(
        "echo mine > {0}/n && chmod 600 {0}/n && cat {0}/n",
        tmp.display()
    ));
    assert!(ok, "{err}");
    assert_eq!(fs::metadata(tmp.join("n")).unwrap().uid(), 65534);
    assert_eq!(fs::read(tmp.join("n")).unwrap(), b"mine\n");
    fs::write(tmp.join("rootfile"), b"r").unwrap();
    let (ok, _) = as_nobody(&format!("rm -f {}/rootfile", tmp.display()));
    assert!(!ok, "sticky bit must protect root's file");
    let (ok, err) = as_nobody(&format!("chown root {}/n", tmp.display()));
    assert!(!ok && err.contains("not permitted"), "{err}");
    // setgid directories hand their group down.
    let g = fs.path("g");
    fs::create_dir(&g).unwrap();
    std::os::unix::fs::chown(&g, None, Some(4242)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o2775)).unwrap();
    fs::write(g.join("f"), b"").unwrap();
    fs::create_dir(g.join("sub")).unwrap();
    assert_eq!(fs::metadata(g.join("f")).unwrap().gid(), 4242);
    assert_eq!(fs::metadata(g.join("sub")).unwrap().mode() & 0o2000, 0o2000);
}

fn sequential_direct_reads_with_readahead_stop_at_eof(form: Form) {
    let fs = TestFs::start(form, 3);
    let p = fs.path("ra");
    nacre_testkit::nacre_ok(&["setstripe", "-c", "3", "-S", "256K", p.to_str().unwrap()]);
    let data = pattern(21, (5 << 20) + (1 << 19) + 123);
    fs::write(&p, &data).unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    // O_DIRECT needs page-aligned memory: the project's own aligned buffer.
    let mut buf = nacre_types::AlignedBuf::zeroed(1 << 20);
    let mut back = Vec::new();
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    // A second pass after seeking back: read-ahead restarts, nothing stale is served.
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    let n = f.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], &data[1 << 20..2 << 20]);
    assert_eq!(back.len(), data.len());
    assert!(
        back == data,
        "sequential O_DIRECT reads returned wrong bytes"
    );
}

/// Regression: an O_DIRECT read of 1 MiB from a 6-byte file got a 6-byte bulk from the OST over
/// TCP, and the client grew that buffer past its capacity: the FUSE thread panicked, and after
/// four such reads the mount was dead. Short direct reads must return the bytes there are, on
/// every stripe shape, and the mount must keep serving.
fn direct_reads_past_the_end_of_small_files(form: Form) {
    let fs = TestFs::start(form, 2);
    let small = fs.path("small");
    fs::write(&small, b"small\n").unwrap();
    for _ in 0..8 {
        let out = nacre_testkit::sh(&format!(
            "dd if={} of=/dev/stdout iflag=direct bs=1M status=none",
            small.display()
        ));
        assert_eq!(out, "small\n");
    }
    // Striped files: a read ending in the middle of the last stripe, in a hole, and at EOF.
    let wide = fs.path("wide");
    nacre_testkit::nacre_ok(&["setstripe", "-c", "2", "-S", "64K", wide.to_str().unwrap()]);
    let data = pattern(33, (64 << 10) + 4097);
    fs::write(&wide, &data).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&wide)
        .unwrap();
    let mut buf = nacre_types::AlignedBuf::zeroed(1 << 20);
    for offset in [0u64, 64 << 10, 128 << 10, 4 << 20] {
        let n = f.read_at(&mut buf, offset).unwrap();
        let want = data.get(offset as usize..).unwrap_or(&[]);
        assert_eq!(&buf[..n], want, "direct read at {offset}");
    }
    // A sparse file whose last object ends early: zeros up to EOF, then short.
    let sparse = fs.path("sparse");
    nacre_testkit::nacre_ok(&[
        "setstripe",
        "-c",
        "2",
        "-S",
        "64K",
        sparse.to_str().unwrap(),
    ]);
    let g = OpenOptions::new().write(true).open(&sparse).unwrap();
    g.write_all_at(b"tail", (64 << 10) + 10).unwrap();
    g.write_all_at(b"head", 0).unwrap();
    drop(g);
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&sparse)
        .unwrap();
    let n = f.read_at(&mut buf, 0).unwrap();
    assert_eq!(n, (64 << 10) + 14);
    assert_eq!(&buf[..4], b"head");
    assert!(buf[4..(64 << 10) + 10].iter().all(|&b| b == 0));
    assert_eq!(&buf[(64 << 10) + 10..n], b"tail");
    assert_eq!(
        fs::read(&small).unwrap(),
        b"small\n",
        "the mount still serves"
    );
}

/// The panic policy of FUSE request handlers: one that panics (a broken invariant, here the
/// fault point `fuse.open_files.panic`, while holding the lock every file operation takes)
/// answers EIO, and the mount goes on serving every thread's requests, that lock included.
fn a_panicking_request_answers_eio_and_the_mount_serves_on(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).client_fault("fuse.open_files.panic"));
    let p = fs.path("f");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    let err = f.write_at(b"lost", 0).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // More requests than FUSE threads, on this file and others: none died, none is stuck.
    let data = pattern(5, 64 << 10);
    for i in 0..32u64 {
        f.write_all_at(&data, i * data.len() as u64).unwrap();
        let other = fs.path(&format!("other{i}"));
        fs::write(&other, &data[..100]).unwrap();
        assert_eq!(fs::read(&other).unwrap(), &data[..100]);
    }
    f.sync_all().unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 31 * data.len() as u64).unwrap();
    assert!(back == data);
    assert_eq!(fs::metadata(&p).unwrap().len(), 32 * data.len() as u64);
}

/// Regression: the mount reads a caller's environment for its job id; a caller that faults on
/// a mapping of the mount holds its memory lock meanwhile, and a second thread's mmap() queues
/// a writer behind it. Reading the environment synchronously deadlocked; it must not.
fn page_faults_on_the_mount_with_concurrent_mmap_calls_do_not_hang(form: Form) {
    let fs = TestFs::start(form, 1);
    let p = fs.path("mapped");
    let data = pattern(5, 32 << 20);
    fs::write(&p, &data).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = p.clone();
    std::thread::spawn(move || {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let churn = std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: anonymous mapping, unmapped at once.
                unsafe {
                    let m = libc::mmap(
                        std::ptr::null_mut(),
                        1 << 16,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    libc::munmap(m, 1 << 16);
                }
            }
        });
        let mut sum = 0u64;
        for _ in 0..3 {
            let f = File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: read-only shared mapping of 32 MiB of an open file; unmapped below.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    32 << 20,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(ptr, libc::MAP_FAILED);
            // SAFETY: the mapping is 32 MiB long.
            let map = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), 32 << 20) };
            for page in (0..map.len()).step_by(4096) {
                sum = sum.wrapping_add(u64::from(map[page]));
            }
            // SAFETY: same mapping.
            unsafe { libc::munmap(ptr, 32 << 20) };
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
        let _ = tx.send(sum);
    });
    let sum = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("page faults on the mount hung");
    let want: u64 = (0..data.len())
        .step_by(4096)
        .map(|i| u64::from(data[i]))
        .sum::<u64>()
        * 3;
    assert_eq!(sum, want);
}

/// Regression: lookups once answered with the MDT's size hint, and the kernel applied it to the
/// cached inode, so a reader racing a path walk saw a false end of file.
fn lookups_never_shrink_a_file_being_read(form: Form) {
    let fs = TestFs::start(form, 1);
    let p = fs.path("steady");
    let data = pattern(8, 4 << 20);
    fs::write(&p, &data).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let walkers: Vec<_> = (0..2)
        .map(|_| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = fs::metadata(&p);
                    let _ = File::open(&p);
                }
            })
        })
        .collect();
    for _ in 0..100 {
        let f = File::open(&p).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        for off in (0..data.len()).step_by(buf.len()) {
            f.read_exact_at(&mut buf, off as u64)
                .expect("short read at a false end of file");
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in walkers {
        w.join().unwrap();
    }
}

/// Every path system call given a component one byte longer than NAME_MAX fails with
/// ENAMETOOLONG, whatever the caches hold: in a directory this mount made (whose whole
/// listing it keeps, so a missing name is answered without the MDT), after listing and
/// looking up the names beside it, and in one it did not make (issue 44, item 0: chmod,
/// chown and truncate answered ENOENT from the complete directory's cache).
fn every_path_call_with_a_too_long_name_is_enametoolong(form: Form) {
    let fs = TestFs::start(form, 1);
    // "made" and "made/sub": created through this mount, which keeps their whole listing;
    // the root: made by mkfs, never complete.
    for dir in ["made", "made/sub", ""] {
        let d = fs.path(dir);
        if !dir.is_empty() {
            fs::create_dir(&d).unwrap();
        }
        fs::write(d.join("n".repeat(255)), b"x").unwrap();
        fs::write(d.join("short"), b"x").unwrap();
        // Warm every cache: the listing, the lookups, the attributes.
        assert!(fs::read_dir(&d).unwrap().count() >= 2);
        fs::metadata(d.join("n".repeat(255))).unwrap();
        assert!(fs::metadata(d.join("missing")).is_err());
        let long = d.join("n".repeat(256));
        let lc = c(&long);
        let short = c(&d.join("short"));
        let inside = c(&long.join("x"));
        let mut fails: Vec<String> = Vec::new();
        let mut check = |what: &str, rc: i64| {
            let e = last_errno();
            if rc != -1 || e != libc::ENAMETOOLONG {
                fails.push(format!("{what} in {dir:?}: rc {rc}, errno {e}"));
            }
        };
        // SAFETY: every pointer is a NUL-terminated path or a buffer of the size given.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            check("stat", libc::stat(lc.as_ptr(), &mut st) as i64);
            check("lstat", libc::lstat(lc.as_ptr(), &mut st) as i64);
            check("stat of a/x", libc::stat(inside.as_ptr(), &mut st) as i64);
            check("access", libc::access(lc.as_ptr(), libc::F_OK) as i64);
            check("chmod", libc::chmod(lc.as_ptr(), 0o600) as i64);
            check("chown", libc::chown(lc.as_ptr(), 1, 1) as i64);
            check("lchown", libc::lchown(lc.as_ptr(), 1, 1) as i64);
            check("truncate", libc::truncate(lc.as_ptr(), 0) as i64);
            check(
                "utimensat",
                libc::utimensat(libc::AT_FDCWD, lc.as_ptr(), std::ptr::null(), 0) as i64,
            );
            check("open", libc::open(lc.as_ptr(), libc::O_RDONLY) as i64);
            check(
                "open O_CREAT",
                libc::open(lc.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) as i64,
            );
            check(
                "open a/x O_CREAT",
                libc::open(inside.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) as i64,
            );
            check("mkdir", libc::mkdir(lc.as_ptr(), 0o755) as i64);
            check(
                "mknod",
                libc::mknod(lc.as_ptr(), libc::S_IFIFO | 0o644, 0) as i64,
            );
            check("unlink", libc::unlink(lc.as_ptr()) as i64);
            check("rmdir", libc::rmdir(lc.as_ptr()) as i64);
            check(
                "rename from",
                libc::rename(lc.as_ptr(), short.as_ptr()) as i64,
            );
            check(
                "rename to",
                libc::rename(short.as_ptr(), lc.as_ptr()) as i64,
            );
            check("link to", libc::link(short.as_ptr(), lc.as_ptr()) as i64);
            check("link from", libc::link(lc.as_ptr(), short.as_ptr()) as i64);
            check("symlink", libc::symlink(short.as_ptr(), lc.as_ptr()) as i64);
            let mut buf = [0u8; 64];
            check(
                "readlink",
                libc::readlink(lc.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) as i64,
            );
            let name = c(std::path::Path::new("user.k"));
            check(
                "getxattr",
                libc::getxattr(
                    lc.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                ) as i64,
            );
            check(
                "setxattr",
                libc::setxattr(lc.as_ptr(), name.as_ptr(), buf.as_ptr().cast(), 1, 0) as i64,
            );
            let dir = libc::opendir(lc.as_ptr());
            check("opendir", if dir.is_null() { -1 } else { 0 });
        }
        assert!(fails.is_empty(), "not ENAMETOOLONG: {fails:#?}");
        // Nothing was made, and the names beside it are whole.
        assert_eq!(fs::read(d.join("short")).unwrap(), b"x");
        assert_eq!(fs::read(d.join("n".repeat(255))).unwrap(), b"x");
    }
}

on_both_forms!(
    a_panicking_request_answers_eio_and_the_mount_serves_on,
    direct_reads_past_the_end_of_small_files,
    files_read_write_truncate_append,
    fallocate_and_direct_io,
    directories_rename_and_links,
    unlinked_open_file_keeps_its_data,
    large_directory_readdir,
    attributes_xattrs_statfs,
    shared_mmap_reads_and_writes,
    permissions_for_root_and_others,
    sequential_direct_reads_with_readahead_stop_at_eof,
    page_faults_on_the_mount_with_concurrent_mmap_calls_do_not_hang,
    lookups_never_shrink_a_file_being_read,
    every_path_call_with_a_too_long_name_is_enametoolong,
);
