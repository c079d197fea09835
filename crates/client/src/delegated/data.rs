//! Bytes written into a file this client answered the create of, carried by that create
//! (issue 44 item 1, "a small file's write carried by its create"): mdtest hard's create,
//! write of 3,901 bytes and close become one item of a `CreateBatch`, not three requests.
//!
//! A write is kept here only while it cannot differ from what the MDT would do with it:
//! the file's create is not sent yet (the write changes the item), the write ends within
//! what the delegation said a create may carry (`MdsReply::Delegated`: the component on
//! the MDT the directory's new files start with, and no block quota enforced on the MDT's
//! bytes — both hold while the delegation is held; a change calls it back), and the file
//! has no set-id bit (a write by a user other than root would clear it). Anything else —
//! a write past that, one after the create went, an append, a direct write — opens the
//! file at the MDT (its create sent first) and writes as any other.
//!
//! The bytes are as durable as the create they go with: sent within
//! [`super::DELEGATED_SEND_MS`], by `fsync`/`syncfs`, before any request that names the
//! file (an open by another process, a stat through another path, a truncate); a client
//! that dies first loses both, and no other client saw either. The file's times are its
//! create's (the write comes microseconds after it).

use super::{send::data_of, Item};
use crate::Client;
use nacre_wire::mds::{CREATE_BATCH_DATA_BYTES_MAX, CREATE_DATA_BYTES_MAX};
use std::sync::atomic::Ordering;

/// Most bytes kept with creates not known made, all directories (past it, writes go to the
/// MDT as any other).
pub const DELEGATED_DATA_BYTES_MAX: usize = 16 << 20;

impl Client {
    /// Keeps `data`, written at `offset` through `file` (a deferred handle, opened for
    /// writing without `O_APPEND`, of a file answered here whose create is not sent), to go
    /// with its create; false if that does not apply: write it through the MDT (see the
    /// module documentation).
    pub fn write_delegated(&self, file: &crate::OpenFile, offset: u64, data: &[u8]) -> bool {
        if data.is_empty()
            || !file.deferred
            || !file.writable()
            || file.append
            || self.delegated.pending.load(Ordering::Acquire) == 0
        {
            return false;
        }
        let fid = file.fid;
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        if end > CREATE_DATA_BYTES_MAX as u64 {
            return false;
        }
        let Ok(mdc) = self.mdc(fid.mdt_index()) else {
            return false;
        };
        let (offset, end) = (offset as usize, end as usize);
        let (full, dir) = {
            let mut dirs = self.delegated.dirs.lock();
            let Some((dir, d)) = dirs.iter_mut().find(|(_, d)| d.answered.contains_key(&fid))
            else {
                return false;
            };
            let dir = *dir;
            if d.closing || end > d.data_bytes_max as usize || !mdc.locks.holds(d.lock) {
                return false;
            }
            let create = d.items.iter_mut().rev().find_map(|i| match i {
                Item::Create(c) if c.fid == fid => Some(c),
                _ => None,
            });
            let Some(c) = create else {
                // Sent (or on its way): the MDT has it, or will before the write.
                return false;
            };
            if nacre_types::attr::has_setid(c.perm) {
                return false;
            }
            let grow = end.saturating_sub(c.data.len());
            let kept = self.delegated.data_bytes.load(Ordering::Acquire);
            if kept + grow > DELEGATED_DATA_BYTES_MAX {
                return false;
            }
            if c.data.len() < end {
                c.data.resize(end, 0);
            }
            c.data[offset..end].copy_from_slice(data);
            let stored = c.data.len();
            // Counted while the item is in the queue's lock: a flush subtracts only what
            // was counted.
            self.delegated.data_bytes.fetch_add(grow, Ordering::AcqRel);
            if let Some(a) = d.answered.get_mut(&fid) {
                a.size = a.size.max(end as u64);
                a.blocks = nacre_types::layout::dom_charged_bytes(stored) / 512;
            }
            (data_of(&d.items) >= CREATE_BATCH_DATA_BYTES_MAX, dir)
        };
        self.delegated.stats.written.fetch_add(1, Ordering::Relaxed);
        // Kept whatever becomes of the send: what failed is sent again.
        if full {
            if let Err(e) = self.flush_delegated(dir) {
                tracing::warn!("sending the creates of {dir}: {e}");
            }
        }
        true
    }
}
