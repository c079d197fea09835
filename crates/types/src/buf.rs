//! A page-aligned, heap-allocated byte buffer, usable as an O_DIRECT I/O buffer.
//!
//! Bulk data is received straight into an `AlignedBuf`, so the OSS can hand it to an O_DIRECT
//! `pwrite` without another copy.

use crate::limits::DIRECT_IO_ALIGN_BYTES;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A byte buffer whose start is aligned to [`DIRECT_IO_ALIGN_BYTES`], with a length and a
/// capacity rounded up to a multiple of that alignment.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let capacity = len.div_ceil(DIRECT_IO_ALIGN_BYTES).max(1) * DIRECT_IO_ALIGN_BYTES;
        let layout = Layout::from_size_align(capacity, DIRECT_IO_ALIGN_BYTES)
            .expect("aligned buffer layout");
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len, capacity }
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_from(data: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(data.len());
        buf.copy_from_slice(data);
        buf
    }

    /// Bytes in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no bytes are in use.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allocated bytes (a multiple of the alignment).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Shrinks or grows the used length within the capacity; new bytes are zero.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity, "AlignedBuf::set_len beyond capacity");
        if len > self.len {
            // SAFETY: range lies within the allocation.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, len - self.len) };
        }
        self.len = len;
    }

    /// The whole allocation, for reads that may fill up to the capacity.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `capacity` bytes, zero-initialised at creation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len <= capacity, memory initialised.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: len <= capacity, memory initialised, unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.capacity, DIRECT_IO_ALIGN_BYTES)
            .expect("aligned buffer layout");
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) };
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::zeroed(10_000);
        assert_eq!(b.as_ptr() as usize % DIRECT_IO_ALIGN_BYTES, 0);
        assert_eq!(b.capacity(), 12_288);
        assert!(b.iter().all(|&x| x == 0));
        b[9_999] = 7;
        b.set_len(4);
        b.set_len(10_000);
        assert_eq!(b[9_999], 0);
    }
}
