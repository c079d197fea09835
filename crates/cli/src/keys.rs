//! The file-system keys given to this process (`--key FILE`, repeatable; `NACRE_KEY`): a
//! mount or an admin command proves it holds the key of the file system it reaches, a
//! server requires the keys of the file systems it serves (docs/security.md). A file system
//! given no key is looked for in the key directory (`--key-dir`, `NACRE_KEY_DIR`, default
//! `/etc/nacre`) as `FSNAME.key`.

use anyhow::Context;
use nacre_net::sec::{self, FsKey};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

static KEYS: OnceLock<Vec<Arc<FsKey>>> = OnceLock::new();
static KEY_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Loads the key files (each readable by its owner only) into the process's keys: a
/// connection proves the key of its file system; the first is the key of every connection
/// that names none.
pub fn install(paths: &[PathBuf], key_dir: &Path) -> anyhow::Result<()> {
    let _ = KEY_DIR.set(key_dir.to_path_buf());
    sec::set_key_dir(Some(key_dir.to_path_buf()));
    let mut keys = Vec::new();
    for p in paths {
        let k =
            FsKey::load(p).with_context(|| "cannot use the key given with --key".to_string())?;
        sec::add_key_from(k.clone(), p);
        keys.push(Arc::new(k));
    }
    let _ = KEYS.set(keys);
    Ok(())
}

/// Every key given.
pub fn all() -> Vec<Arc<FsKey>> {
    KEYS.get().cloned().unwrap_or_default()
}

/// The key directory (`--key-dir`).
pub fn key_dir() -> PathBuf {
    KEY_DIR
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from(sec::KEY_DIR_DEFAULT))
}

/// The key of `fsname` in the key directory: None when there is no such file; an error
/// when one is there and cannot be used (its mode, owner or text; a key of another file
/// system).
pub fn from_dir(fsname: &str) -> anyhow::Result<Option<FsKey>> {
    let path = sec::key_path(&key_dir(), fsname);
    if !path.exists() {
        return Ok(None);
    }
    let key = FsKey::load(&path)?;
    anyhow::ensure!(
        key.fsname() == fsname,
        "{} holds a key of {}, not of {fsname}",
        path.display(),
        key.fsname()
    );
    Ok(Some(key))
}

/// Makes the key directory (mode 0700) if missing.
pub fn make_key_dir() -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = key_dir();
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot make the key directory {}", dir.display()))?;
    }
    Ok(dir)
}
