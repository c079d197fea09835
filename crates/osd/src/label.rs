//! Target labels: `DEV_DIR/nacre-label`, a small text file ending in its own crc32c.
//!
//! ```text
//! format_version=1
//! kind=OST
//! index=3
//! fsname=demo
//! uuid=6f1c...
//! mgsnode=10.0.0.1@tcp
//! crc32c=8d9c1a2b
//! ```

use nacre_types::{target_name, Nid, TargetKind};
use std::io::Write;
use std::path::Path;

/// File name of the label inside a target directory.
pub const LABEL_FILE: &str = "nacre-label";
/// Current label format.
pub const LABEL_FORMAT_VERSION: u32 = 1;
/// Most service nodes of one target.
pub const SERVICENODES_MAX: usize = 8;
/// Longest fsname (Lustre allows 8; we allow a little more).
pub const FSNAME_BYTES_MAX: usize = 16;

/// A target's identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Format version the target was written with.
    pub format_version: u32,
    /// Kind.
    pub kind: TargetKind,
    /// Index within its kind.
    pub index: u32,
    /// File system name.
    pub fsname: String,
    /// Unique id of the target.
    pub uuid: String,
    /// Where the MGS is (absent on the MGS itself when it runs alone).
    pub mgsnode: Option<Nid>,
    /// The servers that may serve this target (Lustre's `--servicenode`), a failover pair
    /// on shared storage; empty: only the one that formatted it. A target with service
    /// nodes is protected by multi-mount protection ([`crate::mmp`]).
    pub servicenodes: Vec<Nid>,
}

/// Why a label could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    /// An MDT index beyond what FIDs can name.
    #[error("MDT index {0} is too large: a file system has at most {max} MDTs (0..{max})", max = nacre_types::fid::MDT_COUNT_MAX)]
    MdtIndex(u32),
    /// An index past what a target name (four hex digits) and a frame can name.
    #[error("target index {0} is too large: indices run 0..={max}", max = nacre_types::TARGET_INDEX_MAX)]
    Index(u32),
    /// The directory has no label: not formatted.
    #[error("{0} is not a formatted Nacre target (no {LABEL_FILE}); run `nacre mkfs` first")]
    NotFormatted(String),
    /// The directory already holds a target.
    #[error("{path} already holds target {name}; refusing to reformat (use --reformat)")]
    AlreadyFormatted {
        /// Directory.
        path: String,
        /// Existing target.
        name: String,
    },
    /// The label is damaged.
    #[error("label of {path} is damaged: {reason}")]
    Corrupt {
        /// Directory.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The label is from a newer format.
    #[error("label of {path} has format version {version}; this nacre reads up to {LABEL_FORMAT_VERSION}")]
    TooNew {
        /// Directory.
        path: String,
        /// Version found.
        version: u32,
    },
    /// Bad fsname.
    #[error("fsname '{0}' must be 1-{FSNAME_BYTES_MAX} characters of [A-Za-z0-9_]")]
    BadFsname(String),
    /// I/O error.
    #[error("{path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Error.
        source: std::io::Error,
    },
}

/// Checks an fsname.
pub fn check_fsname(fsname: &str) -> Result<(), LabelError> {
    let ok = !fsname.is_empty()
        && fsname.len() <= FSNAME_BYTES_MAX
        && fsname
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(LabelError::BadFsname(fsname.into()))
    }
}

impl Label {
    /// A new label with a fresh uuid.
    pub fn new(
        kind: TargetKind,
        index: u32,
        fsname: &str,
        mgsnode: Option<Nid>,
    ) -> Result<Label, LabelError> {
        check_fsname(fsname)?;
        if kind == TargetKind::Mdt && index >= nacre_types::fid::MDT_COUNT_MAX {
            return Err(LabelError::MdtIndex(index));
        }
        if index > nacre_types::TARGET_INDEX_MAX {
            return Err(LabelError::Index(index));
        }
        Ok(Label {
            format_version: LABEL_FORMAT_VERSION,
            kind,
            index,
            fsname: fsname.into(),
            uuid: uuid::Uuid::new_v4().to_string(),
            mgsnode,
            servicenodes: Vec::new(),
        })
    }

    /// The target field of the frames for this target: its file system's slot and its
    /// index ([`nacre_types::target_id`]).
    pub fn target_id(&self) -> u32 {
        nacre_types::target_id(nacre_types::fs_slot(&self.fsname), self.index)
    }

    /// Lustre-style target name.
    pub fn name(&self) -> String {
        target_name(&self.fsname, self.kind, self.index)
    }

    fn encode(&self) -> String {
        let mut s = format!(
            "format_version={}\nkind={}\nindex={}\nfsname={}\nuuid={}\n",
            self.format_version,
            self.kind.as_str(),
            self.index,
            self.fsname,
            self.uuid
        );
        if let Some(m) = self.mgsnode {
            s.push_str(&format!("mgsnode={m}\n"));
        }
        if !self.servicenodes.is_empty() {
            let list: Vec<String> = self.servicenodes.iter().map(Nid::to_string).collect();
            s.push_str(&format!("servicenode={}\n", list.join(",")));
        }
        let crc = crc32c::crc32c(s.as_bytes());
        s.push_str(&format!("crc32c={crc:08x}\n"));
        s
    }

