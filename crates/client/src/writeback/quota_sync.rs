//! Write-behind turned off near a quota limit (docs/quota.md): the users, groups and
//! projects OST replies name as near a limit (or that a write found at it) have their data
//! written through, so `EDQUOT` reaches the writer's `write(2)`.

use super::{Writeback, QUOTA_SYNC_MS};
use nacre_types::Owner;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// True if one of `owner`'s ids is near a quota limit (entries past their time dropped).
pub(super) fn near_quota(sync: &mut HashMap<nacre_types::QuotaId, Instant>, owner: Owner) -> bool {
    let now = Instant::now();
    sync.retain(|_, until| *until > now);
    nacre_types::QuotaId::of_owner(owner)
        .iter()
        .any(|q| sync.contains_key(q))
}

impl Writeback {
    /// An OST's word on `owner`'s ids after a write (`sync_ids`: bits 1, 2, 4 for its
    /// user, group and project near a limit).
    pub(crate) fn quota_reply(&self, owner: Owner, sync_ids: u8) {
        let mut st = self.st.lock();
        if sync_ids == 0 && st.quota_sync.is_empty() {
            return;
        }
        let until = Instant::now() + Duration::from_millis(QUOTA_SYNC_MS);
        for (i, q) in nacre_types::QuotaId::of_owner(owner).iter().enumerate() {
            if sync_ids & (1 << i) != 0 {
                st.quota_sync.insert(*q, until);
            } else {
                st.quota_sync.remove(q);
            }
        }
    }

    /// A write of `owner`'s data was refused `EDQUOT`: all its ids are written
    /// synchronously for a while (which one is at its limit is not said).
    pub(crate) fn quota_refused(&self, owner: Owner) {
        let until = Instant::now() + Duration::from_millis(QUOTA_SYNC_MS);
        let mut st = self.st.lock();
        for q in nacre_types::QuotaId::of_owner(owner) {
            st.quota_sync.insert(q, until);
        }
    }
}
