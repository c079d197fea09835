//! Data on the MDT (Lustre's DoM, `setstripe -E 64K -L mdt -E -1 -c 2`): a small file's
//! bytes are on its MDT and nowhere else; a larger file's first bytes there and the rest on
//! its OSTs; truncates, holes, appends and allocations keep POSIX's answers; another mount
//! reads what one wrote; the requests are refused to whoever may not read or write the
//! file.

use super::batch::{polls, Session};
use super::composite::{layout, rebuild_from_osts};
use super::growth::{counts, fid_at};
use nacre_testkit::raw::RawConn;
use nacre_testkit::{lfsck_clean, on_both_forms, pattern, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The end of the component on the MDT in [`dom_dir`]'s default.
const DOM_END: usize = 64 << 10;

/// Makes directory `dir` with the default `-E 64K -L mdt -E -1 -c 2`.
pub(crate) fn dom_dir(dir: &Path) {
    fs::create_dir(dir).unwrap();
    dom_default(dir);
}

/// Sets directory `dir`'s default layout to `-E 64K -L mdt -E -1 -c 2`.
pub(crate) fn dom_default(dir: &Path) {
    nacre_testkit::nacre_ok(&[
        "setstripe",
        "-E",
        "64K",
        "-L",
        "mdt",
        "-E",
        "-1",
        "-c",
        "2",
        dir.to_str().unwrap(),
    ]);
}

/// A small file has no object at all (its bytes are on the MDT: getstripe says `mdt`); a
/// file of 200 KiB has its first 64 KiB on the MDT and the rest on its OSTs' disks, where
/// its first 64 KiB are not; truncates down and up, a hole below the component's end
/// with bytes past it, appends and an allocation read back as a local file system's
/// would, and lfsck finds nothing amiss.
fn small_files_live_on_the_mdt(form: Form) {
    let fs = TestFs::start(form, 2);
    let dir = fs.path("dom");
    dom_dir(&dir);
    let small = dir.join("small");
    let data = pattern(1, 3901);
    fs::write(&small, &data).unwrap();
    assert_eq!(fs::read(&small).unwrap(), data);
    assert_eq!(fs::metadata(&small).unwrap().len(), 3901);
    let l = layout(&small);
    assert_eq!(counts(&l), vec![0, 0], "{l}");
    assert_eq!(l["components"][0]["pattern"], "mdt", "{l}");
    let text = nacre_testkit::nacre_ok(&["getstripe", small.to_str().unwrap()]);
    assert!(text.contains("lmm_pattern:       mdt"), "{text}");

    // Across the component's end: the rest on the OSTs, only the rest.
    let big = dir.join("big");
    let data = pattern(2, 200 << 10);
    fs::write(&big, &data).unwrap();
    let l = layout(&big);
    assert_eq!(counts(&l), vec![0, 2], "{l}");
    let on_osts = rebuild_from_osts(&fs.data, &l, data.len() as u64);
    assert!(
        on_osts[..DOM_END].iter().all(|&b| b == 0),
        "MDT bytes on OSTs"
    );
    assert!(on_osts[DOM_END..] == data[DOM_END..], "OST bytes differ");
    assert!(
        fs::read(&big).unwrap() == data,
        "the file reads other bytes"
    );
    // Reads that start below the end and go past it, and O_DIRECT ones.
    let f = fs::File::open(&big).unwrap();
    let mut buf = vec![0u8; 10_000];
    f.read_exact_at(&mut buf, (DOM_END - 5000) as u64).unwrap();
    assert!(buf[..] == data[DOM_END - 5000..DOM_END + 5000]);
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&big)
        .unwrap();
    let mut aligned = nacre_types::AlignedBuf::zeroed(128 << 10);
    let n = direct.read_at(&mut aligned, 0).unwrap();
    assert_eq!(n, 128 << 10);
    assert!(aligned[..] == data[..128 << 10]);

    // Truncates: down inside the component, up inside it (zeros), up past it.
    let t = OpenOptions::new().write(true).open(&small).unwrap();
    t.set_len(1000).unwrap();
    assert_eq!(fs::read(&small).unwrap(), pattern(1, 3901)[..1000]);
    t.set_len(10_000).unwrap();
    let back = fs::read(&small).unwrap();
    assert_eq!(back.len(), 10_000);
    assert!(back[..1000] == pattern(1, 3901)[..1000] && back[1000..].iter().all(|&b| b == 0));
    t.set_len(300 << 10).unwrap();
    assert_eq!(fs::metadata(&small).unwrap().len(), 300 << 10);
    let back = fs::read(&small).unwrap();
    assert_eq!(back.len(), 300 << 10);
    assert!(back[1000..].iter().all(|&b| b == 0));
    drop(t);

    // A hole below the component's end, bytes past it: zeros up to them.
    let sparse = dir.join("sparse");
    let w = fs::File::create(&sparse).unwrap();
    w.write_all_at(b"head", 0).unwrap();
    w.write_all_at(b"far", 300 << 10).unwrap();
    w.sync_all().unwrap();
    let back = fs::read(&sparse).unwrap();
    assert_eq!(back.len(), (300 << 10) + 3);
    assert!(back.starts_with(b"head") && back.ends_with(b"far"));
    assert!(back[4..300 << 10].iter().all(|&b| b == 0));
    drop(w);

    // Appends: on the MDT while they fit, then across its end.
    let log = dir.join("log");
    let mut app = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    let mut want = Vec::new();
    for i in 0..40u8 {
        let line = vec![b'a' + (i % 26); 2000];
        app.write_all(&line).unwrap();
        want.extend_from_slice(&line);
    }
    app.sync_all().unwrap();
    assert_eq!(fs::read(&log).unwrap(), want);
    assert_eq!(counts(&layout(&log)), vec![0, 2]);

    // An allocation inside the component: the size grows, the bytes read as zeros.
    let alloc = dir.join("alloc");
    let a = fs::File::create(&alloc).unwrap();
    a.write_all_at(b"xy", 0).unwrap();
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&a), 0, 0, 40_000) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    let back = fs::read(&alloc).unwrap();
    assert_eq!(back.len(), 40_000);
    assert!(back.starts_with(b"xy") && back[2..].iter().all(|&b| b == 0));
    drop(a);

    fs::remove_file(&big).unwrap();
    fs::remove_file(&small).unwrap();
    if form == Form::Networked {
        lfsck_clean(&fs.source());
    }
}

