//! One component of a file's layout: a RAID0 striping of one extent of the file (Lustre's
//! progressive file layouts, PFL: `-E 1M -c 1 -E 1G -c 4 -E -1 -c -1`).
//!
//! The arithmetic works on absolute file offsets, as Lustre's does: byte `x` of the
//! component's extent is in object `(x / S) % C` at object offset `(x / (S * C)) * S + x % S`
//! (stripe size S, count C). A component that starts past 0 leaves its objects sparse below
//! its first byte; extents start and end on multiples of the stripe size, so every stripe
//! lies in one component.

use super::{check_stripe_size, LayoutError, PoolName, StripeObject};
use crate::limits::STRIPE_COUNT_MAX;
use serde::{Deserialize, Serialize};

/// The end of a component that runs to the end of the file (Lustre's `-E -1`, `EOF`).
pub const EXTENT_EOF: u64 = u64::MAX;

/// Largest extent a component on the MDT may have (Lustre's DoM limit: 1 MiB).
pub const DOM_BYTES_MAX: u64 = 1 << 20;

/// Where a component's bytes live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ComponentKind {
    /// A RAID0 striping over OST objects.
    #[default]
    Osts,
    /// On the file's own MDT, in its store (data on the MDT, Lustre's DoM: `-L mdt`): the
    /// first component only, at most [`DOM_BYTES_MAX`] long, one copy as the MDT has.
    Mdt,
}

/// A RAID0 striping of the file bytes `start..end`, over OST objects or on the MDT.
///
/// Stored and sent as its seven fields before kinds existed ([`Stored`]): a component on
/// the MDT is written with a stripe count of 0, which no version ever wrote and every
/// earlier version refuses, so records and replies kept their format and an older reader
/// refuses a layout with data on the MDT instead of misreading it (Lustre likewise keeps
/// DoM in the same `lov_comp_md_entry`, with a pattern of its own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored", into = "Stored")]
pub struct Component {
    /// First file byte of the extent (a multiple of `stripe_size`).
    pub start: u64,
    /// One past the last file byte ([`EXTENT_EOF`]: to the end of the file, however far).
    pub end: u64,
    /// Bytes per stripe.
    pub stripe_size: u32,
    /// Stripes it is to have when instantiated: -1 = every OST of its pool. Equal to the
    /// object count once instantiated.
    pub stripe_count: i32,
    /// First OST when instantiated: -1 = chosen by the allocator.
    pub start_ost: i32,
    /// The OST pool its objects are (to be) allocated in (none: any OST).
    pub pool: PoolName,
    /// Its objects in stripe order; empty until the component is instantiated (by the MDT,
    /// when a write first reaches its extent), and always for a component on the MDT.
    pub objects: Vec<StripeObject>,
    /// Where its bytes live.
    pub kind: ComponentKind,
}

/// The stored and sent form of a [`Component`]: its fields but the kind, in their order.
#[derive(Clone, Serialize, Deserialize)]
pub struct Stored {
    start: u64,
    end: u64,
    stripe_size: u32,
    /// 0 for a component on the MDT.
    stripe_count: i32,
    start_ost: i32,
    pool: PoolName,
    objects: Vec<StripeObject>,
}

impl From<Stored> for Component {
    fn from(s: Stored) -> Component {
        let kind = match s.stripe_count {
            0 => ComponentKind::Mdt,
            _ => ComponentKind::Osts,
        };
        Component {
            start: s.start,
            end: s.end,
            stripe_size: s.stripe_size,
            stripe_count: if kind == ComponentKind::Mdt {
                1
            } else {
                s.stripe_count
            },
            start_ost: s.start_ost,
            pool: s.pool,
            objects: s.objects,
            kind,
        }
    }
}

impl From<Component> for Stored {
    fn from(c: Component) -> Stored {
        Stored {
            start: c.start,
            end: c.end,
            stripe_size: c.stripe_size,
            stripe_count: if c.is_on_mdt() { 0 } else { c.stripe_count },
            start_ost: c.start_ost,
            pool: c.pool,
            objects: c.objects,
        }
    }
}

impl Component {
    /// A component on the MDT over the file bytes `0..end`.
    pub fn on_mdt(end: u64) -> Component {
        Component {
            start: 0,
            end,
            stripe_size: u32::try_from(end).unwrap_or(u32::MAX),
            stripe_count: 1,
            start_ost: -1,
            pool: PoolName::NONE,
            objects: Vec::new(),
            kind: ComponentKind::Mdt,
        }
    }

