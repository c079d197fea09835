//! Space grants (Lustre's grant): space an OST promises a client for data the client keeps
//! cached before writing it (write-behind), so a write acknowledged from the cache never
//! fails later for want of space. Grants are counted against the OST's free space: a write
//! not covered by a grant is refused `ENOSPC` when the space left beside every grant is too
//! small for it. A client's grant is topped up with its writes (up to
//! [`GRANT_BYTES_PER_CLIENT`], at most half of what no grant holds yet) and taken back when it
//! is evicted, disconnects, or stays silent for [`GRANT_IDLE_MS`]. Grants live in memory: an
//! OST that restarts has promised nothing (its clients see a new epoch and start over).

use nacre_types::Status;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Most space one client is promised on one OST.
pub const GRANT_BYTES_PER_CLIENT: u64 = 64 << 20;
/// A client not heard from for this long has its grant taken back.
pub const GRANT_IDLE_MS: u64 = 300_000;

#[derive(Default)]
struct State {
    by_client: HashMap<[u8; 16], (u64, Instant)>,
    total: u64,
}

/// One OST's grants.
#[derive(Default)]
pub struct Grants {
    state: Mutex<State>,
}

impl Grants {
    /// Space promised to clients now.
    pub fn total(&self) -> u64 {
        self.state.lock().total
    }

    /// Clients holding a grant now.
    pub fn clients(&self) -> usize {
        self.state.lock().by_client.len()
    }

    /// A write of `len` bytes by `client`, `used` of them cached under its grant, is about
    /// to be written; `avail` is the OST's free space now. Refuses (`ENOSPC`) a part not
    /// under grant that would eat into space promised to others; otherwise takes `used`
    /// off the grant and, with `top_up`, returns what is added to it.
    pub fn write(
        &self,
        client: &[u8; 16],
        len: u64,
        used: u64,
        avail: impl FnOnce() -> u64,
        top_up: bool,
    ) -> Result<u64, Status> {
        let mut s = self.state.lock();
        let now = Instant::now();
        s.reclaim_idle(now);
        let held = s.by_client.get(client).map_or(0, |g| g.0);
        let used = used.min(held).min(len);
        let unpromised = len - used;
        let need_avail = unpromised > 0 || top_up;
        let avail = if need_avail { avail() } else { 0 };
        // Space no grant holds (the client's own grant counts as its own).
        let free = avail.saturating_sub(s.total - held);
        if unpromised > 0 && free < unpromised + held.saturating_sub(used) {
            return Err(Status::NoSpc);
        }
        let mut added = 0;
        let left = held - used;
        if top_up && left < GRANT_BYTES_PER_CLIENT {
            let spare = avail.saturating_sub(s.total - used + unpromised) / 2;
            added = (GRANT_BYTES_PER_CLIENT - left).min(spare);
        }
        s.total = s.total - used + added;
        if left + added > 0 {
            s.by_client.insert(*client, (left + added, now));
        } else {
            s.by_client.remove(client);
        }
        Ok(added)
    }

    /// `client` was heard from (a poll): its grant is not idle.
    pub fn seen(&self, client: &[u8; 16]) {
        if let Some(g) = self.state.lock().by_client.get_mut(client) {
            g.1 = Instant::now();
        }
    }

    /// Takes `client`'s grant back (evicted, disconnected). Returns how much it held.
    pub fn release(&self, client: &[u8; 16]) -> u64 {
        let mut s = self.state.lock();
        let g = s.by_client.remove(client).map_or(0, |g| g.0);
        s.total -= g;
        g
    }
}

impl State {
    fn reclaim_idle(&mut self, now: Instant) {
        let idle = Duration::from_millis(GRANT_IDLE_MS);
        let before = self.by_client.len();
        let mut freed = 0;
        self.by_client.retain(|_, (g, seen)| {
            let keep = now.duration_since(*seen) < idle;
            if !keep {
                freed += *g;
            }
            keep
        });
        if self.by_client.len() != before {
            self.total -= freed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 16] = [1; 16];
    const B: [u8; 16] = [2; 16];

    #[test]
    fn grants_are_counted_against_free_space() {
        let g = Grants::default();
        let mib = 1u64 << 20;
        // 100 MiB free: A is granted half of it (capped at 64 MiB: 50 MiB).
        let added = g.write(&A, mib, 0, || 100 * mib, true).unwrap();
        assert_eq!(added, (100 * mib - mib) / 2);
        assert_eq!(g.total(), added);
        // B writes without a grant: refused once its write would eat into A's grant.
        let free_for_b = 100 * mib - added;
        assert_eq!(
            g.write(&B, free_for_b + 1, 0, || 100 * mib, false),
            Err(Status::NoSpc)
        );
        assert_eq!(g.write(&B, mib, 0, || 100 * mib, false), Ok(0));
        // A writes what it cached under its grant even with no space left beside it.
        assert_eq!(g.write(&A, 10 * mib, 10 * mib, || added, false), Ok(0));
        assert_eq!(g.total(), added - 10 * mib);
        // Released with its client.
        assert_eq!(g.release(&A), added - 10 * mib);
        assert_eq!((g.total(), g.clients()), (0, 0));
    }

    #[test]
    fn a_grant_never_exceeds_the_bound_or_the_space() {
        let g = Grants::default();
        for _ in 0..10 {
            g.write(&A, 4096, 0, || u64::MAX / 4, true).unwrap();
        }
        assert_eq!(g.total(), GRANT_BYTES_PER_CLIENT);
        let g = Grants::default();
        assert_eq!(g.write(&A, 0, 0, || 0, true), Ok(0));
        assert_eq!(g.clients(), 0);
    }
}
