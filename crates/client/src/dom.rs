//! Data on the MDT, on the client: the bytes of a file below its layout's component on the
//! MDT (`Layout::dom_end`) are read and written with MDS requests (`MdsOp::DomRead`,
//! `DomWrite`, `DomAppend`), the rest through its OST objects as any file's. A range that
//! spans both is split at the component's end; every path that moves file bytes (reads,
//! the page cache's reads and writes, appends, allocations) goes through here first.
//!
//! A read that finds fewer bytes stored on the MDT than it asked for is at the end of the
//! file unless the file goes on past them: on its OSTs (their bytes past the component, or
//! their size after a truncate up, which a glimpse finds) — the bytes between then read as
//! zeros, a hole. The MDT keeps the stored bytes as long as the file is inside the
//! component (crates/mds/src/ops/dom.rs), so a file without objects needs no glimpse.
//!
//! The mount's page cache keeps these bytes under the file's `DOM` lock (Lustre's DoM
//! inodebits lock), which the MDT grants with a read of them and calls back before another
//! client's write or truncate runs: the callback waits for this client's page-cache reads
//! of the file in flight ([`DomReads`]: the kernel must hold a read's pages before they are
//! dropped), then has the mount drop the file's pages, then the lock is cancelled. A read
//! the MDT grants no lock with is answered as not covered (the mount drops its pages after
//! it).

use crate::{osc, Client, Result};
use nacre_types::{AlignedBuf, Fid, Layout, Status};
use nacre_wire::mds::{MdsOp, MdsReply, DOM_RPC_BYTES_MAX};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Longest a `DOM` lock's callback waits for the page-cache reads of its file in flight
/// (a read stuck longer is let be: its pages are dropped after it anyway, as uncovered).
pub const DOM_CALLBACK_WAIT_MS_MAX: u64 = 10_000;

/// Most bytes of data on the MDT that came with opens kept at once ([`DomOpened`]).
pub const DOM_OPENED_BYTES_MAX: usize = 16 << 20;

/// The bytes on the MDT that opens for reading brought (`MdsReply::OpenData`), each with
/// the `DOM` lock granted with it: a page-cache read uses them while that lock is held,
/// instead of asking the MDT. Dropped with the lock, or the oldest first past
/// [`DOM_OPENED_BYTES_MAX`].
#[derive(Default)]
pub(crate) struct DomOpened {
    state: Mutex<Opened>,
}

#[derive(Default)]
struct Opened {
    /// File → (lock handle, every byte stored on the MDT).
    files: HashMap<Fid, (u64, std::sync::Arc<Vec<u8>>)>,
    order: std::collections::VecDeque<Fid>,
    bytes: usize,
}

impl DomOpened {
    /// Keeps `data`, the bytes `fid` stores on the MDT, under lock `handle`.
    pub(crate) fn put(&self, fid: Fid, handle: u64, data: Vec<u8>) {
        if data.len() > DOM_OPENED_BYTES_MAX {
            return;
        }
        let mut s = self.state.lock();
        if let Some((_, old)) = s.files.remove(&fid) {
            s.bytes -= old.len();
        }
        while s.bytes + data.len() > DOM_OPENED_BYTES_MAX {
            let Some(old) = s.order.pop_front() else {
                break;
            };
            if let Some((_, d)) = s.files.remove(&old) {
                s.bytes -= d.len();
            }
        }
        s.bytes += data.len();
        s.order.push_back(fid);
        s.files.insert(fid, (handle, std::sync::Arc::new(data)));
    }

    /// The bytes kept for `fid` and their lock's handle.
    fn get(&self, fid: Fid) -> Option<(u64, std::sync::Arc<Vec<u8>>)> {
        self.state.lock().files.get(&fid).cloned()
    }

    /// Forgets what is kept for `fid` (its lock went).
    pub(crate) fn forget(&self, fid: Fid) {
        let mut s = self.state.lock();
        if let Some((_, d)) = s.files.remove(&fid) {
            s.bytes -= d.len();
            s.order.retain(|f| *f != fid);
        }
    }
}

