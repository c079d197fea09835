//! OST objects as files: `ROOT/O/<seq>/d<id % 32>/<id>`.
//!
//! Aligned writes and reads go through an O_DIRECT descriptor (no page cache on the OSS: the
//! CEA studies lost 10-20% bandwidth to page-cache reclaim); unaligned parts use a buffered
//! descriptor of the same file, which the kernel keeps coherent with the direct one.
//!
//! Every object's data is checksummed at rest (crc32c per 4 KiB chunk in `<id>.crc`, see
//! [`crate::csum`]): reads verify what they return, and a chunk that does not match is an
//! error ([`OsdError::Corrupt`]), never data.

use crate::csum::{self, Slot, CSUM_CHUNK_BYTES};
use crate::ranges::{RangeLocks, WHOLE};
use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{AlignedBuf, ObjectId, Owner, StatFs};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Open objects kept in the descriptor cache.
pub const OPEN_OBJECTS_MAX: usize = 1024;

/// Errors of the object store.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    /// I/O error on the local file system (ENOSPC included).
    #[error("object {object}: {source}")]
    Io {
        /// Object.
        object: String,
        /// Error.
        source: std::io::Error,
    },
    /// Stored data does not match its checksum (a bit flipped on the disk, a stray write).
    #[error("object {object}: data at offset {offset} does not match its checksum")]
    Corrupt {
        /// Object.
        object: String,
        /// First byte of the damaged 4 KiB chunk.
        offset: u64,
    },
}

impl OsdError {
    /// The errno this error maps to (EIO for corrupt data).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            OsdError::Io { source, .. } => source.raw_os_error(),
            OsdError::Corrupt { .. } => Some(libc::EIO),
        }
    }

    /// The underlying I/O error (EIO for corrupt data).
    pub fn io(&self) -> std::io::Error {
        match self {
            OsdError::Io { source, .. } => match source.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
            OsdError::Corrupt { .. } => std::io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

struct OpenObject {
    buffered: File,
    direct: Option<File>,
    /// The checksum sidecar.
    sums: File,
    /// The object's owner as recorded (`None`: not looked at yet; `Some(None)`: none
    /// recorded). Read and changed under the object's change lock.
    owner: Mutex<Option<Option<Owner>>>,
}

impl OpenObject {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.buffered.metadata()?.len())
    }

    /// Bytes of the blocks the object holds (what quotas charge).
    fn space(&self) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.buffered.metadata()?.blocks() * 512)
    }

    /// The owner recorded on the object (`None`: none), read once.
    fn recorded_owner(&self) -> std::io::Result<Option<Owner>> {
        let mut cached = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = *cached {
            return Ok(o);
        }
        let o = match read_owner(&self.buffered) {
            Ok(o) => o,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => None,
            Err(e) => return Err(e),
        };
        *cached = Some(o);
        Ok(o)
    }

    fn set_recorded_owner(&self, owner: Owner) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(Some(owner));
    }
}

/// Chunks of an object a change holds ([`ObjectStore::change`]), given back when it drops.
struct Change<'a> {
    store: &'a ObjectStore,
    object: ObjectId,
    range: std::ops::Range<u64>,
    /// The object, when the change is charged to its owner.
    o: Option<Arc<OpenObject>>,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        let object = self.object;
        let settle = |before: u64| {
            let Some(o) = &self.o else { return };
            match o.space() {
                Ok(after) => {
                    let owner = o.recorded_owner().ok().flatten().unwrap_or_default();
                    self.store.usage.charge(owner, after as i64 - before as i64);
                }
                Err(e) => tracing::error!("object {object}: its space after a change: {e}"),
            }
        };
        self.store.ranges.give(object, self.range.clone(), &settle);
    }
}

/// An OST's object store.
pub struct ObjectStore {
    root: PathBuf,
    direct_io: AtomicBool,
    open: Mutex<HashMap<ObjectId, Arc<OpenObject>>>,
    /// Reads refused because data did not match its checksum.
    corrupt_chunks: AtomicU64,
    /// Reads that went to the disk together with others (`read_many`).
    reads_together: AtomicU64,
    /// The chunks each change holds (data and checksums together), and the whole objects
    /// held by re-checks after a mismatch. Kept apart from the descriptor cache, which may
    /// evict and reopen an object while a change on it runs.
    ranges: RangeLocks,
    /// Space used per user, group and project (counted at open, kept by every change).
    usage: crate::usage::Usage,
}

