//! Striping on both forms: layouts set and shown with the CLI, data verified on the OSTs themselves.

use nacre_testkit::{nacre, nacre_ok, on_both_forms, pattern, Form, TestFs};
use serde_json::Value;
use std::fs;
use std::path::Path;

fn layout(path: &Path) -> Value {
    serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap()
}

/// Rebuilds a file from its objects on the OSTs' local file systems.
fn rebuild_from_osts(data_dir: &Path, l: &Value, size: usize) -> Vec<u8> {
    let stripe_size = l["stripe_size"].as_u64().unwrap() as usize;
    let objects = l["objects"].as_array().unwrap();
    let count = objects.len();
    let blobs: Vec<Vec<u8>> = objects
        .iter()
        .map(|o| {
            let (ost, seq, id) = (
                o["ost"].as_u64().unwrap(),
                o["seq"].as_u64().unwrap(),
                o["id"].as_u64().unwrap(),
            );
            let p = data_dir.join(format!("ost{ost}/O/{seq}/d{}/{id}", id % 32));
            fs::read(&p).unwrap_or_default()
        })
        .collect();
    let mut out = vec![0u8; size];
    for (off, byte) in out.iter_mut().enumerate() {
        let unit = off / stripe_size;
        let stripe = unit % count;
        let obj_off = (unit / count) * stripe_size + off % stripe_size;
        *byte = blobs[stripe].get(obj_off).copied().unwrap_or(0);
    }
    out
}

