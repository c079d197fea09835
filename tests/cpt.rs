//! CPU partitions in a real server process: the table from Lustre's syntax, service threads
//! pinned to their partition's CPUs (read back from /proc), per-service partitions and thread
//! counts, and the tunables through `nacre ctl`.

use nacre_testkit::{free_port, mkfs, nacre, nacre_ok, ClientMount, ServerProc};

/// (thread name, allowed CPUs) of every thread of `pid`.
fn threads(pid: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        out.push((field("Name:"), field("Cpus_allowed_list:")));
    }
    out.sort();
    out
}

#[test]
fn services_run_pinned_on_their_partitions() {
    let cpus = nacre_cpt::Topology::read().unwrap().cpus();
    let (first, last) = (cpus[0], cpus[cpus.len() - 1]);
    let root = tempfile::Builder::new()
        .prefix("nacre-cpt")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    mkfs("--mgs", 0, "cpt", None, &d("mgs"));
    let port = free_port();
    let mgs = format!("127.0.0.1:{port}@tcp");
    mkfs("--mdt", 0, "cpt", Some(&mgs), &d("mdt0"));
    mkfs("--ost", 0, "cpt", Some(&mgs), &d("ost0"));
    let pattern = format!("0[{first}] 1[{last}]");
    let server = ServerProc::start(
        port,
        &[&d("mgs"), &d("mdt0"), &d("ost0")],
        &[
            "--cpu-pattern",
            &pattern,
            "--mds-cpts",
            "[1]",
            "--oss-threads-min",
            "2",
            "--oss-threads-max",
            "6",
            "--portal-rotor",
            "hash",
        ],
    );
    let pid = server.pid().to_string();
    let get = |name: &str| nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", name]);
    assert_eq!(
        get("cpu_partition_table"),
        format!("0\t: {first}\n1\t: {last}\n")
    );
    assert_eq!(get("cpu_npartitions").trim(), "2");
    assert_eq!(get("ost.OSS.ost_io.cpts").trim(), "[0,1]");
    assert_eq!(get("mds.MDS.mdt.cpts").trim(), "[1]");
    assert_eq!(
        get("ost.OSS.ost_io.threads_started").trim(),
        "4",
        "2 per partition"
    );
    assert_eq!(get("portal_rotor").trim(), "hash");
    let t = threads(server.pid());
    let ost: Vec<_> = t.iter().filter(|(n, _)| n.starts_with("ost_io_")).collect();
    assert_eq!(ost.len(), 4, "{t:?}");
    for (name, allowed) in &ost {
        let want = if name.starts_with("ost_io_00_") {
            first
        } else {
            last
        };
        assert_eq!(
            allowed,
            &want.to_string(),
            "{name} runs on its partition's CPU"
        );
    }
    // Thread names are cut to 15 bytes by the kernel: mdt_01_000, mdt_readpage_01.
    let mdt: Vec<_> = t.iter().filter(|(n, _)| n.starts_with("mdt_")).collect();
    assert!(mdt.iter().any(|(n, _)| n.starts_with("mdt_01_")), "{t:?}");
    assert!(mdt.iter().any(|(n, _)| n == "mdt_readpage_01"), "{t:?}");
    assert!(
        mdt.iter()
            .all(|(n, a)| n.contains("_01") && a == &last.to_string()),
        "the MDS services run only on partition 1: {mdt:?}"
    );
    for service in ["ost.OSS.ost", "ost.OSS.ost_create"] {
        assert_eq!(get(&format!("{service}.threads_started")).trim(), "2");
    }
    assert_eq!(get("mds.MDS.mdt_readpage.threads_started").trim(), "1");
    assert_eq!(get("mds.MDS.mdt_readpage.cpts").trim(), "[1]");
    // Run-time tunables.
    nacre_ok(&["ctl", "--pid", &pid, "set_param", "portal_rotor=on"]);
    assert_eq!(get("portal_rotor").trim(), "on");
    nacre_ok(&[
        "ctl",
        "--pid",
        &pid,
        "set_param",
        "ost.OSS.ost_io.threads_min=3",
    ]);
    assert_eq!(get("ost.OSS.ost_io.threads_started").trim(), "6");
    let bad = nacre(&["ctl", "--pid", &pid, "set_param", "portal_rotor=sideways"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("use off, on or hash"));
    let bad = nacre(&[
        "ctl",
        "--pid",
        &pid,
        "set_param",
        "ost.OSS.ost_io.threads_max=1",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("at least threads_min"));
    let bad = nacre(&["ctl", "--pid", &pid, "set_param", "networks=tcp(lo)"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("networks cannot change at run time"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    // A bad pattern is refused at start, naming the token.
    let out = nacre(&[
        "server",
        "--insecure",
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
        "--target",
        d("ost0").to_str().unwrap(),
        "--cpu-pattern",
        "0[0] 1[9999]",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad token '1[9999]'"), "{err}");
}

/// Requests handled by `service`: the sum over its partitions' `requests` column, and the
/// requests of this process's own clients run inline (the MDT's OST connections).
fn requests(pid: &str, service: &str) -> u64 {
    let table = nacre_ok(&[
        "ctl",
        "--pid",
        pid,
        "get_param",
        "-n",
        &format!("{service}.partition_stats"),
    ]);
    table
        .lines()
        .skip(1)
        .map(|l| match l.strip_prefix("inline_requests ") {
            Some(n) => n.trim().parse::<u64>().unwrap(),
            None => l.split_whitespace().nth(5).unwrap().parse::<u64>().unwrap(),
        })
        .sum()
}

#[test]
fn each_kind_of_request_is_served_by_its_own_service() {
    let root = tempfile::Builder::new()
        .prefix("nacre-portal")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    mkfs("--mgs", 0, "portal", None, &d("mgs"));
    let port = free_port();
    let mgs = format!("127.0.0.1:{port}@tcp");
    mkfs("--mdt", 0, "portal", Some(&mgs), &d("mdt0"));
    mkfs("--ost", 0, "portal", Some(&mgs), &d("ost0"));
    let server = ServerProc::start(
        port,
        &[&d("mgs"), &d("mdt0"), &d("ost0")],
        &["--oss-io-cpts", "[0]"],
    );
    let pid = server.pid().to_string();
    let client = ClientMount::mount(&format!("{mgs}:/portal"), &d("mnt"), &[]);
    let services = [
        "ost.OSS.ost_io",
        "ost.OSS.ost",
        "ost.OSS.ost_create",
        "mds.MDS.mdt",
        "mds.MDS.mdt_readpage",
    ];
    let before: Vec<u64> = services.iter().map(|s| requests(&pid, s)).collect();
    let dir = d("mnt").join("dir");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..5 {
        std::fs::write(dir.join(format!("f{i}")), vec![7u8; 1 << 20]).unwrap();
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 5);
    // Read replies are built in the ost_io threads' buffers: their partition's pool.
    nacre_ok(&["ctl", "--pid", &pid, "set_param", "buffer_pools=0"]);
    sync_and_drop_caches();
    for i in 0..5 {
        assert_eq!(
            std::fs::read(dir.join(format!("f{i}"))).unwrap(),
            vec![7u8; 1 << 20]
        );
    }
    let pools = nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "buffer_pools"]);
    let row = |name: &str| -> Vec<u64> {
        let line = pools
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}: {pools}"));
        line.split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let cpt0 = row("0");
    assert!(
        cpt0[0] + cpt0[1] >= 5,
        "five 1 MiB reads served from partition 0's pool (ost_io runs on [0]): {pools}"
    );
    row("shared");
    for i in 0..5 {
        std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
    // Objects of unlinked files are destroyed by the MDT in the background (ost_create).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while requests(&pid, "ost.OSS.ost_create") == before[2] {
        assert!(
            std::time::Instant::now() < deadline,
            "no destroy reached ost_create"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let after: Vec<u64> = services.iter().map(|s| requests(&pid, s)).collect();
    let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert!(delta[0] >= 5, "five 1 MiB writes on ost_io: {delta:?}");
    assert!(delta[3] >= 11, "mkdir, creates, unlinks on mdt: {delta:?}");
    assert!(
        delta[4] >= 2,
        "readdir and closes on mdt_readpage: {delta:?}"
    );
    // The mount's statfs (df) is served by `ost`, not queued behind I/O.
    let fs_before = requests(&pid, "ost.OSS.ost");
    nacre_ok(&["df", d("mnt").to_str().unwrap()]);
    assert!(requests(&pid, "ost.OSS.ost") > fs_before, "df went to ost");
    assert_eq!(get_cpts(&pid, "ost.OSS.ost_io"), "[0]");
    drop(client);
}

fn get_cpts(pid: &str, service: &str) -> String {
    nacre_ok(&[
        "ctl",
        "--pid",
        pid,
        "get_param",
        "-n",
        &format!("{service}.cpts"),
    ])
    .trim()
    .to_string()
}

fn sync_and_drop_caches() {
    nacre_testkit::sh("sync; echo 3 > /proc/sys/vm/drop_caches");
}

/// The server process of `fs` that has parameter `name`.
fn server_with(fs: &nacre_testkit::TestFs, name: &str) -> u32 {
    fs.server_pids()
        .into_iter()
        .find(|p| {
            let p = p.to_string();
            nacre(&["ctl", "--pid", &p, "get_param", "-n", name])
                .status
                .success()
        })
        .unwrap_or_else(|| panic!("no server process has {name}"))
}

/// The networked form with one OST (its OSS runs `ost_io` with `threads_min`..`threads_max`
/// threads) and a file `f` of `len` pattern bytes from `seed`: the file system, the bytes,
/// and the OSS's pid.
fn one_ost_with_a_file(
    fsname: &str,
    threads_min: &str,
    threads_max: &str,
    len: usize,
    seed: u64,
) -> (nacre_testkit::TestFs, Vec<u8>, u32) {
    use nacre_testkit::{pattern, Form, Spec, TestFs};
    let spec = Spec::osts(1).fsname(fsname).server_args(&[
        "--oss-threads-min",
        threads_min,
        "--oss-threads-max",
        threads_max,
    ]);
    let fs = TestFs::start_with(Form::Networked, spec);
    let data = pattern(seed, len);
    std::fs::write(fs.path("f"), &data).unwrap();
    let oss = server_with(&fs, &format!("osd.{fsname}-OST0000.reads_together"));
    (fs, data, oss)
}

/// Requests `ost_io` of process `oss` served in batches (`batched` of `partition_stats`).
fn batched(oss: u32) -> u64 {
    nacre_testkit::partition_sum(oss, "ost.OSS.ost_io", "batched")
}

/// Reads `bs` bytes at random `bs`-aligned offsets of `path` (O_DIRECT) from `threads`
/// threads until `stop` (or `rounds` reads each), checking each against `data`; counts
/// them in `reads`.
fn read_randomly(
    path: &std::path::Path,
    data: &[u8],
    bs: usize,
    threads: u64,
    stop: &std::sync::atomic::AtomicBool,
    reads: &std::sync::atomic::AtomicU64,
    rounds: Option<u64>,
) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    use std::sync::atomic::Ordering;
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                    .unwrap();
                let mut mem = vec![0u8; bs + 4096];
                let skip = (4096 - mem.as_ptr() as usize % 4096) % 4096;
                let buf = &mut mem[skip..skip + bs];
                let blocks = (data.len() as u64).div_ceil(bs as u64);
                let mut rng = fastrand::Rng::with_seed(t);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && rounds.is_none_or(|r| n < r) {
                    let at = rng.u64(0..blocks) * bs as u64;
                    let got = f.read_at(buf, at).unwrap();
                    let want = &data[at as usize..(at as usize + bs).min(data.len())];
                    assert_eq!(got, want.len(), "read at {at}");
                    assert!(buf[..got] == *want, "bytes read at {at}");
                    n += 1;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    })
}

/// Stops readers however a wait ends (a panic too).
struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reads of one file from many threads at once (O_DIRECT, 4 KiB, through the FUSE mount of
/// the networked form): the OSS's `ost_io` threads serve those queued together in one turn,
/// their data read from the disk at once (`osd.*.reads_together`, io_uring), and every
/// read still returns its own bytes, the last block of the file its short end. With
/// `batch_max=1` none are served together. One `ost_io` thread, so reads queue behind it.
#[test]
fn reads_queued_together_are_served_at_once_each_with_its_bytes() {
    use nacre_testkit::{get_param, wait_for};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (fs, data, oss) = one_ost_with_a_file("cptbat", "1", "1", (8 << 20) + 1000, 41);
    let together = || -> u64 {
        get_param(Some(oss), "osd.cptbat-OST0000.reads_together")
            .trim()
            .parse()
            .unwrap()
    };
    let (stop, reads) = (AtomicBool::new(false), AtomicU64::new(0));
    let path = fs.path("f");
    std::thread::scope(|s| {
        s.spawn(|| read_randomly(&path, &data, 4096, 8, &stop, &reads, None));
        let _stop = Stop(&stop);
        wait_for("reads served together", || {
            together() > 0 && batched(oss) > 0
        });
    });
    assert!(reads.load(Ordering::Relaxed) > 0);
    // Alone from now on.
    nacre_ok(&[
        "ctl",
        "--pid",
        &oss.to_string(),
        "set_param",
        "ost.OSS.ost_io.batch_max=1",
    ]);
    assert_eq!(get_param(Some(oss), "ost.OSS.ost_io.batch_max").trim(), "1");
    let (before, batched_before) = (together(), batched(oss));
    let never = AtomicBool::new(false);
    read_randomly(&path, &data, 4096, 8, &never, &AtomicU64::new(0), Some(300));
    assert_eq!((together(), batched(oss)), (before, batched_before));
    let bad = nacre(&[
        "ctl",
        "--pid",
        &oss.to_string(),
        "set_param",
        "ost.OSS.ost_io.batch_max=0",
    ]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("batch_max must be 1..=64"), "{err}");
}

/// With `ost_io` threads to spare (8 started, up to 32), small reads that arrive while
/// `batch_threads_max` threads serve batches wake no other thread: they are served with the
/// next batch of one of those (`batched` rises though threads are idle). Each read still
/// returns its bytes, and large reads (1 MiB, never batched) running beside them too.
/// The parameter shows its default (a thread per CPU of the partition, at least 2), is set
/// at run time and refuses 0.
#[test]
fn small_reads_wait_for_the_threads_serving_batches() {
    use nacre_testkit::{get_param, wait_for};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (fs, data, oss) = one_ost_with_a_file("cptbth", "8", "32", (16 << 20) + 1000, 43);
    let name = "ost.OSS.ost_io.batch_threads_max";
    let default: usize = get_param(Some(oss), name).trim().parse().unwrap();
    assert!(default >= 2, "default {default}");
    let set = |v: &str| {
        nacre(&[
            "ctl",
            "--pid",
            &oss.to_string(),
            "set_param",
            &format!("{name}={v}"),
        ])
    };
    assert!(set("1").status.success());
    assert_eq!(get_param(Some(oss), name).trim(), "1");
    let before = batched(oss);
    let (stop, small, large) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let path = fs.path("f");
    std::thread::scope(|s| {
        s.spawn(|| read_randomly(&path, &data, 4096, 8, &stop, &small, None));
        s.spawn(|| read_randomly(&path, &data, 1 << 20, 2, &stop, &large, None));
        let _stop = Stop(&stop);
        wait_for("small reads served in batches beside large ones", || {
            batched(oss) > before && large.load(Ordering::Relaxed) >= 20
        });
    });
    assert!(small.load(Ordering::Relaxed) > 0);
    let err = set("0");
    assert!(!err.status.success());
    let err = String::from_utf8_lossy(&err.stderr);
    assert!(err.contains("batch_threads_max must be 1..=512"), "{err}");
    assert_eq!(get_param(Some(oss), name).trim(), "1");
}
