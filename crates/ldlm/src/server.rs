//! A target's lock namespace: the locks granted to clients, the changes revoking them, and
//! the clients' parked callback polls. What is locked, and what conflicts, is the
//! namespace's [`Kind`]: inode bits on an MDT, object extents on an OST.

pub use crate::kind::{Extents, InodeBits, Kind};
use crate::msg::REFS_PER_MESSAGE_MAX;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A client's identity at the target (its uuid).
pub type ClientId = [u8; 16];

/// Default time a client has to cancel a lock it was called back for before it is evicted.
pub const CALLBACK_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Shortest callback timeout accepted.
pub const CALLBACK_TIMEOUT_MS_MIN: u64 = 100;
/// Default bound on the locks a namespace holds (about 150 bytes each: 600 MiB at most):
/// past it, reads are answered without a lock. Four clients' full LRUs
/// ([`crate::client::LRU_SIZE_DEFAULT`]).
pub const LOCKS_MAX_DEFAULT: u64 = 4 << 20;
/// Default contention window: an inode whose UPDATE bit changes had to call back twice
/// within it is not granted that bit again until it passes (a shared directory that
/// several clients create in would otherwise move its lock between them on every create).
pub const CONTENTION_MS_DEFAULT: u64 = 1_000;
/// Contended inodes remembered before the expired ones are forgotten.
const CONTENDED_MAX: usize = 4_096;
/// Longest a poll is parked before it is answered with nothing.
pub const POLL_WAIT_MS_MAX: u64 = 60_000;

/// What a client's poll is answered with: the locks it must give back, and the resources
/// whose holders are asked for a value without giving their locks back (glimpses: on an
/// OST, the size of an object as the holder of a write lock knows it).
#[derive(Debug, PartialEq, Eq)]
pub struct Callbacks<R, S> {
    /// Locks called back.
    pub revoke: Vec<R>,
    /// Resources glimpsed ([`Namespace::glimpse_answer`] answers each).
    pub glimpse: Vec<S>,
}

impl<R, S> Callbacks<R, S> {
    /// Nothing happened.
    pub fn none() -> Self {
        Callbacks {
            revoke: Vec::new(),
            glimpse: Vec::new(),
        }
    }
}

/// Answers a parked poll with the callbacks for its client (empty: nothing happened).
pub type PollReply<R, S> = Box<dyn FnOnce(Callbacks<R, S>) + Send>;

/// A parked poll and the callbacks it is answered with.
type Delivery<R, S> = (PollReply<R, S>, Callbacks<R, S>);

/// Runs once a glimpse is answered: given the largest value the holders answered (`None`:
/// none did — the holders went away, or were evicted for not answering in time).
pub type GlimpseDone = Box<dyn FnOnce(Option<u64>) + Send>;

/// Runs a parked change once the locks it waited for are gone; given the clients evicted
/// for not cancelling in time (their locks are gone already; the caller evicts the rest of
/// their state).
pub type WhenRevoked = Box<dyn FnOnce(Vec<ClientId>) + Send>;

/// A change parked until locks are cancelled ([`Namespace::revoke_later`]).
struct Waiter {
    ids: Vec<u64>,
    deadline: Instant,
    done: WhenRevoked,
}

struct Lock<K: Kind> {
    client: ClientId,
    res: K::Res,
    part: K::Part,
    /// Called back: no longer handed out again.
    blocked: bool,
    /// Taken back after a restart ([`Namespace::reclaim`], [`Namespace::restore`]), not
    /// granted by a request this target checked: it carries no authority of its own
    /// ([`Namespace::holds_where`]).
    taken_back: bool,
}

struct Holder<K: Kind> {
    locks: HashSet<u64>,
    /// Of them, locks its own changes may call back ([`Kind::holder_revocable`]).
    revocable: usize,
    /// Callbacks not yet delivered.
    pending: Vec<K::Ref>,
    /// Glimpses not yet delivered.
    glimpses: Vec<K::Res>,
    /// The client's parked poll and when it must be answered.
    poll: Option<ParkedPoll<K>>,
}

/// A parked poll and when it must be answered.
type ParkedPoll<K> = (PollReply<<K as Kind>::Ref, <K as Kind>::Res>, Instant);

impl<K: Kind> Default for Holder<K> {
    fn default() -> Self {
        Holder {
            locks: HashSet::new(),
            revocable: 0,
            pending: Vec::new(),
            glimpses: Vec::new(),
            poll: None,
        }
    }
}

