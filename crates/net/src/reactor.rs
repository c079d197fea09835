//! Event-driven connection service: a bounded set of network threads, each watching many
//! connections with epoll, as Lustre's socklnd schedulers do, so threads do not grow with
//! connections (a server that every client of a machine connects to keeps the same threads).
//!
//! Each network thread reads whatever its ready connections have sent, without blocking
//! (level-triggered epoll, `recv(MSG_DONTWAIT)`, at most [`READ_BYTES_PER_TURN`] per
//! connection per turn so one busy peer cannot starve the others), parses frames
//! incrementally and hands each complete frame to the connection's [`FrameSink`]: a server's
//! sink routes requests to service pools; a sink may as well take requests a server sends to
//! a client (lock callbacks), which is why the loop is symmetric.
//!
//! Limits ([`NetLimits`], docs/hardening.md): a cap on open connections (past it, refused and
//! logged with the peer); a deadline for a frame that has started to arrive (a slow or stalled
//! sender is dropped; idle connections and parked long polls are not, since they have no
//! frame in progress); a per-server budget of bytes for frames being received, taken when a
//! header announces its lengths, before anything is allocated (a connection whose frame does
//! not fit waits, unread, in the queue of the budget instead of allocating 16 MiB per header);
//! replies written with a send timeout (`SO_SNDTIMEO`) so a peer that stops reading cannot hold
//! a service thread. What is dropped is counted in [`NetStats`].

use crate::frame::RawFrame;
use crate::limits::Budget;
pub use crate::limits::{
    BudgetPermit, NetLimits, NetStats, BULK_BUDGET_BYTES_DEFAULT, CONNS_MAX_DEFAULT,
    FRAME_TIMEOUT_MS_DEFAULT, REPLY_TIMEOUT_MS_DEFAULT,
};
use crate::sec::session::{trailer_len, Opener, TRAILER_BYTES_MAX};
use crate::sec::Level;
use nacre_types::AlignedBuf;
use nacre_wire::{Header, HEADER_BYTES};
use parking_lot::Mutex;
use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};
use rustix::net::RecvFlags;
use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes one connection may read in one turn of its network thread before the others get
/// theirs.
pub const READ_BYTES_PER_TURN: usize = 1 << 20;
/// Size of a connection's staging buffer for headers and bodies (bulk data is received
/// straight into its aligned buffer). Held only while a frame is in progress.
pub const STAGING_BYTES: usize = 32 * 1024;
/// Token of a network thread's wake-up eventfd.
const WAKE: u64 = u64::MAX;

/// Where a connection's complete frames go. Called on the network thread: it must not block
/// for long (a server's sink queues requests for service threads).
pub trait FrameSink: Send {
    /// A complete frame, checksums verified, with the budget its bytes hold; `Err` (why)
    /// drops the connection.
    fn frame(&mut self, frame: RawFrame, permit: Option<BudgetPermit>) -> Result<(), String>;
    /// The connection ended (`cause` for the log).
    fn closed(&mut self, cause: &str);
    /// Where the bulk of the frame `header` starts should land: a buffer the sink holds for
    /// it (the memory a caller registered for a reply's data, filled with no copy), or
    /// `None` for a fresh one.
    fn bulk_into(&mut self, _header: &Header) -> Option<AlignedBuf> {
        None
    }
}

/// A connection handed to the network threads.
pub(crate) struct NewConn {
    pub stream: TcpStream,
    pub peer: String,
    pub bulk_len_max: u32,
    pub sink: Box<dyn FrameSink>,
    /// Checks the frames of a connection its handshake protects (None: not protected).
    pub opener: Option<Opener>,
}

