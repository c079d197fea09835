//! Components instantiated as files grow (Lustre's PFL instantiation, `LAYOUT_INTENT_*`):
//! a new file has objects only for its first component; a write, truncate or allocation
//! reaching further has the MDT give objects to every component below its end first, in
//! file order, without fencing the file's writers; other mounts read the grown layout;
//! a lost intent is replayed with the objects it gave; the request is refused to whoever
//! may not write the file.

use super::composite::{layout, rebuild_from_osts};
use nacre_testkit::raw::RawConn;
use nacre_testkit::{lfsck_clean, on_both_forms, pattern, wait_for, Form, Spec, TestFs};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::mds::{LayoutInfo, MdsOp, MdsReply};
use serde_json::Value;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// `-E 1M -c 1 -E 4M -c 2 -S 1M -E -1 -c 4 -S 1M`, as `setstripe` arguments.
pub(crate) const PFL: [&str; 16] = [
    "-E", "1M", "-c", "1", "-E", "4M", "-c", "2", "-S", "1M", "-E", "-1", "-c", "4", "-S", "1M",
];

/// Makes directory `dir` with the [`PFL`] default.
pub(crate) fn pfl_dir(dir: &Path) {
    fs::create_dir(dir).unwrap();
    let mut args = vec!["setstripe"];
    args.extend_from_slice(&PFL);
    args.push(dir.to_str().unwrap());
    nacre_testkit::nacre_ok(&args);
}

/// The object count of each component of a file's layout (`getstripe --json`).
pub(crate) fn counts(l: &Value) -> Vec<usize> {
    l["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["objects"].as_array().map_or(0, Vec::len))
        .collect()
}

/// A new file in a PFL directory has objects for its first component only (getstripe
/// shows the others without `init`); a write into the second instantiates it alone; a
/// truncate up into the third instantiates it; a sparse write far into a new file
/// instantiates every component up to it; an allocation does too. Each extent's bytes are
/// in its own component's objects on the OSTs' disks, and lfsck finds no orphan object.
fn components_get_objects_as_the_file_grows(form: Form) {
    let fs = TestFs::start(form, 4);
    let dir = fs.path("pfl");
    pfl_dir(&dir);
    let f = dir.join("grows");
    fs::write(&f, b"small").unwrap();
    let l = layout(&f);
    assert_eq!(counts(&l), vec![1, 0, 0], "{l}");
    let text = nacre_testkit::nacre_ok(&["getstripe", f.to_str().unwrap()]);
    assert_eq!(
        text.matches("lcme_flags:          init").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("lcme_flags:          0").count(), 2, "{text}");

    // A write into the second component.
    let data = pattern(3, 3 << 20);
    let file = OpenOptions::new().write(true).open(&f).unwrap();
    file.write_all_at(&data[5..], 5).unwrap();
    file.sync_all().unwrap();
    let l = layout(&f);
    assert_eq!(counts(&l), vec![1, 2, 0], "{l}");
    let mut want = data.clone();
    want[..5].copy_from_slice(b"small");
    assert!(
        rebuild_from_osts(&fs.data, &l, want.len() as u64) == want,
        "the objects hold another file than was written"
    );
    // A truncate up into the third: its objects hold the size.
    file.set_len(10 << 20).unwrap();
    let l = layout(&f);
    assert_eq!(counts(&l), vec![1, 2, 4], "{l}");
    assert_eq!(fs::metadata(&f).unwrap().len(), 10 << 20);
    let back = fs::read(&f).unwrap();
    assert!(back[..want.len()] == want[..] && back[want.len()..].iter().all(|&b| b == 0));
    drop(file);

    // A sparse write far out: every component up to it, in file order.
    let g = dir.join("sparse");
    let file = fs::File::create(&g).unwrap();
    file.write_all_at(b"far", (6 << 20) + 17).unwrap();
    file.sync_all().unwrap();
    assert_eq!(counts(&layout(&g)), vec![1, 2, 4]);
    let back = fs::read(&g).unwrap();
    assert_eq!(back.len(), (6 << 20) + 20);
    assert!(back[..6 << 20].iter().all(|&b| b == 0) && back.ends_with(b"far"));
    // An allocation reaching the second component.
    let h = dir.join("allocated");
    let file = fs::File::create(&h).unwrap();
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0, 2 << 20) };
    assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    assert_eq!(counts(&layout(&h)), vec![1, 2, 0]);
    assert_eq!(fs::metadata(&h).unwrap().len(), 2 << 20);
    drop(file);
    if form == Form::Networked {
        lfsck_clean(&fs.source());
    }
}

