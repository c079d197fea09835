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

mod event_loop;
mod parse;

use crate::frame::RawFrame;
use crate::limits::Budget;
pub use crate::limits::{
    BudgetPermit, NetLimits, NetStats, BULK_BUDGET_BYTES_DEFAULT, CONNS_MAX_DEFAULT,
    FRAME_TIMEOUT_MS_DEFAULT, REPLY_TIMEOUT_MS_DEFAULT,
};
use crate::sec::session::Opener;
use crate::stream::BulkStream;
use event_loop::run;
use nacre_types::AlignedBuf;
use nacre_wire::Header;
use parking_lot::Mutex;
use parse::Parse;
use rustix::event::{epoll, eventfd, EventfdFlags};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

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
    /// True if the request `header` (body read and checked, no tags to check) should reach
    /// its handler while its bulk still arrives ([`crate::stream`]); it is then given to
    /// [`FrameSink::frame_streamed`] instead of [`FrameSink::frame`], if a stream slot is
    /// free.
    fn streams(&mut self, _header: &Header) -> bool {
        false
    }
    /// A request whose bulk is arriving into `stream` (after [`FrameSink::streams`] said
    /// so); `Err` (why) drops the connection.
    fn frame_streamed(
        &mut self,
        _header: Header,
        _body: Vec<u8>,
        _stream: Arc<BulkStream>,
    ) -> Result<(), String> {
        Err("this connection does not take streamed frames".into())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::write_frame;
    use crate::sec::Level;
    use nacre_types::limits::BULK_BYTES_MAX;
    use proptest::prelude::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Duration;

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
