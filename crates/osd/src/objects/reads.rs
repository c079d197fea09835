//! Reading objects: through the direct descriptor when aligned, several direct reads
//! submitted to the disk at once (`read_many`), every read checked against the object's
//! checksums before it is returned.

use super::cache::OpenObject;
use super::{is_aligned, ObjectStore, OsdError};
use crate::ranges::WHOLE;
use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{AlignedBuf, ObjectId};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

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
}
