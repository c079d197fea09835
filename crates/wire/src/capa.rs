//! Object capabilities (Lustre's OSS capabilities, which Lustre dropped; docs/security.md):
//! the OSTs' authority for data requests.
//!
//! With a file-system key, the MDT gives a client a capability for each object of a file's
//! layout only while the client holds the file open — opened with the permission the MDT
//! checked — never with a bare lookup or layout by FID. A capability names the file, the
//! OST and object, the operations the open allows (read, or read and write), the layout's
//! generation, the key identity it was given to (its holder: a tenant's key cannot use
//! another's capabilities) and an expiry; a MAC over all of it, keyed with a key derived
//! from the file system's master secret, which only servers hold. An OST serves a client's
//! read, write, punch, fallocate or extent-lock request only with a capability that allows
//! it, or (for a write kept behind under a lock) under a write lock the OST granted that
//! client: a lock is granted only with a capability, so authority taken away is taken by
//! cancelling the locks. Without a key there is nothing to check with: the OSTs check
//! nothing (`--insecure`).

use nacre_types::{Fid, ObjectId};
use serde::{Deserialize, Serialize};

/// How long a capability holds by default (`mdt.*.capa_lifetime_s`): a client that holds a
/// file open longer fetches its layout again, which gives new ones (past half their life,
/// in the background; once expired, before the request that needs one).
pub const CAPA_LIFETIME_S: u64 = 86_400;
/// Shortest capability lifetime an MDT may be set to.
pub const CAPA_LIFETIME_S_MIN: u64 = 2;
/// Most capabilities one answer carries.
pub const CAPAS_PER_ANSWER_MAX: usize = 65_536;
/// The operation bit of reads (and read locks).
pub const CAPA_READ: u8 = 1;
/// The operation bit of writes, punches, fallocates (and write locks).
pub const CAPA_WRITE: u8 = 2;
/// The bits of `ops` that are operations; the high four carry the capability's format
/// version (docs/formats.md, gap 12), covered by the MAC like every field.
pub const CAPA_OPS_MASK: u8 = 0x0f;
/// Where the format version sits in `ops`.
pub const CAPA_VERSION_SHIFT: u8 = 4;
/// The capability format this side issues: 0, the MAC's context `nacre capa 2` over the
/// fields in their order. A new format (a mirror id, say) takes 1 with its own context;
/// OSTs check the formats of this release and the one before, and are upgraded before the
/// MDTs, so every capability an MDT issues is checked by its OSTs.
pub const CAPA_VERSION: u8 = 0;
/// The oldest capability format an OST checks.
pub const CAPA_VERSION_MIN: u8 = 0;

/// A capability for one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capa {
    /// The file whose layout holds the object.
    pub fid: Fid,
    /// The OST holding the object.
    pub ost: u32,
    /// The object.
    pub object: ObjectId,
    /// The generation of the layout it was given with.
    pub layout_gen: u32,
    /// Operations allowed ([`CAPA_READ`], [`CAPA_WRITE`]) in the low four bits, the
    /// capability's format version in the high four ([`CAPA_VERSION_SHIFT`]).
    pub ops: u8,
    /// Who it was given to ([`holder_of`] the key identity).
    pub holder: [u8; 16],
    /// Seconds since the epoch after which it no longer holds.
    pub expiry_s: u64,
    /// BLAKE3 keyed with the capability key over every field above, first 16 bytes.
    pub mac: [u8; 16],
}

/// Why a capability does not allow a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapaRefusal {
    /// Its MAC is not the servers': forged or changed.
    #[error("not made by the file system's servers")]
    Forged,
    /// It is for another object, or another OST.
    #[error("for another object")]
    OtherObject,
    /// It was given to another key's holder.
    #[error("given to another key")]
    OtherHolder,
    /// It does not allow the operation (a read-only open's capability for a write).
    #[error("does not allow the operation")]
    Operation,
    /// It expired.
    #[error("expired")]
    Expired,
    /// Of a capability format this side does not check (an MDT upgraded before its OSTs).
    #[error("of capability format {0}, which this OST does not check (upgrade the OSTs first)")]
    Version(u8),
}

