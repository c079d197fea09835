//! Recovery after a restart (Lustre's replay): transaction numbers, `last_committed`, the
//! recovery window, and replays run in transaction order.
//!
//! Every change a client request makes gets a transaction number (transno), stored with the
//! change and its saved reply; replies carry it and the highest transno the MDT has made
//! durable (`last_committed`). A client keeps every request it was answered for until
//! `last_committed` reaches it. An MDT replies after the change is in its journal but syncs
//! the journal only every commit interval (or on `fsync`), so a node crash can take the
//! last acknowledged changes with it. After a restart the MDT opens its recovery window
//! for the clients it had given transnos (the `clients` table): each reconnects
//! ([`MdsOp::Connect`](nacre_wire::mds::MdsOp::Connect)), replays what it kept one request
//! at a time in transno order, and says `ReplayDone`. The MDT runs the replays of all its
//! clients in transno order: a replay waits until every smaller transno either ran or
//! cannot come any more (every expected client is waiting with a larger one, or is done, or
//! was evicted when the window closed). New requests wait (`EINPROGRESS`) until recovery
//! is complete; then the MDT syncs its journal, so everything replayed is committed.
//!
//! Version checks (Lustre's version-based recovery): every inode records the transno of its
//! last change (`versions`); a change's answer carries the versions the inodes it changed
//! had before it, and its replay sends them back. A replay keeps its original transno, so
//! in-order replays find exactly the versions they saw; one that finds another version
//! depended on a change lost with a client that did not come back, and is refused
//! (`ESTALE`) instead of being applied to a different state. Unrelated replays run.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Default length of the recovery window: how long a restarted MDT waits for the clients
/// it knows before evicting the missing ones (Lustre's `recovery_time_soft` role).
pub const RECOVERY_WINDOW_MS_DEFAULT: u64 = 60_000;
/// How many windows a client that reconnected may take to finish replaying before it is
/// evicted too.
pub const RECOVERY_HARD_FACTOR: u32 = 3;
/// Shortest window accepted.
pub const RECOVERY_WINDOW_MS_MIN: u64 = 1_000;
/// How often a waiting replay re-checks the window.
const WAIT_STEP_MS: u64 = 100;
/// How far past what this MDT had reserved durably at its restart a replayed create's FID
/// (and each of its objects, past the OST's reserved allocation) may lie: the reservations
/// lost with a crash are [`crate::mdt::ALLOC_RESERVE`] each, so a real replay is near; a
/// FID past it is forged, and would waste the FID space (or overflow it).
pub const REPLAY_AHEAD_MAX: u64 = 1 << 24;

/// How a replay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and succeeded again.
    Done,
    /// It ran and failed (its own checks refused it).
    Failed,
    /// Refused by the version checks: a change it depended on was lost.
    VersionMismatch,
}

/// What a replay waiting for its turn is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Run it now (then call [`Recovery::replayed`]).
    Run,
    /// Already in: at or below what the store had at the restart, or replayed.
    AlreadyIn,
    /// The window is closed (or closed without this client): its change is lost.
    TooLate,
    /// Refused: the MDT did not know this client when it restarted, or the transno is
    /// past any this MDT could have given before it.
    Unknown,
}

/// Where one expected client is in its recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not heard from since the restart.
    Missing,
    /// Connected; sending replays.
    Connected,
    /// Waiting with a replay of this transno.
    Waiting(u64),
    /// Said `ReplayDone`.
    Done,
}

struct State {
    active: bool,
    started: Instant,
    completed_after: Option<Duration>,
    clients: HashMap<[u8; 16], Phase>,
    /// Highest transno durable at the restart: replays at or below it are already in.
    durable_at_start: u64,
    /// Highest original transno replayed so far.
    last_replayed: u64,
    replayed: u64,
    failed: u64,
    version_mismatches: u64,
    /// Replays refused for who sent them or what they named (an unknown client, a FID
    /// not this MDT's to have made, an inode that exists).
    refused: u64,
    gaps: u64,
    evicted: Vec<[u8; 16]>,
}

/// What a recovery window asks of its MDT (implemented by `Mdt`: replay_mdt.rs).
pub trait RecoveryHost {
    /// The MDT's name, for the log.
    fn name(&self) -> String;
    /// Evicts `client`, whose window closed without it: its connection is refused and its
    /// saved state forgotten.
    fn evict(&self, client: &[u8; 16]);
    /// Syncs the journal (recovery complete: everything replayed is committed).
    fn sync_now(&self);
}

