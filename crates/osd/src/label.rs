//! Target labels: `DEV_DIR/nacre-label`, a small text file ending in its own crc32c.
//!
//! ```text
//! format_version=2
//! kind=OST
//! index=3
//! fsname=demo
//! uuid=6f1c...
//! mgsnode=10.0.0.1@tcp
//! crc32c=8d9c1a2b
//! ```
//!
//! **The target's format version.** `format_version` is the format of the whole target:
//! the label and every store in its directory (the MDT's metadata store, the OST's objects
//! and files, the MGS's files). A release that changes any on-disk format of a target
//! raises [`LABEL_FORMAT_VERSION`]; one that does not leaves it. A server refuses a label
//! newer than it reads ([`LabelError::TooNew`]) and raises an older one to its own
//! ([`Label::upgrade`]) once multi-mount protection is taken and before anything in the
//! target is written: from then on no older nacre opens the target, so writers may write
//! the newest formats and an older server never meets a record it would take for damage.
//!
//! * 1: the baseline (the formats of the first release).
//! * 2: the OST's fence log is `fences.2` (a header with its version; an older OST would
//!   read the old `fences`, gone, and forget every fence), and an owner attribute
//!   (`user.nacre.owner`) of another length than 12 bytes is a newer nacre's, kept as it
//!   is (an older OST overwrites it at the next write).
//!
//! **Keys.** Readers look keys up by name and ignore the others, so a key may be added
//! without a new version only if an older reader that ignores it does nothing unsafe. A key
//! whose absence an older reader must not ignore (as `servicenode`: without it, a failover
//! target would be served without multi-mount protection) comes with a new format version.

use nacre_types::{target_name, Nid, TargetKind};
use std::io::Write;
use std::path::Path;

/// File name of the label inside a target directory.
pub const LABEL_FILE: &str = "nacre-label";
/// This release's target format version: what [`Label::new`] writes, what
/// [`Label::upgrade`] raises an older label to, and the newest read (module docs).
pub const LABEL_FORMAT_VERSION: u32 = 2;
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
        write_text(dir, &self.encode())
    }

    /// Reads and verifies the label of `dir`.
    pub fn read(dir: &Path) -> Result<Label, LabelError> {
        let text = read_bytes(dir)?;
        Label::decode(&text).map_err(|e| e.at(dir))
    }

    /// Raises the label of the target in `dir` to this release's format version
    /// ([`LABEL_FORMAT_VERSION`]) if it is older, and logs "TARGET: format V upgraded to
    /// N". Only the `format_version` line changes: every other line is kept as it is
    /// (keys this nacre does not know included), the checksum is computed again, and the
    /// file is replaced atomically and durably as [`Label::write`] does. Call it once
    /// multi-mount protection is taken and before anything in the target is written. A
    /// label that is current is not written. Returns the version the label had if it was
    /// raised (`None`: it was current); `self` then carries the version on disk.
    pub fn upgrade(&mut self, dir: &Path) -> Result<Option<u32>, LabelError> {
        let bytes = read_bytes(dir)?;
        let on_disk = Label::decode(&bytes).map_err(|e| e.at(dir))?;
        let old = on_disk.format_version;
        if old >= LABEL_FORMAT_VERSION {
            self.format_version = old;
            return Ok(None);
        }
        let corrupt = |reason: &str| LabelError::Corrupt {
            path: dir.display().to_string(),
            reason: reason.to_string(),
        };
        // decode checked both: UTF-8, and a checksum line after the body.
        let text = std::str::from_utf8(&bytes).map_err(|_| corrupt("not UTF-8"))?;
        let crc_at = text
            .rfind("crc32c=")
            .ok_or_else(|| corrupt("no checksum"))?;
        let mut body = String::with_capacity(crc_at + 8);
        for line in text[..crc_at].split_inclusive('\n') {
            if line.starts_with("format_version=") {
                body.push_str(&format!("format_version={LABEL_FORMAT_VERSION}\n"));
            } else {
                body.push_str(line);
            }
        }
        let crc = crc32c::crc32c(body.as_bytes());
        body.push_str(&format!("crc32c={crc:08x}\n"));
        let raised = Label::decode(body.as_bytes()).map_err(|e| e.at(dir))?;
        if raised.format_version != LABEL_FORMAT_VERSION {
            return Err(corrupt("its format version could not be raised"));
        }
        write_text(dir, &body)?;
        tracing::info!(
            "{}: format {old} upgraded to {LABEL_FORMAT_VERSION}",
            on_disk.name()
        );
        self.format_version = LABEL_FORMAT_VERSION;
        Ok(Some(old))
    }

    /// Decodes a label. Keys are looked up by name and the others ignored: a key an older
    /// reader must not ignore comes with a new format version (module docs).
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

