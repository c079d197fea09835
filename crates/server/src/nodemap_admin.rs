//! `nacre nodemap` on the MGS node: the control socket's `nodemap` operation, carried out
//! by this process's MGS. This process enforces the change once its MDTs have every
//! delegation back (a revoked key at once); every other server process fetches it within
//! [`crate::mgs_sync::PARAM_SYNC_MS`] and does the same.

use nacre_mgs::nodemaps::{NodemapChange, LEVELS};
use nacre_mgs::Mgs;
use nacre_wire::nodemap::{IdKind, IdMap, NidRange, Nodemap, NodemapSet, RevokedKey};
use std::sync::Arc;

/// Lists or changes the nodemaps through this process's MGS: (command, nodemap name or ""
/// for every nodemap, argument) → the nodemaps afterwards as (name, description), or why
/// the change was refused.
pub type NodemapAdmin =
    Arc<dyn Fn(&str, &str, &str) -> Result<Vec<(String, String)>, String> + Send + Sync>;

/// One nodemap as `nacre nodemap list` shows it.
pub fn describe(m: &Nodemap) -> String {
    let ranges: Vec<String> = m.ranges.iter().map(NidRange::to_string).collect();
    let maps: Vec<String> = m
        .idmaps
        .iter()
        .map(|x| {
            let k = match x.kind {
                IdKind::Uid => "uid",
                IdKind::Gid => "gid",
            };
            format!("{k}:{}:{}", x.client, x.fs)
        })
        .collect();
    let level = m
        .level
        .and_then(|l| LEVELS.get(usize::from(l)))
        .copied()
        .unwrap_or("default");
    format!(
        "ranges={} admin={} trusted={} readonly={} squash_uid={} squash_gid={} offset={} \
         level={level} fileset={} idmaps={}",
        if ranges.is_empty() {
            "-".into()
        } else {
            ranges.join(",")
        },
        u8::from(m.admin),
        u8::from(m.trusted),
        u8::from(m.readonly),
        m.squash_uid,
        m.squash_gid,
        m.offset,
        m.fileset.as_deref().unwrap_or("/"),
        if maps.is_empty() {
            "-".into()
        } else {
            maps.join(",")
        },
    )
}

/// The first pair of every answer: an MGS answered (its list may be empty).
pub const NODEMAP_ANSWERED: &str = "#mgs";

fn listed(set: &NodemapSet, name: &str) -> Vec<(String, String)> {
    std::iter::once((NODEMAP_ANSWERED.to_string(), set.version.to_string()))
        .chain(
            set.maps
                .iter()
                .filter(|m| name.is_empty() || m.name == name)
                .map(|m| (m.name.clone(), describe(m))),
        )
        .chain((name.is_empty() && !set.revoked.is_empty()).then(|| {
            let keys: Vec<String> = set.revoked.iter().map(ToString::to_string).collect();
            ("(revoked keys)".to_string(), keys.join(" "))
        }))
        .collect()
}

/// Parses `uid:CLIENT:FS` or `gid:CLIENT:FS`.
fn idmap(arg: &str) -> Result<IdMap, String> {
    let bad = || format!("id mapping '{arg}': expected uid:CLIENT:FS or gid:CLIENT:FS");
    let mut w = arg.split(':');
    let kind = match w.next() {
        Some("uid") => IdKind::Uid,
        Some("gid") => IdKind::Gid,
        _ => return Err(bad()),
    };
    let client = w.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    let fs = w.next().and_then(|v| v.parse().ok()).ok_or_else(bad)?;
    if w.next().is_some() {
        return Err(bad());
    }
    Ok(IdMap { kind, client, fs })
}

/// The change `cmd` of nodemap `name` with its argument.
fn change(cmd: &str, name: &str, arg: &str) -> Result<NodemapChange, String> {
    let n = name.to_string();
    match cmd {
        "add" => Ok(NodemapChange::Add(n)),
        "del" => Ok(NodemapChange::Del(n)),
        "add_range" => Ok(NodemapChange::AddRange(n, NidRange::parse(arg)?)),
        "del_range" => Ok(NodemapChange::DelRange(n, NidRange::parse(arg)?)),
        "modify" => {
            let (p, v) = arg
                .split_once('=')
                .ok_or_else(|| format!("'{arg}': expected PROPERTY=VALUE"))?;
            Ok(NodemapChange::Modify(n, p.to_string(), v.to_string()))
        }
        "add_idmap" => Ok(NodemapChange::AddIdmap(n, idmap(arg)?)),
        "del_idmap" => Ok(NodemapChange::DelIdmap(n, idmap(arg)?)),
        "revoke_key" => Ok(NodemapChange::RevokeKey(RevokedKey::parse(arg)?)),
        "unrevoke_key" => Ok(NodemapChange::UnrevokeKey(RevokedKey::parse(arg)?)),
        other => Err(format!("unknown nodemap command '{other}'")),
    }
}

/// Longest the `nacre nodemap` command waits for its change to be enforced in the MGS's
/// own process before it answers (under the control socket's 5 s).
pub const NODEMAP_ANSWER_WAIT_MS: u64 = 4_000;

/// The control socket's nodemap operation for this process's MGS: each change is installed
/// in this process once its MDTs have every delegation back (`MdsHandler::change_nodemaps`; a
/// key revoked at once), and answered after, or within [`NODEMAP_ANSWER_WAIT_MS`].
pub fn admin(mgs: Arc<Mgs>, mds: Arc<nacre_mds::MdsHandler>) -> NodemapAdmin {
    Arc::new(move |cmd: &str, name: &str, arg: &str| {
        if cmd == "list" {
            let set = mgs.nodemaps();
            if !name.is_empty() && !set.maps.iter().any(|m| m.name == name) {
                return Err(format!("nodemap {name} does not exist"));
            }
            return Ok(listed(&set, name));
        }
        let set = mgs
            .change_nodemap(change(cmd, name, arg)?)
            .map_err(|e| e.to_string())?;
        // Installed once the delegations are back: answered when it is, or, past
        // NODEMAP_ANSWER_WAIT_MS (the caller's own timeout is 5 s), that it will be.
        let (done, installed) = std::sync::mpsc::channel();
        let (mds, newer) = (mds.clone(), set.clone());
        std::thread::Builder::new()
            .name("nodemap-install".into())
            .spawn(move || {
                mds.change_nodemaps(newer);
                let _ = done.send(());
            })
            .map_err(|e| format!("cannot start the install: {e}"))?;
        let wait = std::time::Duration::from_millis(NODEMAP_ANSWER_WAIT_MS);
        let mut answer = listed(&set, name);
        if installed.recv_timeout(wait).is_err() {
            answer.push((
                "(pending)".into(),
                "stored; enforced here once the delegated directories of this process's MDTs \
                 are given back, within the lock callback timeout"
                    .into(),
            ));
        }
        Ok(answer)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(
            change("add_idmap", "lab", "gid:5:9"),
            Ok(NodemapChange::AddIdmap(
                "lab".into(),
                IdMap {
                    kind: IdKind::Gid,
                    client: 5,
                    fs: 9
                }
            ))
        );
        assert_eq!(
            change("modify", "lab", "admin=1"),
            Ok(NodemapChange::Modify(
                "lab".into(),
                "admin".into(),
                "1".into()
            ))
        );
        for (cmd, arg) in [
            ("add_idmap", "uid:5"),
            ("add_idmap", "pid:1:2"),
            ("modify", "admin"),
            ("add_range", "nowhere"),
            ("zap", ""),
        ] {
            assert!(change(cmd, "lab", arg).is_err(), "{cmd} {arg}");
        }
    }
}
