//! Exports: what an MDT knows of each client (Lustre's `obd_export`) — when it was last
//! heard from and which files it holds open — and eviction of clients silent for longer than
//! `evict_timeout_ms`.
//!
//! Every request (an idle client sends [`nacre_wire::mds::MdsOp::Ping`]) refreshes its
//! client's export. An evicted client's opens are dropped (files unlinked while it held them
//! are removed) and its saved replies deleted; its uuid is remembered, and every later
//! request carrying it is answered `ESHUTDOWN`, so the client learns it was evicted and
//! reconnects under a new uuid instead of silently using state that no longer exists.
//! Exports live in memory: after an MDT restart every client starts a fresh one.

use nacre_types::{Fid, Status};
use nacre_wire::mds::ReopenEntry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Default time a client may stay silent before it is evicted (Lustre: six ping intervals).
pub const EVICT_TIMEOUT_MS_DEFAULT: u64 = 150_000;
/// Shortest eviction timeout accepted.
pub const EVICT_TIMEOUT_MS_MIN: u64 = 1_000;
/// Evicted client uuids remembered (to answer them `ESHUTDOWN`); the oldest are forgotten.
pub const EVICTED_REMEMBERED_MAX: usize = 4_096;
/// Evictions listed in `recovery_status`.
const EVICTION_LOG_MAX: usize = 16;

/// A client uuid as text.
pub fn client_name(client: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*client).to_string()
}

/// One client's export.
struct Export {
    last_seen: Instant,
    /// Files this client has open here, with how many handles.
    opens: HashMap<Fid, u32>,
    /// Of those handles, how many were opened for writing (a truncate through a descriptor
    /// needs one).
    writers: HashMap<Fid, u32>,
    /// Files one of whose handles was opened for reading (until the last handle closes: a
    /// close does not say how its handle was opened), for the capabilities it may get.
    readers: HashSet<Fid>,
    /// Who made it ([`nacre_net::Caller::tenant`]; None: no caller known, below the
    /// network): requests naming its uuid from anyone else are refused.
    owner: Option<String>,
}

/// One eviction, for `recovery_status`.
#[derive(Clone, Debug)]
pub struct Eviction {
    /// The client's uuid.
    pub client: [u8; 16],
    /// When (wall clock).
    pub at: SystemTime,
    /// How long it had been silent.
    pub silent_ms: u64,
    /// Open handles dropped.
    pub opens_dropped: u32,
}

#[derive(Default)]
struct State {
    exports: HashMap<[u8; 16], Export>,
    evicted: HashSet<[u8; 16]>,
    evicted_order: VecDeque<[u8; 16]>,
    log: VecDeque<Eviction>,
}

/// The exports of one MDT.
pub struct Exports {
    state: Mutex<State>,
    /// `mdt.*.evict_timeout_ms`.
    pub evict_timeout_ms: AtomicU64,
    /// Clients evicted since start.
    pub evicted_total: AtomicU64,
    last_scan: Mutex<Instant>,
}

impl Default for Exports {
    fn default() -> Self {
        Exports {
            state: Mutex::new(State::default()),
            evict_timeout_ms: AtomicU64::new(EVICT_TIMEOUT_MS_DEFAULT),
            evicted_total: AtomicU64::new(0),
            last_scan: Mutex::new(Instant::now()),
        }
    }
}

impl Exports {
    /// A request from `client` arrived: `Err(Shutdown)` if it was evicted, else its export
    /// is refreshed (created on first contact).
    pub fn heard_from(&self, client: &[u8; 16]) -> Result<(), Status> {
        let mut s = self.state.lock().expect("exports");
        if s.evicted.contains(client) {
            return Err(Status::Shutdown);
        }
        let now = Instant::now();
        s.exports
            .entry(*client)
            .and_modify(|e| e.last_seen = now)
            .or_insert_with(|| Export {
                last_seen: now,
                opens: HashMap::new(),
                writers: HashMap::new(),
                readers: HashSet::new(),
                owner: None,
            });
        Ok(())
    }

    /// Checks that `client`'s uuid is `owner`'s: the first request naming a uuid binds it
    /// to its caller's tenant (its export is made then), and a request naming it from
    /// another tenant is refused (`EPERM`) for as long as the export lives. So a client
    /// uuid, once used, cannot be taken by another tenant's node to close its opens, end
    /// its export, poll its lock callbacks or read its saved replies. An evicted uuid is
    /// left to [`Exports::heard_from`] (`ESHUTDOWN`).
    pub fn claim(&self, client: &[u8; 16], owner: &str) -> Result<(), Status> {
        let mut s = self.state.lock().expect("exports");
        if s.evicted.contains(client) {
            return Ok(());
        }
        let e = s.exports.entry(*client).or_insert_with(|| Export {
            last_seen: Instant::now(),
            opens: HashMap::new(),
            writers: HashMap::new(),
            readers: HashSet::new(),
            owner: None,
        });
        match &e.owner {
            Some(o) if o != owner => Err(Status::Perm),
            Some(_) => Ok(()),
            None => {
                e.owner = Some(owner.to_string());
                Ok(())
            }
        }
    }

