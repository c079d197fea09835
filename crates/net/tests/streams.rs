//! Bulk streamed to its handler while it arrives (nacre_net::stream) over real sockets: the
//! handler has the first part before the sender has sent the rest; a sender that goes away
//! or damages its bytes fails the stream; and senders that stall mid-bulk hold at most
//! `STREAMS_MAX` service threads: past that, frames are received whole first.

use nacre_net::stream::{StreamError, STREAMS_MAX};
use nacre_net::{Handler, Incoming, Outgoing, Server, ServiceConfig, ServicePool};
use nacre_types::Status;
use nacre_wire::header::HEADER_BYTES;
use nacre_wire::{Header, Service};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const OPCODE: u16 = 0x0301;
const BULK: usize = 512 * 1024;
const HALF: usize = BULK / 2;

/// What the handler saw of one request (by xid).
#[derive(Debug, PartialEq)]
enum Seen {
    /// Its bulk arrived whole before it was handled.
    Whole(u64),
    /// Its first half, while the rest was arriving.
    First(u64),
    /// Its stream ended: the whole bulk's crc32c, or why not.
    End(u64, Result<u32, StreamError>),
}

/// Streams requests of [`OPCODE`] with a bulk over 64 KiB; reports what it sees.
struct Probe(Mutex<Sender<Seen>>);

impl Probe {
    fn see(&self, s: Seen) {
        self.0.lock().unwrap().send(s).unwrap();
    }
}

impl Handler for Probe {
    fn streams(&self, header: &Header) -> bool {
        header.opcode == OPCODE && header.bulk_len > 64 * 1024
    }

    fn handle(&self, req: &Incoming) -> Outgoing {
        let xid = req.header.xid;
        let Some(stream) = &req.stream else {
            let bulk = req.bulk.as_ref().expect("a bulk");
            self.see(Seen::Whole(xid));
            return Outgoing::ok(crc32c::crc32c(bulk).to_le_bytes().to_vec());
        };
        assert!(req.bulk.is_none(), "a streamed request has no whole bulk");
        if stream.wait_for(HALF).is_ok() {
            self.see(Seen::First(xid));
        }
        let end = stream.finish().map(|(all, _)| crc32c::crc32c(all));
        self.see(Seen::End(xid, end.clone()));
        match end {
            Ok(crc) => Outgoing::ok(crc.to_le_bytes().to_vec()),
            Err(_) => Outgoing::error(Status::Io),
        }
    }
}

fn server(threads: usize) -> (Arc<Server>, Receiver<Seen>) {
    let (tx, rx) = channel();
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), 16 << 20).unwrap();
    let config = ServiceConfig::unpinned("probe", 1, threads, 64);
    let probe = Arc::new(Probe(Mutex::new(tx)));
    server.add_service(Service::Oss, ServicePool::start(config, probe));
    (server, rx)
}

/// A request frame of `xid` with `bulk` (its checksum sealed, then the bulk damaged if
/// `damage`): the header and body, and the bulk.
fn frame(xid: u64, bulk: &[u8], damage: bool) -> (Vec<u8>, Vec<u8>) {
    let body = b"a write".to_vec();
    let mut h = Header::request(OPCODE, 0, xid);
    h.seal(&body, Some(bulk), true);
    let mut head = h.encode().to_vec();
    head.extend_from_slice(&body);
    let mut bulk = bulk.to_vec();
    if damage {
        bulk[BULK - 5] ^= 0x10;
    }
    (head, bulk)
}

