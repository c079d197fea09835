//! Frames as a server or client reads them off a socket: header, body and bulk checks.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    // Several frames may follow each other on one stream.
    for _ in 0..4 {
        match nacre_net::frame::read_frame(&mut input, nacre_types::limits::BULK_BYTES_MAX) {
            Ok(Some(_)) => continue,
            Ok(None) | Err(_) => break,
        }
    }
    if data.len() >= nacre_wire::HEADER_BYTES {
        let mut h = [0u8; nacre_wire::HEADER_BYTES];
        h.copy_from_slice(&data[..nacre_wire::HEADER_BYTES]);
        if let Ok(header) = nacre_wire::Header::decode(&h, u32::MAX) {
            let rest = &data[nacre_wire::HEADER_BYTES..];
            let _ = header.check_body(rest);
            let _ = header.check_bulk(rest);
        }
    }
});