/// An MDT's recovery state.
pub struct Recovery {
    state: Mutex<State>,
    changed: Condvar,
    /// Window length, settable (`mdt.*.recovery_window_ms`).
    pub window_ms: AtomicU64,
}

impl Recovery {
    /// Recovery for an MDT whose store holds `durable` as its last transno and lists
    /// `clients`: active if there are any.
    pub fn new(durable: u64, clients: HashSet<[u8; 16]>) -> Recovery {
        Recovery {
            state: Mutex::new(State {
                active: !clients.is_empty(),
                started: Instant::now(),
                completed_after: clients.is_empty().then_some(Duration::ZERO),
                clients: clients.into_iter().map(|c| (c, Phase::Missing)).collect(),
                durable_at_start: durable,
                last_replayed: durable,
                replayed: 0,
                failed: 0,
                version_mismatches: 0,
                refused: 0,
                gaps: 0,
                evicted: Vec::new(),
            }),
            changed: Condvar::new(),
            window_ms: AtomicU64::new(RECOVERY_WINDOW_MS_DEFAULT),
        }
    }

    /// Highest transno the store held at the restart.
    pub fn committed_at_start(&self) -> u64 {
        self.state.lock().expect("recovery").durable_at_start
    }

    /// True while the window is open (new requests wait).
    pub fn active(&self) -> bool {
        self.state.lock().expect("recovery").active
    }

    /// A client connected (`Connect`).
    pub fn connected(&self, client: &[u8; 16]) {
        let mut s = self.state.lock().expect("recovery");
        if let Some(p) = s.clients.get_mut(client) {
            if *p == Phase::Missing {
                *p = Phase::Connected;
            }
        }
        self.changed.notify_all();
    }

    /// True if `client` is one the window waits for (or waited for and saw finish).
    fn expected(s: &State, client: &[u8; 16]) -> bool {
        s.clients.contains_key(client)
    }

    /// Waits until the replay of `transno` by `client` may run.
    pub fn wait_turn(&self, mdt: &dyn RecoveryHost, client: &[u8; 16], transno: u64) -> Turn {
        let mut s = self.state.lock().expect("recovery");
        if !s.active {
            return Turn::TooLate;
        }
        if !Self::expected(&s, client) {
            // A client's row in `clients` is durable before its first change is answered
            // (`Tx::new_client`): one the MDT did not know at its restart was answered
            // nothing it could lose, so it has nothing to replay.
            s.refused += 1;
            return Turn::Unknown;
        }
        if transno <= s.last_replayed {
            return Turn::AlreadyIn;
        }
        // Transnos lost with a restart follow what was durable; one far past it is forged
        // (and would end every other client's replays, or the transno space).
        if transno > s.durable_at_start.saturating_add(REPLAY_AHEAD_MAX) {
            s.refused += 1;
            return Turn::Unknown;
        }
        s.clients.insert(*client, Phase::Waiting(transno));
        self.changed.notify_all();
        loop {
            self.close_if_late(mdt, &mut s);
            if !s.active || s.clients.get(client) != Some(&Phase::Waiting(transno)) {
                return Turn::TooLate;
            }
            let smallest = s
                .clients
                .values()
                .filter_map(|p| match p {
                    Phase::Waiting(t) => Some(*t),
                    _ => None,
                })
                .min();
            let next_in_line = transno == s.last_replayed.saturating_add(1);
            let nobody_can_fill = s
                .clients
                .values()
                .all(|p| matches!(p, Phase::Waiting(_) | Phase::Done));
            if smallest == Some(transno) && (next_in_line || nobody_can_fill) {
                if !next_in_line {
                    s.gaps += 1;
                    tracing::warn!(
                        "{}: no client has transno {}..{}; replaying {transno} after the gap",
                        mdt.name(),
                        s.last_replayed.saturating_add(1),
                        transno.saturating_sub(1)
                    );
                }
                return Turn::Run;
            }
            let (guard, _) = self
                .changed
                .wait_timeout(s, Duration::from_millis(WAIT_STEP_MS))
                .expect("recovery");
            s = guard;
        }
    }

    /// The replay of `transno` by `client` ran, or was refused.
    pub fn replayed(&self, client: &[u8; 16], transno: u64, outcome: Outcome) {
        let mut s = self.state.lock().expect("recovery");
        s.last_replayed = s.last_replayed.max(transno);
        match outcome {
            Outcome::Done => s.replayed += 1,
            Outcome::Failed => s.failed += 1,
            Outcome::VersionMismatch => s.version_mismatches += 1,
        }
        if let Some(p) = s.clients.get_mut(client) {
            *p = Phase::Connected;
        }
        self.changed.notify_all();
    }

