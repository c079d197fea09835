//! Filesets (a nodemap's subtree as its clients' whole file system; docs/security.md): the
//! client is told the subtree's directory as its root when it connects, and every inode a
//! request from it names must be inside the subtree — whatever FID a client sends, with
//! the native library too. Checked by walking up from the inode: a directory's parent, a
//! file's names (on any MDT); what was found inside is remembered [`INSIDE_TTL_MS`].

use crate::mdt::Mdt;
use crate::peers::{mdt_list, peer_call};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{MdsOp, MdsReply};

pub use crate::fileset_cache::INSIDE_TTL_MS;

/// Deepest directory tree walked.
pub const DEPTH_MAX: usize = 4_096;

/// The directory `path` (`/a/b`) names, walked from the root across MDTs.
pub fn root_of(mdt: &Mdt, path: &str) -> Result<Fid, Status> {
    if let Some(f) = mdt.filesets.fresh_root(path) {
        return Ok(f);
    }
    let mut dir = Fid::ROOT;
    for name in path.split('/').filter(|p| !p.is_empty()) {
        dir = lookup(mdt, dir, name.as_bytes())?;
    }
    if kind_and_parent(mdt, dir)?.map(|(k, _)| k) != Some(FileKind::Directory) {
        return Err(Status::NotDir);
    }
    mdt.filesets.remember_root(path, dir);
    Ok(dir)
}

fn lookup(mdt: &Mdt, parent: Fid, name: &[u8]) -> Result<Fid, Status> {
    if parent.mdt_index() == mdt.label.index {
        return mdt
            .lookup(parent, name)?
            .map(|d| d.fid)
            .ok_or(Status::NoEnt);
    }
    let op = MdsOp::Lookup {
        parent,
        name: name.to_vec(),
    };
    match peer_call(mdt, parent.mdt_index(), op)? {
        MdsReply::Entry { attr, .. } => Ok(attr.fid),
        MdsReply::Remote { fid } => Ok(fid),
        _ => Err(Status::NoEnt),
    }
}

/// An inode's kind and (a directory's) parent, from whichever MDT holds it; `None` if it
/// does not exist.
fn kind_and_parent(mdt: &Mdt, fid: Fid) -> Result<Option<(FileKind, Option<Fid>)>, Status> {
    if fid.mdt_index() == mdt.label.index {
        return match mdt.inode(fid) {
            Ok(rec) => Ok(Some((rec.attr.kind, rec.parent))),
            Err(Status::NoEnt) => Ok(None),
            Err(e) => Err(e),
        };
    }
    match peer_call(mdt, fid.mdt_index(), MdsOp::StatMany { fids: vec![fid] })? {
        MdsReply::Stats { stats, .. } => Ok(stats.first().map(|s| (s.attr.kind, s.parent))),
        _ => Err(Status::Proto),
    }
}

/// The directories that hold a name of non-directory `fid`, on every MDT.
fn file_parents(mdt: &Mdt, fid: Fid) -> Result<Vec<Fid>, Status> {
    let mut parents = Vec::new();
    let mut add = |reply: MdsReply| {
        if let MdsReply::Links { links, .. } = reply {
            parents.extend(links.into_iter().map(|(p, _)| p));
        }
    };
    add(crate::links::links(mdt, fid)?);
    for index in mdt_list(mdt, 1) {
        if index != mdt.label.index {
            add(peer_call(mdt, index, MdsOp::FidLinks { fid })?);
        }
    }
    Ok(parents)
}

/// True if `fid` is `root` or below it (a file: if any of its names is).
pub fn inside(mdt: &Mdt, root: Fid, fid: Fid) -> Result<bool, Status> {
    if fid == root || mdt.filesets.known_inside(root, fid) {
        return Ok(true);
    }
    let starts = match kind_and_parent(mdt, fid)? {
        None => return Ok(false),
        Some((FileKind::Directory, _)) => vec![fid],
        Some(_) => file_parents(mdt, fid)?,
    };
    for start in starts {
        let mut walked = vec![fid];
        let mut dir = start;
        for _ in 0..DEPTH_MAX {
            if dir == root || mdt.filesets.known_inside(root, dir) {
                mdt.filesets.remember(root, &walked);
                return Ok(true);
            }
            if dir == Fid::ROOT {
                break;
            }
            walked.push(dir);
            match kind_and_parent(mdt, dir)? {
                Some((_, Some(p))) if p != dir => dir = p,
                _ => break,
            }
        }
    }
    Ok(false)
}

/// The inodes `op` names that must be inside the fileset; `Err(Perm)` for operations a
/// fileset's client may not make at all (scans, changelogs, migrations: they see or move
/// what is outside).
pub fn named(op: &MdsOp) -> Result<Vec<Fid>, Status> {
    Ok(match op {
        MdsOp::Rename {
            src_parent,
            dst_parent,
            ..
        } => vec![*src_parent, *dst_parent],
        MdsOp::Link { fid, parent, .. } => vec![*fid, *parent],
        MdsOp::Replay { op, .. } => named(op)?,
        MdsOp::ScanInodes { .. }
        | MdsOp::ScanDirents { .. }
        | MdsOp::QuotaCheck { .. }
        | MdsOp::StatMany { .. }
        | MdsOp::ScanStats { .. }
        // Many FIDs each walked up (a fileset's mount answers no read itself).
        | MdsOp::AccessBatch { .. }
        | MdsOp::ChangelogRegister { .. }
        | MdsOp::ChangelogDeregister { .. }
        | MdsOp::ChangelogClear { .. }
        | MdsOp::ChangelogRead { .. }
        | MdsOp::ChangelogUsers
        | MdsOp::FidLinks { .. }
        | MdsOp::Migrate { .. }
        | MdsOp::RelayoutBegin { .. }
        | MdsOp::RelayoutFence { .. }
        | MdsOp::RelayoutSwap { .. }
        | MdsOp::RelayoutAbort { .. }
        | MdsOp::AllocFid
        | MdsOp::Update(_)
        | MdsOp::RenameLock { .. } => return Err(Status::Perm),
        other => other.key_fid().into_iter().collect(),
    })
}

/// Refuses (`EACCES`) a request naming an inode outside the fileset at `path`.
pub fn check(mdt: &Mdt, path: &str, op: &MdsOp) -> Result<(), Status> {
    let fids = named(op)?;
    if fids.is_empty() {
        return Ok(());
    }
    let root = root_of(mdt, path)?;
    for fid in fids {
        if !inside(mdt, root, fid)? {
            return Err(Status::Access);
        }
    }
    Ok(())
}
