//! Target kinds and names.

use serde::{Deserialize, Serialize};

/// Kind of target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub enum TargetKind {
    /// Management target.
    Mgt,
    /// Metadata target.
    Mdt,
    /// Object storage target.
    Ost,
}

impl TargetKind {
    /// Lustre-style short name: "MGS", "MDT", "OST".
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Mgt => "MGS",
            TargetKind::Mdt => "MDT",
            TargetKind::Ost => "OST",
        }
    }

    /// Parses "MGS"/"MGT", "MDT", "OST" (any case).
    pub fn parse(s: &str) -> Option<TargetKind> {
        match s.to_ascii_uppercase().as_str() {
            "MGS" | "MGT" => Some(TargetKind::Mgt),
            "MDT" => Some(TargetKind::Mdt),
            "OST" => Some(TargetKind::Ost),
            _ => None,
        }
    }
}

/// Lustre-style target name, e.g. `demo-OST0003`.
pub fn target_name(fsname: &str, kind: TargetKind, index: u32) -> String {
    match kind {
        TargetKind::Mgt => "MGS".to_string(),
        _ => format!("{fsname}-{}{index:04x}", kind.as_str()),
    }
}

/// The largest target index (OSTs and MDTs are named with four hex digits, as Lustre's
/// `OST0000`..`OSTffff`); the bits above it in a frame's target field name the file system.
pub const TARGET_INDEX_MAX: u32 = 0xFFFF;

/// A file system's slot: 16 bits naming it in every frame's target field beside the
/// target's index, so one server process can serve several file systems' `OST0000`s
/// apart. Derived from the name (never 0, which names no file system: the MGS's own
/// requests, discovery, the self-test). Two file systems one process serves or one MGS
/// manages must not share a slot: both refuse the second ([`fs_slot`] collisions are
/// 1 in 65,535 per pair of names).
pub fn fs_slot(fsname: &str) -> u16 {
    if fsname.is_empty() {
        return 0;
    }
    let h = crate::dirstripe::fnv_1a_64(fsname.as_bytes());
    let folded = (h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) as u16;
    // 1..=65535: 0 is kept for "no file system".
    (u32::from(folded) % 0xFFFF + 1) as u16
}

/// The frame target field naming target `index` of the file system in `slot`.
pub fn target_id(slot: u16, index: u32) -> u32 {
    assert!(
        index <= TARGET_INDEX_MAX,
        "target index {index} past {TARGET_INDEX_MAX}"
    );
    u32::from(slot) << 16 | index
}

/// The index a frame's target field names.
pub fn target_index(id: u32) -> u32 {
    id & TARGET_INDEX_MAX
}

/// The file-system slot a frame's target field names (0: none).
pub fn target_slot(id: u32) -> u16 {
    (id >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_stable_never_zero_and_ids_split_back() {
        assert_eq!(fs_slot(""), 0);
        for name in ["demo", "lustre", "a", "scratch_02", "ZZZZZZZZZZZZZZZZ"] {
            let s = fs_slot(name);
            assert_ne!(s, 0, "{name}");
            assert_eq!(s, fs_slot(name), "a slot is a function of the name");
            let id = target_id(s, 0x1234);
            assert_eq!(target_index(id), 0x1234);
            assert_eq!(target_slot(id), s);
        }
        assert_ne!(fs_slot("demo"), fs_slot("demo2"));
        assert_eq!(target_slot(7), 0, "a bare index names no file system");
    }

    #[test]
    #[should_panic(expected = "past")]
    fn an_index_past_the_limit_is_a_broken_invariant() {
        target_id(1, TARGET_INDEX_MAX + 1);
    }
}
