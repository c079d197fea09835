//! ReadDir: a page of entries in name order, resumable after any name, so concurrent inserts
//! never cause duplicates or reorderings within one listing.

use crate::mdt::Mdt;
use nacre_types::limits::READDIR_ENTRIES_MAX;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{DirEntry, DirPlusEntry, MdsReply};

/// Lists up to `count` entries of `fid` after `after`. A directory migrated to another MDT
/// answers [`MdsReply::Remote`] with its new FID, so a listing in progress goes on there
/// (names are kept, so resuming after a name skips nothing).
pub fn run(mdt: &Mdt, fid: Fid, after: Option<&[u8]>, count: u32) -> Result<MdsReply, Status> {
    let dir = match mdt.inode(fid) {
        Err(Status::Stale) => match mdt.moved_to(fid)? {
            Some(new) => return Ok(MdsReply::Remote { fid: new }),
            None => return Err(Status::Stale),
        },
        r => r?,
    };
    if dir.attr.kind != FileKind::Directory {
        return Err(Status::NotDir);
    }
    let count = count.clamp(1, READDIR_ENTRIES_MAX) as usize;
    let (page, eof) = mdt.store().dir_page(fid, after, count)?;
    let mut entries = Vec::with_capacity(page.len());
    for (name, rec) in page {
        entries.push(DirEntry {
            name,
            fid: rec.fid,
            kind: rec.kind,
        });
    }
    Ok(MdsReply::Dir { entries, eof })
}

/// ReadDirPlus: a page as [`run`] lists it, each entry of this MDT with its inode's
/// attributes and, where one can be granted, a lock of `bits` on it (FUSE's readdirplus:
/// the kernel caches the entries and attributes of an `ls -l` under those locks). The lock
/// is taken before the attributes are read and the name checked to still lead to the
/// inode under it, as for a lookup's intent; an entry that fails the check, or whose inode
/// is on another MDT, goes without attributes (the client asks for it on its own).
pub fn plus(
    mdt: &Mdt,
    client: &[u8; 16],
    fid: Fid,
    after: Option<&[u8]>,
    count: u32,
    bits: u8,
) -> Result<MdsReply, Status> {
    let count = count.min(nacre_wire::mds::READDIRPLUS_ENTRIES_MAX);
    let (entries, eof) = match run(mdt, fid, after, count)? {
        MdsReply::Dir { entries, eof } => (entries, eof),
        moved => return Ok(moved),
    };
    let entries = entries
        .into_iter()
        .map(|entry| plus_entry(mdt, client, fid, entry, bits))
        .collect();
    Ok(MdsReply::DirPlus { entries, eof })
}

fn plus_entry(mdt: &Mdt, client: &[u8; 16], dir: Fid, entry: DirEntry, bits: u8) -> DirPlusEntry {
    let mut plus = DirPlusEntry {
        entry,
        attr: None,
        size_exact: false,
        layout: None,
        lock: None,
    };
    let fid = plus.entry.fid;
    if fid.mdt_index() != mdt.label.index {
        return plus;
    }
    let granted = match bits {
        0 => None,
        _ => mdt.grant_lock(client, fid, bits),
    };
    let still = granted.is_none()
        || mdt
            .lookup(dir, &plus.entry.name)
            .ok()
            .flatten()
            .is_some_and(|d| d.fid == fid);
    let fresh = still.then(|| super::getattr::run(mdt, fid).map(|r| super::exact_entry(mdt, r)));
    match fresh {
        Some(Ok(MdsReply::Entry {
            attr,
            layout,
            size_exact,
        })) => {
            plus.attr = Some(attr);
            plus.size_exact = size_exact;
            plus.layout = if size_exact { None } else { layout };
            plus.lock = granted.map(|(lock, _)| lock);
        }
        _ => {
            if let Some((lock, true)) = granted {
                mdt.ldlm.release(client, lock.handle);
            }
        }
    }
    plus
}
