//! Quotas (issue 21, step 2; docs/quota.md) on the networked form: what users, groups and
//! projects use — inodes on each MDT, bytes on each OST (`nacre quota -v`) — follows
//! creates, writes, chown, chgrp, project changes and removals, and is exactly the same
//! after a kill -9 of every server process.

use nacre_testkit::{nacre, nacre_ok, wait_for, Form, Spec, TestFs};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Runs `args` as uid:gid 1000:1000 (`setpriv`), asserting success.
fn as_1000(args: &[&str]) {
    let out = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "--"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// (total bytes, total inodes, per target name → value) of `who` (`-u 1000`, ...).
fn usage(src: &str, who: &[&str]) -> (u64, u64, Vec<(String, u64)>) {
    let mut args = vec!["quota", "-v", "--json"];
    args.extend_from_slice(who);
    args.push(src);
    let v: Value = serde_json::from_str(&nacre_ok(&args)).unwrap();
    let q = &v[0];
    let targets = q["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = t["inodes"].as_u64().or(t["bytes"].as_u64()).unwrap();
            (t["target"].as_str().unwrap().to_string(), n)
        })
        .collect();
    (
        q["bytes"].as_u64().unwrap(),
        q["inodes"].as_u64().unwrap(),
        targets,
    )
}

fn target(per: &[(String, u64)], name: &str) -> u64 {
    per.iter()
        .find(|(n, _)| n.ends_with(name))
        .unwrap_or_else(|| panic!("{name} in {per:?}"))
        .1
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn usage_follows_owners_groups_and_projects_and_survives_kill9_of_every_server() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname("quotan"));
    let src = fs.source();
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // A directory on MDT1 too, and a striped file layout over both OSTs.
    nacre_ok(&["mkdir", "-i", "1", s(&home.join("m1"))]);
    std::fs::set_permissions(
        home.join("m1"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", s(&home)]);
    let before = usage(&src, &["-u", "1000"]);
    assert_eq!((before.0, before.1), (0, 0), "{before:?}");

    // uid 1000 makes 3 files on MDT0 (2 of 3 MiB over both OSTs, one empty) and 2 on MDT1.
    for (name, mib) in [("a", 3), ("b", 3), ("empty", 0)] {
        let of = format!("of={}", s(&home.join(name)));
        as_1000(&[
            "dd",
            "if=/dev/zero",
            &of,
            "bs=1M",
            &format!("count={mib}"),
            "conv=fsync",
        ]);
    }
    for name in ["c", "d"] {
        as_1000(&["touch", s(&home.join("m1").join(name))]);
    }
    let (bytes, inodes, per) = usage(&src, &["-u", "1000"]);
    assert_eq!(inodes, 5);
    assert_eq!(target(&per, "MDT0000"), 3);
    assert_eq!(target(&per, "MDT0001"), 2);
    // 6 MiB of data in 1 MiB stripes over both OSTs (blocks as allocated: a little more
    // for the local file system's own blocks).
    for ost in ["OST0000", "OST0001"] {
        let b = target(&per, ost);
        assert!(b >= 1 << 20, "{ost}: {b}");
    }
    assert!(
        (6 << 20..(6 << 20) + (512 << 10)).contains(&bytes),
        "{bytes}"
    );
    assert_eq!(bytes, target(&per, "OST0000") + target(&per, "OST0001"));
    let group = usage(&src, &["-g", "1000"]);
    assert_eq!((group.0, group.1), (bytes, inodes));

    // chown moves inodes at once and the bytes once the OSTs have the change.
    let chown = Command::new("chown")
        .args(["1001:1001", s(&home.join("a"))])
        .status()
        .unwrap();
    assert!(chown.success());
    let (_, inodes, _) = usage(&src, &["-u", "1000"]);
    assert_eq!(inodes, 4);
    wait_for("a's bytes charged to uid 1001", || {
        let (b1001, i1001, _) = usage(&src, &["-u", "1001"]);
        let (b1000, _, _) = usage(&src, &["-u", "1000"]);
        i1001 == 1 && b1001 >= 3 << 20 && b1000 + b1001 == bytes
    });
    let g1001 = usage(&src, &["-g", "1001"]);
    assert_eq!(g1001.1, 1);

    // A project: the tree's existing files and new ones.
    nacre_ok(&["project", "-p", "77", "-s", "-r", s(&home.join("m1"))]);
    as_1000(&["touch", s(&home.join("m1/e"))]);
    wait_for("project 77's inodes", || usage(&src, &["-p", "77"]).1 == 4);
    nacre_ok(&["project", "-p", "77", s(&home.join("b"))]);
    wait_for("project 77's bytes", || {
        let (b, i, _) = usage(&src, &["-p", "77"]);
        i == 5 && b >= 3 << 20
    });

    // A migration to another OST moves the bytes with the objects (the new ones are
    // charged to the file's owner, group and project; the old ones freed once destroyed).
    // Data, not zeros: a migration copies zeros as holes.
    let out = Command::new("setpriv")
        .args(["--reuid=1002", "--regid=1002", "--clear-groups", "--"])
        .args(["dd", "if=/dev/urandom", "bs=1M", "count=2", "conv=fsync"])
        .arg(format!("of={}", s(&home.join("r"))))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (b1002, _, per) = usage(&src, &["-u", "1002"]);
    assert!(target(&per, "OST0000") >= 1 << 20, "{per:?}");
    nacre_ok(&["pool", "new", "quotan.one"]);
    nacre_ok(&["pool", "add", "quotan.one", "OST1"]);
    nacre_ok(&["migrate", "-p", "one", s(&home.join("r"))]);
    wait_for("r's bytes all on OST0001", || {
        let (b, _, per) = usage(&src, &["-u", "1002"]);
        target(&per, "OST0000") == 0
            && b == target(&per, "OST0001")
            && b.abs_diff(b1002) <= 64 << 10
    });
    let (g, _, _) = usage(&src, &["-g", "1002"]);
    assert!(g.abs_diff(b1002) <= 64 << 10, "{g} {b1002}");

    // Exactly the same after a kill -9 of every server process (MDTs count in their
    // transactions; OSTs count their objects at start).
    let expect: Vec<_> = ["-u 1000", "-u 1001", "-u 1002", "-g 1000", "-p 77", "-p 0"]
        .iter()
        .map(|w| {
            let who: Vec<&str> = w.split(' ').collect();
            (w.to_string(), usage(&src, &who))
        })
        .collect();
    for server in fs.servers_mut() {
        server.kill9();
    }
    for server in fs.servers_mut() {
        server.restart();
    }
    wait_for("the servers back", || {
        nacre(&["quota", "-u", "1000", &src]).status.success()
    });
    for (w, want) in &expect {
        let who: Vec<&str> = w.split(' ').collect();
        assert_eq!(&usage(&src, &who), want, "{w} after kill -9");
    }

    // Removals give everything back (the OSTs' bytes once their objects are destroyed).
    std::fs::remove_dir_all(&home).unwrap();
    wait_for("nothing used", || {
        ["-u 1000", "-u 1001", "-u 1002", "-p 77"].iter().all(|w| {
            let who: Vec<&str> = w.split(' ').collect();
            let (b, i, _) = usage(&src, &who);
            (b, i) == (0, 0)
        })
    });

    // Unknown names are refused clearly.
    let bad = nacre(&["quota", "-u", "no-such-user-q7", &src]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-user-q7"));
}

/// Runs `args` as uid:gid `who` (`setpriv`); its success and stderr.
fn as_user(who: u32, args: &[&str]) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={who}"),
            &format!("--regid={who}"),
            "--clear-groups",
            "--",
        ])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `nacre quota --json` of one id.
