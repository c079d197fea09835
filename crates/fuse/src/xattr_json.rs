//! The JSON values of the virtual xattrs (docs/formats.md, "Virtual xattrs"):
//! `user.nacre.lov`, `.lmv`, `.lmv_default` and `.df` read, `.lov`, `.lmv_default`,
//! `.mkdir` and `.migrate` set.
//!
//! Every value read is an object carrying `"version": 1` ([`XATTR_JSON_VERSION`]); readers
//! (the `nacre` commands) look keys up by name and ignore the others. A value set may carry
//! it too (absent: 1). A setter refuses, as `ClientError::Config` (which the mount logs and
//! answers `EINVAL`), a value that is not a JSON object, a key it does not know, a `version`
//! newer than this mount's, and a `kind` or `pattern` it does not know: what a mount does not
//! understand is never applied as the part it does (a composite layout set through an older
//! mount is refused, not made a plain one).

use nacre_client::ClientError;
use nacre_types::dirstripe::{DirDefault, DirStripe};
use nacre_types::layout::{ComponentKind, ComponentSpec, LayoutSpec, StripeSpec, EXTENT_EOF};
use nacre_types::{Fid, PoolName, StripeObject};
use nacre_wire::mds::LayoutInfo;
use serde_json::{json, Value};

/// The version of the virtual xattrs' JSON values this mount writes, and the newest it
/// takes in a value set.
pub const XATTR_JSON_VERSION: u64 = 1;

/// The key every value carries its version in.
pub const VERSION_KEY: &str = "version";

/// Keys a `user.nacre.lov` value set may have (besides `version`).
pub const LOV_SET_KEYS: &[&str] = &[
    "kind",
    "pattern",
    "stripe_count",
    "stripe_size",
    "start_ost",
    "pool",
    "components",
];
/// Keys each of a composite `user.nacre.lov` value's `components` may have: its `end`
/// (`-1`: the end of the file) and its striping.
pub const LOV_COMPONENT_SET_KEYS: &[&str] = &[
    "end",
    "pattern",
    "stripe_count",
    "stripe_size",
    "start_ost",
    "pool",
];
/// The `pattern`s a component of a `user.nacre.lov` value may name: striped over OSTs, or
/// on the MDT (`setstripe -L mdt`, data on the MDT).
pub const LOV_COMPONENT_PATTERNS: &[&str] = &["raid0", "mdt"];
/// The `kind`s a `user.nacre.lov` value set may name (as read: a file's layout, a
/// directory's default).
pub const LOV_KINDS: &[&str] = &["file", "dir"];
/// The `pattern`s a `user.nacre.lov` value set may name.
pub const LOV_PATTERNS: &[&str] = &["raid0", "composite"];
/// Keys a `user.nacre.mkdir` value may have (besides `version`).
pub const MKDIR_SET_KEYS: &[&str] = &["name", "mdt", "mode", "count", "hash"];
/// Keys a `user.nacre.migrate` value may have (besides `version`).
pub const MIGRATE_SET_KEYS: &[&str] = &["name", "mdt"];
/// Keys a `user.nacre.lmv_default` value set may have (besides `version`).
pub const LMV_DEFAULT_SET_KEYS: &[&str] = &["count", "start", "hash", "max_inherit"];

/// `v` (an object) with its `version` key.
pub fn versioned(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert(VERSION_KEY.to_string(), Value::from(XATTR_JSON_VERSION));
    }
    v
}

fn object_json(o: &StripeObject) -> Value {
    json!({ "ost": o.ost, "seq": o.object.seq, "id": o.object.id })
}

/// The `pattern` a component of kind `kind` is read with.
fn pattern_of(kind: ComponentKind) -> &'static str {
    match kind {
        ComponentKind::Osts => "raid0",
        ComponentKind::Mdt => "mdt",
    }
}