fn bulk_of(seed: u8) -> Vec<u8> {
    (0..BULK)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

fn next(rx: &Receiver<Seen>) -> Seen {
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the handler saw it")
}

/// Reads one reply: its status and body.
fn reply(s: &mut TcpStream) -> (i32, Vec<u8>) {
    let mut head = [0u8; HEADER_BYTES];
    s.read_exact(&mut head).unwrap();
    let h = Header::decode_any_version(&head, u32::MAX).unwrap();
    let mut body = vec![0; h.body_len as usize];
    s.read_exact(&mut body).unwrap();
    (h.status, body)
}

#[test]
fn the_handler_has_the_first_part_before_the_rest_is_sent() {
    let (server, rx) = server(8);
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let bulk = bulk_of(1);
    let (head, bulk_bytes) = frame(1, &bulk, false);
    s.write_all(&head).unwrap();
    s.write_all(&bulk_bytes[..HALF]).unwrap();
    // Not one byte of the second half is sent until the handler has the first.
    assert_eq!(next(&rx), Seen::First(1));
    s.write_all(&bulk_bytes[HALF..]).unwrap();
    let want = crc32c::crc32c(&bulk);
    assert_eq!(next(&rx), Seen::End(1, Ok(want)));
    assert_eq!(reply(&mut s), (0, want.to_le_bytes().to_vec()));
    let stats = server.net_stats();
    assert_eq!(stats.frames_streamed.load(Ordering::Relaxed), 1);

    // Streaming off (`net.stream_bulk=0`): the same request reaches its handler whole.
    server.router().set_stream_on(false);
    let (head, bulk_bytes) = frame(2, &bulk, false);
    s.write_all(&head).unwrap();
    s.write_all(&bulk_bytes).unwrap();
    assert_eq!(next(&rx), Seen::Whole(2));
    assert_eq!(reply(&mut s), (0, want.to_le_bytes().to_vec()));
    assert_eq!(stats.frames_streamed.load(Ordering::Relaxed), 1);
}

#[test]
fn a_sender_that_goes_away_or_damages_its_bulk_fails_the_stream() {
    let (server, rx) = server(8);
    let bulk = bulk_of(2);

    // Gone after the first half.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let (head, bulk_bytes) = frame(1, &bulk, false);
    s.write_all(&head).unwrap();
    s.write_all(&bulk_bytes[..HALF]).unwrap();
    assert_eq!(next(&rx), Seen::First(1));
    drop(s);
    assert!(matches!(next(&rx), Seen::End(1, Err(StreamError::Cut(_)))));

    // Whole, one bit flipped near its end: the handler learns it, the connection is
    // dropped as for a damaged frame received whole.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let (head, bulk_bytes) = frame(2, &bulk, true);
    s.write_all(&head).unwrap();
    s.write_all(&bulk_bytes).unwrap();
    let mut seen = vec![next(&rx), next(&rx)];
    seen.retain(|e| !matches!(e, Seen::First(2)));
    assert!(
        matches!(&seen[..], [Seen::End(2, Err(StreamError::Checksum(_)))]),
        "{seen:?}"
    );
    // Closed by the server with no reply: the handler's error is not sent (the sender
    // resends, as for a damaged frame received whole).
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        rest.is_empty(),
        "{} bytes of reply to a damaged request",
        rest.len()
    );
    // Counted as a bad frame (just after the socket is shut), and its slot given back.
    let stats = server.net_stats();
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats.frames_bad.load(Ordering::Relaxed) < 1 {
        assert!(Instant::now() < deadline, "counted as a bad frame");
        std::thread::yield_now();
    }
    while stats.frames_streaming.load(Ordering::Relaxed) != 0 {
        assert!(Instant::now() < deadline, "stream slots given back");
        std::thread::yield_now();
    }
}

/// An attacker's connections each send a large write's header and half its bulk, then
/// stall: at most `STREAMS_MAX` of them reach a handler (each holds a service thread until
/// its frame deadline); the next frames are received whole first, so another sender's
/// requests are still served.
#[test]
fn stalled_senders_hold_no_more_than_the_stream_slots() {
    let slots = STREAMS_MAX as usize;
    let (server, rx) = server(slots + 2);
    let bulk = bulk_of(3);
    let mut stalled = Vec::new();
    for i in 0..slots + 2 {
        let mut s = TcpStream::connect(server.addr()).unwrap();
        let (head, bulk_bytes) = frame(100 + i as u64, &bulk, false);
        s.write_all(&head).unwrap();
        s.write_all(&bulk_bytes[..HALF]).unwrap();
        stalled.push(s);
    }
    let mut firsts: Vec<Seen> = (0..slots).map(|_| next(&rx)).collect();
    firsts.sort_by_key(|s| format!("{s:?}"));
    assert!(
        firsts.iter().all(|s| matches!(s, Seen::First(_))),
        "{firsts:?}"
    );
    let stats = server.net_stats();
    assert_eq!(stats.frames_streaming.load(Ordering::Relaxed), STREAMS_MAX);

    // Another sender's whole request is served while the slots are held.
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let (head, bulk_bytes) = frame(7, &bulk, false);
    s.write_all(&head).unwrap();
    s.write_all(&bulk_bytes).unwrap();
    assert_eq!(next(&rx), Seen::Whole(7));
    let want = crc32c::crc32c(&bulk);
    assert_eq!(reply(&mut s), (0, want.to_le_bytes().to_vec()));
    assert_eq!(stats.frames_streamed.load(Ordering::Relaxed), STREAMS_MAX);

    // The stalled senders go away: the streamed ones fail, every slot comes back.
    drop(stalled);
    let ends: Vec<Seen> = (0..slots).map(|_| next(&rx)).collect();
    assert!(
        ends.iter()
            .all(|e| matches!(e, Seen::End(_, Err(StreamError::Cut(_))))),
        "{ends:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats.frames_streaming.load(Ordering::Relaxed) != 0 {
        assert!(Instant::now() < deadline, "stream slots given back");
        std::thread::yield_now();
    }
}
