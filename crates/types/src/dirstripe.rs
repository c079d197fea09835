//! Striped directories (Lustre's LMV): one directory's entries spread over several MDTs, each
//! name in the shard its hash picks.

use crate::Fid;
use serde::{Deserialize, Serialize};

/// Most shards a striped directory may have.
pub const DIR_STRIPE_COUNT_MAX: usize = 256;

/// How a name picks its shard (Lustre's `lmv_hash_type` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirHash {
    /// FNV-1a, 64 bits, of the name, modulo the shard count (Lustre's default).
    Fnv1a64,
    /// The sum of the name's bytes modulo the shard count.
    AllChar,
}

impl DirHash {
    /// Lustre's name for it.
    pub fn name(self) -> &'static str {
        match self {
            DirHash::Fnv1a64 => "fnv_1a_64",
            DirHash::AllChar => "all_char",
        }
    }

    /// The shard of `name` among `count` shards.
    pub fn shard(self, name: &[u8], count: usize) -> usize {
        assert!(count > 0, "a striped directory has shards");
        let h = match self {
            DirHash::Fnv1a64 => fnv_1a_64(name),
            DirHash::AllChar => name.iter().map(|&b| u64::from(b)).sum(),
        };
        (h % count as u64) as usize
    }
}

impl std::str::FromStr for DirHash {
    type Err = String;
    fn from_str(s: &str) -> Result<DirHash, String> {
        match s {
            "fnv_1a_64" => Ok(DirHash::Fnv1a64),
            "all_char" => Ok(DirHash::AllChar),
            other => Err(format!(
                "directory hash '{other}': use fnv_1a_64 or all_char"
            )),
        }
    }
}

/// FNV-1a 64-bit hash.
pub fn fnv_1a_64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The layout of a striped directory: its hash and its shards, in stripe order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirStripe {
    /// How names pick shards.
    pub hash: DirHash,
    /// The shard directories (each on its own MDT, which its FID names).
    pub shards: Vec<Fid>,
}

impl DirStripe {
    /// Checks a stripe layout that came from elsewhere (a reply, a disk) before names are
    /// hashed over it: 1 to [`DIR_STRIPE_COUNT_MAX`] shards.
    pub fn check(&self) -> Result<(), String> {
        let n = self.shards.len();
        if n == 0 || n > DIR_STRIPE_COUNT_MAX {
            return Err(format!(
                "directory stripe of {n} shards (1 to {DIR_STRIPE_COUNT_MAX})"
            ));
        }
        Ok(())
    }

    /// The shard directory holding `name`.
    pub fn shard_for(&self, name: &[u8]) -> Fid {
        self.shards[self.hash.shard(name, self.shards.len())]
    }
}

/// A directory's default for new subdirectories (`setdirstripe -D`, Lustre's default LMV):
/// they are created striped (or placed) this way, and inherit it for `max_inherit` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirDefault {
    /// Shards of each new subdirectory (1: not striped, only placed; -1: every MDT).
    pub count: i32,
    /// MDT of the first shard (`u32::MAX`: the MDS picks).
    pub start: u32,
    /// Name hash.
    pub hash: DirHash,
    /// Levels of subdirectories that inherit the default (-1: all).
    pub max_inherit: i32,
}

/// Levels of subdirectories a default reaches unless told (Lustre's default too).
pub const DIR_DEFAULT_MAX_INHERIT: i32 = 3;

impl DirDefault {
    /// The default a new subdirectory gets from this one: one level less, none at the end.
    pub fn inherited(&self) -> Option<DirDefault> {
        match self.max_inherit {
            -1 => Some(*self),
            n if n > 1 => Some(DirDefault {
                max_inherit: n - 1,
                ..*self
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_1a_64_matches_the_reference_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv_1a_64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv_1a_64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv_1a_64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn defaults_fade_out_after_max_inherit_levels() {
        let d = DirDefault {
            count: 2,
            start: u32::MAX,
            hash: DirHash::Fnv1a64,
            max_inherit: 2,
        };
        let child = d.inherited().unwrap();
        assert_eq!(child.max_inherit, 1);
        assert_eq!(
            child.inherited(),
            None,
            "the grandchild's children are plain"
        );
        let forever = DirDefault {
            max_inherit: -1,
            ..d
        };
        assert_eq!(forever.inherited(), Some(forever));
    }

    #[test]
    fn names_spread_over_shards_and_stay_put() {
        let s = DirStripe {
            hash: DirHash::Fnv1a64,
            shards: (0..4).map(|i| Fid::new(0x2_0000_0400 + i, 1)).collect(),
        };
        let mut hits = [0; 4];
        for i in 0..4000 {
            let name = format!("file.{i}");
            let f = s.shard_for(name.as_bytes());
            assert_eq!(f, s.shard_for(name.as_bytes()), "stable");
            hits[s.shards.iter().position(|&x| x == f).unwrap()] += 1;
        }
        assert!(hits.iter().all(|&n| n > 800), "{hits:?}");
        assert_eq!(DirHash::AllChar.shard(b"ab", 4), (97 + 98) % 4);
        assert_eq!("all_char".parse::<DirHash>(), Ok(DirHash::AllChar));
        assert!("crc".parse::<DirHash>().unwrap_err().contains("fnv_1a_64"));
    }
}
