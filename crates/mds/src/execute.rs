//! Serving one decoded request: the recovery window, lock revocations and intents, the
//! dispatch to each operation, commit with the saved reply (exactly once), reply
//! reconstruction for resends, and replays after a restart.

use crate::dne::{outgoing, saved_reply};
use crate::mdt::{note_modification, Mdt};
use crate::route::{
    mkdir_by_default, new_dir, parent_default, read_only, rename_dir_or_plain, rmdir_dir,
    run_modifying, to_outgoing,
};
use crate::{eviction, export, locks, mdt, migrate, ops, peers, perm, relayout, replay};
use nacre_mdstore::records::SavedReply;
use nacre_net::Outgoing;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply, RemoteUpdate};

pub(crate) fn commit(
    mdt: &Mdt,
    tx: mdt::Tx<'_>,
    result: Result<MdsReply, Status>,
    saved: Option<SavedReply>,
) -> Outgoing {
    let mut tx = tx;
    let destroys = std::mem::take(&mut tx.destroys);
    let ticket = match tx.commit() {
        Ok(t) => t,
        Err(s) => return Outgoing::error(s),
    };
    // Still under the write lock: transnos reach the journal in order.
    mdt.note_written(tx.transno);
    let sync = tx.new_client || tx.durable_before_reply;
    drop(tx);
    note_modification(mdt);
    let synced = mdt.sync_on_reply() || sync;
    if synced {
        if let Err(s) = mdt.store().wait_durable(ticket) {
            return Outgoing::error(s);
        }
    }
    if result.is_ok() {
        mdt.queue_destroys_when_synced(ticket, synced, destroys);
    }
    match saved {
        // In this nacre's protocol (just saved), so never refused by the protocol check.
        Some(saved) => outgoing(saved),
        None => to_outgoing(result),
    }
}

/// Executes one decoded call with request id `xid` from client `nid` on `mdt`, exactly as the
/// service does for a request from the network (reply saving, commit, statistics).
/// mds-survey drives an MDT through this, below the network.
pub fn execute(mdt: &Mdt, call: &MdsCall, xid: u64, nid: &str) -> Outgoing {
    let op = (call.op.opcode() & 0xff) as usize - 1;
    let started = std::time::Instant::now();
    // An evicted client learns it here, before anything runs (peer MDTs are not clients).
    if !mdt.osts.is_peer(&call.client) {
        if let Err(s) = mdt.exports.heard_from(&call.client) {
            return Outgoing::error(s);
        }
    }
    let out = match &call.op {
        MdsOp::Connect => {
            mdt.recovery.connected(&call.client);
            to_outgoing(Ok(MdsReply::Connected {
                epoch: mdt.epoch,
                recovering: mdt.recovery.active(),
                last_committed: mdt.store().last_committed_transno(),
                committed_at_start: mdt.recovery.committed_at_start(),
                // A fileset's root, and a squashed root, are set by the handler, which
                // knows the caller's nodemap.
                root: Fid::ROOT,
                squashed: false,
            }))
        }
        MdsOp::Replay {
            transno,
            op,
            reply,
            pre_versions,
        } => replay(mdt, call, xid, *transno, op, reply, pre_versions),
        // Locks held before a restart: taken back while nothing has changed since.
        MdsOp::LockReplay { locks } => to_outgoing(locks::replay(mdt, &call.client, locks)),
        MdsOp::ReplayDone => match mdt.recovery.done(mdt, &call.client) {
            true => to_outgoing(Ok(MdsReply::Done)),
            false => Outgoing::error(Status::InProgress),
        },
        // While the recovery window is open, only replays change anything: new requests
        // wait (the client resends them), reads too, so none sees a state before replays.
        _ if mdt.recovery.active() && waits_for_recovery(mdt, call) => {
            Outgoing::error(Status::InProgress)
        }
        MdsOp::LockCancel { handles } => to_outgoing(locks::cancel(mdt, &call.client, handles)),
        _ => {
            // Other clients' locks on what the request changes go first; new grants of
            // them wait until it is done.
            let mut _hold = locks::revoke_for(mdt, call);
            // A delegation is granted on what its own revocation held: the hold goes first
            // (a grant to another client in between makes the delegation `EBUSY`).
            if matches!(call.op, MdsOp::DelegateDir { .. }) {
                _hold = None;
            }
            let (out, grants) = match &call.op {
                MdsOp::CreateBatch { .. } => {
                    let run = || dispatch(mdt, call, xid);
                    let (out, locks) = crate::batch_locks::granted_with(mdt, call, xid, run);
                    (out, Grants { lock: None, locks })
                }
                _ => {
                    let (out, lock) = locks::with_intent(mdt, call, || dispatch(mdt, call, xid));
                    let locks = Vec::new();
                    (out, Grants { lock, locks })
                }
            };
            let granted = grants.lock.is_some() || !grants.locks.is_empty();
            LAST_GRANT.with(|c| c.set(granted.then_some((call.client, xid, grants))));
            out
        }
    };
    let us = started.elapsed().as_micros() as u64;
    mdt.md_stats.record(op, us, 0);
    mdt.job_stats
        .record(nacre_types::jobid::clamp(&call.jobid), op, us, 0);
    mdt.export_stats.record(nid, op, us, 0);
    out
}