/// The holder value of the key identity `tenant` (the network layer's `Caller::tenant`).
pub fn holder_of(tenant: &str) -> [u8; 16] {
    let mut h = [0u8; 16];
    h.copy_from_slice(&blake3::hash(tenant.as_bytes()).as_bytes()[..16]);
    h
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Capa {
    /// A capability over `fid`'s `object` on OST `ost` for `ops`, given to `holder`, good
    /// for [`CAPA_LIFETIME_S`].
    pub fn issue(
        key: &[u8; 32],
        fid: Fid,
        ost: u32,
        object: ObjectId,
        layout_gen: u32,
        ops: u8,
        holder: [u8; 16],
    ) -> Capa {
        Capa::issue_for(
            key,
            (fid, ost, object),
            layout_gen,
            ops,
            holder,
            CAPA_LIFETIME_S,
        )
    }

    /// [`Capa::issue`] for `(fid, ost, object)`, good for `lifetime_s`.
    pub fn issue_for(
        key: &[u8; 32],
        (fid, ost, object): (Fid, u32, ObjectId),
        layout_gen: u32,
        ops: u8,
        holder: [u8; 16],
        lifetime_s: u64,
    ) -> Capa {
        let mut c = Capa {
            fid,
            ost,
            object,
            layout_gen,
            ops: (CAPA_VERSION << CAPA_VERSION_SHIFT) | (ops & CAPA_OPS_MASK),
            holder,
            expiry_s: now_s().saturating_add(lifetime_s),
            mac: [0; 16],
        };
        c.mac = c.compute_mac(key);
        c
    }

    /// The capability's format version (the high bits of `ops`).
    pub fn version(&self) -> u8 {
        self.ops >> CAPA_VERSION_SHIFT
    }

    /// The MAC of format 0 (the only one so far; a new format has its own function and
    /// context string).
    fn compute_mac(&self, key: &[u8; 32]) -> [u8; 16] {
        let mut h = blake3::Hasher::new_keyed(key);
        h.update(b"nacre capa 2");
        h.update(&self.fid.seq.to_le_bytes());
        h.update(&self.fid.oid.to_le_bytes());
        h.update(&self.fid.ver.to_le_bytes());
        h.update(&self.ost.to_le_bytes());
        h.update(&self.object.seq.to_le_bytes());
        h.update(&self.object.id.to_le_bytes());
        h.update(&self.layout_gen.to_le_bytes());
        h.update(&[self.ops]);
        h.update(&self.holder);
        h.update(&self.expiry_s.to_le_bytes());
        let mut m = [0u8; 16];
        m.copy_from_slice(&h.finalize().as_bytes()[..16]);
        m
    }

    /// Whether this capability, checked with `key`, lets `holder` do `ops` on `object` of
    /// OST `ost` now.
    pub fn allows(
        &self,
        key: &[u8; 32],
        ost: u32,
        object: ObjectId,
        ops: u8,
        holder: &[u8; 16],
    ) -> Result<(), CapaRefusal> {
        if !(CAPA_VERSION_MIN..=CAPA_VERSION).contains(&self.version()) {
            return Err(CapaRefusal::Version(self.version()));
        }
        let want = self.compute_mac(key);
        let same = want
            .iter()
            .zip(&self.mac)
            .fold(0u8, |a, (x, y)| a | (x ^ y))
            == 0;
        if !same {
            return Err(CapaRefusal::Forged);
        }
        if self.ost != ost || self.object != object {
            return Err(CapaRefusal::OtherObject);
        }
        if &self.holder != holder {
            return Err(CapaRefusal::OtherHolder);
        }
        if self.ops & CAPA_OPS_MASK & ops != ops {
            return Err(CapaRefusal::Operation);
        }
        if self.expiry_s < now_s() {
            return Err(CapaRefusal::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_allows_its_holder_its_object_and_its_operations_only() {
        let key = [3u8; 32];
        let fid = Fid::new(0x2_0000_0400, 9);
        let o = ObjectId { seq: 1, id: 7 };
        let me = holder_of("key:client/a/tenant-a");
        let other = holder_of("key:client/b/tenant-b");
        let c = Capa::issue(&key, fid, 2, o, 0, CAPA_READ, me);
        assert_eq!(c.allows(&key, 2, o, CAPA_READ, &me), Ok(()));
        assert_eq!(
            c.allows(&key, 3, o, CAPA_READ, &me),
            Err(CapaRefusal::OtherObject)
        );
        let o8 = ObjectId { seq: 1, id: 8 };
        assert_eq!(
            c.allows(&key, 2, o8, CAPA_READ, &me),
            Err(CapaRefusal::OtherObject)
        );
        assert_eq!(
            c.allows(&key, 2, o, CAPA_READ, &other),
            Err(CapaRefusal::OtherHolder)
        );
        assert_eq!(
            c.allows(&key, 2, o, CAPA_WRITE, &me),
            Err(CapaRefusal::Operation),
            "a read-only open's capability writes nothing"
        );
        assert_eq!(
            c.allows(&[4u8; 32], 2, o, CAPA_READ, &me),
            Err(CapaRefusal::Forged)
        );
        for forge in [
            Capa { object: o8, ..c },
            Capa {
                ops: CAPA_READ | CAPA_WRITE,
                ..c
            },
            Capa { holder: other, ..c },
            Capa {
                expiry_s: u64::MAX,
                ..c
            },
            Capa {
                fid: Fid::ROOT,
                ..c
            },
        ] {
            assert_eq!(
                forge.allows(&key, forge.ost, forge.object, CAPA_READ, &forge.holder),
                Err(CapaRefusal::Forged),
                "a changed field fails the MAC: {forge:?}"
            );
        }
        // A capability of a newer format (an MDT upgraded before this OST) is named as
        // such, not taken for a forgery; a format-0 capability is today's bytes: the
        // version bits are zero and the MAC's context is the one before this rule.
        assert_eq!(c.version(), 0);
        assert_eq!(c.ops, CAPA_READ);
        let mut newer = Capa {
            ops: (1 << CAPA_VERSION_SHIFT) | CAPA_READ,
            ..c
        };
        newer.mac = newer.compute_mac(&key);
        assert_eq!(
            newer.allows(&key, 2, o, CAPA_READ, &me),
            Err(CapaRefusal::Version(1))
        );
        let issued = Capa::issue(&key, fid, 2, o, 0, 0xf0 | CAPA_WRITE, me);
        assert_eq!(
            issued.ops, CAPA_WRITE,
            "an issuer cannot set the version bits"
        );
        let mut old = Capa { expiry_s: 1, ..c };
        old.mac = old.compute_mac(&key);
        assert_eq!(
            old.allows(&key, 2, o, CAPA_READ, &me),
            Err(CapaRefusal::Expired)
        );
    }
}
