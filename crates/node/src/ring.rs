//! The node's side of a ring (nacre_wire::ring; docs/api.md): the application's memfd
//! mapped here, one thread taking submissions (sleeping on the application's eventfd only
//! when there are none), and workers running them on the client — reads land in the
//! ring's buffers, writes leave from them — and publishing completions (waking the
//! application only when it sleeps). A ring lives as long as its session.

use crate::{ops, Session, Shared};
use nacre_client::ClientError;
use nacre_types::AlignedBuf;
use nacre_wire::ring::{
    buffers_offset, cq_offset, within, Cqe, Poller, RingHeader, Sqe, RING_OP_FSYNC, RING_OP_READ,
    RING_OP_WRITE, RING_SQ_OFFSET,
};
use parking_lot::Mutex;
use rustix::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// True when `fd` is a file of shared memory (tmpfs: what `memfd_create` without
/// `MFD_HUGETLB` makes).
// `f_type`'s type differs between targets (and libc's constant with it).
#[allow(clippy::unnecessary_cast)]
fn is_tmpfs(fd: &OwnedFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type as i64 == libc::TMPFS_MAGIC as i64)
}

/// Rings one session may have.
pub const RINGS_PER_SESSION_MAX: usize = 64;
/// Rings a mount serves at once, all sessions together (each has up to
/// [`RING_WORKERS_MAX`] + 1 threads).
pub const RINGS_MAX: usize = 256;
/// Longest pause between looks for room in a full completion ring (an application that
/// stopped taking completions costs a worker a wake-up per this, not a spin).
const CQ_WAIT_MS_MAX: u64 = 10;
/// Workers running a ring's requests at once (its entries, at most this).
pub const RING_WORKERS_MAX: usize = 32;
/// How often a sleeping taker looks whether its session ended.
const SLEEP_MS: i32 = 500;

/// Reads the taker started itself and has not finished yet, at most (more go to the
/// workers).
const STARTED_MAX: usize = 64;

/// Largest read the taker starts itself: a larger one's copy into the ring (and its
/// checksum) is work better spread over the workers.
const STARTED_BYTES_MAX: u32 = 128 << 10;

/// A read the taker started: its RPCs in flight, no thread waiting for them.
struct Started {
    sqe: Sqe,
    handle: Arc<ops::Handle>,
    job: nacre_client::osc::ReadJob,
    lease: Option<Arc<Lease>>,
}

/// A region of the ring's buffers lent to the network layer for a read's reply to land in
/// with no copy. Every buffer over the region holds a clone; the entry completes only once
/// the lease is the ring's alone again (a reply the network thread was still filling when
/// its request timed out must not write into memory the application has been given back).
/// It keeps the mapping alive while lent.
struct Lease {
    _ring: Arc<Ring>,
}

/// How often a completion waiting for its lease looks again.
const LEASE_WAIT_MS: u64 = 1;
/// A lease still held this long is said in the log (the wait itself ends when the network
/// thread drops its buffer: when the reply completes, or at the latest when the client's
/// frame deadline, 120 s, closes the connection).
const LEASE_WARN_MS: u64 = 10_000;

/// A memfd mapped shared.
struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory shared with the application; every access goes
// through atomics or copies of whole entries, made from any thread.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Ring::start`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// A ring of a session.
pub(crate) struct Ring {
    map: Map,
    entries: u32,
    buffer_bytes: u64,
    sq_event: OwnedFd,
    cq_event: OwnedFd,
    /// The completions' tail (this side's own count, published to the header).
    cq: Mutex<u32>,
    /// Entries handed to the workers and not completed yet.
    busy: AtomicU32,
    stop: AtomicBool,
}

