//! What a server process exchanges with its MGS each second, besides the configuration:
//! persistent parameters and nodemaps, and for each file system's targets (over a
//! connection of that file system) quota reports and grants (docs/quota.md), QoS demands
//! and shares (docs/qos.md).

use nacre_mds::MdsHandler;
use nacre_net::rpc::call;
use nacre_net::Connection;
use nacre_oss::OssHandler;
use nacre_types::TargetKind;
use nacre_wire::mgs::{MgsReply, MgsRequest};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::stopping::sleep_unless;
use crate::targets::osp_net_config;
use nacre_types::Nid;

/// How often a server checks the MGS for changed persistent parameters.
pub const PARAM_SYNC_MS: u64 = 1_000;
/// The parameter set every file system of an MGS shares (names carry the fsname).
pub const PARAMS_ALL_FS: &str = "";

/// Applies the MGS's persistent parameters now, then whenever they change; each file
/// system's targets exchange their quota and QoS state with its MGS over a connection of
/// that file system (`mgs_by_fs`: each file system served and its MGS; the first's MGS
/// gives the parameters and nodemaps). The thread ends when `stop` is set.
pub(crate) fn start(
    mgs_by_fs: Vec<(String, Nid)>,
    registry: nacre_params::Registry,
    oss: Arc<OssHandler>,
    mds: Arc<MdsHandler>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    let conns: Vec<(String, Arc<Connection>)> = mgs_by_fs
        .into_iter()
        .map(|(fs, mgs)| {
            let conn = Connection::new(mgs, osp_net_config().for_fs(&fs));
            (fs, conn)
        })
        .collect();
    let first = conns[0].1.clone();
    let mut applied = apply_persistent_params(&first, &registry, None);
    let mut nodemaps = fetch_nodemaps(&first, None, &mds);
    let sync = move |oss: &OssHandler, mds: &MdsHandler| {
        // Clients whose key was revoked lose their locks now (not at their callbacks'
        // timeouts): nothing of theirs holds others up.
        oss.evict_revoked();
        mds.evict_revoked();
        for (fs, conn) in &conns {
            learn_servers(conn, fs);
            sync_quotas(conn, fs, oss, mds);
            sync_qos(conn, fs, oss, mds);
            copy_admin_records(conn, fs, mds);
        }
    };
    sync(&oss, &mds);
    std::thread::Builder::new()
        .name("param-sync".into())
        .spawn(move || {
            while !sleep_unless(&stop, Duration::from_millis(PARAM_SYNC_MS)) {
                applied = apply_persistent_params(&first, &registry, applied);
                nodemaps = fetch_nodemaps(&first, nodemaps, &mds);
                sync(&oss, &mds);
            }
        })
        .expect("spawn param-sync thread")
}

/// Fetches persistent parameters and applies the ones this process has, if their version is
/// not `applied`; returns the version now applied.
fn apply_persistent_params(
    conn: &Arc<Connection>,
    registry: &nacre_params::Registry,
    applied: Option<u64>,
) -> Option<u64> {
    let req = MgsRequest::GetParams {
        fsname: PARAMS_ALL_FS.into(),
    };
    let (version, params) = match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
        Ok(MgsReply::Params { version, params }) => (version, params),
        Ok(_) => return applied,
        Err(e) => {
            tracing::debug!("cannot fetch persistent parameters: {e}");
            return applied;
        }
    };
    if applied == Some(version) {
        return applied;
    }
    for (name, value) in params {
        // Never a local-only parameter (fault points): a stored one is skipped, not armed.
        match registry.set_persistent(&name, &value) {
            Ok(set) => tracing::info!(
                "persistent parameter {name}={value} applied to {}",
                set.join(", ")
            ),
            Err(nacre_params::ParamError::NotFound(_)) => {}
            Err(e) => tracing::warn!("persistent parameter {name}={value}: {e}"),
        }
    }
    Some(version)
}

/// Learns the addresses of `fsname`'s registered servers from its configuration: without
/// keys, peers at those addresses act as servers here (docs/security.md).
pub(crate) fn learn_servers(conn: &Arc<Connection>, fsname: &str) {
    let req = MgsRequest::GetConfig {
        fsname: fsname.to_string(),
    };
    match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
        Ok(MgsReply::Config(c)) => nacre_net::caller::install_servers(fsname, c.server_addrs()),
        Ok(_) => {}
        Err(e) => tracing::debug!("cannot fetch the configuration of {fsname}: {e}"),
    }
}

/// Fetches the MGS's nodemaps and installs them for this process's targets and connections
/// if their version is not `applied`; returns the version now enforced.
fn fetch_nodemaps(conn: &Arc<Connection>, applied: Option<u64>, mds: &MdsHandler) -> Option<u64> {
    let req = MgsRequest::GetNodemaps;
    match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
        Ok(MgsReply::Nodemaps(set)) if applied != Some(set.version) => {
            let version = set.version;
            if !set.maps.is_empty() || applied.is_some() {
                tracing::info!(
                    "nodemaps version {version} enforced ({} nodemaps)",
                    set.maps.len()
                );
            }
            // Holders of delegations checked creates with the ids the old nodemaps let
            // through: what they answered is made first.
            mds.change_nodemaps(set);
            Some(version)
        }
        Ok(_) => applied,
        Err(e) => {
            tracing::debug!("cannot fetch nodemaps: {e}");
            applied
        }
    }
}

