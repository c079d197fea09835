//! CPU partitions in a real server process: the table from Lustre's syntax, service threads
//! pinned to their partition's CPUs (read back from /proc), per-service partitions and thread
//! counts, and the tunables through `nacre ctl`.

use nacre_testkit::{free_port, mkfs, nacre, nacre_ok, ServerProc};

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
    let mdt: Vec<_> = t.iter().filter(|(n, _)| n.starts_with("mdt_")).collect();
    assert!(!mdt.is_empty());
    assert!(
        mdt.iter()
            .all(|(n, a)| n.starts_with("mdt_01_") && a == &last.to_string()),
        "the MDS service runs only on partition 1: {mdt:?}"
    );
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
    // A bad pattern is refused at start, naming the token.
    let out = nacre(&[
        "server",
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
