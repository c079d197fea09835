//! Directory migration (`nacre migrate -m`, docs/dne.md): a directory moves to another MDT
//! online, with the inodes of its files.
//!
//! The directory's MDT coordinates. Under the MDT's gate (no modifying request in progress)
//! it commits an intent with *freeze* records for the directory and its files: from then on
//! requests that would change them answer `EINPROGRESS` and clients resend them until the
//! migration ends. Then, each step idempotent and durable before it is acknowledged:
//!
//! 1. the MDT holding the directory's entry freezes that entry too ([`RemoteUpdate::Freeze`]:
//!    no rename or removal of it meanwhile);
//! 2. the target MDT creates the new directory inode (attributes copied) and *adopts* the
//!    entries in batches ([`RemoteUpdate::Adopt`]): a file (not open, not hard-linked, no
//!    bytes on the MDT) gets a
//!    new inode there with its layout, symlink target and xattrs — its data objects stay
//!    where they are; other entries keep naming their inode;
//! 3. link records of inodes on third MDTs and `..` of subdirectories follow;
//! 4. the entry is repointed to the new directory ([`RemoteUpdate::Repoint`], unfrozen);
//! 5. one local transaction removes the old directory, its entries and the moved inodes,
//!    records old FID → new FID (they answer `ESTALE`, so the kernel looks the names up
//!    again), lifts the freeze, drops the intent and saves the reply.
//!
//! A crash anywhere re-runs the steps from the intent ([`crate::dne::recover_pass`]).

use crate::mdt::Mdt;
use crate::peers::{ask_until, peer_call, send_until};
use nacre_mdstore::records::{DirentRecord, InodeRecord, IntentRecord, SavedReply};
use nacre_net::{fault, Outgoing};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{
    AdoptEntry, MdsCall, MdsOp, MdsReply, MovedInode, RemoteUpdate, ADOPT_ENTRIES_MAX,
};
use std::collections::BTreeMap;
use std::time::Instant;

/// Encoded bytes of one [`RemoteUpdate::Adopt`] batch at most (a frame body is 1 MiB).
pub const ADOPT_BATCH_BYTES_MAX: usize = 512 * 1024;

/// Every entry of directory `dir` here, in name order.
fn entries(mdt: &Mdt, dir: Fid) -> Result<Vec<(Vec<u8>, DirentRecord)>, Status> {
    mdt.store().dir_entries(dir)
}

/// Extended attributes as (name, value) pairs.
type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// The extended attributes of inode `fid` here.
fn xattrs(mdt: &Mdt, fid: Fid) -> Result<Xattrs, Status> {
    mdt.store().xattrs(fid, 100_000)
}

/// The non-directory entries of `dir` whose inodes are here: what a migration freezes.
fn local_files(mdt: &Mdt, dir: Fid) -> Result<Vec<Fid>, Status> {
    Ok(entries(mdt, dir)?
        .into_iter()
        .filter(|(_, e)| e.kind != FileKind::Directory && e.fid.mdt_index() == mdt.label.index)
        .map(|(_, e)| e.fid)
        .collect())
}

