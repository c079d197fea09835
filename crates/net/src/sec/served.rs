//! The keys a server checks its peers' proofs with, one or two master keys per file system,
//! and their rotation while the server runs (docs/security.md, "Rotating the server key"):
//!
//! 1. [`accept_key`] on every server: handshakes proved with keys made from the new master
//!    are taken as well, and capabilities made with it are checked;
//! 2. [`use_key`] on every server: its own connections and the capabilities it makes use
//!    the new master;
//! 3. [`retire_key`] of the old master on every server: handshakes with keys made from it
//!    are refused (the client is told to read its key again, and does), and connections it
//!    opened are dropped at their next request.

use super::{FsKey, KeyId, Level, SecError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Most master keys a server holds of one file system at once (the one in use and those
/// accepted beside it).
pub const MASTERS_PER_FS_MAX: usize = 4;

/// The keys a server holds: per file system, the master key in use first, then those
/// accepted beside it during a rotation. A server with none takes connections without a
/// handshake; a server with any requires one on every connection. Clones share the keys:
/// a key accepted or retired through one is through all.
#[derive(Clone, Debug, Default)]
pub struct ServerKeys {
    keys: Arc<RwLock<HashMap<String, Vec<FsKey>>>>,
    /// Counts the keys retired, so a connection checks its key is still held only after
    /// one was.
    retired: Arc<AtomicU64>,
}

/// A master key a server holds, as [`held_keys`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldKey {
    /// The file system.
    pub fsname: String,
    /// The master key's id.
    pub id: KeyId,
    /// The level connections get by default.
    pub level: Level,
    /// True for the key this process's own connections and capabilities use.
    pub in_use: bool,
}

impl ServerKeys {
    /// Adds the key of its file system as the one in use (replacing the one in use);
    /// refused for a client key (a server checks every peer's proof with the master secret
    /// only server keys hold).
    pub fn add(&mut self, key: FsKey) -> Result<(), SecError> {
        check_master(&key)?;
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let held = keys.entry(key.fsname.clone()).or_default();
        held.retain(|k| k.master_id() != key.master_id());
        match held.first_mut() {
            Some(first) => *first = key,
            None => held.push(key),
        }
        Ok(())
    }

    /// The key of `fsname` in use.
    pub fn get(&self, fsname: &str) -> Option<FsKey> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.get(fsname).and_then(|v| v.first()).cloned()
    }

    /// The master key of `fsname` whose id is `id` (None: the one in use, for a key that
    /// names none); None when the server holds no such key.
    pub fn find(&self, fsname: &str, id: Option<KeyId>) -> Option<FsKey> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let held = keys.get(fsname)?;
        match id {
            None => held.first().cloned(),
            Some(id) => held.iter().find(|k| k.master_id() == Some(id)).cloned(),
        }
    }

    /// True when the server holds a key of `fsname`.
    pub fn serves(&self, fsname: &str) -> bool {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.get(fsname).is_some_and(|v| !v.is_empty())
    }

    /// True when connections must open with a handshake.
    pub fn required(&self) -> bool {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        keys.values().any(|v| !v.is_empty())
    }

    /// How many keys were retired so far: a connection checks its key again only when this
    /// moved since it last did.
    pub fn retired(&self) -> u64 {
        self.retired.load(Ordering::Acquire)
    }

    /// Accepts `key` beside the one in use (no change if held already).
    fn accept(&self, key: FsKey) -> Result<(), SecError> {
        check_master(&key)?;
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let Some(held) = keys.get_mut(&key.fsname).filter(|v| !v.is_empty()) else {
            return Err(SecError::Refused(format!(
                "this process serves no file system {} with a key",
                key.fsname
            )));
        };
        if held.iter().any(|k| k.master_id() == key.master_id()) {
            return Ok(());
        }
        if held.len() >= MASTERS_PER_FS_MAX {
            return Err(SecError::Refused(format!(
                "{} master keys of {} held already (masters_per_fs_max): retire one first",
                held.len(),
                key.fsname
            )));
        }
        held.push(key);
        Ok(())
    }

    /// Makes the held key `id` of `fsname` the one in use.
    fn promote(&self, fsname: &str, id: KeyId) -> Result<FsKey, SecError> {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let (held, at) = position(&mut keys, fsname, id)?;
        let key = held.remove(at);
        held.insert(0, key.clone());
        Ok(key)
    }

    /// Forgets the held key `id` of `fsname`; refused for the one in use.
    fn retire(&self, fsname: &str, id: KeyId) -> Result<(), SecError> {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let (held, at) = position(&mut keys, fsname, id)?;
        if at == 0 {
            return Err(SecError::Refused(format!(
                "master key {id} is the one {fsname} uses here: `nacre key use` another first"
            )));
        }
        held.remove(at);
        self.retired.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The keys held, per file system the one in use first.
    fn list(&self) -> Vec<HeldKey> {
        let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<HeldKey> = keys
            .iter()
            .flat_map(|(fs, v)| {
                v.iter().enumerate().map(move |(i, k)| HeldKey {
                    fsname: fs.clone(),
                    id: k.master_id().expect("a server key is a master key"),
                    level: k.level,
                    in_use: i == 0,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.fsname, !a.in_use).cmp(&(&b.fsname, !b.in_use)));
        out
    }
}

fn check_master(key: &FsKey) -> Result<(), SecError> {
    if !key.is_master() {
        return Err(SecError::Refused(format!(
            "the key of {} is a client key: a server needs the file system's server key",
            key.fsname
        )));
    }
    Ok(())
}

/// The held masters of `fsname` and where master `id` is among them.
fn position<'a>(
    keys: &'a mut HashMap<String, Vec<FsKey>>,
    fsname: &str,
    id: KeyId,
) -> Result<(&'a mut Vec<FsKey>, usize), SecError> {
    let held = keys.get_mut(fsname).ok_or_else(|| no_such(fsname, id))?;
    let at = held
        .iter()
        .position(|k| k.master_id() == Some(id))
        .ok_or_else(|| no_such(fsname, id))?;
    Ok((held, at))
}

fn no_such(fsname: &str, id: KeyId) -> SecError {
    SecError::Refused(format!("this process holds no master key {id} of {fsname}"))
}

/// The keys this process serves with ([`serve_keys`]), for rotation and capabilities.
static SERVED: RwLock<Option<ServerKeys>> = RwLock::new(None);

/// Makes `keys` the keys this process's servers check peers with, which the rotation
/// functions below change.
pub fn serve_keys(keys: &ServerKeys) {
    *SERVED.write().unwrap_or_else(|e| e.into_inner()) = Some(keys.clone());
}

fn served() -> Result<ServerKeys, SecError> {
    SERVED
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or_else(|| SecError::Refused("this process serves no file system with a key".into()))
}

/// True when this process serves some file system with keys.
pub(crate) fn masters_served() -> bool {
    served().is_ok_and(|s| s.required())
}

/// Every master key of `fsname` this process serves with.
pub(crate) fn masters(fsname: &str) -> Vec<FsKey> {
    let Ok(served) = served() else {
        return Vec::new();
    };
    let keys = served.keys.read().unwrap_or_else(|e| e.into_inner());
    keys.get(fsname).cloned().unwrap_or_default()
}

/// Step 1 of a rotation: this process's servers take handshakes proved with keys made
/// from `key` (a new master key of a file system they serve) and capabilities made with it,
/// beside the key in use. Returns its id.
pub fn accept_key(key: FsKey) -> Result<KeyId, SecError> {
    check_master(&key)?;
    let id = key.master_id().expect("a master key has an id");
    served()?.accept(key)?;
    Ok(id)
}

/// Step 2: this process's own connections (to the MGS, peer MDTs, OSTs) and the
/// capabilities it makes use `key` (accepted first if it was not). Every server must
/// accept it before any uses it: a server that does not is refused the connections made
/// with it.
pub fn use_key(key: FsKey) -> Result<KeyId, SecError> {
    let fsname = key.fsname.clone();
    let id = accept_key(key)?;
    let key = served()?.promote(&fsname, id)?;
    super::add_key(
        key.as_role(super::Role::Server)
            .expect("a master key takes any role"),
    );
    Ok(id)
}

/// Step 3: forgets the master key `id` of `fsname`: handshakes with keys made from it are
/// refused, connections that proved one are dropped at their next request. Refused for
/// the key in use.
pub fn retire_key(fsname: &str, id: KeyId) -> Result<(), SecError> {
    served()?.retire(fsname, id)
}

/// The master keys this process serves with.
pub fn held_keys() -> Vec<HeldKey> {
    served().map(|s| s.list()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_accepts_then_uses_then_retires_and_never_drops_the_key_in_use() {
        let old = FsKey::generate("fs", Level::Bulk).unwrap();
        let new = FsKey::generate("fs", Level::Bulk).unwrap();
        let (old_id, new_id) = (old.master_id().unwrap(), new.master_id().unwrap());
        assert_ne!(old_id, new_id);
        let mut keys = ServerKeys::default();
        keys.add(old.clone()).unwrap();
        let shared = keys.clone();
        assert!(shared.find("fs", Some(new_id)).is_none());
        keys.accept(new.clone()).unwrap();
        // Clones share: the listener's copy sees the key accepted through another.
        assert!(shared.find("fs", Some(new_id)).is_some());
        assert_eq!(shared.find("fs", None).unwrap().master_id(), Some(old_id));
        assert!(keys.retire("fs", old_id).is_err(), "the key in use stays");
        keys.promote("fs", new_id).unwrap();
        assert_eq!(shared.get("fs").unwrap().master_id(), Some(new_id));
        let before = shared.retired();
        keys.retire("fs", old_id).unwrap();
        assert_eq!(shared.retired(), before + 1);
        assert!(shared.find("fs", Some(old_id)).is_none());
        assert!(keys.retire("fs", new_id).is_err());
        assert!(keys
            .accept(FsKey::generate("other", Level::Bulk).unwrap())
            .is_err());
        let client = new.client_key("lab", None).unwrap();
        assert_eq!(client.master_id(), Some(new_id));
        assert!(keys.accept(client).is_err(), "a client key is no master");
        let back = FsKey::parse(&new.client_key("lab", None).unwrap().to_text()).unwrap();
        assert_eq!(
            back.master_id(),
            Some(new_id),
            "a client key file names its master"
        );
        for _ in 0..MASTERS_PER_FS_MAX - 1 {
            keys.accept(FsKey::generate("fs", Level::Bulk).unwrap())
                .unwrap();
        }
        assert!(keys
            .accept(FsKey::generate("fs", Level::Bulk).unwrap())
            .is_err());
        assert_eq!(KeyId::parse(&new_id.to_string()), Some(new_id));
        assert_eq!(KeyId::parse("xyz"), None);
    }
}