fn is_aligned(x: u64) -> bool {
    x.is_multiple_of(DIRECT_IO_ALIGN_BYTES as u64)
}

/// `buf` with the checksum of its bytes, when known.
fn with_crc(mut buf: AlignedBuf, crc: Option<u32>) -> AlignedBuf {
    if let Some(crc) = crc {
        buf.set_crc32c(crc);
    }
    buf
}

/// An empty read (an object that does not exist).
fn empty() -> AlignedBuf {
    let mut buf = AlignedBuf::for_overwrite(0);
    buf.set_len(0);
    buf
}

/// Reads into `buf`'s spare capacity from byte `got` on, until `len` bytes or the end of
/// the file (`direct`: whole blocks, so a read ending off a block boundary is the end);
/// the bytes read in all.
fn fill(
    file: &File,
    direct: bool,
    buf: &mut AlignedBuf,
    mut got: usize,
    len: usize,
    offset: u64,
) -> std::io::Result<usize> {
    let want = match direct {
        true => len.div_ceil(DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES,
        false => len,
    };
    while got < len {
        let n = match file.read_at(&mut buf.spare_mut()[got..want], offset + got as u64) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        got += n;
        if direct && !got.is_multiple_of(DIRECT_IO_ALIGN_BYTES) {
            break;
        }
    }
    Ok(got)
}

impl ObjectStore {
    /// Opens the object store under `root` (created if missing).
    /// Every object is counted for quotas first ([`crate::usage`]).
    pub fn open(root: &Path) -> std::io::Result<ObjectStore> {
        std::fs::create_dir_all(root.join("O"))?;
        let started = std::time::Instant::now();
        let (usage, objects) = crate::usage::Usage::count(root)?;
        tracing::info!(
            "{}: {objects} objects counted for quotas in {} ms",
            root.display(),
            started.elapsed().as_millis()
        );
        Ok(ObjectStore {
            root: root.to_path_buf(),
            direct_io: AtomicBool::new(true),
            open: Mutex::new(HashMap::new()),
            corrupt_chunks: AtomicU64::new(0),
            reads_together: AtomicU64::new(0),
            ranges: RangeLocks::default(),
            usage,
        })
    }

    /// Space used per user, group and project.
    pub fn usage(&self) -> &crate::usage::Usage {
        &self.usage
    }

    /// Counts every object again and compares with the usage kept (`nacre lfsck
    /// --quota`); with `repair`, the count replaces it. Every change of the store waits
    /// while it counts (the count and the usage it is compared with are of the same
    /// moment).
    pub fn quota_check(&self, repair: bool) -> std::io::Result<nacre_types::QuotaCheck> {
        struct Frozen<'a>(&'a RangeLocks);
        impl Drop for Frozen<'_> {
            fn drop(&mut self) {
                self.0.thaw();
            }
        }
        self.ranges.freeze();
        let _frozen = Frozen(&self.ranges);
        let (counted, objects) = crate::usage::Usage::count(&self.root)?;
        let mut check =
            nacre_types::QuotaCheck::compare(&counted.snapshot(), &self.usage.snapshot());
        if repair && check.diffs_total > 0 {
            self.usage.replace(counted);
            check.repaired = true;
            tracing::warn!(
                "{}: quota usage of {} ids repaired ({objects} objects counted)",
                self.root.display(),
                check.diffs_total
            );
        }
        Ok(check)
    }

    /// Holds chunks `range` of `object` ([`WHOLE`]: all of it) for a change. With `o`, the
    /// space the change takes or frees is charged to the object's owner (`default` if none
    /// is recorded; the change may record one) when the last change of the object running
    /// lets go.
    fn change(
        &self,
        object: ObjectId,
        range: std::ops::Range<u64>,
        o: Option<&Arc<OpenObject>>,
    ) -> Change<'_> {
        let measure = o.map(|o| {
            move || match o.space() {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!("object {object}: its space before a change: {e}");
                    None
                }
            }
        });
        self.ranges.take(
            object,
            range.clone(),
            measure.as_ref().map(|f| f as &dyn Fn() -> Option<u64>),
        );
        Change {
            store: self,
            object,
            range,
            o: o.cloned(),
        }
    }

    /// Turns the direct-I/O path on or off (the `osd.*.direct_io` setting).
    pub fn set_direct_io(&self, on: bool) {
        self.direct_io.store(on, Ordering::Relaxed);
        self.open.lock().expect("open objects").clear();
    }

    /// True if aligned I/O bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.direct_io.load(Ordering::Relaxed)
    }

    /// Path of an object's file.
    pub fn path(&self, object: ObjectId) -> PathBuf {
        self.root
            .join("O")
            .join(object.seq.to_string())
            .join(format!("d{}", object.id % 32))
            .join(object.id.to_string())
    }

    /// Where an object's checksums are kept.
    pub fn sums_path(&self, object: ObjectId) -> PathBuf {
        let mut p = self.path(object);
        p.set_extension("crc");
        p
    }

    /// Reads that found data not matching its checksum.
    pub fn corrupt_chunks(&self) -> u64 {
        self.corrupt_chunks.load(Ordering::Relaxed)
    }

    /// Writes that ran beside another write of the same object since start (of disjoint
    /// chunks, see [`ObjectStore::write`]).
    pub fn writes_together(&self) -> u64 {
        self.ranges.together()
    }

    /// Reads submitted to the disk together with others since start
    /// ([`ObjectStore::read_many`]).
    pub fn reads_together(&self) -> u64 {
        self.reads_together.load(Ordering::Relaxed)
    }

    fn err(object: ObjectId, source: std::io::Error) -> OsdError {
        OsdError::Io {
            object: object.to_string(),
            source,
        }
    }

    fn get(&self, object: ObjectId, create: bool) -> Result<Option<Arc<OpenObject>>, OsdError> {
        if let Some(o) = self.open.lock().expect("open objects").get(&object) {
            return Ok(Some(o.clone()));
        }
        let path = self.path(object);
        let buffered = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| Self::err(object, e))?;
                }
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|e| Self::err(object, e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::err(object, e)),
        };
        let direct = if self.direct_io() {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .ok()
        } else {
            None
        };
        let sums = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.sums_path(object))
            .map_err(|e| Self::err(object, e))?;
        let o = Arc::new(OpenObject {
            buffered,
            direct,
            sums,
            owner: Mutex::new(None),
        });
        let mut open = self.open.lock().expect("open objects");
        if open.len() >= OPEN_OBJECTS_MAX {
            if let Some(k) = open.keys().next().copied() {
                open.remove(&k);
            }
        }
        open.insert(object, o.clone());
        Ok(Some(o))
    }

    /// Writes `data` at `offset`, creating the object. `data` should be page-aligned in memory
    /// (an [`AlignedBuf`]) for the direct path to be taken. An object with no recorded owner
    /// takes `owner` (the writer's view of its file's owner); one that has an owner keeps it.
    /// Writes of disjoint whole 4 KiB chunks of an object that has an owner run together.
    pub fn write(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        owner: Owner,
    ) -> Result<(), OsdError> {
        self.write_summed(object, offset, data, None, owner)
    }

    /// [`ObjectStore::write`] of a buffer, taking the checksums of its chunks from it when
    /// it has them ([`AlignedBuf::chunk_crc32cs`], kept when a frame's bulk was checked)
    /// instead of going over its bytes again.
    pub fn write_buf(
        &self,
        object: ObjectId,
        offset: u64,
        data: &AlignedBuf,
        owner: Owner,
    ) -> Result<(), OsdError> {
        self.write_summed(object, offset, data, data.chunk_crc32cs(), owner)
    }

    /// A write; `sums`: the crc32c of each 4 KiB chunk of `data`, when known.
    ///
    /// A write of whole chunks holds only those chunks, so writes of disjoint chunks of one
    /// object run together. It touches no chunk outside its own when the object already
    /// has an owner recorded and its size does not end inside a chunk before the write (a
    /// write past such an end would grow that chunk with zeros). The size cannot come to
    /// end inside a chunk while chunks are held: only changes holding the whole object can
    /// make it so. Any other write holds the whole object.
    fn write_summed(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        sums: Option<&[u32]>,
        owner: Owner,
    ) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let end = offset + data.len() as u64;
        if !data.is_empty()
            && offset.is_multiple_of(CSUM_CHUNK_BYTES)
            && end.is_multiple_of(CSUM_CHUNK_BYTES)
        {
            let chunks = offset / CSUM_CHUNK_BYTES..end / CSUM_CHUNK_BYTES;
            let change = self.change(object, chunks, Some(&o));
            let size = o.size().map_err(|e| Self::err(object, e))?;
            let owned = matches!(o.recorded_owner(), Ok(Some(_)));
            if owned && (size.is_multiple_of(CSUM_CHUNK_BYTES) || size >= offset) {
                return self.write_locked(&o, object, size, offset, data, sums);
            }
            drop(change);
        }
        let _change = self.change(object, WHOLE, Some(&o));
        match o.recorded_owner() {
            Ok(Some(_)) => {}
            Ok(None) => match write_owner(&o.buffered, owner) {
                Ok(()) => o.set_recorded_owner(owner),
                Err(e) => owner_unsupported(object, e)?,
            },
            Err(e) => owner_unsupported(object, e)?,
        }
        let size = o.size().map_err(|e| Self::err(object, e))?;
        self.write_locked(&o, object, size, offset, data, sums)
    }

    /// The write of [`ObjectStore::write_summed`], its range held; `size`: the object's
    /// size, read with the range held.
    fn write_locked(
        &self,
        o: &OpenObject,
        object: ObjectId,
        size: u64,
        offset: u64,
        data: &[u8],
        sums: Option<&[u32]>,
    ) -> Result<(), OsdError> {
        let end = offset + data.len() as u64;
        let after = size.max(end);
        let overlay = |c: u64, chunk: &mut [u8]| {
            let cs = c * CSUM_CHUNK_BYTES;
            let from = offset.max(cs);
            let to = end.min(cs + chunk.len() as u64);
            if from < to {
                chunk[(from - cs) as usize..(to - cs) as usize]
                    .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            }
        };
        // Chunks the write covers whole are checksummed straight from the data, or have
        // their checksums from it already (a whole chunk of `data` that is a whole chunk
        // of the object: the write starts on a chunk).
        let whole = |c: u64, len: usize| {
            let cs = c * CSUM_CHUNK_BYTES;
            if cs < offset || cs + len as u64 > end {
                return None;
            }
            let at = (cs - offset) as usize;
            let bytes = &data[at..at + len];
            let known = sums
                .filter(|_| {
                    len as u64 == CSUM_CHUNK_BYTES && (at as u64).is_multiple_of(CSUM_CHUNK_BYTES)
                })
                .and_then(|s| s.get(at / CSUM_CHUNK_BYTES as usize).copied());
            debug_assert!(known.is_none_or(|k| k == crc32c::crc32c(bytes)));
            Some(known.unwrap_or_else(|| crc32c::crc32c(bytes)))
        };
        self.resum(o, size, after, offset..end, &overlay, &whole)
            .map_err(|e| Self::err(object, e))?;
        let mem_aligned = (data.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGN_BYTES);
        let direct_len = (data.len() / DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES;
        let mut done = 0;
        if let (Some(direct), true, true) = (&o.direct, mem_aligned, is_aligned(offset)) {
            if direct_len > 0 {
                direct
                    .write_all_at(&data[..direct_len], offset)
                    .map_err(|e| Self::err(object, e))?;
                done = direct_len;
            }
        }
        if done < data.len() {
            o.buffered
                .write_all_at(&data[done..], offset + done as u64)
                .map_err(|e| Self::err(object, e))?;
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset`; shorter at the end of the object, empty if the
    /// object does not exist.
    pub fn read(&self, object: ObjectId, offset: u64, len: usize) -> Result<AlignedBuf, OsdError> {
        let Some(o) = self.get(object, false)? else {
            return Ok(empty());
        };
        let buf = self.read_raw(&o, object, offset, len)?;
        self.checked(&o, object, offset, len, buf)
    }

    /// Reads each of `reads` (object, offset, length) as [`ObjectStore::read`] does, in
    /// order. The direct reads among them go to the disk at once (one system call, one
    /// sleep for all: see uring.rs) when there are several.
    pub fn read_many(&self, reads: &[(ObjectId, u64, usize)]) -> Vec<Result<AlignedBuf, OsdError>> {
        let opened: Vec<Result<Option<Arc<OpenObject>>, OsdError>> = reads
            .iter()
            .map(|&(object, _, _)| self.get(object, false))
            .collect();
        // The aligned direct reads, with the index of the request each serves.
        let mut batch = Vec::new();
        let mut slot_of = vec![None; reads.len()];
        for (i, (&(_, offset, len), o)) in reads.iter().zip(&opened).enumerate() {
            let Ok(Some(o)) = o else { continue };
            let Some(direct) = o.direct.as_ref().filter(|_| is_aligned(offset) && len > 0) else {
                continue;
            };
            slot_of[i] = Some(batch.len());
            batch.push(crate::uring::Read {
                fd: std::os::fd::AsRawFd::as_raw_fd(direct),
                buf: AlignedBuf::for_overwrite(len),
                want: len.div_ceil(DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES,
                offset,
                result: None,
            });
        }
        if batch.len() < 2 || !crate::uring::read_all(&mut batch) {
            batch.clear();
            slot_of.fill(None);
        }
        self.reads_together
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let mut batch: Vec<Option<crate::uring::Read>> = batch.into_iter().map(Some).collect();
        reads
            .iter()
            .zip(opened)
            .zip(slot_of)
            .map(|((&(object, offset, len), o), slot)| {
                let Some(o) = o? else {
                    return Ok(empty());
                };
                let buf = match slot.and_then(|j| batch[j].take()) {
                    Some(r) => self.finish_read(&o, object, r, len)?,
                    None => self.read_raw(&o, object, offset, len)?,
                };
                self.checked(&o, object, offset, len, buf)
            })
            .collect()
    }

    /// A direct read that went to the ring: its bytes, read on to `len` (as `read_raw`
    /// does) if the disk gave fewer without reaching the end.
    fn finish_read(
        &self,
        o: &OpenObject,
        object: ObjectId,
        r: crate::uring::Read,
        len: usize,
    ) -> Result<AlignedBuf, OsdError> {
        let mut buf = r.buf;
        let got = match r.result {
            Some(Ok(n)) => n.min(len),
            Some(Err(e))
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
                ) =>
            {
                return Err(Self::err(object, e))
            }
            _ => 0,
        };
        let direct = o.direct.as_ref().expect("a ring read is direct");
        let got = match got >= len || (got > 0 && !got.is_multiple_of(DIRECT_IO_ALIGN_BYTES)) {
            true => got,
            false => fill(direct, true, &mut buf, got, len, r.offset)
                .map_err(|e| Self::err(object, e))?,
        };
        buf.set_len(got.min(len));
        Ok(buf)
    }

    /// `buf`, read from `o` at `offset`, if its checksums say it is what was written. A
    /// mismatch is looked at again with changes held off (one may have run between the
    /// data and checksum reads) before the data is called corrupt. The buffer carries the
    /// checksum of its bytes when the check gave it ([`AlignedBuf::known_crc32c`]).
    fn checked(
        &self,
        o: &OpenObject,
        object: ObjectId,
        offset: u64,
        len: usize,
        mut buf: AlignedBuf,
    ) -> Result<AlignedBuf, OsdError> {
        let bad = match self.verify(o, offset, &buf) {
            Ok(crc) => return Ok(with_crc(buf, crc)),
            Err(bad) => bad,
        };
        let _change = self.change(object, WHOLE, None);
        buf = self.read_raw(o, object, offset, len)?;
        match self.verify(o, offset, &buf) {
            Ok(crc) => Ok(with_crc(buf, crc)),
            Err(_) => {
                tracing::error!(
                    "object {object}: data at offset {bad} does not match its checksum"
                );
                self.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
                Err(OsdError::Corrupt {
                    object: object.to_string(),
                    offset: bad,
                })
            }
        }
    }

    /// Checks the chunks under `buf` (read at `offset`) against their checksums. Ok: the
    /// checksum of all of `buf` when the check had it at hand (a read from the start of a
    /// chunk: the chunks' checksums appended, no second pass over the data); Err: the
    /// first byte of a chunk that does not match.
    fn verify(&self, o: &OpenObject, offset: u64, buf: &[u8]) -> Result<Option<u32>, u64> {
        if buf.is_empty() {
            return Ok(None);
        }
        let range = csum::chunks(offset, buf.len() as u64);
        let slots = csum::read_slots(&o.sums, range.clone()).map_err(|_| offset)?;
        if slots.iter().all(|s| s.unknown()) {
            return Ok(None);
        }
        let size = o.size().map_err(|_| offset)?;
        let end = offset + buf.len() as u64;
        // The checksum of `buf` so far: kept only for a read starting on a chunk.
        let keep_whole = offset.is_multiple_of(CSUM_CHUNK_BYTES);
        let mut whole = None;
        for (c, slot) in range.zip(slots) {
            let cs = c * CSUM_CHUNK_BYTES;
            let len = csum::chunk_len(c, size);
            // The part of `buf` in this chunk.
            let part = &buf[(cs.max(offset) - offset) as usize
                ..((cs + CSUM_CHUNK_BYTES).min(end) - offset) as usize];
            let mut part_crc = None;
            if !slot.unknown() {
                let ok = if offset <= cs && cs + len as u64 <= end {
                    let at = (cs - offset) as usize;
                    let crc = crc32c::crc32c(&buf[at..at + len]);
                    part_crc = (part.len() == len).then_some(crc);
                    slot.matches(crc)
                } else {
                    // An edge chunk the read covers only in part: read it whole.
                    let chunk = csum::read_chunk(&o.buffered, c, size, len).map_err(|_| cs)?;
                    slot.accepts(&chunk)
                };
                if !ok {
                    return Err(cs);
                }
            }
            if keep_whole {
                let crc = part_crc.unwrap_or_else(|| crc32c::crc32c(part));
                whole = Some(match whole {
                    None => crc,
                    Some(before) => nacre_types::crc::append(before, crc, part.len()),
                });
            }
        }
        Ok(whole)
    }

    /// Recomputes the checksums of a change, before its data is written: chunks in
    /// `changed` (their new content: the old bytes, `overlay` applied; or, from `whole`,
    /// the checksum of the content a change gives a chunk entire), and the chunk the size
    /// falls in when the size goes from `size` to `after`. Slots past the new end are
    /// dropped.
    fn resum(
        &self,
        o: &OpenObject,
        size: u64,
        after: u64,
        changed: std::ops::Range<u64>,
        overlay: &dyn Fn(u64, &mut [u8]),
        whole: &dyn Fn(u64, usize) -> Option<u32>,
    ) -> std::io::Result<()> {
        let live_end = after.div_ceil(CSUM_CHUNK_BYTES);
        if after < size {
            csum::truncate_slots(&o.sums, live_end)?;
        }
        let mut touched: Vec<u64> = if changed.is_empty() {
            Vec::new()
        } else {
            csum::chunks(changed.start, changed.end - changed.start).collect()
        };
        // The chunk holding the old end grows (zeros) or the new end cuts a chunk.
        for edge in [size, after] {
            if !edge.is_multiple_of(CSUM_CHUNK_BYTES) && size != after {
                touched.push(edge / CSUM_CHUNK_BYTES);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        touched.retain(|&c| c < live_end);
        let Some((&first, &last)) = touched.first().zip(touched.last()) else {
            return Ok(());
        };
        let old = csum::read_slots(&o.sums, first..last + 1)?;
        let mut new = old.clone();
        for &c in &touched {
            let len = csum::chunk_len(c, after);
            let i = (c - first) as usize;
            new[i] = match whole(c, len) {
                Some(crc) => old[i].next_sum(crc),
                None => {
                    let mut chunk = csum::read_chunk(&o.buffered, c, size, len)?;
                    overlay(c, &mut chunk);
                    old[i].next(&chunk)
                }
            };
        }
        // Only the touched slots change; runs between them are rewritten unchanged.
        let slots: &[Slot] = &new;
        csum::write_slots(&o.sums, first, slots)
    }

    /// Reads up to `len` bytes at `offset` from the file, unchecked.
    fn read_raw(
        &self,
        o: &OpenObject,
        object: ObjectId,
        offset: u64,
        len: usize,
    ) -> Result<AlignedBuf, OsdError> {
        // Every byte exposed is read from the file (the length is cut to what was read).
        let mut buf = AlignedBuf::for_overwrite(len);
        let use_direct = o.direct.is_some() && is_aligned(offset);
        let file = match use_direct {
            true => o.direct.as_ref().expect("direct"),
            false => &o.buffered,
        };
        let got =
            fill(file, use_direct, &mut buf, 0, len, offset).map_err(|e| Self::err(object, e))?;
        buf.set_len(got.min(len));
        Ok(buf)
    }

    /// Size and allocated 512-byte blocks; (0, 0) if the object does not exist.
    pub fn size(&self, object: ObjectId) -> Result<(u64, u64), OsdError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(self.path(object)) {
            Ok(m) => Ok((m.len(), m.blocks())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
            Err(e) => Err(Self::err(object, e)),
        }
    }

    /// Sets the object's size (creating it if needed).
    pub fn punch(&self, object: ObjectId, size: u64) -> Result<(), OsdError> {
        if size == 0 && self.get(object, false)?.is_none() {
            return Ok(());
        }
        let o = self.get(object, true)?.expect("created");
        let _change = self.change(object, WHOLE, Some(&o));
        let old = o.size().map_err(|e| Self::err(object, e))?;
        self.resum(&o, old, size, 0..0, &|_, _| {}, &|_, _| None)
            .map_err(|e| Self::err(object, e))?;
        o.buffered.set_len(size).map_err(|e| Self::err(object, e))
    }

    /// Preallocates (or with `punch_hole` deallocates) a range.
    pub fn fallocate(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let _change = self.change(object, WHOLE, Some(&o));
        self.fallocate_locked(&o, object, offset, len, keep_size, punch_hole)
    }

    fn fallocate_locked(
        &self,
        o: &OpenObject,
        object: ObjectId,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<(), OsdError> {
        use std::os::fd::AsRawFd;
        let size = o.size().map_err(|e| Self::err(object, e))?;
        let end = offset.saturating_add(len);
        let after = if keep_size || punch_hole {
            size
        } else {
            size.max(end)
        };
        // A punched hole reads as zeros; preallocation changes no byte (but may grow the size).
        let hole = if punch_hole {
            offset..end.min(size)
        } else {
            0..0
        };
        let zero = |c: u64, chunk: &mut [u8]| {
            let cs = c * CSUM_CHUNK_BYTES;
            let from = offset.max(cs);
            let to = end.min(cs + chunk.len() as u64);
            if punch_hole && from < to {
                chunk[(from - cs) as usize..(to - cs) as usize].fill(0);
            }
        };
        self.resum(o, size, after, hole, &zero, &|_, _| None)
            .map_err(|e| Self::err(object, e))?;
        let mut mode = 0;
        if keep_size || punch_hole {
            mode |= libc::FALLOC_FL_KEEP_SIZE;
        }
        if punch_hole {
            mode |= libc::FALLOC_FL_PUNCH_HOLE;
        }
        // SAFETY: plain syscall on an owned, open descriptor.
        let rc =
            unsafe { libc::fallocate(o.buffered.as_raw_fd(), mode, offset as i64, len as i64) };
        if rc != 0 {
            return Err(Self::err(object, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Makes the object's data durable.
    pub fn sync(&self, object: ObjectId) -> Result<(), OsdError> {
        match self.get(object, false)? {
            Some(o) => {
                o.buffered.sync_data().map_err(|e| Self::err(object, e))?;
                o.sums.sync_data().map_err(|e| Self::err(object, e))
            }
            None => Ok(()),
        }
    }

    /// Removes an object (missing objects are fine: destroy is idempotent).
    pub fn destroy(&self, object: ObjectId) -> Result<(), OsdError> {
        let _change = self.change(object, WHOLE, None);
        // What it held is freed from its owner's usage.
        if let Some(o) = self.get(object, false)? {
            let space = o.space().map_err(|e| Self::err(object, e))?;
            let owner = o.recorded_owner().ok().flatten().unwrap_or_default();
            self.usage.charge(owner, -(space as i64));
        }
        self.open.lock().expect("open objects").remove(&object);
        let _ = std::fs::remove_file(self.sums_path(object));
        match std::fs::remove_file(self.path(object)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Self::err(object, e)),
        }
    }

    /// Records `owner` as the object's owner, group and project (creating an empty object if
    /// there is none, so a later write with an older owner cannot set it).
    pub fn set_owner(&self, object: ObjectId, owner: Owner) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let _change = self.change(object, WHOLE, None);
        let old = o
            .recorded_owner()
            .map_err(|e| Self::err(object, e))?
            .unwrap_or_default();
        write_owner(&o.buffered, owner).map_err(|e| Self::err(object, e))?;
        o.set_recorded_owner(owner);
        let space = o.space().map_err(|e| Self::err(object, e))?;
        self.usage.transfer(old, owner, space);
        Ok(())
    }

    /// The object's recorded owner (`None`: no such object, or none recorded).
    pub fn owner(&self, object: ObjectId) -> Result<Option<Owner>, OsdError> {
        match self.get(object, false)? {
            Some(o) => read_owner(&o.buffered).map_err(|e| Self::err(object, e)),
            None => Ok(None),
        }
    }

    /// Capacity of the file system holding the objects.
    pub fn statfs(&self) -> std::io::Result<StatFs> {
        statvfs(&self.root)
    }
}

/// Extended attribute holding an object's [`Owner`] (12 bytes: uid, gid, project, little
/// endian), as Lustre's OST objects carry their owner for quotas.
pub const OWNER_XATTR: &str = "user.nacre.owner";

fn read_owner(f: &File) -> std::io::Result<Option<Owner>> {
    let mut b = [0u8; Owner::BYTES];
    match rustix::fs::fgetxattr(f, OWNER_XATTR, &mut b) {
        Ok(n) => Ok(Owner::from_bytes(&b[..n])),
        Err(rustix::io::Errno::NODATA) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn write_owner(f: &File, owner: Owner) -> std::io::Result<()> {
    rustix::fs::fsetxattr(
        f,
        OWNER_XATTR,
        &owner.to_bytes(),
        rustix::fs::XattrFlags::empty(),
    )
    .map_err(Into::into)
}

/// A write goes on when the object's file system keeps no extended attributes (the owner is
/// then not recorded: said once); any other error fails it.
fn owner_unsupported(object: ObjectId, e: std::io::Error) -> Result<(), OsdError> {
    static SAID: AtomicBool = AtomicBool::new(false);
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        if !SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!("object {object}: the OST's file system keeps no extended attributes: object owners are not recorded");
        }
        return Ok(());
    }
    Err(ObjectStore::err(object, e))
}

/// `statvfs` of a path as a [`StatFs`].
pub fn statvfs(path: &Path) -> std::io::Result<StatFs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: zeroed statvfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok(StatFs {
        bytes_total: st.f_blocks as u64 * frsize,
        bytes_free: st.f_bfree as u64 * frsize,
        bytes_avail: st.f_bavail as u64 * frsize,
        files_total: st.f_files as u64,
        files_free: st.f_ffree as u64,
        block_size: st.f_bsize as u32,
    })
}

#[cfg(test)]
mod tests;
