//! Linux AIO (libaio's `io_submit`/`io_getevents`, as fio's `libaio` engine and databases
//! use it) on Nacre descriptors: their requests go into a ring of the context's own, many
//! in flight from one thread, where FUSE would take a file's direct I/O one request at a
//! time. Requests on other descriptors (and ones with flags this path does not take, an
//! eventfd to signal, or an `O_APPEND` write) go to the kernel; a context holding both
//! reaps from both.
//!
//! The kernel's context stays the key: `io_setup` is not replaced, so contexts made by
//! any means work. Each request of ours holds a slot of [`SLOT_BYTES`] of the ring's
//! buffers; a larger one is served at once (synchronously) and its completion kept for
//! `io_getevents`.
//!
//! A context's rings are used under its lock: a thread submitting to a context that
//! another thread is reaping waits until one of the requests of ours in flight completes
//! (never longer: a reaper waits on the rings only while requests of ours are in flight,
//! and waits for the kernel's alone without the lock).

use crate::abi::{IoEvent, Iocb};
use crate::io::Bufs;
use crate::table::Mount;
use crate::{real, table};
use nacre_api::{Completion, File, Ring};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests of ours in flight per context and mount.
const SLOTS: usize = 64;
/// Buffer bytes per request slot.
pub(crate) const SLOT_BYTES: usize = 1 << 20;

const IO_CMD_PREAD: u16 = 0;
const IO_CMD_PWRITE: u16 = 1;
const IO_CMD_FSYNC: u16 = 2;
const IO_CMD_FDSYNC: u16 = 3;
const IO_CMD_PREADV: u16 = 7;
const IO_CMD_PWRITEV: u16 = 8;
/// `IOCB_FLAG_RESFD`: an eventfd to signal at completion.
const IOCB_FLAG_RESFD: u32 = 1;

/// A request of ours in flight.
struct Op {
    iocb: u64,
    data: u64,
    /// Where a read's bytes go (copied from the iocb at submission).
    into: Option<Vec<libc::iovec>>,
    _file: Arc<File>,
}

/// One mount's ring of a context.
struct CtxRing {
    mount: Arc<Mount>,
    ring: Ring,
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
}

/// What this library holds of one kernel AIO context.
#[derive(Default)]
struct Ctx {
    rings: Vec<CtxRing>,
    /// Completions ready (of requests served at once).
    ready: VecDeque<IoEvent>,
    /// Requests of ours in flight in the rings.
    ours: usize,
    /// Requests given to the kernel and not yet reaped.
    kernel: usize,
}

// SAFETY: the raw addresses in `Op` are the application's, only used under the lock.
unsafe impl Send for Ctx {}

static CTXS: Mutex<Option<HashMap<usize, Arc<Mutex<Ctx>>>>> = Mutex::new(None);

fn ctx_of(ctx: usize, make: bool) -> Option<Arc<Mutex<Ctx>>> {
    let mut all = CTXS.lock();
    let map = all.get_or_insert_with(HashMap::new);
    if make {
        return Some(map.entry(ctx).or_default().clone());
    }
    map.get(&ctx).cloned()
}

/// The iovecs an iocb names (one buffer, or its vector).
unsafe fn iovecs_of(cb: &Iocb) -> Option<Vec<libc::iovec>> {
    match cb.opcode {
        IO_CMD_PREAD | IO_CMD_PWRITE => Some(vec![libc::iovec {
            iov_base: cb.buf as *mut libc::c_void,
            iov_len: cb.nbytes as usize,
        }]),
        IO_CMD_PREADV | IO_CMD_PWRITEV => {
            if cb.nbytes > 1024 || (cb.buf == 0 && cb.nbytes > 0) {
                return None;
            }
            let v = std::slice::from_raw_parts(cb.buf as *const libc::iovec, cb.nbytes as usize);
            Some(v.to_vec())
        }
        _ => Some(Vec::new()),
    }
}

