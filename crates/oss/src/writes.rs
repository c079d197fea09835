//! Writes of file data on an OST: one byte range ([`OssRequest::Write`]) or several of one
//! object ([`OssRequest::WriteRuns`], data a client kept behind). Either is one write of its
//! bulk to the space grants, quotas and statistics; runs go to the store one by one, in
//! offset order.
//!
//! [`OssRequest::Write`]: nacre_wire::oss::OssRequest::Write
//! [`OssRequest::WriteRuns`]: nacre_wire::oss::OssRequest::WriteRuns

use crate::{locks, quota_reserve, OstTarget};
use nacre_ldlm::server::{Extents, Revocation};
use nacre_net::stream::{BulkStream, StreamError};
use nacre_osd::objects::Arriving;
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{AlignedBuf, ObjectId, Owner, Status};
use nacre_wire::oss::{runs_valid, OssReply, OssRequest, Run};
use std::sync::atomic::Ordering;

/// Refuses (`EPROTO`) a [`OssRequest::WriteRuns`] that is not data kept behind (epoch 0),
/// has no bulk (`bulk_len`) or whose runs are not [`runs_valid`] for it; other requests
/// pass.
///
/// [`OssRequest::WriteRuns`]: nacre_wire::oss::OssRequest::WriteRuns
pub(crate) fn check(req: &OssRequest, bulk_len: Option<u64>) -> Result<(), Status> {
    match req {
        OssRequest::WriteRuns { epoch, runs, .. } => match bulk_len {
            Some(len) if *epoch != 0 && runs_valid(runs, len) => Ok(()),
            _ => Err(Status::Proto),
        },
        _ => Ok(()),
    }
}

/// Where a write's bulk goes.
pub(crate) enum Place<'a> {
    /// All of it at this offset, with a write lock after it if `lock` (and one can be had).
    At {
        /// Offset in the object.
        offset: u64,
        /// A lock wanted.
        lock: bool,
    },
    /// Run by run ([`runs_valid`] for the bulk, else `EPROTO`); no lock is given.
    Runs(&'a [Run]),
}

/// A write's data: arrived whole, or arriving (streamed off the network, written part by
/// part as it comes: `nacre_osd::objects::write_arriving`).
pub(crate) enum Data<'a> {
    /// All of it, checked.
    Whole(&'a AlignedBuf),
    /// Still arriving (only for a write at one offset).
    Arriving(&'a BulkStream),
}

impl Data<'_> {
    fn len(&self) -> usize {
        match self {
            Data::Whole(b) => b.len(),
            Data::Arriving(s) => s.len(),
        }
    }
}

/// A [`BulkStream`] as the object store reads arriving data.
struct Streamed<'a>(&'a BulkStream);

impl Arriving for Streamed<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn filled(&self) -> usize {
        self.0.filled()
    }

    fn first(&self, n: usize) -> std::io::Result<(&[u8], Option<&[u32]>)> {
        self.0.wait_for(n).map_err(stream_error)
    }

    fn whole(&self) -> std::io::Result<()> {
        self.0.finish().map(|_| ()).map_err(stream_error)
    }
}

/// A stream that failed as the disk sees it: its sender went away (`ECONNRESET`) or its
/// bytes were damaged on the way (`EBADMSG`, as a checksum failure is).
fn stream_error(e: StreamError) -> std::io::Error {
    let kind = match e {
        StreamError::Cut(_) => std::io::ErrorKind::ConnectionReset,
        StreamError::Checksum(_) => std::io::ErrorKind::InvalidData,
    };
    std::io::Error::new(kind, e)
}

/// A write of `data` to `object` for `client`, under `hold` (the callbacks of other
/// clients' conflicting locks, done): the reply, or why nothing (or, for runs, not all) was
/// written.
pub(crate) fn write(
    ost: &OstTarget,
    client: &[u8; 16],
    hold: Option<&Revocation<'_, Extents>>,
    (object, owner, grant_used): (ObjectId, Owner, u64),
    place: Place<'_>,
    data: Data<'_>,
) -> Result<OssReply, Status> {
    let len = data.len() as u64;
    let (offset, want_lock) = match place {
        Place::At { offset, lock } => (offset, lock),
        Place::Runs(runs) => (runs.first().map_or(0, |r| r.offset), false),
    };
    match place {
        Place::Runs(runs) if !runs_valid(runs, len) => return Err(Status::Proto),
        Place::At { .. } if offset.saturating_add(len) > FILE_BYTES_MAX => {
            return Err(Status::FBig)
        }
        _ => {}
    }
    let caching = want_lock && *client != locks::NO_CLIENT;
    let avail = || ost.store.statfs().map_or(0, |s| s.bytes_avail);
    let grant_added = ost.grants.write(client, len, grant_used, avail, caching)?;
    // A holder writing what it kept before it cancels is alive and at work.
    ost.locks.ns.prolong(client, &object);
    let lock = caching
        .then(|| locks::grant_write(ost, client, hold, object, offset, data.len()))
        .flatten();
    // Within the quotas of the object's owner, group and project (docs/quota.md).
    let (reserved, sync_ids) = match quota_reserve(ost, object, owner, len) {
        Ok(r) => r,
        Err(s) => {
            if let Some((l, true)) = lock {
                ost.locks.ns.release(client, l.handle);
            }
            return Err(s);
        }
    };
    let started = ost.brw.write.begin();
    let result = match (place, data) {
        (Place::At { .. }, Data::Whole(data)) => ost.store.write_buf(object, offset, data, owner),
        (Place::At { .. }, Data::Arriving(s)) => {
            ost.store
                .write_arriving(object, offset, &Streamed(s), owner)
        }
        (Place::Runs(_), Data::Arriving(_)) => unreachable!("runs are never streamed"),
        (Place::Runs(runs), Data::Whole(data)) => {
            let mut at = 0usize;
            runs.iter().try_for_each(|r| {
                let n = r.len as usize;
                let bytes = &data[at..at + n];
                at += n;
                ost.store.write(object, r.offset, bytes, owner)
            })
        }
    };
    ost.brw.write.end(started, len);
    if let Some(r) = reserved {
        ost.quota.release(r);
    }
    if let Err(e) = result {
        // The client does not learn of a lock new to it: it goes again.
        if let Some((l, true)) = lock {
            ost.locks.ns.release(client, l.handle);
        }
        tracing::debug!("{}: {e}", ost.label.name());
        // Runs written before the one that failed changed the object too.
        ost.fences.changed(object);
        return Err(Status::from_io(&e.io()));
    }
    ost.fences.changed(object);
    ost.write_bytes.fetch_add(len, Ordering::Relaxed);
    Ok(OssReply::Written {
        len: len as u32,
        lock: lock.map(|(l, _)| l),
        grant_added,
        sync_ids,
        object: ost.store.size_open(object).ok(),
    })
}
