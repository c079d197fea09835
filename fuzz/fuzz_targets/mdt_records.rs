//! Records an MDT reads back from its key-value store.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_mdstore::records::{
    decode_record, inode_version, parse_destroy_key, DirentRecord, InodeRecord, IntentRecord,
    RelayoutRecord, SavedReply,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode_record::<InodeRecord>(data);
    let _ = decode_record::<DirentRecord>(data);
    let _ = decode_record::<IntentRecord>(data);
    let _ = decode_record::<RelayoutRecord>(data);
    let _ = decode_record::<SavedReply>(data);
    let _ = decode_record::<nacre_types::dirstripe::DirStripe>(data);
    let _ = decode_record::<nacre_types::dirstripe::DirDefault>(data);
    let _ = inode_version(data);
    let _ = parse_destroy_key(data);
    // Changelog records and consumers (crates/mds/src/changelog.rs).
    let _ = decode_record::<nacre_wire::mds::changelog::ChangelogRecord>(data);
    let _ = nacre_mds::changelog::decode_user(data);
});
