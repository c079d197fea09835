//! The links under a connection: a TCP link (its writer and the requests awaiting replies
//! on it) or the in-process transport; opening one (with the handshake), aborting one, and
//! the network thread that reads the replies of every client link of the process.

use super::{Connection, SlotPermit};
use crate::frame::RawFrame;
use crate::queue::OneshotSender;
use crate::reactor::{BudgetPermit, FrameSink, NetLimits, NetStats, NewConn, Reactor};
use crate::router::Router;
use crate::sec::session::Sealer;
use crate::sec::SecError;
use crate::{local, NetError, Reply};
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_types::AlignedBuf;
use nacre_types::Nid;
use nacre_wire::Header;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type ReplySender = OneshotSender<Result<Reply, NetError>>;

/// A request awaiting its reply: who waits, the in-flight slot it occupies, and where its
/// reply's bulk is to land if the caller said ([`Connection::start_into`]).
type Awaited = (ReplySender, Option<SlotPermit>, Option<AlignedBuf>);

pub(super) struct TcpLink {
    /// The stream and, on a protected link, what seals its frames in the order written.
    pub(super) writer: Mutex<(TcpStream, Option<Sealer>)>,
    /// Requests awaiting replies, each with the in-flight slot it occupies and where its
    /// reply's bulk is to land, if the caller said.
    pub(super) pending: Mutex<HashMap<u64, Awaited>>,
    pub(super) alive: AtomicBool,
}

pub(super) enum Link {
    Tcp(Arc<TcpLink>),
    Local(Arc<Router>),
}

impl Link {
    pub(super) fn alive(&self) -> bool {
        match self {
            Link::Tcp(l) => l.alive.load(Ordering::Acquire),
            Link::Local(_) => true,
        }
    }
}