/// Runs a request past the recovery gate: the migration gate, then the operation.
pub(crate) fn dispatch(mdt: &Mdt, call: &MdsCall, xid: u64) -> Outgoing {
    if !call.cred.is_valid() {
        return Outgoing::error(Status::Proto);
    }
    if let Err(denied) = perm::check(mdt, call) {
        // A resend of a request that ran already is answered as it was, whatever changed
        // since.
        if call.op.is_modifying() {
            if let Some(out) = saved_reply(mdt, &call.client, xid) {
                return out;
            }
        }
        let op = (call.op.opcode() & 0xff) as usize - 1;
        mdt.denied_stats.record(op, 0, 0);
        return Outgoing::error(denied);
    }
    // A file whose migration's fence window is open hands out no layout until the swap
    // (or abort): the asker waits (docs/migrate.md).
    let layout_wanted = match &call.op {
        // An intent too: a component instantiated now would have objects the fence
        // missed.
        MdsOp::GetLayout { fid } | MdsOp::Open { fid, .. } | MdsOp::LayoutIntent { fid, .. } => {
            Some(*fid)
        }
        MdsOp::GetAttr { fid } if call.lock_bits & nacre_ldlm::msg::LAYOUT != 0 => Some(*fid),
        _ => None,
    };
    if layout_wanted.is_some_and(|f| relayout::fenced(mdt, f)) {
        return Outgoing::error(Status::InProgress);
    }
    // Bytes on the MDT of a file whose fence window is open are frozen too (the migrator
    // compares them with its copy; a change now would be lost at the swap): changes wait.
    let dom_changed = match &call.op {
        MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => Some(*fid),
        MdsOp::SetAttr { fid, attr } if attr.size.is_some() => Some(*fid),
        _ => None,
    };
    if dom_changed.is_some_and(|f| relayout::fenced(mdt, f)) {
        return Outgoing::error(Status::InProgress);
    }
    // Modifying client requests (and opens) pass the gate a migration closes while it
    // freezes; one touching a frozen inode is resent by the client later.
    let gated = (call.op.is_modifying() || matches!(call.op, MdsOp::Open { .. }))
        && !matches!(call.op, MdsOp::Close { .. } | MdsOp::Migrate { .. });
    let _gate = gated.then(|| mdt.gate.read().expect("gate"));
    if gated && mdt.held_by_migration(&call.op) {
        return Outgoing::error(Status::InProgress);
    }
    // Inodes within quotas, checked before the request runs (a resend of one that ran is
    // answered as it was, whatever the quotas say now).
    if let Err(s) = crate::quota::precheck(mdt, call) {
        if saved_reply(mdt, &call.client, xid).is_none() {
            return Outgoing::error(s);
        }
    }
    // Bytes on the MDT within block quotas: their growth reserved until the request is done.
    let _dom_reserved = match crate::quota::reserve_dom(mdt, &call.op) {
        Ok(r) => r,
        Err(s) if saved_reply(mdt, &call.client, xid).is_none() => return Outgoing::error(s),
        Err(_) => None,
    };
    match &call.op {
        MdsOp::Migrate {
            fid,
            parent,
            name,
            target,
        } => crate::dne::start_prepared(mdt, call, xid, *fid, "mds.migrate.after_intent", || {
            migrate::prepare(mdt, call, xid, *fid, *parent, name, *target)
        }),
        MdsOp::MkdirOn {
            parent,
            name,
            perm,
            uid,
            gid,
            mdt: target,
        } if *target != mdt.label.index => {
            let target = if *target == nacre_wire::mds::MDT_INDEX_ANY {
                crate::ops::mkdir_remote::choose_mdt(mdt)
            } else {
                Ok(*target)
            };
            match target {
                Ok(t) if t == mdt.label.index => run_modifying(mdt, call, xid),
                Ok(t) => {
                    let dir = new_dir(
                        *parent,
                        name,
                        (*perm, *uid, *gid),
                        parent_default(mdt, *parent),
                    );
                    crate::ops::mkdir_remote::mkdir_remote(mdt, call, xid, dir, t)
                }
                Err(s) => Outgoing::error(s),
            }
        }
        MdsOp::MkdirStriped {
            parent,
            name,
            perm,
            uid,
            gid,
            count,
            start,
            hash,
        } => {
            let dir = new_dir(
                *parent,
                name,
                (*perm, *uid, *gid),
                parent_default(mdt, *parent),
            );
            crate::ops::mkdir_striped::mkdir_striped(mdt, call, xid, dir, *count, *start, *hash)
        }
        MdsOp::Mkdir {
            parent,
            name,
            perm,
            uid,
            gid,
        } => match crate::ops::dir_stripe::dir_default(mdt, *parent) {
            // The parent's default (setdirstripe -D) shapes the new directory.
            Ok(Some(d)) => {
                let dir = new_dir(*parent, name, (*perm, *uid, *gid), Some(d));
                mkdir_by_default(mdt, call, xid, dir, d)
            }
            _ => run_modifying(mdt, call, xid),
        },
        MdsOp::GetDirStripe { fid } => {
            to_outgoing(crate::ops::dir_stripe::dir_stripe(mdt, *fid).map(MdsReply::DirStripe))
        }
        MdsOp::GetDirDefault { fid } => {
            to_outgoing(crate::ops::dir_stripe::dir_default(mdt, *fid).map(MdsReply::DirDefault))
        }
        MdsOp::Rmdir { parent, name } => match mdt.lookup(*parent, name) {
            Ok(Some(d)) if d.kind == nacre_types::FileKind::Directory => {
                rmdir_dir(mdt, call, xid, *parent, name, d.fid)
            }
            _ => run_modifying(mdt, call, xid),
        },
        MdsOp::Link { fid, parent, name } if fid.mdt_index() != mdt.label.index => {
            crate::ops::link_remote::link_remote(mdt, call, xid, *fid, *parent, name)
        }
        MdsOp::Unlink { parent, name } => match mdt.lookup(*parent, name) {
            Ok(Some(d))
                if d.kind != nacre_types::FileKind::Directory
                    && d.fid.mdt_index() != mdt.label.index =>
            {
                crate::ops::unlink_remote::unlink_remote(mdt, call, xid, *parent, name, d.fid)
            }
            _ => run_modifying(mdt, call, xid),
        },
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            noreplace,
        } if dst_parent.mdt_index() != mdt.label.index => crate::ops::rename_remote::rename_remote(
            mdt,
            call,
            xid,
            *src_parent,
            src_name,
            *dst_parent,
            dst_name,
            *noreplace,
        ),
        // Within this MDT, an inode of another MDT moved or a file of another MDT replaced:
        // in the steps of a rename across MDTs, so its links there follow.
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            noreplace,
        } if peers::mdt_count(mdt) > 1 => {
            use crate::ops::rename_remote::{local_rename, rename_remote, LocalRename};
            match local_rename(mdt, *src_parent, src_name, *dst_parent, dst_name) {
                LocalRename::Same => to_outgoing(Ok(MdsReply::Done)),
                LocalRename::Steps => rename_remote(
                    mdt,
                    call,
                    xid,
                    *src_parent,
                    src_name,
                    *dst_parent,
                    dst_name,
                    *noreplace,
                ),
                LocalRename::Plain if src_parent != dst_parent => {
                    rename_dir_or_plain(mdt, call, xid, *src_parent, src_name, *dst_parent)
                }
                LocalRename::Plain => run_modifying(mdt, call, xid),
            }
        }
        MdsOp::RenameLock { owner, acquire } => to_outgoing(
            crate::ops::rename_remote::rename_lock(mdt, *owner, *acquire),
        ),
        MdsOp::AllocFid => to_outgoing(crate::ops::remote_update::alloc_fid(mdt)),
        MdsOp::DelegateDir { fid } => to_outgoing(delegable(mdt, *fid)),
        MdsOp::Reopen { opens }
            if opens.len() <= nacre_wire::mds::REOPEN_FIDS_MAX
                && opens.iter().map(|r| u64::from(r.handles)).sum::<u64>()
                    <= nacre_wire::mds::REOPEN_HANDLES_MAX =>
        {
            let done = eviction::reopen(mdt, &call.client, &call.cred, opens);
            to_outgoing(done.map(|()| MdsReply::Done))
        }
        MdsOp::Reopen { .. } => Outgoing::error(Status::TooBig),
        MdsOp::Disconnect => {
            to_outgoing(eviction::disconnect(mdt, &call.client).map(|()| MdsReply::Done))
        }
        MdsOp::Update(u) => to_outgoing(match u {
            // A directory migration's updates are crate::migrate's.
            RemoteUpdate::Freeze { .. }
            | RemoteUpdate::Adopt { .. }
            | RemoteUpdate::Repoint { .. } => crate::migrate::apply(mdt, u),
            _ => crate::ops::remote_update::apply(mdt, u, &|m, k| {
                crate::dne::finish(m, k, std::time::Duration::ZERO)
            }),
        }),
        MdsOp::ReadDirPlus { fid, after, count } => to_outgoing(ops::readdir::plus(
            mdt,
            &call.client,
            *fid,
            after.as_deref(),
            *count,
            call.lock_bits & nacre_ldlm::msg::ENTRY_BITS,
        )),
        op if op.is_modifying() => run_modifying(mdt, call, xid),
        op => to_outgoing(read_only(mdt, &call.client, op)),
    }
}

