//! Extent locks on OST objects, on the client: the read locks this client holds (each
//! for one file's object), the callback thread polling each OST it holds locks on, and the
//! revoker thread that has the mount forget a file's cached data before the lock goes.
//!
//! A page-cache read asks for a read lock on each object range it reads that no lock of
//! this client covers; the OST grants it before reading (widened to the whole object when no
//! one else writes there). While a read uses a lock its callback waits: the data the read
//! returns was read under it, and the kernel must have it in its cache before the cache is
//! dropped (else a page read before a write could be cached after the drop). An OST that
//! evicted this client answers `ESHUTDOWN`: every lock on it is forgotten (and the cached
//! data of their files dropped) and the client talks to it under a new uuid. An OST that
//! restarted (a new epoch) is asked for every lock again ([`Client::replay_data_locks`]):
//! those it gives back keep their cached data and kept writes; the objects someone else
//! changed since the restart lose both (their files' next `fsync` reports `EIO`).

mod callbacks;

/// The uuid of requests from a client that takes no data locks.
pub(crate) const NO_UUID: [u8; 16] = [0; 16];

use crate::{Client, Result};
use nacre_ldlm::kind::Extent;
use nacre_ldlm::msg::{ExtentRef, REFS_PER_MESSAGE_MAX};
use nacre_types::{Fid, Layout, ObjectId, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Write locks an append holds while it writes at the size it read under them: per OST, the
/// evictions counted and the client's uuid there when they were found. What the append
/// writes is kept under these or sent under that uuid, never as a newer identity: once the
/// OST evicted the client the locks are gone and another client may have appended at the
/// same offset (crate::append).
#[derive(Default)]
pub(crate) struct Pinned(Vec<(u32, u64, [u8; 16])>);

impl Pinned {
    /// A lock on `ost`, found at `evictions` while the client was `uuid` there.
    pub(crate) fn add(&mut self, ost: u32, evictions: u64, uuid: [u8; 16]) {
        if self.of(ost).is_none() {
            self.0.push((ost, evictions, uuid));
        }
    }

    /// The evictions count and uuid the locks on `ost` were found under.
    pub(crate) fn of(&self, ost: u32) -> Option<(u64, [u8; 16])> {
        self.0
            .iter()
            .find(|(o, _, _)| *o == ost)
            .map(|(_, e, u)| (*e, *u))
    }
}

impl Client {
    /// True while no OST of `pinned` evicted this client since its locks there were found
    /// (as far as this client knows: a refusal of the pinned uuid tells it otherwise).
    pub(crate) fn pins_stand(&self, pinned: &Pinned) -> bool {
        pinned.0.iter().all(|&(ost, evictions, uuid)| {
            let o = self.data_locks.ost(ost);
            o.uuid() == uuid && o.state.lock().evictions == evictions
        })
    }
}
/// Told what cached file data must be dropped; returns once the kernel dropped it (or gave
/// up waiting).
pub type DataSink = Arc<dyn Fn(&[FileDrop]) + Send + Sync>;

/// Cached data of a file to drop: all of it, or the bytes `range` (offset, length) — what a
/// narrow lock covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileDrop {
    /// The file.
    pub fid: Fid,
    /// The bytes (`None`: all of the file).
    pub range: Option<(u64, u64)>,
}

impl FileDrop {
    fn whole(fid: Fid) -> FileDrop {
        FileDrop { fid, range: None }
    }
}

/// Where an object sits in its file's layout: enough to find the file bytes of an object
/// extent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StripeMap {
    size: u64,
    count: u64,
    index: u64,
}

/// A narrow lock's extent spanning more stripe units than this is dropped as the whole
/// file.
const DROP_RANGES_MAX: u64 = 8;

impl StripeMap {
    /// Object `stripe` of `layout` (numbered across its components). A component maps
    /// absolute file offsets, so its objects' bytes map back the same way; the file ranges
    /// of object bytes below its extent hold none of its data (another component's cached
    /// pages there are dropped with them: more than needed, never less).
    pub(crate) fn of(layout: &Layout, stripe: usize) -> StripeMap {
        let (c, index) = layout.component_of(stripe);
        let comp = &layout.components[c];
        StripeMap {
            size: u64::from(comp.stripe_size).max(1),
            count: comp.objects.len().max(1) as u64,
            index: index as u64,
        }
    }

