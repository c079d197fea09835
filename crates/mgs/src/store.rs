//! The MGS configuration file: `NMGS` magic, format version, crc32c, postcard payload.
//! Written to a temporary file, synced, then renamed over the old one.

use nacre_wire::mgs::FsConfig;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const MAGIC: &[u8; 4] = b"NMGS";
const FORMAT_VERSION: u32 = 1;
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
}

/// Reads an envelope (magic, format version, crc32c, payload); `None` if the file is missing.
fn read_envelope(path: &Path, magic: &[u8; 4]) -> Result<Option<Vec<u8>>, StoreError> {
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
    if version != FORMAT_VERSION {
        return Err(corrupt(&format!("unknown format version {version}")));
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[12..]) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some(bytes[12..].to_vec()))
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, payload: &[u8]) -> Result<T, StoreError> {
    postcard::from_bytes(payload).map_err(|e| StoreError::Corrupt {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// Loads the configurations; a missing file is an empty MGS.
pub fn load(path: &Path) -> Result<BTreeMap<String, FsConfig>, StoreError> {
    let Some(payload) = read_envelope(path, MAGIC)? else {
        return Ok(BTreeMap::new());
    };
    let list: Vec<FsConfig> = decode(path, &payload)?;
    Ok(list.into_iter().map(|c| (c.fsname.clone(), c)).collect())
}

/// Saves the configurations durably.
pub fn save(path: &Path, configs: &BTreeMap<String, FsConfig>) -> Result<(), StoreError> {
    let list: Vec<&FsConfig> = configs.values().collect();
    let payload = postcard::to_allocvec(&list).expect("in-memory serialization");
    write_envelope(path, MAGIC, &payload)
}

/// Persistent parameters of every file system: fsname -> (version, [(name, value)]).
pub type ParamSets = BTreeMap<String, (u64, Vec<(String, String)>)>;

const PARAMS_MAGIC: &[u8; 4] = b"NMGP";

/// Loads persistent parameters (a missing file is none).
pub fn load_params(path: &Path) -> Result<ParamSets, StoreError> {
    match read_envelope(path, PARAMS_MAGIC)? {
        Some(payload) => decode(path, &payload),
        None => Ok(BTreeMap::new()),
    }
}

/// Saves persistent parameters durably.
pub fn save_params(path: &Path, params: &ParamSets) -> Result<(), StoreError> {
    let payload = postcard::to_allocvec(params).expect("in-memory serialization");
    write_envelope(path, PARAMS_MAGIC, &payload)
}

fn write_envelope(path: &Path, magic: &[u8; 4], payload: &[u8]) -> Result<(), StoreError> {
    let io = |source| StoreError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut bytes = Vec::with_capacity(payload.len() + 12);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
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