/// The attributes of directory `fid` if it may be delegated to a client (`DelegateDir`,
/// whose lock is granted before this runs): a plain directory of this MDT, while no inode
/// quota is enforced here; with how many bytes its new files may carry with their creates
/// (`ops::batch::data_bytes_max`), whether its holder may answer mkdirs, and whether it is
/// empty.
fn delegable(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    if fid.mdt_index() != mdt.label.index {
        return Err(Status::NotSupp);
    }
    let rec = mdt.inode(fid)?;
    if rec.attr.kind != nacre_types::FileKind::Directory {
        return Err(Status::NotDir);
    }
    // (A change of the nodemaps waits for every delegation to come back: none meanwhile.)
    if mdt.store().dir_stripe(fid)?.is_some()
        || mdt.quota.any_limited()
        || crate::delegations::qos_capped(mdt)
        || mdt
            .nodemaps_changing
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
    {
        return Err(Status::NotSupp);
    }
    // Its new files can be placed: the MDT will not refuse one the holder answered (a
    // change of the pools calls delegations back first: delegations::watch_pools).
    if mdt.osts.pools_changing() || crate::placement::placeable(mdt, &rec).is_err() {
        return Err(Status::NotSupp);
    }
    let data_bytes_max = ops::batch::data_bytes_max(mdt, &rec)?;
    // Subdirectories the holder answers are plain ones of this MDT: only where no default
    // directory striping shapes them (another client's `SetDirDefault` of it waits for the
    // delegation: locks.rs `park_read`).
    let mkdirs = ops::dir_stripe::dir_default(mdt, fid)?.is_none();
    Ok(MdsReply::Delegated {
        attr: rec.attr,
        data_bytes_max,
        mkdirs,
        empty: mdt.store().dir_is_empty(fid)?,
    })
}

