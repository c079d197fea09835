//! Space grants (Lustre's grant): space an OST promises a client for data the client keeps
//! cached before writing it (write-behind), so a write acknowledged from the cache never
//! fails later for want of space. Grants are counted against the OST's free space: a write
//! not covered by a grant is refused `ENOSPC` when the space left beside every grant is too
//! small for it. A client's grant is topped up with its writes (up to
//! [`GRANT_BYTES_PER_CLIENT`], and only while all grants together stay within half of the
//! OST's free space) and taken back when it
//! is evicted, disconnects, or stays silent for [`GRANT_IDLE_MS`].
//!
//! Across a restart (Lustre reconnects with each client's grant and holds new clients back
//! for its recovery window): grants live in memory, but an upper bound of their total is
//! kept on disk ([`RESERVE_FILE`], raised and synced *before* a grant takes the total past
//! it, so a grant acknowledged is always covered). An OST that starts again holds that much
//! space back as a *reserve* for the clients it promised it to, at most [`RECOVERY_MS`]:
//! writes no grant covers may not eat into it. Each client claims what its kept data needs
//! with its lock replay ([`Grants::reclaim`]), taken from the reserve first; what is left of
//! the reserve is freed when the OST's recovery ends ([`Grants::end_reserve`]: every client
//! it waits for is back, or none was to be waited for).

use crate::recovery::{readable, split_version};
use nacre_types::Status;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most space one client is promised on one OST.
pub const GRANT_BYTES_PER_CLIENT: u64 = 64 << 20;
/// A client not heard from for this long has its grant taken back.
pub const GRANT_IDLE_MS: u64 = 300_000;
/// How long an OST that started again keeps the space it had promised before for the
/// clients that come back to claim it: its recovery window (recovery.rs), which ends
/// earlier once every client of before is back ([`Grants::end_reserve`]).
pub use crate::recovery::RECOVERY_MS;
/// The bound kept on disk is raised this far above the total when the total passes it, so
/// grants growing with writes sync it rarely (once per this much growth).
pub const RESERVE_SLACK_BYTES: u64 = 16 << 20;
/// File in the OST directory keeping the bound: a first line `# nacre grant_reserve 1`
/// (its format and version; a file without it is of version 1, written before files had
/// one), then `reserve_bytes N`.
pub const RESERVE_FILE: &str = "grant_reserve";
/// Version of [`RESERVE_FILE`] this nacre writes and the newest it reads. A newer one is
/// ignored with a warning naming both versions (the bound is advisory: none is kept) and
/// written anew in this version.
pub const RESERVE_FILE_VERSION: u32 = 1;

#[derive(Default)]
struct State {
    by_client: HashMap<[u8; 16], (u64, Instant)>,
    total: u64,
    /// Space promised before the last start and not claimed back yet, held until
    /// `reserve_until`.
    reserve: u64,
    reserve_until: Option<Instant>,
    /// The bound on disk (`None`: not kept on disk, as in unit tests).
    kept: Option<(PathBuf, u64)>,
}

/// One OST's grants.
#[derive(Default)]
pub struct Grants {
    state: Mutex<State>,
}

