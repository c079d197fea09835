//! The MGS configuration file: `NMGS` magic, format version, crc32c, postcard payload.
//! Written to a temporary file, synced, then renamed over the old one.

use nacre_wire::mgs::FsConfig;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 4] = b"NMGS";
/// Format of the configuration file `mgs-config` since file systems have OST pools (2:
/// targets with service nodes, no pools; 1: targets without service nodes).
const CONFIG_FORMAT_VERSION: u32 = 3;
/// Largest configuration file accepted.
pub const CONFIG_BYTES_MAX: usize = 64 << 20;

/// Errors reading or writing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// I/O error.
    #[error("MGS configuration {path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Error.
        source: std::io::Error,
    },
    /// Damaged or foreign file.
    #[error("MGS configuration {path} is damaged: {reason}")]
    Corrupt {
        /// File.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A file of a format newer than this nacre reads: written by a newer MGS (kept as it
    /// is, never taken for damage).
    #[error("MGS file {file} has format version {found}; this nacre reads up to {newest}: upgrade nacre")]
    TooNew {
        /// File.
        file: String,
        /// Its format version.
        found: u32,
        /// The newest this nacre reads of that file.
        newest: u32,
    },
}

/// Reads an envelope (magic, format version, crc32c, payload); `None` if the file is missing.
/// A version above `versions` is [`StoreError::TooNew`]; one below it (0) is damage.
pub(crate) fn read_envelope(
    path: &Path,
    magic: &[u8; 4],
    versions: std::ops::RangeInclusive<u32>,
) -> Result<Option<(u32, Vec<u8>)>, StoreError> {
    let p = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Io { path: p, source }),
    };
    let corrupt = |reason: &str| StoreError::Corrupt {
        path: p.clone(),
        reason: reason.into(),
    };
    if bytes.len() < 12 || bytes.len() > CONFIG_BYTES_MAX || &bytes[..4] != magic {
        return Err(corrupt("bad magic or size"));
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version > *versions.end() {
        return Err(StoreError::TooNew {
            file: p.clone(),
            found: version,
            newest: *versions.end(),
        });
    }
    if !versions.contains(&version) {
        return Err(corrupt(&format!("unknown format version {version}")));
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[12..]) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some((version, bytes[12..].to_vec())))
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    path: &Path,
    payload: &[u8],
) -> Result<T, StoreError> {
    postcard::from_bytes(payload).map_err(|e| StoreError::Corrupt {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Loads the configurations; a missing file is an empty MGS.
pub fn load(path: &Path) -> Result<BTreeMap<String, FsConfig>, StoreError> {
    let Some((version, payload)) = read_envelope(path, MAGIC, 1..=CONFIG_FORMAT_VERSION)? else {
        return Ok(BTreeMap::new());
    };
    let list: Vec<FsConfig> = match version {
        1 => {
            let old: Vec<v1::FsConfig> = decode(path, &payload)?;
            old.into_iter().map(v1::FsConfig::upgrade).collect()
        }
        2 => {
            let old: Vec<v2::FsConfig> = decode(path, &payload)?;
            old.into_iter().map(v2::FsConfig::upgrade).collect()
        }
        _ => decode(path, &payload)?,
    };
    Ok(list.into_iter().map(|c| (c.fsname.clone(), c)).collect())
}

/// Saves the configurations durably.
pub fn save(path: &Path, configs: &BTreeMap<String, FsConfig>) -> Result<(), StoreError> {
    let list: Vec<&FsConfig> = configs.values().collect();
    let payload = postcard::to_allocvec(&list).expect("in-memory serialization");
    write_envelope(path, MAGIC, CONFIG_FORMAT_VERSION, &payload)
}

/// The configuration as format 1 stored it (targets without service nodes).
mod v1 {
    use nacre_types::{Nid, TargetKind};
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct TargetInfo {
        kind: TargetKind,
        index: u32,
        fsname: String,
        uuid: String,
        nids: Vec<Nid>,
    }

    #[derive(Deserialize)]
    pub struct FsConfig {
        fsname: String,
        version: u64,
        mdts: Vec<TargetInfo>,
        osts: Vec<TargetInfo>,
    }

    impl FsConfig {
        pub fn upgrade(self) -> nacre_wire::mgs::FsConfig {
            let up = |t: TargetInfo| nacre_wire::mgs::TargetInfo {
                kind: t.kind,
                index: t.index,
                fsname: t.fsname,
                uuid: t.uuid,
                nids: t.nids,
                servicenodes: Vec::new(),
            };
            nacre_wire::mgs::FsConfig {
                fsname: self.fsname,
                version: self.version,
                mdts: self.mdts.into_iter().map(up).collect(),
                osts: self.osts.into_iter().map(up).collect(),
                pools: Vec::new(),
            }
        }
    }
}

/// The configuration as format 2 stored it (no pools).
mod v2 {
    use nacre_wire::mgs::TargetInfo;
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct FsConfig {
        fsname: String,
        version: u64,
        mdts: Vec<TargetInfo>,
        osts: Vec<TargetInfo>,
    }

    impl FsConfig {
        pub fn upgrade(self) -> nacre_wire::mgs::FsConfig {
            nacre_wire::mgs::FsConfig {
                fsname: self.fsname,
                version: self.version,
                mdts: self.mdts,
                osts: self.osts,
                pools: Vec::new(),
            }
        }
    }
}

/// Persistent parameters of every file system: fsname -> (version, [(name, value)]).
pub type ParamSets = BTreeMap<String, (u64, Vec<(String, String)>)>;

const PARAMS_MAGIC: &[u8; 4] = b"NMGP";
/// Format of the parameters file `mgs-params` (its own: no other file shares it).
const PARAMS_FORMAT_VERSION: u32 = 1;

/// Loads persistent parameters (a missing file is none).
pub fn load_params(path: &Path) -> Result<ParamSets, StoreError> {
    match read_envelope(path, PARAMS_MAGIC, 1..=PARAMS_FORMAT_VERSION)? {
        Some((_, payload)) => decode(path, &payload),
        None => Ok(BTreeMap::new()),
    }
}

/// Saves persistent parameters durably.
pub fn save_params(path: &Path, params: &ParamSets) -> Result<(), StoreError> {
    let payload = postcard::to_allocvec(params).expect("in-memory serialization");
    write_envelope(path, PARAMS_MAGIC, PARAMS_FORMAT_VERSION, &payload)
}

const NODEMAPS_MAGIC: &[u8; 4] = b"NMGN";
/// Format of the nodemaps file since it keeps revoked keys (1: nodemaps only).
const NODEMAPS_FORMAT_VERSION: u32 = 2;

/// The nodemaps file of format 1 (before revoked keys).
#[derive(serde::Deserialize)]
struct NodemapsV1 {
    version: u64,
    maps: Vec<nacre_wire::nodemap::Nodemap>,
}

/// Loads the nodemaps (a missing file is none); a file of format 1 has no revoked keys.
pub fn load_nodemaps(path: &Path) -> Result<nacre_wire::nodemap::NodemapSet, StoreError> {
    match read_envelope(path, NODEMAPS_MAGIC, 1..=NODEMAPS_FORMAT_VERSION)? {
        Some((1, payload)) => {
            let v1: NodemapsV1 = decode(path, &payload)?;
            Ok(nacre_wire::nodemap::NodemapSet {
                version: v1.version,
                maps: v1.maps,
                revoked: Vec::new(),
            })
        }
        Some((_, payload)) => decode(path, &payload),
        None => Ok(Default::default()),
    }
}

/// Saves the nodemaps durably.
pub fn save_nodemaps(path: &Path, set: &nacre_wire::nodemap::NodemapSet) -> Result<(), StoreError> {
    let payload = postcard::to_allocvec(set).expect("in-memory serialization");
    write_envelope(path, NODEMAPS_MAGIC, NODEMAPS_FORMAT_VERSION, &payload)
}

/// Saves the nodemaps in format 1 (tests of the upgrade from it).
#[cfg(test)]
pub(crate) fn save_nodemaps_v1(
    path: &Path,
    set: &nacre_wire::nodemap::NodemapSet,
) -> Result<(), StoreError> {
    let payload =
        postcard::to_allocvec(&(set.version, &set.maps)).expect("in-memory serialization");
    write_envelope(path, NODEMAPS_MAGIC, 1, &payload)
}

pub(crate) fn write_envelope(
    path: &Path,
    magic: &[u8; 4],
    version: u32,
    payload: &[u8],
) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::with_capacity(payload.len() + 12);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&version.to_le_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    bytes.extend_from_slice(payload);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_1_configuration_is_read_and_saved_as_the_current_format() {
        #[derive(serde::Serialize)]
        struct OldTarget {
            kind: nacre_types::TargetKind,
            index: u32,
            fsname: String,
            uuid: String,
            nids: Vec<nacre_types::Nid>,
        }
        #[derive(serde::Serialize)]
        struct OldConfig {
            fsname: String,
            version: u64,
            mdts: Vec<OldTarget>,
            osts: Vec<OldTarget>,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mgs-config");
        let old = vec![OldConfig {
            fsname: "demo".into(),
            version: 3,
            mdts: vec![OldTarget {
                kind: nacre_types::TargetKind::Mdt,
                index: 0,
                fsname: "demo".into(),
                uuid: "u0".into(),
                nids: vec!["127.0.0.1:7000@tcp".parse().unwrap()],
            }],
            osts: Vec::new(),
        }];
        let payload = postcard::to_allocvec(&old).unwrap();
        write_envelope(&path, MAGIC, 1, &payload).unwrap();
        let configs = load(&path).unwrap();
        let demo = &configs["demo"];
        assert_eq!((demo.version, demo.mdts.len()), (3, 1));
        assert_eq!(demo.mdts[0].uuid, "u0");
        assert!(demo.mdts[0].servicenodes.is_empty());
        save(&path, &configs).unwrap();
        assert_eq!(load(&path).unwrap(), configs);
    }

    #[test]
    fn a_format_2_configuration_is_read_with_no_pools() {
        #[derive(serde::Serialize)]
        struct OldConfig {
            fsname: String,
            version: u64,
            mdts: Vec<nacre_wire::mgs::TargetInfo>,
            osts: Vec<nacre_wire::mgs::TargetInfo>,
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mgs-config");
        let ost = nacre_wire::mgs::TargetInfo {
            kind: nacre_types::TargetKind::Ost,
            index: 1,
            fsname: "demo".into(),
            uuid: "u1".into(),
            nids: vec!["127.0.0.1:7000@tcp".parse().unwrap()],
            servicenodes: vec!["127.0.0.2:7000@tcp".parse().unwrap()],
        };
        let old = vec![OldConfig {
            fsname: "demo".into(),
            version: 5,
            mdts: Vec::new(),
            osts: vec![ost.clone()],
        }];
        write_envelope(&path, MAGIC, 2, &postcard::to_allocvec(&old).unwrap()).unwrap();
        let mut configs = load(&path).unwrap();
        let demo = configs.get_mut("demo").unwrap();
        assert_eq!(
            (demo.version, &demo.osts, demo.pools.len()),
            (5, &vec![ost], 0)
        );
        demo.pools.push(nacre_wire::mgs::PoolInfo {
            name: nacre_types::PoolName::new("flash").unwrap(),
            osts: vec![1],
            spill: None,
        });
        save(&path, &configs).unwrap();
        assert_eq!(load(&path).unwrap(), configs);
    }
}