fn quota_json(src: &str, who: &[&str]) -> Value {
    let mut args = vec!["quota", "--json"];
    args.extend_from_slice(who);
    args.push(src);
    serde_json::from_str::<Value>(&nacre_ok(&args)).unwrap()[0].clone()
}

#[test]
fn each_kind_hits_edquot_at_its_limit_across_osts_and_mdts() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname("quotae"));
    let src = fs.source();
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", s(&home)]);
    let mib = 1u64 << 20;

    // Blocks of a user, over both OSTs: 8 MiB hard.
    nacre_ok(&["setquota", "-u", "1000", "-B", "8M", &src]);
    let q = quota_json(&src, &["-u", "1000"]);
    assert_eq!(q["block_hard"], 8 * mib);
    let dd = |who: u32, name: &str, mib: u32| {
        let of = format!("of={}", s(&home.join(name)));
        as_user(
            who,
            &[
                "dd",
                "if=/dev/zero",
                &of,
                "bs=1M",
                &format!("count={mib}"),
                "conv=fsync",
            ],
        )
    };
    let (ok, err) = dd(1000, "u1", 6);
    assert!(ok, "{err}");
    let (ok, err) = dd(1000, "u2", 4);
    assert!(!ok, "4 MiB more than 8 MiB allow");
    assert!(err.contains("Disk quota exceeded"), "{err}");
    let used = quota_json(&src, &["-u", "1000"])["bytes"].as_u64().unwrap();
    assert!(used <= 8 * mib, "{used} past the hard limit");
    assert!(used >= 7 * mib, "{used}: stopped well before the limit");
    // Removing files frees room; removing the limit lifts it.
    std::fs::remove_file(home.join("u2")).unwrap();
    nacre_ok(&["setquota", "-u", "1000", "-B", "0", &src]);
    wait_for("the limit gone from the OSTs", || dd(1000, "u3", 4).0);

    // Inodes of a project over both MDTs: 6.
    let p0 = home.join("p");
    std::fs::create_dir(&p0).unwrap();
    nacre_ok(&["mkdir", "-i", "1", s(&home.join("p1"))]);
    for d in [&p0, &home.join("p1")] {
        nacre_ok(&["project", "-p", "42", "-s", s(d)]);
    }
    nacre_ok(&["setquota", "-p", "42", "-I", "6", &src]);
    let mut made = 0;
    let err = loop {
        let dir = if made % 2 == 0 { &p0 } else { &home.join("p1") };
        match std::fs::File::create(dir.join(format!("f{made}"))) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made <= 6, "past the inode limit");
    };
    // The two directories are the project's too.
    assert_eq!(made, 4, "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::EDQUOT), "{err}");
    assert_eq!(quota_json(&src, &["-p", "42"])["inodes"], 6);

    // A soft limit turns hard once its grace time is over.
    nacre_ok(&[
        "setquota",
        "-t",
        "--block-grace",
        "2s",
        "--inode-grace",
        "1w",
        &src,
    ]);
    nacre_ok(&["setquota", "-u", "1001", "-b", "2M", "-B", "100M", &src]);
    let (ok, err) = dd(1001, "s1", 3);
    assert!(ok, "past the soft limit within the grace time: {err}");
    wait_for("the grace time over", || {
        quota_json(&src, &["-u", "1001"])["block_grace"] == "none"
    });
    // Each try is a new file: rewriting one (dd truncates it first) stays within the grant
    // its blocks held, and is rightly let through. The targets learn the end of the grace
    // at their next report.
    let mut tries = 0;
    wait_for("a write refused past the soft limit", || {
        tries += 1;
        let (ok, err) = dd(1001, &format!("s2-{tries}"), 1);
        !ok && err.contains("Disk quota exceeded")
    });
    assert!(
        tries <= 3,
        "{tries} writes of 1 MiB let through after the grace time"
    );
    let used = quota_json(&src, &["-u", "1001"])["bytes"].as_u64().unwrap();
    assert!(used < 5 * mib, "{used}");
}