/// Two mounts: the reader reads a small file through its page cache; the writer rewrites
/// it in place (same size, its file kept open) and the reader's next read has the new
/// bytes; a write past the component's end from the reader's side reads back on the
/// writer's.
#[test]
fn a_mount_reads_what_another_wrote_on_the_mdt() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let other = fs.scratch().join("mnt_b");
    fs::create_dir_all(&other).unwrap();
    let b = fs.mount_another(&other, &[]);
    let f = dir.join("shared");
    fs::write(&f, pattern(1, 20_000)).unwrap();
    let reader = fs::File::open(b.mnt.join("dom/shared")).unwrap();
    let mut got = vec![0u8; 20_000];
    reader.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(1, 20_000));
    let writer = OpenOptions::new().write(true).open(&f).unwrap();
    for round in 2..5u64 {
        writer.write_all_at(&pattern(round, 20_000), 0).unwrap();
        reader.read_exact_at(&mut got, 0).unwrap();
        assert!(
            got == pattern(round, 20_000),
            "round {round}: the reader read stale bytes"
        );
    }
    // A writer that holds no open (a raw client, root): the reader, its file not open for
    // writing anywhere, keeps its attributes under its lock; the write calls that back and
    // the bytes the reader had in its page cache are not served again.
    drop(writer);
    let mut again = vec![0u8; 20_000];
    reader.read_exact_at(&mut again, 0).unwrap();
    reader.read_exact_at(&mut again, 0).unwrap();
    assert!(again == pattern(4, 20_000));
    let mut c = RawConn::connect(&mds, "nacre", [0x4e; 16]).unwrap();
    c.send_mds(0, MdsOp::Connect).unwrap();
    assert_eq!(c.recv().unwrap().header.status, 0);
    c.send_mds(
        0,
        MdsOp::DomWrite {
            fid: fid_at(&f),
            offset: 0,
            data: pattern(9, 20_000),
        },
    )
    .unwrap();
    assert_eq!(c.recv().unwrap().header.status, 0);
    reader.read_exact_at(&mut again, 0).unwrap();
    assert!(
        again == pattern(9, 20_000),
        "the reader read stale bytes after a raw write"
    );
    let w = OpenOptions::new()
        .write(true)
        .open(b.mnt.join("dom/shared"))
        .unwrap();
    w.write_all_at(b"tail", 100_000).unwrap();
    w.sync_all().unwrap();
    let back = fs::read(&f).unwrap();
    assert_eq!(back.len(), 100_004);
    assert!(back[..20_000] == pattern(9, 20_000)[..] && back.ends_with(b"tail"));
    drop(b);
    lfsck_clean(&fs.source());
}

