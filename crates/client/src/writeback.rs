//! Write-behind under write locks: a page-cache write to an object range this client holds
//! a write lock on, within the space the OST granted it, is kept in memory and answered at
//! once; a flusher thread writes what is kept in RPCs of up to `max_rpc_size` (small
//! writes gathered, several RPCs in flight per OST) once a full RPC is ready, the data has
//! waited [`IDLE_FLUSH_MS`], or half of [`DIRTY_BYTES_PER_OST_MAX`] is used — and at once
//! for a lock's callback, `fsync`, close, a read of the object, a truncate or a synchronous
//! write to it (which wait for the writes kept before them only: [`Writeback::flush_before`]).
//! What the OST did not take (an error, the client evicted) is reported by the file's next
//! `fsync` or close.
//!
//! No two RPCs in flight overlap on one object, so the OST applies writes of the same
//! bytes in the order they were made. A write that cannot be kept (no lock, no grant) first
//! waits for what is kept of its objects to be written, then goes through as before,
//! asking for a write lock and for grant.

use crate::osc::{self, Sub};
use crate::{Client, Result};
use nacre_ldlm::kind::Extent;
use nacre_types::{AlignedBuf, Fid, Layout, ObjectId, Owner, Status};
use nacre_wire::oss::{OssReply, OssRequest};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most data kept unwritten per OST (Lustre's `max_dirty_mb`); a writer past it waits.
pub const DIRTY_BYTES_PER_OST_MAX: u64 = 64 << 20;
/// Data kept this long without a new write to its object is written.
pub const IDLE_FLUSH_MS: u64 = 1_000;
/// How long an id an OST said is near its quota limit has its data written synchronously
/// unless a reply says otherwise sooner.
pub const QUOTA_SYNC_MS: u64 = 30_000;
/// Pieces shorter than this are extended by the next write that starts where they end
/// (gathered in place instead of kept apart).
const PIECE_GATHER_BYTES: usize = 1 << 20;

/// An object: OST index and object id.
pub(crate) type Key = (u32, ObjectId);

/// Kept bytes of an object, and the number of the oldest write among them (writes are
/// numbered as they are kept: `State::seq`).
struct Piece {
    bytes: Vec<u8>,
    seq: u64,
}

/// An RPC of kept bytes in flight: its object range and the number of the oldest write it
/// carries.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Flight {
    range: (u64, u64),
    seq: u64,
}

#[derive(Default)]
struct Obj {
    fid: Fid,
    owner: Owner,
    /// The generation of the layout the data was kept under (its writes carry it).
    layout_gen: u32,
    /// The job and credentials of the last write kept: the flusher's RPCs carry them (per-job
    /// statistics, and later quotas, count the writer, not the flusher).
    job: String,
    cred: Option<nacre_types::Cred>,
    /// Kept data by object offset, never overlapping.
    pieces: BTreeMap<u64, Piece>,
    /// Ranges `[start, end)` being written now.
    inflight: Vec<Flight>,
    /// Ranges of `inflight` whose data is lost (someone else changed the object while its
    /// OST restarted): not sent again if the OST refuses them as stale.
    lost: Vec<(u64, u64)>,
    urgent: bool,
    touched: Option<Instant>,
}

impl Obj {
    /// Puts `data` (write number `seq`) at `off`, replacing what it overlaps; returns the
    /// bytes replaced. The piece keeps the oldest number of what it replaced: a read that
    /// waits for an older write replaced here waits for this one (which carries its bytes
    /// over them) instead of finding on the OST what was there before both.
    fn insert(&mut self, off: u64, data: Vec<u8>, seq: u64) -> u64 {
        let mut seq = seq;
        let end = off + data.len() as u64;
        let mut replaced = 0;
        let overlapping: Vec<u64> = self
            .pieces
            .range(..end)
            .rev()
            .take_while(|(k, v)| *k + v.bytes.len() as u64 > off)
            .map(|(k, _)| *k)
            .collect();
        for k in overlapping {
            let mut v = self.pieces.remove(&k).expect("overlapping piece");
            let (s, e) = (k, k + v.bytes.len() as u64);
            replaced += e.min(end) - s.max(off);
            seq = seq.min(v.seq);
            if e > end {
                let right = v.bytes.split_off((end - s) as usize);
                let seq = v.seq;
                self.pieces.insert(end, Piece { bytes: right, seq });
            }
            if s < off {
                v.bytes.truncate((off - s) as usize);
                self.pieces.insert(s, v);
            }
        }
        // Gathered onto the piece ending where this one starts, while it is small (its
        // oldest write stays the older one).
        if let Some((k, v)) = self.pieces.range_mut(..off).next_back() {
            if *k + v.bytes.len() as u64 == off && v.bytes.len() < PIECE_GATHER_BYTES {
                v.bytes.extend_from_slice(&data);
                v.seq = v.seq.min(seq);
                return replaced;
            }
        }
        self.pieces.insert(off, Piece { bytes: data, seq });
        replaced
    }

