//! Which way each request runs: read-only requests, the modifying operations of one MDT
//! (in one transaction), and those routed to the cross-MDT paths (remote and striped
//! directories, renames whose inodes live elsewhere).

use crate::dne::{reconstruct, saved_reply};
use crate::execute::{commit, LAST_TRANSNO};
use crate::mdt::Mdt;
use crate::{changelog, changelog_writer, dne, links, mdt, ops, relayout};
use nacre_mdstore::records::SavedReply;
use nacre_net::Outgoing;
use nacre_types::{Fid, Status};
use nacre_wire::encode_body;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};

pub(crate) fn read_only(mdt: &Mdt, client: &[u8; 16], op: &MdsOp) -> Result<MdsReply, Status> {
    match op {
        // A directory migrated away answers with its new FID (the kernel may still hold the
        // old one, and asks it for attributes before using a listing it cached).
        MdsOp::GetAttr { fid } => match ops::getattr::run(mdt, *fid) {
            Err(Status::Stale) => match mdt.moved_to(*fid)? {
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
        MdsOp::DomRead { fid, offset, len } => ops::dom::read(mdt, *fid, *offset, *len),
        MdsOp::StatFs => mdt.statfs().map(MdsReply::StatFs),
        MdsOp::ScanInodes { after, count } => ops::scan::inodes(mdt, *after, *count),
        MdsOp::ScanDirents { after, count } => ops::scan::dirents(mdt, after.as_ref(), *count),
        MdsOp::Sync => {
            mdt.store().sync_all()?;
            Ok(MdsReply::Done)
        }
        MdsOp::ChangelogRead { user, from, count } => changelog::read(mdt, *user, *from, *count),
        MdsOp::ChangelogUsers => Ok(changelog::users(mdt)),
        MdsOp::FidLinks { fid } => links::links(mdt, *fid),
        MdsOp::StatMany { fids } => ops::scan::stat_many(mdt, fids),
        MdsOp::AccessBatch { items } => ops::access_batch::run(mdt, items),
        MdsOp::ScanStats { after, count } => ops::scan::scan_stats(mdt, *after, *count),
        MdsOp::DestroyPending => Ok(MdsReply::DestroyPending(mdt.destroy_space.by_ost())),
        MdsOp::QuotaUsage { ids } => mdt.quota_usage(ids),
        MdsOp::QuotaCheck { repair } => mdt.quota_check(*repair),
        _ => Err(Status::Proto),
    }
}

pub(crate) fn modify(tx: &mut mdt::Tx<'_>, op: &MdsOp) -> Result<MdsReply, Status> {
    use ops::create::CreateArgs;
    use ops::rename::RenameArgs;
    match op {
        MdsOp::CreateBatch { parent, items } => {
            let replayed = std::mem::take(&mut tx.replayed_batch);
            ops::batch::run(tx, *parent, items, &replayed)
        }
        MdsOp::UnlinkBatch { parent, items } => ops::unlink_batch::run(tx, *parent, items),
        MdsOp::GrantFids { count } => {
            let count = (*count).min(nacre_wire::mds::FID_GRANT_COUNT_MAX);
            let g = tx.grant_fids(count)?;
            Ok(MdsReply::FidRange {
                first: g.first,
                count: g.count,
            })
        }
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
        MdsOp::SetLayout { fid, spec } => ops::layout::set(tx, *fid, spec),
        MdsOp::LayoutIntent { fid, end } => ops::layout::intent(tx, *fid, *end),
        MdsOp::DomWrite { fid, offset, data } => ops::dom::write(tx, *fid, *offset, data),
        MdsOp::DomAppend { fid, data } => ops::dom::append(tx, *fid, data),
        MdsOp::ChangelogRegister { name } => changelog::register(tx, name),
        MdsOp::ChangelogDeregister { user } => changelog::deregister(tx, *user),
        MdsOp::ChangelogClear { user, upto } => changelog::clear(tx, *user, *upto),
        MdsOp::RelayoutBegin { fid, spec } => relayout::begin(tx, *fid, *spec),
        MdsOp::RelayoutFence { fid } => relayout::fence(tx, *fid),
        MdsOp::RelayoutSwap { fid } => relayout::swap(tx, *fid),
        MdsOp::RelayoutAbort { fid } => relayout::abort(tx, *fid),
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
/// and its reply commit together to the journal; the reply waits for the journal's sync only
/// with `sync_on_reply`, for a client's first change or where the change asks for it
/// (docs/mds.md, "Commit, sync and saved replies").
pub(crate) fn run_modifying(mdt: &Mdt, call: &MdsCall, xid: u64) -> Outgoing {
    run_modifying_with(mdt, call, xid, false)
}

/// [`run_modifying`]; `ancestry_checked`: a directory rename's loop check was made across
/// MDTs under the rename lock.
pub(crate) fn run_modifying_with(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    ancestry_checked: bool,
) -> Outgoing {
    let mut tx = mdt.begin();
    tx.ancestry_checked = ancestry_checked;
    tx.client = call.client;
    tx.cred = call.cred.clone();
    if let Some(ctx) = mdt.take_replay_hint(&call.client, xid) {
        tx.replay = ctx.created;
        tx.replayed_batch = ctx.batch;
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
        touch,
        noatime,
    } = call.op
    {
        // A writer's close makes a changelog record, and the close of a handle that wrote
        // moves the file's modification and change times to now (the writes came before
        // it; ops::open::touch_written): either gets a transno, so a close answered
        // before it was durable is replayed after a restart (the replay only records and
        // touches: the opens were counted again by the client's reopen).
        let records = writer && mdt.changelog.enabled();
        let replayed = tx.forced_transno.is_some();
        // Only a handle that could write moves the times: the client holds the file open
        // for writing (a close of anything else says `written` in vain), or, replayed
        // after a restart (its handle is gone), the caller may write the file. And only if
        // the client says the writes came after its own last setting of the times.
        let touches = written
            && touch
            && writer
            && match replayed {
                false => mdt.exports.holds_write_open(&call.client, fid),
                true => crate::perm::may_write(mdt, &call.cred, fid),
            };
        if records || touches {
            tx.reserve_transno();
        }
        // Only a close of an open this client holds drops one: a resent close, or one from
        // before an eviction or a restart (whose opens are gone), must not drop another
        // client's. (It still records and touches: a close whose first run did is
        // answered from its saved reply above, so this is its only run.)
        let mut sizes_closed: Option<u32> = None;
        let leave_writers = |remaining: Option<u32>| {
            if let Some(remaining) = remaining {
                if mdt
                    .sizes
                    .closed(fid, &call.client, writer, written, remaining)
                {
                    mdt.kick_destroyer();
                }
            }
        };
        if !replayed && !mdt.exports.closed(&call.client, fid, writer) {
            if !records && !touches {
                return Outgoing::ok(encode_body(&MdsReply::Done));
            }
        } else if !replayed {
            let remaining = mdt.exports.open_count(&call.client, fid);
            // A close that moves the file's times leaves the writers after its commit: a
            // regular file's UPDATE lock is granted only while no other client writes it
            // (Mdt::grant_lock), so another client's lock is granted, and its attributes
            // read, only once the new times are there to read.
            match touches {
                true => sizes_closed = Some(remaining),
                false => {
                    if mdt
                        .sizes
                        .closed(fid, &call.client, writer, written, remaining)
                    {
                        mdt.kick_destroyer();
                    }
                }
            }
            if let Err(s) = ops::open::close(&mut tx, fid, !writer && !noatime) {
                leave_writers(sizes_closed);
                return Outgoing::error(s);
            }
        }
        if !records && !touches {
            return match tx.is_empty() {
                true => Outgoing::ok(encode_body(&MdsReply::Done)),
                false => commit(mdt, tx, Ok(MdsReply::Done), None),
            };
        }
        let reply = match touches {
            true => match ops::open::touch_written(&mut tx, fid) {
                Ok(Some(attr)) => MdsReply::Attr(attr),
                Ok(None) => MdsReply::Done,
                Err(s) => {
                    tx.discard();
                    tx.release_transno();
                    leave_writers(sizes_closed);
                    return Outgoing::error(s);
                }
            },
            false => MdsReply::Done,
        };
        if records {
            changelog_writer::note_close(&mut tx, call, fid, written);
        }
        let transno = tx.assign_transno();
        let pre_versions = std::mem::take(&mut tx.pre_versions);
        let result = Ok(reply);
        let saved = SavedReply {
            transno,
            pre_versions: pre_versions.clone(),
            ..SavedReply::of(&result)
        };
        LAST_TRANSNO.with(|c| c.replace(Some((call.client, xid, transno, pre_versions))));
        tx.save_reply(&call.client, xid, call.replied_below, &saved);
        let out = commit(mdt, tx, result, Some(saved));
        leave_writers(sizes_closed);
        return out;
    }
    // A change gets a transaction number (before it runs: the inodes it changes take it
    // as their version); the client keeps it for replay until the MDT says it is
    // committed. A failed operation changed nothing and gives the number back.
    tx.reserve_transno();
    let result = modify(&mut tx, &call.op);
    if let Ok(reply) = &result {
        changelog_writer::note_op(&mut tx, call, reply);
    }
    let transno = if result.is_ok() {
        tx.assign_transno()
    } else {
        tx.discard();
        tx.release_transno();
        0
    };
    let pre_versions = std::mem::take(&mut tx.pre_versions);
    let saved = SavedReply {
        transno,
        pre_versions: pre_versions.clone(),
        ..SavedReply::of(&result)
    };
    LAST_TRANSNO.with(|c| c.replace(Some((call.client, xid, transno, pre_versions))));
    tx.save_reply(&call.client, xid, call.replied_below, &saved);
    let freed = matches!(
        call.op,
        MdsOp::ChangelogClear { .. } | MdsOp::ChangelogDeregister { .. }
    ) && result.is_ok();
    let out = commit(mdt, tx, result, Some(saved));
    if freed && out.status == Status::Ok {
        // Records every consumer is done with go now.
        if let Err(s) = changelog::purge(mdt) {
            tracing::warn!("{}: changelog purge: {s}", mdt.label.name());
        }
    }
    out
}

/// A mkdir in a directory with default `d`: placed (`-c 1`) or striped as it says.
pub(crate) fn mkdir_by_default(
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
pub(crate) fn new_dir<'a>(
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
pub(crate) fn parent_default(mdt: &Mdt, parent: Fid) -> Option<nacre_types::dirstripe::DirDefault> {
    crate::ops::dir_stripe::dir_default(mdt, parent)
        .ok()
        .flatten()
}

/// `rmdir` of an entry naming directory `fid`: local, remote or striped.
pub(crate) fn rmdir_dir(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    parent: Fid,
    name: &[u8],
    fid: Fid,
) -> Outgoing {
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
pub(crate) fn rename_dir_here(
    mdt: &Mdt,
    call: &MdsCall,
    xid: u64,
    dst_parent: Fid,
    fid: Fid,
) -> Outgoing {
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
pub(crate) fn rename_dir_or_plain(
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