impl Ring {
    fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is at least a page and starts with the header.
        unsafe { &*(self.map.ptr as *const RingHeader) }
    }

    /// Maps the application's memfd `mem` as a ring of `entries` and `buffer_bytes`
    /// (checked against the file's size) and starts serving it for session `s`.
    pub(crate) fn start(
        shared: &Arc<Shared>,
        s: &Arc<Session>,
        entries: u32,
        buffer_bytes: u64,
        fds: [OwnedFd; 3],
    ) -> Result<Arc<Ring>, ClientError> {
        let [mem, sq_event, cq_event] = fds;
        let inval = || ClientError::from(nacre_types::Status::Inval);
        let len = usize::try_from(nacre_wire::ring::ring_bytes(entries, buffer_bytes))
            .map_err(|_| inval())?;
        // A memfd the application could still shrink would fault this process (SIGBUS)
        // under the mapping: only one sealed against shrinking is taken.
        let sealed = rustix::fs::fcntl_get_seals(&mem)
            .is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK));
        let st = rustix::fs::fstat(&mem).map_err(|_| inval())?;
        if !sealed || (st.st_size as u64) < len as u64 {
            return Err(inval());
        }
        // Only ordinary shared memory (a memfd is tmpfs): a hugetlbfs memfd, sealed or not,
        // can have holes punched that fault again only while the system has huge pages to
        // spare, and SIGBUS this process when it has none.
        if !is_tmpfs(&mem) {
            shared.stats.rings_refused.fetch_add(1, Ordering::Relaxed);
            let pid = s.pid;
            nacre_net::caller::refused(|| {
                format!(
                    "node API: pid {pid}: a ring's memory that is not a plain memfd \
                     (hugetlbfs, or not shared memory) refused"
                )
            });
            return Err(inval());
        }
        // SAFETY: a fresh shared mapping of the memfd's first `len` bytes (the file is at
        // least that long, checked above); the application may change it at any time, so
        // nothing in it is trusted.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &mem,
                0,
            )
        }
        .map_err(|_| inval())?;
        let ring = Arc::new(Ring {
            map: Map {
                ptr: ptr.cast(),
                len,
            },
            entries,
            buffer_bytes,
            sq_event,
            cq_event,
            cq: Mutex::new(0),
            busy: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        });
        // The application's counters as they are now (fresh rings start at zero).
        *ring.cq.lock() = ring.header().cq_tail.v.load(Ordering::Acquire);
        let workers = (entries as usize).clamp(1, RING_WORKERS_MAX);
        let (tx, rx) = crossbeam_channel::bounded::<Sqe>(entries as usize);
        for _ in 0..workers {
            let (r, sh, ses, rx) = (ring.clone(), shared.clone(), s.clone(), rx.clone());
            std::thread::Builder::new()
                .name("api-ring-io".into())
                .spawn(move || {
                    nacre_types::cred::set_current(Some(ses.cred.clone()));
                    nacre_types::jobid::set_current(&ses.jobid);
                    for sqe in rx {
                        let result = Ring::run(&r, &sh, &ses, &sqe, false);
                        r.complete(Cqe {
                            user_data: sqe.user_data,
                            result,
                        });
                        r.busy.fetch_sub(1, Ordering::AcqRel);
                    }
                })
                .map_err(|_| ClientError::from(nacre_types::Status::Again))?;
        }
        let (r, sh, ses) = (ring.clone(), shared.clone(), s.clone());
        std::thread::Builder::new()
            .name("api-ring".into())
            .spawn(move || {
                nacre_types::cred::set_current(Some(ses.cred.clone()));
                nacre_types::jobid::set_current(&ses.jobid);
                Ring::take(&r, &sh, &ses, &tx)
            })
            .map_err(|_| ClientError::from(nacre_types::Status::Again))?;
        Ok(ring)
    }

    /// Stops the ring (its session ended): the taker wakes and ends, the workers end.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = rustix::io::write(&self.sq_event, &1u64.to_ne_bytes());
    }

    /// Takes submissions as they are published. One alone while nothing else is in flight
    /// (a caller at queue depth 1) it runs itself: a wake-up less per request. Reads among
    /// several it starts itself — their RPCs go out at once and need no thread while in
    /// flight — and finishes one at a time between looks for more, so the ring keeps as
    /// many in flight as the application gives; writes and fsyncs go to the workers.
    fn take(
        self: &Arc<Self>,
        shared: &Shared,
        s: &Session,
        workers: &crossbeam_channel::Sender<Sqe>,
    ) {
        let h = self.header();
        let mask = self.entries - 1;
        let mut head = h.sq_head.v.load(Ordering::Acquire);
        let mut poller = Poller::default();
        let mut started = std::collections::VecDeque::new();
        while !self.stop.load(Ordering::Relaxed) {
            let tail = h.sq_tail.v.load(Ordering::Acquire);
            if tail == head {
                match started.pop_front() {
                    Some(st) => self.finish_started(shared, st),
                    None => self.idle(head, &mut poller),
                }
                continue;
            }
            // A tail more than a ring ahead is the application's bug: take a ring's worth.
            let n = tail.wrapping_sub(head).min(self.entries);
            let inline = n == 1 && self.busy.load(Ordering::Acquire) == 0 && started.is_empty();
            for _ in 0..n {
                let at = RING_SQ_OFFSET + (head & mask) as usize * std::mem::size_of::<Sqe>();
                // SAFETY: `at` is within the mapping (entries checked at setup); the entry
                // is copied out whole, then checked before use.
                let sqe = unsafe { std::ptr::read_volatile(self.map.ptr.add(at) as *const Sqe) };
                head = head.wrapping_add(1);
                if inline {
                    h.sq_head.v.store(head, Ordering::Release);
                    let result = self.run(shared, s, &sqe, true);
                    self.complete(Cqe {
                        user_data: sqe.user_data,
                        result,
                    });
                    continue;
                }
                if sqe.op == RING_OP_READ
                    && sqe.len <= STARTED_BYTES_MAX
                    && started.len() < STARTED_MAX
                {
                    match self.start_read(shared, s, sqe) {
                        Ok(st) => started.push_back(st),
                        Err(result) => self.complete(Cqe {
                            user_data: sqe.user_data,
                            result,
                        }),
                    }
                    continue;
                }
                self.busy.fetch_add(1, Ordering::AcqRel);
                if workers.send(sqe).is_err() {
                    return;
                }
            }
            h.sq_head.v.store(head, Ordering::Release);
            if let Some(st) = started.pop_front() {
                self.finish_started(shared, st);
            }
        }
        // Stopping: what was started lands in the mapping before it goes.
        while let Some(st) = started.pop_front() {
            self.finish_started(shared, st);
        }
    }

    /// Starts the read `sqe` asks for; its negative errno when it cannot be.
    fn start_read(
        self: &Arc<Self>,
        shared: &Shared,
        s: &Session,
        sqe: Sqe,
    ) -> Result<Started, i64> {
        let handle = s
            .handles
            .lock()
            .get(&sqe.handle)
            .cloned()
            .ok_or(-i64::from(libc::EBADF))?;
        if !within(sqe.buf_offset, sqe.len, self.buffer_bytes) {
            return Err(-i64::from(libc::EFAULT));
        }
        let (into, lease) = self.lend(&sqe);
        match ops::start_read(shared, &handle, sqe.offset, sqe.len, into) {
            Ok(job) => Ok(Started {
                sqe,
                handle,
                job,
                lease,
            }),
            Err(e) => {
                wait_lease(lease);
                Err(-i64::from(e.errno()))
            }
        }
    }

    /// The region of the buffers `sqe` names, lent as a buffer a reply may land in: when it
    /// starts on a page (as a buffer the network layer fills must).
    fn lend(self: &Arc<Self>, sqe: &Sqe) -> (Option<AlignedBuf>, Option<Arc<Lease>>) {
        let at = buffers_offset(self.entries) + sqe.buf_offset as usize;
        if sqe.len == 0 || !at.is_multiple_of(nacre_types::limits::DIRECT_IO_ALIGN_BYTES) {
            return (None, None);
        }
        let lease = Arc::new(Lease {
            _ring: self.clone(),
        });
        let keep: Arc<dyn std::any::Any + Send + Sync> = lease.clone();
        let ptr = std::ptr::NonNull::new(self.buffer(sqe.buf_offset, sqe.len))
            .expect("a mapping is not at address 0");
        // SAFETY: `len` bytes of the mapping at a page boundary (checked by the caller with
        // `within`), kept mapped by the lease; the application must not touch them until
        // the completion, which waits for every buffer over them to be dropped.
        let buf = unsafe { AlignedBuf::external(ptr, sqe.len as usize, keep) };
        (Some(buf), Some(lease))
    }

    /// Puts a read's `data` in the ring's buffers for `sqe` (unless it landed there
    /// already): the bytes, or a negative errno.
    fn land(&self, shared: &Shared, sqe: &Sqe, data: Result<AlignedBuf, ClientError>) -> i64 {
        match data {
            Ok(data) => {
                let n = data.len().min(sqe.len as usize);
                let dest = self.buffer(sqe.buf_offset, sqe.len);
                if std::ptr::eq(data.as_ptr(), dest) {
                    shared
                        .stats
                        .landed_bytes
                        .fetch_add(n as u64, Ordering::Relaxed);
                } else {
                    // SAFETY: `len` bytes at the checked offset of the mapping; `n` ≤ `len`;
                    // `data` is another buffer (not over this region).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dest, n) };
                }
                n as i64
            }
            Err(e) => -i64::from(e.errno()),
        }
    }

    /// Waits for a started read, puts its data in the ring's buffers and completes it.
    fn finish_started(&self, shared: &Shared, st: Started) {
        let result = self.land(
            shared,
            &st.sqe,
            ops::finish_read(shared, &st.handle, st.job),
        );
        wait_lease(st.lease);
        self.complete(Cqe {
            user_data: st.sqe.user_data,
            result,
        });
    }

    /// Nothing submitted: polls as long as `poller` says (as long as submissions have
    /// lately been coming that soon), then sleeps on the eventfd (the application writes
    /// it only when it sees `server_sleeping`).
    fn idle(&self, head: u32, poller: &mut Poller) {
        let h = self.header();
        let start = std::time::Instant::now();
        let spin_until = start + poller.budget();
        while std::time::Instant::now() < spin_until {
            if h.sq_tail.v.load(Ordering::Acquire) != head {
                poller.learn(start.elapsed());
                return;
            }
            std::thread::yield_now();
        }
        let _learn = Learn(poller, start);
        h.server_sleeping.v.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if h.sq_tail.v.load(Ordering::SeqCst) == head && !self.stop.load(Ordering::Relaxed) {
            let mut fds = [rustix::event::PollFd::new(
                &self.sq_event,
                rustix::event::PollFlags::IN,
            )];
            let timeout = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(SLEEP_MS) * 1_000_000,
            };
            if rustix::event::poll(&mut fds, Some(&timeout)).unwrap_or(0) > 0 {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(self.sq_event.as_fd(), &mut b);
            }
        }
        h.server_sleeping.v.store(0, Ordering::SeqCst);
    }

    /// The ring's buffers at `offset`, `len` bytes (checked by the caller).
    fn buffer(&self, offset: u64, len: u32) -> *mut u8 {
        let at = buffers_offset(self.entries) + offset as usize;
        debug_assert!(at + len as usize <= self.map.len);
        // SAFETY: within the mapping (`within` checked against the setup's sizes).
        unsafe { self.map.ptr.add(at) }
    }

    /// Runs one submission: bytes moved, or a negative errno. `alone`: no other request
    /// of the ring is in flight (the client may read ahead of a sequential reader).
    fn run(self: &Arc<Self>, shared: &Shared, s: &Session, sqe: &Sqe, alone: bool) -> i64 {
        let errno = |e: ClientError| -i64::from(e.errno());
        let Some(h) = s.handles.lock().get(&sqe.handle).cloned() else {
            return -i64::from(libc::EBADF);
        };
        let moves = matches!(sqe.op, RING_OP_READ | RING_OP_WRITE);
        if moves && !within(sqe.buf_offset, sqe.len, self.buffer_bytes) {
            return -i64::from(libc::EFAULT);
        }
        match sqe.op {
            // Alone: with the client's read-ahead for a sequential reader (into its own
            // buffers). Among others: received straight into the ring where it can be.
            RING_OP_READ if alone => self.land(
                shared,
                sqe,
                ops::ring_read(shared, &h, sqe.offset, sqe.len, true),
            ),
            RING_OP_READ => {
                let (into, lease) = self.lend(sqe);
                let data = ops::start_read(shared, &h, sqe.offset, sqe.len, into)
                    .and_then(|job| ops::finish_read(shared, &h, job));
                let result = self.land(shared, sqe, data);
                wait_lease(lease);
                result
            }
            RING_OP_WRITE => {
                // SAFETY: `len` bytes at the checked offset of the mapping, which the
                // application must leave alone until the completion (as with io_uring).
                let data = unsafe {
                    std::slice::from_raw_parts(
                        self.buffer(sqe.buf_offset, sqe.len),
                        sqe.len as usize,
                    )
                };
                let (buf, lease) = self.lend(sqe);
                let result = match ops::ring_write(shared, &h, sqe.offset, data, buf) {
                    Ok(n) => n as i64,
                    Err(e) => errno(e),
                };
                wait_lease(lease);
                result
            }
            RING_OP_FSYNC => match shared.client.fsync(&h.file) {
                Ok(()) => 0,
                Err(e) => errno(e),
            },
            _ => -i64::from(libc::EINVAL),
        }
    }

    /// Publishes a completion; wakes the application if it sleeps.
    fn complete(&self, cqe: Cqe) {
        let h = self.header();
        let mut tail = self.cq.lock();
        // The application takes completions as it wants them; it never has more in flight
        // than the ring holds, so room comes (unless it stopped: then the ring stops too).
        let mut pause = Duration::from_micros(50);
        while tail.wrapping_sub(h.cq_head.v.load(Ordering::Acquire)) >= self.entries {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(CQ_WAIT_MS_MAX));
        }
        let at = cq_offset(self.entries)
            + (*tail & (self.entries - 1)) as usize * std::mem::size_of::<Cqe>();
        // SAFETY: within the mapping's completion entries.
        unsafe { std::ptr::write_volatile(self.map.ptr.add(at) as *mut Cqe, cqe) };
        *tail = tail.wrapping_add(1);
        h.cq_tail.v.store(*tail, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if h.app_sleeping.v.load(Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.cq_event, &1u64.to_ne_bytes());
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Tells a poller how long a wait took, when the wait ends.
struct Learn<'a>(&'a mut Poller, std::time::Instant);

impl Drop for Learn<'_> {
    fn drop(&mut self) {
        self.0.learn(self.1.elapsed());
    }
}

/// Waits until a lent region is the ring's alone again (at once, unless a network thread
/// still holds a buffer over it for a reply that came too late).
fn wait_lease(lease: Option<Arc<Lease>>) {
    let Some(lease) = lease else { return };
    let start = std::time::Instant::now();
    let mut warned = false;
    while Arc::strong_count(&lease) > 1 {
        if !warned && start.elapsed() >= Duration::from_millis(LEASE_WARN_MS) {
            tracing::warn!(
                "node API: a ring entry waits for a late reply still landing in its buffer"
            );
            warned = true;
        }
        std::thread::sleep(Duration::from_millis(LEASE_WAIT_MS));
    }
}
