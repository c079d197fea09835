//! Stage in and out for jobs through the data mover (docs/stage.md) on the networked form:
//! a tree staged into pool flash while the mover's server process is killed -9 half way
//! and started again finishes from its persistent queue (every file in flash, every byte
//! kept), then is staged out to capacity with `--wait`; status by job and id, cancel, and
//! clear errors for a missing mover or path.

use nacre_testkit::{nacre, nacre_ok, pattern, wait_for, Form, ServerProc, Spec, TestFs};
use serde_json::Value;
use std::fs;
use std::path::PathBuf;

const MIB: usize = 1 << 20;

fn status(mover: &str, id: &str) -> Value {
    let v: Value = serde_json::from_str(&nacre_ok(&[
        "stage", "status", "--mover", mover, "--id", id, "--json",
    ]))
    .unwrap();
    v[0].clone()
}

#[test]
fn a_stage_round_trip_survives_a_kill_of_the_mover() {
    let fsname = "stg";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).fsname(fsname));
    for (p, osts) in [("flash", "OST[0-1]"), ("capacity", "OST[2-3]")] {
        nacre_ok(&["pool", "new", &format!("{fsname}.{p}")]);
        nacre_ok(&["pool", "add", &format!("{fsname}.{p}"), osts]);
    }
    let data = fs.path("data");
    fs::create_dir(&data).unwrap();
    nacre_ok(&[
        "setstripe",
        "-p",
        "capacity",
        "-c",
        "1",
        data.to_str().unwrap(),
    ]);
    let mut files: Vec<(PathBuf, u64)> = Vec::new();
    for d in ["a", "a/b", "c"] {
        fs::create_dir(data.join(d)).unwrap();
        for i in 0..4 {
            let p = data.join(d).join(format!("f{i}"));
            let seed = files.len() as u64;
            fs::write(&p, pattern(seed, 8 * MIB)).unwrap();
            files.push((p, seed));
        }
    }
    // The mover: a server process of its own, 16 MiB/s (96 MiB take 6 s).
    let source = fs.source();
    let (mgs, _) = source.split_once(":/").unwrap();
    let listen = format!("127.0.0.1:{}", nacre_testkit::free_port());
    let mover_dir = fs.scratch().join("mover");
    let args: Vec<String> = [
        "server",
        "--insecure",
        "--listen",
        &listen,
        "--mover",
        mover_dir.to_str().unwrap(),
        "--mgsnode",
        mgs,
        "--fsname",
        fsname,
        "--mover-bandwidth",
        "16M",
        "--mover-jobs",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut mover = ServerProc::spawn(args, listen.clone());
    let nid = format!("{listen}@tcp");
    let id = nacre_ok(&[
        "stage",
        "in",
        "--pool",
        "flash",
        "--job",
        "42",
        "--mover",
        &nid,
        data.to_str().unwrap(),
    ]);
    let id = id.trim().to_string();
    wait_for("the stage-in under way", || {
        let s = status(&nid, &id);
        s["status"] == "running" && s["bytes_done"].as_u64().unwrap() > 0
    });
    let before = status(&nid, &id);
    assert!(
        before["bytes_done"].as_u64().unwrap() < before["bytes_total"].as_u64().unwrap(),
        "{before}"
    );
    assert_eq!(before["files_total"], 12);
    // Killed half way, started again: the request is still queued and finishes.
    mover.kill9();
    mover.restart();
    wait_for("the stage-in done after the restart", || {
        status(&nid, &id)["status"] == "done"
    });
    let after = status(&nid, &id);
    assert_eq!(after["files_failed"], 0, "{after}");
    // Files moved before the kill are found in flash and skipped.
    assert_eq!(
        after["files_done"].as_u64().unwrap() + after["files_skipped"].as_u64().unwrap(),
        12,
        "{after}"
    );
    assert!(after["files_skipped"].as_u64().unwrap() > 0, "{after}");
    for (p, seed) in &files {
        assert_eq!(nacre_testkit::pool_of(p).0, "flash", "{}", p.display());
        assert_eq!(
            fs::read(p).unwrap(),
            pattern(*seed, 8 * MIB),
            "{}",
            p.display()
        );
    }
    // Out again, waiting for it.
    let out = nacre_ok(&[
        "stage",
        "out",
        "--pool",
        "capacity",
        "--job",
        "42",
        "--wait",
        "--json",
        "--mover",
        &nid,
        data.to_str().unwrap(),
    ]);
    let out: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(out["status"], "done", "{out}");
    assert_eq!(out["files_done"], 12, "{out}");
    for (p, seed) in &files {
        assert_eq!(nacre_testkit::pool_of(p).0, "capacity", "{}", p.display());
        assert_eq!(
            fs::read(p).unwrap(),
            pattern(*seed, 8 * MIB),
            "{}",
            p.display()
        );
    }
    // A request cancelled by its job stops; the job's requests are listed.
    let third = nacre_ok(&[
        "stage",
        "in",
        "--pool",
        "flash",
        "--job",
        "43",
        "--mover",
        &nid,
        data.to_str().unwrap(),
    ]);
    assert_eq!(
        nacre_ok(&["stage", "cancel", "--job", "43", "--mover", &nid]).trim(),
        "cancelled 1 request(s)"
    );
    let c = status(&nid, third.trim());
    assert_eq!(c["status"], "cancelled", "{c}");
    let jobs: Value = serde_json::from_str(&nacre_ok(&[
        "stage", "status", "--job", "42", "--json", "--mover", &nid,
    ]))
    .unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 2, "{jobs}");
    // The Slurm prolog and epilog of contrib/ (Slurm itself is not installed here: a
    // stand-in `scontrol` shows the job's comment) stage the tree in and out for job 77.
    let bin = fs.scratch().join("bin");
    fs::create_dir_all(&bin).unwrap();
    let scontrol = bin.join("scontrol");
    fs::write(
        &scontrol,
        format!(
            "#!/bin/sh\necho \"   Comment=nacre_stage_in={d} nacre_stage_out={d}\"\n",
            d = data.display()
        ),
    )
    .unwrap();
    fs::set_permissions(
        &scontrol,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        nacre_testkit::nacre_bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap()
    );
    let contrib = nacre_testkit::tests_dir().join("../contrib/slurm");
    let run = |script: &str| {
        std::process::Command::new("sh")
            .arg(contrib.join(script))
            .env("PATH", &path)
            .env("SLURM_JOB_ID", "77")
            .env("NACRE_MOVER", &nid)
            .status()
            .unwrap()
    };
    assert!(run("prolog.sh").success());
    for (p, _) in &files {
        assert_eq!(nacre_testkit::pool_of(p).0, "flash", "{}", p.display());
    }
    assert!(run("epilog.sh").success());
    wait_for("the epilog's stage-out", || {
        files
            .iter()
            .all(|(p, _)| nacre_testkit::pool_of(p).0 == "capacity")
    });
    for (p, seed) in &files {
        assert_eq!(
            fs::read(p).unwrap(),
            pattern(*seed, 8 * MIB),
            "{}",
            p.display()
        );
    }
    // Clear errors: no mover named, a mover that is not there, a path that is not Nacre's.
    let e = nacre(&["stage", "in", "--pool", "flash", data.to_str().unwrap()]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("no data mover"));
    let e = nacre(&["stage", "status", "--mover", "127.0.0.1:1@tcp"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("cannot reach the data mover"));
    let e = nacre(&["stage", "in", "--pool", "flash", "--mover", &nid, "/tmp"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("not in a Nacre mount"));
}
