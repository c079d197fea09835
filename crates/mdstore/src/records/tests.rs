//! Stored samples of every MDT record (docs/formats.md, rule 6): a fixed value of each type
//! and its bytes at every version it reads, written out by hand from postcard's format
//! (integers as varints, signed ones zigzagged; byte strings and sequences behind their
//! length; `Option` and enum variants behind their index; `[u8; N]` as its N bytes). A change
//! of a type without a new version fails here (the encoder no longer writes the current
//! sample), as does an old sample that stops decoding or a newer version that is not refused.
//! The changelog consumer record's sample is in changelog_state.rs.

use super::inode::{
    AttrNoProject, INODE_RECORD_VERSION_NO_GENERATIONS, INODE_RECORD_VERSION_NO_POOLS,
    INODE_RECORD_VERSION_NO_PROJECTS,
};
use super::*;
use nacre_types::dirstripe::DirHash;
use nacre_types::fid::FID_SEQ_NORMAL;
use nacre_types::{PoolName, Status, StripeObject, TimeSpec};
use nacre_wire::mds::changelog::{RecordKind, RenameSource, FLAG_OVERWRITE};
use nacre_wire::mds::RemoteUpdate;
use proptest::prelude::*;
use std::fmt::Debug;

/// The bytes a hex string spells.
fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `stored` with its version byte set to `version`.
fn with_version(stored: &[u8], version: u8) -> Vec<u8> {
    let mut b = stored.to_vec();
    b[0] = version;
    b
}

/// `stored` (a record of `T`) given any version byte newer than `T` reads is refused as too
/// new, naming `T` and both versions.
fn refuses_newer<T: Record + Debug>(stored: &[u8]) {
    for found in [T::VERSION + 1, u8::MAX] {
        assert_eq!(
            decode_record::<T>(&with_version(stored, found)).unwrap_err(),
            RecordError::TooNew {
                what: T::NAME,
                found,
                newest: T::VERSION,
            }
        );
    }
}

/// `stored` is the current version's sample of `sample`: the encoder writes exactly it, it
/// decodes to `sample`, and a newer version is refused.
fn current<T: PlainRecord + PartialEq + Debug>(sample: &T, stored: &str) {
    assert_eq!(
        encode_record(sample),
        hex(stored),
        "{}: its encoding changed without a new version",
        T::NAME
    );
    assert_eq!(
        &decode_record::<T>(&hex(stored)).unwrap(),
        sample,
        "{}",
        T::NAME
    );
    refuses_newer::<T>(&hex(stored));
}

/// A 1 MiB layout of one object (OST 2, object 9) in pool `flash`, generation 3: one
/// component over the whole file.
fn layout() -> Layout {
    Layout {
        generation: 3,
        ..Layout::raid0(
            1 << 20,
            vec![StripeObject {
                ost: 2,
                object: ObjectId { seq: 0, id: 9 },
            }],
            PoolName::new("flash").unwrap(),
        )
    }
}

const DIRENT_V1: &str = "018088808020070001";
const DIRSTRIPE_V1: &str = "010102808880802001008088c080200100";
const DIRDEFAULT_V1: &str = "0101030006";
// Version 2: the layout's one component (start 0, end u64::MAX, 1 MiB, count 1, start OST
// -1, pool, one object), then its generation.
const RELAYOUT_V2: &str =
    "020100ffffffffffffffffff018080400201666c617368000000000000000000000001020009030201";
const RELAYOUT_V1: &str = "0180804001020009666c6173680000000000000000000000030201";
// Version 2: as version 1 (a `DestroyDir`, no shards: nothing in it changed shape).
const INTENT_V2: &str =
    "028088808020020001018088c080200500878080802001000164011111111111111111111111111111111105000000";
const INTENT_V1: &str =
    "018088808020020001018088c080200500878080802001000164011111111111111111111111111111111105000000";
