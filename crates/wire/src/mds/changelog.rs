//! Changelog records (Lustre's changelogs): what each MDT records of the changes made to
//! its namespace, for consumers such as a policy engine, and the consumers it keeps them
//! for.

use nacre_types::{Fid, TimeSpec};
use serde::{Deserialize, Serialize};

/// Most records one [`super::MdsOp::ChangelogRead`] returns.
pub const CHANGELOG_READ_RECORDS_MAX: u32 = 4096;
/// Most bytes of records one read returns (the MDT stops adding records past it), well
/// under the body limit.
pub const CHANGELOG_READ_BYTES_MAX: usize = 512 * 1024;
/// Longest consumer name ([`super::MdsOp::ChangelogRegister`]).
pub const CHANGELOG_USER_NAME_BYTES_MAX: usize = 32;
/// Most consumers an MDT keeps records for.
pub const CHANGELOG_USERS_MAX: usize = 64;
/// Most links one [`super::MdsOp::FidLinks`] answer lists.
pub const FID_LINKS_MAX: usize = 1024;
/// Most inodes one [`super::MdsOp::StatMany`] or [`super::MdsOp::ScanStats`] names or
/// answers (each answer about 150 bytes: well under the body limit).
pub const STATS_MAX: usize = 2048;

/// What a policy engine indexes of one inode ([`super::MdsReply::Stats`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeStat {
    /// Attributes (the MDT's lazy access time: see docs/changelog.md).
    pub attr: nacre_types::Attr,
    /// A regular file's size and blocks in `attr` are exact; otherwise its objects must
    /// be glimpsed.
    pub size_exact: bool,
    /// The pool of a regular file's layout (empty: none).
    pub pool: nacre_types::PoolName,
    /// Stripes of a regular file's layout.
    pub stripe_count: u32,
    /// A directory's parent (for a shard of a striped directory: its master).
    pub parent: Option<Fid>,
    /// Unlinked while open (no name leads to it).
    pub orphan: bool,
}

/// What a record reports (Lustre's record types, with their numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RecordKind {
    /// A regular file created.
    Create,
    /// A directory created.
    Mkdir,
    /// A hard link added.
    HardLink,
    /// A symbolic link created.
    SoftLink,
    /// A device, FIFO or socket created.
    Mknod,
    /// A name of a non-directory removed (flags say whether it was the last).
    Unlink,
    /// A directory removed.
    Rmdir,
    /// A name moved (the record carries the source too).
    Rename,
    /// A file opened for writing closed (flags say whether it was written).
    Close,
    /// A file's layout changed.
    Layout,
    /// A file's size set (truncate).
    Trunc,
    /// Attributes set: mode, owner, times.
    SetAttr,
    /// An extended attribute set or removed.
    Xattr,
    /// A directory moved to another MDT.
    Migrate,
    /// An administrative action at the MGS (a parameter, a quota, a QoS rule, a pool, a
    /// nodemap or key revocation): its name says who did what, from where, and whether
    /// it was done. Nacre's own (Lustre has none), numbered after Lustre's.
    Admin,
}

impl RecordKind {
    /// Every kind, in Lustre's numbering order.
    pub const ALL: [RecordKind; 15] = [
        RecordKind::Create,
        RecordKind::Mkdir,
        RecordKind::HardLink,
        RecordKind::SoftLink,
        RecordKind::Mknod,
        RecordKind::Unlink,
        RecordKind::Rmdir,
        RecordKind::Rename,
        RecordKind::Close,
        RecordKind::Layout,
        RecordKind::Trunc,
        RecordKind::SetAttr,
        RecordKind::Xattr,
        RecordKind::Migrate,
        RecordKind::Admin,
    ];

    /// Lustre's number and short name (`01CREAT`), as `lfs changelog` prints them.
    pub fn lustre_name(self) -> &'static str {
        match self {
            RecordKind::Create => "01CREAT",
            RecordKind::Mkdir => "02MKDIR",
            RecordKind::HardLink => "03HLINK",
            RecordKind::SoftLink => "04SLINK",
            RecordKind::Mknod => "05MKNOD",
            RecordKind::Unlink => "06UNLNK",
            RecordKind::Rmdir => "07RMDIR",
            RecordKind::Rename => "08RENME",
            RecordKind::Close => "11CLOSE",
            RecordKind::Layout => "12LYOUT",
            RecordKind::Trunc => "13TRUNC",
            RecordKind::SetAttr => "14SATTR",
            RecordKind::Xattr => "15XATTR",
            RecordKind::Migrate => "20MIGRT",
            RecordKind::Admin => "30ADMIN",
        }
    }

    /// The short name alone (`CREAT`).
    pub fn short_name(self) -> &'static str {
        &self.lustre_name()[2..]
    }
}

/// [`ChangelogRecord::flags`]: an unlink (or a rename over a file) removed its last name.
pub const FLAG_LAST_LINK: u32 = 1;
/// [`ChangelogRecord::flags`]: a close of a handle data was written through.
pub const FLAG_WRITTEN: u32 = 2;
/// [`ChangelogRecord::flags`]: a rename replaced an existing entry (its inode is the
/// record's target).
pub const FLAG_OVERWRITE: u32 = 4;

