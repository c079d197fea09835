//! Nodemaps kept by the MGS (`nacre nodemap`): changes checked and made durable before they
//! are acknowledged; every server process fetches the set (`GetNodemaps`) and enforces it.

use nacre_wire::nodemap::{
    IdMap, NidRange, Nodemap, NodemapSet, RevokedKey, IDMAPS_PER_NODEMAP_MAX, NODEMAPS_MAX,
    NODEMAP_NAME_BYTES_MAX, RANGES_PER_NODEMAP_MAX, REVOKED_KEYS_MAX,
};

/// A change of the nodemaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodemapChange {
    /// Makes a nodemap (no ranges: it applies to no client yet).
    Add(String),
    /// Removes a nodemap.
    Del(String),
    /// Adds client addresses.
    AddRange(String, NidRange),
    /// Removes client addresses (a range given exactly as added).
    DelRange(String, NidRange),
    /// Sets a property: `admin`, `trusted`, `readonly` (0/1), `squash_uid`, `squash_gid`,
    /// `offset` (numbers), `level` (none, integrity, bulk, privacy, or `default`).
    Modify(String, String, String),
    /// Adds an id mapping.
    AddIdmap(String, IdMap),
    /// Removes an id mapping.
    DelIdmap(String, IdMap),
    /// Revokes a client key: servers refuse its handshakes and drop its connections.
    RevokeKey(RevokedKey),
    /// Takes a revocation back.
    UnrevokeKey(RevokedKey),
}

/// Why a nodemap change is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodemapError {
    /// A bad name.
    #[error("nodemap name '{0}': 1 to {NODEMAP_NAME_BYTES_MAX} letters, digits, '-' or '_'")]
    BadName(String),
    /// `add` of a nodemap that exists.
    #[error("nodemap {0} already exists")]
    Exists(String),
    /// No such nodemap.
    #[error("nodemap {0} does not exist")]
    NoNodemap(String),
    /// A range another nodemap (or this one) has.
    #[error("range {0} overlaps range {1} of nodemap {2}")]
    Overlap(NidRange, NidRange, String),
    /// A range or mapping not there.
    #[error("nodemap {0} has no {1}")]
    NotThere(String, String),
    /// A mapping of a client id mapped already.
    #[error("nodemap {0} maps that id already")]
    Mapped(String),
    /// A property or value that does not exist.
    #[error("{0}")]
    BadProperty(String),
    /// Past a limit.
    #[error("too many {0}")]
    TooMany(&'static str),
    /// The change could not be made durable.
    #[error("the MGS could not save its nodemaps")]
    Io,
}

/// Levels by name (their codes in [`Nodemap::level`]).
pub const LEVELS: [&str; 4] = ["none", "integrity", "bulk", "privacy"];

fn check_name(name: &str) -> Result<(), NodemapError> {
    let ok = !name.is_empty()
        && name.len() <= NODEMAP_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match ok {
        true => Ok(()),
        false => Err(NodemapError::BadName(name.to_string())),
    }
}

