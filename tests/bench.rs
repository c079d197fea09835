//! The built-in benchmark drivers on a real mount of either form: they run, report, and catch
//! bad data.

use nacre_testkit::{nacre, nacre_ok, on_both_forms, Form, Spec, TestFs};
use nacre_tests::job_samples;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::FileExt;

fn ior_checks_data_and_reports_every_phase(form: Form) {
    let fs = TestFs::start(form, 2);
    let o = fs.path("ior");
    let out = nacre_ok(&[
        "bench",
        "ior",
        "-w",
        "-r",
        "-t",
        "64k",
        "-b",
        "1m",
        "-s",
        "2",
        "-N",
        "3",
        "-C",
        "-e",
        "-W",
        "-R",
        "-i",
        "2",
        "--json",
        "-o",
        o.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["check_errors"], 0);
    let phases = v["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 4, "write and read, two iterations");
    for ph in phases {
        assert_eq!(ph["bytes"], 3 * 2 * (1 << 20));
        assert!(ph["bw_mib"].as_f64().unwrap() > 0.0);
    }
    assert!(!o.exists(), "test file removed without -k");
    // Shared-file IOR-hard geometry (47,008-byte records) with O_DIRECT off.
    let text = nacre_ok(&[
        "bench",
        "ior",
        "-t",
        "47008",
        "-b",
        "470080",
        "-s",
        "3",
        "-N",
        "2",
        "-C",
        "-R",
        "-q",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert!(
        text.contains("data check: 0 errors") && text.contains("Summary of all tests"),
        "{text}"
    );
}

/// IOR's data check catches wrong data that the file system stored faithfully (a bad write
/// through the mount); data damaged on the OST's disk is caught earlier, by the OST's
/// checksums: the read fails with EIO and the damaged bytes never reach the check.
fn ior_detects_corrupted_objects(form: Form) {
    let fs = TestFs::start(form, 1);
    let o = fs.path("c");
    // Two tasks, a file each of 1 MiB in 64 KiB transfers, kept after the run.
    let ior = |phase: &[&str]| {
        let mut args = vec!["bench", "ior"];
        args.extend_from_slice(phase);
        args.extend(["-t", "64k", "-b", "1m", "-N", "2", "-F", "-k", "-q", "-o"]);
        args.push(o.to_str().unwrap());
        nacre(&args)
    };
    let written = ior(&["-w"]);
    assert!(written.status.success(), "{written:?}");
    let victim = fs.path("c.00000001");
    let ior_read = || ior(&["-r", "-R"]);
    // Wrong bytes written through the mount: stored as given, found by the data check.
    fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .unwrap()
        .write_all_at(&[0u8; 24], 65536 + 8)
        .unwrap();
    // The mount keeps what it read in its page cache (under read locks, which a change on
    // the OST's disk behind Nacre's back does not call back): drop it, so the read below
    // goes to the OST.
    fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    let out = ior_read();
    assert!(
        !out.status.success(),
        "a data check failure must fail the run"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("data check: 3 errors (first: offset 65544"),
        "{text}"
    );
    // Corrupt task 0's file where it lives: in its object on the OST's own file system.
    let victim = fs.path("c.00000000");
    let l: Value = serde_json::from_str(&nacre_ok(&[
        "getstripe",
        "--json",
        victim.to_str().unwrap(),
    ]))
    .unwrap();
    let obj = &l["objects"][0];
    let id = obj["id"].as_u64().unwrap();
    let path = fs.data.join(format!(
        "ost{}/O/{}/d{}/{id}",
        obj["ost"],
        obj["seq"],
        id % 32
    ));
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&[0u8; 24], 65536 + 8)
        .unwrap();
    // The mount keeps what it read in its page cache (under read locks, which a change on
    // the OST's disk behind Nacre's back does not call back): drop it, so the read below
    // goes to the OST.
    fs::write("/proc/sys/vm/drop_caches", "1").unwrap();
    let out = ior_read();
    assert!(!out.status.success(), "reading damaged data must fail");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("data check: 3 errors"),
        "damaged data was returned: {text}"
    );
    assert!(
        text.contains("Input/output error") || text.contains("EIO"),
        "{text}"
    );
}

fn mdtest_runs_all_phases_and_cleans_up(form: Form) {
    let fs = TestFs::start(form, 1);
    let d = fs.path("md");
    let out = nacre_ok(&[
        "bench",
        "mdtest",
        "-n",
        "300",
        "-u",
        "-N",
        "2",
        "-w",
        "4096",
        "-e",
        "4096",
        "-z",
        "1",
        "-b",
        "2",
        "--json",
        "-d",
        d.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let phases = v["iterations"][0]["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p[0].as_str().unwrap()).collect();
    for want in [
        "Tree creation",
        "Directory creation",
        "Directory stat",
        "Directory removal",
        "File creation",
        "File stat",
        "File read",
        "File removal",
        "Tree removal",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    for p in phases {
        assert!(p[3].as_f64().unwrap() > 0.0, "{p}");
    }
    assert_eq!(
        phases.iter().find(|p| p[0] == "File creation").unwrap()[1],
        600
    );
    assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
    let mknod = nacre_ok(&[
        "bench",
        "mdtest",
        "-n",
        "500",
        "-N",
        "2",
        "-F",
        "--mknod",
        "-q",
        "-d",
        d.to_str().unwrap(),
    ]);
    assert!(
        mknod.contains("mknod creates") && mknod.contains("File creation"),
        "{mknod}"
    );
}

fn survey_drives_live_osts_directly(form: Form) {
    let fs = TestFs::start(form, 2);
    std::fs::write(fs.path("keep"), b"live data").unwrap();
    let (o0, o1) = (fs.data.join("ost0"), fs.data.join("ost1"));
    let out = nacre_ok(&[
        "bench",
        "survey",
        "--ost",
        o0.to_str().unwrap(),
        "--ost",
        o1.to_str().unwrap(),
        "-o",
        "3",
        "-t",
        "2",
        "-r",
        "256K",
        "-s",
        "4M",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let ops: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["op"].as_str().unwrap())
        .collect();
    assert_eq!(ops, vec!["write", "rewrite", "read"]);
    for p in v.as_array().unwrap() {
        assert_eq!(p["per_ost_mib"].as_array().unwrap().len(), 2);
        assert!(p["total_mib"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(
        std::fs::read(fs.path("keep")).unwrap(),
        b"live data",
        "the file system is untouched"
    );
    let survey_dir = o0.join(format!("O/{}", u64::MAX - 1));
    let left: usize = std::fs::read_dir(&survey_dir)
        .map(|d| {
            d.flatten()
                .map(|e| std::fs::read_dir(e.path()).unwrap().count())
                .sum()
        })
        .unwrap_or(0);
    assert_eq!(left, 0, "survey objects are destroyed");
}

fn ior_and_mdtest_through_the_native_client_library(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(2).fsname("natv"));
    let mgs = fs.mgs_nid.clone();
    let plot = fs.scratch().join("ior.svg");
    let out = nacre_ok(&[
        "bench",
        "ior",
        "-a",
        "NACRE",
        "--mgs",
        &mgs,
        "--fsname",
        "natv",
        "-w",
        "-r",
        "-t",
        "256k",
        "-b",
        "1m",
        "-s",
        "2",
        "-N",
        "3",
        "-C",
        "-e",
        "-W",
        "-R",
        "-k",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
        "-o",
        "/nat-ior",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["api"], "NACRE");
    assert_eq!(v["check_errors"], 0);
    assert_eq!(v["phases"].as_array().unwrap().len(), 2);
    // The file the library wrote is the file the FUSE mount sees, byte for byte as IOR lays
    // it out: word k of task t's segment s holds offset/8 ^ t << 40.
    let f = fs::File::open(fs.path("nat-ior")).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 3 * 2 * (1 << 20));
    let mut w = [0u8; 8];
    let (segment, task, tasks) = (1u64, 2u64, 3u64);
    let off = ((segment * tasks + task) << 20) + 4096;
    f.read_exact_at(&mut w, off).unwrap();
    assert_eq!(u64::from_le_bytes(w), (off / 8) ^ (2 << 40));
    let svg = fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<polyline"),
        "{svg}"
    );
    assert!(svg.contains("write 0:") && svg.contains("read 0:"), "{svg}");

    let out = nacre_ok(&[
        "bench", "mdtest", "-a", "NACRE", "--mgs", &mgs, "--fsname", "natv", "-n", "40", "-u",
        "-N", "2", "-w", "100", "-e", "100", "-z", "1", "-b", "2", "--json", "-d", "/deep/md",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["api"], "NACRE");
    let phases = v["iterations"][0]["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 9, "{phases:?}");
    assert_eq!(
        phases.iter().find(|p| p[0] == "File creation").unwrap()[1],
        80
    );
    assert_eq!(
        fs::read_dir(fs.path("deep/md")).unwrap().count(),
        0,
        "the native run made /deep/md and removed its trees"
    );
    let bad = nacre(&["bench", "mdtest", "-a", "NACRE", "-d", "/x"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("needs --mgs"));
}

/// IOR and mdtest tasks spread over two client hosts (network namespaces), each host's worker
/// started through a launcher, as mpirun starts IOR on a cluster's nodes.
/// Networked only: the client hosts are network namespaces, each with its own mount process.
#[test]
fn ior_and_mdtest_span_several_client_hosts() {
    use nacre_testkit::{mkfs, ClientMount, NetLab};
    let lab = NetLab::new(4);
    let (srv, oss, c1, c2) = (&lab.hosts[0], &lab.hosts[1], &lab.hosts[2], &lab.hosts[3]);
    let root = tempfile::Builder::new()
        .prefix("nacre-mh")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let mgs = format!("{}@tcp", srv.addr);
    mkfs("--mgs", 0, "mhb", None, &d("mgs"));
    mkfs("--mdt", 0, "mhb", Some(&mgs), &d("mdt0"));
    mkfs("--ost", 0, "mhb", Some(&mgs), &d("ost0"));
    let _mds = srv.server(&[&d("mgs"), &d("mdt0")], &[]);
    let _oss = oss.server(&[&d("ost0")], &[]);
    let source = format!("{mgs}:/mhb");
    // Each host mounts at its own path (one machine, one mount namespace): {host} in -o.
    let _m1 = ClientMount::mount_in(&c1.prefix(), &source, &d(&format!("mnt-{}", c1.netns)), &[]);
    let _m2 = ClientMount::mount_in(&c2.prefix(), &source, &d(&format!("mnt-{}", c2.netns)), &[]);
    let hosts = format!("{},{}", c1.netns, c2.netns);
    // Each host's worker runs under its own job id, so the OST's job_stats show which host
    // did the I/O.
    let launcher = "nsenter --net=/run/netns/{host} env SLURM_JOB_ID=job-{host}";
    let listen = format!("{}:0", c1.addr);
    let o = d("mnt-{host}/ior").display().to_string();
    let out = c1.nacre(&[
        "bench",
        "ior",
        "-w",
        "-r",
        "-t",
        "64k",
        "-b",
        "1m",
        "-s",
        "2",
        "-N",
        "4",
        "-C",
        "-e",
        "-W",
        "-R",
        "-F",
        "--json",
        "--hosts",
        &hosts,
        "--launcher",
        launcher,
        "--listen",
        &listen,
        "-o",
        &o,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["check_errors"], 0);
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["params"]["reorder_shift"], 2,
        "-C reads the other host's data"
    );
    assert_eq!(v["phases"][0]["bytes"], 4 * 2 * (1 << 20));
    let stats = nacre_ok(&["ctl", "get_param", "-n", "ost.mhb-OST0000.job_stats"]);
    for h in [c1, c2] {
        // Two tasks per host, 2 MiB each, in 64 KiB writes, counted for the writing job
        // whether they went through or were kept and gathered (write-behind).
        let job = format!("job-{}", h.netns);
        let rpcs = job_samples(&stats, &job, "write");
        assert!((1..=64).contains(&rpcs), "{job}: {stats}");
        assert_eq!(
            nacre_tests::job_bytes(&stats, &job, "write"),
            4 << 20,
            "{job}: {stats}"
        );
    }
    // mdtest over the native client library on both hosts, one shared directory.
    nacre_ok(&["ctl", "set_param", "mdt.mhb-MDT0000.job_stats=0"]);
    let out = c1.nacre(&[
        "bench",
        "mdtest",
        "-a",
        "NACRE",
        "--mgs",
        &mgs,
        "--fsname",
        "mhb",
        "-n",
        "50",
        "-N",
        "4",
        "-F",
        "--json",
        "--hosts",
        &hosts,
        "--launcher",
        launcher,
        "--listen",
        &listen,
        "-d",
        "/md",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases = v["iterations"][0]["phases"].as_array().unwrap();
    assert_eq!(
        phases.iter().find(|p| p[0] == "File creation").unwrap()[1],
        200
    );
    let mdt = nacre_ok(&["ctl", "get_param", "-n", "mdt.mhb-MDT0000.job_stats"]);
    for h in [c1, c2] {
        let job = format!("job-{}", h.netns);
        assert_eq!(job_samples(&mdt, &job, "create"), 100, "{job}: {mdt}");
    }
    // A host that cannot start a worker is reported, not waited for.
    let bad = nacre(&[
        "bench",
        "mdtest",
        "-n",
        "1",
        "-N",
        "2",
        "--hosts",
        "a,b",
        "--launcher",
        "false {host}",
        "--listen",
        "127.0.0.1:0",
        "-d",
        "/tmp/x",
    ]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("exited"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// No mount: the survey drives a scratch MDT of its own inside its process.
#[test]
fn mds_survey_drives_a_scratch_mdt() {
    let root = tempfile::Builder::new()
        .prefix("nacre-mdsurvey")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let dir = root.path().join("scratch");
    let out = nacre_ok(&[
        "bench",
        "mds-survey",
        dir.to_str().unwrap(),
        "--files",
        "400",
        "--threads",
        "2",
        "--dirs",
        "2",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let tests: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["test"].as_str().unwrap())
        .collect();
    assert_eq!(
        tests,
        ["create", "lookup", "md_getattr", "setxattr", "destroy"]
    );
    for t in v.as_array().unwrap() {
        assert_eq!(t["ops"], 400);
        assert!(t["rate"].as_f64().unwrap() > 0.0);
    }
    assert!(!dir.exists(), "the scratch MDT is removed");
    fs::write(root.path().join("keep"), b"x").unwrap();
    let refused = nacre(&["bench", "mds-survey", root.path().to_str().unwrap()]);
    assert!(!refused.status.success());
    assert!(root.path().join("keep").exists());
}

fn selftest_measures_ping_and_bulk_rpcs_against_a_server(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("stself"));
    let nid = fs.mgs_nid.clone();
    for (test, size) in [
        ("ping", 0u64),
        ("brw_write", 262_144),
        ("brw_read", 1 << 20),
    ] {
        let out = nacre_ok(&[
            "selftest",
            "--to",
            &nid,
            "--test",
            test,
            "--size",
            &size.max(1).to_string(),
            "--concurrency",
            "4",
            "--duration",
            "0.5",
            "--json",
        ]);
        let v: Value = serde_json::from_str(&out).unwrap();
        let peer = &v[0];
        let rpcs = peer["rpcs"].as_u64().unwrap();
        assert!(rpcs > 0, "{test}: {out}");
        assert_eq!(peer["errors"], 0, "{test}: {out}");
        assert_eq!(
            peer["bytes"].as_u64().unwrap(),
            rpcs * size,
            "{test}: {out}"
        );
        assert!(peer["rpc_per_s"].as_f64().unwrap() > 0.0);
    }
    let bad = nacre(&["selftest", "--to", "127.0.0.1:1@tcp", "--duration", "0.2"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("127.0.0.1:1@tcp") && err.contains("refused"),
        "{err}"
    );
    let bad = nacre(&[
        "selftest",
        "--to",
        &nid,
        "--size",
        "64M",
        "--duration",
        "0.2",
    ]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("size must be"));
}

on_both_forms!(
    ior_and_mdtest_through_the_native_client_library,
    selftest_measures_ping_and_bulk_rpcs_against_a_server,
    ior_checks_data_and_reports_every_phase,
    ior_detects_corrupted_objects,
    mdtest_runs_all_phases_and_cleans_up,
    survey_drives_live_osts_directly,
);

/// `nacre plan` gives Astra's numbers (2,592 nodes of 128 GiB, JMTTI 72 h: a checkpoint in
/// at most 1,296 s, 204.8 GiB/s), and sizes the OSTs and OSS nodes from a real survey of an
/// OST directory (its slowest OST's write rate) and from a link speed.
#[test]
fn plan_sizes_a_checkpoint_tier_from_a_survey() {
    let out = nacre_ok(&[
        "plan",
        "--nodes",
        "2592",
        "--mem-per-node",
        "128G",
        "--jmtti",
        "72h",
    ]);
    assert!(out.contains("checkpoint time bound: 1296 s"), "{out}");
    assert!(out.contains("write bandwidth needed: 204.8 GiB/s"), "{out}");
    let dir = tempfile::Builder::new()
        .prefix("nacre-plan")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let ost = dir.path().join("ost0");
    nacre_testkit::mkfs("--ost", 0, "plan", Some("127.0.0.1:1@tcp"), &ost);
    let survey = nacre_ok(&[
        "bench",
        "survey",
        "--ost",
        ost.to_str().unwrap(),
        "-o",
        "1",
        "-t",
        "1",
        "-s",
        "8M",
        "--json",
    ]);
    let file = dir.path().join("survey.json");
    std::fs::write(&file, &survey).unwrap();
    let v: Value = serde_json::from_str(&survey).unwrap();
    let write = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["op"] == "write")
        .unwrap();
    let rate = write["per_ost_mib"][0].as_f64().unwrap() * 1048576.0;
    let json = nacre_ok(&[
        "plan",
        "--nodes",
        "2592",
        "--mem-per-node",
        "128G",
        "--jmtti",
        "72h",
        "--survey",
        file.to_str().unwrap(),
        "--osts-per-oss",
        "4",
        "--oss-link",
        "100G",
        "--json",
    ]);
    let p: Value = serde_json::from_str(&json).unwrap();
    let bw = p["bandwidth"].as_f64().unwrap();
    let osts = p["osts"].as_u64().unwrap();
    assert_eq!(osts, (bw / rate).ceil() as u64, "{json}");
    assert_eq!(p["oss_for_osts"].as_u64().unwrap(), osts.div_ceil(4));
    assert_eq!(p["oss_for_links"].as_u64().unwrap(), 18, "{json}");
    assert_eq!(
        p["oss"].as_u64().unwrap(),
        osts.div_ceil(4).max(18),
        "{json}"
    );
    // Bad input gets a clear error.
    let bad = nacre(&[
        "plan",
        "--nodes",
        "10",
        "--mem-per-node",
        "1G",
        "--jmtti",
        "72",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected a duration"));
}
