//! Inodes per user, group and project on this MDT (quotas, docs/quota.md; their bytes of
//! data on the MDT are counted alike, nacre_mdstore's store/dom_quota.rs): kept in the
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
    /// [`nacre_wire::mds::MdsOp::QuotaCheck`]: counts every inode (and every file's bytes
    /// on the MDT) again and compares with
    /// the table (and the counts in memory); with `repair`, the count replaces both,
    /// durably. Holds the MDT's write lock while it counts (changes wait: the count and
    /// the table are of the same moment).
    pub fn quota_check(&self, repair: bool) -> Result<nacre_wire::mds::MdsReply, Status> {
        let inodes = self.store().quota_check(repair)?;
        let dom_bytes = self.store().dom_quota_check(repair)?;
        Ok(nacre_wire::mds::MdsReply::QuotaCheck { inodes, dom_bytes })
    }

    /// [`nacre_wire::mds::MdsOp::QuotaUsage`]: the inodes and bytes of data on the MDT of
    /// each of `ids` here.
    pub fn quota_usage(&self, ids: &[QuotaId]) -> Result<nacre_wire::mds::MdsReply, Status> {
        if ids.len() > nacre_wire::oss::QUOTA_IDS_MAX {
            return Err(Status::TooBig);
        }
        Ok(nacre_wire::mds::MdsReply::QuotaUsage {
            inodes: self.inodes_of(ids),
            dom_bytes: self.store().dom_bytes_of(ids),
        })
    }
}

/// Before a request that makes an inode runs (outside the MDT's lock): its owner's, group's
/// and project's grants must cover one more inode here. `EINPROGRESS` (resent by the
/// client) while grant is asked for in the background, `EDQUOT` past a limit.
pub fn precheck(mdt: &crate::mdt::Mdt, call: &nacre_wire::mds::MdsCall) -> Result<(), Status> {
    use nacre_wire::mds::MdsOp;
    if !mdt.quota.any_limited() {
        return Ok(());
    }
    let op = &call.op;
    if let MdsOp::CreateBatch { parent, items } = op {
        // Answered already by the delegation's holder: counted, never refused
        // (crate::delegations).
        if crate::ops::batch::delegation_held(mdt, &call.client, *parent) {
            return Ok(());
        }
        // Each owner's files of the batch at once (a client batches one user's creates).
        let mut owners: Vec<((u32, u32), u64)> = Vec::new();
        for i in items {
            match owners.iter_mut().find(|(o, _)| *o == (i.uid, i.gid)) {
                Some((_, n)) => *n += 1,
                None => owners.push(((i.uid, i.gid), 1)),
            }
        }
        return owners
            .into_iter()
            .try_for_each(|((uid, gid), n)| precheck_one(mdt, *parent, uid, gid, n));
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
    precheck_one(mdt, parent, uid, gid, 1)
}

/// [`precheck`] of `n` new inodes of `uid` and `gid` in directory `parent`.
fn precheck_one(
    mdt: &crate::mdt::Mdt,
    parent: nacre_types::Fid,
    uid: u32,
    gid: u32,
    n: u64,
) -> Result<(), Status> {
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
    mdt.quota.check_now(&ids, n, |q| {
        ids.iter().position(|i| *i == q).map_or(0, |k| counts[k])
    })
}

/// Grant of block quota held for a change of bytes on the MDT while it runs (released when
/// dropped, once the change is made and counted, or failed).
pub struct DomReservation {
    slave: std::sync::Arc<nacre_quota::Slave>,
    held: Option<nacre_quota::Reservation>,
}

impl Drop for DomReservation {
    fn drop(&mut self) {
        if let Some(r) = self.held.take() {
            self.slave.release(r);
        }
    }
}

/// Before a request that may grow a file's bytes on the MDT runs (outside the MDT's lock,
/// as an OST reserves before it writes): the growth it may make (a write's or append's
/// blocks past those stored, a truncate's zero-extension) is reserved within the block
/// grants of the file's owner, group and project, asking the master for more where needed
/// (blocking). `EDQUOT` past a limit. A write over blocks already stored reserves nothing.
pub fn reserve_dom(
    mdt: &crate::mdt::Mdt,
    op: &nacre_wire::mds::MdsOp,
) -> Result<Option<DomReservation>, Status> {
    use nacre_mdstore::records::dom_charged_bytes;
    use nacre_wire::mds::MdsOp;
    if !mdt.dom_quota.any_limited() {
        return Ok(None);
    }
    let fid = match op {
        MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => *fid,
        MdsOp::SetAttr { fid, attr } if attr.size.is_some() => *fid,
        _ => return Ok(None),
    };
    // Errors are the request's to report when it runs.
    let Ok(rec) = mdt.inode(fid) else {
        return Ok(None);
    };
    let dom_end = rec.layout.as_ref().map_or(0, |l| l.dom_end());
    if dom_end == 0 {
        return Ok(None);
    }
    let stored = mdt.store().dom(fid)?.len() as u64;
    let end = match op {
        MdsOp::DomWrite { offset, data, .. } => offset.saturating_add(data.len() as u64),
        MdsOp::DomAppend { data, .. } => rec.attr.size.saturating_add(data.len() as u64),
        MdsOp::SetAttr { attr, .. } => attr.size.unwrap_or(0),
        _ => 0,
    }
    .min(dom_end);
    let grow = dom_charged_bytes(end.max(stored) as usize)
        .saturating_sub(dom_charged_bytes(stored as usize));
    if grow == 0 {
        return Ok(None);
    }
    let ids = QuotaId::of_attr(&rec.attr);
    let slave = mdt.dom_quota.clone();
    let held = slave.reserve(&ids, grow, |q| mdt.store().dom_bytes_of(&[q])[0])?;
    Ok(Some(DomReservation {
        slave,
        held: Some(held),
    }))
}
