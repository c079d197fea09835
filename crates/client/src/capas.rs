//! Object capabilities this client was given (crates/wire/src/capa.rs): with a file-system
//! key, the MDT hands one out for each object of a file's layout while this client holds
//! the file open, and the OSTs want one with each data request on that object (a write
//! kept behind under a write lock needs none). Without a key there are none.

use nacre_types::ObjectId;
use nacre_wire::capa::{Capa, CAPA_READ, CAPA_WRITE};
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
    /// By (OST, object): the newest capability that allows reading, and the newest that
    /// allows writing (one capability may be both).
    map: Mutex<HashMap<(u32, ObjectId), Slots>>,
}

/// A reading and a writing capability for one object.
type Slots = [Option<Capa>; 2];

/// The slot of a capability that allows `ops`' first operation: reading 0, writing 1.
fn slots(ops: u8) -> impl Iterator<Item = usize> {
    [(CAPA_READ, 0), (CAPA_WRITE, 1)]
        .into_iter()
        .filter(move |(bit, _)| ops & bit != 0)
        .map(|(_, slot)| slot)
}

impl Capas {
    /// Keeps the capabilities of an answer.
    pub fn note(&self, capas: &[Capa]) {
        if capas.is_empty() {
            return;
        }
        let mut map = self.map.lock();
        if map.len() + capas.len() > CAPAS_KEPT_MAX {
            let expiry = |e: &Slots| e.iter().flatten().map(|c| c.expiry_s).max();
            let mut expiries: Vec<u64> = map.values().filter_map(expiry).collect();
            expiries.sort_unstable();
            let cut = expiries[expiries.len() / 2];
            map.retain(|_, e| expiry(e).is_some_and(|x| x > cut));
            if map.len() + capas.len() > CAPAS_KEPT_MAX {
                map.clear();
            }
        }
        for c in capas {
            let e = map.entry((c.ost, c.object)).or_default();
            for slot in slots(c.ops) {
                e[slot] = Some(*c);
            }
        }
        self.any.store(true, Ordering::Release);
    }

    /// The capability for the object `req` names on OST `ost` that allows what it does,
    /// if this client has one.
    pub fn for_request(&self, ost: u32, req: &OssRequest) -> Option<Capa> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let object = req.key_object()?;
        let write = matches!(
            req,
            OssRequest::Write { .. }
                | OssRequest::Punch { .. }
                | OssRequest::Fallocate { .. }
                | OssRequest::Enqueue { write: true, .. }
        );
        let e = *self.map.lock().get(&(ost, object))?;
        e[usize::from(write)].or(e[0]).or(e[1])
    }
}
