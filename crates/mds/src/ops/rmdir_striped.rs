//! rmdir of a striped directory: every shard must be empty; shards go, then the master
//! (those steps: `dne::remove_striped`).

use crate::dne::{resume_own, saved_reply, start_removal};
use crate::mdt::Mdt;
use crate::peers::peer_call;
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};

/// Coordinator: `rmdir` of `name` in `parent` (here), the entry of striped directory
/// `master`. Every shard must be empty; the intent commits first, then the shards are
/// destroyed, then the master, then the entry goes. A shard found not empty at that point
/// (a create raced in) puts every shard back as it was and answers `ENOTEMPTY`.
pub fn rmdir_striped(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    parent: Fid,
    name: &[u8],
    master: Fid,
    stripe: nacre_types::dirstripe::DirStripe,
) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    if let Some(out) = resume_own(mdt, call, xid, master) {
        return out;
    }
    // Check every shard (and learn what to put back) before changing anything.
    let mut shards = Vec::with_capacity(stripe.shards.len());
    for &shard in &stripe.shards {
        let at = shard.mdt_index();
        let listing = MdsOp::ReadDir {
            fid: shard,
            after: None,
            count: 1,
        };
        match peer_call(mdt, at, listing) {
            Ok(MdsReply::Dir { entries, .. }) if entries.is_empty() => {}
            Ok(MdsReply::Dir { .. }) => return Outgoing::error(Status::NotEmpty),
            Ok(_) => return Outgoing::error(Status::Proto),
            Err(s) => return Outgoing::error(s),
        }
        let attr = match peer_call(mdt, at, MdsOp::GetAttr { fid: shard }) {
            Ok(MdsReply::Entry { attr, .. }) => attr,
            Ok(_) => return Outgoing::error(Status::Proto),
            Err(s) => return Outgoing::error(s),
        };
        let dir_default = match peer_call(mdt, at, MdsOp::GetLayout { fid: shard }) {
            Ok(MdsReply::Layout(nacre_wire::mds::LayoutInfo::Dir(d))) => d,
            Ok(_) => return Outgoing::error(Status::Proto),
            Err(s) => return Outgoing::error(s),
        };
        let default = match peer_call(mdt, at, MdsOp::GetDirDefault { fid: shard }) {
            Ok(MdsReply::DirDefault(d)) => d,
            Ok(_) => return Outgoing::error(Status::Proto),
            Err(s) => return Outgoing::error(s),
        };
        shards.push((at, attr, dir_default, default));
    }
    let intent = IntentRecord {
        key: master,
        mdt: master.mdt_index(),
        update: RemoteUpdate::DestroyDir { fid: master },
        parent,
        name: name.to_vec(),
        reply_to: Some((call.client, xid)),
        shards,
        attr: None,
        migrate_to: None,
    };
    start_removal(
        mdt,
        call,
        xid,
        parent,
        name,
        intent,
        "mds.rmdir_striped.after_intent",
    )
}
