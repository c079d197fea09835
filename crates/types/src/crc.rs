//! crc32c over runs of 4 KiB chunks: the checksum of a whole run from its chunks' own
//! checksums, so a receiver that checks a frame's bulk keeps each chunk's checksum for the
//! object store, and a store that checked each chunk of a read has the checksum of all of
//! it, with no second pass over the bytes either way.

/// Bytes of one chunk (the object store's checksum unit, a page).
pub const CHUNK_BYTES: usize = 4096;

/// The crc32c of `a` followed by `b`, from their own checksums `crc_a` and `crc_b` and the
/// length of `b`. A whole chunk after `a` costs four table lookups; any other length, the
/// general (slower) combination.
pub fn append(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    if len_b != CHUNK_BYTES {
        return crc32c::crc32c_combine(crc_a, crc_b, len_b);
    }
    let t = &*SHIFT_CHUNK;
    let c = crc_a.to_le_bytes();
    t[0][c[0] as usize] ^ t[1][c[1] as usize] ^ t[2][c[2] as usize] ^ t[3][c[3] as usize] ^ crc_b
}

/// The checksum of each chunk of `data` (the last one short if `data` ends within a
/// chunk), and of all of it.
pub fn chunked(data: &[u8]) -> (Vec<u32>, u32) {
    let mut sums = Vec::with_capacity(data.len().div_ceil(CHUNK_BYTES));
    let mut whole = 0;
    for (i, chunk) in data.chunks(CHUNK_BYTES).enumerate() {
        let c = crc32c::crc32c(chunk);
        whole = if i == 0 {
            c
        } else {
            append(whole, c, chunk.len())
        };
        sums.push(c);
    }
    (sums, whole)
}

/// The map taking a checksum to what [`CHUNK_BYTES`] more bytes of zeros make of it (it is
/// linear over GF(2)), as a table per byte of the checksum: built once from the general
/// combination of each of the 32 bits.
static SHIFT_CHUNK: std::sync::LazyLock<Box<[[u32; 256]; 4]>> = std::sync::LazyLock::new(|| {
    let bit: Vec<u32> = (0..32)
        .map(|i| crc32c::crc32c_combine(1 << i, 0, CHUNK_BYTES))
        .collect();
    let mut t = Box::new([[0u32; 256]; 4]);
    for (k, table) in t.iter_mut().enumerate() {
        for (b, entry) in table.iter_mut().enumerate() {
            *entry = (0..8)
                .filter(|i| b >> i & 1 == 1)
                .fold(0, |acc, i| acc ^ bit[8 * k + i]);
        }
    }
    t
});

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Appending checksums gives the checksum of the bytes appended, for whole chunks
        /// (the table) and any other length (the general combination).
        #[test]
        fn appended_checksums_are_the_checksum_of_the_whole(
            a in proptest::collection::vec(any::<u8>(), 0..9000),
            b in proptest::collection::vec(any::<u8>(), 0..4100),
            whole_chunk in any::<bool>(),
        ) {
            let mut b = b;
            if whole_chunk {
                b.resize(CHUNK_BYTES, 0x5a);
            }
            let mut ab = a.clone();
            ab.extend_from_slice(&b);
            prop_assert_eq!(
                append(crc32c::crc32c(&a), crc32c::crc32c(&b), b.len()),
                crc32c::crc32c(&ab)
            );
        }

        /// Each chunk's checksum is its own, and together they give the whole's.
        #[test]
        fn chunked_checksums_are_each_chunks_and_the_wholes(
            data in proptest::collection::vec(any::<u8>(), 0..20_000),
        ) {
            let (sums, whole) = chunked(&data);
            prop_assert_eq!(whole, crc32c::crc32c(&data));
            prop_assert_eq!(sums.len(), data.len().div_ceil(CHUNK_BYTES));
            for (s, c) in sums.iter().zip(data.chunks(CHUNK_BYTES)) {
                prop_assert_eq!(*s, crc32c::crc32c(c));
            }
        }
    }
}
