//! The built-in benchmark drivers on a real mount: they run, report, and catch bad data.

use nacre_testkit::{nacre, nacre_ok, Embedded};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::FileExt;

#[test]
fn ior_checks_data_and_reports_every_phase() {
    let fs = Embedded::start(2);
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

#[test]
fn ior_detects_corrupted_objects() {
    let fs = Embedded::start(1);
    let o = fs.path("c");
    nacre_ok(&[
        "bench",
        "ior",
        "-w",
        "-t",
        "64k",
        "-b",
        "1m",
        "-N",
        "2",
        "-F",
        "-k",
        "-q",
        "-o",
        o.to_str().unwrap(),
    ]);
    // Corrupt task 1's file where it lives: in its object on the OST's own file system.
    let victim = fs.path("c.00000001");
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
    let out = nacre(&[
        "bench",
        "ior",
        "-r",
        "-R",
        "-t",
        "64k",
        "-b",
        "1m",
        "-N",
        "2",
        "-F",
        "-k",
        "-q",
        "-o",
        o.to_str().unwrap(),
    ]);
    assert!(
        !out.status.success(),
        "a data check failure must fail the run"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("data check: 3 errors (first: offset 65544"),
        "{text}"
    );
}

#[test]
fn mdtest_runs_all_phases_and_cleans_up() {
    let fs = Embedded::start(1);
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

#[test]
fn survey_drives_live_osts_directly() {
    let fs = Embedded::start(2);
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
