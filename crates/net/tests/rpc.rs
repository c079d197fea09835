//! RPCs over real TCP sockets and the in-process transport.

use nacre_net::{
    Connection, Handler, Incoming, NetConfig, Outgoing, Server, ServiceConfig, ServicePool,
};
use nacre_types::{AlignedBuf, Status};
use nacre_wire::Service;
use std::io::Write;
use std::sync::Arc;

struct Echo;

impl Handler for Echo {
    fn handle(&self, req: &Incoming) -> Outgoing {
        if req.body == b"fail" {
            return Outgoing::error(Status::NoSpc);
        }
        let bulk = req.bulk.as_ref().map(|b| AlignedBuf::copy_from(b));
        Outgoing {
            status: Status::Ok,
            body: req.body.clone(),
            bulk,
        }
    }
}

fn echo_server() -> Arc<Server> {
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), 16 << 20).unwrap();
    let config = ServiceConfig::unpinned("echo", 2, 2, 64);
    server.add_service(Service::Oss, ServicePool::start(config, Arc::new(Echo)));
    server
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

fn tcp_connection(server: &Server) -> Arc<Connection> {
    // Force TCP: the in-process registry would otherwise short-cut.
    let nid = nacre_types::Nid::tcp(server.addr());
    nacre_net::local::unregister(server.addr());
    Connection::connect(nid, NetConfig::default()).unwrap()
}

#[test]
fn many_rpcs_in_flight_over_tcp() {
    let server = echo_server();
    let conn = tcp_connection(&server);
    // Exactly max_rpcs_in_flight outstanding at once from one thread.
    let pending: Vec<_> = (0..8u8)
        .map(|i| conn.start(request(&[i], Some(vec![i; 1 << 20]))).unwrap())
        .collect();
    for (i, p) in pending.into_iter().enumerate() {
        let reply = p.wait().unwrap();
        assert_eq!(reply.body, vec![i as u8]);
        assert!(reply.bulk.unwrap().iter().all(|&b| b == i as u8));
    }
    let err = conn.call(request(b"fail", None)).unwrap();
    assert_eq!(err.status(), Status::NoSpc);
}

#[test]
fn in_process_transport_is_used_when_server_is_local() {
    let server = echo_server();
    let conn =
        Connection::connect(nacre_types::Nid::tcp(server.addr()), NetConfig::default()).unwrap();
    let reply = conn.call(request(b"hi", Some(vec![7; 4096]))).unwrap();
    assert_eq!(reply.body, b"hi");
    assert_eq!(reply.bulk.unwrap()[0], 7);
}

#[test]
fn malformed_frame_drops_connection_but_server_keeps_serving() {
    let server = echo_server();
    let mut raw = std::net::TcpStream::connect(server.addr()).unwrap();
    raw.write_all(&[0xde; 200]).unwrap();
    let mut buf = [0u8; 16];
    use std::io::Read;
    let n = raw.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "server must close a connection that sent garbage");
    let conn = tcp_connection(&server);
    assert_eq!(conn.call(request(b"ok", None)).unwrap().body, b"ok");
}

#[test]
fn unreachable_server_fails_within_deadline() {
    let config = NetConfig {
        connect_timeout_ms: 500,
        ..NetConfig::default()
    };
    let start = std::time::Instant::now();
    let nid = "127.0.0.1:1@tcp".parse().unwrap();
    assert!(Connection::connect(nid, config).is_err());
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

/// Sleeps `body[0]` milliseconds, then echoes.
struct Slow;

impl Handler for Slow {
    fn handle(&self, req: &Incoming) -> Outgoing {
        std::thread::sleep(std::time::Duration::from_millis(u64::from(req.body[0])));
        Outgoing::ok(req.body.clone())
    }
}

#[test]
fn partition_counters_show_queueing_and_thread_use() {
    use std::sync::atomic::Ordering::Relaxed;
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
    let config = ServiceConfig::unpinned("slow", 1, 1, 64);
    let pool = ServicePool::start(config, Arc::new(Slow));
    server.add_service(Service::Oss, pool.clone());
    let conn = tcp_connection(&server);
    // Eight 20 ms requests at once on one thread: seven wait in the queue.
    let pending: Vec<_> = (0..8)
        .map(|_| conn.start(request(&[20], None)).unwrap())
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
    let cpt = &pool.partition_stats()[0];
    assert_eq!(cpt.threads.load(Relaxed), 1);
    assert_eq!(cpt.requests.load(Relaxed), 8);
    assert_eq!(cpt.busy.load(Relaxed), 0);
    assert_eq!(cpt.queued.load(Relaxed), 0);
    assert!(cpt.queued_max.load(Relaxed) >= 2, "{cpt:?}");
    assert!(cpt.busy_ns.load(Relaxed) >= 8 * 20_000_000, "{cpt:?}");
    // The last request waited behind the others: total wait is at least 20+40+...ms
    // for some of them.
    assert!(cpt.wait_ns.load(Relaxed) >= 100_000_000, "{cpt:?}");
    assert_eq!(pool.requests_inline.load(Relaxed), 0);
    cpt.clear();
    assert_eq!(cpt.requests.load(Relaxed), 0);
}
