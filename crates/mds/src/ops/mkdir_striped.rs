//! `mkdir -c N`: a striped directory, its entries spread over shards on several MDTs by name hash.

use crate::dne::{coordinate, saved_reply};
use crate::mdt::Mdt;
use crate::ops::mkdir_remote::{alloc_on, choose_mdt, mkdir_local, NewDir};
use crate::peers::mdt_list;
use nacre_mdstore::records::IntentRecord;
use nacre_net::Outgoing;
use nacre_types::Status;
use nacre_wire::mds::{MdsCall, RemoteUpdate};

/// Coordinator: `mkdir -c count` — a master directory on MDT `start` and `count` shards on
/// the MDTs from `start` on, every inode created through an intent (this MDT's too).
pub fn mkdir_striped(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    dir: NewDir<'_>,
    count: u32,
    start: u32,
    hash: nacre_types::dirstripe::DirHash,
) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    // u32::MAX: every MDT (a default of `-c -1`).
    let indexes = mdt_list(mdt, if count == u32::MAX { 2 } else { count as usize });
    let count = if count == u32::MAX {
        indexes.len()
    } else {
        count as usize
    };
    if count == 0 || count > indexes.len() || count > nacre_types::dirstripe::DIR_STRIPE_COUNT_MAX {
        return Outgoing::error(Status::Inval);
    }
    let start = if start == nacre_wire::mds::MDT_INDEX_ANY {
        match choose_mdt(mdt) {
            Ok(s) => s,
            Err(s) => return Outgoing::error(s),
        }
    } else {
        start
    };
    let Some(first) = indexes.iter().position(|&i| i == start) else {
        return Outgoing::error(Status::NoDev);
    };
    let targets: Vec<u32> = (0..count)
        .map(|k| indexes[(first + k) % indexes.len()])
        .collect();
    let master = match alloc_on(mdt, start) {
        Ok(f) => f,
        Err(s) => return Outgoing::error(s),
    };
    let mut shards = Vec::with_capacity(count);
    for &t in &targets {
        match alloc_on(mdt, t) {
            Ok(f) => shards.push(f),
            Err(s) => return Outgoing::error(s),
        }
    }
    let stripe = nacre_types::dirstripe::DirStripe { hash, shards };
    coordinate(
        mdt,
        call,
        xid,
        "mds.mkdir_striped.after_local_commit",
        |tx| {
            let (reply, master_intent) =
                mkdir_local(tx, &dir, master, start, Some(stripe.clone()))?;
            let RemoteUpdate::CreateDir {
                attr, dir_default, ..
            } = &master_intent.update
            else {
                unreachable!("mkdir_local makes a CreateDir");
            };
            let mut intents = Vec::with_capacity(count + 1);
            for (k, &shard) in stripe.shards.iter().enumerate() {
                let mut shard_attr = attr.clone();
                shard_attr.fid = shard;
                shard_attr.nlink = 2;
                intents.push(IntentRecord {
                    key: shard,
                    mdt: targets[k],
                    update: RemoteUpdate::CreateDir {
                        attr: shard_attr,
                        parent: master,
                        dir_default: dir_default.clone(),
                        stripe: None,
                        default: dir.inherit,
                    },
                    parent: dir.parent,
                    name: dir.name.to_vec(),
                    reply_to: None,
                    shards: Vec::new(),
                    attr: None,
                    migrate_to: None,
                });
            }
            // The master last: a master is never there without its shards.
            intents.push(master_intent);
            Ok((reply, intents))
        },
    )
}
