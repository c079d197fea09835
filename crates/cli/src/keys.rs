//! The file-system keys given to this process (`--key FILE`, repeatable; `NACRE_KEY`): a
//! mount or an admin command proves it holds the key of the file system it reaches, a
//! server requires the keys of the file systems it serves (docs/security.md).

use anyhow::Context;
use nacre_net::sec::{self, FsKey};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

static KEYS: OnceLock<Vec<Arc<FsKey>>> = OnceLock::new();

/// Loads the key files (each readable by its owner only); the first becomes the key of
/// every connection that names none.
pub fn install(paths: &[PathBuf]) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    for p in paths {
        let k =
            FsKey::load(p).with_context(|| "cannot use the key given with --key".to_string())?;
        keys.push(Arc::new(k));
    }
    if let Some(first) = keys.first() {
        sec::set_default_key((**first).clone());
    }
    let _ = KEYS.set(keys);
    Ok(())
}

/// Every key given.
pub fn all() -> Vec<Arc<FsKey>> {
    KEYS.get().cloned().unwrap_or_default()
}

/// The key of `fsname`, if given (else the first key given, which the handshake will show
/// to be the wrong one with a clear error).
pub fn for_fs(fsname: &str) -> Option<Arc<FsKey>> {
    let keys = all();
    keys.iter()
        .find(|k| k.fsname() == fsname)
        .or_else(|| keys.first())
        .cloned()
}
