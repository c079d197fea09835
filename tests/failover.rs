//! Failover pairs: two server hosts (network namespaces) that both reach the targets'
//! directories, each primary for half of them (active-active), with multi-mount protection.
//! A client on a third host keeps writing and creating while a server is killed, while the
//! targets are moved back by `nacre failover`, and while a server is stopped (SIGSTOP) long
//! enough for its partner to take over: then, resumed, it must not serve again.

use nacre_testkit::{nacre_ok, ClientMount, NetHost, NetLab, ServerProc};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Multi-mount protection interval of these tests (a takeover of a live-looking record
/// waits 2 x 200 + 1000 ms).
const MMP_MS: &str = "200";

fn mkfs_paired(kind: &str, index: u32, mgs: &str, pair: &[String; 2], dir: &Path) {
    let index = index.to_string();
    nacre_ok(&[
        "mkfs",
        kind,
        "--index",
        &index,
        "--fsname",
        "fo",
        "--mgsnode",
        mgs,
        "--servicenode",
        &pair[0],
        "--servicenode",
        &pair[1],
        dir.to_str().unwrap(),
    ]);
}

fn server(host: &NetHost, primary: &[&Path], standby: &[&Path]) -> ServerProc {
    let mut extra: Vec<String> = vec![
        "--failover".into(),
        "auto".into(),
        "--mmp-interval-ms".into(),
        MMP_MS.into(),
    ];
    for s in standby {
        extra.push("--standby".into());
        extra.push(s.display().to_string());
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    host.server(primary, &extra)
}

fn param(pid: u32, name: &str) -> String {
    nacre_ok(&["ctl", "--pid", &pid.to_string(), "get_param", "-n", name])
}

/// Waits until `failover.status` of server `pid` says it serves every target in `names`.
fn wait_serving(pid: u32, names: &[&str], within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let status = param(pid, "failover.status");
        let serving = |n: &str| {
            status
                .lines()
                .any(|l| l.starts_with(&format!("{n}: serving")))
        };
        if names.iter().all(|n| serving(n)) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "server {pid} does not serve {names:?} after {within:?}:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Files a writer thread wrote and was told were durable (fsync returned).
#[derive(Default)]
struct Acked {
    files: Mutex<Vec<(PathBuf, u64)>>,
    stop: AtomicBool,
}

fn content(seed: u64) -> Vec<u8> {
    nacre_testkit::pattern(seed, 256 * 1024 + (seed as usize % 7) * 4096)
}

/// Writes, fsyncs and records files in turn into each of `dirs`, until stopped; any error
/// is a failure of the test (the application must never see one).
fn writer(dirs: Vec<PathBuf>, acked: Arc<Acked>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use std::io::Write;
        let mut n = 0u64;
        while !acked.stop.load(Ordering::Acquire) {
            let dir = &dirs[n as usize % dirs.len()];
            let path = dir.join(format!("f{n}"));
            let seed = n * 7919 + 1;
            let mut f = std::fs::OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
            f.write_all(&content(seed))
                .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            f.sync_all()
                .unwrap_or_else(|e| panic!("fsync {}: {e}", path.display()));
            drop(f);
            acked.files.lock().unwrap().push((path, seed));
            n += 1;
        }
    })
}

/// Waits until the writer acknowledges a file it had not acknowledged at the call.
fn wait_progress(acked: &Acked, within: Duration) -> Duration {
    let started = Instant::now();
    let before = acked.files.lock().unwrap().len();
    while acked.files.lock().unwrap().len() < before + 2 {
        assert!(
            started.elapsed() < within,
            "the writer made no progress in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    started.elapsed()
}

fn verify(acked: &Acked) -> usize {
    let files = acked.files.lock().unwrap();
    for (path, seed) in files.iter() {
        let got = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(got == content(*seed), "{} reads back wrong", path.display());
    }
    files.len()
}

struct Pair {
    lab: NetLab,
    root: tempfile::TempDir,
    mgs: String,
    nid_a: String,
    nid_b: String,
}

impl Pair {
    fn dir(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn pair(&self) -> [String; 2] {
        [self.nid_a.clone(), self.nid_b.clone()]
    }
}

/// Four hosts (MGS, server A, server B, client) and a formatted MGS.
fn lab(name: &str) -> Pair {
    let lab = NetLab::new(4);
    let hosts = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let mgs = format!("{}@tcp", hosts[0].addr);
    let nid_a = format!("{}:988@tcp", hosts[1].addr);
    let nid_b = format!("{}:988@tcp", hosts[2].addr);
    nacre_testkit::mkfs("--mgs", 0, "fo", None, &root.path().join("mgs"));
    Pair {
        lab,
        root,
        mgs,
        nid_a,
        nid_b,
    }
}

/// Active-active: A serves MDT0 and OST0 and stands by for MDT1 and OST1, B the other way.
/// A is killed: B takes A's targets over by itself and the client's writes and creates go
/// on. A comes back: it finds its targets served by B and stands by. `nacre failover`
/// moves them back to A. Every fsync-acknowledged file reads back right, and the
/// namespace checker finds nothing wrong.
#[test]
fn an_active_active_pair_fails_over_and_back_without_losing_anything() {
    let p = lab("nacre-failover-aa");
    let (hosts, d, pair) = (&p.lab.hosts, |n: &str| p.dir(n), p.pair());
    mkfs_paired("--mdt", 0, &p.mgs, &pair, &d("mdt0"));
    mkfs_paired("--ost", 0, &p.mgs, &pair, &d("ost0"));
    mkfs_paired("--mdt", 1, &p.mgs, &pair, &d("mdt1"));
    mkfs_paired("--ost", 1, &p.mgs, &pair, &d("ost1"));
    let _mgs = hosts[0].server(&[&d("mgs")], &[]);
    let mut a = server(
        &hosts[1],
        &[&d("ost0"), &d("mdt0")],
        &[&d("ost1"), &d("mdt1")],
    );
    let b = server(
        &hosts[2],
        &[&d("ost1"), &d("mdt1")],
        &[&d("ost0"), &d("mdt0")],
    );
    wait_serving(
        a.pid(),
        &["fo-MDT0000", "fo-OST0000"],
        Duration::from_secs(30),
    );
    wait_serving(
        b.pid(),
        &["fo-MDT0001", "fo-OST0001"],
        Duration::from_secs(30),
    );
    let client = ClientMount::mount_in(
        &hosts[3].prefix(),
        &format!("{}:/fo", p.mgs),
        &d("mnt"),
        &["--ping-interval-ms", "1000"],
    );
    let m = &client.mnt;
    // One directory on each MDT, files striped over both OSTs: every file needs both
    // servers.
    let (d0, d1) = (m.join("d0"), m.join("d1"));
    nacre_ok(&["mkdir", "-i", "0", d0.to_str().unwrap()]);
    nacre_ok(&["mkdir", "-i", "1", d1.to_str().unwrap()]);
    for dir in [&d0, &d1] {
        nacre_ok(&["setstripe", "-c", "2", "-S", "65536", dir.to_str().unwrap()]);
    }
    let acked = Arc::new(Acked::default());
    let w = writer(vec![d0.clone(), d1.clone()], acked.clone());
    wait_progress(&acked, Duration::from_secs(30));

    // A dies: B takes over MDT0 and OST0 when their records stop moving.
    let killed = Instant::now();
    a.kill9();
    wait_serving(
        b.pid(),
        &["fo-MDT0000", "fo-OST0000", "fo-MDT0001", "fo-OST0001"],
        Duration::from_secs(60),
    );
    let taken = killed.elapsed();
    wait_progress(&acked, Duration::from_secs(60));
    let resumed = killed.elapsed();
    let pid = client.pid().expect("client pid").to_string();
    let import = nacre_ok(&[
        "ctl",
        "--pid",
        &pid,
        "get_param",
        "-n",
        "osc.fo-OST0000*.import",
    ]);
    assert!(
        import.contains(&format!("nid: {}@tcp", hosts[2].addr)),
        "{import}"
    );

    // A comes back: B is alive on its targets, so A stands by for all four.
    a.restart();
    let status = param(a.pid(), "failover.status");
    assert!(
        status.lines().filter(|l| l.contains(": standby")).count() == 4,
        "A should stand by for every target:\n{status}"
    );
    wait_progress(&acked, Duration::from_secs(30));

    // Failback by hand: B releases, A takes over.
    let back = Instant::now();
    for t in ["fo-OST0000", "fo-MDT0000"] {
        // Run by the administrator on the MGS node: without keys, a server's address is what
        // lets a peer move targets (a client's is refused: tests/attacks.rs).
        let out = hosts[0].nacre(&["failover", "--mgsnode", &p.mgs, t, "--to", &p.nid_a]);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "nacre failover {t}: {text}");
        assert!(
            text.contains(&format!("now served by {}@tcp", hosts[1].addr)),
            "{text}"
        );
        assert!(text.contains("released by"), "{text}");
    }
    let failback = back.elapsed();
    wait_serving(
        a.pid(),
        &["fo-MDT0000", "fo-OST0000"],
        Duration::from_secs(5),
    );
    let status = param(b.pid(), "failover.status");
    assert!(
        status.contains("fo-MDT0000: standby") && status.contains("fo-OST0000: standby"),
        "{status}"
    );
    wait_progress(&acked, Duration::from_secs(30));
    let import = nacre_ok(&[
        "ctl",
        "--pid",
        &pid,
        "get_param",
        "-n",
        "mdc.fo-MDT0000*.import",
    ]);
    assert!(
        import.contains(&format!("nid: {}@tcp", hosts[1].addr)),
        "{import}"
    );

    acked.stop.store(true, Ordering::Release);
    w.join().expect("the writer saw an error");
    let n = verify(&acked);
    let lfsck = hosts[3].nacre(&["lfsck", "--namespace", &format!("{}:/fo", p.mgs)]);
    assert!(
        lfsck.status.success(),
        "lfsck: {}{}",
        String::from_utf8_lossy(&lfsck.stdout),
        String::from_utf8_lossy(&lfsck.stderr)
    );
    println!(
        "failover: kill -9 of A -> B serves its targets after {} ms, the writer resumed after {} ms; \
         failback of two targets by nacre failover took {} ms; {n} fsync-acknowledged files verified",
        taken.as_millis(),
        resumed.as_millis(),
        failback.as_millis()
    );
}

/// A server stopped (SIGSTOP, a hung node) long enough for its partner to take its target
/// over must not serve it again: resumed, it reads the protection record, finds the
/// partner's, and exits without writing. The client's data stays right throughout.
#[test]
fn a_hung_server_is_fenced_when_its_partner_takes_over() {
    let p = lab("nacre-failover-fence");
    let (hosts, d, pair) = (&p.lab.hosts, |n: &str| p.dir(n), p.pair());
    nacre_testkit::mkfs("--mdt", 0, "fo", Some(&p.mgs), &d("mdt0"));
    mkfs_paired("--ost", 0, &p.mgs, &pair, &d("ost0"));
    let _mgs = hosts[0].server(&[&d("mgs"), &d("mdt0")], &[]);
    let mut a = server(&hosts[1], &[&d("ost0")], &[]);
    let b = server(&hosts[2], &[], &[&d("ost0")]);
    let client = ClientMount::mount_in(
        &hosts[3].prefix(),
        &format!("{}:/fo", p.mgs),
        &d("mnt"),
        &[],
    );
    let acked = Arc::new(Acked::default());
    let w = writer(vec![client.mnt.clone()], acked.clone());
    wait_progress(&acked, Duration::from_secs(30));

    // SIGSTOP: A's process lives on, its record stops moving; B must watch the record for
    // the full takeover wait (the owner's pid is alive) before it takes the target.
    let stopped = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(a.pid() as i32, libc::SIGSTOP) };
    wait_serving(b.pid(), &["fo-OST0000"], Duration::from_secs(60));
    let taken = stopped.elapsed();
    assert!(
        taken >= Duration::from_millis(2 * 200 + 1000),
        "B took the target of a live-looking owner after only {taken:?}"
    );
    wait_progress(&acked, Duration::from_secs(60));

    // Resumed, A finds B's record and exits: it never serves the target again.
    // SAFETY: as above.
    unsafe { libc::kill(a.pid() as i32, libc::SIGCONT) };
    assert!(
        a.wait_exit(Duration::from_secs(10)),
        "the fenced server kept running"
    );
    let code = a.try_wait().and_then(|s| s.code());
    assert_eq!(code, Some(75), "the fenced server's exit status");
    wait_progress(&acked, Duration::from_secs(30));
    acked.stop.store(true, Ordering::Release);
    w.join().expect("the writer saw an error");
    let n = verify(&acked);
    println!(
        "fencing: SIGSTOP of A -> B serves its target after {} ms; A exited on SIGCONT; {n} files verified",
        taken.as_millis()
    );
}