    /// The file ranges (offset, length) object bytes `start..=end` hold (`None`: too many,
    /// or to the object's end: the whole file).
    fn file_ranges(&self, start: u64, end: u64) -> Option<Vec<(u64, u64)>> {
        if end == u64::MAX || end / self.size - start / self.size + 1 > DROP_RANGES_MAX {
            return None;
        }
        let mut out = Vec::new();
        for u in start / self.size..=end / self.size {
            let unit = u * self.size;
            let (s, e) = (start.max(unit), end.min(unit + self.size - 1));
            let off = u
                .checked_mul(self.size * self.count)?
                .checked_add(self.index * self.size + (s - unit))?;
            out.push((off, e - s + 1));
        }
        Some(out)
    }
}

/// Default bound on the data locks held per OST (`ldlm.namespaces.ost-*.lru_size`).
pub const DATA_LRU_SIZE_DEFAULT: usize = 16_384;
/// Handles of callbacks that came before their grant, remembered so that grant is dropped.
const EARLY_REMEMBERED_MAX: usize = 4_096;
/// Files whose cached data is known to have been read under locks only.
const CLEAN_FILES_MAX: usize = 65_536;
/// Revocations queued for the revoker thread at most (past it, the queuer waits).
const REVOCATIONS_QUEUED_MAX: usize = 1_024;
/// Pause after a failed poll.
const POLL_RETRY_MS: u64 = 500;

/// Counters of one OST's data locks on this client.
#[derive(Default)]
pub struct DataLockStats {
    /// Locks received with reads.
    pub grants: AtomicU64,
    /// Callbacks received.
    pub callbacks: AtomicU64,
    /// Locks given back (callbacks, LRU, eviction).
    pub cancels: AtomicU64,
    /// Locks given back because the LRU was full.
    pub lru_cancels: AtomicU64,
    /// Times the OST evicted this client, restarted, or could not be polled (every lock
    /// dropped).
    pub resets: AtomicU64,
    /// Glimpses answered (another client asked for the size of an object this client
    /// holds a write lock on; the lock stays).
    pub glimpses: AtomicU64,
    /// Locks taken back from a restarted OST.
    pub replayed: AtomicU64,
    /// Locks a restarted OST did not give back.
    pub replay_refused: AtomicU64,
}

struct Held {
    lock: ExtentRef,
    fid: Fid,
    /// Where its object sits in the file (`None`: unknown, drops are of the whole file).
    map: Option<StripeMap>,
    /// Reads using it now.
    users: u32,
    /// Called back while in use: given back when the last user is done.
    revoked: bool,
    used: u64,
}

/// One object's held locks by (first byte, handle): their last byte and whether they are
/// write locks.
type ObjectLocks = BTreeMap<(u64, u64), (u64, bool)>;

#[derive(Default)]
struct State {
    held: HashMap<u64, Held>,
    /// The held locks of each object by (first byte, handle): their last byte and whether
    /// they are write locks.
    by_object: HashMap<ObjectId, ObjectLocks>,
    lru: BTreeMap<u64, u64>,
    tick: u64,
    /// Reads asking for locks in flight, per object.
    inflight: HashMap<ObjectId, u32>,
    /// Callbacks for handles not (yet) held, on objects with reads asking for locks in
    /// flight: their grant may still come.
    early: HashMap<u64, ObjectId>,
    early_order: VecDeque<u64>,
    /// Evictions that wiped these locks: a lock found while it was `n` is gone once it is
    /// higher (what was kept under it is dropped, Writeback::evicted).
    evictions: u64,
}

impl State {
    fn take(&mut self, handle: u64) -> Option<Held> {
        let h = self.held.remove(&handle)?;
        self.lru.remove(&h.used);
        if let Some(v) = self.by_object.get_mut(&h.lock.object) {
            v.remove(&(h.lock.start, handle));
            if v.is_empty() {
                self.by_object.remove(&h.lock.object);
            }
        }
        Some(h)
    }

    fn touch(&mut self, handle: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(h) = self.held.get_mut(&handle) {
            self.lru.remove(&h.used);
            h.used = tick;
            self.lru.insert(tick, handle);
        }
    }

    /// A held lock, not called back, covering `want` (a write lock for a write). Looks at the
    /// [`COVER_SCAN_MAX`] locks starting nearest before `want` only (a contended object's
    /// narrow locks are many): past them it answers none, which only costs a lock asked
    /// for, a write not kept, or pages dropped.
    fn covering(&self, object: ObjectId, want: &Extent) -> Option<u64> {
        self.by_object
            .get(&object)?
            .range(..=(want.start, u64::MAX))
            .rev()
            .take(COVER_SCAN_MAX)
            .find(|((_, id), (end, write))| {
                *end >= want.end && (*write || !want.write) && !self.held[id].revoked
            })
            .map(|((_, id), _)| *id)
    }