/// (client, xid, transno, versions before the change) of the request a thread just ran.
pub(crate) type HandedTransno = ([u8; 16], u64, u64, Vec<(Fid, u64)>);

thread_local! {
    /// The transno the request this thread just ran got: (client, xid, transno), handed
    /// from the transaction to [`answer`] without reading the saved reply back.
    pub(crate) static LAST_TRANSNO: std::cell::Cell<Option<HandedTransno>> =
        const { std::cell::Cell::new(None) };
}

/// The locks granted with a reply: one on the inode it names ([`locks::with_intent`]), or
/// one per file a batch made ([`crate::batch_locks`]).
pub(crate) struct Grants {
    lock: Option<nacre_ldlm::msg::LockRef>,
    locks: Vec<nacre_ldlm::msg::LockRef>,
}

thread_local! {
    /// The locks granted with the reply of the request this thread just ran (client, xid),
    /// handed from [`execute`] to [`answer`].
    pub(crate) static LAST_GRANT: std::cell::Cell<Option<([u8; 16], u64, Grants)>> =
        const { std::cell::Cell::new(None) };
}

/// Wraps a successful reply for the network ([`nacre_wire::mds::MdsAnswer`]): the
/// operation's transno (read back from its saved reply) and `last_committed`, before the
/// reply's own bytes.
pub(crate) fn answer(mdt: &Mdt, call: &MdsCall, xid: u64, out: Outgoing) -> Outgoing {
    if out.status != Status::Ok {
        LAST_GRANT.with(|c| c.take());
        return out;
    }
    let op = match &call.op {
        MdsOp::Replay { op, .. } => op.as_ref(),
        op => op,
    };
    let handed = LAST_TRANSNO
        .with(|c| c.take())
        .filter(|(c, x, _, _)| *c == call.client && *x == xid);
    let (transno, pre_versions) = match handed {
        Some((_, _, t, v)) => (t, v),
        // Answered from a saved reply (a resend, a replay already in), or by a path that
        // saves its own: read the transno and versions back.
        None if op.is_modifying() => match mdt.store().saved_reply_or_none(&call.client, xid) {
            Some(s) => (s.transno, s.pre_versions),
            None => (0, Vec::new()),
        },
        None => (0, Vec::new()),
    };
    let last_committed = mdt.store().last_committed_transno();
    let grants = LAST_GRANT
        .with(|c| c.take())
        .filter(|(c, x, _)| *c == call.client && *x == xid)
        .map(|(_, _, g)| g);
    let (lock, locks) = match grants {
        Some(g) => (g.lock, g.locks),
        None => (None, Vec::new()),
    };
    let dir = changed_dir(mdt, &call.op);
    let mut body = nacre_wire::mds::MdsAnswer::encode_head(
        transno,
        last_committed,
        mdt.epoch,
        &pre_versions,
        lock,
        &locks,
        dir.as_ref(),
    );
    body.extend_from_slice(&out.body);
    Outgoing { body, ..out }
}