// A `CreateDir` with a default for new files, and a shard with the same default: version 1
// stored plain stripe requests, version 2 stores layout requests of one component to the end
// of the file (each a `Some` holding its 1 component: end u64::MAX, then the stripe request).
const INTENT_CREATE_DIR_V2: &str = concat!(
    "02",
    "8088c080200300", // key: FID_SEQ_NORMAL + 2^20, oid 3, ver 0
    "01",             // mdt 1
    "00",             // update: CreateDir
    "8088c08020030001ed03000002000080c49fd50c0080c49fd50c0080c49fd50c00000000", // attr
    "87808080200100", // parent: the root
    "0101",           // dir_default: Some, 1 component
    "ffffffffffffffffff01", // end u64::MAX
    "048080040100000000000000000000000000000000", // 2 stripes, 64 KiB, start -1, no pool
    "00",             // stripe: None
    "0101030006",     // default: Some(-1, 3, Fnv1a64, 3)
    "87808080200100", // parent: the root
    "0164",           // name "d"
    "00",             // reply_to: None
    "00",             // attr: None
    "0101",           // shards: 1, its MDT 1
    "8088c08020030001ed03000002000080c49fd50c0080c49fd50c0080c49fd50c00000000", // its attr
    "0101ffffffffffffffffff01048080040100000000000000000000000000000000", // as dir_default
    "00",             // its subdirectory default: None
    "00",             // migrate_to: None
);
const INTENT_CREATE_DIR_V1: &str = concat!(
    "01",
    "8088c080200300", // key
    "01",             // mdt 1
    "00",             // update: CreateDir
    "8088c08020030001ed03000002000080c49fd50c0080c49fd50c0080c49fd50c00000000", // attr
    "87808080200100", // parent
    "01048080040100000000000000000000000000000000", // dir_default: Some(StripeSpec)
    "00",             // stripe: None
    "0101030006",     // default
    "87808080200100", // parent
    "0164",           // name "d"
    "00",             // reply_to: None
    "00",             // attr: None
    "0101",           // shards: 1, its MDT 1
    "8088c08020030001ed03000002000080c49fd50c0080c49fd50c0080c49fd50c00000000", // its attr
    "01048080040100000000000000000000000000000000", // Some(StripeSpec)
    "00",             // its subdirectory default: None
    "00",             // migrate_to: None
);
const CHANGELOG_V1: &str = "010c070480c49fd50c058088808020090087808080200100036e6577018088808020080087808080200100036f6c6400e807e807026a31";

fn dirent() -> DirentRecord {
    DirentRecord {
        fid: Fid::new(FID_SEQ_NORMAL, 7),
        kind: FileKind::Directory,
    }
}

#[test]
fn dirents_read_their_stored_sample() {
    current(&dirent(), DIRENT_V1);
}

#[test]
fn directory_stripes_and_defaults_read_their_stored_samples() {
    let stripe = DirStripe {
        hash: DirHash::AllChar,
        shards: vec![
            Fid::new(FID_SEQ_NORMAL, 1),
            Fid::new(FID_SEQ_NORMAL + (1 << 20), 1),
        ],
    };
    current(&stripe, DIRSTRIPE_V1);
    let default = DirDefault {
        count: -1,
        start: 3,
        hash: DirHash::Fnv1a64,
        max_inherit: 3,
    };
    current(&default, DIRDEFAULT_V1);
}

#[test]
fn relayouts_read_their_stored_sample() {
    let rec = RelayoutRecord {
        new: layout(),
        old_generation: 2,
        fenced: true,
    };
    current(&rec, RELAYOUT_V2);
    // Version 1: a plain layout, read as one component over the whole file.
    assert_eq!(
        decode_record::<RelayoutRecord>(&hex(RELAYOUT_V1)).unwrap(),
        rec
    );
}

#[test]
fn intents_read_their_stored_sample() {
    let rec = IntentRecord {
        key: Fid::new(FID_SEQ_NORMAL, 2),
        mdt: 1,
        update: RemoteUpdate::DestroyDir {
            fid: Fid::new(FID_SEQ_NORMAL + (1 << 20), 5),
        },
        parent: Fid::ROOT,
        name: b"d".to_vec(),
        reply_to: Some(([0x11; 16], 5)),
        attr: None,
        shards: Vec::new(),
        migrate_to: None,
    };
    current(&rec, INTENT_V2);
    // Version 1: the same record (nothing in it has a layout or a stripe request).
    assert_eq!(decode_record::<IntentRecord>(&hex(INTENT_V1)).unwrap(), rec);
}

