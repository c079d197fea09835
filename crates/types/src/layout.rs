//! File layouts: composite layouts of components by file extent (Lustre's progressive file
//! layouts), each a RAID0 striping over OST objects ([`component`]), and the arithmetic that
//! maps file offsets to objects.
//!
//! A layout's objects are numbered across its components in order (the "stripe" of a
//! [`StripeChunk`], of a glimpse's answer, of a capability): component 0's objects first,
//! then component 1's, and so on; a component not yet instantiated has none. A plain RAID0
//! layout is one component from byte 0 to the end of the file ([`Layout::raid0`]).
//!
//! Within a component of stripe count C and stripe size S, byte `x` is in object
//! `(x / S) % C`, at object offset `(x / (S * C)) * S + x % S`. A contiguous file range
//! therefore touches one contiguous range of each object, which the client sends as one RPC
//! per object.

pub mod component;
pub mod spec;

use crate::fid::ObjectId;
use crate::limits::{STRIPE_COUNT_MAX, STRIPE_SIZE_BYTES_MAX, STRIPE_SIZE_BYTES_MIN};
pub use component::{Component, ComponentKind, DOM_BYTES_MAX, EXTENT_EOF};
use serde::{Deserialize, Serialize};
pub use spec::{ComponentRequest, ComponentSpec, LayoutSpec};

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

/// Most components a layout may have (Lustre allows more; sites use 2 to 4).
pub const COMPONENTS_MAX: usize = 16;

/// A file's layout: components covering the file from byte 0 to the end, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The components, by extent: the first starts at 0, each starts where the one before
    /// ends, the last ends at [`EXTENT_EOF`].
    pub components: Vec<Component>,
    /// The layout's generation: one up at each migration's swap (or abort after a fence).
    /// Every change of an object carries it; an OST refuses a change carrying an older
    /// generation than the object's fence (docs/migrate.md). Instantiating a component is
    /// not a new generation (it fences no writer).
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
    /// A component's extent that is empty, or does not start and end on its stripe size.
    #[error(
        "component extent {start}..{end} must be non-empty and start and end on a multiple \
         of its stripe size {stripe_size}"
    )]
    BadExtent {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// The component's stripe size.
        stripe_size: u32,
    },
    /// Components that do not cover the file from 0 to its end, one after the other, or
    /// more of them than a layout may have, or instantiated out of file order.
    #[error(
        "a layout's 1 to {max} components must run from byte 0 to the end of the file, \
         each starting where the one before ends, the instantiated ones first",
        max = COMPONENTS_MAX
    )]
    BadComponents,
    /// A component on the MDT that is not the first, or not one stripe of at most
    /// [`DOM_BYTES_MAX`] from byte 0 with no objects and no pool.
    #[error(
        "a component on the MDT must be the first, from byte 0 to at most {max} bytes (a \
         multiple of 64 KiB), followed by components on OSTs",
        max = DOM_BYTES_MAX
    )]
    BadMdtComponent,
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
    /// This request with its unset fields (zero count and size, negative start, no pool)
    /// taken from `base`.
    pub fn over(self, base: StripeSpec) -> StripeSpec {
        StripeSpec {
            stripe_count: if self.stripe_count != 0 {
                self.stripe_count
            } else {
                base.stripe_count
            },
            stripe_size: if self.stripe_size != 0 {
                self.stripe_size
            } else {
                base.stripe_size
            },
            start_ost: if self.start_ost >= 0 {
                self.start_ost
            } else {
                base.start_ost
            },
            pool: if self.pool.is_none() {
                base.pool
            } else {
                self.pool
            },
        }
    }

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

/// Bytes a file's `stored` bytes on the MDT count for its owner's quotas and its
/// `st_blocks`: whole 4 KiB blocks, as a local file system allocates them.
pub fn dom_charged_bytes(stored: usize) -> u64 {
    (stored as u64).div_ceil(4096) * 4096
}

impl Layout {
    /// A plain RAID0 layout: one component over the whole file, instantiated with
    /// `objects`.
    pub fn raid0(stripe_size: u32, objects: Vec<StripeObject>, pool: PoolName) -> Layout {
        Layout {
            components: vec![Component {
                start: 0,
                end: EXTENT_EOF,
                stripe_size,
                stripe_count: objects.len() as i32,
                start_ost: -1,
                pool,
                objects,
                kind: ComponentKind::Osts,
            }],
            generation: 0,
        }
    }