    fn overlaps_inflight(&self, s: u64, e: u64) -> bool {
        self.inflight.iter().any(|f| f.range.0 < e && s < f.range.1)
    }

    /// The number of the oldest write kept or in flight here: every write numbered below
    /// it is on the OST (or lost, and reported).
    fn oldest(&self) -> Option<u64> {
        let kept = self.pieces.values().map(|p| p.seq);
        kept.chain(self.inflight.iter().map(|f| f.seq)).min()
    }

    /// Bytes of kept data contiguous from the first piece.
    fn first_run(&self) -> u64 {
        let mut it = self.pieces.iter();
        let Some((k, v)) = it.next() else { return 0 };
        let mut end = k + v.bytes.len() as u64;
        for (k, v) in it {
            if *k != end {
                break;
            }
            end += v.bytes.len() as u64;
        }
        end - self.pieces.keys().next().copied().unwrap_or(0)
    }

    /// Takes up to `max` bytes for one RPC: the contiguous bytes from the first piece, then
    /// the runs after them (across gaps, at most `runs_max` runs in all) while the RPC
    /// stays within `max` and no run overlaps an RPC in flight (None if the first does):
    /// the runs (offset, length) and their bytes back to back. Each run is a flight of its
    /// own (its oldest write's number).
    fn take_runs(&mut self, max: u64, runs_max: usize) -> Option<(Vec<(u64, u64)>, AlignedBuf)> {
        // The runs the kept pieces form, in order, until they hold `max` bytes.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut before_last = 0u64;
        for (k, v) in &self.pieces {
            let end = k + v.bytes.len() as u64;
            if let Some(r) = runs.last_mut().filter(|r| r.1 == *k) {
                r.1 = end;
            } else {
                if runs.len() == runs_max {
                    break;
                }
                before_last += runs.last().map_or(0, |r| r.1 - r.0);
                runs.push((*k, end));
            }
            let last = runs.last().expect("a run");
            if before_last + (last.1 - last.0) >= max {
                break;
            }
        }
        // Cut to `max`, and stopped at a run an RPC in flight overlaps.
        let mut total = 0u64;
        let mut taken = Vec::with_capacity(runs.len());
        for (s, e) in runs {
            let e = e.min(s + (max - total));
            if e <= s || self.overlaps_inflight(s, e) {
                break;
            }
            taken.push((s, e));
            total += e - s;
            if total == max {
                break;
            }
        }
        if taken.is_empty() {
            return None;
        }
        // Filled whole below (the runs' pieces): not zeroed first.
        let mut buf = AlignedBuf::for_overwrite(total as usize);
        let mut at = 0usize;
        for &(start, end) in &taken {
            let mut seq = u64::MAX;
            let mut k = start;
            while k < end {
                let mut v = self.pieces.remove(&k).expect("piece of a run");
                let n = v.bytes.len().min((end - k) as usize);
                buf[at..at + n].copy_from_slice(&v.bytes[..n]);
                seq = seq.min(v.seq);
                if n < v.bytes.len() {
                    let bytes = v.bytes.split_off(n);
                    self.pieces
                        .insert(k + n as u64, Piece { bytes, seq: v.seq });
                }
                at += n;
                k += n as u64;
            }
            self.inflight.push(Flight {
                range: (start, end),
                seq,
            });
        }
        Some((taken, buf))
    }