/// Two mounts of one file: the reader reads it while it has one component, the writer
/// then writes into the second (O_DIRECT, its file kept open) and the third (buffered,
/// with fsync); the reader, its file still open, reads the writer's bytes at once (its
/// LAYOUT lock was called back by the intent) and the right size. The other mount's
/// appends across a component's end land whole.
#[test]
fn a_mount_reads_what_another_wrote_into_components_it_instantiated() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(4));
    let dir = fs.path("pfl");
    pfl_dir(&dir);
    let other = fs.scratch().join("mnt_b");
    fs::create_dir_all(&other).unwrap();
    let b = fs.mount_another(&other, &[]);
    let f = dir.join("shared");
    fs::write(&f, pattern(1, 1000)).unwrap();
    let fb = b.mnt.join("pfl/shared");
    let direct = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&fb)
        .unwrap();
    // The reader reads after the writer's open (which called back its attributes' lock)
    // and before the write: it holds the file's LAYOUT lock on the one-component layout.
    let reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f)
        .unwrap();
    let mut head = vec![0u8; 1000];
    reader.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(head, pattern(1, 1000));
    // Into the second component, the writer's file still open (no close, no attribute
    // change between): only the intent's callback tells the reader of the new object.
    let block = pattern(2, 1 << 20);
    direct.write_all_at(&block, 2 << 20).unwrap();
    let mut got = vec![0u8; 1 << 20];
    reader.read_exact_at(&mut got, 2 << 20).unwrap();
    assert!(
        got == block,
        "the reader read other bytes than were written"
    );

    let buffered = OpenOptions::new().write(true).open(&fb).unwrap();
    buffered.write_all_at(b"third", 5 << 20).unwrap();
    buffered.sync_all().unwrap();
    assert_eq!(counts(&layout(&fb)), vec![1, 2, 4]);
    let size = (5 << 20) + 5;
    wait_for("the reader to see the writer's size", || {
        fs::metadata(&f).map(|m| m.len()).unwrap_or(0) == size
    });
    let mut tail = [0u8; 5];
    reader.read_exact_at(&mut tail, 5 << 20).unwrap();
    assert_eq!(&tail, b"third");
    assert_eq!(counts(&layout(&f)), vec![1, 2, 4]);

    // Appends across the first component's end, from the other mount.
    let g = dir.join("log");
    fs::write(&g, vec![7u8; (1 << 20) - 10]).unwrap();
    let mut app = OpenOptions::new()
        .append(true)
        .open(b.mnt.join("pfl/log"))
        .unwrap();
    std::io::Write::write_all(&mut app, &[9u8; 30]).unwrap();
    app.sync_all().unwrap();
    let back = fs::read(&g).unwrap();
    assert_eq!(back.len(), (1 << 20) + 20);
    assert!(back[(1 << 20) - 10..].iter().all(|&b| b == 9));
    assert_eq!(counts(&layout(&g)), vec![1, 2, 0]);
    drop(b);
    lfsck_clean(&fs.source());
}

pub(crate) fn fid_at(path: &Path) -> Fid {
    use std::os::unix::fs::MetadataExt;
    Fid::from_ino(fs::metadata(path).unwrap().ino()).unwrap()
}

/// A raw client speaks `LayoutIntent` as an attacker would: a user who may not write the
/// file is refused `EACCES`, a directory `EISDIR`, an end past the largest file `EFBIG`,
/// a FID of no inode `ENOENT`; none of these changes the layout. The owner's intent
/// instantiates what it asks (the objects the reply names are the file's), and sent again
/// answers the same layout without allocating more.
#[test]
fn layout_intents_are_refused_to_whoever_may_not_write_the_file() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(4));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("pfl");
    pfl_dir(&dir);
    let file = dir.join("f");
    fs::write(&file, b"x").unwrap();
    let before = layout(&file);
    let (d, f) = (fid_at(&dir), fid_at(&file));
    let mut c = RawConn::connect(&mds, "nacre", [0x4c; 16]).unwrap();
    let mut call = |op: MdsOp| {
        c.send_mds(0, op).unwrap();
        let r = c.recv().unwrap();
        (r.header.status, r.mds())
    };
    assert_eq!(call(MdsOp::Connect).0, 0);
    let stranger = Cred::new(4242, 4242, vec![]);
    let got = nacre_types::cred::with(stranger, || {
        call(MdsOp::LayoutIntent {
            fid: f,
            end: 8 << 20,
        })
        .0
    });
    assert_eq!(got, Status::Access as i32, "a stranger grew the layout");
    for (op, want) in [
        (
            MdsOp::LayoutIntent {
                fid: d,
                end: 2 << 20,
            },
            Status::IsDir,
        ),
        (
            MdsOp::LayoutIntent {
                fid: f,
                end: u64::MAX,
            },
            Status::FBig,
        ),
        (
            MdsOp::LayoutIntent {
                fid: Fid::new(f.seq, f.oid + 1000),
                end: 2 << 20,
            },
            Status::NoEnt,
        ),
    ] {
        assert_eq!(call(op.clone()).0, want as i32, "{op:?}");
    }
    assert_eq!(layout(&file), before, "a refused intent changed the layout");

    // The owner (root here): the second component, then the same again.
    let grown = |r: Option<MdsReply>| match r {
        Some(MdsReply::Layout(LayoutInfo::File(l))) => l,
        other => panic!("not a layout: {other:?}"),
    };
    let (status, reply) = call(MdsOp::LayoutIntent {
        fid: f,
        end: 2 << 20,
    });
    assert_eq!(status, 0);
    let first = grown(reply);
    let per: Vec<usize> = first.components.iter().map(|c| c.objects.len()).collect();
    assert_eq!(per, vec![1, 2, 0]);
    let (status, reply) = call(MdsOp::LayoutIntent {
        fid: f,
        end: 1 << 20,
    });
    assert_eq!(status, 0);
    assert_eq!(
        grown(reply),
        first,
        "an intent already met changed the layout"
    );
    let l = layout(&file);
    assert_eq!(counts(&l), vec![1, 2, 0]);
    let ids: Vec<u64> = l["components"][1]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_u64().unwrap())
        .collect();
    let said: Vec<u64> = first.components[1]
        .objects
        .iter()
        .map(|o| o.object.id)
        .collect();
    assert_eq!(ids, said);
    // The mount serves on, and writes into what the raw client had instantiated.
    let w = OpenOptions::new().write(true).open(&file).unwrap();
    w.write_all_at(b"second", 3 << 20).unwrap();
    w.sync_all().unwrap();
    assert_eq!(&fs::read(&file).unwrap()[3 << 20..], b"second");
    lfsck_clean(&fs.source());
}

on_both_forms!(components_get_objects_as_the_file_grows);