/// The first object file under `ost`'s `O` directory that holds data.
fn an_object_with_data(ost: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let mut dirs = vec![ost.join("O")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                dirs.push(p);
            } else if name.bytes().all(|b| b.is_ascii_digit()) && meta.blocks() > 0 {
                return p;
            }
        }
    }
    panic!("no object with data under {}", ost.display());
}

#[test]
fn lfsck_quota_finds_and_repairs_damaged_counts_on_mdts_and_osts() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("quotak"));
    let src = fs.source();
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", s(&home)]);
    for name in ["a", "b", "c"] {
        let of = format!("of={}", s(&home.join(name)));
        as_1000(&["dd", "if=/dev/zero", &of, "bs=1M", "count=2", "conv=fsync"]);
    }
    as_1000(&["touch", s(&home.join("d")), s(&home.join("e"))]);
    let (bytes, inodes, _) = usage(&src, &["-u", "1000"]);
    assert_eq!(inodes, 5);
    let out = nacre_ok(&["lfsck", "--quota", "--dry-run", &src]);
    assert!(out.contains(": 0 differences found"), "{out}");

    // Damage: the MDT's recorded inodes of uid 1000 (its store changed while it is down),
    // and blocks allocated to an object behind its OST's back.
    fs.servers_mut()[0].kill9();
    {
        use nacre_kv::KvStore;
        use nacre_mdstore::records;
        let kv =
            nacre_kv::FjallStore::open(&fs.data.join("mdt0").join("db"), &records::TABLES).unwrap();
        let mut b = nacre_kv::Batch::new();
        let id = nacre_types::QuotaId {
            kind: nacre_types::QuotaKind::User,
            id: 1000,
        };
        b.put(
            nacre_mds::quota::QUOTA_USAGE,
            id.to_key().to_vec(),
            42u64.to_be_bytes().to_vec(),
        );
        let t = kv.commit(b).unwrap();
        kv.wait_durable(t).unwrap();
    }
    fs.servers_mut()[0].restart();
    let object = an_object_with_data(&fs.data.join("ost0"));
    let falloc = Command::new("fallocate")
        .args(["--keep-size", "-o", "16M", "-l", "1M", s(&object)])
        .status()
        .unwrap();
    assert!(falloc.success());
    wait_for("the MDT back", || {
        nacre(&["quota", "--json", "-u", "1000", &src])
            .status
            .success()
    });
    let (b, i, _) = usage(&src, &["-u", "1000"]);
    assert_eq!((b, i), (bytes, 42), "the damage shows");

    // Found (the user on the MDT; the user, group and project — none, 0 — on the OST), not
    // repaired.
    let out = nacre(&["lfsck", "--quota", "--dry-run", &src]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "differences make a dry run fail: {text}"
    );
    assert!(text.contains(": 4 differences found"), "{text}");
    assert!(
        text.contains("-MDT0000 usr:1000: counted 5, recorded 42"),
        "{text}"
    );
    let ost_line = format!(
        "-OST0000 usr:1000: counted {}",
        target(&usage(&src, &["-u", "1000"]).2, "OST0000") + (1 << 20)
    );
    assert!(text.contains(&ost_line), "{ost_line} in {text}");
    assert!(text.contains("-OST0000 grp:1000"), "{text}");
    assert!(text.contains("-OST0000 prj:0"), "{text}");
    assert_eq!(
        usage(&src, &["-u", "1000"]).1,
        42,
        "a dry run repairs nothing"
    );

    // Repaired: the counts are the truth, and stay so across a kill -9.
    let out = nacre_ok(&["lfsck", "--quota", &src]);
    assert!(out.contains(": 4 differences repaired"), "{out}");
    let out = nacre_ok(&["lfsck", "--quota", "--dry-run", &src]);
    assert!(out.contains(": 0 differences found"), "{out}");
    let (b, i, _) = usage(&src, &["-u", "1000"]);
    assert_eq!((b, i), (bytes + (1 << 20), 5));
    fs.servers_mut()[0].kill9();
    fs.servers_mut()[0].restart();
    wait_for("the MDT back with the repaired count", || {
        let out = nacre(&["quota", "--json", "-u", "1000", &src]);
        out.status.success()
            && serde_json::from_slice::<Value>(&out.stdout).unwrap()[0]["inodes"] == 5
    });
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// `dd` of `mib` MiB of zeros into `path` as `who`, with no fsync: its success and stderr.
fn dd_cached(who: u32, path: &Path, mib: u32) -> (bool, String) {
    let of = format!("of={}", s(path));
    let count = format!("count={mib}");
    as_user(who, &["dd", "if=/dev/zero", &of, "bs=1M", &count])
}

