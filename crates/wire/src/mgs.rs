//! Management service messages: target registration and the configuration clients fetch.

use nacre_types::Nid;
pub use nacre_types::TargetKind;
use serde::{Deserialize, Serialize};

/// A target as the MGS knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Kind.
    pub kind: TargetKind,
    /// Index within its kind.
    pub index: u32,
    /// File system name.
    pub fsname: String,
    /// Target uuid, written at format time.
    pub uuid: String,
    /// NIDs of the server currently serving it.
    pub nids: Vec<Nid>,
    /// The servers that may serve it (a failover pair; empty: just the one in `nids`).
    /// Clients try them in turn when the current one stops answering for it.
    pub servicenodes: Vec<Nid>,
}

impl TargetInfo {
    /// Lustre-style target name, e.g. `demo-OST0003`.
    pub fn name(&self) -> String {
        nacre_types::target_name(&self.fsname, self.kind, self.index)
    }
}

/// The file system configuration clients and servers fetch from the MGS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FsConfig {
    /// File system name.
    pub fsname: String,
    /// Bumped on every change, so holders can tell a new configuration from an old one.
    pub version: u64,
    /// Metadata targets, by index.
    pub mdts: Vec<TargetInfo>,
    /// Object storage targets, by index.
    pub osts: Vec<TargetInfo>,
    /// OST pools, by name.
    pub pools: Vec<PoolInfo>,
}

/// An OST pool (Lustre's): a named set of OSTs files can be laid out in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolInfo {
    /// Name.
    pub name: nacre_types::PoolName,
    /// Member OST indices, ascending (an index may name an OST not registered yet).
    pub osts: Vec<u32>,
    /// Where new files go instead while the pool is this full (Lustre's pool spilling).
    pub spill: Option<PoolSpill>,
}

/// A pool's spilling: above `threshold_pct` percent of its OSTs' space used, new files are
/// laid out in pool `to` instead (one hop: `to`'s own spilling is not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpill {
    /// The pool new files go to.
    pub to: nacre_types::PoolName,
    /// Percent of the pool's space used from which they do (1 to 100).
    pub threshold_pct: u8,
}

/// Most pools a file system has.
pub const POOLS_PER_FS_MAX: usize = 1_024;

impl FsConfig {
    /// The pool named `name`, if there is one.
    pub fn pool(&self, name: nacre_types::PoolName) -> Option<&PoolInfo> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The addresses of every server of the file system: its targets' NIDs and service
    /// nodes (without keys, peers at these addresses act as servers).
    pub fn server_addrs(&self) -> Vec<std::net::IpAddr> {
        let mut ips: Vec<std::net::IpAddr> = self
            .mdts
            .iter()
            .chain(&self.osts)
            .flat_map(|t| t.nids.iter().chain(&t.servicenodes))
            .map(|n| n.ip().to_canonical())
            .collect();
        ips.sort();
        ips.dedup();
        ips
    }
}

