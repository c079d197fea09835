//! Creates sent many per request with FIDs the client gives (issue 44 item 2, step R2 of
//! docs/plans/round-trips.md): `GrantFids` hands a client a range of FIDs that only it may
//! use, `CreateBatch` makes many files of one directory in one transaction. Spoken here by
//! a raw client, as a client library would and as an attacker would, against separate
//! server processes; what it made is checked through a mount.

use super::growth::fid_at;
use nacre_testkit::raw::RawConn;
use nacre_testkit::{lfsck_clean, nacre_ok, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::mds::{BatchCreate, MdsOp, MdsReply, CREATE_BATCH_ITEMS_MAX};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A raw client's session with MDT0000.
struct Session(RawConn);

impl Session {
    fn open(addr: &str, fsname: &str, uuid: [u8; 16]) -> Session {
        let mut s = Session(RawConn::connect(addr, fsname, uuid).unwrap());
        assert_eq!(s.call(MdsOp::Connect).0, 0);
        s
    }

    /// Sends `op`; its status and reply.
    fn call(&mut self, op: MdsOp) -> (i32, Option<MdsReply>) {
        self.0.send_mds(0, op).unwrap();
        let r = self.0.recv().unwrap();
        (r.header.status, r.mds())
    }

    /// A grant of `count` FIDs: its first FID and size.
    fn grant(&mut self, count: u32) -> (Fid, u32) {
        match self.call(MdsOp::GrantFids { count }) {
            (0, Some(MdsReply::FidRange { first, count })) => (first, count),
            other => panic!("grant: {:?}", other.0),
        }
    }

    /// A batch of `items` in `parent`: the status and each item's result.
    fn batch(&mut self, parent: Fid, items: Vec<BatchCreate>) -> (i32, Vec<Result<Fid, Status>>) {
        match self.call(MdsOp::CreateBatch { parent, items }) {
            (0, Some(MdsReply::Created(results))) => (
                0,
                results
                    .into_iter()
                    .map(|r| r.map(|(attr, _)| attr.fid))
                    .collect(),
            ),
            (status, _) => (status, Vec::new()),
        }
    }
}

/// FID `i` of the grant from `first`.
fn nth(first: Fid, i: u32) -> Fid {
    Fid::new(first.seq, first.oid + i)
}

fn item(fid: Fid, name: &str, owner: u32) -> BatchCreate {
    BatchCreate {
        fid,
        name: name.as_bytes().to_vec(),
        perm: 0o640,
        uid: owner,
        gid: owner,
    }
}

/// How many `op` requests MDT0000 of `fsname` served (its `md_stats`).
fn served(fsname: &str, op: &str) -> u64 {
    let t = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("mdt.{fsname}-MDT0000.md_stats"),
    ]);
    t.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == op).then(|| w.next()?.parse::<u64>().ok())?
        })
        .unwrap_or(0)
}

/// A client granted FIDs makes 200 files in one request: each has the FID it gave, the
/// owner, group and mode asked, is a regular file a mount lists, stats, writes and reads;
/// the directory's entries count them; lfsck finds nothing amiss.
#[test]
fn files_made_in_one_batch_have_the_fids_their_client_gave() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("batch"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("made");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let parent = fid_at(&dir);
    let mut c = Session::open(&mds, "batch", [0x61; 16]);
    let (first, count) = c.grant(1000);
    assert_eq!(count, 1000);
    assert_eq!(first.mdt_index(), 0);
    let before = served("batch", "create_batch");
    let items: Vec<_> = (0..200)
        .map(|i| item(nth(first, i), &format!("f{i}"), 4242))
        .collect();
    let (status, results) =
        nacre_types::cred::with(Cred::new(4242, 4242, vec![]), || c.batch(parent, items));
    assert_eq!(status, 0);
    assert_eq!(results.len(), 200);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(*r, Ok(nth(first, i as u32)), "item {i}");
    }
    assert_eq!(served("batch", "create_batch"), before + 1, "one request");
    let names = fs::read_dir(&dir).unwrap().count();
    assert_eq!(names, 200);
    for i in [0u32, 77, 199] {
        let p = dir.join(format!("f{i}"));
        let m = fs::metadata(&p).unwrap();
        assert!(m.is_file());
        assert_eq!(fid_at(&p), nth(first, i));
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (4242, 4242, 0o640));
        assert_eq!(m.len(), 0);
    }
    // Real files: written and read back through the mount.
    let p = dir.join("f5");
    fs::write(&p, b"made in a batch").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"made in a batch");
    assert_eq!(fs::metadata(&dir).unwrap().nlink(), 2);
    lfsck_clean(&fs.source());
}