#[test]
fn intents_of_version_1_read_stripe_requests_as_one_component() {
    // A new directory of MDT 1 (mode 0755, two links) with a default for its new files, and
    // a shard with the same default: version 1 stored plain stripe requests.
    let t = TimeSpec {
        sec: 1_700_000_000,
        nsec: 0,
    };
    let dir = Attr {
        fid: Fid::new(FID_SEQ_NORMAL + (1 << 20), 3),
        kind: FileKind::Directory,
        perm: 0o755,
        uid: 0,
        gid: 0,
        nlink: 2,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        rdev: 0,
        project: 0,
        proj_inherit: false,
    };
    let files = LayoutSpec::plain(nacre_types::layout::StripeSpec {
        stripe_count: 2,
        stripe_size: 65536,
        start_ost: -1,
        pool: PoolName::NONE,
    });
    let rec = IntentRecord {
        key: dir.fid,
        mdt: 1,
        update: RemoteUpdate::CreateDir {
            attr: dir.clone(),
            parent: Fid::ROOT,
            dir_default: Some(files.clone()),
            stripe: None,
            default: Some(DirDefault {
                count: -1,
                start: 3,
                hash: DirHash::Fnv1a64,
                max_inherit: 3,
            }),
        },
        parent: Fid::ROOT,
        name: b"d".to_vec(),
        reply_to: None,
        attr: None,
        shards: vec![(1, dir, Some(files), None)],
        migrate_to: None,
    };
    current(&rec, INTENT_CREATE_DIR_V2);
    assert_eq!(
        decode_record::<IntentRecord>(&hex(INTENT_CREATE_DIR_V1)).unwrap(),
        rec
    );
    // Cut short anywhere: damage, never a panic.
    let bytes = hex(INTENT_CREATE_DIR_V1);
    for n in 0..bytes.len() {
        assert!(
            matches!(
                decode_record::<IntentRecord>(&bytes[..n]),
                Err(RecordError::Damaged { .. })
            ),
            "{n} bytes"
        );
    }
}

#[test]
fn changelog_records_read_their_stored_sample() {
    let rec = ChangelogRecord {
        index: 12,
        kind: RecordKind::Rename,
        flags: FLAG_OVERWRITE,
        time: TimeSpec {
            sec: 1_700_000_000,
            nsec: 5,
        },
        target: Fid::new(FID_SEQ_NORMAL, 9),
        parent: Fid::ROOT,
        name: b"new".to_vec(),
        source: Some(RenameSource {
            fid: Fid::new(FID_SEQ_NORMAL, 8),
            parent: Fid::ROOT,
            name: b"old".to_vec(),
        }),
        xattr: Vec::new(),
        uid: 1000,
        gid: 1000,
        jobid: "j1".to_string(),
    };
    current(&rec, CHANGELOG_V1);
}

/// A regular file of project 7 with [`layout`], stored at inode version 42.
fn inode() -> InodeRecord {
    let t = TimeSpec {
        sec: 1_700_000_000,
        nsec: 0,
    };
    InodeRecord {
        attr: Attr {
            fid: Fid::new(FID_SEQ_NORMAL, 7),
            kind: FileKind::Regular,
            perm: 0o644,
            uid: 1000,
            gid: 1000,
            nlink: 1,
            size: 5000,
            blocks: 16,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
            project: 7,
            proj_inherit: false,
        },
        layout: Some(layout()),
        dir_default: None,
        symlink: None,
        parent: None,
        orphan: false,
    }
}

// Version 7: the layout as one component (as RELAYOUT_V2's), then its generation.
const INODE_V7: &str = "07000000000000002a8088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c00000700010100ffffffffffffffffff018080400201666c6173680000000000000000000000010200090300000000";
const INODE_V6: &str = "06000000000000002a8088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c000007000180804001020009666c61736800000000000000000000000300000000";
const INODE_V5: &str = "05000000000000002a8088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c00000180804001020009666c61736800000000000000000000000300000000";
const INODE_V4: &str = "04000000000000002a8088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c00000180804001020009666c617368000000000000000000000000000000";
const INODE_V3: &str = "03000000000000002a8088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c0000018080400102000900000000";
const INODE_V1: &str = "018088808020070000a403e807e8070188271080c49fd50c0080c49fd50c0080c49fd50c0000018080400102000900000000";

#[test]
fn inodes_read_their_stored_samples_of_every_version() {
    let now = inode();
    assert_eq!(encode_inode(&now, 42), hex(INODE_V7), "encoding changed");
    // Version 5: no project (0, not inherited).
    let mut v5 = now.clone();
    v5.attr.project = 0;
    // Version 4: nor a layout generation (0).
    let mut v4 = v5.clone();
    v4.layout.as_mut().unwrap().generation = 0;
    // Versions 3 and 1: nor a pool.
    let mut v3 = v4.clone();
    v3.layout.as_mut().unwrap().components[0].pool = PoolName::NONE;
    for (stored, want, version) in [
        (INODE_V7, &now, 42),
        (INODE_V6, &now, 42),
        (INODE_V5, &v5, 42),
        (INODE_V4, &v4, 42),
        (INODE_V3, &v3, 42),
        (INODE_V1, &v3, 0),
    ] {
        let bytes = hex(stored);
        assert_eq!(
            &decode_record::<InodeRecord>(&bytes).unwrap(),
            want,
            "{stored}"
        );
        assert_eq!(inode_version(&bytes), version, "{stored}");
    }
    refuses_newer::<InodeRecord>(&hex(INODE_V7));
    assert_eq!(
        RecordError::TooNew {
            what: InodeRecord::NAME,
            found: 8,
            newest: 7
        }
        .to_string(),
        "MDT inode record version 8 is newer than this nacre reads (up to 7): upgrade nacre"
    );
    // There never was an inode record of version 2: damage, not a newer version.
    assert!(matches!(
        decode_record::<InodeRecord>(&with_version(&hex(INODE_V6), 2)),
        Err(RecordError::Damaged { .. })
    ));
    // Cut short anywhere: damage, never a panic.
    let bytes = hex(INODE_V7);
    for n in 0..bytes.len() {
        assert!(
            matches!(
                decode_record::<InodeRecord>(&bytes[..n]),
                Err(RecordError::Damaged { .. })
            ),
            "{n} bytes"
        );
    }
}

