//! The C library's own functions this library stands in front of: the next definition of
//! each symbol in lookup order (`dlsym(RTLD_NEXT)`), looked up once.

use libc::{c_char, c_int, c_uint, c_void, iovec, off64_t, size_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name`; a process without one cannot go on (the C library
/// always has these), so it is told and stopped.
fn lookup(name: &std::ffi::CStr, slot: &AtomicUsize) -> usize {
    let cached = slot.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT is valid from a shared object.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    if p == 0 {
        let msg = b"nacre-preload: the C library lacks a function it must have\n";
        // SAFETY: a raw write of a static message, then the process ends.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! reals {
    ($($(#[$doc:meta])* $name:ident = $sym:literal : $ty:ty;)*) => {$(
        $(#[$doc])*
        pub(crate) fn $name() -> $ty {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = lookup($sym, &SLOT);
            // SAFETY: the C library's `$sym` has this C type.
            unsafe { std::mem::transmute::<usize, $ty>(p) }
        }
    )*};
}

reals! {
    /// openat(2).
    openat = c"openat64": unsafe extern "C" fn(c_int, *const c_char, c_int, ...) -> c_int;
    /// fcntl(2).
    fcntl = c"fcntl64": unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    /// close(2).
    close = c"close": unsafe extern "C" fn(c_int) -> c_int;
    /// fclose(3).
    fclose = c"fclose": unsafe extern "C" fn(*mut libc::FILE) -> c_int;
    /// closefrom(3).
    closefrom = c"closefrom": unsafe extern "C" fn(c_int);
    /// dup(2).
    dup = c"dup": unsafe extern "C" fn(c_int) -> c_int;
    /// dup2(2).
    dup2 = c"dup2": unsafe extern "C" fn(c_int, c_int) -> c_int;
    /// dup3(2).
    dup3 = c"dup3": unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    /// read(2).
    read = c"read": unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
    /// __read_chk (fortified read).
    read_chk = c"__read_chk": unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
    /// pread(2).
    pread = c"pread64": unsafe extern "C" fn(c_int, *mut c_void, size_t, off64_t) -> ssize_t;
    /// __pread64_chk (fortified pread).
    pread_chk = c"__pread64_chk":
        unsafe extern "C" fn(c_int, *mut c_void, size_t, off64_t, size_t) -> ssize_t;
    /// readv(2).
    readv = c"readv": unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    /// preadv2(2).
    preadv2 = c"preadv64v2":
        unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
    /// write(2).
    write = c"write": unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
    /// pwrite(2).
    pwrite = c"pwrite64": unsafe extern "C" fn(c_int, *const c_void, size_t, off64_t) -> ssize_t;
    /// writev(2).
    writev = c"writev": unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    /// pwritev2(2).
    pwritev2 = c"pwritev64v2":
        unsafe extern "C" fn(c_int, *const iovec, c_int, off64_t, c_int) -> ssize_t;
    /// copy_file_range(2).
    copy_file_range = c"copy_file_range":
        unsafe extern "C" fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t;
    /// sendfile(2).
    sendfile = c"sendfile64": unsafe extern "C" fn(c_int, c_int, *mut off64_t, size_t) -> ssize_t;
    /// fsync(2).
    fsync = c"fsync": unsafe extern "C" fn(c_int) -> c_int;
    /// fdatasync(2).
    fdatasync = c"fdatasync": unsafe extern "C" fn(c_int) -> c_int;
    /// io_submit (libaio).
    io_submit = c"io_submit":
        unsafe extern "C" fn(usize, libc::c_long, *mut *mut crate::abi::Iocb) -> c_int;
    /// io_getevents (libaio).
    io_getevents = c"io_getevents": unsafe extern "C" fn(
        usize,
        libc::c_long,
        libc::c_long,
        *mut crate::abi::IoEvent,
        *mut libc::timespec,
    ) -> c_int;
    /// io_destroy (libaio).
    io_destroy = c"io_destroy": unsafe extern "C" fn(usize) -> c_int;
    /// mmap(2).
    mmap = c"mmap64":
        unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off64_t) -> *mut c_void;
}
