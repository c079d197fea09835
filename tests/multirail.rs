//! Multi-rail between hosts in network namespaces: two server hosts and a client host, each
//! with two veth rails. The client is told one NID per server and learns the second by
//! discovery; bulk I/O runs over both rails; one rail goes down mid-transfer and the transfer
//! completes over the other; the rail is used again once it is back.

use nacre_testkit::{mkfs, nacre_ok, sh, ClientMount, NetLab};

/// `(state, source, bulk bytes)` of each rail of connection `conn` in a client's `peers`
/// text.
fn rails_of(peers: &str, conn: &str) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in peers.lines() {
        if !line.starts_with(' ') {
            inside = line.starts_with(&format!("{conn} "));
            continue;
        }
        if inside {
            let field = |k: &str| {
                line.split(&format!("{k}: "))
                    .nth(1)
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .to_string()
            };
            out.push((
                field("state"),
                field("source"),
                field("bytes").parse().unwrap(),
            ));
        }
    }
    out
}

#[test]
fn bulk_io_uses_both_rails_and_survives_losing_one() {
    let lab = NetLab::with_rails(3, 2);
    let (s0, s1, c) = (&lab.hosts[0], &lab.hosts[1], &lab.hosts[2]);
    let root = tempfile::Builder::new()
        .prefix("nacre-mr")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let mgs = format!("{}@tcp", s0.addr);
    mkfs("--mgs", 0, "mr", None, &d("mgs"));
    mkfs("--mdt", 0, "mr", Some(&mgs), &d("mdt0"));
    mkfs("--ost", 0, "mr", Some(&mgs), &d("ost0"));
    mkfs("--ost", 1, "mr", Some(&mgs), &d("ost1"));
    let rails = ["--networks", "tcp(rail0,rail1)"];
    let srv0 = s0.server(&[&d("mgs"), &d("mdt0"), &d("ost0")], &rails);
    let _srv1 = s1.server(&[&d("ost1")], &rails);
    let nids = nacre_ok(&[
        "ctl",
        "--pid",
        &srv0.pid().to_string(),
        "get_param",
        "-n",
        "nids",
    ]);
    assert_eq!(
        nids.trim(),
        format!("{}@tcp\n{}@tcp", s0.addrs[0], s0.addrs[1])
    );
    let m = ClientMount::mount_in(
        &c.prefix(),
        &format!("{mgs}:/mr"),
        &d("mnt"),
        &["--rail-timeout-ms", "1500"],
    );
    let pid = m.pid().expect("client pid").to_string();
    let peers = || nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "peers"]);
    let dir = m.mnt.join("wide");
    std::fs::create_dir(&dir).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", dir.to_str().unwrap()]);
    let src = d("src");
    std::fs::write(&src, nacre_testkit::pattern(7, 96 << 20)).unwrap();
    // A writer that stops halfway until told to go on, so the rail goes down in the middle
    // of the transfer whatever the machine's speed (a writer paced by sleeps, checked after
    // a sleep, failed when it started late: nothing had crossed either rail yet).
    let f = dir.join("f");
    let mut writer = std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys,mmap\n\
             src=open(sys.argv[1],'rb').read()\n\
             fd=os.open(sys.argv[2],os.O_WRONLY|os.O_CREAT|os.O_DIRECT,0o644)\n\
             buf=mmap.mmap(-1,1<<20)\n\
             n=len(src)>>20\n\
             for i in range(n):\n\
             \x20   if i==n//2:\n\
             \x20       print('half',flush=True)\n\
             \x20       sys.stdin.readline()\n\
             \x20   buf[:]=src[i<<20:(i+1)<<20]\n\
             \x20   os.pwrite(fd,buf,i<<20)\n\
             os.fsync(fd)\n",
            src.to_str().unwrap(),
            f.to_str().unwrap(),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(writer.stdout.as_mut().unwrap()),
        &mut said,
    )
    .unwrap();
    assert_eq!(said, "half\n", "the writer stopped halfway");
    let before = peers();
    for conn in ["OST0000", "OST0001"] {
        let rails = rails_of(&before, conn);
        assert_eq!(rails.len(), 2, "{conn}: {before}");
        assert_eq!(rails[0].1, "config");
        assert_eq!(rails[1].1, "discovery", "second NID learnt from the server");
        assert!(
            rails.iter().all(|r| r.2 > 0),
            "both rails carry bulk: {before}"
        );
    }
    sh(&format!("ip netns exec {} ip link set rail1 down", c.netns));
    // The second half goes on: its requests given to the dead rail are resent elsewhere.
    std::io::Write::write_all(writer.stdin.as_mut().unwrap(), b"go\n").unwrap();
    let status = writer.wait_with_output().unwrap().status;
    assert!(
        status.success(),
        "the writer finished through the remaining rail"
    );
    let during = peers();
    assert!(
        rails_of(&during, "OST0000")[1].0 == "down" || rails_of(&during, "OST0001")[1].0 == "down",
        "a rail was declared down: {during}"
    );
    assert!(
        std::fs::read(&f).unwrap() == std::fs::read(&src).unwrap(),
        "every byte arrived"
    );
    // Back up: the rail is relinked and used again.
    sh(&format!("ip netns exec {} ip link set rail1 up", c.netns));
    nacre_testkit::wait_for("the rail relinked", || {
        let now = peers();
        ["OST0000", "OST0001"]
            .iter()
            .all(|conn| rails_of(&now, conn).iter().all(|r| r.0 == "up"))
    });
    let rail1_bytes = |text: &str| -> Vec<u64> {
        ["OST0000", "OST0001"]
            .iter()
            .map(|conn| rails_of(text, conn)[1].2)
            .collect()
    };
    let back = rail1_bytes(&peers());
    let g = dir.join("g");
    sh(&format!(
        "dd if=/dev/zero of={} bs=1M count=16 oflag=direct status=none",
        g.display()
    ));
    let after = rail1_bytes(&peers());
    assert!(
        after.iter().zip(&back).all(|(a, b)| a > b),
        "the rail is used again: {back:?} then {after:?}"
    );
}

/// lnet_selftest's groups: the test runs at once from every host of a client group (workers
/// started through the launcher) against a server, with results per client host.
#[test]
fn selftest_runs_from_a_group_of_client_hosts() {
    let lab = NetLab::new(3);
    let (s, a, b) = (&lab.hosts[0], &lab.hosts[1], &lab.hosts[2]);
    let root = tempfile::Builder::new()
        .prefix("nacre-stg")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    mkfs("--mgs", 0, "stg", None, &root.path().join("mgs"));
    let _srv = s.server(&[&root.path().join("mgs")], &[]);
    let out = a.nacre(&[
        "selftest",
        "--to",
        &format!("{}@tcp", s.addr),
        "--test",
        "brw_write",
        "--size",
        "256K",
        "--duration",
        "1",
        "--from",
        &format!("{},{}", a.netns, b.netns),
        "--launcher",
        "nsenter --net=/run/netns/{host}",
        "--listen",
        &format!("{}:0", a.addr),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v.as_array().unwrap();
    assert_eq!(nodes.len(), 2, "one result per client host: {v}");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["node"], i);
        let p = &n["peers"][0];
        let rpcs = p["rpcs"].as_u64().unwrap();
        assert!(rpcs > 0 && p["errors"] == 0, "{v}");
        assert_eq!(p["bytes"].as_u64().unwrap(), rpcs * (256 << 10));
    }
}
