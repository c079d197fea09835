//! Cached opens under `OPEN` locks (Lustre's open cache): a file this mount opens for
//! reading again and again is opened at its MDT once; its close keeps the open, and the
//! next open for reading takes it back without a request.
//!
//! - **When one is asked for.** An open for reading asks the MDT for an `OPEN` lock once
//!   the file has been opened here [`OpenCache::threshold`] times within
//!   [`OPEN_HEAT_WINDOW_MS`] (Lustre's `opencache_threshold_count`): a file opened once
//!   (mdtest's read phase, a job reading each input once) costs nothing more, and no lock
//!   is called back when it is later removed. 0 turns the cache off.
//! - **What a kept open is.** The MDT counts it as open until its close comes: the
//!   client keeps at most [`KEPT_PER_FILE_MAX`] per file (the kernel releases a file
//!   after `close(2)` has returned, so the next open may come before the last release:
//!   each keeps its own), and at most [`OPEN_CACHE_ENTRIES_MAX`] in all (past it the
//!   oldest is closed).
//! - **When it goes.** When its lock goes (called back, LRU, the MDT's restart or this
//!   client's eviction), before the lock is cancelled: an unlink or a rename over the
//!   file — this mount's own too — calls the lock back, and the file is removed at once
//!   instead of staying an orphan. A kept open from before an eviction is dropped without
//!   a close (the MDT closed it).
//! - **Permissions.** A kept open is handed out without asking the MDT, so only callers
//!   that checked the caller's permission themselves use it (the kernel does, for the FUSE
//!   mount).

use crate::*;
use nacre_ldlm::msg::OPEN;
use nacre_types::cred::MAY_WRITE;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Opens of one file within this window make it hot (asks for an `OPEN` lock).
pub const OPEN_HEAT_WINDOW_MS: u64 = 10_000;
/// Default opens within the window before an `OPEN` lock is asked for.
pub const OPEN_THRESHOLD_DEFAULT: u32 = 3;
/// Most kept opens in all.
pub const OPEN_CACHE_ENTRIES_MAX: usize = 4_096;
/// Most kept opens of one file.
pub const KEPT_PER_FILE_MAX: usize = 4;
/// Most files whose recent opens are counted; past it the counts start again.
const HEAT_ENTRIES_MAX: usize = 65_536;

/// Counters of the open cache (`llite.FS.open_cache`).
#[derive(Default)]
pub struct OpenCacheStats {
    /// Opens answered from a kept open.
    pub hits: AtomicU64,
    /// Closes that kept the open.
    pub kept: AtomicU64,
    /// Kept opens closed because their lock went.
    pub closed_on_callback: AtomicU64,
    /// Kept opens closed to stay within the bound.
    pub closed_for_room: AtomicU64,
    /// `OPEN` locks asked for.
    pub asked: AtomicU64,
}

#[derive(Default)]
struct State {
    kept: HashMap<Fid, Vec<OpenFile>>,
    /// Kept opens in all.
    count: usize,
    /// Files by when an open of theirs was kept, oldest first (may name files whose
    /// opens went since).
    order: VecDeque<Fid>,
    heat: HashMap<Fid, (u32, Instant)>,
}

/// The kept opens of a client.
pub struct OpenCache {
    state: parking_lot::Mutex<State>,
    /// Opens within [`OPEN_HEAT_WINDOW_MS`] before an `OPEN` lock is asked for (0: never).
    pub threshold: AtomicU32,
    /// Counters.
    pub stats: OpenCacheStats,
}

impl Default for OpenCache {
    fn default() -> Self {
        OpenCache {
            state: parking_lot::Mutex::default(),
            threshold: AtomicU32::new(OPEN_THRESHOLD_DEFAULT),
            stats: OpenCacheStats::default(),
        }
    }
}

impl OpenCache {
    /// Kept opens now.
    pub fn len(&self) -> usize {
        self.state.lock().count
    }

