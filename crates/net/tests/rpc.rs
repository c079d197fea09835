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
    let config = ServiceConfig {
        name: "echo".into(),
        partitions: 2,
        threads_per_partition: 2,
        queue_depth: 64,
    };
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
