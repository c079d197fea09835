//! The metadata server (MDS): serves MDTs.
//!
//! An MDT keeps inodes, directory entries, layouts and xattrs in the embedded KV store
//! ([`records`] lists the tables). Every modifying request runs under the MDT's write lock,
//! adds its changes **and its reply** to one batch, commits it, and replies only after the
//! batch is durable — group commit lets concurrent requests share one journal sync. A resent
//! request (same client uuid and xid) finds its saved reply instead of running twice (reply
//! reconstruction). File creation touches only the MDT: OST object ids are allocated here
//! and the objects are created by their first write.
//!
//! Invariants: a reply is never sent for a change that is not durable; a name maps to exactly
//! one inode; an inode's objects are destroyed only after the change that dropped its last
//! link (and last opener) is durable.

pub mod destroy;
pub mod dne;
pub mod export;
pub mod flocks;
pub mod locks;
pub mod mdt;
pub mod migrate;

pub mod ops;
pub mod osp;
pub mod owners;
pub mod perm;
pub mod records;
pub mod replay;
pub mod sizes;
pub mod stats;

use mdt::{kv_err, note_modification, Mdt};
use nacre_kv::Batch;
use nacre_net::{Handler, Incoming, Outgoing};
use nacre_osd::mmp::Guard;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use nacre_wire::{decode_body, encode_body};
use records::{reply_key, SavedReply, REPLIES};
use std::collections::HashMap;

use std::sync::{Arc, RwLock};

/// The MDS request handler for every MDT of this process.
#[derive(Default)]
pub struct MdsHandler {
    targets: RwLock<HashMap<u32, Guarded>>,
}

/// A target and, in a failover pair, the multi-mount protection it is served under.
type Guarded = (Arc<Mdt>, Option<Arc<Guard>>);

impl MdsHandler {
    /// Adds an MDT.
    pub fn add_target(&self, mdt: Arc<Mdt>) {
        self.add_guarded(mdt, None);
    }

    /// Adds an MDT of a failover pair: its requests are served only while `guard` holds
    /// the target (multi-mount protection), else answered `ENODEV` (the client tries the
    /// partner).
    pub fn add_guarded(&self, mdt: Arc<Mdt>, guard: Option<Arc<Guard>>) {
        let index = mdt.label.index;
        self.targets
            .write()
            .expect("targets")
            .insert(index, (mdt, guard));
    }

    /// Stops serving MDT `index`: its requests are answered `ENODEV` from now on.
    pub fn remove_target(&self, index: u32) -> Option<Arc<Mdt>> {
        let mdt = self
            .targets
            .write()
            .expect("targets")
            .remove(&index)
            .map(|(m, _)| m)?;
        // Its locks go with it; parked polls are answered so clients move on.
        mdt.ldlm.shut();
        mdt.flocks.shut();
        Some(mdt)
    }

    /// The MDT with `index`.
    pub fn target(&self, index: u32) -> Option<Arc<Mdt>> {
        self.targets
            .read()
            .expect("targets")
            .get(&index)
            .map(|(m, _)| m.clone())
    }

    /// The MDT with `index` if this server may serve it now (see [`MdsHandler::add_guarded`]).
    fn serving(&self, index: u32) -> Option<Arc<Mdt>> {
        let (mdt, guard) = self.targets.read().expect("targets").get(&index).cloned()?;
        guard.is_none_or(|g| g.holds()).then_some(mdt)
    }
}