/// A directory migrated to another MDT (`nacre migrate -m 1`) keeps every byte its files
/// have on the MDT: a file with bytes there keeps its inode on the MDT that holds them (the
/// moved directory's entry names it there), the directory and its subdirectory move, and
/// the files stay readable and writable.
#[test]
fn a_directory_migrated_to_another_mdt_keeps_the_bytes_of_its_files() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).mdts(2).fsname("dommig"));
    let dir = fs.path("proj");
    dom_dir(&dir);
    fs::create_dir(dir.join("sub")).unwrap();
    let files = [
        ("small", pattern(3, 3901)),
        ("big", pattern(4, 200 << 10)),
        ("sub/inner", pattern(5, 10_000)),
    ];
    for (name, data) in &files {
        fs::write(dir.join(name), data).unwrap();
    }
    assert_eq!(fid_at(&dir).mdt_index(), 0);
    nacre_testkit::nacre_ok(&["migrate", "-m", "1", dir.to_str().unwrap()]);
    assert_eq!(fid_at(&dir).mdt_index(), 1, "the directory moved");
    assert_eq!(
        fid_at(&dir.join("sub")).mdt_index(),
        1,
        "its subdirectory too"
    );
    for (name, data) in &files {
        let back = fs::read(dir.join(name)).unwrap();
        assert!(
            &back == data,
            "{name}: {} bytes read back changed",
            back.len()
        );
        assert_eq!(
            fid_at(&dir.join(name)).mdt_index(),
            0,
            "{name} stays with its bytes"
        );
    }
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join("small"))
        .unwrap();
    f.write_all(b"after").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let back = fs::read(dir.join("small")).unwrap();
    assert!(back.len() == 3906 && back.ends_with(b"after"));
    lfsck_clean(&fs.source());
}

