//! Cluster-wide QoS (issue 21, step 3; docs/qos.md) on the networked form: a rule holds a
//! job to its rate over two MDTs and two OSTs together, while another job on the same mount
//! (the same connections) goes on unheld; rules are listed, replaced and removed.

use nacre_testkit::{get_param, nacre, nacre_ok, partition_sum, wait_for, Form, Spec, TestFs};
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

/// Waits until every target of `fsname` applies QoS rules of version `version` or later.
pub(crate) fn rules_reach(fsname: &str, version: u64) {
    wait_for("the QoS rules reach every target", || {
        ["mdt", "ost"].iter().all(|kind| {
            get_param(None, &format!("{kind}.{fsname}-*.qos_rules_version"))
                .lines()
                .all(|v| v.trim().parse::<u64>().is_ok_and(|v| v >= version))
        })
    });
}

#[test]
fn a_weighted_job_gets_its_weights_share_while_a_busy_job_waits_beside_it() {
    // One MDS thread, each create holding it 20 ms (a fault point's pause after the
    // commit): both jobs' requests wait in its queue, whatever the machine's speed.
    let fs = TestFs::start_with(
        Form::Networked,
        Spec::osts(1).fsname("qosw").server_args(&[
            "--cpu-npartitions",
            "1",
            "--mds-threads-min",
            "1",
            "--mds-threads-max",
            "1",
        ]),
    );
    let src = fs.source();
    let dirs = |job: &str| -> Vec<std::path::PathBuf> {
        (0..4)
            .map(|i| {
                let d = fs.path(&format!("{job}{i}"));
                std::fs::create_dir(&d).unwrap();
                d
            })
            .collect()
    };
    let (batch_dirs, inter_dirs) = (dirs("batch"), dirs("inter"));
    let bad = nacre(&["qos", "add", "w", "--job", "x*", "--weight", "65", &src]);
    assert!(!bad.status.success());
    const WEIGHT: u64 = 2;
    nacre_ok(&[
        "qos", "add", "inter", "--job", "inter*", "--weight", "2", &src,
    ]);
    let list = nacre_ok(&["qos", "list", "--json", &src]);
    assert!(list.contains("\"weight\":2"), "{list}");
    rules_reach("qosw", 1);
    let mds = fs.server_pids()[0];
    assert_eq!(partition_sum(mds, "mds.MDS.mdt", "threads"), 1);
    nacre_testkit::fail_loc(mds, "mds.create.after_commit_before_reply~20");
    let (ahead0, turns0) = (
        partition_sum(mds, "mds.MDS.mdt", "weighted_ahead"),
        partition_sum(mds, "mds.MDS.mdt", "plain_turns"),
    );
    // Four processes of each job, each in its own directory (the kernel serialises the
    // creates of one directory): up to four requests of each job wait at once.
    let batch: Vec<Child> = batch_dirs
        .iter()
        .map(|d| creator("batch.1", &[d], 6))
        .collect();
    let inter: Vec<Child> = inter_dirs
        .iter()
        .map(|d| creator("inter.2", &[d], 6))
        .collect();
    let batch_files: u64 = batch.into_iter().map(made).sum();
    let inter_files: u64 = inter.into_iter().map(made).sum();
    nacre_testkit::fail_loc(mds, "0");
    let ahead = partition_sum(mds, "mds.MDS.mdt", "weighted_ahead") - ahead0;
    let turns = partition_sum(mds, "mds.MDS.mdt", "plain_turns") - turns0;
    eprintln!(
        "batch {batch_files} files, interactive {inter_files}; \
         while both waited: {ahead} weighted requests taken, {turns} unweighted"
    );
    // While both jobs' requests waited, the weighted job had its weight's share of the
    // thread: WEIGHT of its requests for each of the others' (WEIGHT / (WEIGHT + 1)).
    assert!(ahead >= 20, "the jobs hardly ever waited together: {ahead}");
    assert!(
        ahead >= WEIGHT * turns,
        "the weighted job had less than its share: {ahead} against {turns}"
    );
    // Over the run the interactive job made more files than the batch job of as many
    // processes (the same share without the weight), and the batch job was not starved.
    assert!(
        inter_files > batch_files && batch_files > 0,
        "interactive {inter_files} files, batch {batch_files}"
    );
    let text = get_param(None, "mdt.qosw-MDT0000.qos_stats");
    assert!(
        text.lines()
            .any(|l| l.starts_with("inter ") && l.contains("job=inter.2")),
        "{text}"
    );
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
    rules_reach("qosp", 1);
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
