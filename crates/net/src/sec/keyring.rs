//! The keys this process's own connections prove (one per file system: `--key FILE`, or
//! found in the key directory as `FSNAME.key`), and the capability keys derived from them.

use super::{FsKey, KeyId};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The keys a process's own connections prove, one per file system (added at start from
/// `--key FILE`; empty: no handshake). The first added is the default.
static KEYRING: std::sync::RwLock<Vec<std::sync::Arc<FsKey>>> = std::sync::RwLock::new(Vec::new());

/// Adds the key of its file system to the process's keys (replacing one of the same file
/// system); the first added becomes the default of connections that name no file system.
pub fn add_key(key: FsKey) {
    let replaced = {
        let mut ring = KEYRING.write().unwrap_or_else(|e| e.into_inner());
        match ring.iter_mut().find(|k| k.fsname == key.fsname) {
            Some(k) => {
                let old = k.master_id();
                *k = Arc::new(key);
                (old != k.master_id()).then(|| (k.fsname.clone(), old))
            }
            None => {
                ring.push(Arc::new(key));
                None
            }
        }
    };
    // A key of another master (`nacre key use`, or read again after a retirement): the
    // connections configured with the old one use it from now on ([`current`]).
    if let Some(old) = replaced {
        let mut superseded = SUPERSEDED.lock().unwrap_or_else(|e| e.into_inner());
        if superseded.len() < SUPERSEDED_MAX && !superseded.contains(&old) {
            superseded.push(old);
        }
    }
}

/// The process's default client key (the first added).
pub fn default_key() -> Option<std::sync::Arc<FsKey>> {
    let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
    ring.first().cloned()
}

/// The process's key of `fsname` (added, or found in the key directory), else its default
/// key (whose handshake then shows the server it is the wrong one, with a clear error).
pub fn key_for(fsname: &str) -> Option<std::sync::Arc<FsKey>> {
    {
        let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = ring.iter().find(|k| k.fsname == fsname) {
            return Some(k.clone());
        }
    }
    find_key(fsname);
    let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
    ring.iter()
        .find(|k| k.fsname == fsname)
        .or_else(|| ring.first())
        .cloned()
}

/// Where this process looks for the key of a file system it was given none of
/// ([`set_key_dir`]), and the file systems it looked for there already.
static KEY_DIR: std::sync::Mutex<(Option<std::path::PathBuf>, Vec<String>)> =
    std::sync::Mutex::new((None, Vec::new()));

/// The directory file-system keys are looked for in by default (`NACRE_KEY_DIR` names
/// another): `/etc/nacre/FSNAME.key`.
pub const KEY_DIR_DEFAULT: &str = "/etc/nacre";

/// The key file of `fsname` in `dir`: `DIR/FSNAME.key`.
pub fn key_path(dir: &Path, fsname: &str) -> std::path::PathBuf {
    dir.join(format!("{fsname}.key"))
}

/// Makes connections to a file system this process holds no key of look for
/// `DIR/FSNAME.key` (once per file system); None: never look.
pub fn set_key_dir(dir: Option<std::path::PathBuf>) {
    let mut k = KEY_DIR.lock().unwrap_or_else(|e| e.into_inner());
    *k = (dir, Vec::new());
}

/// Adds the key of `fsname` in the key directory to the process's keys, looked for once: a
/// missing file is no key; a file that cannot be used (mode, owner, text) is said once and
/// is no key either.
fn find_key(fsname: &str) {
    // Looked for, loaded and added under the key directory's lock (taken before the
    // keyring's, never after): a second caller at the same moment waits, then finds the
    // key added (it must not take the default key meanwhile).
    let _ = load_dir_key(fsname);
}

/// [`find_key`]'s look; `Some(())` when it added a key.
fn load_dir_key(fsname: &str) -> Option<()> {
    let mut k = KEY_DIR.lock().unwrap_or_else(|e| e.into_inner());
    {
        let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
        if ring.iter().any(|key| key.fsname == fsname) {
            return None;
        }
    }
    let dir = k.0.clone()?;
    if k.1.iter().any(|f| f == fsname) || k.1.len() >= KEY_DIR_LOOKUPS_MAX {
        return None;
    }
    k.1.push(fsname.to_string());
    let path = key_path(&dir, fsname);
    if !path.exists() {
        return None;
    }
    match FsKey::load(&path) {
        Ok(key) if key.fsname == fsname => {
            tracing::debug!("using the key of {fsname} in {}", path.display());
            add_key_from(key, &path);
            drop(k);
            Some(())
        }
        Ok(key) => {
            tracing::warn!(
                "{} holds a key of {}, not of {fsname}: not used",
                path.display(),
                key.fsname
            );
            None
        }
        Err(e) => {
            tracing::warn!("{e}: connections to {fsname} prove no key");
            None
        }
    }
}

/// Most file systems one process looks for keys of in the key directory.
pub const KEY_DIR_LOOKUPS_MAX: usize = 64;