    /// The object size the kept and in-flight data imply.
    fn end(&self) -> u64 {
        let kept = self
            .pieces
            .iter()
            .next_back()
            .map_or(0, |(k, v)| k + v.bytes.len() as u64);
        let flying = self.inflight.iter().map(|f| f.range.1).max().unwrap_or(0);
        kept.max(flying)
    }

    fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.inflight.is_empty()
    }
}

#[derive(Default)]
struct State {
    objs: HashMap<Key, Obj>,
    /// Kept and in-flight bytes per OST.
    dirty: HashMap<u32, u64>,
    inflight: HashMap<u32, usize>,
    /// Space the OST promised and this client has not used yet.
    grant: HashMap<u32, u64>,
    /// Evictions by each OST so far (the count its locks keep, datalocks.rs): a write
    /// that found its lock before the last is not kept.
    evictions: HashMap<u32, u64>,
    /// What the OSTs did not take, per file, reported once.
    errors: HashMap<Fid, Status>,
    /// Users, groups and projects near a quota limit (OST replies say so, or an `EDQUOT`):
    /// their data is written synchronously until then, so `EDQUOT` reaches `write(2)`.
    quota_sync: HashMap<nacre_types::QuotaId, Instant>,
    /// OSTs that refused a write RPC of many runs (an older server): one run per RPC.
    single_runs: std::collections::HashSet<u32>,
    running: bool,
    stop: bool,
    /// The number of the last write kept (numbered from 1).
    seq: u64,
}

/// Counters (`osc.*.writeback` on a mount).
#[derive(Default)]
pub struct WritebackStats {
    /// Writes kept (answered from memory).
    pub kept: AtomicU64,
    /// Writes that went through (no write lock or no grant).
    pub through: AtomicU64,
    /// Write RPCs the flusher sent, and their bytes.
    pub rpcs: AtomicU64,
    /// Of those RPCs, the ones of several byte ranges ([`OssRequest::WriteRuns`]).
    pub rpcs_of_runs: AtomicU64,
    /// Byte ranges the flusher sent (one per RPC but in those).
    pub runs: AtomicU64,
    /// Bytes the flusher wrote.
    pub bytes: AtomicU64,
    /// Writers that waited for the dirty bound.
    pub waits: AtomicU64,
    /// Bytes lost (errors, eviction).
    pub lost_bytes: AtomicU64,
    /// Writes that went through because their owner is near a quota limit.
    pub quota_sync: AtomicU64,
}

/// The client's write-behind.
#[derive(Default)]
pub(crate) struct Writeback {
    st: Mutex<State>,
    cv: Condvar,
    /// Counters.
    pub stats: WritebackStats,
}

/// A write RPC for the flusher to send.
struct Work {
    key: Key,
    fid: Fid,
    owner: Owner,
    layout_gen: u32,
    job: String,
    cred: Option<nacre_types::Cred>,
    /// Object ranges (offset, end), sorted and apart, whose bytes `buf` holds in order.
    runs: Vec<(u64, u64)>,
    buf: AlignedBuf,
}

/// A write RPC the flusher waits for (and what it takes to send it again).
struct Flying {
    key: Key,
    /// As [`Work`]'s.
    runs: Vec<(u64, u64)>,
    fid: Fid,
    reply: Option<osc::Pending>,
    uuid: [u8; 16],
    owner: Owner,
    layout_gen: u32,
    job: String,
    cred: Option<nacre_types::Cred>,
    buf: Arc<AlignedBuf>,
    /// The OST start it was sent under.
    epoch: u64,
}

/// Longest the flusher waits for a restarted OST's locks to be taken back before data it
/// refused as stale counts as lost.
const STALE_WAIT_MS: u64 = 60_000;
/// Times data refused as stale is sent again (an OST restarting again and again).
const STALE_RESENDS_MAX: usize = 3;

impl Writeback {
    /// True if anything is kept or in flight for `keys`.
    fn holds_any(&self, keys: &[Key]) -> bool {
        let st = self.st.lock();
        !st.objs.is_empty() && keys.iter().any(|k| st.objs.contains_key(k))
    }

    /// Writes what is kept for `keys` now and waits until nothing is kept or in flight for
    /// them (written or lost): before their lock goes.
    pub(crate) fn flush_wait(&self, keys: &[Key]) {
        let mut st = self.st.lock();
        if !Self::hurry(&mut st, keys) {
            return;
        }
        self.cv.notify_all();
        while keys.iter().any(|k| st.objs.contains_key(k)) {
            self.cv.wait(&mut st);
        }
    }

