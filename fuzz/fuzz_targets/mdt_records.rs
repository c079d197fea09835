//! Records an MDT reads back from its key-value store.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nacre_mds::records::{
        decode, decode_saved, inode_version, parse_destroy_key, DirentRecord, InodeRecord,
    IntentRecord, SavedReply,
};

fuzz_target!(|data: &[u8]| {
    let _ = decode::<InodeRecord>(data);
    let _ = decode::<DirentRecord>(data);
    let _ = decode::<IntentRecord>(data);
        let _ = decode::<SavedReply>(data);
    let _ = decode_saved(data);
    let _ = inode_version(data);
    let _ = parse_destroy_key(data);
    // Changelog records and consumers (crates/mds/src/changelog.rs).
    let _ = decode::<nacre_wire::mds::changelog::ChangelogRecord>(data);
    let _ = nacre_mds::changelog::decode_user(data);
});
