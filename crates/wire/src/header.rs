//! The fixed 48-byte frame header.
//!
//! ```text
//! offset size field
//!  0     4    magic        "NACR" (0x5243414e little-endian)
//!  4     2    version      PROTOCOL_VERSION
//!  6     2    opcode       service << 8 | operation
//!  8     4    flags        FLAG_*
//! 12     4    status       0 or an errno-valued Status (replies)
//! 16     4    target       the target the request is for: its file system's slot
//!                           (high 16 bits, `nacre_types::fs_slot`; 0: none) and its
//!                           OST/MDT index (low 16 bits)
//! 20     4    body_len     bytes of postcard body that follow
//! 24     8    xid          request id, unique per client; a reply echoes it
//! 32     4    bulk_len     bytes of bulk data after the body
//! 36     4    body_crc     crc32c of the body
//! 40     4    bulk_crc     crc32c of the bulk data (valid if FLAG_BULK_CHECKSUM)
//! 44     4    header_crc   crc32c of bytes 0..44
//! ```

use crate::{WireError, PROTOCOL_VERSION};
use nacre_types::limits::{BODY_BYTES_MAX, BULK_BYTES_MAX};

/// Size of the encoded header.
pub const HEADER_BYTES: usize = 48;
/// Magic number opening every frame.
pub const MAGIC: u32 = u32::from_le_bytes(*b"NACR");

/// The frame is a reply.
pub const FLAG_REPLY: u32 = 1;
/// `bulk_crc` holds a checksum of the bulk data.
pub const FLAG_BULK_CHECKSUM: u32 = 2;
/// The request is a resend of an earlier xid (reply reconstruction may apply).
pub const FLAG_RESEND: u32 = 4;

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// Protocol version.
    pub version: u16,
    /// Service and operation.
    pub opcode: u16,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// Status code (replies).
    pub status: i32,
    /// Target: file-system slot (high 16 bits) and index (low 16 bits).
    pub target: u32,
    /// Body length.
    pub body_len: u32,
    /// Request id.
    pub xid: u64,
    /// Bulk length.
    pub bulk_len: u32,
    /// Body checksum.
    pub body_crc: u32,
    /// Bulk checksum.
    pub bulk_crc: u32,
}

const _: () = assert!(HEADER_BYTES == 4 + 2 + 2 + 4 + 4 + 4 + 4 + 8 + 4 + 4 + 4 + 4);

impl Header {
    /// A request header with the current version.
    pub fn request(opcode: u16, target: u32, xid: u64) -> Header {
        Header {
            version: PROTOCOL_VERSION,
            opcode,
            target,
            xid,
            ..Header::default()
        }
    }

