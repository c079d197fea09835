//! Changelogs (crates/mds/src/changelog.rs): a known sequence of operations through a mount
//! gives exactly its records, in order, with their FIDs, names, flags, owner and job; across
//! a kill -9 of the MDS every acknowledged change has exactly one record; a consumer that
//! stops clearing is bounded; `fid2path` and `path2fid` agree with the mount.

use nacre_testkit::{nacre, nacre_ok, on_both_forms, Form, Spec, TestFs};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Every record of MDT0 from the oldest kept, as JSON objects.
fn records(source: &str) -> Vec<Value> {
    nacre_ok(&["changelog", "read", source, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// (type, name) of each record, with the rename's source name after the name.
fn summary(recs: &[Value]) -> Vec<String> {
    recs.iter()
        .map(|r| {
            let mut s = format!(
                "{} {}",
                r["type"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            );
            if let Some(src) = r["source"].as_object() {
                s.push_str(&format!(" <- {}", src["name"].as_str().unwrap()));
            }
            if r["type"] == "XATTR" {
                s.push_str(r["xattr"].as_str().unwrap());
            }
            s.trim_end().to_string()
        })
        .collect()
}

fn path2fid(p: &Path) -> String {
    nacre_ok(&["path2fid", p.to_str().unwrap()])
        .trim()
        .to_string()
}

fn setxattr(p: &Path, name: &str, value: &[u8]) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C strings and buffer.
    let rc = unsafe {
        libc::setxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn a_known_sequence_gives_exactly_its_records(form: Form) {
    let fsname = match form {
        Form::Embedded => "chlge",
        Form::Networked => "chlgn",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let src = fs.source();
    // Nothing is recorded before a consumer registers.
    std::fs::write(fs.path("before"), b"x").unwrap();
    assert_eq!(nacre_ok(&["changelog", "register", &src]).trim(), "cl1");
    assert!(records(&src).is_empty());

    let d = fs.path("d");
    // One change from a process of a Slurm job: the record carries its job id.
    let st = std::process::Command::new("mkdir")
        .arg(&d)
        .env("SLURM_JOB_ID", "4242")
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(d.join("f"), b"hello").unwrap();
    std::fs::hard_link(d.join("f"), d.join("g")).unwrap();
    std::os::unix::fs::symlink("f", d.join("s")).unwrap();
    std::fs::rename(d.join("g"), fs.path("e")).unwrap();
    std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o600)).unwrap();
    setxattr(&d.join("f"), "user.k", b"v");
    std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("f"))
        .unwrap()
        .set_len(2)
        .unwrap();
    // fid2path and path2fid agree with the mount, by mount point and by MGS source.
    let (d_fid, f_fid) = (path2fid(&d), path2fid(&d.join("f")));
    assert_eq!(path2fid(&fs.path("")), "[0x200000007:0x1:0x0]");
    let mnt = fs.path("");
    let by_mount = nacre_ok(&["fid2path", mnt.to_str().unwrap(), &f_fid]);
    let by_source = nacre_ok(&["fid2path", &src, &d_fid]);
    let f_paths = [d.join("f"), fs.path("e")].map(|p| p.display().to_string());
    assert!(f_paths.contains(&by_mount.trim().to_string()), "{by_mount}");
    assert_eq!(by_source.trim(), "/d");
    std::fs::remove_file(fs.path("e")).unwrap();
    assert_eq!(
        by_mount_path(&mnt, &f_fid),
        d.join("f").display().to_string()
    );
    std::fs::remove_file(d.join("f")).unwrap();
    std::fs::remove_file(d.join("s")).unwrap();
    std::fs::remove_dir(&d).unwrap();
    // A removed inode has no path.
    assert!(!nacre(&["fid2path", &src, &f_fid]).status.success());

    let recs = records(&src);
    let expected = [
        "MKDIR d",
        "CREAT f",
        "CLOSE",
        "HLINK g",
        "SLINK s",
        "RENME e <- g",
        "SATTR",
        "XATTR user.k",
        "TRUNC",
        "CLOSE",
        "UNLNK e",
        "UNLNK f",
        "UNLNK s",
        "RMDIR d",
    ];
    assert_eq!(summary(&recs), expected);
    let field = |i: usize, k: &str| recs[i][k].clone();
    // Numbers increase; the whole sequence was recorded after the registration.
    for w in recs.windows(2) {
        assert!(w[0]["index"].as_u64() < w[1]["index"].as_u64(), "{w:?}");
    }
    // FIDs of target and parent.
    assert_eq!(field(0, "target"), d_fid.as_str());
    assert_eq!(field(0, "parent"), "[0x200000007:0x1:0x0]");
    for i in [1, 2, 3, 6, 7, 8, 9, 11] {
        assert_eq!(field(i, "target"), f_fid.as_str(), "record {i}");
    }
    for i in [1, 3, 4, 11, 12] {
        assert_eq!(field(i, "parent"), d_fid.as_str(), "record {i}");
    }
    assert_eq!(recs[5]["source"]["fid"], f_fid.as_str());
    assert_eq!(recs[5]["source"]["parent"], d_fid.as_str());
    assert_eq!(field(5, "parent"), "[0x200000007:0x1:0x0]");
    // Flags: the first close wrote data, the second did not; only the last name's
    // unlink is the last link; a symlink's unlink is its last.
    let flags: Vec<u64> = recs.iter().map(|r| r["flags"].as_u64().unwrap()).collect();
    assert_eq!(flags, [0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0]);
    // Who: root, and the Slurm job of the mkdir; the others are `procname.uid`.
    assert!(recs.iter().all(|r| r["uid"] == 0 && r["gid"] == 0));
    assert_eq!(field(0, "jobid"), "4242");
    assert!(recs[1..]
        .iter()
        .all(|r| r["jobid"].as_str().unwrap().ends_with(".0")));

    // Clearing frees the records; the consumer stays registered and sees what follows.
    let last = recs.last().unwrap()["index"].as_u64().unwrap();
    nacre_ok(&["changelog", "clear", &src, "cl1", &last.to_string()]);
    let users = nacre_ok(&["changelog", "users", &src, "--json"]);
    let users: Value = serde_json::from_str(&users).unwrap();
    assert_eq!(users[0]["users"][0]["cleared"], last);
    assert_eq!(users[0]["first"], last + 1, "{users}");
    std::fs::create_dir(fs.path("after")).unwrap();
    let after = nacre_ok(&["changelog", "read", &src, "--user", "cl1", "--json"]);
    assert_eq!(after.lines().count(), 1, "{after}");
    assert!(after.contains("\"MKDIR\""), "{after}");
    // Deregistered: nothing more is recorded and the records go.
    nacre_ok(&["changelog", "deregister", &src, "cl1"]);
    std::fs::create_dir(fs.path("unrecorded")).unwrap();
    assert!(records(&src).is_empty());
    let bad = nacre(&["changelog", "clear", &src, "cl1", "0"]);
    assert!(!bad.status.success());
}

/// `nacre fid2path MOUNT FID`, trimmed.
fn by_mount_path(mnt: &Path, fid: &str) -> String {
    nacre_ok(&["fid2path", mnt.to_str().unwrap(), fid])
        .trim()
        .to_string()
}

on_both_forms!(a_known_sequence_gives_exactly_its_records);
