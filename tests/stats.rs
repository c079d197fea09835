//! Statistics and parameters through `nacre ctl`, checked against known workloads.

use nacre_testkit::scrape;
use nacre_testkit::{nacre, nacre_ok, on_both_forms, Form, Spec, TestFs};
use nacre_tests::job_samples;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;

/// The write count of the `label:` row in section `section` of a brw_stats text.
fn brw_write_count(text: &str, section: &str, label: &str) -> u64 {
    let mut in_section = false;
    for line in text.lines() {
        if line.starts_with(section) {
            in_section = true;
            continue;
        }
        if in_section && line.trim().is_empty() {
            break;
        }
        if in_section && line.starts_with(&format!("{label}:")) {
            let right = line.split('|').nth(1).unwrap();
            return right.split_whitespace().next().unwrap().parse().unwrap();
        }
    }
    0
}

fn brw_stats_count_a_known_workload_and_clear(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(2).fsname("stbrw"));
    let f = fs.path("hundred");
    nacre_ok(&["setstripe", "-c", "1", "-i", "0", f.to_str().unwrap()]);
    nacre_ok(&[
        "ctl",
        "set_param",
        "osd.stbrw-OST0000.brw_stats=0",
        "ost.stbrw-OST0000.stats=0",
    ]);
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f)
        .unwrap();
    // O_DIRECT needs page-aligned memory: the project's own aligned buffer.
    let buf = nacre_types::AlignedBuf::zeroed(1 << 20);
    for i in 0..100u64 {
        file.write_all_at(&buf, i << 20).unwrap();
    }
    drop(file);
    let brw = nacre_ok(&["ctl", "get_param", "-n", "osd.stbrw-OST0000.brw_stats"]);
    assert_eq!(brw_write_count(&brw, "disk I/O size", "1M"), 100, "{brw}");
    assert_eq!(
        brw_write_count(&brw, "pages per bulk r/w", "256"),
        100,
        "{brw}"
    );
    let other = nacre_ok(&["ctl", "get_param", "-n", "osd.stbrw-OST0001.brw_stats"]);
    assert_eq!(brw_write_count(&other, "disk I/O size", "1M"), 0, "{other}");
    let stats = nacre_ok(&["ctl", "get_param", "ost.stbrw-OST0000.stats"]);
    assert!(
        stats.contains("write                     100 samples [usecs]"),
        "{stats}"
    );
    assert!(
        stats.contains("write_bytes               100 samples [bytes] 104857600"),
        "{stats}"
    );
    // Clearing by writing 0; wildcards select both OSTs.
    let set = nacre_ok(&["ctl", "set_param", "osd.stbrw-OST*.brw_stats=0"]);
    assert_eq!(set.lines().count(), 2, "{set}");
    let brw = nacre_ok(&["ctl", "get_param", "-n", "osd.stbrw-OST0000.brw_stats"]);
    assert_eq!(brw_write_count(&brw, "disk I/O size", "1M"), 0, "{brw}");
}

