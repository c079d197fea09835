//! Racer (the idea of Lustre's racer.sh and sanityn): threads on two mounts of one file
//! system make random namespace and attribute changes in a small tree at once; no change
//! fails other than as POSIX allows, and once they stop both mounts see the same tree at
//! once — names, inode numbers, kinds, modes, link counts and sizes, through whatever their
//! kernels cached under metadata locks — and the namespace checker finds nothing.
//! `RACER_SECS` (default 10) sets how long the threads run.

use nacre_testkit::{lfsck_clean, on_both_forms, Form, Spec, TestFs};
use std::collections::BTreeMap;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS_PER_MOUNT: usize = 3;
const DIRS: usize = 2;
const NAMES: usize = 6;

/// A path of the small tree: `dK/nI`, or `dK/nI/nJ` below a name that may be a directory.
fn pick(rng: &mut fastrand::Rng) -> String {
    let mut p = format!("d{}/n{}", rng.usize(..DIRS), rng.usize(..NAMES));
    if rng.u8(..4) == 0 {
        p += &format!("/n{}", rng.usize(..NAMES));
    }
    p
}

/// One random operation under `root`; errors POSIX allows for a racing tree are fine.
fn one(root: &Path, rng: &mut fastrand::Rng) -> Result<(), String> {
    let p = root.join(pick(rng));
    let q = root.join(pick(rng));
    let (name, r) = match rng.u8(..11) {
        0 => ("write", fs::write(&p, vec![rng.u8(..); rng.usize(..4096)])),
        1 => ("mkdir", fs::create_dir(&p)),
        2 => ("rename", fs::rename(&p, &q)),
        3 => ("link", fs::hard_link(&p, &q)),
        4 => ("unlink", fs::remove_file(&p)),
        5 => ("rmdir", fs::remove_dir(&p)),
        6 => {
            let mode = 0o600 | u32::from(rng.u8(..0o100));
            (
                "chmod",
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)),
            )
        }
        7 => (
            "truncate",
            fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_len(rng.u64(..8192))),
        ),
        8 => ("stat", fs::symlink_metadata(&p).map(|_| ())),
        9 => (
            "readdir",
            fs::read_dir(root.join(format!("d{}", rng.usize(..DIRS)))).map(|d| {
                d.for_each(drop);
            }),
        ),
        _ => ("symlink", std::os::unix::fs::symlink("n0", &p)),
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if allowed(&e) => Ok(()),
        Err(e) => Err(format!("{name} {} {}: {e}", p.display(), q.display())),
    }
}

/// Errors a change may meet in a tree others change at the same time. ESTALE included: a
/// directory renamed by the other mount has one dentry in this mount's kernel, which must
/// move it when it meets the directory under its new name; when it cannot take the old
/// parent's lock at once (this mount's own change there holds it) the kernel gives up with
/// ESTALE (`__d_unalias`) after its one retry. The final comparison shows nothing stale
/// remains.
fn allowed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::NotFound
            | ErrorKind::AlreadyExists
            | ErrorKind::DirectoryNotEmpty
            | ErrorKind::IsADirectory
            | ErrorKind::NotADirectory
            | ErrorKind::InvalidInput
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::EMLINK | libc::ELOOP | libc::EINVAL | libc::ESTALE)
    )
}

/// What a mount shows of the tree: per path, (inode, kind and mode, links, size).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, u32, u64, u64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in fs::read_dir(root.join(&rel)).unwrap() {
            let e = e.unwrap();
            let path = rel.join(e.file_name());
            let m = fs::symlink_metadata(root.join(&path)).unwrap();
            let size = if m.is_dir() { 0 } else { m.len() };
            out.insert(path.clone(), (m.ino(), m.mode(), m.nlink(), size));
            if m.is_dir() {
                todo.push(path);
            }
        }
    }
    out
}

fn two_mounts_racing_agree_on_the_tree(form: Form) {
    let fsname = match form {
        Form::Embedded => "racere",
        Form::Networked => "racern",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    for d in 0..DIRS {
        fs::create_dir(fs.path(&format!("d{d}"))).unwrap();
    }
    let secs: u64 = std::env::var("RACER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let roots = [fs.path(""), other_mnt.clone()];
    let workers: Vec<_> = (0..THREADS_PER_MOUNT * 2)
        .map(|t| {
            let root = roots[t % 2].clone();
            let (stop, ops) = (stop.clone(), ops.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut rng = fastrand::Rng::with_seed(0x5eed + t as u64);
                while !stop.load(Ordering::Relaxed) {
                    one(&root, &mut rng)?;
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline && workers.iter().all(|w| !w.is_finished()) {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap().unwrap();
    }
    let done = ops.load(Ordering::Relaxed);
    assert!(done > 100, "only {done} operations ran");
    // Every change is acknowledged: both mounts show the same tree now.
    let a = snapshot(&fs.path(""));
    let b = snapshot(&other_mnt);
    assert!(!a.is_empty());
    let differ: Vec<String> = a
        .keys()
        .chain(b.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|p| a.get(*p) != b.get(*p))
        .map(|p| format!("{}: {:?} / {:?}", p.display(), a.get(p), b.get(p)))
        .collect();
    assert!(
        differ.is_empty(),
        "the mounts disagree after {done} operations (path: first / second mount's \
         inode, mode, links, size):\n{}",
        differ.join("\n")
    );
    lfsck_clean(&fs.source());
}

on_both_forms!(two_mounts_racing_agree_on_the_tree);
