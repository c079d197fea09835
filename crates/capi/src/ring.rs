//! Rings from C (docs/api.md): `nacre_ring_*`, over [`nacre_api::Ring`].

use crate::{e, guard, handle, int, nacre_file, nacre_fs};
use std::ffi::{c_int, c_void};

/// A ring (docs/api.md): many requests in flight from one thread, no system call per
/// request. One thread at a time uses a ring (a ring per thread).
pub struct nacre_ring {
    ring: std::sync::Mutex<nacre_api::Ring>,
}

/// A completion: the submission's `user_data` and its result (bytes moved, or a negative
/// errno).
#[repr(C)]
pub struct nacre_cqe {
    /// The submission's `user_data`.
    pub user_data: u64,
    /// Bytes moved, or a negative errno.
    pub result: i64,
}

/// Runs `f` on a ring (`EFAULT` if null).
unsafe fn with_ring(
    ring: *const nacre_ring,
    f: impl FnOnce(&mut nacre_api::Ring) -> Result<i64, i32>,
) -> i64 {
    guard(|| {
        let r = unsafe { handle(ring) }?;
        let mut r = r.ring.lock().map_err(|_| libc::EIO)?;
        f(&mut r)
    })
}

/// Sets up a ring of `entries` (a power of two, at most 4096) with `buffer_bytes` of
/// buffers shared with the node's client; the handle goes to `*out`.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_create(
    fs: *const nacre_fs,
    entries: u32,
    buffer_bytes: u64,
    out: *mut *mut nacre_ring,
) -> c_int {
    int(|| {
        let fs = unsafe { handle(fs) }?;
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        let ring = fs.node.ring(entries, buffer_bytes).map_err(e)?;
        let r = nacre_ring {
            ring: std::sync::Mutex::new(ring),
        };
        // SAFETY: `out` is valid for a write.
        unsafe { *out = Box::into_raw(Box::new(r)) };
        Ok(0)
    })
}

/// The ring's buffers (`buffer_bytes` of them; NULL for a null ring): requests name
/// offsets in them.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_buffers(ring: *const nacre_ring) -> *mut c_void {
    // SAFETY: a live handle (module docs).
    match unsafe { ring.as_ref() } {
        Some(r) => r
            .ring
            .lock()
            .map_or(std::ptr::null_mut(), |g| g.buffers_ptr().cast()),
        None => std::ptr::null_mut(),
    }
}

/// Queues a read or write through the ring (`read`: into the buffers).
unsafe fn prep_io(
    ring: *const nacre_ring,
    file: *const nacre_file,
    read: bool,
    (offset, buf_offset, len, user_data): (u64, u64, u32, u64),
) -> c_int {
    let f = unsafe { file.as_ref() };
    let prep = |r: &mut nacre_api::Ring| {
        let f = &f.ok_or(libc::EFAULT)?.file;
        let queued = if read {
            r.prep_read(f, offset, buf_offset, len, user_data)
        } else {
            r.prep_write(f, offset, buf_offset, len, user_data)
        };
        queued.map(|()| 0).map_err(e)
    };
    (unsafe { with_ring(ring, prep) }) as c_int
}

/// Queues a read of `len` bytes of `file` at `offset` into the buffers at `buf_offset`
/// (`-EBUSY`: the ring is full; `-EFAULT`: outside the buffers).
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_prep_read(
    ring: *const nacre_ring,
    file: *const nacre_file,
    offset: u64,
    buf_offset: u64,
    len: u32,
    user_data: u64,
) -> c_int {
    unsafe { prep_io(ring, file, true, (offset, buf_offset, len, user_data)) }
}

/// Queues a write of `len` bytes from the buffers at `buf_offset` to `file` at `offset`.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_prep_write(
    ring: *const nacre_ring,
    file: *const nacre_file,
    offset: u64,
    buf_offset: u64,
    len: u32,
    user_data: u64,
) -> c_int {
    unsafe { prep_io(ring, file, false, (offset, buf_offset, len, user_data)) }
}

/// Queues an fsync of `file`.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_prep_fsync(
    ring: *const nacre_ring,
    file: *const nacre_file,
    user_data: u64,
) -> c_int {
    let f = unsafe { file.as_ref() };
    (unsafe {
        with_ring(ring, |r| {
            let f = f.ok_or(libc::EFAULT)?;
            r.prep_fsync(&f.file, user_data).map(|()| 0).map_err(e)
        })
    }) as c_int
}

/// Publishes the queued requests as one batch: how many.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_submit(ring: *const nacre_ring) -> c_int {
    (unsafe { with_ring(ring, |r| Ok(r.submit() as i64)) }) as c_int
}

/// Takes up to `max` completions into `out`, waiting until there are `min` (fewer if
/// fewer are in flight) or `timeout_ms` passes (negative: no limit): how many.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_wait(
    ring: *const nacre_ring,
    min: u32,
    out: *mut nacre_cqe,
    max: u32,
    timeout_ms: i64,
) -> c_int {
    let take = |r: &mut nacre_api::Ring| {
        if out.is_null() && max > 0 {
            return Err(libc::EFAULT);
        }
        let mut got = vec![nacre_api::Completion::default(); max as usize];
        let timeout = u64::try_from(timeout_ms)
            .ok()
            .map(std::time::Duration::from_millis);
        let n = r.wait_into(min as usize, &mut got, timeout).map_err(e)?;
        for (i, c) in got[..n].iter().enumerate() {
            // SAFETY: `out` holds `max` entries and `n <= max`.
            unsafe {
                *out.add(i) = nacre_cqe {
                    user_data: c.user_data,
                    result: c.result,
                }
            };
        }
        Ok(n as i64)
    };
    (unsafe { with_ring(ring, take) }) as c_int
}

/// Ends a ring (waiting for nothing: requests in flight still complete into memory the
/// node's client holds) and frees its handle.
#[no_mangle]
pub unsafe extern "C" fn nacre_ring_destroy(ring: *mut nacre_ring) -> c_int {
    int(|| {
        if ring.is_null() {
            return Err(libc::EFAULT);
        }
        // SAFETY: a handle of this library, not used again.
        drop(unsafe { Box::from_raw(ring) });
        Ok(0)
    })
}
