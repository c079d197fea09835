//! Inodes per user, group and project on this MDT (quotas, docs/quota.md): kept in the
//! `quota_usage` table (QuotaId key → count, big-endian), changed in the same transaction
//! as the inodes they count (creation, removal, a change of owner, group or project), so
//! they are exact across any crash. An MDT formatted before quotas counts its inodes at its
//! first start.
//!
//! The counting itself (the table's loading, `charge`, `count`) is the transaction's
//! (store/tx.rs), the check against the table the store's (`Store::quota_check`); this file
//! holds the quota checks of requests.

use nacre_types::{Owner, QuotaId, Status};

pub use nacre_mdstore::records::QUOTA_USAGE;

impl crate::mdt::Mdt {
    /// [`nacre_wire::mds::MdsOp::QuotaCheck`]: counts every inode again and compares with
    /// the table (and the counts in memory); with `repair`, the count replaces both,
    /// durably. Holds the MDT's write lock while it counts (changes wait: the count and
    /// the table are of the same moment).
    pub fn quota_check(&self, repair: bool) -> Result<nacre_wire::mds::MdsReply, Status> {
        let check = self.store().quota_check(repair)?;
        Ok(nacre_wire::mds::MdsReply::QuotaCheck(check))
    }

    /// [`nacre_wire::mds::MdsOp::QuotaUsage`]: the inodes of each of `ids` here.
    pub fn quota_usage(&self, ids: &[QuotaId]) -> Result<nacre_wire::mds::MdsReply, Status> {
        if ids.len() > nacre_wire::oss::QUOTA_IDS_MAX {
            return Err(Status::TooBig);
        }
        Ok(nacre_wire::mds::MdsReply::QuotaUsage(self.inodes_of(ids)))
    }
}

/// Before a request that makes an inode runs (outside the MDT's lock): its owner's, group's
/// and project's grants must cover one more inode here. `EINPROGRESS` (resent by the
/// client) while grant is asked for in the background, `EDQUOT` past a limit.
pub fn precheck(mdt: &crate::mdt::Mdt, op: &nacre_wire::mds::MdsOp) -> Result<(), Status> {
    use nacre_wire::mds::MdsOp;
    if !mdt.quota.any_limited() {
        return Ok(());
    }
    let (parent, uid, gid) = match op {
        MdsOp::Create {
            parent, uid, gid, ..
        }
        | MdsOp::Mkdir {
            parent, uid, gid, ..
        }
        | MdsOp::Symlink {
            parent, uid, gid, ..
        }
        | MdsOp::MkdirOn {
            parent, uid, gid, ..
        }
        | MdsOp::MkdirStriped {
            parent, uid, gid, ..
        } => (*parent, *uid, *gid),
        _ => return Ok(()),
    };
    let Ok(dir) = mdt.inode(parent) else {
        return Ok(());
    };
    let gid = if dir.attr.perm & libc::S_ISGID != 0 {
        dir.attr.gid
    } else {
        gid
    };
    let project = if dir.attr.proj_inherit {
        dir.attr.project
    } else {
        0
    };
    let ids = QuotaId::of_owner(Owner { uid, gid, project });
    let counts = mdt.inodes_of(&ids);
    mdt.quota.check_now(&ids, 1, |q| {
        ids.iter().position(|i| *i == q).map_or(0, |k| counts[k])
    })
}