    /// Notes lock `handle` as held on its object.
    fn index(&mut self, lock: &ExtentRef) {
        self.by_object
            .entry(lock.object)
            .or_default()
            .insert((lock.start, lock.handle), (lock.end, lock.write));
    }
}

/// Locks looked at to find one covering a range (see `State::covering`).
const COVER_SCAN_MAX: usize = 32;

/// One OST's data locks on this client.
pub struct OstLocks {
    ost: u32,
    uuid: Mutex<[u8; 16]>,
    /// The OST start the locks are from (0: none known yet).
    epoch: AtomicU64,
    state: Mutex<State>,
    polling: AtomicBool,
    /// Bound on the locks held (`lru_size`).
    pub lru_size: AtomicUsize,
    /// Counters.
    pub stats: DataLockStats,
}

impl OstLocks {
    fn new(ost: u32) -> OstLocks {
        OstLocks {
            ost,
            uuid: Mutex::new(*uuid::Uuid::new_v4().as_bytes()),
            epoch: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            polling: AtomicBool::new(false),
            lru_size: AtomicUsize::new(DATA_LRU_SIZE_DEFAULT),
            stats: DataLockStats::default(),
        }
    }

    /// This client's uuid at the OST.
    pub fn uuid(&self) -> [u8; 16] {
        *self.uuid.lock()
    }

    /// Locks held now.
    pub fn count(&self) -> usize {
        self.state.lock().held.len()
    }

    /// Drops every lock (the OST restarted, or the mount ends); returns the files whose
    /// cached data must go.
    fn reset(&self) -> Vec<Fid> {
        self.reset_to(None)
    }

    /// [`OstLocks::reset`], counting an eviction if `evictions` is the count it makes.
    fn reset_to(&self, evictions: Option<u64>) -> Vec<Fid> {
        let mut s = self.state.lock();
        let mut fids: Vec<Fid> = s.held.values().map(|h| h.fid).collect();
        *s = State {
            evictions: evictions.unwrap_or(s.evictions),
            ..State::default()
        };
        drop(s);
        self.stats.resets.fetch_add(1, Ordering::Relaxed);
        fids.sort_unstable();
        fids.dedup();
        fids
    }

    /// The OST evicted the client known as `was`: if that is still its uuid, `first` runs
    /// with the eviction count this one makes, every lock is dropped and the client takes
    /// a new uuid (Some: the files whose data must go). `first` runs before anyone can see
    /// the new uuid or the locks are gone: what it drops can never be sent as the new
    /// client, and a write that found an old lock is refused by it (Writeback::keep).
    fn reset_if(&self, was: [u8; 16], first: impl FnOnce(u64)) -> Option<Vec<Fid>> {
        let mut uuid = self.uuid.lock();
        if *uuid != was {
            return None;
        }
        let count = self.state.lock().evictions + 1;
        first(count);
        *uuid = *uuid::Uuid::new_v4().as_bytes();
        self.epoch.store(0, Ordering::Release);
        // Under the uuid's lock too: a lock granted to the new uuid meanwhile is recorded
        // after this, never wiped by it (as_current).
        let fids = self.reset_to(Some(count));
        drop(uuid);
        Some(fids)
    }

    /// `f` (run under the uuid's lock), if `sent_as` is still this client's uuid at the
    /// OST: what a reply to a request sent as `sent_as` brings (a lock, a grant) is this
    /// client's only then; one sent before an eviction is not the new client's.
    fn as_current<R>(&self, sent_as: [u8; 16], f: impl FnOnce() -> R) -> Option<R> {
        let uuid = self.uuid.lock();
        (*uuid == sent_as).then(f)
    }
}

/// A revocation for the revoker thread: the objects whose kept writes go first, the cached
/// data to forget, then the handles to cancel.
struct Revocation {
    ost: u32,
    objects: Vec<ObjectId>,
    drops: Vec<FileDrop>,
    handles: Vec<u64>,
}

impl Held {
    /// The cached data its going takes with it.
    fn drops(&self) -> Vec<FileDrop> {
        let ranges = self
            .map
            .and_then(|m| m.file_ranges(self.lock.start, self.lock.end));
        match ranges {
            Some(r) => r
                .into_iter()
                .map(|range| FileDrop {
                    fid: self.fid,
                    range: Some(range),
                })
                .collect(),
            None => vec![FileDrop::whole(self.fid)],
        }
    }
}