#[test]
fn records_of_other_types_never_take_an_inode_version() {
    // The old shared decoder read any record of version 6 as an inode's (8 bytes too far)
    // and refused versions 3 to 5 as damage: every type has its own versions now.
    let v6 = hex(INODE_V6);
    let too_new = |e: RecordError, what: &'static str| {
        assert_eq!(
            e,
            RecordError::TooNew {
                what,
                found: 6,
                newest: 1
            }
        )
    };
    too_new(
        decode_record::<DirentRecord>(&v6).unwrap_err(),
        DirentRecord::NAME,
    );
    assert_eq!(
        decode_record::<IntentRecord>(&v6).unwrap_err(),
        RecordError::TooNew {
            what: IntentRecord::NAME,
            found: 6,
            newest: 2
        }
    );
    assert_eq!(
        decode_record::<RelayoutRecord>(&v6).unwrap_err(),
        RecordError::TooNew {
            what: RelayoutRecord::NAME,
            found: 6,
            newest: 2
        }
    );
    too_new(
        decode_record::<DirStripe>(&v6).unwrap_err(),
        DirStripe::NAME,
    );
    too_new(
        decode_record::<DirDefault>(&v6).unwrap_err(),
        DirDefault::NAME,
    );
    too_new(
        decode_record::<ChangelogRecord>(&v6).unwrap_err(),
        ChangelogRecord::NAME,
    );
    assert!(decode_record::<SavedReply>(&v6).unwrap_err().is_too_new());
    for version in 2..=5 {
        let e = decode_record::<DirentRecord>(&with_version(&hex(DIRENT_V1), version));
        assert!(e.unwrap_err().is_too_new(), "version {version}");
    }
    // Version 0 never existed for any type.
    assert!(matches!(
        decode_record::<DirentRecord>(&with_version(&hex(DIRENT_V1), 0)),
        Err(RecordError::Damaged { .. })
    ));
    assert!(matches!(
        decode_record::<DirentRecord>(&[]),
        Err(RecordError::Damaged { .. })
    ));
}

/// A change's reply: body `[1, 2, 3]` in protocol 6, transno 300, the root at version 299.
fn saved() -> SavedReply {
    SavedReply {
        status: 0,
        body: vec![1, 2, 3],
        transno: 300,
        protocol: 6,
        pre_versions: vec![(Fid::ROOT, 299)],
    }
}

const SAVED_V4: &str = "040003010203ac02060187808080200100ab02";
const SAVED_V3: &str = "030003010203ac020187808080200100ab02";
const SAVED_V2: &str = "020003010203ac02";
const SAVED_V1: &str = "010400";

#[test]
fn saved_replies_read_their_stored_samples_of_every_version() {
    current(&saved(), SAVED_V4);
    // Version 3: no protocol, so the body is protocol 6's.
    assert_eq!(
        decode_record::<SavedReply>(&hex(SAVED_V3)).unwrap(),
        saved()
    );
    // Version 2: no versions either.
    let v2 = SavedReply {
        pre_versions: Vec::new(),
        ..saved()
    };
    assert_eq!(decode_record::<SavedReply>(&hex(SAVED_V2)).unwrap(), v2);
    // Version 1: an error (ENOENT) without a transno.
    let v1 = SavedReply {
        status: Status::NoEnt.code(),
        body: Vec::new(),
        transno: 0,
        protocol: 6,
        pre_versions: Vec::new(),
    };
    assert_eq!(decode_record::<SavedReply>(&hex(SAVED_V1)).unwrap(), v1);
    let e = decode_record::<SavedReply>(&with_version(&hex(SAVED_V4), 5)).unwrap_err();
    assert_eq!(
        e,
        RecordError::TooNew {
            what: "saved reply",
            found: 5,
            newest: 4
        }
    );
    // What is saved now is in this nacre's protocol.
    let now = SavedReply::of(&Ok(nacre_wire::mds::MdsReply::Done));
    assert_eq!(now.protocol, nacre_wire::PROTOCOL_VERSION);
    assert_eq!(
        decode_record::<SavedReply>(&encode_record(&now)).unwrap(),
        now
    );
}