    /// True if no open is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts an open of `fid`: true if it is hot enough to ask for an `OPEN` lock.
    fn heat(&self, fid: Fid) -> bool {
        let threshold = self.threshold.load(Ordering::Relaxed);
        if threshold == 0 {
            return false;
        }
        let mut s = self.state.lock();
        if s.heat.len() >= HEAT_ENTRIES_MAX && !s.heat.contains_key(&fid) {
            s.heat.clear();
        }
        let now = Instant::now();
        let e = s.heat.entry(fid).or_insert((0, now));
        if now.duration_since(e.1) > Duration::from_millis(OPEN_HEAT_WINDOW_MS) {
            *e = (0, now);
        }
        e.0 = e.0.saturating_add(1);
        e.0 >= threshold
    }

    /// One kept open of `fid`.
    fn take(&self, fid: Fid) -> Option<OpenFile> {
        self.state.lock().take(fid)
    }

    /// Every kept open of `fid`.
    fn take_all(&self, fid: Fid) -> Vec<OpenFile> {
        let mut s = self.state.lock();
        let all = s.kept.remove(&fid).unwrap_or_default();
        s.count -= all.len();
        all
    }
}

impl State {
    fn take(&mut self, fid: Fid) -> Option<OpenFile> {
        let files = self.kept.get_mut(&fid)?;
        let f = files.pop();
        if files.is_empty() {
            self.kept.remove(&fid);
        }
        self.count -= f.is_some() as usize;
        f
    }
}

/// What an open of a file with bytes on the MDT asks for: those bytes under `DOM`, and the
/// `LAYOUT` its first read needs (else read from the MDT again at that read).
const DOM_WITH_LAYOUT: u8 = nacre_ldlm::msg::DOM | nacre_ldlm::msg::LAYOUT;

impl Client {
    /// Opens `fid` for `access` as [`Client::open`] does, for a caller that checked the
    /// caller's permission itself (the kernel, for the FUSE mount): an open for reading of
    /// a file opened often here takes back an open this client kept (opencache.rs).
    pub fn open_checked(&self, fid: Fid, access: u8) -> Result<OpenFile> {
        if self.lock_sink.get().is_none() {
            return self.open(fid, access).map(|(_, f)| f);
        }
        if access & MAY_WRITE != 0 {
            // Never a kept open; the bytes on the MDT come with one that may read them
            // all the same (its own writes forget them: crate::dom).
            let reads = access & nacre_types::cred::MAY_READ != 0;
            return match reads && self.dom_laid_out(fid) {
                true => self.open_asking(fid, access, DOM_WITH_LAYOUT),
                false => self.open(fid, access).map(|(_, f)| f),
            };
        }
        if let Some(kept) = self.opens.take(fid) {
            if self.kept_open_valid(&kept) {
                self.opens.stats.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(kept.reopened(access));
            }
            // Its lock went meanwhile: the open goes to the MDT as it would have.
            let _ = self.close_at_mdt(&kept);
        }
        let bits = if self.opens.heat(fid) {
            self.opens.stats.asked.fetch_add(1, Ordering::Relaxed);
            OPEN
        } else {
            0
        };
        let bits = match self.dom_laid_out(fid) {
            true => bits | DOM_WITH_LAYOUT,
            false => bits,
        };
        self.open_asking(fid, access, bits)
    }

    /// True if the layout this client saw of `fid` has bytes on the MDT: they come with an
    /// open, under a DOM lock, asked for only then (the MDT grants it only then), so the
    /// opens of other files cost the MDT no look at their layout.
    fn dom_laid_out(&self, fid: Fid) -> bool {
        self.layouts
            .lock()
            .get(&fid)
            .is_some_and(|(l, _)| l.dom_end() > 0)
    }

    /// Opens `fid` for `access` at the MDT asking for the lock `bits` with it.
    fn open_asking(&self, fid: Fid, access: u8, bits: u8) -> Result<OpenFile> {
        let (attr, layout, _, _) = self.cached_entry(MdsOp::Open { fid, access }, bits, None)?;
        let file = OpenFile::with_slot(self.layout_slot(fid, layout))
            .owned_by(&attr)
            .with_access(access);
        self.registered(file)
    }

