//! Bytes carried by a batch's creates (`BatchCreate::data`, protocol 13; issue 44 item 1,
//! a small file's write carried by its create), spoken by a raw client as a client
//! library would and as an attacker would: a delegation says how many bytes creates under
//! it may carry; the MDT keeps them only below the component on the MDT the new file
//! starts with, within the bounds of an item and of a batch, and clears set-id bits as a
//! write by a user other than root does.

use super::batch::{item, nth, polls, Session, DELEGATED};
use super::dom::dom_dir;
use super::growth::fid_at;
use nacre_testkit::{lfsck_clean, pattern, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::mds::{
    BatchCreate, MdsOp, MdsReply, CREATE_BATCH_DATA_BYTES_MAX, CREATE_DATA_BYTES_MAX,
};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// How many bytes a delegation of `dir` to `s` says each create may carry (the lock given
/// back at once).
fn delegated_bytes(s: &mut Session, dir: Fid) -> u32 {
    s.0.send_mds_with(0, MdsOp::DelegateDir { fid: dir }, DELEGATED)
        .unwrap();
    let r = s.0.recv().unwrap();
    assert_eq!(r.header.status, 0, "delegated");
    let lock = r.answer().and_then(|a| a.lock).expect("a lock");
    let bytes = match r.mds() {
        Some(MdsReply::Delegated { data_bytes_max, .. }) => data_bytes_max,
        other => panic!("not a delegation: {other:?}"),
    };
    let cancel = MdsOp::LockCancel {
        handles: vec![lock.handle],
    };
    assert_eq!(s.call(cancel).0, 0);
    bytes
}

/// `item` carrying `data`.
fn with_data(mut i: BatchCreate, data: Vec<u8>) -> BatchCreate {
    i.data = data;
    i
}

/// A user's batch: bytes where the new file starts on the MDT are its bytes (no write
/// request, each file one 4 KiB block); where it starts on OSTs the item is refused
/// `EINVAL` and nothing is made; a set-id file written by its creator, not root, loses
/// both bits; an item past 64 KiB or a batch past 512 KiB is refused whole before
/// anything is made. The delegation said 64 KiB for the first directory, 0 for the other.
#[test]
fn bytes_carried_by_creates_go_only_where_the_mdt_keeps_them() {
    let fsname = "batchdt";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let mds = fs.servers_mut()[0].listen.clone();
    let (small, plain) = (fs.path("small"), fs.path("plain"));
    dom_dir(&small);
    fs::create_dir(&plain).unwrap();
    for d in [&small, &plain] {
        std::os::unix::fs::chown(d, Some(4245), Some(4245)).unwrap();
    }
    let (small_fid, plain_fid) = (fid_at(&small), fid_at(&plain));
    let mut c = Session::open(&mds, fsname, [0x6a; 16]);
    let mut poll = Session::open(&mds, fsname, [0x6a; 16]);
    polls(&mut poll);
    let user = Cred::new(4245, 4245, vec![]);
    let (on_mdt, on_osts) = nacre_types::cred::with(user.clone(), || {
        let small = delegated_bytes(&mut c, small_fid);
        (small, delegated_bytes(&mut c, plain_fid))
    });
    assert_eq!(on_mdt as usize, CREATE_DATA_BYTES_MAX);
    assert_eq!(on_osts, 0);
    let writes = super::batch::served(fsname, "dom_write");
    let (first, _) = c.grant(64);
    let mut setid = item(nth(first, 1), "setid", 4245);
    setid.perm = 0o6755;
    let items = vec![
        with_data(item(nth(first, 0), "kept", 4245), pattern(7, 3901)),
        with_data(setid, b"written".to_vec()),
        with_data(
            item(nth(first, 2), "full", 4245),
            pattern(8, CREATE_DATA_BYTES_MAX),
        ),
    ];
    let (status, made) = nacre_types::cred::with(user.clone(), || c.batch(small_fid, items));
    assert_eq!(status, 0);
    assert!(made.iter().all(Result::is_ok), "{made:?}");
    let items = vec![with_data(
        item(nth(first, 3), "on_osts", 4245),
        b"x".to_vec(),
    )];
    let (status, made) = nacre_types::cred::with(user.clone(), || c.batch(plain_fid, items));
    assert_eq!((status, made), (0, vec![Err(Status::Inval)]));
    let too_long = vec![with_data(
        item(nth(first, 4), "too_long", 4245),
        vec![1; CREATE_DATA_BYTES_MAX + 1],
    )];
    let (status, _) = nacre_types::cred::with(user.clone(), || c.batch(small_fid, too_long));
    assert_eq!(status, Status::Inval as i32, "an item past its bound");
    let per_item = CREATE_DATA_BYTES_MAX;
    let n = CREATE_BATCH_DATA_BYTES_MAX / per_item + 1;
    let too_much: Vec<BatchCreate> = (0..n as u32)
        .map(|i| {
            with_data(
                item(nth(first, 10 + i), &format!("m{i}"), 4245),
                vec![2; per_item],
            )
        })
        .collect();
    let (status, _) = nacre_types::cred::with(user, || c.batch(small_fid, too_much));
    assert_eq!(status, Status::Inval as i32, "a batch past its bound");
    assert_eq!(super::batch::served(fsname, "dom_write"), writes);
    assert_eq!(fs::read(small.join("kept")).unwrap(), pattern(7, 3901));
    assert_eq!(fs::metadata(small.join("kept")).unwrap().blocks(), 8);
    assert_eq!(
        fs::read(small.join("full")).unwrap(),
        pattern(8, CREATE_DATA_BYTES_MAX)
    );
    let m = fs::metadata(small.join("setid")).unwrap();
    assert_eq!(
        m.permissions().mode() & 0o7777,
        0o755,
        "set-id bits cleared"
    );
    assert_eq!(fs::read(small.join("setid")).unwrap(), b"written");
    for gone in [
        plain.join("on_osts"),
        small.join("too_long"),
        small.join("m0"),
    ] {
        assert!(!gone.exists(), "{gone:?} made");
    }
    drop(c);
    lfsck_clean(&fs.source());
}
