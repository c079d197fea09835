//! Client uuids bound to the key identities that use them (as the MDT's exports bind
//! theirs): with keys, the first request naming a client uuid binds it to its connection's
//! key identity, and a request naming it from another identity is refused (`EPERM`), so a
//! client that learns another's uuid cannot cancel or poll its extent locks, answer its
//! glimpses or end its locks and grants with a `Disconnect`. The binding ends with the
//! uuid's `Disconnect`. Without keys there is no identity to bind to (uuids are random and
//! never published).

use nacre_types::Status;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Bindings kept at most; past it, those of uuids that hold no locks are dropped first.
pub const CLAIMS_MAX: usize = 1 << 18;

/// The bindings of one OSS process.
#[derive(Default)]
pub struct Claims {
    map: Mutex<HashMap<[u8; 16], String>>,
}

impl Claims {
    /// Binds `client` to `tenant`, or checks that it is bound to it (`EPERM` if bound to
    /// another). `holds`: whether a uuid holds locks here (kept when full);
    /// `EBUSY` if every binding is of one that does.
    pub fn claim(
        &self,
        client: &[u8; 16],
        tenant: &str,
        holds: impl Fn(&[u8; 16]) -> bool,
    ) -> Result<(), Status> {
        let mut map = self.map.lock();
        match map.get(client) {
            Some(t) if t == tenant => return Ok(()),
            Some(_) => return Err(Status::Perm),
            None => {}
        }
        if map.len() >= CLAIMS_MAX {
            map.retain(|c, _| holds(c));
            if map.len() >= CLAIMS_MAX {
                return Err(Status::Busy);
            }
        }
        map.insert(*client, tenant.to_string());
        Ok(())
    }

    /// The uuids bound to one of `tenants`.
    pub fn clients_of(&self, tenants: &[String]) -> Vec<[u8; 16]> {
        self.map
            .lock()
            .iter()
            .filter(|(_, t)| tenants.contains(t))
            .map(|(c, _)| *c)
            .collect()
    }

    /// `client` disconnected: its uuid is bound to nothing.
    pub fn release(&self, client: &[u8; 16]) {
        self.map.lock().remove(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_is_its_first_identitys_until_it_disconnects() {
        let c = Claims::default();
        let (u, v) = ([1; 16], [2; 16]);
        c.claim(&u, "key:client/a/x", |_| true).unwrap();
        c.claim(&u, "key:client/a/x", |_| true).unwrap();
        assert_eq!(c.claim(&u, "key:client/b/y", |_| true), Err(Status::Perm));
        c.claim(&v, "key:client/b/y", |_| true).unwrap();
        c.release(&u);
        c.claim(&u, "key:client/b/y", |_| true).unwrap();
    }
}
