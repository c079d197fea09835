//! Write RPCs of many byte ranges (`OssRequest::WriteRuns`, crates/oss/src/writes.rs) on a
//! real OSS process, sent by a raw client as an attacker would: run lists that overlap, are
//! unsorted, are empty, are too many, go past the largest file or do not add up to the bulk
//! are refused (`EPROTO`) and change nothing; one under another OST start is stale; a good
//! one writes each run where it says, and the mount that held the object's locks reads it.
//! A mount's write-behind sends what it keeps with gaps in such RPCs, and one run per RPC
//! to an OST that answers them as an older server does.

use nacre_testkit::raw::RawConn;
use nacre_testkit::{fail_loc, get_param, object_of, Form, Spec, TestFs};
use nacre_tests::wb_stat;
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{ObjectId, Owner, Status};
use nacre_wire::oss::{OssReply, OssRequest, Run, WRITE_RUNS_MAX};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

fn ask(c: &mut RawConn, ost: u32, req: OssRequest, bulk: Option<&[u8]>) -> (i32, Option<OssReply>) {
    c.send_oss(ost, req, bulk).unwrap();
    let r = c.recv().unwrap();
    (r.header.status, r.oss())
}

/// A hostile request: what it is, its runs (offset, length), its bulk's length, its epoch.
type Hostile = (&'static str, Vec<(u64, u32)>, usize, u64);

fn runs_of(object: ObjectId, epoch: u64, runs: &[(u64, u32)]) -> OssRequest {
    OssRequest::WriteRuns {
        object,
        owner: Owner::default(),
        grant_used: 0,
        epoch,
        layout_gen: 0,
        runs: runs
            .iter()
            .map(|&(offset, len)| Run { offset, len })
            .collect(),
    }
}

fn read_object(c: &mut RawConn, ost: u32, object: ObjectId, len: u32) -> Vec<u8> {
    let req = OssRequest::Read {
        object,
        offset: 0,
        len,
        lock: false,
    };
    c.send_oss(ost, req, None).unwrap();
    let r = c.recv().unwrap();
    assert_eq!(r.header.status, 0);
    r.bulk
}

#[test]
fn hostile_run_lists_are_refused_and_good_ones_write_each_run() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("runs"));
    let f = fs.path("f");
    let before = nacre_testkit::pattern(5, 65_536);
    std::fs::write(&f, &before).unwrap();
    std::fs::File::open(&f).unwrap().sync_all().unwrap();
    let (ost, object) = object_of(&f);
    let oss = fs.servers_mut()[1].listen.clone();
    nacre_types::cred::set_current(Some(nacre_types::Cred::root()));
    let mut c = RawConn::connect(&oss, "runs", [9; 16]).unwrap();
    c.set_oss_client([9; 16]);
    // The OST's start, as a client that polls learns it.
    let poll = OssRequest::LockPoll {
        wait_ms: 0,
        epoch: 0,
    };
    let epoch = match ask(&mut c, ost, poll, None) {
        (0, Some(OssReply::Blocking { epoch, .. })) => epoch,
        other => panic!("{other:?}"),
    };
    // The mount holds the object's write lock (its write brought it): a refused request
    // must not call it back.
    let mount = fs.client_pid().expect("the mount's process");
    let callbacks = || {
        let text = get_param(Some(mount), "ldlm.namespaces.runs-OST0000-osc.stats");
        text.lines()
            .find_map(|l| l.strip_prefix("callbacks "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no callbacks in {text}"))
    };
    let callbacks_before = callbacks();
    let proto = Status::Proto.code();
    let many: Vec<(u64, u32)> = (0..=WRITE_RUNS_MAX as u64).map(|i| (i * 2, 1)).collect();
    let bad: Vec<Hostile> = vec![
        ("overlapping", vec![(0, 8), (4, 8)], 16, epoch),
        ("unsorted", vec![(100, 4), (0, 4)], 8, epoch),
        ("short of the bulk", vec![(0, 4)], 8, epoch),
        ("past the bulk", vec![(0, 8)], 4, epoch),
        ("an empty run", vec![(0, 0), (10, 4)], 4, epoch),
        ("no run", vec![], 4, epoch),
        ("too many", many, WRITE_RUNS_MAX + 1, epoch),
        (
            "past the largest file",
            vec![(FILE_BYTES_MAX - 2, 4)],
            4,
            epoch,
        ),
        ("not kept behind (epoch 0)", vec![(0, 4), (8, 4)], 8, 0),
    ];
    for (what, runs, bulk, epoch) in bad {
        let data = vec![0xee; bulk];
        let (status, _) = ask(&mut c, ost, runs_of(object, epoch, &runs), Some(&data));
        assert_eq!(status, proto, "{what}");
    }
    let (status, _) = ask(&mut c, ost, runs_of(object, epoch, &[(0, 4)]), None);
    assert_eq!(status, proto, "no bulk");
    // Kept under another start of the OST: stale, as a single-range write is.
    let (status, _) = ask(
        &mut c,
        ost,
        runs_of(object, epoch.wrapping_add(1).max(1), &[(0, 4), (8, 4)]),
        Some(&[0xee; 8]),
    );
    assert_eq!(status, Status::Stale.code(), "another start");
    assert_eq!(
        callbacks(),
        callbacks_before,
        "a refused request called the mount's lock back"
    );
    assert!(
        read_object(&mut c, ost, object, 65_536) == before,
        "a refused request wrote something"
    );
    // A good one: three runs, the last past the object's end.
    let runs = [(100u64, 3u32), (5_000, 4_096), (70_000, 10)];
    let mut model = before.clone();
    model.resize(70_010, 0);
    let mut bulk = Vec::new();
    for (i, &(off, len)) in runs.iter().enumerate() {
        let bytes = vec![0xa0 + i as u8; len as usize];
        model[off as usize..off as usize + len as usize].copy_from_slice(&bytes);
        bulk.extend_from_slice(&bytes);
    }
    match ask(&mut c, ost, runs_of(object, epoch, &runs), Some(&bulk)) {
        (0, Some(OssReply::Written { len, .. })) => assert_eq!(len as usize, bulk.len()),
        other => panic!("{other:?}"),
    }
    assert!(read_object(&mut c, ost, object, 80_000) == model);
    // The mount that wrote the file held its data lock: called back by the write, it
    // reads what the runs wrote over its bytes. (The size it shows stays the one it made
    // under its MDT lock, crates/client/src/vouched.rs: a client that writes opens the
    // file at the MDT first, which calls that lock back; this raw one did not.)
    let seen = std::fs::read(&f).unwrap();
    let first_wrong = seen.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "the mount read stale bytes");
    assert_eq!(seen.len(), before.len());
}