fn md_stats_and_parameters(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("stmd"));
    nacre_ok(&["ctl", "set_param", "mdt.stmd-MDT0000.md_stats=0"]);
    for i in 0..25 {
        std::fs::create_dir(fs.path(&format!("d{i}"))).unwrap();
    }
    let md = nacre_ok(&["ctl", "get_param", "mdt.stmd-MDT0000.md_stats"]);
    assert!(
        md.contains("mkdir                     25 samples [usecs]"),
        "{md}"
    );
    let names = nacre_ok(&["ctl", "list_param", "*.stmd-*.*"]);
    for want in [
        "mdt.stmd-MDT0000.md_stats",
        "osd.stmd-OST0000.brw_stats",
        "osd.stmd-OST0000.direct_io",
        "ost.stmd-OST0000.stats",
    ] {
        assert!(
            names.lines().any(|l| l == want),
            "{want} missing from {names}"
        );
    }
    nacre_ok(&["ctl", "set_param", "osd.stmd-OST0000.direct_io=0"]);
    assert_eq!(
        nacre_ok(&["ctl", "get_param", "-n", "osd.stmd-OST0000.direct_io"]).trim(),
        "0"
    );
    let bad = nacre(&["ctl", "set_param", "osd.stmd-OST0000.direct_io=maybe"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not 0 or 1"));
    let ro = nacre(&["ctl", "set_param", "osd.stmd-OST0000.uuid=x"]);
    assert!(String::from_utf8_lossy(&ro.stderr).contains("read-only"));
    let missing = nacre(&["ctl", "get_param", "osd.nosuch.x"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such parameter"));
}

fn job_stats_attribute_io_to_the_right_job(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("stjob"));
    let m = fs.mnt.display().to_string();
    let dd = |env: &str, name: &str, count: u32| {
        nacre_testkit::sh(&format!(
            "{env} dd if=/dev/zero of={m}/{name} bs=1M count={count} oflag=direct status=none"
        ))
    };
    dd("env SLURM_JOB_ID=job42", "a", 3);
    dd("env SLURM_JOB_ID=job77", "b", 5);
    dd("env -u SLURM_JOB_ID", "c", 2);
    let ost = nacre_ok(&["ctl", "get_param", "-n", "ost.stjob-OST0000.job_stats"]);
    assert_eq!(job_samples(&ost, "job42", "write"), 3, "{ost}");
    assert_eq!(job_samples(&ost, "job77", "write"), 5, "{ost}");
    assert_eq!(job_samples(&ost, "dd.0", "write"), 2, "{ost}");
    let mdt = nacre_ok(&["ctl", "get_param", "-n", "mdt.stjob-MDT0000.job_stats"]);
    assert_eq!(job_samples(&mdt, "job42", "create"), 1, "{mdt}");
    // jobid_var is a client parameter: procname_uid ignores the environment.
    nacre_ok(&["ctl", "set_param", "ost.stjob-OST0000.job_stats=0"]);
    // Set on this mount's process only (other tests' mounts run beside it).
    let client = fs.client_pid().expect("the mount's process").to_string();
    let jobid_var = |value: Option<&str>| match value {
        None => nacre_ok(&["ctl", "--pid", &client, "get_param", "-n", "jobid_var"]),
        Some(v) => nacre_ok(&[
            "ctl",
            "--pid",
            &client,
            "set_param",
            &format!("jobid_var={v}"),
        ]),
    };
    assert_eq!(jobid_var(None).trim(), "SLURM_JOB_ID");
    jobid_var(Some("procname_uid"));
    dd("env SLURM_JOB_ID=job99", "d", 4);
    jobid_var(Some("SLURM_JOB_ID"));
    let ost = nacre_ok(&["ctl", "get_param", "-n", "ost.stjob-OST0000.job_stats"]);
    assert_eq!(job_samples(&ost, "job99", "write"), 0, "{ost}");
    assert_eq!(job_samples(&ost, "dd.0", "write"), 4, "{ost}");
}

fn metrics_endpoint_parses_with_a_real_openmetrics_parser(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("stmet").metrics());
    nacre_testkit::sh(&format!(
        "env SLURM_JOB_ID=jm dd if=/dev/zero of={}/m bs=1M count=2 oflag=direct status=none",
        fs.mnt.display()
    ));
    // One endpoint per process (the embedded form has one): each must parse on its own, and
    // together they tell what the assertions below look for.
    let mut parsed = String::new();
    let mut bodies = String::new();
    for addr in &fs.metrics_addrs {
        let body = scrape_checked(addr);
        parsed.push_str(&parse_openmetrics(&body));
        bodies.push_str(&body);
    }
    check_metrics(&parsed, &bodies);
}

/// Scrapes `/metrics` at `addr`, checking the HTTP answer.
fn scrape_checked(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("application/openmetrics-text"),
        "{head}"
    );
    body.to_string()
}

/// The samples of an OpenMetrics text as a real parser reads them: `TYPE NAME LABELS VALUE`.
fn parse_openmetrics(body: &str) -> String {
    use std::io::Write;
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for f in text_string_to_metric_families(sys.stdin.read()):
    for s in f.samples:
        print(f.type, s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())), int(s.value))
