//! Object capabilities this client was given (crates/wire/src/capa.rs): with a file-system
//! key, the MDT hands one out for each object of a file's layout while this client holds
//! the file open, and the OSTs want one with each data request on that object (a write
//! kept behind under a write lock needs none). Without a key there are none.

use nacre_types::{Fid, ObjectId};
use nacre_wire::capa::{Capa, CAPA_READ, CAPA_WRITE};
use nacre_wire::oss::OssRequest;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

/// Capabilities kept at most (past it, the oldest half is dropped; the MDT gives them again
/// with the layout).
pub const CAPAS_KEPT_MAX: usize = 1 << 20;

/// Renewals running at once (fetches of a layout for fresh capabilities in the
/// background); past it, a due capability is renewed when it expires.
pub const CAPA_RENEWALS_MAX: usize = 64;

/// The capabilities of one client, by (OST, object).
#[derive(Default)]
pub struct Capas {
    any: AtomicBool,
    /// By (OST, object): the newest capability that allows reading, and the newest that
    /// allows writing (one capability may be both), each with when it is due for renewal.
    map: Mutex<HashMap<(u32, ObjectId), Slots>>,
    /// Files whose capabilities are being renewed now.
    renewing: Mutex<HashSet<Fid>>,
}

/// A reading and a writing capability for one object, each with the second (since the
/// epoch) past which it is renewed: half its life after it was received.
type Slots = [Option<(Capa, u64)>; 2];

/// How a capability stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Within the first half of its life.
    Fresh,
    /// Past half its life: renewed in the background.
    Due,
    /// Past its expiry: renewed before it is used.
    Expired,
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

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
            let expiry = |e: &Slots| e.iter().flatten().map(|(c, _)| c.expiry_s).max();
            let mut expiries: Vec<u64> = map.values().filter_map(expiry).collect();
            expiries.sort_unstable();
            let cut = expiries[expiries.len() / 2];
            map.retain(|_, e| expiry(e).is_some_and(|x| x > cut));
            if map.len() + capas.len() > CAPAS_KEPT_MAX {
                map.clear();
            }
        }
        let now = now_s();
        for c in capas {
            let renew_at = now + c.expiry_s.saturating_sub(now) / 2;
            let e = map.entry((c.ost, c.object)).or_default();
            for slot in slots(c.ops) {
                e[slot] = Some((*c, renew_at));
            }
        }
        self.any.store(true, Ordering::Release);
    }

    /// The capability for the object `req` names on OST `ost` that allows what it does,
    /// if this client has one.
    pub fn for_request(&self, ost: u32, req: &OssRequest) -> Option<Capa> {
        self.lookup(ost, req).map(|(c, _)| c)
    }

    /// [`Capas::for_request`], with how it stands.
    pub fn lookup(&self, ost: u32, req: &OssRequest) -> Option<(Capa, Freshness)> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let object = req.key_object()?;
        let write = matches!(
            req,
            OssRequest::Write { .. }
                | OssRequest::WriteRuns { .. }
                | OssRequest::Punch { .. }
                | OssRequest::Fallocate { .. }
                | OssRequest::Enqueue { write: true, .. }
        );
        let e = *self.map.lock().get(&(ost, object))?;
        let (c, renew_at) = e[usize::from(write)].or(e[0]).or(e[1])?;
        let now = now_s();
        let state = if now >= c.expiry_s {
            Freshness::Expired
        } else if now >= renew_at {
            Freshness::Due
        } else {
            Freshness::Fresh
        };
        Some((c, state))
    }

    /// Marks `fid`'s capabilities as being renewed; false if they are already, or if
    /// [`CAPA_RENEWALS_MAX`] renewals run.
    pub fn start_renewal(&self, fid: Fid) -> bool {
        let mut r = self.renewing.lock();
        r.len() < CAPA_RENEWALS_MAX && r.insert(fid)
    }

    /// `fid`'s renewal ended.
    pub fn end_renewal(&self, fid: Fid) {
        self.renewing.lock().remove(&fid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capa(expiry_s: u64) -> Capa {
        Capa {
            fid: Fid::new(0x200000400, 1),
            ost: 1,
            object: ObjectId { seq: 0, id: 7 },
            layout_gen: 0,
            ops: CAPA_READ,
            holder: [0; 16],
            expiry_s,
            mac: [0; 16],
        }
    }

    #[test]
    fn a_capability_is_fresh_then_expired_and_renewed_once_at_a_time() {
        let c = Capas::default();
        let read = OssRequest::Read {
            object: ObjectId { seq: 0, id: 7 },
            offset: 0,
            len: 4096,
            lock: false,
        };
        assert_eq!(c.lookup(1, &read), None);
        c.note(&[capa(now_s() + 1000)]);
        assert_eq!(c.lookup(1, &read).map(|(_, s)| s), Some(Freshness::Fresh));
        assert_eq!(c.lookup(2, &read), None, "another OST's object");
        c.note(&[capa(now_s().saturating_sub(1))]);
        assert_eq!(c.lookup(1, &read).map(|(_, s)| s), Some(Freshness::Expired));
        let fid = capa(0).fid;
        assert!(c.start_renewal(fid));
        assert!(!c.start_renewal(fid), "one renewal of a file at a time");
        c.end_renewal(fid);
        assert!(c.start_renewal(fid));
    }
}
