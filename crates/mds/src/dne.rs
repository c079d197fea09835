//! Cross-MDT operations (docs/dne.md): remote directories.
//!
//! The MDT holding the entry coordinates. Its own changes and an *intent* naming the remote
//! MDT's part commit in one durable batch (for a removal, the intent commits first and the
//! local changes after the remote part succeeded); then the remote MDT applies its part,
//! idempotently and durably; then the intent goes. Intents left by a crash are finished by
//! [`recover_pass`], which the server runs at start and every second after, so an operation
//! ends fully done or (for a refused removal) fully undone.

use crate::mdt::{kv_err, Mdt, Tx};
use crate::records::{encode, InodeRecord, IntentRecord, SavedReply, INTENTS};
use nacre_net::fault;
use nacre_net::rpc::{call, RpcError};
use nacre_net::Outgoing;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::encode_body;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::time::{Duration, Instant};

/// How long a client request waits for an unreachable remote MDT before the coordinator
/// answers `EAGAIN` and leaves the operation to recovery.
pub const PEER_WAIT_MS_MAX: u64 = 60_000;
/// Pause between attempts to reach a remote MDT.
const PEER_RETRY_MS: u64 = 500;

/// Sends `op` to MDT `index` as a peer MDT.
fn peer_call(mdt: &Mdt, index: u32, op: MdsOp) -> Result<MdsReply, Status> {
    let conn = mdt.osts.mdt(index)?;
    let c = MdsCall {
        client: mdt.peer_uuid,
        replied_below: 0,
        jobid: format!("{}-peer", mdt.label.name()),
        op,
    };
    match call::<_, MdsReply>(&conn, c.op.opcode(), index, &c) {
        Ok(r) => Ok(r),
        Err(RpcError::Status(s)) => Err(s),
        Err(e) => {
            tracing::warn!("{}: MDT{index:04x} unreachable: {e}", mdt.label.name());
            Err(Status::Again)
        }
    }
}

/// Commits a transaction and waits until it is durable.
fn commit_durable(mdt: &Mdt, mut tx: Tx<'_>) -> Result<(), Status> {
    let batch = std::mem::take(&mut tx.batch);
    if batch.is_empty() {
        return Ok(());
    }
    let ticket = mdt.kv.commit(batch).map_err(kv_err)?;
    drop(tx);
    crate::mdt::note_modification(mdt);
    mdt.kv.wait_durable(ticket).map_err(kv_err)
}

fn saved(result: &Result<MdsReply, Status>) -> SavedReply {
    SavedReply {
        status: result.as_ref().err().map_or(0, |s| s.code()),
        body: result.as_ref().map(encode_body).unwrap_or_default(),
    }
}

fn outgoing(s: SavedReply) -> Outgoing {
    Outgoing {
        status: Status::from_code(s.status),
        body: s.body,
        bulk: None,
    }
}

/// Participant: reserves one of this MDT's FIDs for an inode a peer will ask it to create,
/// refusing when it has no room for one more inode.
pub fn alloc_fid(mdt: &Mdt) -> Result<MdsReply, Status> {
    if mdt.statfs()?.files_free == 0 {
        return Err(Status::NoSpc);
    }
    let mut tx = mdt.begin();
    let fid = tx.new_fid();
    commit_durable(mdt, tx)?;
    Ok(MdsReply::Fid(fid))
}

/// Participant: applies a peer's update, idempotently, durable before the reply.
pub fn apply(mdt: &Mdt, update: &RemoteUpdate) -> Result<MdsReply, Status> {
    let mut tx = mdt.begin();
    match update {
        RemoteUpdate::CreateDir {
            attr,
            parent,
            dir_default,
        } => {
            if attr.fid.mdt_index() != mdt.label.index || attr.kind != FileKind::Directory {
                return Err(Status::Inval);
            }
            if tx.inode(attr.fid).is_ok() {
                return Ok(MdsReply::Done);
            }
            tx.put_inode(&InodeRecord {
                attr: attr.clone(),
                layout: None,
                dir_default: *dir_default,
                symlink: None,
                parent: Some(*parent),
                orphan: false,
            });
            tx.count_inodes(1)?;
        }
        RemoteUpdate::DestroyDir { fid } => {
            let rec = match tx.inode(*fid) {
                Err(Status::NoEnt) => return Ok(MdsReply::Done),
                r => r?,
            };
            if rec.attr.kind != FileKind::Directory {
                return Err(Status::NotDir);
            }
            if !crate::ops::rmdir::is_empty(&tx, *fid)? {
                return Err(Status::NotEmpty);
            }
            tx.remove_inode(&rec)?;
        }
    }
    commit_durable(mdt, tx)?;
    fault::point(match update {
        RemoteUpdate::CreateDir { .. } => "mds.update_create_dir.after_commit_before_reply",
        RemoteUpdate::DestroyDir { .. } => "mds.update_destroy_dir.after_commit_before_reply",
    });
    Ok(MdsReply::Done)
}

