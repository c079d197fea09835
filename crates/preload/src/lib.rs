//! `libnacre_preload.so` (docs/preload.md): unmodified programs do their data I/O on a Nacre
//! mount through the node's client's rings, not through FUSE.
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

mod aio;
mod io;
mod real;
mod table;

use io::Bufs;
use libc::{c_char, c_int, c_uint, c_void, iovec, off64_t, size_t, ssize_t};
use nacre_api::File;
use std::cell::Cell;
use std::sync::atomic::Ordering;
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
        let bufs = Bufs::new(iov);
        if bufs.total() > RW_BYTES_MAX {
            return fail(libc::EINVAL);
        }
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

// ---- opening and closing -------------------------------------------------------------

unsafe fn opened(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && !inside() {
        let _in = Inside::enter();
        table::opened(fd, flags);
    }
    fd
}

/// open(2).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    opened(real::openat()(libc::AT_FDCWD, path, flags, mode), flags)
}

/// open64(2).
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    open(path, flags, mode)
}

/// openat(2).
#[no_mangle]
pub unsafe extern "C" fn openat(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    opened(real::openat()(dir, path, flags, mode), flags)
}

/// openat64(2).
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    openat(dir, path, flags, mode)
}

/// The fortified open (no mode: the flags make nothing).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    open(path, flags, 0)
}

/// The fortified open64.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    open(path, flags, 0)
}

/// The fortified openat.
#[no_mangle]
pub unsafe extern "C" fn __openat_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    openat(dir, path, flags, 0)
}

/// The fortified openat64.
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dir: c_int, path: *const c_char, flags: c_int) -> c_int {
    openat(dir, path, flags, 0)
}

/// creat(2).
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: libc::mode_t) -> c_int {
    open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode)
}

/// creat64(2).
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: libc::mode_t) -> c_int {
    creat(path, mode)
}

/// fcntl(2): duplicates are tracked, `O_APPEND` changes are seen.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    let r = real::fcntl()(fd, cmd, arg);
    if r >= 0 && table::tracked(fd) {
        let _in = Inside::enter();
        match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => table::duplicate(fd, r),
            libc::F_SETFL => {
                if let Some(e) = table::entry(fd) {
                    e.append
                        .store(arg as c_int & libc::O_APPEND != 0, Ordering::Release);
                }
            }
            _ => {}
        }
    }
    r
}

/// fcntl64(2).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl(fd, cmd, arg)
}

/// close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    table::remove(fd);
    real::close()(fd)
}

/// fclose(3) (its descriptor closes inside the C library).
#[no_mangle]
pub unsafe extern "C" fn fclose(fp: *mut libc::FILE) -> c_int {
    if !fp.is_null() {
        table::remove(libc::fileno(fp));
    }
    real::fclose()(fp)
}

/// closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    table::remove_range(low.max(0) as u32, u32::MAX);
    real::closefrom()(low)
}

/// close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let r = libc::syscall(libc::SYS_close_range, first, last, flags) as c_int;
    if r == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        table::remove_range(first, last);
    }
    r
}

/// dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let r = real::dup()(fd);
    if r >= 0 {
        table::duplicate(fd, r);
    }
    r
}

/// dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && table::tracked(new) && libc::fcntl(old, libc::F_GETFD) >= 0 {
        table::remove(new);
    }
    let r = real::dup2()(old, new);
    if r >= 0 && old != new {
        table::duplicate(old, new);
    }
    r
}

/// dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && table::tracked(new) && libc::fcntl(old, libc::F_GETFD) >= 0 {
        table::remove(new);
    }
    let r = real::dup3()(old, new, flags);
    if r >= 0 {
        table::duplicate(old, new);
    }
    r
}

/// mmap(2): a shared writable mapping of a Nacre file makes its fsync go to the kernel
/// too (pages dirtied through it are the kernel's).
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    if table::tracked(fd) && flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        if let Some(e) = table::entry(fd) {
            e.mapped.store(true, Ordering::Release);
        }
    }
    real::mmap()(addr, len, prot, flags, fd, off)
}

/// mmap64(2).
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    mmap(addr, len, prot, flags, fd, off)
}

// ---- reading ---------------------------------------------------------------------------

/// read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match serve(fd) {
        Some((s, _in)) => s.read(fd, &one(buf, n), None),
        None => real::read()(fd, buf, n),
    }
}

/// The fortified read.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    room: size_t,
) -> ssize_t {
    if n > room {
        return real::read_chk()(fd, buf, n, room);
    }
    read(fd, buf, n)
}

/// pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    match serve(fd) {
        Some((s, _in)) => s.read(fd, &one(buf, n), Some(off)),
        None => real::pread()(fd, buf, n, off),
    }
}

/// pread64(2).
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    pread(fd, buf, n, off)
}

/// The fortified pread.
#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    room: size_t,
) -> ssize_t {
    if n > room {
        return real::pread_chk()(fd, buf, n, off, room);
    }
    pread(fd, buf, n, off)
}

/// The fortified pread64.
#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    room: size_t,
) -> ssize_t {
    __pread_chk(fd, buf, n, off, room)
}

/// readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if let (Some(v), Some((s, _in))) = (iovs(iov, n), serve(fd)) {
        return s.read(fd, v, None);
    }
    real::readv()(fd, iov, n)
}

/// preadv2(2): flags go to the kernel.
#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    if flags == 0 {
        if let (Some(v), Some((s, _in))) = (iovs(iov, n), serve(fd)) {
            return s.read(fd, v, (off != -1).then_some(off));
        }
    }
    real::preadv2()(fd, iov, n, off, flags)
}

/// preadv64v2(2).
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    preadv2(fd, iov, n, off, flags)
}

/// preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    if off == -1 {
        // Not "the current position" here, as it is for preadv2: the kernel says EINVAL.
        return real::preadv2()(fd, iov, n, off, 0);
    }
    preadv2(fd, iov, n, off, 0)
}

/// preadv64(2).
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    preadv(fd, iov, n, off)
}

// ---- writing ---------------------------------------------------------------------------

/// What serves a write on `fd`: not an `O_APPEND` descriptor (the kernel appends).
fn serve_write(fd: c_int) -> Option<(Served, Inside)> {
    let (s, g) = serve(fd)?;
    if s.entry.append.load(Ordering::Acquire) {
        s.entry.kernel_wrote.store(true, Ordering::Release);
        return None;
    }
    Some((s, g))
}

/// write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match serve_write(fd) {
        Some((s, _in)) => s.write(fd, &one(buf, n), None),
        None => real::write()(fd, buf, n),
    }
}

/// pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    match serve_write(fd) {
        Some((s, _in)) => s.write(fd, &one(buf, n), Some(off)),
        None => real::pwrite()(fd, buf, n, off),
    }
}

/// pwrite64(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    pwrite(fd, buf, n, off)
}

/// writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if let Some(v) = iovs(iov, n) {
        if let Some((s, _in)) = serve_write(fd) {
            return s.write(fd, v, None);
        }
    }
    real::writev()(fd, iov, n)
}

/// pwritev2(2): flags go to the kernel.
#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    if flags == 0 {
        if let Some(v) = iovs(iov, n) {
            if let Some((s, _in)) = serve_write(fd) {
                return s.write(fd, v, (off != -1).then_some(off));
            }
        }
    }
    real::pwritev2()(fd, iov, n, off, flags)
}

/// pwritev64v2(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    pwritev2(fd, iov, n, off, flags)
}

/// pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, n: c_int, off: off64_t) -> ssize_t {
    if off == -1 {
        return real::pwritev2()(fd, iov, n, off, 0);
    }
    pwritev2(fd, iov, n, off, 0)
}

/// pwritev64(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    n: c_int,
    off: off64_t,
) -> ssize_t {
    pwritev(fd, iov, n, off)
}

// ---- copying and syncing ---------------------------------------------------------------

/// One side of a copy: where its bytes are, and what serves it.
struct Side {
    fd: c_int,
    /// The caller's offset (`None`: the descriptor's position, moved).
    off: Option<off64_t>,
    /// Served by the node's client (`None`: by the C library).
    by: Option<Served>,
}

impl Side {
    unsafe fn new(fd: c_int, off: *mut off64_t, by: Option<Served>) -> Side {
        Side {
            fd,
            off: (!off.is_null()).then(|| *off),
            by,
        }
    }

    /// Where it is now.
    unsafe fn at(&self) -> off64_t {
        match self.off {
            Some(o) => o,
            None => libc::lseek64(self.fd, 0, libc::SEEK_CUR),
        }
    }

    /// Moves up to `buf.len()` bytes at `at` (read into, or written from, `buf`).
    unsafe fn moves(&self, buf: &mut [u8], at: off64_t, writing: bool) -> Result<usize, i32> {
        let iov = one(buf.as_ptr().cast(), buf.len());
        let bufs = Bufs::new(&iov);
        if let Some(s) = &self.by {
            return if writing {
                io::write(&s.mount, &s.file, &bufs, at as u64)
            } else {
                io::read(&s.mount, &s.file, &bufs, at as u64)
            };
        }
        // The C library's side: at the given offset, or at (and moving) its position.
        let (p, n) = (buf.as_mut_ptr().cast::<c_void>(), buf.len());
        let r = match (self.off.is_some(), writing) {
            (true, false) => real::pread()(self.fd, p, n, at),
            (true, true) => real::pwrite()(self.fd, p, n, at),
            (false, false) => real::read()(self.fd, p, n),
            (false, true) => real::write()(self.fd, p, n),
        };
        if r < 0 {
            Err(*libc::__errno_location())
        } else {
            Ok(r as usize)
        }
    }

    /// Sets where it is after `n` bytes from `from`: the caller's offset or the position
    /// (the C library's side moved its own).
    unsafe fn advance(&self, off: *mut off64_t, from: off64_t, n: usize) {
        match self.off {
            Some(_) => *off = from + n as off64_t,
            None if self.by.is_some() => {
                libc::lseek64(self.fd, from + n as off64_t, libc::SEEK_SET);
            }
            None => {}
        }
    }
}

