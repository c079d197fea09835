//! Quota identities: a user, a group or a project (docs/quota.md).

use crate::{Attr, Owner};
use serde::{Deserialize, Serialize};

/// What a quota counts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum QuotaKind {
    /// A user (uid).
    User,
    /// A group (gid).
    Group,
    /// A project (`nacre project`).
    Project,
}

impl QuotaKind {
    /// Every kind.
    pub const ALL: [QuotaKind; 3] = [QuotaKind::User, QuotaKind::Group, QuotaKind::Project];

    /// Its code in keys (0, 1, 2).
    pub fn code(self) -> u8 {
        match self {
            QuotaKind::User => 0,
            QuotaKind::Group => 1,
            QuotaKind::Project => 2,
        }
    }

    /// The kind of `code`.
    pub fn of_code(code: u8) -> Option<QuotaKind> {
        QuotaKind::ALL.get(code as usize).copied()
    }

    /// `usr`, `grp`, `prj` (as Lustre names them).
    pub fn name(self) -> &'static str {
        match self {
            QuotaKind::User => "usr",
            QuotaKind::Group => "grp",
            QuotaKind::Project => "prj",
        }
    }
}

/// What a target's quota check (`nacre lfsck --quota`) found: the ids whose recorded usage
/// differs from a recount of what they own there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaCheck {
    /// Ids counted (with any usage, recorded or counted).
    pub ids: u64,
    /// Differences: (id, counted, recorded), at most [`QuotaCheck::DIFFS_MAX`] of them.
    pub diffs: Vec<(QuotaId, u64, u64)>,
    /// Differences in all (more than `diffs` lists when past its bound).
    pub diffs_total: u64,
    /// True if the recorded usage was set to the count.
    pub repaired: bool,
}

impl QuotaCheck {
    /// Most differences one target lists.
    pub const DIFFS_MAX: usize = 1_024;

    /// Compares `counted` with `recorded` (ids in either).
    pub fn compare(
        counted: &std::collections::HashMap<QuotaId, u64>,
        recorded: &std::collections::HashMap<QuotaId, u64>,
    ) -> QuotaCheck {
        let mut ids: Vec<QuotaId> = counted.keys().chain(recorded.keys()).copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut check = QuotaCheck {
            ids: ids.len() as u64,
            ..QuotaCheck::default()
        };
        for id in ids {
            let c = counted.get(&id).copied().unwrap_or(0);
            let r = recorded.get(&id).copied().unwrap_or(0);
            if c != r {
                check.diffs_total += 1;
                if check.diffs.len() < QuotaCheck::DIFFS_MAX {
                    check.diffs.push((id, c, r));
                }
            }
        }
        check
    }
}

/// A user, group or project.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaId {
    /// Which kind of id.
    pub kind: QuotaKind,
    /// The uid, gid or project ID.
    pub id: u32,
}

impl QuotaId {
    /// Bytes of [`QuotaId::to_key`].
    pub const KEY_BYTES: usize = 5;

    /// The user, group and project charged for what `owner` owns.
    pub fn of_owner(owner: Owner) -> [QuotaId; 3] {
        [
            QuotaId {
                kind: QuotaKind::User,
                id: owner.uid,
            },
            QuotaId {
                kind: QuotaKind::Group,
                id: owner.gid,
            },
            QuotaId {
                kind: QuotaKind::Project,
                id: owner.project,
            },
        ]
    }

    /// The user, group and project charged for an inode.
    pub fn of_attr(a: &Attr) -> [QuotaId; 3] {
        QuotaId::of_owner(Owner::of(a))
    }

    /// Kind code, then the id big-endian (keys sort by kind, then id).
    pub fn to_key(self) -> [u8; Self::KEY_BYTES] {
        let mut k = [0u8; Self::KEY_BYTES];
        k[0] = self.kind.code();
        k[1..].copy_from_slice(&self.id.to_be_bytes());
        k
    }

    /// Whether `cred` may see this id's usage and limits: root any; others their own user,
    /// their groups, and projects (as `lfs quota` lets them).
    pub fn visible_to(self, cred: &crate::Cred) -> bool {
        cred.is_root()
            || match self.kind {
                QuotaKind::User => self.id == cred.uid,
                QuotaKind::Group => cred.in_group(self.id),
                QuotaKind::Project => true,
            }
    }

    /// Decodes [`QuotaId::to_key`]; `None` for anything else.
    pub fn from_key(k: &[u8]) -> Option<QuotaId> {
        let k: &[u8; Self::KEY_BYTES] = k.try_into().ok()?;
        Some(QuotaId {
            kind: QuotaKind::of_code(k[0])?,
            id: u32::from_be_bytes(k[1..].try_into().ok()?),
        })
    }
}

impl std::fmt::Display for QuotaId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_refuse_anything_else() {
        for kind in QuotaKind::ALL {
            let q = QuotaId { kind, id: 70_000 };
            assert_eq!(QuotaId::from_key(&q.to_key()), Some(q));
        }
        assert_eq!(QuotaId::from_key(&[3, 0, 0, 0, 1]), None);
        assert_eq!(QuotaId::from_key(&[0, 0, 0, 1]), None);
        let ids = QuotaId::of_owner(Owner {
            uid: 1,
            gid: 2,
            project: 3,
        });
        assert_eq!(ids.map(|q| q.id), [1, 2, 3]);
        assert_eq!(ids[2].to_string(), "prj:3");
        // Users see themselves, their groups and any project; root sees all.
        let user = crate::Cred::new(1000, 100, vec![200]);
        let root = crate::Cred::new(0, 0, vec![]);
        let id = |kind, id| QuotaId { kind, id };
        for (q, seen) in [
            (id(QuotaKind::User, 1000), true),
            (id(QuotaKind::User, 1001), false),
            (id(QuotaKind::Group, 100), true),
            (id(QuotaKind::Group, 200), true),
            (id(QuotaKind::Group, 300), false),
            (id(QuotaKind::Project, 9), true),
        ] {
            assert_eq!(q.visible_to(&user), seen, "{q}");
            assert!(q.visible_to(&root));
        }
    }
}
