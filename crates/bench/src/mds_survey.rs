//! mds-survey's equivalent: drive an MDT directly — no client, no network, no FUSE — with
//! `threads` threads over `dirs` directories, running Lustre's mds-survey tests in order:
//! `create`, `lookup`, `md_getattr`, `setxattr`, `destroy`; and Nacre's `create_batch`
//! (files of other names made [`CREATE_BATCH_ITEMS_MAX`] per request with FIDs granted to
//! the thread's client, as a client's asynchronous creates send them; lookups and destroys
//! do not see them).
//!
//! The MDT is a scratch one formatted in a directory you give (put it on the device you want
//! to measure); every request goes through the same code a network request reaches
//! ([`nacre_mds::execute`]: reply saving, transaction, journal commit, statistics), so the
//! difference between these rates and mdtest's through a mount is the cost of the client,
//! the network and FUSE. Files get layouts on placeholder OSTs (object ids are allocated, as
//! for any create; nothing is sent to an OST). The scratch MDT is removed at the end.

use crate::BenchError;
use nacre_mds::mdt::Mdt;
use nacre_mds::osp::OstPool;
use nacre_osd::Label;
use nacre_types::{Fid, FileKind, Status, TargetKind};
use nacre_wire::mds::{BatchCreate, MdsCall, MdsOp, MdsReply, CREATE_BATCH_ITEMS_MAX};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

/// Lustre's mds-survey tests, in the order they run.
pub const TESTS: [&str; 6] = [
    "create",
    "create_batch",
    "lookup",
    "md_getattr",
    "setxattr",
    "destroy",
];
/// Most threads.
pub const THREADS_MAX: usize = 1024;
/// Most files in one run.
pub const FILES_MAX: u64 = 100_000_000;

/// Parameters, named after mds-survey's variables.
#[derive(Clone, Debug, Serialize)]
pub struct MdsSurveyParams {
    /// Where the scratch MDT is made (must not exist yet, or be an empty directory).
    pub dir: PathBuf,
    /// `file_count`: files in all.
    pub files: u64,
    /// `dir_count`: directories the threads spread over.
    pub dirs: u32,
    /// `thrhi`: threads.
    pub threads: usize,
    /// `tests_str`: tests to run (a subset of [`TESTS`], run in that order).
    pub tests: Vec<String>,
    /// `stripe_count`: placeholder OSTs each file gets an object on.
    pub stripe_count: u32,
    /// Reply only after the journal sync (the MDT's `sync_on_reply`).
    pub sync_on_reply: bool,
}

/// One test's result.
#[derive(Clone, Debug, Serialize)]
pub struct MdsSurveyTest {
    /// Test name.
    pub test: String,
    /// Operations in all.
    pub ops: u64,
    /// Operations per second over all threads.
    pub rate: f64,
    /// Slowest thread's rate.
    pub thread_min: f64,
    /// Fastest thread's rate.
    pub thread_max: f64,
}

struct Survey {
    mdt: Mdt,
    xid: AtomicU64,
    dirs: Vec<Fid>,
    /// Each thread's files: FIDs in creation order.
    fids: Vec<Mutex<Vec<Fid>>>,
}

impl Survey {
    fn call(&self, client: [u8; 16], op: MdsOp) -> Result<MdsReply, Status> {
        let xid = self.xid.fetch_add(1, Ordering::Relaxed);
        let call = MdsCall {
            lock_bits: 0,
            client,
            replied_below: xid,
            jobid: "mds-survey".into(),
            cred: nacre_types::Cred::root(),
            op,
        };
        let out = nacre_mds::execute(&self.mdt, &call, xid, "0@lo");
        if out.status != Status::Ok {
            return Err(out.status);
        }
        nacre_wire::decode_body(&out.body).map_err(|_| Status::Proto)
    }
}

