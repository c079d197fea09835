//! Reply reconstruction: a resent modifying request (same client uuid and xid) gets the saved
//! reply instead of running again — also after the MDT restarts.

use nacre_kv::FjallStore;
use nacre_mds::mdt::Mdt;
use nacre_mds::osp::OstPool;
use nacre_mds::MdsHandler;
use nacre_net::rpc::{decode_reply, request};
use nacre_net::{Connection, NetConfig, Server, ServiceConfig, ServicePool};
use nacre_osd::Label;
use nacre_types::{Fid, Status, TargetKind};
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use nacre_wire::Service;
use std::path::Path;
use std::sync::Arc;

fn serve(dir: &Path) -> Arc<Server> {
    let label = Label::new(TargetKind::Mdt, 0, "rr", None).unwrap();
    let kv = FjallStore::open(&dir.join("db"), &nacre_mdstore::records::TABLES).unwrap();
    // No MGS: this test creates directories only, which need no OSTs.
    let osts = Arc::new(OstPool::new(
        "rr",
        "127.0.0.1:1@tcp".parse().unwrap(),
        NetConfig::default(),
    ));
    let mdt = Arc::new(Mdt::open(label, dir, Arc::new(kv), osts).unwrap());
    let handler = Arc::new(MdsHandler::default());
    handler.add_target(mdt);
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
    let config = ServiceConfig::unpinned("mdt", 1, 4, 64);
    server.add_service(Service::Mds, ServicePool::start(config, handler));
    server
}

fn send(conn: &Arc<Connection>, xid: u64, op: MdsOp) -> Result<MdsReply, Status> {
    answer(conn, xid, op).map(|a| a.reply)
}

/// The whole answer: transno, versions and reply.
fn answer(
    conn: &Arc<Connection>,
    xid: u64,
    op: MdsOp,
) -> Result<nacre_wire::mds::MdsAnswer, Status> {
    let call = MdsCall {
        lock_bits: 0,
        jobid: String::new(),
        client: [9; 16],
        replied_below: 1,
        cred: nacre_types::Cred::root(),
        op,
    };
    let opcode = call.op.opcode();
    let reply = conn
        .start_xid(xid, request(opcode, 0, &call, None))
        .unwrap()
        .wait()
        .unwrap();
    decode_reply::<nacre_wire::mds::MdsAnswer>(reply)
        .map(|(a, _)| a)
        .map_err(|e| e.status())
}

/// A resend is answered with the first answer's transno and versions, so the client's
/// replay of it after a restart is version-checked like any other (regression: the
/// saved reply kept no versions and a resent request's replay went unchecked).
#[test]
fn a_resent_request_gets_the_transno_and_versions_of_the_first_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let conn = Connection::connect(
        nacre_types::Nid::tcp(server.addr()),
        NetConfig::default().for_fs("rr"),
    )
    .unwrap();
    send(&conn, conn.alloc_xid(), mkdir("before")).unwrap();
    let xid = conn.alloc_xid();
    let first = answer(&conn, xid, mkdir("v")).unwrap();
    let again = answer(&conn, xid, mkdir("v")).unwrap();
    assert!(first.transno > 0);
    assert!(
        first
            .pre_versions
            .iter()
            .any(|(f, v)| *f == Fid::ROOT && *v > 0),
        "the root's version before the mkdir: {:?}",
        first.pre_versions
    );
    assert_eq!(again.transno, first.transno);
    assert_eq!(again.pre_versions, first.pre_versions);
    assert_eq!(again.reply, first.reply);
    server.shutdown();
}

fn mkdir(name: &str) -> MdsOp {
    MdsOp::Mkdir {
        parent: Fid::ROOT,
        name: name.as_bytes().to_vec(),
        perm: 0o755,
        uid: 0,
        gid: 0,
    }
}

#[test]
fn resent_request_gets_the_saved_reply_even_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let conn = Connection::connect(
        nacre_types::Nid::tcp(server.addr()),
        NetConfig::default().for_fs("rr"),
    )
    .unwrap();
    let xid = conn.alloc_xid();
    let first = send(&conn, xid, mkdir("d")).expect("first mkdir");
    let again = send(&conn, xid, mkdir("d")).expect("a resend must not fail with EEXIST");
    assert_eq!(first, again, "a resend gets the very same reply");
    assert_eq!(
        send(&conn, conn.alloc_xid(), mkdir("d")),
        Err(Status::Exist),
        "a new request runs"
    );
    // An error is saved too: the resend of a failed request fails the same way.
    let bad = conn.alloc_xid();
    assert_eq!(send(&conn, bad, mkdir("d")), Err(Status::Exist));
    send(
        &conn,
        conn.alloc_xid(),
        MdsOp::Rmdir {
            parent: Fid::ROOT,
            name: b"d".to_vec(),
        },
    )
    .unwrap();
    assert_eq!(
        send(&conn, bad, mkdir("d")),
        Err(Status::Exist),
        "saved error, not a re-run"
    );
    // Make the journal durable, stop the MDT, start it again on the same store.
    send(&conn, conn.alloc_xid(), MdsOp::Sync).unwrap();
    server.shutdown();
    drop(conn);
    drop(server);
    let server = serve(dir.path());
    let conn = Connection::connect(
        nacre_types::Nid::tcp(server.addr()),
        NetConfig::default().for_fs("rr"),
    )
    .unwrap();
    // The restarted MDT waits for the client it knows: new requests get EINPROGRESS until
    // it has reconnected and replayed (nothing here: everything was synced).
    assert_eq!(
        send(&conn, conn.alloc_xid(), MdsOp::StatFs).map(|_| ()),
        Ok(()),
        "statfs passes during recovery"
    );
    assert_eq!(
        send(&conn, conn.alloc_xid(), mkdir("early")),
        Err(Status::InProgress)
    );
    let MdsReply::Connected { recovering, .. } =
        send(&conn, conn.alloc_xid(), MdsOp::Connect).unwrap()
    else {
        panic!("Connect answers Connected");
    };
    assert!(recovering);
    send(&conn, conn.alloc_xid(), MdsOp::ReplayDone).expect("recovery completes");
    assert_eq!(
        send(&conn, xid, mkdir("d")).unwrap(),
        first,
        "saved reply survives a restart"
    );
    let MdsReply::Dir { entries, .. } = send(
        &conn,
        conn.alloc_xid(),
        MdsOp::ReadDir {
            fid: Fid::ROOT,
            after: None,
            count: 10,
        },
    )
    .unwrap() else {
        panic!("readdir reply")
    };
    assert!(
        entries.is_empty(),
        "the resend after restart did not create anything: {entries:?}"
    );
}