fn read_only(mdt: &Mdt, client: &[u8; 16], op: &MdsOp) -> Result<MdsReply, Status> {
    match op {
        // A directory migrated away answers with its new FID (the kernel may still hold the
        // old one, and asks it for attributes before using a listing it cached).
        MdsOp::GetAttr { fid } => match ops::getattr::run(mdt, *fid) {
            Err(Status::Stale) => match migrate::moved_to(mdt, *fid)? {
                Some(new) => Ok(MdsReply::Remote { fid: new }),
                None => Err(Status::Stale),
            },
            r => r.map(|r| ops::exact_entry(mdt, r)),
        },
        MdsOp::Lookup { parent, name } => {
            ops::lookup::run(mdt, *parent, name).map(|r| ops::exact_entry(mdt, r))
        }
        MdsOp::ReadLink { fid } => ops::readlink::run(mdt, *fid),
        MdsOp::ReadDir { fid, after, count } => {
            ops::readdir::run(mdt, *fid, after.as_deref(), *count)
        }
        MdsOp::Open { fid, access } => ops::open::open(mdt, client, *fid, *access),
        MdsOp::Ping => Ok(MdsReply::Done),
        MdsOp::GetXattr { fid, name } => ops::xattr::get(mdt, *fid, name),
        MdsOp::ListXattr { fid } => ops::xattr::list(mdt, *fid),
        MdsOp::GetLayout { fid } => ops::layout::get(mdt, *fid),
        MdsOp::StatFs => mdt.statfs().map(MdsReply::StatFs),
        MdsOp::ScanInodes { after, count } => ops::scan::inodes(mdt, *after, *count),
        MdsOp::ScanDirents { after, count } => ops::scan::dirents(mdt, after.as_ref(), *count),
        MdsOp::Sync => {
            let last = mdt.kv.last_committed();
            mdt.kv.wait_durable(last).map_err(kv_err)?;
            Ok(MdsReply::Done)
        }
        _ => Err(Status::Proto),
    }
}

fn modify(tx: &mut mdt::Tx<'_>, op: &MdsOp) -> Result<MdsReply, Status> {
    use ops::create::CreateArgs;
    use ops::rename::RenameArgs;
    match op {
        MdsOp::Create {
            parent,
            name,
            kind,
            perm,
            uid,
            gid,
            rdev,
            exclusive,
            open,
            access,
        } => ops::create::run(
            tx,
            CreateArgs {
                parent: *parent,
                name,
                kind: *kind,
                perm: *perm,
                uid: *uid,
                gid: *gid,
                rdev: *rdev,
                exclusive: *exclusive,
                open: *open,
                access: *access,
            },
        ),
        // MkdirOn here: the target MDT is the parent's own, an ordinary mkdir.
        MdsOp::Mkdir {
            parent,
            name,
            perm,
            uid,
            gid,
        }
        | MdsOp::MkdirOn {
            parent,
            name,
            perm,
            uid,
            gid,
            ..
        } => ops::mkdir::run(tx, *parent, name, *perm, *uid, *gid),
        MdsOp::SetDirDefault { fid, default } => {
            crate::ops::dir_stripe::set_dir_default(tx, *fid, *default)
        }
        MdsOp::Symlink {
            parent,
            name,
            target,
            uid,
            gid,
        } => ops::symlink::run(tx, *parent, name, target, *uid, *gid),
        MdsOp::Link { fid, parent, name } => ops::link::run(tx, *fid, *parent, name),
        MdsOp::Unlink { parent, name } => ops::unlink::run(tx, *parent, name),
        MdsOp::Rmdir { parent, name } => ops::rmdir::run(tx, *parent, name),
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            noreplace,
        } => ops::rename::run(
            tx,
            RenameArgs {
                src_parent: *src_parent,
                src_name,
                dst_parent: *dst_parent,
                dst_name,
                noreplace: *noreplace,
            },
        ),
        MdsOp::SetAttr { fid, attr } => ops::setattr::run(tx, *fid, attr),
        MdsOp::SetXattr {
            fid,
            name,
            value,
            flags,
        } => ops::xattr::set(tx, *fid, name, value, *flags),
        MdsOp::RemoveXattr { fid, name } => ops::xattr::remove(tx, *fid, name),
        MdsOp::SetLayout { fid, spec } => ops::layout::set(tx, *fid, *spec),
        _ => Err(Status::Proto),
    }
}