impl Grants {
    /// The grants of the OST in `dir`: none yet, and the space promised before its last
    /// stop held back for [`RECOVERY_MS`]. An unreadable bound holds nothing back (logged);
    /// nor does one of a newer version ([`RESERVE_FILE_VERSION`]), which is written anew.
    pub fn open(dir: &Path) -> Grants {
        let path = dir.join(RESERVE_FILE);
        let reserve = match std::fs::read_to_string(&path) {
            Ok(text) => read_bound(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => {
                tracing::warn!("{}: {e}; no grant bound kept", path.display());
                0
            }
        };
        let state = State {
            reserve,
            reserve_until: (reserve > 0)
                .then(|| Instant::now() + Duration::from_millis(RECOVERY_MS)),
            kept: Some((path, reserve)),
            ..State::default()
        };
        Grants {
            state: Mutex::new(state),
        }
    }

    /// Space promised to clients now.
    pub fn total(&self) -> u64 {
        self.state.lock().total
    }

    /// Clients holding a grant now.
    pub fn clients(&self) -> usize {
        self.state.lock().by_client.len()
    }

    /// Space still held back for clients of before the last start.
    pub fn reserve(&self) -> u64 {
        let mut s = self.state.lock();
        s.expire(Instant::now());
        s.reserve
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
        s.expire(now);
        let held = s.by_client.get(client).map_or(0, |g| g.0);
        let used = used.min(held).min(len);
        let unpromised = len - used;
        let need_avail = unpromised > 0 || top_up;
        // Space promised to no one: the reserve counts as promised.
        let avail = if need_avail {
            avail().saturating_sub(s.reserve)
        } else {
            0
        };
        // Space no grant holds (the client's own grant counts as its own).
        let free = avail.saturating_sub(s.total - held);
        if unpromised > 0 && free < unpromised + held.saturating_sub(used) {
            return Err(Status::NoSpc);
        }
        let mut added = 0;
        let left = held - used;
        if top_up && left < GRANT_BYTES_PER_CLIENT {
            // All grants together stay within half of the space left after this write, so
            // writes no grant covers (direct I/O, a cache past its grant) always find the
            // other half: topping up by half of what no grant holds each time would let one
            // client's grant creep up to all of a small OST's free space.
            let ceiling = avail.saturating_sub(unpromised) / 2;
            let spare = ceiling.saturating_sub(s.total - used);
            added = (GRANT_BYTES_PER_CLIENT - left).min(spare);
        }
        let after = s.total - used + added;
        if !s.keep_bound(after) {
            added = 0;
        }
        s.total = s.total - used + added;
        s.set(client, left + added, now);
        Ok(added)
    }

    /// `client`, back after this OST started again, claims `bytes` for the data it kept
    /// under its grant of before (its lock replay): granted from the reserve first, then
    /// from space no grant holds, up to [`GRANT_BYTES_PER_CLIENT`]. Claiming again does not
    /// add (the grant becomes the larger of the two). Returns the client's grant.
    pub fn reclaim(&self, client: &[u8; 16], bytes: u64, avail: impl FnOnce() -> u64) -> u64 {
        let mut s = self.state.lock();
        let now = Instant::now();
        s.expire(now);
        let held = s.by_client.get(client).map_or(0, |g| g.0);
        let want = bytes.min(GRANT_BYTES_PER_CLIENT);
        if want <= held {
            return held;
        }
        let from_reserve = (want - held).min(s.reserve);
        let beside = avail().saturating_sub(s.reserve).saturating_sub(s.total);
        let from_free = (want - held - from_reserve).min(beside);
        let grant = held + from_reserve + from_free;
        // The reserve was on disk already; only space newly promised may raise the bound.
        let after = s.total + from_reserve + from_free;
        if from_free > 0 && !s.keep_bound(after) {
            return held;
        }
        s.reserve -= from_reserve;
        s.total += from_reserve + from_free;
        s.set(client, grant, now);
        grant
    }

    /// Every client of before is back (recovery is over): what they did not claim is free.
    pub fn end_reserve(&self) {
        let mut s = self.state.lock();
        s.reserve = 0;
        s.reserve_until = None;
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
    fn set(&mut self, client: &[u8; 16], grant: u64, now: Instant) {
        if grant > 0 {
            self.by_client.insert(*client, (grant, now));
        } else {
            self.by_client.remove(client);
        }
    }

    /// The recovery window closed: what no client claimed back is free again.
    fn expire(&mut self, now: Instant) {
        if self.reserve_until.is_some_and(|t| now >= t) {
            self.reserve = 0;
            self.reserve_until = None;
        }
    }

    /// Makes sure the bound on disk covers grants totalling `total` (plus the reserve),
    /// raising it (synced) if not, and lowering it when grants shrank far below it (so a
    /// restart holds back about what was promised, not the most ever promised). False if
    /// a raise could not be written: the grant that needed it is not given.
    fn keep_bound(&mut self, total: u64) -> bool {
        let need = total + self.reserve;
        let Some((path, bound)) = &mut self.kept else {
            return true;
        };
        let raise = need > *bound;
        if !raise && need + 4 * RESERVE_SLACK_BYTES > *bound {
            return true;
        }
        let new = need + RESERVE_SLACK_BYTES;
        match write_synced(path, new) {
            Ok(()) => {
                *bound = new;
                true
            }
            Err(e) => {
                tracing::warn!("{}: {e}; no more space granted", path.display());
                !raise
            }
        }
    }

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

/// The bound kept in [`RESERVE_FILE`] at `path`, whose text is `text` (0: none kept).
fn read_bound(path: &Path, text: &str) -> u64 {
    let (version, rest) = split_version(text, RESERVE_FILE);
    if !readable(version, RESERVE_FILE_VERSION) {
        tracing::warn!(
            "{}: format version {version}, newer than this nacre reads \
             ({RESERVE_FILE_VERSION}): no grant bound kept; written anew",
            path.display()
        );
        if let Err(e) = write_synced(path, 0) {
            tracing::warn!("{}: {e}", path.display());
        }
        return 0;
    }
    let bound = rest
        .lines()
        .find_map(|l| l.strip_prefix("reserve_bytes "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    match bound {
        Some(n) => n,
        None => {
            tracing::warn!("{}: not a grant bound; none kept", path.display());
            0
        }
    }
}

/// Writes the bound `bytes` to `path` durably, in this nacre's version (a new file
/// renamed over the old one).
fn write_synced(path: &Path, bytes: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(
        format!("# nacre {RESERVE_FILE} {RESERVE_FILE_VERSION}\nreserve_bytes {bytes}\n")
            .as_bytes(),
    )?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
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
    fn space_promised_before_a_restart_is_held_for_the_clients_that_claim_it() {
        let dir = tempfile::tempdir().unwrap();
        let mib = 1u64 << 20;
        let g = Grants::open(dir.path());
        assert_eq!(g.reserve(), 0);
        // 100 MiB free: A is granted 49.5 MiB; the bound on disk covers it first.
        let added = g.write(&A, mib, 0, || 100 * mib, true).unwrap();
        assert!(added > 40 * mib);
        drop(g);
        // Started again (killed: nothing released): the bound is held back.
        let g = Grants::open(dir.path());
        let reserve = g.reserve();
        assert!(reserve >= added, "{reserve} < {added}");
        // B, writing with no grant, may not take it: only what is beside it.
        let avail = 100 * mib;
        assert_eq!(
            g.write(&B, avail - reserve + 1, 0, || avail, false),
            Err(Status::NoSpc)
        );
        assert_eq!(g.write(&B, mib, 0, || avail, false), Ok(0));
        // A claims what it kept (10 MiB); claiming again adds nothing.
        assert_eq!(g.reclaim(&A, 10 * mib, || avail - mib), 10 * mib);
        assert_eq!(g.reclaim(&A, 10 * mib, || avail - mib), 10 * mib);
        assert_eq!(g.reserve(), reserve - 10 * mib);
        assert_eq!(g.total(), 10 * mib);
        // A's kept data is written even with no space beside the grants and reserve.
        assert_eq!(g.write(&A, 10 * mib, 10 * mib, || 10 * mib, false), Ok(0));
        assert_eq!(g.total(), 0);
    }

    #[test]
    fn a_claim_without_a_reserve_takes_only_free_space_and_a_bad_bound_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mib = 1u64 << 20;
        std::fs::write(dir.path().join(RESERVE_FILE), b"garbage").unwrap();
        let g = Grants::open(dir.path());
        assert_eq!(g.reserve(), 0);
        // 4 MiB free: a claim of 10 MiB gets 4, never more than the per-client bound.
        assert_eq!(g.reclaim(&A, 10 * mib, || 4 * mib), 4 * mib);
        assert_eq!(
            g.reclaim(&B, u64::MAX, || u64::MAX / 2),
            GRANT_BYTES_PER_CLIENT
        );
        // Both are on disk: a restart holds them back.
        drop(g);
        assert!(Grants::open(dir.path()).reserve() >= 4 * mib + GRANT_BYTES_PER_CLIENT);
    }

    #[test]
    fn the_bound_is_written_with_its_version_and_one_without_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RESERVE_FILE);
        write_synced(&path, 4096).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# nacre grant_reserve 1\nreserve_bytes 4096\n"
        );
        assert_eq!(Grants::open(dir.path()).reserve(), 4096);
        // Written before files had a version line.
        std::fs::write(&path, "reserve_bytes 1048576\n").unwrap();
        assert_eq!(Grants::open(dir.path()).reserve(), 1 << 20);
        // Raised by a grant: written in this version.
        let g = Grants::open(dir.path());
        g.write(&A, 1 << 20, 0, || 1 << 30, true).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# nacre grant_reserve 1\nreserve_bytes "),
            "{text}"
        );
    }

    #[test]
    fn a_newer_bound_is_ignored_and_written_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RESERVE_FILE);
        std::fs::write(&path, "# nacre grant_reserve 2\nreserve_bytes 999999\n").unwrap();
        assert_eq!(Grants::open(dir.path()).reserve(), 0);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# nacre grant_reserve 1\nreserve_bytes 0\n"
        );
    }

    #[test]
    fn top_ups_leave_half_the_free_space_to_writes_no_grant_covers() {
        let g = Grants::default();
        let mib = 1u64 << 20;
        // A small OST (52 MiB free): one client writing what it cached under its grant and
        // topping it up with each write, until 40 MiB are used.
        let mut avail = 52 * mib;
        g.write(&A, mib, 0, || avail, true).unwrap();
        avail -= mib;
        for _ in 0..39 {
            g.write(&A, mib, mib, || avail, true).unwrap();
            avail -= mib;
            // The grant follows the shrinking free space: half of it, give or take a write.
            assert!(
                g.total() <= avail / 2 + mib,
                "grant {} of {avail} free",
                g.total()
            );
        }
        // Writes no grant covers still find the other half (here B's, uncached).
        assert_eq!(g.write(&B, avail - g.total(), 0, || avail, false), Ok(0));
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