"#;
    let mut py = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    py.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser rejected /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check_metrics(parsed: &str, body: &str) {
    assert!(
        parsed.contains("counter nacre_target_ops_total op=write,target=stmet-OST0000 2"),
        "{parsed}"
    );
    assert!(
        parsed.contains(
            "counter nacre_job_op_bytes_total job=jm,op=write,target=stmet-OST0000 2097152"
        ),
        "{parsed}"
    );
    assert!(
        parsed.contains("gauge nacre_ost_free_bytes target=stmet-OST0000"),
        "{parsed}"
    );
    // The client's side: bulk RPCs and bytes per OST connection.
    assert!(
        parsed
            .contains("counter nacre_osc_bytes_total fs=stmet,op=write,ost=stmet-OST0000 2097152"),
        "{parsed}"
    );
    // Service partitions: threads started, requests handled by them (the two 1 MiB writes
    // went to ost_io service threads), queue depths.
    let value = |ty: &str, name: &str, labels: &str| -> u64 {
        let prefix = format!("{ty} {name} {labels} ");
        parsed
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {parsed}"))
            .parse()
            .unwrap()
    };
    let ost_io = "cpt=0,service=ost_io";
    assert!(value("gauge", "nacre_service_threads", ost_io) >= 1);
    assert!(value("counter", "nacre_service_requests_total", ost_io) >= 2);
    assert_eq!(value("gauge", "nacre_service_threads_busy", ost_io), 0);
    assert_eq!(value("gauge", "nacre_service_queue_depth", ost_io), 0);
    value("gauge", "nacre_service_queue_depth_max", ost_io);
    value("counter", "nacre_service_busy_seconds_total", ost_io);
    value(
        "counter",
        "nacre_service_wait_seconds_total",
        "cpt=0,service=mdt",
    );
    // Every metric the sample Grafana dashboard queries is one this server exports.
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(nacre_testkit::tests_dir().join("../contrib/grafana-nacre.json"))
            .unwrap(),
    )
    .unwrap();
    let mut queried = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("nacre_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    body.lines().any(|l| l.starts_with(&format!("{name}{{"))),
                    "dashboard metric {name} is not exported"
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 10, "{queried}");
    let table = nacre_ok(&["ctl", "get_param", "ost.OSS.ost_io.partition_stats"]);
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [
                    "cpt",
                    "threads",
                    "busy",
                    "queued",
                    "queued_max",
                    "requests",
                    "busy_secs",
                    "wait_secs",
                    "weighted_ahead",
                    "plain_turns",
                    "batches",
                    "batched"
                ])
            && table.contains("inline_requests"),
        "{table}"
    );
}

/// `nacre ctl list_param | head` printed a panic for the closed pipe; a command whose reader
/// is gone must end as `ls` does: killed by SIGPIPE, nothing on stderr.
fn a_closed_pipe_ends_a_command_quietly(form: Form) {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("stpipe"));
    for args in [
        &["ctl", "list_param"][..],
        &["getstripe", fs.mnt.to_str().unwrap()],
        &["df", fs.mnt.to_str().unwrap()],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two descriptors, each owned once below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors from pipe(2), owned by nothing else.
        let (reader, writer) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(reader); // every write now fails with EPIPE: no race with a reader's exit
        let out = std::process::Command::new(nacre_testkit::nacre_bin())
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "nacre {args:?} printed: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "nacre {args:?}: {:?}",
            out.status
        );
    }
}

/// The control socket and `/metrics` serve several callers at once: callers that connect
/// and say nothing (held by the server until its 5 s timeout) delay no one else.
fn stalled_callers_delay_no_one(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("ststall").metrics());
    let pid = fs.server_pids()[0];
    let socket = format!("/run/nacre/ctl/{pid}.sock");
    let stalled_ctl: Vec<_> = (0..2)
        .map(|_| std::os::unix::net::UnixStream::connect(&socket).unwrap())
        .collect();
    let addr = &fs.metrics_addrs[0];
    let stalled_http: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let n = nacre_ok(&[
        "ctl",
        "--pid",
        &pid.to_string(),
        "get_param",
        "-n",
        "cpu_npartitions",
    ]);
    assert!(n.trim().parse::<usize>().unwrap() >= 1, "{n}");
    assert!(scrape_checked(addr).contains("# EOF"));
    // Answered while the stalled callers are still being waited for (a server serving one
    // caller at a time would only have answered after dropping them).
    for mut s in stalled_ctl {
        still_connected(&mut s);
    }
    for mut s in stalled_http {
        still_connected(&mut s);
    }
}

