//! Rings: the fast data path (nacre_wire::ring; docs/api.md). A ring's memory — its
//! submission and completion entries and its buffers — is a memfd this process makes and
//! hands to the node's client once; then requests are entries written into it, many in
//! flight from one thread, a batch published with one store (and one system call only if
//! the node's client sleeps), completions taken from it the same way.
//!
//! A ring is used by one thread at a time (`&mut self`); make one per thread. The buffers
//! a request names must not be touched until its completion.

use crate::{errno, File, Node, Result};
use nacre_wire::api::{ApiReply, ApiRequest};
use nacre_wire::ring::{
    buffers_offset, check_sizes, cq_offset, ring_bytes, Cqe, Poller, RingHeader, Sqe,
    RING_OP_FSYNC, RING_OP_READ, RING_OP_WRITE, RING_SQ_OFFSET,
};
use rustix::fd::OwnedFd;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

pub use nacre_wire::ring::Cqe as Completion;

/// A ring of a [`Node`].
pub struct Ring {
    node: Node,
    id: u64,
    /// The process that set it up (a child after fork must not use or close it).
    pid: u32,
    ptr: *mut u8,
    len: usize,
    entries: u32,
    buffer_bytes: u64,
    sq_event: OwnedFd,
    cq_event: OwnedFd,
    /// Submissions written (published up to `published`).
    sq_tail: u32,
    published: u32,
    /// Completions taken.
    cq_head: u32,
    /// Submitted and not yet completed.
    in_flight: u32,
    /// How long a wait polls before it sleeps (learnt from the waits).
    poller: Poller,
}

// SAFETY: the mapping is owned by the ring and used through `&mut self`.
unsafe impl Send for Ring {}

fn io_err(op: &'static str) -> impl Fn(rustix::io::Errno) -> crate::Error {
    move |e| errno(op, e.raw_os_error())
}

impl Node {
    /// A ring of `entries` (a power of two, at most 4,096) with `buffer_bytes` of buffers,
    /// set up with the node's client.
    pub fn ring(&self, entries: u32, buffer_bytes: u64) -> Result<Ring> {
        check_sizes(entries, buffer_bytes).map_err(|_| errno("ring", libc::EINVAL))?;
        let len = usize::try_from(ring_bytes(entries, buffer_bytes))
            .map_err(|_| errno("ring", libc::EINVAL))?;
        let mem = rustix::fs::memfd_create(
            "nacre-ring",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )
        .map_err(io_err("ring"))?;
        rustix::fs::ftruncate(&mem, len as u64).map_err(io_err("ring"))?;
        // The node's client maps it: a file that could shrink under its mapping would fault
        // it (SIGBUS). Sealed, it cannot; the node's client refuses one that is not.
        rustix::fs::fcntl_add_seals(&mem, rustix::fs::SealFlags::SHRINK).map_err(io_err("ring"))?;
        // SAFETY: a fresh shared mapping of the whole new file.
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
        .map_err(io_err("ring"))?;
        let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
        let unmap = |e| {
            // SAFETY: the mapping made above, not used after.
            let _ = unsafe { rustix::mm::munmap(ptr, len) };
            e
        };
        let sq_event = rustix::event::eventfd(0, flags)
            .map_err(io_err("ring"))
            .map_err(unmap)?;
        let cq_event = rustix::event::eventfd(0, flags)
            .map_err(io_err("ring"))
            .map_err(unmap)?;
        let id = self
            .ring_setup(entries, buffer_bytes, [&mem, &sq_event, &cq_event])
            .map_err(unmap)?;
        Ok(Ring {
            node: self.clone(),
            id,
            pid: std::process::id(),
            ptr: ptr.cast(),
            len,
            entries,
            buffer_bytes,
            sq_event,
            cq_event,
            sq_tail: 0,
            published: 0,
            cq_head: 0,
            in_flight: 0,
            poller: Poller::default(),
        })
    }
}