/// `create_batch`: `count` files of thread `t` made in `parent` in batches, with FIDs
/// granted to `client`.
fn batch_creates(
    s: &Survey,
    client: [u8; 16],
    parent: Fid,
    t: usize,
    count: u64,
) -> Result<(), BenchError> {
    let mut fids: Vec<Fid> = Vec::new();
    let mut i = 0u64;
    while i < count {
        let n = (count - i).min(CREATE_BATCH_ITEMS_MAX as u64) as usize;
        while fids.len() < n {
            let want = nacre_wire::mds::FID_GRANT_COUNT_MAX;
            match s.call(client, MdsOp::GrantFids { count: want }) {
                Ok(MdsReply::FidRange { first, count }) => {
                    fids.extend((0..count).rev().map(|k| Fid::new(first.seq, first.oid + k)))
                }
                Ok(_) => return Err(mdt_err("grant_fids", Status::Proto)),
                Err(e) => return Err(mdt_err("grant_fids", e)),
            }
        }
        let items: Vec<BatchCreate> = (0..n as u64)
            .map(|k| BatchCreate {
                fid: fids.pop().expect("granted"),
                kind: nacre_types::FileKind::Regular,
                name: format!("b{t}.{}", i + k).into_bytes(),
                perm: 0o644,
                uid: 0,
                gid: 0,
                time: nacre_types::TimeSpec::now(),
                data: Vec::new(),
            })
            .collect();
        match s.call(client, MdsOp::CreateBatch { parent, items }) {
            Ok(MdsReply::Created(r)) => {
                if let Some(Err(e)) = r.into_iter().find(Result::is_err) {
                    return Err(mdt_err("create_batch", e));
                }
            }
            Ok(_) => return Err(mdt_err("create_batch", Status::Proto)),
            Err(e) => return Err(mdt_err("create_batch", e)),
        }
        i += n as u64;
    }
    Ok(())
}

fn client_of(thread: usize) -> [u8; 16] {
    let mut c = [0x5u8; 16];
    c[..8].copy_from_slice(&(thread as u64).to_le_bytes());
    c
}

fn name_of(thread: usize, i: u64) -> Vec<u8> {
    format!("f{thread}.{i}").into_bytes()
}

impl MdsSurveyParams {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Params(m));
        if self.threads == 0 || self.threads > THREADS_MAX {
            return bad(format!("threads must be 1..={THREADS_MAX}"));
        }
        if self.files == 0 || self.files > FILES_MAX {
            return bad(format!("file count must be 1..={FILES_MAX}"));
        }
        if self.dirs == 0 {
            return bad("dir count must be at least 1".into());
        }
        if self.stripe_count == 0
            || self.stripe_count > u32::from(nacre_types::limits::STRIPE_COUNT_MAX)
        {
            return bad("stripe count must be 1..=2000".into());
        }
        for t in &self.tests {
            if !TESTS.contains(&t.as_str()) {
                return bad(format!("unknown test '{t}': use {}", TESTS.join(" ")));
            }
        }
        if self.dir.exists()
            && std::fs::read_dir(&self.dir)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            return bad(format!(
                "{} must be a new or empty directory (a scratch MDT is made there)",
                self.dir.display()
            ));
        }
        Ok(())
    }
}

fn mdt_err(what: &str, s: Status) -> BenchError {
    BenchError::Params(format!("{what}: {s}"))
}

/// Runs the survey; removes the scratch MDT afterwards, also on failure.
pub fn run(p: &MdsSurveyParams) -> Result<Vec<MdsSurveyTest>, BenchError> {
    run_with(p, |_| {})
}