fn striped_file_is_spread_over_osts(form: Form) {
    let fs = TestFs::start(form, 4);
    let dir = fs.path("wide");
    fs::create_dir(&dir).unwrap();
    nacre_ok(&["setstripe", "-c", "4", "-S", "64K", dir.to_str().unwrap()]);
    let d = layout(&dir);
    assert_eq!(d["default"]["stripe_count"], 4);
    let f = dir.join("file");
    let data = pattern(3, (1 << 20) + 12345);
    // Synced: the objects are read on the OSTs' disks below, and a close leaves write-behind
    // to the file's release, which may not have run when close(2) returns.
    nacre_tests::write_synced(&f, &data);
    let l = layout(&f);
    assert_eq!(l["stripe_count"], 4);
    assert_eq!(l["stripe_size"], 65536);
    let mut osts: Vec<u64> = l["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["ost"].as_u64().unwrap())
        .collect();
    osts.sort();
    assert_eq!(osts, vec![0, 1, 2, 3]);
    // Every OST holds a quarter of the data, and the objects rebuild the file exactly.
    for o in l["objects"].as_array().unwrap() {
        let (ost, seq, id) = (
            o["ost"].as_u64().unwrap(),
            o["seq"].as_u64().unwrap(),
            o["id"].as_u64().unwrap(),
        );
        let len = fs::metadata(fs.data.join(format!("ost{ost}/O/{seq}/d{}/{id}", id % 32)))
            .unwrap()
            .len();
        assert!(len >= 256 * 1024, "OST {ost} holds only {len} bytes");
    }
    let rebuilt = rebuild_from_osts(&fs.data, &l, data.len());
    // On a mismatch, where it is and what the mount reads there (not a megabyte of bytes).
    let first_wrong = rebuilt.iter().zip(&data).position(|(a, b)| a != b);
    assert!(
        first_wrong.is_none(),
        "the objects differ from the file from byte {first_wrong:?} (of {}); the mount reads \
         it back {}; layout {l}",
        data.len(),
        match fs::read(&f).unwrap() == data {
            true => "whole",
            false => "wrong too",
        }
    );
    assert!(
        fs::read(&f).unwrap() == data,
        "the mount reads the file back wrong"
    );
    let text = nacre_ok(&["getstripe", f.to_str().unwrap()]);
    assert!(
        text.contains("lmm_stripe_count:  4") && text.contains("obdidx"),
        "{text}"
    );
}

fn stripe_options_and_errors(form: Form) {
    let fs = TestFs::start(form, 4);
    let all = fs.path("all");
    nacre_ok(&["setstripe", "-c", "-1", all.to_str().unwrap()]);
    fs::write(&all, b"x").unwrap();
    assert_eq!(layout(&all)["stripe_count"], 4);

    let start = fs.path("start2");
    nacre_ok(&["setstripe", "-c", "2", "-i", "2", start.to_str().unwrap()]);
    let l = layout(&start);
    let osts: Vec<u64> = l["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["ost"].as_u64().unwrap())
        .collect();
    assert_eq!(osts, vec![2, 3]);

    let out = nacre(&["setstripe", "-c", "9", fs.path("nine").to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stripe count 9 exceeds the 4 OSTs of fs 'nacre'"),
        "{err}"
    );
    assert!(
        !fs.path("nine").exists(),
        "a refused setstripe must not create the file"
    );

    let bad = nacre(&["setstripe", "-S", "1000", fs.path("odd").to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("multiple of 64 KiB"));

    fs::write(fs.path("full"), b"data").unwrap();
    let busy = nacre(&["setstripe", "-c", "2", fs.path("full").to_str().unwrap()]);
    assert!(!busy.status.success());
    assert!(String::from_utf8_lossy(&busy.stderr).contains("already holds data"));
}

fn default_layout_round_robins_and_df_lists_targets(form: Form) {
    let fs = TestFs::start(form, 4);
    let mut used = std::collections::BTreeSet::new();
    for i in 0..8 {
        let f = fs.path(&format!("f{i}"));
        fs::write(&f, b"x").unwrap();
        let l = layout(&f);
        assert_eq!(l["stripe_count"], 1);
        assert_eq!(l["stripe_size"], 1 << 20);
        used.insert(l["objects"][0]["ost"].as_u64().unwrap());
    }
    assert_eq!(
        used.len(),
        4,
        "balanced OSTs are used round-robin: {used:?}"
    );
    let df = nacre_ok(&["df", fs.mnt.to_str().unwrap()]);
    for t in [
        "nacre-MDT0000_UUID",
        "nacre-OST0000_UUID",
        "nacre-OST0003_UUID",
        "filesystem_summary:",
    ] {
        assert!(df.contains(t), "{df}");
    }
    let dfi = nacre_ok(&["df", "-i", fs.mnt.to_str().unwrap()]);
    assert!(dfi.contains("Inodes"), "{dfi}");
    let dfh = nacre_ok(&["df", "-h", fs.mnt.to_str().unwrap()]);
    assert!(dfh.contains('G') || dfh.contains('M'), "{dfh}");
}

/// A stat after an empty file was laid out again (by another client) sees the size of the new
/// objects: the mount glimpses the layout it saw before while the MDT answers, and must notice
/// it changed.
fn stat_follows_a_layout_changed_after_it_was_seen(form: Form) {
    let fs = TestFs::start(form, 4);
    let other_mnt = fs.scratch().join("other");
    fs::create_dir_all(&other_mnt).unwrap();
    let _other = fs.mount_another(&other_mnt, &[]);
    let f = fs.path("relaid");
    let g = other_mnt.join("relaid");
    fs::write(&f, b"").unwrap();
    // This mount sees (and remembers) the one-stripe layout; an fstat asks for attributes
    // with no lookup first.
    let held = fs::File::open(&f).unwrap();
    assert_eq!(held.metadata().unwrap().len(), 0);
    let before = layout(&f);
    // The other lays the file out again and writes it.
    nacre_ok(&["setstripe", "-c", "3", "-S", "64K", g.to_str().unwrap()]);
    let data = pattern(7, 300_000);
    fs::write(&g, &data).unwrap();
    for _ in 0..3 {
        assert_eq!(held.metadata().unwrap().len(), 300_000);
    }
    assert_eq!(fs::metadata(&f).unwrap().len(), 300_000);
    let after = layout(&f);
    assert_ne!(before["objects"], after["objects"]);
    assert_eq!(fs::read(&f).unwrap(), data);
    assert_eq!(rebuild_from_osts(&fs.data, &after, data.len()), data);
}

/// A large write goes out as many RPCs at once (`--max-rpc-size 64K`: a 4 MiB write is 64
/// of them); the OST writes the ones that fall in one object side by side (they hold
/// disjoint chunks), and the file and its object hold every byte as written. On the
/// networked form: the pieces come in over TCP to a separate server process.
#[test]
fn the_pieces_of_a_large_write_go_to_one_object_together() {
    use std::os::unix::fs::OpenOptionsExt;
    let fs = TestFs::start_with(
        Form::Networked,
        nacre_testkit::Spec::osts(1).mount_args(&["--max-rpc-size", "64K"]),
    );
    // The process serving the OST (the others have no such parameter).
    let asked = |p: u32| {
        nacre(&[
            "ctl",
            "--pid",
            &p.to_string(),
            "get_param",
            "-n",
            "osd.*.writes_together",
        ])
    };
    let oss: Vec<u32> = fs
        .server_pids()
        .into_iter()
        .filter(|&p| asked(p).status.success())
        .collect();
    assert_eq!(oss.len(), 1, "one process serves the OST");
    let together = || -> u64 {
        oss.iter()
            .map(|&p| {
                nacre_testkit::get_param(Some(p), "osd.*.writes_together")
                    .lines()
                    .filter_map(|l| l.trim().parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    };
    assert_eq!(together(), 0);
    let mut files = 0u64;
    // Files until two pieces have been written together (the first does on any machine
    // where the OST's service threads can run while its network thread reads).
    while together() == 0 {
        assert!(files < 20, "no two pieces of a write were written together");
        let f = fs.path(&format!("big{files}"));
        nacre_ok(&["setstripe", "-c", "1", "-S", "4M", f.to_str().unwrap()]);
        let data = pattern(files, 16 << 20);
        let mut out = fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&f)
            .unwrap();
        let mut buf = nacre_types::AlignedBuf::zeroed(4 << 20);
        for part in data.chunks(4 << 20) {
            buf.copy_from_slice(part);
            std::io::Write::write_all(&mut out, &buf).unwrap();
        }
        drop(out);
        assert_eq!(
            fs::read(&f).unwrap(),
            data,
            "file {files} through the mount"
        );
        assert_eq!(
            rebuild_from_osts(&fs.data, &layout(&f), data.len()),
            data,
            "file {files} on the OST"
        );
        files += 1;
    }
}

on_both_forms!(
    stat_follows_a_layout_changed_after_it_was_seen,
    striped_file_is_spread_over_osts,
    stripe_options_and_errors,
    default_layout_round_robins_and_df_lists_targets,
);
