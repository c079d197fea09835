//! Model-checked data coherence across two mounts (the idea of Lustre's sanityn and fsx):
//! one thread makes random writes, reads, truncates, fallocates, hole punches, `O_DIRECT`
//! reads and writes, `mmap` reads and writes, stats and fsyncs on a few striped files,
//! each through one of two mounts picked at random, and checks every read and size against
//! a model of what the files must hold. Every operation completes before the next starts,
//! so with data locks, write-behind and the kernels' caches at work each mount must show
//! exactly what the other just did. `COHERENCE_OPS` (default 60,000; a new seed each run) sets the length,
//! `COHERENCE_SEED` replays a run, `COHERENCE_KINDS` narrows the operations and
//! `COHERENCE_TRACE` prints each.
//!
//! Both forms: the networked one (two `nacre mount` processes) on the full run, the embedded
//! one (its in-process mount beside a networked one) on a quarter of it.

use nacre_testkit::{nacre_ok, Form, Spec, TestFs};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

const FILES: usize = 3;
/// Largest file the run makes.
const SIZE_MAX: u64 = 1 << 20;
/// Longest write or read.
const IO_MAX: u64 = 160 << 10;
const PAGE: u64 = 4096;

/// The files as they must be.
struct Model {
    files: Vec<Vec<u8>>,
}

/// One mount's open files (read-write, and `O_DIRECT`).
struct Side {
    buffered: Vec<File>,
    direct: Vec<File>,
}

impl Side {
    fn open(paths: &[PathBuf]) -> Side {
        let rw = |p: &PathBuf, flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(flags)
                .open(p)
                .unwrap()
        };
        Side {
            buffered: paths.iter().map(|p| rw(p, 0)).collect(),
            direct: paths.iter().map(|p| rw(p, libc::O_DIRECT)).collect(),
        }
    }
}

fn fill(rng: &mut fastrand::Rng, len: usize) -> Vec<u8> {
    let seed = rng.u8(1..=255);
    let step = rng.u8(1..=31);
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(step)))
        .collect()
}