/// `dd` as [`dd_cached`], with `conv=fsync`.
fn dd_synced(who: u32, path: &Path, mib: u32) -> (bool, String) {
    let of = format!("of={}", s(path));
    let count = format!("count={mib}");
    as_user(
        who,
        &["dd", "if=/dev/zero", &of, "bs=1M", &count, "conv=fsync"],
    )
}

#[test]
fn near_a_limit_writes_go_synchronous_so_edquot_reaches_write() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("quotaw").metrics());
    let src = fs.source();
    let pid = fs.client_pid();
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", s(&home)]);
    let mib = 1u64 << 20;
    let wb = |what: &str| -> u64 {
        let text = nacre_testkit::get_param(pid, "llite.quotaw.writeback");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what} in {text}"))
    };

    // Far from any limit, writes are kept (write-behind).
    nacre_ok(&["setquota", "-u", "1001", "-B", "10G", &src]);
    let kept = wb("writes_kept");
    let (ok, err) = dd_cached(1001, &home.join("far"), 8);
    assert!(ok, "{err}");
    assert!(wb("writes_kept") > kept, "write-behind far from a limit");
    assert_eq!(wb("writes_quota_sync"), 0);

    // 8 MiB: the OSTs say the user is near it from the first write, so the writes after
    // it go through and dd's write(2) itself fails (not its close).
    nacre_ok(&["setquota", "-u", "1000", "-B", "8M", &src]);
    let (ok, err) = dd_cached(1000, &home.join("near"), 20);
    assert!(!ok, "20 MiB past an 8 MiB limit");
    assert!(
        err.contains("error writing") && err.contains("Disk quota exceeded"),
        "EDQUOT at write(2): {err}"
    );
    assert!(wb("writes_quota_sync") > 0);
    let used = quota_json(&src, &["-u", "1000"])["bytes"].as_u64().unwrap();
    assert!((7 * mib..=8 * mib).contains(&used), "{used}");
    // /metrics shows each target's usage of the id and the grant it holds.
    let (_, _, per) = usage(&src, &["-u", "1000"]);
    let scraped: String = fs.metrics_addrs.iter().map(|a| scrape(a)).collect();
    for ost in ["OST0000", "OST0001"] {
        let want = format!(
            "nacre_quota_bytes{{target=\"quotaw-{ost}\",kind=\"usr\",id=\"1000\"}} {}",
            target(&per, ost)
        );
        assert!(scraped.lines().any(|l| l == want), "{want} in /metrics");
        let granted = format!(
            "nacre_quota_granted{{target=\"quotaw-{ost}\",resource=\"bytes\",kind=\"usr\",id=\"1000\",pool=\"\"}} "
        );
        assert!(
            scraped.lines().any(|l| l.starts_with(&granted)),
            "{granted} in /metrics"
        );
    }
    assert!(scraped
        .contains("nacre_quota_inodes{target=\"quotaw-MDT0000\",kind=\"usr\",id=\"1000\"} 1"));
    // The limit lifted, the next writes say so and write-behind comes back.
    nacre_ok(&["setquota", "-u", "1000", "-B", "0", &src]);
    std::fs::remove_file(home.join("near")).unwrap();
    let (ok, err) = dd_cached(1000, &home.join("again"), 4);
    assert!(ok, "{err}");
    let sync = wb("writes_quota_sync");
    let kept = wb("writes_kept");
    let (ok, err) = dd_cached(1000, &home.join("kept"), 8);
    assert!(ok, "{err}");
    assert!(wb("writes_kept") > kept, "write-behind back");
    assert!(
        wb("writes_quota_sync") <= sync + 2,
        "at most a write per OST before the word"
    );
}

