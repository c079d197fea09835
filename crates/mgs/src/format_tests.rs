//! The MGS files as stored (docs/formats.md, rule 6): each file written by today's writer
//! starts with its magic and its own format version and reads back as written; a file of a
//! version one above the newest is refused as [`StoreError::TooNew`] naming the file, never
//! taken for damage. (Older versions: the upgrade tests beside each reader, in store.rs and
//! quotas.rs.)

use crate::store::{self, StoreError};
use crate::{qos, quotas};
use nacre_types::{PoolName, QuotaId, QuotaKind, TargetKind};
use nacre_wire::mgs::{FsConfig, PoolInfo, TargetInfo};
use std::collections::BTreeMap;
use std::path::Path;

/// The magic and format version at the head of the file at `path`.
fn header(path: &Path) -> ([u8; 4], u32) {
    let b = std::fs::read(path).unwrap();
    let magic: [u8; 4] = b[..4].try_into().unwrap();
    (magic, u32::from_le_bytes(b[4..8].try_into().unwrap()))
}

/// Rewrites the file at `path` with its format version one up (the checksum covers the
/// payload only, so the file is otherwise intact).
fn bump_version(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    let v = u32::from_le_bytes(b[4..8].try_into().unwrap());
    b[4..8].copy_from_slice(&(v + 1).to_le_bytes());
    std::fs::write(path, b).unwrap();
}

/// `r` is [`StoreError::TooNew`] for the file named `name`, version `newest + 1`.
fn assert_too_new<T: std::fmt::Debug>(r: Result<T, StoreError>, name: &str, newest: u32) {
    match r {
        Err(StoreError::TooNew {
            file,
            found,
            newest: n,
        }) => {
            assert!(file.ends_with(name), "{file}");
            assert_eq!((found, n), (newest + 1, newest));
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn mgs_config_is_nmgs_version_3_and_refuses_version_4() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-config");
    let target = |kind, index, uuid: &str| TargetInfo {
        kind,
        index,
        fsname: "demo".into(),
        uuid: uuid.into(),
        nids: vec!["127.0.0.1:7000@tcp".parse().unwrap()],
        servicenodes: vec!["127.0.0.2:7000@tcp".parse().unwrap()],
    };
    let sample: BTreeMap<String, FsConfig> = [(
        "demo".to_string(),
        FsConfig {
            fsname: "demo".into(),
            version: 4,
            mdts: vec![target(TargetKind::Mdt, 0, "u0")],
            osts: vec![target(TargetKind::Ost, 1, "u1")],
            pools: vec![PoolInfo {
                name: PoolName::new("flash").unwrap(),
                osts: vec![1],
                spill: None,
            }],
        },
    )]
    .into();
    store::save(&path, &sample).unwrap();
    assert_eq!(header(&path), (*b"NMGS", 3));
    assert_eq!(store::load(&path).unwrap(), sample);
    bump_version(&path);
    assert_too_new(store::load(&path), "mgs-config", 3);
}

/// The parameters file's bytes in full: `NMGP`, version 1, crc32c, then postcard of
/// `{"demo": (2, [("a", "b")])}`.
const PARAMS_V1: &[u8] = b"NMGP\x01\x00\x00\x00\xbf\x28\x16\x5a\x01\x04demo\x02\x01\x01a\x01b";

#[test]
fn mgs_params_is_nmgp_version_1_and_refuses_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-params");
    let sample: store::ParamSets = [(
        "demo".to_string(),
        (2, vec![("a".to_string(), "b".to_string())]),
    )]
    .into();
    store::save_params(&path, &sample).unwrap();
    assert_eq!(header(&path), (*b"NMGP", 1));
    assert_eq!(std::fs::read(&path).unwrap(), PARAMS_V1);
    assert_eq!(store::load_params(&path).unwrap(), sample);
    // The stored bytes read, whoever wrote them.
    let stored = dir.path().join("stored");
    std::fs::write(&stored, PARAMS_V1).unwrap();
    assert_eq!(store::load_params(&stored).unwrap(), sample);
    bump_version(&path);
    assert_too_new(store::load_params(&path), "mgs-params", 1);
}

#[test]
fn mgs_nodemaps_is_nmgn_version_2_and_refuses_version_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-nodemaps");
    let mut lab = nacre_wire::nodemap::Nodemap::new("lab");
    lab.admin = true;
    lab.fileset = Some("/lab".into());
    let sample = nacre_wire::nodemap::NodemapSet {
        version: 3,
        maps: vec![lab],
        revoked: vec![nacre_wire::nodemap::RevokedKey {
            fsname: "demo".into(),
            name: "old".into(),
            nodemap: Some("lab".into()),
        }],
    };
    store::save_nodemaps(&path, &sample).unwrap();
    assert_eq!(header(&path), (*b"NMGN", 2));
    assert_eq!(store::load_nodemaps(&path).unwrap(), sample);
    bump_version(&path);
    assert_too_new(store::load_nodemaps(&path), "mgs-nodemaps", 2);
}