/// [`run`], calling `progress` after each test.
pub fn run_with(
    p: &MdsSurveyParams,
    progress: impl FnMut(&MdsSurveyTest),
) -> Result<Vec<MdsSurveyTest>, BenchError> {
    p.validate()?;
    let existed = p.dir.exists();
    let mdt_dir = p.dir.join("scratch-MDT0000");
    let result = (|| {
        std::fs::create_dir_all(&mdt_dir).map_err(|e| crate::io_err("mkdir", &mdt_dir, e))?;
        let label = Label::new(TargetKind::Mdt, 0, "survey", None)
            .map_err(|e| BenchError::Params(e.to_string()))?;
        label
            .write(&mdt_dir, false)
            .map_err(|e| BenchError::Params(e.to_string()))?;
        let kv = nacre_kv::FjallStore::open(&mdt_dir.join("db"), &nacre_mdstore::records::TABLES)
            .map_err(|e| BenchError::Params(format!("metadata store: {e}")))?;
        let osts = Arc::new(OstPool::detached("survey", p.stripe_count));
        let mdt = Mdt::open(label, &mdt_dir, Arc::new(kv), osts)
            .map_err(|s| mdt_err("opening the scratch MDT", s))?;
        mdt.set_sync_on_reply(p.sync_on_reply);
        surveys(p, mdt, progress)
    })();
    let _ = std::fs::remove_dir_all(&mdt_dir);
    if !existed {
        let _ = std::fs::remove_dir(&p.dir);
    }
    result
}

fn surveys(
    p: &MdsSurveyParams,
    mdt: Mdt,
    mut progress: impl FnMut(&MdsSurveyTest),
) -> Result<Vec<MdsSurveyTest>, BenchError> {
    let mut s = Survey {
        mdt,
        xid: AtomicU64::new(1),
        dirs: Vec::new(),
        fids: (0..p.threads).map(|_| Mutex::new(Vec::new())).collect(),
    };
    for d in 0..p.dirs {
        let op = MdsOp::Mkdir {
            parent: Fid::ROOT,
            name: format!("survey.{d}").into_bytes(),
            perm: 0o755,
            uid: 0,
            gid: 0,
        };
        match s.call(client_of(usize::MAX), op) {
            Ok(MdsReply::Entry { attr, .. }) => s.dirs.push(attr.fid),
            Ok(_) => return Err(mdt_err("mkdir", Status::Proto)),
            Err(e) => return Err(mdt_err("mkdir", e)),
        }
    }
    let per_thread = p.files.div_ceil(p.threads as u64);
    let mut results = Vec::new();
    for test in TESTS.iter().filter(|t| p.tests.iter().any(|x| x == *t)) {
        let t = run_test(p, &s, test, per_thread)?;
        progress(&t);
        results.push(t);
    }
    Ok(results)
}

fn run_test(
    p: &MdsSurveyParams,
    s: &Survey,
    test: &str,
    per_thread: u64,
) -> Result<MdsSurveyTest, BenchError> {
    let barrier = Barrier::new(p.threads + 1);
    let outcome: Result<(f64, Vec<f64>), BenchError> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || -> Result<f64, BenchError> {
                    let client = client_of(t);
                    let parent = s.dirs[t % s.dirs.len()];
                    let mut fids = s.fids[t].lock().expect("fids");
                    barrier.wait();
                    let start = Instant::now();
                    let mut r = Ok(());
                    if test == "create_batch" {
                        r = batch_creates(s, client, parent, t, per_thread);
                    }
                    let singles = if test == "create_batch" {
                        0
                    } else {
                        per_thread
                    };
                    for i in 0..singles {
                        let name = name_of(t, i);
                        let fid = fids.get(i as usize).copied().unwrap_or(Fid::ROOT);
                        let op = match test {
                            "create" => MdsOp::Create {
                                parent,
                                name,
                                kind: FileKind::Regular,
                                perm: 0o644,
                                uid: 0,
                                gid: 0,
                                rdev: 0,
                                exclusive: true,
                                open: false,
                                access: 0,
                            },
                            "lookup" => MdsOp::Lookup { parent, name },
                            "md_getattr" => MdsOp::GetAttr { fid },
                            "setxattr" => MdsOp::SetXattr {
                                fid,
                                name: b"user.survey".to_vec(),
                                value: name,
                                flags: 0,
                            },
                            _ => MdsOp::Unlink { parent, name },
                        };
                        match (test, s.call(client, op)) {
                            ("create", Ok(MdsReply::Entry { attr, .. })) => fids.push(attr.fid),
                            (_, Ok(_)) => {}
                            (_, Err(e)) => {
                                r = Err(mdt_err(test, e));
                                break;
                            }
                        }
                    }
                    if test == "destroy" {
                        fids.clear();
                    }
                    barrier.wait();
                    r.map(|()| per_thread as f64 / start.elapsed().as_secs_f64().max(1e-9))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        let secs = start.elapsed().as_secs_f64();
        let mut rates = Vec::new();
        for h in handles {
            rates.push(h.join().expect("survey thread")?);
        }
        Ok((secs, rates))
    });
    let (secs, rates) = outcome?;
    let ops = per_thread * p.threads as u64;
    Ok(MdsSurveyTest {
        test: test.to_string(),
        ops,
        rate: ops as f64 / secs.max(1e-9),
        thread_min: rates.iter().copied().fold(f64::INFINITY, f64::min),
        thread_max: rates.iter().copied().fold(0.0, f64::max),
    })
}

