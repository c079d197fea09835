//! The MDT's side of recovery (replay.rs): what a recovery window asks of it, and the
//! checks a replayed create or layout passes before it runs again.

use crate::mdt::Mdt;
use crate::replay::{RecoveryHost, REPLAY_AHEAD_MAX};
use nacre_mdstore::store::tx::ReplayHint;
use nacre_types::Status;
use nacre_wire::mds::MdsOp;
use std::collections::HashSet;

impl RecoveryHost for Mdt {
    fn name(&self) -> String {
        self.label.name()
    }

    fn evict(&self, client: &[u8; 16]) {
        self.exports.refuse(client);
        self.forget_client(client);
    }

    fn sync_now(&self) {
        Mdt::sync_now(self);
    }
}

/// The inode a replayed create (`op`) is to make again, or the layout a replayed change
/// gives a file, checked: they come from the client's copy of the MDT's reply, so a client
/// could name any. A create made here names a FID of this MDT's sequences within what it
/// could have handed out ([`REPLAY_AHEAD_MAX`]) and of no inode that exists; a layout (of
/// any replayed op) is well formed, names this MDT's objects, none twice, each among those
/// whose creation could have been lost with the restart: at most
/// [`crate::mdt::ALLOC_RESERVE`] below what this MDT had reserved durably for that OST, and
/// at most [`REPLAY_AHEAD_MAX`] past it (an object below was given to a create that is
/// durable: another file's). `None`: the op makes no inode here (the hint is not used).
pub fn check_created(
    mdt: &Mdt,
    op: &MdsOp,
    hint: Option<ReplayHint>,
) -> Result<Option<ReplayHint>, Status> {
    let here = mdt.label.index;
    let creates_here = match op {
        MdsOp::Create { .. } | MdsOp::Mkdir { .. } | MdsOp::Symlink { .. } => true,
        MdsOp::MkdirOn { mdt: target, .. } => *target == here,
        _ => false,
    };
    let Some((fid, layout)) = hint else {
        return Ok(None);
    };
    match (&layout, op) {
        // Only the components the intent instantiated are new: `ops::layout::intent`
        // checks those (`check_objects`); the others are the file's as it is.
        (_, MdsOp::LayoutIntent { .. }) => {}
        (Some(l), _) => check_layout(mdt, l)?,
        (None, _) => {}
    }
    if !creates_here {
        return Ok(Some((fid, layout)));
    }
    let n = nacre_mdstore::store::tx::fid_number(here, fid).ok_or(Status::Inval)?;
    if n >= mdt
        .store()
        .fid_limit_at_start()
        .saturating_add(REPLAY_AHEAD_MAX)
    {
        return Err(Status::Inval);
    }
    match mdt.inode(fid) {
        Err(Status::NoEnt) => {}
        Ok(_) | Err(Status::Stale) => return Err(Status::Exist),
        Err(e) => return Err(e),
    }
    Ok(Some((fid, layout)))
}

/// The files a replayed `CreateBatch` (`op`) made the first time, as its saved `reply`
/// says, checked as [`check_created`] checks a create's: each layout well formed and of
/// objects this MDT could have handed out, each FID the item's own (that it is one of the
/// client's grants, unused, is checked when the batch runs again). Empty for any other op.
pub fn check_batch(
    mdt: &Mdt,
    op: &MdsOp,
    reply: &nacre_wire::mds::MdsReply,
) -> Result<Vec<ReplayHint>, Status> {
    let (MdsOp::CreateBatch { items, .. }, nacre_wire::mds::MdsReply::Created(results)) =
        (op, reply)
    else {
        return Ok(Vec::new());
    };
    if results.len() != items.len() {
        return Err(Status::Inval);
    }
    let mut out = Vec::new();
    let mut objects = Vec::new();
    for (item, r) in items.iter().zip(results) {
        let Ok((attr, layout)) = r else { continue };
        if attr.fid != item.fid {
            return Err(Status::Inval);
        }
        if let Some(l) = layout {
            l.check().map_err(|_| Status::Inval)?;
            objects.extend(l.objects().copied());
        }
        out.push((item.fid, layout.clone()));
    }
    // No object twice across the batch either.
    check_objects(mdt, &objects)?;
    Ok(out)
}

/// A replayed layout's checks ([`check_created`]).
fn check_layout(mdt: &Mdt, l: &nacre_types::Layout) -> Result<(), Status> {
    l.check().map_err(|_| Status::Inval)?;
    let objects: Vec<_> = l.objects().copied().collect();
    check_objects(mdt, &objects)
}

/// Objects a replayed change gives a file, checked as [`check_created`] says: this MDT's,
/// none twice, each among those whose allocation could have been lost with the restart.
pub fn check_objects(mdt: &Mdt, objects: &[nacre_types::StripeObject]) -> Result<(), Status> {
    let here = u64::from(mdt.label.index);
    let mut seen = HashSet::new();
    for o in objects {
        if o.object.seq != here || o.object.id == 0 || !seen.insert((o.ost, o.object)) {
            return Err(Status::Inval);
        }
        let reserved = mdt.store().ost_next_at_start(o.ost).unwrap_or(1);
        let lowest = reserved.saturating_sub(crate::mdt::ALLOC_RESERVE);
        if o.object.id < lowest || o.object.id >= reserved.saturating_add(REPLAY_AHEAD_MAX) {
            return Err(Status::Inval);
        }
    }
    Ok(())
}