/// Requests to the MGS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgsRequest {
    /// A server announces a target it serves. Reply: [`MgsReply::Registered`].
    Register(TargetInfo),
    /// Fetch the configuration of a file system. Reply: [`MgsReply::Config`].
    GetConfig {
        /// File system name.
        fsname: String,
    },
    /// Store a parameter for every server of a file system (`set_param -P`); an empty value
    /// removes it. Reply: [`MgsReply::Params`] with the stored set.
    SetParam {
        /// File system name.
        fsname: String,
        /// Parameter name or pattern (`osd.*.direct_io`).
        name: String,
        /// Value.
        value: String,
    },
    /// Persistent parameters of a file system. Reply: [`MgsReply::Params`].
    GetParams {
        /// File system name.
        fsname: String,
    },
    /// Imperative recovery: wait up to `wait_ms` (at most [`WAIT_TARGETS_MS_MAX`]) until a
    /// target of `fsname` registers (starts or restarts) after event `after`. Reply:
    /// [`MgsReply::Targets`], at once if there are such events, else when one comes or the
    /// wait ends.
    WaitTargets {
        /// File system name.
        fsname: String,
        /// The last event sequence number the client has seen.
        after: u64,
        /// How long the MGS may hold the request.
        wait_ms: u32,
    },
    /// Every nodemap of the MGS, with their version. Reply: [`MgsReply::Nodemaps`].
    GetNodemaps,
    /// Sets (or with all limits 0, removes) an id's limits over the file system or one
    /// pool's OSTs (`nacre setquota [--pool]`; a pool's are on blocks only). Only from a
    /// client whose nodemap, if any, is an admin one. Reply: [`MgsReply::Quotas`] for the id.
    QuotaSet {
        /// File system name.
        fsname: String,
        /// The user, group or project, and the pool (none: the whole file system).
        key: crate::quota::QuotaKey,
        /// The limits.
        limits: crate::quota::QuotaLimits,
    },
    /// Sets the grace times of soft limits (`nacre setquota -t`), in seconds. Reply:
    /// [`MgsReply::Quotas`] with no ids.
    QuotaGrace {
        /// File system name.
        fsname: String,
        /// Grace time of block soft limits.
        block_s: u64,
        /// Grace time of inode soft limits.
        inode_s: u64,
    },
    /// Limits and what the master knows of usage, for `ids` (at most
    /// [`crate::oss::QUOTA_IDS_MAX`]). Reply: [`MgsReply::Quotas`].
    QuotaGet {
        /// File system name.
        fsname: String,
        /// Users, groups, projects.
        ids: Vec<nacre_types::QuotaId>,
    },
    /// A target's quota slave asks for more grant (docs/quota.md). Reply:
    /// [`MgsReply::QuotaGrant`].
    QuotaAcquire(crate::quota::Acquire),
    /// A target's quota slave reports what it uses and holds, each second. Reply:
    /// [`MgsReply::QuotaSynced`].
    QuotaSync(crate::quota::SyncReport),
    /// Adds a QoS rule, or replaces the one of its name (`nacre qos add`; docs/qos.md).
    /// Only from a client whose nodemap, if any, is an admin one. Reply:
    /// [`MgsReply::QosRules`].
    QosSet {
        /// File system name.
        fsname: String,
        /// The rule.
        rule: crate::qos::QosRule,
    },
    /// Removes a QoS rule (`nacre qos del`). Reply: [`MgsReply::QosRules`].
    QosDel {
        /// File system name.
        fsname: String,
        /// The rule's name.
        name: String,
    },
    /// The QoS rules (`nacre qos list`; targets fetch them). Reply: [`MgsReply::QosRules`].
    QosGet {
        /// File system name.
        fsname: String,
    },
    /// A target's QoS demands, each second. Reply: [`MgsReply::QosShares`].
    QosSync(crate::qos::QosReport),
    /// The MGS's audit records of `fsname` and of every file system (nodemaps), numbered
    /// past `after` in the MGS's run `epoch` (another epoch: from its first record kept):
    /// each MDT copies them into its changelog (docs/security.md, "The audit trail").
    /// Reply: [`MgsReply::Audit`], at most [`AUDIT_READ_RECORDS_MAX`] records.
    AuditRead {
        /// File system name.
        fsname: String,
        /// The MGS run the reader's `after` counts in (0: none yet).
        epoch: u64,
        /// The last record the reader has.
        after: u64,
    },
}

/// Most records one [`MgsRequest::AuditRead`] answers.
pub const AUDIT_READ_RECORDS_MAX: usize = 256;
/// Longest text of an [`AuditRecord`]'s `who` and of its `what` (longer ones are cut).
pub const AUDIT_TEXT_BYTES_MAX: usize = 512;

