//! Bodies of metadata requests and replies (client to MDS, MDS to MDS, MDS to client).
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_wire::mds::{MdsCall, MdsReply};

fuzz_target!(|data: &[u8]| {
    if let Ok(call) = nacre_wire::decode_body::<MdsCall>(data) {
        // Whatever decodes re-encodes, and the server's cheap inspections hold.
        let _ = nacre_wire::encode_body(&call);
        let _ = call.op.opcode();
        let _ = call.op.key_fid();
    }
    if let Ok(reply) = nacre_wire::decode_body::<MdsReply>(data) {
        // The client's checks of a reply (directory pages, readdirplus entries) hold.
        let _ = reply.check();
        let _ = nacre_wire::encode_body(&reply);
    }
});
