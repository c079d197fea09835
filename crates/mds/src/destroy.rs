//! The destroy thread: sends `Destroy` for objects of removed files to their OSTs, then forgets
//! the records. Records are written in the same transaction as the unlink, so a crash between
//! the two only delays destruction.

use crate::mdt::{kv_err, Mdt};
use crate::records::{parse_destroy_key, DESTROY};
use nacre_kv::Batch;
use nacre_net::rpc::call;
use nacre_types::{ObjectId, Status};
use nacre_wire::oss::{OssReply, OssRequest};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Objects destroyed per RPC.
pub const DESTROY_BATCH_MAX: usize = 512;
/// Retry period when an OST is unreachable.
pub const DESTROY_RETRY_MS: u64 = 2_000;

/// One pass: destroys what is pending; returns the number of objects destroyed.
pub fn destroy_pending(mdt: &Mdt) -> Result<usize, Status> {
    let pending = mdt
        .kv
        .scan(DESTROY, &[], None, DESTROY_BATCH_MAX * 4)
        .map_err(kv_err)?;
    let mut by_ost: BTreeMap<u32, Vec<(Vec<u8>, ObjectId)>> = BTreeMap::new();
    for (k, _) in pending {
        if let Some((ost, object)) = parse_destroy_key(&k) {
            by_ost.entry(ost).or_default().push((k, object));
        }
    }
    let mut done = 0;
    for (ost, items) in by_ost {
        let Some(conn) = mdt.osts.conn(ost) else {
            continue;
        };
        for chunk in items.chunks(DESTROY_BATCH_MAX) {
            let req = OssRequest::Destroy {
                objects: chunk.iter().map(|(_, o)| *o).collect(),
            };
            match call::<_, OssReply>(&conn, req.opcode(), ost, &req) {
                Ok(_) => {
                    let mut b = Batch::new();
                    for (k, _) in chunk {
                        b.delete(DESTROY, k.clone());
                    }
                    mdt.kv.commit(b).map_err(kv_err)?;
                    done += chunk.len();
                }
                Err(e) => {
                    tracing::debug!("destroy on OST{ost:04x} deferred: {e}");
                    break;
                }
            }
        }
    }
    Ok(done)
}

/// Runs the destroy loop until `stop` is set.
pub fn run(mdt: Arc<Mdt>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let more = matches!(destroy_pending(&mdt), Ok(n) if n > 0);
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
