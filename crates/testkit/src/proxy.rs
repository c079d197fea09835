//! A TCP proxy between a client and a server that records what the client sends and may
//! change its frames on the way (tests of the shared-key handshake and of frame integrity):
//! the client's handshake bytes pass as they are, then each frame (header, body, trailer,
//! bulk) is handed to a tamper function that may change header and body.

use nacre_wire::{Header, HEADER_BYTES};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// Changes a frame the client sends (header, and body bytes in place) before it goes on.
pub type Tamper = fn(&mut Header, &mut [u8]);

/// A running proxy.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    /// Every byte clients sent through it, in order.
    pub recorded: Arc<Mutex<Vec<u8>>>,
}

/// Bytes a client holding a server key sends in its handshake for a file system named
/// `fsname`: HELLO, then (after the server's CHALLENGE) RESPONSE.
fn client_handshake_bytes(fsname: &str) -> [usize; 2] {
    let hello = nacre_net::sec::handshake::Hello {
        fsname: fsname.to_string(),
        client: nacre_net::sec::Identity {
            role: nacre_net::sec::Role::Server,
            name: String::new(),
            nodemap: None,
        },
        master: None,
        nonce: [0; 32],
    };
    [hello.encode().len(), 8 + 32]
}

/// Starts a proxy to `upstream` for clients of file system `fsname` whose frames carry
/// `trailer` bytes of tags (16 at the integrity levels).
pub fn start(upstream: SocketAddr, fsname: &str, trailer: usize, tamper: Tamper) -> Proxy {
    let handshake = client_handshake_bytes(fsname);
    let l = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
    let addr = l.local_addr().expect("proxy address");
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let rec = recorded.clone();
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(upstream) else {
                return;
            };
            let (Ok(mut c2), Ok(mut s2)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s2, &mut c2);
                let _ = c2.shutdown(std::net::Shutdown::Both);
            });
            let rec = rec.clone();
            std::thread::spawn(move || forward(client, server, handshake, trailer, tamper, &rec));
        }
    });
    Proxy { addr, recorded }
}

fn forward(
    mut client: TcpStream,
    mut server: TcpStream,
    handshake: [usize; 2],
    trailer: usize,
    tamper: Tamper,
    rec: &Mutex<Vec<u8>>,
) {
    for n in handshake {
        let mut hs = vec![0u8; n];
        if client.read_exact(&mut hs).is_err() {
            return;
        }
        rec.lock().expect("record").extend_from_slice(&hs);
        if server.write_all(&hs).is_err() {
            return;
        }
    }
    loop {
        let mut head = [0u8; HEADER_BYTES];
        if client.read_exact(&mut head).is_err() {
            break;
        }
        let Ok(mut h) = Header::decode(&head, u32::MAX) else {
            break;
        };
        let mut rest = vec![0u8; (h.body_len + h.bulk_len) as usize + trailer];
        if client.read_exact(&mut rest).is_err() {
            break;
        }
        {
            let mut r = rec.lock().expect("record");
            r.extend_from_slice(&head);
            r.extend_from_slice(&rest);
        }
        let body_len = h.body_len as usize;
        let mut body = rest[..body_len].to_vec();
        tamper(&mut h, &mut body);
        let mut out = h.encode().to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(&rest[body_len..]);
        if server.write_all(&out).is_err() {
            break;
        }
    }
    let _ = server.shutdown(std::net::Shutdown::Both);
}
