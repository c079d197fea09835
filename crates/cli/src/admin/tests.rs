//! The values the mount's virtual xattrs read (`nacre_fuse::xattr_json`, with their
//! `version`) still parse in the commands, and what the commands set the mount takes.

use super::*;
use nacre_fuse::xattr_json::{
    self, lmv_default_value, lmv_value, lov_value, parse_set, versioned, VERSION_KEY,
};
use nacre_types::dirstripe::{DirDefault, DirHash, DirStripe};
use nacre_types::layout::{
    Component, ComponentKind, ComponentSpec, LayoutSpec, StripeSpec, EXTENT_EOF,
};
use nacre_types::{Fid, Layout, ObjectId, PoolName, StripeObject};
use nacre_wire::mds::LayoutInfo;
use serde_json::json;

#[test]
fn layouts_read_with_a_version_print_as_before() {
    let file = plain_file();
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
    let dir = LayoutInfo::Dir(Some(LayoutSpec::plain(StripeSpec {
        stripe_count: 2,
        stripe_size: 65536,
        start_ost: -1,
        pool: PoolName::NONE,
    })));
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
    set(
        XATTR_LOV,
        composite_value(&pfl_components()),
        xattr_json::LOV_SET_KEYS,
    );
}

const M: u64 = 1 << 20;
const G: u64 = 1 << 30;

/// A plain file layout: one object, on OST 3, in pool `flash`.
fn plain_file() -> LayoutInfo {
    let object = StripeObject {
        ost: 3,
        object: ObjectId {
            seq: 0x100000000,
            id: 42,
        },
    };
    LayoutInfo::File(Layout::raid0(
        1 << 20,
        vec![object],
        PoolName::new("flash").unwrap(),
    ))
}

/// What `lfs getstripe` prints of [`plain_file`] (and always has).
const PLAIN_FILE: &str = concat!(
    "/m/f\n",
    "lmm_stripe_count:  1\n",
    "lmm_stripe_size:   1048576\n",
    "lmm_pattern:       raid0\n",
    "lmm_stripe_offset: 3\n",
    "lmm_pool:          flash\n",
    "\tobdidx\t\t objid\t\t objid\t\t group\n",
    "\t     3\t            42\t          0x2a\t    4294967296\n",
);

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

fn component(end: Option<u64>, count: i64, size: u64, index: i64, pool: &str) -> ComponentArgs {
    ComponentArgs {
        end,
        count,
        size,
        index,
        pool: pool.to_string(),
        on_mdt: false,
    }
}

/// `-E 4M -c 1 -E 1G -c 4 -S 4M -E -1 -c -1 -p capacity`.
fn pfl_components() -> Vec<ComponentArgs> {
    vec![
        component(Some(4 * M), 1, 0, -1, ""),
        component(Some(G), 4, 4 * M, -1, ""),
        component(None, -1, 0, -1, "capacity"),
    ]
}

#[test]
fn a_pfl_command_line_parses_into_its_components() {
    let line = strings(&[
        "-E", "4M", "-c", "1", "-E", "1G", "-c", "4", "-S", "4M", "-E", "-1", "-c", "-1", "-p",
        "capacity",
    ]);
    assert_eq!(parse_components(&line), Ok(pfl_components()));
    // Long names, `eof`; nothing carries over from one component to the next.
    let line = strings(&[
        "--component-end",
        "64K",
        "--stripe-index",
        "2",
        "--stripe-size",
        "64K",
        "--component-end",
        "eof",
        "--pool",
        "flash",
    ]);
    assert_eq!(
        parse_components(&line),
        Ok(vec![
            component(Some(64 << 10), 0, 64 << 10, 2, ""),
            component(None, 0, 0, -1, "flash"),
        ])
    );
    // One component to the end of the file.
    assert_eq!(
        parse_components(&strings(&["-E", "-1", "-c", "2"])),
        Ok(vec![component(None, 2, 0, -1, "")])
    );
    // Data on the MDT: `-E 64K -L mdt -E -1 -c 4`.
    let mut dom = component(Some(64 << 10), 0, 0, -1, "");
    dom.on_mdt = true;
    assert_eq!(
        parse_components(&strings(&["-E", "64K", "-L", "mdt", "-E", "-1", "-c", "4"])),
        Ok(vec![dom, component(None, 4, 0, -1, "")])
    );
}

