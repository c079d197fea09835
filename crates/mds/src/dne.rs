//! Cross-MDT operations (docs/dne.md): remote directories.
//!
//! The MDT holding the entry coordinates. Its own changes and an *intent* naming the remote
//! MDT's part commit in one durable batch (for a removal, the intent commits first and the
//! local changes after the remote part succeeded); then the remote MDT applies its part,
//! idempotently and durably; then the intent goes. Intents left by a crash are finished by
//! [`recover_pass`], which the server runs at start and every second after, so an operation
//! ends fully done or (for a refused removal) fully undone.

use crate::mdt::{kv_err, Mdt, Tx};
use crate::records::{
    encode, remote_link_key, InodeRecord, IntentRecord, SavedReply, DIRDEFAULTS, DIRSTRIPES,
    INTENTS, REMOTE_LINKS,
};
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
pub(crate) fn peer_call(mdt: &Mdt, index: u32, op: MdsOp) -> Result<MdsReply, Status> {
    let conn = mdt.osts.mdt(index)?;
    let c = MdsCall {
        client: mdt.peer_uuid,
        replied_below: 0,
        jobid: format!("{}-peer", mdt.label.name()),
        op,
    };
    match call::<_, nacre_wire::mds::MdsAnswer>(&conn, c.op.opcode(), index, &c) {
        Ok(r) => Ok(r.reply),
        // Held by a migration there: try again, as when unreachable.
        Err(RpcError::Status(Status::InProgress)) => Err(Status::Again),
        Err(RpcError::Status(s)) => Err(s),
        Err(e) => {
            tracing::warn!("{}: MDT{index:04x} unreachable: {e}", mdt.label.name());
            Err(Status::Again)
        }
    }
}

/// Commits a transaction and waits until it is durable.
pub(crate) fn commit_durable(mdt: &Mdt, mut tx: Tx<'_>) -> Result<(), Status> {
    let batch = std::mem::take(&mut tx.batch);
    if batch.is_empty() {
        return Ok(());
    }
    let ticket = mdt.kv.commit(batch).map_err(kv_err)?;
    drop(tx);
    crate::mdt::note_modification(mdt);
    mdt.kv.wait_durable(ticket).map_err(kv_err)
}

