//! rmdir of a remote directory: the intent commits first, the local entry goes once the remote MDT
//! destroyed the directory.

use crate::dne::{resume_own, saved_reply, start_removal};
use crate::mdt::Mdt;
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::Fid;
use nacre_wire::mds::{MdsCall, RemoteUpdate};

/// Coordinator: `rmdir` of `name` in `parent` (here), an entry for directory `fid` on MDT
/// `target`. The intent commits first; the entry goes only once the remote MDT destroyed
/// the (empty) directory.
pub fn rmdir_remote(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    parent: Fid,
    name: &[u8],
    fid: Fid,
) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    if let Some(out) = resume_own(mdt, call, xid, fid) {
        return out;
    }
    let intent = IntentRecord {
        key: fid,
        mdt: fid.mdt_index(),
        update: RemoteUpdate::DestroyDir { fid },
        parent,
        name: name.to_vec(),
        reply_to: Some((call.client, xid)),
        shards: Vec::new(),
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
        "mds.rmdir_remote.after_intent",
    )
}
