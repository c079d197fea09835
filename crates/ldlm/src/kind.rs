//! What a namespace locks: the resources, the part of one a lock holds or a change touches,
//! and when two parts conflict. A metadata target locks inode bits ([`InodeBits`]); an
//! object storage target locks byte extents of objects, read or write ([`Extents`]).

use crate::msg::{ExtentRef, LockRef, BITS_ALL, DELEGATION, OPEN, UPDATE};
use nacre_types::{Fid, ObjectId};
use std::fmt::Debug;
use std::hash::Hash;

/// A kind of lock a lock namespace (`Namespace`, server.rs) keeps.
pub trait Kind: Send + Sync + 'static {
    /// What a lock is on.
    type Res: Copy + Eq + Hash + Debug + Send + Sync + 'static;
    /// The part of a resource a lock holds or a change touches.
    type Part: Copy + Eq + Debug + Send + Sync + 'static;
    /// A lock as the wire carries it.
    type Ref: Copy + PartialEq + Debug + Send + Sync + 'static;

    /// True if a change of `change` must call back a lock holding `held`.
    fn conflicts(held: &Self::Part, change: &Self::Part) -> bool;
    /// True if a lock holding `held` serves a request for `wanted`.
    fn covers(held: &Self::Part, wanted: &Self::Part) -> bool;
    /// What may be granted for `wanted`, given the parts other clients hold and the parts
    /// changes under way touch on the resource (`None`: nothing); `contended`: the resource
    /// had to be called back often lately.
    fn grantable(
        wanted: &Self::Part,
        others: &[Self::Part],
        changing: &[Self::Part],
        contended: bool,
    ) -> Option<Self::Part>;
    /// True if a change of `change` by the holder of `held` itself calls it back too (as a
    /// rule a client's own changes leave its locks alone: its caches follow its changes).
    fn revoked_by_holder(held: &Self::Part, change: &Self::Part) -> bool {
        let _ = (held, change);
        false
    }
    /// True if a lock holding `held` may be called back by a change of its own holder
    /// ([`Kind::revoked_by_holder`] for some change).
    fn holder_revocable(held: &Self::Part) -> bool {
        let _ = held;
        false
    }
    /// True if calling back `held` for `change` counts towards the resource's contention.
    fn contends(held: &Self::Part, change: &Self::Part) -> bool;
    /// True if a client may hold `part` (a replayed lock is checked with it).
    fn valid(part: &Self::Part) -> bool;
    /// True if a request on `part` changes what it covers (a write; not a read): a lock
    /// replayed after a restart is refused on a resource changed since by someone else.
    fn changes(part: &Self::Part) -> bool {
        let _ = part;
        true
    }
    /// The wire form of a lock.
    fn to_ref(handle: u64, res: Self::Res, part: Self::Part) -> Self::Ref;
    /// A lock's handle, resource and part from its wire form.
    fn from_ref(r: &Self::Ref) -> (u64, Self::Res, Self::Part);
}

/// Inode bits of a metadata target: shared client locks on `LOOKUP`, `UPDATE`, `LAYOUT`,
/// `OPEN`; a contended `UPDATE` bit is left out of grants for a while. An `OPEN` lock is
/// called back from its own holder too (its cached open must be closed before the file
/// loses a link here).
pub struct InodeBits;

impl Kind for InodeBits {
    type Res = Fid;
    type Part = u8;
    type Ref = LockRef;

    fn conflicts(held: &u8, change: &u8) -> bool {
        held & change != 0
    }

    fn covers(held: &u8, wanted: &u8) -> bool {
        held & wanted == *wanted
    }

    fn grantable(wanted: &u8, others: &[u8], changing: &[u8], contended: bool) -> Option<u8> {
        let mut bits = if contended { wanted & !UPDATE } else { *wanted };
        // A delegated directory is its holder's alone (msg.rs, DELEGATION): no one else
        // is granted its UPDATE or a delegation; a delegation comes only with UPDATE, to
        // a client no other holds UPDATE beside.
        if others.iter().any(|o| o & DELEGATION != 0) {
            bits &= !(UPDATE | DELEGATION);
        }
        if bits & UPDATE == 0 || others.iter().any(|o| o & UPDATE != 0) {
            bits &= !DELEGATION;
        }
        (bits != 0 && changing.iter().all(|c| c & bits == 0)).then_some(bits)
    }

    fn revoked_by_holder(held: &u8, change: &u8) -> bool {
        held & change & OPEN != 0
    }

    fn holder_revocable(held: &u8) -> bool {
        held & OPEN != 0
    }

    fn contends(held: &u8, change: &u8) -> bool {
        held & change & UPDATE != 0
    }

    fn valid(part: &u8) -> bool {
        *part != 0 && part & !BITS_ALL == 0
    }

    fn to_ref(handle: u64, fid: Fid, bits: u8) -> LockRef {
        LockRef { handle, fid, bits }
    }

    fn from_ref(r: &LockRef) -> (u64, Fid, u8) {
        (r.handle, r.fid, r.bits)
    }
}

/// A byte extent of an object, inclusive at both ends, held for reading (shared) or for
/// writing (exclusive: the holder may keep data not yet written to the OST).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First byte.
    pub start: u64,
    /// Last byte (`u64::MAX`: to the end of the object, however it grows).
    pub end: u64,
    /// Held for writing.
    pub write: bool,
}