pub(crate) fn to_outgoing(result: Result<MdsReply, Status>) -> Outgoing {
    match result {
        Ok(r) => Outgoing::ok(encode_body(&r)),
        Err(s) => Outgoing::error(s),
    }
}

/// Runs a modifying call exactly once: a saved reply answers a resend; otherwise the change
/// and its reply commit together, and the reply waits for durability.
fn run_modifying(mdt: &Mdt, call: &MdsCall, xid: u64) -> Outgoing {
    run_modifying_with(mdt, call, xid, false)
}

/// [`run_modifying`]; `ancestry_checked`: a directory rename's loop check was made across
/// MDTs under the rename lock.
fn run_modifying_with(mdt: &Mdt, call: &MdsCall, xid: u64, ancestry_checked: bool) -> Outgoing {
    let mut tx = mdt.begin();
    tx.ancestry_checked = ancestry_checked;
    tx.client = call.client;
    if let Some(ctx) = mdt.take_replay_hint(&call.client, xid) {
        tx.replay = ctx.created;
        tx.forced_transno = Some(ctx.transno);
    }
    if tx.has_saved_reply(&call.client, xid) {
        drop(tx);
        return reconstruct(mdt, &call.client, xid);
    }
    if let MdsOp::Close {
        fid,
        writer,
        written,
    } = call.op
    {
        // Only a close of an open this client holds drops one: a resent close, or one from
        // before an eviction or a restart (whose opens are gone), must not drop another
        // client's.
        if !mdt.exports.closed(&call.client, fid) {
            return Outgoing::ok(encode_body(&MdsReply::Done));
        }
        let remaining = mdt.exports.open_count(&call.client, fid);
        if mdt
            .sizes
            .closed(fid, &call.client, writer, written, remaining)
        {
            mdt.kick_destroyer();
        }
        return match ops::open::close(&mut tx, fid) {
            Ok(false) => Outgoing::ok(encode_body(&MdsReply::Done)),
            Ok(true) => commit(mdt, tx, Ok(MdsReply::Done), None),
            Err(s) => Outgoing::error(s),
        };
    }
    // A change gets a transaction number (before it runs: the inodes it changes take it
    // as their version); the client keeps it for replay until the MDT says it is
    // committed. A failed operation changed nothing and gives the number back.
    tx.reserve_transno();
    let result = modify(&mut tx, &call.op);
    let transno = if result.is_ok() {
        tx.assign_transno()
    } else {
        tx.batch = Batch::new();
        tx.release_transno();
        0
    };
    let pre_versions = std::mem::take(&mut tx.pre_versions);
    let saved = SavedReply {
        status: result.as_ref().err().map_or(0, |s| s.code()),
        body: result.as_ref().map(encode_body).unwrap_or_default(),
        transno,
        pre_versions: pre_versions.clone(),
    };
    LAST_TRANSNO.with(|c| c.replace(Some((call.client, xid, transno, pre_versions))));
    tx.save_reply(&call.client, xid, call.replied_below, &saved);
    commit(mdt, tx, result, Some(saved))
}

/// A mkdir in a directory with default `d`: placed (`-c 1`) or striped as it says.
fn mkdir_by_default(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    dir: crate::ops::mkdir_remote::NewDir<'_>,
    d: nacre_types::dirstripe::DirDefault,
) -> Outgoing {
    match d.count {
        1 if d.start == nacre_wire::mds::MDT_INDEX_ANY => {
            match crate::ops::mkdir_remote::choose_mdt(mdt) {
                Ok(t) => crate::ops::mkdir_remote::mkdir_remote(mdt, call, xid, dir, t),
                Err(s) => Outgoing::error(s),
            }
        }
        1 => crate::ops::mkdir_remote::mkdir_remote(mdt, call, xid, dir, d.start),
        -1 => {
            crate::ops::mkdir_striped::mkdir_striped(mdt, call, xid, dir, u32::MAX, d.start, d.hash)
        }
        n => {
            crate::ops::mkdir_striped::mkdir_striped(mdt, call, xid, dir, n as u32, d.start, d.hash)
        }
    }
}