/// How `mkdir -i -1` places a new directory (`mdt.*.mkdir_placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// By free inodes, as Lustre's mkdir QoS: round-robin while the MDTs' free inodes differ
    /// by under 17% of the most, else drawn at random weighted by free inodes.
    Space,
    /// Round-robin over the MDTs.
    RoundRobin,
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Placement, String> {
        match s.trim() {
            "space" => Ok(Placement::Space),
            "round_robin" | "round-robin" => Ok(Placement::RoundRobin),
            other => Err(format!(
                "mkdir_placement '{other}': use space or round_robin"
            )),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::Space => "space",
            Placement::RoundRobin => "round_robin",
        })
    }
}

/// Picks the MDT for a new directory of `mkdir -i -1`: free inodes are asked of every MDT
/// at each placement (one small RPC each; no cache yet).
pub fn choose_mdt(mdt: &Mdt) -> Result<u32, Status> {
    let mut indexes = mdt.osts.mdt_indexes();
    if indexes.is_empty() {
        if let Err(e) = mdt.osts.refresh() {
            tracing::debug!("MDT refresh: {e}");
        }
        indexes = mdt.osts.mdt_indexes();
    }
    if !indexes.contains(&mdt.label.index) {
        indexes.push(mdt.label.index);
        indexes.sort_unstable();
    }
    let rr = || {
        let n = mdt
            .mkdir_rr
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        indexes[n % indexes.len()]
    };
    if mdt.mkdir_placement() == Placement::RoundRobin {
        return Ok(rr());
    }
    let mut free = Vec::with_capacity(indexes.len());
    for &i in &indexes {
        let st = if i == mdt.label.index {
            mdt.statfs()?
        } else {
            match peer_call(mdt, i, MdsOp::StatFs) {
                Ok(MdsReply::StatFs(s)) => s,
                // An MDT that does not answer takes no new directories.
                _ => nacre_types::StatFs::default(),
            }
        };
        free.push(st.files_free);
    }
    let max = *free.iter().max().expect("at least this MDT");
    let min = *free.iter().min().expect("at least this MDT");
    if max == 0 {
        return Err(Status::NoSpc);
    }
    if (max - min) * 100 <= max * crate::osp::QOS_THRESHOLD_PERCENT {
        return Ok(rr());
    }
    Ok(crate::osp::weighted_pick(&indexes, &free, 1)[0])
}

/// Coordinator: `mkdir` of `name` in `parent` (here) with its inode on MDT `target`.
#[allow(clippy::too_many_arguments)]
pub fn mkdir_remote(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    parent: Fid,
    name: &[u8],
    perm: u32,
    uid: u32,
    gid: u32,
    target: u32,
) -> Outgoing {
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
        return out;
    }
    let fid = match peer_call(mdt, target, MdsOp::AllocFid) {
        Ok(MdsReply::Fid(f)) if f.mdt_index() == target => f,
        Ok(_) => return Outgoing::error(Status::Proto),
        Err(s) => return Outgoing::error(s),
    };
    let mut tx = mdt.begin();
    let result =
        mkdir_local(&mut tx, parent, name, perm, uid, gid, fid, target).map(|(r, mut intent)| {
            intent.reply_to = Some((call.client, xid));
            tx.batch
                .put(INTENTS, fid.to_key().to_vec(), encode(&intent));
            (r, intent)
        });
    if result.is_err() {
        tx.batch = nacre_kv::Batch::new();
    }
    let reply = saved(&result.as_ref().map(|(r, _)| r.clone()).map_err(|s| *s));
    tx.save_reply(&call.client, xid, call.replied_below, &reply);
    if let Err(s) = commit_durable(mdt, tx) {
        return Outgoing::error(s);
    }
    if let Ok((_, intent)) = result {
        mdt.intents.lock().expect("intents").insert(fid, intent);
        fault::point("mds.mkdir_remote.after_local_commit");
        // The entry is durable: the directory will exist. Answer once it does, or once the
        // wait is over (recovery then finishes it).
        if let Err(s) = finish(mdt, fid, Duration::from_millis(PEER_WAIT_MS_MAX)) {
            tracing::warn!("{}: remote mkdir {fid} pending: {s}", mdt.label.name());
        }
    }
    outgoing(reply)
}