impl Ring {
    fn header(&self) -> &RingHeader {
        // SAFETY: the mapping starts with the header.
        unsafe { &*(self.ptr as *const RingHeader) }
    }

    /// Entries of the ring: the most requests in flight at once.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Requests submitted and not yet completed.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The ring's buffers (registered with the node's client once, at setup).
    pub fn buffers(&mut self) -> &mut [u8] {
        let at = buffers_offset(self.entries);
        // SAFETY: the buffers lie within the mapping, borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), self.buffer_bytes as usize) }
    }

    /// The buffers' address (for bindings that hand them out as memory of their own).
    pub fn buffers_ptr(&self) -> *mut u8 {
        // SAFETY: within the mapping.
        unsafe { self.ptr.add(buffers_offset(self.entries)) }
    }

    /// Queues a request (published by [`Ring::submit`]); `EBUSY` when the ring is full.
    pub fn prep(&mut self, sqe: Sqe) -> Result<()> {
        let queued = self.sq_tail.wrapping_sub(self.published);
        if self.in_flight + queued >= self.entries {
            return Err(errno("ring", libc::EBUSY));
        }
        let moves = matches!(sqe.op, RING_OP_READ | RING_OP_WRITE);
        if moves && !nacre_wire::ring::within(sqe.buf_offset, sqe.len, self.buffer_bytes) {
            return Err(errno("ring", libc::EFAULT));
        }
        let at = RING_SQ_OFFSET
            + (self.sq_tail & (self.entries - 1)) as usize * std::mem::size_of::<Sqe>();
        // SAFETY: within the mapping's submission entries.
        unsafe { std::ptr::write_volatile(self.ptr.add(at) as *mut Sqe, sqe) };
        self.sq_tail = self.sq_tail.wrapping_add(1);
        Ok(())
    }

    /// Queues a read of `len` bytes of `file` at `offset` into the buffers at `buf_offset`.
    pub fn prep_read(
        &mut self,
        file: &File,
        offset: u64,
        buf_offset: u64,
        len: u32,
        user_data: u64,
    ) -> Result<()> {
        self.prep_io(RING_OP_READ, file, offset, buf_offset, len, user_data)
    }

    /// Queues a write of `len` bytes from the buffers at `buf_offset` to `file` at `offset`.
    pub fn prep_write(
        &mut self,
        file: &File,
        offset: u64,
        buf_offset: u64,
        len: u32,
        user_data: u64,
    ) -> Result<()> {
        self.prep_io(RING_OP_WRITE, file, offset, buf_offset, len, user_data)
    }

    fn prep_io(
        &mut self,
        op: u8,
        file: &File,
        offset: u64,
        buf_offset: u64,
        len: u32,
        user_data: u64,
    ) -> Result<()> {
        self.prep(Sqe {
            op,
            len,
            user_data,
            handle: file.handle()?,
            offset,
            buf_offset,
            ..Sqe::default()
        })
    }

    /// Queues an fsync of `file`.
    pub fn prep_fsync(&mut self, file: &File, user_data: u64) -> Result<()> {
        self.prep(Sqe {
            op: RING_OP_FSYNC,
            user_data,
            handle: file.handle()?,
            ..Sqe::default()
        })
    }

    /// Publishes the queued requests (one store; a system call only if the node's client
    /// sleeps): how many.
    pub fn submit(&mut self) -> usize {
        let n = self.sq_tail.wrapping_sub(self.published);
        if n == 0 {
            return 0;
        }
        let h = self.header();
        h.sq_tail.v.store(self.sq_tail, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if h.server_sleeping.v.load(Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.sq_event, &1u64.to_ne_bytes());
        }
        self.published = self.sq_tail;
        self.in_flight += n;
        n as usize
    }