/// What serves `cb` if this path takes it.
fn ours(cb: &Iocb) -> Option<(Arc<File>, Arc<Mount>)> {
    let ops = [
        IO_CMD_PREAD,
        IO_CMD_PWRITE,
        IO_CMD_FSYNC,
        IO_CMD_FDSYNC,
        IO_CMD_PREADV,
        IO_CMD_PWRITEV,
    ];
    if !ops.contains(&cb.opcode) || cb.flags & IOCB_FLAG_RESFD != 0 || cb.rw_flags != 0 {
        return None;
    }
    let fd = i32::try_from(cb.fildes).ok()?;
    let entry = table::entry(fd)?;
    let writes = matches!(cb.opcode, IO_CMD_PWRITE | IO_CMD_PWRITEV);
    if writes && entry.append.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    let syncs = matches!(cb.opcode, IO_CMD_FSYNC | IO_CMD_FDSYNC);
    if syncs
        && (entry.mapped.load(std::sync::atomic::Ordering::Acquire)
            || entry
                .kernel_wrote
                .load(std::sync::atomic::Ordering::Acquire))
    {
        return None;
    }
    table::served(&entry, fd, true)
}

impl Ctx {
    /// The ring of `mount` in this context (set up at its first request).
    fn ring_of(&mut self, mount: &Arc<Mount>) -> Result<usize, i32> {
        if let Some(i) = self.rings.iter().position(|r| Arc::ptr_eq(&r.mount, mount)) {
            return Ok(i);
        }
        let ring = mount
            .node
            .ring(SLOTS as u32 * 2, (SLOTS * SLOT_BYTES) as u64)
            .map_err(|e| e.errno())?;
        self.rings.push(CtxRing {
            mount: mount.clone(),
            ring,
            slots: (0..SLOTS).map(|_| None).collect(),
            free: (0..SLOTS).rev().collect(),
        });
        Ok(self.rings.len() - 1)
    }

    /// Queues `cb` (its address `at`) in a ring, or serves it at once when it is larger
    /// than a slot: `Err(EAGAIN)` when no slot is free.
    unsafe fn queue(
        &mut self,
        at: u64,
        cb: &Iocb,
        file: Arc<File>,
        mount: Arc<Mount>,
    ) -> Result<(), i32> {
        let iov = iovecs_of(cb).ok_or(libc::EINVAL)?;
        let bufs = Bufs::new(&iov);
        let len = bufs.total();
        let writes = matches!(cb.opcode, IO_CMD_PWRITE | IO_CMD_PWRITEV);
        let syncs = matches!(cb.opcode, IO_CMD_FSYNC | IO_CMD_FDSYNC);
        if cb.offset < 0 && !syncs {
            return Err(libc::EINVAL);
        }
        if len > SLOT_BYTES {
            let r = if writes {
                crate::io::write(&mount, &file, &bufs, cb.offset as u64)
            } else {
                crate::io::read(&mount, &file, &bufs, cb.offset as u64)
            };
            self.ready.push_back(IoEvent {
                data: cb.data,
                obj: at,
                res: r.map_or_else(|e| -i64::from(e), |n| n as i64),
                res2: 0,
            });
            return Ok(());
        }
        let i = self.ring_of(&mount)?;
        let r = &mut self.rings[i];
        let slot = r.free.pop().ok_or(libc::EAGAIN)?;
        let buf_at = slot * SLOT_BYTES;
        let prepped = if syncs {
            r.ring.prep_fsync(&file, slot as u64)
        } else if writes {
            bufs.get(0, &mut r.ring.buffers()[buf_at..buf_at + len]);
            r.ring.prep_write(
                &file,
                cb.offset as u64,
                buf_at as u64,
                len as u32,
                slot as u64,
            )
        } else {
            r.ring.prep_read(
                &file,
                cb.offset as u64,
                buf_at as u64,
                len as u32,
                slot as u64,
            )
        };
        if let Err(e) = prepped {
            r.free.push(slot);
            return Err(e.errno());
        }
        r.slots[slot] = Some(Op {
            iocb: at,
            data: cb.data,
            into: (!writes && !syncs).then_some(iov),
            _file: file,
        });
        self.ours += 1;
        Ok(())
    }