    /// Checks a layout that came from elsewhere (a reply, a disk) before its arithmetic is
    /// used: 1 to [`COMPONENTS_MAX`] valid components from 0 to the end of the file, each
    /// starting where the one before ends, the instantiated ones first (the first always
    /// is: components are instantiated in file order, so the numbers of the objects a file
    /// has never change as it grows), 1 to [`STRIPE_COUNT_MAX`] objects in all — none
    /// where the first component is on the MDT (a small file's bytes are all there) and
    /// no other is instantiated yet; a component on the MDT is only ever the first.
    pub fn check(&self) -> Result<(), LayoutError> {
        if self.components.is_empty() || self.components.len() > COMPONENTS_MAX {
            return Err(LayoutError::BadComponents);
        }
        let mut at = 0;
        let mut instantiated = true;
        for (i, c) in self.components.iter().enumerate() {
            if c.start != at || (c.is_instantiated() && !instantiated) {
                return Err(LayoutError::BadComponents);
            }
            if c.is_on_mdt() && i > 0 {
                return Err(LayoutError::BadMdtComponent);
            }
            c.check()?;
            // Stripes lie in one component, but for the first after one on the MDT (as
            // Lustre's `-E 64K -L mdt -E -1` with 1 MiB stripes): its first stripe's bytes
            // below its start are the MDT's, so its objects are sparse there.
            let after_mdt = i == 1 && self.components[0].is_on_mdt();
            if !after_mdt && !c.start.is_multiple_of(u64::from(c.stripe_size)) {
                return Err(LayoutError::BadExtent {
                    start: c.start,
                    end: c.end,
                    stripe_size: c.stripe_size,
                });
            }
            instantiated = c.is_instantiated();
            at = c.end;
        }
        if at != EXTENT_EOF {
            return Err(LayoutError::BadComponents);
        }
        let objects = self.object_count();
        let none_yet = objects == 0 && self.dom_end() > 0;
        if (objects == 0 && !none_yet) || objects > usize::from(STRIPE_COUNT_MAX) {
            return Err(LayoutError::BadObjectCount(objects));
        }
        if !self.components[0].is_instantiated() {
            return Err(LayoutError::BadComponents);
        }
        Ok(())
    }

    /// One past the last byte of its component on the MDT (0: it has none). Bytes below it
    /// are read and written through the file's MDT, not its objects.
    pub fn dom_end(&self) -> u64 {
        match self.components.first() {
            Some(c) if c.is_on_mdt() => c.end,
            _ => 0,
        }
    }

    /// Objects in all its components.
    pub fn object_count(&self) -> usize {
        self.components.iter().map(|c| c.objects.len()).sum()
    }