/// Page-cache reads of bytes on the MDT in flight, by file.
#[derive(Default)]
pub(crate) struct DomReads {
    inflight: Mutex<HashMap<Fid, u32>>,
    done: Condvar,
}

impl DomReads {
    /// A page-cache read of `fid`'s bytes on the MDT starts.
    pub(crate) fn enter(&self, fid: Fid) {
        *self.inflight.lock().entry(fid).or_default() += 1;
    }

    /// It ended: its data is in the kernel's cache (or it failed).
    pub(crate) fn leave(&self, fid: Fid) {
        let mut m = self.inflight.lock();
        if let Some(n) = m.get_mut(&fid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&fid);
                self.done.notify_all();
            }
        }
    }

    /// Waits until no page-cache read of `fid` is in flight (at most
    /// [`DOM_CALLBACK_WAIT_MS_MAX`]).
    fn wait_idle(&self, fid: Fid) {
        let deadline = Instant::now() + Duration::from_millis(DOM_CALLBACK_WAIT_MS_MAX);
        let mut m = self.inflight.lock();
        while m.contains_key(&fid) {
            if self.done.wait_until(&mut m, deadline).timed_out() {
                tracing::warn!("DOM callback of {fid}: a page-cache read is still in flight");
                return;
            }
        }
    }
}

impl Client {
    /// Before and after a request of this client's that changes a file's bytes on the MDT
    /// (`op`: a write, an append, a truncate): what an open brought of them is forgotten,
    /// as the MDT calls back the other clients' `DOM` locks, not this client's own (an
    /// open answered meanwhile may have brought them from before the change: forgotten
    /// again after it).
    pub(crate) fn dom_changing(&self, op: &MdsOp) {
        match op {
            MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => {
                self.dom_opened.forget(*fid)
            }
            MdsOp::SetAttr { fid, attr } if attr.size.is_some() => self.dom_opened.forget(*fid),
            _ => {}
        }
    }

    /// A `DOM` lock on `fid` went (called back, given back or lost): once its page-cache
    /// reads in flight are done, the mount drops the file's pages.
    pub(crate) fn dom_lock_gone(&self, fid: Fid) {
        self.dom_opened.forget(fid);
        self.dom_reads.wait_idle(fid);
        self.drop_cached_data(&[crate::datalocks::FileDrop { fid, range: None }]);
    }

    /// [`Client::dom_read`] for the page cache: the bytes on the MDT under the file's `DOM`
    /// lock (held already, or asked for with the first request); `locked` says whether
    /// one covers them. The caller counts the read in [`DomReads`] until its data is in
    /// the kernel's cache.
    pub(crate) fn dom_read_cached(
        &self,
        fid: Fid,
        layout: &Layout,
        offset: u64,
        len: usize,
        locked: &mut bool,
        rest: impl FnOnce(u64, usize) -> Result<AlignedBuf>,
    ) -> Result<AlignedBuf> {
        self.dom_read_with(fid, layout, offset, len, Some(locked), rest)
    }
    /// Reads `[offset, offset + len)` of file `fid` (layout `layout`, with a component on
    /// the MDT that `offset` is below): the part below the component's end from the MDT,
    /// the rest by `rest(offset, len)` (an OST read, short only at the end of the file).
    /// Short only at the end of the file.
    pub(crate) fn dom_read(
        &self,
        fid: Fid,
        layout: &Layout,
        offset: u64,
        len: usize,
        rest: impl FnOnce(u64, usize) -> Result<AlignedBuf>,
    ) -> Result<AlignedBuf> {
        self.dom_read_with(fid, layout, offset, len, None, rest)
    }

