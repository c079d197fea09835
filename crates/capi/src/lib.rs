//! `libnacre.so`: the node's client API for C (docs/api.md), a cdylib over `nacre-api`:
//! files and the namespace (lib.rs), rings (ring.rs). build.rs generates the header
//! `nacre.h` with cbindgen and writes `nacre.pc` beside the library; `pkg-config nacre` gives
//! the flags.
//!
//! Conventions: every call returns 0 (or a count) on success and a negative errno on
//! failure; handles (`nacre_fs`, `nacre_file`, `nacre_dir`) are safe to use from several
//! threads at once (a `nacre_file`'s own position, used by `nacre_read`/`nacre_write`, is
//! shared by them); a handle is freed by its close call, after which it must not be used.
//!
//! # Safety
//!
//! Every function taking pointers is `unsafe`: pointers must be valid for what they point
//! to (strings NUL-terminated, buffers of the length given, handles from this library and
//! not yet closed). Null pointers are refused with `-EFAULT`. No panic crosses into C: one
//! is answered `-EIO`.
#![allow(clippy::missing_safety_doc)]
#![allow(non_camel_case_types)]

use nacre_api::{Entry, File, Node, Stat};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io::{IoSlice, IoSliceMut};
use std::panic::{catch_unwind, AssertUnwindSafe};

mod ring;
pub use ring::*;

/// Most stripes a `nacre_stripe` holds.
pub const NACRE_STRIPES_MAX: u32 = 2000;
/// Longest name in a `nacre_dirent` (without the NUL).
pub const NACRE_NAME_MAX: u32 = 255;

/// A connection to the node's client for one mount.
pub struct nacre_fs {
    node: Node,
}

/// An open file.
pub struct nacre_file {
    file: File,
}

/// A directory being listed.
pub struct nacre_dir {
    entries: Vec<Entry>,
    next: std::sync::atomic::AtomicUsize,
}

/// Attributes, as stat(2) gives them.
#[repr(C)]
pub struct nacre_stat {
    /// Inode number (as the mount shows it).
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Last access, seconds.
    pub atime_sec: i64,
    /// Last access, nanoseconds.
    pub atime_nsec: u32,
    /// Last data change, seconds.
    pub mtime_sec: i64,
    /// Last data change, nanoseconds.
    pub mtime_nsec: u32,
    /// Last status change, seconds.
    pub ctime_sec: i64,
    /// Last status change, nanoseconds.
    pub ctime_nsec: u32,
    /// Device number of a device node.
    pub rdev: u32,
}

/// One directory entry.
#[repr(C)]
pub struct nacre_dirent {
    /// Inode number.
    pub ino: u64,
    /// Type bits (`S_IFREG`, `S_IFDIR`, ...).
    pub kind: u32,
    /// Name, NUL-terminated.
    pub name: [c_char; 256],
}

/// A file's layout.
#[repr(C)]
pub struct nacre_stripe {
    /// Stripe count.
    pub count: u32,
    /// Stripe size in bytes.
    pub size: u64,
    /// OST pool, NUL-terminated (empty: none).
    pub pool: [c_char; 16],
    /// The OST of each stripe (the first `count`).
    pub osts: [u32; 2000],
}

/// Runs `f`, turning errors into negative errnos and panics into `-EIO`.
fn guard(f: impl FnOnce() -> Result<i64, i32>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => n,
        Ok(Err(errno)) => -i64::from(errno),
        Err(_) => -i64::from(libc::EIO),
    }
}

fn int(f: impl FnOnce() -> Result<i64, i32>) -> c_int {
    guard(f) as c_int
}

fn e(err: nacre_api::Error) -> i32 {
    err.errno()
}

