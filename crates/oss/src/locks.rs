//! An OST's extent locks (`nacre_ldlm` with [`Extents`]): read locks granted with reads
//! (taken before the data is read), the extents every change revokes before it runs, the
//! clients' callback polls, and the clients evicted for not cancelling in time — whose
//! later requests are refused (`ESHUTDOWN`), so a client that may still cache what it no
//! longer holds a lock on learns it first and starts afresh under a new uuid.
//!
//! | request | revokes (other clients' locks) |
//! |---|---|
//! | write | read and write locks on the bytes written |
//! | punch (truncate) | read and write locks from the new size on |
//! | fallocate punching a hole | read and write locks on the hole |
//! | destroy | nothing: the object's locks are dropped without callbacks (its file is gone and no one has it open) |
//! | read | write locks on the bytes read |
//! | enqueue (a lock asked for) | what conflicts with the lock asked for |
//!
//! A glimpse (an object's size) revokes nothing: it asks the holders of write locks on the
//! object for the size they know ([`park_glimpse`]) and answers the largest of theirs and
//! the stored one.

use crate::OstTarget;
use nacre_ldlm::kind::Extent;
use nacre_ldlm::msg::{ExtentRef, REFS_PER_MESSAGE_MAX};
use nacre_ldlm::server::{Callbacks, Extents, Namespace, Revocation};
use nacre_net::{Incoming, Outgoing};
use nacre_types::{ObjectId, Status};
use nacre_wire::encode_body;
use nacre_wire::oss::{runs_valid, OssCall, OssReply, OssRequest};
use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// Evicted client uuids remembered (to refuse them); the oldest are forgotten.
pub const EVICTED_REMEMBERED_MAX: usize = 4_096;

/// A client uuid that takes no locks (a server's own request, a client that does not cache).
pub const NO_CLIENT: [u8; 16] = [0; 16];

/// The lock state of one OST.
pub struct OstLocks {
    /// The namespace.
    pub ns: Arc<Namespace<Extents>>,
    /// This start of the OST (random): a client that knew another holds none of its locks.
    pub epoch: u64,
    evicted: Mutex<Evicted>,
}

/// Evicted client uuids, and the order they were evicted in (the oldest are forgotten).
type Evicted = (HashSet<[u8; 16]>, VecDeque<[u8; 16]>);

/// How long after its start an OST lets clients take back the locks they held before
/// ([`nacre_ldlm::server::Namespace::reclaim`]): a client learns of the restart at its next
/// callback poll or write, within its reconnect time.
pub const RECLAIM_WINDOW_MS: u64 = 120_000;

impl Default for OstLocks {
    fn default() -> Self {
        let ns = Namespace::new(fastrand::u64(1..u64::MAX / 2));
        ns.open_reclaim(RECLAIM_WINDOW_MS);
        OstLocks {
            ns,
            epoch: fastrand::u64(1..u64::MAX),
            evicted: Mutex::new((HashSet::new(), VecDeque::new())),
        }
    }
}

impl OstLocks {
    /// True if `client` was evicted here (its requests are refused).
    pub fn is_evicted(&self, client: &[u8; 16]) -> bool {
        *client != NO_CLIENT && self.evicted.lock().0.contains(client)
    }

    /// Evicts `client`: its locks are dropped and its later requests refused (its space
    /// grant is taken back by the caller).
    pub fn evict(&self, client: &[u8; 16], why: &str, ost: &str) {
        let n = self.ns.evict(client);
        let mut e = self.evicted.lock();
        if e.0.insert(*client) {
            e.1.push_back(*client);
            if e.1.len() > EVICTED_REMEMBERED_MAX {
                if let Some(old) = e.1.pop_front() {
                    e.0.remove(&old);
                }
            }
        }
        drop(e);
        tracing::warn!(
            "{ost}: evicting client {} ({n} locks): {why}",
            uuid_text(client)
        );
    }