    /// Takes the completions there are into `out` (appended), waiting until there are at
    /// least `min` (fewer if fewer are in flight) or `timeout` passes: how many.
    pub fn wait(
        &mut self,
        min: usize,
        out: &mut Vec<Completion>,
        timeout: Option<Duration>,
    ) -> Result<usize> {
        self.wait_with(min, usize::MAX, timeout, |c| out.push(c))
    }

    /// [`Ring::wait`] into `out`, taking at most `out.len()` completions.
    pub fn wait_into(
        &mut self,
        min: usize,
        out: &mut [Completion],
        timeout: Option<Duration>,
    ) -> Result<usize> {
        let mut i = 0;
        self.wait_with(min.min(out.len()), out.len(), timeout, |c| {
            out[i] = c;
            i += 1;
        })
    }

    fn wait_with(
        &mut self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
        mut put: impl FnMut(Completion),
    ) -> Result<usize> {
        let min = min.min(self.in_flight as usize);
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut got = self.take(max, &mut put);
        if got >= min {
            return Ok(got);
        }
        let start = Instant::now();
        while got < min {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            self.sleep(start, deadline)?;
            got += self.take(max - got, &mut put);
        }
        self.poller.learn(start.elapsed());
        Ok(got)
    }

    /// Takes up to `max` of the published completions.
    fn take(&mut self, max: usize, put: &mut impl FnMut(Completion)) -> usize {
        let tail = self.header().cq_tail.v.load(Ordering::Acquire);
        let n = tail
            .wrapping_sub(self.cq_head)
            .min(self.in_flight)
            .min(u32::try_from(max).unwrap_or(u32::MAX));
        for _ in 0..n {
            let at = cq_offset(self.entries)
                + (self.cq_head & (self.entries - 1)) as usize * std::mem::size_of::<Cqe>();
            // SAFETY: within the mapping's completion entries.
            put(unsafe { std::ptr::read_volatile(self.ptr.add(at) as *const Cqe) });
            self.cq_head = self.cq_head.wrapping_add(1);
        }
        if n > 0 {
            self.header()
                .cq_head
                .v
                .store(self.cq_head, Ordering::Release);
            self.in_flight -= n;
        }
        n as usize
    }

    /// Waits for a completion to be published: polls as long as the poller says (as long
    /// as waits have lately been that short) from `start`, then sleeps on the eventfd
    /// (written by the node's client only when it sees `app_sleeping`).
    fn sleep(&self, start: Instant, deadline: Option<Instant>) -> Result<()> {
        let h = self.header();
        let spin_until = start + self.poller.budget();
        while Instant::now() < spin_until {
            if h.cq_tail.v.load(Ordering::Acquire) != self.cq_head {
                return Ok(());
            }
            std::thread::yield_now();
        }
        h.app_sleeping.v.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if h.cq_tail.v.load(Ordering::SeqCst) == self.cq_head {
            let wait = deadline
                .map(|d| d.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_millis(500))
                .min(Duration::from_millis(500));
            let timeout = rustix::event::Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            let mut fds = [rustix::event::PollFd::new(
                &self.cq_event,
                rustix::event::PollFlags::IN,
            )];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(n) if n > 0 => {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&self.cq_event, &mut b);
                }
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    h.app_sleeping.v.store(0, Ordering::SeqCst);
                    return Err(errno("ring", e.raw_os_error()));
                }
            }
        }
        h.app_sleeping.v.store(0, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Requests in flight finish into memory the node's client still maps; it lets go
        // of the ring once they have. A child after fork lets go of its copy only.
        if self.pid == std::process::id() {
            let _ = self.node.done(ApiRequest::RingClose { id: self.id });
        }
        // SAFETY: the mapping made in `Node::ring`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// The reply a ring setup ends with.
pub(crate) fn ring_id(reply: ApiReply) -> Result<u64> {
    match reply {
        ApiReply::Ring { id } => Ok(id),
        _ => Err(errno("ring", libc::EPROTO)),
    }
}
