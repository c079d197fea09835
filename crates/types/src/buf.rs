//! A page-aligned, heap-allocated byte buffer, usable as an O_DIRECT I/O buffer.
//!
//! Bulk data is received straight into an `AlignedBuf`, so the OSS can hand it to an O_DIRECT
//! `pwrite` without another copy.
//!
//! Large buffers (64 KiB to 16 MiB, rounded up to a power of two) are recycled through a
//! bounded per-size free list instead of going back to the allocator: a fresh large
//! allocation is a fresh mapping, and faulting its pages in cost more than the data copy on
//! every bulk RPC (measured with perf on the self-test read path).

use crate::limits::DIRECT_IO_ALIGN_BYTES;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

/// Smallest buffer size that is recycled.
pub const POOL_BYTES_MIN: usize = 64 << 10;
/// Largest buffer size that is recycled.
pub const POOL_BYTES_MAX: usize = 16 << 20;
/// Bytes kept per size class at most.
pub const POOL_CLASS_BYTES_MAX: usize = 64 << 20;
const CLASSES: usize = 9; // 64 KiB .. 16 MiB

struct Free(NonNull<u8>);
// SAFETY: a free buffer is owned by the pool alone.
unsafe impl Send for Free {}

static POOL: [Mutex<Vec<Free>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

/// The pool class of an allocation of `capacity` bytes, if it is recycled.
fn class_of(capacity: usize) -> Option<usize> {
    (capacity.is_power_of_two() && (POOL_BYTES_MIN..=POOL_BYTES_MAX).contains(&capacity))
        .then(|| (capacity.trailing_zeros() - POOL_BYTES_MIN.trailing_zeros()) as usize)
}

fn layout(capacity: usize) -> Layout {
    Layout::from_size_align(capacity, DIRECT_IO_ALIGN_BYTES).expect("aligned buffer layout")
}

/// A byte buffer whose start is aligned to [`DIRECT_IO_ALIGN_BYTES`], with a length and a
/// capacity rounded up to a multiple of that alignment.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
    /// Came from the pool (its bytes may be an earlier buffer's).
    recycled: bool,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        let b = AlignedBuf::for_overwrite(len);
        if b.recycled {
            // SAFETY: the whole allocation is ours.
            unsafe { std::ptr::write_bytes(b.ptr.as_ptr(), 0, b.capacity) };
        }
        b
    }

    /// A buffer of `len` bytes whose contents are unspecified (zero, or bytes of an earlier
    /// buffer): for receiving data that overwrites all of it. Large sizes come from the
    /// recycling pool without touching their pages.
    pub fn for_overwrite(len: usize) -> AlignedBuf {
        let mut capacity = len.div_ceil(DIRECT_IO_ALIGN_BYTES).max(1) * DIRECT_IO_ALIGN_BYTES;
        if (POOL_BYTES_MIN / 2 + 1..=POOL_BYTES_MAX).contains(&capacity) {
            capacity = capacity.next_power_of_two().max(POOL_BYTES_MIN);
        }
        if let Some(class) = class_of(capacity) {
            if let Some(Free(ptr)) = POOL[class].lock().expect("buffer pool").pop() {
                return AlignedBuf {
                    ptr,
                    len,
                    capacity,
                    recycled: true,
                };
            }
        }
        let layout = layout(capacity);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            capacity,
            recycled: false,
        }
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

    /// The whole allocation, for reads that may fill up to the capacity (bytes past `len`
    /// are zero for [`AlignedBuf::zeroed`] buffers, unspecified for `for_overwrite` ones).
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `capacity` bytes, initialised at creation (zeroed) and
        // only ever written with bytes since.
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
        if let Some(class) = class_of(self.capacity) {
            let mut free = POOL[class].lock().expect("buffer pool");
            if (free.len() + 1) * self.capacity <= POOL_CLASS_BYTES_MAX {
                free.push(Free(self.ptr));
                return;
            }
        }
        // SAFETY: allocated in `for_overwrite` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout(self.capacity)) };
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
    fn large_buffers_are_recycled_and_zeroed_again() {
        let mut a = AlignedBuf::zeroed(1 << 20);
        a.fill(0xee);
        drop(a);
        // The dirty buffer went back to the pool; whichever of these gets it must see zeros.
        let bufs: Vec<AlignedBuf> = (0..4).map(|_| AlignedBuf::zeroed(1 << 20)).collect();
        assert!(
            bufs.iter().all(|b| b.iter().all(|&x| x == 0)),
            "zeroed means zeroed"
        );
        assert!(bufs.iter().all(|b| b.capacity() == 1 << 20));
        let odd = AlignedBuf::for_overwrite(47_008 * 3);
        assert_eq!(odd.capacity(), 256 << 10, "rounded to its pool class");
        assert_eq!(odd.len(), 47_008 * 3);
        let small = AlignedBuf::zeroed(10_000);
        assert_eq!(small.capacity(), 12_288, "small buffers are not pooled");
        assert_eq!(class_of(64 << 10), Some(0));
        assert_eq!(class_of(16 << 20), Some(8));
        assert_eq!(class_of(32 << 20), None);
        assert_eq!(class_of(12_288), None);
    }

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
