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

/// A RAID0 striping of the file bytes `start..end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// when a write first reaches its extent).
    pub objects: Vec<StripeObject>,
}

impl Component {
    /// True once its objects exist.
    pub fn is_instantiated(&self) -> bool {
        !self.objects.is_empty()
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

    /// Checks a component that came from elsewhere (a reply, a disk).
    pub fn check(&self) -> Result<(), LayoutError> {
        check_stripe_size(self.stripe_size)?;
        let size = u64::from(self.stripe_size);
        let aligned = |x: u64| x == EXTENT_EOF || x.is_multiple_of(size);
        if self.start >= self.end || !aligned(self.start) || !aligned(self.end) {
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
            self.is_instantiated(),
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
