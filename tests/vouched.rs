//! Stats of files a mount made and wrote are answered by the mount while it holds their
//! `UPDATE` lock (crates/client vouched.rs): no request, and the same answer the MDT and
//! the OSTs give another mount — after every change this mount or another makes.

use nacre_testkit::{md_requests, nacre_ok, on_both_forms, pattern, wait_for, Form, Spec, TestFs};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// What a stat says that either mount must agree on (not the access time).
fn seen(p: &Path) -> (u64, u64, u32, u64, i64, i64, i64, i64) {
    let m = fs::metadata(p).unwrap();
    (
        m.len(),
        m.blocks(),
        m.mode(),
        m.nlink(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// Requests that could answer a stat, at every MDT.
fn stat_requests(fsname: &str) -> u64 {
    md_requests(fsname, &["getattr", "lookup"])
}

fn write_file(p: &Path, data: &[u8]) {
    let mut f = fs::File::create(p).unwrap();
    f.write_all(data).unwrap();
}

fn stats_of_files_written_here_cost_no_request(form: Form) {
    let fsname = match form {
        Form::Embedded => "vouche",
        Form::Networked => "vouchn",
    };
    let fs = TestFs::start_with(form, Spec::osts(2).fsname(fsname));
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let here = fs.path("d");
    let there = other_mnt.join("d");
    fs::create_dir(&here).unwrap();
    let wide = fs.path("wide");
    fs::create_dir(&wide).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "64K", wide.to_str().unwrap()]);

    // A directory for small files with their bytes on the MDT (as sites lay out mdtest
    // hard's).
    let dom = fs.path("dom");
    fs::create_dir(&dom).unwrap();
    nacre_ok(&[
        "setstripe",
        "-E",
        "64K",
        "-L",
        "mdt",
        "-E",
        "-1",
        "-c",
        "1",
        dom.to_str().unwrap(),
    ]);
    // Small files, files over two objects, small files on the MDT, a sparse one, an empty
    // one.
    let small = pattern(1, 3901);
    for i in 0..100 {
        write_file(&here.join(format!("s{i}")), &small);
    }
    let big = pattern(2, 200_000);
    for i in 0..10 {
        write_file(&wide.join(format!("w{i}")), &big);
    }
    for i in 0..20 {
        write_file(&dom.join(format!("m{i}")), &small);
    }
    let mut f = fs::File::create(here.join("sparse")).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(b"end").unwrap();
    drop(f);
    fs::File::create(here.join("empty")).unwrap();

    let mut names: Vec<_> = (0..100).map(|i| here.join(format!("s{i}"))).collect();
    names.extend((0..10).map(|i| wide.join(format!("w{i}"))));
    names.push(here.join("sparse"));
    names.push(here.join("empty"));
    names.extend((0..20).map(|i| dom.join(format!("m{i}"))));
    // The directories' own attributes are not this module's.
    for d in [&here, &wide, &dom] {
        fs::metadata(d).unwrap();
    }
    let before = stat_requests(fsname);
    let mine: Vec<_> = names.iter().map(|p| seen(p)).collect();
    assert_eq!(
        stat_requests(fsname) - before,
        0,
        "stats of files written here asked the MDT"
    );
    // The same as another mount gets from the MDT and the OSTs.
    for (p, m) in names.iter().zip(&mine) {
        let rel = p.strip_prefix(fs.path("")).unwrap();
        assert_eq!(*m, seen(&other_mnt.join(rel)), "{rel:?}");
    }
    assert_eq!(mine[0].0, 3901);
    assert_eq!(mine[100].0, 200_000);
    assert_eq!(mine[110].0, (1 << 20) + 3);
    assert_eq!((mine[112].0, mine[112].1), (3901, 8), "a file on the MDT");

    // Each change, from here or from the other mount, is seen by both alike: at once for
    // size, mode and links; times once the writer's close reached the MDT (the kernel
    // sends it after close(2) returned).
    let agree = |name: &str| {
        let (a, b) = (here.join(name), there.join(name));
        let (x, y) = (seen(&a), seen(&b));
        assert_eq!(
            (x.0, x.2, x.3),
            (y.0, y.2, y.3),
            "{name}: this mount and the other disagree"
        );
        // Blocks aside: a stat on the writer while its data is still kept (before its close
        // reached the MDT) counts only the blocks on the OSTs, and its kernel keeps that
        // under the lock (known, not this module's).
        let times = |p: &Path| {
            let x = seen(p);
            (x.0, x.2, x.3, x.4, x.5, x.6, x.7)
        };
        wait_for(&format!("both mounts agree on {name}"), || {
            times(&a) == times(&b)
        });
        seen(&a)
    };
    // Another mount's write calls this mount's lock back.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(there.join("s0"))
        .unwrap();
    f.write_all(b"more").unwrap();
    drop(f);
    assert_eq!(agree("s0").0, 3905);
    // A truncate here (by path, and through a descriptor).
    fs::OpenOptions::new()
        .write(true)
        .open(here.join("s1"))
        .unwrap()
        .set_len(10)
        .unwrap();
    assert_eq!(agree("s1").0, 10);
    fs::File::create(here.join("s2")).unwrap();
    assert_eq!(agree("s2").0, 0);
    // An append, a direct write, a write after reopening, here.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(here.join("s3"))
        .unwrap();
    f.write_all(b"appended").unwrap();
    drop(f);
    assert_eq!(agree("s3").0, 3909);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(here.join("s4"))
        .unwrap();
    let mut block = nacre_types::AlignedBuf::zeroed(8192);
    block.fill(7);
    f.write_all(&block).unwrap();
    drop(f);
    assert_eq!(agree("s4").0, 8192);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(here.join("s5"))
        .unwrap();
    f.seek(SeekFrom::Start(100_000)).unwrap();
    f.write_all(b"far").unwrap();
    drop(f);
    assert_eq!(agree("s5").0, 100_003);
    // Metadata changes here: mode, links, rename.
    fs::set_permissions(here.join("s6"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(agree("s6").2 & 0o7777, 0o600);
    fs::hard_link(here.join("s7"), here.join("s7-link")).unwrap();
    assert_eq!(agree("s7").3, 2);
    fs::remove_file(here.join("s7-link")).unwrap();
    assert_eq!(agree("s7").3, 1);
    fs::rename(here.join("s8"), here.join("s8-moved")).unwrap();
    agree("s8-moved");
    // Through the node API (networked: the API is the mount process's).
    if form == Form::Networked {
        let node = nacre_api::Node::connect(&fs.mnt).unwrap();
        let f = node.open("/d/s9", libc::O_WRONLY, 0).unwrap();
        f.write_at(b"through the API", 5000).unwrap();
        f.close().unwrap();
        assert_eq!(agree("s9").0, 5015);
    }
    // Bytes on the MDT: written by the other mount, appended here, written here past the
    // component on the MDT (its object made then).
    let (dom_here, dom_there) = (here.join("../dom"), there.join("../dom"));
    let agree_dom = |name: &str| {
        let (a, b) = (dom_here.join(name), dom_there.join(name));
        wait_for(&format!("both mounts agree on {name}"), || {
            seen(&a) == seen(&b)
        });
        seen(&a)
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(dom_there.join("m0"))
        .unwrap();
    f.seek(SeekFrom::Start(5000)).unwrap();
    f.write_all(b"there").unwrap();
    drop(f);
    assert_eq!(agree_dom("m0").0, 5005);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dom_here.join("m1"))
        .unwrap();
    f.write_all(b"appended").unwrap();
    drop(f);
    assert_eq!(agree_dom("m1").0, 3909);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(dom_here.join("m2"))
        .unwrap();
    f.seek(SeekFrom::Start(70_000)).unwrap();
    f.write_all(b"on an OST").unwrap();
    drop(f);
    assert_eq!(agree_dom("m2").0, 70_009);
    // The untouched ones still cost nothing.
    let before = stat_requests(fsname);
    for (i, m) in mine.iter().enumerate().take(100).skip(10) {
        assert_eq!(seen(&here.join(format!("s{i}"))), *m);
    }
    assert_eq!(stat_requests(fsname) - before, 0);
}

on_both_forms!(stats_of_files_written_here_cost_no_request);
