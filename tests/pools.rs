//! OST pools (docs/pools.md): kept by the MGS, changed with `nacre pool`, used by every
//! MDT at once; `setstripe -p` on files and directories (inherited by new files);
//! allocation only inside the pool, checked on the OSTs' own directories; clear errors for
//! a pool that does not exist, has no OSTs or has too few.

use nacre_testkit::{nacre, nacre_ok, on_both_forms, pool_of, wait_for, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::path::Path;

/// Bytes of object data stored in an OST's directory (files without an extension: the
/// objects; their checksum files have one).
fn stored_bytes(ost: &Path) -> u64 {
    fn walk(d: &Path, sum: &mut u64) {
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, sum);
            } else if p.extension().is_none() {
                *sum += e.metadata().map(|m| m.len()).unwrap_or(0);
            }
        }
    }
    let mut sum = 0;
    walk(ost, &mut sum);
    sum
}

fn stored(fs: &TestFs, osts: u32) -> Vec<u64> {
    (0..osts)
        .map(|i| stored_bytes(&fs.data.join(format!("ost{i}"))))
        .collect()
}

/// `nacre ARGS`, expected to fail: its error text.
fn fails(args: &[&str]) -> String {
    let out = nacre(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write_synced(path: &Path, len: usize) {
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&nacre_testkit::pattern(len as u64, len))
        .unwrap();
    f.sync_all().unwrap();
}

fn pools_restrict_allocation(form: Form) {
    let fsname = match form {
        Form::Embedded => "poole1",
        Form::Networked => "pooln1",
    };
    let fs = TestFs::start_with(form, Spec::osts(4).fsname(fsname));
    let pool = |p: &str| format!("{fsname}.{p}");
    let path = |rel: &str| fs.path(rel).to_str().unwrap().to_string();
    nacre_ok(&["pool", "new", &pool("flash")]);
    nacre_ok(&["pool", "add", &pool("flash"), "OST[1-2]"]);
    let list = nacre_ok(&["pool", "list", fsname]);
    assert!(list.contains(&pool("flash")), "{list}");
    let members = nacre_ok(&["pool", "list", &pool("flash")]);
    assert!(
        members.contains(&format!("{fsname}-OST0001_UUID"))
            && members.contains(&format!("{fsname}-OST0002_UUID"))
            && !members.contains("OST0000")
            && !members.contains("OST0003"),
        "{members}"
    );

    // A directory's pool is inherited by its new files; every byte lands on the pool's OSTs.
    fs::create_dir(fs.path("d")).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-p", "flash", &path("d")]);
    assert_eq!(pool_of(&fs.path("d")).0, "flash");
    let before = stored(&fs, 4);
    for i in 0..6 {
        write_synced(&fs.path(&format!("d/f{i}")), 3 << 20);
        let (p, osts) = pool_of(&fs.path(&format!("d/f{i}")));
        assert_eq!(p, "flash");
        let mut osts = osts;
        osts.sort();
        assert_eq!(osts, vec![1, 2], "f{i}");
    }
    let after = stored(&fs, 4);
    assert_eq!(after[0], before[0], "OST0 is not in the pool");
    assert_eq!(after[3], before[3], "OST3 is not in the pool");
    assert!(
        after[1] + after[2] >= before[1] + before[2] + 6 * (3 << 20),
        "{before:?} -> {after:?}"
    );
    // A file laid out on its own, in the pool, at a chosen OST of it.
    nacre_ok(&[
        "setstripe",
        "-c",
        "1",
        "-i",
        "2",
        "-p",
        "flash",
        &path("one"),
    ]);
    write_synced(&fs.path("one"), 100_000);
    assert_eq!(pool_of(&fs.path("one")), ("flash".to_string(), vec![2]));
    // Files outside the pool may go anywhere; `lfs`'s FS.POOL form of -p works too.
    nacre_ok(&["setstripe", "-c", "4", &path("wide")]);
    assert_eq!(pool_of(&fs.path("wide")).1.len(), 4);
    nacre_ok(&["setstripe", "-p", &pool("flash"), &path("dotted")]);
    assert_eq!(pool_of(&fs.path("dotted")).0, "flash");

    // Clear errors, and nothing made.
    let e = fails(&["setstripe", "-c", "3", "-p", "flash", &path("x1")]);
    assert!(e.contains("exceeds the 2 OSTs of pool"), "{e}");
    let e = fails(&["setstripe", "-i", "0", "-p", "flash", &path("x2")]);
    assert!(e.contains("not in pool"), "{e}");
    let e = fails(&["setstripe", "-p", "nosuch", &path("x3")]);
    assert!(e.contains("does not exist"), "{e}");
    nacre_ok(&["pool", "new", &pool("empty")]);
    let e = fails(&["setstripe", "-p", "empty", &path("x4")]);
    assert!(e.contains("has no OSTs"), "{e}");
    for x in ["x1", "x2", "x3", "x4"] {
        assert!(!fs.path(x).exists(), "{x} was made");
    }
    let e = fails(&["pool", "new", &pool("flash")]);
    assert!(e.contains("already exists"), "{e}");
    let e = fails(&["pool", "add", &pool("flash"), "OST0009"]);
    assert!(e.contains("not an OST"), "{e}");
    let e = fails(&["pool", "add", &pool("flash"), "OST0001"]);
    assert!(e.contains("already in pool"), "{e}");
    let e = fails(&["pool", "destroy", &pool("flash")]);
    assert!(e.contains("still has OSTs"), "{e}");
    let e = fails(&["pool", "new", &format!("{fsname}.bad.name")]);
    assert!(e.contains("pool name"), "{e}");

    // `df --pool`: the MDT and the pool's OSTs only.
    let df = nacre_ok(&["df", "--pool", "flash", fs.mnt.to_str().unwrap()]);
    assert!(
        df.contains("MDT0000") && df.contains("OST0001") && df.contains("OST0002"),
        "{df}"
    );
    assert!(!df.contains("OST0000") && !df.contains("OST0003"), "{df}");
    let e = fails(&["df", "--pool", "nosuch", fs.mnt.to_str().unwrap()]);
    assert!(e.contains("does not exist"), "{e}");

    // OST1 leaves the pool: the directory's 2 stripes are cut to the one OST left, at
    // once (the MDT heard of the change before the command returned).
    nacre_ok(&["pool", "remove", &pool("flash"), "OST0001"]);
    write_synced(&fs.path("d/after"), 1 << 20);
    assert_eq!(pool_of(&fs.path("d/after")), ("flash".to_string(), vec![2]));
    nacre_ok(&[
        "pool",
        "remove",
        &pool("flash"),
        &format!("{fsname}-OST0002_UUID"),
    ]);
    // No OSTs left: new files in the directory cannot be made, and say why.
    let err = fs::File::create(fs.path("d/none")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    nacre_ok(&["pool", "destroy", &pool("flash")]);
    let list = nacre_ok(&["pool", "list", fsname]);
    assert!(
        !list.contains(&pool("flash")) && list.contains(&pool("empty")),
        "{list}"
    );
    // Every file written in the pool reads back whole.
    for i in 0..6 {
        let got = fs::read(fs.path(&format!("d/f{i}"))).unwrap();
        assert!(got == nacre_testkit::pattern(3 << 20, 3 << 20), "d/f{i}");
    }
}

/// A pool at or above its spill threshold sends new files to its spill target (Lustre's
/// pool spilling); below it, or with spilling off, they stay. The OSTs here share the test
/// machine's disk, so thresholds of 1% and 100% are "full" and "not full".
fn a_full_pool_spills_into_another(form: Form) {
    let fsname = match form {
        Form::Embedded => "poole3",
        Form::Networked => "pooln3",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let pool = |p: &str| format!("{fsname}.{p}");
    let path = |rel: &str| fs.path(rel).to_str().unwrap().to_string();
    let df: serde_json::Value =
        serde_json::from_str(&nacre_ok(&["df", "--json", fs.mnt.to_str().unwrap()])).unwrap();
    let ost0 = df["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"].as_str().unwrap().ends_with("OST0000"))
        .unwrap()
        .clone();
    let (total, avail) = (
        ost0["bytes_total"].as_u64().unwrap(),
        ost0["bytes_avail"].as_u64().unwrap(),
    );
    let used_pct = (total - avail) * 100 / total;
    assert!(
        (1..100).contains(&used_pct),
        "the test needs a disk neither empty nor full: {used_pct}% used"
    );
    nacre_ok(&["pool", "new", &pool("flash")]);
    nacre_ok(&["pool", "add", &pool("flash"), "OST0000"]);
    nacre_ok(&["pool", "new", &pool("cap")]);
    nacre_ok(&["pool", "add", &pool("cap"), "OST0001"]);
    fs::create_dir(fs.path("d")).unwrap();
    nacre_ok(&["setstripe", "-p", "flash", &path("d")]);
    let spills = || -> u64 {
        nacre_testkit::get_param(None, &format!("mdt.{fsname}-MDT0000.pool_spills"))
            .trim()
            .parse()
            .unwrap()
    };

    nacre_ok(&[
        "pool",
        "spill",
        &pool("flash"),
        "--to",
        "cap",
        "--threshold",
        "100",
    ]);
    write_synced(&fs.path("d/stays"), 100_000);
    assert_eq!(pool_of(&fs.path("d/stays")), ("flash".to_string(), vec![0]));
    let before = spills();
    nacre_ok(&[
        "pool",
        "spill",
        &pool("flash"),
        "--to",
        "cap",
        "--threshold",
        "1",
    ]);
    let listed = nacre_ok(&["pool", "list", &pool("flash")]);
    assert!(
        listed.contains("spills into") && listed.contains("above 1%"),
        "{listed}"
    );
    write_synced(&fs.path("d/spilled"), 100_000);
    assert_eq!(pool_of(&fs.path("d/spilled")), ("cap".to_string(), vec![1]));
    assert_eq!(spills(), before + 1);
    nacre_ok(&["pool", "spill", &pool("flash"), "--off"]);
    write_synced(&fs.path("d/back"), 100_000);
    assert_eq!(pool_of(&fs.path("d/back")), ("flash".to_string(), vec![0]));

    // Refused: into itself, into no pool, a threshold past 100; destroying a spill target.
    let e = fails(&["pool", "spill", &pool("flash"), "--to", "flash"]);
    assert!(e.contains("another existing pool"), "{e}");
    let e = fails(&["pool", "spill", &pool("flash"), "--to", "nosuch"]);
    assert!(e.contains("another existing pool"), "{e}");
    let e = fails(&[
        "pool",
        "spill",
        &pool("flash"),
        "--to",
        "cap",
        "--threshold",
        "101",
    ]);
    assert!(e.contains("1 to 100"), "{e}");
    nacre_ok(&["pool", "spill", &pool("flash"), "--to", "cap"]);
    nacre_ok(&["pool", "remove", &pool("cap"), "OST0001"]);
    let e = fails(&["pool", "destroy", &pool("cap")]);
    assert!(e.contains("spills into"), "{e}");
    for f in ["stays", "spilled", "back"] {
        let got = fs::read(fs.path(&format!("d/{f}"))).unwrap();
        assert!(got == nacre_testkit::pattern(100_000, 100_000), "{f}");
    }
}

on_both_forms!(pools_restrict_allocation, a_full_pool_spills_into_another);

/// Pools are on the MGS's disk: they outlive a restart of every server, and a second mount
/// sees them (its `df` JSON lists them).
#[test]
fn pools_outlive_a_restart_of_the_servers() {
    let fsname = "pooln2";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname(fsname));
    nacre_ok(&["pool", "new", &format!("{fsname}.cap")]);
    nacre_ok(&["pool", "add", &format!("{fsname}.cap"), "OST0001"]);
    for s in fs.servers_mut() {
        s.restart();
    }
    let members = nacre_ok(&["pool", "list", &format!("{fsname}.cap")]);
    assert!(
        members.contains(&format!("{fsname}-OST0001_UUID")),
        "{members}"
    );
    let p = fs.path("after-restart");
    nacre_ok(&["setstripe", "-p", "cap", p.to_str().unwrap()]);
    write_synced(&p, 200_000);
    assert_eq!(pool_of(&p), ("cap".to_string(), vec![1]));
}

/// The space that destroys queued on the MDT will free counts as free for pool fill levels
/// (`mdt.FS-MDT0000.destroy_pending`): with the OSS stopped, a removed file's bytes are
/// pending; once the OSS is back they are freed and no longer pending.
#[test]
fn pending_destroys_count_as_free_space() {
    let fsname = "pooln4";
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname(fsname));
    let pending = |what: &str| {
        nacre_testkit::param_field(&format!("mdt.{fsname}-MDT0000.destroy_pending"), what)
    };
    let learned = || nacre_testkit::param_field(&format!("mdt.{fsname}-MDT0000.sizes"), "learned");
    let stored_before = stored_bytes(&fs.data.join("ost0"));
    let before = learned();
    write_synced(&fs.path("big"), 3 << 20);
    // The MDT learns the size of a file its last writer closed by glimpsing it itself. (The
    // OST's glimpse count is not enough: the OSS counts a glimpse before its reply is back.)
    wait_for("the MDT's glimpse of the closed file", || {
        learned() > before
    });
    let oss = fs.servers_mut()[1].pid() as i32;
    // SAFETY: signalling a child server process of this test.
    unsafe { libc::kill(oss, libc::SIGSTOP) };
    fs::remove_file(fs.path("big")).unwrap();
    wait_for("the removed file's bytes pending", || {
        pending("bytes") == 3 << 20
    });
    assert_eq!(pending("objects"), 1);
    // SAFETY: as above.
    unsafe { libc::kill(oss, libc::SIGCONT) };
    wait_for("the destroy", || pending("objects") == 0);
    assert_eq!(pending("bytes"), 0);
    // The OST's directory holds other small files too: the 3 MiB went.
    wait_for("the object's removal from the OST", || {
        stored_bytes(&fs.data.join("ost0")) < stored_before + (1 << 20)
    });
}