/// A quota slave's way to the master: acquires sent to the MGS.
struct MgsQuotaLink(Arc<Connection>);

impl nacre_quota::Link for MgsQuotaLink {
    fn acquire(
        &self,
        a: &nacre_wire::quota::Acquire,
    ) -> Result<nacre_wire::quota::Grant, nacre_types::Status> {
        let req = MgsRequest::QuotaAcquire(a.clone());
        match call::<_, MgsReply>(&self.0, req.opcode(), 0, &req) {
            Ok(MgsReply::QuotaGrant(g)) => Ok(g),
            Ok(_) => Err(nacre_types::Status::Proto),
            Err(e) => {
                tracing::warn!("quota acquire of {}: {e}", a.key);
                Err(nacre_types::Status::TimedOut)
            }
        }
    }
}

/// Each target of `fsname`'s quota report to the master (over `conn`, a connection of
/// that file system), and its answer applied (docs/quota.md).
pub(crate) fn sync_quotas(
    conn: &Arc<Connection>,
    fsname: &str,
    oss: &OssHandler,
    mds: &MdsHandler,
) {
    let link: Arc<dyn nacre_quota::Link> = Arc::new(MgsQuotaLink(conn.clone()));
    let send = |slave: &nacre_quota::Slave, report: nacre_wire::quota::SyncReport| {
        slave.set_link(link.clone());
        let req = MgsRequest::QuotaSync(report);
        match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
            Ok(MgsReply::QuotaSynced(a)) => slave.apply(&a),
            Ok(_) => tracing::debug!("quota sync: unexpected answer"),
            Err(e) => tracing::debug!("quota sync: {e}"),
        }
    };
    for ost in oss.all().into_iter().filter(|o| o.label.fsname == fsname) {
        let usage = ost.store.usage();
        send(&ost.quota, ost.quota.report(|q| usage.of(q)));
    }
    for mdt in mds.all().into_iter().filter(|m| m.label.fsname == fsname) {
        let report = mdt.quota.report(|q| mdt.inodes_of(&[q])[0]);
        send(&mdt.quota, report);
        let report = mdt.dom_quota.report(|q| mdt.store().dom_bytes_of(&[q])[0]);
        send(&mdt.dom_quota, report);
        // A delegation's holder checks no quota: none may be held once a limit is.
        nacre_mds::delegations::revoke_if_limited(&mdt);
    }
}

/// Each target of `fsname`'s QoS demands sent to the MGS, its shares applied, and the
/// rules fetched when they changed (docs/qos.md).
pub(crate) fn sync_qos(conn: &Arc<Connection>, fsname: &str, oss: &OssHandler, mds: &MdsHandler) {
    let send = |qos: &nacre_qos::Scheduler, fsname: &str, target: (TargetKind, u32)| {
        let req = MgsRequest::QosSync(qos.report(fsname, target));
        let shares = match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
            Ok(MgsReply::QosShares(s)) => s,
            Ok(_) => return tracing::debug!("QoS sync: unexpected answer"),
            Err(e) => return tracing::debug!("QoS sync: {e}"),
        };
        if shares.version != qos.version() {
            let get = MgsRequest::QosGet {
                fsname: fsname.to_string(),
            };
            match call::<_, MgsReply>(conn, get.opcode(), 0, &get) {
                Ok(MgsReply::QosRules(rules)) => qos.set_rules(&rules, shares.targets),
                Ok(_) => return tracing::debug!("QoS rules: unexpected answer"),
                Err(e) => return tracing::debug!("QoS rules: {e}"),
            }
        }
        qos.apply(&shares);
    };
    for ost in oss.all().into_iter().filter(|o| o.label.fsname == fsname) {
        send(
            &ost.qos,
            &ost.label.fsname,
            (TargetKind::Ost, ost.label.index),
        );
    }
    for mdt in mds.all().into_iter().filter(|m| m.label.fsname == fsname) {
        let capped = nacre_mds::delegations::qos_capped(&mdt);
        send(
            &mdt.qos,
            &mdt.label.fsname,
            (TargetKind::Mdt, mdt.label.index),
        );
        // Holders answer creates and unlinks without a request a new cap could hold.
        nacre_mds::delegations::revoke_if_capped(&mdt, capped);
    }
}

/// Each MDT of `fsname` copies the MGS's audit records it has not yet into its changelog
/// (nacre_mds::admin_records).
pub(crate) fn copy_admin_records(conn: &Arc<Connection>, fsname: &str, mds: &MdsHandler) {
    for mdt in mds.all().into_iter().filter(|m| m.label.fsname == fsname) {
        let (epoch, after) = nacre_mds::admin_records::cursor(&mdt);
        let req = MgsRequest::AuditRead {
            fsname: fsname.to_string(),
            epoch,
            after,
        };
        match call::<_, MgsReply>(conn, req.opcode(), 0, &req) {
            Ok(MgsReply::Audit { epoch, records }) => {
                if let Err(e) = nacre_mds::admin_records::copy(&mdt, epoch, &records) {
                    tracing::warn!(
                        "{}: cannot copy the MGS's audit records into the changelog: {e}",
                        mdt.label.name()
                    );
                }
            }
            Ok(_) => tracing::debug!("audit read: unexpected answer"),
            Err(e) => tracing::debug!("audit read: {e}"),
        }
    }
}
