//! Checksums at rest: what a read returns verified against the crc32c of each 4 KiB chunk,
//! and the checksums of a change recomputed before its data is written.

use super::cache::OpenObject;
use super::ObjectStore;
use crate::csum::{self, Slot, CSUM_CHUNK_BYTES};

impl ObjectStore {
    /// Checks the chunks under `buf` (read at `offset`) against their checksums. Ok: the
    /// checksum of all of `buf` when the check had it at hand (a read from the start of a
    /// chunk: the chunks' checksums appended, no second pass over the data); Err: the
    /// first byte of a chunk that does not match.
    pub(super) fn verify(
        &self,
        o: &OpenObject,
        offset: u64,
        buf: &[u8],
    ) -> Result<Option<u32>, u64> {
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
    pub(super) fn resum(
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
}
