//! Paged scans of an MDT's inodes and directory entries, for the namespace checker
//! (`nacre lfsck --namespace`), which joins them across MDTs.

use crate::mdt::{kv_err, Mdt};
use crate::records::{decode, DirentRecord, InodeRecord, DIRENTS, INODES};
use nacre_types::{Fid, Status};
use nacre_wire::mds::{DirentSummary, InodeSummary, MdsReply};

/// Most records one scan reply carries.
pub const SCAN_COUNT_MAX: u32 = 4096;

/// Up to `count` inodes after `after`, in FID order.
pub fn inodes(mdt: &Mdt, after: Option<Fid>, count: u32) -> Result<MdsReply, Status> {
    let count = count.clamp(1, SCAN_COUNT_MAX) as usize;
    let after = after.map(Fid::to_key);
    let page = mdt
        .kv
        .scan(INODES, &[], after.as_ref().map(|k| &k[..]), count)
        .map_err(kv_err)?;
    let eof = page.len() < count;
    let mut inodes = Vec::with_capacity(page.len());
    for (k, v) in page {
        let fid = Fid::from_key(&k).ok_or(Status::Io)?;
        let rec: InodeRecord = decode(&v)?;
        inodes.push(InodeSummary {
            fid,
            kind: rec.attr.kind,
            nlink: rec.attr.nlink,
            parent: rec.parent,
            orphan: rec.orphan,
            shards: match rec.attr.kind {
                nacre_types::FileKind::Directory => crate::ops::dir_stripe::dir_stripe(mdt, fid)?
                    .map(|s| s.shards)
                    .unwrap_or_default(),
                _ => Vec::new(),
            },
        });
    }
    Ok(MdsReply::Inodes { inodes, eof })
}

/// Up to `count` directory entries after `after`, in (parent, name) order.
pub fn dirents(mdt: &Mdt, after: Option<&(Fid, Vec<u8>)>, count: u32) -> Result<MdsReply, Status> {
    let count = count.clamp(1, SCAN_COUNT_MAX) as usize;
    let after = after.map(|(p, n)| crate::records::dirent_key(*p, n));
    let page = mdt
        .kv
        .scan(DIRENTS, &[], after.as_deref(), count)
        .map_err(kv_err)?;
    let eof = page.len() < count;
    let mut dirents = Vec::with_capacity(page.len());
    for (k, v) in page {
        let parent = Fid::from_key(&k).ok_or(Status::Io)?;
        let rec: DirentRecord = decode(&v)?;
        dirents.push(DirentSummary {
            parent,
            name: k[16..].to_vec(),
            fid: rec.fid,
            kind: rec.kind,
        });
    }
    Ok(MdsReply::Dirents { dirents, eof })
}