#[test]
fn old_inode_shapes_with_striping_defaults_read_as_now() {
    // Built from the old shapes (not stored bytes): a directory default and a layout of
    // the formats before pools read with no pool, generation 0 and project 0.
    let rec = InodeRecord {
        layout: None,
        ..inode()
    };
    #[derive(serde::Serialize)]
    struct OldLayout {
        stripe_size: u32,
        objects: Vec<StripeObject>,
    }
    let object = StripeObject {
        ost: 3,
        object: ObjectId { seq: 0, id: 9 },
    };
    let old_body = (
        AttrNoProject::of(&rec.attr),
        Some(OldLayout {
            stripe_size: 1 << 20,
            objects: vec![object],
        }),
        Some((2i32, 65536u32, -1i32)),
        None::<Vec<u8>>,
        Some(Fid::ROOT),
        false,
    );
    let old_default = nacre_types::layout::StripeSpec {
        stripe_count: 2,
        stripe_size: 65536,
        start_ost: -1,
        pool: PoolName::NONE,
    };
    let mut want = InodeRecord {
        layout: Some(Layout::raid0(1 << 20, vec![object], PoolName::NONE)),
        dir_default: Some(LayoutSpec::plain(old_default)),
        parent: Some(Fid::ROOT),
        ..rec.clone()
    };
    want.attr.project = 0;
    let mut v1 = vec![1u8];
    v1.extend(postcard::to_allocvec(&old_body).unwrap());
    assert_eq!(decode_record::<InodeRecord>(&v1).unwrap(), want);
    assert_eq!(inode_version(&v1), 0);
    let mut v3 = vec![INODE_RECORD_VERSION_NO_POOLS];
    v3.extend_from_slice(&17u64.to_be_bytes());
    v3.extend(postcard::to_allocvec(&old_body).unwrap());
    assert_eq!(decode_record::<InodeRecord>(&v3).unwrap(), want);
    assert_eq!(inode_version(&v3), 17);
    // Format 4 (pools, no layout generation), with a default of its own shape.
    let v4_body = (
        AttrNoProject::of(&rec.attr),
        None::<Layout>,
        Some(old_default),
        None::<Vec<u8>>,
        None::<Fid>,
        false,
    );
    let mut v4 = vec![INODE_RECORD_VERSION_NO_GENERATIONS];
    v4.extend_from_slice(&23u64.to_be_bytes());
    v4.extend(postcard::to_allocvec(&v4_body).unwrap());
    assert_eq!(
        decode_record::<InodeRecord>(&v4).unwrap().dir_default,
        want.dir_default
    );
    // Format 5 (generations, no projects).
    let v5_body = (
        AttrNoProject::of(&rec.attr),
        // A plain layout as formats 5 and 6 stored it: size, objects, pool, generation.
        Some((1u32 << 20, vec![object], PoolName::NONE, 0u32)),
        None::<nacre_types::layout::StripeSpec>,
        None::<Vec<u8>>,
        None::<Fid>,
        true,
    );
    let mut v5 = vec![INODE_RECORD_VERSION_NO_PROJECTS];
    v5.extend_from_slice(&29u64.to_be_bytes());
    v5.extend(postcard::to_allocvec(&v5_body).unwrap());
    let read = decode_record::<InodeRecord>(&v5).unwrap();
    assert_eq!((read.attr.project, read.orphan), (0, true));
    assert_eq!(read.layout, want.layout);
    // A project, its inheritance and a generation survive the round trip.
    let mut moved = inode();
    moved.attr.proj_inherit = true;
    moved.layout.as_mut().unwrap().generation = 7;
    assert_eq!(
        decode_record::<InodeRecord>(&encode_inode(&moved, 1)).unwrap(),
        moved
    );
}

proptest! {
    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode_record::<InodeRecord>(&bytes);
        let _ = inode_version(&bytes);
        let _ = decode_record::<SavedReply>(&bytes);
        let _ = decode_record::<DirentRecord>(&bytes);
        let _ = decode_record::<IntentRecord>(&bytes);
        let _ = decode_record::<RelayoutRecord>(&bytes);
        let _ = decode_record::<DirStripe>(&bytes);
        let _ = decode_record::<DirDefault>(&bytes);
        let _ = decode_record::<ChangelogRecord>(&bytes);
    }
}
