//! RAID0 file layouts (Lustre's "stripes") and the arithmetic that maps file offsets to objects.
//!
//! A file of stripe count C and stripe size S stores byte `x` in object `(x / S) % C`, at object
//! offset `(x / (S * C)) * S + x % S`. A contiguous file range therefore touches one contiguous
//! range of each object, which the client sends as one RPC per object.

use crate::fid::ObjectId;
use crate::limits::{STRIPE_COUNT_MAX, STRIPE_SIZE_BYTES_MAX, STRIPE_SIZE_BYTES_MIN};
use serde::{Deserialize, Serialize};

/// Default stripe size: 1 MiB.
pub const STRIPE_SIZE_DEFAULT: u32 = 1024 * 1024;
/// Default stripe count: 1.
pub const STRIPE_COUNT_DEFAULT: u16 = 1;

/// One object of a file's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeObject {
    /// Index of the OST holding the object.
    pub ost: u32,
    /// Object id on that OST.
    pub object: ObjectId,
}

/// Longest OST pool name, in bytes (Lustre's `LOV_MAXPOOLNAME`).
pub const POOL_NAME_BYTES_MAX: usize = 15;

/// The name of an OST pool (Lustre's), or none: 1 to [`POOL_NAME_BYTES_MAX`] letters, digits,
/// `_` and `-`, kept inline so stripe requests stay `Copy`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PoolName([u8; 16]);

/// Why a pool name is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("pool name '{0}' must be 1 to {POOL_NAME_BYTES_MAX} letters, digits, '_' or '-'")]
pub struct BadPoolName(pub String);

impl PoolName {
    /// No pool.
    pub const NONE: PoolName = PoolName([0; 16]);

    /// The pool `name`, checked.
    pub fn new(name: &str) -> Result<PoolName, BadPoolName> {
        let ok = !name.is_empty()
            && name.len() <= POOL_NAME_BYTES_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(BadPoolName(name.chars().take(64).collect()));
        }
        let mut b = [0u8; 16];
        b[..name.len()].copy_from_slice(name.as_bytes());
        Ok(PoolName(b))
    }

    /// True if no pool is named.
    pub fn is_none(&self) -> bool {
        self.0[0] == 0
    }

    /// The name ("" for none).
    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|b| *b == 0).unwrap_or(16);
        std::str::from_utf8(&self.0[..len]).unwrap_or("")
    }

    /// True if the bytes are a name [`PoolName::new`] accepts, or none (a name that came
    /// from a disk or the network is checked with it).
    pub fn is_valid(&self) -> bool {
        self.is_none() || PoolName::new(self.as_str()).is_ok_and(|p| p == *self)
    }
}

impl std::fmt::Debug for PoolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PoolName({:?})", self.as_str())
    }
}

impl std::fmt::Display for PoolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A RAID0 layout: the objects of a file, in stripe order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Bytes per stripe.
    pub stripe_size: u32,
    /// Objects, one per stripe; its length is the stripe count.
    pub objects: Vec<StripeObject>,
    /// The OST pool its objects were allocated in (none: any OST).
    pub pool: PoolName,
    /// The layout's generation: one up at each migration's swap (or abort after a fence).
    /// Every change of an object carries it; an OST refuses a change carrying an older
    /// generation than the object's fence (docs/migrate.md).
    pub generation: u32,
}

/// A stripe request, as `setstripe` gives it or a directory stores as its default.
/// Zero or negative fields mean "inherit / file system default", as in Lustre.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeSpec {
    /// Stripe count: 0 = default, -1 = all OSTs.
    pub stripe_count: i32,
    /// Stripe size in bytes: 0 = default.
    pub stripe_size: u32,
    /// First OST index: -1 = chosen by the allocator.
    pub start_ost: i32,
    /// OST pool to allocate in: none = inherit (the file system's whole set of OSTs when
    /// nothing names one).
    pub pool: PoolName,
}

/// Why a layout request is invalid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// Stripe size not a multiple of 64 KiB or out of range.
    #[error("stripe size {0} must be a multiple of 64 KiB between 64 KiB and 4 GiB")]
    BadStripeSize(u32),
    /// More stripes than OSTs.
    #[error("stripe count {count} exceeds the {osts} OSTs of the file system")]
    TooManyStripes {
        /// Requested count.
        count: i32,
        /// OSTs available.
        osts: u32,
    },
    /// Stripe count below -1.
    #[error("stripe count {0} is invalid (use -1 for all OSTs)")]
    BadStripeCount(i32),
    /// A stored or received layout with no objects, or more than a layout may have.
    #[error("layout of {0} objects (a file has 1 to {max})", max = STRIPE_COUNT_MAX)]
    BadObjectCount(usize),
    /// A pool name that is not one.
    #[error("invalid pool name in a layout")]
    BadPool,
    /// Start OST does not exist.
    #[error("start OST index {start} does not exist (file system has {osts} OSTs)")]
    BadStartOst {
        /// Requested start.
        start: i32,
        /// OSTs available.
        osts: u32,
    },
}