impl Extent {
    /// The whole object.
    pub const WHOLE: (u64, u64) = (0, u64::MAX);

    /// `[offset, offset + len)` (at least one byte), for reading or writing.
    pub fn of(offset: u64, len: u64, write: bool) -> Extent {
        Extent {
            start: offset,
            end: offset.saturating_add(len.max(1) - 1),
            write,
        }
    }

    /// True if the two extents share a byte.
    pub fn overlaps(&self, other: &Extent) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// Byte extents of objects on an object storage target (Lustre's extent locks): read locks
/// share, a write lock excludes every other lock on its bytes. A grant is widened as far
/// as no conflicting lock or change allows (the whole object when no one else is there),
/// except on a contended object, where write locks are not granted at all (writes go
/// through) and read locks only for the bytes asked for.
pub struct Extents;

impl Kind for Extents {
    type Res = ObjectId;
    type Part = Extent;
    type Ref = ExtentRef;

    fn conflicts(held: &Extent, change: &Extent) -> bool {
        held.overlaps(change) && (held.write || change.write)
    }

    fn covers(held: &Extent, wanted: &Extent) -> bool {
        held.start <= wanted.start && held.end >= wanted.end && (held.write || !wanted.write)
    }

    fn grantable(
        wanted: &Extent,
        others: &[Extent],
        changing: &[Extent],
        contended: bool,
    ) -> Option<Extent> {
        if !Self::valid(wanted) || (contended && wanted.write) {
            return None;
        }
        let mut grant = if contended {
            *wanted
        } else {
            Extent {
                start: 0,
                end: u64::MAX,
                write: wanted.write,
            }
        };
        for x in others.iter().chain(changing) {
            if !(x.write || wanted.write) {
                continue;
            }
            if x.overlaps(wanted) {
                return None;
            }
            if x.end < wanted.start {
                grant.start = grant.start.max(x.end + 1);
            } else {
                grant.end = grant.end.min(x.start - 1);
            }
        }
        Some(grant)
    }

    fn contends(_held: &Extent, _change: &Extent) -> bool {
        true
    }

    fn valid(part: &Extent) -> bool {
        part.start <= part.end
    }

    fn changes(part: &Extent) -> bool {
        part.write
    }

    fn to_ref(handle: u64, object: ObjectId, e: Extent) -> ExtentRef {
        ExtentRef {
            handle,
            object,
            start: e.start,
            end: e.end,
            write: e.write,
        }
    }

    fn from_ref(r: &ExtentRef) -> (u64, ObjectId, Extent) {
        (
            r.handle,
            r.object,
            Extent {
                start: r.start,
                end: r.end,
                write: r.write,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ext(start: u64, end: u64, write: bool) -> Extent {
        Extent { start, end, write }
    }

    #[test]
    fn a_grant_is_widened_up_to_the_conflicting_locks() {
        let want = ext(100, 199, false);
        assert_eq!(
            Extents::grantable(&want, &[], &[], false),
            Some(ext(0, u64::MAX, false))
        );
        // Readers do not narrow a reader; a writer at each side does.
        let others = [ext(0, 49, true), ext(500, 999, true), ext(300, 399, false)];
        assert_eq!(
            Extents::grantable(&want, &others, &[], false),
            Some(ext(50, 499, false))
        );
        // A writer is narrowed by readers too.
        let w = ext(100, 199, true);
        assert_eq!(
            Extents::grantable(&w, &others, &[], false),
            Some(ext(50, 299, true))
        );
        // Anything conflicting on the bytes asked for, held or being changed: nothing.
        assert_eq!(
            Extents::grantable(&want, &[ext(150, 150, true)], &[], false),
            None
        );
        assert_eq!(
            Extents::grantable(&want, &[], &[ext(199, 300, true)], false),
            None
        );
        assert_eq!(
            Extents::grantable(&w, &[ext(0, u64::MAX, false)], &[], false),
            None
        );
        // Contended: readers get what they asked for, writers nothing.
        assert_eq!(Extents::grantable(&want, &[], &[], true), Some(want));
        assert_eq!(Extents::grantable(&w, &[], &[], true), None);
    }

    proptest! {
        /// A grant covers what was asked for and conflicts with no other lock or change.
        #[test]
        fn a_grant_never_conflicts(
            want in (0u64..1000, 0u64..100, any::<bool>()),
            others in proptest::collection::vec((0u64..1000, 0u64..100, any::<bool>()), 0..8),
            changing in proptest::collection::vec((0u64..1000, 0u64..100, any::<bool>()), 0..3),
            contended in any::<bool>(),
        ) {
            let e = |(s, l, w): (u64, u64, bool)| Extent::of(s, l, w);
            let want = e(want);
            let others: Vec<Extent> = others.into_iter().map(e).collect();
            let changing: Vec<Extent> = changing.into_iter().map(e).collect();
            if let Some(g) = Extents::grantable(&want, &others, &changing, contended) {
                prop_assert!(Extents::covers(&g, &want));
                prop_assert_eq!(g.write, want.write);
                for x in others.iter().chain(&changing) {
                    prop_assert!(!Extents::conflicts(x, &g) && !Extents::conflicts(&g, x));
                }
            } else {
                let blocked = others.iter().chain(&changing).any(|x| Extents::conflicts(x, &want))
                    || (contended && want.write);
                prop_assert!(blocked);
            }
        }
    }
}