/// A new subdirectory `name` of `parent` with (perm, uid, gid) and the default `parent`
/// gives its subdirectories (`parent_default`, read once by the caller).
fn new_dir<'a>(
    parent: Fid,
    name: &'a [u8],
    owner: (u32, u32, u32),
    parent_default: Option<nacre_types::dirstripe::DirDefault>,
) -> crate::ops::mkdir_remote::NewDir<'a> {
    let (perm, uid, gid) = owner;
    crate::ops::mkdir_remote::NewDir {
        parent,
        name,
        perm,
        uid,
        gid,
        inherit: parent_default.and_then(|d| d.inherited()),
    }
}

/// The default directory `parent` (here) gives its new subdirectories.
fn parent_default(mdt: &Mdt, parent: Fid) -> Option<nacre_types::dirstripe::DirDefault> {
    crate::ops::dir_stripe::dir_default(mdt, parent)
        .ok()
        .flatten()
}

/// `rmdir` of an entry naming directory `fid`: local, remote or striped.
fn rmdir_dir(mdt: &Mdt, call: &MdsCall, xid: u64, parent: Fid, name: &[u8], fid: Fid) -> Outgoing {
    // A resend whose cross-MDT removal is half done (its directory may be gone already, the
    // entry not yet): finish that one. (Every path below checks for a saved reply itself.)
    if let Some(out) = dne::resume_own(mdt, call, xid, fid) {
        return out;
    }
    match crate::ops::dir_stripe::stripe_of(mdt, fid) {
        Ok(Some(stripe)) => {
            crate::ops::rmdir_striped::rmdir_striped(mdt, call, xid, parent, name, fid, stripe)
        }
        Ok(None) if fid.mdt_index() != mdt.label.index => {
            crate::ops::rmdir_remote::rmdir_remote(mdt, call, xid, parent, name, fid)
        }
        Ok(None) => run_modifying(mdt, call, xid),
        Err(s) => Outgoing::error(s),
    }
}

/// A rename on this MDT moving directory `fid` under `dst_parent`, in a file system of
/// several MDTs: the loop check walks `..` across MDTs under the rename lock.
fn rename_dir_here(mdt: &Mdt, call: &MdsCall, xid: u64, dst_parent: Fid, fid: Fid) -> Outgoing {
    if let Some(out) = saved_reply(mdt, &call.client, xid) {
        return out;
    }
    let out = crate::ops::rename_remote::with_rename_lock(mdt, call.client, xid, || {
        match crate::ops::rename_remote::loop_check(mdt, dst_parent, fid) {
            Ok(()) => run_modifying_with(mdt, call, xid, true),
            Err(s) => Outgoing::error(s),
        }
    });
    out.unwrap_or_else(Outgoing::error)
}

/// A rename between two directories of this MDT, in a file system of several MDTs: a
/// directory moves under the rename lock, with the loop check made across MDTs.
fn rename_dir_or_plain(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    src_parent: Fid,
    src_name: &[u8],
    dst_parent: Fid,
) -> Outgoing {
    match mdt.lookup(src_parent, src_name) {
        Ok(Some(d)) if d.kind == nacre_types::FileKind::Directory => {
            rename_dir_here(mdt, call, xid, dst_parent, d.fid)
        }
        _ => run_modifying(mdt, call, xid),
    }
}

/// The saved reply of (client, xid), if the request was executed before: a resend is
/// answered with it instead of running again. A reply to a cross-MDT operation still in
/// progress (its intent pending) waits for the operation to end first.
pub(crate) fn saved_reply(mdt: &Mdt, client: &[u8; 16], xid: u64) -> Option<Outgoing> {
    let known = mdt.begin().has_saved_reply(client, xid);
    known.then(|| reconstruct(mdt, client, xid))
}