/// The bytes of a C string (`EFAULT` if null).
unsafe fn bytes<'a>(p: *const c_char) -> Result<&'a [u8], i32> {
    if p.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller passes a NUL-terminated string (module docs).
    Ok(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// A reference from a handle pointer (`EFAULT` if null).
unsafe fn handle<'a, T>(p: *const T) -> Result<&'a T, i32> {
    // SAFETY: the caller passes a live handle of this library (module docs).
    unsafe { p.as_ref() }.ok_or(libc::EFAULT)
}

fn to_c(s: &Stat) -> nacre_stat {
    nacre_stat {
        ino: s.ino,
        mode: s.mode,
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        blocks: s.blocks,
        atime_sec: s.atime.0,
        atime_nsec: s.atime.1,
        mtime_sec: s.mtime.0,
        mtime_nsec: s.mtime.1,
        ctime_sec: s.ctime.0,
        ctime_nsec: s.ctime.1,
        rdev: s.rdev,
    }
}

/// The API version of this library (`NACRE_API_VERSION` of its header).
#[no_mangle]
pub extern "C" fn nacre_version() -> u32 {
    nacre_api::VERSION
}

/// Connects to the node's client serving the mount at `mount` (or any path in it); the
/// handle goes to `*out`.
#[no_mangle]
pub unsafe extern "C" fn nacre_connect(mount: *const c_char, out: *mut *mut nacre_fs) -> c_int {
    int(|| {
        let mount = unsafe { bytes(mount) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        use std::os::unix::ffi::OsStrExt;
        let node = Node::connect(std::ffi::OsStr::from_bytes(mount)).map_err(e)?;
        // SAFETY: `out` is valid for a write (checked non-null; module docs).
        unsafe { *out = Box::into_raw(Box::new(nacre_fs { node })) };
        Ok(0)
    })
}

/// Ends a connection (its open files must be closed first; those left are closed by the
/// node's client when the process's last connection goes).
#[no_mangle]
pub unsafe extern "C" fn nacre_disconnect(fs: *mut nacre_fs) -> c_int {
    int(|| {
        if fs.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: a handle of this library, not used again (module docs).
        drop(unsafe { Box::from_raw(fs) });
        Ok(0)
    })
}

/// Opens `path` (relative to the mount's root) with open(2) `flags`; `mode` for a file
/// `O_CREAT` makes (the umask applies). The handle goes to `*out`.
#[no_mangle]
pub unsafe extern "C" fn nacre_open(
    fs: *const nacre_fs,
    path: *const c_char,
    flags: c_int,
    mode: u32,
    out: *mut *mut nacre_file,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        let file = fs.node.open(path, flags, mode).map_err(e)?;
        // SAFETY: `out` is valid for a write.
        unsafe { *out = Box::into_raw(Box::new(nacre_file { file })) };
        Ok(0)
    })
}

/// Closes a file and frees its handle; returns what the close reports (kept writes the
/// OSTs refused).
#[no_mangle]
pub unsafe extern "C" fn nacre_close(file: *mut nacre_file) -> c_int {
    int(|| {
        if file.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: a handle of this library, not used again.
        let f = unsafe { Box::from_raw(file) };
        f.file.close().map_err(e)?;
        Ok(0)
    })
}

/// Reads up to `len` bytes at `offset` into `buf`: the count read (0 at the end of file).
#[no_mangle]
pub unsafe extern "C" fn nacre_pread(
    file: *const nacre_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is valid for `len` bytes of writes.
        let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        f.file.read_at(b, offset).map(|n| n as i64).map_err(e)
    })
}

/// Writes `len` bytes of `buf` at `offset` (at the end of file with `O_APPEND`): the
/// count written.
#[no_mangle]
pub unsafe extern "C" fn nacre_pwrite(
    file: *const nacre_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is valid for `len` bytes of reads.
        let b = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        f.file.write_at(b, offset).map(|n| n as i64).map_err(e)
    })
}

/// Reads at the file's position, which moves on by the count read.
#[no_mangle]
pub unsafe extern "C" fn nacre_read(file: *const nacre_file, buf: *mut c_void, len: usize) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        let n = unsafe { nacre_pread(file, buf, len, f.file.position()) };
        if n > 0 {
            f.file.advance(n as u64);
        }
        Ok(n)
    })
}

/// Writes at the file's position, which moves on by the count written.
#[no_mangle]
pub unsafe extern "C" fn nacre_write(
    file: *const nacre_file,
    buf: *const c_void,
    len: usize,
) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        let n = unsafe { nacre_pwrite(file, buf, len, f.file.position()) };
        if n > 0 {
            f.file.advance(n as u64);
        }
        Ok(n)
    })
}

