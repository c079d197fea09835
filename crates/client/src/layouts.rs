//! A file's layout as this client's I/O uses it, kept under the MDT's `LAYOUT` lock
//! (Lustre's layout lock): one slot per file open here, shared by its handles.
//!
//! I/O holds the slot shared while it uses the layout ([`Client::io_layout`]). The lock's
//! callback takes the slot exclusively — the I/O under way ends first — writes out what this
//! client keeps for the old objects, and marks the layout stale, all before the lock is
//! cancelled: so the change that called it back (a setstripe of an empty file) sees every
//! byte this client wrote, and no write of this client reaches the old objects after it.
//! The next I/O asks the MDT for the layout again, with the lock, before it touches an
//! object. A client that takes no locks (the native library without
//! [`Client::enable_locks`]) keeps the layout it opened the file with.

use crate::*;
use nacre_ldlm::msg::LAYOUT;
use nacre_wire::mds::{LayoutInfo, MdsOp, MdsReply};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Open files whose slots the registry holds before it drops those no handle uses.
const SLOTS_SWEEP_AT: usize = 4_096;
/// Longest a LAYOUT lock's callback waits for the I/O under way on the file (an I/O held up
/// by an unreachable OST must not hold the callback past the MDT's callback timeout, which
/// would evict this client): past it, the lock is cancelled, the layout marked stale all the
/// same, and that I/O ends on the layout it started with.
pub const LAYOUT_CALLBACK_WAIT_MS: u64 = 2_000;
/// Pause between asks for a file's LAYOUT lock that the MDT could not grant (a change of
/// the layout under way); the asks stop after the RPC timeout.
const LAYOUT_RETRY_MS: u64 = 10;
/// Intents one write sends before it gives up with `EIO` (each answer should cover it; a
/// migration swapping the layout meanwhile takes one more).
const GROW_TRIES_MAX: u32 = 4;

/// A file's layout.
#[derive(Debug)]
pub(crate) struct Current {
    /// The layout (None: not a regular file).
    pub(crate) layout: Option<Layout>,
}

/// The layout of one file open here (see the module's notes).
#[derive(Debug)]
pub struct LayoutSlot {
    fid: Fid,
    current: parking_lot::RwLock<Current>,
    /// Its LAYOUT lock went (or was never had) since it was read: read it again.
    stale: AtomicBool,
    /// Callbacks of the file's LAYOUT lock handled so far: a layout read before one is
    /// not trusted after it.
    callbacks: AtomicU64,
}

impl LayoutSlot {
    /// A slot for `fid` with `layout`; `covered`: under a LAYOUT lock of this client.
    pub(crate) fn new(fid: Fid, layout: Option<Layout>, covered: bool) -> LayoutSlot {
        LayoutSlot {
            fid,
            current: parking_lot::RwLock::new(Current { layout }),
            stale: AtomicBool::new(!covered),
            callbacks: AtomicU64::new(0),
        }
    }

    /// The file.
    pub(crate) fn fid(&self) -> Fid {
        self.fid
    }

    /// The layout as last known.
    pub(crate) fn snapshot(&self) -> Option<Layout> {
        self.current.read_recursive().layout.clone()
    }
}

/// The layout an I/O uses, held so that the layout's callback waits for the I/O's end.
pub(crate) struct IoLayout<'a>(parking_lot::RwLockReadGuard<'a, Current>);

impl IoLayout<'_> {
    /// The layout (None: not a regular file).
    pub(crate) fn get(&self) -> Option<&Layout> {
        self.0.layout.as_ref()
    }
}

/// The slots of the files open on this client.
#[derive(Default)]
pub(crate) struct Slots(parking_lot::Mutex<HashMap<Fid, Weak<LayoutSlot>>>);