/// The saved reply of (client, xid), known to exist, after any cross-MDT operation of that
/// request still pending has ended (called without the write lock: finishing takes it).
fn reconstruct(mdt: &Mdt, client: &[u8; 16], xid: u64) -> Outgoing {
    let pending: Vec<_> = mdt
        .intents
        .lock()
        .expect("intents")
        .iter()
        .filter(|(_, i)| i.reply_to == Some((*client, xid)))
        .map(|(f, _)| *f)
        .collect();
    for fid in pending {
        let _ = dne::finish(
            mdt,
            fid,
            std::time::Duration::from_millis(dne::PEER_WAIT_MS_MAX),
        );
    }
    match mdt.kv.get(REPLIES, &reply_key(client, xid)) {
        Ok(Some(saved)) => match records::decode_saved(&saved) {
            Ok(saved) => {
                tracing::debug!("reconstructed reply for xid {xid}");
                Outgoing {
                    status: Status::from_code(saved.status),
                    body: saved.body,
                    bulk: None,
                }
            }
            Err(s) => Outgoing::error(s),
        },
        Ok(None) => Outgoing::error(Status::Io),
        Err(e) => Outgoing::error(kv_err(e)),
    }
}

fn commit(
    mdt: &Mdt,
    tx: mdt::Tx<'_>,
    result: Result<MdsReply, Status>,
    saved: Option<SavedReply>,
) -> Outgoing {
    let mut tx = tx;
    let batch = std::mem::take(&mut tx.batch);
    let destroys = std::mem::take(&mut tx.destroys);
    let ticket = match mdt.kv.commit(batch) {
        Ok(t) => t,
        Err(e) => return Outgoing::error(kv_err(e)),
    };
    // Still under the write lock: transnos reach the journal in order.
    mdt.note_written(tx.transno);
    let new_client = tx.new_client;
    drop(tx);
    note_modification(mdt);
    if mdt.sync_on_reply() || new_client {
        if let Err(e) = mdt.kv.wait_durable(ticket) {
            return Outgoing::error(kv_err(e));
        }
    }
    if result.is_ok() {
        mdt.queue_destroys(destroys);
    }
    match saved {
        Some(saved) => Outgoing {
            status: Status::from_code(saved.status),
            body: saved.body,
            bulk: None,
        },
        None => to_outgoing(result),
    }
}

