//! Changelogs (crates/mds/src/changelog.rs): a known sequence of operations through a mount
//! gives exactly its records, in order, with their FIDs, names, flags, owner and job; across
//! a kill -9 of the MDS every acknowledged change has exactly one record; a consumer that
//! stops clearing is bounded; `fid2path` and `path2fid` agree with the mount.

use nacre_testkit::{get_param, nacre, nacre_ok, on_both_forms, wait_for, Form, Spec, TestFs};
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

/// Waits until the consumer's records hold `n` CLOSE records.
fn closed(source: &str, n: usize) {
    wait_for("the release's CLOSE record", || {
        records(source)
            .iter()
            .filter(|r| r["type"] == "CLOSE")
            .count()
            >= n
    });
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
    // (A directory: a file's release could come after the registration.)
    std::fs::create_dir(fs.path("before")).unwrap();
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
    // The kernel sends a file's release after close(2) returns: its CLOSE record is
    // awaited, so the sequence's order is the one written here.
    closed(&src, 1);
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
    closed(&src, 2);
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

/// Files created, written and closed while the MDS is killed -9 and restarted: every
/// acknowledged create and writer close has exactly one record (none lost with the crash,
/// none doubled by the client's replays or resends), in order.
#[test]
fn a_kill9_of_the_mds_loses_and_doubles_no_record() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("chlgk"));
    let src = fs.source();
    assert_eq!(nacre_ok(&["changelog", "register", &src]).trim(), "cl1");
    let dir = fs.path("k");
    std::fs::create_dir(&dir).unwrap();
    const FILES: usize = 300;
    let writer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            for i in 0..FILES {
                std::fs::write(dir.join(format!("f{i}")), b"x").unwrap();
            }
        })
    };
    // Mid-stream: the MDS (with the MGS) dies and comes back.
    wait_for("a third of the files", || {
        std::fs::read_dir(&dir).unwrap().count() >= FILES / 3
    });
    fs.servers_mut()[0].kill9();
    fs.servers_mut()[0].restart();
    writer.join().unwrap();
    // The mount lived through the MDT's restart (and replayed what it had not committed).
    let pid = fs.client_pid().unwrap();
    let import = get_param(Some(pid), "mdc.*.import");
    assert!(import.contains("recoveries: 1"), "{import}");
    assert!(import.contains("replay_lost: 0"), "{import}");
    let recs = records(&src);
    for w in recs.windows(2) {
        assert!(w[0]["index"].as_u64() < w[1]["index"].as_u64(), "{w:?}");
    }
    assert_eq!(summary(&recs[..1]), ["MKDIR k"]);
    let mut created = std::collections::HashMap::new();
    let mut closes = std::collections::HashMap::new();
    for r in &recs[1..] {
        let target = r["target"].as_str().unwrap().to_string();
        match r["type"].as_str().unwrap() {
            "CREAT" => {
                let name = r["name"].as_str().unwrap().to_string();
                assert!(created.insert(name, target).is_none(), "twice: {r}");
            }
            "CLOSE" => {
                assert_eq!(r["flags"], 2, "{r}");
                *closes.entry(target).or_insert(0) += 1;
            }
            other => panic!("unexpected {other}: {r}"),
        }
    }
    assert_eq!(created.len(), FILES);
    for i in 0..FILES {
        let name = format!("f{i}");
        let fid = &created[&name];
        assert_eq!(path2fid(&dir.join(&name)), *fid);
        assert_eq!(closes.get(fid), Some(&1), "closes of {name}");
    }
    assert_eq!(recs.len(), 1 + 2 * FILES);
}

/// The line `what N` of `mdt.FS-MDT0000.changelog_users`.
fn changelog_stat(fsname: &str, what: &str) -> u64 {
    nacre_testkit::param_field(&format!("mdt.{fsname}-MDT0000.changelog_users"), what)
}

/// A consumer that stops clearing is deregistered once it is `changelog_records_max`
/// records behind, and one idle past `changelog_idle_ms_max` is deregistered by the
/// maintenance pass; the records kept stay bounded, and a consumer that keeps reading
/// and clearing misses nothing.
#[test]
fn a_forgotten_consumer_cannot_fill_the_mdt() {
    let fsname = "chlgb";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let src = fs.source();
    const MAX: u64 = 100;
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("mdt.{fsname}-MDT0000.changelog_records_max={MAX}"),
    ]);
    assert_eq!(
        nacre_ok(&["changelog", "register", &src, "--name", "active"]).trim(),
        "cl1"
    );
    assert_eq!(
        nacre_ok(&["changelog", "register", &src, "--name", "forgot"]).trim(),
        "cl2"
    );
    let dir = fs.path("b");
    std::fs::create_dir(&dir).unwrap();
    let mut seen = Vec::new();
    let mut kept_max = 0;
    for round in 0..10 {
        for i in 0..30 {
            std::fs::create_dir(dir.join(format!("d{round}.{i}"))).unwrap();
        }
        // Made at the MDT (a mount answering mkdirs itself sends them within 50 ms, or at
        // an fsync of their directory).
        std::fs::File::open(&dir).unwrap().sync_all().unwrap();
        // cl1 reads everything after what it cleared, then clears it.
        let out = nacre_ok(&["changelog", "read", &src, "--user", "cl1", "--json"]);
        for l in out.lines() {
            let r: Value = serde_json::from_str(l).unwrap();
            seen.push(r["index"].as_u64().unwrap());
        }
        let first = changelog_stat(fsname, "first");
        let current = changelog_stat(fsname, "current_index");
        kept_max = kept_max.max(current + 1 - first);
        nacre_ok(&[
            "changelog",
            "clear",
            &src,
            "cl1",
            &seen.last().unwrap().to_string(),
        ]);
    }
    // cl2 went when it fell MAX behind; cl1 saw every record, in order, without a gap.
    let users = nacre_ok(&["changelog", "users", &src]);
    assert!(users.contains("cl1") && !users.contains("cl2"), "{users}");
    assert_eq!(changelog_stat(fsname, "dropped_users"), 1);
    assert_eq!(seen.len(), 300 + 1);
    assert!(seen.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
    // Kept: at most the limit plus what arrived since cl1's last clear (30 records).
    assert!(kept_max <= MAX + 30, "kept {kept_max}");
    assert_eq!(
        changelog_stat(fsname, "first"),
        changelog_stat(fsname, "current_index") + 1
    );
    // The idle rule: a consumer that neither reads nor clears, with records waiting.
    nacre_ok(&[
        "ctl",
        "set_param",
        &format!("mdt.{fsname}-MDT0000.changelog_idle_ms_max=1000"),
    ]);
    assert_eq!(nacre_ok(&["changelog", "register", &src]).trim(), "cl2");
    std::fs::create_dir(dir.join("late")).unwrap();
    wait_for("the idle consumers deregistered", || {
        changelog_stat(fsname, "dropped_users") == 3
    });
    // Both went (cl1 idle too now): nothing is recorded or kept.
    let users = nacre_ok(&["changelog", "users", &src]);
    assert!(!users.contains("cl1") && !users.contains("cl2"), "{users}");
    assert_eq!(
        changelog_stat(fsname, "first"),
        changelog_stat(fsname, "current_index") + 1
    );
}

