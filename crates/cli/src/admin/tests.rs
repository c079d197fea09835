//! The values the mount's virtual xattrs read (`nacre_fuse::xattr_json`, with their
//! `version`) still parse in the commands, and what the commands set the mount takes.

use super::*;
use nacre_fuse::xattr_json::{
    self, lmv_default_value, lmv_value, lov_value, parse_set, versioned, VERSION_KEY,
};
use nacre_types::dirstripe::{DirDefault, DirHash, DirStripe};
use nacre_types::layout::StripeSpec;
use nacre_types::{Fid, Layout, ObjectId, PoolName, StripeObject};
use nacre_wire::mds::LayoutInfo;

#[test]
fn layouts_read_with_a_version_print_as_before() {
    let file = LayoutInfo::File(Layout {
        stripe_size: 1 << 20,
        objects: vec![StripeObject {
            ost: 3,
            object: ObjectId {
                seq: 0x100000000,
                id: 42,
            },
        }],
        pool: PoolName::new("flash").unwrap(),
        generation: 0,
    });
    let v = lov_value(&file);
    assert_eq!(v[VERSION_KEY], 1);
    let s = format_layout(Path::new("/m/f"), &v);
    for line in [
        "lmm_stripe_count:  1\n",
        "lmm_stripe_size:   1048576\n",
        "lmm_pattern:       raid0\n",
        "lmm_stripe_offset: 3\n",
        "lmm_pool:          flash\n",
    ] {
        assert!(s.contains(line), "{line:?} in {s}");
    }
    let object = format!(
        "\t{:>6}\t{:>14}\t{:>#14x}\t{:>14}\n",
        3u64, 42u64, 42u64, 0x100000000u64
    );
    assert!(s.contains(&object), "{s}");
    let dir = LayoutInfo::Dir(Some(StripeSpec {
        stripe_count: 2,
        stripe_size: 65536,
        start_ost: -1,
        pool: PoolName::NONE,
    }));
    let s = format_layout(Path::new("/m/d"), &lov_value(&dir));
    assert!(
        s.contains(
            "stripe_count:  2 stripe_size:   65536 pattern:       raid0 stripe_offset: -1\n"
        ),
        "{s}"
    );
    let s = format_layout(Path::new("/m/d"), &lov_value(&LayoutInfo::Dir(None)));
    assert!(s.contains("(file system default)"), "{s}");
    let s = format_layout(Path::new("/m/p"), &lov_value(&LayoutInfo::None));
    assert!(s.contains("(no layout)"), "{s}");
}

#[test]
fn directory_values_read_with_a_version_print_as_before() {
    let shards = vec![Fid::new(0x200000400, 1), Fid::new(0x240000400, 1)];
    let stripe = DirStripe {
        hash: DirHash::Fnv1a64,
        shards: shards.clone(),
    };
    let v = lmv_value(shards[0], Some(&stripe));
    assert_eq!(v[VERSION_KEY], 1);
    let mdt = u64::from(shards[0].mdt_index());
    assert_eq!(lmv_place(&v), (mdt, 2));
    let s = format_dirstripe(&v);
    let head = format!("lmv_stripe_count: 2 lmv_stripe_offset: {mdt} lmv_hash_type: fnv_1a_64\n");
    assert!(s.starts_with(&head), "{s}");
    assert!(s.contains(&shards[1].to_string()), "{s}");
    let plain = lmv_value(Fid::ROOT, None);
    assert_eq!(lmv_place(&plain), (u64::from(Fid::ROOT.mdt_index()), 0));
    let d = DirDefault {
        count: 2,
        start: u32::MAX,
        hash: DirHash::AllChar,
        max_inherit: 3,
    };
    assert_eq!(
        format_dir_default(&lmv_default_value(Some(&d))),
        "lmv_stripe_count: 2 lmv_stripe_offset: -1 lmv_hash_type: all_char lmv_max_inherit: 3"
    );
    assert_eq!(format_dir_default(&lmv_default_value(None)), "no default");
}

#[test]
fn usage_read_with_a_version_prints_as_before() {
    let df = versioned(serde_json::json!({
        "fsname": "demo",
        "mgs": "127.0.0.1:7000@tcp",
        "targets": [{
            "name": "demo-OST0000", "bytes_total": 4096, "bytes_free": 1024,
            "bytes_avail": 1024, "files_total": 0, "files_free": 0,
        }],
        "pools": [{ "name": "flash", "osts": [0] }],
    }));
    assert_eq!(df[VERSION_KEY], 1);
    assert_eq!(target_count(&df, "-OST"), 1);
    assert_eq!(pool_members(&df, "flash"), Some(vec![0]));
    let s = format_df(Path::new("/m"), &df, false, false);
    assert!(s.contains("demo-OST0000_UUID"), "{s}");
}

/// What the commands set is taken by the mount's setters: no key they refuse.
#[test]
fn values_the_commands_set_are_taken_by_the_mount() {
    let set = |xattr: &str, v: Value, keys: &[&str]| {
        assert_eq!(v[VERSION_KEY], 1, "{v}");
        parse_set(xattr, v.to_string().as_bytes(), keys)
            .unwrap_or_else(|e| panic!("{xattr} {v}: {e}"));
    };
    set(
        XATTR_MKDIR,
        mkdir_value("d", -1, 0o755, None),
        xattr_json::MKDIR_SET_KEYS,
    );
    set(
        XATTR_MKDIR,
        mkdir_value("d", 0, 0o755, Some((2, "all_char"))),
        xattr_json::MKDIR_SET_KEYS,
    );
    set(
        XATTR_MIGRATE,
        migrate_value("d", 1),
        xattr_json::MIGRATE_SET_KEYS,
    );
    set(
        XATTR_LMV_DEFAULT,
        dir_default_value(None),
        xattr_json::LMV_DEFAULT_SET_KEYS,
    );
    let args = DirDefaultArgs {
        count: 2,
        start: -1,
        hash: None,
        max_inherit: 3,
    };
    set(
        XATTR_LMV_DEFAULT,
        dir_default_value(Some(&args)),
        xattr_json::LMV_DEFAULT_SET_KEYS,
    );
    set(
        XATTR_LOV,
        setstripe_value(2, 1 << 20, -1, "flash"),
        xattr_json::LOV_SET_KEYS,
    );
}