    /// Writes what is kept for `keys` now and waits until the writes kept before this call
    /// are written (or lost): what a read, an `fsync` or a write that goes through must
    /// find on the OSTs. Writes kept meanwhile are not waited for, so a reader beside a
    /// writer that keeps writing the same objects is not held until the writer stops.
    pub(crate) fn flush_before(&self, keys: &[Key]) {
        let mut st = self.st.lock();
        if !Self::hurry(&mut st, keys) {
            return;
        }
        let last = st.seq;
        self.cv.notify_all();
        let pending = |st: &State| {
            keys.iter()
                .filter_map(|k| st.objs.get(k)?.oldest())
                .any(|seq| seq <= last)
        };
        while pending(&st) {
            self.cv.wait(&mut st);
        }
    }

    /// Marks what is kept for `keys` due at once; false if nothing is.
    fn hurry(st: &mut State, keys: &[Key]) -> bool {
        if st.objs.is_empty() {
            return false;
        }
        let mut any = false;
        for k in keys {
            if let Some(o) = st.objs.get_mut(k) {
                o.urgent = true;
                any = true;
            }
        }
        any
    }

    /// Writes everything kept and waits.
    pub(crate) fn flush_all(&self) {
        let keys: Vec<Key> = self.st.lock().objs.keys().copied().collect();
        self.flush_wait(&keys);
    }

    /// The error the OSTs gave for `fid`'s kept data since last asked (taken).
    pub(crate) fn take_error(&self, fid: Fid) -> Option<Status> {
        self.st.lock().errors.remove(&fid)
    }

    /// `added` bytes of space promised by OST `ost`.
    pub(crate) fn add_grant(&self, ost: u32, added: u64) {
        if added > 0 {
            *self.st.lock().grant.entry(ost).or_default() += added;
        }
    }

    /// Space granted by `ost` and not used yet.
    pub(crate) fn grant(&self, ost: u32) -> u64 {
        self.st.lock().grant.get(&ost).copied().unwrap_or(0)
    }

    /// OST `ost` forgot its grant (it restarted): nothing more is kept for it until it
    /// grants again.
    pub(crate) fn grant_lost(&self, ost: u32) {
        self.st.lock().grant.remove(&ost);
    }

    /// OST `ost` evicted this client: what is kept for it was written under locks it no
    /// longer holds, so it is dropped (never written after someone else's data), as is what
    /// the flusher took and has not sent yet (its ranges are lost: never sent as the new
    /// client), and the files report an I/O error. `count` is the OST's evictions of this
    /// client with this one: a write that found its lock before is not kept even if a
    /// grant came since (the lock is gone).
    pub(crate) fn evicted(&self, ost: u32, count: u64) {
        let mut st = self.st.lock();
        let e = st.evictions.entry(ost).or_default();
        *e = (*e).max(count);
        let keys: Vec<Key> = st.objs.keys().filter(|k| k.0 == ost).copied().collect();
        let mut lost = 0;
        for k in keys {
            let o = st.objs.get_mut(&k).expect("listed");
            let n: u64 = o.pieces.values().map(|v| v.bytes.len() as u64).sum();
            o.pieces.clear();
            o.lost = o.inflight.iter().map(|f| f.range).collect();
            lost += n;
            let (fid, empty) = (o.fid, o.is_empty());
            st.errors.insert(fid, Status::Io);
            if empty {
                st.objs.remove(&k);
            }
        }
        if let Some(d) = st.dirty.get_mut(&ost) {
            *d -= lost.min(*d);
        }
        st.grant.remove(&ost);
        drop(st);
        self.stats.lost_bytes.fetch_add(lost, Ordering::Relaxed);
        self.cv.notify_all();
    }

    /// The file size `layout`'s kept and in-flight data imply (`None`: nothing kept).
    pub(crate) fn size(&self, layout: &Layout) -> Option<u64> {
        let st = self.st.lock();
        if st.objs.is_empty() {
            return None;
        }
        let ends: Vec<(usize, u64, u64)> = layout
            .objects()
            .enumerate()
            .filter_map(|(i, o)| Some((i, st.objs.get(&(o.ost, o.object))?.end(), 0)))
            .collect();
        if ends.is_empty() {
            return None;
        }
        layout.file_size_from_objects(ends).map(|(s, _)| s)
    }