impl<K: Kind> Holder<K> {
    /// Nothing waits to be delivered to it.
    fn idle(&self) -> bool {
        self.pending.is_empty() && self.glimpses.is_empty()
    }

    /// Takes what is due, at most a message's worth of each.
    fn take_due(&mut self) -> Callbacks<K::Ref, K::Res> {
        let n = self.pending.len().min(REFS_PER_MESSAGE_MAX);
        let g = self.glimpses.len().min(REFS_PER_MESSAGE_MAX);
        Callbacks {
            revoke: self.pending.drain(..n).collect(),
            glimpse: self.glimpses.drain(..g).collect(),
        }
    }
}

/// A glimpse under way: the clients still to answer, the largest answer so far, and who
/// waits for it.
struct Glimpse {
    waiting: HashSet<ClientId>,
    answer: Option<u64>,
    deadline: Instant,
    done: Vec<GlimpseDone>,
}

struct State<K: Kind> {
    next_handle: u64,
    locks: HashMap<u64, Lock<K>>,
    by_res: HashMap<K::Res, Vec<u64>>,
    /// Changes under way: (revocation id, part) per resource; no grant conflicts with them.
    revoking: HashMap<K::Res, Vec<(u64, K::Part)>>,
    next_revocation: u64,
    holders: HashMap<ClientId, Holder<K>>,
    /// Resources a change had to call back (in a way that counts, [`Kind::contends`]),
    /// and when (the last time).
    revoked_at: HashMap<K::Res, Instant>,
    /// Resources called back twice within the contention window, and when last: grants
    /// on them are narrowed for a while ([`Kind::grantable`]).
    contended: HashMap<K::Res, Instant>,
    /// A change has run since the namespace was made: replayed locks are refused.
    changed: bool,
    /// Changes parked until locks are cancelled.
    waiters: Vec<Waiter>,
    /// Glimpses waiting for their answers, per resource.
    glimpses: HashMap<K::Res, Glimpse>,
    /// Lock reclaim after a restart ([`Namespace::open_reclaim`]): until when, and who
    /// changed which resource since the start.
    reclaim: Option<replay::Reclaim<K>>,
    /// The timer thread answering expired polls runs.
    timer: bool,
}

impl<K: Kind> State<K> {
    fn new(first_handle: u64) -> Self {
        State {
            next_handle: first_handle.max(1),
            locks: HashMap::new(),
            by_res: HashMap::new(),
            revoking: HashMap::new(),
            next_revocation: 0,
            holders: HashMap::new(),
            revoked_at: HashMap::new(),
            contended: HashMap::new(),
            changed: false,
            waiters: Vec::new(),
            glimpses: HashMap::new(),
            reclaim: None,
            timer: false,
        }
    }

    /// `client` holds lock `handle` on `part` of `res` from now on.
    fn hold(
        &mut self,
        handle: u64,
        client: ClientId,
        res: K::Res,
        part: K::Part,
        taken_back: bool,
    ) {
        self.locks.insert(
            handle,
            Lock {
                client,
                res,
                part,
                blocked: false,
                taken_back,
            },
        );
        self.by_res.entry(res).or_default().push(handle);
        let h = self.holders.entry(client).or_default();
        if h.locks.insert(handle) && K::holder_revocable(&part) {
            h.revocable += 1;
        }
    }

    fn remove(&mut self, handle: u64) -> Option<Lock<K>> {
        let lock = self.locks.remove(&handle)?;
        if let Some(ids) = self.by_res.get_mut(&lock.res) {
            ids.retain(|h| *h != handle);
            if ids.is_empty() {
                self.by_res.remove(&lock.res);
            }
        }
        if let Some(h) = self.holders.get_mut(&lock.client) {
            if h.locks.remove(&handle) && K::holder_revocable(&lock.part) {
                h.revocable -= 1;
            }
        }
        Some(lock)
    }

    /// Handles of other clients' locks conflicting with `targets`.
    fn conflicting(&self, requester: Option<&ClientId>, targets: &[(K::Res, K::Part)]) -> Vec<u64> {
        let mut out = Vec::new();
        for (res, part) in targets {
            for id in self.by_res.get(res).into_iter().flatten() {
                let l = &self.locks[id];
                let applies = if Some(&l.client) == requester {
                    K::revoked_by_holder(&l.part, part)
                } else {
                    K::conflicts(&l.part, part)
                };
                if applies && !out.contains(id) {
                    out.push(*id);
                }
            }
        }
        out
    }