/// An MDT in another server process than the MGS hears of pool changes from the MGS's
/// event (it asks nobody): files made on it go to the pool's OSTs as they are now.
#[test]
fn an_mdt_of_another_process_follows_pool_changes() {
    let fsname = "pooln5";
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname(fsname));
    let pool = format!("{fsname}.fast");
    let d = fs.path("d1");
    nacre_ok(&["mkdir", "-i", "1", d.to_str().unwrap()]);
    assert_eq!(nacre_testkit::dir_mdt(&d), 1);
    nacre_ok(&["pool", "new", &pool]);
    nacre_ok(&["pool", "add", &pool, "OST0001"]);
    nacre_ok(&["setstripe", "-p", "fast", d.to_str().unwrap()]);
    write_synced(&d.join("a"), 100_000);
    assert_eq!(pool_of(&d.join("a")), ("fast".to_string(), vec![1]));
    // The pool moves to OST0: MDT1 (127.0.0.4, its own process) learns it from the MGS.
    nacre_ok(&["pool", "add", &pool, "OST0000"]);
    nacre_ok(&["pool", "remove", &pool, "OST0001"]);
    let seen = || {
        nacre_testkit::get_param(None, &format!("mdt.{fsname}-MDT0001.pools"))
            .lines()
            .any(|l| l == "fast 0")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !seen() {
        assert!(
            std::time::Instant::now() < deadline,
            "MDT1 never saw the change"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for i in 0..4 {
        let f = d.join(format!("b{i}"));
        write_synced(&f, 100_000);
        assert_eq!(pool_of(&f), ("fast".to_string(), vec![0]), "b{i}");
    }
}
