//! Bytes of data on the MDT per user, group and project (block quotas, docs/quota.md): kept
//! in the `quota_dom_bytes` table (QuotaId key → bytes, big-endian) and in memory, changed
//! in the transaction that changes a file's bytes on the MDT, removes the file or changes
//! its owner, group or project, so they are exact across any crash. Each file counts its
//! stored bytes in whole 4 KiB blocks ([`dom_charged_bytes`], what `st_blocks` says). An
//! MDT without the table's count yet (made before it) counts its files' bytes at start: a
//! pass over the `dom` table alone, an inode read per file that has bytes here.

use super::tx::{read_counts, Counts};
use super::{kv_err, read_u64, Store};
use crate::records::{
    decode_dom, decode_record, dom_charged_bytes, InodeRecord, DOM, INODES, META, QUOTA_DOM_BYTES,
};
use nacre_kv::{Batch, KvStore};
use nacre_types::{Fid, QuotaId, Status};

/// The `META` key saying the table holds a count.
const COUNTED_KEY: &[u8] = b"quota_dom_bytes_counted";

/// Loads the counts (counting every file's bytes first on an MDT that has none yet;
/// `name`: the MDT's, for log lines).
pub(crate) fn load(kv: &dyn KvStore, name: &str) -> Result<Counts, Status> {
    if read_u64(kv, COUNTED_KEY)?.is_none() {
        let counts = count(kv, name)?;
        let mut b = Batch::new();
        for (q, n) in &counts {
            b.put(
                QUOTA_DOM_BYTES,
                q.to_key().to_vec(),
                n.to_be_bytes().to_vec(),
            );
        }
        b.put(META, COUNTED_KEY.to_vec(), 1u64.to_be_bytes().to_vec());
        let t = kv.commit(b).map_err(kv_err)?;
        kv.wait_durable(t).map_err(kv_err)?;
        if !counts.is_empty() {
            tracing::info!(
                "{name}: quotas: the bytes on the MDT of {} ids counted",
                counts.len()
            );
        }
        return Ok(counts);
    }
    read_counts(kv, QUOTA_DOM_BYTES)
}

/// Counts every file's bytes on the MDT by its owner, group and project (what the table
/// must say). A damaged record is skipped (logged); an inode of a newer version than this
/// nacre reads stops the count with an error.
pub(crate) fn count(kv: &dyn KvStore, name: &str) -> Result<Counts, Status> {
    let mut counts = Counts::new();
    super::scan_each(kv, DOM, &[], 1024, |k, v| {
        let bytes = match decode_dom(v) {
            Ok(b) => dom_charged_bytes(b.len()),
            Err(e) if e.is_too_new() => return Err(e.logged(name)),
            Err(e) => {
                tracing::warn!("{name}: quotas: {e}: skipped in the count");
                return Ok(());
            }
        };
        let Some(fid) = Fid::from_key(k) else {
            tracing::warn!("{name}: quotas: a data-on-MDT key that is no FID: skipped");
            return Ok(());
        };
        let Some(inode) = kv.get(INODES, &fid.to_key()).map_err(kv_err)? else {
            tracing::warn!("{name}: quotas: bytes on the MDT of {fid} without its inode");
            return Ok(());
        };
        match decode_record::<InodeRecord>(&inode) {
            Ok(rec) => {
                for q in QuotaId::of_attr(&rec.attr) {
                    *counts.entry(q).or_insert(0) += bytes;
                }
            }
            Err(e) if e.is_too_new() => return Err(e.logged(name)),
            Err(e) => tracing::warn!("{name}: quotas: {e}: skipped in the count"),
        }
        Ok(())
    })?;
    Ok(counts)
}

impl Store {
    /// As [`Store::quota_check`], for the bytes of data on the MDT: counts every file's
    /// bytes here again and compares with the table (and memory); with `repair`, the count
    /// replaces both, durably. Holds the write lock while it counts.
    pub fn dom_quota_check(&self, repair: bool) -> Result<nacre_types::QuotaCheck, Status> {
        let mut alloc = self.alloc.lock().expect("write lock");
        let counted = count(&*self.kv, &self.name)?;
        self.check_usage(QUOTA_DOM_BYTES, counted, &mut alloc.dom_bytes, repair)
    }
}
