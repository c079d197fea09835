//! ReadDir: a page of entries in name order, resumable after any name, so concurrent inserts
//! never cause duplicates or reorderings within one listing.

use crate::mdt::{kv_err, Mdt};
use crate::records::{decode, dirent_key, DirentRecord, DIRENTS};
use nacre_types::limits::READDIR_ENTRIES_MAX;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{DirEntry, MdsReply};

/// Lists up to `count` entries of `fid` after `after`. A directory migrated to another MDT
/// answers [`MdsReply::Remote`] with its new FID, so a listing in progress goes on there
/// (names are kept, so resuming after a name skips nothing).
pub fn run(mdt: &Mdt, fid: Fid, after: Option<&[u8]>, count: u32) -> Result<MdsReply, Status> {
    let dir = match mdt.inode(fid) {
        Err(Status::Stale) => match crate::migrate::moved_to(mdt, fid)? {
            Some(new) => return Ok(MdsReply::Remote { fid: new }),
            None => return Err(Status::Stale),
        },
        r => r?,
    };
    if dir.attr.kind != FileKind::Directory {
        return Err(Status::NotDir);
    }
    let count = count.clamp(1, READDIR_ENTRIES_MAX) as usize;
    let prefix = fid.to_key();
    let after_key = after.map(|name| dirent_key(fid, name));
    let page = mdt
        .kv
        .scan(DIRENTS, &prefix, after_key.as_deref(), count + 1)
        .map_err(kv_err)?;
    let eof = page.len() <= count;
    let mut entries = Vec::with_capacity(page.len().min(count));
    for (k, v) in page.into_iter().take(count) {
        let rec: DirentRecord = decode(&v)?;
        entries.push(DirEntry {
            name: k[prefix.len()..].to_vec(),
            fid: rec.fid,
            kind: rec.kind,
        });
    }
    Ok(MdsReply::Dir { entries, eof })
}
