//! Bodies of object requests and replies.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_wire::oss::{runs_valid, OssCall, OssReply, OssRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(call) = nacre_wire::decode_body::<OssCall>(data) {
        let _ = nacre_wire::encode_body(&call);
        let _ = call.req.opcode();
        let _ = call.req.key_object();
        let _ = call.req.is_kept_write();
        // A write of many runs is judged against its bulk's length before anything else:
        // whatever the runs say, judging them never overflows or panics.
        if let OssRequest::WriteRuns { runs, .. } = &call.req {
            let sum = runs.iter().map(|r| u64::from(r.len)).fold(0u64, u64::saturating_add);
            for bulk in [0, sum, sum.saturating_add(1), u64::MAX] {
                let _ = runs_valid(runs, bulk);
            }
        }
    }
    if let Ok(reply) = nacre_wire::decode_body::<OssReply>(data) {
        let _ = nacre_wire::encode_body(&reply);
    }
});
