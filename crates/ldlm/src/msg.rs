//! The lock manager's messages: the bits a lock covers and the reference a grant and a
//! callback carry. They travel inside the metadata service's requests and answers.

use nacre_types::{Fid, ObjectId};
use serde::{Deserialize, Serialize};

/// The name → inode binding of the inode (its dentries): revoked by unlink, rename, and
/// directory migration.
pub const LOOKUP: u8 = 1;
/// The inode's attributes (mode, owner, times, links, size while no other client writes);
/// for a directory also its entries (negative lookups, listings).
pub const UPDATE: u8 = 2;
/// A regular file's layout.
pub const LAYOUT: u8 = 4;
/// An open of a regular file for reading that the client keeps after its close (Lustre's
/// open lock): the MDT counts it as open until the client closes it, which it does when
/// the lock is called back. Granted only with an open for reading; revoked by what takes
/// a link away from the file (unlink, rename over it) and by its migration, including
/// the holder's own such changes, so an unlinked file is never kept as an orphan by a
/// cached open.
pub const OPEN: u8 = 8;
/// The bytes of a regular file's component on the MDT (data on the MDT; Lustre's
/// `MDS_INODELOCK_DOM`): its holder's kernel keeps their pages. Granted with a read of those
/// bytes (`DomRead`); revoked by another client's write or truncate of them.
pub const DOM: u8 = 16;
/// A directory delegated to its holder (issue 44 item 2; docs/plans/round-trips.md, R2): the
/// holder may answer creates in it itself and send them later (`CreateBatch`), so no other
/// client may see the directory's entries or attributes until it has sent them. Held only
/// with `UPDATE` and by one client at a time: granted while no other client holds `UPDATE`
/// or it on the directory, and no other client is granted either while it is held. Revoked
/// by any other client's request on the directory (a change in it, a lookup, a listing, its
/// attributes), after the holder sent what it answered.
pub const DELEGATION: u8 = 32;
/// The bits granted with entries (lookups, creates, listings): all but `OPEN`, `DOM` and
/// `DELEGATION`.
pub const ENTRY_BITS: u8 = LOOKUP | UPDATE | LAYOUT;
/// Every bit.
pub const BITS_ALL: u8 = ENTRY_BITS | OPEN | DOM | DELEGATION;

/// Most lock references one callback answer or one cancel carries.
pub const REFS_PER_MESSAGE_MAX: usize = 1_024;

/// A lock: its handle (unique in its namespace), the inode and the bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LockRef {
    /// Handle, unique within the server's namespace.
    pub handle: u64,
    /// The inode the lock is on.
    pub fid: Fid,
    /// `LOOKUP` | `UPDATE` | `LAYOUT` | `OPEN` | `DOM` | `DELEGATION`.
    pub bits: u8,
}

impl LockRef {
    /// True if the reference is one a server may send: known bits, at least one.
    pub fn is_valid(&self) -> bool {
        self.bits != 0 && self.bits & !BITS_ALL == 0
    }
}

/// An extent lock on an OST object: bytes `start..=end` (`end` `u64::MAX`: however the
/// object grows), for reading or for writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ExtentRef {
    /// Handle, unique within the OST's namespace.
    pub handle: u64,
    /// The object.
    pub object: ObjectId,
    /// First byte.
    pub start: u64,
    /// Last byte.
    pub end: u64,
    /// Held for writing.
    pub write: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes decode to a reference or an error, never a panic; a reference survives
        /// a round trip.
        #[test]
        fn decode_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                           handle in any::<u64>(), seq in any::<u64>(), oid in any::<u32>(),
                           bits in any::<u8>()) {
            let _ = postcard::from_bytes::<LockRef>(&bytes);
            let _ = postcard::from_bytes::<Vec<LockRef>>(&bytes);
            let r = LockRef { handle, fid: Fid::new(seq, oid), bits };
            let back: LockRef = postcard::from_bytes(&postcard::to_allocvec(&r).unwrap()).unwrap();
            prop_assert_eq!(back, r);
            prop_assert_eq!(r.is_valid(), bits != 0 && bits & !BITS_ALL == 0);
            let _ = postcard::from_bytes::<Vec<ExtentRef>>(&bytes);
            let e = ExtentRef { handle, object: ObjectId { seq, id: u64::from(oid) }, start: seq,
                                end: handle, write: bits & 1 != 0 };
            let back: ExtentRef = postcard::from_bytes(&postcard::to_allocvec(&e).unwrap()).unwrap();
            prop_assert_eq!(back, e);
        }
    }
}
