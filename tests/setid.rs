//! Set-id bits go as the kernel clears them on a local file system, on both forms and
//! through every way in: a write or truncate by a caller without `CAP_FSETID` (any user
//! but root here, the owner included) clears set-user-ID, and set-group-ID where
//! group-execute is set; a chown clears them whoever asks; a chmod by an owner outside the
//! file's group drops set-group-ID. A write POSIX allows is never refused for them (the
//! kernel's fallback, a chmod in the writer's name, was refused by the MDT's owner check),
//! and root's writes keep them. Shown through the FUSE mount (the kernel says when with
//! `FUSE_WRITE_KILL_SUIDGID`), through `LD_PRELOAD` (the node API's rings: no kernel on
//! the data path) and through the native library (no kernel at all).

use nacre_client::{Client, ClientConfig};
use nacre_testkit::{get_param, on_both_forms, Form, TestFs};
use nacre_tests::as_nobody;
use nacre_types::cred::{self, MAY_READ, MAY_WRITE};
use nacre_types::{Cred, Fid, SetAttr};
use std::fs;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `nobody`'s uid and gid on Debian.
const NOBODY: u32 = 65_534;

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).unwrap().mode() & 0o7777
}

/// A file `name` in `dir` holding `data`, owned by `uid:gid`, with mode `mode` (set last:
/// the chown would clear set-id bits).
fn file(dir: &Path, name: &str, data: &[u8], uid: u32, gid: u32, mode: u32) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, data).unwrap();
    chown(&p, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    assert_eq!(mode_of(&p), mode, "{name} set up");
    p
}

fn nobody_ok(cmd: &str) {
    let (ok, err) = as_nobody(cmd);
    assert!(ok, "as nobody: {cmd}: {err}");
    assert!(!err.contains("preload"), "{cmd}: {err}");
}

