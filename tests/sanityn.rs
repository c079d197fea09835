//! Several mounts of one file system, in the style of Lustre's sanityn: what one mount
//! changes is seen at once by the others that cached it (their locks are called back), with
//! three mounts (one change calls back two holders) and across MDTs (a cross-MDT change
//! calls back locks on every MDT it touches, and never those of the mount that asked for
//! it, whose own kernel applies the change).

use nacre_testkit::{get_param, nacre_ok, on_both_forms, ClientMount, Form, Spec, TestFs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Another client process mounting `fs` at `scratch/NAME`.
fn mount(fs: &TestFs, name: &str) -> (PathBuf, ClientMount) {
    let mnt = fs.scratch().join(name);
    fs::create_dir_all(&mnt).unwrap();
    let m = fs.mount_another(&mnt, &[]);
    (mnt, m)
}

/// One counter of a mount's `llite.FS.lock_cache` (`pid`: its process).
fn lock_cache(fsname: &str, pid: u32, what: &str) -> u64 {
    let text = get_param(Some(pid), &format!("llite.{fsname}.lock_cache"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} in {text}"))
}

/// Stats and reads `p` a few times, so the mount caches its entry, attributes and data.
fn cache(p: &Path) -> Vec<u8> {
    for _ in 0..3 {
        fs::metadata(p).unwrap();
    }
    fs::read(p).unwrap();
    fs::read(p).unwrap()
}

/// A file two mounts cache is written, extended, truncated and unlinked on a third: both
/// see each change at once.
fn a_change_on_one_mount_reaches_two_others_that_cache_it(form: Form) {
    let fsname = match form {
        Form::Embedded => "snyne1",
        Form::Networked => "snynn1",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let (b_mnt, _b) = mount(&fs, "b");
    let (c_mnt, _c) = mount(&fs, "c");
    let a = fs.path("f");
    let others = [b_mnt.join("f"), c_mnt.join("f")];
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", a.to_str().unwrap()]);
    let first = nacre_testkit::pattern(1, 200_000);
    fs::write(&a, &first).unwrap();
    for p in &others {
        assert_eq!(cache(p), first);
    }

    // Overwrite in the middle (both stripes), through the first mount.
    let patch = nacre_testkit::pattern(2, 70_000);
    let mut expect = first.clone();
    expect[50_000..120_000].copy_from_slice(&patch);
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_all_at(&patch, 50_000).unwrap();
    }
    for p in &others {
        assert_eq!(fs::read(p).unwrap(), expect, "{p:?} kept old data");
        cache(p);
    }

    // Extend (append) and see the new size and bytes.
    let tail = nacre_testkit::pattern(3, 30_000);
    fs::OpenOptions::new()
        .append(true)
        .open(&a)
        .unwrap()
        .write_all(&tail)
        .unwrap();
    expect.extend_from_slice(&tail);
    for p in &others {
        assert_eq!(fs::metadata(p).unwrap().len(), expect.len() as u64);
        assert_eq!(fs::read(p).unwrap(), expect, "{p:?} missed the append");
        cache(p);
    }

    // Truncate to a size inside the first stripe.
    fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .unwrap()
        .set_len(1_000)
        .unwrap();
    for p in &others {
        assert_eq!(fs::metadata(p).unwrap().len(), 1_000);
        assert_eq!(fs::read(p).unwrap(), &expect[..1_000]);
        cache(p);
    }

    // A write on one of the caching mounts reaches the other two.
    fs::write(&others[0], b"from b").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"from b");
    assert_eq!(fs::read(&others[1]).unwrap(), b"from b");
    cache(&others[1]);
    cache(&a);

    // Unlinked on the first mount: gone on both others.
    fs::remove_file(&a).unwrap();
    for p in &others {
        assert!(fs::metadata(p).is_err(), "{p:?} still seen after unlink");
    }
}

/// Three mounts append records to one striped file with `O_APPEND`: none overwrites
/// another, none is torn.
fn appends_from_three_mounts_never_overwrite(form: Form) {
    let fsname = match form {
        Form::Embedded => "snyne2",
        Form::Networked => "snynn2",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let (b_mnt, _b) = mount(&fs, "b");
    let (c_mnt, _c) = mount(&fs, "c");
    let p = fs.path("log");
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", p.to_str().unwrap()]);
    const LEN: usize = 3_000;
    const EACH: usize = 100;
    let writers: Vec<_> = [
        (p.clone(), b'A'),
        (b_mnt.join("log"), b'B'),
        (c_mnt.join("log"), b'C'),
    ]
    .into_iter()
    .map(|(path, tag)| {
        std::thread::spawn(move || {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            for i in 0..EACH {
                let mut rec = format!("{}{i:06}", tag as char).into_bytes();
                rec.resize(LEN - 1, tag);
                rec.push(b'\n');
                f.write_all(&rec).unwrap();
            }
        })
    })
    .collect();
    for w in writers {
        w.join().unwrap();
    }
    let got = fs::read(&p).unwrap();
    assert_eq!(got.len(), 3 * EACH * LEN, "appends overwrote each other");
    let mut seen = std::collections::HashSet::new();
    for rec in got.chunks(LEN) {
        let tag = rec[0];
        assert!(b"ABC".contains(&tag), "a torn record: {:?}", &rec[..16]);
        assert!(rec[7..LEN - 1].iter().all(|c| *c == tag), "a torn record");
        assert!(seen.insert(rec[..7].to_vec()), "a record twice");
    }
    assert_eq!(seen.len(), 3 * EACH);
    for m in [&b_mnt, &c_mnt] {
        assert_eq!(fs::read(m.join("log")).unwrap(), got);
    }
}

/// The MDT `nacre getdirstripe` reports for `dir`.
fn dir_mdt(dir: &Path) -> u32 {
    let out = nacre_ok(&["getdirstripe", dir.to_str().unwrap()]);
    out.split_whitespace()
        .skip_while(|w| *w != "lmv_stripe_offset:")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap()
}

/// Renames between directories of two MDTs, of files and of a directory that lives on a
/// third MDT: another mount that cached the old names sees them gone and the new ones at
/// once (the inode's own MDT calls back its entry), and the renaming mount's own locks are
/// not called back (its kernel, which holds both directories during the rename, would make
/// the callback wait for the rename that waits for it).
fn renames_across_mdts_are_seen_at_once_and_never_wait_on_the_renamer(form: Form) {
    let fsname = match form {
        Form::Embedded => "snyne3",
        Form::Networked => "snynn3",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).mdts(3).fsname(fsname));
    let (b_mnt, _b) = mount(&fs, "b");
    let a = |rel: &str| fs.path(rel);
    let b = |rel: &str| b_mnt.join(rel);
    fs::create_dir(a("x")).unwrap();
    nacre_ok(&["mkdir", "-i", "1", a("y").to_str().unwrap()]);
    nacre_ok(&["mkdir", "-i", "2", a("x/d").to_str().unwrap()]);
    assert_eq!(
        (dir_mdt(&a("x")), dir_mdt(&a("y")), dir_mdt(&a("x/d"))),
        (0, 1, 2)
    );
    fs::write(a("x/d/inside"), b"in d").unwrap();
    const FILES: usize = 10;
    for i in 0..FILES {
        fs::write(a(&format!("x/f{i}")), format!("{i}")).unwrap();
    }
    let renamer = fs.client_pid().expect("the first mount's process");
    let waits_cut = lock_cache(fsname, renamer, "entry_waits_cut");
    let deferred = lock_cache(fsname, renamer, "entries_deferred");

    for round in 0..3 {
        let (from, to) = if round % 2 == 0 {
            ("x", "y")
        } else {
            ("y", "x")
        };
        // Both mounts cache the names (and the first its directories' entries).
        for m in [&a as &dyn Fn(&str) -> PathBuf, &b] {
            for _ in 0..2 {
                fs::metadata(m(&format!("{from}/d"))).unwrap();
                fs::metadata(m(&format!("{from}/d/inside"))).unwrap();
                for i in 0..FILES {
                    fs::metadata(m(&format!("{from}/f{i}"))).unwrap();
                }
            }
        }
        fs::rename(a(&format!("{from}/d")), a(&format!("{to}/d"))).unwrap();
        for i in 0..FILES {
            fs::rename(a(&format!("{from}/f{i}")), a(&format!("{to}/f{i}"))).unwrap();
        }
        assert!(
            fs::metadata(b(&format!("{from}/d"))).is_err(),
            "round {round}: the directory of the third MDT is still seen where it was"
        );
        assert_eq!(fs::read(b(&format!("{to}/d/inside"))).unwrap(), b"in d");
        assert_eq!(dir_mdt(&b(&format!("{to}/d"))), 2);
        for i in 0..FILES {
            assert!(
                fs::metadata(b(&format!("{from}/f{i}"))).is_err(),
                "round {round}: f{i} is still seen where it was"
            );
            assert_eq!(
                fs::read_to_string(b(&format!("{to}/f{i}"))).unwrap(),
                i.to_string()
            );
        }
        let ino = fs::metadata(a(&format!("{to}/d"))).unwrap().ino();
        assert_eq!(fs::metadata(b(&format!("{to}/d"))).unwrap().ino(), ino);
    }
    assert_eq!(
        lock_cache(fsname, renamer, "entry_waits_cut"),
        waits_cut,
        "a callback to the renaming mount waited for its own rename"
    );
    // Its own locks on the MDTs that did not coordinate were called back (it is another
    // client there): what they covered in the directories it was renaming in went after.
    assert!(lock_cache(fsname, renamer, "entries_deferred") > deferred);
    let out = nacre_testkit::nacre(&["lfsck", "--namespace", &fs.source()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && text.contains(" 0 inconsistencies"),
        "{text}"
    );
}

on_both_forms!(
    a_change_on_one_mount_reaches_two_others_that_cache_it,
    appends_from_three_mounts_never_overwrite,
    renames_across_mdts_are_seen_at_once_and_never_wait_on_the_renamer,
);