    /// Takes the parked changes none of whose locks remain.
    fn ready(&mut self) -> Vec<WhenRevoked> {
        let (ready, waiting): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut self.waiters)
            .into_iter()
            .partition(|w| w.ids.iter().all(|id| !self.locks.contains_key(id)));
        self.waiters = waiting;
        ready.into_iter().map(|w| w.done).collect()
    }

    /// Sends callbacks for `ids` not yet called back.
    fn call_back(&mut self, ids: &[u64], stats: &Stats) {
        for id in ids {
            let l = self.locks.get_mut(id).expect("conflicting lock exists");
            if l.blocked {
                continue;
            }
            l.blocked = true;
            let r = K::to_ref(*id, l.res, l.part);
            let client = l.client;
            if let Some(h) = self.holders.get_mut(&client) {
                h.pending.push(r);
                stats.callbacks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Notes the resources `ids` (conflicting with `targets`, about to be called back) are
    /// on: called back a second time within `window`, a resource is contended.
    fn note_contention(
        &mut self,
        targets: &[(K::Res, K::Part)],
        ids: &[u64],
        at: Instant,
        window: Duration,
    ) {
        for (res, part) in targets {
            // Only a lock called back now counts: changes waiting for a callback already
            // sent (several reads of one file behind one write lock) are one callback.
            let hit = ids.iter().any(|id| {
                let l = &self.locks[id];
                !l.blocked && l.res == *res && K::contends(&l.part, part)
            });
            if !hit {
                continue;
            }
            for map in [&mut self.revoked_at, &mut self.contended] {
                if map.len() >= CONTENDED_MAX {
                    map.retain(|_, t| t.elapsed() < window);
                    if map.len() >= CONTENDED_MAX {
                        map.clear();
                    }
                }
            }
            let again = self
                .revoked_at
                .insert(*res, at)
                .is_some_and(|t| at.duration_since(t) < window);
            if again {
                self.contended.insert(*res, at);
            }
        }
    }

    /// Takes the polls that can be answered now (their client has callbacks pending).
    fn deliverable(&mut self) -> Vec<Delivery<K::Ref, K::Res>> {
        let mut out = Vec::new();
        for h in self.holders.values_mut() {
            if h.idle() {
                continue;
            }
            if let Some((reply, _)) = h.poll.take() {
                out.push((reply, h.take_due()));
            }
        }
        out
    }

    /// `client` will not answer the glimpses it was asked (gone, evicted): takes the
    /// glimpses nobody else has to answer, to be finished.
    fn glimpses_without(&mut self, client: &ClientId) -> Vec<(Option<u64>, Vec<GlimpseDone>)> {
        let mut out = Vec::new();
        self.glimpses.retain(|_, g| {
            g.waiting.remove(client);
            if g.waiting.is_empty() {
                out.push((g.answer, std::mem::take(&mut g.done)));
                return false;
            }
            true
        });
        out
    }
}

/// Counters of a namespace (`ldlm.namespaces.*`).
#[derive(Default)]
pub struct Stats {
    /// Locks granted.
    pub grants: AtomicU64,
    /// Reads that asked for a lock and were answered without one (a change under way, or
    /// the namespace full).
    pub refused: AtomicU64,
    /// Callbacks sent.
    pub callbacks: AtomicU64,
    /// Locks cancelled by their clients.
    pub cancels: AtomicU64,
    /// Changes that had to revoke other clients' locks.
    pub revocations: AtomicU64,
    /// Microseconds changes spent waiting for cancels.
    pub revoke_wait_us: AtomicU64,
    /// Clients evicted for not cancelling in time.
    pub timeouts: AtomicU64,
    /// Locks taken back from clients after a restart.
    pub replayed: AtomicU64,
    /// Replayed locks refused (a change had run, or a handle was in use).
    pub replay_refused: AtomicU64,
    /// Glimpses sent to holders of conflicting locks (instead of calling the locks back).
    pub glimpses: AtomicU64,
    /// Replayed locks refused because their resource changed since the restart (what
    /// their holders kept for it is lost).
    pub replay_changed: AtomicU64,
    /// Times a holder's work under called-back locks pushed its eviction deadline back.
    pub prolonged: AtomicU64,
}

/// One target's locks (inode bits unless said otherwise).
pub struct Namespace<K: Kind = InodeBits> {
    state: Mutex<State<K>>,
    cancelled: Condvar,
    timer_wake: Condvar,
    /// Counters.
    pub stats: Stats,
    /// Time a client has to cancel a called-back lock (`callback_timeout_ms`).
    pub callback_timeout_ms: AtomicU64,
    /// Bound on the locks held (`locks_max`).
    pub locks_max: AtomicU64,
    /// How long a resource stays contended after a callback (`contention_ms`).
    pub contention_ms: AtomicU64,
    me: Weak<Namespace<K>>,
}

impl<K: Kind> Namespace<K> {
    /// An empty namespace whose handles start at `first_handle` (a random start keeps the
    /// handles of a restarted server from meeting those of the one before).
    pub fn new(first_handle: u64) -> Arc<Namespace<K>> {
        Arc::new_cyclic(|me| Namespace {
            state: Mutex::new(State::new(first_handle)),
            cancelled: Condvar::new(),
            timer_wake: Condvar::new(),
            stats: Stats::default(),
            callback_timeout_ms: AtomicU64::new(CALLBACK_TIMEOUT_MS_DEFAULT),
            locks_max: AtomicU64::new(LOCKS_MAX_DEFAULT),
            contention_ms: AtomicU64::new(CONTENTION_MS_DEFAULT),
            me: me.clone(),
        })
    }

    /// Locks held now.
    pub fn granted(&self) -> usize {
        self.state.lock().locks.len()
    }

    /// Clients that take locks (they poll for callbacks).
    pub fn clients(&self) -> usize {
        self.state.lock().holders.len()
    }

    /// True if some client other than `client` holds a lock (if none does, no change by
    /// `client` can have anything to call back).
    pub fn others_hold(&self, client: &ClientId) -> bool {
        let s = self.state.lock();
        s.locks.len() > s.holders.get(client).map_or(0, |h| h.locks.len())
    }

    /// True if a change by `client` may have a lock to call back: another client holds
    /// one, or `client` holds one its own changes call back ([`Kind::revoked_by_holder`]).
    pub fn may_call_back(&self, client: &ClientId) -> bool {
        let s = self.state.lock();
        let own = s.holders.get(client);
        s.locks.len() > own.map_or(0, |h| h.locks.len()) || own.is_some_and(|h| h.revocable > 0)
    }

    /// Locks `client` holds on `res` now.
    pub fn held_on(&self, client: &ClientId, res: &K::Res) -> usize {
        let s = self.state.lock();
        s.by_res.get(res).map_or(0, |ids| {
            ids.iter()
                .filter(|id| s.locks[id].client == *client)
                .count()
        })
    }

    /// True if `client` holds a lock granted here (not called back, not taken back after a
    /// restart) on `res` whose part `f` accepts: one a request this target checked got.
    pub fn holds_where(
        &self,
        client: &ClientId,
        res: &K::Res,
        f: impl Fn(&K::Part) -> bool,
    ) -> bool {
        self.holds_any(client, res, |l| !l.blocked && f(&l.part))
    }

    /// True if `client` holds a lock on `res` whose part `f` accepts, called back or not
    /// (not one taken back after a restart): what it sends while it cancels is still
    /// under that lock.
    pub fn holds_or_cancels(
        &self,
        client: &ClientId,
        res: &K::Res,
        f: impl Fn(&K::Part) -> bool,
    ) -> bool {
        self.holds_any(client, res, |l| f(&l.part))
    }

    /// True if `client` holds a lock on `res`, not taken back after a restart, that `f`
    /// accepts.
    fn holds_any(&self, client: &ClientId, res: &K::Res, f: impl Fn(&Lock<K>) -> bool) -> bool {
        let s = self.state.lock();
        s.by_res.get(res).is_some_and(|ids| {
            ids.iter().any(|id| {
                let l = &s.locks[id];
                l.client == *client && !l.taken_back && f(l)
            })
        })
    }

    /// The resources some lock whose part `f` accepts is held on (called back or not).
    pub fn resources_where(&self, f: impl Fn(&K::Part) -> bool) -> Vec<K::Res> {
        let s = self.state.lock();
        let found: std::collections::HashSet<K::Res> = s
            .locks
            .values()
            .filter(|l| f(&l.part))
            .map(|l| l.res)
            .collect();
        found.into_iter().collect()
    }

    /// Locks `client` holds now.
    pub fn held_by(&self, client: &ClientId) -> usize {
        self.state
            .lock()
            .holders
            .get(client)
            .map_or(0, |h| h.locks.len())
    }

    /// Grants `client` a lock on `wanted` of `res`, or on what of it [`Kind::grantable`]
    /// allows (inode bits: a contended UPDATE bit is left out; extents: widened as far as
    /// no other lock conflicts), unless a conflicting change is under way, the client does
    /// not poll for callbacks, or the namespace is full. Take it before reading what it
    /// protects: a change that starts after it will revoke it. The flag is true for a new
    /// lock, false for one the client held already.
    pub fn try_grant(
        &self,
        client: &ClientId,
        res: K::Res,
        wanted: K::Part,
    ) -> Option<(K::Ref, bool)> {
        self.grant(client, res, wanted, true, None)
    }

    /// [`Namespace::try_grant`] for a client that asked for the lock itself (an explicit
    /// enqueue, after its conflicts were revoked): contention does not narrow it.
    pub fn enqueue(
        &self,
        client: &ClientId,
        res: K::Res,
        wanted: K::Part,
    ) -> Option<(K::Ref, bool)> {
        self.grant(client, res, wanted, false, None)
    }

    /// Grants (see [`Namespace::grant`]), where revocation `own` (the requester's hold, if
    /// any) does not stand in the way.
    fn grant(
        &self,
        client: &ClientId,
        res: K::Res,
        wanted: K::Part,
        honour_contention: bool,
        own: Option<u64>,
    ) -> Option<(K::Ref, bool)> {
        let mut s = self.state.lock();
        let window = Duration::from_millis(self.contention_ms.load(Ordering::Relaxed));
        let contended =
            honour_contention && s.contended.get(&res).is_some_and(|t| t.elapsed() < window);
        let ids: &[u64] = s.by_res.get(&res).map_or(&[], |v| v.as_slice());
        let others: Vec<K::Part> = ids
            .iter()
            .map(|id| &s.locks[id])
            .filter(|l| l.client != *client)
            .map(|l| l.part)
            .collect();
        let changing: Vec<K::Part> = s.revoking.get(&res).map_or(Vec::new(), |v| {
            v.iter()
                .filter(|(id, _)| Some(*id) != own)
                .map(|(_, p)| *p)
                .collect()
        });
        let grant = K::grantable(&wanted, &others, &changing, contended);
        let Some(grant) = grant.filter(|_| s.holders.contains_key(client)) else {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        for id in ids {
            let l = &s.locks[id];
            let serves = K::covers(&l.part, &grant) || K::covers(&l.part, &wanted);
            if l.client == *client && !l.blocked && serves {
                return Some((K::to_ref(*id, res, l.part), false));
            }
        }
        if s.locks.len() as u64 >= self.locks_max.load(Ordering::Relaxed) {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // Past handles taken back after a restart (they come from another start's range).
        while s.locks.contains_key(&s.next_handle) {
            s.next_handle = s.next_handle.wrapping_add(1).max(1);
        }
        let handle = s.next_handle;
        s.next_handle = s.next_handle.wrapping_add(1).max(1);
        s.hold(handle, *client, res, grant, false);
        self.stats.grants.fetch_add(1, Ordering::Relaxed);
        Some((K::to_ref(handle, res, grant), true))
    }

    /// Drops every lock on `res` without calling any back (what they covered is gone: a
    /// destroyed object); their holders' cancels are then ignored. Returns how many.
    pub fn forget(&self, res: &K::Res) -> usize {
        let mut s = self.state.lock();
        s.note_gone(res);
        let ids = s.by_res.get(res).cloned().unwrap_or_default();
        for id in &ids {
            s.remove(*id);
        }
        let ready = if ids.is_empty() {
            Vec::new()
        } else {
            s.ready()
        };
        drop(s);
        if !ids.is_empty() {
            self.cancelled.notify_all();
        }
        for done in ready {
            done(Vec::new());
        }
        ids.len()
    }

    /// Gives back a lock granted by [`Namespace::try_grant`] that the reply will not carry.
    pub fn release(&self, client: &ClientId, handle: u64) {
        self.cancel(client, &[handle]);
    }

    /// `client` cancels `handles` (unknown ones, or another client's, are ignored).
    pub fn cancel(&self, client: &ClientId, handles: &[u64]) {
        let mut s = self.state.lock();
        let mut n = 0;
        for h in handles {
            if s.locks.get(h).is_some_and(|l| l.client == *client) {
                s.remove(*h);
                n += 1;
            }
        }
        let ready = if n > 0 { s.ready() } else { Vec::new() };
        drop(s);
        if n > 0 {
            self.stats.cancels.fetch_add(n, Ordering::Relaxed);
            self.cancelled.notify_all();
        }
        for done in ready {
            done(Vec::new());
        }
    }

    /// Drops every lock of `client` (evicted, or gone) and answers its parked poll with
    /// nothing; it takes no locks until it polls again. Returns how many it held.
    pub fn evict(&self, client: &ClientId) -> usize {
        let mut s = self.state.lock();
        let Some(h) = s.holders.remove(client) else {
            return 0;
        };
        for id in &h.locks {
            s.remove(*id);
        }
        let ready = s.ready();
        let glimpsed = s.glimpses_without(client);
        drop(s);
        self.cancelled.notify_all();
        if let Some((reply, _)) = h.poll {
            reply(Callbacks::none());
        }
        for done in ready {
            done(Vec::new());
        }
        finish_glimpses(glimpsed);
        h.locks.len()
    }

    /// After a restart of the target: `client` asks to hold `locks` again, which it held
    /// from the target's previous incarnation. They are taken back only while no change
    /// has run here since the namespace was made (so what they cover is still as the
    /// client saw it) and none of their handles is in use; returns the handles refused.
    pub fn restore(&self, client: &ClientId, locks: &[K::Ref]) -> Vec<u64> {
        let mut s = self.state.lock();
        if s.changed {
            self.stats
                .replay_refused
                .fetch_add(locks.len() as u64, Ordering::Relaxed);
            return locks.iter().map(|l| K::from_ref(l).0).collect();
        }
        let mut refused = Vec::new();
        for l in locks {
            let (handle, res, part) = K::from_ref(l);
            let full = s.locks.len() as u64 >= self.locks_max.load(Ordering::Relaxed);
            if !K::valid(&part) || s.locks.contains_key(&handle) || full {
                refused.push(handle);
                continue;
            }
            s.hold(handle, *client, res, part, true);
        }
        self.stats
            .replayed
            .fetch_add((locks.len() - refused.len()) as u64, Ordering::Relaxed);
        self.stats
            .replay_refused
            .fetch_add(refused.len() as u64, Ordering::Relaxed);
        refused
    }

    /// The target is going away (released, failed over, stopped): every lock is dropped and
    /// every parked poll answered, so clients move on at once.
    pub fn shut(&self) {
        let mut s = self.state.lock();
        let holders = std::mem::take(&mut s.holders);
        s.locks.clear();
        s.by_res.clear();
        let waiters = std::mem::take(&mut s.waiters);
        let glimpses: Vec<_> = std::mem::take(&mut s.glimpses)
            .into_values()
            .map(|g| (g.answer, g.done))
            .collect();
        drop(s);
        self.cancelled.notify_all();
        for w in waiters {
            (w.done)(Vec::new());
        }
        finish_glimpses(glimpses);
        for h in holders.into_values() {
            if let Some((reply, _)) = h.poll {
                reply(Callbacks::none());
            }
        }
    }

    /// `client` polls for callbacks: answered at once if some are pending, else parked
    /// until one is or `wait_ms` (at most [`POLL_WAIT_MS_MAX`]) has passed. Polling makes
    /// the client one that takes locks.
    pub fn poll(&self, client: &ClientId, wait_ms: u64, reply: PollReply<K::Ref, K::Res>) {
        let deadline = Instant::now() + Duration::from_millis(wait_ms.min(POLL_WAIT_MS_MAX));
        let mut s = self.state.lock();
        let h = s.holders.entry(*client).or_default();
        if !h.idle() || wait_ms == 0 {
            let due = h.take_due();
            drop(s);
            reply(due);
            return;
        }
        let old = h.poll.replace((reply, deadline));
        let start_timer = !std::mem::replace(&mut s.timer, true);
        drop(s);
        if let Some((old, _)) = old {
            old(Callbacks::none());
        }
        self.timer_wake.notify_all();
        if start_timer {
            self.start_timer();
        }
    }
}

/// Runs finished glimpses' waiters.
fn finish_glimpses(finished: Vec<(Option<u64>, Vec<GlimpseDone>)>) {
    for (answer, done) in finished {
        for d in done {
            d(answer);
        }
    }
}

mod glimpse;
mod replay;
mod revoke;
mod timer;

pub use replay::{Reclaimed, RECLAIM_CHANGES_MAX};
pub use revoke::Revocation;

#[cfg(test)]
mod tests;