    /// Its objects, numbered across its components in order.
    pub fn objects(&self) -> impl Iterator<Item = &StripeObject> + '_ {
        self.components.iter().flat_map(|c| c.objects.iter())
    }

    /// Object `stripe` (numbered across the components).
    pub fn object(&self, stripe: usize) -> &StripeObject {
        let (c, i) = self.component_of(stripe);
        &self.components[c].objects[i]
    }

    /// The component holding object `stripe`, and the object's index in it.
    pub fn component_of(&self, stripe: usize) -> (usize, usize) {
        let mut first = 0;
        for (c, comp) in self.components.iter().enumerate() {
            if stripe < first + comp.objects.len() {
                return (c, stripe - first);
            }
            first += comp.objects.len();
        }
        panic!(
            "object {stripe} of a layout of {} objects",
            self.object_count()
        );
    }

    /// The number of the first object of component `c`.
    fn first_object_of(&self, c: usize) -> usize {
        self.components[..c].iter().map(|c| c.objects.len()).sum()
    }

    /// The component holding file byte `offset`.
    pub fn component_at(&self, offset: u64) -> &Component {
        self.components
            .iter()
            .find(|c| c.contains(offset))
            .or(self.components.last())
            .expect("a layout has components")
    }

    /// The stripe size where file byte `offset` is.
    pub fn stripe_size_at(&self, offset: u64) -> u32 {
        self.component_at(offset).stripe_size
    }

    /// True if every component with a byte in `offset..offset + len` is instantiated (a
    /// write there has objects to go to).
    pub fn is_instantiated_over(&self, offset: u64, len: u64) -> bool {
        self.components
            .iter()
            .filter(|c| c.overlap(offset, len.max(1)).is_some())
            .all(Component::is_instantiated)
    }

    /// One past the last byte of its instantiated components ([`EXTENT_EOF`]: all are):
    /// a write, truncate or allocation reaching past it asks the MDT to instantiate more
    /// first (`MdsOp::LayoutIntent`).
    pub fn instantiated_end(&self) -> u64 {
        self.components
            .iter()
            .take_while(|c| c.is_instantiated())
            .last()
            .map_or(0, |c| c.end)
    }

    /// Object number (across the components) and object offset of file byte `offset`; None
    /// where its component has no objects: not yet (the bytes there read as zeros), or it is
    /// on the MDT.
    pub fn locate(&self, offset: u64) -> Option<(usize, u64)> {
        let c = self.components.iter().position(|c| c.contains(offset))?;
        let comp = &self.components[c];
        if comp.objects.is_empty() {
            return None;
        }
        let (i, object_offset) = comp.locate(offset);
        Some((self.first_object_of(c) + i, object_offset))
    }

    /// Splits the file range `[offset, offset + len)` into one chunk per object it touches,
    /// ordered by object number. Parts in components without objects have no chunk (they
    /// read as zeros; a write must have them instantiated first: [`Layout::is_instantiated_over`]).
    pub fn chunks(&self, offset: u64, len: u64) -> Vec<StripeChunk> {
        let mut out = Vec::new();
        let mut first = 0;
        for comp in &self.components {
            let n = comp.objects.len();
            if let (true, Some((from, to))) = (n > 0, comp.overlap(offset, len)) {
                let size = u64::from(comp.stripe_size);
                let mut chunks: Vec<Option<StripeChunk>> = vec![None; n];
                let mut pos = from;
                while pos < to {
                    let (i, object_offset) = comp.locate(pos);
                    let piece = (size - pos % size).min(to - pos);
                    match &mut chunks[i] {
                        Some(chunk) => {
                            assert_eq!(chunk.object_offset + chunk.len, object_offset);
                            chunk.len += piece;
                            chunk.pieces.push((pos, piece));
                        }
                        slot @ None => {
                            *slot = Some(StripeChunk {
                                stripe: first + i,
                                object_offset,
                                len: piece,
                                pieces: vec![(pos, piece)],
                            })
                        }
                    }
                    pos += piece;
                }
                out.extend(chunks.into_iter().flatten());
            }
            first += n;
        }
        out
    }

    /// File size implied by the size of object `stripe` (0 for an empty object).
    pub fn file_size_from_object(&self, stripe: usize, object_size: u64) -> u64 {
        let (c, i) = self.component_of(stripe);
        self.components[c].file_size_from_object(i, object_size)
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

    /// Size object `stripe` has when the file is exactly `file_size` bytes long.
    pub fn object_size_for_file(&self, stripe: usize, file_size: u64) -> u64 {
        let (c, i) = self.component_of(stripe);
        self.components[c].object_size_for_file(i, file_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn objects(first: usize, count: usize) -> Vec<StripeObject> {
        (first..first + count)
            .map(|i| StripeObject {
                ost: i as u32,
                object: ObjectId {
                    seq: 0,
                    id: i as u64,
                },
            })
            .collect()
    }

    fn layout(count: usize, size: u32) -> Layout {
        Layout::raid0(size, objects(0, count), PoolName::NONE)
    }

    /// `-E 1M -c 1 -S 64K -E 1G -c 4 -S 1M -E -1 -c COUNT -S 4M`, the last instantiated with
    /// `last` objects (0: not yet).
    fn pfl(last: usize) -> Layout {
        let comp = |start, end, size, count: usize, first| Component {
            start,
            end,
            stripe_size: size,
            stripe_count: if count == 0 { -1 } else { count as i32 },
            start_ost: -1,
            pool: PoolName::NONE,
            objects: objects(first, count),
            kind: ComponentKind::Osts,
        };
        Layout {
            components: vec![
                comp(0, 1 << 20, 65536, 1, 0),
                comp(1 << 20, 1 << 30, 1 << 20, 4, 1),
                comp(1 << 30, EXTENT_EOF, 4 << 20, last, 5),
            ],
            generation: 0,
        }
    }

    /// `-E 64K -L mdt -E -1 -c 2`, the second component instantiated with `osts` objects
    /// (0: not yet).
    fn dom(osts: usize) -> Layout {
        let mut rest = Layout::raid0(65536, objects(0, osts.max(1)), PoolName::NONE).components;
        rest[0].start = 65536;
        if osts == 0 {
            rest[0].objects.clear();
            rest[0].stripe_count = 2;
        }
        let mut components = vec![Component::on_mdt(65536)];
        components.extend(rest);
        Layout {
            components,
            generation: 0,
        }
    }

    #[test]
    fn a_component_on_the_mdt_is_the_first_has_no_objects_and_maps_no_bytes() {
        for l in [dom(0), dom(2)] {
            assert_eq!(l.check(), Ok(()), "{l:?}");
            assert_eq!(l.dom_end(), 65536);
            assert!(l.components[0].is_instantiated() && l.components[0].is_on_mdt());
            assert_eq!(l.locate(100), None);
            // Chunks cover the bytes on OSTs only.
            let chunks = l.chunks(0, 3 * 65536);
            assert!(chunks.iter().all(|c| c.pieces.iter().all(|p| p.0 >= 65536)));
        }
        assert_eq!(dom(0).instantiated_end(), 65536);
        assert_eq!(dom(2).instantiated_end(), EXTENT_EOF);
        assert_eq!(dom(2).object_count(), 2);
        assert_eq!(layout(2, 65536).dom_end(), 0);
        // Not first; too long; with objects; a stripe that is not its extent.
        let mut second = dom(2);
        second.components.swap(0, 1);
        let mut long = dom(0);
        long.components[0] = Component::on_mdt(2 << 20);
        long.components[1].start = 2 << 20;
        let mut with_objects = dom(0);
        with_objects.components[0].objects = objects(0, 1);
        let mut odd = dom(0);
        odd.components[0].stripe_size = 131072;
        for bad in [second, long, with_objects, odd] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    /// A component on the MDT is stored in the format components always had (a stripe
    /// count of 0, which no earlier version accepts); others are stored as before.
    #[test]
    fn components_keep_their_stored_format() {
        let plain = layout(2, 65536);
        let bytes = postcard::to_allocvec(&plain).unwrap();
        // start, end, size, count, start OST, pool, objects: the fields as they were.
        assert_eq!(&bytes[..3], &[1, 0, 0xff]);
        assert_eq!(postcard::from_bytes::<Layout>(&bytes).unwrap(), plain);
        let l = dom(2);
        let bytes = postcard::to_allocvec(&l).unwrap();
        assert_eq!(postcard::from_bytes::<Layout>(&bytes).unwrap(), l);
        let first = postcard::to_allocvec(&l.components[0]).unwrap();
        // start 0, end 65536 (varint 80 80 04), size 65536, count 0.
        assert_eq!(&first[..8], &[0, 0x80, 0x80, 0x04, 0x80, 0x80, 0x04, 0]);
        let spec = LayoutSpec {
            components: vec![
                ComponentSpec {
                    end: 65536,
                    stripe: StripeSpec::default(),
                    kind: ComponentKind::Mdt,
                },
                ComponentSpec {
                    end: EXTENT_EOF,
                    stripe: StripeSpec::default(),
                    kind: ComponentKind::Osts,
                },
            ],
        };
        assert_eq!(spec.check(), Ok(()));
        let bytes = postcard::to_allocvec(&spec).unwrap();
        assert_eq!(postcard::from_bytes::<LayoutSpec>(&bytes).unwrap(), spec);
        // A request on OSTs with the count that stands for the MDT is refused before it
        // could be stored.
        let mut sneaky = spec.clone();
        sneaky.components[0].kind = ComponentKind::Osts;
        sneaky.components[0].stripe.stripe_count = -2;
        assert!(sneaky.check().is_err());
        // The MDT's component only first, at most 1 MiB, naming no striping.
        for (end, count, at) in [(2 << 20, 0, 0), (65536, 2, 0), (65536, 0, 1)] {
            let mut bad = spec.clone();
            bad.components[0].end = end;
            bad.components[0].stripe.stripe_count = count;
            if at == 1 {
                bad.components.insert(
                    0,
                    ComponentSpec {
                        end: 65536,
                        stripe: StripeSpec::default(),
                        kind: ComponentKind::Osts,
                    },
                );
                bad.components[1].end = 131072;
            }
            assert_eq!(bad.check(), Err(LayoutError::BadMdtComponent), "{bad:?}");
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

    #[test]
    fn a_composite_layout_maps_each_extent_to_its_component() {
        let l = pfl(2);
        assert_eq!(l.check(), Ok(()));
        assert_eq!(l.object_count(), 7);
        // The first MiB: one 64 KiB stripe on object 0.
        assert_eq!(l.locate(70_000), Some((0, 70_000)));
        // 1 MiB on: 1 MiB stripes over objects 1..5, by absolute offset (stripe 1 of 4).
        assert_eq!(l.locate(1 << 20), Some((2, 0)));
        assert_eq!(l.locate((5 << 20) + 7), Some((2, (1 << 20) + 7)));
        // 1 GiB on: 4 MiB stripes over objects 5 and 6.
        assert_eq!(l.locate((1 << 30) + (4 << 20)), Some((6, 512 << 20)));
        assert_eq!(l.component_of(4), (1, 3));
        assert_eq!(l.object(6).ost, 6);
        // A write across the first boundary touches objects 0 and 2.
        let c = l.chunks((1 << 20) - 10, 20);
        assert_eq!(
            c.iter()
                .map(|c| (c.stripe, c.object_offset, c.len))
                .collect::<Vec<_>>(),
            vec![(0, (1 << 20) - 10, 10), (2, 0, 10)]
        );
        assert!(l.is_instantiated_over(0, 2 << 30));
        // Not instantiated yet: no objects, nothing to read, a write must ask first.
        let l = pfl(0);
        assert_eq!(l.check(), Ok(()));
        assert_eq!(l.locate(1 << 30), None);
        assert!(l.chunks(1 << 30, 100).is_empty());
        assert!(l.is_instantiated_over(0, 1 << 30));
        assert!(!l.is_instantiated_over((1 << 30) - 1, 2));
        assert_eq!(l.instantiated_end(), 1 << 30);
        assert_eq!(pfl(2).instantiated_end(), EXTENT_EOF);
        assert_eq!(l.stripe_size_at(0), 65536);
        // Instantiated out of file order, or not from the first: refused (the numbers of
        // a file's objects must never change as it grows).
        let mut holed = pfl(2);
        holed.components[1].objects.clear();
        holed.components[1].stripe_count = 4;
        assert_eq!(holed.check(), Err(LayoutError::BadComponents));
        let mut none = pfl(2);
        none.components[0].objects.clear();
        assert_eq!(none.check(), Err(LayoutError::BadComponents));
        none.components[1].objects.clear();
        none.components[2].objects.clear();
        assert_eq!(none.check(), Err(LayoutError::BadObjectCount(0)));
        assert_eq!(l.stripe_size_at(u64::MAX - 1), 4 << 20);
    }

    #[test]
    fn layouts_that_do_not_cover_the_file_are_refused() {
        let mut l = pfl(2);
        l.components[1].start += 65536;
        assert_eq!(l.check(), Err(LayoutError::BadComponents));
        let mut l = pfl(2);
        l.components.pop();
        assert_eq!(l.check(), Err(LayoutError::BadComponents));
        let mut l = pfl(2);
        l.components[0].end = 100_000;
        l.components[1].start = 100_000;
        assert!(matches!(l.check(), Err(LayoutError::BadExtent { .. })));
        let mut l = pfl(2);
        l.components[1].stripe_count = 3;
        assert_eq!(l.check(), Err(LayoutError::BadObjectCount(4)));
        assert_eq!(
            Layout {
                components: vec![],
                generation: 0
            }
            .check(),
            Err(LayoutError::BadComponents)
        );
        let mut none = pfl(0);
        for c in &mut none.components {
            c.objects.clear();
            c.stripe_count = 1;
        }
        assert_eq!(none.check(), Err(LayoutError::BadObjectCount(0)));
    }

    #[test]
    fn objects_below_a_components_extent_stay_empty() {
        let l = pfl(2);
        // A 10-byte file: only object 0 holds data.
        let sizes: Vec<u64> = (0..7).map(|s| l.object_size_for_file(s, 10)).collect();
        assert_eq!(sizes, vec![10, 0, 0, 0, 0, 0, 0]);
        // 1 MiB + 10: object 0 full, object 2 (stripe 1 of the second component) 10 bytes.
        let sizes: Vec<u64> = (0..7)
            .map(|s| l.object_size_for_file(s, (1 << 20) + 10))
            .collect();
        assert_eq!(sizes, vec![1 << 20, 0, 10, 0, 0, 0, 0]);
    }

    proptest! {
        /// Over a composite layout, every byte of a range is in exactly one chunk, at the
        /// object offset its component locates it, and sizes go both ways.
        #[test]
        fn composite_chunks_and_sizes_agree(off in 0u64..3 << 30, len in 1u64..64 << 20, file_size in 0u64..3 << 30) {
            let l = pfl(2);
            let chunks = l.chunks(off, len);
            prop_assert_eq!(chunks.iter().map(|c| c.len).sum::<u64>(), len);
            for c in &chunks {
                let mut obj = c.object_offset;
                for &(file_off, piece) in &c.pieces {
                    prop_assert_eq!(l.locate(file_off), Some((c.stripe, obj)));
                    obj += piece;
                }
            }
            let mut max = 0;
            for s in 0..l.object_count() {
                let object_size = l.object_size_for_file(s, file_size);
                max = max.max(l.file_size_from_object(s, object_size));
            }
            prop_assert_eq!(max, file_size);
        }
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
                    prop_assert_eq!(l.locate(file_off), Some((c.stripe, obj)));
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