#[test]
fn mgs_quotas_is_nmgq_version_2_and_refuses_version_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-quotas");
    let id = QuotaId {
        kind: QuotaKind::User,
        id: 1000,
    };
    let pool = nacre_wire::quota::QuotaKey {
        id,
        pool: PoolName::new("flash").unwrap(),
    };
    let limit = quotas::Limit {
        limits: nacre_wire::quota::QuotaLimits {
            block_hard: 1 << 30,
            ..Default::default()
        },
        block_soft_since: 7,
        inode_soft_since: 0,
    };
    let sample: quotas::Saved = [(
        "demo".to_string(),
        quotas::FsQuotas {
            version: 2,
            block_grace_s: 60,
            inode_grace_s: 0,
            limits: [
                (nacre_wire::quota::QuotaKey::global(id), limit),
                (pool, limit),
            ]
            .into(),
        },
    )]
    .into();
    quotas::save_quotas(&path, &sample).unwrap();
    assert_eq!(header(&path), (*b"NMGQ", 2));
    assert_eq!(quotas::load_quotas(&path).unwrap(), sample);
    bump_version(&path);
    assert_too_new(quotas::load_quotas(&path), "mgs-quotas", 2);
}

#[test]
fn mgs_qos_is_nmqs_version_1_and_refuses_version_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-qos");
    let rule = nacre_wire::qos::QosRule {
        name: "noisy".into(),
        jobs: vec!["mdtest*".into()],
        ops_per_s: 1000,
        burst_s: 1,
        ..Default::default()
    };
    let sample: qos::Saved = [(
        "demo".to_string(),
        nacre_wire::qos::QosRules {
            version: 1,
            rules: vec![rule],
        },
    )]
    .into();
    qos::save_qos(&path, &sample).unwrap();
    assert_eq!(header(&path), (*b"NMQS", 1));
    assert_eq!(qos::load_qos(&path).unwrap(), sample);
    bump_version(&path);
    assert_too_new(qos::load_qos(&path), "mgs-qos", 1);
    // The MGS does not start on it either.
    assert!(matches!(
        qos::QosMaster::open(path),
        Err(StoreError::TooNew { found: 2, .. })
    ));
}

#[test]
fn a_version_0_or_a_bad_checksum_is_damage_not_a_newer_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mgs-params");
    let mut b = PARAMS_V1.to_vec();
    b[4..8].copy_from_slice(&0u32.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    assert!(matches!(
        store::load_params(&path),
        Err(StoreError::Corrupt { .. })
    ));
    let mut b = PARAMS_V1.to_vec();
    *b.last_mut().unwrap() ^= 1;
    std::fs::write(&path, &b).unwrap();
    assert!(matches!(
        store::load_params(&path),
        Err(StoreError::Corrupt { .. })
    ));
}
