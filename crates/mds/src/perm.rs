//! Permission checks: the MDT decides, with the credentials every request carries, what the
//! kernel decides with `default_permissions` (`generic_permission`, `may_delete`,
//! `may_create`, `setattr_prepare`, `xattr_permission`; no ACLs). A client that skips the
//! kernel (the native library) gets the same answers as a FUSE mount, and a later root squash
//! or uid mapping changes the credentials here, in one place.
//!
//! The check runs before the operation, on the inodes as they are then (as the kernel checks
//! cached attributes before calling a file system). An inode on another MDT (a remote entry, a
//! cross-MDT rename's other side) is asked for over the peer connection; if it cannot be
//! reached the request fails, it is never let through unchecked. Denied: `EACCES` for
//! permission bits, `EPERM` for ownership rules (sticky directories, chmod, chown, explicit
//! times, trusted or security attributes, layouts) and for server-to-server requests from a
//! non-root caller. Replays are checked again, with the
//! credentials they carry (`execute::replay` runs them through `dispatch`).

use crate::mdt::Mdt;
use crate::ops::create::{allow, claims};
use nacre_types::cred::{permits, MAY_EXEC, MAY_READ, MAY_WRITE};
use nacre_types::{Attr, Cred, Fid, FileKind, SetAttr, Status};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};

/// The sticky bit (`S_ISVTX`): in such a directory only the owner of an entry, of the
/// directory, or root may remove or rename the entry.
const STICKY: u32 = 0o1000;

