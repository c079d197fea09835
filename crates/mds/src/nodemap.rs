//! Nodemaps enforced on an MDT (Lustre's nodemap; docs/security.md): the credentials of a
//! request from a mapped client are mapped to file-system ids (root squashed unless the
//! nodemap is admin, ids mapped unless it is trusted) before anything is checked, the ids an
//! operation names (a create's owner, a chown) too; an untrusted client's supplementary
//! groups are the MDS's own (its identity source, as Lustre's identity upcall), never the
//! client's word; a read-only nodemap may change nothing; owners in replies are mapped back.

use nacre_types::{cred::MAY_WRITE, Attr, Cred, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use nacre_wire::nodemap::{IdKind, Nodemap};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the supplementary groups of a user, as the MDS resolved them, are kept.
pub const IDENTITY_EXPIRE_MS: u64 = 60_000;
/// Users whose groups are kept at once.
const IDENTITIES_MAX: usize = 65_536;

/// Refuses what a read-only nodemap may not do: every change but a close, and opens for
/// writing.
pub fn check_readonly(m: &Nodemap, op: &MdsOp) -> Result<(), Status> {
    if !m.readonly {
        return Ok(());
    }
    let refused = match op {
        MdsOp::Open { access, .. } => access & MAY_WRITE != 0,
        MdsOp::Close { .. } => false,
        // Asked only to create.
        MdsOp::DelegateDir { .. } => true,
        other => other.is_modifying(),
    };
    match refused {
        true => Err(Status::RoFs),
        false => Ok(()),
    }
}

/// Maps a request's credentials and the ids its operation names to file-system ids.
pub fn map_request(m: &Nodemap, cred: &mut Cred, op: &mut MdsOp) {
    let client_uid = cred.uid;
    cred.uid = m.map_in(IdKind::Uid, cred.uid);
    cred.gid = m.map_in(IdKind::Gid, cred.gid);
    cred.groups = match m.trusted {
        true => cred
            .groups
            .iter()
            .map(|g| m.map_in(IdKind::Gid, *g))
            .collect(),
        // A squashed root has no groups; others have those the MDS knows for the user.
        false if client_uid == 0 && !m.admin => Vec::new(),
        false => groups_of(cred.uid, cred.gid),
    };
    map_op_ids(m, op);
}

/// Maps the ids `op` names (an owner it sets, a new inode's owner) to file-system ids; a
/// replayed operation's as well, as when it first ran.
fn map_op_ids(m: &Nodemap, op: &mut MdsOp) {
    let (u, g) = (
        |id: &mut u32| *id = m.map_in(IdKind::Uid, *id),
        |id: &mut u32| *id = m.map_in(IdKind::Gid, *id),
    );
    match op {
        MdsOp::Replay { op: inner, .. } => map_op_ids(m, inner),
        MdsOp::Create { uid, gid, .. }
        | MdsOp::Mkdir { uid, gid, .. }
        | MdsOp::Symlink { uid, gid, .. }
        | MdsOp::MkdirOn { uid, gid, .. }
        | MdsOp::MkdirStriped { uid, gid, .. } => {
            u(uid);
            g(gid);
        }
        MdsOp::CreateBatch { items, .. } => {
            for i in items.iter_mut() {
                u(&mut i.uid);
                g(&mut i.gid);
            }
        }
        MdsOp::SetAttr { attr, .. } => {
            if let Some(x) = attr.uid.as_mut() {
                u(x);
            }
            if let Some(x) = attr.gid.as_mut() {
                g(x);
            }
        }
        _ => {}
    }
}

/// Shows an inode's owner and group as the client's ids.
pub fn map_attr(m: &Nodemap, a: &mut Attr) {
    a.uid = m.map_out(IdKind::Uid, a.uid);
    a.gid = m.map_out(IdKind::Gid, a.gid);
}

/// Maps the owners a reply shows back to the client's ids.
pub fn map_reply(m: &Nodemap, reply: &mut MdsReply) {
    match reply {
        MdsReply::Attr(a) | MdsReply::Entry { attr: a, .. } => map_attr(m, a),
        MdsReply::Created(results) => {
            for (a, _) in results.iter_mut().flatten() {
                map_attr(m, a);
            }
        }
        MdsReply::DirPlus { entries, .. } => {
            for e in entries.iter_mut() {
                if let Some(a) = e.attr.as_mut() {
                    map_attr(m, a);
                }
            }
        }
        MdsReply::Stats { stats, .. } => {
            for s in stats.iter_mut() {
                map_attr(m, &mut s.attr);
            }
        }
        _ => {}
    }
}

/// Users' groups as resolved, and when.
type Identities = HashMap<u32, (Instant, Vec<u32>)>;

/// The supplementary groups of `uid` (primary group `gid`) from this node's identity
/// source (the name service: /etc/group, LDAP, ...), kept [`IDENTITY_EXPIRE_MS`].
pub fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    static CACHE: Mutex<Option<Identities>> = Mutex::new(None);
    let expire = Duration::from_millis(IDENTITY_EXPIRE_MS);
    {
        let mut c = CACHE.lock().expect("identities");
        let map = c.get_or_insert_with(HashMap::new);
        if let Some((at, groups)) = map.get(&uid) {
            if at.elapsed() < expire {
                return groups.clone();
            }
        }
    }
    let groups = resolve(uid, gid);
    let mut c = CACHE.lock().expect("identities");
    let map = c.get_or_insert_with(HashMap::new);
    if map.len() >= IDENTITIES_MAX {
        map.clear();
    }
    map.insert(uid, (Instant::now(), groups.clone()));
    groups
}

