//! The destroy thread: sends `Destroy` for objects of removed files to their OSTs, then forgets
//! their records. Records are written in the same transaction as the unlink, so a crash between
//! the two only delays destruction; the queue is rebuilt from the records at start. The same
//! thread evicts silent clients (export.rs), sends objects' ownership changes (owners.rs) and
//! glimpses files whose size the MDT wants to know again (sizes.rs).

use crate::mdt::{kv_err, Mdt};
use crate::records::{destroy_key, DESTROY};
use nacre_kv::Batch;
use nacre_net::rpc::call;
use nacre_types::{ObjectId, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Objects destroyed per RPC.
pub const DESTROY_BATCH_MAX: usize = 512;
/// Retry period when an OST is unreachable.
pub const DESTROY_RETRY_MS: u64 = 2_000;

/// Objects whose size is remembered at most, queued or about to be (past it, sizes are
/// forgotten: the space they will free is not counted).
pub const DESTROY_SIZES_MAX: usize = 1_048_576;

/// The space destroys queued and not yet done will free, per OST: pool fill levels (pool
/// spilling, policies) count it as free already, so nothing acting on them overshoots. The
/// sizes are the files' at their removal (exact where the MDT knows them, else its hint)
/// and are not stored: destroys queued before a restart count as freeing nothing.
#[derive(Default)]
pub struct DestroySpace {
    state: Mutex<SpaceState>,
}

#[derive(Default)]
struct SpaceState {
    /// Objects of removals not yet committed: their sizes.
    hints: HashMap<(u32, ObjectId), u64>,
    /// Objects queued for destruction: their sizes.
    queued: HashMap<(u32, ObjectId), u64>,
    /// Bytes queued per OST.
    by_ost: HashMap<u32, u64>,
}

impl DestroySpace {
    /// `object` on `ost`, of a file being removed, holds `bytes`.
    pub fn hint(&self, ost: u32, object: ObjectId, bytes: u64) {
        let mut s = self.state.lock();
        if s.hints.len() >= DESTROY_SIZES_MAX {
            // Removals that never committed left their hints: start over.
            s.hints.clear();
        }
        s.hints.insert((ost, object), bytes);
    }

    /// `objects` were queued for destruction (their removal committed).
    pub fn queued(&self, objects: &[(u32, ObjectId)]) {
        let mut s = self.state.lock();
        for o in objects {
            let Some(bytes) = s.hints.remove(o) else {
                continue;
            };
            if s.queued.len() < DESTROY_SIZES_MAX && s.queued.insert(*o, bytes).is_none() {
                *s.by_ost.entry(o.0).or_default() += bytes;
            }
        }
    }

    /// `objects` of `ost` are destroyed.
    pub fn done(&self, ost: u32, objects: &[ObjectId]) {
        let mut s = self.state.lock();
        for o in objects {
            if let Some(bytes) = s.queued.remove(&(ost, *o)) {
                let left = s
                    .by_ost
                    .get(&ost)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(bytes);
                if left == 0 {
                    s.by_ost.remove(&ost);
                } else {
                    s.by_ost.insert(ost, left);
                }
            }
        }
    }

    /// Bytes that destroys queued on `ost` will free.
    pub fn pending(&self, ost: u32) -> u64 {
        self.state.lock().by_ost.get(&ost).copied().unwrap_or(0)
    }

    /// (OST, bytes queued on it), for every OST with some, by OST.
    pub fn by_ost(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .state
            .lock()
            .by_ost
            .iter()
            .map(|(o, b)| (*o, *b))
            .collect();
        v.sort_unstable();
        v
    }

    /// (objects whose size is known, bytes) queued on all OSTs.
    pub fn total(&self) -> (usize, u64) {
        let s = self.state.lock();
        (s.queued.len(), s.by_ost.values().sum())
    }
}

/// One pass: destroys what is queued; returns the number of objects destroyed.
pub fn destroy_pending(mdt: &Mdt) -> Result<usize, Status> {
    let taken: Vec<(u32, ObjectId)> = {
        let mut q = mdt.destroy_queue.lock().expect("destroy queue");
        let n = q.len().min(DESTROY_BATCH_MAX * 4);
        q.drain(..n).collect()
    };
    let mut by_ost: BTreeMap<u32, Vec<ObjectId>> = BTreeMap::new();
    for (ost, object) in taken {
        by_ost.entry(ost).or_default().push(object);
    }
    let mut done = 0;
    let mut retry = Vec::new();
    for (ost, objects) in by_ost {
        let Some(conn) = mdt.osts.conn(ost) else {
            retry.extend(objects.into_iter().map(|o| (ost, o)));
            continue;
        };
        for chunk in objects.chunks(DESTROY_BATCH_MAX) {
            let req = OssRequest::Destroy {
                objects: chunk.to_vec(),
            };
            match call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::server(req)) {
                Ok(_) => {
                    let mut b = Batch::new();
                    for o in chunk {
                        b.delete(DESTROY, destroy_key(ost, *o));
                    }
                    mdt.kv.commit(b).map_err(kv_err)?;
                    mdt.destroy_space.done(ost, chunk);
                    done += chunk.len();
                }
                Err(e) => {
                    tracing::debug!("destroy on OST{ost:04x} deferred: {e}");
                    retry.extend(chunk.iter().map(|o| (ost, *o)));
                }
            }
        }
    }
    if !retry.is_empty() {
        mdt.destroy_queue
            .lock()
            .expect("destroy queue")
            .extend(retry);
    }
    Ok(done)
}

/// Runs the destroy loop until `stop` is set; it also evicts silent clients (which may
/// queue destroys), checking every [`DESTROY_RETRY_MS`] at most.
pub fn run(mdt: Arc<Mdt>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = crate::export::evict_silent(&mdt) {
            tracing::warn!("{}: eviction: {e}", mdt.label.name());
        }
        // A recovery window nobody replays in still closes on time.
        mdt.recovery.tick(&mdt);
        if let Err(e) = mdt.reap_orphans() {
            tracing::warn!("{}: orphan removal: {e}", mdt.label.name());
        }
        let owners = match crate::owners::sync_pending(&mdt) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("{}: object ownership changes: {e}", mdt.label.name());
                0
            }
        };
        let sizes = crate::sizes::glimpse_pending(&mdt);
        let more = matches!(destroy_pending(&mdt), Ok(n) if n > 0) || owners > 0 || sizes > 0;
        if more {
            continue;
        }
        let (lock, cv) = &mdt.destroy_signal;
        let mut kicked = lock.lock().expect("destroy signal");
        if !*kicked {
            kicked = cv
                .wait_timeout(kicked, Duration::from_millis(DESTROY_RETRY_MS))
                .expect("destroy signal")
                .0;
        }
        *kicked = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_is_pending_from_the_queue_to_the_destroy() {
        let d = DestroySpace::default();
        let o = |id| ObjectId { seq: 0, id };
        d.hint(1, o(1), 100);
        d.hint(1, o(2), 50);
        d.hint(2, o(3), 7);
        assert_eq!(d.pending(1), 0, "not committed yet");
        d.queued(&[(1, o(1)), (1, o(2)), (2, o(3)), (2, o(9))]);
        assert_eq!((d.pending(1), d.pending(2)), (150, 7));
        assert_eq!(d.total(), (3, 157));
        d.done(1, &[o(1), o(1)]);
        assert_eq!(d.pending(1), 50);
        d.done(1, &[o(2)]);
        d.done(2, &[o(3)]);
        assert_eq!(d.total(), (0, 0));
    }
}
