//! The audit trail of administration at the MGS: who (the caller as the authenticated
//! connection says: role, key name and nodemap, address; or this host's root through the
//! control socket) changed what (parameters, quotas, grace times, QoS rules, nodemaps) and
//! whether it was done. Each record goes to the log (target `nacre::audit`) and to the
//! last [`AUDIT_RECORDS_MAX`] kept for `nacre ctl get_param mgs.audit`.

use nacre_types::Status;
use nacre_wire::mgs::MgsRequest;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Audit records kept in memory (the log keeps them all).
pub const AUDIT_RECORDS_MAX: usize = 256;

/// The last audit records.
#[derive(Default)]
pub struct AuditLog {
    records: Mutex<VecDeque<String>>,
}

impl AuditLog {
    /// Records that `who` asked `what`, and its outcome.
    pub fn record(&self, who: &str, what: &str, outcome: Result<(), Status>) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let result = match outcome {
            Ok(()) => "done".to_string(),
            Err(s) => format!("refused: {s}"),
        };
        let line = format!("{at} {who}: {what}: {result}");
        tracing::info!(target: "nacre::audit", "audit: {line}");
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        if r.len() >= AUDIT_RECORDS_MAX {
            r.pop_front();
        }
        r.push_back(line);
    }

    /// The records kept, oldest first, one per line.
    pub fn text(&self) -> String {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// What an administrative request asks, for the audit trail (None: not administration).
pub fn what(req: &MgsRequest) -> Option<String> {
    Some(match req {
        MgsRequest::SetParam {
            fsname,
            name,
            value,
        } => format!("set_param fs={fsname:?} {name:?}={value:?}"),
        MgsRequest::QuotaSet {
            fsname,
            key,
            limits,
        } => format!("setquota fs={fsname:?} {key:?} {limits:?}"),
        MgsRequest::QuotaGrace {
            fsname,
            block_s,
            inode_s,
        } => format!("quota grace fs={fsname:?} block_s={block_s} inode_s={inode_s}"),
        MgsRequest::QosSet { fsname, rule } => format!("qos set fs={fsname:?} {rule:?}"),
        MgsRequest::QosDel { fsname, name } => format!("qos del fs={fsname:?} {name:?}"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trail_keeps_the_last_records_and_says_who_and_what() {
        let log = AuditLog::default();
        for i in 0..AUDIT_RECORDS_MAX + 3 {
            log.record("10.0.0.9 (admin key)", &format!("change {i}"), Ok(()));
        }
        log.record("10.0.0.8 (client lab)", "qos del", Err(Status::Perm));
        let text = log.text();
        assert_eq!(text.lines().count(), AUDIT_RECORDS_MAX);
        assert!(!text.contains("change 3:"), "the oldest went");
        assert!(text.contains("change 4: done"));
        assert!(text
            .lines()
            .last()
            .unwrap()
            .ends_with("10.0.0.8 (client lab): qos del: refused: operation not permitted"));
        let req = MgsRequest::SetParam {
            fsname: "demo".into(),
            name: "osc.max_dirty_mb".into(),
            value: "64".into(),
        };
        assert_eq!(
            what(&req).unwrap(),
            "set_param fs=\"demo\" \"osc.max_dirty_mb\"=\"64\""
        );
        assert!(what(&MgsRequest::GetNodemaps).is_none());
    }
}
