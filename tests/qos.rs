//! Cluster-wide QoS (issue 21, step 3; docs/qos.md) on the networked form: a rule holds a
//! job to its rate over two MDTs and two OSTs together, while another job on the same mount
//! (the same connections) goes on unheld; rules are listed, replaced and removed.

use nacre_testkit::{get_param, nacre, nacre_ok, Form, Spec, TestFs};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Requests served of rule `rule`'s classes over every target of `fsname` (qos_stats).
fn served(fsname: &str, rule: &str) -> u64 {
    let mut total = 0;
    for param in ["mdt", "ost"] {
        let text = get_param(None, &format!("{param}.{fsname}-*.qos_stats"));
        for l in text.lines() {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.first() == Some(&rule) {
                total += cols[2].parse::<u64>().unwrap();
            }
        }
    }
    total
}

/// A process of job `job` making small files in `dirs` in turn for `secs` seconds; it
/// prints how many it made.
fn creator(job: &str, dirs: &[&Path], secs: u32) -> Child {
    let script = r#"
import os, sys, time
dirs, end, i = sys.argv[2:], time.time() + float(sys.argv[1]), 0
while time.time() < end:
    fd = os.open(f"{dirs[i % len(dirs)]}/f{os.getpid()}-{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x" * 4096)
    os.close(fd)
    i += 1
print(i)
"#;
    Command::new("python3")
        .env("SLURM_JOB_ID", job)
        .arg("-c")
        .arg(script)
        .arg(secs.to_string())
        .args(dirs)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn made(c: Child) -> u64 {
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn a_rule_holds_a_job_to_its_rate_over_every_target_and_spares_other_jobs() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname("qosg"));
    let src = fs.source();
    let (d0, d1) = (fs.path("d0"), fs.path("d1"));
    std::fs::create_dir(&d0).unwrap();
    nacre_ok(&["mkdir", "-i", "1", d1.to_str().unwrap()]);
    for d in [&d0, &d1] {
        nacre_ok(&["setstripe", "-c", "2", "-S", "1M", d.to_str().unwrap()]);
    }
    let q0 = fs.path("q0");
    std::fs::create_dir(&q0).unwrap();

    // Bad rules are refused clearly.
    let bad = nacre(&["qos", "add", "x y", "--ops-rate", "5", &src]);
    assert!(!bad.status.success());
    let bad = nacre(&["qos", "add", "nocap", "--job", "a*", &src]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--ops"));

    let rate = 200u64;
    nacre_ok(&[
        "qos",
        "add",
        "noisy",
        "--job",
        "noisy*",
        "--ops-rate",
        "500",
        &src,
    ]);
    // Replaced by name.
    let r = rate.to_string();
    nacre_ok(&[
        "qos",
        "add",
        "noisy",
        "--job",
        "noisy*",
        "--ops-rate",
        &r,
        &src,
    ]);
    let list = nacre_ok(&["qos", "list", &src]);
    assert_eq!(list.lines().count(), 1, "{list}");
    assert!(list.contains("noisy job=noisy* ops_rate=200"), "{list}");

    // Two processes of the noisy job over both MDTs (and both OSTs: each file has a
    // stripe on each), and one of another job in the same mount.
    let secs = 40;
    let noisy: Vec<Child> = (0..2)
        .map(|_| creator("noisy.1", &[&d0, &d1], secs))
        .collect();
    let quiet = creator("quiet.2", &[&q0], secs);
    std::thread::sleep(Duration::from_secs(4)); // the rule reaches every target first
    let (t0, n0) = (Instant::now(), served("qosg", "noisy"));
    std::thread::sleep(Duration::from_secs(30));
    let (t1, n1) = (Instant::now(), served("qosg", "noisy"));
    let per_s = (n1 - n0) as f64 / (t1 - t0).as_secs_f64();
    let noisy_files: u64 = noisy.into_iter().map(made).sum();
    let quiet_files = made(quiet);
    eprintln!(
        "noisy: {per_s:.1} requests/s over 30 s ({noisy_files} files); quiet: {quiet_files} files"
    );
    assert!(
        (rate as f64 * 0.9..=rate as f64 * 1.1).contains(&per_s),
        "{per_s:.1} requests/s against a rate of {rate}"
    );
    assert!(
        quiet_files > 2 * noisy_files,
        "the other job was held too: {quiet_files} files against {noisy_files}"
    );
    // Each MDT and OST served part of it: the rate is one over all of them.
    for t in ["MDT0000", "MDT0001", "OST0000", "OST0001"] {
        let kind = if t.starts_with("MDT") { "mdt" } else { "ost" };
        let text = get_param(None, &format!("{kind}.qosg-{t}.qos_stats"));
        assert!(
            text.lines()
                .any(|l| l.starts_with("noisy ") && l.contains("job=noisy.1")),
            "{t}: {text}"
        );
    }

    nacre_ok(&["qos", "del", "noisy", &src]);
    assert!(nacre_ok(&["qos", "list", &src]).trim().is_empty());
    let gone = nacre(&["qos", "del", "noisy", &src]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no rule noisy"));
}

#[test]
fn a_weighted_job_is_served_ahead_of_a_busy_one() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("qosw"));
    let src = fs.source();
    let (b, i) = (fs.path("batch"), fs.path("inter"));
    std::fs::create_dir(&b).unwrap();
    std::fs::create_dir(&i).unwrap();
    let bad = nacre(&["qos", "add", "w", "--job", "x*", "--weight", "65", &src]);
    assert!(!bad.status.success());
    nacre_ok(&[
        "qos", "add", "inter", "--job", "inter*", "--weight", "8", &src,
    ]);
    let list = nacre_ok(&["qos", "list", "--json", &src]);
    assert!(list.contains("\"weight\":8"), "{list}");
    // The MDS's threads kept busy by a batch job of four processes; an interactive job
    // beside it.
    let mds = fs.server_pids()[0];
    let ahead = || -> u64 {
        get_param(Some(mds), "mds.MDS.mdt.partition_stats")
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with("inline_requests"))
            .map(|l| l.split_whitespace().nth(8).unwrap().parse::<u64>().unwrap())
            .sum()
    };
    std::thread::sleep(Duration::from_secs(2)); // the rule reaches the MDT
    let before = ahead();
    let batch: Vec<Child> = (0..4).map(|_| creator("batch.1", &[&b], 10)).collect();
    let inter = creator("inter.2", &[&i], 10);
    let batch_files: u64 = batch.into_iter().map(made).sum();
    let inter_files = made(inter);
    eprintln!(
        "batch {batch_files} files, interactive {inter_files}; ahead {}",
        ahead() - before
    );
    // Its requests were taken before the batch job's that waited longer, and counted.
    assert!(ahead() > before, "no weighted request went ahead");
    let text = get_param(None, "mdt.qosw-MDT0000.qos_stats");
    assert!(
        text.lines()
            .any(|l| l.starts_with("inter ") && l.contains("job=inter.2")),
        "{text}"
    );
    assert!(inter_files > 0 && batch_files > 0);
}