#[test]
fn pool_limits_hold_on_their_osts_beside_the_overall_limit() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(3).fsname("quotap"));
    let src = fs.source();
    for (p, osts) in [("flash", "OST0"), ("cap", "OST[1-2]")] {
        nacre_ok(&["pool", "new", &format!("quotap.{p}")]);
        nacre_ok(&["pool", "add", &format!("quotap.{p}"), osts]);
    }
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    for (d, pool, count) in [("f", "flash", "1"), ("c", "cap", "2")] {
        let dir = home.join(d);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        nacre_ok(&["setstripe", "-p", pool, "-c", count, "-S", "1M", s(&dir)]);
    }
    let mib = 1u64 << 20;
    let pool_json = |pool: &str| -> Value {
        let out = nacre_ok(&["quota", "--json", "-u", "1000", "--pool", pool, &src]);
        serde_json::from_str::<Value>(&out).unwrap()[0].clone()
    };

    // Bad requests are clear errors.
    let bad = nacre(&["setquota", "-u", "1000", "--pool", "flash", "-I", "5", &src]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("blocks only"));
    let bad = nacre(&[
        "setquota", "-u", "1000", "--pool", "nosuch", "-B", "1M", &src,
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no pool nosuch"));

    // 4 MiB on the flash pool: its OST stops the user there, the other pool does not.
    nacre_ok(&[
        "setquota", "-u", "1000", "--pool", "flash", "-B", "4M", &src,
    ]);
    let (ok, err) = dd_cached(1000, &home.join("f/big"), 6);
    assert!(!ok && err.contains("Disk quota exceeded"), "{err}");
    let flash = pool_json("flash");
    assert_eq!(flash["block_hard"], 4 * mib);
    let in_flash = flash["bytes"].as_u64().unwrap();
    assert!((3 * mib..=4 * mib).contains(&in_flash), "{flash}");
    let (ok, err) = dd_synced(1000, &home.join("c/big"), 6);
    assert!(ok, "another pool is not limited: {err}");
    let all = quota_json(&src, &["-u", "1000"]);
    assert_eq!(all["pools"][0]["pool"], "flash", "{all}");
    assert_eq!(all["pools"][0]["bytes"], in_flash, "{all}");
    assert!(all["bytes"].as_u64().unwrap() >= in_flash + 6 * mib);

    // The overall limit applies too, on every OST.
    let used = all["bytes"].as_u64().unwrap();
    let overall = format!("{}M", used / mib + 3);
    nacre_ok(&["setquota", "-u", "1000", "-B", &overall, &src]);
    let (ok, err) = dd_cached(1000, &home.join("c/more"), 8);
    assert!(!ok && err.contains("Disk quota exceeded"), "{err}");
    let used = quota_json(&src, &["-u", "1000"])["bytes"].as_u64().unwrap();
    assert!(used <= (used / mib + 3) * mib + 64 * 1024, "{used}");

    // The pool's limit removed: only the overall one is left.
    nacre_ok(&["setquota", "-u", "1000", "-B", "0", &src]);
    nacre_ok(&["setquota", "-u", "1000", "--pool", "flash", "-B", "0", &src]);
    let (ok, err) = dd_synced(1000, &home.join("f/big2"), 6);
    assert!(ok, "{err}");
    assert!(quota_json(&src, &["-u", "1000"])["pools"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// Bytes `who` has on each target (`nacre quota -v --json`): (target name, bytes).
fn bytes_per_target(src: &str, who: &[&str]) -> Vec<(String, u64)> {
    let mut args = vec!["quota", "-v", "--json"];
    args.extend_from_slice(who);
    args.push(src);
    let v: Value = serde_json::from_str(&nacre_ok(&args)).unwrap();
    v[0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["target"].as_str().unwrap().to_string();
            (name, t["bytes"].as_u64().unwrap())
        })
        .collect()
}

/// Bytes on the MDT (data on the MDT, `setstripe -E 1M -L mdt`) are block usage like bytes
/// on OSTs: counted per user, group and project in whole 4 KiB blocks, moved by chown,
/// exact after a kill -9, given back by removal, checked by `lfsck --quota`, and a block
/// limit stops them with `EDQUOT` on the MDT itself (the client checks nothing).
#[test]
fn bytes_on_the_mdt_count_for_block_quotas_and_stop_at_the_limit() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("quotad"));
    let src = fs.source();
    let home = fs.path("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    nacre_ok(&[
        "setstripe",
        "-E",
        "1M",
        "-L",
        "mdt",
        "-E",
        "-1",
        "-c",
        "1",
        s(&home),
    ]);
    let dd = |who: u32, name: &str, bs: &str| {
        let of = format!("of={}", s(&home.join(name)));
        let bs = format!("bs={bs}");
        as_user(
            who,
            &["dd", "if=/dev/urandom", &of, &bs, "count=1", "conv=fsync"],
        )
    };
    // Three files of 10,000 bytes: three blocks each, on the MDT, none on the OST.
    for name in ["a", "b", "c"] {
        let (ok, err) = dd(1000, name, "10000");
        assert!(ok, "{err}");
    }
    let per = bytes_per_target(&src, &["-u", "1000"]);
    assert_eq!(target(&per, "MDT0000"), 3 * 12288, "{per:?}");
    assert_eq!(target(&per, "OST0000"), 0, "{per:?}");
    assert_eq!(usage(&src, &["-u", "1000"]).0, 3 * 12288);
    assert_eq!(usage(&src, &["-g", "1000"]).0, 3 * 12288);

    // A chown moves the file's bytes to its new owner; its group keeps them.
    std::os::unix::fs::chown(home.join("c"), Some(1001), None).unwrap();
    assert_eq!(usage(&src, &["-u", "1000"]).0, 2 * 12288);
    assert_eq!(usage(&src, &["-u", "1001"]).0, 12288);
    assert_eq!(usage(&src, &["-g", "1000"]).0, 3 * 12288);

    // Exact after a kill -9 of the server (counted in the MDT's transactions).
    let before: Vec<_> = ["1000", "1001"]
        .iter()
        .map(|u| usage(&src, &["-u", u]))
        .collect();
    fs.servers_mut()[0].kill9();
    fs.servers_mut()[0].restart();
    wait_for("the MDT back", || {
        nacre(&["quota", "-u", "1000", &src]).status.success()
    });
    for (u, want) in ["1000", "1001"].iter().zip(&before) {
        assert_eq!(&usage(&src, &["-u", u]), want, "uid {u} after kill -9");
    }

    // A hard limit of 1 MiB: 2 × 12 KiB used, three files of 256 KiB fit, a fourth does not.
    nacre_ok(&["setquota", "-u", "1000", "-B", "1M", &src]);
    let mut made = 0;
    let err = loop {
        let (ok, err) = dd(1000, &format!("q{made}"), "256K");
        if !ok {
            break err;
        }
        made += 1;
        assert!(made <= 3, "past the limit");
    };
    assert_eq!(made, 3, "{err}");
    assert!(err.contains("Disk quota exceeded"), "{err}");
    let used = usage(&src, &["-u", "1000"]).0;
    assert!(used <= 1 << 20, "{used} past the hard limit");
    // A removal gives its bytes back at once (nothing waits for an OST's destroy).
    std::fs::remove_file(home.join("q0")).unwrap();
    assert_eq!(usage(&src, &["-u", "1000"]).0, used - (256 << 10));
    let (ok, err) = dd(1000, "q9", "256K");
    assert!(ok, "room made by the removal: {err}");

    // lfsck counts the bytes again: nothing differs; a damaged count (the store changed
    // while the server is down) is found, named, and repaired.
    let checks = |args: &[&str]| -> Value {
        let mut all = vec!["lfsck", "--quota", "--json"];
        all.extend_from_slice(args);
        all.push(&src);
        serde_json::from_slice(&nacre(&all).stdout).unwrap()
    };
    let dom_entry = |v: &Value| -> Value {
        v.as_array()
            .unwrap()
            .iter()
            .find(|t| t["target"] == "quotad-MDT0000 (data on the MDT)")
            .unwrap_or_else(|| panic!("no data-on-MDT check in {v}"))
            .clone()
    };
    let clean = dom_entry(&checks(&["--dry-run"]));
    assert_eq!(clean["differences"], 0, "{clean}");
    assert!(clean["ids"].as_u64().unwrap() >= 4, "{clean}");
    let counted = usage(&src, &["-u", "1000"]).0;
    fs.servers_mut()[0].kill9();
    {
        use nacre_kv::KvStore;
        use nacre_mdstore::records;
        let kv =
            nacre_kv::FjallStore::open(&fs.data.join("mdt0").join("db"), &records::TABLES).unwrap();
        let mut b = nacre_kv::Batch::new();
        let id = nacre_types::QuotaId {
            kind: nacre_types::QuotaKind::User,
            id: 1000,
        };
        b.put(
            records::QUOTA_DOM_BYTES,
            id.to_key().to_vec(),
            7u64.to_be_bytes().to_vec(),
        );
        let t = kv.commit(b).unwrap();
        kv.wait_durable(t).unwrap();
    }
    fs.servers_mut()[0].restart();
    wait_for("the MDT back", || {
        nacre(&["quota", "-u", "1000", &src]).status.success()
    });
    assert_eq!(usage(&src, &["-u", "1000"]).0, 7, "the damage shows");
    let found = dom_entry(&checks(&["--dry-run"]));
    assert_eq!(found["differences"], 1, "{found}");
    assert_eq!(found["diffs"][0]["id"], "usr:1000", "{found}");
    assert_eq!(found["diffs"][0]["counted"], counted, "{found}");
    assert_eq!(found["diffs"][0]["recorded"], 7, "{found}");
    let repaired = dom_entry(&checks(&[]));
    assert_eq!(repaired["repaired"], true, "{repaired}");
    assert_eq!(usage(&src, &["-u", "1000"]).0, counted);
}