/// A raw client speaks `GrantFids` and `CreateBatch` as an attacker would. A FID of no
/// grant of its own (the MDT's own range, another client's grant, past its grant) is
/// refused `EPERM` in its item; a FID given before, or below one given, `EEXIST`; a name
/// taken `EEXIST` (its FID spent all the same); a user without write permission on the directory gets `EACCES` for the
/// whole batch, a user claiming another owner `EPERM`; an empty or oversized batch, or a
/// grant of no FID, `EINVAL`. None of these makes a file: the directory holds exactly what
/// the legitimate items made, and lfsck finds nothing amiss.
#[test]
fn batches_are_refused_fids_that_are_not_their_clients_own() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("batchatk"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let parent = fid_at(&dir);
    let existing = dir.join("taken");
    fs::write(&existing, b"x").unwrap();
    let mine = fid_at(&existing);
    let mut a = Session::open(&mds, "batchatk", [0x62; 16]);
    let mut b = Session::open(&mds, "batchatk", [0x63; 16]);
    let (fa, na) = a.grant(16);
    let (fb, _) = b.grant(16);
    assert_eq!(na, 16);
    let root = |s: &mut Session, items| s.batch(parent, items);
    // Not its own: the MDT's own range, b's grant, past its grant.
    let next_own = Fid::new(mine.seq, mine.oid + 1);
    let (st, r) = root(
        &mut a,
        vec![
            item(next_own, "own", 0),
            item(nth(fb, 0), "theirs", 0),
            item(nth(fa, 16), "past", 0),
            item(nth(fa, 3), "good", 0),
        ],
    );
    assert_eq!(st, 0);
    assert_eq!(
        r,
        vec![
            Err(Status::Perm),
            Err(Status::Perm),
            Err(Status::Perm),
            Ok(nth(fa, 3))
        ]
    );
    // Given before, below one given, a name taken (its FID is spent all the same).
    let (_, r) = root(
        &mut a,
        vec![
            item(nth(fa, 3), "again", 0),
            item(nth(fa, 1), "below", 0),
            item(nth(fa, 4), "taken", 0),
            item(nth(fa, 4), "retry", 0),
            item(nth(fa, 5), "good2", 0),
        ],
    );
    assert_eq!(
        r,
        vec![
            Err(Status::Exist),
            Err(Status::Exist),
            Err(Status::Exist),
            Err(Status::Exist),
            Ok(nth(fa, 5))
        ]
    );
    // Users: the directory is root's 0755; a user claiming root's ownership.
    let user = Cred::new(4243, 4243, vec![]);
    let (st, _) = nacre_types::cred::with(user.clone(), || {
        root(&mut a, vec![item(nth(fa, 6), "user", 4243)])
    });
    assert_eq!(st, Status::Access as i32);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let (st, _) = nacre_types::cred::with(user.clone(), || {
        root(&mut a, vec![item(nth(fa, 7), "usurp", 0)])
    });
    assert_eq!(st, Status::Perm as i32);
    let (st, r) = nacre_types::cred::with(user, || {
        root(&mut a, vec![item(nth(fa, 8), "user_ok", 4243)])
    });
    assert_eq!((st, r), (0, vec![Ok(nth(fa, 8))]));
    // Sizes.
    assert_eq!(root(&mut a, Vec::new()).0, Status::Inval as i32);
    let many: Vec<_> = (0..=CREATE_BATCH_ITEMS_MAX as u32)
        .map(|i| item(nth(fa, 9), &format!("m{i}"), 0))
        .collect();
    assert_eq!(root(&mut a, many).0, Status::Inval as i32);
    assert_eq!(
        a.call(MdsOp::GrantFids { count: 0 }).0,
        Status::Inval as i32
    );
    // A grant asks for no more than the most one may hold.
    let (_, big) = b.grant(u32::MAX);
    assert_eq!(big, nacre_wire::mds::FID_GRANT_COUNT_MAX);
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["good", "good2", "taken", "user_ok"]);
    assert_eq!(
        fs::read(&existing).unwrap(),
        b"x",
        "the file named is untouched"
    );
    lfsck_clean(&fs.source());
}