/// `/metrics` is served by an HTTP server that answers 404 for other paths, refuses an
/// oversized request head, and drops a caller that never finishes its head at its timeout.
fn metrics_http_refuses_what_it_does_not_serve(form: Form) {
    use std::io::{Read, Write};
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("sthttp").metrics());
    let addr = &fs.metrics_addrs[0];
    let ask = |req: &[u8]| -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        // The server may close before taking all of an oversized head.
        let _ = s.write_all(req);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    let other = ask(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    let big = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let refused = ask(big.as_bytes());
    assert!(
        refused.is_empty() || refused.starts_with("HTTP/1.1 4"),
        "an oversized head must not be served: {refused}"
    );
    // A caller that stops half way through its head is dropped (within its 5 s timeout).
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    slow.read_to_end(&mut rest)
        .expect("the server ends a stalled request itself");
    assert!(!String::from_utf8_lossy(&rest).contains("# EOF"));
    assert!(scrape_checked(addr).contains("# EOF"));
}

/// Short requests (getattr, lookup, glimpse) are served on the network thread that read them
/// (no hand-off to a service thread) and `net.run_inline=0` turns that off, with the same
/// answers either way. Networked form only: in the embedded form the requests of its own
/// mount never cross a socket (the in-process transport runs them on the caller's thread).
#[test]
fn networked_short_requests_run_on_the_network_threads() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("stinline"));
    let mds = fs.server_pids()[0];
    let inline = || -> u64 {
        let t = nacre_ok(&[
            "ctl",
            "--pid",
            &mds.to_string(),
            "get_param",
            "-n",
            "mds.MDS.mdt.partition_stats",
        ]);
        t.lines()
            .find_map(|l| l.strip_prefix("inline_requests "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no inline_requests in {t}"))
    };
    let dir = fs.path("d");
    std::fs::create_dir(&dir).unwrap();
    // Made by another mount, written here: stats of files a mount made and wrote itself
    // are answered by that mount (crates/client vouched.rs).
    let maker_mnt = fs.scratch().join("maker");
    std::fs::create_dir_all(&maker_mnt).unwrap();
    let maker = fs.mount_another(&maker_mnt, &[]);
    for i in 0..50 {
        std::fs::File::create(maker_mnt.join("d").join(format!("f{i}"))).unwrap();
    }
    drop(maker);
    for i in 0..50 {
        std::fs::write(dir.join(format!("f{i}")), vec![b'x'; i]).unwrap();
    }
    let stat_all = || {
        for i in 0..50 {
            assert_eq!(
                std::fs::metadata(dir.join(format!("f{i}"))).unwrap().len(),
                i as u64
            );
        }
    };
    // The MDT's reads for those stats (a directory's attributes the mount keeps under its
    // lock after its own creates are not asked for).
    let asked = || -> u64 {
        let t = nacre_ok(&["ctl", "get_param", "-n", "mdt.stinline-MDT0000.md_stats"]);
        t.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let name = w.next()?;
                ["getattr", "lookup"]
                    .contains(&name)
                    .then(|| w.next()?.parse::<u64>().ok())?
            })
            .sum()
    };
    let (before, asked_before) = (inline(), asked());
    stat_all();
    let (served, reads) = (inline() - before, asked() - asked_before);
    assert!(
        reads >= 40,
        "only {reads} MDT reads for 50 stats of changed files"
    );
    assert!(
        served >= reads,
        "only {served} requests ran inline for {reads} MDT reads"
    );
    for pid in fs.server_pids() {
        nacre_ok(&[
            "ctl",
            "--pid",
            &pid.to_string(),
            "set_param",
            "net.run_inline=0",
        ]);
    }
    let before = inline();
    stat_all();
    assert_eq!(
        inline(),
        before,
        "net.run_inline=0 must hand every request off"
    );
}

