//! A request as a handler sees it ([`Incoming`]: resubmitted, released by QoS, answered)
//! and the way its reply goes back: to an in-process caller, or written on its TCP
//! connection ([`TcpReplier`], shared by the service threads replying on it).

use crate::frame::{write_sealed, write_sealed_many, NoSigPipe};
use crate::queue::OneshotSender;
use crate::sec::session::Sealer;
use crate::{NetError, Reply};
use nacre_types::{AlignedBuf, Status};
use nacre_wire::header::{FLAG_BULK_CHECKSUM, FLAG_REPLY};
use nacre_wire::{Header, HEADER_BYTES};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// Where a request queued by a service pool goes back to ([`Incoming::resubmit`]): the
/// pool (`crate::service`) and the CPU partition that first queued it.
pub(crate) trait Requeue: Send + Sync {
    /// Queues `req` again on partition `partition`.
    fn dispatch(&self, req: Incoming, partition: usize);
}

/// A request as a service thread sees it.
pub struct Incoming {
    /// Header.
    pub header: Header,
    /// Encoded body.
    pub body: Vec<u8>,
    /// Bulk data sent with the request (None while it streams: [`Incoming::stream`]).
    pub bulk: Option<Arc<AlignedBuf>>,
    /// The bulk as it arrives, for a request its handler asked to have early
    /// ([`crate::service::Handler::streams`]); `bulk` is then None.
    pub stream: Option<Arc<crate::stream::BulkStream>>,
    /// Peer description for logs (address or "local").
    pub peer: String,
    /// Who sent it, as its connection shows it (role, proved key, address).
    pub caller: Arc<crate::Caller>,
    pub(crate) reply_to: ReplySink,
    /// The receive budget its bytes hold, given back when the request is dropped.
    pub(crate) _budget: Option<crate::reactor::BudgetPermit>,
    /// The pool and partition that queued it, for [`Incoming::resubmit`].
    pub(crate) home: Option<(Weak<dyn Requeue>, usize)>,
    /// Times it was resubmitted.
    pub(crate) resubmits: u8,
    /// A QoS scheduler let it through ([`Incoming::qos_release`]).
    pub(crate) qos_admitted: bool,
    /// Its QoS weight ([`Handler::weight`]; 0: none), which orders the service queue.
    pub(crate) weight: u32,
}

/// What a handler returns.
pub struct Outgoing {
    /// Status.
    pub status: Status,
    /// Encoded reply body (empty for errors).
    pub body: Vec<u8>,
    /// Bulk data (reads).
    pub bulk: Option<AlignedBuf>,
}

impl Outgoing {
    /// An error reply.
    pub fn error(status: Status) -> Outgoing {
        Outgoing {
            status,
            body: Vec::new(),
            bulk: None,
        }
    }

    /// A success reply with an encoded body.
    pub fn ok(body: Vec<u8>) -> Outgoing {
        Outgoing {
            status: Status::Ok,
            body,
            bulk: None,
        }
    }
}

pub(crate) enum ReplySink {
    Tcp(Arc<TcpReplier>),
    Local(OneshotSender<Result<Reply, NetError>>),
}

impl Incoming {
    /// Length of the request's bulk, arrived or arriving (None: it has none).
    pub fn bulk_len(&self) -> Option<u64> {
        match (&self.bulk, &self.stream) {
            (Some(b), _) => Some(b.len() as u64),
            (None, Some(s)) => Some(s.len() as u64),
            (None, None) => None,
        }
    }

    /// True for a request from this process (the in-process transport: its sender lives
    /// and dies with the server).
    pub fn is_local(&self) -> bool {
        matches!(self.reply_to, ReplySink::Local(_))
    }

    /// Queues a request its handler parked ([`Handler::park`]) on its service again, to be
    /// handled by a service thread (offered to `park` again first: see
    /// [`Incoming::resubmits`]). A request whose service is gone is answered `ENODEV`.
    pub fn resubmit(mut self) {
        self.resubmits = self.resubmits.saturating_add(1);
        self.requeue();
    }

    /// Queues the request again on the pool and partition that first queued it (`ENODEV`
    /// if that pool is gone).
    fn requeue(self) {
        match self
            .home
            .as_ref()
            .and_then(|(p, i)| Some((p.upgrade()?, *i)))
        {
            Some((pool, i)) => pool.dispatch(self, i),
            None => self.reply(Outgoing::error(Status::NoDev)),
        }
    }

    /// Queues a request a QoS scheduler held back (parked in [`Handler::park`]) to be
    /// served again, marked as let through ([`Incoming::qos_admitted`]); unlike
    /// [`Incoming::resubmit`] it does not count as a resubmit (waits that follow, for
    /// locks, still happen).
    pub fn qos_release(mut self) {
        self.qos_admitted = true;
        self.requeue();
    }

    /// Its QoS weight (0: none).
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// True if a QoS scheduler already let the request through.
    pub fn qos_admitted(&self) -> bool {
        self.qos_admitted
    }

    /// How many times the request was resubmitted ([`Incoming::resubmit`]).
    pub fn resubmits(&self) -> u8 {
        self.resubmits
    }

    /// Sends the reply of a request a handler parked ([`Handler::park`]).
    pub fn respond(self, out: Outgoing) {
        self.reply(out);
    }

