//! Rename across MDTs: the global rename lock (MDT0's), the loop check, and the coordinator
//! that commits the intent (its steps, which move an entry and its directory's parent
//! pointer between MDTs, are ops/rename_steps.rs).

use crate::dne::{resume_request, run_intent, saved_reply};
use crate::mdt::Mdt;
use crate::peers::{peer_call, PEER_RETRY_MS, PEER_WAIT_MS_MAX};
use nacre_mdstore::records::IntentRecord;
use nacre_net::fault;
use nacre_net::Outgoing;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::time::{Duration, Instant};

/// How a rename between directories of this MDT runs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LocalRename {
    /// In one transaction here (crate::ops::rename).
    Plain,
    /// Nothing to do: the target already names the source's inode.
    Same,
    /// In the steps of a rename across MDTs ([`rename_steps`], the target MDT being this
    /// one): the source names an inode of another MDT that moves (its links there follow),
    /// or the target names a file of another MDT that is replaced (it loses that link).
    Steps,
}

/// How the rename of `src_parent`/`src_name` to `dst_parent`/`dst_name`, both
/// directories of this MDT, runs. Errors (no source, ...) are left to the plain rename.
pub(crate) fn local_rename(
    mdt: &Mdt,
    src_parent: Fid,
    src_name: &[u8],
    dst_parent: Fid,
    dst_name: &[u8],
) -> LocalRename {
    let here = mdt.label.index;
    let Ok(Some(src)) = mdt.lookup(src_parent, src_name) else {
        return LocalRename::Plain;
    };
    let dst = mdt.lookup(dst_parent, dst_name).ok().flatten();
    if dst.as_ref().is_some_and(|d| d.fid == src.fid) {
        return LocalRename::Same;
    }
    // A directory of another MDT renamed within its directory keeps its `..`: plain.
    let same_dir = src_parent == dst_parent;
    let moves_remote =
        src.fid.mdt_index() != here && !(same_dir && src.kind == FileKind::Directory);
    let replaces_remote_file =
        dst.is_some_and(|d| d.fid.mdt_index() != here && d.kind != FileKind::Directory);
    if moves_remote || replaces_remote_file {
        LocalRename::Steps
    } else {
        LocalRename::Plain
    }
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
pub(crate) fn beneath(mdt: &Mdt, dir: Fid, ancestor: Fid) -> Result<bool, Status> {
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
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
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
    let src = match src.and_then(|s| {
        super::project_admits_anywhere(mdt, dst_parent, s.fid)?;
        Ok(s)
    }) {
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
pub(crate) fn rename_remote_locked(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    src: nacre_mdstore::records::DirentRecord,
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
