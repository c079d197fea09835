//! Helpers shared by the integration tests.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The errno of the last failed libc call.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Writes `data` to a new file at `path` and syncs it before the close: what a test that
/// then looks at the OSTs' objects on their disks needs (a close alone leaves the mount's
/// write-behind to the file's release, which may run after close(2) returns).
pub fn write_synced(path: &Path, data: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create");
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

/// A path as a C string.
pub fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// Runs `cmd` as user `nobody` through `runuser`; returns (success, stderr).
pub fn as_nobody(cmd: &str) -> (bool, String) {
    let out = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-c", cmd])
        .output()
        .expect("runuser");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `samples` of `op` for `job` in a job_stats text.
pub fn job_samples(text: &str, job: &str, op: &str) -> u64 {
    let mut in_job = false;
    for line in text.lines() {
        if let Some(id) = line.strip_prefix("- job_id:") {
            in_job = id.trim() == job;
            continue;
        }
        let key = format!("  {op}:");
        if in_job && line.starts_with(&key) && line.contains("unit: usecs") {
            let after = line.split("samples:").nth(1).unwrap();
            return after.split(',').next().unwrap().trim().parse().unwrap();
        }
    }
    0
}

/// The `sum` of `op`'s byte counter (`{op}_bytes`) for `job` in job_stats text (0 if absent).
pub fn job_bytes(text: &str, job: &str, op: &str) -> u64 {
    let mut in_job = false;
    for line in text.lines() {
        if let Some(id) = line.strip_prefix("- job_id:") {
            in_job = id.trim() == job;
            continue;
        }
        let key = format!("  {op}_bytes:");
        if in_job && line.starts_with(&key) {
            let after = line.split("sum:").nth(1).unwrap();
            return after.trim().trim_end_matches('}').trim().parse().unwrap();
        }
    }
    0
}

/// `nacre nodemap --pid MGS ARGS` (other tests' MGS processes run on this node too).
pub fn nodemap(mgs: &nacre_testkit::ServerProc, args: &[&str]) {
    let pid = mgs.pid().to_string();
    let mut a = vec!["nodemap", "--pid", &pid];
    a.extend_from_slice(args);
    nacre_testkit::nacre_ok(&a);
}

/// Makes the `default` nodemap (addresses no other nodemap holds) trusted: its clients act
/// as they say, root as root (without it they are refused once any nodemap exists).
pub fn trusted_default(mgs: &nacre_testkit::ServerProc) {
    nodemap(mgs, &["add", "default"]);
    for p in ["admin", "trusted"] {
        nodemap(
            mgs,
            &[
                "modify",
                "--name",
                "default",
                "--property",
                p,
                "--value",
                "1",
            ],
        );
    }
}

/// Waits until every server process enforces the MGS's newest nodemaps (each fetches them
/// within a second; the MGS's own process, the first, at once).
pub fn enforced(servers: &[&nacre_testkit::ServerProc]) {
    let version = |pid: u32| -> u64 {
        nacre_testkit::nacre_ok(&[
            "ctl",
            "--pid",
            &pid.to_string(),
            "get_param",
            "-n",
            "nodemap.version",
        ])
        .trim()
        .parse()
        .unwrap_or(0)
    };
    let pids: Vec<u32> = servers.iter().map(|s| s.pid()).collect();
    let newest = version(pids[0]);
    nacre_testkit::wait_for("every server enforcing the nodemaps", || {
        pids.iter().all(|p| version(*p) >= newest)
    });
}

/// The full name of test `name` of the suite module `module` (its `module_path!()`), as
/// the one test binary knows it (`api::probe`): for a test that runs another of its tests in
/// a process of its own (`--exact NAME --ignored`).
pub fn test_name(module: &str, name: &str) -> String {
    let path = module.split_once("::").map_or("", |(_, rest)| rest);
    match path {
        "" => name.to_string(),
        p => format!("{p}::{name}"),
    }
}

/// One counter of a mount's `llite.FS.writeback` (`pid`: the mount's process; none: the
/// embedded process or every process).
pub fn wb_stat(fsname: &str, pid: Option<u32>, what: &str) -> u64 {
    let text = nacre_testkit::get_param(pid, &format!("llite.{fsname}.writeback"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}