    /// The header of the reply `out` to this request on a TCP connection, sealed.
    pub(crate) fn reply_header(&self, out: &Outgoing) -> Header {
        let mut header = self.header;
        header.flags = FLAG_REPLY | (self.header.flags & FLAG_BULK_CHECKSUM);
        header.status = out.status.code();
        let checksum = self.header.flags & FLAG_BULK_CHECKSUM != 0;
        let known = out.bulk.as_ref().and_then(|b| b.known_crc32c());
        header.seal_known(&out.body, out.bulk.as_deref(), checksum, known);
        header
    }

    pub(crate) fn reply(self, out: Outgoing) {
        // A request whose bulk never arrived whole and sound is not answered, as a damaged
        // frame received whole is not: the link is dropped and the sender resends it (its
        // handler's error would otherwise reach the application).
        if self.stream.as_ref().is_some_and(|s| s.failed()) {
            return;
        }
        let mut header = self.header;
        header.flags = FLAG_REPLY | (self.header.flags & FLAG_BULK_CHECKSUM);
        header.status = out.status.code();
        match self.reply_to {
            ReplySink::Local(tx) => {
                header.body_len = out.body.len() as u32;
                header.bulk_len = out.bulk.as_ref().map_or(0, |b| b.len() as u32);
                tx.send(Ok(Reply {
                    header,
                    body: out.body,
                    bulk: out.bulk,
                }));
            }
            ReplySink::Tcp(replier) => {
                let checksum = self.header.flags & FLAG_BULK_CHECKSUM != 0;
                let known = out.bulk.as_ref().and_then(|b| b.known_crc32c());
                header.seal_known(&out.body, out.bulk.as_deref(), checksum, known);
                replier.send(&self.peer, &header, &out.body, out.bulk.as_deref());
            }
        }
    }
}

/// The writing side of a server connection, shared by the service threads replying on it.
pub(crate) struct TcpReplier {
    writer: Mutex<ReplyWriter>,
    stats: Arc<crate::reactor::NetStats>,
}

/// The stream and, on a protected connection, what seals its frames (in the order written).
struct ReplyWriter {
    stream: TcpStream,
    sealer: Option<Sealer>,
}

impl TcpReplier {
    /// `stream` has its send timeout set (the reply timeout); `sealer` protects its frames
    /// (the connection's handshake session), if any.
    pub(crate) fn new(
        stream: TcpStream,
        sealer: Option<Sealer>,
        stats: Arc<crate::reactor::NetStats>,
    ) -> TcpReplier {
        TcpReplier {
            writer: Mutex::new(ReplyWriter { stream, sealer }),
            stats,
        }
    }

    /// Writes a reply. A peer that does not take it within the send timeout (or, on a
    /// network thread, at once) has its connection dropped: a reply half written leaves the
    /// stream unusable, and the client resends on a new connection.
    pub(crate) fn send(&self, peer: &str, header: &Header, body: &[u8], bulk: Option<&[u8]>) {
        let mut guard = self.writer.lock().expect("reply writer");
        let w = &mut *guard;
        let result = match crate::reactor::on_network_thread() {
            true => send_now(&w.stream, header, body, bulk, w.sealer.as_mut()),
            false => write_sealed(
                &mut NoSigPipe(&w.stream),
                header,
                body,
                bulk,
                w.sealer.as_mut(),
            ),
        };
        if let Err(e) = result {
            self.failed(peer, &w.stream, e);
        }
    }

    /// Writes several replies together, in order (from a service thread: with the send
    /// timeout, as [`TcpReplier::send`]).
    pub(crate) fn send_many(&self, peer: &str, frames: &[(Header, Outgoing)]) {
        let parts: Vec<crate::frame::FrameParts<'_>> = frames
            .iter()
            .map(|(h, out)| (*h, &out.body[..], out.bulk.as_deref()))
            .collect();
        let mut guard = self.writer.lock().expect("reply writer");
        let w = &mut *guard;
        let result = match crate::reactor::on_network_thread() {
            true => parts
                .iter()
                .try_for_each(|(h, b, k)| send_now(&w.stream, h, b, *k, w.sealer.as_mut())),
            false => write_sealed_many(&mut NoSigPipe(&w.stream), &parts, w.sealer.as_mut()),
        };
        if let Err(e) = result {
            self.failed(peer, &w.stream, e);
        }
    }

    /// A reply could not be written: a peer that does not take it within the send timeout
    /// is said in the log; either way the connection is dropped (the client resends).
    fn failed(&self, peer: &str, stream: &TcpStream, e: std::io::Error) {
        let slow = matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        );
        if slow {
            self.stats.replies_timed_out.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{peer}: does not read its replies; dropping the connection");
        } else {
            tracing::debug!("reply to {peer} lost: {e}");
        }
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }

    /// The connection ended: replies still to come fail at once.
    pub(crate) fn close(&self) {
        let _ = self
            .writer
            .lock()
            .expect("reply writer")
            .stream
            .shutdown(std::net::Shutdown::Both);
    }
}

/// Sends a small frame without waiting (from a network thread): all of it, or an error.
fn send_now(
    stream: &TcpStream,
    header: &Header,
    body: &[u8],
    bulk: Option<&[u8]>,
    sealer: Option<&mut Sealer>,
) -> std::io::Result<()> {
    let mut frame = Vec::with_capacity(HEADER_BYTES + body.len() + bulk.map_or(0, <[u8]>::len));
    write_sealed(&mut frame, header, body, bulk, sealer)?;
    let flags = rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL;
    match rustix::net::send(stream, &frame, flags) {
        Ok(n) if n == frame.len() => Ok(()),
        Ok(_) => Err(std::io::ErrorKind::WouldBlock.into()),
        Err(e) => Err(e.into()),
    }
}
