//! The policy engine (docs/policy.md) on the networked form: rules select exactly the
//! files their conditions describe on a tree with set sizes, owners, ages and pools (found
//! by the first scan, and by the changelogs after it: creates, renames, time changes), a
//! dry run changes nothing, migrations land on the target pool's OSTs with every byte
//! kept, purges remove exactly their files, reports list theirs; a running engine follows
//! new files and shows per-rule counters in `/metrics`; and a fill-level rule brings a
//! small pool under its threshold, least recently used files first, without overshoot.

use nacre_testkit::{nacre, nacre_ok, pattern, wait_for, Form, Spec, TestFs};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const DAY: i64 = 86_400;
const MIB: usize = 1 << 20;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Sets a file's access and modification times (without opening it).
fn set_times(path: &Path, atime: i64, mtime: i64) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: atime,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: mtime,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a NUL-terminated path and two timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat {}", path.display());
}

/// Writes `len` bytes of pattern `seed`, owned by `uid`, accessed `age_a` and modified
/// `age_m` seconds ago.
fn file(path: &Path, seed: u64, len: usize, uid: u32, age_a: i64, age_m: i64) {
    fs::write(path, pattern(seed, len)).unwrap();
    std::os::unix::fs::chown(path, Some(uid), None).unwrap();
    set_times(path, now() - age_a, now() - age_m);
}