/// What a connection's current frame has got so far.
enum Parse {
    /// Header bytes in `staging` (maybe none).
    Header,
    /// Header read; waiting for budget for its lengths.
    Budget(Header),
    /// Body bytes coming (into `body`), then bulk.
    Body {
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
    },
    /// Bulk bytes coming straight into `bulk` (with the frame's tags, if protected).
    Bulk {
        header: Header,
        body: Vec<u8>,
        bulk: AlignedBuf,
        got: usize,
        permit: Option<BudgetPermit>,
        tags: Option<Tags>,
    },
    /// The tags after the body, before the bulk (a protected connection's).
    Trailer {
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
        trailer: [u8; TRAILER_BYTES_MAX],
        got: usize,
    },
}

/// A protected frame's tags, read before its bulk.
struct Tags {
    bytes: [u8; TRAILER_BYTES_MAX],
    len: usize,
}

struct Conn {
    token: u64,
    stream: TcpStream,
    peer: String,
    bulk_len_max: u32,
    sink: Box<dyn FrameSink>,
    opener: Option<Opener>,
    /// Bytes received and not yet parsed: `staging[start..end]`.
    staging: Vec<u8>,
    start: usize,
    end: usize,
    parse: Parse,
    /// When the frame in progress got its first byte.
    frame_started: Option<Instant>,
    /// Read interest switched off while waiting for the budget.
    paused: bool,
    /// The last receive of this turn got less than it asked for: the socket is (almost
    /// certainly) empty, so asking again would only return EAGAIN. Readiness says when
    /// there is more (level-triggered), saving a system call per small request.
    drained: bool,
}

/// Why a connection ends.
enum End {
    Closed,
    Bad(String),
    /// A frame failed its integrity or privacy check.
    Unauthentic(String),
}

/// Checks a received frame's bulk against its header. A request's bulk (a write's data)
/// keeps the checksum of each of its 4 KiB chunks, which an OST stores without computing
/// them again; a reply's is checked whole, as nothing keeps them.
fn check_bulk(header: &Header, bulk: &mut AlignedBuf) -> Result<(), End> {
    let bad = |e: nacre_wire::WireError| End::Bad(e.to_string());
    if header.is_reply() {
        return header.check_bulk(bulk).map_err(bad);
    }
    if let Some(sums) = header.check_bulk_chunked(bulk).map_err(bad)? {
        bulk.set_chunk_crc32cs(sums.into());
    }
    Ok(())
}

