//! Bodies of object requests and replies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_wire::oss::{OssCall, OssReply};

fuzz_target!(|data: &[u8]| {
    if let Ok(call) = nacre_wire::decode_body::<OssCall>(data) {
        let _ = nacre_wire::encode_body(&call);
        let _ = call.req.opcode();
        let _ = call.req.key_object();
    }
    if let Ok(reply) = nacre_wire::decode_body::<OssReply>(data) {
        let _ = nacre_wire::encode_body(&reply);
    }
});