    /// Like [`Exports::heard_from`] for requests that must not make a client known (a lock
    /// poll arriving after the client disconnected): refreshes an existing export only.
    pub fn seen(&self, client: &[u8; 16]) -> Result<(), Status> {
        let mut s = self.state.lock().expect("exports");
        if s.evicted.contains(client) {
            return Err(Status::Shutdown);
        }
        if let Some(e) = s.exports.get_mut(client) {
            e.last_seen = Instant::now();
        }
        Ok(())
    }

    /// Refuses `client` from now on (the recovery window closed without it): its next
    /// request gets `ESHUTDOWN` and it comes back as a new client.
    pub fn refuse(&self, client: &[u8; 16]) {
        let mut s = self.state.lock().expect("exports");
        s.exports.remove(client);
        if s.evicted.insert(*client) {
            s.evicted_order.push_back(*client);
        }
        while s.evicted_order.len() > EVICTED_REMEMBERED_MAX {
            let old = s.evicted_order.pop_front().expect("non-empty");
            s.evicted.remove(&old);
        }
        self.evicted_total.fetch_add(1, Ordering::Relaxed);
    }

    /// `client` opened `fid` for `access` ([`nacre_types::cred::MAY_READ`] |
    /// [`nacre_types::cred::MAY_WRITE`], as the MDT checked it).
    pub fn opened(&self, client: &[u8; 16], fid: Fid, access: u8) {
        let mut s = self.state.lock().expect("exports");
        if let Some(e) = s.exports.get_mut(client) {
            let n = e.opens.entry(fid).or_insert(0);
            *n = n.saturating_add(1);
            if access & nacre_types::cred::MAY_WRITE != 0 {
                let w = e.writers.entry(fid).or_insert(0);
                *w = w.saturating_add(1);
            }
            if access & nacre_types::cred::MAY_READ != 0 {
                e.readers.insert(fid);
            }
        }
    }

    /// Whether `client` holds `fid` open through a handle opened for reading.
    pub fn holds_read_open(&self, client: &[u8; 16], fid: Fid) -> bool {
        let s = self.state.lock().expect("exports");
        s.exports
            .get(client)
            .is_some_and(|e| e.readers.contains(&fid))
    }

    /// Handles of `fid` that `client` holds open.
    pub fn open_count(&self, client: &[u8; 16], fid: Fid) -> u32 {
        let s = self.state.lock().expect("exports");
        s.exports
            .get(client)
            .and_then(|e| e.opens.get(&fid).copied())
            .unwrap_or(0)
    }

    /// Whether `client` holds `fid` open.
    pub fn holds_open(&self, client: &[u8; 16], fid: Fid) -> bool {
        let s = self.state.lock().expect("exports");
        s.exports
            .get(client)
            .is_some_and(|e| e.opens.contains_key(&fid))
    }

    /// Whether `client` holds `fid` open for writing.
    pub fn holds_write_open(&self, client: &[u8; 16], fid: Fid) -> bool {
        let s = self.state.lock().expect("exports");
        s.exports
            .get(client)
            .is_some_and(|e| e.writers.contains_key(&fid))
    }

    /// `client` says it holds `opens` (file, handles, of which writers; after
    /// reconnecting): the handles and writers its export lacks (an MDT restart forgot
    /// them). Idempotent.
    pub fn missing_opens(&self, client: &[u8; 16], opens: &[ReopenEntry]) -> Vec<ReopenEntry> {
        let s = self.state.lock().expect("exports");
        let e = s.exports.get(client);
        opens
            .iter()
            .filter_map(|r| {
                let have = e.and_then(|e| e.opens.get(&r.fid)).copied().unwrap_or(0);
                let have_w = e.and_then(|e| e.writers.get(&r.fid)).copied().unwrap_or(0);
                let (n, w) = (r.handles.saturating_sub(have), r.writers.min(r.handles));
                let w = w.saturating_sub(have_w).min(n);
                (n > 0).then_some(ReopenEntry {
                    fid: r.fid,
                    handles: n,
                    writers: w,
                })
            })
            .collect()
    }