/// One administrative action, as the MGS's audit trail records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its number in the MGS's run (from 1, increasing).
    pub seq: u64,
    /// When (seconds since the epoch, the MGS's clock).
    pub time_s: u64,
    /// The file system it concerns (empty: every one, as nodemaps).
    pub fsname: String,
    /// Who asked, as their authenticated connection says (address, role, key, nodemap).
    pub who: String,
    /// What they asked.
    pub what: String,
    /// `done`, or why it was refused.
    pub outcome: String,
}

/// Longest a [`MgsRequest::WaitTargets`] is held.
pub const WAIT_TARGETS_MS_MAX: u32 = 60_000;

/// Replies from the MGS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MgsReply {
    /// Registration accepted; the configuration version it produced.
    Registered {
        /// Configuration version after the registration.
        version: u64,
    },
    /// The configuration.
    Config(FsConfig),
    /// Persistent parameters, in the order they were set, and their version.
    Params {
        /// Bumped on every change.
        version: u64,
        /// (name pattern, value).
        params: Vec<(String, String)>,
    },
    /// Targets that (re)started after the event the client had seen.
    Targets {
        /// The newest event's sequence number (0: none since the MGS started).
        seq: u64,
        /// (kind, index) of each target registered since; every target of the file system
        /// if the client was further behind than the MGS remembers.
        started: Vec<(TargetKind, u32)>,
    },
    /// The nodemaps.
    Nodemaps(crate::nodemap::NodemapSet),
    /// Quotas: grace times and the ids asked for.
    Quotas(crate::quota::QuotaView),
    /// A grant ([`MgsRequest::QuotaAcquire`]).
    QuotaGrant(crate::quota::Grant),
    /// The limited ids and the grant each may keep ([`MgsRequest::QuotaSync`]).
    QuotaSynced(crate::quota::SyncAnswer),
    /// A file system's QoS rules.
    QosRules(crate::qos::QosRules),
    /// A target's shares of the QoS classes' rates ([`MgsRequest::QosSync`]).
    QosShares(crate::qos::QosShares),
    /// Audit records ([`MgsRequest::AuditRead`]).
    Audit {
        /// The MGS's run they are numbered in.
        epoch: u64,
        /// The records, oldest first.
        records: Vec<AuditRecord>,
    },
}

impl MgsRequest {
    /// The file system the request is about (None: every file system's, or none); its
    /// frame must name that file system's slot (a connection proving another file
    /// system's key cannot ask about this one).
    pub fn fsname(&self) -> Option<&str> {
        let fs = match self {
            MgsRequest::Register(t) => &t.fsname,
            MgsRequest::GetConfig { fsname }
            | MgsRequest::SetParam { fsname, .. }
            | MgsRequest::GetParams { fsname }
            | MgsRequest::WaitTargets { fsname, .. }
            | MgsRequest::QuotaSet { fsname, .. }
            | MgsRequest::QuotaGrace { fsname, .. }
            | MgsRequest::QuotaGet { fsname, .. }
            | MgsRequest::QosSet { fsname, .. }
            | MgsRequest::QosDel { fsname, .. }
            | MgsRequest::QosGet { fsname }
            | MgsRequest::AuditRead { fsname, .. } => fsname,
            MgsRequest::QuotaAcquire(a) => &a.fsname,
            MgsRequest::QuotaSync(r) => &r.fsname,
            MgsRequest::QosSync(r) => &r.fsname,
            MgsRequest::GetNodemaps => return None,
        };
        (!fs.is_empty()).then_some(fs.as_str())
    }

