//! Delegated directories called back when a rule their holders check creates by changes
//! (docs/locking.md, "Delegated directories"). A holder answers creates itself with the
//! ids its client has and no quota check, so it may hold a delegation only while the MDT
//! enforces no quota limit and its nodemap maps no ids (`execute::delegable`, the
//! handler): when a limit appears here or the nodemaps change, every delegation of the MDT
//! is called back, and a holder that does not cancel in time is evicted. What a holder
//! answered before sends while it cancels, still under its delegation, and is counted
//! against the quotas without being refused (`ops::batch::delegation_held`): the application
//! already has those files.

use crate::mdt::Mdt;
use nacre_ldlm::msg::DELEGATION;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Calls back every delegation `mdt` granted (`why`, logged); returns how many directories
/// were delegated. Nothing is scanned on an MDT that never delegated.
pub fn revoke_all(mdt: &Arc<Mdt>, why: &str) -> usize {
    if !mdt.delegated.load(Ordering::Acquire) {
        return 0;
    }
    let dirs = mdt.ldlm.resources_where(|bits| bits & DELEGATION != 0);
    if dirs.is_empty() {
        return 0;
    }
    tracing::info!(
        "{}: calling back {} delegated directories: {why}",
        mdt.label.name(),
        dirs.len()
    );
    let targets: Vec<_> = dirs.iter().map(|d| (*d, DELEGATION)).collect();
    let weak = Arc::downgrade(mdt);
    mdt.ldlm.revoke_later(
        None,
        &targets,
        Box::new(move |late| {
            if let Some(m) = weak.upgrade() {
                for c in &late {
                    crate::eviction::evict_now(&m, c, "did not give a delegation back in time");
                }
            }
        }),
    );
    dirs.len()
}

/// Calls back `mdt`'s delegations if it now enforces an inode quota limit, or has just
/// begun to enforce a block limit on its bytes (delegations granted before said their
/// files' creates may carry bytes: `ops::batch::data_bytes_max`), after the quota master's
/// answers were applied; returns how many directories were delegated.
pub fn revoke_if_limited(mdt: &Arc<Mdt>) -> usize {
    let bytes_limited = mdt.dom_quota.any_limited();
    let bytes_newly = bytes_limited && !mdt.dom_limited.swap(bytes_limited, Ordering::AcqRel);
    if !bytes_limited {
        mdt.dom_limited.store(false, Ordering::Release);
    }
    if mdt.quota.any_limited() {
        return revoke_all(mdt, "an inode quota limit is enforced");
    }
    match bytes_newly {
        true => revoke_all(mdt, "a block quota limit on the MDT's bytes is enforced"),
        false => 0,
    }
}
