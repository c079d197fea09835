//! Object capabilities (Lustre's OSS capabilities): the MDT gives a client that may only
//! reach part of the file system (a nodemap's fileset) a capability for each object of
//! every layout it hands out; the client sends it with each request on that object, and
//! the OST serves the request only if the capability is the MDT's (a MAC with a key both
//! derive from the file system's key), names that OST and object, and has not expired.

use nacre_types::ObjectId;
use serde::{Deserialize, Serialize};

/// How long a capability holds (a client holding a file longer fetches its layout again).
pub const CAPA_LIFETIME_S: u64 = 86_400;
/// Most capabilities one answer carries.
pub const CAPAS_PER_ANSWER_MAX: usize = 65_536;

/// A capability for one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capa {
    /// The OST holding the object.
    pub ost: u32,
    /// The object.
    pub object: ObjectId,
    /// Seconds since the epoch after which it no longer holds.
    pub expiry_s: u64,
    /// BLAKE3 keyed with the capability key over the fields, first 16 bytes.
    pub mac: [u8; 16],
}

fn mac(key: &[u8; 32], ost: u32, object: ObjectId, expiry_s: u64) -> [u8; 16] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"nacre capa 1");
    h.update(&ost.to_le_bytes());
    h.update(&object.seq.to_le_bytes());
    h.update(&object.id.to_le_bytes());
    h.update(&expiry_s.to_le_bytes());
    let mut m = [0u8; 16];
    m.copy_from_slice(&h.finalize().as_bytes()[..16]);
    m
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Capa {
    /// A capability for `object` on OST `ost`, good for [`CAPA_LIFETIME_S`].
    pub fn issue(key: &[u8; 32], ost: u32, object: ObjectId) -> Capa {
        let expiry_s = now_s() + CAPA_LIFETIME_S;
        Capa {
            ost,
            object,
            expiry_s,
            mac: mac(key, ost, object, expiry_s),
        }
    }

    /// True if this is a capability made with `key` for `object` on OST `ost`, still good.
    pub fn allows(&self, key: &[u8; 32], ost: u32, object: ObjectId) -> bool {
        let want = mac(key, self.ost, self.object, self.expiry_s);
        let same = want
            .iter()
            .zip(&self.mac)
            .fold(0u8, |a, (x, y)| a | (x ^ y))
            == 0;
        same && self.ost == ost && self.object == object && self.expiry_s >= now_s()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_allows_its_object_only() {
        let key = [3u8; 32];
        let o = ObjectId { seq: 1, id: 7 };
        let c = Capa::issue(&key, 2, o);
        assert!(c.allows(&key, 2, o));
        assert!(!c.allows(&key, 3, o), "another OST");
        assert!(
            !c.allows(&key, 2, ObjectId { seq: 1, id: 8 }),
            "another object"
        );
        assert!(!c.allows(&[4u8; 32], 2, o), "another key");
        let mut forged = c;
        forged.object.id = 8;
        assert!(
            !forged.allows(&key, 2, forged.object),
            "changed fields fail the MAC"
        );
        let mut old = Capa { expiry_s: 1, ..c };
        old.mac = mac(&key, 2, o, 1);
        assert!(!old.allows(&key, 2, o), "expired");
    }
}