/// Moves the file's position as lseek(2) (`SEEK_SET`, `SEEK_CUR`, `SEEK_END`): the new
/// position.
#[no_mangle]
pub unsafe extern "C" fn nacre_lseek(file: *const nacre_file, offset: i64, whence: c_int) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => f.file.position(),
            libc::SEEK_END => f.file.stat().map_err(e)?.size,
            _ => return Err(libc::EINVAL),
        };
        let at = base.checked_add_signed(offset).ok_or(libc::EINVAL)?;
        f.file.set_position(at);
        Ok(at as i64)
    })
}

/// `iov`, `count` as slices (`EFAULT`/`EINVAL` for bad ones).
unsafe fn iovecs<'a>(iov: *const libc::iovec, count: c_int) -> Result<&'a [libc::iovec], i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&count) {
        return Err(libc::EINVAL);
    }
    if count == 0 {
        return Ok(&[]);
    }
    if iov.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: `iov` holds `count` iovecs.
    Ok(unsafe { std::slice::from_raw_parts(iov, count as usize) })
}

/// Reads into the `count` buffers of `iov` in order, from `offset`: the count read.
#[no_mangle]
pub unsafe extern "C" fn nacre_preadv(
    file: *const nacre_file,
    iov: *const libc::iovec,
    count: c_int,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        let v = unsafe { iovecs(iov, count) }?;
        let mut bufs: Vec<IoSliceMut<'_>> = v
            .iter()
            .filter(|i| i.iov_len > 0)
            // SAFETY: each iovec is valid for its length of writes.
            .map(|i| {
                IoSliceMut::new(unsafe {
                    std::slice::from_raw_parts_mut(i.iov_base.cast(), i.iov_len)
                })
            })
            .collect();
        f.file
            .readv_at(&mut bufs, offset)
            .map(|n| n as i64)
            .map_err(e)
    })
}

/// Writes the `count` buffers of `iov` in order, from `offset`: the count written.
#[no_mangle]
pub unsafe extern "C" fn nacre_pwritev(
    file: *const nacre_file,
    iov: *const libc::iovec,
    count: c_int,
    offset: u64,
) -> i64 {
    guard(|| {
        let f = unsafe { handle(file) }?;
        let v = unsafe { iovecs(iov, count) }?;
        let bufs: Vec<IoSlice<'_>> = v
            .iter()
            .filter(|i| i.iov_len > 0)
            // SAFETY: each iovec is valid for its length of reads.
            .map(|i| {
                IoSlice::new(unsafe { std::slice::from_raw_parts(i.iov_base.cast(), i.iov_len) })
            })
            .collect();
        f.file.writev_at(&bufs, offset).map(|n| n as i64).map_err(e)
    })
}

/// Makes what was written to the file durable.
#[no_mangle]
pub unsafe extern "C" fn nacre_fsync(file: *const nacre_file) -> c_int {
    int(|| {
        let f = unsafe { handle(file) }?;
        f.file.fsync().map_err(e)?;
        Ok(0)
    })
}

/// Sets the file's size.
#[no_mangle]
pub unsafe extern "C" fn nacre_ftruncate(file: *const nacre_file, size: u64) -> c_int {
    int(|| {
        let f = unsafe { handle(file) }?;
        f.file.set_len(size).map_err(e)?;
        Ok(0)
    })
}

/// Attributes of an open file.
#[no_mangle]
pub unsafe extern "C" fn nacre_fstat(file: *const nacre_file, out: *mut nacre_stat) -> c_int {
    int(|| {
        let f = unsafe { handle(file) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        let s = f.file.stat().map_err(e)?;
        // SAFETY: `out` is valid for a write.
        unsafe { *out = to_c(&s) };
        Ok(0)
    })
}

unsafe fn stat_with(
    fs: *const nacre_fs,
    path: *const c_char,
    out: *mut nacre_stat,
    follow: bool,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        let s = if follow {
            fs.node.stat(path)
        } else {
            fs.node.lstat(path)
        }
        .map_err(e)?;
        // SAFETY: `out` is valid for a write.
        unsafe { *out = to_c(&s) };
        Ok(0)
    })
}

/// Attributes of `path` (a final symbolic link followed).
#[no_mangle]
pub unsafe extern "C" fn nacre_stat(
    fs: *const nacre_fs,
    path: *const c_char,
    out: *mut nacre_stat,
) -> c_int {
    unsafe { stat_with(fs, path, out, true) }
}