    /// Opcode (service 1).
    pub fn opcode(&self) -> u16 {
        match self {
            MgsRequest::Register(_) => 0x0101,
            MgsRequest::GetConfig { .. } => 0x0102,
            MgsRequest::SetParam { .. } => 0x0103,
            MgsRequest::GetParams { .. } => 0x0104,
            MgsRequest::WaitTargets { .. } => 0x0105,
            MgsRequest::GetNodemaps => 0x0106,
            MgsRequest::QuotaSet { .. } => 0x0107,
            MgsRequest::QuotaGrace { .. } => 0x0108,
            MgsRequest::QuotaGet { .. } => 0x0109,
            MgsRequest::QuotaAcquire(_) => 0x010a,
            MgsRequest::QuotaSync(_) => 0x010b,
            MgsRequest::QosSet { .. } => 0x010c,
            MgsRequest::QosDel { .. } => 0x010d,
            MgsRequest::QosGet { .. } => 0x010e,
            MgsRequest::QosSync(_) => 0x010f,
            MgsRequest::AuditRead { .. } => 0x0110,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn wait_targets_round_trips_and_refuses_truncation() {
        let req = MgsRequest::WaitTargets {
            fsname: "demo".into(),
            after: 7,
            wait_ms: 500,
        };
        let reply = MgsReply::Targets {
            seq: 9,
            started: vec![(TargetKind::Mdt, 0), (TargetKind::Ost, 3)],
        };
        let (a, b) = (encode_body(&req), encode_body(&reply));
        assert_eq!(decode_body::<MgsRequest>(&a).unwrap(), req);
        assert_eq!(decode_body::<MgsReply>(&b).unwrap(), reply);
        for n in 0..a.len() {
            assert!(decode_body::<MgsRequest>(&a[..n]).is_err());
        }
        for n in 0..b.len() {
            assert!(decode_body::<MgsReply>(&b[..n]).is_err());
        }
    }

    #[test]
    fn a_configuration_with_pools_round_trips_and_refuses_truncation() {
        let config = FsConfig {
            fsname: "demo".into(),
            version: 4,
            mdts: Vec::new(),
            osts: Vec::new(),
            pools: vec![PoolInfo {
                name: nacre_types::PoolName::new("flash").unwrap(),
                osts: vec![0, 2, 7],
                spill: Some(PoolSpill {
                    to: nacre_types::PoolName::new("capacity").unwrap(),
                    threshold_pct: 80,
                }),
            }],
        };
        let reply = MgsReply::Config(config.clone());
        let b = encode_body(&reply);
        assert_eq!(decode_body::<MgsReply>(&b).unwrap(), reply);
        for n in 0..b.len() {
            assert!(decode_body::<MgsReply>(&b[..n]).is_err());
        }
        assert_eq!(
            config.pool(config.pools[0].name).unwrap().osts,
            vec![0, 2, 7]
        );
        assert!(config.pool(nacre_types::PoolName::NONE).is_none());
    }

    #[test]
    fn round_trip() {
        let req = MgsRequest::Register(TargetInfo {
            kind: TargetKind::Ost,
            index: 3,
            fsname: "demo".into(),
            uuid: "u".into(),
            nids: vec!["127.0.0.1:9000@tcp".parse().unwrap()],
            servicenodes: vec!["127.0.0.2:9000@tcp".parse().unwrap()],
        });
        assert_eq!(decode_body::<MgsRequest>(&encode_body(&req)).unwrap(), req);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_body::<MgsRequest>(&bytes);
            let _ = decode_body::<MgsReply>(&bytes);
        }

        #[test]
        fn audit_read_and_its_answer_round_trip_and_refuse_truncation(
            fsname in "[a-z]{0,8}",
            epoch in any::<u64>(),
            after in any::<u64>(),
            who in ".{0,40}",
            what in ".{0,40}",
        ) {
            let req = MgsRequest::AuditRead { fsname: fsname.clone(), epoch, after };
            let reply = MgsReply::Audit {
                epoch,
                records: vec![AuditRecord {
                    seq: after.wrapping_add(1),
                    time_s: 1,
                    fsname,
                    who,
                    what,
                    outcome: "done".into(),
                }],
            };
            let (a, b) = (encode_body(&req), encode_body(&reply));
            prop_assert_eq!(decode_body::<MgsRequest>(&a).unwrap(), req);
            prop_assert_eq!(decode_body::<MgsReply>(&b).unwrap(), reply);
            for cut in 0..b.len() {
                prop_assert!(decode_body::<MgsReply>(&b[..cut]).is_err());
            }
        }
    }
}
