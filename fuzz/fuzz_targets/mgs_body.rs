//! Bodies of configuration requests and replies, the failover service's, the data mover's,
//! the node API's (requests from local applications, replies to them), and the network
//! self-test's.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_wire::mgs::{MgsReply, MgsRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = nacre_wire::decode_body::<MgsRequest>(data) {
        let _ = (nacre_wire::encode_body(&r), r.fsname().map(str::len));
    }
    if let Ok(r) = nacre_wire::decode_body::<nacre_wire::api::ApiRequest>(data) {
        let _ = (r.opcode(), r.paths().len(), nacre_wire::encode_body(&r));
    }
    let _ = nacre_wire::decode_body::<nacre_wire::api::ApiReply>(data);
    if let Ok(r) = nacre_wire::decode_body::<MgsReply>(data) {
        let _ = nacre_wire::encode_body(&r);
    }
    let _ = nacre_wire::decode_body::<nacre_wire::selftest::BrwRead>(data);
    if let Ok(r) = nacre_wire::decode_body::<nacre_wire::failover::FailoverRequest>(data) {
        let _ = (r.opcode(), r.target().len());
    }
    let _ = nacre_wire::decode_body::<nacre_wire::failover::FailoverReply>(data);
    if let Ok(r) = nacre_wire::decode_body::<nacre_wire::mover::MoverRequest>(data) {
        let _ = (r.opcode(), r.check());
    }
    if let Ok(r) = nacre_wire::decode_body::<nacre_wire::mover::MoverReply>(data) {
        let _ = r.check();
    }
});