/// `nacre migrate -c 2` moves a file's bytes off the MDT: a file all on the MDT and one
/// across the component's end get a plain layout on OSTs with every byte, the MDT keeps
/// none of them (its block usage gives them back to the owner; the OSTs count them), and
/// a mount that held one of them open for writing across the migration writes on, its
/// next write redone on the new layout (the MDT answers `ESTALE`).
#[test]
fn a_migration_moves_the_bytes_on_the_mdt_to_osts() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domgo"));
    let src = fs.source();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let small = dir.join("small");
    let big = dir.join("big");
    fs::write(&small, pattern(6, 3901)).unwrap();
    fs::write(&big, pattern(7, 200 << 10)).unwrap();
    let mdt_bytes = || {
        let v: serde_json::Value = serde_json::from_str(&nacre_testkit::nacre_ok(&[
            "quota", "-v", "--json", "-u", "0", &src,
        ]))
        .unwrap();
        let per = v[0]["targets"].as_array().unwrap().clone();
        let of = |kind: &str| -> u64 {
            per.iter()
                .filter(|t| t["target"].as_str().unwrap().contains(kind))
                .map(|t| t["bytes"].as_u64().unwrap())
                .sum()
        };
        (of("MDT"), of("OST"))
    };
    assert_eq!(
        mdt_bytes().0,
        4096 + (64 << 10),
        "both files' bytes on the MDT"
    );
    let live = OpenOptions::new().write(true).open(&small).unwrap();
    live.write_all_at(b"before", 0).unwrap();

    nacre_testkit::nacre_ok(&[
        "migrate",
        "-c",
        "2",
        small.to_str().unwrap(),
        big.to_str().unwrap(),
    ]);
    for f in [&small, &big] {
        let l = layout(f);
        assert!(
            l["components"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["pattern"] != "mdt"),
            "{l}"
        );
        assert_eq!(counts(&l).iter().sum::<usize>(), 2, "{l}");
    }
    let mut want_small = pattern(6, 3901);
    want_small[..6].copy_from_slice(b"before");
    assert!(fs::read(&small).unwrap() == want_small, "small changed");
    assert!(
        fs::read(&big).unwrap() == pattern(7, 200 << 10),
        "big changed"
    );
    let (on_mdt, on_osts) = mdt_bytes();
    assert_eq!(on_mdt, 0, "bytes left on the MDT");
    assert!(on_osts >= 200 << 10, "{on_osts} bytes on the OSTs");

    // The handle opened before the migration writes on the new layout.
    live.write_all_at(b"after", 10).unwrap();
    live.sync_all().unwrap();
    drop(live);
    want_small[10..15].copy_from_slice(b"after");
    assert!(
        fs::read(&small).unwrap() == want_small,
        "the write after the migration"
    );
    assert_eq!(mdt_bytes().0, 0, "the write went to the OSTs");
    lfsck_clean(&src);
}

/// While a migration's fence window is open the MDT holds back every change of a file's
/// bytes on it — a write, an append, a truncate answer `EINPROGRESS` (the client resends)
/// — so the migrator's comparison with its copy cannot miss one; reads go on. Driven by a
/// raw client as a migrator would (begin, fence), then aborted: changes pass again.
#[test]
fn changes_of_bytes_on_the_mdt_wait_while_a_migration_fences_the_file() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domfence"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let f = dir.join("held");
    fs::write(&f, pattern(8, 5000)).unwrap();
    let fid = fid_at(&f);
    let mut c = RawConn::connect(&mds, "domfence", [0x4f; 16]).unwrap();
    let mut call = |op: MdsOp| {
        c.send_mds(0, op).unwrap();
        c.recv().unwrap().header.status
    };
    assert_eq!(call(MdsOp::Connect), 0);
    let spec = nacre_types::layout::StripeSpec {
        start_ost: -1,
        ..Default::default()
    };
    assert_eq!(call(MdsOp::RelayoutBegin { fid, spec }), 0);
    let write = MdsOp::DomWrite {
        fid,
        offset: 0,
        data: b"changed".to_vec(),
    };
    let append = MdsOp::DomAppend {
        fid,
        data: b"more".to_vec(),
    };
    let truncate = MdsOp::SetAttr {
        fid,
        attr: nacre_types::SetAttr {
            size: Some(10),
            ..Default::default()
        },
    };
    // Before the fence, the copy runs beside changes.
    assert_eq!(call(write.clone()), 0);
    assert_eq!(call(MdsOp::RelayoutFence { fid }), 0);
    for op in [&write, &append, &truncate] {
        assert_eq!(
            call(op.clone()),
            Status::InProgress as i32,
            "{op:?} in the fence"
        );
    }
    let read = MdsOp::DomRead {
        fid,
        offset: 0,
        len: 7,
    };
    assert_eq!(call(read), 0, "reads go on");
    assert_eq!(call(MdsOp::RelayoutAbort { fid }), 0);
    assert_eq!(call(append), 0, "after the abort");
    let mut want = pattern(8, 5000);
    want[..7].copy_from_slice(b"changed");
    want.extend_from_slice(b"more");
    assert!(fs::read(&f).unwrap() == want);
}