impl Default for StripeSpec {
    fn default() -> StripeSpec {
        StripeSpec {
            stripe_count: 0,
            stripe_size: 0,
            start_ost: -1,
            pool: PoolName::NONE,
        }
    }
}

impl StripeSpec {
    /// Checks the request against an OST count and resolves defaults against `parent`.
    pub fn resolve(
        self,
        parent: StripeSpec,
        osts: u32,
    ) -> Result<(u16, u32, Option<u32>), LayoutError> {
        let count = match self.stripe_count {
            0 => parent.stripe_count,
            c => c,
        };
        let count = match count {
            0 => i32::from(STRIPE_COUNT_DEFAULT),
            -1 => osts as i32,
            c if c < -1 => return Err(LayoutError::BadStripeCount(c)),
            c => c,
        };
        if count as u32 > osts || count > i32::from(STRIPE_COUNT_MAX) {
            return Err(LayoutError::TooManyStripes { count, osts });
        }
        let size = match (self.stripe_size, parent.stripe_size) {
            (0, 0) => STRIPE_SIZE_DEFAULT,
            (0, p) => p,
            (s, _) => s,
        };
        check_stripe_size(size)?;
        let start = if self.start_ost >= 0 {
            self.start_ost
        } else {
            parent.start_ost
        };
        let start = match start {
            s if s < 0 => None,
            s if s as u32 >= osts => return Err(LayoutError::BadStartOst { start: s, osts }),
            s => Some(s as u32),
        };
        Ok((count.max(1) as u16, size, start))
    }
}

/// Validates a stripe size.
pub fn check_stripe_size(size: u32) -> Result<(), LayoutError> {
    if !(STRIPE_SIZE_BYTES_MIN..=STRIPE_SIZE_BYTES_MAX).contains(&size)
        || !size.is_multiple_of(STRIPE_SIZE_BYTES_MIN)
    {
        return Err(LayoutError::BadStripeSize(size));
    }
    Ok(())
}

/// The part of a file range that falls in one stripe object: one contiguous object range,
/// gathered from (possibly several) file pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeChunk {
    /// Stripe index (position in `Layout::objects`).
    pub stripe: usize,
    /// Offset in the object.
    pub object_offset: u64,
    /// Bytes in the object range.
    pub len: u64,
    /// `(file_offset, len)` pieces, in object order, that make up the object range.
    pub pieces: Vec<(u64, u64)>,
}

impl Layout {
    /// Checks a layout that came from elsewhere (a reply, a disk) before its arithmetic is
    /// used: 1 to [`STRIPE_COUNT_MAX`] objects, a valid stripe size, a valid pool name.
    pub fn check(&self) -> Result<(), LayoutError> {
        if self.objects.is_empty() || self.objects.len() > usize::from(STRIPE_COUNT_MAX) {
            return Err(LayoutError::BadObjectCount(self.objects.len()));
        }
        if !self.pool.is_valid() {
            return Err(LayoutError::BadPool);
        }
        check_stripe_size(self.stripe_size)
    }

    /// Stripe count.
    pub fn stripe_count(&self) -> usize {
        self.objects.len()
    }

    /// Object index and object offset of file byte `offset`.
    pub fn locate(&self, offset: u64) -> (usize, u64) {
        let size = u64::from(self.stripe_size);
        let count = self.objects.len() as u64;
        let stripe_number = offset / size;
        let stripe = (stripe_number % count) as usize;
        let object_offset = (stripe_number / count) * size + offset % size;
        (stripe, object_offset)
    }

