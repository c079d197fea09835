//! The file-system keys given to this process (`--key FILE`, repeatable; `NACRE_KEY`): a
//! mount or an admin command proves it holds the key of the file system it reaches, a
//! server requires the keys of the file systems it serves (docs/security.md).

use anyhow::Context;
use nacre_net::sec::{self, FsKey};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

static KEYS: OnceLock<Vec<Arc<FsKey>>> = OnceLock::new();

/// Loads the key files (each readable by its owner only) into the process's keys: a
/// connection proves the key of its file system; the first is the key of every connection
/// that names none.
pub fn install(paths: &[PathBuf]) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    for p in paths {
        let k =
            FsKey::load(p).with_context(|| "cannot use the key given with --key".to_string())?;
        sec::add_key(k.clone());
        keys.push(Arc::new(k));
    }
    let _ = KEYS.set(keys);
    Ok(())
}

/// Every key given.
pub fn all() -> Vec<Arc<FsKey>> {
    KEYS.get().cloned().unwrap_or_default()
}
