//! `libnacre_preload.so` (docs/preload.md): unmodified programs do their data I/O on a Nacre
//! mount through the node's client's rings, not through FUSE. A cdylib over `nacre-api`.
//!
//! ```text
//! LD_PRELOAD=/usr/local/lib/nacre/libnacre_preload.so dd if=/mnt/nacre/big of=/dev/null bs=1M
//! ```
//!
//! Files are opened through the mount as ever — real kernel descriptors, so fork, exec,
//! dup, mmap, locks, stat and everything else keep working through the kernel. What this
//! library adds: `open`/`openat`/`creat` are watched to learn which descriptors are regular
//! files of a Nacre mount (table.rs); `read`/`pread`/`readv`/`preadv`, `write`/`pwrite`/
//! `writev`/`pwritev`, `copy_file_range`, `sendfile`, `fsync` and `fdatasync` on those are
//! served through rings to the node's client (io.rs), the descriptor handed to it once as
//! the proof of access; all other calls, and every descriptor that is not a Nacre file,
//! go straight to the C library. The file position is the kernel's (read before and set
//! after a `read` or `write`), so duplicates, children and `lseek` see one position.
//!
//! The modules, by the C library's calls they stand in front of:
//!
//! * fds.rs: `open*`, `close*`, `dup*`, `fcntl`, `mmap`;
//! * data.rs: the read and write families;
//! * copy.rs: `copy_file_range`, `sendfile`, `fsync`, and libaio's calls;
//! * aio.rs: Linux AIO (libaio's `io_submit`/`io_getevents`) through a ring per context;
//! * io.rs: data through a pool of rings (1 MiB chunks, 8 in flight), or the node's client's
//!   socket when no ring can be had;
//! * table.rs: which descriptors are Nacre files (a `statx` per open; the `user.nacre.api`
//!   attribute asked once per file system), their entries shared by duplicates, each
//!   attached to this process's session at its first read or write;
//! * real.rs: the C library's own definitions (`dlsym(RTLD_NEXT)`);
//! * lib.rs: what they share, and the fork handlers.
//!
//! When the node's client cannot be reached (or will not take a descriptor), one line on
//! standard error says so and the kernel (FUSE) serves that I/O.
//!
//! Limits: descriptors numbered below 65,536; writes to `O_APPEND` descriptors go to the
//! kernel (which appends atomically); a descriptor closed behind the C library's back
//! (a raw `close` system call) may leave a stale entry; statically linked programs and raw
//! system calls are not seen. Reads and writes on one descriptor from several threads at
//! once without `pread`/`pwrite` may see the same position (as two processes sharing it).
//!
//! Variadic C functions (`open`, `openat`, `fcntl`) are defined with their widest fixed
//! argument list: on the 64-bit Linux ABIs (x86-64, AArch64, RISC-V) variadic integer and
//! pointer arguments travel in the same registers as named ones, and the mode or argument
//! is read only when the flags or command say the caller passed it.

#![allow(clippy::missing_safety_doc)]

#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
)))]
compile_error!("libnacre_preload.so is built for 64-bit Linux (x86-64, AArch64, RISC-V)");

mod abi;
mod aio;
mod copy;
mod data;
mod fds;
mod io;
mod real;
mod table;

use io::Bufs;
use libc::{c_int, c_void, iovec, off64_t, size_t, ssize_t};
use nacre_api::File;
use std::cell::Cell;
use std::sync::Arc;
use table::{Entry, Mount};

/// The most one read or write moves (as Linux's `MAX_RW_COUNT`).
const RW_BYTES_MAX: usize = 0x7fff_f000;
/// The most one `copy_file_range` or `sendfile` call copies (callers loop).
const COPY_BYTES_MAX: usize = 64 << 20;
/// The most iovecs a call may name (`IOV_MAX`).
const IOVS_MAX: c_int = 1024;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// This thread is inside the library (talking to the node's client): the calls it makes
/// go straight to the C library.
pub(crate) struct Inside(bool);

impl Inside {
    pub(crate) fn enter() -> Inside {
        Inside(INSIDE.with(|c| c.replace(true)))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(self.0));
    }
}

fn inside() -> bool {
    INSIDE.with(|c| c.get())
}

/// Says `what` on standard error, once per process and message.
pub(crate) fn say_once(what: &str) {
    static SAID: parking_lot::Mutex<Vec<String>> = parking_lot::Mutex::new(Vec::new());
    let mut said = SAID.lock();
    if said.len() >= 16 || said.iter().any(|s| s == what) {
        return;
    }
    said.push(what.to_string());
    let line = format!("nacre-preload: {what}\n");
    // SAFETY: a write of our own bytes to standard error.
    unsafe { real::write()(2, line.as_ptr().cast(), line.len()) };
}