/// The client's data locks on every OST.
#[derive(Default)]
pub(crate) struct DataLocks {
    osts: parking_lot::RwLock<HashMap<u32, Arc<OstLocks>>>,
    sink: std::sync::OnceLock<(DataSink, std::sync::mpsc::SyncSender<Revocation>)>,
    /// Files whose cached data was read under locks only since the kernel last dropped it.
    clean: Mutex<HashSet<Fid>>,
    /// The client is going away: callback threads end.
    stopping: AtomicBool,
}

/// Locks a read used: released once the data is in the kernel's cache ([`Client::read_done`]).
#[derive(Default)]
pub struct ReadLocks {
    used: Vec<(u32, u64)>,
    /// Object ranges a lock was asked for (OST, object).
    asked: Vec<(u32, ObjectId)>,
    /// Every range read was covered by a lock.
    pub covered: bool,
    /// The read had bytes on the MDT (crate::dom): its end lets a `DOM` callback go on.
    pub(crate) dom_read: bool,
}

impl Revocation {
    /// The revocation of `gone` (handle, file, object) locks, and of `orphans` (handles
    /// of locks nothing was cached under).
    fn of(ost: u32, gone: Vec<(u64, Vec<FileDrop>, ObjectId)>, orphans: Vec<u64>) -> Revocation {
        let mut drops: Vec<FileDrop> = gone.iter().flat_map(|g| g.1.iter().copied()).collect();
        drops.sort_unstable_by_key(|d| (d.fid, d.range));
        drops.dedup();
        let mut objects: Vec<ObjectId> = gone.iter().map(|g| g.2).collect();
        objects.sort_unstable();
        objects.dedup();
        Revocation {
            ost,
            objects,
            drops,
            handles: gone.iter().map(|g| g.0).chain(orphans).collect(),
        }
    }
}

impl ReadLocks {
    /// No lock used yet; covered until a range is read without one.
    pub(crate) fn new() -> ReadLocks {
        ReadLocks {
            covered: true,
            ..ReadLocks::default()
        }
    }
}

impl DataLocks {
    fn ost(&self, ost: u32) -> Arc<OstLocks> {
        if let Some(o) = self.osts.read().get(&ost) {
            return o.clone();
        }
        self.osts
            .write()
            .entry(ost)
            .or_insert_with(|| Arc::new(OstLocks::new(ost)))
            .clone()
    }

    fn enabled(&self) -> bool {
        self.sink.get().is_some() && !self.stopping.load(Ordering::Relaxed)
    }

    fn revoke(&self, r: Revocation) {
        if let Some((_, tx)) = self.sink.get() {
            let _ = tx.send(r);
        }
    }
}

impl Client {
    /// From now on page-cache reads take read locks on the OST objects they read, so the
    /// mount may keep file data cached across opens ([`Client::data_cached`]); `sink` is told
    /// of the files whose data must be dropped before their lock goes (called back by a
    /// change of another client, given back from the LRU, or lost).
    /// Has the mount drop the cached data `drops` name (no data lock's: a `DOM` lock's,
    /// crate::dom), if it caches any; returns once the kernel dropped it.
    pub(crate) fn drop_cached_data(&self, drops: &[FileDrop]) {
        self.edges.forget(drops);
        if let Some((sink, _)) = self.data_locks.sink.get() {
            sink(drops);
        }
    }