    fn submit(&mut self) {
        for r in &mut self.rings {
            r.ring.submit();
        }
    }

    /// Takes what completed of ours (waiting up to `wait` for at least `min`) into `out`.
    fn reap(&mut self, out: &mut Vec<IoEvent>, max: usize, min: usize, wait: Option<Duration>) {
        while out.len() < max {
            match self.ready.pop_front() {
                Some(e) => out.push(e),
                None => break,
            }
        }
        let mut cqes = [Completion::default(); SLOTS];
        // One ring with requests in flight waits; the others (requests of several mounts
        // in one context are rare) are only looked at.
        let waiter = self.rings.iter().position(|r| r.ring.in_flight() > 0);
        for (k, r) in self.rings.iter_mut().enumerate() {
            let room = (max - out.len()).min(SLOTS);
            if room == 0 {
                break;
            }
            let need = if Some(k) == waiter {
                min.saturating_sub(out.len())
            } else {
                0
            };
            let n = match r.ring.wait_into(need, &mut cqes[..room], wait) {
                Ok(n) => n,
                Err(_) => {
                    // The node's client is gone: what was in flight failed.
                    for (slot, op) in r.slots.iter_mut().enumerate() {
                        if let Some(op) = op.take() {
                            r.free.push(slot);
                            self.ours -= 1;
                            self.ready.push_back(IoEvent {
                                data: op.data,
                                obj: op.iocb,
                                res: -i64::from(libc::EIO),
                                res2: 0,
                            });
                        }
                    }
                    0
                }
            };
            for c in &cqes[..n] {
                let slot = c.user_data as usize;
                let Some(op) = r.slots.get_mut(slot).and_then(Option::take) else {
                    continue;
                };
                r.free.push(slot);
                self.ours -= 1;
                if let (Some(iov), true) = (&op.into, c.result > 0) {
                    let at = slot * SLOT_BYTES;
                    // SAFETY: the iovecs the application named for this read.
                    let bufs = unsafe { Bufs::new(iov) };
                    bufs.put(0, &r.ring.buffers()[at..at + c.result as usize]);
                }
                out.push(IoEvent {
                    data: op.data,
                    obj: op.iocb,
                    res: c.result,
                    res2: 0,
                });
            }
        }
    }
}

/// io_submit(2) through libaio: requests on Nacre descriptors go into the context's rings,
/// the others to the kernel, in order; how many were taken (or a negative errno).
pub(crate) unsafe fn submit(ctx: usize, nr: libc::c_long, cbs: *mut *mut Iocb) -> i32 {
    let real_submit = real::io_submit();
    if nr <= 0 || cbs.is_null() {
        return real_submit(ctx, nr, cbs);
    }
    let list = std::slice::from_raw_parts(cbs, nr as usize);
    // Ours, or theirs, for each.
    let mine: Vec<Option<(Arc<File>, Arc<Mount>)>> = list
        .iter()
        .map(|cb| if cb.is_null() { None } else { ours(&**cb) })
        .collect();
    if mine.iter().all(Option::is_none) {
        // Counted from a context's first request on, so a later request of ours knows
        // what the kernel has in flight beside it.
        let r = real_submit(ctx, nr, cbs);
        if r > 0 {
            if let Some(c) = ctx_of(ctx, true) {
                c.lock().kernel += r as usize;
            }
        }
        return r;
    }
    let Some(c) = ctx_of(ctx, true) else {
        return -libc::EINVAL;
    };
    let mut c = c.lock();
    let mut done = 0usize;
    let mut err = 0;
    while done < list.len() {
        match mine[done].clone() {
            Some((file, mount)) => {
                if let Err(e) = c.queue(list[done] as u64, &*list[done], file, mount) {
                    err = e;
                    break;
                }
                done += 1;
            }
            None => {
                let run = mine[done..].iter().take_while(|m| m.is_none()).count();
                let r = real_submit(ctx, run as libc::c_long, cbs.add(done));
                if r < 0 {
                    err = -r;
                    break;
                }
                c.kernel += r as usize;
                done += r as usize;
                if (r as usize) < run {
                    break;
                }
            }
        }
    }
    c.submit();
    if done == 0 && err != 0 {
        return -err;
    }
    done as i32
}