/// Asserts the server has neither answered nor dropped the stalled caller `s` yet.
fn still_connected(s: &mut (impl std::io::Read + ShortReadTimeout)) {
    s.short_read_timeout();
    let e = s
        .read(&mut [0u8; 1])
        .expect_err("the stalled caller is still connected");
    assert!(matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ));
}

/// Sockets whose reads can be made to give up at once.
trait ShortReadTimeout {
    fn short_read_timeout(&self);
}

impl ShortReadTimeout for std::net::TcpStream {
    fn short_read_timeout(&self) {
        self.set_read_timeout(Some(std::time::Duration::from_millis(1)))
            .unwrap();
    }
}

impl ShortReadTimeout for std::os::unix::net::UnixStream {
    fn short_read_timeout(&self) {
        self.set_read_timeout(Some(std::time::Duration::from_millis(1)))
            .unwrap();
    }
}

fn wait_for_param(name: &str, want: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let got = nacre_ok(&["ctl", "get_param", "-n", name]);
        if got.trim() == want || std::time::Instant::now() > deadline {
            return got.trim().to_string();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn persistent_parameters_reach_every_target_and_survive_a_restart(form: Form) {
    // Another file system's MGS on the node does not store (or fail) stpp's parameters:
    // regression test for `set_param -P` failing with EIO when an unrelated MGS could not
    // write its store.
    let other = TestFs::start_with(form, Spec::osts(1).fsname("stpq"));
    let mut fs = TestFs::start_with(form, Spec::osts(2).fsname("stpp"));
    assert_eq!(
        nacre_ok(&["ctl", "get_param", "-n", "osd.stpp-OST0001.direct_io"]).trim(),
        "1"
    );
    let out = nacre_ok(&["ctl", "set_param", "-P", "osd.stpp-OST000?.direct_io=0"]);
    assert!(out.contains("(persistent)"), "{out}");
    // The MGS parameter stores (crc-protected envelopes; the name is stored verbatim).
    let stored = |e: &TestFs| {
        let bytes = std::fs::read(e.data.join("mgs/mgs-params")).unwrap_or_default();
        String::from_utf8_lossy(&bytes).contains("osd.stpp-OST000?.direct_io")
    };
    assert!(stored(&fs), "stpp's MGS stores its parameter");
    assert!(!stored(&other), "stpq's MGS stored stpp's parameter");
    drop(other);
    assert_eq!(wait_for_param("osd.stpp-OST0000.direct_io", "0"), "0");
    assert_eq!(wait_for_param("osd.stpp-OST0001.direct_io", "0"), "0");
    fs.restart();
    // Applied while the servers start, before the mount is offered.
    assert_eq!(
        nacre_ok(&["ctl", "get_param", "-n", "osd.stpp-OST0000.direct_io"]).trim(),
        "0"
    );
    assert_eq!(
        nacre_ok(&["ctl", "get_param", "-n", "osd.stpp-OST0001.direct_io"]).trim(),
        "0"
    );
    // An empty value removes it from the MGS; the live value stays until set again.
    nacre_ok(&["ctl", "set_param", "-P", "osd.stpp-OST000?.direct_io="]);
    nacre_ok(&["ctl", "set_param", "osd.stpp-OST000?.direct_io=1"]);
    fs.restart();
    assert_eq!(
        nacre_ok(&["ctl", "get_param", "-n", "osd.stpp-OST0000.direct_io"]).trim(),
        "1"
    );
}

fn osc_rpc_stats_count_client_rpcs(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(2).fsname("strpc"));
    let f = fs.path("ten");
    nacre_ok(&["setstripe", "-c", "1", "-i", "1", f.to_str().unwrap()]);
    nacre_ok(&["ctl", "set_param", "osc.strpc-OST0001-osc.rpc_stats=0"]);
    nacre_testkit::sh(&format!(
        "dd if=/dev/zero of={} bs=1M count=10 oflag=direct status=none",
        f.display()
    ));
    let text = nacre_ok(&["ctl", "get_param", "-n", "osc.strpc-OST0001-osc.rpc_stats"]);
    assert_eq!(brw_write_count(&text, "pages per rpc", "256"), 10, "{text}");
    assert!(text.contains("write RPCs in flight: 0"), "{text}");
    let other = nacre_ok(&["ctl", "get_param", "-n", "osc.strpc-OST0000-osc.rpc_stats"]);
    assert_eq!(
        brw_write_count(&other, "pages per rpc", "256"),
        0,
        "{other}"
    );
    // The window per target, 32 by default (Lustre's 8 is too small for flash OSTs).
    for param in [
        "osc.strpc-OST0000-osc.max_rpcs_in_flight",
        "mdc.strpc-MDT0000-mdc.max_rpcs_in_flight",
    ] {
        assert_eq!(nacre_ok(&["ctl", "get_param", "-n", param]).trim(), "32");
    }
}

/// `nacre mount --max-rpcs-in-flight N` sets the window of every target connection, and
/// the mount shows it; a window out of 1..=256 is refused with a clear message.
#[test]
fn the_mount_sets_the_rpcs_in_flight_it_shows() {
    let fs = TestFs::start_with(
        Form::Networked,
        Spec::osts(1)
            .fsname("strif")
            .mount_args(&["--max-rpcs-in-flight", "4"]),
    );
    for param in [
        "osc.strif-OST0000-osc.max_rpcs_in_flight",
        "mdc.strif-MDT0000-mdc.max_rpcs_in_flight",
    ] {
        assert_eq!(nacre_ok(&["ctl", "get_param", "-n", param]).trim(), "4");
    }
    // Data still flows with the narrower window.
    let f = fs.path("four");
    let data = nacre_testkit::pattern(4, 3 << 20);
    std::fs::write(&f, &data).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), data);
    let bad = nacre(&[
        "mount",
        "127.0.0.1@tcp:/strif",
        "/nonexistent",
        "--max-rpcs-in-flight",
        "0",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("max_rpcs_in_flight must be between 1 and 256"),
        "{err}"
    );
}