    /// Writes the label into `dir` (created if needed), durably. Fails if one exists unless
    /// `reformat`.
    pub fn write(&self, dir: &Path, reformat: bool) -> Result<(), LabelError> {
        let io = |source| LabelError::Io {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        if !reformat {
            if let Ok(existing) = Label::read(dir) {
                return Err(LabelError::AlreadyFormatted {
                    path: dir.display().to_string(),
                    name: existing.name(),
                });
            }
        }
        let tmp = dir.join(format!("{LABEL_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(self.encode().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, dir.join(LABEL_FILE)).map_err(io)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        Ok(())
    }

    /// Reads and verifies the label of `dir`.
    pub fn read(dir: &Path) -> Result<Label, LabelError> {
        let path = dir.display().to_string();
        let text = match std::fs::read(dir.join(LABEL_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LabelError::NotFormatted(path))
            }
            Err(source) => return Err(LabelError::Io { path, source }),
        };
        Label::decode(&text).map_err(|reason| match reason {
            DecodeError::TooNew(version) => LabelError::TooNew {
                path: path.clone(),
                version,
            },
            DecodeError::Bad(reason) => LabelError::Corrupt {
                path: path.clone(),
                reason,
            },
        })
    }

    fn decode(bytes: &[u8]) -> Result<Label, DecodeError> {
        let bad = |r: &str| DecodeError::Bad(r.to_string());
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let crc_at = text.rfind("crc32c=").ok_or_else(|| bad("no checksum"))?;
        let (body, crc_line) = text.split_at(crc_at);
        let stored = u32::from_str_radix(crc_line.trim_start_matches("crc32c=").trim(), 16)
            .map_err(|_| bad("bad checksum field"))?;
        if crc32c::crc32c(body.as_bytes()) != stored {
            return Err(bad("checksum mismatch"));
        }
        let field = |name: &str| -> Result<&str, DecodeError> {
            body.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                .ok_or_else(|| bad(&format!("missing {name}")))
        };
        let version: u32 = field("format_version")?
            .parse()
            .map_err(|_| bad("bad format_version"))?;
        if version > LABEL_FORMAT_VERSION {
            return Err(DecodeError::TooNew(version));
        }
        let kind = TargetKind::parse(field("kind")?).ok_or_else(|| bad("bad kind"))?;
        let mgsnode = match field("mgsnode") {
            Ok(m) => Some(m.parse().map_err(|_| bad("bad mgsnode"))?),
            Err(_) => None,
        };
        let servicenodes = match field("servicenode") {
            Ok(list) => list
                .split(',')
                .map(|n| n.parse().map_err(|_| bad("bad servicenode")))
                .collect::<Result<Vec<Nid>, _>>()?,
            Err(_) => Vec::new(),
        };
        if servicenodes.len() > SERVICENODES_MAX {
            return Err(bad("too many servicenodes"));
        }
        let index: u32 = field("index")?.parse().map_err(|_| bad("bad index"))?;
        if index > nacre_types::TARGET_INDEX_MAX {
            return Err(bad("index past the largest a target may have"));
        }
        Ok(Label {
            servicenodes,
            format_version: version,
            kind,
            index,
            fsname: field("fsname")?.to_string(),
            uuid: field("uuid")?.to_string(),
            mgsnode,
        })
    }
}

enum DecodeError {
    TooNew(u32),
    Bad(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_past_four_hex_digits_is_refused() {
        assert!(Label::new(TargetKind::Ost, 0xFFFF, "demo", None).is_ok());
        let e = Label::new(TargetKind::Ost, 0x10000, "demo", None).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }

    #[test]
    fn write_read_and_refuse_reformat() {
        let dir = tempfile::tempdir().unwrap();
        let label = Label::new(
            TargetKind::Ost,
            3,
            "demo",
            Some("127.0.0.1@tcp".parse().unwrap()),
        )
        .unwrap();
        label.write(dir.path(), false).unwrap();
        assert_eq!(Label::read(dir.path()).unwrap(), label);
        let mut paired = label.clone();
        paired.servicenodes = vec![
            "10.0.0.1:988@tcp".parse().unwrap(),
            "10.0.0.2:988@tcp".parse().unwrap(),
        ];
        paired.write(dir.path(), true).unwrap();
        assert_eq!(Label::read(dir.path()).unwrap(), paired);
        assert!(matches!(
            label.write(dir.path(), false),
            Err(LabelError::AlreadyFormatted { .. })
        ));
        assert_eq!(label.name(), "demo-OST0003");
    }

    #[test]
    fn damaged_label_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        Label::new(TargetKind::Mdt, 0, "demo", None)
            .unwrap()
            .write(dir.path(), false)
            .unwrap();
        let p = dir.path().join(LABEL_FILE);
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("index=0", "index=1");
        std::fs::write(&p, text).unwrap();
        assert!(matches!(
            Label::read(dir.path()),
            Err(LabelError::Corrupt { .. })
        ));
        assert!(matches!(
            Label::read(&dir.path().join("x")),
            Err(LabelError::NotFormatted(_))
        ));
    }

    #[test]
    fn bad_fsnames() {
        assert!(check_fsname("").is_err());
        assert!(check_fsname("a/b").is_err());
        assert!(check_fsname("seventeen_chars_x").is_err());
        assert!(check_fsname("lustre1").is_ok());
    }
}