/// mds-survey-style text: one line with every test's total rate and per-thread range.
pub fn format_report(p: &MdsSurveyParams, tests: &[MdsSurveyTest]) -> String {
    let mut s = format!(
        "mdt 1 file {:>8} dir {:>4} thr {:>4}",
        p.files, p.dirs, p.threads
    );
    for t in tests {
        s += &format!(
            " {} {:>10.2} [{:>10.2},{:>10.2}]",
            t.test, t.rate, t.thread_min, t.thread_max
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_test_runs_on_a_scratch_mdt_and_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let p = MdsSurveyParams {
            dir: root.path().join("scratch"),
            files: 300,
            dirs: 2,
            threads: 3,
            tests: TESTS.iter().map(|s| s.to_string()).collect(),
            stripe_count: 2,
            sync_on_reply: false,
        };
        let r = run(&p).unwrap();
        let names: Vec<&str> = r.iter().map(|t| t.test.as_str()).collect();
        assert_eq!(names, TESTS);
        for t in &r {
            assert_eq!(t.ops, 300, "{t:?}");
            assert!(t.rate > 0.0 && t.thread_min <= t.thread_max, "{t:?}");
        }
        assert!(!p.dir.exists(), "scratch MDT removed");
        let line = format_report(&p, &r);
        assert!(line.starts_with("mdt 1 file      300 dir    2 thr    3 create"));
    }

    #[test]
    fn a_used_directory_or_unknown_test_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("precious"), b"x").unwrap();
        let mut p = MdsSurveyParams {
            dir: root.path().to_path_buf(),
            files: 10,
            dirs: 1,
            threads: 1,
            tests: vec!["create".into()],
            stripe_count: 1,
            sync_on_reply: false,
        };
        let e = run(&p).unwrap_err().to_string();
        assert!(e.contains("new or empty directory"), "{e}");
        assert!(root.path().join("precious").exists());
        p.dir = root.path().join("new");
        p.tests = vec!["mkfs".into()];
        assert!(run(&p)
            .unwrap_err()
            .to_string()
            .contains("unknown test 'mkfs'"));
    }

    #[test]
    fn lookups_of_missing_files_are_errors() {
        let root = tempfile::tempdir().unwrap();
        let p = MdsSurveyParams {
            dir: root.path().join("s"),
            files: 4,
            dirs: 1,
            threads: 1,
            tests: vec!["lookup".into()],
            stripe_count: 1,
            sync_on_reply: false,
        };
        let e = run(&p).unwrap_err().to_string();
        assert!(e.contains("lookup"), "{e}");
        assert!(!p.dir.exists());
    }
}