/// Coordinator: checks a `Migrate` of directory `fid` (entry `name` of `parent`) to MDT
/// `target` and commits its intent with the freeze records (`dne::start_prepared` drives
/// it). Some(reply) when there is nothing to move.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    fid: Fid,
    parent: Fid,
    name: &[u8],
    target: u32,
) -> Result<Option<Outgoing>, Status> {
    let here = mdt.label.index;
    crate::mdt::check_name(name)?;
    if fid == Fid::ROOT || fid.mdt_index() != here {
        return Err(Status::Inval);
    }
    let rec = mdt.inode(fid)?;
    if rec.attr.kind != FileKind::Directory {
        return Err(Status::NotDir);
    }
    if target == here {
        let done = MdsReply::Migrated {
            fid,
            moved: 0,
            kept: 0,
        };
        return Ok(Some(Outgoing::ok(nacre_wire::encode_body(&done))));
    }
    if crate::ops::dir_stripe::stripe_of(mdt, fid)?.is_some() {
        return Err(Status::NotSupp);
    }
    if mdt.intents.lock().expect("intents").contains_key(&fid)
        || mdt.frozen.lock().expect("frozen").contains(&fid)
    {
        return Err(Status::InProgress);
    }
    if parent.mdt_index() == here && mdt.lookup(parent, name)?.map(|d| d.fid) != Some(fid) {
        return Err(Status::NoEnt);
    }
    // Room for every inode that might move, and the directory.
    let count = entries(mdt, fid)?.len() as u64;
    match peer_call(mdt, target, MdsOp::StatFs)? {
        MdsReply::StatFs(s) if s.files_free > count => {}
        MdsReply::StatFs(_) => return Err(Status::NoSpc),
        _ => return Err(Status::Proto),
    }
    let new = match peer_call(mdt, target, MdsOp::AllocFid)? {
        MdsReply::Fid(f) => f,
        _ => return Err(Status::Proto),
    };
    let default = crate::ops::dir_stripe::dir_default(mdt, fid)?;
    // No modifying request is in progress while the freeze is put in place.
    let _gate = mdt.gate.write().expect("gate");
    let mut tx = mdt.begin();
    let rec = tx.dir(fid)?;
    let mut held = local_files(mdt, fid)?;
    held.push(fid);
    let mut attr = rec.attr.clone();
    attr.fid = new;
    let intent = IntentRecord {
        key: fid,
        mdt: target,
        update: RemoteUpdate::CreateDir {
            attr,
            parent: rec.parent.unwrap_or(parent),
            dir_default: rec.dir_default,
            stripe: None,
            default,
        },
        parent,
        name: name.to_vec(),
        reply_to: Some((call.client, xid)),
        shards: Vec::new(),
        attr: None,
        migrate_to: Some(new),
    };
    for f in &held {
        tx.freeze(*f);
    }
    tx.put_intent(&intent);
    // Held in memory before the write lock goes, so updates from other MDTs (which check
    // under the lock) cannot slip in between.
    mdt.frozen
        .lock()
        .expect("frozen")
        .extend(held.iter().copied());
    if let Err(s) = tx.commit_durable() {
        let mut frozen = mdt.frozen.lock().expect("frozen");
        for f in &held {
            frozen.remove(f);
        }
        return Err(s);
    }
    mdt.intents.lock().expect("intents").insert(fid, intent);
    Ok(None)
}

/// What became of one entry of the migrating directory.
#[derive(Clone, Copy)]
struct Adopted {
    /// The inode it named here.
    old: Fid,
    /// Its kind.
    kind: FileKind,
    /// The inode it names on the target.
    new: Fid,
}

/// Drives migration intent `intent` to its end (see the module documentation). Err(Again)
/// while an MDT is unreachable past `deadline`; the intent stays for recovery.
pub fn finish(mdt: &Mdt, intent: &IntentRecord, deadline: Instant) -> Result<(), Status> {
    let here = mdt.label.index;
    let (dir, target, parent) = (intent.key, intent.mdt, intent.parent);
    let new = intent.migrate_to.ok_or(Status::Io)?;
    let name = &intent.name;
    let send = |at: u32, update: RemoteUpdate| send_until(mdt, at, update, deadline);
    // 1. The entry naming the directory holds still.
    let held = if parent.mdt_index() == here {
        matches!(mdt.lookup(parent, name)?, Some(d) if d.fid == dir || d.fid == new)
    } else {
        let freeze = RemoteUpdate::Freeze {
            fid: dir,
            parent,
            name: name.clone(),
            to: new,
        };
        match send(parent.mdt_index(), freeze) {
            Ok(()) => true,
            Err(Status::NoEnt) => false,
            Err(s) => return Err(s),
        }
    };
    if !held {
        // Renamed or removed before it could be held: nothing moved yet.
        return abort(mdt, intent, Status::NoEnt);
    }
    fault::point("mds.migrate.after_freeze");
    // 2. The new directory and its entries.
    send(target, intent.update.clone())?;
    let mut adopted: BTreeMap<Vec<u8>, Adopted> = BTreeMap::new();
    loop {
        adopt_new_entries(mdt, dir, new, target, deadline, &mut adopted)?;
        fault::point("mds.migrate.after_adopt");
        // 3. Links of inodes on other MDTs and `..` of subdirectories follow.
        for (n, a) in &adopted {
            let home = a.old.mdt_index();
            if home == here {
                continue;
            }
            if a.kind == FileKind::Directory {
                send(
                    home,
                    RemoteUpdate::SetParent {
                        fid: a.old,
                        parent: new,
                    },
                )?;
                continue;
            }
            if home != target {
                send(
                    home,
                    RemoteUpdate::AddLink {
                        fid: a.old,
                        parent: new,
                        name: n.clone(),
                    },
                )?;
            }
            send(
                home,
                RemoteUpdate::DropLink {
                    fid: a.old,
                    parent: dir,
                    name: n.clone(),
                },
            )?;
        }
        // 4. The entry names the new directory.
        if parent.mdt_index() != here {
            send(
                parent.mdt_index(),
                RemoteUpdate::Repoint {
                    parent,
                    name: name.clone(),
                    from: dir,
                    to: new,
                },
            )?;
            fault::point("mds.migrate.after_repoint");
        }
        // 5. The old directory goes.
        if conclude(mdt, intent, &adopted)? {
            return Ok(());
        }
    }
}