    /// [`Client::dom_read`], under a `DOM` lock if `locked` is given (set to whether one
    /// covers the bytes).
    fn dom_read_with(
        &self,
        fid: Fid,
        layout: &Layout,
        offset: u64,
        len: usize,
        locked: Option<&mut bool>,
        rest: impl FnOnce(u64, usize) -> Result<AlignedBuf>,
    ) -> Result<AlignedBuf> {
        let dom_end = layout.dom_end();
        assert!(offset < dom_end, "a read below the component on the MDT");
        let end = offset.saturating_add(len as u64);
        let here = (end.min(dom_end) - offset) as usize;
        let mut got = self.dom_stored(fid, offset, here, locked)?;
        let tail = match end > dom_end {
            true => Some(rest(dom_end, (end - dom_end) as usize)?),
            false => None,
        };
        if got.len() < here {
            // Fewer bytes stored than asked: a hole if the file goes on past them.
            let size = match (&tail, layout.object_count()) {
                (Some(t), _) if !t.is_empty() => u64::MAX,
                (_, 0) => 0,
                _ => {
                    let kept = self.writeback.size(layout).unwrap_or(0);
                    osc::glimpse(self, layout)?.0.max(kept)
                }
            };
            let want = (size.saturating_sub(offset) as usize).clamp(got.len(), here);
            got.resize(want, 0);
        }
        if got.len() == here {
            if let Some(t) = tail {
                got.extend_from_slice(&t);
            }
        }
        let mut out = AlignedBuf::zeroed(got.len());
        out.copy_from_slice(&got);
        Ok(out)
    }

    /// The size the MDT knows of file `fid` where its layout has a component on the MDT:
    /// at least the end of its bytes there (0 for a file without one: its OSTs say).
    pub(crate) fn dom_size(&self, fid: Fid, layout: &Layout) -> Result<u64> {
        if layout.dom_end() == 0 {
            return Ok(0);
        }
        match self.md(MdsOp::GetAttr { fid })? {
            MdsReply::Attr(a) | MdsReply::Entry { attr: a, .. } => Ok(a.size),
            _ => Err(Status::Proto.into()),
        }
    }

    /// The bytes the MDT stores for `fid` in `[offset, offset + len)`, short where they end;
    /// under a `DOM` lock if `locked` is given (set to whether one covers them: held
    /// already, or granted with the first request).
    fn dom_stored(
        &self,
        fid: Fid,
        offset: u64,
        len: usize,
        mut locked: Option<&mut bool>,
    ) -> Result<Vec<u8>> {
        use nacre_ldlm::msg::DOM;
        let mdc = self.mdc(fid.mdt_index())?;
        // What an open brought under its lock, while that lock is held.
        if let (Some(l), Some((handle, data))) = (locked.as_deref_mut(), self.dom_opened.get(fid)) {
            if mdc.locks.holds(handle) {
                *l = true;
                self.dom_open_hits
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let from = (offset as usize).min(data.len());
                let to = (offset as usize).saturating_add(len).min(data.len());
                return Ok(data[from..to].to_vec());
            }
        }
        let mut bits = 0;
        if let Some(l) = locked.as_deref_mut() {
            *l = mdc.locks.covers(fid, DOM);
            if !*l {
                bits = DOM;
            }
        }
        let mut got = Vec::with_capacity(len);
        while got.len() < len {
            let n = (len - got.len()).min(DOM_RPC_BYTES_MAX as usize);
            let at = offset + got.len() as u64;
            let op = MdsOp::DomRead {
                fid,
                offset: at,
                len: n as u32,
            };
            let (reply, lock) = mdc.call_with(op, std::mem::take(&mut bits))?;
            if let (Some(l), Some(_)) = (locked.as_deref_mut(), lock.filter(|l| l.fid == fid)) {
                *l = true;
            }
            let data = match reply {
                MdsReply::DomData(d) if d.len() <= n => d,
                _ => return Err(Status::Proto.into()),
            };
            let short = data.len() < n;
            got.extend_from_slice(&data);
            if short {
                break;
            }
        }
        Ok(got)
    }

