//! Composite layouts (Lustre's progressive file layouts) on both forms: components by file
//! extent set with `setstripe -E`, shown by `getstripe`, inherited from directories, and the
//! data of each extent found in its own component's objects on the OSTs' disks.

use nacre_testkit::raw::RawConn;
use nacre_testkit::{nacre, nacre_ok, on_both_forms, pattern, Form, Spec, TestFs};
use nacre_types::layout::{ComponentKind, ComponentSpec, LayoutSpec, StripeSpec, EXTENT_EOF};
use nacre_types::{Cred, Fid, PoolName, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub(crate) fn layout(path: &Path) -> Value {
    serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap()
}

/// The bytes of object `o` (a layout JSON object) on its OST's disk.
fn object_bytes(data_dir: &Path, o: &Value) -> Vec<u8> {
    let (ost, seq, id) = (
        o["ost"].as_u64().unwrap(),
        o["seq"].as_u64().unwrap(),
        o["id"].as_u64().unwrap(),
    );
    fs::read(data_dir.join(format!("ost{ost}/O/{seq}/d{}/{id}", id % 32))).unwrap_or_default()
}

/// Rebuilds `size` bytes of a file from its components' objects on the OSTs' disks: byte
/// `x` of a component of stripe size S over C objects is in object `(x / S) % C` at
/// `(x / (S * C)) * S + x % S` (absolute file offsets, as Lustre's).
pub(crate) fn rebuild_from_osts(data_dir: &Path, l: &Value, size: u64) -> Vec<u8> {
    let mut out = vec![0u8; size as usize];
    for c in l["components"].as_array().unwrap() {
        let start = c["start"].as_u64().unwrap();
        let end = c["end"].as_u64().unwrap_or(u64::MAX);
        let s = c["stripe_size"].as_u64().unwrap();
        let objects: Vec<Vec<u8>> = c["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| object_bytes(data_dir, o))
            .collect();
        let count = objects.len() as u64;
        // A component with no objects (not yet, or on the MDT) holds nothing on the OSTs.
        if count == 0 {
            continue;
        }
        for x in start..end.min(size) {
            let unit = x / s;
            let obj = &objects[(unit % count) as usize];
            let at = ((unit / count) * s + x % s) as usize;
            out[x as usize] = obj.get(at).copied().unwrap_or(0);
        }
    }
    out
}

fn synced_write(path: &Path, data: &[u8]) {
    let f = fs::File::create(path).unwrap();
    f.write_all_at(data, 0).unwrap();
    f.sync_all().unwrap();
}

/// `-E 1M -c 1 -E 4M -c 2 -S 1M -E -1 -c 4 -S 1M` on a directory: a file made in it has
/// the three components with 1, 2 and 4 objects, each extent's bytes are in its own
/// component's objects on the disks, the file reads back whole, and a truncate into the
/// second component keeps what is below it.
fn a_file_in_a_composite_directory_lays_each_extent_on_its_component(form: Form) {
    let fs = TestFs::start(form, 4);
    let dir = fs.path("pfl");
    fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    nacre_ok(&[
        "setstripe",
        "-E",
        "1M",
        "-c",
        "1",
        "-E",
        "4M",
        "-c",
        "2",
        "-S",
        "1M",
        "-E",
        "-1",
        "-c",
        "4",
        "-S",
        "1M",
        d,
    ]);
    let dl = layout(&dir);
    let comps = dl["default"]["components"].as_array().unwrap().clone();
    assert_eq!(comps.len(), 3, "{dl}");
    assert_eq!(comps[1]["start"], 1 << 20);
    assert_eq!(comps[2]["end"], -1);
    let text = nacre_ok(&["getstripe", d]);
    assert!(text.contains("lcm_entry_count:   3"), "{text}");

    let f = dir.join("file");
    let data = pattern(5, (6 << 20) + 4321);
    synced_write(&f, &data);
    let l = layout(&f);
    assert_eq!(l["pattern"], "composite", "{l}");
    let counts: Vec<usize> = l["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["objects"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, vec![1, 2, 4], "{l}");
    assert_eq!(l["objects"].as_array().unwrap().len(), 7);
    assert_eq!(
        rebuild_from_osts(&fs.data, &l, data.len() as u64),
        data,
        "the objects hold another file than was written"
    );
    assert!(fs::read(&f).unwrap() == data, "read back wrong");
    assert_eq!(fs::metadata(&f).unwrap().len(), data.len() as u64);
    // The last component's objects hold only its extent: nothing below 4 MiB.
    let last = &l["components"][2]["objects"][0];
    let bytes = object_bytes(&fs.data, last);
    assert!(bytes.iter().take(1 << 20).all(|&b| b == 0));
    let text = nacre_ok(&["getstripe", f.to_str().unwrap()]);
    assert!(
        text.contains("lcme_extent.e_end:   EOF") && text.contains("lcm_entry_count:   3"),
        "{text}"
    );
    // Truncated into the second component: the size, the bytes below, zeros after.
    let cut = (1 << 20) + 1000;
    fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(cut)
        .unwrap();
    assert_eq!(fs::metadata(&f).unwrap().len(), cut);
    let back = fs::read(&f).unwrap();
    assert!(back == data[..cut as usize], "truncated file reads wrong");
    // Grown again by a write far out: the hole reads as zeros.
    let g = fs::OpenOptions::new().write(true).open(&f).unwrap();
    g.write_all_at(b"tail", 5 << 20).unwrap();
    g.sync_all().unwrap();
    let back = fs::read(&f).unwrap();
    assert_eq!(back.len(), (5 << 20) + 4);
    assert!(back[cut as usize..5 << 20].iter().all(|&b| b == 0));
    assert_eq!(&back[5 << 20..], b"tail");
}

/// `setstripe -E` on a new file lays it out so; a subdirectory made after takes its
/// parent's composite default, and a plain `setstripe` in it makes a plain file.
fn setstripe_lays_out_files_and_subdirectories_inherit(form: Form) {
    let fs = TestFs::start(form, 2);
    let f = fs.path("own");
    let p = f.to_str().unwrap();
    nacre_ok(&["setstripe", "-E", "2M", "-c", "1", "-E", "-1", "-c", "2", p]);
    let l = layout(&f);
    assert_eq!(l["components"].as_array().unwrap().len(), 2, "{l}");
    let data = pattern(9, 3 << 20);
    synced_write(&f, &data);
    assert!(fs::read(&f).unwrap() == data);
    assert_eq!(rebuild_from_osts(&fs.data, &layout(&f), 3 << 20), data);

    let dir = fs.path("top");
    fs::create_dir(&dir).unwrap();
    nacre_ok(&[
        "setstripe",
        "-E",
        "1M",
        "-c",
        "1",
        "-E",
        "-1",
        "-c",
        "2",
        dir.to_str().unwrap(),
    ]);
    let sub = dir.join("sub");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("f"), b"x").unwrap();
    let l = layout(&sub.join("f"));
    assert_eq!(l["components"].as_array().unwrap().len(), 2, "{l}");
    let plain = sub.join("plain");
    nacre_ok(&["setstripe", "-c", "2", plain.to_str().unwrap()]);
    let l = layout(&plain);
    assert_eq!(l["pattern"], "raid0", "{l}");
    assert_eq!(l["stripe_count"], 2);
}

/// Requests the layout rules refuse fail with a message, and change nothing: a last
/// component not to the end of the file, an extent off its stripe size, more stripes
/// than OSTs in one component.
fn composite_requests_that_cannot_be_met_are_refused(form: Form) {
    let fs = TestFs::start(form, 2);
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let d = dir.to_str().unwrap();
    for args in [
        &["-E", "1M", "-c", "1"][..],
        &["-E", "1M", "-S", "4M", "-E", "-1"][..],
        &["-E", "1M", "-c", "3", "-E", "-1"][..],
        &["-E", "100K", "-E", "-1"][..],
    ] {
        let mut all = vec!["setstripe"];
        all.extend_from_slice(args);
        all.push(d);
        let out = nacre(&all);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
    assert!(
        layout(&dir)["default"].is_null(),
        "a refused request changed the default"
    );
}

fn fid_at(path: &Path) -> Fid {
    use std::os::unix::fs::MetadataExt;
    Fid::from_ino(fs::metadata(path).unwrap().ino()).unwrap()
}

fn comp(end: u64, count: i32, size: u32) -> ComponentSpec {
    ComponentSpec {
        end,
        stripe: StripeSpec {
            stripe_count: count,
            stripe_size: size,
            start_ost: -1,
            pool: PoolName::NONE,
        },
        kind: ComponentKind::Osts,
    }
}

/// A raw client speaks `SetLayout` to the MDT with requests no `setstripe` would send:
/// no components, more than a layout may have, ends that do not rise or stop short of the
/// end of the file, an extent off its stripe size, stripe sizes and counts no layout has,
/// a pool name of bytes no name has; each is refused `EINVAL` on a directory and on an
/// empty file, and a valid request from a user who owns neither is refused `EPERM`.
/// Nothing changes (the directory keeps no default, the file its layout), and the MDT
/// and the mount serve on.
#[test]
fn hostile_layout_requests_are_refused_and_change_nothing() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(2));
    let mds = fs.servers_mut()[0].listen.clone();
    let dir = fs.path("d");
    fs::create_dir(&dir).unwrap();
    let file = fs.path("f");
    fs::write(&file, b"").unwrap();
    let before = layout(&file);
    let (d, f) = (fid_at(&dir), fid_at(&file));
    let mut c = RawConn::connect(&mds, "nacre", [0x6c; 16]).unwrap();
    let mut status = |op: MdsOp| {
        c.send_mds(0, op).unwrap();
        c.recv().unwrap().header.status
    };
    assert_eq!(status(MdsOp::Connect), 0);
    let bad_pool: PoolName = serde_json::from_str(&format!("{:?}", [b'.'; 16])).unwrap();
    let hostile = [
        vec![],
        vec![comp(EXTENT_EOF, 1, 0); 17],
        vec![
            comp(2 << 20, 1, 0),
            comp(1 << 20, 1, 0),
            comp(EXTENT_EOF, 1, 0),
        ],
        vec![comp(1 << 20, 1, 0)],
        vec![comp(EXTENT_EOF - 1, 1, 0), comp(EXTENT_EOF, 1, 0)],
        vec![comp(65_536, 1, 1 << 20), comp(EXTENT_EOF, 1, 0)],
        vec![comp(1 << 20, 1, 1), comp(EXTENT_EOF, 1, 0)],
        vec![comp(1 << 20, -7, 0), comp(EXTENT_EOF, 1, 0)],
        vec![comp(1 << 20, 1000, 0), comp(EXTENT_EOF, 1, 0)],
        vec![ComponentSpec {
            end: EXTENT_EOF,
            stripe: StripeSpec {
                pool: bad_pool,
                ..StripeSpec::default()
            },
            kind: ComponentKind::Osts,
        }],
    ];
    for (i, components) in hostile.into_iter().enumerate() {
        for fid in [d, f] {
            let spec = LayoutSpec {
                components: components.clone(),
            };
            let got = status(MdsOp::SetLayout { fid, spec });
            assert_ne!(got, 0, "hostile request {i} accepted on {fid}");
            assert!(
                got == Status::Inval as i32
                    || got == Status::TooBig as i32
                    || got == Status::Range as i32,
                "hostile request {i} on {fid}: status {got}"
            );
        }
    }
    // A valid request, from a user who owns neither.
    let stranger = Cred::new(4242, 4242, vec![]);
    let valid = LayoutSpec {
        components: vec![comp(1 << 20, 1, 0), comp(EXTENT_EOF, 2, 0)],
    };
    for fid in [d, f] {
        let got = nacre_types::cred::with(stranger.clone(), || {
            status(MdsOp::SetLayout {
                fid,
                spec: valid.clone(),
            })
        });
        assert_eq!(got, Status::Perm as i32, "a stranger set a layout on {fid}");
    }
    // Nothing changed; the MDT and the mount serve on.
    assert!(layout(&dir)["default"].is_null());
    assert_eq!(layout(&file), before);
    c.send_mds(0, MdsOp::GetAttr { fid: d }).unwrap();
    assert!(matches!(
        c.recv().unwrap().mds(),
        Some(MdsReply::Entry { .. })
    ));
    fs::write(dir.join("after"), b"served").unwrap();
    assert_eq!(fs::read(dir.join("after")).unwrap(), b"served");
}

on_both_forms!(
    a_file_in_a_composite_directory_lays_each_extent_on_its_component,
    setstripe_lays_out_files_and_subdirectories_inherit,
    composite_requests_that_cannot_be_met_are_refused,
);