/// Attributes of `path` itself.
#[no_mangle]
pub unsafe extern "C" fn nacre_lstat(
    fs: *const nacre_fs,
    path: *const c_char,
    out: *mut nacre_stat,
) -> c_int {
    unsafe { stat_with(fs, path, out, false) }
}

/// Runs a namespace call on one path.
unsafe fn on_path(
    fs: *const nacre_fs,
    path: *const c_char,
    f: impl FnOnce(&Node, &[u8]) -> nacre_api::Result<()>,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        f(&fs.node, path).map_err(e)?;
        Ok(0)
    })
}

/// Runs a namespace call on two paths.
unsafe fn on_paths(
    fs: *const nacre_fs,
    a: *const c_char,
    b: *const c_char,
    f: impl FnOnce(&Node, &[u8], &[u8]) -> nacre_api::Result<()>,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let (a, b) = unsafe { (bytes(a)?, bytes(b)?) };
        f(&fs.node, a, b).map_err(e)?;
        Ok(0)
    })
}

/// Makes directory `path`.
#[no_mangle]
pub unsafe extern "C" fn nacre_mkdir(fs: *const nacre_fs, path: *const c_char, mode: u32) -> c_int {
    unsafe { on_path(fs, path, |n, p| n.mkdir(p, mode)) }
}

/// Removes the empty directory `path`.
#[no_mangle]
pub unsafe extern "C" fn nacre_rmdir(fs: *const nacre_fs, path: *const c_char) -> c_int {
    unsafe { on_path(fs, path, |n, p| n.rmdir(p)) }
}

/// Removes the name `path`.
#[no_mangle]
pub unsafe extern "C" fn nacre_unlink(fs: *const nacre_fs, path: *const c_char) -> c_int {
    unsafe { on_path(fs, path, |n, p| n.unlink(p)) }
}

/// Renames `from` to `to`.
#[no_mangle]
pub unsafe extern "C" fn nacre_rename(
    fs: *const nacre_fs,
    from: *const c_char,
    to: *const c_char,
) -> c_int {
    unsafe { on_paths(fs, from, to, |n, a, b| n.rename(a, b)) }
}

/// Makes `path` a hard link to `existing`.
#[no_mangle]
pub unsafe extern "C" fn nacre_link(
    fs: *const nacre_fs,
    existing: *const c_char,
    path: *const c_char,
) -> c_int {
    unsafe { on_paths(fs, existing, path, |n, a, b| n.link(a, b)) }
}

/// Makes `path` a symbolic link holding `target`.
#[no_mangle]
pub unsafe extern "C" fn nacre_symlink(
    fs: *const nacre_fs,
    target: *const c_char,
    path: *const c_char,
) -> c_int {
    unsafe { on_paths(fs, target, path, |n, a, b| n.symlink(a, b)) }
}

/// Puts what the symbolic link `path` holds into `buf` (not NUL-terminated, cut at
/// `len`, as readlink(2)): the count of bytes.
#[no_mangle]
pub unsafe extern "C" fn nacre_readlink(
    fs: *const nacre_fs,
    path: *const c_char,
    buf: *mut c_char,
    len: usize,
) -> i64 {
    guard(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        if buf.is_null() && len > 0 {
            return Err(libc::EFAULT);
        }
        let t = fs.node.readlink(path).map_err(e)?;
        let n = t.len().min(len);
        // SAFETY: `buf` is valid for `len` bytes of writes.
        unsafe { std::ptr::copy_nonoverlapping(t.as_ptr(), buf.cast(), n) };
        Ok(n as i64)
    })
}

/// Creates the empty file `path` striped over `count` OSTs (0: the default; -1 as
/// `UINT32_MAX`: all) in `size`-byte chunks (0: the default), in OST pool `pool` (NULL:
/// none).
#[no_mangle]
pub unsafe extern "C" fn nacre_setstripe(
    fs: *const nacre_fs,
    path: *const c_char,
    count: u32,
    size: u64,
    pool: *const c_char,
    mode: u32,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        let pool = if pool.is_null() {
            None
        } else {
            let p = unsafe { bytes(pool) }?;
            Some(
                std::str::from_utf8(p)
                    .map_err(|_| libc::EINVAL)?
                    .to_string(),
            )
        };
        fs.node
            .setstripe(path, count, size, pool.as_deref(), mode)
            .map_err(e)?;
        Ok(0)
    })
}