/// A write on the MDT clears set-id bits as the kernel's `file_remove_privs` does, by the
/// MDT in the write's transaction, whoever sends it: a raw client writing as a user who may
/// write the file (mode 06777) leaves it 0777; root's write leaves the bits; an empty write
/// changes nothing.
#[test]
fn a_write_on_the_mdt_clears_set_id_bits_whoever_sends_it() {
    use std::os::unix::fs::MetadataExt;
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domsetid"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let f = dir.join("setid");
    fs::write(&f, b"bytes").unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o6777)).unwrap();
    let fid = fid_at(&f);
    let mut c = RawConn::connect(&mds, "domsetid", [0x50; 16]).unwrap();
    let mut call = |op: MdsOp| {
        c.send_mds(0, op).unwrap();
        c.recv().unwrap().header.status
    };
    assert_eq!(call(MdsOp::Connect), 0);
    let write = |data: &[u8]| MdsOp::DomWrite {
        fid,
        offset: 0,
        data: data.to_vec(),
    };
    let mode = || fs::metadata(&f).unwrap().mode() & 0o7777;
    assert_eq!(call(write(b"root")), 0);
    assert_eq!(mode(), 0o6777, "root's write keeps the bits");
    let user = Cred::new(4242, 4242, vec![]);
    let empty = nacre_types::cred::with(user.clone(), || call(write(b"")));
    assert_eq!(empty, 0);
    assert_eq!(mode(), 0o6777, "an empty write changes nothing");
    let wrote = nacre_types::cred::with(user, || call(write(b"user")));
    assert_eq!(wrote, 0);
    assert_eq!(
        mode(),
        0o0777,
        "a user's write clears both (group-execute is set)"
    );
    assert_eq!(fs::read(&f).unwrap(), b"users");
}

/// How many `DomRead`s MDT0000 of file system `fsname` served (its `md_stats`).
fn dom_reads(fsname: &str) -> u64 {
    super::batch::served(fsname, "dom_read")
}

/// The mount keeps the pages of data on the MDT under the file's DOM lock: the bytes come
/// with the open (no `DomRead` at all), a file read again and again through the page cache
/// costs the MDT nothing more; another mount's write calls the lock back, and the next read
/// has the new bytes (and asks the MDT for them).
#[test]
fn a_mount_keeps_pages_of_data_on_the_mdt_under_its_lock() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domlk"));
    let dir = fs.path("dom");
    dom_dir(&dir);
    let other = fs.scratch().join("mnt_b");
    fs::create_dir_all(&other).unwrap();
    let b = fs.mount_another(&other, &[]);
    let f = dir.join("kept");
    fs::write(&f, pattern(1, 12_000)).unwrap();
    let first = dom_reads("domlk");
    let reader = fs::File::open(b.mnt.join("dom/kept")).unwrap();
    let mut got = vec![0u8; 12_000];
    reader.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(1, 12_000));
    assert_eq!(
        dom_reads("domlk"),
        first,
        "the bytes did not come with the open"
    );
    for _ in 0..20 {
        reader.read_exact_at(&mut got, 0).unwrap();
        assert_eq!(got, pattern(1, 12_000));
    }
    assert_eq!(
        dom_reads("domlk"),
        first,
        "reads of pages kept under the lock went to the MDT"
    );
    let w = OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all_at(&pattern(2, 12_000), 0).unwrap();
    reader.read_exact_at(&mut got, 0).unwrap();
    assert!(got == pattern(2, 12_000), "the reader read stale bytes");
    assert!(dom_reads("domlk") > first);
    drop(b);
}

