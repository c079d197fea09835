//! The audit trail of administration at the MGS: who (the caller as the authenticated
//! connection says: role, key name and nodemap, address; or this host's root through the
//! control socket) changed what (parameters, quotas, grace times, QoS rules, nodemaps) and
//! whether it was done. Each record goes to the log (target `nacre::audit`) and to the
//! last [`AUDIT_RECORDS_MAX`] kept for `nacre ctl get_param mgs.audit`.

use nacre_types::Status;
use nacre_wire::mgs::{AuditRecord, MgsRequest, AUDIT_READ_RECORDS_MAX, AUDIT_TEXT_BYTES_MAX};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Audit records kept in memory (the log keeps them all): `mgs.audit` shows them and
/// MDTs copy them into their changelogs from there ([`AuditLog::since`]).
pub const AUDIT_RECORDS_MAX: usize = 256;

/// The last audit records, numbered in this MGS's run.
pub struct AuditLog {
    /// This run of the MGS: the numbers below count in it (a reader that saw another run's
    /// starts again from the first record kept).
    epoch: u64,
    records: Mutex<(u64, VecDeque<AuditRecord>)>,
}

impl Default for AuditLog {
    fn default() -> AuditLog {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        AuditLog {
            // Never 0 (a reader's "none yet").
            epoch: (nanos ^ u64::from(std::process::id()).rotate_left(48)).max(1),
            records: Mutex::new((0, VecDeque::new())),
        }
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl AuditLog {
    /// Records that `who` asked `what` of file system `fsname` (empty: of every one), and
    /// its outcome.
    pub fn record(&self, fsname: &str, who: &str, what: &str, outcome: Result<(), Status>) {
        let time_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let outcome = match outcome {
            Ok(()) => "done".to_string(),
            Err(s) => format!("refused: {s}"),
        };
        tracing::info!(target: "nacre::audit", "audit: {time_s} {who}: {what}: {outcome}");
        let mut r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.0 += 1;
        let rec = AuditRecord {
            seq: r.0,
            time_s,
            fsname: fsname.to_string(),
            who: cut(who, AUDIT_TEXT_BYTES_MAX),
            what: cut(what, AUDIT_TEXT_BYTES_MAX),
            outcome,
        };
        if r.1.len() >= AUDIT_RECORDS_MAX {
            r.1.pop_front();
        }
        r.1.push_back(rec);
    }

    /// The records kept, oldest first, one per line.
    pub fn text(&self) -> String {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.1.iter()
            .map(|a| format!("{} {}: {}: {}", a.time_s, a.who, a.what, a.outcome))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The records of `fsname` (not those of every file system: nodemaps are the other
    /// tenants' business) numbered past `after` in run
    /// `epoch` (another run: every one kept), at most [`AUDIT_READ_RECORDS_MAX`]; and this
    /// run's epoch.
    pub fn since(&self, fsname: &str, epoch: u64, after: u64) -> (u64, Vec<AuditRecord>) {
        let after = if epoch == self.epoch { after } else { 0 };
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let records =
            r.1.iter()
                .filter(|a| a.seq > after && a.fsname == fsname)
                .take(AUDIT_READ_RECORDS_MAX)
                .cloned()
                .collect();
        (self.epoch, records)
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
        for i in 0..AUDIT_RECORDS_MAX + 2 {
            log.record(
                "demo",
                "10.0.0.9 (admin key)",
                &format!("change {i}"),
                Ok(()),
            );
        }
        log.record(
            "other",
            "10.0.0.8 (client lab)",
            "qos del",
            Err(Status::Perm),
        );
        log.record("", "root", "nodemap add", Ok(()));
        let text = log.text();
        assert_eq!(text.lines().count(), AUDIT_RECORDS_MAX);
        assert!(!text.contains("change 3:"), "the oldest went");
        assert!(text.contains("change 4: done"));
        assert!(text
            .lines()
            .nth_back(1)
            .unwrap()
            .ends_with("10.0.0.8 (client lab): qos del: refused: operation not permitted"));
        // A reader of `demo` gets its records only (not another's, nor the nodemaps'), past
        // what it has; a reader of another run gets every one kept.
        let (epoch, recs) = log.since("demo", 0, 0);
        assert_eq!(recs.len(), AUDIT_RECORDS_MAX - 2);
        assert_eq!(recs.first().unwrap().what, "change 4");
        assert_eq!(recs.last().unwrap().what, "change 257");
        let newest = recs.last().unwrap().seq;
        let (_, recs) = log.since("demo", epoch, newest - 2);
        assert_eq!(
            recs.iter().map(|r| r.what.as_str()).collect::<Vec<_>>(),
            ["change 256", "change 257"]
        );
        assert!(log.since("demo", epoch, newest).1.is_empty());
        assert_eq!(
            log.since("demo", epoch ^ 1, newest).1.len(),
            recs.len() + 252
        );
        let long = "x".repeat(AUDIT_TEXT_BYTES_MAX * 2);
        log.record("demo", &long, &long, Ok(()));
        let (_, recs) = log.since("demo", epoch, newest);
        assert_eq!(recs[0].who.len(), AUDIT_TEXT_BYTES_MAX);
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
