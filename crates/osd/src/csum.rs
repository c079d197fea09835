//! Checksums of stored object data: a crc32c per 4 KiB chunk, in a sidecar file beside the
//! object (`<id>.crc`), so a bit that rots on the disk (or a stray write) is reported as an
//! I/O error instead of returned as good data.
//!
//! Each chunk has an 8-byte slot: the checksum of its current content and the one before.
//! A change writes the slot first (new, previous) and the data second, so a process killed
//! between the two leaves data that matches the previous checksum: a kill never makes good
//! data look corrupt. A slot of zeros means "not known" (a hole, data from before checksums
//! were kept) and is not checked. A chunk's checksum covers its bytes up to the object's
//! size; a change of size rewrites the checksum of the chunk the size falls in.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Bytes covered by one checksum.
pub const CSUM_CHUNK_BYTES: u64 = nacre_types::crc::CHUNK_BYTES as u64;
/// Bytes of one slot in the sidecar: current checksum, previous checksum (little endian).
const SLOT_BYTES: u64 = 8;

/// One chunk's checksums.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    /// Checksum of the chunk's content now.
    pub cur: u32,
    /// Checksum of its content before the last change (still valid data if that change was
    /// interrupted before its data reached the file).
    pub prev: u32,
}

impl Slot {
    /// True if nothing is known of the chunk.
    pub fn unknown(self) -> bool {
        self.cur == 0 && self.prev == 0
    }

    /// True if `data` (the chunk's bytes up to the object's size) agrees with the slot.
    pub fn accepts(self, data: &[u8]) -> bool {
        self.unknown() || self.matches(crc32c::crc32c(data))
    }

    /// True if a chunk whose content has checksum `crc` agrees with the slot.
    pub fn matches(self, crc: u32) -> bool {
        self.unknown() || crc == self.cur || crc == self.prev
    }

    /// The slot after the chunk's content changed to `data`.
    pub fn next(self, data: &[u8]) -> Slot {
        self.next_sum(crc32c::crc32c(data))
    }

    /// The slot after the chunk's content changed to one whose checksum is `crc`.
    pub fn next_sum(self, crc: u32) -> Slot {
        Slot {
            cur: crc,
            prev: self.cur,
        }
    }

    fn encode(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.cur.to_le_bytes());
        b[4..].copy_from_slice(&self.prev.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Slot {
        let word = |o: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(w)
        };
        Slot {
            cur: word(0),
            prev: word(4),
        }
    }
}

/// Chunks `[first, end)` touching the byte range `[offset, offset + len)`.
pub fn chunks(offset: u64, len: u64) -> std::ops::Range<u64> {
    offset / CSUM_CHUNK_BYTES..(offset + len).div_ceil(CSUM_CHUNK_BYTES)
}

/// Reads the slots of chunks `range` (missing ones are unknown).
pub fn read_slots(sums: &File, range: std::ops::Range<u64>) -> std::io::Result<Vec<Slot>> {
    let n = (range.end - range.start) as usize;
    let mut raw = vec![0u8; n * SLOT_BYTES as usize];
    let mut got = 0;
    while got < raw.len() {
        match sums.read_at(&mut raw[got..], range.start * SLOT_BYTES + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(raw
        .chunks_exact(SLOT_BYTES as usize)
        .map(Slot::decode)
        .collect())
}

/// Writes the slots of chunks starting at `first`.
pub fn write_slots(sums: &File, first: u64, slots: &[Slot]) -> std::io::Result<()> {
    let raw: Vec<u8> = slots.iter().flat_map(|s| s.encode()).collect();
    sums.write_all_at(&raw, first * SLOT_BYTES)
}

/// Drops the slots of chunks from `first` on (the object was cut shorter).
pub fn truncate_slots(sums: &File, first: u64) -> std::io::Result<()> {
    let keep = first * SLOT_BYTES;
    if sums.metadata()?.len() > keep {
        sums.set_len(keep)?;
    }
    Ok(())
}

/// Reads chunk `c` of `data_file` as it is now, up to the object size `size`, padded with
/// zeros to `len_after` bytes (what the chunk will hold once the size changed).
pub fn read_chunk(
    data_file: &File,
    c: u64,
    size: u64,
    len_after: usize,
) -> std::io::Result<Vec<u8>> {
    let start = c * CSUM_CHUNK_BYTES;
    let have = size.saturating_sub(start).min(CSUM_CHUNK_BYTES) as usize;
    let mut buf = vec![0u8; len_after.max(have)];
    let mut got = 0;
    while got < have {
        match data_file.read_at(&mut buf[got..have], start + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len_after);
    Ok(buf)
}

/// Bytes chunk `c` holds in an object of `size` bytes.
pub fn chunk_len(c: u64, size: u64) -> usize {
    size.saturating_sub(c * CSUM_CHUNK_BYTES)
        .min(CSUM_CHUNK_BYTES) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_slot_accepts_the_current_and_the_previous_content_only() {
        let s = Slot::default();
        assert!(s.unknown() && s.accepts(b"anything"));
        let s = s.next(b"one");
        assert!(s.accepts(b"one") && !s.accepts(b"two"));
        let s = s.next(b"two");
        assert!(s.accepts(b"one") && s.accepts(b"two") && !s.accepts(b"three"));
        let s = s.next(b"three");
        assert!(!s.accepts(b"one"));
    }

    #[test]
    fn chunk_ranges() {
        assert_eq!(chunks(0, 4096), 0..1);
        assert_eq!(chunks(1, 4096), 0..2);
        assert_eq!(chunks(8192, 1), 2..3);
        assert_eq!(chunk_len(1, 5000), 904);
        assert_eq!(chunk_len(2, 5000), 0);
    }

    proptest! {
        /// Slots decode from any bytes (a damaged sidecar gives mismatches, never a panic).
        #[test]
        fn slots_round_trip(cur in any::<u32>(), prev in any::<u32>()) {
            let s = Slot { cur, prev };
            prop_assert_eq!(Slot::decode(&s.encode()), s);
        }
    }
}
