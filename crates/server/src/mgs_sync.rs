//! What a server process's targets exchange with their MGS each second, besides the
//! configuration: quota reports and grants (docs/quota.md), QoS demands and shares
//! (docs/qos.md).

use nacre_mds::MdsHandler;
use nacre_net::rpc::call;
use nacre_net::Connection;
use nacre_oss::OssHandler;
use nacre_types::TargetKind;
use nacre_wire::mgs::{MgsReply, MgsRequest};
use std::sync::Arc;

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
        send(
            &mdt.qos,
            &mdt.label.fsname,
            (TargetKind::Mdt, mdt.label.index),
        );
    }
}