/// A raw client speaks `DomRead`, `DomWrite` and `DomAppend` as an attacker would: a user
/// who may neither read nor write a file of mode 0600 is refused `EACCES` for each; a
/// directory is `EISDIR`, a file without a component on the MDT `ESTALE` (its layout is not
/// the one the caller knows), a range past the component's end or longer than one request
/// may move `EINVAL`, a FID of no inode `ENOENT`. None of these changes a byte. The owner's requests read and write.
#[test]
fn data_on_the_mdt_is_refused_to_whoever_may_not_read_or_write_the_file() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let file = dir.join("secret");
    fs::write(&file, b"private bytes").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    let plain = fs.path("plain");
    fs::write(&plain, b"on osts").unwrap();
    let (d, f, p) = (fid_at(&dir), fid_at(&file), fid_at(&plain));
    let mut c = RawConn::connect(&mds, "nacre", [0x4d; 16]).unwrap();
    let mut call = |op: MdsOp| {
        c.send_mds(0, op).unwrap();
        let r = c.recv().unwrap();
        (r.header.status, r.mds())
    };
    assert_eq!(call(MdsOp::Connect).0, 0);
    let stranger = Cred::new(4242, 4242, vec![]);
    for op in [
        MdsOp::DomRead {
            fid: f,
            offset: 0,
            len: 100,
        },
        MdsOp::DomWrite {
            fid: f,
            offset: 0,
            data: b"defaced".to_vec(),
        },
        MdsOp::DomAppend {
            fid: f,
            data: b"more".to_vec(),
        },
    ] {
        let got = nacre_types::cred::with(stranger.clone(), || call(op.clone()).0);
        assert_eq!(got, Status::Access as i32, "a stranger ran {op:?}");
    }
    let write = |fid, offset, data: &[u8]| MdsOp::DomWrite {
        fid,
        offset,
        data: data.to_vec(),
    };
    for (op, want) in [
        (write(d, 0, b"x"), Status::IsDir),
        (write(p, 0, b"x"), Status::Stale),
        (write(f, DOM_END as u64 - 1, b"xy"), Status::Inval),
        (write(f, u64::MAX, b"x"), Status::Inval),
        (
            MdsOp::DomRead {
                fid: f,
                offset: 0,
                len: u32::MAX,
            },
            Status::Inval,
        ),
        (
            MdsOp::DomRead {
                fid: f,
                offset: u64::MAX - 1,
                len: 10,
            },
            Status::Inval,
        ),
        (write(Fid::new(f.seq, f.oid + 1000), 0, b"x"), Status::NoEnt),
    ] {
        assert_eq!(call(op.clone()).0, want as i32, "{op:?}");
    }
    assert_eq!(fs::read(&file).unwrap(), b"private bytes");
    assert_eq!(fs::read(&plain).unwrap(), b"on osts");

    // The owner (root here) reads and writes.
    let (status, reply) = call(MdsOp::DomRead {
        fid: f,
        offset: 8,
        len: 100,
    });
    assert_eq!(status, 0);
    assert!(matches!(reply, Some(MdsReply::DomData(d)) if d == b"bytes"));
    assert_eq!(call(write(f, 0, b"PUBLIC! ")).0, 0);
    let (status, reply) = call(MdsOp::DomAppend {
        fid: f,
        data: b"!".to_vec(),
    });
    assert_eq!(status, 0);
    assert!(matches!(reply, Some(MdsReply::Attr(a)) if a.size == 14));
    assert_eq!(fs::read(&file).unwrap(), b"PUBLIC! bytes!");
    lfsck_clean(&fs.source());
}

on_both_forms!(small_files_live_on_the_mdt);