    /// Splits the file range `[offset, offset + len)` into one chunk per object it touches,
    /// ordered by stripe index.
    pub fn chunks(&self, offset: u64, len: u64) -> Vec<StripeChunk> {
        assert!(!self.objects.is_empty(), "layout without objects");
        let size = u64::from(self.stripe_size);
        let mut chunks: Vec<Option<StripeChunk>> = vec![None; self.objects.len()];
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let (stripe, object_offset) = self.locate(pos);
            let piece = (size - pos % size).min(end - pos);
            match &mut chunks[stripe] {
                Some(chunk) => {
                    assert_eq!(chunk.object_offset + chunk.len, object_offset);
                    chunk.len += piece;
                    chunk.pieces.push((pos, piece));
                }
                slot @ None => {
                    *slot = Some(StripeChunk {
                        stripe,
                        object_offset,
                        len: piece,
                        pieces: vec![(pos, piece)],
                    })
                }
            }
            pos += piece;
        }
        chunks.into_iter().flatten().collect()
    }

    /// File size implied by the size of the object at `stripe` (0 for an empty object).
    pub fn file_size_from_object(&self, stripe: usize, object_size: u64) -> u64 {
        if object_size == 0 {
            return 0;
        }
        let size = u64::from(self.stripe_size);
        let count = self.objects.len() as u64;
        let last = object_size - 1;
        // Saturating: an object size from the other side of a socket may be absurd.
        let file_offset = (last / size)
            .saturating_mul(size)
            .saturating_mul(count)
            .saturating_add(stripe as u64 * size + last % size);
        file_offset.saturating_add(1)
    }

    /// File size and 512-byte blocks from the (stripe, object size, object blocks) of its
    /// objects (a glimpse's answers); `None` if an object is larger than any file can be.
    pub fn file_size_from_objects(
        &self,
        objects: impl IntoIterator<Item = (usize, u64, u64)>,
    ) -> Option<(u64, u64)> {
        let mut size = 0u64;
        let mut blocks = 0u64;
        for (stripe, object_size, object_blocks) in objects {
            if object_size > crate::limits::FILE_BYTES_MAX {
                return None;
            }
            let implied = self.file_size_from_object(stripe, object_size);
            size = size.max(implied.min(crate::limits::FILE_BYTES_MAX));
            blocks = blocks.saturating_add(object_blocks);
        }
        Some((size, blocks))
    }

    /// Size the object at `stripe` has when the file is exactly `file_size` bytes long.
    pub fn object_size_for_file(&self, stripe: usize, file_size: u64) -> u64 {
        let size = u64::from(self.stripe_size);
        let count = self.objects.len() as u64;
        let full_rounds = file_size / (size * count);
        let rest = file_size % (size * count);
        let start = stripe as u64 * size;
        full_rounds * size + rest.saturating_sub(start).min(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(count: usize, size: u32) -> Layout {
        Layout {
            stripe_size: size,
            objects: (0..count)
                .map(|i| StripeObject {
                    ost: i as u32,
                    object: ObjectId {
                        seq: 0,
                        id: i as u64,
                    },
                })
                .collect(),
            pool: PoolName::NONE,
            generation: 0,
        }
    }

    #[test]
    fn pool_names_are_checked() {
        let p = PoolName::new("flash_1-a").unwrap();
        assert_eq!(p.as_str(), "flash_1-a");
        assert!(p.is_valid() && !p.is_none());
        assert!(PoolName::NONE.is_none() && PoolName::NONE.is_valid());
        assert_eq!(PoolName::NONE.as_str(), "");
        for bad in [
            "",
            "a.b",
            "sixteen-letters!",
            "0123456789abcdef",
            "x y",
            "é",
        ] {
            assert!(PoolName::new(bad).is_err(), "{bad:?}");
        }
        assert!(PoolName::new("0123456789abcde").is_ok(), "15 bytes");
        // Bytes from elsewhere: a name with a hole, or bytes no name has, is not valid.
        let mut raw = [0u8; 16];
        raw[0] = b'a';
        raw[2] = b'b';
        assert!(!PoolName(raw).is_valid());
        assert!(!PoolName([b'.'; 16]).is_valid());
    }

    #[test]
    fn chunks_of_four_stripes() {
        let l = layout(4, 65536);
        let c = l.chunks(0, 5 * 65536);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0].len, 2 * 65536);
        assert_eq!(c[0].pieces, vec![(0, 65536), (4 * 65536, 65536)]);
        assert_eq!(c[1].object_offset, 0);
    }

    #[test]
    fn file_size_from_objects_takes_the_furthest_stripe() {
        let l = layout(2, 65536);
        // Stripe 1 holds the file's second 64 KiB: 10 bytes there end the file at 65546.
        assert_eq!(
            l.file_size_from_objects([(0, 65536, 128), (1, 10, 8)]),
            Some((65546, 136))
        );
        assert_eq!(l.file_size_from_objects([]), Some((0, 0)));
        assert_eq!(l.file_size_from_objects([(0, u64::MAX, 0)]), None);
    }

    #[test]
    fn resolve_rejects_too_many_stripes() {
        let spec = StripeSpec {
            stripe_count: 9,
            stripe_size: 0,
            start_ost: -1,
            pool: PoolName::NONE,
        };
        assert_eq!(
            spec.resolve(StripeSpec::default(), 4),
            Err(LayoutError::TooManyStripes { count: 9, osts: 4 })
        );
        let all = StripeSpec {
            stripe_count: -1,
            ..spec
        };
        assert_eq!(
            all.resolve(StripeSpec::default(), 4),
            Ok((4, STRIPE_SIZE_DEFAULT, None))
        );
    }

    proptest! {
        #[test]
        fn chunks_cover_range_exactly(count in 1usize..6, k in 1u32..4, off in 0u64..1<<22, len in 1u64..1<<21) {
            let l = layout(count, k * 65536);
            let chunks = l.chunks(off, len);
            let total: u64 = chunks.iter().map(|c| c.len).sum();
            prop_assert_eq!(total, len);
            for c in &chunks {
                let mut obj = c.object_offset;
                for &(file_off, piece) in &c.pieces {
                    prop_assert_eq!(l.locate(file_off), (c.stripe, obj));
                    obj += piece;
                }
            }
        }

        #[test]
        fn sizes_are_consistent(count in 1usize..6, k in 1u32..4, file_size in 0u64..1<<24) {
            let l = layout(count, k * 65536);
            let mut max = 0;
            for s in 0..count {
                let object_size = l.object_size_for_file(s, file_size);
                max = max.max(l.file_size_from_object(s, object_size));
            }
            prop_assert_eq!(max, file_size);
        }
    }
}
