//! A peer that went away is an error for the writer, never a SIGPIPE: short commands and
//! applications linking the client run with SIGPIPE at its default (death). This test binary
//! sets that default for its whole process, as they do.

use nacre_net::frame::{write_frame, NoSigPipe};
use nacre_wire::Header;
use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};

#[test]
fn frames_to_a_closed_peer_fail_with_epipe_and_the_writer_lives() {
    // SAFETY: sets one signal's disposition in this test process, before any write.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    drop(listener.accept().unwrap()); // the peer is gone (as a killed server's socket)
    let body = vec![1u8; 4096];
    let bulk = vec![2u8; 1 << 20];
    let mut errors = Vec::new();
    // The first write may still be taken (the peer answers it with a reset); each later one
    // fails. A BrokenPipe is the write that raises SIGPIPE without MSG_NOSIGNAL.
    for xid in 1..=64 {
        let h = Header::request(0x0301, 0, xid);
        if let Err(e) = write_frame(&mut NoSigPipe(&stream), &h, &body, Some(&bulk)) {
            errors.push(e.kind());
            if e.kind() == ErrorKind::BrokenPipe {
                break;
            }
        }
    }
    assert_eq!(
        errors.last(),
        Some(&ErrorKind::BrokenPipe),
        "writes to a closed peer: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|k| matches!(k, ErrorKind::BrokenPipe | ErrorKind::ConnectionReset)),
        "{errors:?}"
    );
}