    /// True if this is a reply.
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_REPLY != 0
    }

    /// Encodes the header, computing its checksum.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.opcode.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.status.to_le_bytes());
        b[16..20].copy_from_slice(&self.target.to_le_bytes());
        b[20..24].copy_from_slice(&self.body_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.xid.to_le_bytes());
        b[32..36].copy_from_slice(&self.bulk_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.body_crc.to_le_bytes());
        b[40..44].copy_from_slice(&self.bulk_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and validates a header: magic, checksum, both lengths against their limits
    /// (`bulk_len_max` is the receiver's `max_rpc_size`), then the version: one this side
    /// does not speak ([`crate::version::speaks`]) is `BadVersion`.
    pub fn decode(b: &[u8; HEADER_BYTES], bulk_len_max: u32) -> Result<Header, WireError> {
        let h = Header::decode_any_version(b, bulk_len_max)?;
        if !crate::version::speaks(h.version) {
            return Err(WireError::BadVersion(h.version));
        }
        Ok(h)
    }

    /// [`Header::decode`] for a frame of any version: the header's layout is the same in
    /// every version, so a frame of a version this side does not speak can still be read
    /// whole (its lengths are checked) and answered (docs/formats.md, "Negotiation").
    pub fn decode_any_version(
        b: &[u8; HEADER_BYTES],
        bulk_len_max: u32,
    ) -> Result<Header, WireError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if crc32c::crc32c(&b[..44]) != u32_at(44) {
            return Err(WireError::HeaderChecksum);
        }
        let mut xid = [0u8; 8];
        xid.copy_from_slice(&b[24..32]);
        let h = Header {
            version: u16::from_le_bytes([b[4], b[5]]),
            opcode: u16::from_le_bytes([b[6], b[7]]),
            flags: u32_at(8),
            status: u32_at(12) as i32,
            target: u32_at(16),
            body_len: u32_at(20),
            xid: u64::from_le_bytes(xid),
            bulk_len: u32_at(32),
            body_crc: u32_at(36),
            bulk_crc: u32_at(40),
        };
        if h.body_len > BODY_BYTES_MAX {
            return Err(WireError::TooLong {
                what: "body",
                len: u64::from(h.body_len),
                limit: u64::from(BODY_BYTES_MAX),
            });
        }
        let bulk_limit = bulk_len_max.min(BULK_BYTES_MAX);
        if h.bulk_len > bulk_limit {
            return Err(WireError::TooLong {
                what: "bulk",
                len: u64::from(h.bulk_len),
                limit: u64::from(bulk_limit),
            });
        }
        Ok(h)
    }

    /// Checks a received body against `body_crc`.
    pub fn check_body(&self, body: &[u8]) -> Result<(), WireError> {
        if crc32c::crc32c(body) != self.body_crc {
            return Err(WireError::BodyChecksum);
        }
        Ok(())
    }

    /// Checks received bulk data, if the sender checksummed it.
    pub fn check_bulk(&self, bulk: &[u8]) -> Result<(), WireError> {
        if self.flags & FLAG_BULK_CHECKSUM == 0 {
            return Ok(());
        }
        let computed = crc32c::crc32c(bulk);
        if computed != self.bulk_crc {
            return Err(WireError::BulkChecksum {
                stored: self.bulk_crc,
                computed,
            });
        }
        Ok(())
    }

    /// As [`Header::check_bulk`], computed chunk by chunk: the checksum of each 4 KiB chunk
    /// of `bulk` (`nacre_types::crc::chunked`) when the sender checksummed it, for the
    /// object store to keep without going over the bytes again; None when it did not.
    pub fn check_bulk_chunked(&self, bulk: &[u8]) -> Result<Option<Vec<u32>>, WireError> {
        if self.flags & FLAG_BULK_CHECKSUM == 0 {
            return Ok(None);
        }
        let (sums, computed) = nacre_types::crc::chunked(bulk);
        if computed != self.bulk_crc {
            return Err(WireError::BulkChecksum {
                stored: self.bulk_crc,
                computed,
            });
        }
        Ok(Some(sums))
    }

    /// Fills in body length and checksum, and the bulk length and (optionally) checksum.
    ///
    /// With `bulk_checksum` the flag is set even on a frame without bulk: on a request it
    /// asks the server to checksum its reply's bulk (a read's data).
    pub fn seal(&mut self, body: &[u8], bulk: Option<&[u8]>, bulk_checksum: bool) {
        self.seal_known(body, bulk, bulk_checksum, None)
    }

    /// As [`Header::seal`], with the bulk's crc32c when the sender has it already
    /// (`bulk_crc`, e.g. from the checks of a read: [`nacre_types::AlignedBuf::known_crc32c`]),
    /// so the bulk is not gone over again.
    pub fn seal_known(
        &mut self,
        body: &[u8],
        bulk: Option<&[u8]>,
        bulk_checksum: bool,
        bulk_crc: Option<u32>,
    ) {
        self.body_len = body.len() as u32;
        self.body_crc = crc32c::crc32c(body);
        self.bulk_len = bulk.map_or(0, |b| b.len() as u32);
        self.flags &= !FLAG_BULK_CHECKSUM;
        self.bulk_crc = 0;
        if bulk_checksum {
            self.flags |= FLAG_BULK_CHECKSUM;
            self.bulk_crc = match (bulk, bulk_crc) {
                (Some(b), Some(crc)) => {
                    debug_assert_eq!(crc, crc32c::crc32c(b), "a known bulk checksum is wrong");
                    crc
                }
                (b, _) => b.map_or(0, crc32c::crc32c),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let mut h = Header::request(0x0301, 3, 42);
        h.seal(b"body", Some(b"bulk"), true);
        let d = Header::decode(&h.encode(), BULK_BYTES_MAX).unwrap();
        assert_eq!(d, h);
        d.check_body(b"body").unwrap();
        d.check_bulk(b"bulk").unwrap();
        assert!(matches!(
            d.check_bulk(b"bulK"),
            Err(WireError::BulkChecksum { .. })
        ));
    }

    /// Regression: a read request (no bulk) lost the flag, so read replies carried their
    /// data unchecksummed and a flipped bit on the way back went unnoticed.
    #[test]
    fn a_request_without_bulk_still_asks_for_a_checksummed_reply() {
        let mut h = Header::request(0x0302, 0, 7);
        h.seal(b"read 1 MiB", None, true);
        let d = Header::decode(&h.encode(), BULK_BYTES_MAX).unwrap();
        assert_ne!(d.flags & FLAG_BULK_CHECKSUM, 0);
        let mut reply = d;
        reply.flags |= FLAG_REPLY;
        reply.seal(b"", Some(&[5u8; 4096]), d.flags & FLAG_BULK_CHECKSUM != 0);
        let r = Header::decode(&reply.encode(), BULK_BYTES_MAX).unwrap();
        r.check_bulk(&[5u8; 4096]).unwrap();
        assert!(r.check_bulk(&[4u8; 4096]).is_err());
    }

    proptest! {
        /// The chunked check agrees with the plain one: it accepts the bulk sealed (giving
        /// each chunk's own checksum), refuses it with any byte changed, and checks nothing
        /// the sender did not checksum.
        #[test]
        fn the_chunked_check_agrees_with_the_plain_one(
            bulk in proptest::collection::vec(any::<u8>(), 1..20_000),
            at in any::<proptest::sample::Index>(),
            checksum in any::<bool>(),
        ) {
            let mut h = Header::request(0x0301, 0, 9);
            h.seal(b"", Some(&bulk), checksum);
            let sums = h.check_bulk_chunked(&bulk).unwrap();
            prop_assert_eq!(sums.is_some(), checksum);
            if let Some(sums) = sums {
                prop_assert_eq!(sums, nacre_types::crc::chunked(&bulk).0);
            }
            let mut bad = bulk.clone();
            bad[at.index(bulk.len())] ^= 0x10;
            prop_assert_eq!(h.check_bulk_chunked(&bad).is_err(), checksum);
            prop_assert_eq!(h.check_bulk(&bad).is_err(), checksum);
        }
    }

    #[test]
    fn rejects_oversized_bulk_before_allocating() {
        let mut h = Header::request(0x0301, 0, 1);
        h.bulk_len = 8 << 20;
        let e = Header::decode(&h.encode(), 4 << 20).unwrap_err();
        assert!(matches!(e, WireError::TooLong { what: "bulk", .. }));
    }

    #[test]
    fn a_frame_of_another_version_is_read_whole_but_not_taken_as_ours() {
        for version in [
            crate::PROTOCOL_VERSION_MIN - 1,
            PROTOCOL_VERSION + 1,
            0,
            u16::MAX,
        ] {
            let mut h = Header::request(0x0201, 0, 9);
            h.version = version;
            h.seal(b"a body of another version", None, true);
            let b = h.encode();
            assert!(matches!(
                Header::decode(&b, BULK_BYTES_MAX),
                Err(WireError::BadVersion(v)) if v == version
            ));
            let read = Header::decode_any_version(&b, BULK_BYTES_MAX).unwrap();
            assert_eq!((read.version, read.body_len), (version, 25));
            // Lengths are checked before the version: a frame of any version is bounded.
            let mut h = Header::request(0x0301, 0, 1);
            h.version = version;
            h.bulk_len = 8 << 20;
            assert!(matches!(
                Header::decode_any_version(&h.encode(), 1 << 20),
                Err(WireError::TooLong { what: "bulk", .. })
            ));
        }
    }

    #[test]
    fn rejects_flipped_bits() {
        let h = Header::request(0x0201, 0, 7).encode();
        for bit in 0..HEADER_BYTES * 8 {
            let mut b = h;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                Header::decode(&b, BULK_BYTES_MAX).is_err(),
                "bit {bit} undetected"
            );
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), HEADER_BYTES)) {
            let arr: [u8; HEADER_BYTES] = bytes.try_into().unwrap();
            let _ = Header::decode(&arr, BULK_BYTES_MAX);
        }
    }
}
