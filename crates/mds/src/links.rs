//! Names back to inodes (what Lustre keeps in each inode's link EA), for `fid2path`: every
//! directory entry of this MDT is also indexed by the inode it names, in the same
//! transaction as the entry. The index lives with the entries (an inode named from another
//! MDT is found in that MDT's index), so no change ever writes it across MDTs.
//!
//! Table `links`: child FID (16) ++ directory FID (16) ++ name → empty. An entry replaced in
//! place (a rename over it) may leave its old inode's link behind: answers are checked
//! against the entries themselves, so a stale link is never returned.

use crate::mdt::{kv_err, read_u64, Mdt};
use crate::records::{decode, DirentRecord, DIRENTS, META};
use nacre_kv::Batch;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::changelog::FID_LINKS_MAX;
use nacre_wire::mds::MdsReply;

pub use crate::records::{link_key, LINKS};

/// `FidLinks`: the (directory, name) pairs of this MDT naming `fid`, and the striped
/// directory `fid` is a shard of, if it is one (a shard has no name of its own).
pub fn links(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    let prefix = fid.to_key();
    let page = mdt
        .kv
        .scan(LINKS, &prefix, None, FID_LINKS_MAX * 2)
        .map_err(kv_err)?;
    let mut links = Vec::new();
    for (k, _) in page {
        let Some(parent) = k.get(16..32).and_then(Fid::from_key) else {
            continue;
        };
        let name = k[32..].to_vec();
        // Only links the entries still say.
        if mdt
            .lookup(parent, &name)
            .ok()
            .flatten()
            .is_some_and(|d| d.fid == fid)
            && links.len() < FID_LINKS_MAX
        {
            links.push((parent, name));
        }
    }
    let shard_of = match mdt.inode(fid) {
        Ok(rec) if links.is_empty() && rec.attr.kind == FileKind::Directory => {
            rec.parent.filter(|p| *p != fid)
        }
        _ => None,
    };
    Ok(MdsReply::Links { links, shard_of })
}

/// Builds the index from the entries of an MDT formatted before it existed (once, at
/// start; `meta` `link_index` says it is built).
pub fn build_index(kv: &dyn nacre_kv::KvStore) -> Result<(), Status> {
    if read_u64(kv, b"link_index")?.is_some() {
        return Ok(());
    }
    let mut after: Option<Vec<u8>> = None;
    let mut count = 0u64;
    loop {
        let page = kv
            .scan(DIRENTS, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        let mut b = Batch::new();
        for (k, v) in &page {
            let (Some(parent), Ok(d)) = (
                k.get(..16).and_then(Fid::from_key),
                decode::<DirentRecord>(v),
            ) else {
                tracing::warn!("links: damaged directory entry skipped");
                continue;
            };
            b.put(LINKS, link_key(d.fid, parent, &k[16..]), Vec::new());
            count += 1;
        }
        kv.commit(b).map_err(kv_err)?;
    }
    let mut b = Batch::new();
    b.put(META, b"link_index".to_vec(), 1u64.to_be_bytes().to_vec());
    let t = kv.commit(b).map_err(kv_err)?;
    kv.wait_durable(t).map_err(kv_err)?;
    if count > 0 {
        tracing::info!("links: index of {count} existing entries built");
    }
    Ok(())
}
