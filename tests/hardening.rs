//! Servers bounded against any client (docs/hardening.md), on the networked form: thousands
//! of live connections on a bounded set of network threads, and an abuse run where hostile
//! connections are dropped and counted while legitimate work completes.

use nacre_testkit::raw::{raise_nofile, root, rss_kib, threads_of, RawConn};
use nacre_testkit::{object_of, pattern, Form, Spec, TestFs};
use nacre_types::ObjectId;
use nacre_wire::mds::{MdsOp, MdsReply};
use nacre_wire::oss::{OssReply, OssRequest};
use std::fs;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// `net.stats` of a server process, as `name -> value`.
fn net_stats(pid: u32) -> std::collections::HashMap<String, u64> {
    let text = nacre_testkit::get_param(Some(pid), "net.stats");
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().parse().unwrap_or(0)))
        .collect()
}

/// A write at the start of object 1:1, with no lock, capability or grant.
fn write_at_start() -> OssRequest {
    OssRequest::Write {
        object: ObjectId { seq: 1, id: 1 },
        offset: 0,
        owner: nacre_types::Owner::default(),
        lock: false,
        grant_used: 0,
        epoch: 0,
        layout_gen: 0,
    }
}

/// Astra's clients all mount every server: 2,000 live connections (from four client
/// threads, each its own set of sockets) doing metadata and small reads against one MDS and
/// one OSS. Server threads stay bounded (before this design every connection had a thread:
/// 2,000 idle connections took an MDS from 33 to 1,109 threads), every reply is right, and
/// thread counts and memory are printed.
#[test]
fn two_thousand_connections_on_a_bounded_set_of_threads() {
    raise_nofile(16_384);
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1));
    let data = pattern(11, 64 << 10);
    let f = fs.path("small");
    fs::write(&f, &data).unwrap();
    let (ost, object) = object_of(&f);
    let (mds_pid, oss_pid) = (fs.servers_mut()[0].pid(), fs.servers_mut()[1].pid());
    let (mds_addr, oss_addr) = (
        fs.servers_mut()[0].listen.clone(),
        fs.servers_mut()[1].listen.clone(),
    );
    let before = (threads_of(mds_pid), threads_of(oss_pid));
    let rss_before = (rss_kib(mds_pid), rss_kib(oss_pid));
    const WORKERS: usize = 4;
    const PER_SERVER: usize = 250; // per worker: 4 x (250 + 250) = 2,000 connections
    let held = Arc::new(Barrier::new(WORKERS + 1));
    let done = Arc::new(Barrier::new(WORKERS + 1));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (held, done, data) = (held.clone(), done.clone(), data.clone());
            let (mds_addr, oss_addr) = (mds_addr.clone(), oss_addr.clone());
            std::thread::spawn(move || {
                let mut conns = Vec::new();
                for i in 0..PER_SERVER {
                    let mut uuid = [0u8; 16];
                    uuid[..8].copy_from_slice(&((w * PER_SERVER + i) as u64 + 1).to_le_bytes());
                    conns.push((true, RawConn::connect(&mds_addr, "nacre", uuid).unwrap()));
                    conns.push((false, RawConn::connect(&oss_addr, "nacre", uuid).unwrap()));
                }
                for _round in 0..3 {
                    for (mds, c) in &mut conns {
                        match mds {
                            true => c.send_mds(0, MdsOp::GetAttr { fid: root() }),
                            false => {
                                let req = OssRequest::Read {
                                    object,
                                    offset: 4096,
                                    len: 4096,
                                    lock: false,
                                };
                                c.send_oss(ost, req, None)
                            }
                        }
                        .unwrap();
                    }
                    for (mds, c) in &mut conns {
                        let r = c.recv().unwrap();
                        match mds {
                            true => assert!(
                                matches!(r.mds(), Some(MdsReply::Entry { .. })),
                                "status {}",
                                r.header.status
                            ),
                            false => {
                                assert!(matches!(r.oss(), Some(OssReply::Read { .. })));
                                assert_eq!(r.bulk, &data[4096..8192]);
                            }
                        }
                    }
                }
                held.wait(); // all connections open while the servers are measured
                done.wait();
            })
        })
        .collect();
    held.wait();
    let during = (threads_of(mds_pid), threads_of(oss_pid));
    let rss_during = (rss_kib(mds_pid), rss_kib(oss_pid));
    let (mds_stats, oss_stats) = (net_stats(mds_pid), net_stats(oss_pid));
    done.wait();
    for w in workers {
        w.join().unwrap();
    }
    eprintln!(
        "2,000 connections: MDS threads {} -> {} (network {}), OSS threads {} -> {} \
         (network {}); RSS MDS {} -> {} KiB, OSS {} -> {} KiB; open: MDS {}, OSS {}",
        before.0 .0,
        during.0 .0,
        during.0 .1,
        before.1 .0,
        during.1 .0,
        during.1 .1,
        rss_before.0,
        rss_during.0,
        rss_before.1,
        rss_during.1,
        mds_stats["conns_open"],
        oss_stats["conns_open"],
    );
    assert!(mds_stats["conns_open"] >= 1_000, "{mds_stats:?}");
    assert!(oss_stats["conns_open"] >= 1_000, "{oss_stats:?}");
    // One network thread per CPU partition, whatever the connections; service threads grow
    // with load up to their maximum (64 MDS, 32 OSS per partition), never with connections.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, (all, net)) in [("MDS", during.0), ("OSS", during.1)] {
        assert!((1..=cpus).contains(&net), "{name}: {net} network threads");
        assert!(all < 150, "{name}: {all} threads for 1,000 connections");
    }
    // Memory per connection stays small: well under 64 KiB each.
    for (name, b, d) in [
        ("MDS", rss_before.0, rss_during.0),
        ("OSS", rss_before.1, rss_during.1),
    ] {
        assert!(
            d.saturating_sub(b) < 1_000 * 64,
            "{name}: RSS {b} -> {d} KiB"
        );
    }
}