/// The `user.nacre.lov` value of a file's layout or a directory's default striping.
pub fn lov_value(info: &LayoutInfo) -> Value {
    versioned(match info {
        // The first component's striping at the top (a plain layout's whole), every
        // object, and each component with its extent (end -1: the end of the file).
        LayoutInfo::File(l) => json!({
            "kind": "file",
            "stripe_count": l.components[0].stripe_count,
            "stripe_size": l.components[0].stripe_size,
            "pool": l.components[0].pool.as_str(),
            "pattern": if l.components.len() == 1 { "raid0" } else { "composite" },
            "generation": l.generation,
            "objects": l.objects().map(object_json).collect::<Vec<_>>(),
            "components": l.components.iter().map(|c| json!({
                "start": c.start,
                "end": if c.end == EXTENT_EOF { -1 } else { c.end as i64 },
                "pattern": pattern_of(c.kind),
                "stripe_count": c.stripe_count,
                "stripe_size": c.stripe_size,
                "start_ost": c.start_ost,
                "pool": c.pool.as_str(),
                "instantiated": c.is_instantiated(),
                "objects": c.objects.iter().map(object_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        // The first component's request at the top (a plain default's whole), and each
        // component with its extent.
        LayoutInfo::Dir(spec) => json!({
            "kind": "dir",
            "default": spec.as_ref().map(|l| {
                let s = l.first();
                json!({
                    "stripe_count": s.stripe_count, "stripe_size": s.stripe_size,
                    "start_ost": s.start_ost, "pool": s.pool.as_str(),
                    "components": l.extents_with_kinds().map(|(start, end, s, kind)| json!({
                        "start": start,
                        "pattern": pattern_of(kind),
                        "end": if end == EXTENT_EOF { -1 } else { end as i64 },
                        "stripe_count": s.stripe_count, "stripe_size": s.stripe_size,
                        "start_ost": s.start_ost, "pool": s.pool.as_str(),
                    })).collect::<Vec<_>>(),
                })
            }),
        }),
        LayoutInfo::None => json!({ "kind": "none" }),
    })
}

/// The layout request a `user.nacre.lov` value set asks (parsed by [`parse_set`] with
/// [`LOV_SET_KEYS`]): plain from its `stripe_count`, `stripe_size`, `start_ost` and `pool`,
/// or composite from its `components` (each with its `end`, `-1` for the end of the file,
/// and those four keys), never both. A value of the wrong type, an unknown key in a
/// component, or a shape [`LayoutSpec::check`] refuses is `ClientError::Config`.
pub fn lov_spec(v: &Value) -> Result<LayoutSpec, ClientError> {
    let Some(components) = v.get("components") else {
        return stripe_spec(v).map(LayoutSpec::plain);
    };
    let bad = |why: &str| ClientError::Config(format!("bad user.nacre.lov value: {why}"));
    if ["stripe_count", "stripe_size", "start_ost", "pool"]
        .iter()
        .any(|k| v.get(k).is_some())
    {
        return Err(bad("components and stripe keys together"));
    }
    let list = components
        .as_array()
        .ok_or_else(|| bad("components is not a list"))?;
    let mut spec = LayoutSpec {
        components: Vec::with_capacity(list.len()),
    };
    for (i, c) in list.iter().enumerate() {
        let obj = c
            .as_object()
            .ok_or_else(|| bad(&format!("component {i} is not an object")))?;
        if let Some(k) = obj
            .keys()
            .find(|k| !LOV_COMPONENT_SET_KEYS.contains(&k.as_str()))
        {
            return Err(bad(&format!("component {i}: unknown key {k:?}")));
        }
        let end = match c.get("end").map(|e| (e.as_i64(), e.as_u64())) {
            Some((Some(-1), _)) => EXTENT_EOF,
            Some((_, Some(e))) => e,
            _ => return Err(bad(&format!("component {i}: end"))),
        };
        let kind = match c.get("pattern").map(|p| p.as_str()) {
            None | Some(Some("raid0")) => ComponentKind::Osts,
            Some(Some("mdt")) => ComponentKind::Mdt,
            _ => return Err(bad(&format!("component {i}: pattern"))),
        };
        spec.components.push(ComponentSpec {
            end,
            stripe: stripe_spec(c)?,
            kind,
        });
    }
    spec.check().map_err(|e| bad(&format!("{e}")))?;
    Ok(spec)
}

/// The stripe request of a value's (or a component's) `stripe_count`, `stripe_size`,
/// `start_ost` and `pool` (absent: inherited).
fn stripe_spec(v: &Value) -> Result<StripeSpec, ClientError> {
    let bad = |why: &str| ClientError::Config(format!("bad user.nacre.lov value: {why}"));
    // A value of another type is refused, not taken as the default.
    let field = |k: &str, default: i64| match v.get(k) {
        None => Ok(default),
        Some(x) => x.as_i64().ok_or_else(|| bad(k)),
    };
    Ok(StripeSpec {
        stripe_count: i32::try_from(field("stripe_count", 0)?).map_err(|_| bad("stripe_count"))?,
        stripe_size: u32::try_from(field("stripe_size", 0)?).map_err(|_| bad("stripe_size"))?,
        start_ost: i32::try_from(field("start_ost", -1)?).map_err(|_| bad("start_ost"))?,
        pool: match v.get("pool") {
            None => PoolName::NONE,
            Some(p) => match p.as_str() {
                None => return Err(bad("pool")),
                Some("") => PoolName::NONE,
                Some(p) => PoolName::new(p).map_err(|e| bad(&e.to_string()))?,
            },
        },
    })
}

/// The `user.nacre.lmv` value of directory `dir`, striped as `stripe` (None: not striped).
pub fn lmv_value(dir: Fid, stripe: Option<&DirStripe>) -> Value {
    versioned(match stripe {
        Some(s) => json!({
            "mdt": dir.mdt_index(),
            "stripe_count": s.shards.len(),
            "hash": s.hash.name(),
            "shards": s.shards.iter().map(|f| json!({
                "mdt": f.mdt_index(),
                "fid": f.to_string(),
            })).collect::<Vec<_>>(),
        }),
        None => json!({ "mdt": dir.mdt_index(), "stripe_count": 0 }),
    })
}

/// The `user.nacre.lmv_default` value of a directory's default for new subdirectories
/// (None: none, `{"version": 1}`).
pub fn lmv_default_value(default: Option<&DirDefault>) -> Value {
    versioned(match default {
        Some(d) => json!({
            "count": d.count,
            "start": if d.start == u32::MAX { -1 } else { i64::from(d.start) },
            "hash": d.hash.name(),
            "max_inherit": d.max_inherit,
        }),
        None => json!({}),
    })
}

/// Parses `value`, set through the virtual xattr `xattr` whose setter knows `keys`
/// (besides `version`): refused unless it is a JSON object of those keys only, of version
/// [`XATTR_JSON_VERSION`] or none.
pub fn parse_set(xattr: &str, value: &[u8], keys: &[&str]) -> Result<Value, ClientError> {
    let bad = |why: String| ClientError::Config(format!("bad {xattr} value: {why}"));
    let v: Value = serde_json::from_slice(value).map_err(|e| bad(e.to_string()))?;
    let Some(o) = v.as_object() else {
        return Err(bad("not a JSON object".into()));
    };
    if let Some(k) = o
        .keys()
        .find(|k| k.as_str() != VERSION_KEY && !keys.contains(&k.as_str()))
    {
        return Err(bad(format!(
            "unknown key {k:?} (this mount knows {VERSION_KEY}, {})",
            keys.join(", ")
        )));
    }
    if let Some(n) = o.get(VERSION_KEY) {
        match n.as_u64() {
            Some(XATTR_JSON_VERSION) => {}
            Some(found) if found > XATTR_JSON_VERSION => {
                return Err(bad(format!(
                    "version {found} is newer than this mount reads ({XATTR_JSON_VERSION}): \
                     upgrade nacre on this node"
                )))
            }
            _ => return Err(bad(format!("version {n}: expected {XATTR_JSON_VERSION}"))),
        }
    }
    Ok(v)
}

/// Refuses a value set through `xattr` whose `key` (when present) is not one of `known`.
pub fn check_word(xattr: &str, v: &Value, key: &str, known: &[&str]) -> Result<(), ClientError> {
    match v.get(key) {
        None => Ok(()),
        Some(Value::String(s)) if known.contains(&s.as_str()) => Ok(()),
        Some(other) => Err(ClientError::Config(format!(
            "bad {xattr} value: {key} {other} is not one this mount knows ({})",
            known.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::layout::StripeSpec;
    use nacre_types::{Layout, ObjectId, PoolName, StripeObject};

    const LOV: &str = "user.nacre.lov";

    fn refused(r: Result<Value, ClientError>) -> String {
        match r {
            Err(ClientError::Config(why)) => why,
            other => panic!("not refused as EINVAL: {other:?}"),
        }
    }

    #[test]
    fn a_value_set_with_an_unknown_key_or_a_newer_version_is_refused() {
        let ok = br#"{"stripe_count": 2, "pool": "", "version": 1}"#;
        assert_eq!(parse_set(LOV, ok, LOV_SET_KEYS).unwrap()["stripe_count"], 2);
        // Without a version: 1.
        assert!(parse_set(LOV, br#"{"stripe_count": 2}"#, LOV_SET_KEYS).is_ok());
        assert!(parse_set(LOV, b"{}", LOV_SET_KEYS).is_ok());
        let why = refused(parse_set(
            LOV,
            br#"{"stripe_count": 2, "mirrors": []}"#,
            LOV_SET_KEYS,
        ));
        assert!(why.contains("unknown key \"mirrors\""), "{why}");
        let why = refused(parse_set(LOV, br#"{"version": 2}"#, LOV_SET_KEYS));
        assert!(why.contains("version 2 is newer"), "{why}");
        let bads: [&[u8]; 6] = [
            br#"{"version": 0}"#,
            br#"{"version": "1"}"#,
            br#"{"version": 1.5}"#,
            b"[1]",
            b"4",
            b"{",
        ];
        for bad in bads {
            refused(parse_set(LOV, bad, LOV_SET_KEYS));
        }
        // Each setter its own keys.
        let mkdir = br#"{"name": "d", "mdt": 1, "mode": 493, "count": 2, "hash": "all_char"}"#;
        assert!(parse_set("user.nacre.mkdir", mkdir, MKDIR_SET_KEYS).is_ok());
        refused(parse_set("user.nacre.migrate", mkdir, MIGRATE_SET_KEYS));
        let migrate = br#"{"name": "d", "mdt": 1, "version": 1}"#;
        assert!(parse_set("user.nacre.migrate", migrate, MIGRATE_SET_KEYS).is_ok());
        let default = br#"{"count": 2, "start": -1, "hash": "fnv_1a_64", "max_inherit": 3}"#;
        let d = "user.nacre.lmv_default";
        assert!(parse_set(d, default, LMV_DEFAULT_SET_KEYS).is_ok());
        refused(parse_set(
            d,
            br#"{"count": 2, "mdt": 1}"#,
            LMV_DEFAULT_SET_KEYS,
        ));
    }

    #[test]
    fn unknown_kinds_and_patterns_are_refused() {
        let v = parse_set(
            LOV,
            br#"{"kind": "file", "pattern": "raid0"}"#,
            LOV_SET_KEYS,
        )
        .unwrap();
        check_word(LOV, &v, "kind", LOV_KINDS).unwrap();
        check_word(LOV, &v, "pattern", LOV_PATTERNS).unwrap();
        let v = parse_set(
            LOV,
            br#"{"kind": "composite", "pattern": "mirrored"}"#,
            LOV_SET_KEYS,
        )
        .unwrap();
        assert!(matches!(
            check_word(LOV, &v, "kind", LOV_KINDS),
            Err(ClientError::Config(_))
        ));
        assert!(matches!(
            check_word(LOV, &v, "pattern", LOV_PATTERNS),
            Err(ClientError::Config(_))
        ));
        let v = parse_set(LOV, br#"{"pattern": 0}"#, LOV_SET_KEYS).unwrap();
        assert!(check_word(LOV, &v, "pattern", LOV_PATTERNS).is_err());
        // Absent: nothing to check.
        check_word(LOV, &Value::from(serde_json::Map::new()), "kind", LOV_KINDS).unwrap();
    }

    #[test]
    fn every_value_read_has_version_1() {
        let file = LayoutInfo::File(Layout::raid0(
            1 << 20,
            vec![StripeObject {
                ost: 1,
                object: ObjectId { seq: 2, id: 3 },
            }],
            PoolName::new("flash").unwrap(),
        ));
        let dir = LayoutInfo::Dir(Some(LayoutSpec::plain(StripeSpec {
            stripe_count: 2,
            stripe_size: 0,
            start_ost: -1,
            pool: PoolName::NONE,
        })));
        let stripe = DirStripe {
            hash: nacre_types::dirstripe::DirHash::Fnv1a64,
            shards: vec![Fid::new(0x200000400, 1), Fid::new(0x240000400, 1)],
        };
        let default = DirDefault {
            count: 2,
            start: u32::MAX,
            hash: nacre_types::dirstripe::DirHash::AllChar,
            max_inherit: 3,
        };
        for v in [
            lov_value(&file),
            lov_value(&dir),
            lov_value(&LayoutInfo::Dir(None)),
            lov_value(&LayoutInfo::None),
            lmv_value(Fid::ROOT, Some(&stripe)),
            lmv_value(Fid::ROOT, None),
            lmv_default_value(Some(&default)),
            lmv_default_value(None),
        ] {
            assert_eq!(v[VERSION_KEY], 1, "{v}");
        }
        let v = lov_value(&file);
        assert_eq!(
            (&v["kind"], &v["stripe_count"], &v["pattern"], &v["pool"]),
            (
                &Value::from("file"),
                &Value::from(1u64),
                &Value::from("raid0"),
                &Value::from("flash")
            )
        );
        assert_eq!(lmv_default_value(Some(&default))["start"], -1);
        // A value read sets back as it is, where its setter takes one.
        let back = lmv_default_value(Some(&default)).to_string();
        parse_set(
            "user.nacre.lmv_default",
            back.as_bytes(),
            LMV_DEFAULT_SET_KEYS,
        )
        .unwrap();
        let back = lmv_default_value(None).to_string();
        parse_set(
            "user.nacre.lmv_default",
            back.as_bytes(),
            LMV_DEFAULT_SET_KEYS,
        )
        .unwrap();
    }

    fn lov(text: &str) -> Result<LayoutSpec, ClientError> {
        lov_spec(&parse_set(LOV, text.as_bytes(), LOV_SET_KEYS)?)
    }

    #[test]
    fn a_composite_request_is_read_component_by_component() {
        let spec = lov(r#"{"version": 1, "components": [
            {"end": 1048576, "stripe_count": 1},
            {"end": 1073741824, "stripe_count": 4, "stripe_size": 1048576, "pool": "flash"},
            {"end": -1, "stripe_count": -1}]}"#)
        .unwrap();
        assert_eq!(
            spec.extents()
                .map(|(s, e, c)| (
                    s,
                    e,
                    c.stripe_count,
                    c.stripe_size,
                    c.pool.as_str().to_string()
                ))
                .collect::<Vec<_>>(),
            vec![
                (0, 1 << 20, 1, 0, String::new()),
                (1 << 20, 1 << 30, 4, 1 << 20, "flash".to_string()),
                (1 << 30, EXTENT_EOF, -1, 0, String::new()),
            ]
        );
        // Data on the MDT: the first component's pattern; anywhere else, longer than 1 MiB,
        // or a pattern no one knows, refused.
        let dom = lov(r#"{"components": [{"end": 65536, "pattern": "mdt"},
            {"end": -1, "stripe_count": 2, "pattern": "raid0"}]}"#)
        .unwrap();
        assert_eq!(dom.dom_end(), 65536);
        for bad in [
            r#"{"components": [{"end": 65536}, {"end": 131072, "pattern": "mdt"}, {"end": -1}]}"#,
            r#"{"components": [{"end": 2097152, "pattern": "mdt"}, {"end": -1}]}"#,
            r#"{"components": [{"end": 65536, "pattern": "ssd"}, {"end": -1}]}"#,
            r#"{"components": [{"end": 65536, "pattern": "mdt", "stripe_count": 2}, {"end": -1}]}"#,
        ] {
            assert!(lov(bad).is_err(), "{bad}");
        }
        // The plain form is as before.
        let plain = lov(r#"{"stripe_count": 2, "pool": ""}"#).unwrap();
        assert_eq!(plain.as_plain().map(|s| s.stripe_count), Some(2));
        // Refused: both forms at once, a component's unknown key or bad end, a request
        // not to the end of the file, ends off 64 KiB, a component of the wrong type.
        for bad in [
            r#"{"stripe_count": 2, "components": [{"end": -1}]}"#,
            r#"{"components": [{"end": -1, "mirror": 1}]}"#,
            r#"{"components": [{"end": "eof"}]}"#,
            r#"{"components": [{"end": 1048576}]}"#,
            r#"{"components": [{"end": 100000}, {"end": -1}]}"#,
            r#"{"components": [3]}"#,
            r#"{"components": {}}"#,
            r#"{"components": []}"#,
        ] {
            assert!(matches!(lov(bad), Err(ClientError::Config(_))), "{bad}");
        }
    }

    #[test]
    fn a_composite_default_reads_with_its_components() {
        let spec = lov(r#"{"components": [{"end": 1048576, "stripe_count": 1},
                                           {"end": -1, "stripe_count": 4}]}"#)
        .unwrap();
        let v = lov_value(&LayoutInfo::Dir(Some(spec)));
        let d = &v["default"];
        assert_eq!(d["stripe_count"], 1);
        assert_eq!(d["components"][0]["end"], 1048576);
        assert_eq!(d["components"][1]["start"], 1048576);
        assert_eq!(d["components"][1]["end"], -1);
        assert_eq!(d["components"][1]["stripe_count"], 4);
    }
}