    /// `client` closed `fid` (a handle opened for writing if `writer`); false if it had no
    /// such open (then nothing is dropped).
    pub fn closed(&self, client: &[u8; 16], fid: Fid, writer: bool) -> bool {
        let mut s = self.state.lock().expect("exports");
        let Some(e) = s.exports.get_mut(client) else {
            return false;
        };
        if writer {
            match e.writers.get_mut(&fid) {
                Some(n) if *n > 1 => *n -= 1,
                Some(_) => {
                    e.writers.remove(&fid);
                }
                None => {}
            }
        }
        match e.opens.get_mut(&fid) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                e.opens.remove(&fid);
                e.writers.remove(&fid);
                e.readers.remove(&fid);
                true
            }
            None => false,
        }
    }

    /// Clients with an export now.
    pub fn connected(&self) -> usize {
        self.state.lock().expect("exports").exports.len()
    }

    /// (uuid, silent for, open handles) of every export.
    pub fn list(&self) -> Vec<([u8; 16], Duration, u32)> {
        let s = self.state.lock().expect("exports");
        let mut v: Vec<_> = s
            .exports
            .iter()
            .map(|(c, e)| (*c, e.last_seen.elapsed(), e.opens.values().sum()))
            .collect();
        v.sort_by_key(|(c, ..)| *c);
        v
    }

    /// The clients whose uuids are bound to one of `tenants` ([`Exports::claim`]).
    pub fn owned_by(&self, tenants: &[String]) -> Vec<[u8; 16]> {
        let s = self.state.lock().expect("exports");
        s.exports
            .iter()
            .filter(|(_, e)| e.owner.as_ref().is_some_and(|o| tenants.contains(o)))
            .map(|(c, _)| *c)
            .collect()
    }

    /// The most recent evictions, oldest first.
    pub fn evictions(&self) -> Vec<Eviction> {
        self.state
            .lock()
            .expect("exports")
            .log
            .iter()
            .cloned()
            .collect()
    }

    /// The clients silent longer than the timeout (at most one scan a second: empty
    /// otherwise).
    pub(crate) fn silent(&self) -> Vec<[u8; 16]> {
        {
            let mut last = self.last_scan.lock().expect("scan");
            if last.elapsed() < Duration::from_secs(1) {
                return Vec::new();
            }
            *last = Instant::now();
        }
        let timeout = Duration::from_millis(self.evict_timeout_ms.load(Ordering::Relaxed));
        let s = self.state.lock().expect("exports");
        s.exports
            .iter()
            .filter(|(_, e)| e.last_seen.elapsed() > timeout)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Drops `client`'s export without evicting it (a peer MDT, or a client that
    /// disconnected); returns its opens.
    pub(crate) fn forget(&self, client: &[u8; 16]) -> HashMap<Fid, u32> {
        self.state
            .lock()
            .expect("exports")
            .exports
            .remove(client)
            .map(|e| e.opens)
            .unwrap_or_default()
    }

    /// Evicts `client` if it is still silent: removes its export, remembers its uuid as
    /// evicted and returns how long it was silent and its opens.
    pub(crate) fn evict(
        &self,
        client: &[u8; 16],
        force: bool,
    ) -> Option<(Duration, HashMap<Fid, u32>)> {
        let timeout = Duration::from_millis(self.evict_timeout_ms.load(Ordering::Relaxed));
        let mut s = self.state.lock().expect("exports");
        if !force && s.exports.get(client)?.last_seen.elapsed() <= timeout {
            return None;
        }
        if !s.exports.contains_key(client) {
            return None;
        }
        let e = s.exports.remove(client).expect("present");
        if s.evicted.insert(*client) {
            s.evicted_order.push_back(*client);
        }
        while s.evicted_order.len() > EVICTED_REMEMBERED_MAX {
            let old = s.evicted_order.pop_front().expect("non-empty");
            s.evicted.remove(&old);
        }
        let quiet = e.last_seen.elapsed();
        s.log.push_back(Eviction {
            client: *client,
            at: SystemTime::now(),
            silent_ms: quiet.as_millis() as u64,
            opens_dropped: e.opens.values().sum(),
        });
        while s.log.len() > EVICTION_LOG_MAX {
            s.log.pop_front();
        }
        self.evicted_total.fetch_add(1, Ordering::Relaxed);
        Some((quiet, e.opens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_now(x: &Exports) -> Vec<[u8; 16]> {
        *x.last_scan.lock().unwrap() -= Duration::from_secs(2);
        let mut v = x.silent();
        v.sort();
        v
    }

    #[test]
    fn a_client_uuid_is_its_first_tenants_while_its_export_lives() {
        let x = Exports::default();
        let c = [7; 16];
        x.claim(&c, "key:client/n1/a").unwrap();
        x.claim(&c, "key:client/n1/a").unwrap();
        assert_eq!(x.claim(&c, "key:client/n2/b"), Err(Status::Perm));
        x.heard_from(&c).unwrap();
        assert_eq!(
            x.claim(&c, "nodemap:"),
            Err(Status::Perm),
            "kept by a refresh"
        );
        // Once its export ends, the uuid is free again.
        let _ = x.forget(&c);
        x.claim(&c, "key:client/n2/b").unwrap();
    }

    #[test]
    fn only_an_open_for_writing_counts_as_a_writer() {
        let x = Exports::default();
        let (a, b) = ([1; 16], [2; 16]);
        let f = Fid::new(0x2_0000_0400, 1);
        x.heard_from(&a).unwrap();
        x.heard_from(&b).unwrap();
        use nacre_types::cred::{MAY_READ, MAY_WRITE};
        x.opened(&b, f, MAY_WRITE);
        assert!(x.holds_write_open(&b, f));
        assert!(!x.holds_read_open(&b, f), "a write-only open reads nothing");
        x.opened(&a, f, 0);
        assert!(x.holds_open(&a, f));
        assert!(
            !x.holds_read_open(&a, f),
            "an open for neither allows neither"
        );
        x.opened(&a, f, MAY_READ);
        assert!(x.holds_read_open(&a, f));
        assert!(!x.holds_write_open(&a, f), "a reader is no writer");
        x.opened(&a, f, MAY_READ | MAY_WRITE);
        assert!(x.holds_write_open(&a, f));
        assert!(x.closed(&a, f, true));
        assert!(!x.holds_write_open(&a, f), "its writer closed");
        assert!(x.holds_open(&a, f), "its reader stays");
        assert!(x.closed(&a, f, false) && x.closed(&a, f, false));
        assert!(!x.holds_read_open(&a, f), "its last handle closed");
        // A reopen adds what the export lacks, writers no more than handles.
        let said = [ReopenEntry {
            fid: f,
            handles: 3,
            writers: 9,
        }];
        assert_eq!(
            x.missing_opens(&a, &said),
            vec![ReopenEntry {
                fid: f,
                handles: 3,
                writers: 3
            }]
        );
    }

    #[test]
    fn opens_follow_their_client_and_the_evicted_are_refused() {
        let x = Exports::default();
        let (a, b) = ([1; 16], [2; 16]);
        let f = Fid::new(0x2_0000_0400, 1);
        x.heard_from(&a).unwrap();
        x.heard_from(&b).unwrap();
        x.opened(&a, f, 0);
        x.opened(&a, f, 0);
        x.opened(&b, f, 0);
        assert!(x.closed(&a, f, false));
        assert!(
            !x.closed(&b, Fid::new(0x2_0000_0400, 2), false),
            "never opened"
        );
        assert_eq!(x.connected(), 2);
        // Nothing is silent yet; a scan more often than once a second sees nothing.
        assert!(scan_now(&x).is_empty());
        x.evict_timeout_ms.store(0, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        assert!(x.silent().is_empty(), "rate limited");
        assert_eq!(scan_now(&x), vec![a, b]);
        // a keeps one handle.
        let (_, opens) = x.evict(&a, false).unwrap();
        assert_eq!(opens.get(&f), Some(&1));
        assert!(x.evict(&a, false).is_none(), "evicted once");
        assert_eq!(x.forget(&b).get(&f), Some(&1));
        assert_eq!(x.heard_from(&a), Err(Status::Shutdown));
        assert_eq!(x.connected(), 0);
        assert_eq!(x.evictions().len(), 1);
        assert_eq!(x.evicted_total.load(Ordering::Relaxed), 1);
        // A forgotten peer, or a new uuid, starts afresh.
        x.heard_from(&b).unwrap();
        x.heard_from(&[3; 16]).unwrap();
        assert_eq!(x.connected(), 2);
    }

    #[test]
    fn a_client_heard_from_again_is_not_evicted() {
        let x = Exports::default();
        x.heard_from(&[1; 16]).unwrap();
        x.evict_timeout_ms.store(0, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(scan_now(&x).len(), 1);
        x.evict_timeout_ms.store(60_000, Ordering::Relaxed);
        x.heard_from(&[1; 16]).unwrap();
        assert!(x.evict(&[1; 16], false).is_none());
    }

    #[test]
    fn evicted_uuids_are_bounded() {
        let x = Exports::default();
        x.evict_timeout_ms.store(0, Ordering::Relaxed);
        let n = EVICTED_REMEMBERED_MAX + 10;
        let uuid = |i: usize| {
            let mut c = [0u8; 16];
            c[..8].copy_from_slice(&(i as u64).to_le_bytes());
            c
        };
        for i in 0..n {
            x.heard_from(&uuid(i)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
        for i in 0..n {
            assert!(x.evict(&uuid(i), false).is_some());
        }
        let s = x.state.lock().unwrap();
        assert_eq!(s.evicted.len(), EVICTED_REMEMBERED_MAX);
        assert_eq!(s.evicted_order.len(), EVICTED_REMEMBERED_MAX);
        assert!(s.log.len() <= EVICTION_LOG_MAX);
        assert!(!s.evicted.contains(&uuid(0)), "the oldest are forgotten");
    }
}