#[allow(clippy::too_many_arguments)]
fn mkdir_local(
    tx: &mut Tx<'_>,
    parent_fid: Fid,
    name: &[u8],
    perm: u32,
    uid: u32,
    gid: u32,
    fid: Fid,
    target: u32,
) -> Result<(MdsReply, IntentRecord), Status> {
    let mut parent = crate::ops::mkdir::check_new(tx, parent_fid, name)?;
    let rec =
        crate::ops::create::inode_with_fid(tx, &parent, FileKind::Directory, perm, uid, gid, fid);
    parent.attr.nlink += 1;
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_dirent(parent_fid, name, fid, FileKind::Directory);
    // Files in the new directory get the striping they would get here.
    let effective =
        crate::mdt::merge_spec(parent.dir_default.unwrap_or_default(), tx.fs_default()?);
    let intent = IntentRecord {
        mdt: target,
        update: RemoteUpdate::CreateDir {
            attr: rec.attr.clone(),
            parent: parent_fid,
            dir_default: (effective != Default::default()).then_some(effective),
        },
        parent: parent_fid,
        name: name.to_vec(),
        reply_to: None,
    };
    Ok((
        MdsReply::Entry {
            attr: rec.attr,
            layout: None,
        },
        intent,
    ))
}

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
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
        return out;
    }
    let mut tx = mdt.begin();
    // Re-check under the write lock: the entry may have changed since the caller looked.
    match tx.lookup(parent, name) {
        Ok(Some(d)) if d.fid == fid => {}
        Ok(_) => {
            drop(tx);
            // Finished by recovery since we looked (its reply is saved), or changed by
            // another request.
            return crate::saved_reply(mdt, &call.client, xid)
                .unwrap_or_else(|| Outgoing::error(Status::Again));
        }
        Err(s) => return Outgoing::error(s),
    }
    let pending = mdt.intents.lock().expect("intents").get(&fid).cloned();
    if let Some(p) = pending {
        drop(tx);
        if p.reply_to != Some((call.client, xid)) {
            // Being created or removed by another request right now.
            return Outgoing::error(Status::Again);
        }
        // This very request, resent after a restart: finish it.
        return match finish(mdt, fid, Duration::from_millis(PEER_WAIT_MS_MAX)) {
            Ok(()) | Err(Status::NotEmpty) | Err(Status::NotDir) => {
                crate::saved_reply(mdt, &call.client, xid)
                    .unwrap_or_else(|| Outgoing::error(Status::Io))
            }
            Err(s) => Outgoing::error(s),
        };
    }
    let intent = IntentRecord {
        mdt: fid.mdt_index(),
        update: RemoteUpdate::DestroyDir { fid },
        parent,
        name: name.to_vec(),
        reply_to: Some((call.client, xid)),
    };
    tx.batch
        .put(INTENTS, fid.to_key().to_vec(), encode(&intent));
    if let Err(s) = commit_durable(mdt, tx) {
        return Outgoing::error(s);
    }
    // Known to recovery only once durable: the remote part never runs ahead of its intent.
    mdt.intents.lock().expect("intents").insert(fid, intent);
    fault::point("mds.rmdir_remote.after_intent");
    match finish(mdt, fid, Duration::from_millis(PEER_WAIT_MS_MAX)) {
        Ok(()) => match crate::saved_reply(mdt, &call.client, xid) {
            Some(out) => out,
            None => Outgoing::error(Status::Io),
        },
        Err(s) => Outgoing::error(s),
    }
}