/// True if `op` would change an inode a directory migration holds here (the inode itself,
/// the directory of a name, or the inode an entry it renames or removes names).
pub(crate) fn held_by_migration(mdt: &Mdt, op: &MdsOp) -> bool {
    use nacre_wire::mds::RemoteUpdate;
    let frozen = mdt.frozen.lock().expect("frozen");
    if frozen.is_empty() {
        return false;
    }
    let named = |parent: &Fid, name: &[u8]| {
        mdt.lookup(*parent, name)
            .ok()
            .flatten()
            .is_some_and(|d| frozen.contains(&d.fid))
    };
    if let MdsOp::Open { fid, .. } = op {
        // A migrating directory may be opened (listed); its files may not.
        return frozen.contains(fid) && !mdt.intents.lock().expect("intents").contains_key(fid);
    }
    if op.key_fid().is_some_and(|f| frozen.contains(&f)) {
        return true;
    }
    match op {
        MdsOp::Unlink { parent, name } | MdsOp::Rmdir { parent, name } => named(parent, name),
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ..
        } => {
            frozen.contains(dst_parent)
                || named(src_parent, src_name)
                || (dst_parent.mdt_index() == mdt.label.index && named(dst_parent, dst_name))
        }
        MdsOp::Link { fid, parent, .. } => frozen.contains(fid) || frozen.contains(parent),
        MdsOp::Update(RemoteUpdate::InsertEntry { parent, name, .. }) => {
            frozen.contains(parent) || named(parent, name)
        }
        _ => false,
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
                last_committed: mdt
                    .last_committed_transno
                    .load(std::sync::atomic::Ordering::Acquire),
                committed_at_start: mdt.recovery.committed_at_start(),
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
            let _hold = locks::revoke_for(mdt, call);
            let (out, lock) = locks::with_intent(mdt, call, || dispatch(mdt, call, xid));
            LAST_GRANT.with(|c| c.set(lock.map(|l| (call.client, xid, l))));
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
fn dispatch(mdt: &Mdt, call: &MdsCall, xid: u64) -> Outgoing {
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
        return Outgoing::error(denied);
    }
    // Modifying client requests (and opens) pass the gate a migration closes while it
    // freezes; one touching a frozen inode is resent by the client later.
    let gated = (call.op.is_modifying() || matches!(call.op, MdsOp::Open { .. }))
        && !matches!(call.op, MdsOp::Close { .. } | MdsOp::Migrate { .. });
    let _gate = gated.then(|| mdt.gate.read().expect("gate"));
    if gated && held_by_migration(mdt, &call.op) {
        return Outgoing::error(Status::InProgress);
    }
    match &call.op {
        MdsOp::Migrate {
            fid,
            parent,
            name,
            target,
        } => migrate::start(mdt, call, xid, *fid, *parent, name, *target),
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
        } if dne::mdt_count(mdt) > 1 => {
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
        MdsOp::Reopen { opens } if opens.len() <= nacre_wire::mds::REOPEN_FIDS_MAX => {
            to_outgoing(export::reopen(mdt, &call.client, opens).map(|()| MdsReply::Done))
        }
        MdsOp::Reopen { .. } => Outgoing::error(Status::TooBig),
        MdsOp::Disconnect => {
            to_outgoing(export::disconnect(mdt, &call.client).map(|()| MdsReply::Done))
        }
        MdsOp::Update(u) => to_outgoing(crate::ops::remote_update::apply(mdt, u)),
        MdsOp::ReadDirPlus { fid, after, count } => to_outgoing(ops::readdir::plus(
            mdt,
            &call.client,
            *fid,
            after.as_deref(),
            *count,
            call.lock_bits & nacre_ldlm::msg::BITS_ALL,
        )),
        op if op.is_modifying() => run_modifying(mdt, call, xid),
        op => to_outgoing(read_only(mdt, &call.client, op)),
    }
}

/// (client, xid, transno, versions before the change) of the request a thread just ran.
type HandedTransno = ([u8; 16], u64, u64, Vec<(Fid, u64)>);

thread_local! {
    /// The transno the request this thread just ran got: (client, xid, transno), handed
    /// from the transaction to [`answer`] without reading the saved reply back.
        static LAST_TRANSNO: std::cell::Cell<Option<HandedTransno>> =
        const { std::cell::Cell::new(None) };
}

thread_local! {
    /// The lock granted with the reply of the request this thread just ran, handed from
    /// [`execute`] to [`answer`].
    static LAST_GRANT: std::cell::Cell<Option<([u8; 16], u64, nacre_ldlm::msg::LockRef)>> =
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
        None if op.is_modifying() => match mdt
            .kv
            .get(REPLIES, &reply_key(&call.client, xid))
            .ok()
            .flatten()
            .and_then(|v| records::decode_saved(&v).ok())
        {
            Some(s) => (s.transno, s.pre_versions),
            None => (0, Vec::new()),
        },
        None => (0, Vec::new()),
    };
    let last_committed = mdt
        .last_committed_transno
        .load(std::sync::atomic::Ordering::Acquire);
    let lock = LAST_GRANT
        .with(|c| c.take())
        .filter(|(c, x, _)| *c == call.client && *x == xid)
        .map(|(_, _, l)| l);
    let dir = changed_dir(mdt, &call.op);
    let mut body = nacre_wire::mds::MdsAnswer::encode_head(
        transno,
        last_committed,
        mdt.epoch,
        &pre_versions,
        lock,
        dir.as_ref(),
    );
    body.extend_from_slice(&out.body);
    Outgoing { body, ..out }
}