#[test]
fn a_component_on_the_mdt_is_the_first_at_most_1m_and_unstriped() {
    let refused = |args: &[&str]| match parse_components(&strings(args)) {
        Err(e) => e,
        Ok(c) => panic!("{args:?} parsed as {c:?}"),
    };
    assert_eq!(
        refused(&["-E", "64K", "-E", "1M", "-L", "mdt", "-E", "-1"]),
        "component 2 (64K..1M): -L mdt: only the first component may be on the MDT"
    );
    assert_eq!(
        refused(&["-E", "2M", "-L", "mdt", "-E", "-1"]),
        "component 1 (0..2M): -L mdt: a component on the MDT ends at most at 1048576 (-E 1M)"
    );
    assert_eq!(
        refused(&["-E", "1M", "-L", "mdt", "-c", "2", "-E", "-1"]),
        "component 1 (0..1M): -L mdt: a component on the MDT takes no -c, -S, -i or -p"
    );
    assert_eq!(
        refused(&["-E", "1M", "-L", "ssd", "-E", "-1"]),
        "component 1: -L ssd: a layout is mdt or raid0"
    );
}

#[test]
fn bad_pfl_command_lines_are_refused_naming_what_is_wrong() {
    let refused = |args: &[&str]| match parse_components(&strings(args)) {
        Err(e) => e,
        Ok(c) => panic!("{args:?} parsed as {c:?}"),
    };
    let e = refused(&["-c", "1", "-E", "1M", "-E", "-1"]);
    assert!(
        e.starts_with("-c/-S/-i/-p/-L before the first -E (-c 1)"),
        "{e}"
    );
    assert_eq!(
        refused(&["-E", "1M", "-c", "1", "-E", "1G"]),
        "the last component ends at 1G: it must end at -1 (-E -1, the end of the file)"
    );
    assert_eq!(
        refused(&["-E", "1G", "-E", "1M", "-E", "-1"]),
        "component 2 (1G..1M): end 1048576 does not rise above its start 1073741824 \
         (ends must rise)"
    );
    assert_eq!(
        refused(&["-E", "1M", "-E", "1M", "-E", "-1"]),
        "component 2 (1M..1M): end 1048576 does not rise above its start 1048576 \
         (ends must rise)"
    );
    assert_eq!(
        refused(&["-E", "100000", "-E", "-1"]),
        "component 1 (0..100000): end 100000 is not a multiple of 64 KiB"
    );
    assert_eq!(
        refused(&["-E", "1M", "-S", "4M", "-E", "-1"]),
        "component 1 (0..1M): end 1048576 is not a multiple of its stripe size 4194304"
    );
    // The next component's start likewise: 1M is not on a 4M stripe.
    assert_eq!(
        refused(&[
            "-E", "1M", "-c", "1", "-E", "1G", "-c", "4", "-S", "4M", "-E", "-1", "-c", "-1",
        ]),
        "component 2 (1M..1G): start 1048576 is not a multiple of its stripe size 4194304"
    );
    assert_eq!(
        refused(&["-E", "-1", "-E", "1G"]),
        "component 1 (0..EOF): only the last component may end at -1 (the end of the file)"
    );
    assert_eq!(
        refused(&["-E", "-1", "-S", "1000"]),
        "component 1 (0..EOF): stripe size 1000 must be a multiple of 64 KiB, at most 4 GiB"
    );
    assert_eq!(
        refused(&["-E", "-1", "-c", "1", "-c", "2"]),
        "component 1: -c given twice"
    );
    assert_eq!(
        refused(&["-E", "-1", "-c", "x"]),
        "component 1: bad stripe count 'x'"
    );
    assert_eq!(refused(&["-E", "1M", "-c"]), "-c needs a value");
    assert_eq!(
        refused(&["-E", "-1", "-x", "1"]),
        "-x is not a component option (-E, -c, -S, -i, -p, -L)"
    );
    let e = refused(&["-E", "-2"]);
    assert!(e.starts_with("-E -2: an end is a size"), "{e}");
    assert_eq!(
        refused(&[]),
        format!(
            "a composite layout has 1 to {} components (-E END ...), not 0",
            nacre_types::layout::COMPONENTS_MAX
        )
    );
}

/// A `df` value of fs `nacre`: an MDT, 4 OSTs, pools `flash` (OSTs 1, 2) and `capacity`
/// (OSTs 0, 3).
fn df_of_4_osts() -> Value {
    let targets: Vec<Value> = ["MDT0000", "OST0000", "OST0001", "OST0002", "OST0003"]
        .iter()
        .map(|t| json!({ "name": format!("nacre-{t}") }))
        .collect();
    json!({
        "fsname": "nacre",
        "targets": targets,
        "pools": [{ "name": "flash", "osts": [1, 2] }, { "name": "capacity", "osts": [0, 3] }],
    })
}

