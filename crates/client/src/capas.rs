//! Object capabilities this client was given (clients of a nodemap's fileset: the MDT
//! hands one out for each object of every layout it sends, and the OSTs want it with each
//! request on that object; crates/wire/src/capa.rs). Other clients get none and keep none.

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
            map.insert((c.ost, c.object), *c);
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