/// Drives intent `fid` to its end: sends the remote update until the remote MDT answers
/// (for at most `patience`), then concludes locally. Err(Again) if the remote MDT stayed
/// unreachable (the intent stays for recovery); the remote refusal otherwise.
pub fn finish(mdt: &Mdt, fid: Fid, patience: Duration) -> Result<(), Status> {
    let deadline = Instant::now() + patience;
    loop {
        let Some(intent) = mdt.intents.lock().expect("intents").get(&fid).cloned() else {
            return Ok(());
        };
        let outcome = peer_call(mdt, intent.mdt, MdsOp::Update(intent.update.clone()));
        match outcome {
            Err(Status::Again) | Err(Status::NoDev) => {
                if Instant::now() >= deadline {
                    return Err(Status::Again);
                }
                std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
                continue;
            }
            Err(s) if matches!(intent.update, RemoteUpdate::CreateDir { .. }) => {
                // A creation is never undone: its entry is committed. Keep trying.
                tracing::error!("{}: remote mkdir {fid}: {s}; retrying", mdt.label.name());
                if Instant::now() >= deadline {
                    return Err(Status::Again);
                }
                std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
                continue;
            }
            other => {
                fault::point(match intent.update {
                    RemoteUpdate::CreateDir { .. } => "mds.mkdir_remote.after_remote_apply",
                    RemoteUpdate::DestroyDir { .. } => "mds.rmdir_remote.after_remote_apply",
                });
                let result = other.map(|_| ());
                conclude(mdt, fid, &intent, result)?;
                return result;
            }
        }
    }
}

/// The local end of an intent whose remote part answered `result`, in one transaction.
fn conclude(
    mdt: &Mdt,
    fid: Fid,
    intent: &IntentRecord,
    result: Result<(), Status>,
) -> Result<(), Status> {
    let mut tx = mdt.begin();
    if !mdt.intents.lock().expect("intents").contains_key(&fid) {
        return Ok(()); // concluded by another thread meanwhile
    }
    let reply = match (&intent.update, result) {
        (RemoteUpdate::CreateDir { .. }, _) => None,
        (RemoteUpdate::DestroyDir { .. }, Ok(())) => {
            if tx.lookup(intent.parent, &intent.name)?.map(|d| d.fid) == Some(fid) {
                tx.del_dirent(intent.parent, &intent.name);
                let mut parent = tx.inode(intent.parent)?;
                parent.attr.nlink = parent.attr.nlink.saturating_sub(1).max(2);
                tx.touch(&mut parent);
                tx.put_inode(&parent);
            }
            Some(saved(&Ok(MdsReply::Done)))
        }
        (RemoteUpdate::DestroyDir { .. }, Err(s)) => Some(saved(&Err(s))),
    };
    if let (Some(reply), Some((client, xid))) = (reply, intent.reply_to) {
        tx.save_reply(&client, xid, 0, &reply);
    }
    tx.batch.delete(INTENTS, fid.to_key().to_vec());
    let batch = std::mem::take(&mut tx.batch);
    mdt.kv.commit(batch).map_err(kv_err)?;
    mdt.intents.lock().expect("intents").remove(&fid);
    drop(tx);
    crate::mdt::note_modification(mdt);
    Ok(())
}

/// Tries once to finish every pending intent (the server calls this at start and every
/// second): operations a crash interrupted complete as soon as their remote MDT answers.
pub fn recover_pass(mdt: &Mdt) {
    let pending: Vec<Fid> = mdt
        .intents
        .lock()
        .expect("intents")
        .keys()
        .copied()
        .collect();
    for fid in pending {
        match finish(mdt, fid, Duration::ZERO) {
            Ok(()) => tracing::info!(
                "{}: finished cross-MDT operation on {fid}",
                mdt.label.name()
            ),
            Err(Status::Again) => {}
            Err(s) => tracing::info!(
                "{}: cross-MDT operation on {fid} refused: {s}",
                mdt.label.name()
            ),
        }
    }
}