/// `n` blocks of 4 KiB kept by the mount at every other 4 KiB from `from` (a gap after
/// each: IOR hard's records when one rank runs ahead of the other), then `fsync`; the
/// model is updated.
fn gapped_writes(f: &std::fs::File, model: &mut Vec<u8>, from: u64, n: u64, tag: u8) {
    for i in 0..n {
        let off = from + i * 8_192;
        let block = vec![tag.wrapping_add(i as u8); 4_096];
        f.write_all_at(&block, off).unwrap();
        let end = off as usize + block.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&block);
    }
    f.sync_all().unwrap();
}

#[test]
fn gapped_kept_writes_go_as_rpcs_of_runs_and_one_run_each_to_an_older_ost() {
    for older in [false, true] {
        let fsname = if older { "runso" } else { "runsn" };
        let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
        let pid = fs.client_pid().expect("the mount's process");
        let oss = fs.servers_mut()[1].pid();
        let p = fs.path("f");
        let f = std::fs::File::create(&p).unwrap();
        // The first write goes through and brings the write lock and grant; the mount
        // keeps writes once its first poll told it the OST's start.
        let mut model = Vec::new();
        gapped_writes(&f, &mut model, 0, 1, 1);
        let epoch = format!("ldlm.namespaces.{fsname}-OST0000-osc.server_epoch");
        let deadline = Instant::now() + Duration::from_secs(30);
        while get_param(Some(pid), &epoch).trim() == "0" {
            assert!(
                Instant::now() < deadline,
                "the mount never learns the OST's start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if older {
            fail_loc(oss, "oss.write_runs.unknown");
        }
        let kept = wb_stat(fsname, Some(pid), "writes_kept");
        gapped_writes(&f, &mut model, 65_536, 64, 10);
        assert!(
            wb_stat(fsname, Some(pid), "writes_kept") >= kept + 60,
            "the gapped writes were not kept"
        );
        let of_runs = wb_stat(fsname, Some(pid), "flush_rpcs_of_runs");
        assert!(of_runs >= 1, "64 gapped writes went in no RPC of many runs");
        assert!(
            wb_stat(fsname, Some(pid), "flush_rpcs") < 32,
            "64 gapped writes took an RPC each"
        );
        if older {
            let fired = get_param(Some(oss), "fail_fired");
            assert_eq!(fired.trim(), "1", "the OST refused no RPC of runs");
            // From then on one run per RPC to that OST.
            gapped_writes(&f, &mut model, 1 << 20, 16, 100);
            assert_eq!(wb_stat(fsname, Some(pid), "flush_rpcs_of_runs"), of_runs);
        }
        assert_eq!(wb_stat(fsname, Some(pid), "lost_bytes"), 0);
        drop(f);
        // Read by another mount: what the OST has.
        let other = fs.scratch().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let _m = fs.mount_another(&other, &[]);
        assert!(
            std::fs::read(other.join("f")).unwrap() == model,
            "older: {older}"
        );
    }
}
