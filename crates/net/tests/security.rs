//! Shared-key security over real TCP sockets: every level carries requests and bulk both
//! ways; no key, a wrong key, a replayed handshake and a tampered frame are refused.

use nacre_net::sec::{FsKey, Level, ServerKeys};
use nacre_net::server::Security;
use nacre_net::{
    Connection, Handler, Incoming, NetConfig, NetError, NetLimits, Outgoing, Server, ServiceConfig,
    ServicePool,
};
use nacre_testkit::proxy::{Proxy, Tamper};
use nacre_types::{AlignedBuf, Nid, Status};
use nacre_wire::{Header, Service, HEADER_BYTES};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Echo(Arc<AtomicU64>);

impl Handler for Echo {
    fn handle(&self, req: &Incoming) -> Outgoing {
        self.0.fetch_add(1, Ordering::Relaxed);
        Outgoing {
            status: Status::Ok,
            body: req.body.clone(),
            bulk: req.bulk.as_ref().map(|b| AlignedBuf::copy_from(b)),
        }
    }
}

/// A server holding `key`, its handled-request counter.
fn server(key: &FsKey) -> (Arc<Server>, Arc<AtomicU64>) {
    let server = bind(key);
    let handled = Arc::new(AtomicU64::new(0));
    let config = ServiceConfig::unpinned("echo", 2, 2, 64);
    server.add_service(
        Service::Oss,
        ServicePool::start(config, Arc::new(Echo(handled.clone()))),
    );
    (server, handled)
}

/// A server on 127.0.0.1 holding `key`, reached over TCP only (the in-process registry
/// would skip the handshake); no service yet.
fn bind(key: &FsKey) -> Arc<Server> {
    let mut keys = ServerKeys::default();
    keys.add(key.clone()).unwrap();
    let security = Security {
        keys,
        ..Security::default()
    };
    let listen = nacre_net::Listen {
        addr: "127.0.0.1:0".parse().unwrap(),
        cpts: Vec::new(),
    };
    let server =
        Server::bind_secure(&[listen], 16 << 20, false, NetLimits::default(), security).unwrap();
    nacre_net::local::unregister(server.addr());
    server
}

fn config(key: Option<&FsKey>) -> NetConfig {
    NetConfig {
        key: key.map(|k| Arc::new(k.clone())),
        connect_timeout_ms: 3_000,
        recovery_timeout_ms: 5_000,
        ..NetConfig::default()
    }
}

fn request(body: &[u8], bulk: Option<Vec<u8>>) -> nacre_net::Request {
    nacre_net::Request {
        opcode: 0x0301,
        target: 0,
        body: body.to_vec(),
        bulk: bulk.map(|b| Arc::new(AlignedBuf::copy_from(&b))),
        inline: false,
    }
}

