//! Lock reclaim after a target restart, resource by resource (the OSTs' way; an MDT takes
//! its locks back with [`Namespace::restore`] inside its recovery window): for a while after
//! the start, the namespace remembers who changed which resource; a client that held locks
//! on the target before gets each back unless someone else changed its resource since (then
//! what the client kept under it — cached data, writes not yet sent — is stale or would
//! overwrite newer data: the caller is told which resources) or another client now holds a
//! conflicting lock (refused, but nothing was lost).

use super::{ClientId, Kind, Namespace, State};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Resources whose changes a reclaim window remembers; past it, every later reclaim is
/// refused as changed (nothing is known any more).
pub const RECLAIM_CHANGES_MAX: usize = 1 << 16;

/// Who changed a resource since the start: one client, or several (or the server).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChangedBy {
    One(ClientId),
    Many,
}

/// The reclaim window's state.
pub(super) struct Reclaim<K: Kind> {
    until: Instant,
    changed: HashMap<K::Res, ChangedBy>,
    /// More resources changed than remembered.
    overflowed: bool,
}

/// What a client's reclaim got: the handles refused, and the resources changed by someone
/// else since the restart (their locks among the refused).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reclaimed<R> {
    /// Locks not taken back.
    pub refused: Vec<u64>,
    /// Resources someone else changed since the restart (each once).
    pub changed: Vec<R>,
}

impl<K: Kind> State<K> {
    /// The reclaim window, if it is still open (closed and forgotten once over).
    fn reclaim_open(&mut self) -> Option<&mut Reclaim<K>> {
        if self
            .reclaim
            .as_ref()
            .is_some_and(|r| Instant::now() >= r.until)
        {
            self.reclaim = None;
        }
        self.reclaim.as_mut()
    }

    /// A change of `targets` by `requester` (None: the server) runs.
    pub(super) fn note_changes(
        &mut self,
        requester: Option<&ClientId>,
        targets: &[(K::Res, K::Part)],
    ) {
        let Some(r) = self.reclaim_open() else {
            return;
        };
        for (res, part) in targets {
            if !K::changes(part) {
                continue;
            }
            let by = requester.map_or(ChangedBy::Many, |c| ChangedBy::One(*c));
            let full = r.changed.len() >= RECLAIM_CHANGES_MAX;
            match r.changed.get_mut(res) {
                Some(old) if *old != by => *old = ChangedBy::Many,
                Some(_) => {}
                None if full => r.overflowed = true,
                None => {
                    r.changed.insert(*res, by);
                }
            }
        }
    }

    /// `res` was removed (a destroyed object): no lock on it can be taken back.
    pub(super) fn note_gone(&mut self, res: &K::Res) {
        if let Some(r) = self.reclaim_open() {
            if r.changed.len() < RECLAIM_CHANGES_MAX {
                r.changed.insert(*res, ChangedBy::Many);
            } else {
                r.overflowed = true;
            }
        }
    }
}

impl<K: Kind> Namespace<K> {
    /// The target just started: for `window_ms`, clients may take back the locks they held
    /// from its previous start ([`Namespace::reclaim`]).
    pub fn open_reclaim(&self, window_ms: u64) {
        self.state.lock().reclaim = Some(Reclaim {
            until: Instant::now() + Duration::from_millis(window_ms),
            changed: HashMap::new(),
            overflowed: false,
        });
    }

    /// True while the reclaim window is open.
    pub fn reclaiming(&self) -> bool {
        self.state.lock().reclaim_open().is_some()
    }

    /// `client` asks to hold `locks` again, which it held before the target restarted.
    /// Each is taken back unless its resource was changed since by someone else, or the
    /// window is over (both: refused and its resource named changed), or it conflicts with
    /// another client's lock, its handle is another lock's, or the namespace is full
    /// (refused). A handle the client holds already (granted since the start) stays.
    pub fn reclaim(&self, client: &ClientId, locks: &[K::Ref]) -> Reclaimed<K::Res> {
        let mut s = self.state.lock();
        let mut out = Reclaimed {
            refused: Vec::new(),
            changed: Vec::new(),
        };
        let max = self.locks_max.load(Ordering::Relaxed);
        for l in locks {
            let (handle, res, part) = K::from_ref(l);
            let changed = match s.reclaim_open() {
                None => true,
                Some(r) => {
                    r.overflowed
                        || r.changed
                            .get(&res)
                            .is_some_and(|by| *by != ChangedBy::One(*client))
                }
            };
            if changed {
                out.refused.push(handle);
                if !out.changed.contains(&res) {
                    out.changed.push(res);
                }
                continue;
            }
            if let Some(held) = s.locks.get(&handle) {
                if held.client != *client || held.res != res {
                    out.refused.push(handle);
                }
                continue;
            }
            let conflict = s.by_res.get(&res).into_iter().flatten().any(|id| {
                let other = &s.locks[id];
                other.client != *client
                    && (K::conflicts(&other.part, &part) || K::conflicts(&part, &other.part))
            });
            if !K::valid(&part) || conflict || s.locks.len() as u64 >= max {
                out.refused.push(handle);
                continue;
            }
            s.hold(handle, *client, res, part, true);
        }
        let n = locks.len() as u64;
        let refused = out.refused.len() as u64;
        self.stats
            .replayed
            .fetch_add(n - refused, Ordering::Relaxed);
        self.stats
            .replay_refused
            .fetch_add(refused, Ordering::Relaxed);
        self.stats
            .replay_changed
            .fetch_add(out.changed.len() as u64, Ordering::Relaxed);
        out
    }
}