/// Sends the entries of `dir` not yet in `adopted` to the target in batches, recording what
/// each names there.
fn adopt_new_entries(
    mdt: &Mdt,
    dir: Fid,
    new: Fid,
    target: u32,
    deadline: Instant,
    adopted: &mut BTreeMap<Vec<u8>, Adopted>,
) -> Result<(), Status> {
    let here = mdt.label.index;
    let mut batch: Vec<AdoptEntry> = Vec::new();
    let mut bytes = 0usize;
    let pending: Vec<_> = entries(mdt, dir)?
        .into_iter()
        .filter(|(n, _)| !adopted.contains_key(n))
        .collect();
    let last = pending.len();
    for (i, (name, e)) in pending.into_iter().enumerate() {
        let mut inode = None;
        if e.kind != FileKind::Directory && e.fid.mdt_index() == here {
            let rec = mdt.inode(e.fid)?;
            // A file with bytes on this MDT keeps its inode here (its bytes stay with it).
            let dom = rec.layout.as_ref().is_some_and(|l| l.dom_end() > 0);
            if rec.attr.nlink == 1 && !rec.orphan && !mdt.is_open(e.fid) && !dom {
                inode = Some(MovedInode {
                    attr: rec.attr,
                    layout: rec.layout,
                    symlink: rec.symlink,
                    xattrs: xattrs(mdt, e.fid)?,
                });
            }
        }
        let entry = AdoptEntry {
            name,
            kind: e.kind,
            fid: e.fid,
            inode,
        };
        bytes += nacre_wire::encode_body(&entry).len();
        batch.push(entry);
        if batch.len() >= ADOPT_ENTRIES_MAX || bytes >= ADOPT_BATCH_BYTES_MAX || i + 1 == last {
            send_batch(
                mdt,
                new,
                target,
                deadline,
                std::mem::take(&mut batch),
                adopted,
            )?;
            bytes = 0;
        }
    }
    // The directory's own xattrs (idempotent: each put replaces).
    let own = xattrs(mdt, dir)?;
    if !own.is_empty() {
        let update = RemoteUpdate::Adopt {
            dir: new,
            xattrs: own,
            entries: Vec::new(),
        };
        ask_until(mdt, target, update, deadline)?;
    }
    Ok(())
}

fn send_batch(
    mdt: &Mdt,
    new: Fid,
    target: u32,
    deadline: Instant,
    entries: Vec<AdoptEntry>,
    adopted: &mut BTreeMap<Vec<u8>, Adopted>,
) -> Result<(), Status> {
    if entries.is_empty() {
        return Ok(());
    }
    let update = RemoteUpdate::Adopt {
        dir: new,
        xattrs: Vec::new(),
        entries: entries.clone(),
    };
    let MdsReply::Adopted(fids) = ask_until(mdt, target, update, deadline)? else {
        return Err(Status::Proto);
    };
    if fids.len() != entries.len() {
        return Err(Status::Proto);
    }
    for (e, f) in entries.into_iter().zip(fids) {
        adopted.insert(
            e.name,
            Adopted {
                old: e.fid,
                kind: e.kind,
                new: f,
            },
        );
    }
    Ok(())
}