fn sh(cmd: &str) {
    let out = Command::new("sh").arg("-ec").arg(cmd).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn set_id_bits_through_the_mount(form: Form) {
    let fs = TestFs::start(form, 1);
    let d = fs.path("d");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&fs.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    let q = |p: &Path| p.to_str().unwrap().to_string();

    // Writes by a user other than the owner: allowed, and the bits that should go, go.
    for (name, group, before, after) in [
        ("suid", 0, 0o4777, 0o777),
        ("sgid", 0, 0o2777, 0o777),
        ("both", 0, 0o6777, 0o777),
        // Set-group-ID without group-execute goes for a writer outside the file's group
        // (Linux 6.2 on), and stays for one in it.
        ("sgid-nogx", 0, 0o2767, 0o767),
        ("sgid-nogx-in-group", NOBODY, 0o2767, 0o2767),
    ] {
        let p = file(&d, name, b"abc", 0, group, before);
        nobody_ok(&format!("printf x >> {}", q(&p)));
        assert_eq!(fs::read(&p).unwrap(), b"abcx", "{name}: the write landed");
        assert_eq!(mode_of(&p), after, "{name}: written by another user");
    }
    // By its owner (not root): cleared too.
    let own = file(&d, "own", b"abc", NOBODY, NOBODY, 0o4755);
    nobody_ok(&format!("printf x >> {}", q(&own)));
    assert_eq!(mode_of(&own), 0o755, "written by its owner");
    // Root (CAP_FSETID) keeps them.
    let kept = file(&d, "root-writes", b"abc", 0, 0, 0o6777);
    sh(&format!("printf x >> {}", q(&kept)));
    assert_eq!(mode_of(&kept), 0o6777, "written by root");

    // Truncate: by another user cleared, by root kept.
    let t = file(&d, "trunc", b"abcdef", 0, 0, 0o4777);
    nobody_ok(&format!("truncate -s 2 {}", q(&t)));
    assert_eq!(
        (fs::read(&t).unwrap(), mode_of(&t)),
        (b"ab".to_vec(), 0o777)
    );
    let tr = file(&d, "trunc-root", b"abcdef", 0, 0, 0o4777);
    sh(&format!("truncate -s 2 {}", q(&tr)));
    assert_eq!(mode_of(&tr), 0o4777, "truncated by root");
    // Opened with O_TRUNC by another user.
    let ot = file(&d, "otrunc", b"abcdef", 0, 0, 0o6777);
    nobody_ok(&format!("printf y > {}", q(&ot)));
    assert_eq!(
        (fs::read(&ot).unwrap(), mode_of(&ot)),
        (b"y".to_vec(), 0o777)
    );

    // Chown clears them, even root's: set-user-ID, and set-group-ID with group-execute.
    for (name, before, after) in [
        ("chown-suid", 0o4755, 0o755),
        ("chown-sgid", 0o2755, 0o755),
        ("chown-sgid-nogx", 0o2745, 0o2745),
    ] {
        let p = file(&d, name, b"", 0, 0, before);
        chown(&p, Some(NOBODY), None).unwrap();
        assert_eq!(mode_of(&p), after, "{name}");
    }
    let g = file(&d, "chgrp", b"", 0, 0, 0o6755);
    chown(&g, None, Some(NOBODY)).unwrap();
    assert_eq!(mode_of(&g), 0o755, "chgrp");

    // A chmod by an owner outside the file's group drops set-group-ID only.
    let m = file(&d, "chmod", b"", NOBODY, 0, 0o644);
    nobody_ok(&format!("chmod 6755 {}", q(&m)));
    assert_eq!(mode_of(&m), 0o4755, "owner outside group 0");
    let mine = file(&d, "chmod-own-group", b"", NOBODY, NOBODY, 0o644);
    nobody_ok(&format!("chmod 2755 {}", q(&mine)));
    assert_eq!(mode_of(&mine), 0o2755, "owner in the file's group keeps it");
    // Directories keep theirs through chown (set-group-ID dirs pass their group on).
    let sd = d.join("sgid-dir");
    fs::create_dir(&sd).unwrap();
    fs::set_permissions(&sd, fs::Permissions::from_mode(0o2775)).unwrap();
    chown(&sd, Some(NOBODY), None).unwrap();
    assert_eq!(
        mode_of(&sd),
        0o2775,
        "a directory's chown keeps set-group-ID"
    );
}

fn preload_lib() -> PathBuf {
    nacre_testkit::nacre_bin()
        .parent()
        .unwrap()
        .join("libnacre_preload.so")
}

/// Bytes written through the mount's node API (its rings) so far.
fn api_written(fs: &TestFs) -> u64 {
    let fsname = &fs.spec.fsname;
    get_param(fs.client_pid(), &format!("llite.{fsname}.api_stats"))
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .expect("api_stats write_bytes")
}

fn set_id_bits_through_ld_preload(form: Form) {
    let fs = TestFs::start(form, 1);
    let d = fs.path("d");
    fs::create_dir(&d).unwrap();
    fs::set_permissions(&fs.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&d, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(
        preload_lib().exists(),
        "{} is built",
        preload_lib().display()
    );
    // A copy `nobody` may load (the build directory may be root's alone).
    let libdir = tempfile::Builder::new()
        .prefix("nacre-setid-lib")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    fs::set_permissions(libdir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let lib = libdir.path().join("libnacre_preload.so");
    fs::copy(preload_lib(), &lib).unwrap();
    fs::set_permissions(&lib, fs::Permissions::from_mode(0o755)).unwrap();
    let dd = |p: &Path, nobody: bool| {
        let cmd = format!(
            "LD_PRELOAD={} dd if=/dev/zero of={} bs=4096 count=4 conv=notrunc status=none",
            lib.display(),
            p.display()
        );
        match nobody {
            true => nobody_ok(&cmd),
            false => sh(&cmd),
        }
    };
    let before = api_written(&fs);
    let other = file(&d, "other", b"", 0, 0, 0o6777);
    dd(&other, true);
    assert_eq!(mode_of(&other), 0o777, "written by another user");
    let own = file(&d, "own", b"", NOBODY, NOBODY, 0o4755);
    dd(&own, true);
    assert_eq!(mode_of(&own), 0o755, "written by its owner");
    let nogx = file(&d, "sgid-nogx", b"", 0, NOBODY, 0o2767);
    dd(&nogx, true);
    assert_eq!(
        mode_of(&nogx),
        0o2767,
        "no group-execute, the writer's group: stays"
    );
    let other_group = file(&d, "sgid-nogx-other", b"", 0, 0, 0o2767);
    dd(&other_group, true);
    assert_eq!(
        mode_of(&other_group),
        0o767,
        "no group-execute, another group: goes"
    );
    let rooted = file(&d, "root", b"", 0, 0, 0o6777);
    dd(&rooted, false);
    assert_eq!(mode_of(&rooted), 0o6777, "written by root");
    assert_eq!(fs::metadata(&other).unwrap().len(), 16_384);
    let after = api_written(&fs);
    assert!(
        after >= before + 5 * 16_384,
        "the writes went through the rings: {before} -> {after}"
    );
}

fn set_id_bits_through_the_library(form: Form) {
    let fs = TestFs::start(form, 1);
    fs::set_permissions(&fs.mnt, fs::Permissions::from_mode(0o755)).unwrap();
    let p = file(&fs.mnt, "f", b"abc", 0, 0, 0o6777);
    let t = file(&fs.mnt, "t", b"abc", 0, 0, 0o4777);
    let r = file(&fs.mnt, "r", b"abc", 0, 0, 0o4777);
    let c = Client::mount(
        fs.mgs_nid.parse().expect("MGS NID"),
        &fs.spec.fsname,
        ClientConfig::default(),
    )
    .expect("native client");
    let fid = |name: &str| -> Fid {
        cred::with(Cred::root(), || c.lookup(Fid::ROOT, name.as_bytes(), false))
            .unwrap()
            .fid
    };
    let alice = Cred::new(1000, 1000, vec![]);
    let mode = |f: Fid| cred::with(Cred::root(), || c.getattr(f)).unwrap().perm;
    let (f, tf, rf) = (fid("f"), fid("t"), fid("r"));
    cred::with(alice.clone(), || {
        let (_, h) = c.open(f, MAY_READ | MAY_WRITE).unwrap();
        assert_eq!(c.write(&h, 3, b"x").unwrap(), 1);
        c.close(&h).unwrap();
        let cut = SetAttr {
            size: Some(1),
            ..SetAttr::default()
        };
        c.setattr(tf, cut).unwrap();
    });
    assert_eq!(mode(f), 0o777, "written by another user");
    assert_eq!(mode(tf), 0o777, "truncated by another user");
    cred::with(Cred::root(), || {
        let (_, h) = c.open(rf, MAY_READ | MAY_WRITE).unwrap();
        c.write(&h, 3, b"x").unwrap();
        c.close(&h).unwrap();
    });
    assert_eq!(mode(rf), 0o4777, "written by root");
    assert_eq!(fs::read(&p).unwrap(), b"abcx");
    assert_eq!(fs::read(&t).unwrap(), b"a");
    assert_eq!(mode_of(&r), 0o4777);
}

on_both_forms!(
    set_id_bits_through_the_mount,
    set_id_bits_through_ld_preload,
    set_id_bits_through_the_library,
);
