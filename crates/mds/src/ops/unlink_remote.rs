//! Unlink of an entry on this MDT naming an inode on another (the remote link count drops with it).

use crate::dne::{coordinate, saved_reply};
use crate::mdt::Mdt;
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsCall, MdsReply, RemoteUpdate};

/// Coordinator: `unlink` of `name` in `parent` (here), an entry of inode `fid` on another
/// MDT: the entry goes at once (with the intent), the inode's MDT drops the link after.
pub fn unlink_remote(
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
    coordinate(
        mdt,
        call,
        xid,
        "mds.unlink_remote.after_local_commit",
        |tx| {
            let mut dir = tx.dir(parent)?;
            match tx.lookup(parent, name)? {
                Some(d) if d.fid == fid => {}
                Some(_) => return Err(Status::Again),
                None => return Err(Status::NoEnt),
            }
            tx.del_dirent(parent, name);
            tx.touch(&mut dir);
            tx.put_inode(&dir);
            let intent = IntentRecord {
                key: tx.new_fid(),
                mdt: fid.mdt_index(),
                update: RemoteUpdate::DropLink {
                    fid,
                    parent,
                    name: name.to_vec(),
                },
                parent,
                name: name.to_vec(),
                reply_to: None,
                shards: Vec::new(),
                attr: None,
                migrate_to: None,
            };
            Ok((MdsReply::Done, vec![intent]))
        },
    )
}