#[test]
fn a_project_rule_holds_the_creates_made_in_the_projects_tree() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("qosp"));
    let src = fs.source();
    let (p, free) = (fs.path("p42"), fs.path("free"));
    std::fs::create_dir(&p).unwrap();
    std::fs::create_dir(&free).unwrap();
    nacre_ok(&["project", "-p", "42", "-s", p.to_str().unwrap()]);
    nacre_ok(&[
        "qos",
        "add",
        "proj",
        "--project",
        "42",
        "--op",
        "create",
        "--ops-rate",
        "50",
        &src,
    ]);
    std::thread::sleep(Duration::from_secs(2)); // the rule reaches the MDT
    let inside = creator("any.1", &[&p], 6);
    let outside = creator("any.1", &[&free], 6);
    let (n_in, n_out) = (made(inside), made(outside));
    let text = get_param(None, "mdt.qosp-MDT0000.qos_stats");
    eprintln!("{n_in} files in project 42, {n_out} outside\n{text}");
    // The creates in the project's tree are its class, held to the rate; the others are
    // not matched at all.
    let line = text
        .lines()
        .find(|l| l.starts_with("proj ") && l.contains("project=42,op=create"))
        .unwrap_or_else(|| panic!("no class of project 42: {text}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let (served, delayed): (u64, u64) = (cols[2].parse().unwrap(), cols[4].parse().unwrap());
    assert_eq!(served, n_in, "one create per file in the tree: {line}");
    assert!(delayed > 0, "none held: {line}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("proj ")).count(),
        1,
        "{text}"
    );
    assert!(
        n_out > n_in,
        "the creates outside the tree were held too: {n_out} against {n_in}"
    );
}