/// The layout of the regular file `path`.
#[no_mangle]
pub unsafe extern "C" fn nacre_getstripe(
    fs: *const nacre_fs,
    path: *const c_char,
    out: *mut nacre_stripe,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        // SAFETY: `out` is valid for a write of a whole nacre_stripe.
        let out = unsafe { out.as_mut() }.ok_or(libc::EFAULT)?;
        let s = fs.node.getstripe(path).map_err(e)?;
        let n = s.osts.len().min(NACRE_STRIPES_MAX as usize);
        out.count = n as u32;
        out.size = s.size;
        out.pool = [0; 16];
        for (d, b) in out.pool.iter_mut().zip(s.pool.bytes().take(15)) {
            *d = b as c_char;
        }
        out.osts[..n].copy_from_slice(&s.osts[..n]);
        Ok(0)
    })
}

/// Starts listing directory `path` (every entry but `.` and `..`, in name order, read
/// now); the handle goes to `*out`.
#[no_mangle]
pub unsafe extern "C" fn nacre_opendir(
    fs: *const nacre_fs,
    path: *const c_char,
    out: *mut *mut nacre_dir,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        let path = unsafe { bytes(path) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        let entries = fs.node.readdir(path).map_err(e)?;
        let d = nacre_dir {
            entries,
            next: std::sync::atomic::AtomicUsize::new(0),
        };
        // SAFETY: `out` is valid for a write.
        unsafe { *out = Box::into_raw(Box::new(d)) };
        Ok(0)
    })
}

/// The next entry into `*out`: 1, or 0 at the end.
#[no_mangle]
pub unsafe extern "C" fn nacre_readdir(dir: *const nacre_dir, out: *mut nacre_dirent) -> c_int {
    int(|| {
        let d = unsafe { handle(dir) }?;
        // SAFETY: `out` is valid for a write of a whole nacre_dirent.
        let out = unsafe { out.as_mut() }.ok_or(libc::EFAULT)?;
        let i = d.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(entry) = d.entries.get(i) else {
            return Ok(0);
        };
        out.ino = entry.ino;
        out.kind = entry.kind;
        out.name = [0; 256];
        for (dst, b) in out.name.iter_mut().zip(entry.name.iter().take(255)) {
            *dst = *b as c_char;
        }
        Ok(1)
    })
}

/// Ends a listing and frees its handle.
#[no_mangle]
pub unsafe extern "C" fn nacre_closedir(dir: *mut nacre_dir) -> c_int {
    int(|| {
        if dir.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: a handle of this library, not used again.
        drop(unsafe { Box::from_raw(dir) });
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_pointers_are_efault_and_panics_eio() {
        let mut fs: *mut nacre_fs = std::ptr::null_mut();
        // SAFETY: the calls are given null pointers on purpose.
        unsafe {
            assert_eq!(nacre_connect(std::ptr::null(), &mut fs), -libc::EFAULT);
            assert_eq!(nacre_disconnect(std::ptr::null_mut()), -libc::EFAULT);
            let mut b = [0u8; 4];
            let p = b.as_mut_ptr().cast();
            assert_eq!(
                nacre_pread(std::ptr::null(), p, 4, 0),
                -i64::from(libc::EFAULT)
            );
            assert_eq!(
                nacre_stat(std::ptr::null(), c"x".as_ptr(), std::ptr::null_mut()),
                -libc::EFAULT
            );
        }
        assert_eq!(guard(|| panic!("boom")), -i64::from(libc::EIO));
        assert_eq!(nacre_version(), 1);
    }

    #[test]
    fn connecting_where_no_mount_is_says_enotconn() {
        let dir = std::ffi::CString::new("/").unwrap();
        let mut fs: *mut nacre_fs = std::ptr::null_mut();
        // SAFETY: valid string and out pointer.
        assert_eq!(
            unsafe { nacre_connect(dir.as_ptr(), &mut fs) },
            -libc::ENOTCONN
        );
        assert!(fs.is_null());
    }
}