/// Asks the name service: the user's name (`getpwuid_r`), then its groups
/// (`getgrouplist`). A user it does not know has none.
fn resolve(uid: u32, gid: u32) -> Vec<u32> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: valid pointers to a passwd, a buffer of the given length, and the result.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return Vec::new();
    }
    let mut groups = vec![0 as libc::gid_t; nacre_types::cred::CRED_GROUPS_MAX];
    let mut n = groups.len() as libc::c_int;
    // SAFETY: pw_name points into `buf`, a NUL-terminated name; `groups` holds `n` slots.
    let rc = unsafe { libc::getgrouplist(pwd.pw_name, gid, groups.as_mut_ptr(), &mut n) };
    if rc < 0 {
        // More groups than a request carries: the first CRED_GROUPS_MAX.
        n = groups.len() as libc::c_int;
    }
    groups.truncate(n.max(0) as usize);
    groups.retain(|g| *g != gid);
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::Fid;

    #[test]
    fn root_is_squashed_and_owners_are_mapped_both_ways() {
        let mut m = Nodemap::new("t");
        m.offset = 1_000;
        let mut cred = Cred {
            uid: 0,
            gid: 0,
            groups: vec![0, 5],
        };
        let mut op = MdsOp::GetAttr { fid: Fid::ROOT };
        map_request(&m, &mut cred, &mut op);
        assert_eq!((cred.uid, cred.gid), (65_534, 65_534));
        assert!(cred.groups.is_empty(), "a squashed root has no groups");
        let mut set = MdsOp::SetAttr {
            fid: Fid::ROOT,
            attr: nacre_types::SetAttr {
                uid: Some(7),
                ..Default::default()
            },
        };
        let mut c = Cred {
            uid: 7,
            gid: 7,
            groups: vec![],
        };
        map_request(&m, &mut c, &mut set);
        assert_eq!(c.uid, 1_007);
        let MdsOp::SetAttr { attr, .. } = set else {
            unreachable!()
        };
        assert_eq!(attr.uid, Some(1_007));
        // A replay of that change after an MDT restart names the same ids: mapped alike
        // (left as the client's, the replay's ownership claim failed and the change was lost).
        let mut replay = MdsOp::Replay {
            transno: 9,
            op: Box::new(MdsOp::SetAttr {
                fid: Fid::ROOT,
                attr: nacre_types::SetAttr {
                    uid: Some(7),
                    ..Default::default()
                },
            }),
            reply: Box::new(MdsReply::Done),
            pre_versions: Vec::new(),
        };
        map_request(&m, &mut c, &mut replay);
        let MdsOp::Replay { op, .. } = replay else {
            unreachable!()
        };
        let MdsOp::SetAttr { attr, .. } = *op else {
            unreachable!()
        };
        assert_eq!(attr.uid, Some(1_007));
    }

    #[test]
    fn a_readonly_nodemap_may_read_and_close_only() {
        let mut m = Nodemap::new("ro");
        m.readonly = true;
        let fid = Fid::ROOT;
        assert!(check_readonly(&m, &MdsOp::GetAttr { fid }).is_ok());
        assert!(check_readonly(&m, &MdsOp::Open { fid, access: 4 }).is_ok());
        assert_eq!(
            check_readonly(
                &m,
                &MdsOp::Open {
                    fid,
                    access: MAY_WRITE
                }
            ),
            Err(Status::RoFs)
        );
        assert_eq!(
            check_readonly(
                &m,
                &MdsOp::Unlink {
                    parent: fid,
                    name: b"x".to_vec()
                }
            ),
            Err(Status::RoFs)
        );
    }

    #[test]
    fn the_name_service_knows_root() {
        // root is in every passwd; its groups come from /etc/group (maybe none).
        let g = resolve(0, 0);
        assert!(!g.contains(&0), "the primary group is not repeated");
        assert!(
            resolve(u32::MAX - 7, 1).is_empty(),
            "an unknown user has none"
        );
    }
}