    /// Writes the part of `data` (at `offset`) below the component on the MDT of a file
    /// whose layout has one ending at `dom_end`; returns how many bytes of `data` that was
    /// (the rest goes to the OSTs).
    pub(crate) fn dom_write(
        &self,
        fid: Fid,
        dom_end: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize> {
        if offset >= dom_end {
            return Ok(0);
        }
        let here = ((dom_end - offset) as usize).min(data.len());
        for (i, piece) in data[..here].chunks(DOM_RPC_BYTES_MAX as usize).enumerate() {
            let at = offset + (i * DOM_RPC_BYTES_MAX as usize) as u64;
            let written = self.md(MdsOp::DomWrite {
                fid,
                offset: at,
                data: piece.to_vec(),
            });
            self.dom_opened.forget(fid);
            match written? {
                MdsReply::Attr(_) => {}
                _ => return Err(Status::Proto.into()),
            }
        }
        Ok(here)
    }

    /// Appends `data` on the MDT where every byte of the file is there and `data` fits
    /// below the component's end: the offset it went at, or None (the file has objects, or
    /// it would not fit: the caller appends under its OST locks).
    pub(crate) fn dom_append(&self, fid: Fid, layout: &Layout, data: &[u8]) -> Result<Option<u64>> {
        if layout.object_count() > 0 || data.len() as u64 > layout.dom_end() {
            return Ok(None);
        }
        let appended = self.md(MdsOp::DomAppend {
            fid,
            data: data.to_vec(),
        });
        self.dom_opened.forget(fid);
        match appended {
            Ok(MdsReply::Attr(a)) if a.size >= data.len() as u64 => {
                Ok(Some(a.size - data.len() as u64))
            }
            Ok(_) => Err(Status::Proto.into()),
            Err(e) if e.status() == Status::FBig => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An allocation (or a hole punched) over the part of `[offset, offset + len)` below
    /// the component on the MDT: a hole punched there is written as zeros over the bytes
    /// stored; an allocation without `keep_size` extends the stored bytes with zeros to its
    /// end (one that keeps the size allocates nothing here: the MDT stores what is written).
    pub(crate) fn dom_fallocate(
        &self,
        fid: Fid,
        dom_end: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<()> {
        if offset >= dom_end || (keep_size && !punch_hole) {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(dom_end);
        let here = (end - offset) as usize;
        let stored = self.dom_stored(fid, offset, here, None)?.len();
        let zeros = match punch_hole {
            // Over what is stored (a punch never makes the file longer).
            true => (offset, stored),
            // Past what is stored, to the end of the allocation.
            false => (offset + stored as u64, here - stored),
        };
        if zeros.1 > 0 {
            self.dom_write(fid, dom_end, zeros.0, &vec![0; zeros.1])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u32) -> Fid {
        Fid::new(0x2_0000_0400, n)
    }

    /// What opens brought is bounded: the oldest files go first past the bound; a file
    /// kept again replaces its bytes; a lock's end forgets its file.
    #[test]
    fn bytes_opens_brought_stay_within_their_bound() {
        let o = DomOpened::default();
        let piece = DOM_OPENED_BYTES_MAX / 4;
        for n in 0..6 {
            o.put(fid(n), u64::from(n), vec![n as u8; piece]);
        }
        assert!(o.state.lock().bytes <= DOM_OPENED_BYTES_MAX);
        assert!(o.get(fid(0)).is_none() && o.get(fid(1)).is_none());
        assert_eq!(o.get(fid(5)).map(|(h, d)| (h, d[0])), Some((5, 5)));
        o.put(fid(5), 50, vec![9; 10]);
        assert_eq!(o.get(fid(5)).map(|(h, d)| (h, d.len())), Some((50, 10)));
        o.forget(fid(5));
        assert!(o.get(fid(5)).is_none());
        let s = o.state.lock();
        assert_eq!(
            s.bytes,
            s.files.values().map(|(_, d)| d.len()).sum::<usize>()
        );
        assert!(!s.order.contains(&fid(5)));
        drop(s);
        // More than the bound in one file is not kept at all.
        o.put(fid(7), 7, vec![0; DOM_OPENED_BYTES_MAX + 1]);
        assert!(o.get(fid(7)).is_none());
    }

    /// A callback's wait ends when the file's last read in flight ends.
    #[test]
    fn a_callback_waits_for_the_reads_in_flight() {
        let r = std::sync::Arc::new(DomReads::default());
        r.enter(fid(1));
        r.enter(fid(1));
        let r2 = r.clone();
        let t = std::thread::spawn(move || {
            r2.leave(fid(1));
            r2.leave(fid(1));
        });
        r.wait_idle(fid(1));
        assert!(!r.inflight.lock().contains_key(&fid(1)));
        t.join().unwrap();
        // A file with none in flight does not wait.
        r.wait_idle(fid(2));
    }
}