/// A mount's own write into a file whose bytes it keeps from an open (under its `DOM` lock,
/// which its own write calls nothing back of) is what its reader reads next: a write of a
/// part of a page the kernel never cached, then a truncate, each read back through the
/// handle opened before them.
#[test]
fn a_mounts_own_write_replaces_the_bytes_it_kept_from_an_open() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domown"));
    let dir = fs.path("dom");
    dom_dir(&dir);
    let f = dir.join("own");
    fs::write(&f, pattern(1, 12_000)).unwrap();
    let reader = fs::File::open(&f).unwrap();
    let w = OpenOptions::new().write(true).open(&f).unwrap();
    w.write_all_at(b"fresh", 5000).unwrap();
    let mut got = [0u8; 5];
    reader.read_exact_at(&mut got, 5000).unwrap();
    assert_eq!(&got, b"fresh", "bytes kept from the open before the write");
    w.set_len(6000).unwrap();
    drop(w);
    let mut all = Vec::new();
    fs::File::open(&f).unwrap().read_to_end(&mut all).unwrap();
    let mut want = pattern(1, 12_000);
    want[5000..5005].copy_from_slice(b"fresh");
    want.truncate(6000);
    assert_eq!(all, want);
}

/// An open for reading and writing (mdtest's read phase opens so) brings the bytes on the
/// MDT too, under its `DOM` lock: the read after it asks the MDT nothing more.
#[test]
fn an_open_for_writing_brings_the_bytes_too() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domrw"));
    let dir = fs.path("dom");
    dom_dir(&dir);
    let f = dir.join("rw");
    fs::write(&f, pattern(3, 3901)).unwrap();
    let before = super::batch::served("domrw", "dom_read");
    let rw = OpenOptions::new().read(true).write(true).open(&f).unwrap();
    let mut got = vec![0u8; 3901];
    rw.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, pattern(3, 3901));
    assert_eq!(
        super::batch::served("domrw", "dom_read"),
        before,
        "the bytes did not come with the open"
    );
}

/// The bytes come with an open only to one that may read them: a raw client's open for
/// writing alone of a file its user may write and not read (mode 0622), asking for `DOM`
/// and `LAYOUT`, is answered the plain entry and the layout's lock only; the owner's open
/// for reading and writing brings them, and both locks (mutation: `DOM` with any open,
/// caught).
#[test]
fn an_open_for_writing_alone_brings_no_bytes() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("domwo"));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("dom");
    dom_dir(&dir);
    let file = dir.join("drop_box");
    fs::write(&file, b"for the owner's eyes").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o622)).unwrap();
    let f = fid_at(&file);
    let Session(mut c) = Session::open(&mds, "domwo", [0x4e; 16]);
    // Locks go only to a client that answers callbacks: one that polls for them.
    polls(&mut Session::open(&mds, "domwo", [0x4e; 16]));
    let mut open = |access: u8| {
        let bits = nacre_ldlm::msg::DOM | nacre_ldlm::msg::LAYOUT;
        c.send_mds_with(0, MdsOp::Open { fid: f, access }, bits)
            .unwrap();
        let r = c.recv().unwrap();
        assert_eq!(r.header.status, 0);
        (r.mds(), r.answer().and_then(|a| a.lock))
    };
    let stranger = Cred::new(4242, 4242, vec![]);
    let (reply, lock) = nacre_types::cred::with(stranger, || open(nacre_types::cred::MAY_WRITE));
    assert!(
        matches!(reply, Some(MdsReply::Entry { .. })),
        "a writer who may not read got {reply:?}"
    );
    assert!(
        lock.is_some_and(|l| l.bits == nacre_ldlm::msg::LAYOUT),
        "a writer who may not read: the layout's lock only, got {lock:?}"
    );
    let both = nacre_types::cred::MAY_READ | nacre_types::cred::MAY_WRITE;
    let (reply, lock) = open(both);
    assert!(
        matches!(&reply, Some(MdsReply::OpenData { data, .. }) if data == b"for the owner's eyes"),
        "{reply:?}"
    );
    let both = nacre_ldlm::msg::DOM | nacre_ldlm::msg::LAYOUT;
    assert!(lock.is_some_and(|l| l.bits & both == both), "{lock:?}");
}
