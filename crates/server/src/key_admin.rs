//! `nacre key`: the server-key rotation of a running server process, asked through its
//! control socket (root only): list the master keys it holds, accept a new one beside the
//! one in use, use it, retire the old one (docs/security.md, "Rotating the server key").
//! Each change is in the audit trail (log target `nacre::audit`).

use nacre_net::sec::{self, FsKey, KeyId};
use std::path::Path;

/// The name of the pair a key answer starts with: this process serves the file system
/// asked about with keys (processes that do not answer nothing).
pub const KEY_ANSWERED: &str = "#keys";

/// Answers a key request: `list`, `add PATH`, `use PATH`, `retire FSNAME ID`. None when
/// this process serves the file system asked about with no key (a mount, another file
/// system's server): it has no part in the rotation.
pub fn answer(request: &str) -> Option<Result<Vec<(String, String)>, String>> {
    let words: Vec<&str> = request.split_whitespace().collect();
    let result = match words.as_slice() {
        ["list"] => {
            let held = sec::held_keys();
            if held.is_empty() {
                return None;
            }
            Ok(())
        }
        [verb @ ("add" | "use"), path] => {
            let key = match FsKey::load(Path::new(path)) {
                Ok(k) => k,
                Err(e) => return Some(Err(e.to_string())),
            };
            if !serves(key.fsname()) {
                return None;
            }
            let id = key.master_id();
            let fsname = key.fsname().to_string();
            let r = match *verb {
                "add" => sec::accept_key(key),
                _ => sec::use_key(key),
            };
            audit(
                &format!(
                    "key {verb} fs={fsname:?} master={}",
                    id.map_or("-".into(), |i| i.to_string())
                ),
                &r,
            );
            r.map(|_| ()).map_err(|e| e.to_string())
        }
        ["retire", fsname, id] => {
            if !serves(fsname) {
                return None;
            }
            let Some(id) = KeyId::parse(id) else {
                return Some(Err(format!("{id:?} is not a key id (16 hex digits)")));
            };
            let r = sec::retire_key(fsname, id);
            audit(&format!("key retire fs={fsname:?} master={id}"), &r);
            r.map_err(|e| e.to_string())
        }
        _ => Err(format!(
            "bad key request {request:?}: list, add FILE, use FILE or retire FSNAME ID"
        )),
    };
    Some(result.map(|()| {
        std::iter::once((KEY_ANSWERED.to_string(), String::new()))
            .chain(sec::held_keys().into_iter().map(|k| {
                (
                    format!("{}:{}", k.fsname, k.id),
                    format!(
                        "{} level {}",
                        if k.in_use { "in use" } else { "accepted" },
                        k.level
                    ),
                )
            }))
            .collect()
    }))
}

/// True when this process serves `fsname` with keys.
fn serves(fsname: &str) -> bool {
    sec::held_keys().iter().any(|k| k.fsname == fsname)
}

/// Records a key change and its outcome in the audit trail.
fn audit<T>(what: &str, outcome: &Result<T, sec::SecError>) {
    let result = match outcome {
        Ok(_) => "done".to_string(),
        Err(e) => format!("refused: {e}"),
    };
    tracing::info!(
        target: "nacre::audit",
        "audit: root on this host through the control socket: {what}: {result}"
    );
}