/// The attributes, as they are now, of the directory a name change (`op`) changed, for
/// the client to keep under its `UPDATE` lock on it (the kernel asks for them after every
/// such change, as it drops its own). A replay gets none.
fn changed_dir(mdt: &Mdt, op: &MdsOp) -> Option<nacre_types::Attr> {
    mdt.inode(op.names_changed_in()?)
        .ok()
        .map(|rec| rec.attr)
        .filter(|a| a.kind == nacre_types::FileKind::Directory)
}

/// Requests that wait while the recovery window is open: all but those of peer MDTs and
/// the ones that keep a client's connection alive.
fn waits_for_recovery(mdt: &Mdt, call: &MdsCall) -> bool {
    !matches!(
        call.op,
        MdsOp::Ping | MdsOp::Disconnect | MdsOp::Reopen { .. } | MdsOp::StatFs
    ) && !mdt.osts.is_peer(&call.client)
}

/// A client's replay of `op`, which it was answered with `transno` before the restart:
/// runs in transno order among all clients' replays (replay.rs), with its original xid.
#[allow(clippy::too_many_arguments)]
fn replay(
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
            let created = match reply {
                MdsReply::Entry { attr, layout, .. } => Some((attr.fid, layout.clone())),
                _ => None,
            };
            mdt.set_replay_hint(&call.client, xid, mdt::ReplayCtx { transno, created });
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

impl Handler for MdsHandler {
    fn park(&self, req: Incoming) -> Option<Incoming> {
        // Lock polls wait for callbacks; changes that must wait for other clients' cancels
        // wait parked too. Their opcodes say so before anything is decoded.
        let poll = MdsOp::LockPoll {
            wait_ms: 0,
            epoch: 0,
        };
        let Some(mdt) = self.serving(req.header.target) else {
            return Some(req);
        };
        if flocks::is_flock(req.header.opcode) {
            // Byte-range locks: served here, in memory; a request that must wait stays
            // parked.
            return match decode_body::<MdsCall>(&req.body) {
                Ok(call) => {
                    flocks::serve(&mdt, req, call);
                    None
                }
                Err(_) => Some(req),
            };
        }
        if req.header.opcode != poll.opcode() {
            return locks::park_change(&mdt, req);
        }
        match decode_body::<MdsCall>(&req.body) {
            Ok(MdsCall {
                client,
                op: MdsOp::LockPoll { wait_ms, epoch },
                ..
            }) => {
                // A client that knew another incarnation of the MDT must reconnect (and
                // replay its locks) first: answered at once.
                let wait_ms = if epoch != 0 && epoch != mdt.epoch {
                    0
                } else {
                    wait_ms
                };
                locks::poll(&mdt, client, wait_ms, req);
                None
            }
            _ => Some(req),
        }
    }

    fn handle(&self, req: &Incoming) -> Outgoing {
        let Some(mdt) = self.serving(req.header.target) else {
            return Outgoing::error(Status::NoDev);
        };
        let call: MdsCall = match decode_body(&req.body) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("{}: bad request from {}: {e}", mdt.label.name(), req.peer);
                return Outgoing::error(Status::Proto);
            }
        };
        let out = execute(&mdt, &call, req.header.xid, &nacre_net::peer_nid(&req.peer));
        answer(&mdt, &call, req.header.xid, out)
    }

    fn affinity(&self, req: &Incoming) -> Option<u64> {
        let call: MdsCall = decode_body(&req.body).ok()?;
        let fid = call.op.key_fid()?;
        Some(fid.seq.rotate_left(32) ^ u64::from(fid.oid))
    }

    fn fault_name(&self, req: &Incoming) -> Option<String> {
        let call: MdsCall = decode_body(&req.body).ok()?;
        let op = stats::MD_OPS.get((call.op.opcode() & 0xff) as usize - 1)?;
        Some(format!("mds.{op}"))
    }
}
