//! The MGS's audit trail in the changelog: each second the server process reads the
//! MGS's records of administrative actions on this MDT's file system (and on every file
//! system: nodemaps) past the last it copied ([`cursor`]), and [`copy`] writes them as
//! `30ADMIN` records (who did what, from where, and whether it was done), with the cursor,
//! in one transaction: a record is copied once, even across restarts of the MDT. A
//! restarted MGS numbers its records anew in a new epoch: the MDT then copies every one it
//! still keeps (the last `AUDIT_RECORDS_MAX`; the MGS's log keeps them all).
//!
//! Copied only while some consumer is registered, as every change is; without one the
//! cursor moves on past them (durably).
//!
//! Stored: `meta` `admin_cursor` = epoch (8, big-endian) ‖ last record copied (8).

use crate::changelog_writer::{note, Change, Origin};
use crate::mdt::Mdt;
use nacre_types::{Fid, Status, TimeSpec};
use nacre_wire::mds::changelog::RecordKind;
use nacre_wire::mgs::AuditRecord;

/// The key of the cursor in `meta`.
const CURSOR: &[u8] = b"admin_cursor";

/// Where the copy stands: (the MGS's epoch, the last record copied of it).
pub fn cursor(mdt: &Mdt) -> (u64, u64) {
    let mut c = mdt.changelog.admin_cursor.lock();
    if c.is_none() {
        let stored = mdt.store().meta_or_none(CURSOR);
        *c = Some(match stored.as_deref().map(<[u8; 16]>::try_from) {
            Some(Ok(b)) => (
                u64::from_be_bytes(b[..8].try_into().expect("8 bytes")),
                u64::from_be_bytes(b[8..].try_into().expect("8 bytes")),
            ),
            _ => (0, 0),
        });
    }
    c.expect("loaded")
}

/// Copies `records` of the MGS's run `epoch` (an answer to the read from [`cursor`]) into
/// the changelog, those not copied yet, in number order; moves the cursor past them.
pub fn copy(mdt: &Mdt, epoch: u64, records: &[AuditRecord]) -> Result<(), Status> {
    let (was_epoch, was_seq) = cursor(mdt);
    let after = if epoch == was_epoch { was_seq } else { 0 };
    let mut new: Vec<&AuditRecord> = records.iter().filter(|r| r.seq > after).collect();
    new.sort_by_key(|r| r.seq);
    let Some(last) = new.last().map(|r| r.seq) else {
        if epoch != was_epoch {
            *mdt.changelog.admin_cursor.lock() = Some((epoch, 0));
        }
        return Ok(());
    };
    let mut cursor = epoch.to_be_bytes().to_vec();
    cursor.extend_from_slice(&last.to_be_bytes());
    if !mdt.changelog.enabled() {
        // Passed over, durably: a restart does not copy them once a consumer registers.
        let mut w = mdt.store().writes();
        w.put_meta(CURSOR, cursor);
        w.commit()?;
        *mdt.changelog.admin_cursor.lock() = Some((epoch, last));
        return Ok(());
    }
    let origin = Origin {
        uid: 0,
        gid: 0,
        jobid: "mgs",
    };
    let mut tx = mdt.begin();
    for r in new {
        tx.now = TimeSpec {
            sec: i64::try_from(r.time_s).unwrap_or(i64::MAX),
            nsec: 0,
        };
        let text = format!("{}: {}: {}", r.who, r.what, r.outcome);
        note(
            &mut tx,
            &origin,
            Change::new(
                RecordKind::Admin,
                Fid::default(),
                Fid::default(),
                &name_of(&text),
            ),
        );
    }
    tx.put_meta(CURSOR, cursor);
    tx.commit()?;
    *mdt.changelog.admin_cursor.lock() = Some((epoch, last));
    Ok(())
}

/// `text` as a record's name: at most a name's length, cut at a character boundary.
fn name_of(text: &str) -> Vec<u8> {
    let mut end = text.len().min(nacre_types::limits::NAME_BYTES_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.as_bytes()[..end].to_vec()
}
