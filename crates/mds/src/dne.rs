//! Cross-MDT operations (docs/dne.md): the intent machinery they share. Each operation is a
//! file of `ops/` (`mkdir_remote`, `mkdir_striped`, `rmdir_remote`, `rmdir_striped`,
//! `link_remote`, `unlink_remote`, `rename_remote`, `remote_update`, `dir_stripe`).
//!
//! The MDT holding the entry coordinates. Its own changes and an *intent* naming the remote
//! MDT's part commit in one durable batch (for a removal, the intent commits first and the
//! local changes after the remote part succeeded); then the remote MDT applies its part,
//! idempotently and durably; then the intent goes. Intents left by a crash are finished by
//! [`recover_pass`], which the server runs at start and every second after, so an operation
//! ends fully done or (for a refused removal) fully undone.

use crate::mdt::{Mdt, Tx};
use crate::ops::rename_steps::rename_steps;
use crate::peers::{peer_call, send_until, PEER_RETRY_MS, PEER_WAIT_MS_MAX};
use nacre_mdstore::records::{IntentRecord, SavedReply};
use nacre_net::fault;
use nacre_net::Outgoing;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};
use std::time::{Duration, Instant};

/// The saved reply of (client, xid), if the request was executed before: a resend is
/// answered with it instead of running again. A reply to a cross-MDT operation still in
/// progress (its intent pending) waits for the operation to end first.
pub(crate) fn saved_reply(mdt: &Mdt, client: &[u8; 16], xid: u64) -> Option<Outgoing> {
    let known = mdt.begin().has_saved_reply(client, xid);
    known.then(|| reconstruct(mdt, client, xid))
}

/// The saved reply of (client, xid), known to exist, after any cross-MDT operation of that
/// request still pending has ended (called without the write lock: finishing takes it).
pub(crate) fn reconstruct(mdt: &Mdt, client: &[u8; 16], xid: u64) -> Outgoing {
    let pending: Vec<_> = mdt
        .intents
        .lock()
        .expect("intents")
        .iter()
        .filter(|(_, i)| i.reply_to == Some((*client, xid)))
        .map(|(f, _)| *f)
        .collect();
    for fid in pending {
        let _ = finish(mdt, fid, std::time::Duration::from_millis(PEER_WAIT_MS_MAX));
    }
    match mdt.store().saved_reply(client, xid) {
        Ok(Some(saved)) => {
            tracing::debug!("reconstructed reply for xid {xid}");
            if saved.protocol != nacre_wire::PROTOCOL_VERSION && !saved.body.is_empty() {
                tracing::warn!(
                    "{}: saved reply of xid {xid} is in protocol {} (this nacre speaks {}): \
                     its resend is refused",
                    mdt.label.name(),
                    saved.protocol,
                    nacre_wire::PROTOCOL_VERSION
                );
            }
            outgoing(saved)
        }
        Ok(None) => Outgoing::error(Status::Io),
        Err(s) => Outgoing::error(s),
    }
}

/// The answer a saved reply gives (to a resend, or to the request that saved it).
///
/// Only bodies in this nacre's protocol are sent: behind the answer's head, encoded now, a
/// body of another protocol version would be read wrong. A saved body of another protocol
/// (saved before an upgrade, its request resent after it) is answered `EPROTO` instead.
/// Protocol 7 (composite layouts) speaks no older version, so the one client that could
/// resend such a request — the protocol-6 process that sent it — is refused before it
/// gets here; a re-encode (the body decoded with the saved version's decoder and encoded in
/// the request's version: docs/formats.md, gap 3) is needed once a server speaks two
/// versions. An error has no
/// body, so it is answered as saved whatever the protocol. This is also why the readers of
/// answer bodies (capas.rs, lib.rs's nodemap mapping, locks.rs) only ever meet bodies of
/// this protocol.
pub(crate) fn outgoing(s: SavedReply) -> Outgoing {
    if s.protocol != nacre_wire::PROTOCOL_VERSION && !s.body.is_empty() {
        return Outgoing::error(Status::Proto);
    }
    Outgoing {
        status: Status::from_code(s.status),
        body: s.body,
        bulk: None,
    }
}

