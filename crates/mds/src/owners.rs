//! Ownership changes reach the OST objects: a chown or chgrp of a regular file records, in the
//! same transaction, the new owner for each of its objects ([`nacre_mdstore::records::OWNERS`]); the
//! MDT's background thread sends them to the OSTs (`SetOwner`, batched per OST and owner)
//! and forgets each record once its OST has it — unless a newer change replaced it
//! meanwhile. A crash or an unreachable OST only delays the change; the records are the
//! queue. Objects a write creates take the owner the writer knows; these records are what
//! makes a later chown stick. (The transaction writes and drops the records:
//! `Tx::queue_owner_change`, store/tx.rs.)

use crate::mdt::Mdt;
use nacre_mdstore::records::parse_destroy_key;
use nacre_net::rpc::call;
use nacre_types::{ObjectId, Owner, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest, SET_OWNER_OBJECTS_MAX};
use std::collections::BTreeMap;

/// Records read per pass.
pub const OWNER_PASS_RECORDS_MAX: usize = 4096;

/// One pass: sends pending ownership changes; returns the number of objects done.
pub fn sync_pending(mdt: &Mdt) -> Result<usize, Status> {
    let seen = mdt.store().owners_pending();
    if seen == 0 {
        return Ok(0);
    }
    let page = mdt.store().owner_changes(OWNER_PASS_RECORDS_MAX)?;
    if page.is_empty() {
        // Unless a change was queued meanwhile, there is nothing left to look for.
        mdt.store().owners_settled(seen);
        return Ok(0);
    }
    let mut groups: BTreeMap<(u32, Owner), Vec<ObjectId>> = BTreeMap::new();
    for (k, v) in &page {
        match (parse_destroy_key(k), Owner::from_bytes(v)) {
            (Some((ost, object)), Some(owner)) => {
                groups.entry((ost, owner)).or_default().push(object)
            }
            _ => {
                tracing::warn!("{}: bad ownership record dropped", mdt.label.name());
                let mut w = mdt.store().writes();
                w.forget_owner_key(k.clone());
                w.commit()?;
            }
        }
    }
    let mut done = 0;
    for ((ost, owner), objects) in groups {
        let Some(conn) = mdt.osts.conn(ost) else {
            continue;
        };
        for chunk in objects.chunks(SET_OWNER_OBJECTS_MAX) {
            let req = OssRequest::SetOwner {
                objects: chunk.to_vec(),
                owner,
            };
            match call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::server(req)) {
                Ok(_) => {}
                Err(e) if e.status() == Status::NotSupp => {
                    tracing::warn!(
                        "{}: OST{ost:04x} cannot record object owners: {e}",
                        mdt.label.name()
                    );
                }
                Err(e) => {
                    tracing::debug!("ownership change on OST{ost:04x} deferred: {e}");
                    continue;
                }
            }
            // Forget what was sent, under the write lock, unless a newer change replaced it.
            let _order = mdt.begin();
            let mut w = mdt.store().writes();
            for o in chunk {
                let now = mdt.store().owner_change(ost, *o)?;
                if now.as_deref() == Some(&owner.to_bytes()[..]) {
                    w.forget_owner_change(ost, *o);
                }
            }
            w.commit()?;
            done += chunk.len();
        }
    }
    Ok(done)
}