/// The key `fsname`'s MDTs make object capabilities with (and its OSTs check them with),
/// derived from the master secret of the file system's key this process uses (None: it
/// holds no server or admin key of it, no capabilities: a client key cannot make them).
pub fn capability_key(fsname: &str) -> Option<[u8; 32]> {
    let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
    let key = ring.iter().find(|k| k.fsname == fsname && k.is_master())?;
    Some(capability_key_of(key))
}

/// Every key `fsname`'s OSTs accept capabilities made with: the key this process uses
/// first, then those of the other master keys it accepts during a rotation
/// ([`super::accept_key`]). Empty: no capabilities are checked.
pub fn capability_keys(fsname: &str) -> Vec<[u8; 32]> {
    let mut keys: Vec<[u8; 32]> = capability_key(fsname).into_iter().collect();
    for k in super::served::masters(fsname) {
        let c = capability_key_of(&k);
        if !keys.contains(&c) {
            keys.push(c);
        }
    }
    keys
}

fn capability_key_of(key: &FsKey) -> [u8; 32] {
    blake3::derive_key("nacre object capabilities 2026", &key.secret)
}

/// Where each key of the process was read from (`--key FILE` or the key directory), to be
/// read again when servers say the one held was retired ([`reload_key`]).
static KEY_SOURCES: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());

/// [`add_key`] for a key read from `path`, read again from there when the servers retire
/// the master it was made from.
pub fn add_key_from(key: FsKey, path: &Path) {
    {
        let mut src = KEY_SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        src.retain(|(fs, _)| *fs != key.fsname);
        src.push((key.fsname.clone(), path.to_path_buf()));
    }
    add_key(key);
}

/// The master keys of each file system this process's keys were replaced after ([`add_key`]
/// of another master): a connection configured with a key made from one uses the new key.
static SUPERSEDED: std::sync::Mutex<Vec<(String, Option<KeyId>)>> =
    std::sync::Mutex::new(Vec::new());

/// Reads the key of `fsname` again from where it came from, after a server said the master
/// `used` (the key just refused was made from it) is retired: a rotation, and the
/// administrator put the new key in its place. True when this process holds a key of
/// another master now (read here, or by another connection a moment before).
pub(crate) fn reload_key(fsname: &str, used: Option<KeyId>) -> bool {
    // A server's keys change only through `nacre key` (its control socket): a status 4
    // comes before the server proved anything, and must not move a server's keys.
    if !super::served::masters_served() {
        return reload_client_key(fsname, used);
    }
    false
}

/// [`reload_key`] in a process that serves no file system with keys.
fn reload_client_key(fsname: &str, used: Option<KeyId>) -> bool {
    {
        let superseded = SUPERSEDED.lock().unwrap_or_else(|e| e.into_inner());
        if superseded
            .iter()
            .any(|(fs, id)| fs == fsname && *id == used)
        {
            return true;
        }
    }
    let path = {
        let src = KEY_SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        src.iter()
            .find(|(fs, _)| fs == fsname)
            .map(|(_, p)| p.clone())
    };
    let Some(path) = path else {
        return false;
    };
    match FsKey::load(&path) {
        Ok(key)
            if key.fsname == fsname
                && key.master_id() != used
                && !superseded_master(fsname, key.master_id()) =>
        {
            tracing::info!(
                "the servers of {fsname} retired the key this process held: using the one \
                 now in {} (master {})",
                path.display(),
                key.master_id()
                    .map_or("unnamed".to_string(), |m| m.to_string())
            );
            // A server keeps proving the server role with it.
            let key = match held_role(fsname) {
                Some(role) if key.is_master() => key.as_role(role).unwrap_or(key),
                _ => key,
            };
            add_key(key);
            true
        }
        Ok(_) => false,
        Err(e) => {
            tracing::warn!("{e}: cannot read the key of {fsname} again");
            false
        }
    }
}

/// True when this process replaced a key of master `id` of `fsname` before: a key file
/// holding it again is not taken back.
fn superseded_master(fsname: &str, id: Option<KeyId>) -> bool {
    let superseded = SUPERSEDED.lock().unwrap_or_else(|e| e.into_inner());
    superseded
        .iter()
        .any(|(fs, old)| fs == fsname && *old == id)
}

/// Most key replacements remembered (a process that reloads more often than this is
/// misconfigured: its connections then keep the key they were given).
const SUPERSEDED_MAX: usize = 1024;

/// The key a connection configured with `key` proves: `key`, or the one that replaced it
/// after the servers retired its master ([`reload_key`]).
pub(crate) fn current(key: &Arc<FsKey>) -> Arc<FsKey> {
    let replaced = {
        let superseded = SUPERSEDED.lock().unwrap_or_else(|e| e.into_inner());
        let id = key.master_id();
        superseded
            .iter()
            .any(|(fs, old)| *fs == key.fsname && *old == id)
    };
    if !replaced {
        return key.clone();
    }
    let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
    ring.iter()
        .find(|k| k.fsname == key.fsname)
        .cloned()
        .unwrap_or_else(|| key.clone())
}

/// The role this process's key of `fsname` proves.
fn held_role(fsname: &str) -> Option<super::Role> {
    let ring = KEYRING.read().unwrap_or_else(|e| e.into_inner());
    ring.iter().find(|k| k.fsname == fsname).map(|k| k.role)
}