/// The pages a listing fetches ahead (statahead, on a helper thread) are asked in the
/// lister's name: an `ls -l` of 2,000 files from a mount that did not make them counts every
/// readdirplus page to the lister's job. Regression: the pages after the first went with
/// the mount's own credentials (root's) and no job.
#[test]
fn pages_fetched_ahead_are_asked_in_the_listers_name() {
    let fsname = "stsah";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    std::fs::create_dir(fs.path("d")).unwrap();
    for i in 0..2000 {
        std::fs::File::create(fs.path(&format!("d/f{i}"))).unwrap();
    }
    let other = fs.scratch().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let _m = fs.mount_another(&other, &[]);
    let before = nacre_testkit::md_requests(fsname, &["readdirplus"]);
    let listed = nacre_testkit::sh(&format!(
        "env SLURM_JOB_ID=lsjob ls -l {}/d | grep -c ' f[0-9]'",
        other.display()
    ));
    assert_eq!(listed.trim(), "2000");
    let pages = nacre_testkit::md_requests(fsname, &["readdirplus"]) - before;
    // 2,000 entries in pages of 256: the first asked by the lister, the others ahead.
    assert!(pages >= 8, "{pages} readdirplus pages");
    let mdt = nacre_ok(&[
        "ctl",
        "get_param",
        "-n",
        &format!("mdt.{fsname}-MDT0000.job_stats"),
    ]);
    assert_eq!(job_samples(&mdt, "lsjob", "readdirplus"), pages, "{mdt}");
}

