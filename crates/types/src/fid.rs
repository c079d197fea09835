//! File identifiers (FIDs) and OST object ids, as in Lustre.
//!
//! A FID is (sequence, object id, version). Each MDT allocates FIDs from sequences it owns; the
//! root directory has a well-known FID. FIDs map one-to-one onto 64-bit inode numbers so the
//! client never needs a table to translate between them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// First sequence of normal (client-visible) FIDs, as Lustre's FID_SEQ_NORMAL.
pub const FID_SEQ_NORMAL: u64 = 0x2_0000_0400;
/// Base of all sequences Nacre hands out; sequences are `FID_SEQ_BASE + n` with n < 2^32.
pub const FID_SEQ_BASE: u64 = 0x2_0000_0000;
/// Sequence of the root FID (Lustre's FID_SEQ_ROOT).
pub const FID_SEQ_ROOT: u64 = 0x2_0000_0007;
/// Number of FIDs in one sequence before the MDT moves to the next.
pub const FID_OIDS_PER_SEQ: u64 = 1 << 32;
/// Sequences owned by one MDT: MDT `i` allocates from `FID_SEQ_NORMAL + i·FID_SEQS_PER_MDT`
/// on, so a FID names its MDT without a lookup (Lustre keeps this map in its FLDB).
pub const FID_SEQS_PER_MDT: u64 = 1 << 20;
/// Offset, in an MDT's sequences, of those it grants to clients (`MdsOp::GrantFids`, which
/// then give their own new files FIDs): the lower half it allocates from itself, the upper
/// half it grants, so neither can ever hand out a FID of the other.
pub const FID_SEQS_CLIENT_OFFSET: u64 = FID_SEQS_PER_MDT / 2;
/// Most MDTs a file system may have (MDT indexes 0..MDT_COUNT_MAX): their sequence ranges
/// fit below 2^32 sequences, which inode numbers carry.
pub const MDT_COUNT_MAX: u32 = 2048;

/// A file identifier: unique for the life of the file system.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
pub struct Fid {
    /// Sequence, allocated to one MDT.
    pub seq: u64,
    /// Object id inside the sequence.
    pub oid: u32,
    /// Version (always 0 for now; kept for Lustre compatibility of the form).
    pub ver: u32,
}

impl Fid {
    /// The root directory's FID.
    pub const ROOT: Fid = Fid {
        seq: FID_SEQ_ROOT,
        oid: 1,
        ver: 0,
    };
    /// Inode number the kernel uses for the root of a FUSE mount.
    pub const ROOT_INO: u64 = 1;

    /// Builds a FID.
    pub const fn new(seq: u64, oid: u32) -> Fid {
        Fid { seq, oid, ver: 0 }
    }

    /// The 64-bit inode number of this FID (the root maps to 1).
    pub fn to_ino(self) -> u64 {
        if self == Fid::ROOT {
            return Fid::ROOT_INO;
        }
        ((self.seq - FID_SEQ_BASE) << 32) | u64::from(self.oid)
    }

    /// The FID of an inode number produced by [`Fid::to_ino`]; `None` for numbers no FID maps to.
    pub fn from_ino(ino: u64) -> Option<Fid> {
        if ino == Fid::ROOT_INO {
            return Some(Fid::ROOT);
        }
        let fid = Fid::new(FID_SEQ_BASE + (ino >> 32), (ino & 0xffff_ffff) as u32);
        (fid.seq >= FID_SEQ_NORMAL || fid == Fid::ROOT).then_some(fid)
    }

    /// The index of the MDT that holds this FID's inode (the root is MDT0's).
    pub fn mdt_index(self) -> u32 {
        if self.seq < FID_SEQ_NORMAL {
            return 0;
        }
        ((self.seq - FID_SEQ_NORMAL) / FID_SEQS_PER_MDT).min(u64::from(u32::MAX)) as u32
    }

