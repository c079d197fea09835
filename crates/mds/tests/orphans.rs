//! Files unlinked while open are found at start from the `orphans` index (no scan of every
//! inode), and an MDT made before the index existed builds it with one scan.

use nacre_kv::{Batch, FjallStore, KvStore};
use nacre_mds::mdt::Mdt;
use nacre_mds::osp::OstPool;
use nacre_mdstore::records::{META, ORPHANS};
use nacre_osd::Label;
use nacre_types::{Fid, FileKind, TargetKind};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use std::path::Path;
use std::sync::Arc;

fn open_mdt(dir: &Path) -> (Mdt, Arc<FjallStore>) {
    let label = Label::new(TargetKind::Mdt, 0, "orph", None).unwrap();
    let kv = Arc::new(FjallStore::open(&dir.join("db"), &nacre_mdstore::records::TABLES).unwrap());
    let osts = Arc::new(OstPool::detached("orph", 1));
    (Mdt::open(label, dir, kv.clone(), osts).unwrap(), kv)
}

fn run(mdt: &Mdt, xid: u64, op: MdsOp) -> nacre_net::Outgoing {
    let call = MdsCall {
        lock_bits: 0,
        jobid: String::new(),
        client: [5; 16],
        replied_below: xid,
        cred: nacre_types::Cred::root(),
        op,
    };
    nacre_mds::execute(mdt, &call, xid, "test")
}

#[test]
fn orphans_are_found_at_start_from_their_index_or_one_scan() {
    let dir = tempfile::tempdir().unwrap();
    let fid = {
        let (mdt, _kv) = open_mdt(dir.path());
        let mut fids = Vec::new();
        for (i, name) in ["kept", "gone", "plain"].iter().enumerate() {
            let out = run(
                &mdt,
                10 + i as u64,
                MdsOp::Create {
                    parent: Fid::ROOT,
                    name: name.as_bytes().to_vec(),
                    kind: FileKind::Regular,
                    perm: 0o644,
                    uid: 0,
                    gid: 0,
                    rdev: 0,
                    exclusive: true,
                    open: *name != "plain",
                    access: 6,
                },
            );
            let reply: MdsReply = nacre_wire::decode_body(&out.body).unwrap();
            let MdsReply::Entry { attr, .. } = reply else {
                panic!("{reply:?}")
            };
            fids.push(attr.fid);
        }
        // "gone" is closed before its unlink; "kept" stays open; "plain" was never open.
        run(
            &mdt,
            20,
            MdsOp::Close {
                fid: fids[1],
                writer: true,
                written: false,
                touch: false,
                noatime: false,
            },
        );
        for (i, name) in ["kept", "gone", "plain"].iter().enumerate() {
            run(
                &mdt,
                30 + i as u64,
                MdsOp::Unlink {
                    parent: Fid::ROOT,
                    name: name.as_bytes().to_vec(),
                },
            );
        }
        fids[0]
    };
    // Restart: found through the index.
    {
        let (mdt, kv) = open_mdt(dir.path());
        assert_eq!(mdt.pending_orphans(), vec![fid]);
        // Make it an MDT from before the index: no marker, no entry.
        let mut b = Batch::new();
        b.delete(META, b"orphan_index".to_vec());
        b.delete(ORPHANS, fid.to_key().to_vec());
        let t = kv.commit(b).unwrap();
        kv.wait_durable(t).unwrap();
    }
    // Restart: one scan finds it and builds the index.
    {
        let (mdt, kv) = open_mdt(dir.path());
        assert_eq!(mdt.pending_orphans(), vec![fid]);
        assert!(kv.get(META, b"orphan_index").unwrap().is_some());
        assert!(kv.get(ORPHANS, &fid.to_key()).unwrap().is_some());
    }
}

/// Regression (found by tests/racer.rs): a create that is not exclusive, of a name another
/// client made a symlink (or device, fifo) under since the kernel looked it up, answers
/// EEXIST — the kernel cannot open such an inode from a create's reply, and failed it with
/// EIO. An existing regular file is still opened; a directory still answers EISDIR.
#[test]
fn a_create_over_a_name_that_is_not_a_regular_file_answers_eexist() {
    let dir = tempfile::tempdir().unwrap();
    let (mdt, _kv) = open_mdt(dir.path());
    let create = |xid: u64, name: &str| {
        run(
            &mdt,
            xid,
            MdsOp::Create {
                parent: Fid::ROOT,
                name: name.as_bytes().to_vec(),
                kind: FileKind::Regular,
                perm: 0o644,
                uid: 0,
                gid: 0,
                rdev: 0,
                exclusive: false,
                open: false,
                access: 6,
            },
        )
        .status
    };
    let made = run(
        &mdt,
        1,
        MdsOp::Symlink {
            parent: Fid::ROOT,
            name: b"s".to_vec(),
            target: b"t".to_vec(),
            uid: 0,
            gid: 0,
        },
    );
    assert_eq!(made.status, nacre_types::Status::Ok);
    assert_eq!(create(2, "s"), nacre_types::Status::Exist);
    let dir_made = run(
        &mdt,
        3,
        MdsOp::Mkdir {
            parent: Fid::ROOT,
            name: b"d".to_vec(),
            perm: 0o755,
            uid: 0,
            gid: 0,
        },
    );
    assert_eq!(dir_made.status, nacre_types::Status::Ok);
    assert_eq!(create(4, "d"), nacre_types::Status::IsDir);
    assert_eq!(create(5, "f"), nacre_types::Status::Ok);
    assert_eq!(
        create(6, "f"),
        nacre_types::Status::Ok,
        "a regular file is opened"
    );
}
