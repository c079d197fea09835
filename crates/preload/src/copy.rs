//! Copying and syncing: copy_file_range and sendfile with a Nacre side, fsync and
//! fdatasync, Linux AIO (aio.rs).

use crate::io::Bufs;
use crate::{
    abi, aio, fail, inside, io, one, real, served_inside, table, Inside, Served, COPY_BYTES_MAX,
};
use libc::{c_int, c_uint, c_void, off64_t, size_t, ssize_t};
use std::sync::atomic::Ordering;

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
    let mut buf = vec![0u8; want.min(table::RING_BYTES)];
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
    cbs: *mut *mut abi::Iocb,
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
    events: *mut abi::IoEvent,
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