impl Client {
    /// The slot handles of `fid` share, with `layout` (from the MDT's answer to the open)
    /// when no handle has one; covered if this client holds the file's LAYOUT lock now.
    pub(crate) fn layout_slot(&self, fid: Fid, layout: Option<Layout>) -> Arc<LayoutSlot> {
        let mut slots = self.layout_slots.0.lock();
        if let Some(slot) = slots.get(&fid).and_then(Weak::upgrade) {
            return slot;
        }
        if slots.len() >= SLOTS_SWEEP_AT {
            slots.retain(|_, s| s.strong_count() > 0);
        }
        // Checked under the registry's lock: a callback that took the lock from the table
        // before this finds no slot, but this sees the lock gone.
        let covered = self.lock_sink.get().is_some() && self.lock_covers(fid, LAYOUT);
        let slot = Arc::new(LayoutSlot::new(fid, layout, covered));
        slots.insert(fid, Arc::downgrade(&slot));
        slot
    }

    /// The slot of `fid` if a handle of this client has the file open (the registry's lock
    /// is let go before the caller takes the slot's).
    fn slot_of(&self, fid: Fid) -> Option<Arc<LayoutSlot>> {
        self.layout_slots.0.lock().get(&fid).and_then(Weak::upgrade)
    }

    /// The layout `file`'s I/O may use now, held until the I/O is done: read again from
    /// the MDT first if this client's LAYOUT lock on it went.
    pub(crate) fn io_layout<'f>(&self, file: &'f OpenFile) -> Result<IoLayout<'f>> {
        let slot = &file.layout;
        let deadline =
            std::time::Instant::now() + Duration::from_millis(self.net_config().rpc_timeout_ms);
        loop {
            let current = slot.current.read_recursive();
            let stale = slot.stale.load(Ordering::Acquire);
            if !stale || current.layout.is_none() || self.lock_sink.get().is_none() {
                return Ok(IoLayout(current));
            }
            drop(current);
            if self.refresh_layout(slot)? || std::time::Instant::now() >= deadline {
                // Covered; or no lock to be had for an RPC timeout: the layout just read.
                return Ok(IoLayout(slot.current.read_recursive()));
            }
            // No lock to be had now: a change of the layout is under way at the MDT, which
            // answers the layout as it is before it. Asked again once it is done.
            std::thread::sleep(Duration::from_millis(LAYOUT_RETRY_MS));
        }
    }

    /// [`Client::io_layout`] for a write, truncate or allocation reaching byte `end - 1`:
    /// the MDT first instantiates the components below `end` that have no objects yet
    /// (`MdsOp::LayoutIntent`, at most once per component a file has).
    pub(crate) fn io_layout_to<'f>(&self, file: &'f OpenFile, end: u64) -> Result<IoLayout<'f>> {
        for _ in 0..GROW_TRIES_MAX {
            let io = self.io_layout(file)?;
            match io.get() {
                Some(l) if l.instantiated_end() < end => {}
                _ => return Ok(io),
            }
            drop(io);
            self.grow_layout(file.fid, end)?;
        }
        // The MDT answered a layout that still ends short of `end` time after time.
        Err(Status::Io.into())
    }

    /// Has the MDT instantiate `fid`'s components below `end`; the layout it answers is
    /// the file's here from now on (in the slot of its open handles, if any). No flush:
    /// the objects this client wrote to stay. The caller holds no I/O layout of the file.
    pub(crate) fn grow_layout(&self, fid: Fid, end: u64) -> Result<Layout> {
        self.layout_grows.fetch_add(1, Ordering::Relaxed);
        let reply = self.md(MdsOp::LayoutIntent { fid, end })?;
        let MdsReply::Layout(LayoutInfo::File(layout)) = reply else {
            return Err(Status::Proto.into());
        };
        layout.check().map_err(|_| Status::Proto)?;
        if let Some(slot) = self.slot_of(fid) {
            // Ends the I/O under way here first: it keeps the layout it started with.
            slot.current.write().layout = Some(layout.clone());
        }
        Ok(layout)
    }

    /// A read of `offset..offset + len` of `file` by a client that takes no locks (no
    /// callback tells it of components other clients had instantiated): its layout is
    /// read again first when it has no objects there.
    pub(crate) fn lockless_layout_over(
        &self,
        file: &OpenFile,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        if self.lock_sink.get().is_some() {
            return Ok(());
        }
        // Looked at in place: this runs before every read of such a client.
        let short = file
            .layout
            .current
            .read_recursive()
            .layout
            .as_ref()
            .is_some_and(|l| l.instantiated_end() < offset.saturating_add(len.max(1)));
        if short {
            let reply = self.md(MdsOp::GetAttr { fid: file.fid })?;
            let MdsReply::Entry { layout, .. } = reply else {
                return Err(Status::Proto.into());
            };
            // No lock keeps it: what the MDT answered is the best this client knows.
            if let Some(l) = layout {
                l.check().map_err(|_| Status::Proto)?;
                file.layout.current.write().layout = Some(l);
            }
        }
        Ok(())
    }

    /// Reads `file`'s layout from the MDT again (an OST refused a change under it: a
    /// migration fenced its objects). While the migration's fence window is open the MDT
    /// answers "in progress" and the request waits; then the new layout comes.
    pub(crate) fn reload_layout(&self, file: &OpenFile) -> Result<()> {
        let slot = &file.layout;
        slot.stale.store(true, Ordering::Release);
        self.refresh_layout(slot).map(|_| ())
    }

    /// Reads `slot`'s layout from the MDT, asking for the LAYOUT lock; true if it is
    /// covered by the lock (no callback came since).
    fn refresh_layout(&self, slot: &LayoutSlot) -> Result<bool> {
        let seen = slot.callbacks.load(Ordering::Acquire);
        let mdc = self.mdc(slot.fid.mdt_index())?;
        let (reply, lock) = mdc.call_with(MdsOp::GetAttr { fid: slot.fid }, LAYOUT)?;
        let MdsReply::Entry { layout, .. } = reply else {
            return Err(Status::Proto.into());
        };
        let mut current = slot.current.write();
        let covered = lock.is_some_and(|l| l.fid == slot.fid && l.bits & LAYOUT != 0)
            && slot.callbacks.load(Ordering::Acquire) == seen
            && mdc.locks.covers(slot.fid, LAYOUT);
        current.layout = layout;
        slot.stale.store(!covered, Ordering::Release);
        Ok(covered)
    }

    /// The LAYOUT lock of `fid` goes: once the I/O under way has ended, what this client
    /// keeps for its objects is written out and its layout marked stale.
    pub(crate) fn layout_called_back(&self, fid: Fid) {
        let Some(slot) = self.slot_of(fid) else {
            return;
        };
        slot.callbacks.fetch_add(1, Ordering::AcqRel);
        slot.stale.store(true, Ordering::Release);
        let wait = Duration::from_millis(LAYOUT_CALLBACK_WAIT_MS);
        match slot.current.try_write_for(wait) {
            Some(current) => {
                if let Some(layout) = &current.layout {
                    self.flush_objects_all(layout);
                }
            }
            None => tracing::warn!(
                "{}: I/O under way kept the layout of {fid} past {} ms; its lock goes anyway",
                self.fsname,
                LAYOUT_CALLBACK_WAIT_MS
            ),
        };
    }

    /// Runs `change` of `fid`'s layout asked by this client: the MDT calls back only other
    /// clients' locks, so this client's own I/O on the file is ended first, what it keeps
    /// for the old objects written, and new I/O held off until the MDT answered; the new
    /// layout is then the file's here.
    pub(crate) fn own_layout_change(
        &self,
        fid: Fid,
        change: impl FnOnce() -> Result<LayoutInfo>,
    ) -> Result<LayoutInfo> {
        let Some(slot) = self.slot_of(fid) else {
            return change();
        };
        let mut current = slot.current.write();
        if let Some(layout) = &current.layout {
            self.flush_objects_all(layout);
        }
        let result = change();
        match &result {
            Ok(LayoutInfo::File(layout)) => current.layout = Some(layout.clone()),
            // Unknown: read it again.
            Err(_) | Ok(_) => slot.stale.store(true, Ordering::Release),
        }
        result
    }
}