fn ops_wanted() -> u64 {
    std::env::var("COHERENCE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60_000)
}

thread_local! {
    /// The last operations, for a failure's message.
    static HISTORY: std::cell::RefCell<std::collections::VecDeque<String>> = Default::default();
}

/// Notes an operation (and prints it with `COHERENCE_TRACE` set: a fault in a mapping
/// ends the process before any message).
fn note(what: String) {
    if std::env::var_os("COHERENCE_TRACE").is_some() {
        eprintln!("{what}");
    }
    HISTORY.with(|h| {
        let mut h = h.borrow_mut();
        h.push_back(what);
        if h.len() > 40 {
            h.pop_front();
        }
    });
}

fn history() -> String {
    HISTORY.with(|h| h.borrow().iter().cloned().collect::<Vec<_>>().join("\n"))
}

/// Checks `got`, read at `off` of file `f` for `asked` bytes, against the model: the bytes
/// the model holds there, as many as it holds up to `asked` (a read that stops short of
/// the model's size fails, as one that reads past it).
#[allow(clippy::too_many_arguments)]
fn check(m: &Model, f: usize, off: u64, asked: usize, got: &[u8], what: &str, op: u64, seed: u64) {
    let want = &m.files[f];
    let start = (off as usize).min(want.len());
    let end = (off as usize).saturating_add(asked).min(want.len());
    let expect = &want[start..end];
    if got != expect {
        let first = got
            .iter()
            .zip(expect)
            .position(|(a, b)| a != b)
            .unwrap_or(expect.len().min(got.len()));
        panic!(
            "op {op} (seed {seed}): {what} of file {f} at {off}: {} bytes read, {} expected, \
             first difference at {} (read {:?}, expected {:?})\nlast operations:\n{}",
            got.len(),
            expect.len(),
            off + first as u64,
            got.get(first),
            expect.get(first),
            history()
        );
    }
}

fn read_at(file: &File, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = file.read_at(&mut buf[done..], off + done as u64).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

#[test]
fn two_mounts_agree_with_a_model_of_their_files() {
    agree_with_a_model(Form::Networked, "cohn1", ops_wanted(), false);
}

/// Both mounts answering creates themselves (`--async-dirops`), the files made by one of
/// them so (handles opened at the MDT only when used), on a shorter run (a quarter).
#[test]
fn two_mounts_with_async_dirops_agree_too() {
    agree_with_a_model(Form::Networked, "cohn2", ops_wanted() / 4, true);
}

/// The embedded form's mount (the in-process client) beside a networked one, on a shorter
/// run. It found a mapping faulting (SIGBUS) after `fstat` where the kernel kept cached
/// pages of a write through no lock covered: dropping them later crossed the next `stat`
/// and made the kernel ignore the size it brought (docs/locking.md).
#[test]
fn the_embedded_mount_agrees_too() {
    agree_with_a_model(Form::Embedded, "cohe1", ops_wanted() / 4, false);
}

fn agree_with_a_model(form: Form, fsname: &str, ops: u64, async_dirops: bool) {
    let mount_args: &[&str] = match async_dirops {
        true => &["--async-dirops", "true"],
        false => &[],
    };
    let spec = Spec::osts(2).fsname(fsname).mount_args(mount_args);
    let fs = TestFs::start_with(form, spec);
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, mount_args);
    let seed = std::env::var("COHERENCE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let names: Vec<String> = match async_dirops {
        // Made by the first mount itself, in a directory it made (and knows complete).
        true => {
            fs::create_dir(fs.path("m")).unwrap();
            (0..FILES).map(|i| format!("m/f{i}")).collect()
        }
        false => (0..FILES).map(|i| format!("f{i}")).collect(),
    };
    for (i, n) in names.iter().enumerate() {
        let p = fs.path(n);
        if async_dirops {
            fs::File::create(&p).unwrap();
            continue;
        }
        // Striped two ways, 64 KiB units, but for one file on a single OST.
        let count = if i == 0 { "1" } else { "2" };
        nacre_ok(&["setstripe", "-c", count, "-S", "64K", p.to_str().unwrap()]);
    }
    if async_dirops {
        let answered = super::async_dirops::async_counter(fs.client_pid(), fsname, "answered");
        assert_eq!(
            answered, FILES as u64,
            "the files were answered by the mount"
        );
    }
    let a_paths: Vec<PathBuf> = names.iter().map(|n| fs.path(n)).collect();
    let b_paths: Vec<PathBuf> = names.iter().map(|n| other_mnt.join(n)).collect();
    let sides = [Side::open(&a_paths), Side::open(&b_paths)];
    let mut m = Model {
        files: vec![Vec::new(); FILES],
    };
    // The operations run (`COHERENCE_KINDS`, letters: w r s t f D d m M y o), to narrow a
    // failure down.
    let kinds = std::env::var("COHERENCE_KINDS").unwrap_or_else(|_| "wrstfDdmMyo".into());
    let mut counts = [0u64; 11];
    for op in 0..ops {
        let side = rng.usize(..2);
        let s = &sides[side];
        let f = rng.usize(..FILES);
        let kind = rng.u32(..100);
        let letter = match kind {
            0..=29 => 'w',
            30..=54 => 'r',
            55..=62 => 's',
            63..=67 => 't',
            68..=71 => 'f',
            72..=76 => 'D',
            77..=81 => 'd',
            82..=87 => 'm',
            88..=91 => 'M',
            92..=94 => 'y',
            _ => 'o',
        };
        if !kinds.contains(letter) {
            continue;
        }
        match kind {
            // Buffered write.
            0..=29 => {
                let off = rng.u64(..SIZE_MAX - 1);
                let len = rng.u64(1..=IO_MAX.min(SIZE_MAX - off));
                let data = fill(&mut rng, len as usize);
                note(format!(
                    "{op} {side} write f{f} {off}+{len} ({:?}..)",
                    &data[..1]
                ));
                s.buffered[f].write_all_at(&data, off).unwrap();
                let file = &mut m.files[f];
                let end = (off + len) as usize;
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[off as usize..end].copy_from_slice(&data);
                counts[0] += 1;
            }
            // Buffered read.
            30..=54 => {
                let off = rng.u64(..SIZE_MAX);
                let len = rng.u64(1..=IO_MAX) as usize;
                note(format!("{op} {side} read f{f} {off}+{len}"));
                let got = read_at(&s.buffered[f], off, len);
                check(&m, f, off, len, &got, "read", op, seed);
                counts[1] += 1;
            }
            // Size.
            55..=62 => {
                note(format!("{op} {side} stat f{f}"));
                let size = s.buffered[f].metadata().unwrap().len();
                assert_eq!(
                    size,
                    m.files[f].len() as u64,
                    "op {op} (seed {seed}): size of file {f}"
                );
                counts[2] += 1;
            }
            // Truncate (shrink or extend).
            63..=67 => {
                let size = rng.u64(..=SIZE_MAX);
                note(format!("{op} {side} truncate f{f} {size}"));
                s.buffered[f].set_len(size).unwrap();
                m.files[f].resize(size as usize, 0);
                counts[3] += 1;
            }
            // fallocate: allocate (maybe extending), or punch a hole.
            68..=71 => {
                let off = rng.u64(..SIZE_MAX - 1);
                let len = rng.u64(1..=IO_MAX.min(SIZE_MAX - off));
                let punch = rng.bool();
                let mode = if punch {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    0
                };
                note(format!(
                    "{op} {side} fallocate f{f} {off}+{len} punch {punch}"
                ));
                let fd = s.buffered[f].as_raw_fd();
                // SAFETY: a valid descriptor and range.
                let r = unsafe { libc::fallocate(fd, mode, off as i64, len as i64) };
                assert_eq!(
                    r,
                    0,
                    "op {op} (seed {seed}): fallocate: {}",
                    std::io::Error::last_os_error()
                );
                let file = &mut m.files[f];
                if punch {
                    let end = ((off + len) as usize).min(file.len());
                    if (off as usize) < end {
                        file[off as usize..end].fill(0);
                    }
                } else if file.len() < (off + len) as usize {
                    file.resize((off + len) as usize, 0);
                }
                counts[4] += 1;
            }
            // O_DIRECT write, page-aligned.
            72..=76 => {
                let off = rng.u64(..SIZE_MAX / PAGE - 1) * PAGE;
                let pages = rng.u64(1..=(IO_MAX / PAGE).min((SIZE_MAX - off) / PAGE));
                let data = fill(&mut rng, (pages * PAGE) as usize);
                let buf = nacre_types::AlignedBuf::copy_from(&data);
                note(format!(
                    "{op} {side} direct write f{f} {off}+{}",
                    pages * PAGE
                ));
                s.direct[f].write_all_at(&buf, off).unwrap();
                let file = &mut m.files[f];
                let end = (off + pages * PAGE) as usize;
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[off as usize..end].copy_from_slice(&data);
                counts[5] += 1;
            }
            // O_DIRECT read, page-aligned.
            77..=81 => {
                let off = rng.u64(..SIZE_MAX / PAGE) * PAGE;
                let pages = rng.u64(1..=IO_MAX / PAGE) as usize;
                let mut buf = nacre_types::AlignedBuf::zeroed(pages * PAGE as usize);
                note(format!(
                    "{op} {side} direct read f{f} {off}+{}",
                    pages as u64 * PAGE
                ));
                let n = s.direct[f].read_at(&mut buf, off).unwrap();
                check(&m, f, off, buf.len(), &buf[..n], "O_DIRECT read", op, seed);
                counts[6] += 1;
            }
            // mmap read of what the file holds.
            82..=87 => {
                let len = m.files[f].len();
                if len == 0 {
                    continue;
                }
                note(format!("{op} {side} mmap read f{f} {len}"));
                // As a program does: the size first (a mapping past the end faults).
                assert_eq!(
                    s.buffered[f].metadata().unwrap().len(),
                    len as u64,
                    "op {op} (seed {seed}): size of file {f}"
                );
                let got = mmap_read(&s.buffered[f], len);
                check(&m, f, 0, len, &got, "mmap read", op, seed);
                counts[7] += 1;
            }
            // mmap write inside the file, then msync.
            88..=91 => {
                let len = m.files[f].len();
                if len == 0 {
                    continue;
                }
                let off = rng.usize(..len);
                let n = rng.usize(1..=(len - off).min(IO_MAX as usize));
                let data = fill(&mut rng, n);
                note(format!("{op} {side} mmap write f{f} {off}+{n} of {len}"));
                assert_eq!(
                    s.buffered[f].metadata().unwrap().len(),
                    len as u64,
                    "op {op} (seed {seed}): size of file {f}"
                );
                mmap_write(&s.buffered[f], len, off, &data);
                m.files[f][off..off + n].copy_from_slice(&data);
                counts[8] += 1;
            }
            // fsync.
            92..=94 => {
                note(format!("{op} {side} fsync f{f}"));
                s.buffered[f].sync_all().unwrap();
                counts[9] += 1;
            }
            // Whole-file read through a new open.
            _ => {
                let p = if side == 0 { &a_paths[f] } else { &b_paths[f] };
                note(format!("{op} {side} whole read f{f}"));
                let got = fs::read(p).unwrap();
                check(&m, f, 0, usize::MAX, &got, "whole read", op, seed);
                assert_eq!(
                    got.len(),
                    m.files[f].len(),
                    "op {op} (seed {seed}): whole read of file {f}"
                );
                counts[10] += 1;
            }
        }
    }
    for s in &sides {
        for (f, file) in s.buffered.iter().enumerate() {
            let got = read_at(file, 0, SIZE_MAX as usize + 1);
            assert!(got == m.files[f], "seed {seed}: file {f} at the end");
        }
    }
    eprintln!(
        "{ops} ops (seed {seed}): writes {}, reads {}, stats {}, truncates {}, fallocates {}, \
         direct writes {}, direct reads {}, mmap reads {}, mmap writes {}, fsyncs {}, whole reads {}",
        counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7],
        counts[8], counts[9], counts[10]
    );
}

/// A shared mapping of the first `len` bytes of `file` with protection `prot`.
fn map_shared(file: &File, len: usize, prot: i32) -> *mut u8 {
    // SAFETY: a fresh mapping of an open file; the callers stay inside it and unmap it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p as *mut u8
}

/// The first `len` bytes of `file`, through a shared mapping.
fn mmap_read(file: &File, len: usize) -> Vec<u8> {
    let p = map_shared(file, len, libc::PROT_READ);
    // SAFETY: `len` mapped bytes, read, then unmapped.
    unsafe {
        let out = std::slice::from_raw_parts(p, len).to_vec();
        libc::munmap(p.cast(), len);
        out
    }
}

/// Writes `data` at `off` of `file` (`len` bytes long) through a shared mapping, then
/// `msync`s it.
fn mmap_write(file: &File, len: usize, off: usize, data: &[u8]) {
    let p = map_shared(file, len, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: `off + data.len() <= len` mapped bytes, written, synced, then unmapped.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(off), data.len());
        let r = libc::msync(p.cast(), len, libc::MS_SYNC);
        assert_eq!(r, 0, "msync: {}", std::io::Error::last_os_error());
        libc::munmap(p.cast(), len);
    }
}