/// Starts `nacre top` for one screen, then makes traffic inside its interval.
fn top_while(args: &[&str], traffic: impl FnOnce()) -> String {
    let child = std::process::Command::new(nacre_testkit::nacre_bin())
        .args(["top", "-d", "3", "-n", "1"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    traffic();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The columns of the first row of `table` whose first column is `key`.
fn top_row<'a>(screen: &'a str, table: &str, key: &str) -> Vec<&'a str> {
    let mut lines = screen.lines().skip_while(|l| !l.starts_with(table));
    lines
        .find(|l| l.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("no {key} under {table}: {screen}"))
        .split_whitespace()
        .collect()
}

fn top_shows_the_busiest_jobs_clients_and_targets(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(1).fsname("sttop").metrics());
    // The servers' endpoints (the networked client's is the last one).
    let servers = match form {
        Form::Embedded => fs.metrics_addrs.clone(),
        Form::Networked => fs.metrics_addrs[..fs.metrics_addrs.len() - 1].to_vec(),
    };
    // The client as the servers name it: the in-process transport, or its TCP address.
    let client = match form {
        Form::Embedded => "0@lo",
        Form::Networked => "127.0.0.1@tcp",
    };
    let m = fs.mnt.display().to_string();
    let traffic = |job: &str, name: &str| {
        let m = m.clone();
        let (job, name) = (job.to_string(), name.to_string());
        move || {
            nacre_testkit::sh(&format!(
                "env SLURM_JOB_ID={job} dd if=/dev/zero of={m}/{name} bs=1M count=24 oflag=direct status=none"
            ));
            nacre_testkit::sh(&format!(
                "env SLURM_JOB_ID=md{job} sh -c 'for i in $(seq 50); do : > {m}/{name}.$i; done'"
            ));
        }
    };
    // This node's processes, over their control sockets.
    let screen = top_while(&["--fsname", "sttop"], traffic("topjob", "a"));
    let job = top_row(&screen, "JOB", "topjob");
    let mbs: f64 = job[2].parse().unwrap();
    assert!(mbs > 0.0, "write MB/s of topjob: {screen}");
    let md = top_row(&screen, "JOB", "mdtopjob");
    assert!(md[4].parse::<f64>().unwrap() > 0.0, "md op/s: {screen}");
    assert!(
        top_row(&screen, "CLIENT", client)[2]
            .parse::<f64>()
            .unwrap()
            > 0.0
    );
    assert!(
        top_row(&screen, "TARGET", "sttop-OST0000")[2]
            .parse::<f64>()
            .unwrap()
            > 0.0
    );
    assert!(
        top_row(&screen, "TARGET", "sttop-MDT0000")[4]
            .parse::<f64>()
            .unwrap()
            > 0.0
    );
    // A server's /metrics endpoint.
    let screen = top_while(
        &["--servers", &servers.join(",")],
        traffic("remotejob", "b"),
    );
    assert!(
        top_row(&screen, "JOB", "remotejob")[2]
            .parse::<f64>()
            .unwrap()
            > 0.0
    );
    assert!(
        !screen.contains("topjob "),
        "idle jobs are not listed: {screen}"
    );
    let bad = nacre(&["top", "-n", "1", "--servers", "127.0.0.1:1"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot reach 127.0.0.1:1"));
}

fn a_client_mount_exports_its_own_metrics(form: Form) {
    let fs = TestFs::start_with(form, Spec::osts(2).fsname("stcli"));
    let maddr = format!("127.0.0.1:{}", nacre_testkit::free_port());
    let mnt = fs.scratch().join("client");
    let _m = fs.mount_another(&mnt, &["--metrics", &maddr]);
    nacre_testkit::sh(&format!(
        "dd if=/dev/zero of={}/f bs=1M count=3 oflag=direct status=none",
        mnt.display()
    ));
    let body = scrape(&maddr);
    let line = |name: &str| {
        body.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {body}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let written: u64 = ["stcli-OST0000", "stcli-OST0001"]
        .iter()
        .map(|o| {
            line(&format!(
                "nacre_osc_bytes_total{{fs=\"stcli\",ost=\"{o}\",op=\"write\"}}"
            ))
        })
        .sum();
    assert_eq!(written, 3 << 20, "{body}");
    assert!(body.trim_end().ends_with("# EOF"));
    assert!(
        !body.contains("nacre_target_ops_total{"),
        "a client serves no targets"
    );
}

on_both_forms!(
    stalled_callers_delay_no_one,
    metrics_http_refuses_what_it_does_not_serve,
    a_closed_pipe_ends_a_command_quietly,
    brw_stats_count_a_known_workload_and_clear,
    md_stats_and_parameters,
    job_stats_attribute_io_to_the_right_job,
    metrics_endpoint_parses_with_a_real_openmetrics_parser,
    persistent_parameters_reach_every_target_and_survive_a_restart,
    osc_rpc_stats_count_client_rpcs,
    top_shows_the_busiest_jobs_clients_and_targets,
    a_client_mount_exports_its_own_metrics,
);
