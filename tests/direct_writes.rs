//! Writers' handles opened for direct I/O (crates/fuse fs/data.rs, `--direct-writes`): each
//! `write` is one request to the mount, not one per partial page first plus the rest, and
//! what other handles see stays right — their cached pages, maps of the file, other mounts.

use nacre_testkit::{on_both_forms, pattern, Form, Spec, TestFs};
use nacre_tests::wb_stat;
use std::fs;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// IOR hard's record.
const RECORD: usize = 47_008;
const RECORDS: usize = 200;

/// Write requests the mount took (kept or sent through) while `f` ran.
fn write_requests(fsname: &str, pid: Option<u32>, f: impl FnOnce()) -> u64 {
    let count = || wb_stat(fsname, pid, "writes_kept") + wb_stat(fsname, pid, "writes_through");
    let before = count();
    f();
    count() - before
}

/// Writes `RECORDS` records at their offsets through `file`, every one starting inside a
/// page (none of 47,008 bytes is page aligned past the first).
fn write_records(file: &fs::File, fill: u8) {
    for i in 0..RECORDS {
        file.write_all_at(&vec![fill; RECORD], (i * RECORD) as u64)
            .unwrap();
    }
}

fn open_rw(p: &Path) -> fs::File {
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap()
}

/// A writer's records are one request each, through a handle opened write-only, by the
/// create that made the file, or beside such a handle; a handle that may read a file with
/// bytes keeps the page cache otherwise (two requests per record starting inside a page). With `--direct-writes false`,
/// every handle does. The bytes are the same either way.
fn a_writers_records_are_one_request_each(form: Form) {
    let fsname = match form {
        Form::Embedded => "dirwe",
        Form::Networked => "dirwn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let pid = fs.client_pid();
    let p = fs.path("records");
    // The create that made it, read and write (as IOR's rank 0).
    let made = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p)
        .unwrap();
    let n = write_requests(fsname, pid, || write_records(&made, b'a'));
    assert_eq!(
        n, RECORDS as u64,
        "requests for {RECORDS} records, created here"
    );
    drop(made);
    // Write-only (as IOR's other ranks).
    let writer = fs::OpenOptions::new().write(true).open(&p).unwrap();
    let n = write_requests(fsname, pid, || write_records(&writer, b'b'));
    assert_eq!(
        n, RECORDS as u64,
        "requests for {RECORDS} records, write-only"
    );
    drop(writer);
    // Read and write on a file with bytes while a writer's direct handle is open (as
    // IOR's ranks after the first open the shared file): direct too.
    let writer = fs::OpenOptions::new().write(true).open(&p).unwrap();
    let rw = open_rw(&p);
    let n = write_requests(fsname, pid, || write_records(&rw, b'e'));
    assert_eq!(
        n, RECORDS as u64,
        "requests for {RECORDS} records, beside a writer"
    );
    drop((rw, writer));
    // Read and write on a file with bytes, alone: the page cache.
    let rw = open_rw(&p);
    let n = write_requests(fsname, pid, || write_records(&rw, b'c'));
    assert!(
        n >= RECORDS as u64 * 3 / 2,
        "{n} requests for {RECORDS} records through a reader's handle: not the page cache"
    );
    drop(rw);
    assert_eq!(fs::read(&p).unwrap(), vec![b'c'; RECORDS * RECORD]);

    // Off: the page cache for every handle.
    if form == Form::Networked {
        let off = TestFs::start_with(
            form,
            Spec::osts(1)
                .fsname("dirwo")
                .mount_args(&["--direct-writes", "false"]),
        );
        let w = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(off.path("records"))
            .unwrap();
        let n = write_requests("dirwo", off.client_pid(), || write_records(&w, b'd'));
        assert!(
            n >= RECORDS as u64 * 3 / 2,
            "{n} requests for {RECORDS} records with --direct-writes false"
        );
    }
}

/// What a writer's direct handle writes, every other handle sees at once: a reader's
/// handle whose pages the kernel cached before, a shared map of the file (allowed on a
/// direct handle) and the writes through it, and another mount.
fn other_handles_see_a_direct_writers_bytes(form: Form) {
    let fsname = match form {
        Form::Embedded => "dirce",
        Form::Networked => "dircn",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let p = fs.path("f");
    let first = pattern(1, 1 << 20);
    fs::write(&p, &first).unwrap();
    // A reader with the whole file in its cache.
    let reader = fs::File::open(&p).unwrap();
    let mut seen = vec![0u8; 1 << 20];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert_eq!(seen, first);
    let writer = fs::OpenOptions::new().write(true).open(&p).unwrap();
    writer.write_all_at(&[7u8; 5000], 4000).unwrap();
    reader.read_exact_at(&mut seen, 0).unwrap();
    let mut want = first.clone();
    want[4000..9000].fill(7);
    assert_eq!(seen, want, "a cached reader after a direct write");

    // A shared map of a file made by a create (its handle direct): writes through the map
    // and through the descriptor meet.
    let q = fs.path("mapped");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(0)
        .open(&q)
        .unwrap();
    f.set_len(8192).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh shared map of 8 KiB of an open file, unmapped below; nothing else
    // maps it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        map,
        libc::MAP_FAILED,
        "a shared map of a writer's handle: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: within the 8 KiB mapped above.
    let mapped = unsafe { std::slice::from_raw_parts_mut(map as *mut u8, 8192) };
    mapped[..4096].fill(b'm');
    f.write_all_at(&[b'w'; 4096], 4096).unwrap();
    assert_eq!(&mapped[4096..], &[b'w'; 4096][..], "the map after a write");
    // SAFETY: the map above, synced then unmapped once.
    unsafe {
        assert_eq!(libc::msync(map, 8192, libc::MS_SYNC), 0);
        assert_eq!(libc::munmap(map, 8192), 0);
    }
    drop(f);
    let mut both = vec![b'm'; 4096];
    both.extend_from_slice(&[b'w'; 4096]);
    assert_eq!(fs::read(&q).unwrap(), both);

    // Another mount.
    let other = fs.scratch().join("other");
    fs::create_dir_all(&other).unwrap();
    let _other = fs.mount_another(&other, &[]);
    assert_eq!(fs::read(other.join("f")).unwrap(), want);
    assert_eq!(fs::read(other.join("mapped")).unwrap(), both);
}

on_both_forms!(
    a_writers_records_are_one_request_each,
    other_handles_see_a_direct_writers_bytes
);