/// Runs a creation coordinated here: `build` checks and records the local changes and
/// returns the reply and the intents; they commit durably with the saved reply, then every
/// intent is driven to its end before the reply (or left to recovery after the wait).
pub(crate) fn coordinate(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    fault_name: &str,
    build: impl FnOnce(&mut Tx<'_>) -> Result<(MdsReply, Vec<IntentRecord>), Status>,
) -> Outgoing {
    let mut tx = mdt.begin();
    let result = build(&mut tx).map(|(r, intents)| {
        crate::changelog_writer::note_op(&mut tx, call, &r);
        let intents: Vec<IntentRecord> = intents
            .into_iter()
            .map(|mut i| {
                i.reply_to = Some((call.client, xid));
                tx.put_intent(&i);
                i
            })
            .collect();
        (r, intents)
    });
    if result.is_err() {
        tx.discard();
    }
    let reply = SavedReply::of(&result.as_ref().map(|(r, _)| r.clone()).map_err(|s| *s));
    tx.save_reply(&call.client, xid, call.replied_below, &reply);
    if let Err(s) = tx.commit_durable() {
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
pub(crate) fn start_removal(
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
            return saved_reply(mdt, &call.client, xid)
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
pub(crate) fn run_intent(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    mut tx: Tx<'_>,
    intent: IntentRecord,
    fault_name: &str,
) -> Outgoing {
    let key = intent.key;
    crate::changelog_writer::remember_origin(mdt, key, call);
    tx.put_intent(&intent);
    if let Err(s) = tx.commit_durable() {
        return Outgoing::error(s);
    }
    // Known to recovery only once durable: the remote part never runs ahead of its intent.
    mdt.intents.lock().expect("intents").insert(key, intent);
    fault::point(fault_name);
    match finish(mdt, key, Duration::from_millis(PEER_WAIT_MS_MAX)) {
        Err(Status::Again) => Outgoing::error(Status::InProgress),
        Err(s) => saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(s)),
        Ok(()) => {
            saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(Status::Io))
        }
    }
}

/// Runs an operation coordinated here whose `prepare` commits its intent (key `key`)
/// itself: a resend is answered from its saved reply or resumes its pending intent;
/// otherwise `prepare` runs (Some(reply): nothing to drive), then the intent is driven to
/// its end and the reply it saved answers (`EINPROGRESS` if a peer stayed unreachable).
pub(crate) fn start_prepared(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    key: Fid,
    fault_name: &str,
    prepare: impl FnOnce() -> Result<Option<Outgoing>, Status>,
) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    if let Some(out) = resume_request(mdt, call, xid) {
        return out;
    }
    match prepare() {
        Ok(Some(out)) => out,
        Ok(None) => {
            fault::point(fault_name);
            match finish(mdt, key, Duration::from_millis(PEER_WAIT_MS_MAX)) {
                Err(Status::Again) => Outgoing::error(Status::InProgress),
                Err(s) => saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(s)),
                Ok(()) => saved_reply(mdt, &call.client, xid)
                    .unwrap_or_else(|| Outgoing::error(Status::Io)),
            }
        }
        Err(s) => Outgoing::error(s),
    }
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
    Some(saved_reply(mdt, &call.client, xid).unwrap_or_else(|| Outgoing::error(Status::Io)))
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
pub(crate) fn drive(mdt: &Mdt, fid: Fid, deadline: Instant) -> Result<(), Status> {
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
            rename_steps(mdt, &intent, deadline, &|m, k| finish(m, k, Duration::ZERO))
                .map(|()| MdsReply::Done)
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
                        dir_default: dir_default.clone(),
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

/// The local end of an intent whose remote part answered `result`, in one transaction.
pub(crate) fn conclude(
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
                let change = crate::changelog_writer::Change::new(
                    nacre_wire::mds::changelog::RecordKind::Rmdir,
                    fid,
                    intent.parent,
                    &intent.name,
                );
                crate::changelog_writer::note_concluded(&mut tx, fid, change);
            }
            Some(SavedReply::of(&Ok(MdsReply::Done)))
        }
        (RemoteUpdate::DestroyDir { .. }, Err(s)) => Some(SavedReply::of(&Err(s))),
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
            let change = crate::changelog_writer::Change::new(
                nacre_wire::mds::changelog::RecordKind::HardLink,
                attr.fid,
                intent.parent,
                &intent.name,
            );
            crate::changelog_writer::note_concluded(&mut tx, fid, change);
            let mut attr = attr;
            attr.nlink += 1;
            Some(SavedReply::of(&Ok(MdsReply::Entry {
                attr,
                layout: None,
                size_exact: false,
            })))
        }
        (RemoteUpdate::AddLink { .. }, Err(s)) => Some(SavedReply::of(&Err(s))),
        (RemoteUpdate::InsertEntry { .. }, Ok(())) => Some(SavedReply::of(&Ok(MdsReply::Done))),
        (RemoteUpdate::InsertEntry { .. }, Err(s)) => Some(SavedReply::of(&Err(s))),
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
    tx.del_intent(fid);
    let ticket = tx.commit()?;
    mdt.intents.lock().expect("intents").remove(&fid);
    drop(tx);
    crate::mdt::note_modification(mdt);
    // Durable before the reply: a cross-MDT operation has no transno, so clients do not
    // replay it, and the changes they do replay may depend on it (a create under a name
    // this removal freed). Left to the intent, it would be finished only once the peer MDT
    // answers, possibly after those replays ran.
    mdt.store().wait_durable(ticket)
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
