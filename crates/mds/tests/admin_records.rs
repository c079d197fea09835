//! The MGS's audit trail copied into the changelog (admin_records.rs): each record once, in
//! number order, across a restart of the MDT; a new MGS run's records all; nothing while no
//! consumer is registered.

use nacre_kv::FjallStore;
use nacre_mds::mdt::Mdt;
use nacre_mds::osp::OstPool;
use nacre_osd::Label;
use nacre_types::TargetKind;
use nacre_wire::mds::changelog::{ChangelogRecord, RecordKind};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use nacre_wire::mgs::AuditRecord;
use std::path::Path;
use std::sync::Arc;

fn open_mdt(dir: &Path) -> Mdt {
    let label = Label::new(TargetKind::Mdt, 0, "adm", None).unwrap();
    let kv = Arc::new(FjallStore::open(&dir.join("db"), &nacre_mdstore::records::TABLES).unwrap());
    let osts = Arc::new(OstPool::detached("adm", 1));
    Mdt::open(label, dir, kv, osts).unwrap()
}

fn register(mdt: &Mdt) {
    let call = MdsCall {
        lock_bits: 0,
        jobid: String::new(),
        client: [5; 16],
        replied_below: 1,
        cred: nacre_types::Cred::root(),
        op: MdsOp::ChangelogRegister { name: "t".into() },
    };
    let out = nacre_mds::execute(mdt, &call, 1, "test");
    assert_eq!(out.status, nacre_types::Status::Ok);
}

fn audit(seq: u64, what: &str) -> AuditRecord {
    AuditRecord {
        seq,
        time_s: 1_700_000_000 + seq,
        fsname: "adm".into(),
        who: "10.0.0.9:1023 (admin)".into(),
        what: what.into(),
        outcome: "done".into(),
    }
}

fn admin_records(mdt: &Mdt) -> Vec<ChangelogRecord> {
    match nacre_mds::changelog::read(mdt, 0, 1, 1000).unwrap() {
        MdsReply::Changelog { records, .. } => records
            .into_iter()
            .filter(|r| r.kind == RecordKind::Admin)
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn names(recs: &[ChangelogRecord]) -> Vec<String> {
    recs.iter()
        .map(|r| String::from_utf8_lossy(&r.name).into_owned())
        .collect()
}

#[test]
fn audit_records_are_copied_once_in_order_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let copy = nacre_mds::admin_records::copy;
    {
        let mdt = open_mdt(dir.path());
        // No consumer: nothing recorded, the cursor moves on.
        copy(&mdt, 7, &[audit(1, "before")]).unwrap();
        assert_eq!(nacre_mds::admin_records::cursor(&mdt), (7, 1));
        register(&mdt);
        assert!(admin_records(&mdt).is_empty());
        // Out of order and repeated in the answer: each once, in number order.
        copy(&mdt, 7, &[audit(3, "b"), audit(1, "before"), audit(2, "a")]).unwrap();
        copy(&mdt, 7, &[audit(2, "a"), audit(3, "b")]).unwrap();
        let recs = admin_records(&mdt);
        assert_eq!(
            names(&recs),
            [
                "10.0.0.9:1023 (admin): a: done",
                "10.0.0.9:1023 (admin): b: done"
            ]
        );
        assert_eq!(recs[0].time.sec, 1_700_000_002);
        assert_eq!((recs[0].uid, recs[0].jobid.as_str()), (0, "mgs"));
    }
    // Restarted: the cursor was kept with the records.
    let mdt = open_mdt(dir.path());
    assert_eq!(nacre_mds::admin_records::cursor(&mdt), (7, 3));
    copy(&mdt, 7, &[audit(3, "b"), audit(4, "c")]).unwrap();
    // A restarted MGS numbers anew: all it keeps is copied.
    copy(&mdt, 8, &[audit(1, "d")]).unwrap();
    // A text past a name's length is cut to it.
    copy(&mdt, 8, &[audit(2, &"x".repeat(400))]).unwrap();
    let recs = admin_records(&mdt);
    assert_eq!(
        names(&recs)[2..4],
        [
            "10.0.0.9:1023 (admin): c: done",
            "10.0.0.9:1023 (admin): d: done"
        ]
    );
    assert_eq!(recs.len(), 5);
    assert_eq!(recs[4].name.len(), nacre_types::limits::NAME_BYTES_MAX);
}