    /// `client` replayed everything. Returns true once recovery is complete; then the MDT
    /// syncs its journal (everything replayed is committed) before anything else runs.
    pub fn done(&self, mdt: &dyn RecoveryHost, client: &[u8; 16]) -> bool {
        let mut s = self.state.lock().expect("recovery");
        if let Some(p) = s.clients.get_mut(client) {
            *p = Phase::Done;
        }
        self.changed.notify_all();
        self.close_if_late(mdt, &mut s);
        self.complete_if_all_done(mdt, &mut s);
        !s.active
    }

    /// Ends the window if it is over: evicts the clients that did not reconnect in it (as
    /// Lustre's `recovery_time_soft`); at [`RECOVERY_HARD_FACTOR`] times the window, also
    /// those that reconnected but did not finish replaying (`recovery_time_hard`).
    fn close_if_late(&self, mdt: &dyn RecoveryHost, s: &mut State) {
        let window = Duration::from_millis(self.window_ms.load(Ordering::Relaxed));
        if !s.active || s.started.elapsed() < window {
            return;
        }
        let hard = s.started.elapsed() >= window * RECOVERY_HARD_FACTOR;
        let late: Vec<[u8; 16]> = s
            .clients
            .iter()
            .filter(|(_, p)| match p {
                Phase::Missing => true,
                Phase::Done => false,
                _ => hard,
            })
            .map(|(c, _)| *c)
            .collect();
        if late.is_empty() {
            return;
        }
        for c in &late {
            tracing::warn!(
                "{}: recovery window closed without client {}: evicted, its uncommitted \
                 operations are lost",
                mdt.name(),
                crate::export::client_name(c)
            );
            s.clients.remove(c);
            s.evicted.push(*c);
            mdt.evict(c);
        }
        self.changed.notify_all();
        self.complete_if_all_done(mdt, s);
    }

    /// A replay was refused for what it named (`replay_mdt::check_created`).
    pub fn refused(&self) {
        self.state.lock().expect("recovery").refused += 1;
    }

    fn complete_if_all_done(&self, mdt: &dyn RecoveryHost, s: &mut State) {
        if !s.active || !s.clients.values().all(|p| *p == Phase::Done) {
            return;
        }
        // Replays are committed before anything new runs (their new transnos are then
        // below last_committed, so clients drop them).
        mdt.sync_now();
        s.active = false;
        s.completed_after = Some(s.started.elapsed());
        tracing::info!(
            "{}: recovery complete in {} ms: {} clients, {} replayed, {} failed, {} gaps, {} evicted",
            mdt.name(),
            s.started.elapsed().as_millis(),
            s.clients.len(),
            s.replayed,
            s.failed,
            s.gaps,
            s.evicted.len()
        );
        self.changed.notify_all();
    }

    /// Checks the window (the destroy thread calls this every pass, so a window nobody
    /// replays in still closes).
    pub fn tick(&self, mdt: &dyn RecoveryHost) {
        let mut s = self.state.lock().expect("recovery");
        self.close_if_late(mdt, &mut s);
    }

    /// `recovery_status` lines.
    pub fn status(&self) -> String {
        let s = self.state.lock().expect("recovery");
        let done = s.clients.values().filter(|p| **p == Phase::Done).count();
        let connected = s.clients.values().filter(|p| **p != Phase::Missing).count();
        let window = self.window_ms.load(Ordering::Relaxed);
        let mut out = format!(
            "status: {}\n",
            if s.active { "RECOVERING" } else { "COMPLETE" }
        );
        if s.active {
            let left = Duration::from_millis(window).saturating_sub(s.started.elapsed());
            out += &format!("time_remaining_ms: {}\n", left.as_millis());
        } else if let Some(d) = s.completed_after {
            out += &format!("recovery_duration_ms: {}\n", d.as_millis());
        }
        out += &format!(
            "recovery_window_ms: {window}\nreplay_clients: {}\nreplay_clients_connected: {connected}\nreplay_clients_done: {done}\nreplay_clients_evicted: {}\nreplayed_requests: {}\nreplay_failed: {}\nreplay_version_mismatches: {}\nreplay_refused: {}\nreplay_gaps: {}\ntransno_durable_at_start: {}\nlast_replayed: {}\n",
            s.clients.len() + s.evicted.len(),
            s.evicted.len(),
                        s.replayed,
            s.failed,
            s.version_mismatches,
            s.refused,
            s.gaps,
            s.durable_at_start,
            s.last_replayed
        );
        out
    }
}
