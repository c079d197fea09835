//! Protocol versions over real sockets (docs/formats.md, "Negotiation"): a server answers a
//! request of a version it does not speak with its range and keeps the connection; a client
//! answered so names both ranges.

use nacre_net::rpc::RpcError;
use nacre_net::{
    Connection, Handler, Incoming, NetConfig, Outgoing, Server, ServiceConfig, ServicePool,
};
use nacre_types::Status;
use nacre_wire::header::{FLAG_REPLY, HEADER_BYTES};
use nacre_wire::version::Range;
use nacre_wire::{Header, Service, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

struct Echo;

impl Handler for Echo {
    fn handle(&self, req: &Incoming) -> Outgoing {
        Outgoing::ok(req.body.clone())
    }
}

/// Writes one request frame of protocol `version`, with `bulk`.
fn send(s: &mut TcpStream, version: u16, xid: u64, body: &[u8], bulk: &[u8]) {
    let mut h = Header::request(0x0301, 0, xid);
    h.version = version;
    h.seal(body, (!bulk.is_empty()).then_some(bulk), true);
    s.write_all(&h.encode()).unwrap();
    s.write_all(body).unwrap();
    s.write_all(bulk).unwrap();
}

/// Reads one whole frame, of any version.
fn recv(s: &mut TcpStream) -> (Header, Vec<u8>) {
    let mut head = [0u8; HEADER_BYTES];
    s.read_exact(&mut head).unwrap();
    let h = Header::decode_any_version(&head, u32::MAX).unwrap();
    let mut body = vec![0; h.body_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut bulk = vec![0; h.bulk_len as usize];
    s.read_exact(&mut bulk).unwrap();
    (h, body)
}

#[test]
fn a_request_of_another_version_is_answered_with_the_range_and_the_connection_stays() {
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), 16 << 20).unwrap();
    let config = ServiceConfig::unpinned("echo", 1, 1, 16);
    server.add_service(Service::Oss, ServicePool::start(config, Arc::new(Echo)));
    let mut s = TcpStream::connect(server.addr()).unwrap();
    let mut xid = 0;
    for version in [PROTOCOL_VERSION + 1, PROTOCOL_VERSION_MIN - 1, u16::MAX] {
        xid += 1;
        // A body and bulk the server cannot decode: read whole all the same.
        send(
            &mut s,
            version,
            xid,
            b"a body of another version",
            &[9u8; 8192],
        );
        let (h, body) = recv(&mut s);
        assert_eq!(h.flags & FLAG_REPLY, FLAG_REPLY);
        assert_eq!(
            (h.version, h.xid),
            (version, xid),
            "answered in the request's version"
        );
        assert_eq!(h.status, Status::Proto.code());
        assert_eq!(Range::decode(&body), Some(Range::OURS));
        assert_eq!(body, Range::OURS.encode());
    }
    // The same connection goes on in this side's version.
    send(&mut s, PROTOCOL_VERSION, 99, b"hello", &[]);
    let (h, body) = recv(&mut s);
    assert_eq!(
        (h.version, h.status, body),
        (PROTOCOL_VERSION, 0, b"hello".to_vec())
    );
    let stats = server.net_stats();
    assert_eq!(stats.requests_refused_version.load(Ordering::Relaxed), 3);
    assert_eq!(stats.frames_bad.load(Ordering::Relaxed), 0);
}

#[test]
fn a_client_answered_with_another_range_names_both() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let theirs = Range {
        oldest: PROTOCOL_VERSION + 1,
        newest: PROTOCOL_VERSION + 2,
    };
    // A server of a later release: it answers every request as this one answers a request
    // of a version it does not speak.
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || loop {
                let mut head = [0u8; HEADER_BYTES];
                if s.read_exact(&mut head).is_err() {
                    return;
                }
                let h = Header::decode_any_version(&head, u32::MAX).unwrap();
                let mut rest = vec![0; (h.body_len + h.bulk_len) as usize];
                s.read_exact(&mut rest).unwrap();
                let mut r = h;
                r.flags = FLAG_REPLY;
                r.status = Status::Proto.code();
                let body = theirs.encode();
                r.seal(&body, None, false);
                let _ = s.write_all(&r.encode());
                let _ = s.write_all(&body);
            });
        }
    });
    let conn = Connection::connect(nacre_types::Nid::tcp(addr), NetConfig::default()).unwrap();
    let e = nacre_net::rpc::call::<_, Vec<u8>>(&conn, 0x0301, 0, &b"hi".to_vec()).unwrap_err();
    assert!(
        matches!(e, RpcError::Protocol { ours, theirs: t } if ours == Range::OURS && t == theirs),
        "{e:?}"
    );
    assert_eq!(e.status(), Status::Proto);
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "the server speaks protocol {} to {}, this side protocol {PROTOCOL_VERSION}",
            theirs.oldest, theirs.newest
        )),
        "{text}"
    );
}