    /// True if `kept` is still an open at its MDT under this client's `OPEN` lock.
    fn kept_open_valid(&self, kept: &OpenFile) -> bool {
        self.check_handle(kept).is_ok()
            && self
                .mdc(kept.fid.mdt_index())
                .is_ok_and(|m| m.locks.holding(kept.fid, OPEN).is_some())
    }

    /// Keeps `file` open instead of closing it at the MDT, if it is open for reading only
    /// under this client's `OPEN` lock and no open of the file is kept yet. Checked and
    /// kept under the cache's lock: a callback of the lock (which drops it first, then
    /// takes the kept open out under the same lock) either finds it or prevents it.
    pub(crate) fn keep_open(&self, file: &OpenFile) -> bool {
        if file.access & MAY_WRITE != 0 || file.wrote.load(Ordering::Acquire) {
            return false;
        }
        let evict = {
            let mut s = self.opens.state.lock();
            let here = s.kept.get(&file.fid).map_or(0, Vec::len);
            if here >= KEPT_PER_FILE_MAX || !self.kept_open_valid(file) {
                return false;
            }
            s.kept
                .entry(file.fid)
                .or_default()
                .push(file.reopened(file.access));
            s.count += 1;
            s.order.push_back(file.fid);
            let mut evict = Vec::new();
            while s.count > OPEN_CACHE_ENTRIES_MAX {
                let Some(old) = s.order.pop_front() else {
                    break;
                };
                evict.extend(s.take(old));
            }
            // Past entries (of opens taken back or closed since) are let go of once they
            // pile up: each file keeps its newest entries, one per kept open.
            if s.order.len() > 2 * OPEN_CACHE_ENTRIES_MAX {
                let State { kept, order, .. } = &mut *s;
                let mut seen: HashMap<Fid, usize> = HashMap::new();
                let mut newest: Vec<Fid> = Vec::with_capacity(OPEN_CACHE_ENTRIES_MAX);
                for f in order.iter().rev() {
                    let n = seen.entry(*f).or_default();
                    if *n < kept.get(f).map_or(0, Vec::len) {
                        *n += 1;
                        newest.push(*f);
                    }
                }
                *order = newest.into_iter().rev().collect();
            }
            evict
        };
        self.opens.stats.kept.fetch_add(1, Ordering::Relaxed);
        for old in evict {
            self.opens
                .stats
                .closed_for_room
                .fetch_add(1, Ordering::Relaxed);
            let _ = self.close_at_mdt(&old);
        }
        true
    }

    /// The `OPEN` lock on `fid` went (it is no longer held): its kept opens are closed at
    /// the MDT, before the lock is cancelled.
    pub(crate) fn open_lock_gone(&self, fid: Fid) {
        for kept in self.opens.take_all(fid) {
            self.opens
                .stats
                .closed_on_callback
                .fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.close_at_mdt(&kept) {
                tracing::debug!("close of kept open {fid}: {e}");
            }
        }
    }

    /// The open cache's counters and size.
    pub fn open_cache(&self) -> (&OpenCacheStats, usize) {
        (&self.opens.stats, self.opens.len())
    }

    /// Opens this client holds at its MDTs now: files open here and opens kept.
    pub fn opens_at_mdts(&self) -> u64 {
        self.mdcs.read().values().map(|m| m.open_count()).sum()
    }

    /// How many opens of a file within [`OPEN_HEAT_WINDOW_MS`] ask for an `OPEN` lock.
    pub fn open_cache_threshold(&self) -> u32 {
        self.opens.threshold.load(Ordering::Relaxed)
    }

    /// Sets how many opens of a file within [`OPEN_HEAT_WINDOW_MS`] ask for an `OPEN` lock
    /// (0: none; kept opens already there stay until their locks go).
    pub fn set_open_cache_threshold(&self, n: u32) {
        self.opens.threshold.store(n, Ordering::Relaxed);
    }
}
