//! Paged scans of an MDT's inodes and directory entries, for the namespace checker
//! (`nacre lfsck --namespace`), which joins them across MDTs, and for a policy engine's
//! index (`nacre policy`).

use crate::mdt::Mdt;
use nacre_mdstore::records::InodeRecord;
use nacre_types::{Fid, Status};
use nacre_wire::mds::changelog::{InodeStat, STATS_MAX};
use nacre_wire::mds::{DirentSummary, InodeSummary, MdsReply};

/// Most records one scan reply carries.
pub const SCAN_COUNT_MAX: u32 = 4096;

/// Up to `count` stored inodes after `after`, in FID order, and whether they are the last.
fn inode_page(
    mdt: &Mdt,
    after: Option<Fid>,
    count: usize,
) -> Result<(Vec<(Fid, InodeRecord)>, bool), Status> {
    let records = mdt.store().inode_page(after, count)?;
    let eof = records.len() < count;
    Ok((records, eof))
}

/// Up to `count` inodes after `after`, in FID order.
pub fn inodes(mdt: &Mdt, after: Option<Fid>, count: u32) -> Result<MdsReply, Status> {
    let (page, eof) = inode_page(mdt, after, count.clamp(1, SCAN_COUNT_MAX) as usize)?;
    let mut inodes = Vec::with_capacity(page.len());
    for (fid, rec) in page {
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
    let after = after.map(|(p, n)| (*p, n.as_slice()));
    let page = mdt.store().dirent_page(after, count)?;
    let eof = page.len() < count;
    let mut dirents = Vec::with_capacity(page.len());
    for (parent, name, rec) in page {
        dirents.push(DirentSummary {
            parent,
            name,
            fid: rec.fid,
            kind: rec.kind,
        });
    }
    Ok(MdsReply::Dirents { dirents, eof })
}

/// What a policy engine indexes of an inode: its attributes with the exact size when the
/// MDT knows it (crate::sizes), its pool and stripe count, a directory's parent.
fn stat_of(mdt: &Mdt, rec: InodeRecord) -> InodeStat {
    let mut attr = rec.attr;
    let mut size_exact = false;
    if attr.kind == nacre_types::FileKind::Regular {
        if let Some((size, blocks)) = crate::ops::exact_size(mdt, &attr, rec.layout.as_ref()) {
            attr.size = size;
            attr.blocks = blocks;
            size_exact = true;
        }
    }
    let (pool, stripe_count) = match &rec.layout {
        // A composite layout's first pool: where a file's first bytes (all of a small
        // file) are.
        Some(l) => (
            l.components
                .first()
                .map_or(nacre_types::PoolName::NONE, |c| c.pool),
            l.object_count() as u32,
        ),
        None => (nacre_types::PoolName::NONE, 0),
    };
    InodeStat {
        attr,
        size_exact,
        pool,
        stripe_count,
        parent: rec.parent,
        orphan: rec.orphan,
    }
}

/// `StatMany`: the inodes of `fids` that exist, in the order asked.
pub fn stat_many(mdt: &Mdt, fids: &[Fid]) -> Result<MdsReply, Status> {
    if fids.len() > STATS_MAX {
        return Err(Status::Inval);
    }
    let mut stats = Vec::with_capacity(fids.len());
    for &fid in fids {
        match mdt.inode(fid) {
            Ok(rec) => stats.push(stat_of(mdt, rec)),
            Err(Status::NoEnt) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(MdsReply::Stats { stats, eof: true })
}

/// `ScanStats`: up to `count` inodes after `after`, in FID order.
pub fn scan_stats(mdt: &Mdt, after: Option<Fid>, count: u32) -> Result<MdsReply, Status> {
    let (page, eof) = inode_page(mdt, after, (count as usize).clamp(1, STATS_MAX))?;
    let stats = page.into_iter().map(|(_, rec)| stat_of(mdt, rec)).collect();
    Ok(MdsReply::Stats { stats, eof })
}
