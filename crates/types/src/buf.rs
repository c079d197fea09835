//! A heap-allocated byte buffer aligned for direct I/O (4 KiB: `DIRECT_IO_ALIGN_BYTES`, not
//! the page size, which may be larger), usable as an O_DIRECT I/O buffer.
//!
//! Bulk data is received straight into an `AlignedBuf`, so the OSS can hand it to an O_DIRECT
//! `pwrite` without another copy.
//!
//! Large buffers (64 KiB to 16 MiB, rounded up to a power of two) are recycled through a
//! bounded per-size free list instead of going back to the allocator: a fresh large
//! allocation is a fresh mapping, and faulting its pages in cost more than the data copy on
//! every bulk RPC (measured with perf on the self-test read path).
//!
//! The free lists are kept per CPU partition, as Lustre keeps its request buffers and page
//! pools per CPT: a thread declares its partition ([`set_thread_partition`]; service threads
//! and the readers of interface-bound connections do), takes buffers from that partition's
//! lists, and a buffer returns to the lists it came from, so its pages stay with the
//! partition (and NUMA node) that first touched them and partitions never contend on one
//! lock. Threads of no partition share one more set of lists.

use crate::limits::DIRECT_IO_ALIGN_BYTES;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Smallest buffer size that is recycled.
pub const POOL_BYTES_MIN: usize = 64 << 10;
/// Largest buffer size that is recycled.
pub const POOL_BYTES_MAX: usize = 16 << 20;
/// Bytes kept per size class of one partition at most.
pub const POOL_CLASS_BYTES_MAX: usize = 64 << 20;
/// Bytes kept by all pools of the process at most.
pub const POOL_BYTES_TOTAL_MAX: usize = 512 << 20;
/// Partitions with their own pools; partition numbers beyond share them modulo this.
pub const POOL_PARTITIONS_MAX: usize = 16;
const CLASSES: usize = 9; // 64 KiB .. 16 MiB
const SHARDS: usize = POOL_PARTITIONS_MAX + 1; // 0: threads of no partition

struct Free(NonNull<u8>);
// SAFETY: a free buffer is owned by the pool alone.
unsafe impl Send for Free {}

/// One partition's free lists and counters.
struct Shard {
    classes: [Mutex<Vec<Free>>; CLASSES],
    hits: AtomicU64,
    misses: AtomicU64,
    released: AtomicU64,
    pooled_bytes: AtomicUsize,
}

static POOLS: [Shard; SHARDS] = [const {
    Shard {
        classes: [const { Mutex::new(Vec::new()) }; CLASSES],
        hits: AtomicU64::new(0),
        misses: AtomicU64::new(0),
        released: AtomicU64::new(0),
        pooled_bytes: AtomicUsize::new(0),
    }
}; SHARDS];
static POOLED_BYTES_TOTAL: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SHARD: Cell<u8> = const { Cell::new(0) };
}

fn shard_of(partition: Option<usize>) -> u8 {
    partition.map_or(0, |p| (p % POOL_PARTITIONS_MAX + 1) as u8)
}

/// Declares the CPU partition the calling thread serves (None: no partition); its large
/// buffers come from and return to that partition's pools.
pub fn set_thread_partition(partition: Option<usize>) {
    SHARD.with(|s| s.set(shard_of(partition)));
}

/// Counters of one partition's buffer pools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Large buffers handed out from the pool.
    pub hits: u64,
    /// Large buffers that had to be allocated (the pool had none of that size).
    pub misses: u64,
    /// Buffers given back to the allocator because the pool was full.
    pub released: u64,
    /// Bytes held in the free lists now.
    pub pooled_bytes: u64,
}

/// The counters of `partition`'s pools (None: the pools of threads of no partition).
pub fn pool_stats(partition: Option<usize>) -> PoolStats {
    let s = &POOLS[shard_of(partition) as usize];
    PoolStats {
        hits: s.hits.load(Ordering::Relaxed),
        misses: s.misses.load(Ordering::Relaxed),
        released: s.released.load(Ordering::Relaxed),
        pooled_bytes: s.pooled_bytes.load(Ordering::Relaxed) as u64,
    }
}