#[test]
fn each_component_is_checked_against_the_file_system() {
    let df = df_of_4_osts();
    let mut pfl = pfl_components();
    pfl[2].pool = "nacre.capacity".to_string();
    assert_eq!(check_components(&df, &pfl), Ok(pfl_components()));
    let wide = [
        component(Some(M), 1, 0, -1, ""),
        component(Some(G), 9, 0, -1, ""),
        component(None, -1, 0, -1, ""),
    ];
    assert_eq!(
        check_components(&df, &wide),
        Err("component 2 (1M..1G): stripe count 9 exceeds the 4 OSTs of fs 'nacre'".to_string())
    );
    let cases = [
        (
            component(None, 0, 0, -1, "nosuch"),
            "component 2 (1M..EOF): pool nacre.nosuch does not exist",
        ),
        (
            component(None, 3, 0, -1, "flash"),
            "component 2 (1M..EOF): stripe count 3 exceeds the 2 OSTs of pool nacre.flash",
        ),
        (
            component(None, 1, 0, 0, "flash"),
            "component 2 (1M..EOF): OST index 0 is not in pool nacre.flash ([1, 2])",
        ),
        (
            component(None, 1, 0, 7, ""),
            "component 2 (1M..EOF): start OST index 7 does not exist (fs 'nacre' has 4 OSTs)",
        ),
        (
            component(None, -2, 0, -1, ""),
            "component 2 (1M..EOF): stripe count -2 is invalid (use -1 for all OSTs)",
        ),
    ];
    for (last, why) in cases {
        let components = [component(Some(M), 1, 0, -1, ""), last];
        assert_eq!(check_components(&df, &components), Err(why.to_string()));
    }
}

#[test]
fn setstripe_sets_the_plain_form_without_e_and_the_composite_form_with_it() {
    assert_eq!(
        setstripe_value(2, M, -1, "flash"),
        json!({
            "version": 1, "stripe_count": 2, "stripe_size": 1048576, "start_ost": -1,
            "pool": "flash",
        })
    );
    assert_eq!(
        composite_value(&pfl_components()),
        json!({
            "version": 1,
            "components": [
                { "end": 4194304, "stripe_count": 1, "stripe_size": 0, "start_ost": -1,
                  "pool": "" },
                { "end": 1073741824, "stripe_count": 4, "stripe_size": 4194304,
                  "start_ost": -1, "pool": "" },
                { "end": -1, "stripe_count": -1, "stripe_size": 0, "start_ost": -1,
                  "pool": "capacity" },
            ],
        })
    );
}

/// A composite file: 0..4M on OST 0 (instantiated, pool `flash`), 4M..EOF over every OST
/// in 4 MiB stripes (not yet).
fn pfl_file() -> LayoutInfo {
    let first = Component {
        start: 0,
        end: 4 << 20,
        stripe_size: 1 << 20,
        stripe_count: 1,
        start_ost: -1,
        pool: PoolName::new("flash").unwrap(),
        objects: vec![StripeObject {
            ost: 0,
            object: ObjectId {
                seq: 0x100000000,
                id: 2,
            },
        }],
        kind: ComponentKind::Osts,
    };
    let rest = Component {
        start: 4 << 20,
        end: EXTENT_EOF,
        stripe_size: 4 << 20,
        stripe_count: -1,
        start_ost: -1,
        pool: PoolName::NONE,
        objects: Vec::new(),
        kind: ComponentKind::Osts,
    };
    LayoutInfo::File(Layout {
        components: vec![first, rest],
        generation: 3,
    })
}

#[test]
fn a_composite_file_prints_in_lustres_composite_form() {
    let expected = concat!(
        "/m/f\n",
        "  lcm_layout_gen:    3\n",
        "  lcm_mirror_count:  1\n",
        "  lcm_entry_count:   2\n",
        "    lcme_id:             1\n",
        "    lcme_flags:          init\n",
        "    lcme_extent.e_start: 0\n",
        "    lcme_extent.e_end:   4194304\n",
        "      lmm_stripe_count:  1\n",
        "      lmm_stripe_size:   1048576\n",
        "      lmm_pattern:       raid0\n",
        "      lmm_layout_gen:    0\n",
        "      lmm_stripe_offset: 0\n",
        "      lmm_pool:          flash\n",
        "      lmm_objects:\n",
        "      - 0: { l_ost_idx: 0, l_fid: [0x100000000:0x2:0x0] }\n",
        "    lcme_id:             2\n",
        "    lcme_flags:          0\n",
        "    lcme_extent.e_start: 4194304\n",
        "    lcme_extent.e_end:   EOF\n",
        "      lmm_stripe_count:  -1\n",
        "      lmm_stripe_size:   4194304\n",
        "      lmm_pattern:       raid0\n",
        "      lmm_layout_gen:    0\n",
        "      lmm_stripe_offset: -1\n",
    );
    assert_eq!(
        format_layout(Path::new("/m/f"), &lov_value(&pfl_file())),
        expected
    );
}

