//! Key files (`nacre keygen`, `nacre mkfs`): `NAME VALUE` lines, read by [`FsKey::parse`]
//! and [`FsKey::load`], written by [`FsKey::to_text`] and [`FsKey::save`]. Their format
//! (docs/formats.md, "Key files") is named by a `format N` line, absent meaning 1.

use super::{
    check_fsname, check_identity, FsKey, Identity, KeyId, Level, Role, SecError, KEY_BYTES,
    KEY_ID_BYTES,
};
use std::path::Path;

/// The newest key file format this nacre reads (docs/formats.md, "Key files"). A key file
/// says its format on a `format N` line; a file without one is format 1. Writers add that
/// line only when they write a line a reader of an older format lacks: no line written
/// today is new to any reader, so [`FsKey::to_text`] writes none, and older nacres keep
/// reading every key written now.
pub const KEY_FILE_FORMAT: u32 = 1;

/// Why a key file's text is refused ([`FsKey::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyTextError {
    /// Its `format` line names a format newer than [`KEY_FILE_FORMAT`]: it was written by a
    /// newer nacre, and is not taken for a damaged file.
    #[error("key file format {found} is newer than this nacre reads ({newest}): upgrade nacre")]
    TooNew {
        /// The format on its `format` line.
        found: u32,
        /// The newest this nacre reads ([`KEY_FILE_FORMAT`]).
        newest: u32,
    },
    /// A line or value it cannot take (an unknown field, a bad value, a missing line).
    #[error("{0}")]
    Bad(String),
}

impl From<String> for KeyTextError {
    fn from(why: String) -> KeyTextError {
        KeyTextError::Bad(why)
    }
}

impl From<&str> for KeyTextError {
    fn from(why: &str) -> KeyTextError {
        KeyTextError::Bad(why.to_string())
    }
}

impl FsKey {
    /// The key file's text. It has no `format` line: every line it writes is one a reader
    /// of format 1 knows ([`KEY_FILE_FORMAT`]); a line older readers lack will come with
    /// `format 2` (which they refuse by name rather than as an unknown field).
    pub fn to_text(&self) -> String {
        let hex: String = self.secret.iter().map(|b| format!("{b:02x}")).collect();
        let mut text = format!(
            "# Nacre file-system key (nacre keygen). Keep it readable by its owner only.\n\
             fsname {}\nrole {}\nlevel {}\n",
            self.fsname, self.role, self.level
        );
        if !self.name.is_empty() {
            text.push_str(&format!("name {}\n", self.name));
        }
        if let Some(m) = &self.nodemap {
            text.push_str(&format!("nodemap {m}\n"));
        }
        if let (false, Some(m)) = (self.is_master(), self.master) {
            text.push_str(&format!("master {m}\n"));
        }
        text.push_str(&format!("key {hex}\n"));
        text
    }