fn stat(server: &Server, name: &str) -> u64 {
    let s = server.net_stats();
    match name {
        "handshakes_refused" => s.handshakes_refused.load(Ordering::Relaxed),
        "frames_unauthentic" => s.frames_unauthentic.load(Ordering::Relaxed),
        "handshakes_busy" => s.handshakes_busy.load(Ordering::Relaxed),
        _ => unreachable!(),
    }
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_level_carries_requests_and_bulk_both_ways() {
    for level in Level::ALL {
        let key = FsKey::generate("secfs", level).unwrap();
        let (server, handled) = server(&key);
        let conn = Connection::connect(Nid::tcp(server.addr()), config(Some(&key))).unwrap();
        let pending: Vec<_> = (0..8u8)
            .map(|i| {
                let bulk = (i % 2 == 0).then(|| vec![i; 1 << 20]);
                conn.start(request(&[i; 300], bulk)).unwrap()
            })
            .collect();
        for (i, p) in pending.into_iter().enumerate() {
            let reply = p.wait().unwrap();
            assert_eq!(reply.body, vec![i as u8; 300], "{level}");
            match reply.bulk {
                Some(b) => assert!(b.iter().all(|&x| x == i as u8), "{level}"),
                None => assert!(i % 2 == 1, "{level}: bulk came back"),
            }
        }
        assert_eq!(handled.load(Ordering::Relaxed), 8);
        assert_eq!(stat(&server, "frames_unauthentic"), 0);
    }
}

#[test]
fn a_client_without_the_key_or_with_a_wrong_one_is_refused_at_once() {
    let key = FsKey::generate("secfs", Level::Integrity).unwrap();
    let (server, handled) = server(&key);
    let nid = Nid::tcp(server.addr());
    // No key: its first request is answered ENOKEY, nothing is handled.
    let started = Instant::now();
    let conn = Connection::connect(nid, config(None)).unwrap();
    let reply = conn.call(request(b"hello", None)).unwrap();
    assert_eq!(reply.status(), Status::NoKey);
    // A wrong key, or a key of another file system: refused in the handshake.
    let wrong = FsKey::generate("secfs", Level::Integrity).unwrap();
    match Connection::connect(nid, config(Some(&wrong))) {
        Err(NetError::Refused { why, .. }) => assert!(why.contains("keys differ"), "{why}"),
        other => panic!("a wrong key got {:?}", other.err()),
    }
    let other_fs = FsKey::generate("otherfs", Level::Integrity).unwrap();
    match Connection::connect(nid, config(Some(&other_fs))) {
        Err(NetError::Refused { why, .. }) => assert!(why.contains("no key"), "{why}"),
        other => panic!("another file system key got {:?}", other.err()),
    }
    // Refusals are immediate, not retried until a timeout.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(handled.load(Ordering::Relaxed), 0, "nothing was handled");
    wait_for("the refusals counted", || {
        stat(&server, "handshakes_refused") >= 3
    });
}

/// Bytes of an integrity trailer.
const TAG_BYTES: usize = 16;

fn proxy(upstream: std::net::SocketAddr, tamper: Tamper) -> Proxy {
    nacre_testkit::proxy::start(upstream, "secfs", TAG_BYTES, tamper)
}

#[test]
fn a_recorded_session_replayed_is_refused_before_any_request() {
    let key = FsKey::generate("secfs", Level::Integrity).unwrap();
    let (server, handled) = server(&key);
    let p = proxy(server.addr(), |_, _| {});
    let conn = Connection::connect(Nid::tcp(p.addr), config(Some(&key))).unwrap();
    for i in 0..3u8 {
        assert_eq!(
            conn.call(request(&[i; 10], None)).unwrap().body,
            vec![i; 10]
        );
    }
    assert_eq!(handled.load(Ordering::Relaxed), 3);
    let captured = p.recorded.lock().unwrap().clone();
    assert!(
        captured.len() > 3 * HEADER_BYTES,
        "the session was recorded"
    );
    // Everything the client sent, sent again on a new connection.
    let mut replay = TcpStream::connect(server.addr()).unwrap();
    replay.write_all(&captured).unwrap();
    replay
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = replay.read_to_end(&mut answer);
    wait_for("the replay refused", || {
        stat(&server, "handshakes_refused") >= 1
    });
    assert_eq!(
        handled.load(Ordering::Relaxed),
        3,
        "no replayed request ran"
    );
    // The server answered its challenge and refused: no frame came back.
    assert!(
        answer.len() < HEADER_BYTES + 100,
        "{} bytes came back",
        answer.len()
    );
}

/// Changes the body of the request whose body is 64 bytes of 2, the first time it passes,
/// and fixes up the header's checksums as an attacker would: only the MAC can tell.
fn tamper_request_2(h: &mut Header, body: &mut [u8]) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if *body != [2u8; 64] || DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    body[0] = 0xff;
    h.seal(body, None, false);
}

#[test]
fn a_tampered_frame_is_dropped_and_the_request_resent_intact() {
    let key = FsKey::generate("secfs", Level::Integrity).unwrap();
    let (server, handled) = server(&key);
    let p = proxy(server.addr(), tamper_request_2);
    let conn = Connection::connect(Nid::tcp(p.addr), config(Some(&key))).unwrap();
    for i in 1..=3u8 {
        let reply = conn.call(request(&[i; 64], None)).unwrap();
        assert_eq!(reply.body, vec![i; 64], "the request ran as sent");
    }
    assert_eq!(
        stat(&server, "frames_unauthentic"),
        1,
        "the changed frame was caught"
    );
    assert_eq!(handled.load(Ordering::Relaxed), 3, "and never handled");
}

/// Echoes, and serves any requests together; a request whose body is `b"gate"` waits until
/// the gate opens (so requests queue behind it on the service's one thread).
struct GatedEcho {
    gate: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    at_gate: AtomicU64,
}