    pub fn enable_data_locks(&self, sink: DataSink) -> std::io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Revocation>(REVOCATIONS_QUEUED_MAX);
        if self.data_locks.sink.set((sink.clone(), tx)).is_err() {
            return Ok(());
        }
        let me = self.me.clone();
        std::thread::Builder::new()
            .name("osc-revoker".into())
            .spawn(move || {
                for r in rx {
                    let Some(c) = me.upgrade() else { return };
                    // Kept writes under a write lock reach the OST before the lock goes.
                    let keys: Vec<_> = r.objects.iter().map(|o| (r.ost, *o)).collect();
                    c.writeback.flush_wait(&keys);
                    // Edge pages kept under these locks go with the kernel's pages.
                    c.edges.forget(&r.drops);
                    drop(c);
                    sink(&r.drops);
                    let Some(c) = me.upgrade() else { return };
                    c.cancel_data_locks(r.ost, &r.handles);
                }
            })?;
        Ok(())
    }

    /// True if page-cache reads take data locks ([`Client::enable_data_locks`]).
    pub fn data_locks_on(&self) -> bool {
        self.data_locks.enabled()
    }

    /// This client's uuid at OST `ost` (what its requests carry).
    pub(crate) fn ost_uuid(&self, ost: u32) -> [u8; 16] {
        if !self.data_locks.enabled() {
            return crate::datalocks::NO_UUID;
        }
        self.data_locks.ost(ost).uuid()
    }

    /// OST `ost` refused this client as evicted (a request sent as `was`): every lock on it
    /// is dropped (their files' cached data first) and the client is a new one to it —
    /// once, however many requests were refused.
    pub(crate) fn data_evicted(&self, ost: u32, was: [u8; 16]) {
        if !self.data_locks.enabled() {
            return;
        }
        let o = self.data_locks.ost(ost);
        // What is kept (or picked to be sent) was written under the old uuid's locks: it
        // is dropped before a request can carry the new uuid (Writeback::evicted).
        let Some(fids) = o.reset_if(was, |count| self.writeback.evicted(ost, count)) else {
            return;
        };
        tracing::warn!("OST{ost:04x} evicted this client: its cached data is dropped");
        self.data_locks.revoke(Revocation {
            ost,
            objects: Vec::new(),
            drops: fids.into_iter().map(FileDrop::whole).collect(),
            handles: Vec::new(),
        });
    }

    /// Whether a read of object range `want` of `object` on `ost` should ask for a lock (no
    /// lock of this client covers it), else marks the covering lock used by `locks`.
    pub(crate) fn want_data_lock(
        &self,
        ost: u32,
        object: ObjectId,
        want: Extent,
        locks: &mut ReadLocks,
    ) -> bool {
        if !self.data_locks.enabled() {
            return false;
        }
        let o = self.data_locks.ost(ost);
        let mut s = o.state.lock();
        match s.covering(object, &want) {
            Some(id) => {
                s.held.get_mut(&id).expect("covering").users += 1;
                s.touch(id);
                locks.used.push((ost, id));
                false
            }
            None => {
                *s.inflight.entry(object).or_default() += 1;
                locks.asked.push((ost, object));
                drop(s);
                self.start_data_callbacks(&o);
                true
            }
        }
    }

    /// A request that asks OST `ost` for a lock on `object` (a write, an enqueue) is about
    /// to be sent: a callback for a lock not known yet on the object is then kept until
    /// [`Client::read_done`] with `locks` (the grant may be that lock).
    pub(crate) fn asking(&self, ost: u32, object: ObjectId, locks: &mut ReadLocks) {
        if !self.data_locks.enabled() {
            return;
        }
        let o = self.data_locks.ost(ost);
        *o.state.lock().inflight.entry(object).or_default() += 1;
        locks.asked.push((ost, object));
        self.start_data_callbacks(&o);
    }

    /// A read of `fid` was granted `lock` by OST `ost` in answer to a request sent as
    /// `sent_as`: held (in use by `locks`) unless its callback came first, or the OST
    /// evicted `sent_as` since (the lock is no one's there now: false, and what the
    /// request read must not be cached as covered by it).
    #[must_use]
    pub(crate) fn data_lock_granted(
        &self,
        ost: u32,
        (fid, map): (Fid, StripeMap),
        lock: ExtentRef,
        locks: &mut ReadLocks,
        sent_as: [u8; 16],
    ) -> bool {
        let o = self.data_locks.ost(ost);
        self.start_data_callbacks(&o);
        let Some(trim) = o.as_current(sent_as, || Self::hold_granted(&o, fid, map, lock, locks))
        else {
            tracing::debug!("OST{ost:04x}: a lock granted before an eviction is dropped");
            return false;
        };
        o.stats.grants.fetch_add(1, Ordering::Relaxed);
        if !trim.is_empty() {
            o.stats
                .lru_cancels
                .fetch_add(trim.len() as u64, Ordering::Relaxed);
            self.data_locks
                .revoke(Revocation::of(ost, trim, Vec::new()));
        }
        true
    }

    /// Space OST `ost` granted in answer to a request sent as `sent_as`: this client's
    /// unless the OST evicted `sent_as` since (its grants went with it).
    pub(crate) fn add_grant_as(&self, ost: u32, added: u64, sent_as: [u8; 16]) {
        if added == 0 {
            return;
        }
        if !self.data_locks.enabled() {
            self.writeback.add_grant(ost, added);
            return;
        }
        let o = self.data_locks.ost(ost);
        if o.as_current(sent_as, || self.writeback.add_grant(ost, added))
            .is_none()
        {
            tracing::debug!("OST{ost:04x}: a grant given before an eviction is dropped");
        }
    }

    /// [`Client::data_lock_granted`] once the lock is known to be this client's: recorded,
    /// and the least recently used idle locks past the bound taken (to be cancelled).
    fn hold_granted(
        o: &OstLocks,
        fid: Fid,
        map: StripeMap,
        lock: ExtentRef,
        locks: &mut ReadLocks,
    ) -> Vec<(u64, Vec<FileDrop>, ObjectId)> {
        let ost = o.ost;
        let mut s = o.state.lock();
        let early = s.early.remove(&lock.handle).is_some();
        if let Some(h) = s.held.get_mut(&lock.handle) {
            h.users += 1;
        } else {
            s.held.insert(
                lock.handle,
                Held {
                    lock,
                    fid,
                    map: Some(map),
                    users: 1,
                    revoked: early,
                    used: 0,
                },
            );
            s.index(&lock);
        }
        s.touch(lock.handle);
        locks.used.push((ost, lock.handle));
        // Past the bound, the least recently used idle locks go, an eighth of the bound at
        // once (one cancel and one batch of kernel invalidations for many).
        let max = o.lru_size.load(Ordering::Relaxed).max(1);
        let mut trim = Vec::new();
        if s.held.len() > max {
            let keep = max - max / 8;
            let idle: Vec<u64> = s
                .lru
                .values()
                .copied()
                .filter(|id| s.held[id].users == 0)
                .take(s.held.len() - keep)
                .collect();
            for id in idle {
                if let Some(h) = s.take(id) {
                    trim.push((id, h.drops(), h.lock.object));
                }
            }
        }
        drop(s);
        trim
    }

    /// This client will ask OST `ost` for locks: its callback thread polls there (a
    /// client that does not poll is granted none).
    pub(crate) fn polls(&self, ost: u32) {
        if self.data_locks.enabled() {
            self.start_data_callbacks(&self.data_locks.ost(ost));
        }
    }

    /// A write lock on `ext` of `object` on `ost` this client holds and may keep writes
    /// under: marked in use (its callback waits for [`Client::done_with_lock`]). Its
    /// handle, and the evictions counted when it was found (what is kept under it must be
    /// kept before the next: Writeback::keep).
    pub(crate) fn use_write_lock(
        &self,
        ost: u32,
        object: ObjectId,
        ext: Extent,
    ) -> Option<(u64, u64)> {
        if !self.data_locks.enabled() {
            return None;
        }
        let o = self.data_locks.ost(ost);
        // Kept data is written under the OST start its lock is from: one must be known.
        if o.epoch.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut s = o.state.lock();
        let id = s.covering(object, &ext)?;
        s.held.get_mut(&id).expect("covering").users += 1;
        s.touch(id);
        Some((id, s.evictions))
    }

    /// A write kept under lock `handle` of `ost` is in place: the lock is no longer in use
    /// by it (and goes now if it was called back meanwhile).
    pub(crate) fn done_with_lock(&self, ost: u32, handle: u64) {
        let o = self.data_locks.ost(ost);
        let mut s = o.state.lock();
        let Some(h) = s.held.get_mut(&handle) else {
            return;
        };
        h.users = h.users.saturating_sub(1);
        if h.users == 0 && h.revoked {
            let h = s.take(handle).expect("held");
            drop(s);
            let r = Revocation::of(ost, vec![(handle, h.drops(), h.lock.object)], Vec::new());
            self.data_locks.revoke(r);
        }
    }

    /// True if locks of this client (read or write, not called back) cover the whole pages
    /// of `offset..offset + len` of `file`: what the kernel keeps cached of a page-cache
    /// write through (a page written in part is not kept unless it was cached before, under
    /// a lock), and a change elsewhere calls the locks back. Else those pages must be dropped
    /// after the write (no callback would ever come for them), and the file's cached data is
    /// not kept across opens.
    pub fn pages_covered_for_write(&self, file: &crate::OpenFile, offset: u64, len: u64) -> bool {
        let (Some(layout), true) = (file.layout(), self.data_locks.enabled()) else {
            return false;
        };
        let layout = &layout;
        // The system's pages (64 KiB on many aarch64 kernels): a page written in part is
        // not kept, so only whole ones need their locks.
        let page = nacre_types::page::page_bytes();
        let Some((start, end)) = nacre_types::page::whole_pages(offset, len, page) else {
            return true;
        };
        let covered = crate::osc::subs(layout, start, end - start, u64::MAX)
            .into_iter()
            .all(|sub| {
                let (ost, object) = crate::osc::object(layout, sub.stripe);
                let want = Extent::of(sub.object_offset, sub.len, false);
                self.data_locks
                    .ost(ost)
                    .state
                    .lock()
                    .covering(object, &want)
                    .is_some()
            });
        if !covered {
            self.data_locks.clean.lock().remove(&file.fid);
        }
        covered
    }

    /// The data a read returned is in the kernel's cache: its locks are no longer in use,
    /// and those called back meanwhile go now. A read not wholly covered by locks leaves
    /// `fid`'s cached data unclean (not kept across opens).
    pub fn read_done(&self, fid: Fid, locks: ReadLocks) {
        if locks.dom_read {
            self.dom_reads.leave(fid);
        }
        if !locks.covered {
            self.data_locks.clean.lock().remove(&fid);
        }
        let mut by_ost: HashMap<u32, (Vec<u64>, Vec<ObjectId>)> = HashMap::new();
        for (ost, id) in locks.used {
            by_ost.entry(ost).or_default().0.push(id);
        }
        for (ost, object) in locks.asked {
            by_ost.entry(ost).or_default().1.push(object);
        }
        for (ost, (ids, objects)) in by_ost {
            let o = self.data_locks.ost(ost);
            let mut s = o.state.lock();
            let mut gone = Vec::new();
            for object in objects {
                let n = s.inflight.get_mut(&object).map(|n| {
                    *n -= 1;
                    *n
                });
                if n == Some(0) {
                    s.inflight.remove(&object);
                    // Callbacks that came for grants this file's reads never got.
                    let early: Vec<u64> = s
                        .early
                        .iter()
                        .filter(|(_, o)| **o == object)
                        .map(|(h, _)| *h)
                        .collect();
                    for h in early {
                        s.early.remove(&h);
                        gone.push((h, vec![FileDrop::whole(fid)], object));
                    }
                }
            }
            for id in ids {
                let Some(h) = s.held.get_mut(&id) else {
                    continue;
                };
                h.users = h.users.saturating_sub(1);
                if h.users == 0 && h.revoked {
                    let h = s.take(id).expect("held");
                    gone.push((id, h.drops(), h.lock.object));
                }
            }
            drop(s);
            if !gone.is_empty() {
                self.data_locks
                    .revoke(Revocation::of(ost, gone, Vec::new()));
            }
        }
    }

    /// True if a lock of this client (read or write, not called back) covers the `page`
    /// bytes of `layout`'s file at `offset` (a page never spans two stripes: stripe sizes
    /// are multiples of 64 KiB).
    pub(crate) fn page_locked(&self, layout: &Layout, offset: u64, page: u64) -> bool {
        let Some((stripe, object_offset)) = layout.locate(offset) else {
            return false;
        };
        let (ost, object) = crate::osc::object(layout, stripe);
        let want = Extent::of(object_offset, page, false);
        self.data_locks.enabled()
            && self
                .data_locks
                .ost(ost)
                .state
                .lock()
                .covering(object, &want)
                .is_some()
    }

    /// The kernel dropped `fid`'s cached data (an open that did not keep it): what it
    /// caches from now on is read under locks, until a read without one.
    pub fn data_cache_dropped(&self, fid: Fid) {
        let mut c = self.data_locks.clean.lock();
        if c.len() < CLEAN_FILES_MAX {
            c.insert(fid);
        }
    }

    /// True if this client holds a lock (read or write, not called back) on all of `object`
    /// on OST `ost` from byte `from` on: no other client can be writing there.
    pub(crate) fn holds_rest_of(&self, ost: u32, object: ObjectId, from: u64) -> bool {
        let rest = Extent {
            start: from,
            end: u64::MAX,
            write: false,
        };
        self.data_locks.enabled()
            && self
                .data_locks
                .ost(ost)
                .state
                .lock()
                .covering(object, &rest)
                .is_some()
    }

    /// True if the kernel may keep `fid`'s cached data (its layout `layout`) across an open:
    /// all of it was read under locks this client still holds on every object of the file.
    pub fn data_cached(&self, fid: Fid, layout: &Layout) -> bool {
        if !self.data_locks.enabled() || !self.data_locks.clean.lock().contains(&fid) {
            return false;
        }
        let whole = Extent {
            start: 0,
            end: u64::MAX,
            write: false,
        };
        layout.objects().all(|o| {
            let l = self.data_locks.ost(o.ost);
            let s = l.state.lock();
            s.covering(o.object, &whole)
                .is_some_and(|id| s.held[&id].fid == fid)
        })
    }

    /// Data lock counters per OST: (OST index, locks held, LRU size, counters).
    pub fn data_lock_stats(&self) -> Vec<(u32, usize, usize, [u64; 8])> {
        let r = Ordering::Relaxed;
        let mut out: Vec<_> = self
            .data_locks
            .osts
            .read()
            .values()
            .map(|o| {
                let st = &o.stats;
                (
                    o.ost,
                    o.count(),
                    o.lru_size.load(r),
                    [
                        st.grants.load(r),
                        st.callbacks.load(r),
                        st.cancels.load(r),
                        st.lru_cancels.load(r),
                        st.resets.load(r),
                        st.glimpses.load(r),
                        st.replayed.load(r),
                        st.replay_refused.load(r),
                    ],
                )
            })
            .collect();
        out.sort_unstable_by_key(|x| x.0);
        out
    }

    /// Sets the LRU bound of OST `ost`'s data locks.
    pub fn set_data_lru_size(&self, ost: u32, n: usize) {
        self.data_locks
            .ost(ost)
            .lru_size
            .store(n.max(1), Ordering::Relaxed);
    }

    /// Gives every data lock back (unmount): the OSTs then hold nothing for this client.
    pub fn cancel_all_data_locks(&self) {
        self.stop_writeback();
        self.data_locks.stopping.store(true, Ordering::Release);
        let osts: Vec<Arc<OstLocks>> = self.data_locks.osts.read().values().cloned().collect();
        for o in osts {
            o.reset();
            // The OST drops this client's locks and space grant.
            let req = OssRequest::Disconnect;
            let uuid = o.uuid();
            let sent = self.ost_call(o.ost, uuid, &req);
            if let Err(e) = sent {
                tracing::debug!("OST{:04x}: disconnect: {e}", o.ost);
            }
        }
    }

    fn cancel_data_locks(&self, ost: u32, handles: &[u64]) {
        if handles.is_empty() {
            return;
        }
        let o = self.data_locks.ost(ost);
        let uuid = o.uuid();
        for chunk in handles.chunks(REFS_PER_MESSAGE_MAX) {
            let req = OssRequest::LockCancel {
                handles: chunk.to_vec(),
            };
            let sent = self.ost_call(ost, uuid, &req);
            if let Err(e) = sent {
                // The OST evicts a client that does not cancel; nothing else to do here.
                tracing::debug!("OST{ost:04x}: lock cancel: {e}");
            } else {
                o.stats
                    .cancels
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
        }
    }

    fn start_data_callbacks(&self, o: &Arc<OstLocks>) {
        if o.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.me.clone();
        let o2 = o.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("osc-cb-{:04x}", o.ost))
            .spawn(move || callbacks::poll_loop(me, o2));
        if let Err(e) = spawned {
            // Locks are still granted; without polls the OST evicts this client at the
            // first callback, which drops them all.
            o.polling.store(false, Ordering::Release);
            tracing::warn!("OST{:04x}: no data lock callback thread: {e}", o.ost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrow_lock_drops_only_the_file_bytes_it_covered() {
        // Stripe 1 of 2, 64 KiB units: object bytes 0..64K are file bytes 64K..128K.
        let m = StripeMap {
            size: 65_536,
            count: 2,
            index: 1,
        };
        assert_eq!(m.file_ranges(100, 199), Some(vec![(65_536 + 100, 100)]));
        // Across a unit boundary: two file ranges, a unit apart.
        assert_eq!(
            m.file_ranges(65_000, 66_000),
            Some(vec![(65_536 + 65_000, 536), (3 * 65_536, 465)])
        );
        // To the object's end, or over too many units: the whole file.
        assert_eq!(m.file_ranges(0, u64::MAX), None);
        assert_eq!(m.file_ranges(0, 100 * 65_536), None);
    }

    /// What a reply to a request sent before an eviction brings (a lock, a grant) is not
    /// taken by the client it became: `as_current` runs only for the uuid of now.
    #[test]
    fn a_grant_to_the_evicted_uuid_is_not_the_new_clients() {
        let o = OstLocks::new(0);
        let old = o.uuid();
        let mut dropped = false;
        assert!(o.reset_if(old, |n| dropped = n == 1).is_some());
        assert!(
            dropped,
            "the eviction's first step ran, as the first eviction"
        );
        assert_eq!(o.state.lock().evictions, 1, "the locks' eviction count");
        assert_ne!(o.uuid(), old);
        assert_eq!(o.as_current(old, || ()), None, "taken for the new uuid");
        assert_eq!(o.as_current(o.uuid(), || 7), Some(7));
        // A second refusal of the old uuid changes nothing.
        let now = o.uuid();
        assert!(o
            .reset_if(old, |_| unreachable!("once per eviction"))
            .is_none());
        assert_eq!(o.uuid(), now);
    }
}