    /// Parses a key file's text. A file without a `role` line (written before keys had
    /// roles) is a server key: it holds the file system's master secret. A `format N`
    /// line is read for N up to [`KEY_FILE_FORMAT`] (a file without one is format 1); a
    /// newer N is [`KeyTextError::TooNew`], whatever else the file holds.
    pub fn parse(text: &str) -> Result<FsKey, KeyTextError> {
        let mut format = None;
        for line in text.lines().map(str::trim) {
            if let Some(("format", v)) = line.split_once(char::is_whitespace) {
                if format.is_some() {
                    return Err(KeyTextError::Bad("two `format` lines".into()));
                }
                let v = v.trim();
                let n = v
                    .parse::<u32>()
                    .map_err(|_| KeyTextError::Bad(format!("format {v:?}: not a number")))?;
                format = Some(n);
            }
        }
        if let Some(found) = format.filter(|f| *f > KEY_FILE_FORMAT) {
            return Err(KeyTextError::TooNew {
                found,
                newest: KEY_FILE_FORMAT,
            });
        }
        let (mut fsname, mut level, mut secret) = (None, Level::None, None);
        let (mut role, mut name, mut nodemap) = (Role::Server, String::new(), None);
        let mut master = None;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once(char::is_whitespace)
                .map(|(k, v)| (k, v.trim()))
                .ok_or_else(|| format!("line {line:?} is not `NAME VALUE`"))?;
            match k {
                // Read above (before any other line, so a newer file is refused by name).
                "format" => {}
                "fsname" => fsname = Some(v.to_string()),
                "level" => {
                    level = Level::parse(v).ok_or_else(|| {
                        format!("level {v:?}: expected none, integrity, bulk or privacy")
                    })?
                }
                "role" => {
                    role = Role::parse(v)
                        .ok_or_else(|| format!("role {v:?}: expected client, server or admin"))?
                }
                "name" => name = v.to_string(),
                "nodemap" => nodemap = Some(v.to_string()),
                "key" => secret = Some(parse_hex(v)?),
                "master" => {
                    master = Some(KeyId::parse(v).ok_or_else(|| {
                        format!("master {v:?}: expected {} hex digits", 2 * KEY_ID_BYTES)
                    })?)
                }
                other => return Err(KeyTextError::Bad(format!("unknown field {other:?}"))),
            }
        }
        let fsname = fsname.ok_or("no `fsname` line")?;
        check_fsname(&fsname).map_err(|e| KeyTextError::Bad(e.to_string()))?;
        if role != Role::Client && (!name.is_empty() || nodemap.is_some() || master.is_some()) {
            return Err(KeyTextError::Bad(format!(
                "a {role} key has no `name`, `nodemap` or `master` (those are a client key's)"
            )));
        }
        let id = Identity {
            role,
            name,
            nodemap,
        };
        check_identity(&id).map_err(|e| KeyTextError::Bad(e.to_string()))?;
        Ok(FsKey {
            fsname,
            secret: secret.ok_or("no `key` line")?,
            level,
            role,
            name: id.name,
            nodemap: id.nodemap,
            master,
        })
    }

    /// Reads a key file; refused if others than its owner may read it, or if its owner is
    /// not the user reading it (another user could put a key of their choosing there).
    pub fn load(path: &Path) -> Result<FsKey, SecError> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let err = |cause: String| SecError::KeyFile {
            path: path.display().to_string(),
            cause,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(err(format!(
                "owned by uid {}, not by uid {me} who reads it; `chown` it",
                meta.uid()
            )));
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(err(format!(
                "mode {:o} lets others read it; `chmod 600` it",
                mode & 0o777
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        FsKey::parse(&text).map_err(|e| match e {
            KeyTextError::TooNew { .. } => SecError::KeyFileTooNew {
                path: path.display().to_string(),
                cause: e,
            },
            KeyTextError::Bad(why) => err(why),
        })
    }

    /// Writes the key file (mode 0600; an existing file is not overwritten).
    pub fn save(&self, path: &Path) -> Result<(), SecError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let err = |cause: String| SecError::KeyFile {
            path: path.display().to_string(),
            cause,
        };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| err(e.to_string()))?;
        f.write_all(self.to_text().as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| err(e.to_string()))
    }
}