/// Applies `change` to `set` (not saved), bumping its version.
pub fn apply(set: &mut NodemapSet, change: NodemapChange) -> Result<(), NodemapError> {
    let find = |set: &mut NodemapSet, name: &str| -> Result<usize, NodemapError> {
        set.maps
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| NodemapError::NoNodemap(name.to_string()))
    };
    match change {
        NodemapChange::Add(name) => {
            check_name(&name)?;
            if set.maps.iter().any(|m| m.name == name) {
                return Err(NodemapError::Exists(name));
            }
            if set.maps.len() >= NODEMAPS_MAX {
                return Err(NodemapError::TooMany("nodemaps"));
            }
            set.maps.push(Nodemap::new(&name));
            set.maps.sort_by(|a, b| a.name.cmp(&b.name));
        }
        NodemapChange::Del(name) => {
            let i = find(set, &name)?;
            set.maps.remove(i);
        }
        NodemapChange::AddRange(name, range) => {
            let i = find(set, &name)?;
            for m in &set.maps {
                if let Some(r) = m.ranges.iter().find(|r| r.overlaps(&range)) {
                    return Err(NodemapError::Overlap(range, *r, m.name.clone()));
                }
            }
            let m = &mut set.maps[i];
            if m.ranges.len() >= RANGES_PER_NODEMAP_MAX {
                return Err(NodemapError::TooMany("ranges"));
            }
            m.ranges.push(range);
        }
        NodemapChange::DelRange(name, range) => {
            let i = find(set, &name)?;
            let m = &mut set.maps[i];
            let at =
                m.ranges.iter().position(|r| *r == range).ok_or_else(|| {
                    NodemapError::NotThere(name.clone(), format!("range {range}"))
                })?;
            m.ranges.remove(at);
        }
        NodemapChange::Modify(name, property, value) => {
            let i = find(set, &name)?;
            modify(&mut set.maps[i], &property, &value)?;
        }
        NodemapChange::AddIdmap(name, map) => {
            let i = find(set, &name)?;
            let m = &mut set.maps[i];
            let taken = m
                .idmaps
                .iter()
                .any(|x| x.kind == map.kind && (x.client == map.client || x.fs == map.fs));
            if taken {
                return Err(NodemapError::Mapped(name));
            }
            if m.idmaps.len() >= IDMAPS_PER_NODEMAP_MAX {
                return Err(NodemapError::TooMany("id mappings"));
            }
            m.idmaps.push(map);
        }
        NodemapChange::DelIdmap(name, map) => {
            let i = find(set, &name)?;
            let m = &mut set.maps[i];
            let at = m.idmaps.iter().position(|x| *x == map).ok_or_else(|| {
                NodemapError::NotThere(name.clone(), format!("mapping {}:{}", map.client, map.fs))
            })?;
            m.idmaps.remove(at);
        }
        NodemapChange::RevokeKey(key) => {
            let printable = |s: &str| {
                !s.is_empty()
                    && s.len() <= NODEMAP_NAME_BYTES_MAX * 4
                    && !s.chars().any(|c| c.is_whitespace() || c.is_control())
            };
            if !printable(&key.fsname)
                || !printable(&key.name)
                || key.nodemap.as_deref().is_some_and(|m| !printable(m))
            {
                return Err(NodemapError::BadProperty(format!(
                    "revoke_key {key}: names of 1 to {} printable characters",
                    NODEMAP_NAME_BYTES_MAX * 4
                )));
            }
            if set.revoked.contains(&key) {
                return Err(NodemapError::BadProperty(format!(
                    "key {key} is revoked already"
                )));
            }
            if set.revoked.len() >= REVOKED_KEYS_MAX {
                return Err(NodemapError::TooMany("revoked keys"));
            }
            set.revoked.push(key);
        }
        NodemapChange::UnrevokeKey(key) => {
            let at =
                set.revoked.iter().position(|k| *k == key).ok_or_else(|| {
                    NodemapError::BadProperty(format!("key {key} is not revoked"))
                })?;
            set.revoked.remove(at);
        }
    }
    set.version += 1;
    Ok(())
}

fn modify(m: &mut Nodemap, property: &str, value: &str) -> Result<(), NodemapError> {
    let flag = || match value {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(NodemapError::BadProperty(format!(
            "{property}: expected 0 or 1, not '{value}'"
        ))),
    };
    let id = || {
        value.parse::<u32>().map_err(|_| {
            NodemapError::BadProperty(format!("{property}: expected a number, not '{value}'"))
        })
    };
    match property {
        "admin" => m.admin = flag()?,
        "trusted" => m.trusted = flag()?,
        "readonly" => m.readonly = flag()?,
        "squash_uid" => m.squash_uid = id()?,
        "squash_gid" => m.squash_gid = id()?,
        "offset" => m.offset = id()?,
        "level" => {
            m.level = match value {
                "default" => None,
                v => Some(LEVELS.iter().position(|l| *l == v).ok_or_else(|| {
                    NodemapError::BadProperty(format!(
                        "level: expected none, integrity, bulk, privacy or default, not '{v}'"
                    ))
                })? as u8),
            }
        }
        "fileset" => m.fileset = fileset(value)?,
        other => {
            return Err(NodemapError::BadProperty(format!(
                "no property '{other}': admin, trusted, readonly, squash_uid, squash_gid, \
                 offset, level, fileset"
            )))
        }
    }
    Ok(())
}

