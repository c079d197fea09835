//! Creates sent many per request with FIDs the client gives (issue 44 item 2, step R2 of
//! docs/plans/round-trips.md): `GrantFids` hands a client a range of FIDs that only it may
//! use, `CreateBatch` makes many files of one directory in one transaction. Spoken here by
//! a raw client, as a client library would and as an attacker would, against separate
//! server processes; what it made is checked through a mount.

use super::growth::fid_at;
use nacre_ldlm::msg::{LockRef, DELEGATION, ENTRY_BITS, UPDATE};
use nacre_testkit::raw::RawConn;
use nacre_testkit::{lfsck_clean, nacre_ok, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::mds::{BatchCreate, MdsAnswer, MdsOp, MdsReply, CREATE_BATCH_ITEMS_MAX};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A raw client's session with MDT0000.
pub(crate) struct Session(pub(crate) RawConn);

impl Session {
    pub(crate) fn open(addr: &str, fsname: &str, uuid: [u8; 16]) -> Session {
        let mut s = Session(RawConn::connect(addr, fsname, uuid).unwrap());
        assert_eq!(s.call(MdsOp::Connect).0, 0);
        s
    }

    /// Sends `op`; its status and reply.
    pub(crate) fn call(&mut self, op: MdsOp) -> (i32, Option<MdsReply>) {
        self.0.send_mds(0, op).unwrap();
        let r = self.0.recv().unwrap();
        (r.header.status, r.mds())
    }

    /// A grant of `count` FIDs: its first FID and size.
    pub(crate) fn grant(&mut self, count: u32) -> (Fid, u32) {
        match self.call(MdsOp::GrantFids { count }) {
            (0, Some(MdsReply::FidRange { first, count })) => (first, count),
            other => panic!("grant: {:?}", other.0),
        }
    }

    /// A batch of `items` in `parent`: the status and each item's result.
    pub(crate) fn batch(
        &mut self,
        parent: Fid,
        items: Vec<BatchCreate>,
    ) -> (i32, Vec<Result<Fid, Status>>) {
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
pub(crate) fn nth(first: Fid, i: u32) -> Fid {
    Fid::new(first.seq, first.oid + i)
}

pub(crate) fn item(fid: Fid, name: &str, owner: u32) -> BatchCreate {
    BatchCreate {
        fid,
        kind: nacre_types::FileKind::Regular,
        name: name.as_bytes().to_vec(),
        perm: 0o640,
        uid: owner,
        gid: owner,
        time: nacre_types::TimeSpec::now(),
        data: Vec::new(),
    }
}

/// How many `op` requests MDT0000 of `fsname` served (its `md_stats`).
pub(crate) fn served(fsname: &str, op: &str) -> u64 {
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

/// A batch's items carry the time their client answered them (protocol 11): one near the
/// MDT's clock is each file's time and its directory's; an attacker's forged times — 1970,
/// far in the future, nanoseconds past a second — are not taken (the MDT's own clock), and
/// a refused item's time does not date the directory.
#[test]
fn a_batch_dates_its_files_only_near_the_mdts_clock() {
    use nacre_types::TimeSpec;
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("batchtm"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("taken"), b"").unwrap();
    let parent = fid_at(&dir);
    let mut c = Session::open(&mds, "batchtm", [0x68; 16]);
    let (first, _) = c.grant(10);
    let now = TimeSpec::now();
    let near = TimeSpec {
        sec: now.sec - 5,
        nsec: 123_456_789,
    };
    let at = |i: u32, name: &str, sec: i64, nsec: u32| BatchCreate {
        time: TimeSpec { sec, nsec },
        ..item(nth(first, i), name, 0)
    };
    let items = vec![
        at(0, "near", near.sec, near.nsec),
        at(1, "epoch", 1, 0),
        at(2, "future", i64::MAX, 0),
        at(3, "bad_nsec", now.sec, 2_000_000_000),
        // Refused (the name is taken): its time, later than the others, dates nothing.
        at(4, "taken", now.sec + 30, 0),
    ];
    let (status, results) = c.batch(parent, items);
    assert_eq!(status, 0);
    assert_eq!(results[4], Err(Status::Exist));
    let m = fs::metadata(dir.join("near")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (near.sec, 123_456_789));
    assert_eq!((m.ctime(), m.ctime_nsec()), (near.sec, 123_456_789));
    for name in ["epoch", "future", "bad_nsec"] {
        let m = fs::metadata(dir.join(name)).unwrap();
        assert!(
            (m.ctime() - now.sec).abs() <= 60 && (m.mtime() - now.sec).abs() <= 60,
            "{name}: the MDT's clock, not the client's ({} / {})",
            m.mtime(),
            m.ctime()
        );
    }
    let d = fs::metadata(&dir).unwrap();
    assert!(
        d.mtime() < now.sec + 30,
        "a refused item dated the directory"
    );
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
/// refused `EPERM` in its item; a FID given before `EEXIST` (one below it is still free); a name
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
    // Given before; below one given (free: any order); a name taken (its FID is spent all
    // the same).
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
            Ok(nth(fa, 1)),
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
    // One name twice (each item reads the directory as it was): refused whole.
    let twice = vec![item(nth(fa, 10), "dup", 0), item(nth(fa, 11), "dup", 0)];
    assert_eq!(root(&mut a, twice).0, Status::Inval as i32);
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
    assert_eq!(names, ["below", "good", "good2", "taken", "user_ok"]);
    assert_eq!(
        fs::read(&existing).unwrap(),
        b"x",
        "the file named is untouched"
    );
    lfsck_clean(&fs.source());
}

/// A batch sent asking for locks on its files: the whole answer.
fn locked_batch(s: &mut Session, parent: Fid, items: Vec<BatchCreate>) -> MdsAnswer {
    s.0.send_mds_with(0, MdsOp::CreateBatch { parent, items }, ENTRY_BITS)
        .unwrap();
    s.0.recv().unwrap().answer().expect("answered")
}

/// Each item's FID made, or why not.
fn made(answer: &MdsAnswer) -> Vec<Result<Fid, Status>> {
    match &answer.reply {
        MdsReply::Created(r) => r
            .iter()
            .map(|r| r.as_ref().map(|(a, _)| a.fid).map_err(|s| *s))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Locks granted with a batch (protocol 17), asked for by a raw client as an attacker
/// would: a batch asking for `LOOKUP | UPDATE | LAYOUT` gets them on the files and the
/// directory it made and on nothing else — not on another's file it names as its own FID,
/// not on a FID whose name was taken, not on a FID it gave before, not with a resend
/// answered from the batch's saved reply — and what it got is a real lock: the mount's
/// chmod of the attacker's file, then its removal of the attacker's directory, call them
/// back, while a chmod of the file it named holds up nothing (no lock of the attacker's
/// was left on it).
#[test]
fn a_batch_is_granted_locks_on_the_files_it_made_and_on_nothing_else() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("batchlk"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let parent = fid_at(&dir);
    let victim = dir.join("victim");
    fs::write(&victim, b"x").unwrap();
    let victim_fid = fid_at(&victim);
    let mut a = Session::open(&mds, "batchlk", [0x66; 16]);
    let mut poller = Session::open(&mds, "batchlk", [0x66; 16]);
    polls(&mut poller);
    let (fa, _) = a.grant(8);
    let subdir = BatchCreate {
        kind: nacre_types::FileKind::Directory,
        perm: 0o755,
        ..item(nth(fa, 2), "subdir", 0)
    };
    let items = vec![
        item(victim_fid, "steal", 0),
        item(nth(fa, 0), "victim", 0),
        item(nth(fa, 1), "mine", 0),
        subdir,
    ];
    let answer = locked_batch(&mut a, parent, items);
    assert_eq!(
        made(&answer),
        [
            Err(Status::Perm),
            Err(Status::Exist),
            Ok(nth(fa, 1)),
            Ok(nth(fa, 2))
        ]
    );
    assert_eq!(answer.lock, None);
    assert_eq!(answer.locks.len(), 2, "{:?}", answer.locks);
    let (lock, dir_lock) = (answer.locks[0], answer.locks[1]);
    assert_eq!((lock.fid, lock.bits), (nth(fa, 1), ENTRY_BITS));
    assert_eq!((dir_lock.fid, dir_lock.bits), (nth(fa, 2), ENTRY_BITS));
    // The same request again (its answer lost): answered from its saved reply, whose
    // attributes no lock taken now would cover: none.
    a.0.reuse_xid();
    let items = vec![
        item(victim_fid, "steal", 0),
        item(nth(fa, 0), "victim", 0),
        item(nth(fa, 1), "mine", 0),
        BatchCreate {
            kind: nacre_types::FileKind::Directory,
            perm: 0o755,
            ..item(nth(fa, 2), "subdir", 0)
        },
    ];
    let resent = locked_batch(&mut a, parent, items);
    assert_eq!(made(&resent), made(&answer));
    assert!(resent.locks.is_empty(), "{:?}", resent.locks);
    // Its FID given again: refused, no lock.
    let again = locked_batch(&mut a, parent, vec![item(nth(fa, 1), "again", 0)]);
    assert_eq!(made(&again), [Err(Status::Exist)]);
    assert!(again.locks.is_empty(), "{:?}", again.locks);
    // Nothing of the attacker's on the file it named: the mount's chmod waits for no
    // callback (a poll sees none).
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    match poller.call(MdsOp::LockPoll {
        wait_ms: 500,
        epoch: 0,
    }) {
        (0, Some(MdsReply::Blocking(refs))) => assert!(refs.is_empty(), "{refs:?}"),
        other => panic!("poll: {:?}", other.0),
    }
    // Its own file's lock is real: a change by another client calls it back.
    let mine = dir.join("mine");
    let chmod = std::thread::spawn(move || {
        fs::set_permissions(&mine, fs::Permissions::from_mode(0o600)).unwrap()
    });
    let refs = called_back(&mut poller);
    assert_eq!(
        refs.iter().map(|r| r.handle).collect::<Vec<_>>(),
        [lock.handle]
    );
    assert_eq!(
        a.call(MdsOp::LockCancel {
            handles: vec![lock.handle]
        })
        .0,
        0
    );
    chmod.join().unwrap();
    assert_eq!(
        fs::metadata(dir.join("mine")).unwrap().mode() & 0o777,
        0o600
    );
    // So is its directory's.
    let subdir = dir.join("subdir");
    let rmdir = std::thread::spawn(move || fs::remove_dir(&subdir).unwrap());
    let refs = called_back(&mut poller);
    assert_eq!(
        refs.iter().map(|r| r.handle).collect::<Vec<_>>(),
        [dir_lock.handle]
    );
    let cancel = MdsOp::LockCancel {
        handles: vec![dir_lock.handle],
    };
    assert_eq!(a.call(cancel).0, 0);
    rmdir.join().unwrap();
    assert!(!dir.join("subdir").exists());
    lfsck_clean(&fs.source());
}

/// Asks for `fid`'s delegation: the status and the lock granted.
fn delegate(s: &mut Session, fid: Fid, bits: u8) -> (i32, Option<LockRef>) {
    s.0.send_mds_with(0, MdsOp::DelegateDir { fid }, bits)
        .unwrap();
    let r = s.0.recv().unwrap();
    (r.header.status, r.answer().and_then(|a| a.lock))
}

/// Registers `poller`'s client as one that handles callbacks (locks are granted only to
/// such clients): a poll answered at once.
pub(crate) fn polls(poller: &mut Session) {
    let st = poller.call(MdsOp::LockPoll {
        wait_ms: 0,
        epoch: 0,
    });
    assert_eq!(st.0, 0);
}

/// Polls `client`'s callbacks on a connection of its own: the locks called back.
fn called_back(poller: &mut Session) -> Vec<LockRef> {
    match poller.call(MdsOp::LockPoll {
        wait_ms: 20_000,
        epoch: 0,
    }) {
        (0, Some(MdsReply::Blocking(refs))) => refs,
        other => panic!("poll: {:?}", other.0),
    }
}

pub(crate) const DELEGATED: u8 = UPDATE | DELEGATION;

/// A directory delegated to a client is that client's until another looks: the mount that
/// made it loses its `UPDATE` lock on it (its listing is no longer known complete); the
/// mount's lookup of a name the holder answered but has not sent yet waits at the MDT,
/// which calls the delegation back; the holder sends its batch, cancels, and the lookup
/// finds the file with the FID the holder gave it.
#[test]
fn a_lookup_in_a_delegated_directory_waits_for_its_holders_creates() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("deleg"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("mine");
    fs::create_dir(&dir).unwrap();
    // Known complete by the mount under its UPDATE lock: a miss is answered there.
    assert!(fs::metadata(dir.join("a1")).is_err());
    let parent = fid_at(&dir);
    let mut a = Session::open(&mds, "deleg", [0x64; 16]);
    let mut poller = Session::open(&mds, "deleg", [0x64; 16]);
    polls(&mut poller);
    let (first, _) = a.grant(10);
    let (status, lock) = delegate(&mut a, parent, DELEGATED);
    assert_eq!(status, 0);
    let lock = lock.expect("granted");
    assert_eq!((lock.fid, lock.bits), (parent, DELEGATED));
    // The holder answered a create of a1 itself; the mount looks it up meanwhile.
    let path = dir.join("a1");
    let looker = std::thread::spawn(move || fs::metadata(&path).map(|m| m.ino()));
    let refs = called_back(&mut poller);
    assert_eq!(
        refs.iter().map(|r| r.handle).collect::<Vec<_>>(),
        [lock.handle]
    );
    let (st, r) = a.batch(parent, vec![item(nth(first, 0), "a1", 0)]);
    assert_eq!((st, r), (0, vec![Ok(nth(first, 0))]));
    assert_eq!(
        a.call(MdsOp::LockCancel {
            handles: vec![lock.handle]
        })
        .0,
        0
    );
    let ino = looker.join().unwrap().expect("found once sent");
    assert_eq!(Fid::from_ino(ino), Some(nth(first, 0)));
    lfsck_clean(&fs.source());
}

/// A raw client speaks `DelegateDir` as an attacker would: a user who may not create in the
/// directory is refused `EACCES`, a file `ENOTDIR`, a request without both lock bits
/// `EINVAL`; none is granted anything. Delegations are one client's at a time: a second
/// client's request waits while the first is called back; a create by another client waits
/// for the holder's batch (the holder's file gets the name, the other's exclusive create
/// `EEXIST`).
#[test]
fn a_delegation_is_one_clients_and_refused_to_whoever_may_not_create() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("delegatk"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("file");
    fs::write(&file, b"x").unwrap();
    let parent = fid_at(&dir);
    let mut a = Session::open(&mds, "delegatk", [0x65; 16]);
    let mut a_poll = Session::open(&mds, "delegatk", [0x65; 16]);
    polls(&mut a_poll);
    let user = Cred::new(4244, 4244, vec![]);
    let refused = nacre_types::cred::with(user, || delegate(&mut a, parent, DELEGATED));
    assert_eq!(
        refused,
        (Status::Access as i32, None),
        "root's 0755 directory"
    );
    // A shared 1777 directory: the user may create there, but a holder answers everyone's
    // callbacks on it, so only its owner is delegated it; its own directory is.
    let shared = fs.path("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    let own = fs.path("own");
    fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(4244), Some(4244)).unwrap();
    let (shared, own) = (fid_at(&shared), fid_at(&own));
    let user = Cred::new(4244, 4244, vec![]);
    let not_owner = nacre_types::cred::with(user.clone(), || delegate(&mut a, shared, DELEGATED));
    assert_eq!(
        not_owner,
        (Status::Perm as i32, None),
        "another's 1777 directory"
    );
    let owner = nacre_types::cred::with(user, || delegate(&mut a, own, DELEGATED));
    assert_eq!(owner.0, 0, "its own directory");
    let own_lock = owner.1.expect("granted to its owner");
    assert_eq!(
        a.call(MdsOp::LockCancel {
            handles: vec![own_lock.handle]
        })
        .0,
        0
    );
    assert_eq!(
        delegate(&mut a, fid_at(&file), DELEGATED),
        (Status::NotDir as i32, None)
    );
    assert_eq!(
        delegate(&mut a, parent, UPDATE),
        (Status::Inval as i32, None)
    );
    assert_eq!(delegate(&mut a, parent, 0), (Status::Inval as i32, None));
    // Granted to a; b asks too: a is called back, and b gets it once a cancelled.
    let (first, _) = a.grant(10);
    let (_, lock) = delegate(&mut a, parent, DELEGATED);
    let lock = lock.expect("granted");
    let mds_b = mds.clone();
    let b_asks = std::thread::spawn(move || {
        let mut b = Session::open(&mds_b, "delegatk", [0x66; 16]);
        let mut b_poll = Session::open(&mds_b, "delegatk", [0x66; 16]);
        polls(&mut b_poll);
        let got = delegate(&mut b, parent, DELEGATED);
        (b, b_poll, got)
    });
    assert_eq!(called_back(&mut a_poll)[0].handle, lock.handle);
    assert_eq!(
        a.call(MdsOp::LockCancel {
            handles: vec![lock.handle]
        })
        .0,
        0
    );
    let (mut b, mut b_poll, (st, b_lock)) = b_asks.join().unwrap();
    assert_eq!(st, 0);
    let b_lock = b_lock.expect("b's now");
    assert_eq!(b_lock.bits, DELEGATED);
    // b holds it; a's exclusive create of "x" waits for b's batch, which makes "x".
    let (b_first, _) = b.grant(10);
    let create = MdsOp::Create {
        parent,
        name: b"x".to_vec(),
        kind: nacre_types::FileKind::Regular,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        exclusive: true,
        open: false,
        access: 0,
    };
    let mds_a = mds.clone();
    let a_creates = std::thread::spawn(move || {
        let mut a2 = Session::open(&mds_a, "delegatk", [0x65; 16]);
        a2.call(create).0
    });
    assert_eq!(called_back(&mut b_poll)[0].handle, b_lock.handle);
    let (st, r) = b.batch(parent, vec![item(nth(b_first, 0), "x", 0)]);
    assert_eq!((st, r), (0, vec![Ok(nth(b_first, 0))]));
    assert_eq!(
        b.call(MdsOp::LockCancel {
            handles: vec![b_lock.handle]
        })
        .0,
        0
    );
    assert_eq!(a_creates.join().unwrap(), Status::Exist as i32);
    assert_eq!(fid_at(&dir.join("x")), nth(b_first, 0));
    let _ = first;
    lfsck_clean(&fs.source());
}

/// A mount with `--async-dirops` answers the creates in a directory it made itself and
/// sends them many per request: 300 files cost the MDT no `create` and at most a few
/// `create_batch` requests. Another mount's listing waits for them (the MDT calls the
/// delegation back; the holder sends what it answered first) and finds every one with the
/// FID the holder gave it; a file written through its creating handle is read back there;
/// the other mount's exclusive create of a name the holder answered gets `EEXIST`; lfsck
/// finds nothing amiss.
#[test]
fn a_mount_answers_creates_in_its_delegated_directory_and_others_see_them() {
    use std::io::Write;
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("asyncd"));
    let a_mnt = fs.scratch().join("mnt_a");
    fs::create_dir_all(&a_mnt).unwrap();
    let a = fs.mount_another(&a_mnt, &["--async-dirops", "true"]);
    let da = a.mnt.join("d");
    fs::create_dir(&da).unwrap();
    let (creates, batches) = (served("asyncd", "create"), served("asyncd", "create_batch"));
    for i in 0..300 {
        fs::File::create(da.join(format!("f{i}"))).unwrap();
    }
    let mut w = fs::File::create(da.join("written")).unwrap();
    w.write_all(b"answered here, written, sent").unwrap();
    drop(w);
    fs::File::create(da.join("y")).unwrap();
    assert_eq!(
        served("asyncd", "create"),
        creates,
        "no create reached the MDT"
    );
    let db = fs.path("d");
    let mut names: Vec<String> = fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = (0..300).map(|i| format!("f{i}")).collect();
    want.extend(["written".to_string(), "y".to_string()]);
    want.sort();
    assert_eq!(names, want, "the other mount sees every file answered");
    let sent = served("asyncd", "create_batch") - batches;
    assert!((2..=10).contains(&sent), "{sent} batches for 302 files");
    for i in [0, 150, 299] {
        let n = format!("f{i}");
        assert_eq!(
            fid_at(&db.join(&n)),
            fid_at(&da.join(&n)),
            "{n}: one file, one FID"
        );
    }
    assert_eq!(
        fs::read(db.join("written")).unwrap(),
        b"answered here, written, sent"
    );
    // Answered by a, then asked for by the other mount: the name is a's.
    fs::File::create(da.join("z")).unwrap();
    let taken = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(db.join("z"));
    assert_eq!(taken.unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    drop(a);
    lfsck_clean(&fs.source());
}

/// A raw client replays locks to an MDT that has changed nothing since it started (when
/// replayed locks are taken back): an `UPDATE` lock on the root is held again, a claimed
/// `DELEGATION` is refused (a delegation is granted only by `DelegateDir`, after the other
/// clients' locks were called back).
#[test]
fn a_delegation_is_never_taken_back_by_a_lock_replay() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("delegrp"));
    let mds = fs.servers_mut()[0].listen.clone();
    let mut c = Session::open(&mds, "delegrp", [0x67; 16]);
    polls(&mut c);
    let root = nacre_testkit::raw::root();
    let plain = LockRef {
        handle: 1 << 40,
        fid: root,
        bits: UPDATE,
    };
    let claimed = LockRef {
        handle: (1 << 40) + 1,
        fid: root,
        bits: DELEGATED,
    };
    match c.call(MdsOp::LockReplay {
        locks: vec![plain, claimed],
    }) {
        (0, Some(MdsReply::LocksRefused(refused))) => {
            assert_eq!(
                refused,
                vec![claimed.handle],
                "only the delegation is refused"
            );
        }
        other => panic!("lock replay: {:?}", other.0),
    }
}

/// Quota limits hold against a raw client's batches, as an attacker would send them: a
/// limit appearing on the MDT calls the holder's delegation back; the batch it sends
/// while it gives it back is made past the limit (its creates were answered already, under
/// the delegation); once it cancelled, a batch past the limit is refused `EDQUOT`, and
/// no delegation is granted while the limit stands.
#[test]
fn quota_limits_hold_against_batches_no_delegation_covers() {
    let fsname = "delegq";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let mds = fs.servers_mut()[0].listen.clone();
    let own = fs.path("own");
    fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(4245), Some(4245)).unwrap();
    let parent = fid_at(&own);
    let mut a = Session::open(&mds, fsname, [0x67; 16]);
    let mut a_poll = Session::open(&mds, fsname, [0x67; 16]);
    polls(&mut a_poll);
    let user = Cred::new(4245, 4245, vec![]);
    let as_user = |f: &mut dyn FnMut() -> (i32, Vec<Result<Fid, Status>>)| {
        nacre_types::cred::with(user.clone(), f)
    };
    let (first, _) = a.grant(20);
    let (st, lock) = nacre_types::cred::with(user.clone(), || delegate(&mut a, parent, DELEGATED));
    assert_eq!(st, 0);
    let lock = lock.expect("granted to its owner");
    nacre_ok(&["setquota", "-u", "4245", "-I", "2", &src]);
    // The limit reaches the MDT within its quota sync: the delegation is called back.
    assert_eq!(called_back(&mut a_poll)[0].handle, lock.handle);
    let items: Vec<_> = (0..5)
        .map(|i| item(nth(first, i), &format!("f{i}"), 4245))
        .collect();
    let (st, r) = as_user(&mut || a.batch(parent, items.clone()));
    assert_eq!(st, 0, "made while the holder gives it back");
    assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
    assert_eq!(
        a.call(MdsOp::LockCancel {
            handles: vec![lock.handle]
        })
        .0,
        0
    );
    // No delegation covers it now: past the limit is refused (the MDT may first answer
    // EINPROGRESS while it asks the quota master).
    let late = vec![item(nth(first, 10), "late", 4245)];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (st, r) = loop {
        let (st, r) = as_user(&mut || a.batch(parent, late.clone()));
        if st != Status::InProgress as i32 || std::time::Instant::now() > deadline {
            break (st, r);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        st == Status::DQuot as i32 || r == vec![Err(Status::DQuot)],
        "past the limit without a delegation: {st} {r:?}"
    );
    let (st, lock) = nacre_types::cred::with(user, || delegate(&mut a, parent, DELEGATED));
    assert_eq!(
        (st, lock),
        (Status::NotSupp as i32, None),
        "none while limited"
    );
    let v: serde_json::Value =
        serde_json::from_str(&nacre_ok(&["quota", "--json", "-u", "4245", &src])).unwrap();
    assert_eq!(
        v[0]["inodes"], 6,
        "the directory and the five, counted exactly"
    );
    lfsck_clean(&src);
}

/// One name of an `UnlinkBatch`.
fn gone(fid: Fid, name: &str) -> nacre_wire::mds::BatchUnlink {
    nacre_wire::mds::BatchUnlink {
        fid,
        name: name.as_bytes().to_vec(),
        time: nacre_types::TimeSpec::now(),
    }
}

/// `UnlinkBatch` spoken by a raw client as an attacker would: a user who may not write
/// the directory is refused `EACCES`, another user's file in a sticky directory `EPERM`,
/// nothing removed; a name that no longer leads to the FID sent (`ESTALE`), a directory
/// (`EISDIR`) or a missing name (`ENOENT`) is refused in its place while the others go;
/// an empty batch or one past its bound is `EINVAL`. What it removes is gone for a mount,
/// the inode quota falls with it, and the namespace checker finds nothing.
#[test]
fn unlink_batches_remove_only_what_their_sender_may() {
    let fsname = "unlinkb";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    for i in 0..4 {
        fs::write(dir.join(format!("f{i}")), b"x").unwrap();
    }
    fs::create_dir(dir.join("sub")).unwrap();
    let sticky = fs.path("tmp");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    fs::write(sticky.join("theirs"), b"y").unwrap();
    std::os::unix::fs::chown(sticky.join("theirs"), Some(4246), Some(4246)).unwrap();
    let parent = fid_at(&dir);
    let f = |i: u32| fid_at(&dir.join(format!("f{i}")));
    let inodes = || -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(&nacre_ok(&["quota", "--json", "-u", "0", &src])).unwrap();
        v[0]["inodes"].as_u64().unwrap()
    };
    let before = inodes();
    let mut s = Session::open(&mds, fsname, [0x68; 16]);
    let unlink = |s: &mut Session, parent: Fid, items: Vec<nacre_wire::mds::BatchUnlink>| match s
        .call(MdsOp::UnlinkBatch { parent, items })
    {
        (0, Some(MdsReply::Unlinked(r))) => (0, r),
        (st, _) => (st, Vec::new()),
    };
    // Not the directory's writer: refused whole.
    let user = Cred::new(4247, 4247, vec![]);
    let refused = nacre_types::cred::with(user.clone(), || {
        unlink(&mut s, parent, vec![gone(f(0), "f0")])
    });
    assert_eq!(refused.0, Status::Access as i32);
    // Another user's file in a sticky directory.
    let theirs = fid_at(&sticky.join("theirs"));
    let refused = nacre_types::cred::with(user, || {
        unlink(&mut s, fid_at(&sticky), vec![gone(theirs, "theirs")])
    });
    assert_eq!(refused.0, Status::Perm as i32);
    assert!(sticky.join("theirs").exists());
    // Bounds.
    assert_eq!(unlink(&mut s, parent, Vec::new()).0, Status::Inval as i32);
    let over = vec![gone(f(0), "f0"); nacre_wire::mds::UNLINK_BATCH_ITEMS_MAX + 1];
    assert_eq!(unlink(&mut s, parent, over).0, Status::Inval as i32);
    // A name or a file twice (two names of one file): refused whole, nothing removed.
    let twice = vec![gone(f(0), "f0"), gone(f(0), "f0")];
    assert_eq!(unlink(&mut s, parent, twice).0, Status::Inval as i32);
    fs::hard_link(dir.join("f0"), dir.join("f0-link")).unwrap();
    let two_names = vec![gone(f(0), "f0"), gone(f(0), "f0-link")];
    assert_eq!(unlink(&mut s, parent, two_names).0, Status::Inval as i32);
    fs::remove_file(dir.join("f0-link")).unwrap();
    assert!(dir.join("f0").exists());
    // Each item on its own: a stale FID, a directory, a missing name, and two that go.
    let (st, r) = unlink(
        &mut s,
        parent,
        vec![
            gone(f(0), "f0"),
            gone(f(3), "f1"),
            gone(fid_at(&dir.join("sub")), "sub"),
            gone(Fid::new(parent.seq, 0xdead), "nothing"),
            gone(f(2), "f2"),
        ],
    );
    assert_eq!(st, 0);
    assert_eq!(
        r,
        vec![
            Ok(()),
            Err(Status::Stale),
            Err(Status::IsDir),
            Err(Status::NoEnt),
            Ok(())
        ]
    );
    let mut left: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, vec!["f1", "f3", "sub"]);
    assert_eq!(inodes(), before - 2, "the quota falls with them");
    lfsck_clean(&src);
}
