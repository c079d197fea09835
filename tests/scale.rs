//! A functional scale run across hosts (network namespaces): 4 MDS hosts, 4 OSS hosts and 16
//! client mounts, each its own process on its own host, running IOR-like file-per-process
//! writes and mdtest-like creates from every mount at once; every byte and every entry is
//! checked from another mount, the namespace checker must be clean, and the servers' thread
//! counts are recorded.
//!
//! Opt-in (heavy for a 2-core CI machine): `cargo test --release --test suite -- scale:: --ignored
//! --nocapture`. Bounded in time: every phase has a deadline.

use nacre_testkit::raw::threads_of;
use nacre_testkit::{mkfs, nacre_ok, pattern, ClientMount, NetLab};
use std::fs;
use std::time::{Duration, Instant};

const MDS_HOSTS: usize = 4;
const OSS_HOSTS: usize = 4;
const CLIENTS: usize = 16;
const FILE_BYTES: usize = 16 << 20;
const CREATES: usize = 200;
const RUN_DEADLINE_S: u64 = 600;

#[test]
#[ignore = "opt-in scale run (24 hosts): cargo test --release --test suite -- scale:: --ignored"]
fn four_mds_four_oss_sixteen_clients_write_and_create_at_once() {
    let started = Instant::now();
    let lab = NetLab::new(MDS_HOSTS + OSS_HOSTS + CLIENTS);
    let h = &lab.hosts;
    let root = tempfile::Builder::new()
        .prefix("nacre-scale")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let mgs = format!("{}@tcp", h[0].addr);
    mkfs("--mgs", 0, "scale", None, &d("mgs"));
    for i in 0..MDS_HOSTS as u32 {
        mkfs("--mdt", i, "scale", Some(&mgs), &d(&format!("mdt{i}")));
    }
    for i in 0..OSS_HOSTS as u32 {
        mkfs("--ost", i, "scale", Some(&mgs), &d(&format!("ost{i}")));
    }
    let mut servers = vec![h[0].server(&[&d("mgs"), &d("mdt0")], &[])];
    for (i, host) in h.iter().enumerate().take(MDS_HOSTS).skip(1) {
        servers.push(host.server(&[&d(&format!("mdt{i}"))], &[]));
    }
    for i in 0..OSS_HOSTS {
        servers.push(h[MDS_HOSTS + i].server(&[&d(&format!("ost{i}"))], &[]));
    }
    let source = format!("{mgs}:/scale");
    let mounts: Vec<ClientMount> = (0..CLIENTS)
        .map(|c| {
            let host = &h[MDS_HOSTS + OSS_HOSTS + c];
            ClientMount::mount_in(&host.prefix(), &source, &d(&format!("c{c}")), &[])
        })
        .collect();
    let top = &mounts[0].mnt;
    // File-per-process data spread over every OST; the creates in a directory striped over
    // every MDT, each client in its own subdirectory (which inherits the striping).
    fs::create_dir(top.join("ior")).unwrap();
    nacre_ok(&[
        "setstripe",
        "-c",
        "-1",
        "-S",
        "1M",
        top.join("ior").to_str().unwrap(),
    ]);
    let md = top.join("md");
    let count = MDS_HOSTS.to_string();
    nacre_ok(&["mkdir", "-c", &count, md.to_str().unwrap()]);
    nacre_ok(&["setdirstripe", "-D", "-c", &count, md.to_str().unwrap()]);
    let load = Instant::now();
    let workers: Vec<_> = mounts
        .iter()
        .enumerate()
        .map(|(c, m)| {
            let mnt = m.mnt.clone();
            std::thread::spawn(move || {
                let data = pattern(1000 + c as u64, FILE_BYTES);
                fs::write(mnt.join(format!("ior/task{c}")), &data).unwrap();
                let dir = mnt.join(format!("md/client{c}"));
                fs::create_dir(&dir).unwrap();
                for i in 0..CREATES {
                    fs::write(dir.join(format!("f{i}")), b"").unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let elapsed = load.elapsed();
    // Checked from another client than the writer.
    for c in 0..CLIENTS {
        let reader = &mounts[(c + 1) % CLIENTS].mnt;
        let back = fs::read(reader.join(format!("ior/task{c}"))).unwrap();
        assert!(back == pattern(1000 + c as u64, FILE_BYTES), "task{c} data");
        let n = fs::read_dir(reader.join(format!("md/client{c}")))
            .unwrap()
            .count();
        assert_eq!(n, CREATES, "client{c} entries");
    }
    let out = h[MDS_HOSTS + OSS_HOSTS].nacre(&["lfsck", "--namespace", &source]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(" 0 inconsistencies"),
        "{text}"
    );
    let mib = (CLIENTS * FILE_BYTES) as f64 / f64::from(1 << 20);
    eprintln!(
        "scale run: {CLIENTS} clients wrote {mib:.0} MiB and created {} files in {elapsed:?} \
         ({:.0} MiB/s, {:.0} creates/s, creates and writes at once)",
        CLIENTS * CREATES,
        mib / elapsed.as_secs_f64(),
        (CLIENTS * CREATES) as f64 / elapsed.as_secs_f64()
    );
    for (i, s) in servers.iter().enumerate() {
        let (all, net) = threads_of(s.pid());
        let role = if i < MDS_HOSTS { "MDS" } else { "OSS" };
        eprintln!("  {role} {} threads {all} (network {net})", s.listen);
    }
    assert!(
        started.elapsed() < Duration::from_secs(RUN_DEADLINE_S),
        "the run took {:?}",
        started.elapsed()
    );
}