    /// The size object `object` of OST `ost` has once what is kept or in flight for it is
    /// written (0: nothing is): a glimpse's answer.
    pub(crate) fn kept_end(&self, ost: u32, object: ObjectId) -> u64 {
        self.st.lock().objs.get(&(ost, object)).map_or(0, Obj::end)
    }

    /// OST `ost` restarted and someone else changed `objects` there before this client
    /// took its locks back: what it keeps for them would overwrite newer data, so it is
    /// dropped (and what is in flight is not sent again), and the files report an I/O error.
    pub(crate) fn lost_objects(&self, ost: u32, objects: &[ObjectId]) {
        if objects.is_empty() {
            return;
        }
        let mut st = self.st.lock();
        let mut lost = 0;
        for obj in objects {
            let key = (ost, *obj);
            let Some(o) = st.objs.get_mut(&key) else {
                continue;
            };
            lost += o.pieces.values().map(|v| v.bytes.len() as u64).sum::<u64>();
            o.pieces.clear();
            o.lost = o.inflight.iter().map(|f| f.range).collect();
            let (fid, empty) = (o.fid, o.is_empty());
            st.errors.insert(fid, Status::Io);
            if empty {
                st.objs.remove(&key);
            }
        }
        if let Some(d) = st.dirty.get_mut(&ost) {
            *d -= lost.min(*d);
        }
        drop(st);
        self.stats.lost_bytes.fetch_add(lost, Ordering::Relaxed);
        self.cv.notify_all();
    }

    /// Whether the bytes the flusher took for `runs` of `key` are lost (an eviction or a
    /// restart that someone else's writes followed): they must not be sent.
    pub(crate) fn is_lost(&self, key: Key, runs: &[(u64, u64)]) -> bool {
        self.st
            .lock()
            .objs
            .get(&key)
            .is_some_and(|o| runs.iter().any(|r| o.lost.contains(r)))
    }

    /// An OST's new start is known (its locks were taken back): data it refused as stale
    /// may go again.
    pub(crate) fn new_epoch(&self) {
        self.cv.notify_all();
    }

    /// Bytes kept or in flight for OST `ost` now.
    pub(crate) fn dirty_on(&self, ost: u32) -> u64 {
        self.st.lock().dirty.get(&ost).copied().unwrap_or(0)
    }

    /// Data kept unwritten (or being written) for every OST.
    pub fn dirty_bytes(&self) -> u64 {
        self.st.lock().dirty.values().sum()
    }

    /// Keeps `data` for object range `off..` of `key` if the OST's grant covers it, waiting
    /// while the OST's dirty bound is reached; gives it back if it cannot be kept: no
    /// grant, or the OST evicted this client since its lock was found (at `evictions`).
    fn keep(
        &self,
        key: Key,
        (fid, owner, layout_gen): (Fid, Owner, u32),
        (off, evictions): (u64, u64),
        data: Vec<u8>,
        max_rpc: u64,
    ) -> Option<Vec<u8>> {
        let n = data.len() as u64;
        let mut st = self.st.lock();
        if !st.quota_sync.is_empty() && quota_sync::near_quota(&mut st.quota_sync, owner) {
            self.stats.quota_sync.fetch_add(1, Ordering::Relaxed);
            return Some(data);
        }
        let mut waited = false;
        loop {
            // Checked on every wake-up: an eviction may come while this waits.
            let lock_gone = st.evictions.get(&key.0).is_some_and(|e| *e > evictions);
            if st.grant.get(&key.0).copied().unwrap_or(0) < n || st.stop || lock_gone {
                return Some(data);
            }
            if st.dirty.get(&key.0).copied().unwrap_or(0) + n <= DIRTY_BYTES_PER_OST_MAX {
                break;
            }
            if !waited {
                self.stats.waits.fetch_add(1, Ordering::Relaxed);
                waited = true;
            }
            for (k, o) in st.objs.iter_mut() {
                if k.0 == key.0 {
                    o.urgent = true;
                }
            }
            self.cv.notify_all();
            self.cv.wait(&mut st);
        }
        let first = st.objs.is_empty();
        st.seq += 1;
        let seq = st.seq;
        let o = st.objs.entry(key).or_insert_with(|| Obj {
            fid,
            owner,
            cred: Some(nacre_types::cred::current()),
            ..Obj::default()
        });
        let job = nacre_types::jobid::current();
        if o.job != job {
            o.job = job;
            o.cred = Some(nacre_types::cred::current());
        }
        o.touched = Some(Instant::now());
        o.layout_gen = o.layout_gen.max(layout_gen);
        let replaced = o.insert(off, data, seq);
        let ready = o.first_run() >= max_rpc;
        let g = st.grant.entry(key.0).or_default();
        *g = *g - n + replaced;
        *st.dirty.entry(key.0).or_default() += n - replaced;
        drop(st);
        // The flusher sleeps without a deadline while nothing is kept.
        if ready || first {
            self.cv.notify_all();
        }
        None
    }
}

