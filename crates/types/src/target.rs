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