/// Copies up to `len` bytes from `src` to `dst` (at most [`COPY_BYTES_MAX`] per call, as
/// the kernel may copy fewer): the count, 0 at the end of `src`.
unsafe fn copy(
    src: Side,
    off_in: *mut off64_t,
    dst: Side,
    off_out: *mut off64_t,
    len: usize,
) -> ssize_t {
    let (from, to) = (src.at(), dst.at());
    if from < 0 || to < 0 {
        return -1;
    }
    let want = len.min(COPY_BYTES_MAX);
    let mut buf = vec![0u8; want.min(io::RING_BYTES)];
    let mut done = 0usize;
    let mut err = 0;
    while done < want {
        let n = (want - done).min(buf.len());
        let got = match src.moves(&mut buf[..n], from + done as off64_t, false) {
            Ok(0) => break,
            Ok(g) => g,
            Err(e) => {
                err = e;
                break;
            }
        };
        let mut put = 0;
        while put < got {
            match dst.moves(&mut buf[put..got], to + (done + put) as off64_t, true) {
                Ok(0) => break,
                Ok(p) => put += p,
                Err(e) => {
                    err = e;
                    break;
                }
            }
        }
        done += put;
        if put < got || got < n {
            break;
        }
    }
    if done == 0 && err != 0 {
        return fail(err);
    }
    src.advance(off_in, from, done);
    dst.advance(off_out, to, done);
    done as ssize_t
}

/// The two sides of a copy if either is served by the node's client.
fn copy_sides(fd_in: c_int, fd_out: c_int) -> Option<(Option<Served>, Option<Served>, Inside)> {
    if (!table::tracked(fd_in) && !table::tracked(fd_out)) || fd_in == fd_out || inside() {
        return None;
    }
    let guard = Inside::enter();
    let src = served_inside(fd_in, true);
    let dst = served_inside(fd_out, true).filter(|s| !s.entry.append.load(Ordering::Acquire));
    if src.is_none() && dst.is_none() {
        return None;
    }
    Some((src, dst, guard))
}

/// copy_file_range(2).
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    if flags == 0 {
        if let Some((src, dst, _in)) = copy_sides(fd_in, fd_out) {
            let src = Side::new(fd_in, off_in, src);
            let dst = Side::new(fd_out, off_out, dst);
            return copy(src, off_in, dst, off_out, len);
        }
    }
    real::copy_file_range()(fd_in, off_in, fd_out, off_out, len, flags)
}

/// sendfile(2) (Python's shutil copies with it).
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    fd_in: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if let Some((src, dst, _in)) = copy_sides(fd_in, out) {
        let src = Side::new(fd_in, off, src);
        let dst = Side::new(out, std::ptr::null_mut(), dst);
        return copy(src, off, dst, std::ptr::null_mut(), n);
    }
    real::sendfile()(out, fd_in, off, n)
}

/// sendfile64(2).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    fd_in: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    sendfile(out, fd_in, off, n)
}

/// fsync and fdatasync: the node's client's writes are made durable through a ring; the
/// kernel is asked too when it wrote (appends) or holds dirty pages (shared mappings).
unsafe fn sync(fd: c_int, kernel: unsafe extern "C" fn(c_int) -> c_int) -> c_int {
    if !table::tracked(fd) || inside() {
        return kernel(fd);
    }
    let guard = Inside::enter();
    // Only a descriptor written through the node's client has anything there to sync.
    let Some(s) = served_inside(fd, false) else {
        drop(guard);
        return kernel(fd);
    };
    if let Err(e) = io::fsync(&s.mount, &s.file) {
        return fail(e);
    }
    if s.entry.mapped.load(Ordering::Acquire) || s.entry.kernel_wrote.load(Ordering::Acquire) {
        drop(guard);
        return kernel(fd);
    }
    0
}

/// fsync(2).
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    sync(fd, real::fsync())
}

/// fdatasync(2).
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    sync(fd, real::fdatasync())
}

// ---- Linux AIO (libaio) -------------------------------------------------------------

/// io_submit (libaio): requests on Nacre descriptors go through a ring of the context's.
#[no_mangle]
pub unsafe extern "C" fn io_submit(
    ctx: usize,
    nr: libc::c_long,
    cbs: *mut *mut aio::Iocb,
) -> c_int {
    if inside() {
        return real::io_submit()(ctx, nr, cbs);
    }
    let _in = Inside::enter();
    aio::submit(ctx, nr, cbs)
}

/// io_getevents (libaio).
#[no_mangle]
pub unsafe extern "C" fn io_getevents(
    ctx: usize,
    min: libc::c_long,
    nr: libc::c_long,
    events: *mut aio::IoEvent,
    timeout: *mut libc::timespec,
) -> c_int {
    if inside() {
        return real::io_getevents()(ctx, min, nr, events, timeout);
    }
    let _in = Inside::enter();
    aio::getevents(ctx, min, nr, events, timeout)
}

/// io_destroy (libaio).
#[no_mangle]
pub unsafe extern "C" fn io_destroy(ctx: usize) -> c_int {
    if inside() {
        return real::io_destroy()(ctx);
    }
    let _in = Inside::enter();
    aio::destroy(ctx)
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
