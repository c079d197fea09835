//! Quota messages between targets' slaves, the quota master (on the MGS) and the tools
//! (docs/quota.md), and the master's arithmetic.
//!
//! Limits are global (every OST's bytes and every MDT's bytes of data on the MDT, every
//! MDT's inodes). A target enforces them
//! locally within the grant the master gave it for each limited id: it may let the id's
//! usage there grow up to its grant, and asks for more ([`Acquire`]) before going past it.
//! The master never grants more in total than the limit, so the sum of usages never passes
//! it; it hands grants out in units that shrink as the id nears its limit, and each second
//! ([`SyncReport`]) takes back what a target holds beyond its usage and one unit.

use nacre_types::{PoolName, QuotaId, TargetKind};
use serde::{Deserialize, Serialize};

/// Largest grant unit for bytes.
pub const BLOCK_QUNIT_MAX_BYTES: u64 = 64 << 20;
/// Largest grant unit for inodes.
pub const INODE_QUNIT_MAX: u64 = 4_096;
/// Default grace time of soft limits (a week, as Lustre's).
pub const GRACE_DEFAULT_S: u64 = 7 * 24 * 3600;
/// Most limited ids a file system has.
pub const LIMITS_PER_FS_MAX: usize = 100_000;

/// Within this many bytes of a block limit, OSTs tell the clients writing for the id to
/// write its data synchronously (no write-behind), so `EDQUOT` reaches the writer's
/// `write(2)` (docs/quota.md): one client's write-behind on one OST.
pub const QUOTA_SYNC_WRITE_BYTES: u64 = 64 << 20;

/// What a quota slave counts on its target: bytes (an OST's objects, or the bytes of data on
/// the MDT an MDT stores) or inodes (an MDT's). An MDT runs one slave of each; the master
/// shares a block limit among every slave counting bytes, an inode limit among the MDTs'.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resource {
    /// Bytes: an OST's objects, an MDT's data on the MDT.
    Blocks,
    /// Inodes: an MDT's.
    Inodes,
}

impl Resource {
    /// What a target of `kind` counts first: an MDT its inodes, an OST its bytes (an MDT's
    /// bytes of data on the MDT are its second slave's).
    pub fn of(kind: TargetKind) -> Resource {
        match kind {
            TargetKind::Mdt => Resource::Inodes,
            _ => Resource::Blocks,
        }
    }
}

/// What a limit covers: an id over the whole file system (`pool` none), or over the OSTs
/// of one pool (Lustre's pool quotas; blocks only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct QuotaKey {
    /// The user, group or project.
    pub id: QuotaId,
    /// The pool, or none.
    pub pool: PoolName,
}

impl QuotaKey {
    /// `id` over the whole file system.
    pub fn global(id: QuotaId) -> QuotaKey {
        QuotaKey {
            id,
            pool: PoolName::NONE,
        }
    }
}

impl std::fmt::Display for QuotaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.pool.is_none() {
            write!(f, "{}", self.id)
        } else {
            write!(f, "{} in pool {}", self.id, self.pool.as_str())
        }
    }
}

/// An id's limits; 0 is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimits {
    /// Bytes past which the grace time starts.
    pub block_soft: u64,
    /// Bytes never passed.
    pub block_hard: u64,
    /// Inodes past which the grace time starts.
    pub inode_soft: u64,
    /// Inodes never passed.
    pub inode_hard: u64,
}

impl QuotaLimits {
    /// No limit at all.
    pub fn is_none(&self) -> bool {
        *self == QuotaLimits::default()
    }

    /// Soft and hard limit of `resource`.
    pub fn of(&self, resource: Resource) -> (u64, u64) {
        match resource {
            Resource::Inodes => (self.inode_soft, self.inode_hard),
            Resource::Blocks => (self.block_soft, self.block_hard),
        }
    }
}

/// A slave's request for grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquire {
    /// File system name.
    pub fsname: String,
    /// The target asking.
    pub target: (TargetKind, u32),
    /// What its slave counts (an MDT has two).
    pub resource: Resource,
    /// The id (and pool).
    pub key: QuotaKey,
    /// What the id uses on that target now (with changes under way).
    pub usage: u64,
    /// What the target holds now.
    pub granted: u64,
    /// How much more than its usage it needs.
    pub want: u64,
}

/// The master's answer to an [`Acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// What the target may now hold (its usage may grow to it).
    pub granted: u64,
    /// False: the limit leaves no room for what was asked (`EDQUOT`).
    pub ok: bool,
    /// Not now, but other targets hold grant they do not use: it is taken back at their
    /// next report (each second); ask again then.
    pub retry: bool,
    /// The id is near its limit ([`is_near`]): its data is written synchronously.
    pub near: bool,
}