pub(crate) fn saved(result: &Result<MdsReply, Status>) -> SavedReply {
    SavedReply {
        status: result.as_ref().err().map_or(0, |s| s.code()),
        body: result.as_ref().map(encode_body).unwrap_or_default(),
        transno: 0,
        pre_versions: Vec::new(),
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
    if matches!(
        update,
        RemoteUpdate::Freeze { .. } | RemoteUpdate::Adopt { .. } | RemoteUpdate::Repoint { .. }
    ) {
        return crate::migrate::apply(mdt, update);
    }
    let mut tx = mdt.begin();
    // Checked under the write lock, which a migration holds while it freezes.
    if crate::held_by_migration(mdt, &MdsOp::Update(update.clone())) {
        return Err(Status::InProgress);
    }
    let mut owed: Option<(Fid, IntentRecord)> = None;
    match update {
        RemoteUpdate::CreateDir {
            attr,
            parent,
            dir_default,
            stripe,
            default,
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
            if let Some(stripe) = stripe {
                tx.batch
                    .put(DIRSTRIPES, attr.fid.to_key().to_vec(), encode(stripe));
            }
            if let Some(default) = default {
                tx.batch
                    .put(DIRDEFAULTS, attr.fid.to_key().to_vec(), encode(default));
            }
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
        RemoteUpdate::AddLink { fid, parent, name } => {
            let key = remote_link_key(*fid, *parent, name);
            if mdt.kv.get(REMOTE_LINKS, &key).map_err(kv_err)?.is_some() {
                return Ok(MdsReply::Done);
            }
            let mut rec = tx.inode(*fid)?;
            if rec.attr.kind == FileKind::Directory {
                return Err(Status::Perm);
            }
            if rec.orphan || rec.attr.nlink == 0 {
                return Err(Status::NoEnt);
            }
            if rec.attr.nlink >= crate::ops::link::LINK_COUNT_MAX {
                return Err(Status::MLink);
            }
            rec.attr.nlink += 1;
            rec.attr.ctime = tx.now;
            tx.put_inode(&rec);
            tx.batch.put(REMOTE_LINKS, key, Vec::new());
        }
        RemoteUpdate::InsertEntry {
            fid,
            kind,
            parent,
            name,
            noreplace,
            replaces,
        } => {
            crate::mdt::check_name(name)?;
            let mut dir = tx.dir(*parent)?;
            let moving_dir = *kind == FileKind::Directory;
            let victim = match tx.lookup(*parent, name)? {
                Some(e) if e.fid == *fid => return Ok(MdsReply::Done),
                Some(_) if *noreplace => return Err(Status::Exist),
                // A directory of another MDT the coordinator found empty and destroyed.
                Some(e) if moving_dir && *replaces == Some(e.fid) => Some(e),
                Some(e) if e.kind == FileKind::Directory && moving_dir => {
                    // An empty directory of this MDT may be replaced; one elsewhere or
                    // striped cannot be checked and removed in this transaction.
                    if e.fid.mdt_index() != mdt.label.index || dir_stripe(mdt, e.fid)?.is_some() {
                        return Err(Status::XDev);
                    }
                    if !crate::ops::rmdir::is_empty(&tx, e.fid)? {
                        return Err(Status::NotEmpty);
                    }
                    Some(e)
                }
                Some(e) if e.kind == FileKind::Directory => return Err(Status::IsDir),
                Some(_) if moving_dir => return Err(Status::NotDir),
                other => other,
            };
            if moving_dir {
                // A replaced directory gives its subdirectory link to the moved one.
                if victim.is_none() {
                    if dir.attr.nlink >= crate::ops::mkdir::DIR_NLINK_MAX {
                        return Err(Status::MLink);
                    }
                    dir.attr.nlink += 1;
                }
            } else if fid.mdt_index() == mdt.label.index {
                let mut rec = tx.inode(*fid)?;
                rec.attr.nlink += 1;
                rec.attr.ctime = tx.now;
                tx.put_inode(&rec);
            }
            tx.put_dirent(*parent, name, *fid, *kind);
            tx.touch(&mut dir);
            tx.put_inode(&dir);
            if let Some(v) = victim {
                if *replaces == Some(v.fid) {
                    // Destroyed on its own MDT already.
                } else if v.kind == FileKind::Directory {
                    let rec = tx.inode(v.fid)?;
                    tx.remove_inode(&rec)?;
                } else if v.fid.mdt_index() == mdt.label.index {
                    let rec = tx.inode(v.fid)?;
                    crate::ops::unlink::drop_link(&mut tx, rec)?;
                } else {
                    // The replaced entry named an inode of another MDT: this MDT now owes
                    // that one a DropLink, through an intent of its own.
                    let key = tx.new_fid();
                    let intent = IntentRecord {
                        key,
                        mdt: v.fid.mdt_index(),
                        update: RemoteUpdate::DropLink {
                            fid: v.fid,
                            parent: *parent,
                            name: name.clone(),
                        },
                        parent: *parent,
                        name: name.clone(),
                        reply_to: None,
                        shards: Vec::new(),
                        attr: None,
                        migrate_to: None,
                    };
                    tx.batch
                        .put(INTENTS, key.to_key().to_vec(), encode(&intent));
                    owed = Some((key, intent));
                }
            }
        }
        RemoteUpdate::SetParent { fid, parent } => match tx.inode(*fid) {
            Ok(mut rec) => {
                if rec.parent == Some(*parent) {
                    return Ok(MdsReply::Done);
                }
                rec.parent = Some(*parent);
                rec.attr.ctime = tx.now;
                tx.put_inode(&rec);
            }
            // Removed meanwhile: nothing to point anywhere.
            Err(Status::NoEnt) => return Ok(MdsReply::Done),
            Err(s) => return Err(s),
        },
        RemoteUpdate::DropLink { fid, parent, name } => {
            let key = remote_link_key(*fid, *parent, name);
            if mdt.kv.get(REMOTE_LINKS, &key).map_err(kv_err)?.is_none() {
                return Ok(MdsReply::Done);
            }
            tx.batch.delete(REMOTE_LINKS, key);
            match tx.inode(*fid) {
                Ok(rec) => crate::ops::unlink::drop_link(&mut tx, rec)?,
                Err(Status::NoEnt) => {}
                Err(s) => return Err(s),
            }
        }
        // Applied by crate::migrate (returned above).
        RemoteUpdate::Freeze { .. } | RemoteUpdate::Adopt { .. } | RemoteUpdate::Repoint { .. } => {
            return Err(Status::Proto)
        }
    }
    let destroys = std::mem::take(&mut tx.destroys);
    commit_durable(mdt, tx)?;
    mdt.queue_destroys(destroys);
    if let Some((key, intent)) = owed {
        mdt.intents.lock().expect("intents").insert(key, intent);
        if let Err(s) = finish(mdt, key, Duration::ZERO) {
            tracing::debug!("{}: replaced entry's link pending: {s}", mdt.label.name());
        }
    }
    fault::point(match update {
        RemoteUpdate::CreateDir { .. } => "mds.update_create_dir.after_commit_before_reply",
        RemoteUpdate::DestroyDir { .. } => "mds.update_destroy_dir.after_commit_before_reply",
        RemoteUpdate::AddLink { .. } => "mds.update_add_link.after_commit_before_reply",
        RemoteUpdate::InsertEntry { .. } => "mds.update_insert_entry.after_commit_before_reply",
        RemoteUpdate::SetParent { .. } => "mds.update_set_parent.after_commit_before_reply",
        RemoteUpdate::DropLink { .. } => "mds.update_drop_link.after_commit_before_reply",
        _ => "mds.update.after_commit_before_reply",
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
    let indexes = mdt_list(mdt, 2);
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

/// What a new directory is asked to be (mkdir's arguments).
pub struct NewDir<'a> {
    /// Parent directory (on this MDT).
    pub parent: Fid,
    /// Name.
    pub name: &'a [u8],
    /// Permission bits.
    pub perm: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Default for its own new subdirectories (inherited from the parent's).
    pub inherit: Option<nacre_types::dirstripe::DirDefault>,
}

/// Reserves a FID on MDT `index` (this one included, through the same request).
fn alloc_on(mdt: &Mdt, index: u32) -> Result<Fid, Status> {
    match peer_call(mdt, index, MdsOp::AllocFid)? {
        MdsReply::Fid(f) if f.mdt_index() == index => Ok(f),
        _ => Err(Status::Proto),
    }
}

/// Runs a creation coordinated here: `build` checks and records the local changes and
/// returns the reply and the intents; they commit durably with the saved reply, then every
/// intent is driven to its end before the reply (or left to recovery after the wait).
fn coordinate(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    fault_name: &str,
    build: impl FnOnce(&mut Tx<'_>) -> Result<(MdsReply, Vec<IntentRecord>), Status>,
) -> Outgoing {
    let mut tx = mdt.begin();
    let result = build(&mut tx).map(|(r, intents)| {
        let intents: Vec<IntentRecord> = intents
            .into_iter()
            .map(|mut i| {
                i.reply_to = Some((call.client, xid));
                tx.batch.put(INTENTS, i.key.to_key().to_vec(), encode(&i));
                i
            })
            .collect();
        (r, intents)
    });
    if result.is_err() {
        tx.batch = nacre_kv::Batch::new();
    }
    let reply = saved(&result.as_ref().map(|(r, _)| r.clone()).map_err(|s| *s));
    tx.save_reply(&call.client, xid, call.replied_below, &reply);
    if let Err(s) = commit_durable(mdt, tx) {
        return Outgoing::error(s);
    }
    if let Ok((_, intents)) = result {
        let fids: Vec<Fid> = intents.iter().map(|i| i.key).collect();
        {
            let mut pending = mdt.intents.lock().expect("intents");
            for i in intents {
                pending.insert(i.key, i);
            }
        }
        fault::point(fault_name);
        // The entry is durable: the directories will exist. Answer once they do, or once
        // the wait is over (recovery then finishes them).
        for fid in fids {
            if let Err(s) = finish(mdt, fid, Duration::from_millis(PEER_WAIT_MS_MAX)) {
                tracing::warn!("{}: creation of {fid} pending: {s}", mdt.label.name());
            }
        }
    }
    outgoing(reply)
}

/// The MDTs of the file system (this one included), sorted; asks the MGS again when fewer
/// than `at_least` are known (MDTs registered since the last refresh).
fn mdt_list(mdt: &Mdt, at_least: usize) -> Vec<u32> {
    let list = || {
        let mut l = mdt.osts.mdt_indexes();
        if !l.contains(&mdt.label.index) {
            l.push(mdt.label.index);
            l.sort_unstable();
        }
        l
    };
    let l = list();
    if l.len() >= at_least {
        return l;
    }
    if let Err(e) = mdt.osts.refresh() {
        tracing::debug!("MDT refresh: {e}");
    }
    list()
}

/// How many MDTs the file system has, as far as this MDT knows.
pub fn mdt_count(mdt: &Mdt) -> usize {
    mdt_list(mdt, 0).len()
}

/// Coordinator: `mkdir` of a directory whose inode lives on MDT `target`.
pub fn mkdir_remote(mdt: &Mdt, call: &MdsCall, xid: u64, dir: NewDir<'_>, target: u32) -> Outgoing {
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
        return out;
    }
    let fid = match alloc_on(mdt, target) {
        Ok(f) => f,
        Err(s) => return Outgoing::error(s),
    };
    coordinate(
        mdt,
        call,
        xid,
        "mds.mkdir_remote.after_local_commit",
        |tx| mkdir_local(tx, &dir, fid, target, None).map(|(r, i)| (r, vec![i])),
    )
}

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
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
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
                        dir_default: *dir_default,
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

/// The local half of a new directory `fid` on MDT `target` (the master of a striped one
/// with `stripe`): the entry here, the parent's link, and the intent creating the inode.
fn mkdir_local(
    tx: &mut Tx<'_>,
    dir: &NewDir<'_>,
    fid: Fid,
    target: u32,
    stripe: Option<nacre_types::dirstripe::DirStripe>,
) -> Result<(MdsReply, IntentRecord), Status> {
    let (parent_fid, name) = (dir.parent, dir.name);
    let mut parent = crate::ops::mkdir::check_new(tx, parent_fid, name)?;
    let mut rec = crate::ops::create::inode_with_fid(
        tx,
        &parent,
        FileKind::Directory,
        dir.perm,
        dir.uid,
        dir.gid,
        fid,
    );
    if stripe.is_some() {
        // A master holds no entries itself; 1 is the "links not counted" convention, so
        // tools do not infer its subdirectory count from it.
        rec.attr.nlink = 1;
    }
    parent.attr.nlink += 1;
    tx.touch(&mut parent);
    tx.put_inode(&parent);
    tx.put_dirent(parent_fid, name, fid, FileKind::Directory);
    // Files in the new directory get the striping they would get here.
    let effective =
        crate::mdt::merge_spec(parent.dir_default.unwrap_or_default(), tx.fs_default()?);
    let intent = IntentRecord {
        key: fid,
        mdt: target,
        update: RemoteUpdate::CreateDir {
            attr: rec.attr.clone(),
            parent: parent_fid,
            dir_default: (effective != Default::default()).then_some(effective),
            stripe,
            default: dir.inherit,
        },
        parent: parent_fid,
        name: name.to_vec(),
        reply_to: None,
        shards: Vec::new(),
        attr: None,
        migrate_to: None,
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

/// The default for new subdirectories of directory `fid`, if this MDT holds it.
pub fn dir_default(
    mdt: &Mdt,
    fid: Fid,
) -> Result<Option<nacre_types::dirstripe::DirDefault>, Status> {
    match mdt.kv.get(DIRDEFAULTS, &fid.to_key()).map_err(kv_err)? {
        Some(v) => Ok(Some(crate::records::decode(&v)?)),
        None => Ok(None),
    }
}

/// Sets (None: removes) directory `fid`'s default for new subdirectories.
pub fn set_dir_default(
    tx: &mut Tx<'_>,
    fid: Fid,
    default: Option<nacre_types::dirstripe::DirDefault>,
) -> Result<MdsReply, Status> {
    tx.dir(fid)?;
    match default {
        Some(d) => {
            if d.count == 0 || d.count < -1 || d.max_inherit < -1 {
                return Err(Status::Inval);
            }
            tx.batch.put(DIRDEFAULTS, fid.to_key().to_vec(), encode(&d))
        }
        None => tx.batch.delete(DIRDEFAULTS, fid.to_key().to_vec()),
    }
    Ok(MdsReply::Done)
}

/// The stripe layout of directory `fid`, if this MDT holds it and it is striped.
pub fn dir_stripe(
    mdt: &Mdt,
    fid: Fid,
) -> Result<Option<nacre_types::dirstripe::DirStripe>, Status> {
    match mdt.kv.get(DIRSTRIPES, &fid.to_key()).map_err(kv_err)? {
        Some(v) => Ok(Some(crate::records::decode(&v)?)),
        None => Ok(None),
    }
}

/// The stripe layout of directory `fid`, wherever it lives.
pub fn stripe_of(mdt: &Mdt, fid: Fid) -> Result<Option<nacre_types::dirstripe::DirStripe>, Status> {
    if fid.mdt_index() == mdt.label.index {
        return dir_stripe(mdt, fid);
    }
    match peer_call(mdt, fid.mdt_index(), MdsOp::GetDirStripe { fid })? {
        MdsReply::DirStripe(s) => Ok(s),
        _ => Err(Status::Proto),
    }
}

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
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
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

/// A resend of this very request whose removal intent is pending (after a restart): finish
/// it and answer with its saved reply. None if no intent of this request is pending.
pub fn resume_own(mdt: &Mdt, call: &MdsCall, xid: u64, fid: Fid) -> Option<Outgoing> {
    if let Some(out) = resume_request(mdt, call, xid) {
        return Some(out);
    }
    // An intent on this directory of another request: being created or removed right now.
    let busy = mdt.intents.lock().expect("intents").contains_key(&fid);
    busy.then(|| Outgoing::error(Status::InProgress))
}

/// Commits a removal intent (after checking the entry still names its directory), then
/// drives it to its end and answers with the reply it saved.
fn start_removal(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    parent: Fid,
    name: &[u8],
    intent: IntentRecord,
    fault_name: &str,
) -> Outgoing {
    let fid = intent.key;
    let tx = mdt.begin();
    // Re-check under the write lock: the entry may have changed since the caller looked.
    match tx.lookup(parent, name) {
        Ok(Some(d)) if d.fid == fid => {}
        Ok(_) => {
            drop(tx);
            // Finished by recovery since we looked (its reply is saved), or changed by
            // another request.
            return crate::saved_reply(mdt, &call.client, xid)
                .unwrap_or_else(|| Outgoing::error(Status::InProgress));
        }
        Err(s) => return Outgoing::error(s),
    }
    if mdt.intents.lock().expect("intents").contains_key(&fid) {
        return Outgoing::error(Status::InProgress);
    }
    run_intent(mdt, call, xid, tx, intent, fault_name)
}

/// Commits `intent` (with whatever `tx` holds) durably, then drives it to its end and
/// answers with the reply its conclusion saved (`EAGAIN` if a peer stayed unreachable: the
/// intent stays for recovery and the resend).
fn run_intent(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    mut tx: Tx<'_>,
    intent: IntentRecord,
    fault_name: &str,
) -> Outgoing {
    let key = intent.key;
    tx.batch
        .put(INTENTS, key.to_key().to_vec(), encode(&intent));
    if let Err(s) = commit_durable(mdt, tx) {
        return Outgoing::error(s);
    }
    // Known to recovery only once durable: the remote part never runs ahead of its intent.
    mdt.intents.lock().expect("intents").insert(key, intent);
    fault::point(fault_name);
    match finish(mdt, key, Duration::from_millis(PEER_WAIT_MS_MAX)) {
        Err(Status::Again) => Outgoing::error(Status::InProgress),
        Err(s) => crate::saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(s)),
        Ok(()) => crate::saved_reply(mdt, &call.client, xid)
            .unwrap_or_else(|| Outgoing::error(Status::Io)),
    }
}

/// Sends `update` to MDT `at`, retrying while it is unreachable until `deadline`.
pub(crate) fn send_until(
    mdt: &Mdt,
    at: u32,
    update: RemoteUpdate,
    deadline: Instant,
) -> Result<(), Status> {
    ask_until(mdt, at, update, deadline).map(|_| ())
}

/// [`send_until`], returning the reply.
pub(crate) fn ask_until(
    mdt: &Mdt,
    at: u32,
    update: RemoteUpdate,
    deadline: Instant,
) -> Result<MdsReply, Status> {
    loop {
        match peer_call(mdt, at, MdsOp::Update(update.clone())) {
            Err(Status::Again) | Err(Status::NoDev) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
            }
            other => return other,
        }
    }
}

/// The remote part of a striped directory's removal: every shard destroyed, then the
/// master; a shard not empty puts back every shard (creation is idempotent, so shards never
/// destroyed are untouched) and answers `ENOTEMPTY`. Err(Again) while an MDT is unreachable.
fn remove_striped(mdt: &Mdt, intent: &IntentRecord, deadline: Instant) -> Result<(), Status> {
    let master = intent.update.fid();
    let send = |at: u32, update: RemoteUpdate| send_until(mdt, at, update, deadline);
    for (at, attr, _, _) in &intent.shards {
        match send(*at, RemoteUpdate::DestroyDir { fid: attr.fid }) {
            Ok(()) => {}
            Err(Status::NotEmpty) => {
                for (at, attr, dir_default, default) in &intent.shards {
                    let back = RemoteUpdate::CreateDir {
                        attr: attr.clone(),
                        parent: master,
                        dir_default: *dir_default,
                        stripe: None,
                        default: *default,
                    };
                    send(*at, back)?;
                }
                return Err(Status::NotEmpty);
            }
            Err(s) => return Err(s),
        }
    }
    send(intent.mdt, intent.update.clone())
}

/// A resend of this very request whose intent is pending (after a restart): finish it and
/// answer with the reply it saves. None if no intent of this request is pending.
pub(crate) fn resume_request(mdt: &Mdt, call: &MdsCall, xid: u64) -> Option<Outgoing> {
    let keys: Vec<Fid> = mdt
        .intents
        .lock()
        .expect("intents")
        .iter()
        .filter(|(_, i)| i.reply_to == Some((call.client, xid)))
        .map(|(k, _)| *k)
        .collect();
    if keys.is_empty() {
        return None;
    }
    for k in keys {
        if let Err(s) = finish(mdt, k, Duration::from_millis(PEER_WAIT_MS_MAX)) {
            if s == Status::Again {
                return Some(Outgoing::error(Status::InProgress));
            }
        }
    }
    Some(crate::saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(Status::Io)))
}

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
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
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
        .and_then(|()| tx.dir(parent).map(|_| ()))
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
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
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

/// The steps of a rename across MDTs, each idempotent so a crash anywhere re-runs them: the
/// inode's MDT counts the new entry (when it is not the target's), the target MDT puts the
/// entry (undoing the count if it refuses), this MDT removes the source entry, and the
/// inode's MDT drops the source entry's link (when the inode is not here).
fn rename_steps(mdt: &Mdt, intent: &IntentRecord, deadline: Instant) -> Result<(), Status> {
    let RemoteUpdate::InsertEntry {
        fid, parent, name, ..
    } = &intent.update
    else {
        unreachable!("rename_steps on an InsertEntry intent");
    };
    let (here, home, target) = (mdt.label.index, fid.mdt_index(), intent.mdt);
    let send = |at: u32, update: RemoteUpdate| send_until(mdt, at, update, deadline);
    let new_link = || RemoteUpdate::AddLink {
        fid: *fid,
        parent: *parent,
        name: name.clone(),
    };
    let moving_dir = matches!(
        intent.update,
        RemoteUpdate::InsertEntry {
            kind: FileKind::Directory,
            ..
        }
    );
    if home != target && !moving_dir {
        send(home, new_link())?;
    }
    let mut update = intent.update.clone();
    if let RemoteUpdate::InsertEntry {
        replaces,
        noreplace: false,
        kind: FileKind::Directory,
        ..
    } = &mut update
    {
        // Over an empty directory of a third MDT: destroyed there first (ENOTEMPTY stops
        // the rename with nothing changed), then the entry replaced.
        if let Some(victim) = third_mdt_victim(mdt, target, *parent, name, *fid)? {
            send(victim.mdt_index(), RemoteUpdate::DestroyDir { fid: victim })?;
            fault::point("mds.rename_remote.after_victim_destroyed");
            *replaces = Some(victim);
        }
    }
    if let Err(s) = send(target, update) {
        if matches!(s, Status::Again | Status::NoDev) {
            return Err(s);
        }
        if home != target && !moving_dir {
            let RemoteUpdate::AddLink { fid, parent, name } = new_link() else {
                unreachable!()
            };
            send(home, RemoteUpdate::DropLink { fid, parent, name })?;
        }
        return Err(s);
    }
    if moving_dir {
        // A directory: its `..` follows; its old parent loses the subdirectory link.
        let moved = (|| {
            send(
                home,
                RemoteUpdate::SetParent {
                    fid: *fid,
                    parent: *parent,
                },
            )?;
            let mut tx = mdt.begin();
            if tx.lookup(intent.parent, &intent.name)?.map(|d| d.fid) == Some(*fid) {
                tx.del_dirent(intent.parent, &intent.name);
                let mut dir = tx.dir(intent.parent)?;
                dir.attr.nlink = dir.attr.nlink.saturating_sub(1).max(2);
                tx.touch(&mut dir);
                tx.put_inode(&dir);
                commit_durable(mdt, tx)?;
            }
            Ok(())
        })();
        return moved.map_err(|s: Status| {
            tracing::warn!(
                "{}: move of directory {fid} to finish later: {s}",
                mdt.label.name()
            );
            Status::Again
        });
    }
    // From here on the rename happens: any failure is retried (the intent stays).
    finish_rename(mdt, intent, *fid, here, home, &send).map_err(|s| {
        tracing::warn!("{}: rename of {fid} to finish later: {s}", mdt.label.name());
        Status::Again
    })
}

/// The directory named by (`parent`, `name`) on MDT `target` when its inode lives on a third
/// MDT and it is not striped (a rename of directory `moving` may replace it once it is
/// destroyed there); None otherwise. A victim already destroyed by an earlier run of the
/// same rename (its inode gone, its entry not) counts too.
fn third_mdt_victim(
    mdt: &Mdt,
    target: u32,
    parent: Fid,
    name: &[u8],
    moving: Fid,
) -> Result<Option<Fid>, Status> {
    let lookup = MdsOp::Lookup {
        parent,
        name: name.to_vec(),
    };
    let victim = match peer_call(mdt, target, lookup) {
        Ok(MdsReply::Remote { fid }) if fid != moving && fid.mdt_index() != target => fid,
        Ok(_) | Err(Status::NoEnt) => return Ok(None),
        Err(s) => return Err(s),
    };
    let home = victim.mdt_index();
    match peer_call(mdt, home, MdsOp::GetAttr { fid: victim }) {
        Ok(MdsReply::Attr(attr)) | Ok(MdsReply::Entry { attr, .. }) => {
            if attr.kind != FileKind::Directory || stripe_of_remote(mdt, victim)? {
                return Ok(None);
            }
            Ok(Some(victim))
        }
        Err(Status::NoEnt) => Ok(Some(victim)),
        Ok(_) => Err(Status::Proto),
        Err(s) => Err(s),
    }
}

/// True if directory `fid` (on another MDT) is striped.
fn stripe_of_remote(mdt: &Mdt, fid: Fid) -> Result<bool, Status> {
    match peer_call(mdt, fid.mdt_index(), MdsOp::GetDirStripe { fid })? {
        MdsReply::DirStripe(s) => Ok(s.is_some()),
        _ => Err(Status::Proto),
    }
}

/// The second half of [`rename_steps`]: the source entry and its link.
fn finish_rename(
    mdt: &Mdt,
    intent: &IntentRecord,
    fid: Fid,
    here: u32,
    home: u32,
    send: &dyn Fn(u32, RemoteUpdate) -> Result<(), Status>,
) -> Result<(), Status> {
    let fid = &fid;
    // The source entry goes (once: only while it still names the inode).
    let mut tx = mdt.begin();
    if tx.lookup(intent.parent, &intent.name)?.map(|d| d.fid) == Some(*fid) {
        tx.del_dirent(intent.parent, &intent.name);
        let mut dir = tx.dir(intent.parent)?;
        tx.touch(&mut dir);
        tx.put_inode(&dir);
        if home == here {
            let rec = tx.inode(*fid)?;
            crate::ops::unlink::drop_link(&mut tx, rec)?;
        }
        let destroys = std::mem::take(&mut tx.destroys);
        commit_durable(mdt, tx)?;
        mdt.queue_destroys(destroys);
    } else {
        drop(tx);
    }
    if home != here {
        send(
            home,
            RemoteUpdate::DropLink {
                fid: *fid,
                parent: intent.parent,
                name: intent.name.clone(),
            },
        )?;
    }
    Ok(())
}

/// How long MDT0 keeps the rename lock for a holder that never gives it back (a crashed
/// coordinator).
pub const RENAME_LOCK_LEASE_MS: u64 = 120_000;

/// On MDT0: takes or gives back the rename lock for `owner`. `EINPROGRESS` while another
/// holds it (its lease not expired); taking it twice is the same as once.
pub fn rename_lock(mdt: &Mdt, owner: ([u8; 16], u64), acquire: bool) -> Result<MdsReply, Status> {
    if mdt.label.index != 0 {
        return Err(Status::Inval);
    }
    let now = Instant::now();
    let mut held = mdt.rename_lock.lock().expect("rename lock");
    match (*held, acquire) {
        (Some((o, until)), true) if o != owner && until > now => Err(Status::InProgress),
        (_, true) => {
            *held = Some((owner, now + Duration::from_millis(RENAME_LOCK_LEASE_MS)));
            Ok(MdsReply::Done)
        }
        (Some((o, _)), false) if o == owner => {
            *held = None;
            Ok(MdsReply::Done)
        }
        (_, false) => Ok(MdsReply::Done),
    }
}

/// Runs `f` holding the file system's rename lock (on MDT0) for request (`client`, `xid`):
/// directory renames between different parents are serialised, so the check that a
/// directory does not move beneath itself and the move cannot interleave with another
/// move's (which could otherwise build a loop cut off from the root). `EINPROGRESS` if the
/// lock stays taken or MDT0 unreachable for [`PEER_WAIT_MS_MAX`] (the client resends).
pub fn with_rename_lock<T>(
    mdt: &Mdt,
    client: [u8; 16],
    xid: u64,
    f: impl FnOnce() -> T,
) -> Result<T, Status> {
    let owner = (client, xid);
    let ask = |acquire: bool| {
        if mdt.label.index == 0 {
            rename_lock(mdt, owner, acquire).map(|_| ())
        } else {
            peer_call(mdt, 0, MdsOp::RenameLock { owner, acquire }).map(|_| ())
        }
    };
    let deadline = Instant::now() + Duration::from_millis(PEER_WAIT_MS_MAX);
    let mut pause = Duration::from_millis(5);
    loop {
        match ask(true) {
            Ok(()) => break,
            Err(Status::InProgress) | Err(Status::Again) | Err(Status::NoDev)
                if Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(PEER_RETRY_MS));
            }
            Err(Status::Again) | Err(Status::NoDev) => return Err(Status::InProgress),
            Err(s) => return Err(s),
        }
    }
    let out = f();
    if let Err(s) = ask(false) {
        tracing::warn!(
            "{}: rename lock not given back ({s}); its lease ends it",
            mdt.label.name()
        );
    }
    Ok(out)
}

/// A directory rename's check, under the rename lock, that directory `fid` does not move
/// beneath itself (into `dst_parent`): `EINVAL` if it would.
pub(crate) fn loop_check(mdt: &Mdt, dst_parent: Fid, fid: Fid) -> Result<(), Status> {
    if beneath(mdt, dst_parent, fid)? {
        return Err(Status::Inval);
    }
    fault::point("mds.rename.after_loop_check");
    Ok(())
}

/// True if directory `dir` is `ancestor` or lies beneath it, following `..` across MDTs.
/// Callers hold the rename lock, so no other directory moves meanwhile.
fn beneath(mdt: &Mdt, dir: Fid, ancestor: Fid) -> Result<bool, Status> {
    let mut cur = dir;
    for _ in 0..crate::ops::rename::DEPTH_MAX {
        if cur == ancestor {
            return Ok(true);
        }
        if cur == Fid::ROOT {
            return Ok(false);
        }
        cur = if cur.mdt_index() == mdt.label.index {
            mdt.inode(cur)?.parent.unwrap_or(Fid::ROOT)
        } else {
            let up = MdsOp::Lookup {
                parent: cur,
                name: b"..".to_vec(),
            };
            match peer_call(mdt, cur.mdt_index(), up)? {
                MdsReply::Entry { attr, .. } => attr.fid,
                MdsReply::Remote { fid } => fid,
                _ => return Err(Status::Proto),
            }
        };
    }
    Err(Status::Io)
}

/// Coordinator: rename of `src_name` in `src_parent` (here) to `dst_name` in `dst_parent`
/// on another MDT (a directory moves with its `..`; one replacing a directory there is not
/// supported yet: `EXDEV`).
#[allow(clippy::too_many_arguments)]
pub fn rename_remote(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    src_parent: Fid,
    src_name: &[u8],
    dst_parent: Fid,
    dst_name: &[u8],
    noreplace: bool,
) -> Outgoing {
    if let Some(out) = crate::saved_reply(mdt, &call.client, xid) {
        return out;
    }
    if let Some(out) = resume_request(mdt, call, xid) {
        return out;
    }
    let src = crate::mdt::check_name(src_name)
        .and_then(|()| crate::mdt::check_name(dst_name))
        .and_then(|()| mdt.inode(src_parent))
        .and_then(|d| match d.attr.kind {
            FileKind::Directory => mdt.lookup(src_parent, src_name)?.ok_or(Status::NoEnt),
            _ => Err(Status::NotDir),
        });
    let src = match src {
        Ok(s) => s,
        Err(s) => return Outgoing::error(s),
    };
    if src.kind == FileKind::Directory {
        // A directory may not move beneath itself: walk up from the target across MDTs,
        // and move it, under the rename lock.
        let moved = with_rename_lock(mdt, call.client, xid, || {
            if let Err(s) = loop_check(mdt, dst_parent, src.fid) {
                return Outgoing::error(s);
            }
            rename_remote_locked(
                mdt,
                call,
                xid,
                src.clone(),
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                noreplace,
            )
        });
        return moved.unwrap_or_else(Outgoing::error);
    }
    rename_remote_locked(
        mdt, call, xid, src, src_parent, src_name, dst_parent, dst_name, noreplace,
    )
}

/// [`rename_remote`] once the source is known (and, for a directory, under the rename lock
/// with the loop check made).
#[allow(clippy::too_many_arguments)]
fn rename_remote_locked(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    src: crate::records::DirentRecord,
    src_parent: Fid,
    src_name: &[u8],
    dst_parent: Fid,
    dst_name: &[u8],
    noreplace: bool,
) -> Outgoing {
    let mut tx = mdt.begin();
    // Re-checked under the write lock: the entry may have changed since it was looked up.
    match tx.lookup(src_parent, src_name) {
        Ok(Some(d)) if d.fid == src.fid => {}
        Ok(_) => return Outgoing::error(Status::InProgress),
        Err(s) => return Outgoing::error(s),
    }
    let key = tx.new_fid();
    let intent = IntentRecord {
        key,
        mdt: dst_parent.mdt_index(),
        update: RemoteUpdate::InsertEntry {
            fid: src.fid,
            kind: src.kind,
            parent: dst_parent,
            name: dst_name.to_vec(),
            noreplace,
            replaces: None,
        },
        parent: src_parent,
        name: src_name.to_vec(),
        reply_to: Some((call.client, xid)),
        shards: Vec::new(),
        attr: None,
        migrate_to: None,
    };
    run_intent(mdt, call, xid, tx, intent, "mds.rename_remote.after_intent")
}

/// Drives intent `fid` to its end: sends the remote update until the remote MDT answers
/// (for at most `patience`), then concludes locally. Err(Again) if the remote MDT stayed
/// unreachable (the intent stays for recovery); the remote refusal otherwise.
pub fn finish(mdt: &Mdt, fid: Fid, patience: Duration) -> Result<(), Status> {
    let deadline = Instant::now() + patience;
    let driving = patience > Duration::ZERO && mdt.driving.lock().expect("driving").insert(fid);
    let result = drive(mdt, fid, deadline);
    if driving {
        mdt.driving.lock().expect("driving").remove(&fid);
    }
    result
}

/// The loop of [`finish`].
fn drive(mdt: &Mdt, fid: Fid, deadline: Instant) -> Result<(), Status> {
    loop {
        let Some(intent) = mdt.intents.lock().expect("intents").get(&fid).cloned() else {
            return Ok(());
        };
        if intent.migrate_to.is_some() {
            match crate::migrate::finish(mdt, &intent, deadline) {
                Err(Status::Again) | Err(Status::NoDev) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
                    continue;
                }
                Err(Status::NoDev) => return Err(Status::Again),
                other => return other,
            }
        }
        let outcome = if !intent.shards.is_empty() {
            remove_striped(mdt, &intent, deadline).map(|()| MdsReply::Done)
        } else if matches!(intent.update, RemoteUpdate::InsertEntry { .. }) {
            rename_steps(mdt, &intent, deadline).map(|()| MdsReply::Done)
        } else {
            peer_call(mdt, intent.mdt, MdsOp::Update(intent.update.clone()))
        };
        match outcome {
            Err(Status::Again) | Err(Status::NoDev) => {
                if Instant::now() >= deadline {
                    return Err(Status::Again);
                }
                std::thread::sleep(Duration::from_millis(PEER_RETRY_MS));
                continue;
            }
            Err(s)
                if matches!(
                    intent.update,
                    RemoteUpdate::CreateDir { .. } | RemoteUpdate::DropLink { .. }
                ) =>
            {
                // A creation or a dropped link is never undone: its entry change is
                // committed. Keep trying.
                tracing::error!(
                    "{}: cross-MDT update {fid}: {s}; retrying",
                    mdt.label.name()
                );
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
                    RemoteUpdate::AddLink { .. } => "mds.link_remote.after_remote_apply",
                    RemoteUpdate::InsertEntry { .. } => "mds.rename_remote.after_remote_apply",
                    RemoteUpdate::SetParent { .. } => "mds.set_parent.after_remote_apply",
                    RemoteUpdate::DropLink { .. } => "mds.unlink_remote.after_remote_apply",
                    _ => "mds.update.after_remote_apply",
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
        (RemoteUpdate::DropLink { .. }, _) => None,
        (RemoteUpdate::AddLink { .. }, Ok(())) => {
            let attr = intent.attr.clone().ok_or(Status::Io)?;
            if tx.lookup(intent.parent, &intent.name)?.is_some() {
                // The name was taken while the link was being counted: take it back.
                drop(tx);
                let undo = RemoteUpdate::DropLink {
                    fid: attr.fid,
                    parent: intent.parent,
                    name: intent.name.clone(),
                };
                peer_call(mdt, intent.mdt, MdsOp::Update(undo))?;
                return conclude(mdt, fid, intent, Err(Status::Exist));
            }
            let mut parent = tx.dir(intent.parent)?;
            tx.touch(&mut parent);
            tx.put_inode(&parent);
            tx.put_dirent(intent.parent, &intent.name, attr.fid, attr.kind);
            let mut attr = attr;
            attr.nlink += 1;
            Some(saved(&Ok(MdsReply::Entry { attr, layout: None })))
        }
        (RemoteUpdate::AddLink { .. }, Err(s)) => Some(saved(&Err(s))),
        (RemoteUpdate::InsertEntry { .. }, Ok(())) => Some(saved(&Ok(MdsReply::Done))),
        (RemoteUpdate::InsertEntry { .. }, Err(s)) => Some(saved(&Err(s))),
        (RemoteUpdate::SetParent { .. }, _) => None,
        // Migrations conclude in crate::migrate; these are never an intent's update.
        (
            RemoteUpdate::Freeze { .. } | RemoteUpdate::Adopt { .. } | RemoteUpdate::Repoint { .. },
            _,
        ) => None,
    };
    if let (Some(reply), Some((client, xid))) = (reply, intent.reply_to) {
        tx.save_reply(&client, xid, 0, &reply);
    }
    tx.batch.delete(INTENTS, fid.to_key().to_vec());
    let batch = std::mem::take(&mut tx.batch);
    let ticket = mdt.kv.commit(batch).map_err(kv_err)?;
    mdt.intents.lock().expect("intents").remove(&fid);
    drop(tx);
    crate::mdt::note_modification(mdt);
    // Durable before the reply: a cross-MDT operation has no transno, so clients do not
    // replay it, and the changes they do replay may depend on it (a create under a name
    // this removal freed). Left to the intent, it would be finished only once the peer MDT
    // answers, possibly after those replays ran.
    mdt.kv.wait_durable(ticket).map_err(kv_err)
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
        if mdt.driving.lock().expect("driving").contains(&fid) {
            continue; // a request thread is on it
        }
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