/// Where a renamed entry came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenameSource {
    /// The inode moved.
    pub fid: Fid,
    /// The directory it left.
    pub parent: Fid,
    /// Its name there.
    pub name: Vec<u8>,
}

/// One change, as an MDT recorded it in the same transaction as the change itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogRecord {
    /// Record number: increasing on the MDT, never reused (gaps are possible).
    pub index: u64,
    /// What happened.
    pub kind: RecordKind,
    /// [`FLAG_LAST_LINK`], [`FLAG_WRITTEN`], [`FLAG_OVERWRITE`].
    pub flags: u32,
    /// When (the MDT's clock).
    pub time: TimeSpec,
    /// The inode concerned (a rename: the inode it replaced, or the zero FID).
    pub target: Fid,
    /// The directory of the name concerned (zero for changes of an inode without a name).
    pub parent: Fid,
    /// The name concerned (a rename: the new name; an xattr change: empty).
    pub name: Vec<u8>,
    /// A rename's source.
    pub source: Option<RenameSource>,
    /// An xattr change: the attribute's name.
    pub xattr: Vec<u8>,
    /// Who made the change.
    pub uid: u32,
    /// Their group.
    pub gid: u32,
    /// The job the request worked for (empty: none).
    pub jobid: String,
}

impl ChangelogRecord {
    /// Checks what a well-formed record may still get wrong (name lengths, job id).
    pub fn check(&self) -> Result<(), String> {
        use nacre_types::limits::{NAME_BYTES_MAX, XATTR_NAME_BYTES_MAX};
        let source = self.source.as_ref().map_or(0, |s| s.name.len());
        if self.name.len() > NAME_BYTES_MAX || source > NAME_BYTES_MAX {
            return Err(format!("changelog record {} with a long name", self.index));
        }
        if self.xattr.len() > XATTR_NAME_BYTES_MAX {
            return Err(format!("changelog record {} with a long xattr", self.index));
        }
        if self.jobid.len() > nacre_types::jobid::JOBID_BYTES_MAX {
            return Err(format!(
                "changelog record {} with a long job id",
                self.index
            ));
        }
        Ok(())
    }

    /// The record as one line in `lfs changelog`'s format: number, type, time, date,
    /// flags, target, job, user, parent and name (and a rename's source).
    pub fn to_line(&self) -> String {
        let (date, time) = civil(self.time);
        let mut line = format!(
            "{} {} {time} {date} 0x{:x} t={} j={} u={}:{}",
            self.index,
            self.kind.lustre_name(),
            self.flags,
            self.target,
            if self.jobid.is_empty() {
                "-"
            } else {
                &self.jobid
            },
            self.uid,
            self.gid,
        );
        if self.kind == RecordKind::Xattr {
            line.push_str(&format!(" x={}", String::from_utf8_lossy(&self.xattr)));
        }
        if self.parent != Fid::default() || !self.name.is_empty() {
            line.push_str(&format!(
                " p={} {}",
                self.parent,
                String::from_utf8_lossy(&self.name)
            ));
        }
        if let Some(s) = &self.source {
            line.push_str(&format!(
                " s={} sp={} {}",
                s.fid,
                s.parent,
                String::from_utf8_lossy(&s.name)
            ));
        }
        line
    }
}

/// (`YYYY.MM.DD`, `HH:MM:SS.nnnnnnnnn`) of a time in UTC.
fn civil(t: TimeSpec) -> (String, String) {
    let days = t.sec.div_euclid(86_400);
    let secs = t.sec.rem_euclid(86_400);
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        format!("{y:04}.{m:02}.{d:02}"),
        format!(
            "{:02}:{:02}:{:02}.{:09}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            t.nsec
        ),
    )
}

/// A registered consumer of an MDT's changelog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangelogUser {
    /// Its id (`cl1` is id 1).
    pub id: u32,
    /// The name it registered with (may be empty).
    pub name: String,
    /// Every record up to this number is cleared for it.
    pub cleared: u64,
    /// Milliseconds since it last read or cleared.
    pub idle_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_lustres_format() {
        let rec = ChangelogRecord {
            index: 7,
            kind: RecordKind::Rename,
            flags: FLAG_OVERWRITE,
            time: TimeSpec {
                sec: 1_795_712_645,
                nsec: 5,
            },
            target: Fid::new(0x200000401, 2),
            parent: Fid::ROOT,
            name: b"new".to_vec(),
            source: Some(RenameSource {
                fid: Fid::new(0x200000401, 1),
                parent: Fid::ROOT,
                name: b"old".to_vec(),
            }),
            xattr: Vec::new(),
            uid: 1000,
            gid: 100,
            jobid: "ior.42".into(),
        };
        let line = rec.to_line();
        assert!(
            line.starts_with("7 08RENME 17:04:05.000000005 2026.11.26 0x4 t=["),
            "{line}"
        );
        assert!(line.contains(" j=ior.42 u=1000:100 p="), "{line}");
        assert!(line.ends_with(" old"), "{line}");
        assert_eq!(RecordKind::Close.short_name(), "CLOSE");
        assert!(rec.check().is_ok());
        let long = ChangelogRecord {
            name: vec![b'x'; 256],
            ..rec
        };
        assert!(long.check().is_err());
    }
}