/// The attributes, as they are now, of the directory a name change (`op`) changed, for
/// the client to keep under its `UPDATE` lock on it (the kernel asks for them after every
/// such change, as it drops its own). A replay gets none.
pub(crate) fn changed_dir(mdt: &Mdt, op: &MdsOp) -> Option<nacre_types::Attr> {
    mdt.inode(op.names_changed_in()?)
        .ok()
        .map(|rec| rec.attr)
        .filter(|a| a.kind == nacre_types::FileKind::Directory)
}

/// Requests that wait while the recovery window is open: all but those of peer MDTs and
/// the ones that keep a client's connection alive.
pub(crate) fn waits_for_recovery(mdt: &Mdt, call: &MdsCall) -> bool {
    !matches!(
        call.op,
        MdsOp::Ping | MdsOp::Disconnect | MdsOp::Reopen { .. } | MdsOp::StatFs
    ) && !mdt.osts.is_peer(&call.client)
}

/// A client's replay of `op`, which it was answered with `transno` before the restart:
/// runs in transno order among all clients' replays (replay.rs), with its original xid.
#[allow(clippy::too_many_arguments)]
pub(crate) fn replay(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    transno: u64,
    op: &MdsOp,
    reply: &MdsReply,
    pre_versions: &[(Fid, u64)],
) -> Outgoing {
    if !op.is_modifying() {
        return Outgoing::error(Status::Proto);
    }
    let mut op = op.clone();
    // Opens are re-registered by the client's `Reopen`, for the files still open.
    if let MdsOp::Create { open, .. } = &mut op {
        *open = false;
    }
    let inner = MdsCall { op, ..call.clone() };
    match mdt.recovery.wait_turn(mdt, &call.client, transno) {
        // Recovery is over (or this client was evicted when it closed): too late, its
        // change is lost; it becomes a new client.
        replay::Turn::TooLate => Outgoing::error(Status::Shutdown),
        replay::Turn::Unknown => {
            nacre_net::caller::refused(|| {
                format!(
                    "{}: replay of transno {transno} refused: client {} was not one of this \
                     MDT's when it restarted, or the transno is past any it gave",
                    mdt.label.name(),
                    export::client_name(&call.client)
                )
            });
            Outgoing::error(Status::Perm)
        }
        // Committed before the restart: answered from its saved reply if kept.
        replay::Turn::AlreadyIn => {
            saved_reply(mdt, &call.client, xid).unwrap_or_else(|| to_outgoing(Ok(MdsReply::Done)))
        }
        replay::Turn::Run => {
            // Version checks: every inode it changed must be as it found it the first time.
            for (fid, before) in pre_versions {
                match mdt.version_of(*fid) {
                    Ok(now) if now == *before => {}
                    now => {
                        tracing::warn!(
                            "{}: replay of transno {transno} by client {} refused: {fid} is at \
                             version {now:?}, it found {before} (a change before it was lost)",
                            mdt.label.name(),
                            export::client_name(&call.client)
                        );
                        mdt.recovery.replayed(
                            &call.client,
                            transno,
                            replay::Outcome::VersionMismatch,
                        );
                        return Outgoing::error(Status::Stale);
                    }
                }
            }
            // It keeps its transno; an inode it created comes back with its FID and layout.
            let said = match (reply, &inner.op) {
                (MdsReply::Entry { attr, layout, .. }, _) => Some((attr.fid, layout.clone())),
                // The components it instantiated keep their objects (ops::layout::intent).
                (
                    MdsReply::Layout(nacre_wire::mds::LayoutInfo::File(layout)),
                    MdsOp::LayoutIntent { fid, .. },
                ) => Some((*fid, Some(layout.clone()))),
                _ => None,
            };
            let created = match crate::replay_mdt::check_created(mdt, &inner.op, said) {
                Ok(c) => c,
                Err(s) => {
                    mdt.recovery.refused();
                    nacre_net::caller::refused(|| {
                        format!(
                            "{}: replay of transno {transno} by client {} refused: the inode \
                             it names is not one it could have created ({s})",
                            mdt.label.name(),
                            export::client_name(&call.client)
                        )
                    });
                    mdt.recovery
                        .replayed(&call.client, transno, replay::Outcome::Failed);
                    return Outgoing::error(s);
                }
            };
            let batch = match crate::replay_mdt::check_batch(mdt, &inner.op, reply) {
                Ok(b) => b,
                Err(s) => {
                    mdt.recovery.refused();
                    mdt.recovery
                        .replayed(&call.client, transno, replay::Outcome::Failed);
                    return Outgoing::error(s);
                }
            };
            let ctx = mdt::ReplayCtx {
                transno,
                created,
                batch,
            };
            mdt.set_replay_hint(&call.client, xid, ctx);
            let out = dispatch(mdt, &inner, xid);
            mdt.take_replay_hint(&call.client, xid);
            let ok = out.status == Status::Ok;
            if !ok {
                tracing::warn!(
                    "{}: replay of transno {transno} by client {} failed: {}",
                    mdt.label.name(),
                    export::client_name(&call.client),
                    out.status
                );
            }
            let outcome = if ok {
                replay::Outcome::Done
            } else {
                replay::Outcome::Failed
            };
            mdt.recovery.replayed(&call.client, transno, outcome);
            out
        }
    }
}