/// io_getevents(2) through libaio: completions of ours and of the kernel's.
pub(crate) unsafe fn getevents(
    ctx: usize,
    min: libc::c_long,
    nr: libc::c_long,
    events: *mut IoEvent,
    timeout: *mut libc::timespec,
) -> i32 {
    let real_get = real::io_getevents();
    let Some(ctx_state) = ctx_of(ctx, false) else {
        return real_get(ctx, min, nr, events, timeout);
    };
    let mut c = ctx_state.lock();
    if nr <= 0 || events.is_null() || min < 0 || min > nr {
        drop(c);
        return real_get(ctx, min, nr, events, timeout);
    }
    let (min, nr) = (min as usize, nr as usize);
    let wait = (!timeout.is_null()).then(|| {
        let t = &*timeout;
        Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    });
    if c.ours == 0 && c.ready.is_empty() {
        // Only the kernel's: its own call, counted — without the lock, so another thread
        // may submit meanwhile (as the kernel lets it).
        drop(c);
        let r = real_get(
            ctx,
            min as libc::c_long,
            nr as libc::c_long,
            events,
            timeout,
        );
        if r > 0 {
            let mut c = ctx_state.lock();
            c.kernel = c.kernel.saturating_sub(r as usize);
        }
        return r;
    }
    let deadline = wait.map(|w| Instant::now() + w);
    let mut out = Vec::with_capacity(nr);
    loop {
        if c.kernel == 0 {
            // Only ours in flight: the rings' own wait.
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            c.reap(&mut out, nr, min, left);
        } else {
            c.reap(&mut out, nr, 0, None);
            let room = nr - out.len();
            if room > 0 {
                let mut zero = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let mut theirs = vec![IoEvent::default(); room];
                let r = real_get(ctx, 0, room as libc::c_long, theirs.as_mut_ptr(), &mut zero);
                if r > 0 {
                    c.kernel = c.kernel.saturating_sub(r as usize);
                    out.extend_from_slice(&theirs[..r as usize]);
                }
            }
            if out.len() < min {
                // Both in flight: a short pause on ours, then the kernel's again.
                let want = min.min(out.len() + 1);
                c.reap(&mut out, nr, want, Some(Duration::from_micros(200)));
            }
        }
        let expired = deadline.is_some_and(|d| Instant::now() >= d);
        if out.len() >= min || expired || (c.ours == 0 && c.kernel == 0 && c.ready.is_empty()) {
            break;
        }
    }
    std::ptr::copy_nonoverlapping(out.as_ptr(), events, out.len());
    out.len() as i32
}

/// io_destroy(2): this library's part of the context goes (waiting for its requests).
pub(crate) unsafe fn destroy(ctx: usize) -> i32 {
    let gone = CTXS.lock().as_mut().and_then(|m| m.remove(&ctx));
    if let Some(c) = gone {
        let mut c = c.lock();
        let mut sink = Vec::new();
        while c.ours > 0 {
            sink.clear();
            let n = c.ours;
            c.reap(&mut sink, n, n, Some(Duration::from_secs(1)));
            if sink.is_empty() {
                break;
            }
        }
        let _in = crate::Inside::enter();
        c.rings.clear();
    }
    real::io_destroy()(ctx)
}