    /// Big-endian key bytes, so KV order follows FID order.
    pub fn to_key(self) -> [u8; 16] {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&self.seq.to_be_bytes());
        key[8..12].copy_from_slice(&self.oid.to_be_bytes());
        key[12..].copy_from_slice(&self.ver.to_be_bytes());
        key
    }

    /// Parses [`Fid::to_key`] bytes; `None` when the slice is not 16 bytes.
    pub fn from_key(key: &[u8]) -> Option<Fid> {
        let key: &[u8; 16] = key.get(..16)?.try_into().ok()?;
        Some(Fid {
            seq: u64::from_be_bytes(key[..8].try_into().ok()?),
            oid: u32::from_be_bytes(key[8..12].try_into().ok()?),
            ver: u32::from_be_bytes(key[12..].try_into().ok()?),
        })
    }
}

impl fmt::Display for Fid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#x}:{:#x}:{:#x}]", self.seq, self.oid, self.ver)
    }
}

impl fmt::Debug for Fid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Fid {
    type Err = String;
    fn from_str(s: &str) -> Result<Fid, String> {
        let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
        let parts: Vec<&str> = inner.split(':').collect();
        let parse = |p: &str| u64::from_str_radix(p.trim_start_matches("0x"), 16);
        match parts.as_slice() {
            [seq, oid, ver] => Ok(Fid {
                seq: parse(seq).map_err(|e| format!("bad FID '{s}': {e}"))?,
                oid: parse(oid).map_err(|e| format!("bad FID '{s}': {e}"))? as u32,
                ver: parse(ver).map_err(|e| format!("bad FID '{s}': {e}"))? as u32,
            }),
            _ => Err(format!("bad FID '{s}': expected [seq:oid:ver]")),
        }
    }
}

/// An OST object: unique per OST. `seq` names the MDT that allocated it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Debug)]
pub struct ObjectId {
    /// Allocating MDT's index.
    pub seq: u64,
    /// Object number within the sequence, allocated by the MDT.
    pub id: u64,
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}:{:#x}", self.seq, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn root_maps_to_ino_one() {
        assert_eq!(Fid::ROOT.to_ino(), 1);
        assert_eq!(Fid::from_ino(1), Some(Fid::ROOT));
    }

    #[test]
    fn a_fid_names_its_mdt() {
        assert_eq!(Fid::ROOT.mdt_index(), 0);
        assert_eq!(Fid::new(FID_SEQ_NORMAL, 5).mdt_index(), 0);
        assert_eq!(
            Fid::new(FID_SEQ_NORMAL + FID_SEQS_PER_MDT - 1, 5).mdt_index(),
            0
        );
        assert_eq!(
            Fid::new(FID_SEQ_NORMAL + 3 * FID_SEQS_PER_MDT, 1).mdt_index(),
            3
        );
        let last = FID_SEQ_NORMAL + u64::from(MDT_COUNT_MAX) * FID_SEQS_PER_MDT - 1;
        assert_eq!(Fid::new(last, 1).mdt_index(), MDT_COUNT_MAX - 1);
        assert!(
            last - FID_SEQ_BASE < 1 << 32,
            "inode numbers carry every MDT's FIDs"
        );
        assert_eq!(
            Fid::from_ino(Fid::new(last, 9).to_ino()),
            Some(Fid::new(last, 9))
        );
    }

    #[test]
    fn small_inos_are_not_fids() {
        assert_eq!(Fid::from_ino(2), None);
    }

    proptest! {
        #[test]
        fn ino_round_trips(n in 0x400u64..0xffff_ffff, oid in 1u32..) {
            let fid = Fid::new(FID_SEQ_BASE + n, oid);
            prop_assert_eq!(Fid::from_ino(fid.to_ino()), Some(fid));
        }

        #[test]
        fn key_round_trips(seq in any::<u64>(), oid in any::<u32>()) {
            let fid = Fid::new(seq, oid);
            prop_assert_eq!(Fid::from_key(&fid.to_key()), Some(fid));
        }

        #[test]
        fn display_parses_back(n in 0x400u64..0xffff_ffff, oid in any::<u32>()) {
            let fid = Fid::new(FID_SEQ_BASE + n, oid);
            prop_assert_eq!(fid.to_string().parse::<Fid>(), Ok(fid));
        }
    }
}
