//! The destroy thread: sends `Destroy` for objects of removed files to their OSTs, then forgets
//! their records. Records are written in the same transaction as the unlink, so a crash between
//! the two only delays destruction; the queue is rebuilt from the records at start. The same
//! thread evicts silent clients (export.rs), sends objects' ownership changes (owners.rs) and
//! glimpses files whose size the MDT wants to know again (sizes.rs).

use crate::mdt::Mdt;
use nacre_net::rpc::call;
use nacre_types::{ObjectId, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Objects destroyed per RPC.
pub const DESTROY_BATCH_MAX: usize = 512;
/// Retry period when an OST is unreachable.
pub const DESTROY_RETRY_MS: u64 = 2_000;

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
                    let mut w = mdt.store().writes();
                    w.forget_destroys(ost, chunk);
                    w.commit()?;
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

/// Files the MDT glimpses per pass.
pub const SIZE_GLIMPSES_PER_PASS_MAX: usize = 256;

/// One pass of the MDT's own glimpses: asks the OSTs the sizes of changed files no one writes
/// any more; returns how many were learned. A file whose OST cannot be asked stays unknown
/// (clients glimpse it) until a write handle of it closes again.
pub fn glimpse_pending(mdt: &crate::mdt::Mdt) -> usize {
    use nacre_net::rpc::call;
    use nacre_wire::oss::{OssCall, OssReply, OssRequest};
    let mut learned = 0;
    for (fid, generation) in mdt.sizes.to_glimpse(SIZE_GLIMPSES_PER_PASS_MAX) {
        let Ok(Some(layout)) = mdt.inode(fid).map(|r| r.layout) else {
            continue;
        };
        let mut objects = Vec::with_capacity(layout.object_count());
        for (stripe, o) in layout.objects().enumerate() {
            let Some(conn) = mdt.osts.conn(o.ost) else {
                break;
            };
            let req = OssRequest::Glimpse { object: o.object };
            match call::<_, OssReply>(&conn, req.opcode(), o.ost, &OssCall::server(req)) {
                Ok(OssReply::ObjectAttr { size, blocks }) => objects.push((stripe, size, blocks)),
                _ => break,
            }
        }
        // Every object answered, with sizes a file can have: the size is known.
        if objects.len() == layout.object_count() {
            if let Some((size, blocks)) = layout.file_size_from_objects(objects) {
                // Bytes on the MDT: its record's size counts them (ops::dom).
                let (size, blocks) = match layout.dom_end() {
                    0 => (size, blocks),
                    _ => match mdt.inode(fid) {
                        Ok(r) => (size.max(r.attr.size), blocks + r.attr.blocks),
                        Err(_) => continue,
                    },
                };
                if mdt.sizes.learned(fid, generation, size, blocks) {
                    learned += 1;
                }
            }
        }
    }
    learned
}

/// Runs the destroy loop until `stop` is set; it also evicts silent clients (which may
/// queue destroys), checking every [`DESTROY_RETRY_MS`] at most.
pub fn run(mdt: Arc<Mdt>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = crate::eviction::evict_silent(&mdt) {
            tracing::warn!("{}: eviction: {e}", mdt.label.name());
        }
        // A recovery window nobody replays in still closes on time.
        mdt.recovery.tick(&*mdt);
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
        let sizes = glimpse_pending(&mdt);
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