/// Clears the hit/miss/release counters of every pool (the free lists stay).
pub fn clear_pool_stats() {
    for s in &POOLS {
        s.hits.store(0, Ordering::Relaxed);
        s.misses.store(0, Ordering::Relaxed);
        s.released.store(0, Ordering::Relaxed);
    }
}

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
    /// The partition pool it returns to.
    shard: u8,
    /// Memory it does not own ([`AlignedBuf::external`]): what keeps that memory alive,
    /// let go of (nothing freed) when the buffer drops.
    keep: Option<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
    /// The crc32c of its bytes, when whoever filled it had it at hand; forgotten at any
    /// access that can change them.
    crc32c: Option<u32>,
    /// The crc32c of each of its 4 KiB chunks ([`crate::crc::chunked`]), when whoever
    /// filled it had them at hand; forgotten as `crc32c` is.
    chunk_crc32cs: Option<Box<[u32]>>,
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
        let shard = SHARD.with(Cell::get);
        if let Some(class) = class_of(capacity) {
            let pool = &POOLS[shard as usize];
            let free = pool.classes[class].lock().expect("buffer pool").pop();
            if let Some(Free(ptr)) = free {
                pool.pooled_bytes.fetch_sub(capacity, Ordering::Relaxed);
                POOLED_BYTES_TOTAL.fetch_sub(capacity, Ordering::Relaxed);
                pool.hits.fetch_add(1, Ordering::Relaxed);
                return AlignedBuf {
                    ptr,
                    len,
                    capacity,
                    recycled: true,
                    shard,
                    keep: None,
                    crc32c: None,
                    chunk_crc32cs: None,
                };
            }
            pool.misses.fetch_add(1, Ordering::Relaxed);
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
            shard,
            keep: None,
            crc32c: None,
            chunk_crc32cs: None,
        }
    }

    /// A buffer over `len` bytes at `ptr` that something else owns — a region of a shared
    /// mapping a reply's bulk is to land in, with no copy — kept alive by `keep` while the
    /// buffer lives. Its capacity is `len`; dropping it frees nothing.
    ///
    /// # Safety
    /// `ptr` is valid for reads and writes of `len` bytes, aligned to
    /// [`DIRECT_IO_ALIGN_BYTES`], for as long as `keep` lives, and nothing else writes
    /// there while the buffer lives.
    pub unsafe fn external(
        ptr: NonNull<u8>,
        len: usize,
        keep: std::sync::Arc<dyn std::any::Any + Send + Sync>,
    ) -> AlignedBuf {
        AlignedBuf {
            ptr,
            len,
            capacity: len,
            recycled: true,
            shard: 0,
            keep: Some(keep),
            crc32c: None,
            chunk_crc32cs: None,
        }
    }

    /// Whether its bytes are memory it does not own ([`AlignedBuf::external`]).
    pub fn is_external(&self) -> bool {
        self.keep.is_some()
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
        self.forget_sums();
        assert!(len <= self.capacity, "AlignedBuf::set_len beyond capacity");
        if len > self.len {
            // SAFETY: range lies within the allocation.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, len - self.len) };
        }
        self.len = len;
    }

    /// Records `crc` as the crc32c of its bytes as they are now (computed while they were
    /// checked, say), so a frame sending them needs no pass of its own over them. Any
    /// later access that can change the bytes forgets it. A wrong value is caught by the
    /// receiver's check, as damage on the wire would be.
    pub fn set_crc32c(&mut self, crc: u32) {
        self.crc32c = Some(crc);
    }

    /// The crc32c of its bytes, if recorded ([`AlignedBuf::set_crc32c`]) since they last
    /// could change.
    pub fn known_crc32c(&self) -> Option<u32> {
        self.crc32c
    }

    /// Records `sums` as the crc32c of each of its 4 KiB chunks as they are now (the last
    /// one short if its length ends within a chunk): computed while a frame's bulk was
    /// checked, say, so the object store keeps them without a pass of its own. Forgotten
    /// as [`AlignedBuf::set_crc32c`]'s value is.
    pub fn set_chunk_crc32cs(&mut self, sums: Box<[u32]>) {
        assert_eq!(
            sums.len(),
            self.len.div_ceil(crate::crc::CHUNK_BYTES),
            "a checksum per chunk"
        );
        self.chunk_crc32cs = Some(sums);
    }

    /// The crc32c of each of its 4 KiB chunks, if recorded
    /// ([`AlignedBuf::set_chunk_crc32cs`]) since they last could change.
    pub fn chunk_crc32cs(&self) -> Option<&[u32]> {
        self.chunk_crc32cs.as_deref()
    }

    /// Forgets the recorded checksums (the bytes may change).
    fn forget_sums(&mut self) {
        self.crc32c = None;
        self.chunk_crc32cs = None;
    }

    /// The whole allocation, for reads that may fill up to the capacity (bytes past `len`
    /// are zero for [`AlignedBuf::zeroed`] buffers, unspecified for `for_overwrite` ones).
    pub fn spare_mut(&mut self) -> &mut [u8] {
        self.forget_sums();
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
        self.forget_sums();
        // SAFETY: len <= capacity, memory initialised, unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.keep.is_some() {
            // Not ours to free: the keeper goes with the buffer.
            return;
        }
        if let Some(class) = class_of(self.capacity) {
            let pool = &POOLS[self.shard as usize];
            let mut free = pool.classes[class].lock().expect("buffer pool");
            let total = POOLED_BYTES_TOTAL.load(Ordering::Relaxed) + self.capacity;
            if (free.len() + 1) * self.capacity <= POOL_CLASS_BYTES_MAX
                && total <= POOL_BYTES_TOTAL_MAX
            {
                free.push(Free(self.ptr));
                pool.pooled_bytes
                    .fetch_add(self.capacity, Ordering::Relaxed);
                POOLED_BYTES_TOTAL.fetch_add(self.capacity, Ordering::Relaxed);
                return;
            }
            pool.released.fetch_add(1, Ordering::Relaxed);
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
    fn a_recorded_checksum_is_forgotten_at_any_access_that_can_change_the_bytes() {
        let fresh = |crc| {
            let mut b = AlignedBuf::zeroed(8192);
            b.set_crc32c(crc);
            assert_eq!(b.known_crc32c(), Some(crc));
            b
        };
        let mut b = fresh(1);
        let _ = &b[..]; // reading keeps it
        assert_eq!(b.known_crc32c(), Some(1));
        b[0] = 1;
        assert_eq!(b.known_crc32c(), None);
        let mut b = fresh(2);
        b.set_len(4096);
        assert_eq!(b.known_crc32c(), None);
        let mut b = fresh(3);
        let _ = b.spare_mut();
        assert_eq!(b.known_crc32c(), None);
        let mut b = AlignedBuf::zeroed(8192);
        b.set_chunk_crc32cs(vec![1, 2].into());
        assert_eq!(b.chunk_crc32cs(), Some(&[1, 2][..]));
        b[4096] = 1;
        assert_eq!(b.chunk_crc32cs(), None);
        assert_eq!(
            AlignedBuf::for_overwrite(4096).known_crc32c(),
            None,
            "pooled or new"
        );
    }

    #[test]
    fn an_external_buffer_reads_and_writes_its_owners_memory_and_frees_nothing() {
        let owner = std::sync::Arc::new(AlignedBuf::zeroed(8192));
        let ptr = NonNull::new(owner.as_ptr() as *mut u8).unwrap();
        // SAFETY: the owner's 8,192 aligned bytes, kept alive by the keeper clone.
        let mut b = unsafe { AlignedBuf::external(ptr, 8192, owner.clone()) };
        assert!(b.is_external() && !owner.is_external());
        assert_eq!((b.len(), b.capacity()), (8192, 8192));
        b[..3].copy_from_slice(b"abc");
        b.set_len(10);
        assert_eq!(&b[..3], b"abc");
        assert_eq!(std::sync::Arc::strong_count(&owner), 2);
        drop(b);
        assert_eq!(std::sync::Arc::strong_count(&owner), 1, "the keeper let go");
        assert_eq!(&owner[..3], b"abc", "written in place");
    }

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
    fn each_partition_recycles_its_own_buffers() {
        // Runs in its own threads so other tests' buffers do not mix in. A size class no
        // other test uses.
        let size = 8 << 20;
        let on = |p: Option<usize>, f: Box<dyn FnOnce() + Send>| {
            std::thread::spawn(move || {
                set_thread_partition(p);
                f()
            })
            .join()
            .unwrap()
        };
        let before = pool_stats(Some(3));
        // Allocated on partition 3, dropped on partition 5's thread: returns to partition 3.
        let buf = std::thread::spawn(move || {
            set_thread_partition(Some(3));
            AlignedBuf::for_overwrite(size)
        })
        .join()
        .unwrap();
        let addr = buf.as_ptr() as usize;
        on(Some(5), Box::new(move || drop(buf)));
        let p3 = pool_stats(Some(3));
        assert_eq!(p3.misses, before.misses + 1);
        assert_eq!(p3.pooled_bytes, before.pooled_bytes + size as u64);
        // Partition 5 does not get it; partition 3 does.
        on(
            Some(5),
            Box::new(move || {
                assert_ne!(AlignedBuf::for_overwrite(size).as_ptr() as usize, addr);
            }),
        );
        on(
            Some(3),
            Box::new(move || {
                assert_eq!(AlignedBuf::for_overwrite(size).as_ptr() as usize, addr);
            }),
        );
        assert_eq!(pool_stats(Some(3)).hits, before.hits + 1);
        assert_eq!(
            pool_stats(Some(3 + POOL_PARTITIONS_MAX)),
            pool_stats(Some(3)),
            "partition numbers wrap onto the bounded set of pools"
        );
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
