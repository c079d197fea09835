//! Object capabilities this client was given (crates/wire/src/capa.rs): with a file-system
//! key, the MDT hands one out for each object of a file's layout while this client holds
//! the file open, and the OSTs want one with each data request on that object (a write
//! kept behind under a write lock needs none). Without a key there are none.

use nacre_types::ObjectId;
use nacre_wire::capa::Capa;
use nacre_wire::oss::OssRequest;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// Capabilities kept at most (past it, the oldest half is dropped; the MDT gives them again
/// with the layout).
pub const CAPAS_KEPT_MAX: usize = 1 << 20;

/// The capabilities of one client, by (OST, object).
#[derive(Default)]
pub struct Capas {
    any: AtomicBool,
    map: Mutex<HashMap<(u32, ObjectId), Capa>>,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Capas {
    /// Keeps the capabilities of an answer.
    pub fn note(&self, capas: &[Capa]) {
        if capas.is_empty() {
            return;
        }
        let mut map = self.map.lock();
        if map.len() + capas.len() > CAPAS_KEPT_MAX {
            let mut expiries: Vec<u64> = map.values().map(|c| c.expiry_s).collect();
            expiries.sort_unstable();
            let cut = expiries[expiries.len() / 2];
            map.retain(|_, c| c.expiry_s > cut);
        }
        for c in capas {
            // A read-only open's capability does not take the place of a writer's: the
            // writer's handle may still be open.
            let keep_old = map.get(&(c.ost, c.object)).is_some_and(|old| {
                old.ops & !c.ops != 0 && old.layout_gen == c.layout_gen && old.expiry_s > now_s()
            });
            if !keep_old {
                map.insert((c.ost, c.object), *c);
            }
        }
        self.any.store(true, Ordering::Release);
    }

    /// The capability for the object `req` names on OST `ost`, if this client has one.
    pub fn for_request(&self, ost: u32, req: &OssRequest) -> Option<Capa> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let object = req.key_object()?;
        self.map.lock().get(&(ost, object)).copied()
    }
}