/// Step 5: one transaction removes the old directory and what moved, lifts the freeze and
/// saves the reply. Ok(false) if the directory gained entries not adopted yet (another
/// round is needed).
fn conclude(
    mdt: &Mdt,
    intent: &IntentRecord,
    adopted: &BTreeMap<Vec<u8>, Adopted>,
) -> Result<bool, Status> {
    let here = mdt.label.index;
    let (dir, parent, name) = (intent.key, intent.parent, &intent.name);
    let new = intent.migrate_to.ok_or(Status::Io)?;
    let mut tx = mdt.begin();
    if !mdt.intents.lock().expect("intents").contains_key(&dir) {
        return Ok(true); // finished by another thread meanwhile
    }
    let now = entries(mdt, dir)?;
    let same = now.len() == adopted.len()
        && now
            .iter()
            .all(|(n, e)| adopted.get(n).is_some_and(|a| a.old == e.fid));
    if !same {
        return Ok(false);
    }
    if parent.mdt_index() == here && tx.lookup(parent, name)?.map(|d| d.fid) == Some(dir) {
        tx.put_dirent(parent, name, new, FileKind::Directory);
    }
    let (mut moved, mut kept) = (0u64, 0u64);
    let mut unfreeze = vec![dir];
    for (n, a) in adopted {
        tx.del_dirent(dir, n);
        if a.kind != FileKind::Directory && a.old.mdt_index() == here {
            unfreeze.push(a.old);
        }
        if a.new != a.old {
            moved += 1;
            tx.move_inode(a.old, a.new)?;
            continue;
        }
        kept += 1;
        if a.old.mdt_index() != here {
            continue;
        }
        if a.kind == FileKind::Directory {
            if let Ok(mut sub) = tx.inode(a.old) {
                sub.parent = Some(new);
                tx.put_inode(&sub);
            }
        } else {
            // The entry on the target counts as a link of this inode from now on.
            tx.put_remote_link(a.old, new, n);
        }
    }
    tx.del_dir_default(dir);
    tx.move_inode(dir, new)?;
    for f in &unfreeze {
        tx.unfreeze(*f);
    }
    tx.del_intent(dir);
    let reply = SavedReply::of(&Ok(MdsReply::Migrated {
        fid: new,
        moved,
        kept,
    }));
    if let Some((client, xid)) = intent.reply_to {
        tx.save_reply(&client, xid, 0, &reply);
    }
    tx.commit_durable()?;
    mdt.intents.lock().expect("intents").remove(&dir);
    let mut frozen = mdt.frozen.lock().expect("frozen");
    for f in &unfreeze {
        frozen.remove(f);
    }
    drop(frozen);
    tracing::info!(
        "{}: migrated directory {dir} to {new} ({moved} inodes moved, {kept} kept)",
        mdt.label.name()
    );
    Ok(true)
}

/// A migration whose entry could not be held: lifts the freeze and answers `status`.
fn abort(mdt: &Mdt, intent: &IntentRecord, status: Status) -> Result<(), Status> {
    let dir = intent.key;
    let mut tx = mdt.begin();
    if !mdt.intents.lock().expect("intents").contains_key(&dir) {
        return Ok(());
    }
    let mut unfreeze = local_files(mdt, dir)?;
    unfreeze.push(dir);
    for f in &unfreeze {
        tx.unfreeze(*f);
    }
    tx.del_intent(dir);
    if let Some((client, xid)) = intent.reply_to {
        tx.save_reply(&client, xid, 0, &SavedReply::of(&Err(status)));
    }
    tx.commit_durable()?;
    mdt.intents.lock().expect("intents").remove(&dir);
    let mut frozen = mdt.frozen.lock().expect("frozen");
    for f in &unfreeze {
        frozen.remove(f);
    }
    Err(status)
}

