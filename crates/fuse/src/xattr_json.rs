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
use nacre_types::Fid;
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
];
/// The `kind`s a `user.nacre.lov` value set may name (as read: a file's layout, a
/// directory's default).
pub const LOV_KINDS: &[&str] = &["file", "dir"];
/// The `pattern`s a `user.nacre.lov` value set may name.
pub const LOV_PATTERNS: &[&str] = &["raid0"];
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

/// The `user.nacre.lov` value of a file's layout or a directory's default striping.
pub fn lov_value(info: &LayoutInfo) -> Value {
    versioned(match info {
        LayoutInfo::File(l) => json!({
            "kind": "file",
            "stripe_count": l.objects.len(),
            "stripe_size": l.stripe_size,
            "pool": l.pool.as_str(),
            "pattern": "raid0",
            "objects": l.objects.iter().map(|o| json!({
                "ost": o.ost, "seq": o.object.seq, "id": o.object.id,
            })).collect::<Vec<_>>(),
        }),
        LayoutInfo::Dir(spec) => json!({
            "kind": "dir",
            "default": spec.as_ref().map(|s| json!({
                "stripe_count": s.stripe_count, "stripe_size": s.stripe_size,
                "start_ost": s.start_ost, "pool": s.pool.as_str(),
            })),
        }),
        LayoutInfo::None => json!({ "kind": "none" }),
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
            br#"{"stripe_count": 2, "components": []}"#,
            LOV_SET_KEYS,
        ));
        assert!(why.contains("unknown key \"components\""), "{why}");
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
            br#"{"kind": "composite", "pattern": "mdt"}"#,
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
        let file = LayoutInfo::File(Layout {
            stripe_size: 1 << 20,
            objects: vec![StripeObject {
                ost: 1,
                object: ObjectId { seq: 2, id: 3 },
            }],
            pool: PoolName::new("flash").unwrap(),
            generation: 0,
        });
        let dir = LayoutInfo::Dir(Some(StripeSpec {
            stripe_count: 2,
            stripe_size: 0,
            start_ost: -1,
            pool: PoolName::NONE,
        }));
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
}