/// Longest fileset path.
pub const FILESET_BYTES_MAX: usize = 4_096;

/// A fileset as kept: `/a/b` (no `.`, `..` or empty components); `/`, `-` or nothing: none.
fn fileset(value: &str) -> Result<Option<String>, NodemapError> {
    let v = value.trim();
    if v.is_empty() || v == "-" || v == "/" {
        return Ok(None);
    }
    let bad = |why: &str| NodemapError::BadProperty(format!("fileset '{v}': {why}"));
    if !v.starts_with('/') || v.len() > FILESET_BYTES_MAX {
        return Err(bad(
            "an absolute path inside the file system, as /projects/a",
        ));
    }
    let parts: Vec<&str> = v.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Err(bad("no '.' or '..'"));
    }
    Ok(Some(format!("/{}", parts.join("/"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_wire::nodemap::IdKind;

    fn r(s: &str) -> NidRange {
        NidRange::parse(s).unwrap()
    }

    #[test]
    fn changes_are_checked() {
        let mut s = NodemapSet::default();
        apply(&mut s, NodemapChange::Add("lab".into())).unwrap();
        assert_eq!(
            apply(&mut s, NodemapChange::Add("lab".into())),
            Err(NodemapError::Exists("lab".into()))
        );
        assert!(apply(&mut s, NodemapChange::Add("bad name".into())).is_err());
        apply(
            &mut s,
            NodemapChange::AddRange("lab".into(), r("10.0.0.0/24")),
        )
        .unwrap();
        apply(&mut s, NodemapChange::Add("b".into())).unwrap();
        assert!(matches!(
            apply(&mut s, NodemapChange::AddRange("b".into(), r("10.0.0.7"))),
            Err(NodemapError::Overlap(..))
        ));
        let modify = |p: &str, v: &str| NodemapChange::Modify("lab".into(), p.into(), v.into());
        apply(&mut s, modify("readonly", "1")).unwrap();
        apply(&mut s, modify("level", "privacy")).unwrap();
        assert!(apply(&mut s, modify("level", "max")).is_err());
        assert!(apply(&mut s, modify("colour", "1")).is_err());
        apply(&mut s, modify("fileset", "/projects//a/")).unwrap();
        assert!(apply(&mut s, modify("fileset", "projects")).is_err());
        assert!(apply(&mut s, modify("fileset", "/a/../b")).is_err());
        let map = IdMap {
            kind: IdKind::Uid,
            client: 500,
            fs: 7000,
        };
        apply(&mut s, NodemapChange::AddIdmap("lab".into(), map)).unwrap();
        assert!(apply(&mut s, NodemapChange::AddIdmap("lab".into(), map)).is_err());
        let lab = &s.maps[s.maps.iter().position(|m| m.name == "lab").unwrap()];
        assert!(lab.readonly);
        assert_eq!(lab.level, Some(3));
        assert_eq!(lab.fileset.as_deref(), Some("/projects/a"));
        assert_eq!(s.find("10.0.0.9".parse().unwrap()).unwrap().name, "lab");
        apply(
            &mut s,
            NodemapChange::DelRange("lab".into(), r("10.0.0.0/24")),
        )
        .unwrap();
        assert!(s.find("10.0.0.9".parse().unwrap()).is_none());
        assert_eq!(s.version, 8);
    }
}