/// A directory's composite default, as the mount reads it.
fn pfl_default() -> Value {
    json!({
        "version": 1,
        "kind": "dir",
        "default": {
            "stripe_count": 1, "stripe_size": 0, "start_ost": -1, "pool": "",
            "components": [
                { "start": 0, "end": 4194304, "stripe_count": 1, "stripe_size": 0,
                  "start_ost": -1, "pool": "" },
                { "start": 4194304, "end": -1, "stripe_count": -1, "stripe_size": 4194304,
                  "start_ost": 2, "pool": "capacity" },
            ],
        },
    })
}

#[test]
fn a_composite_directory_default_prints_in_lustres_composite_form() {
    let expected = concat!(
        "/m/d\n",
        "  lcm_layout_gen:    0\n",
        "  lcm_mirror_count:  1\n",
        "  lcm_entry_count:   2\n",
        "    lcme_id:             N/A\n",
        "    lcme_flags:          0\n",
        "    lcme_extent.e_start: 0\n",
        "    lcme_extent.e_end:   4194304\n",
        "      lmm_stripe_count:  1\n",
        "      lmm_stripe_size:   0\n",
        "      lmm_pattern:       raid0\n",
        "      lmm_layout_gen:    0\n",
        "      lmm_stripe_offset: -1\n",
        "    lcme_id:             N/A\n",
        "    lcme_flags:          0\n",
        "    lcme_extent.e_start: 4194304\n",
        "    lcme_extent.e_end:   EOF\n",
        "      lmm_stripe_count:  -1\n",
        "      lmm_stripe_size:   4194304\n",
        "      lmm_pattern:       raid0\n",
        "      lmm_layout_gen:    0\n",
        "      lmm_stripe_offset: 2\n",
        "      lmm_pool:          capacity\n",
    );
    let d = Path::new("/m/d");
    assert_eq!(format_layout(d, &pfl_default()), expected);
    // The mount's value of the same default prints the same.
    let stripe = |stripe_count, stripe_size, start_ost, pool| StripeSpec {
        stripe_count,
        stripe_size,
        start_ost,
        pool,
    };
    let spec = LayoutSpec {
        components: vec![
            ComponentSpec {
                end: 4 << 20,
                stripe: stripe(1, 0, -1, PoolName::NONE),
                kind: ComponentKind::Osts,
            },
            ComponentSpec {
                end: EXTENT_EOF,
                stripe: stripe(-1, 4 << 20, 2, PoolName::new("capacity").unwrap()),
                kind: ComponentKind::Osts,
            },
        ],
    };
    assert_eq!(
        format_layout(d, &lov_value(&LayoutInfo::Dir(Some(spec)))),
        expected
    );
}

#[test]
fn plain_layouts_print_as_they_always_have() {
    let f = Path::new("/m/f");
    assert_eq!(format_layout(f, &lov_value(&plain_file())), PLAIN_FILE);
    // A value without components (an older mount's) and one of a single component.
    let old = json!({
        "version": 1, "kind": "file", "stripe_count": 1, "stripe_size": 1048576,
        "pool": "flash", "pattern": "raid0",
        "objects": [{ "ost": 3, "seq": 0x100000000u64, "id": 42 }],
    });
    assert_eq!(format_layout(f, &old), PLAIN_FILE);
    let mut one = old.clone();
    one["components"] = json!([{
        "start": 0, "end": -1, "stripe_count": 1, "stripe_size": 1048576, "start_ost": -1,
        "pool": "flash", "instantiated": true,
        "objects": [{ "ost": 3, "seq": 0x100000000u64, "id": 42 }],
    }]);
    assert_eq!(format_layout(f, &one), PLAIN_FILE);
    // A directory's plain default, with components or without, and none.
    let d = Path::new("/m/d");
    let line = "/m/d\nstripe_count:  2 stripe_size:   65536 pattern:       raid0 \
                stripe_offset: -1 pool:          flash\n";
    let mut dir = json!({
        "version": 1, "kind": "dir",
        "default": { "stripe_count": 2, "stripe_size": 65536, "start_ost": -1, "pool": "flash" },
    });
    assert_eq!(format_layout(d, &dir), line);
    dir["default"]["components"] = json!([{
        "start": 0, "end": -1, "stripe_count": 2, "stripe_size": 65536, "start_ost": -1,
        "pool": "flash",
    }]);
    assert_eq!(format_layout(d, &dir), line);
    assert_eq!(
        format_layout(d, &json!({ "version": 1, "kind": "dir", "default": null })),
        "/m/d\nstripe_count:  0 stripe_size:   0 pattern:       raid0 stripe_offset: -1 \
         (file system default)\n"
    );
}