    /// True once its objects exist (a component on the MDT always is: it has none).
    pub fn is_instantiated(&self) -> bool {
        self.kind == ComponentKind::Mdt || !self.objects.is_empty()
    }

    /// True for a component whose bytes are on the MDT.
    pub fn is_on_mdt(&self) -> bool {
        self.kind == ComponentKind::Mdt
    }

    /// True if file byte `offset` is in its extent.
    pub fn contains(&self, offset: u64) -> bool {
        self.start <= offset && offset < self.end
    }

    /// The part of `offset..offset + len` in its extent, if any.
    pub fn overlap(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let from = offset.max(self.start);
        let to = offset.saturating_add(len).min(self.end);
        (from < to).then_some((from, to))
    }

    /// Checks a component that came from elsewhere (a reply, a disk): its start on 64 KiB,
    /// its end on its stripe size (its start too, but after a component on the MDT:
    /// `Layout::check`).
    pub fn check(&self) -> Result<(), LayoutError> {
        check_stripe_size(self.stripe_size)?;
        let size = u64::from(self.stripe_size);
        let aligned = |x: u64| x == EXTENT_EOF || x.is_multiple_of(size);
        // The start of one after a component on the MDT need only be on 64 KiB (checked
        // with the layout: `Layout::check`).
        let start_ok = self
            .start
            .is_multiple_of(u64::from(crate::limits::STRIPE_SIZE_BYTES_MIN));
        if self.start >= self.end || !start_ok || !aligned(self.end) {
            return Err(LayoutError::BadExtent {
                start: self.start,
                end: self.end,
                stripe_size: self.stripe_size,
            });
        }
        if !self.pool.is_valid() {
            return Err(LayoutError::BadPool);
        }
        if self.objects.len() > usize::from(STRIPE_COUNT_MAX) {
            return Err(LayoutError::BadObjectCount(self.objects.len()));
        }
        if self.is_on_mdt() {
            // One "stripe" as long as the extent, from byte 0, no objects, no pool.
            let ok = self.start == 0
                && self.end <= DOM_BYTES_MAX
                && u64::from(self.stripe_size) == self.end
                && self.stripe_count == 1
                && self.objects.is_empty()
                && self.pool.is_none();
            return if ok {
                Ok(())
            } else {
                Err(LayoutError::BadMdtComponent)
            };
        }
        if self.is_instantiated() && self.stripe_count != self.objects.len() as i32 {
            return Err(LayoutError::BadObjectCount(self.objects.len()));
        }
        if self.stripe_count < -1 || self.stripe_count == 0 {
            return Err(LayoutError::BadStripeCount(self.stripe_count));
        }
        Ok(())
    }

    /// Object index (in this component) and object offset of file byte `offset`, which
    /// must be in the extent of an instantiated component.
    pub fn locate(&self, offset: u64) -> (usize, u64) {
        assert!(
            !self.objects.is_empty(),
            "locate in a component without objects"
        );
        let size = u64::from(self.stripe_size);
        let count = self.objects.len() as u64;
        let stripe_number = offset / size;
        let stripe = (stripe_number % count) as usize;
        let object_offset = (stripe_number / count) * size + offset % size;
        (stripe, object_offset)
    }

    /// File size implied by the size of its object `stripe` (0 for an empty object).
    pub fn file_size_from_object(&self, stripe: usize, object_size: u64) -> u64 {
        if object_size == 0 || self.objects.is_empty() {
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

    /// Size its object `stripe` has when the file is exactly `file_size` bytes long: the
    /// RAID0 size of `min(file_size, end)` if the object holds any byte of the extent below
    /// that, else 0 (an object holding nothing yet stays empty, not sparse).
    pub fn object_size_for_file(&self, stripe: usize, file_size: u64) -> u64 {
        if self.objects.is_empty() {
            return 0;
        }
        let at_start = self.raid0_object_size(stripe, self.start);
        let at_end = self.raid0_object_size(stripe, file_size.min(self.end));
        if at_end > at_start {
            at_end
        } else {
            0
        }
    }

    /// Size of object `stripe` of a RAID0 striping of the whole file from byte 0, when the
    /// file is `file_size` bytes long.
    fn raid0_object_size(&self, stripe: usize, file_size: u64) -> u64 {
        let size = u64::from(self.stripe_size);
        let round = size * self.objects.len() as u64;
        let full_rounds = file_size / round;
        let rest = file_size % round;
        let start = stripe as u64 * size;
        full_rounds * size + rest.saturating_sub(start).min(size)
    }
}