impl DecodeError {
    /// The error of the label of `dir`.
    fn at(self, dir: &Path) -> LabelError {
        let path = dir.display().to_string();
        match self {
            DecodeError::TooNew(version) => LabelError::TooNew { path, version },
            DecodeError::Bad(reason) => LabelError::Corrupt { path, reason },
        }
    }
}

/// The bytes of the label of `dir`.
fn read_bytes(dir: &Path) -> Result<Vec<u8>, LabelError> {
    let path = dir.display().to_string();
    match std::fs::read(dir.join(LABEL_FILE)) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LabelError::NotFormatted(path)),
        Err(source) => Err(LabelError::Io { path, source }),
    }
}

/// Replaces the label of `dir` with `text`, durably: a new file, synced, renamed over the
/// old one, then the directory synced.
fn write_text(dir: &Path, text: &str) -> Result<(), LabelError> {
    let io = |source| LabelError::Io {
        path: dir.display().to_string(),
        source,
    };
    let tmp = dir.join(format!("{LABEL_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, dir.join(LABEL_FILE)).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
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

    /// A label of format 1 as the baseline wrote it, with a key this nacre does not know.
    const LABEL_V1: &str = "format_version=1\nkind=OST\nindex=3\nfsname=demo\n\
        uuid=6f1c2a3b-0000-4000-8000-000000000001\nmgsnode=10.0.0.1@tcp\n\
        servicenode=10.0.0.1@tcp,10.0.0.2@tcp\nfuture_key=kept\ncrc32c=557a5dea\n";
    /// [`LABEL_V1`] raised to format 2: only its version line and checksum differ.
    const LABEL_V2: &str = "format_version=2\nkind=OST\nindex=3\nfsname=demo\n\
        uuid=6f1c2a3b-0000-4000-8000-000000000001\nmgsnode=10.0.0.1@tcp\n\
        servicenode=10.0.0.1@tcp,10.0.0.2@tcp\nfuture_key=kept\ncrc32c=01f2d62b\n";
    /// [`LABEL_V1`] as a nacre of format 3 would write it.
    const LABEL_V3: &str = "format_version=3\nkind=OST\nindex=3\nfsname=demo\n\
        uuid=6f1c2a3b-0000-4000-8000-000000000001\nmgsnode=10.0.0.1@tcp\n\
        servicenode=10.0.0.1@tcp,10.0.0.2@tcp\nfuture_key=kept\ncrc32c=ced17d3b\n";

    #[test]
    fn a_label_of_format_1_is_raised_to_2_keeping_every_other_key() {
        assert_eq!(LABEL_FORMAT_VERSION, 2);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(LABEL_FILE);
        std::fs::write(&p, LABEL_V1).unwrap();
        let mut label = Label::read(dir.path()).unwrap();
        assert_eq!(label.format_version, 1);
        assert_eq!(label.servicenodes.len(), 2);
        let before = label.clone();
        assert_eq!(label.upgrade(dir.path()).unwrap(), Some(1));
        assert_eq!(label.format_version, 2);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), LABEL_V2);
        let back = Label::read(dir.path()).unwrap();
        assert_eq!(back.format_version, 2);
        assert_eq!(
            back,
            Label {
                format_version: 2,
                ..before
            }
        );
        assert!(!dir.path().join(format!("{LABEL_FILE}.tmp")).exists());
    }

    #[test]
    fn a_current_label_is_not_rewritten_and_a_newer_one_is_refused() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(LABEL_FILE);
        std::fs::write(&p, LABEL_V2).unwrap();
        let inode = std::fs::metadata(&p).unwrap().ino();
        let mut label = Label::read(dir.path()).unwrap();
        assert_eq!(label.upgrade(dir.path()).unwrap(), None);
        assert_eq!(label.format_version, 2);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), LABEL_V2);
        assert_eq!(std::fs::metadata(&p).unwrap().ino(), inode, "rewritten");
        // A label written now is current too.
        let fresh = tempfile::tempdir().unwrap();
        let mut made = Label::new(TargetKind::Mdt, 0, "demo", None).unwrap();
        made.write(fresh.path(), false).unwrap();
        assert_eq!(made.upgrade(fresh.path()).unwrap(), None);
        // Format 3 is newer than this nacre: refused, never rewritten.
        std::fs::write(&p, LABEL_V3).unwrap();
        let e = Label::read(dir.path()).unwrap_err();
        assert!(matches!(e, LabelError::TooNew { version: 3, .. }), "{e}");
        assert!(e.to_string().contains("reads up to 2"), "{e}");
        assert!(matches!(
            label.upgrade(dir.path()),
            Err(LabelError::TooNew { version: 3, .. })
        ));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), LABEL_V3);
    }

    #[test]
    fn bad_fsnames() {
        assert!(check_fsname("").is_err());
        assert!(check_fsname("a/b").is_err());
        assert!(check_fsname("seventeen_chars_x").is_err());
        assert!(check_fsname("lustre1").is_ok());
    }
}