std::thread_local! {
    /// Set while [`refuses`] asks: a refusal is not counted or logged then (the request's
    /// own check, when it runs, does that once).
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether [`check`] would refuse `call`, without counting or logging the refusal (the
/// lock paths ask before calling other clients' locks back; the request's own check
/// counts it once).
pub fn refuses(mdt: &Mdt, call: &MdsCall) -> bool {
    QUIET.with(|q| q.set(true));
    let refused = check(mdt, call).is_err();
    QUIET.with(|q| q.set(false));
    refused
}

/// Whether the caller of `call` may run it here; `Ok` lets it run.
pub fn check(mdt: &Mdt, call: &MdsCall) -> Result<(), Status> {
    let (cred, op) = (&call.cred, &call.op);
    // A batch past its bound is refused before anything is looked up for its items.
    if !crate::ops::batch::within_bounds(op) {
        return Err(Status::Inval);
    }
    if cred.is_root() {
        return Ok(());
    }
    match op {
        MdsOp::Lookup { parent, .. } => need(mdt, cred, *parent, MAY_EXEC),
        MdsOp::ReadDir { fid, .. } => need(mdt, cred, *fid, MAY_READ),
        // Advisory locks: the client's kernel checked the file's open mode.
        MdsOp::Flock { .. } | MdsOp::FlockTest { .. } => Ok(()),
        // Listing and looking up every entry.
        MdsOp::ReadDirPlus { fid, .. } => need(mdt, cred, *fid, MAY_READ | MAY_EXEC),
        MdsOp::Open { fid, access } => need(mdt, cred, *fid, *access),
        MdsOp::Create {
            parent,
            name,
            uid,
            gid,
            exclusive,
            access,
            kind,
            ..
        } => {
            let dir = need_dir(mdt, cred, *parent)?;
            match existing(mdt, *parent, name)? {
                // Opening what is there: the access it wants.
                Some(a) if !*exclusive => allow(permits_attr(cred, &a, *access), Status::Access),
                Some(_) => Ok(()),
                // `mknod` of a device needs CAP_MKNOD: root's (fifos and sockets anyone's).
                None if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) => {
                    Err(beyond_kernel(mdt, call, "mknod of a device", Status::Perm))
                }
                None => claims(cred, &dir, *uid, *gid),
            }
        }
        // Each file as a create of it would be; the FIDs are checked as the batch runs
        // (they must be of the caller's own grants, whoever it is).
        MdsOp::CreateBatch { parent, items } => {
            let dir = need_dir(mdt, cred, *parent)?;
            items
                .iter()
                .try_for_each(|i| claims(cred, &dir, i.uid, i.gid))
        }
        // Each name as an unlink of it would be (the sticky bit).
        MdsOp::UnlinkBatch { parent, items } => {
            let dir = need_dir(mdt, cred, *parent)?;
            items
                .iter()
                .try_for_each(|i| may_remove(mdt, cred, &dir, &i.name).map(|_| ()))
        }
        // Anyone that may change the namespace (a read-only nodemap may not: nodemap.rs).
        MdsOp::GrantFids { .. } => Ok(()),
        // Each file read: whoever may read it (a missing one is the handler's ENOENT).
        MdsOp::AccessBatch { items } => items
            .iter()
            .try_for_each(|i| need(mdt, cred, i.fid, MAY_READ)),
        // Its owner, if it may create there: a holder answers everyone's callbacks on the
        // directory, so one user never holds a directory another owns (a shared 1777
        // scratch directory: only its owner's clients).
        MdsOp::DelegateDir { fid } => {
            let dir = need_dir(mdt, cred, *fid)?;
            match cred.uid == dir.uid {
                true => Ok(()),
                false => Err(Status::Perm),
            }
        }
        MdsOp::Mkdir {
            parent, uid, gid, ..
        }
        | MdsOp::MkdirOn {
            parent, uid, gid, ..
        }
        | MdsOp::MkdirStriped {
            parent, uid, gid, ..
        }
        | MdsOp::Symlink {
            parent, uid, gid, ..
        } => {
            let dir = need_dir(mdt, cred, *parent)?;
            claims(cred, &dir, *uid, *gid)
        }
        MdsOp::Link { parent, .. } => need_dir(mdt, cred, *parent).map(|_| ()),
        MdsOp::Unlink { parent, name } | MdsOp::Rmdir { parent, name } => {
            let dir = need_dir(mdt, cred, *parent)?;
            may_remove(mdt, cred, &dir, name).map(|_| ())
        }
        MdsOp::Rename {
            src_parent,
            src_name,
            dst_parent,
            dst_name,
            ..
        } => {
            let from = need_dir(mdt, cred, *src_parent)?;
            let to = need_dir(mdt, cred, *dst_parent)?;
            let moving = may_remove(mdt, cred, &from, src_name)?;
            may_remove(mdt, cred, &to, dst_name)?;
            // A directory changing parent has its ".." rewritten: it must be writable.
            match moving {
                Some(m) if m.kind == FileKind::Directory && src_parent != dst_parent => {
                    allow(permits_attr(cred, &m, MAY_WRITE), Status::Access)
                }
                _ => Ok(()),
            }
        }
        MdsOp::QuotaUsage { ids } => allow(ids.iter().all(|q| q.visible_to(cred)), Status::Perm),
        MdsOp::SetAttr { fid, attr } => match attr_of(mdt, *fid)? {
            Some(a) => may_setattr(mdt, call, &a, attr),
            None => Ok(()),
        },
        MdsOp::GetXattr { fid, name } => may_xattr(mdt, cred, *fid, name, MAY_READ),
        MdsOp::SetXattr { fid, name, .. } | MdsOp::RemoveXattr { fid, name } => {
            may_xattr(mdt, cred, *fid, name, MAY_WRITE)
        }
        // Growing a file's layout as a write reaches further: a client that holds the
        // file open for writing (whatever its mode now, as for the write itself), or may
        // write it (a truncate by path).
        MdsOp::LayoutIntent { fid, .. } => match attr_of(mdt, *fid)? {
            Some(a) => allow(
                mdt.exports.holds_write_open(&call.client, a.fid)
                    || permits_attr(cred, &a, MAY_WRITE),
                Status::Access,
            ),
            None => Ok(()),
        },
        // Data on the MDT, as an OST's capabilities allow it (capas.rs): a client that holds
        // the file open for reading (writing), or a caller who may read (write) it.
        MdsOp::DomRead { fid, .. } => match attr_of(mdt, *fid)? {
            Some(a) => allow(
                mdt.exports.holds_read_open(&call.client, a.fid)
                    || permits_attr(cred, &a, MAY_READ),
                Status::Access,
            ),
            None => Ok(()),
        },
        MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => match attr_of(mdt, *fid)? {
            Some(a) => allow(
                mdt.exports.holds_write_open(&call.client, a.fid)
                    || permits_attr(cred, &a, MAY_WRITE),
                Status::Access,
            ),
            None => Ok(()),
        },
        // Striping is the owner's to choose (Lustre: owner or CAP_FOWNER).
        MdsOp::SetLayout { fid, .. } | MdsOp::SetDirDefault { fid, .. } => {
            match attr_of(mdt, *fid)? {
                Some(a) => allow(a.uid == cred.uid, Status::Perm),
                None => Ok(()),
            }
        }
        // Moving directories between MDTs is an administrator's act, as `lfs migrate -m`.
        // Server-to-server requests: only servers (root) send them.
        MdsOp::Migrate { .. }
        | MdsOp::AllocFid
        | MdsOp::Update(_)
        | MdsOp::RenameLock { .. }
        | MdsOp::ScanInodes { .. }
        | MdsOp::ScanDirents { .. }
        // Quota counts checked and repaired (`nacre lfsck --quota`).
        | MdsOp::QuotaCheck { .. }
        // Changelogs and fid2path show every change and name: root's, as in Lustre.
        | MdsOp::ChangelogRegister { .. }
        | MdsOp::ChangelogDeregister { .. }
        | MdsOp::ChangelogClear { .. }
        | MdsOp::ChangelogRead { .. }
        | MdsOp::ChangelogUsers
        | MdsOp::FidLinks { .. }
        // A policy engine's index: every inode's attributes.
        | MdsOp::StatMany { .. }
        | MdsOp::ScanStats { .. }
        // Online migration of a file, as `lfs migrate` (root's).
        | MdsOp::RelayoutBegin { .. }
        | MdsOp::RelayoutFence { .. }
        | MdsOp::RelayoutSwap { .. }
        | MdsOp::RelayoutAbort { .. } => Err(Status::Perm),
        MdsOp::GetAttr { .. }
        | MdsOp::ReadLink { .. }
        | MdsOp::Close { .. }
        | MdsOp::ListXattr { .. }
        | MdsOp::GetLayout { .. }
        | MdsOp::StatFs
        | MdsOp::DestroyPending
        | MdsOp::GetDirStripe { .. }
        | MdsOp::GetDirDefault { .. }
        | MdsOp::Sync
        | MdsOp::Ping
        | MdsOp::Disconnect
        | MdsOp::Reopen { .. }
        | MdsOp::Connect
        | MdsOp::Replay { .. }
        | MdsOp::ReplayDone
        // A client's own locks only.
        | MdsOp::LockPoll { .. }
        | MdsOp::LockCancel { .. }
        | MdsOp::LockReplay { .. } => Ok(()),
    }
}

/// `denied`, for a request no kernel would have sent (its own checks refuse it first): a
/// client speaking the protocol itself, counted and logged as the refusals of callers are
/// (rate-limited), where a plain permission error is only counted (`denied_stats`).
fn beyond_kernel(mdt: &Mdt, call: &MdsCall, what: &str, denied: Status) -> Status {
    if QUIET.with(std::cell::Cell::get) {
        return denied;
    }
    nacre_net::caller::refused(|| {
        format!(
            "{}: refused {what} from client {} (uid {}): a kernel would not have sent it",
            mdt.label.name(),
            crate::export::client_name(&call.client),
            call.cred.uid
        )
    });
    denied
}

fn permits_attr(cred: &Cred, a: &Attr, want: u8) -> bool {
    permits(
        cred,
        a.perm,
        a.uid,
        a.gid,
        a.kind == FileKind::Directory,
        want,
    )
}

/// Attributes of `fid`, here or on its own MDT; `None` if it does not exist (the operation
/// then fails on its own); an error if its MDT cannot be asked.
fn attr_of(mdt: &Mdt, fid: Fid) -> Result<Option<Attr>, Status> {
    if fid.mdt_index() == mdt.label.index {
        return match mdt.inode(fid) {
            Ok(rec) => Ok(Some(rec.attr)),
            Err(Status::NoEnt | Status::Stale) => Ok(None),
            Err(s) => Err(s),
        };
    }
    match crate::peers::peer_call(mdt, fid.mdt_index(), MdsOp::GetAttr { fid }) {
        Ok(MdsReply::Entry { attr, .. }) => Ok(Some(attr)),
        Ok(_) => Err(Status::Proto),
        Err(Status::NoEnt | Status::Stale) => Ok(None),
        Err(s) => Err(s),
    }
}

/// The attributes of what `name` in `parent` names, if anything.
fn existing(mdt: &Mdt, parent: Fid, name: &[u8]) -> Result<Option<Attr>, Status> {
    match mdt.lookup(parent, name) {
        Ok(Some(d)) => attr_of(mdt, d.fid),
        Ok(None) | Err(Status::NoEnt | Status::Stale) => Ok(None),
        Err(s) => Err(s),
    }
}

/// Whether the caller `cred` may write `fid` (a replayed close that moves its times: the
/// handle it closed is gone, only the permission is left to check).
pub(crate) fn may_write(mdt: &Mdt, cred: &Cred, fid: Fid) -> bool {
    cred.is_root() || need(mdt, cred, fid, MAY_WRITE).is_ok()
}

fn need(mdt: &Mdt, cred: &Cred, fid: Fid, want: u8) -> Result<(), Status> {
    match attr_of(mdt, fid)? {
        Some(a) => allow(permits_attr(cred, &a, want), Status::Access),
        None => Ok(()),
    }
}

/// A directory the caller changes: write and search. Its attributes (a default for a missing
/// one: the operation fails on its own).
fn need_dir(mdt: &Mdt, cred: &Cred, dir: Fid) -> Result<Attr, Status> {
    match attr_of(mdt, dir)? {
        Some(a) => {
            allow(permits_attr(cred, &a, MAY_WRITE | MAY_EXEC), Status::Access)?;
            Ok(a)
        }
        None => Err(Status::NoEnt),
    }
}

/// Whether the caller may remove `name` from `dir` (the sticky rule); returns what it names.
fn may_remove(mdt: &Mdt, cred: &Cred, dir: &Attr, name: &[u8]) -> Result<Option<Attr>, Status> {
    let victim = existing(mdt, dir.fid, name)?;
    if let Some(v) = &victim {
        if dir.perm & STICKY != 0 && dir.uid != cred.uid && v.uid != cred.uid {
            return Err(Status::Perm);
        }
    }
    Ok(victim)
}

/// `setattr_prepare` and `notify_change`'s rules.
fn may_setattr(mdt: &Mdt, call: &MdsCall, a: &Attr, set: &SetAttr) -> Result<(), Status> {
    let cred = &call.cred;
    let owner = a.uid == cred.uid;
    if set.size.is_some() && !set.from_open {
        allow(permits_attr(cred, a, MAY_WRITE), Status::Access)?;
    }
    if set.size.is_some() && set.from_open {
        // Through a descriptor: write was checked when this client opened it for writing
        // (a read-only open truncates nothing, as `ftruncate` on one fails).
        if !mdt.exports.holds_write_open(&call.client, a.fid) {
            let what = "truncate through no open for writing";
            return Err(beyond_kernel(mdt, call, what, Status::Access));
        }
    }
    if set.kill_suidgid {
        // What a write does as a side effect: whoever may write may have it done.
        let writer =
            mdt.exports.holds_write_open(&call.client, a.fid) || permits_attr(cred, a, MAY_WRITE);
        if !writer {
            let what = "set-id bits cleared by a caller who may not write";
            return Err(beyond_kernel(mdt, call, what, Status::Access));
        }
    }
    if let Some(uid) = set.uid {
        allow(uid == a.uid && owner, Status::Perm)?;
    }
    if let Some(gid) = set.gid {
        allow(owner && (gid == a.gid || cred.in_group(gid)), Status::Perm)?;
    }
    if set.perm.is_some() {
        allow(owner, Status::Perm)?;
    }
    if set.atime.is_some() || set.mtime.is_some() {
        if set.times_now {
            allow(owner || permits_attr(cred, a, MAY_WRITE), Status::Access)?;
        } else {
            allow(owner, Status::Perm)?;
        }
    }
    if set.ctime.is_some() {
        allow(owner, Status::Perm)?;
    }
    // Projects are the administrator's (as Lustre's `lfs project`, which needs root).
    if set.project.is_some() || set.proj_inherit.is_some() {
        return Err(Status::Perm);
    }
    Ok(())
}

/// `xattr_permission` (and `cap_inode_setxattr` for `security.`).
fn may_xattr(mdt: &Mdt, cred: &Cred, fid: Fid, name: &[u8], want: u8) -> Result<(), Status> {
    let Some(a) = attr_of(mdt, fid)? else {
        return Ok(());
    };
    let writing = want & MAY_WRITE != 0;
    if name.starts_with(b"trusted.") {
        return Err(if writing {
            Status::Perm
        } else {
            Status::NoData
        });
    }
    if name.starts_with(b"security.") {
        return allow(!writing, Status::Perm);
    }
    if name.starts_with(b"system.") {
        return allow(!writing || a.uid == cred.uid, Status::Perm);
    }
    if name.starts_with(b"user.") {
        if !matches!(a.kind, FileKind::Regular | FileKind::Directory) {
            return Err(if writing {
                Status::Perm
            } else {
                Status::NoData
            });
        }
        if a.kind == FileKind::Directory && a.perm & STICKY != 0 && writing && a.uid != cred.uid {
            return Err(Status::Perm);
        }
    }
    allow(permits_attr(cred, &a, want), Status::Access)
}