/// The abuse run (bounded in time): while a writer and an mdtest-like load run through a
/// mount, a hostile process opens connections past the cap, sends a frame a byte at a time,
/// sends headers announcing 16 MiB bulks and stops, and stops reading its replies; a second
/// client is killed with -9 mid-write. Every legitimate operation completes and reads back
/// right, the servers stay within their documented memory bound (baseline + receive budget
/// + connection cap x staging buffer), and every hostile connection is dropped and counted.
#[test]
fn hostile_connections_are_dropped_and_counted_while_work_goes_on() {
    raise_nofile(16_384);
    let spec = Spec::osts(2).server_args(&[
        "--conns-max",
        "48",
        "--frame-timeout-ms",
        "1500",
        "--bulk-budget",
        "40M",
        "--reply-timeout-ms",
        "1500",
    ]);
    let mut fs = TestFs::start_with(Form::Networked, spec);
    let victim = fs.mount_another(&fs.scratch().join("victim"), &[]);
    let pids: Vec<u32> = fs.servers_mut().iter().map(|s| s.pid()).collect();
    let addrs: Vec<String> = fs.servers_mut().iter().map(|s| s.listen.clone()).collect();
    let (mds_pid, mds) = (pids[0], addrs[0].clone());
    let (oss_pid, oss) = (pids[1], addrs[1].clone());
    let baseline: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
    let started = Instant::now();
    // Memory sampled all along, until the hostile frames are gone.
    let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let monitor = std::thread::spawn({
        let (pids, watching) = (pids.clone(), watching.clone());
        move || {
            let mut peak = vec![0u64; pids.len()];
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                for (i, &p) in pids.iter().enumerate() {
                    peak[i] = peak[i].max(rss_kib(p));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        }
    });

    // Legitimate work through the mount: files written and read back, and a metadata load.
    let m = fs.mnt.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..4u64 {
            let data = pattern(100 + i, (8 << 20) + 4097);
            let p = m.join(format!("w{i}"));
            fs::write(&p, &data).unwrap();
            assert!(fs::read(&p).unwrap() == data, "w{i} read back wrong");
        }
    });
    let m = fs.mnt.clone();
    let metadata = std::thread::spawn(move || {
        let d = m.join("md");
        fs::create_dir(&d).unwrap();
        for i in 0..300 {
            fs::write(d.join(format!("f{i}")), b"x").unwrap();
        }
        for i in 0..300 {
            assert_eq!(fs::metadata(d.join(format!("f{i}"))).unwrap().len(), 1);
            fs::remove_file(d.join(format!("f{i}"))).unwrap();
        }
        fs::remove_dir(&d).unwrap();
    });
    // A client killed mid-write.
    let vp = victim.mnt.join("dying");
    let dd = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=100000", "oflag=direct"])
        .arg(format!("of={}", vp.display()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::metadata(&vp).map_or(0, |m| m.len()) < 4 << 20 {
        assert!(Instant::now() < deadline, "the victim never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    let victim_pid = victim.pid().expect("victim client process");
    // SAFETY: killing the test's own client process.
    unsafe { libc::kill(victim_pid as i32, libc::SIGKILL) };

    // Hostile: headers announcing 16 MiB of bulk, never sent.
    let mut hoarders = Vec::new();
    for i in 0..3u8 {
        let mut c = RawConn::connect(&oss, "nacre", [i + 1; 16]).unwrap();
        let mut h = nacre_wire::Header::request(0x0301, 0, 7);
        h.flags |= nacre_wire::header::FLAG_BULK_CHECKSUM;
        let body = nacre_wire::encode_body(&nacre_wire::oss::OssCall {
            client: [0; 16],
            jobid: "hoard".into(),
            cred: nacre_types::Cred::root(),
            req: write_at_start(),
            capa: None,
        });
        h.seal(&body, Some(&vec![0u8; 16 << 20]), true);
        use std::io::Write;
        c.stream().write_all(&h.encode()).unwrap();
        c.stream().write_all(&body).unwrap();
        hoarders.push(c);
    }
    // Hostile: a frame a byte at a time.
    let trickle = std::thread::spawn({
        let mds = mds.clone();
        move || {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(&mds).unwrap();
            for b in b"NACR\x01\x00\x01\x02" {
                if s.write_all(&[*b]).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(400));
            }
            // Dropped by now: the server closes a frame this slow.
            let mut buf = [0u8; 1];
            use std::io::Read;
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            matches!(s.read(&mut buf), Ok(0) | Err(_))
        }
    });
    // Hostile: requests whose replies are never read, until the server gives up on us.
    let mut deaf = RawConn::connect(&mds, "nacre", [0xde; 16]).unwrap();
    let mut sent = 0;
    while sent < 200_000 {
        if deaf.send_mds(0, MdsOp::GetAttr { fid: root() }).is_err() {
            break;
        }
        sent += 1;
    }

    // Hostile: past the cap (after the others, which must get in to misbehave).
    let flood: Vec<_> = (0..64)
        .filter_map(|_| std::net::TcpStream::connect(&oss).ok())
        .collect();
    writer.join().unwrap();
    metadata.join().unwrap();
    assert!(
        trickle.join().unwrap(),
        "a byte-a-time frame was not dropped"
    );
    let _ = dd.wait_with_output();
    let out = nacre_testkit::nacre(&["umount", "-f", victim.mnt.to_str().unwrap()]);
    assert!(out.status.success());
    // The hoarders' frames time out; their connections go.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = net_stats(oss_pid);
        if s["frames_timed_out"] >= 3 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = monitor.join().unwrap();
    let (mds_s, oss_s) = (net_stats(mds_pid), net_stats(oss_pid));
    eprintln!(
        "abuse run of {:?}: MDS {mds_s:?}; OSS {oss_s:?}",
        started.elapsed()
    );
    assert!(oss_s["conns_refused"] >= 1, "{oss_s:?}");
    assert!(oss_s["frames_timed_out"] >= 3, "{oss_s:?}");
    assert!(oss_s["budget_waits"] >= 1, "{oss_s:?}");
    assert!(mds_s["frames_timed_out"] >= 1, "{mds_s:?}");
    assert!(mds_s["replies_timed_out"] >= 1, "{mds_s:?}");
    // The bound: baseline + receive budget + cap x (staging + state), with 64 MiB for the
    // service threads a load starts.
    let bound_kib = |base: u64| base + (40 << 10) + 48 * 40 + (64 << 10);
    for (i, &p) in pids.iter().enumerate() {
        eprintln!(
            "server {p}: RSS baseline {} KiB, peak {} KiB, bound {} KiB",
            baseline[i],
            peak[i],
            bound_kib(baseline[i])
        );
        assert!(
            peak[i] <= bound_kib(baseline[i]),
            "server {p} over its bound"
        );
    }
    drop(flood);
    drop(hoarders);
    // Legitimate data, read back once more after the storm.
    for i in 0..4u64 {
        let data = pattern(100 + i, (8 << 20) + 4097);
        assert!(fs::read(fs.path(&format!("w{i}"))).unwrap() == data);
    }
}

/// A client of another release (protocol one newer, and one older than this server
/// speaks) is answered `EPROTO` with the range the server speaks, in its own version, on the
/// MDS and the OSS alike; its connection stays open and goes on in this release's version.
#[test]
fn a_request_of_another_protocol_version_is_answered_with_the_range() {
    use nacre_wire::version::Range;
    use nacre_wire::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1));
    let servers: Vec<(u32, String)> = fs
        .servers_mut()
        .iter()
        .map(|s| (s.pid(), s.listen.clone()))
        .collect();
    let (mds_pid, mds) = servers[0].clone();
    let mut c = RawConn::connect(&mds, "nacre", [0x5e; 16]).unwrap();
    for version in [PROTOCOL_VERSION + 1, PROTOCOL_VERSION_MIN - 1] {
        c.set_version(version);
        let xid = c.send_mds(0, MdsOp::GetAttr { fid: root() }).unwrap();
        let r = c.recv().unwrap();
        assert_eq!((r.header.xid, r.header.version), (xid, version));
        assert_eq!(r.header.status, nacre_types::Status::Proto.code());
        assert_eq!(Range::decode(&r.body), Some(Range::OURS));
    }
    c.set_version(PROTOCOL_VERSION);
    c.send_mds(0, MdsOp::GetAttr { fid: root() }).unwrap();
    let r = c.recv().unwrap();
    assert!(
        matches!(r.mds(), Some(MdsReply::Entry { .. })),
        "served after"
    );
    assert_eq!(net_stats(mds_pid)["requests_refused_version"], 2);
    assert_eq!(net_stats(mds_pid)["frames_bad"], 0);
    // The OSS: a write of another version is read whole (its bulk too) and answered.
    let (oss_pid, oss) = servers[1].clone();
    let mut c = RawConn::connect(&oss, "nacre", [0x5f; 16]).unwrap();
    c.set_version(PROTOCOL_VERSION + 1);
    c.send_oss(0, write_at_start(), Some(&[7u8; 65_536]))
        .unwrap();
    let r = c.recv().unwrap();
    assert_eq!(r.header.status, nacre_types::Status::Proto.code());
    assert_eq!(Range::decode(&r.body), Some(Range::OURS));
    assert_eq!(net_stats(oss_pid)["requests_refused_version"], 1);
    // The mount never noticed.
    fs::write(fs.path("after"), b"served").unwrap();
    assert_eq!(fs::read(fs.path("after")).unwrap(), b"served");
}
