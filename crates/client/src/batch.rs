//! Creates with FIDs this client gives (issue 44 item 2; docs/plans/round-trips.md, R2):
//! ranges of FIDs granted by an MDT (`GrantFids`) and many files of one directory made in
//! one request (`CreateBatch`), kept for replay as any change until the MDT commits it.

use crate::{Client, ClientError, Result};
use nacre_ldlm::msg::{LockRef, ENTRY_BITS, UPDATE};
use nacre_types::{Attr, Fid, Layout, Status};
use nacre_wire::mds::{BatchCreate, BatchUnlink, MdsOp, MdsReply};
use std::collections::HashMap;

/// One file's outcome in a batch: its attributes and layout, or why it was not made.
pub type Created = std::result::Result<(Attr, Option<Layout>), Status>;

impl Client {
    /// Asks MDT `mdt` for `count` FIDs that only this client may give: the first and how
    /// many (fewer than asked where a sequence ends). A grant stays valid while this client
    /// is not evicted, among its newest four (`FID_GRANTS_PER_CLIENT_MAX`).
    pub fn grant_fids(&self, mdt: u32, count: u32) -> Result<(Fid, u32)> {
        match self.mdc(mdt)?.call(MdsOp::GrantFids { count })? {
            MdsReply::FidRange { first, count } => Ok((first, count)),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Makes `items` in directory `parent` in one request (at most
    /// `CREATE_BATCH_ITEMS_MAX`), each with the FID it names from this client's grants
    /// (`ESHUTDOWN` if this client was evicted: never sent again as the new client):
    /// one result per item, in order (`E2BIG` for the items the MDT left untried: their
    /// reply would not fit; send them again). The layouts are remembered, as a create's;
    /// on a mount that takes locks, each file made comes with its own (`LOOKUP | UPDATE |
    /// LAYOUT`, protocol 17), held here with the file's name, and an empty file's
    /// attributes are kept under it (crate::vouched).
    pub fn create_batch(&self, parent: Fid, items: Vec<BatchCreate>) -> Result<Vec<Created>> {
        let mdc = self.mdc(parent.mdt_index())?;
        self.create_batch_started(&mdc, parent, items, None)
    }

    /// [`Client::create_batch`] through `mdc` (`parent`'s), its change of the directory's
    /// names `started` by the caller if it says so (crate::dirattrs: a delegated batch's
    /// starts when its items are taken).
    pub(crate) fn create_batch_started(
        &self,
        mdc: &crate::mdc::Mdc,
        parent: Fid,
        items: Vec<BatchCreate>,
        started: Option<u64>,
    ) -> Result<Vec<Created>> {
        let n = items.len();
        let snap = mdc.vouched.snapshot();
        let names: Vec<(Fid, Vec<u8>)> = items.iter().map(|i| (i.fid, i.name.clone())).collect();
        let op = MdsOp::CreateBatch { parent, items };
        let (results, locks) = match mdc.call_batch(op, ENTRY_BITS, started)? {
            (MdsReply::Created(r), locks) if r.len() == n => (r, locks),
            _ => return Err(ClientError::from(Status::Proto)),
        };
        let mut locks: HashMap<Fid, LockRef> = locks.into_iter().map(|l| (l.fid, l)).collect();
        for ((fid, name), result) in names.iter().zip(&results) {
            let Ok((attr, layout)) = result else {
                continue;
            };
            if let Some(l) = layout {
                self.remember_layout(attr.fid, l, true);
            }
            // The file's own lock (taken before it was made: it covers these attributes),
            // as a create with intent's: its entry and attributes outlive the delegation.
            let Some(lock) = locks.remove(fid) else {
                continue;
            };
            if attr.fid != *fid || !mdc.locks.granted(lock) {
                continue;
            }
            mdc.locks.cover_name(*fid, parent, name);
            if let (true, Some(l)) = (lock.bits & UPDATE != 0, layout) {
                mdc.vouched.created(attr, l, lock.handle, snap);
            }
        }
        Ok(results)
    }

    /// Removes `items` from directory `parent` in one request (at most
    /// `UNLINK_BATCH_ITEMS_MAX`), each name only if it still leads to the FID it names: one
    /// result per item, in order (`ESHUTDOWN` if this client was evicted: never sent again
    /// as the new client, whose view of the names is not the old one's).
    pub fn unlink_batch(
        &self,
        parent: Fid,
        items: Vec<BatchUnlink>,
    ) -> Result<Vec<std::result::Result<(), Status>>> {
        let mdc = self.mdc(parent.mdt_index())?;
        Self::unlink_batch_started(&mdc, parent, items, None)
    }

    /// [`Client::unlink_batch`] through `mdc` (`parent`'s), its change of the directory's
    /// names `started` by the caller if it says so.
    pub(crate) fn unlink_batch_started(
        mdc: &crate::mdc::Mdc,
        parent: Fid,
        items: Vec<BatchUnlink>,
        started: Option<u64>,
    ) -> Result<Vec<std::result::Result<(), Status>>> {
        let n = items.len();
        let op = MdsOp::UnlinkBatch { parent, items };
        match mdc.call_unrenewed(op, started)? {
            MdsReply::Unlinked(r) if r.len() == n => Ok(r),
            _ => Err(ClientError::from(Status::Proto)),
        }
    }
}