/// What a slave reports each second: for each limited id, its usage and grant there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// File system name.
    pub fsname: String,
    /// The target.
    pub target: (TargetKind, u32),
    /// What its slave counts (an MDT has two).
    pub resource: Resource,
    /// (key, usage, granted).
    pub ids: Vec<(QuotaKey, u64, u64)>,
}

/// One key limited for a target, in the master's answer to its report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limited {
    /// The id and pool.
    pub key: QuotaKey,
    /// The most grant the target may keep.
    pub keep: u64,
    /// Near its limit ([`is_near`]).
    pub near: bool,
}

/// The master's answer to a [`SyncReport`]: the ids limited for this target's resource
/// (with the most of grant it may keep; ids it did not report start with none), and the
/// version of the limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncAnswer {
    /// Bumped on every change of limits.
    pub version: u64,
    /// The keys limited for this target.
    pub limited: Vec<Limited>,
}

/// One id as the master shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaEntry {
    /// The id (and pool).
    pub key: QuotaKey,
    /// Its limits.
    pub limits: QuotaLimits,
    /// When the block soft limit was passed (seconds since the epoch; 0: it is not).
    pub block_soft_since: u64,
    /// When the inode soft limit was passed.
    pub inode_soft_since: u64,
    /// Bytes granted in total (to the OSTs, and to the MDTs for data on the MDT).
    pub block_granted: u64,
    /// Inodes granted to the MDTs in total.
    pub inode_granted: u64,
}

/// Grace times and ids ([`super::mgs::MgsReply::Quotas`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaView {
    /// Grace time of block soft limits, seconds.
    pub block_grace_s: u64,
    /// Grace time of inode soft limits, seconds.
    pub inode_grace_s: u64,
    /// The ids asked for over the whole file system (with no limits: all zero), each
    /// followed by its pool limits if it has any.
    pub entries: Vec<QuotaEntry>,
    /// Targets that have not yet learnt the latest change of limits (they learn it within
    /// a second of it: `nacre setquota` waits for none to be left).
    pub unsynced: u32,
}

/// The grant unit for an id `room` away from its limit, shared by `targets` targets: half of
/// each target's share of the room (at least 1, at most the resource's largest unit), so no
/// target holds much of what another may need near the limit.
pub fn qunit(resource: Resource, room: u64, targets: usize) -> u64 {
    let max = match resource {
        Resource::Inodes => INODE_QUNIT_MAX,
        Resource::Blocks => BLOCK_QUNIT_MAX_BYTES,
    };
    (room / (2 * targets.max(1) as u64)).clamp(1, max)
}

/// True if an id using `total` of `resource` is near its effective `limit` (0: none):
/// past a soft limit (`over_soft`) or, for blocks, within [`QUOTA_SYNC_WRITE_BYTES`] of
/// the limit. OSTs then tell clients to write its data synchronously.
pub fn is_near(resource: Resource, limit: u64, total: u64, over_soft: bool) -> bool {
    resource == Resource::Blocks
        && (over_soft || (limit != 0 && limit.saturating_sub(total) < QUOTA_SYNC_WRITE_BYTES))
}