impl Handler for GatedEcho {
    fn handle(&self, req: &Incoming) -> Outgoing {
        if req.body == b"gate" {
            self.at_gate.fetch_add(1, Ordering::SeqCst);
            let mut open = self.gate.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }
        Echo(Arc::new(AtomicU64::new(0))).handle(req)
    }

    fn batchable(&self, _req: &Incoming) -> bool {
        true
    }
}

/// Requests that queued behind a busy service thread are served in one turn and their
/// replies written back together (one vectored write of several sealed frames): at every
/// security level each reply reaches its caller whole, bulk and all, and the frames stay
/// authentic in the order they were sealed.
#[test]
fn replies_of_a_batch_go_back_together_at_every_level() {
    for level in Level::ALL {
        let key = FsKey::generate("batfs", level).unwrap();
        let server = bind(&key);
        let handler = Arc::new(GatedEcho {
            gate: std::sync::Mutex::new(false),
            opened: std::sync::Condvar::new(),
            at_gate: AtomicU64::new(0),
        });
        let pool = ServicePool::start(ServiceConfig::unpinned("gated", 1, 1, 64), handler.clone());
        server.add_service(Service::Oss, pool.clone());
        let conn = Connection::connect(Nid::tcp(server.addr()), config(Some(&key))).unwrap();
        let first = conn.start(request(b"gate", None)).unwrap();
        wait_for("the first request at the gate", || {
            handler.at_gate.load(Ordering::SeqCst) == 1
        });
        let pending: Vec<_> = (0..7u8)
            .map(|i| {
                let bulk = (i % 2 == 0).then(|| vec![i; 64 << 10]);
                conn.start(request(&[i; 100], bulk)).unwrap()
            })
            .collect();
        let queued = || pool.partition_stats()[0].queued.load(Ordering::Relaxed);
        wait_for("seven requests queued", || queued() == 7);
        *handler.gate.lock().unwrap() = true;
        handler.opened.notify_all();
        assert_eq!(first.wait().unwrap().body, b"gate", "{level}");
        for (i, p) in pending.into_iter().enumerate() {
            let reply = p.wait().unwrap();
            assert_eq!(reply.body, vec![i as u8; 100], "{level}");
            match reply.bulk {
                Some(b) => assert!(b.len() == 64 << 10 && b.iter().all(|&x| x == i as u8)),
                None => assert!(i % 2 == 1, "{level}: bulk came back"),
            }
        }
        let stats = &pool.partition_stats()[0];
        assert_eq!(stats.batches.load(Ordering::Relaxed), 1, "{level}");
        assert_eq!(stats.batched.load(Ordering::Relaxed), 7, "{level}");
        assert_eq!(stat(&server, "frames_unauthentic"), 0, "{level}");
        server.shutdown();
    }
}

/// A TCP connection to `to` from source address `from` (another host on loopback).
fn connect_from(from: &str, to: std::net::SocketAddr) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let src: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    rustix::net::bind(&fd, &src).unwrap();
    rustix::net::connect(&fd, &to).unwrap();
    TcpStream::from(fd)
}

#[test]
fn silent_connections_from_one_host_leave_handshakes_for_the_others() {
    use nacre_net::sec::{HANDSHAKES_MAX, HANDSHAKES_PER_ADDR_MAX};
    let key = FsKey::generate("secfs", Level::Integrity).unwrap();
    let (server, handled) = server(&key);
    // One host opens more silent connections than the server runs handshakes at once.
    let flood = HANDSHAKES_MAX + 8;
    let silent: Vec<TcpStream> = (0..flood)
        .map(|_| connect_from("127.0.0.2", server.addr()))
        .collect();
    let refused = (flood - HANDSHAKES_PER_ADDR_MAX) as u64;
    wait_for(
        "the flood's connections past its address's slots refused",
        || stat(&server, "handshakes_busy") >= refused,
    );
    // Another host's client is served at once, while the flood's handshakes still wait.
    let conn = Connection::connect(Nid::tcp(server.addr()), config(Some(&key))).unwrap();
    assert_eq!(conn.call(request(b"hello", None)).unwrap().body, b"hello");
    assert_eq!(handled.load(Ordering::Relaxed), 1);
    assert_eq!(
        stat(&server, "handshakes_busy"),
        refused,
        "counted, each once"
    );
    drop(silent);
}
