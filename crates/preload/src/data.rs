//! Reading and writing: the read and write families on Nacre descriptors, through the
//! rings (io.rs).

use crate::{iovs, one, real, serve, Inside, Served};
use libc::{c_int, c_void, iovec, off64_t, size_t, ssize_t};
use std::sync::atomic::Ordering;

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
    // An append is the kernel's before anything is attached for it.
    if let Some(e) = crate::table::entry(fd) {
        if e.append.load(Ordering::Acquire) {
            e.kernel_wrote.store(true, Ordering::Release);
            return None;
        }
    }
    serve(fd)
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