/// Two MDTs: each records the changes it makes (a remote or striped mkdir on the MDT of
/// its parent, a create on the MDT of its directory), and `fid2path` finds names whose
/// entry lives on another MDT than the inode, and files in a striped directory's shards.
#[test]
fn each_mdt_records_its_own_changes_and_fid2path_crosses_mdts() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).mdts(2).fsname("chlgd"));
    let src = fs.source();
    for mdt in ["0", "1"] {
        let id = nacre_ok(&["changelog", "register", &src, "--mdt", mdt]);
        assert_eq!(id.trim(), "cl1");
    }
    let (remote, striped) = (fs.path("remote"), fs.path("striped"));
    nacre_ok(&["mkdir", "-i", "1", remote.to_str().unwrap()]);
    nacre_ok(&["mkdir", "-c", "2", striped.to_str().unwrap()]);
    std::fs::write(remote.join("r"), b"r").unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    for n in &names {
        std::fs::write(striped.join(n), b"s").unwrap();
    }
    let read = |mdt: &str| -> Vec<Value> {
        nacre_ok(&["changelog", "read", &src, "--mdt", mdt, "--json"])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (m0, m1) = (read("0"), read("1"));
    let creates = |recs: &[Value]| -> Vec<String> {
        recs.iter()
            .filter(|r| r["type"] == "CREAT")
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect()
    };
    // The mkdirs are the root's MDT's changes; the file in the remote directory is MDT1's.
    assert_eq!(summary(&m0[..2]), ["MKDIR remote", "MKDIR striped"]);
    assert_eq!(m0[0]["target"], path2fid(&remote).as_str());
    assert!(creates(&m1).contains(&"r".to_string()), "{m1:?}");
    assert!(!creates(&m0).contains(&"r".to_string()));
    // The striped directory's files: each recorded once, on the MDT of its shard.
    let mut all = [creates(&m0), creates(&m1)].concat();
    all.retain(|n| n.starts_with('s'));
    all.sort();
    assert_eq!(all, names);
    let mnt = fs.path("");
    for p in [
        remote.join("r"),
        striped.join("s3"),
        striped.clone(),
        remote.clone(),
    ] {
        let fid = path2fid(&p);
        assert_eq!(by_mount_path(&mnt, &fid), p.display().to_string());
    }
    // Across MDTs: a hard link in the root (MDT0) to a file of MDT1, a rename out of the
    // remote directory into the root, and the remote directory's removal. Each is
    // recorded once, by the MDT that coordinates it (the root's for the link and the
    // rmdir, the source directory's for the rename).
    let r_fid = path2fid(&remote.join("r"));
    std::fs::hard_link(remote.join("r"), fs.path("link")).unwrap();
    std::fs::rename(remote.join("r"), fs.path("moved")).unwrap();
    std::fs::remove_dir(&remote).unwrap();
    let (n0, n1) = (read("0"), read("1"));
    let new0: Vec<&Value> = n0.iter().skip(m0.len()).collect();
    let new1: Vec<&Value> = n1.iter().skip(m1.len()).collect();
    let types = |v: &[&Value]| -> Vec<String> {
        v.iter()
            .map(|r| {
                format!(
                    "{} {}",
                    r["type"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(types(&new0), ["HLINK link", "RMDIR remote"], "{new0:?}");
    assert_eq!(types(&new1), ["RENME moved"], "{new1:?}");
    assert_eq!(new0[0]["target"], r_fid.as_str());
    assert_eq!(new1[0]["source"]["fid"], r_fid.as_str());
    assert_eq!(new1[0]["source"]["name"], "r");
    assert!(new0
        .iter()
        .chain(&new1)
        .all(|r| r["jobid"].as_str().unwrap().ends_with(".0")));
    // Its two names are both in the root now (MDT0), its inode on MDT1.
    let names = [fs.path("link"), fs.path("moved")].map(|p| p.display().to_string());
    assert!(names.contains(&by_mount_path(&mnt, &r_fid)));
}
