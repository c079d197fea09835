//! Opening, duplicating and closing: which descriptors are Nacre files (table.rs).

use crate::{inside, real, table, Inside};
use libc::{c_char, c_int, c_uint, c_void, off64_t, size_t};
use std::sync::atomic::Ordering;

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