impl Client {
    /// Writes file data from the page cache: kept as write-behind where this client holds a
    /// write lock and grant, else written through (asking for both). Errors of kept data
    /// come with the file's next `fsync` or close.
    pub fn write_cached(&self, file: &crate::OpenFile, offset: u64, data: &[u8]) -> Result<usize> {
        file.check_writable()?;
        self.written.wrote(file.fid);
        self.remove_privs(file, None)?;
        let mut refused = 0;
        let (io, n) = loop {
            let io = self.io_layout_to(file, offset.saturating_add(data.len() as u64))?;
            let Some(layout) = io.get() else {
                return Err(Status::Inval.into());
            };
            match self.write_cached_with(file, layout, offset, data, None) {
                // The MDT no longer holds the file's first bytes (a migration moved them
                // to OSTs): the layout is read again and the write redone there.
                Err(e) if e.status() == Status::Stale && refused < crate::io::FENCED_REDOS_MAX => {
                    drop(io);
                    refused += 1;
                    self.layout_redos
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.reload_layout(file)?;
                }
                Err(e) => return Err(e),
                Ok(n) => break (io, n),
            }
        };
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        if self.data_locks_on() {
            let page = nacre_types::page::page_bytes();
            self.edges.wrote(file.fid, offset, &data[..n], page, |at| {
                self.page_locked(layout, at, page)
            });
        }
        Ok(n)
    }

