//! Delegated directories called back when a rule their holders check creates by changes
//! (docs/locking.md, "Delegated directories"). A holder answers creates itself with the
//! ids its client has, no quota check and no QoS queue, so it may hold a delegation only
//! while the MDT enforces no quota limit, no QoS rule caps the rate of what it answers
//! ([`DELEGATED_OPS`]) and its nodemap maps no ids (`execute::delegable`, the handler):
//! when a limit or such a rule appears here, every delegation of the MDT is called back,
//! and a holder that does not cancel in time is evicted; a change of the nodemaps waits
//! for every delegation to come back before it is installed ([`before_nodemap_change`]). A holder
//! also places its files by the pools as they were when its delegation was granted (the
//! MDT makes them with objects in the directory's pool: `placement::placeable` held
//! then): a change of the pools waits for every delegation to come back before it is
//! installed ([`watch_pools`]). What a holder
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

/// Operations a delegation's holder answers itself (the opens of files it keeps among
/// them), by the names QoS rules give them, and the batches that carry them.
pub const DELEGATED_OPS: &[&str] = &[
    "create",
    "mkdir",
    "unlink",
    "open",
    "create_batch",
    "unlink_batch",
    "access_batch",
];

/// True if a QoS rule of `mdt` caps the rate of an operation a holder answers itself: the
/// rule could not hold what was answered without a request (no directory is delegated
/// then).
pub fn qos_capped(mdt: &Mdt) -> bool {
    mdt.qos.caps_any(DELEGATED_OPS)
}

/// Calls back `mdt`'s delegations if its QoS rules now cap what holders answer and did not
/// before (`was`, [`qos_capped`] before the rules changed); returns how many directories
/// were delegated.
pub fn revoke_if_capped(mdt: &Arc<Mdt>, was: bool) -> usize {
    match !was && qos_capped(mdt) {
        true => revoke_all(mdt, "a QoS rule caps the rate of creates or unlinks"),
        false => 0,
    }
}

/// Runs `install` (a change of the nodemaps) once every delegation of `mdts` is back, each
/// called back and waited for (its holder evicted past the callback timeout), new grants
/// refused meanwhile (`execute::delegable`): a holder checked the creates it answered with
/// the ids its nodemap let through, so what it answered is made before the change, under
/// the nodemap it was answered by — none is refused by ids squashed or made read-only
/// after the application had its file. (A grant whose checks ran just before the change
/// began, its lock granted after the callbacks went out, is not waited for.)
pub fn before_nodemap_change(mdts: &[Arc<Mdt>], install: impl FnOnce()) {
    let mut holds = Vec::new();
    for m in mdts {
        m.nodemaps_changing.fetch_add(1, Ordering::AcqRel);
    }
    // Undone whatever happens below (a panic in the install included).
    struct Changing<'a>(&'a [Arc<Mdt>]);
    impl Drop for Changing<'_> {
        fn drop(&mut self) {
            for m in self.0 {
                m.nodemaps_changing.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    let _changing = Changing(mdts);
    for m in mdts {
        holds.extend(call_back_and_wait(m, "the nodemaps change"));
    }
    install();
    drop(holds);
}

/// Calls back every delegation `m` granted and waits until each is given back, evicting
/// the holders that do not within the callback timeout (`why`, logged): the revocation,
/// which holds new grants of them until dropped, or None if nothing was delegated.
fn call_back_and_wait<'a>(
    m: &'a Mdt,
    why: &str,
) -> Option<nacre_ldlm::server::Revocation<'a, nacre_ldlm::server::InodeBits>> {
    let dirs = match m.delegated.load(Ordering::Acquire) {
        true => m.ldlm.resources_where(|bits| bits & DELEGATION != 0),
        false => Vec::new(),
    };
    if dirs.is_empty() {
        return None;
    }
    tracing::info!(
        "{}: {why}: calling back {} delegated directories first",
        m.label.name(),
        dirs.len()
    );
    let targets: Vec<_> = dirs.iter().map(|d| (*d, DELEGATION)).collect();
    let hold = m.ldlm.revoke(None, &targets);
    for c in &hold.late {
        crate::eviction::evict_now(m, c, "did not give a delegation back in time");
    }
    Some(hold)
}

/// From now on a change of `mdt`'s OST pools calls back every delegation it granted and
/// waits until each is given back (or its holder evicted, past the callback timeout), new
/// grants refused meanwhile, before it is installed: the creates a holder answered by the
/// old pools are made by them, and none is refused for a pool emptied after it answered.
/// (A grant whose check of the pools ran just before the change began, and whose lock is
/// granted after the callbacks went out, is not waited for.)
pub fn watch_pools(mdt: &Arc<Mdt>) {
    let weak = Arc::downgrade(mdt);
    mdt.osts.before_pools_change(Box::new(move |install| {
        let Some(m) = weak.upgrade() else {
            return install();
        };
        let hold = call_back_and_wait(&m, "the OST pools change");
        install();
        drop(hold);
    }));
}