impl Connection {
    pub(super) fn link_until(&self, deadline: Instant) -> Result<(usize, Arc<Link>), NetError> {
        loop {
            match self.pick_link(None) {
                Ok(link) => return Ok(link),
                Err(e) if Instant::now() >= deadline => return Err(e),
                // A refused handshake (a wrong key) does not get better by retrying.
                Err(e @ NetError::Refused { .. }) => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    pub(super) fn open_link(&self, nid: Nid, timeout_ms: u64) -> Result<Link, NetError> {
        match self.open_link_once(nid, timeout_ms) {
            // The servers retired the master its key was made from, and this process read
            // the new key from where its key came from: once more, with that one.
            Err(Retry::KeyReloaded) => self
                .open_link_once(nid, timeout_ms)
                .map_err(|e| e.into_error(nid)),
            r => r.map_err(|e| e.into_error(nid)),
        }
    }

    /// [`Conn::open_link`]'s one attempt.
    fn open_link_once(&self, nid: Nid, timeout_ms: u64) -> Result<Link, Retry> {
        if let Some(router) = local::lookup(nid.addr) {
            return Ok(Link::Local(router));
        }
        let timeout = Duration::from_millis(timeout_ms.max(1));
        let stream =
            TcpStream::connect_timeout(&nid.addr, timeout).map_err(|e| NetError::Unreachable {
                nid: nid.to_string(),
                cause: e.to_string(),
            })?;
        stream.set_nodelay(true)?;
        let session = match &self.config.key {
            Some(key) => {
                let timeout = Duration::from_millis(timeout_ms.max(1));
                // The key that replaced it, if a rotation retired its master.
                let key = crate::sec::keyring::current(key);
                let s =
                    crate::sec::handshake::client(&stream, &key, timeout).map_err(|e| match e {
                        SecError::KeyRetired { reloaded: true, .. } => Retry::KeyReloaded,
                        SecError::Refused(why) | SecError::KeyRetired { why, .. } => {
                            NetError::Refused {
                                nid: nid.to_string(),
                                why,
                            }
                            .into()
                        }
                        other => NetError::Unreachable {
                            nid: nid.to_string(),
                            cause: other.to_string(),
                        }
                        .into(),
                    })?;
                Some(s)
            }
            None => None,
        };
        let (sealer, opener) = match session {
            Some(s) => (Some(s.sealer), Some(s.opener)),
            None => (None, None),
        };
        // A write into a link whose peer stopped reading (a rail gone down, a stuck server)
        // fails after this long instead of blocking forever: the link is then failed like
        // one that stopped answering, and the request goes out again (another rail).
        let write_timeout_ms = self
            .config
            .rail_timeout_ms
            .min(self.config.rpc_timeout_ms)
            .max(1);
        stream.set_write_timeout(Some(Duration::from_millis(write_timeout_ms)))?;
        let link = Arc::new(TcpLink {
            writer: Mutex::new((stream.try_clone()?, sealer)),
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        // Replies are read by the process's network threads, not a thread per connection.
        client_reactor()?.add(NewConn {
            stream,
            peer: nid.to_string(),
            bulk_len_max: BULK_BYTES_MAX,
            sink: Box::new(ReplySink {
                link: link.clone(),
                nid,
            }),
            opener,
        });
        Ok(Link::Tcp(link))
    }
}

/// Ends a link at once: a reset (SO_LINGER 0) drops unsent data, so a request queued on a
/// dead rail is never delivered late; the reader then fails its pending requests.
pub(super) fn abort_link(tcp: &TcpLink) {
    tcp.alive.store(false, Ordering::Release);
    let w = tcp.writer.lock();
    let _ = set_linger_zero(&w.0);
    let _ = w.0.shutdown(std::net::Shutdown::Both);
}

fn set_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket fd and a correctly sized linger struct.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The network threads reading every client connection of this process (replies now; the
/// requests servers send clients, lock callbacks, next).
fn client_reactor() -> Result<&'static Arc<Reactor>, NetError> {
    static REACTOR: std::sync::OnceLock<Arc<Reactor>> = std::sync::OnceLock::new();
    if let Some(r) = REACTOR.get() {
        return Ok(r);
    }
    let limits = NetLimits {
        threads: 1,
        conns_max: usize::MAX,
        // A reply that has started must finish within the RPC timeout's order of time.
        frame_timeout_ms: 120_000,
        bulk_budget_bytes: 1 << 30,
        reply_timeout_ms: 0,
    };
    let reactor = Reactor::start(limits, Arc::new(NetStats::default()), "rpc_reader")?;
    Ok(REACTOR.get_or_init(|| reactor))
}

/// A client connection's frames: replies, handed to the callers waiting for their xids.
struct ReplySink {
    link: Arc<TcpLink>,
    nid: Nid,
}

impl FrameSink for ReplySink {
    fn frame(&mut self, frame: RawFrame, _permit: Option<BudgetPermit>) -> Result<(), String> {
        if !frame.header.is_reply() {
            return Err("a request frame on a client connection".into());
        }
        if !nacre_wire::version::speaks(frame.header.version) {
            // A reply is in its request's version: another one is not a reply of ours.
            return Err(format!(
                "a reply of protocol {} (this client speaks {})",
                frame.header.version,
                nacre_wire::version::Range::OURS
            ));
        }
        let tx = self.link.pending.lock().remove(&frame.header.xid);
        match tx {
            Some((tx, _slot, _into)) => tx.send(Ok(Reply {
                header: frame.header,
                body: frame.body,
                bulk: frame.bulk,
            })),
            // Late (its request timed out and was resent) or never asked for: nobody waits
            // for it, so it reaches no caller.
            None => tracing::warn!(
                "{}: reply to xid {} that no request waits for; dropped",
                self.nid,
                frame.header.xid
            ),
        }
        Ok(())
    }

    fn bulk_into(&mut self, header: &Header) -> Option<AlignedBuf> {
        if !header.is_reply() {
            return None;
        }
        self.link
            .pending
            .lock()
            .get_mut(&header.xid)
            .and_then(|p| p.2.take())
    }

    fn closed(&mut self, cause: &str) {
        // A reply damaged on the way (checksum) or a closed link: the requests in flight on
        // it are resent.
        tracing::debug!("connection to {} ended: {cause}", self.nid);
        self.link.alive.store(false, Ordering::Release);
        let _ = self.link.writer.lock().0.shutdown(std::net::Shutdown::Both);
        for (_, (tx, _slot, _into)) in self.link.pending.lock().drain() {
            tx.send(Err(NetError::Disconnected(self.nid.to_string())));
        }
    }
}

/// Why one attempt to open a link failed.
enum Retry {
    /// The server retired the master key of the key proved, and the process holds a key
    /// of another master now: worth one more attempt.
    KeyReloaded,
    /// Anything else.
    Failed(NetError),
}

impl Retry {
    fn into_error(self, nid: Nid) -> NetError {
        match self {
            Retry::KeyReloaded => NetError::Refused {
                nid: nid.to_string(),
                why: "its key was retired and the key read again in its place is refused \
                      too"
                .into(),
            },
            Retry::Failed(e) => e,
        }
    }
}

impl From<NetError> for Retry {
    fn from(e: NetError) -> Retry {
        Retry::Failed(e)
    }
}

impl From<std::io::Error> for Retry {
    fn from(e: std::io::Error) -> Retry {
        Retry::Failed(e.into())
    }
}