/// `nacre policy run --once` with `extra`: the dry-run lines, and each rule's run.
fn run_once(rules: &Path, extra: &[&str]) -> (Vec<String>, Vec<Value>) {
    let mut args = vec![
        "policy",
        "run",
        "--rules",
        rules.to_str().unwrap(),
        "--once",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = nacre_ok(&args);
    let start = out.find("\n[").map(|i| i + 1).unwrap_or(0);
    let lines = out[..start].lines().map(str::to_string).collect();
    let runs: Vec<Value> =
        serde_json::from_str(&out[start..]).unwrap_or_else(|e| panic!("{e}: {out}"));
    (lines, runs)
}

/// `nacre policy status --json` of the engine of `rules`, if it answers.
fn status_of(rules: &Path) -> Option<Value> {
    let out = nacre(&["policy", "status", "--rules", rules.to_str()?, "--json"]);
    match out.status.success() {
        true => serde_json::from_slice(&out.stdout).ok(),
        false => None,
    }
}

fn field(runs: &[Value], rule: &str, f: &str) -> u64 {
    runs.iter()
        .find(|r| r["rule"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule} in {runs:?}"))[f]
        .as_u64()
        .unwrap()
}

/// A running engine, killed if the test ends early.
struct Engine(std::process::Child);

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn rules_act_on_exactly_the_files_they_select() {
    let fsname = "pol1";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4).mdts(2).fsname(fsname));
    assert_eq!(fs.form, Form::Networked);
    for (p, osts) in [("flash", "OST[0-1]"), ("capacity", "OST[2-3]")] {
        nacre_ok(&["pool", "new", &format!("{fsname}.{p}")]);
        nacre_ok(&["pool", "add", &format!("{fsname}.{p}"), osts]);
    }
    let p = |rel: &str| fs.path(rel);
    let s = |rel: &str| fs.path(rel).to_str().unwrap().to_string();
    for d in ["proj", "proj/a", "proj/cap"] {
        fs::create_dir(p(d)).unwrap();
    }
    nacre_ok(&["setstripe", "-p", "flash", "-c", "1", &s("proj/a")]);
    nacre_ok(&["setstripe", "-p", "capacity", "-c", "1", &s("proj/cap")]);
    // Scratch on the second MDT: both changelogs are followed.
    nacre_ok(&["mkdir", "-i", "1", &s("scratch")]);
    fs::create_dir_all(p("scratch/tmp/sub")).unwrap();
    let cold = 2 * DAY;
    let old = 10 * DAY;
    file(&p("proj/a/cold_big"), 1, 2 * MIB, 0, cold, cold);
    file(&p("proj/a/cold_small"), 2, MIB / 2, 0, cold, cold);
    file(&p("proj/a/warm_big"), 3, 2 * MIB, 0, 0, 0);
    file(&p("proj/cap/cold_big"), 4, 2 * MIB, 0, cold, cold);
    file(&p("scratch/tmp/old.tmp"), 5, 4096, 1000, old, old);
    file(&p("scratch/tmp/old.keep"), 6, 4096, 1000, old, old);
    file(&p("scratch/tmp/root.tmp"), 7, 4096, 0, old, old);
    file(&p("scratch/tmp/new.tmp"), 8, 4096, 1000, 0, 0);
    file(&p("scratch/tmp/sub/deep.tmp"), 9, 4096, 1000, old, old);
    // A project's tree: files made in it take its project.
    fs::create_dir(p("proj/p7")).unwrap();
    nacre_ok(&["project", "-p", "7", "-s", &s("proj/p7")]);
    file(&p("proj/p7/before"), 12, 4096, 0, 0, 0);
    let state = fs.scratch().join("policy-state");
    let report = fs.scratch().join("train.report");
    let p7_report = fs.scratch().join("p7.report");
    let metrics = format!("127.0.0.1:{}", nacre_testkit::free_port());
    let rules_text = |interval: &str| {
        format!(
            "fs = \"{}\"\nstate_dir = \"{}\"\n[engine]\ninterval = \"{interval}\"\nmetrics = \"{metrics}\"\n\
             [[rule]]\nname = \"cold-flash\"\naction = \"migrate\"\npool = \"capacity\"\n\
             in_pool = [\"flash\"]\nlarger_than = \"1M\"\nnot_accessed_for = \"1d\"\n\
             [[rule]]\nname = \"scratch-purge\"\naction = \"purge\"\npath = [\"/scratch/**/*.tmp\"]\n\
             uid = [1000]\nnot_modified_for = \"7d\"\n\
             [[rule]]\nname = \"train-report\"\naction = \"report\"\nreport = \"{}\"\njobid = [\"train-*\"]\n\
             [[rule]]\nname = \"p7-report\"\naction = \"report\"\nreport = \"{}\"\nproject = [7]\n",
            fs.source(),
            state.display(),
            report.display(),
            p7_report.display()
        )
    };
    let rules = fs.scratch().join("rules.toml");
    fs::write(&rules, rules_text("1h")).unwrap();

    // A dry run (the first: it registers and scans) says what it would do, does nothing.
    let (lines, runs) = run_once(&rules, &["--dry-run"]);
    let mut would: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("would "))
        .map(|l| l.split(" (").next().unwrap())
        .collect();
    would.sort();
    assert_eq!(
        would,
        vec![
            "migrate /proj/a/cold_big",
            "purge /scratch/tmp/old.tmp",
            "purge /scratch/tmp/sub/deep.tmp",
            "report /proj/p7/before",
        ],
        "{lines:?}"
    );
    assert_eq!(field(&runs, "cold-flash", "selected"), 1);
    assert_eq!(field(&runs, "cold-flash", "acted"), 0);
    assert_eq!(nacre_testkit::pool_of(&p("proj/a/cold_big")).0, "flash");
    assert!(p("scratch/tmp/old.tmp").exists());

    // Changes after the scan reach the index through the changelogs alone.
    file(&p("proj/a/late_cold"), 10, 3 * MIB, 0, cold, cold);
    fs::rename(p("proj/a/warm_big"), p("proj/a/renamed_big")).unwrap();
    set_times(&p("proj/a/renamed_big"), now() - cold, now() - cold);
    fs::rename(p("scratch/tmp/old.keep"), p("scratch/tmp/sub/was_keep.tmp")).unwrap();
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("head -c 3000000 /dev/zero > {}", s("proj/a/ckpt")))
        .env("SLURM_JOB_ID", "train-7")
        .status()
        .unwrap();
    assert!(st.success());
    // A project's new file and a file given the project later (a SATTR record).
    file(&p("proj/p7/after"), 13, 4096, 0, 0, 0);
    nacre_ok(&["project", "-p", "7", &s("scratch/tmp/root.tmp")]);

    let (_, runs) = run_once(&rules, &[]);
    assert_eq!(field(&runs, "cold-flash", "acted"), 3, "{runs:?}");
    assert_eq!(field(&runs, "cold-flash", "failed"), 0);
    assert_eq!(field(&runs, "scratch-purge", "acted"), 3, "{runs:?}");
    assert_eq!(field(&runs, "train-report", "acted"), 1, "{runs:?}");
    for (f, seed, len) in [
        ("proj/a/cold_big", 1, 2 * MIB),
        ("proj/a/late_cold", 10, 3 * MIB),
        ("proj/a/renamed_big", 3, 2 * MIB),
    ] {
        let (pool, osts) = nacre_testkit::pool_of(&p(f));
        assert_eq!(pool, "capacity", "{f}");
        assert!(osts.iter().all(|o| *o >= 2), "{f} on {osts:?}");
        assert_eq!(fs::read(p(f)).unwrap(), pattern(seed, len), "{f}");
    }
    for f in ["proj/a/cold_small", "proj/a/ckpt"] {
        assert_eq!(nacre_testkit::pool_of(&p(f)).0, "flash", "{f}");
    }
    assert_eq!(
        nacre_testkit::pool_of(&p("proj/cap/cold_big")).0,
        "capacity"
    );
    for gone in [
        "scratch/tmp/old.tmp",
        "scratch/tmp/sub/deep.tmp",
        "scratch/tmp/sub/was_keep.tmp",
    ] {
        assert!(!p(gone).exists(), "{gone} not purged");
    }
    for kept in ["scratch/tmp/root.tmp", "scratch/tmp/new.tmp"] {
        assert!(p(kept).exists(), "{kept} purged");
    }
    let listed = fs::read_to_string(&report).unwrap();
    let listed: Vec<&str> = listed.lines().collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0].starts_with("train-report\t/proj/a/ckpt\t3000000\tflash\t"),
        "{listed:?}"
    );
    assert!(listed[0].ends_with("\ttrain-7"), "{listed:?}");
    let mut p7: Vec<String> = fs::read_to_string(&p7_report)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap().to_string())
        .collect();
    p7.sort();
    assert_eq!(
        p7,
        ["/proj/p7/after", "/proj/p7/before", "/scratch/tmp/root.tmp"],
        "the project's files"
    );

    // The status: what is indexed, what each rule did.
    let st = status_of(&rules).expect("the engine's status");
    assert_eq!(st["running"], false);
    // cold_small, ckpt, renamed_big, cold_big, late_cold, cap/cold_big, root.tmp, new.tmp,
    // p7/before, p7/after.
    assert_eq!(st["files"], 10, "{st}");
    assert_eq!(st["changelogs"].as_array().unwrap().len(), 2, "{st}");
    let totals = |rule: &str| {
        st["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r[0] == rule)
            .unwrap()[2]
            .clone()
    };
    assert_eq!(totals("cold-flash")["files"], 3);
    assert_eq!(totals("cold-flash")["bytes"], 7 * MIB as u64);
    assert_eq!(totals("scratch-purge")["files"], 3);

    // Running: a new cold file is moved at the next evaluation; the counters show in
    // /metrics; SIGTERM stops the engine.
    fs::write(&rules, rules_text("1s")).unwrap();
    let mut engine = Engine(
        Command::new(nacre_testkit::nacre_bin())
            .args(["policy", "run", "--rules", rules.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    file(&p("proj/a/later_cold"), 11, 2 * MIB, 0, cold, cold);
    wait_for("the running engine moves a new cold file", || {
        nacre_testkit::pool_of(&p("proj/a/later_cold")).0 == "capacity"
    });
    assert_eq!(
        fs::read(p("proj/a/later_cold")).unwrap(),
        pattern(11, 2 * MIB)
    );
    wait_for("the counters in /metrics", || {
        nacre_testkit::scrape(&metrics)
            .contains("nacre_policy_rule_files_total{rule=\"cold-flash\",action=\"migrate\"} 4")
    });
    let body = nacre_testkit::scrape(&metrics);
    assert!(
        body.contains("nacre_policy_rule_files_total{rule=\"scratch-purge\",action=\"purge\"} 3"),
        "{body}"
    );
    assert!(body.contains("nacre_policy_records_total "), "{body}");
    let busy = nacre(&[
        "policy",
        "run",
        "--rules",
        rules.to_str().unwrap(),
        "--once",
    ]);
    assert!(!busy.status.success());
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("another policy engine"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(engine.0.id() as i32, libc::SIGTERM) };
    let status = engine.0.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
fn a_fill_rule_empties_a_small_pool_to_its_threshold_lru_first_without_overshoot() {
    let fsname = "polfill";
    // The flash pool is one OST on a 64 MiB file system of its own.
    let small = nacre_testkit::SmallFs::start(fsname, &[Some("64m"), None]);
    let flash = small.osts[0].clone();
    let source = small.source.clone();
    let m = small.mount("mnt");
    for (p, ost) in [("flash", "OST0"), ("capacity", "OST1")] {
        nacre_ok(&["pool", "new", &format!("{fsname}.{p}")]);
        nacre_ok(&["pool", "add", &format!("{fsname}.{p}"), ost]);
    }
    let dir = m.mnt.join("ckpt");
    fs::create_dir(&dir).unwrap();
    nacre_ok(&["setstripe", "-p", "flash", "-c", "1", dir.to_str().unwrap()]);
    // 2 MiB files until the pool is above 80%, each accessed a minute before the next.
    let base = now() - DAY;
    let mut files: Vec<PathBuf> = Vec::new();
    while nacre_testkit::fill_percent(&flash) <= 80.0 {
        let i = files.len();
        assert!(i < 40, "64 MiB not full after {i} files");
        let f = dir.join(format!("f{i:02}"));
        file(&f, 100 + i as u64, 2 * MIB, 0, 0, 0);
        set_times(&f, base + 60 * i as i64, base);
        files.push(f);
    }
    let before = nacre_testkit::fill_percent(&flash);
    let rules = small.dir("rules.toml");
    fs::write(
        &rules,
        format!(
            "fs = \"{source}\"\nstate_dir = \"{}\"\n\
             [[rule]]\nname = \"flash-full\"\naction = \"migrate\"\npool = \"capacity\"\n\
             fill = {{ pool = \"flash\", above = 70, below = 40 }}\n",
            small.dir("state").display()
        ),
    )
    .unwrap();
    let (_, runs) = run_once(&rules, &[]);
    let moved = field(&runs, "flash-full", "acted") as usize;
    assert_eq!(field(&runs, "flash-full", "failed"), 0);
    // Least recently used first: exactly the oldest `moved` files left the pool.
    for (i, f) in files.iter().enumerate() {
        let want = if i < moved { "capacity" } else { "flash" };
        assert_eq!(
            nacre_testkit::pool_of(f).0,
            want,
            "file {i} of {} ({moved} moved)",
            files.len()
        );
    }
    // Once the old objects are destroyed the pool is under its threshold, by less than
    // one file more than needed.
    let share = 2.0 * MIB as f64 * 100.0 / (64 * MIB) as f64;
    // The MDT's destroy queue empties first (what it says is kept for a failure's message).
    let pending = format!("mdt.{fsname}-MDT0000.destroy_pending");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let fill = nacre_testkit::fill_percent(&flash);
        if fill <= before - share * moved as f64 + share / 2.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the moved files' old objects not destroyed in 60 s: fill {fill:.1}% \
             (from {before:.1}%, {moved} moved); {pending}: {}",
            nacre_testkit::get_param(None, &pending)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let after = nacre_testkit::fill_percent(&flash);
    assert!(
        after <= 40.0,
        "fill {after:.1}% after moving {moved} files (from {before:.1}%)"
    );
    assert!(
        after > 40.0 - share,
        "overshoot: fill {after:.1}% after moving {moved} files (from {before:.1}%)"
    );
    for (i, f) in files.iter().enumerate() {
        assert_eq!(
            fs::read(f).unwrap(),
            pattern(100 + i as u64, 2 * MIB),
            "file {i}"
        );
    }
}

/// An engine killed -9 while it follows the changelogs loses nothing: started again, its
/// index holds every file exactly once and its rules select exactly theirs.
#[test]
fn an_engine_killed_while_following_resumes_exactly() {
    let fsname = "polkill";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let state = fs.scratch().join("state");
    let rules = fs.scratch().join("rules.toml");
    fs::write(
        &rules,
        format!(
            "fs = \"{}\"\nstate_dir = \"{}\"\n[engine]\ninterval = \"1h\"\n\
             [[rule]]\nname = \"big\"\naction = \"report\"\nlarger_than = \"4k\"\n\
             [[rule]]\nname = \"small\"\naction = \"report\"\nsmaller_than = \"4k\"\n",
            fs.source(),
            state.display()
        ),
    )
    .unwrap();
    // Registered and scanned on an empty file system.
    run_once(&rules, &[]);
    let mut engine = Engine(
        Command::new(nacre_testkit::nacre_bin())
            .args(["policy", "run", "--rules", rules.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    fs::create_dir(fs.path("d")).unwrap();
    let files = 3000;
    for i in 0..files {
        let len = if i % 10 == 0 { 8192 } else { 100 };
        fs::write(fs.path(&format!("d/f{i}")), pattern(i, len)).unwrap();
        if i == files / 2 {
            // Killed half way through following.
            wait_for("the engine applies records", || {
                status_of(&rules).is_some_and(|v| v["files"].as_u64().unwrap_or(0) > 0)
            });
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(engine.0.id() as i32, libc::SIGKILL) };
            engine.0.wait().unwrap();
        }
    }
    fs::remove_file(fs.path("d/f1")).unwrap();
    fs::rename(fs.path("d/f20"), fs.path("d/g20")).unwrap();
    let (lines, runs) = run_once(&rules, &["--dry-run"]);
    assert_eq!(field(&runs, "big", "selected"), 300, "{runs:?}");
    // The paths rule `rule` would report.
    let would_of = |rule: &str| -> Vec<String> {
        let mut v: Vec<String> = lines
            .iter()
            .filter(|l| l.ends_with(&format!(", rule {rule})")))
            .filter_map(|l| l.strip_prefix("would report "))
            .map(|l| l.split(" (").next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let would = would_of("big");
    let mut want: Vec<String> = (0..files)
        .filter(|i| i % 10 == 0)
        .map(|i| {
            if i == 20 {
                "/d/g20".to_string()
            } else {
                format!("/d/f{i}")
            }
        })
        .collect();
    want.sort();
    assert_eq!(would, want);
    // Every small file too (named in the message if one is missing from the index).
    let small = would_of("small");
    let missing: Vec<String> = (0..files)
        .filter(|i| i % 10 != 0 && *i != 1)
        .map(|i| format!("/d/f{i}"))
        .filter(|p| small.binary_search(p).is_err())
        .collect();
    let st = status_of(&rules).expect("the engine's status");
    assert!(missing.is_empty(), "not in the index: {missing:?}; {st}");
    assert_eq!(small.len() as u64, files - 1 - 300, "{st}");
    assert_eq!(st["files"], files - 1, "{st}");
}

/// Mistakes get clear errors: a bad rules file names the rule and field, an unreachable
/// file system says so, and `status` before any run says what is missing.
#[test]
fn bad_rules_and_unreachable_file_systems_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.toml");
    let err = |args: &[&str]| {
        let out = nacre(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let r = rules.to_str().unwrap();
    fs::write(
        &rules,
        format!(
            "fs = \"127.0.0.1:1:/none\"\nstate_dir = \"{}\"\n[[rule]]\nname = \"x\"\naction = \"migrate\"\n",
            dir.path().join("s").display()
        ),
    )
    .unwrap();
    let e = err(&["policy", "run", "--rules", r, "--once"]);
    assert!(e.contains("rule 'x': migrate needs pool"), "{e}");
    fs::write(
        &rules,
        format!(
            "fs = \"127.0.0.1:1:/none\"\nstate_dir = \"{}\"\n[[rule]]\nname = \"x\"\naction = \"report\"\n",
            dir.path().join("s").display()
        ),
    )
    .unwrap();
    let e = err(&["policy", "status", "--rules", r]);
    assert!(e.contains("has `nacre policy run` ever run"), "{e}");
    let e = err(&["policy", "run", "--rules", r, "--once"]);
    assert!(e.contains("127.0.0.1:1"), "{e}");
    let e = err(&["policy", "run", "--rules", "/nonexistent/rules.toml"]);
    assert!(e.contains("cannot read /nonexistent/rules.toml"), "{e}");
}

/// A running engine rides out a kill -9 of the MDS: it follows the changelog again once the
/// MDS is back, and files created after the restart reach its reports.
#[test]
fn a_running_engine_rides_out_a_kill_of_the_mds() {
    let fsname = "polmds";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    let state = fs.scratch().join("state");
    let report = fs.scratch().join("big.report");
    let rules = fs.scratch().join("rules.toml");
    fs::write(
        &rules,
        format!(
            "fs = \"{}\"\nstate_dir = \"{}\"\n[engine]\ninterval = \"1s\"\n\
             [[rule]]\nname = \"big\"\naction = \"report\"\nreport = \"{}\"\nlarger_than = \"4k\"\n",
            fs.source(),
            state.display(),
            report.display()
        ),
    )
    .unwrap();
    let listed = |name: &str| {
        fs::read_to_string(&report)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(&format!("\t/{name}\t")))
    };
    let _engine = Engine(
        Command::new(nacre_testkit::nacre_bin())
            .args(["policy", "run", "--rules", rules.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    fs::write(fs.path("before"), pattern(1, 8192)).unwrap();
    wait_for("a report of the file created before", || listed("before"));
    fs.servers_mut()[0].kill9();
    fs.servers_mut()[0].restart();
    fs::write(fs.path("after"), pattern(2, 8192)).unwrap();
    wait_for("a report of the file created after the restart", || {
        listed("after")
    });
}
