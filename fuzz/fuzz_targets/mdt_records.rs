//! Records an MDT reads back from its key-value store.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_mds::records::{
    decode, parse_destroy_key, DirentRecord, InodeRecord, IntentRecord, SavedReply,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<InodeRecord>(data);
    let _ = decode::<DirentRecord>(data);
    let _ = decode::<IntentRecord>(data);
    let _ = decode::<SavedReply>(data);
    let _ = parse_destroy_key(data);
});