    /// [`Client::write_cached`] with `file`'s layout, which the caller holds for the I/O.
    /// `pinned`: the write locks an append holds (crate::append); what goes through goes
    /// as the identity they were found under. `ESHUTDOWN` if an OST evicted this client
    /// since they were found and nothing of `data` is in place (the append may try
    /// again), `EIO` if some of it may be.
    pub(crate) fn write_cached_with(
        &self,
        file: &crate::OpenFile,
        layout: &Layout,
        offset: u64,
        data: &[u8],
        pinned: Option<&crate::datalocks::Pinned>,
    ) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if offset.saturating_add(data.len() as u64) > nacre_types::limits::FILE_BYTES_MAX {
            return Err(Status::FBig.into());
        }
        // An append's locks gone before anything is written: nothing to undo, it tries again.
        if pinned.is_some_and(|p| !self.pins_stand(p)) {
            return Err(Status::Shutdown.into());
        }
        // Bytes on the MDT are written through (crate::dom); the rest is kept or written.
        let on_mdt = self.dom_write(file.fid, layout.dom_end(), offset, data)?;
        // Whether any of `data` is written or kept yet: an append's eviction found after
        // that is an I/O error (part of it may be in place), not a reason to try again.
        let mut landed = on_mdt > 0;
        if on_mdt == data.len() {
            return Ok(on_mdt);
        }
        let (offset, data) = (offset + on_mdt as u64, &data[on_mdt..]);
        self.start_flusher();
        let max = u64::from(self.net_config().max_rpc_size.max(4096));
        let mut through: Vec<Sub> = Vec::new();
        for sub in osc::subs(layout, offset, data.len() as u64, max) {
            let (ost, object) = osc::object(layout, sub.stripe);
            let ext = Extent::of(sub.object_offset, sub.len, true);
            let found = self.use_write_lock(ost, object, ext);
            // An append's locks (`pinned`) are gone if the OST evicted this client since
            // they were found: what it read of the size under them no longer holds.
            let gone = pinned.is_some_and(|p| match (p.of(ost), found) {
                (Some((at, _)), Some((_, now))) => now != at,
                _ => true,
            });
            if gone {
                if let Some((handle, _)) = found {
                    self.done_with_lock(ost, handle);
                }
                return Err(if landed { Status::Io } else { Status::Shutdown }.into());
            }
            let Some((handle, evictions)) = found else {
                through.push(sub);
                continue;
            };
            let bytes = osc::gather(layout, &sub, offset, data);
            let back = self.writeback.keep(
                (ost, object),
                (file.fid, file.owner, layout.generation),
                (sub.object_offset, evictions),
                bytes,
                max,
            );
            self.done_with_lock(ost, handle);
            if back.is_some() {
                through.push(sub);
            } else {
                landed = true;
                self.writeback.stats.kept.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !through.is_empty() {
            self.writeback.stats.through.fetch_add(1, Ordering::Relaxed);
            let keys: Vec<Key> = through
                .iter()
                .map(|s| osc::object(layout, s.stripe))
                .collect();
            self.writeback.flush_before(&keys);
            let several = through.len() > 1;
            osc::write_subs(
                self,
                Some(file.fid),
                layout,
                offset,
                data,
                file.owner,
                &through,
                None,
                pinned,
            )
            .map_err(|e| match e.status() {
                // Some of an append's RPCs may have been written before one was refused.
                Status::Shutdown if pinned.is_some() && (landed || several) => Status::Io.into(),
                _ => e,
            })?;
        }
        Ok(on_mdt + data.len())
    }

    /// Writes what is kept of `file`'s objects and waits; the error the OSTs gave for it
    /// since last asked.
    pub fn flush_file(&self, fid: Fid, layout: Option<&Layout>) -> Result<()> {
        if let Some(l) = layout {
            self.writeback.flush_before(&keys_of(l));
        }
        match self.writeback.take_error(fid) {
            Some(s) => Err(s.into()),
            None => Ok(()),
        }
    }

    /// Writes what is kept of `layout`'s objects and waits until nothing is kept for them:
    /// before the layout's lock goes or the layout changes (the caller holds off new I/O
    /// on the file meanwhile).
    pub(crate) fn flush_objects_all(&self, layout: &Layout) {
        self.writeback.flush_wait(&keys_of(layout));
    }

    /// Writes what is kept of `layout`'s objects before an operation that must see it on
    /// the OSTs (a read, a truncate, a write that goes through).
    pub(crate) fn flush_objects(&self, layout: &Layout) {
        let keys = keys_of(layout);
        if self.writeback.holds_any(&keys) {
            self.writeback.flush_before(&keys);
        }
    }

    /// Space OST `ost` granted this client for write-behind and not used yet (Lustre's
    /// `cur_grant_bytes`).
    pub fn cur_grant_bytes(&self, ost: u32) -> u64 {
        self.writeback.grant(ost)
    }

    /// Write-behind counters and bytes kept now.
    pub fn writeback_stats(&self) -> (&WritebackStats, u64) {
        (&self.writeback.stats, self.writeback.dirty_bytes())
    }

    fn start_flusher(&self) {
        {
            let mut st = self.writeback.st.lock();
            if st.running || st.stop {
                return;
            }
            st.running = true;
        }
        let (me, wb) = (self.me.clone(), self.writeback.clone());
        let spawned = std::thread::Builder::new()
            .name("osc-flusher".into())
            .spawn(move || flusher::flusher(me, wb));
        if let Err(e) = spawned {
            // Nothing is kept without a flusher: every write goes through.
            self.writeback.st.lock().stop = true;
            tracing::warn!("no write-behind flusher thread: {e}");
        }
    }

    /// Stops keeping writes (unmount): what is kept is written first.
    pub(crate) fn stop_writeback(&self) {
        self.writeback.flush_all();
        self.writeback.st.lock().stop = true;
        self.writeback.cv.notify_all();
    }
}

/// The objects of `layout`.
pub(crate) fn keys_of(layout: &Layout) -> Vec<Key> {
    layout.objects().map(|o| (o.ost, o.object)).collect()
}

mod flusher;
mod quota_sync;
#[cfg(test)]
mod tests;
