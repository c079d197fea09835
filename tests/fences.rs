//! Layout fences and data versions on a real OSS process (crates/oss/src/fence.rs), the
//! parts online migration stands on: a fenced object refuses changes issued under an older
//! layout generation, also after the OSS is killed -9 and restarted, and accepts the new
//! one; a data version moves with every change and with a restart, and only root may
//! fence or ask.

use nacre_testkit::raw::RawConn;
use nacre_testkit::{object_of, Form, Spec, TestFs};
use nacre_types::{ObjectId, Owner};
use nacre_wire::oss::{OssReply, OssRequest};

fn ask(c: &mut RawConn, ost: u32, req: OssRequest, bulk: Option<&[u8]>) -> (i32, Option<OssReply>) {
    c.send_oss(ost, req, bulk).unwrap();
    let r = c.recv().unwrap();
    (r.header.status, r.oss())
}

fn write(object: ObjectId, layout_gen: u32) -> OssRequest {
    OssRequest::Write {
        object,
        offset: 0,
        owner: Owner::default(),
        lock: false,
        grant_used: 0,
        epoch: 0,
        layout_gen,
    }
}

fn version(c: &mut RawConn, ost: u32, object: ObjectId) -> (u64, u64) {
    let req = OssRequest::DataVersion {
        objects: vec![object],
        flush: true,
    };
    match ask(c, ost, req, None) {
        (0, Some(OssReply::Versions { epoch, versions })) => (epoch, versions[0]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fenced_objects_refuse_older_layout_generations_across_a_restart() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("fence"));
    let f = fs.path("f");
    std::fs::write(&f, b"first").unwrap();
    let (ost, object) = object_of(&f);
    let oss = fs.servers_mut()[1].listen.clone();
    let stale = nacre_types::Status::Stale.code();
    nacre_types::cred::set_current(Some(nacre_types::Cred::root()));
    let mut c = RawConn::connect(&oss, "fence", [9; 16]).unwrap();
    let v0 = version(&mut c, ost, object);
    assert_eq!(ask(&mut c, ost, write(object, 0), Some(b"again")).0, 0);
    let v1 = version(&mut c, ost, object);
    assert_ne!(v0, v1, "a write changes the data version");
    assert_eq!(version(&mut c, ost, object), v1, "and nothing else does");
    let fence = OssRequest::Fence {
        objects: vec![object],
        generation: 2,
    };
    assert_eq!(ask(&mut c, ost, fence.clone(), None).0, 0);
    assert_eq!(ask(&mut c, ost, write(object, 1), Some(b"late")).0, stale);
    let punch = OssRequest::Punch {
        object,
        size: 0,
        layout_gen: 1,
    };
    assert_eq!(ask(&mut c, ost, punch, None).0, stale);
    assert_eq!(
        version(&mut c, ost, object),
        v1,
        "refused changes change nothing"
    );
    assert_eq!(ask(&mut c, ost, write(object, 2), Some(b"new!!")).0, 0);
    // The fence is on disk: after a kill -9 of the OSS it still holds.
    fs.servers_mut()[1].kill9();
    fs.servers_mut()[1].restart();
    let mut c = RawConn::connect(&oss, "fence", [9; 16]).unwrap();
    let status = loop {
        // The OSS answers EINPROGRESS while its recovery window is open.
        let s = ask(&mut c, ost, write(object, 1), Some(b"late")).0;
        if s != nacre_types::Status::InProgress.code() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status, stale);
    let v2 = version(&mut c, ost, object);
    assert_ne!(v2.0, v1.0, "another start, another epoch");
    // Only root fences or asks.
    nacre_types::cred::set_current(Some(nacre_types::Cred::new(1000, 1000, vec![])));
    let perm = nacre_types::Status::Perm.code();
    assert_eq!(ask(&mut c, ost, fence, None).0, perm);
    let dv = OssRequest::DataVersion {
        objects: vec![object],
        flush: false,
    };
    assert_eq!(ask(&mut c, ost, dv, None).0, perm);
    // What the mount reads is what the last accepted write left.
    assert_eq!(std::fs::read(&f).unwrap(), b"new!!");
}
