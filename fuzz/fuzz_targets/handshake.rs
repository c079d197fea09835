//! The messages of the shared-key handshake a server reads before it knows who its peer is
//! (HELLO: the claimed file system, role, key name and nodemap), and the CHALLENGE a client
//! reads back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_net::sec::handshake::{Challenge, Hello};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Hello::decode(data) {
        // What decodes encodes back to the same bytes.
        assert_eq!(h.encode(), data);
    }
    let _ = Challenge::decode(data);
    if data.len() >= 2 {
        let need = nacre_wire::roles::need_of(u16::from_le_bytes([data[0], data[1]]));
        let _ = (need.allows(nacre_wire::roles::Role::Client), need.name());
    }
});
