//! A hard link whose entry is on this MDT and whose inode is on another.

use crate::dne::{resume_request, run_intent, saved_reply};
use crate::mdt::Mdt;
use crate::peers::peer_call;
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};

/// Coordinator: `link` of inode `fid` (on another MDT) as `name` in `parent` (here). The
/// inode's MDT counts the link first (its checks decide); the entry is added after, or the
/// link is taken back if the name was taken meanwhile.
pub fn link_remote(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    fid: Fid,
    parent: Fid,
    name: &[u8],
) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    if let Some(out) = resume_request(mdt, call, xid) {
        return out;
    }
    let attr = match peer_call(mdt, fid.mdt_index(), MdsOp::GetAttr { fid }) {
        Ok(MdsReply::Entry { attr, .. }) => attr,
        Ok(_) => return Outgoing::error(Status::Proto),
        Err(s) => return Outgoing::error(s),
    };
    if attr.kind == FileKind::Directory {
        return Outgoing::error(Status::Perm);
    }
    let mut tx = mdt.begin();
    let checked = crate::mdt::check_name(name)
        .and_then(|()| tx.dir(parent))
        .and_then(|dir| super::project_admits(&dir.attr, &attr))
        .and_then(|()| match tx.lookup(parent, name)? {
            Some(_) => Err(Status::Exist),
            None => Ok(()),
        });
    if let Err(s) = checked {
        return Outgoing::error(s);
    }
    let key = tx.new_fid();
    let intent = IntentRecord {
        key,
        mdt: fid.mdt_index(),
        update: RemoteUpdate::AddLink {
            fid,
            parent,
            name: name.to_vec(),
        },
        parent,
        name: name.to_vec(),
        reply_to: Some((call.client, xid)),
        shards: Vec::new(),
        attr: Some(attr),
        migrate_to: None,
    };
    run_intent(mdt, call, xid, tx, intent, "mds.link_remote.after_intent")
}
