//! Changing an object's data and size: writes (of disjoint whole chunks of an owned object,
//! side by side), punches, preallocation and holes, each with its checksums recomputed.

use super::cache::OpenObject;
use super::owner::{newer_owner, owner_unsupported, write_owner};
use super::{is_aligned, ObjectStore, OsdError};
use crate::csum::CSUM_CHUNK_BYTES;
use crate::ranges::WHOLE;
use crate::usage::RecordedOwner;
use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{AlignedBuf, ObjectId, Owner};
use std::os::unix::fs::FileExt;

impl ObjectStore {
    /// Writes `data` at `offset`, creating the object. `data` should be page-aligned in memory
    /// (an [`AlignedBuf`]) for the direct path to be taken. An object with no recorded owner
    /// takes `owner` (the writer's view of its file's owner); one that has an owner keeps it.
    /// Writes of disjoint whole 4 KiB chunks of an object that has an owner run together.
    /// An object whose owner attribute is a newer nacre's (another length) is not written:
    /// [`OsdError::NewerOwner`] (`EIO`), the attribute left as it is.
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
    pub(super) fn write_summed(
        &self,
        object: ObjectId,
        offset: u64,
        data: &[u8],
        sums: Option<&[u32]>,
        owner: Owner,
    ) -> Result<(), OsdError> {
        self.write_held(object, offset, data.len() as u64, owner, &|o, size| {
            self.write_locked(o, object, size, offset, data, sums)
        })
    }

    /// Holds what a write of `len` bytes at `offset` must hold (its chunks, or the whole
    /// object: [`ObjectStore::write_summed`]), records `owner` if the object has none, and
    /// runs `write` with the object and its size read with that held.
    pub(super) fn write_held(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
        owner: Owner,
        write: &dyn Fn(&OpenObject, u64) -> Result<(), OsdError>,
    ) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let end = offset + len;
        if len > 0
            && offset.is_multiple_of(CSUM_CHUNK_BYTES)
            && end.is_multiple_of(CSUM_CHUNK_BYTES)
        {
            let chunks = offset / CSUM_CHUNK_BYTES..end / CSUM_CHUNK_BYTES;
            let change = self.change(object, chunks, Some(&o));
            let size = o.size().map_err(|e| Self::err(object, e))?;
            let owned = matches!(o.recorded_owner(), Ok(RecordedOwner::Owner(_)));
            if owned && (size.is_multiple_of(CSUM_CHUNK_BYTES) || size >= offset) {
                return write(&o, size);
            }
            drop(change);
        }
        let _change = self.change(object, WHOLE, Some(&o));
        match o.recorded_owner() {
            Ok(RecordedOwner::Owner(_)) => {}
            Ok(RecordedOwner::Absent) => match write_owner(&o.buffered, owner) {
                Ok(()) => o.set_recorded_owner(owner),
                Err(e) => owner_unsupported(object, e)?,
            },
            Ok(RecordedOwner::Newer(len)) => return Err(newer_owner(object, len, "write")),
            Err(e) => owner_unsupported(object, e)?,
        }
        let size = o.size().map_err(|e| Self::err(object, e))?;
        write(&o, size)
    }

    /// The write of [`ObjectStore::write_summed`], its range held; `size`: the object's
    /// size, read with the range held.
    pub(super) fn write_locked(
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
}