fn parse_hex(v: &str) -> Result<[u8; KEY_BYTES], String> {
    let bad = || format!("key: expected {} hex digits", KEY_BYTES * 2);
    if v.len() != KEY_BYTES * 2 || !v.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; KEY_BYTES];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&v[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_text_round_trips_and_bad_text_is_refused() {
        let k = FsKey::generate("lustre", Level::Privacy).unwrap();
        let back = FsKey::parse(&k.to_text()).unwrap();
        assert_eq!(back.secret, k.secret);
        assert_eq!(back.fsname, "lustre");
        assert_eq!(back.level, Level::Privacy);
        let hex = k
            .to_text()
            .lines()
            .find_map(|l| l.strip_prefix("key "))
            .unwrap()
            .to_string();
        assert!(
            !format!("{k:?}").contains(&hex),
            "Debug never shows the secret"
        );
        for bad in [
            "",
            "fsname a\n",
            "fsname a\nkey 00\n",
            "fsname a\nkey zz\n",
            "fsname a\nlevel max\nkey 00\n",
            "color red\n",
        ] {
            assert!(FsKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// A server key and a client key as this nacre writes them (format 1, no `format`
    /// line): the stored bytes every later nacre must read (docs/formats.md, rule 6).
    const SERVER_KEY_V1: &str = "# Nacre file-system key (nacre keygen). Keep it readable by \
        its owner only.\nfsname lustre\nrole server\nlevel bulk\nkey \
        0707070707070707070707070707070707070707070707070707070707070707\n";

    #[test]
    fn key_files_are_written_without_a_format_line_and_read_back() {
        let k = FsKey::from_parts("lustre", [7; KEY_BYTES], Level::Bulk);
        assert_eq!(
            k.to_text(),
            SERVER_KEY_V1,
            "a changed writer needs a `format` line"
        );
        let back = FsKey::parse(SERVER_KEY_V1).unwrap();
        assert_eq!(
            (back.fsname(), back.role(), back.level(), back.secret),
            ("lustre", Role::Server, Level::Bulk, [7; KEY_BYTES])
        );
        let client = k.client_key("lab", Some("tenant")).unwrap();
        assert!(!client.to_text().contains("format"));
        let back = FsKey::parse(&client.to_text()).unwrap();
        assert_eq!(back.identity(), client.identity());
        assert_eq!(back.master_id(), k.master_id());
    }

    #[test]
    fn a_format_1_line_reads_as_none_and_a_newer_format_is_refused_by_name() {
        let with = format!("format 1\n{SERVER_KEY_V1}");
        let (a, b) = (
            FsKey::parse(&with).unwrap(),
            FsKey::parse(SERVER_KEY_V1).unwrap(),
        );
        assert_eq!(
            (a.fsname(), a.role(), a.level(), a.secret),
            (b.fsname(), b.role(), b.level(), b.secret)
        );
        // Anywhere in the file.
        assert!(FsKey::parse(&format!("{SERVER_KEY_V1}format 1\n")).is_ok());
        // A newer format is refused as such, even with a line this nacre does not know.
        for text in [
            format!("format 2\n{SERVER_KEY_V1}"),
            format!("{SERVER_KEY_V1}mirror x\nformat 2\n"),
        ] {
            let e = FsKey::parse(&text).unwrap_err();
            assert_eq!(
                e,
                KeyTextError::TooNew {
                    found: 2,
                    newest: KEY_FILE_FORMAT
                }
            );
            assert_eq!(
                e.to_string(),
                "key file format 2 is newer than this nacre reads (1): upgrade nacre"
            );
        }
        // An unknown field is still refused, with or without a format line.
        for text in [
            format!("{SERVER_KEY_V1}mirror x\n"),
            format!("format 1\n{SERVER_KEY_V1}mirror x\n"),
        ] {
            match FsKey::parse(&text) {
                Err(KeyTextError::Bad(why)) => assert!(why.contains("unknown field"), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        for bad in ["format x\n", "format -1\n", "format 1\nformat 1\n"] {
            let text = format!("{bad}{SERVER_KEY_V1}");
            assert!(
                matches!(FsKey::parse(&text), Err(KeyTextError::Bad(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn loading_a_key_file_of_a_newer_format_names_it() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .unwrap();
        f.write_all(format!("format 2\n{SERVER_KEY_V1}").as_bytes())
            .unwrap();
        drop(f);
        let e = FsKey::load(&p).unwrap_err();
        assert!(
            matches!(
                &e,
                SecError::KeyFileTooNew {
                    cause: KeyTextError::TooNew {
                        found: 2,
                        newest: 1
                    },
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("newer than this nacre reads (1)"),
            "{e}"
        );
    }

    #[test]
    fn a_key_file_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        FsKey::generate("fs", Level::None)
            .unwrap()
            .save(&p)
            .unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        FsKey::load(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = FsKey::load(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        // A key file another user owns (and so could rewrite) is refused too.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let me = unsafe { libc::geteuid() };
        let other = if me == 0 { 65534 } else { me };
        std::os::unix::fs::chown(&p, Some(other), None).unwrap();
        if other != me {
            let e = FsKey::load(&p).unwrap_err().to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
        }
        assert!(FsKey::generate("fs", Level::None)
            .unwrap()
            .save(&p)
            .is_err());
    }
}
