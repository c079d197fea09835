//! Online file migration (docs/migrate.md): a file open and in use — one process keeps
//! writing it, another keeps reading it — moves to another pool with `nacre migrate -p`,
//! and loses nothing (every byte checked, during and after); its objects end up on the new
//! pool's OSTs (checked in their own directories) and the old ones are destroyed; a writer
//! that kept the old layout (the native library, no locks) is refused by the fence and its
//! write redone in the new layout; `-m` with `-c/-S/-p` is refused.

use nacre_client::{Client, ClientConfig};
use nacre_testkit::{nacre, nacre_ok, pattern, wait_for, Form, Spec, TestFs};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const PAGE: usize = 4096;
const PAGES: usize = 2048; // 8 MiB

/// The content of page `p` at version `v` (version 0: as first written).
fn page(p: usize, v: u32) -> Vec<u8> {
    pattern((p as u64) << 20 | u64::from(v), PAGE)
}

/// What a page read holds, for a failure's message: runs of 8-byte words, each as the
/// version of the page it matches, `z` for zeros, `?` for none.
fn describe(buf: &[u8], p: usize, now: u32) -> String {
    let versions: Vec<Vec<u8>> = (0..=now + 2).map(|v| page(p, v)).collect();
    let mut runs: Vec<(String, usize, usize)> = Vec::new();
    for w in 0..PAGE / 8 {
        let word = &buf[w * 8..w * 8 + 8];
        let label = if word.iter().all(|b| *b == 0) {
            "z".to_string()
        } else {
            versions
                .iter()
                .position(|v| v[w * 8..w * 8 + 8] == *word)
                .map_or("?".to_string(), |v| format!("v{v}"))
        };
        match runs.last_mut() {
            Some(last) if last.0 == label => last.2 = w * 8 + 8,
            _ => runs.push((label, w * 8, w * 8 + 8)),
        }
    }
    runs.iter()
        .map(|(l, a, b)| format!("{l}@{a}..{b}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// True if every 8-byte word of `buf` is that word of one of page `p`'s versions
/// `low..=now`.
fn words_of(buf: &[u8], p: usize, low: u32, now: u32) -> bool {
    let versions: Vec<Vec<u8>> = (low..=now).map(|v| page(p, v)).collect();
    (0..PAGE / 8).all(|w| {
        let r = w * 8..w * 8 + 8;
        versions.iter().any(|v| v[r.clone()] == buf[r.clone()])
    })
}

/// (pool, OSTs, object ids) of a file.
fn layout_of(path: &Path) -> (String, Vec<u64>, Vec<u64>) {
    let v: Value =
        serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap();
    let objs = v["objects"].as_array().unwrap();
    (
        v["pool"].as_str().unwrap_or("").to_string(),
        objs.iter().map(|o| o["ost"].as_u64().unwrap()).collect(),
        objs.iter().map(|o| o["id"].as_u64().unwrap()).collect(),
    )
}

/// True if OST `ost`'s directory holds object `id` (of any sequence).
fn ost_holds(fs: &TestFs, ost: u64, id: u64) -> bool {
    let root = fs.data.join(format!("ost{ost}")).join("O");
    fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .any(|seq| {
            seq.path()
                .join(format!("d{}", id % 32))
                .join(id.to_string())
                .exists()
        })
}

fn pools(fs: &TestFs, fsname: &str) {
    for (p, osts) in [("flash", "OST[0-1]"), ("capacity", "OST[2-3]")] {
        nacre_ok(&["pool", "new", &format!("{fsname}.{p}")]);
        nacre_ok(&["pool", "add", &format!("{fsname}.{p}"), osts]);
    }
    fs::create_dir(fs.path("d")).unwrap();
    nacre_ok(&[
        "setstripe",
        "-p",
        "flash",
        "-c",
        "2",
        "-S",
        "64K",
        fs.path("d").to_str().unwrap(),
    ]);
}

#[test]
fn a_file_in_use_migrates_to_another_pool_losing_nothing() {
    let fsname = "migf";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    let path = fs.path("d/f");
    let mut first = Vec::with_capacity(PAGE * PAGES);
    for p in 0..PAGES {
        first.extend_from_slice(&page(p, 0));
    }
    fs::write(&path, &first).unwrap();
    let (pool, osts, old_ids) = layout_of(&path);
    assert_eq!(pool, "flash");
    assert!(osts.iter().all(|o| *o < 2), "{osts:?}");

    // The writer keeps one handle open and rewrites pages with new versions; the model
    // says each page's version.
    let versions = Arc::new(Mutex::new(vec![0u32; PAGES]));
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (path, versions, stop, written) = (
            path.clone(),
            versions.clone(),
            stop.clone(),
            written.clone(),
        );
        std::thread::spawn(move || {
            let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
            let mut rng = fastrand::Rng::with_seed(7);
            while !stop.load(Ordering::Relaxed) {
                let p = rng.usize(..PAGES);
                // The model moves first (a reader meanwhile may see the page's previous
                // version, which it accepts), then the page is written.
                let v = {
                    let mut v = versions.lock().unwrap();
                    v[p] += 1;
                    v[p]
                };
                f.write_all_at(&page(p, v), (p * PAGE) as u64).unwrap();
                written.fetch_add(1, Ordering::Relaxed);
            }
            f.sync_all().unwrap();
        })
    };
    // The reader checks that every page it reads is one of that page's versions. A read
    // of a page while the writer copies into it may see a mix of the two: the kernel's page
    // cache serves reads without a lock against writes (ext4 does the same: 221 torn reads
    // in 4 million random page reads beside one writer of whole pages, measured on this
    // machine; on a mount without any migration, 2 in 2.5 million). Such a mix, word by
    // word of the versions the page may hold, is accepted only if the page reads whole
    // again at once: data torn in the file itself (a torn migration copy) stays torn.
    let reads = Arc::new(AtomicU64::new(0));
    let mixed = Arc::new(AtomicU64::new(0));
    let reader = {
        let (path, versions, stop, reads, mixed) = (
            path.clone(),
            versions.clone(),
            stop.clone(),
            reads.clone(),
            mixed.clone(),
        );
        std::thread::spawn(move || {
            let f = fs::File::open(&path).unwrap();
            let mut buf = vec![0u8; PAGE];
            let mut rng = fastrand::Rng::with_seed(11);
            let read = |buf: &mut Vec<u8>, p: usize| {
                let top = versions.lock().unwrap()[p];
                f.read_exact_at(buf, (p * PAGE) as u64).unwrap();
                (top.saturating_sub(1), versions.lock().unwrap()[p])
            };
            while !stop.load(Ordering::Relaxed) {
                let p = rng.usize(..PAGES);
                let (low, now) = read(&mut buf, p);
                if !(low..=now).any(|v| buf == page(p, v)) {
                    assert!(
                        words_of(&buf, p, low, now),
                        "page {p} read as none of versions {low}..={now}: {}",
                        describe(&buf, p, now)
                    );
                    let whole = (0..3).any(|_| {
                        let (low, now) = read(&mut buf, p);
                        (low..=now).any(|v| buf == page(p, v))
                    });
                    assert!(
                        whole,
                        "page {p} stays a mix of versions: {}",
                        describe(&buf, p, now)
                    );
                    mixed.fetch_add(1, Ordering::Relaxed);
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    wait_for("the writer and reader at work", || {
        written.load(Ordering::Relaxed) > 200 && reads.load(Ordering::Relaxed) > 200
    });
    let out = nacre_ok(&[
        "migrate",
        "-p",
        "capacity",
        "--json",
        path.to_str().unwrap(),
    ]);
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["files"], 1, "{out}");
    assert_eq!(summary["bytes"], (PAGE * PAGES) as u64, "{out}");
    // Both go on a while in the new layout.
    let (w, r) = (
        written.load(Ordering::Relaxed),
        reads.load(Ordering::Relaxed),
    );
    wait_for("more writes and reads after the swap", || {
        written.load(Ordering::Relaxed) > w + 200 && reads.load(Ordering::Relaxed) > r + 200
    });
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    reader.join().unwrap();
    eprintln!(
        "{} reads, {} of a page mid-write (read whole again)",
        reads.load(Ordering::Relaxed),
        mixed.load(Ordering::Relaxed)
    );
    // Every byte is what the model says, read through another mount too.
    let v = versions.lock().unwrap().clone();
    let mut want = Vec::with_capacity(PAGE * PAGES);
    for (p, ver) in v.iter().enumerate() {
        want.extend_from_slice(&page(p, *ver));
    }
    assert!(
        fs::read(&path).unwrap() == want,
        "the file differs from what was written"
    );
    let other = fs.scratch().join("other");
    fs::create_dir_all(&other).unwrap();
    let _b = fs.mount_another(&other, &[]);
    assert!(
        fs::read(other.join("d/f")).unwrap() == want,
        "another mount reads otherwise"
    );
    // The objects are the new pool's, on its OSTs' disks; the old ones are destroyed.
    let (pool, osts, ids) = layout_of(&path);
    assert_eq!(pool, "capacity");
    assert!(osts.iter().all(|o| *o >= 2), "{osts:?}");
    for (o, id) in osts.iter().zip(&ids) {
        assert!(ost_holds(&fs, *o, *id), "OST{o} has no object {id}");
    }
    wait_for("the old objects destroyed", || {
        old_ids
            .iter()
            .all(|id| !(0..2).any(|o| ost_holds(&fs, o, *id)))
    });
    // A second run finds nothing to do (a tree's run resumes where it stopped).
    let again = nacre_ok(&[
        "migrate",
        "-p",
        "capacity",
        "--json",
        fs.path("d").to_str().unwrap(),
    ]);
    let again: Value = serde_json::from_str(again.trim()).unwrap();
    assert_eq!(
        (again["files"].clone(), again["skipped"].clone()),
        (0.into(), 1.into())
    );
    nacre_testkit::lfsck_clean(&fs.source());
}

#[test]
fn a_write_under_the_old_layout_is_refused_and_redone() {
    let fsname = "migs";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    let path = fs.path("d/g");
    fs::write(&path, vec![b'a'; 256 << 10]).unwrap();
    // A native client without locks opens the file and keeps its layout.
    let mgs = fs.source();
    let (nid, name) = mgs.rsplit_once(":/").unwrap();
    let c = Client::mount(nid.parse().unwrap(), name, ClientConfig::default()).unwrap();
    let d = c.lookup(nacre_types::Fid::ROOT, b"d", false).unwrap();
    let g = c.lookup(d.fid, b"g", false).unwrap();
    let (_, file) = c.open(g.fid, nacre_types::cred::MAY_WRITE).unwrap();
    assert_eq!(file.layout().unwrap().generation, 0);
    nacre_ok(&["migrate", "-p", "capacity", path.to_str().unwrap()]);
    // Its layout is the old one: its write reaches the fenced objects, is refused, and
    // is redone in the new layout.
    c.write(&file, 64 << 10, &vec![b'b'; 128 << 10]).unwrap();
    assert_eq!(c.layout_redos.load(Ordering::Relaxed), 1);
    assert_eq!(file.layout().unwrap().generation, 1);
    c.close(&file).unwrap();
    let got = fs::read(&path).unwrap();
    let mut want = vec![b'a'; 256 << 10];
    want[64 << 10..192 << 10].fill(b'b');
    assert!(got == want, "the redone write is not in the file");
    assert_eq!(layout_of(&path).0, "capacity");
    c.disconnect(std::time::Duration::from_secs(5));
    // -m and a new layout together are refused.
    let both = nacre(&["migrate", "-m", "0", "-p", "flash", path.to_str().unwrap()]);
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("one or the other"));
}

/// A migrator that dies inside its fence window (here: a bare connection that asked for
/// the window and went) holds the file's writers only until the lease ends: the MDT aborts
/// the migration, the file keeps its objects one generation up, and the writes go on.
#[test]
fn a_dead_migrators_fence_window_ends_with_its_lease() {
    let fsname = "migl";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    let path = fs.path("d/h");
    fs::write(&path, vec![b'a'; 64 << 10]).unwrap();
    let (_, osts, ids) = layout_of(&path);
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("mdt.{fsname}-MDT0000.relayout_fence_lease_ms=2000"),
    ]);
    let fid: nacre_types::Fid = nacre_ok(&["path2fid", path.to_str().unwrap()])
        .trim()
        .parse()
        .unwrap();
    let mds = fs.servers_mut()[0].listen.clone();
    {
        nacre_types::cred::set_current(Some(nacre_types::Cred::root()));
        let mut c = nacre_testkit::raw::RawConn::connect(&mds, fsname, [7; 16]).unwrap();
        let spec = nacre_types::layout::StripeSpec {
            pool: nacre_types::PoolName::new("capacity").unwrap(),
            ..Default::default()
        };
        for op in [
            nacre_wire::mds::MdsOp::RelayoutBegin { fid, spec },
            nacre_wire::mds::MdsOp::RelayoutFence { fid },
        ] {
            c.send_mds(0, op).unwrap();
            let r = c.recv().unwrap();
            assert_eq!(r.header.status, 0);
        }
    } // the "migrator" is gone
      // A writer through the mount waits for the layout, then writes where it was.
    let mut f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    use std::io::{Seek, Write};
    f.seek(std::io::SeekFrom::Start(4096)).unwrap();
    f.write_all(b"after").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let (pool, osts_now, ids_now) = layout_of(&path);
    assert_eq!((pool.as_str(), osts_now, ids_now), ("flash", osts, ids));
    let got = fs::read(&path).unwrap();
    assert_eq!(&got[4096..4101], b"after");
    assert_eq!(got.len(), 64 << 10);
}

/// The MDS killed -9 right after each step of a migration commits, before its reply: the
/// migrator's client replays the step after the restart (the fence window's state is on
/// disk), the migration completes once, and the file loses nothing.
#[test]
fn a_migration_survives_a_kill_of_the_mds_at_every_step() {
    let fsname = "migk";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    for (i, step) in ["relayout_begin", "relayout_fence", "relayout_swap"]
        .iter()
        .enumerate()
    {
        let path = fs.path(&format!("d/k{i}"));
        let data = pattern(i as u64, 3 << 20);
        fs::write(&path, &data).unwrap();
        let pid = fs.servers_mut()[0].pid().to_string();
        let point = format!("mds.{step}.after_commit_before_reply");
        nacre_ok(&[
            "ctl",
            "--pid",
            &pid,
            "set_param",
            &format!("fail_loc={point}"),
        ]);
        let p = path.clone();
        let migrator = std::thread::spawn(move || {
            nacre(&["migrate", "-p", "capacity", "--json", p.to_str().unwrap()])
        });
        assert!(
            fs.servers_mut()[0].wait_exit(std::time::Duration::from_secs(60)),
            "{point} never reached"
        );
        let old_pid = fs.servers_mut()[0].pid();
        fs.servers_mut()[0].restart_disarmed();
        // A new process serves the MDT (the old one died at the point).
        assert_ne!(fs.servers_mut()[0].pid(), old_pid, "{point}");
        let out = migrator.join().unwrap();
        assert!(
            out.status.success(),
            "{point}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["files"], 1, "{point}: {summary}");
        assert_eq!(layout_of(&path).0, "capacity", "{point}");
        assert!(
            fs::read(&path).unwrap() == data,
            "{point}: the data changed"
        );
    }
    nacre_testkit::lfsck_clean(&fs.source());
}

/// A sparse file keeps its holes: the migrated file reads the same, has the same size, and
/// the new OSTs store its data, not its holes.
#[test]
fn a_sparse_file_keeps_its_holes() {
    let fsname = "migh";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    let path = fs.path("d/sparse");
    {
        let f = fs::File::create(&path).unwrap();
        f.write_all_at(&pattern(1, 1 << 20), 0).unwrap();
        f.write_all_at(&pattern(2, 1 << 20), 64 << 20).unwrap();
        f.set_len(100 << 20).unwrap();
        f.sync_all().unwrap();
    }
    let before = fs::read(&path).unwrap();
    nacre_ok(&[
        "migrate",
        "-p",
        "capacity",
        "-c",
        "1",
        path.to_str().unwrap(),
    ]);
    let (pool, osts, ids) = layout_of(&path);
    assert_eq!(pool, "capacity");
    assert_eq!(fs::metadata(&path).unwrap().len(), 100 << 20);
    assert!(
        fs::read(&path).unwrap() == before,
        "the sparse file reads otherwise"
    );
    // The object holds 2 MiB of data, not 100 MiB.
    let object = fs.data.join(format!("ost{}", osts[0])).join("O");
    let mut allocated = 0;
    for seq in fs::read_dir(&object).unwrap().flatten() {
        let p = seq
            .path()
            .join(format!("d{}", ids[0] % 32))
            .join(ids[0].to_string());
        if let Ok(m) = fs::metadata(&p) {
            use std::os::unix::fs::MetadataExt;
            allocated += m.blocks() * 512;
        }
    }
    assert!(
        allocated > 0 && allocated < 8 << 20,
        "{allocated} bytes allocated"
    );
}

/// `-v` shows the progress of a long copy while it runs, within one large file.
#[test]
fn verbose_migration_shows_progress_within_one_file() {
    let fsname = "migp";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    pools(&fs, fsname);
    let path = fs.path("d/big");
    let data = pattern(5, 24 << 20);
    fs::write(&path, &data).unwrap();
    // 24 MiB at 6 MiB/s: four seconds, a report every two.
    let out = nacre(&[
        "migrate",
        "-v",
        "-p",
        "capacity",
        "--bandwidth",
        "6M",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let progress: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("progress: 0 of 1 files"))
        .collect();
    assert!(!progress.is_empty(), "{err}");
    // Bytes copied grow between reports, and stay within the file.
    let copied = |l: &str| -> f64 {
        l.split(", ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        progress
            .iter()
            .all(|l| copied(l) > 0.0 && copied(l) <= 24.0),
        "{err}"
    );
    assert!(
        progress.windows(2).all(|w| copied(w[0]) <= copied(w[1])),
        "{err}"
    );
    assert_eq!(layout_of(&path).0, "capacity");
    assert_eq!(fs::read(&path).unwrap(), data);
}