impl Conn {
    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Receives into the staging buffer; Ok(false) when nothing more is there now.
    fn fill(&mut self) -> Result<bool, End> {
        if self.staging.is_empty() {
            self.staging = vec![0; STAGING_BYTES];
        }
        if self.start > 0 && self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.end == self.staging.len() {
            self.staging.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let mut staging = std::mem::take(&mut self.staging);
        let got = self.receive(&mut staging[self.end..]);
        self.staging = staging;
        match got? {
            Some(n) => {
                self.end += n;
                self.frame_started.get_or_insert_with(Instant::now);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One receive into `dst` without waiting: `Some(bytes)`, or `None` when nothing is
    /// there now (or the last receive of this turn already drained the socket).
    fn receive(&mut self, dst: &mut [u8]) -> Result<Option<usize>, End> {
        if self.drained {
            return Ok(None);
        }
        match rustix::net::recv(&self.stream, &mut *dst, RecvFlags::DONTWAIT) {
            Ok((0, _)) => Err(End::Closed),
            Ok((n, _)) => {
                self.drained = n < dst.len();
                Ok(Some(n))
            }
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => Ok(None),
            Err(e) => Err(End::Bad(format!("receive failed: {e}"))),
        }
    }

    /// Moves up to `dst.len()` staged bytes into `dst`; returns how many.
    fn take(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.buffered());
        dst[..n].copy_from_slice(&self.staging[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// Parses and receives as far as possible this turn. Ok(true): more may be there.
    fn advance(&mut self, budget: &Arc<Budget>, stats: &NetStats) -> Result<bool, End> {
        let mut read = 0usize;
        self.drained = false;
        loop {
            if read >= READ_BYTES_PER_TURN {
                return Ok(true);
            }
            let parse = std::mem::replace(&mut self.parse, Parse::Header);
            match parse {
                Parse::Header => {
                    if self.buffered() < HEADER_BYTES {
                        self.parse = Parse::Header;
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    let mut head = [0u8; HEADER_BYTES];
                    self.take(&mut head);
                    let header = Header::decode(&head, self.bulk_len_max)
                        .map_err(|e| End::Bad(e.to_string()))?;
                    self.parse = Parse::Budget(header);
                }
                Parse::Budget(header) => {
                    let bytes = u64::from(header.body_len) + u64::from(header.bulk_len);
                    let permit = match bytes {
                        0 => None,
                        n => match budget.try_take(n) {
                            Some(p) => Some(p),
                            None => {
                                if !self.paused {
                                    stats.budget_waits.fetch_add(1, Ordering::Relaxed);
                                }
                                self.parse = Parse::Budget(header);
                                self.paused = true;
                                // The deadline is the sender's: waiting here is not.
                                self.frame_started = Some(Instant::now());
                                return Ok(false);
                            }
                        },
                    };
                    self.paused = false;
                    let bulk = (header.bulk_len > 0).then(|| {
                        let len = header.bulk_len as usize;
                        match self.sink.bulk_into(&header) {
                            Some(mut b) if b.capacity() >= len => {
                                b.set_len(len);
                                b
                            }
                            _ => AlignedBuf::for_overwrite(len),
                        }
                    });
                    let body = Vec::with_capacity((header.body_len as usize).min(STAGING_BYTES));
                    self.parse = Parse::Body {
                        header,
                        body,
                        bulk,
                        permit,
                    };
                }
                Parse::Body {
                    header,
                    mut body,
                    bulk,
                    permit,
                } => {
                    let want = header.body_len as usize - body.len();
                    let n = want.min(self.buffered());
                    body.extend_from_slice(&self.staging[self.start..self.start + n]);
                    self.start += n;
                    if body.len() < header.body_len as usize {
                        self.parse = Parse::Body {
                            header,
                            body,
                            bulk,
                            permit,
                        };
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    // A protected frame's trailer of tags comes next, before its bulk (it
                    // arrives with the body; the bulk still goes straight into its buffer);
                    // its checksums are of the plain bytes: checked once it is open.
                    match (&self.opener, bulk) {
                        (Some(o), bulk) if trailer_len(o.level(), header.bulk_len) > 0 => {
                            self.parse = Parse::Trailer {
                                header,
                                body,
                                bulk,
                                permit,
                                trailer: [0; TRAILER_BYTES_MAX],
                                got: 0,
                            };
                        }
                        (_, bulk) => {
                            header
                                .check_body(&body)
                                .map_err(|e| End::Bad(e.to_string()))?;
                            match bulk {
                                None => self.deliver(header, body, None, permit)?,
                                Some(bulk) => {
                                    self.parse = Parse::Bulk {
                                        header,
                                        body,
                                        bulk,
                                        got: 0,
                                        permit,
                                        tags: None,
                                    }
                                }
                            }
                        }
                    }
                }
                Parse::Bulk {
                    header,
                    body,
                    mut bulk,
                    mut got,
                    permit,
                    tags,
                } => {
                    got += self.take(&mut bulk[got..]);
                    if got < bulk.len() {
                        // Straight into the aligned buffer: no staging copy for bulk.
                        let n = self.receive(&mut bulk[got..])?;
                        got += n.unwrap_or(0);
                        read += n.unwrap_or(0);
                        self.parse = Parse::Bulk {
                            header,
                            body,
                            bulk,
                            got,
                            permit,
                            tags,
                        };
                        match n {
                            Some(_) => continue,
                            None => return Ok(false),
                        }
                    }
                    match tags {
                        Some(t) => self.open_and_deliver(header, body, Some(bulk), permit, &t)?,
                        None => {
                            check_bulk(&header, &mut bulk)?;
                            self.deliver(header, body, Some(bulk), permit)?;
                        }
                    }
                }
                Parse::Trailer {
                    header,
                    body,
                    bulk,
                    permit,
                    mut trailer,
                    mut got,
                } => {
                    let want = trailer_len(
                        self.opener.as_ref().map_or(Level::None, Opener::level),
                        header.bulk_len,
                    );
                    got += self.take(&mut trailer[got..want]);
                    if got < want {
                        self.parse = Parse::Trailer {
                            header,
                            body,
                            bulk,
                            permit,
                            trailer,
                            got,
                        };
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    let tags = Tags {
                        bytes: trailer,
                        len: want,
                    };
                    match bulk {
                        Some(bulk) => {
                            self.parse = Parse::Bulk {
                                header,
                                body,
                                bulk,
                                got: 0,
                                permit,
                                tags: Some(tags),
                            }
                        }
                        None => self.open_and_deliver(header, body, None, permit, &tags)?,
                    }
                }
            }
        }
    }

    /// Checks (and at privacy level decrypts) a protected frame with its tags, then its
    /// checksums, and delivers it.
    fn open_and_deliver(
        &mut self,
        header: Header,
        mut body: Vec<u8>,
        mut bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
        tags: &Tags,
    ) -> Result<(), End> {
        let opener = self
            .opener
            .as_mut()
            .expect("a trailer is read only when protected");
        opener
            .open(
                &header,
                &mut body,
                bulk.as_deref_mut(),
                &tags.bytes[..tags.len],
            )
            .map_err(|e| End::Unauthentic(e.to_string()))?;
        header
            .check_body(&body)
            .map_err(|e| End::Bad(e.to_string()))?;
        if let Some(b) = bulk.as_mut() {
            check_bulk(&header, b)?;
        }
        self.deliver(header, body, bulk, permit)
    }

    fn deliver(
        &mut self,
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
    ) -> Result<(), End> {
        self.sink
            .frame(RawFrame { header, body, bulk }, permit)
            .map_err(End::Bad)?;
        self.parse = Parse::Header;
        if self.buffered() == 0 {
            // Idle: no frame in progress, no staging memory held.
            self.frame_started = None;
            (self.start, self.end) = (0, 0);
            self.staging = Vec::new();
        } else {
            self.frame_started = Some(Instant::now());
        }
        Ok(())
    }
}

/// One network thread's shared side: where new connections are handed over.
struct Thread {
    epoll: OwnedFd,
    wake: OwnedFd,
    incoming: Mutex<Vec<NewConn>>,
}

impl Thread {
    fn wake(&self) {
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// A server's network threads.
pub(crate) struct Reactor {
    threads: Vec<Arc<Thread>>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    next: AtomicU64,
    stopping: Arc<AtomicBool>,
    pub(crate) stats: Arc<NetStats>,
    pub(crate) limits: NetLimits,
}

impl Reactor {
    /// Starts `limits.threads` network threads (at least one), named `name`.
    pub(crate) fn start(
        limits: NetLimits,
        stats: Arc<NetStats>,
        name: &str,
    ) -> std::io::Result<Arc<Reactor>> {
        let budget = Budget::new(limits.budget_bytes(), stats.clone());
        let stopping = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut handles = Vec::new();
        for i in 0..limits.threads.max(1) {
            let t = Arc::new(Thread {
                epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
                wake: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
                incoming: Mutex::new(Vec::new()),
            });
            epoll::add(
                &t.epoll,
                &t.wake,
                epoll::EventData::new_u64(WAKE),
                epoll::EventFlags::IN,
            )?;
            let (thread, budget, stats, stopping) =
                (t.clone(), budget.clone(), stats.clone(), stopping.clone());
            let h = std::thread::Builder::new()
                .name(format!("{name}_{i:02}"))
                .spawn(move || run(&thread, &budget, &stats, &stopping, limits))?;
            threads.push(t);
            handles.push(h);
        }
        Ok(Arc::new(Reactor {
            threads,
            handles: Mutex::new(handles),
            next: AtomicU64::new(0),
            stopping,
            stats,
            limits,
        }))
    }

    /// Hands a connection to the next network thread (it counts as open from now).
    pub(crate) fn add(&self, conn: NewConn) {
        self.stats.conns_open.fetch_add(1, Ordering::Relaxed);
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % self.threads.len();
        let t = &self.threads[i];
        t.incoming.lock().push(conn);
        t.wake();
    }

    /// Stops the threads; their connections are shut down.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.wake();
        }
        for h in self.handles.lock().drain(..) {
            let _ = h.join();
        }
    }
}

thread_local! {
    static ON_NETWORK_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on a network thread, which must never block on a peer (a reply it writes itself, to
/// a ping, is sent without waiting).
pub(crate) fn on_network_thread() -> bool {
    ON_NETWORK_THREAD.with(|c| c.get())
}

/// A network thread: waits for readiness, reads, parses, delivers, enforces deadlines.
fn run(
    thread: &Thread,
    budget: &Arc<Budget>,
    stats: &NetStats,
    stopping: &AtomicBool,
    limits: NetLimits,
) {
    ON_NETWORK_THREAD.with(|c| c.set(true));
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next_token = 0u64;
    let mut events = Vec::with_capacity(256);
    // Connections whose turn ended with more to do: served again before the next wait.
    let mut again: Vec<u64> = Vec::new();
    let frame_timeout = Duration::from_millis(limits.frame_timeout_ms.max(1));
    while !stopping.load(Ordering::SeqCst) {
        // Block until something happens, waking only to enforce a deadline or retry the
        // budget: an idle server's network threads sleep.
        let paused = conns.values().any(|c| c.paused);
        let timeout = match conns.values().filter_map(|c| c.frame_started).min() {
            _ if !again.is_empty() => Some(Duration::ZERO),
            _ if paused => Some(Duration::from_millis(10)),
            Some(t) => Some((t + frame_timeout).saturating_duration_since(Instant::now())),
            None => None,
        };
        let ts = timeout.map(|d| Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: match d.is_zero() {
                true => 0,
                false => i64::from(d.subsec_nanos()).max(1_000_000),
            },
        });
        events.clear();
        if let Err(e) = epoll::wait(
            &thread.epoll,
            rustix::buffer::spare_capacity(&mut events),
            ts.as_ref(),
        ) {
            if e != rustix::io::Errno::INTR {
                tracing::error!("epoll wait failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        for ev in events.drain(..) {
            let (token, flags) = (ev.data.u64(), { ev.flags });
            if token == WAKE {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&thread.wake, &mut b);
                for nc in thread.incoming.lock().drain(..) {
                    next_token += 1;
                    if let Err(e) = epoll::add(
                        &thread.epoll,
                        &nc.stream,
                        epoll::EventData::new_u64(next_token),
                        epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
                    ) {
                        tracing::warn!("{}: cannot watch the connection: {e}", nc.peer);
                        stats.conns_open.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                    conns.insert(
                        next_token,
                        Conn {
                            token: next_token,
                            stream: nc.stream,
                            peer: nc.peer,
                            bulk_len_max: nc.bulk_len_max,
                            sink: nc.sink,
                            // Level none protects no frame: nothing to check after the handshake.
                            opener: nc.opener.filter(|o| o.level() != Level::None),
                            staging: Vec::new(),
                            start: 0,
                            end: 0,
                            parse: Parse::Header,
                            frame_started: None,
                            paused: false,
                            drained: false,
                        },
                    );
                }
                continue;
            }
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            if c.paused {
                // Nothing is read while waiting for the budget; a peer that hung up goes.
                let gone =
                    epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR;
                if flags.intersects(gone) {
                    let c = conns.remove(&token).expect("connection");
                    close(thread, c, End::Closed, stats);
                }
                continue;
            }
            if step(thread, &mut conns, token, budget, stats) {
                again.push(token);
            }
        }
        for token in std::mem::take(&mut again) {
            let busy = conns.get(&token).is_some_and(|c| !c.paused);
            if busy && step(thread, &mut conns, token, budget, stats) {
                again.push(token);
            }
        }
        retry_paused(thread, &mut conns, budget, stats);
        expire(thread, &mut conns, frame_timeout, stats);
    }
    for (_, c) in conns.drain() {
        close(thread, c, End::Closed, stats);
    }
}

/// Connections waiting for the budget try again (and read on if they got it).
fn retry_paused(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    budget: &Arc<Budget>,
    stats: &NetStats,
) {
    let waiting: Vec<u64> = conns
        .iter()
        .filter(|(_, c)| c.paused)
        .map(|(t, _)| *t)
        .collect();
    for token in waiting {
        step(thread, conns, token, budget, stats);
    }
}

/// Reads and parses what connection `token` has; watches it for reading only while it is
/// not waiting for the budget (level-triggered readiness of unread data would spin). True
/// if its turn ended with more to do (bytes may already be staged, which no readiness event
/// will announce).
fn step(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    token: u64,
    budget: &Arc<Budget>,
    stats: &NetStats,
) -> bool {
    let c = conns.get_mut(&token).expect("connection");
    let was_paused = c.paused;
    match c.advance(budget, stats) {
        Ok(more) if c.paused != was_paused => {
            let flags = match c.paused {
                true => epoll::EventFlags::RDHUP,
                false => epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            };
            let data = epoll::EventData::new_u64(c.token);
            if let Err(e) = epoll::modify(&thread.epoll, &c.stream, data, flags) {
                let c = conns.remove(&token).expect("connection");
                close(thread, c, End::Bad(format!("cannot watch: {e}")), stats);
                return false;
            }
            more
        }
        Ok(more) => more,
        Err(end) => {
            let c = conns.remove(&token).expect("connection");
            close(thread, c, end, stats);
            false
        }
    }
}

/// Drops connections whose frame in progress is past its deadline.
fn expire(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    frame_timeout: Duration,
    stats: &NetStats,
) {
    let now = Instant::now();
    let late: Vec<u64> = conns
        .iter()
        .filter(|(_, c)| !c.paused && c.frame_started.is_some_and(|t| now >= t + frame_timeout))
        .map(|(t, _)| *t)
        .collect();
    for token in late {
        let c = conns.remove(&token).expect("connection");
        stats.frames_timed_out.fetch_add(1, Ordering::Relaxed);
        let why = format!(
            "frame not complete {} ms after its first byte",
            frame_timeout.as_millis()
        );
        close(thread, c, End::Bad(why), stats);
    }
}

fn close(thread: &Thread, mut c: Conn, end: End, stats: &NetStats) {
    let _ = epoll::delete(&thread.epoll, c.stream.as_fd());
    let _ = c.stream.shutdown(std::net::Shutdown::Both);
    let cause = match end {
        End::Closed => "closed by peer".to_string(),
        End::Bad(why) => {
            if !why.starts_with("frame not complete") {
                stats.frames_bad.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!("{}: {why}; dropping the connection", c.peer);
            why
        }
        End::Unauthentic(why) => {
            stats.frames_unauthentic.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{}: {why}; dropping the connection", c.peer);
            why
        }
    };
    stats.conns_open.fetch_sub(1, Ordering::Relaxed);
    c.sink.closed(&cause);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::write_frame;
    use nacre_types::limits::BULK_BYTES_MAX;
    use proptest::prelude::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// Collects frames and the end of the connection.
    struct Collect(mpsc::Sender<Result<RawFrame, String>>);

    impl FrameSink for Collect {
        fn frame(&mut self, f: RawFrame, _p: Option<BudgetPermit>) -> Result<(), String> {
            let _ = self.0.send(Ok(f));
            Ok(())
        }
        fn closed(&mut self, cause: &str) {
            let _ = self.0.send(Err(cause.to_string()));
        }
    }

    /// A reactor watching the server side of a loopback connection; the client side is
    /// returned to write into.
    fn pair(
        limits: NetLimits,
    ) -> (
        Arc<Reactor>,
        TcpStream,
        mpsc::Receiver<Result<RawFrame, String>>,
    ) {
        pair_with(limits, None)
    }

    /// [`pair`] for a connection protected by `opener`.
    fn pair_with(
        limits: NetLimits,
        opener: Option<Opener>,
    ) -> (
        Arc<Reactor>,
        TcpStream,
        mpsc::Receiver<Result<RawFrame, String>>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let reactor = Reactor::start(limits, Arc::new(NetStats::default()), "test_sd").unwrap();
        let (tx, rx) = mpsc::channel();
        reactor.add(NewConn {
            stream: server,
            peer: "test".into(),
            bulk_len_max: BULK_BYTES_MAX,
            sink: Box::new(Collect(tx)),
            opener,
        });
        (reactor, client, rx)
    }

    /// Collects frames, landing odd xids' bulk in buffers over memory it holds.
    struct Landing {
        tx: mpsc::Sender<Result<RawFrame, String>>,
        room: Arc<AlignedBuf>,
    }

    impl FrameSink for Landing {
        fn frame(&mut self, f: RawFrame, _p: Option<BudgetPermit>) -> Result<(), String> {
            let _ = self.tx.send(Ok(f));
            Ok(())
        }
        fn closed(&mut self, cause: &str) {
            let _ = self.tx.send(Err(cause.to_string()));
        }
        fn bulk_into(&mut self, header: &Header) -> Option<AlignedBuf> {
            if header.xid.is_multiple_of(2) {
                return None;
            }
            let ptr = std::ptr::NonNull::new(self.room.as_ptr() as *mut u8).unwrap();
            // SAFETY: the test's buffer, kept alive by the clone given as keeper; frames
            // arrive one at a time, so one buffer over it is filled at once.
            Some(unsafe { AlignedBuf::external(ptr, self.room.len(), self.room.clone()) })
        }
    }

    /// A sink's landing buffer receives the bulk of the frames it is offered for (no
    /// copy), shorter bulks included; a buffer too small is passed over for a fresh one.
    #[test]
    fn bulk_lands_where_the_sink_says() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (server, _) = l.accept().unwrap();
        let reactor = Reactor::start(
            NetLimits::default(),
            Arc::new(NetStats::default()),
            "test_sd",
        )
        .unwrap();
        let (tx, rx) = mpsc::channel();
        let room = Arc::new(AlignedBuf::zeroed(64 << 10));
        reactor.add(NewConn {
            stream: server,
            peer: "test".into(),
            bulk_len_max: BULK_BYTES_MAX,
            sink: Box::new(Landing {
                tx,
                room: room.clone(),
            }),
            opener: None,
        });
        let bulks: Vec<Vec<u8>> = [40_000usize, 50_000, 100, 70_000]
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n).map(|b| (b * 7 + i) as u8).collect())
            .collect();
        for (i, bulk) in bulks.iter().enumerate() {
            client
                .write_all(&frame_bytes(i as u64 + 1, b"body", bulk))
                .unwrap();
            let f = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
            let got = f.bulk.expect("bulk");
            assert_eq!(&got[..], &bulk[..]);
            // xids 1 and 3 land in the room; 2 (not offered) and 4 (70,000 bytes: more
            // than the room) get fresh buffers.
            let landed = std::ptr::eq(got.as_ptr(), room.as_ptr());
            assert_eq!(landed, i == 0 || i == 2, "frame {}", i + 1);
            assert_eq!(got.is_external(), landed);
        }
        reactor.stop();
    }

    fn frame_bytes(xid: u64, body: &[u8], bulk: &[u8]) -> Vec<u8> {
        let mut h = Header::request(0x0301, 0, xid);
        let bulk = (!bulk.is_empty()).then_some(bulk);
        h.seal(body, bulk, true);
        let mut out = Vec::new();
        write_frame(&mut out, &h, body, bulk).unwrap();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Frames cut anywhere (a byte at a time, mid-header, mid-bulk) arrive whole and in
        /// order, however the sender's writes fall.
        #[test]
        fn frames_split_anywhere_arrive_whole(
            frames in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..300),
                 proptest::collection::vec(any::<u8>(), 0..70_000)),
                1..5),
            cuts in proptest::collection::vec(1usize..9_000, 1..40),
        ) {
            let (reactor, mut client, rx) = pair(NetLimits::default());
            let mut stream = Vec::new();
            for (i, (body, bulk)) in frames.iter().enumerate() {
                stream.extend(frame_bytes(i as u64 + 1, body, bulk));
            }
            let mut at = 0;
            for c in cuts.iter().cycle() {
                if at >= stream.len() {
                    break;
                }
                let end = (at + c).min(stream.len());
                client.write_all(&stream[at..end]).unwrap();
                at = end;
            }
            for (i, (body, bulk)) in frames.iter().enumerate() {
                let f = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
                prop_assert_eq!(f.header.xid, i as u64 + 1);
                prop_assert_eq!(&f.body, body);
                prop_assert_eq!(f.bulk.as_deref().unwrap_or(&[]), &bulk[..]);
            }
            reactor.stop();
        }

        /// Protected frames (every level, tags between body and bulk) cut anywhere arrive
        /// whole, in order, decrypted.
        #[test]
        fn protected_frames_split_anywhere_arrive_whole(
            frames in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..300),
                 proptest::collection::vec(any::<u8>(), 0..70_000)),
                1..4),
            cuts in proptest::collection::vec(1usize..9_000, 1..40),
            level in prop_oneof![
                Just(Level::Integrity), Just(Level::Bulk), Just(Level::Privacy)
            ],
        ) {
            use crate::sec::session::Sealer;
            let opener = Opener::new(level, [5; 32]);
            let mut sealer = Sealer::new(level, [5; 32]);
            let (reactor, mut client, rx) = pair_with(NetLimits::default(), Some(opener));
            let mut stream = Vec::new();
            for (i, (body, bulk)) in frames.iter().enumerate() {
                let mut h = Header::request(0x0301, 0, i as u64 + 1);
                let bulk = (!bulk.is_empty()).then_some(&bulk[..]);
                h.seal(body, bulk, true);
                crate::frame::write_sealed(&mut stream, &h, body, bulk, Some(&mut sealer))
                    .unwrap();
            }
            let mut at = 0;
            for c in cuts.iter().cycle() {
                if at >= stream.len() {
                    break;
                }
                let end = (at + c).min(stream.len());
                client.write_all(&stream[at..end]).unwrap();
                at = end;
            }
            for (i, (body, bulk)) in frames.iter().enumerate() {
                let f = rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap();
                prop_assert_eq!(f.header.xid, i as u64 + 1);
                prop_assert_eq!(&f.body, body);
                prop_assert_eq!(f.bulk.as_deref().unwrap_or(&[]), &bulk[..]);
            }
            reactor.stop();
        }

        /// Garbage never panics a network thread: the connection is dropped (or waits for
        /// bytes that never come, until its frame deadline).
        #[test]
        fn garbage_drops_the_connection(bytes in proptest::collection::vec(any::<u8>(), 1..400)) {
            let limits = NetLimits { frame_timeout_ms: 200, ..NetLimits::default() };
            let (reactor, mut client, rx) = pair(limits);
            client.write_all(&bytes).unwrap();
            // Random bytes that happen to be frames are delivered; then the end comes.
            while rx.recv_timeout(Duration::from_secs(10)).unwrap().is_ok() {}
            reactor.stop();
        }
    }

    #[test]
    fn a_frame_beyond_the_budget_waits_until_budget_returns() {
        let stats = Arc::new(NetStats::default());
        let budget = Budget::new(100, stats.clone());
        let held = budget.try_take(80).unwrap();
        assert!(budget.try_take(40).is_none(), "only 20 bytes left");
        assert_eq!(stats.budget_held_bytes.load(Ordering::Relaxed), 80);
        drop(held);
        assert!(budget.try_take(100).is_some(), "all of it back");
        assert_eq!(stats.budget_held_bytes.load(Ordering::Relaxed), 0);
    }
}