    /// Evicted clients remembered now.
    pub fn evicted_count(&self) -> usize {
        self.evicted.lock().0.len()
    }
}

fn uuid_text(c: &[u8; 16]) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

/// The extents `req` changes or reads, as (object, extent) pairs; `bulk_len` is the size of
/// a write's data.
pub fn targets(req: &OssRequest, bulk_len: u64) -> Vec<(ObjectId, Extent)> {
    match req {
        OssRequest::Write { object, offset, .. } => {
            vec![(*object, Extent::of(*offset, bulk_len, true))]
        }
        // Each run alone, never their hull: another client may hold the gaps. Runs that
        // are not valid target nothing (the request is refused before anything is done).
        OssRequest::WriteRuns { object, runs, .. } if runs_valid(runs, bulk_len) => runs
            .iter()
            .map(|r| (*object, Extent::of(r.offset, u64::from(r.len), true)))
            .collect(),
        OssRequest::Punch { object, size, .. } => vec![(
            *object,
            Extent {
                start: *size,
                end: u64::MAX,
                write: true,
            },
        )],
        OssRequest::Fallocate {
            object,
            offset,
            len,
            punch_hole: true,
            ..
        } => vec![(*object, Extent::of(*offset, *len, true))],
        OssRequest::Read {
            object,
            offset,
            len,
            ..
        } => vec![(*object, Extent::of(*offset, u64::from(*len), false))],
        OssRequest::Enqueue {
            object,
            start,
            end,
            write,
        } if start <= end => vec![(
            *object,
            Extent {
                start: *start,
                end: *end,
                write: *write,
            },
        )],
        // A data version taken after the write lock holders wrote what they keep.
        OssRequest::DataVersion {
            objects,
            flush: true,
        } => objects
            .iter()
            .map(|o| {
                (
                    *o,
                    Extent {
                        start: 0,
                        end: u64::MAX,
                        write: false,
                    },
                )
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn requester(client: &[u8; 16]) -> Option<&[u8; 16]> {
    (*client != NO_CLIENT).then_some(client)
}

/// Revokes, before `call` runs, the other clients' locks on what it changes or reads;
/// evicts the clients that did not cancel in time. Holds conflicting grants off until the
/// returned hold is dropped (after the request).
pub(crate) fn revoke_for<'a>(
    ost: &'a OstTarget,
    call: &OssCall,
    bulk_len: u64,
) -> Option<Revocation<'a, Extents>> {
    let t = targets(&call.req, bulk_len);
    if t.is_empty() {
        return None;
    }
    let hold = ost.locks.ns.revoke(requester(&call.client), &t);
    for c in &hold.late {
        ost.evict(c, "did not cancel a called-back lock in time");
    }
    Some(hold)
}

/// Parks a request that would have to wait for other clients to cancel locks: the
/// callbacks go out now and the request is queued on its service again once they are
/// cancelled (or their clients evicted), so no service thread waits meanwhile. Returns the
/// request if it can run now.
pub(crate) fn park_change(ost: &Arc<OstTarget>, req: Incoming, call: &OssCall) -> Option<Incoming> {
    if req.resubmits() > 0 {
        return Some(req);
    }
    let ns = &ost.locks.ns;
    if ns.granted() == 0 || (call.client != NO_CLIENT && !ns.others_hold(&call.client)) {
        return Some(req);
    }
    let t = targets(&call.req, u64::from(req.header.bulk_len));
    if t.is_empty() || !ns.conflicts(requester(&call.client), &t) {
        return Some(req);
    }
    let weak = Arc::downgrade(ost);
    ns.revoke_later(
        requester(&call.client),
        &t,
        Box::new(move |late| {
            if let Some(o) = weak.upgrade() {
                for c in &late {
                    o.evict(c, "did not cancel a called-back lock in time");
                }
            }
            req.resubmit();
        }),
    );
    None
}

/// Parks a client's callback poll; the answer goes out when callbacks are due or the wait is
/// over (at once for a client that knew another start of the OST).
pub(crate) fn poll(
    ost: &Arc<OstTarget>,
    client: [u8; 16],
    wait_ms: u64,
    epoch: u64,
    req: Incoming,
) {
    if client == NO_CLIENT {
        req.respond(Outgoing::error(Status::Inval));
        return;
    }
    // A client that knew another start, or none yet, learns this one at once.
    let wait_ms = if epoch != ost.locks.epoch { 0 } else { wait_ms };
    let epoch = ost.locks.epoch;
    ost.grants.seen(&client);
    ost.locks.ns.poll(
        &client,
        wait_ms,
        Box::new(move |due: Callbacks<ExtentRef, ObjectId>| {
            req.respond(Outgoing::ok(encode_body(&OssReply::Blocking {
                epoch,
                locks: due.revoke,
                glimpses: due.glimpse,
            })));
        }),
    );
}

/// The whole object, read: what a glimpse asks about (write locks conflict with it).
const WHOLE_READ: Extent = Extent {
    start: 0,
    end: u64::MAX,
    write: false,
};

/// Parks a glimpse of `object` while other clients hold write locks on it: they are asked
/// for the size they know (their locks stay), and the glimpse is answered with the largest
/// of their answers and the stored size once all answered (a client that does not answer
/// in time is evicted). Returns the request if no one is to be asked (it runs as usual).
pub(crate) fn park_glimpse(
    ost: &Arc<OstTarget>,
    req: Incoming,
    call: &OssCall,
    object: ObjectId,
) -> Option<Incoming> {
    let asker = requester(&call.client);
    if !ost.locks.ns.glimpse_needed(asker, &object, &WHOLE_READ) {
        return Some(req);
    }
    let weak = Arc::downgrade(ost);
    let started = std::time::Instant::now();
    let jobid = nacre_types::jobid::clamp(&call.jobid).to_string();
    ost.locks.ns.glimpse(
        asker,
        object,
        WHOLE_READ,
        Box::new(move |known: Option<u64>| {
            let Some(o) = weak.upgrade() else {
                req.respond(Outgoing::error(Status::NoDev));
                return;
            };
            let out = match o.store.size(object) {
                Ok((size, blocks)) => Outgoing::ok(encode_body(&OssReply::ObjectAttr {
                    size: size.max(known.unwrap_or(0)),
                    blocks,
                })),
                Err(e) => Outgoing::error(Status::from_io(&e.io())),
            };
            let op = (OssRequest::Glimpse { object }.opcode() & 0xff) as usize - 1;
            let us = started.elapsed().as_micros() as u64;
            o.stats.record(op, us, 0);
            o.job_stats.record(&jobid, op, us, 0);
            req.respond(out);
        }),
    );
    None
}

/// A client answers glimpses.
pub(crate) fn glimpse_answer(
    ost: &OstTarget,
    client: &[u8; 16],
    sizes: &[(ObjectId, u64)],
) -> Result<OssReply, Status> {
    if sizes.len() > REFS_PER_MESSAGE_MAX {
        return Err(Status::TooBig);
    }
    for (object, size) in sizes {
        ost.locks.ns.glimpse_answer(client, object, *size);
    }
    Ok(OssReply::Done)
}

/// True for data written behind under a write lock of another start of this OST: refused
/// (`ESTALE`) until the client took its locks back.
pub(crate) fn stale_write(ost: &OstTarget, req: &OssRequest) -> bool {
    req.is_kept_write() && req.write_epoch() != Some(ost.locks.epoch)
}

/// A client takes back the locks it held before this OST restarted.
pub(crate) fn replay(
    ost: &OstTarget,
    client: &[u8; 16],
    locks: &[ExtentRef],
) -> Result<OssReply, Status> {
    if locks.len() > REFS_PER_MESSAGE_MAX {
        return Err(Status::TooBig);
    }
    if *client == NO_CLIENT {
        return Err(Status::Inval);
    }
    let got = ost.locks.ns.reclaim(client, locks);
    if !got.changed.is_empty() {
        tracing::info!(
            "{}: client {}: {} objects changed since the restart: their locks are refused",
            ost.label.name(),
            uuid_text(client),
            got.changed.len()
        );
    }
    Ok(OssReply::Replayed {
        refused: got.refused,
        changed: got.changed,
    })
}

/// A client gives locks back.
pub(crate) fn cancel(
    ost: &OstTarget,
    client: &[u8; 16],
    handles: &[u64],
) -> Result<OssReply, Status> {
    if handles.len() > REFS_PER_MESSAGE_MAX {
        return Err(Status::TooBig);
    }
    ost.locks.ns.cancel(client, handles);
    Ok(OssReply::Done)
}

/// Bytes of a page the kernel of a client caches.
const PAGE_BYTES: u64 = 4096;
/// Locks a client may hold on one object before its writes through there get no read lock
/// on their pages (which the client then drops after the write): on a contended object
/// every write through adds one, and each lock costs every later change of the object a
/// look.
pub(crate) const PAGE_LOCKS_PER_OBJECT_MAX: usize = 256;

/// The lock `client` gets with a write of `len` bytes at `offset` of `object`, taken under
/// the write's `hold` before the write is applied (so no other client's change can come in
/// between): a write lock on the bytes written, widened as far as no other lock allows, so
/// it may keep its next writes there cached; else (a contended object, another client's
/// lock next to them) a read lock on the whole pages written, which the client's kernel
/// keeps cached after a write through (a page written in part is not kept), so a change
/// elsewhere calls them back — while the client holds fewer than
/// [`PAGE_LOCKS_PER_OBJECT_MAX`] locks on the object. The flag is true for a new lock.
pub(crate) fn grant_write(
    ost: &OstTarget,
    client: &[u8; 16],
    hold: Option<&Revocation<'_, Extents>>,
    object: ObjectId,
    offset: u64,
    len: usize,
) -> Option<(ExtentRef, bool)> {
    let grant = |ext: Extent| match hold {
        Some(h) => h.try_grant(client, object, ext),
        None => ost.locks.ns.try_grant(client, object, ext),
    };
    let len = len as u64;
    if let Some(g) = grant(Extent::of(offset, len, true)) {
        return Some(g);
    }
    let start = offset.div_ceil(PAGE_BYTES).saturating_mul(PAGE_BYTES);
    let end = offset.saturating_add(len) / PAGE_BYTES * PAGE_BYTES;
    (start < end && ost.locks.ns.held_on(client, &object) < PAGE_LOCKS_PER_OBJECT_MAX)
        .then(|| {
            grant(Extent {
                start,
                end: end - 1,
                write: false,
            })
        })
        .flatten()
}

/// A read lock for `client` on what `req` (a read) reads, if it asked for one and one can
/// be granted: taken before the data is read, so a change that starts after it revokes it.
/// The flag is true for a lock new to the client (false: one it held already).
pub(crate) fn grant_read(
    ost: &OstTarget,
    client: &[u8; 16],
    req: &OssRequest,
) -> Option<(ExtentRef, bool)> {
    let OssRequest::Read {
        object,
        offset,
        len,
        lock: true,
    } = req
    else {
        return None;
    };
    if *client == NO_CLIENT {
        return None;
    }
    ost.locks
        .ns
        .try_grant(client, *object, Extent::of(*offset, u64::from(*len), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::Owner;

    #[test]
    fn changes_revoke_what_they_change_and_reads_only_write_locks() {
        let o = ObjectId { seq: 1, id: 2 };
        let w = targets(
            &OssRequest::Write {
                object: o,
                offset: 10,
                owner: Owner::default(),
                lock: true,
                grant_used: 0,
                epoch: 0,
                layout_gen: 0,
            },
            5,
        );
        // A data version with a flush calls back write locks on the whole objects.
        let dv = targets(
            &OssRequest::DataVersion {
                objects: vec![o],
                flush: true,
            },
            0,
        );
        let whole = Extent {
            start: 0,
            end: u64::MAX,
            write: false,
        };
        assert_eq!(dv, vec![(o, whole)]);
        let quiet = OssRequest::DataVersion {
            objects: vec![o],
            flush: false,
        };
        assert!(targets(&quiet, 0).is_empty());
        assert_eq!(w, vec![(o, Extent::of(10, 5, true))]);
        let p = targets(
            &OssRequest::Punch {
                object: o,
                size: 7,
                layout_gen: 0,
            },
            0,
        );
        assert_eq!(
            (p[0].1.start, p[0].1.end, p[0].1.write),
            (7, u64::MAX, true)
        );
        let alloc = OssRequest::Fallocate {
            object: o,
            offset: 0,
            len: 9,
            keep_size: false,
            punch_hole: false,
            layout_gen: 0,
        };
        assert!(targets(&alloc, 0).is_empty(), "allocation changes no data");
        let r = targets(
            &OssRequest::Read {
                object: o,
                offset: 0,
                len: 4096,
                lock: true,
            },
            0,
        );
        assert!(!r[0].1.write);
        assert!(targets(&OssRequest::StatFs, 0).is_empty());
    }

    /// A client polling for callbacks on `ost`, cancelling each lock it is called back for.
    fn cancelling_poller(ost: &Arc<OstTarget>, client: [u8; 16]) {
        let ns = ost.locks.ns.clone();
        ost.locks.ns.poll(
            &client,
            10_000,
            Box::new(move |cb: Callbacks<_, _>| {
                let handles: Vec<u64> = cb.revoke.iter().map(|l| l.handle).collect();
                ns.cancel(&client, &handles);
            }),
        );
    }

    #[test]
    fn reads_say_which_locks_are_new_and_writes_through_get_their_whole_pages() {
        let dir = std::env::temp_dir().join(format!("nacre-oss-locks-{}", fastrand::u64(..)));
        let label = nacre_osd::Label::new(nacre_types::TargetKind::Ost, 0, "t", None).unwrap();
        let ost = Arc::new(OstTarget::open(&dir, label).unwrap());
        let (a, b) = ([1u8; 16], [2u8; 16]);
        cancelling_poller(&ost, a);
        let o = ObjectId { seq: 1, id: 3 };
        let read = OssRequest::Read {
            object: o,
            offset: 0,
            len: 4096,
            lock: true,
        };
        // A read error gives back only a lock new to the client: the flag says which.
        let (first, new) = grant_read(&ost, &a, &read).unwrap();
        assert!(new);
        let (again, new) = grant_read(&ost, &a, &read).unwrap();
        assert_eq!((again.handle, new), (first.handle, false));
        // B writes twice, each time calling back a lock A read under: the object is
        // contended for a while.
        let bytes = Extent::of(100, 10_000, true);
        drop(ost.locks.ns.revoke(Some(&b), &[(o, bytes)]));
        cancelling_poller(&ost, a);
        assert!(grant_read(&ost, &a, &read).is_some_and(|(_, new)| new));
        drop(ost.locks.ns.revoke(Some(&b), &[(o, bytes)]));
        cancelling_poller(&ost, b);
        let hold = ost.locks.ns.revoke(Some(&b), &[(o, bytes)]);
        // No write lock on a contended object, so a read lock on the whole pages written.
        let (l, new) = grant_write(&ost, &b, Some(&hold), o, 100, 10_000).unwrap();
        assert!(new && !l.write);
        assert_eq!((l.start, l.end), (4096, 8191));
        // A write within one page leaves no whole page: nothing to cover.
        assert!(grant_write(&ost, &b, Some(&hold), o, 5000, 100).is_none());
        drop(hold);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