/// Participant: applies [`RemoteUpdate::Freeze`], [`RemoteUpdate::Adopt`] or
/// [`RemoteUpdate::Repoint`], idempotently, durable before the reply.
pub fn apply(mdt: &Mdt, update: &RemoteUpdate) -> Result<MdsReply, Status> {
    let mut tx = mdt.begin();
    let mut reply = MdsReply::Done;
    let mut held: Option<(Fid, bool)> = None;
    match update {
        RemoteUpdate::Freeze {
            fid,
            parent,
            name,
            to,
        } => match tx.lookup(*parent, name)? {
            Some(d) if d.fid == *to => return Ok(MdsReply::Done),
            Some(d) if d.fid == *fid => {
                tx.freeze(*fid);
                held = Some((*fid, true));
            }
            _ => return Err(Status::NoEnt),
        },
        RemoteUpdate::Adopt {
            dir,
            xattrs,
            entries,
        } => {
            if entries.len() > ADOPT_ENTRIES_MAX || dir.mdt_index() != mdt.label.index {
                return Err(Status::Proto);
            }
            let mut d = tx.dir(*dir)?;
            for (k, v) in xattrs {
                tx.put_xattr(*dir, k, v.clone());
            }
            let mut fids = Vec::with_capacity(entries.len());
            let mut added = false;
            // Links gained by inodes of this MDT (one inode may have several entries here;
            // the batch does not read its own writes, so they are added up first).
            let mut gained: std::collections::HashMap<Fid, u32> = Default::default();
            for e in entries {
                crate::mdt::check_name(&e.name)?;
                if let Some(existing) = tx.lookup(*dir, &e.name)? {
                    fids.push(existing.fid);
                    continue;
                }
                let fid = match &e.inode {
                    Some(m) => {
                        let fid = tx.new_fid();
                        let mut attr = m.attr.clone();
                        attr.fid = fid;
                        tx.count_inodes(&attr, 1)?;
                        tx.put_inode(&InodeRecord {
                            attr,
                            layout: m.layout.clone(),
                            dir_default: None,
                            symlink: m.symlink.clone(),
                            parent: None,
                            orphan: false,
                        });
                        for (k, v) in &m.xattrs {
                            tx.put_xattr(fid, k, v.clone());
                        }
                        fid
                    }
                    None => {
                        if e.kind != FileKind::Directory && e.fid.mdt_index() == mdt.label.index {
                            // An inode of this MDT gains a local entry (its old entry's
                            // link is dropped by the coordinator next).
                            *gained.entry(e.fid).or_default() += 1;
                        }
                        e.fid
                    }
                };
                tx.put_dirent(*dir, &e.name, fid, e.kind);
                added = true;
                fids.push(fid);
            }
            for (fid, n) in gained {
                let mut rec = tx.inode(fid)?;
                rec.attr.nlink += n;
                tx.put_inode(&rec);
            }
            if added {
                tx.touch(&mut d);
                tx.put_inode(&d);
            }
            reply = MdsReply::Adopted(fids);
        }
        RemoteUpdate::Repoint {
            parent,
            name,
            from,
            to,
        } => {
            match tx.lookup(*parent, name)? {
                Some(d) if d.fid == *to => {}
                Some(d) if d.fid == *from => {
                    tx.put_dirent(*parent, name, *to, FileKind::Directory);
                }
                _ => return Err(Status::NoEnt),
            }
            tx.unfreeze(*from);
            held = Some((*from, false));
        }
        _ => return Err(Status::Proto),
    }
    if let Some((fid, true)) = held {
        // Held before the write lock goes: requests check under it.
        mdt.frozen.lock().expect("frozen").insert(fid);
    }
    let committed = tx.commit_durable();
    if let Some((fid, on)) = held {
        if !on || committed.is_err() {
            mdt.frozen.lock().expect("frozen").remove(&fid);
        }
    }
    committed?;
    fault::point(match update {
        RemoteUpdate::Freeze { .. } => "mds.update_freeze.after_commit_before_reply",
        RemoteUpdate::Adopt { .. } => "mds.update_adopt.after_commit_before_reply",
        _ => "mds.update_repoint.after_commit_before_reply",
    });
    Ok(reply)
}
