//! Creates with FIDs this client gives (issue 44 item 2; docs/plans/round-trips.md, R2):
//! ranges of FIDs granted by an MDT (`GrantFids`) and many files of one directory made in
//! one request (`CreateBatch`), kept for replay as any change until the MDT commits it.

use crate::{Client, ClientError, Result};
use nacre_types::{Attr, Fid, Layout, Status};
use nacre_wire::mds::{BatchCreate, BatchUnlink, MdsOp, MdsReply};

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
    /// reply would not fit; send them again). The layouts are remembered, as a create's.
    pub fn create_batch(&self, parent: Fid, items: Vec<BatchCreate>) -> Result<Vec<Created>> {
        let n = items.len();
        let op = MdsOp::CreateBatch { parent, items };
        let results = match self.mdc(parent.mdt_index())?.call_unrenewed(op)? {
            MdsReply::Created(r) if r.len() == n => r,
            _ => return Err(ClientError::from(Status::Proto)),
        };
        for (attr, layout) in results.iter().flatten() {
            if let Some(l) = layout {
                self.remember_layout(attr.fid, l, true);
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
        let n = items.len();
        let op = MdsOp::UnlinkBatch { parent, items };
        match self.mdc(parent.mdt_index())?.call_unrenewed(op)? {
            MdsReply::Unlinked(r) if r.len() == n => Ok(r),
            _ => Err(ClientError::from(Status::Proto)),
        }
    }
}