fn fail<T: From<i8>>(errno: i32) -> T {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = errno };
    T::from(-1)
}

/// A tracked descriptor the node's client serves, for one call.
struct Served {
    entry: Arc<Entry>,
    file: Arc<File>,
    mount: Arc<Mount>,
}

/// What serves `fd` (attached now if `attach`), for a call made inside the library.
fn served_inside(fd: c_int, attach: bool) -> Option<Served> {
    let entry = table::entry(fd)?;
    let (file, mount) = table::served(&entry, fd, attach)?;
    Some(Served { entry, file, mount })
}

/// What serves `fd`, if anything: the library entered for the call.
fn serve(fd: c_int) -> Option<(Served, Inside)> {
    if !table::tracked(fd) || inside() {
        return None;
    }
    let guard = Inside::enter();
    served_inside(fd, true).map(|s| (s, guard))
}

impl Served {
    /// A read into `iov` at `offset`, or at (and moving) the descriptor's position.
    unsafe fn read(&self, fd: c_int, iov: &[iovec], offset: Option<off64_t>) -> ssize_t {
        self.moves(fd, iov, offset, false)
    }

    unsafe fn write(&self, fd: c_int, iov: &[iovec], offset: Option<off64_t>) -> ssize_t {
        self.moves(fd, iov, offset, true)
    }

    unsafe fn moves(&self, fd: c_int, iov: &[iovec], offset: Option<off64_t>, w: bool) -> ssize_t {
        // As the kernel: a total past ssize_t is refused, a large one moves at most
        // MAX_RW_COUNT bytes.
        let mut total = 0usize;
        for v in iov {
            total = match total.checked_add(v.iov_len) {
                Some(t) if t <= isize::MAX as usize => t,
                _ => return fail(libc::EINVAL),
            };
        }
        let clamped;
        let iov = if total > RW_BYTES_MAX {
            clamped = clamp(iov, RW_BYTES_MAX);
            &clamped[..]
        } else {
            iov
        };
        let bufs = Bufs::new(iov);
        let at = match offset {
            Some(o) if o < 0 => return fail(libc::EINVAL),
            Some(o) => o,
            None => {
                let p = libc::lseek64(fd, 0, libc::SEEK_CUR);
                if p < 0 {
                    return -1;
                }
                p
            }
        };
        let r = if w {
            io::write(&self.mount, &self.file, &bufs, at as u64)
        } else {
            io::read(&self.mount, &self.file, &bufs, at as u64)
        };
        match r {
            Ok(n) => {
                if offset.is_none() {
                    libc::lseek64(fd, at + n as off64_t, libc::SEEK_SET);
                }
                n as ssize_t
            }
            Err(e) => fail(e),
        }
    }
}

/// The first `max` bytes of `iov`.
fn clamp(iov: &[iovec], max: usize) -> Vec<iovec> {
    let mut left = max;
    let mut out = Vec::new();
    for v in iov {
        if left == 0 {
            break;
        }
        let n = v.iov_len.min(left);
        out.push(iovec {
            iov_base: v.iov_base,
            iov_len: n,
        });
        left -= n;
    }
    out
}

fn one(buf: *const c_void, n: size_t) -> [iovec; 1] {
    [iovec {
        iov_base: buf as *mut c_void,
        iov_len: n,
    }]
}

unsafe fn iovs<'a>(iov: *const iovec, n: c_int) -> Option<&'a [iovec]> {
    if !(0..=IOVS_MAX).contains(&n) || (iov.is_null() && n > 0) {
        return None;
    }
    if n == 0 {
        return Some(&[]);
    }
    Some(std::slice::from_raw_parts(iov, n as usize))
}

// ---- process life ----------------------------------------------------------------------

unsafe extern "C" fn before_fork() {
    use parking_lot::lock_api::RawRwLock as _;
    table::DEVS.raw().lock_exclusive();
    table::TABLE.raw().lock_exclusive();
}

unsafe extern "C" fn after_fork_parent() {
    table::TABLE.force_unlock_write();
    table::DEVS.force_unlock_write();
}

unsafe extern "C" fn after_fork_child() {
    table::forget_parent();
    table::TABLE.force_unlock_write();
    table::DEVS.force_unlock_write();
}

extern "C" fn init() {
    let _in = Inside::enter();
    // SAFETY: handlers that take and give back the library's tables around a fork.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        )
    };
    table::scan_inherited();
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