/// The master's decision for one target: `limit` (the effective one, soft once its grace
/// is over; 0: none), `others` held by the other targets (each the larger of its grant and
/// its usage), the asking target's `usage` and `want`, `targets` sharing the resource.
pub fn decide(
    limit: u64,
    others: u64,
    usage: u64,
    want: u64,
    targets: usize,
    resource: Resource,
) -> Grant {
    let need = usage.saturating_add(want);
    if limit == 0 {
        return Grant {
            granted: need.saturating_add(qunit(resource, u64::MAX / 4, targets)),
            ok: true,
            retry: false,
            near: false,
        };
    }
    let avail = limit.saturating_sub(others);
    if need > avail {
        return Grant {
            granted: avail.max(usage),
            ok: false,
            retry: false,
            near: false,
        };
    }
    let room = limit.saturating_sub(others.saturating_add(usage));
    Grant {
        granted: need
            .saturating_add(qunit(resource, room, targets))
            .min(avail),
        ok: true,
        retry: false,
        near: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use nacre_types::QuotaKind;
    use proptest::prelude::*;

    #[test]
    fn grants_never_pass_the_limit_and_shrink_near_it() {
        let mib = 1u64 << 20;
        // Far from the limit: the largest unit.
        let g = decide(1000 * mib, 0, 0, mib, 2, Resource::Blocks);
        assert_eq!(
            g,
            Grant {
                granted: mib + BLOCK_QUNIT_MAX_BYTES,
                ok: true,
                retry: false,
                near: false
            }
        );
        // Near it: the unit shrinks to its minimum, and never past what is left.
        let g = decide(100 * mib, 90 * mib, 5 * mib, mib, 2, Resource::Blocks);
        assert!(g.ok);
        // Need 6 MiB; a quarter of the 5 MiB left (half of each of 2 targets' share) more.
        assert_eq!(g.granted, 6 * mib + 5 * mib / 4);
        let g = decide(100 * mib, 90 * mib, 9 * mib, mib, 2, Resource::Blocks);
        assert_eq!(
            g,
            Grant {
                granted: 10 * mib,
                ok: true,
                retry: false,
                near: false
            }
        );
        // Past it: refused; the target keeps what it uses.
        let g = decide(100 * mib, 90 * mib, 9 * mib, 2 * mib, 2, Resource::Blocks);
        assert_eq!(
            g,
            Grant {
                granted: 10 * mib,
                ok: false,
                retry: false,
                near: false
            }
        );
        // No limit: always.
        assert!(decide(0, u64::MAX, 5, 5, 1, Resource::Inodes).ok);
    }

    proptest! {
        #[test]
        fn a_grant_fits_the_limit_with_the_others(
            limit in 1u64..1 << 40, others in 0u64..1 << 40, usage in 0u64..1 << 40,
            want in 0u64..1 << 30, targets in 1usize..64, mdt in any::<bool>(),
        ) {
            let resource = if mdt { Resource::Inodes } else { Resource::Blocks };
            let g = decide(limit, others, usage, want, targets, resource);
            if g.ok {
                prop_assert!(g.granted.saturating_add(others) <= limit);
                prop_assert!(g.granted >= usage + want);
            } else {
                prop_assert!(usage + want > limit.saturating_sub(others));
            }
        }

        #[test]
        fn messages_round_trip_and_refuse_truncation(id in any::<u32>(), n in any::<u64>(), pooled in any::<bool>()) {
            let q = QuotaId { kind: QuotaKind::ALL[(id % 3) as usize], id };
            let key = QuotaKey { id: q, pool: if pooled { PoolName::new("flash").unwrap() } else { PoolName::NONE } };
            let limits = QuotaLimits { block_soft: n, block_hard: n / 2, inode_soft: 3, inode_hard: 4 };
            let reqs = vec![
                crate::mgs::MgsRequest::QuotaSet { fsname: "fs".into(), key, limits },
                crate::mgs::MgsRequest::QuotaGrace { fsname: "fs".into(), block_s: n, inode_s: 9 },
                crate::mgs::MgsRequest::QuotaGet { fsname: "fs".into(), ids: vec![q, q] },
                crate::mgs::MgsRequest::QuotaAcquire(Acquire {
                    fsname: "fs".into(), target: (TargetKind::Ost, id), resource: Resource::Blocks, key,
                    usage: n, granted: n / 3, want: 7,
                }),
                crate::mgs::MgsRequest::QuotaSync(SyncReport {
                    fsname: "fs".into(), target: (TargetKind::Mdt, 1), resource: if pooled { Resource::Blocks } else { Resource::Inodes }, ids: vec![(key, n, 1)],
                }),
            ];
            for r in reqs {
                let b = encode_body(&r);
                prop_assert_eq!(decode_body::<crate::mgs::MgsRequest>(&b).unwrap(), r);
                for k in 0..b.len() {
                    prop_assert!(decode_body::<crate::mgs::MgsRequest>(&b[..k]).is_err());
                }
            }
            let replies = vec![
                crate::mgs::MgsReply::QuotaGrant(Grant { granted: n, ok: id % 2 == 0, retry: id % 3 == 0, near: pooled }),
                crate::mgs::MgsReply::QuotaSynced(SyncAnswer { version: n, limited: vec![Limited { key, keep: n, near: !pooled }] }),
                crate::mgs::MgsReply::Quotas(QuotaView {
                    block_grace_s: n, inode_grace_s: 1, unsynced: id,
                    entries: vec![QuotaEntry {
                        key, limits, block_soft_since: n, inode_soft_since: 0,
                        block_granted: n, inode_granted: 2,
                    }],
                }),
            ];
            for r in replies {
                let b = encode_body(&r);
                prop_assert_eq!(decode_body::<crate::mgs::MgsReply>(&b).unwrap(), r);
                for k in 0..b.len() {
                    prop_assert!(decode_body::<crate::mgs::MgsReply>(&b[..k]).is_err());
                }
            }
        }
    }
}
