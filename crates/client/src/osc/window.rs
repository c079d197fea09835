//! RPCs in flight to the OSTs: a call's window of requests (bounded per OST), each sent
//! under the client's uuid and capability there, then collected; sent again when the OST
//! had evicted the client (not a request bound to the identity it went under), refused a
//! retired capability, or is recovering.

use crate::rpc_stats::OscRpcStats;
use crate::{Client, Result};
use nacre_net::rpc::{decode_reply, request, RpcError};
use nacre_net::PendingReply;
use nacre_types::{AlignedBuf, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// An RPC in flight: OST, tag, the reply to come, the statistics to tell when it is done,
/// and the request (sent again, once, if the OST answers that it evicted this client,
/// unless it must go as the identity it went under: [`Window::start_as`]).
pub(crate) struct Pending {
    ost: u32,
    tag: usize,
    reply: PendingReply,
    stats: Option<(Arc<OscRpcStats>, bool)>,
    req: OssRequest,
    bulk: Option<Arc<AlignedBuf>>,
    /// The client's uuid at the OST the request was sent under.
    uuid: [u8; 16],
    /// The file whose capability the request carried, if it carried one.
    capa_fid: Option<nacre_types::Fid>,
    /// Sent again under the client's new uuid if the OST evicted it: not for a request
    /// that must go as the identity it was sent under ([`Window::start_as`]).
    resend_evicted: bool,
}

/// A reply and its bulk data, or the error.
pub(crate) type Collected = std::result::Result<(OssReply, Option<AlignedBuf>), RpcError>;

/// A reply of [`Window::finish_as`]: tag, reply, bulk data, the uuid its request went under.
pub(crate) type ReplyAs = (usize, OssReply, Option<AlignedBuf>, [u8; 16]);

/// RPCs in flight for one client call, bounded per OST.
#[derive(Default)]
pub(crate) struct Window {
    pending: VecDeque<Pending>,
    done: Vec<(usize, Collected, [u8; 16])>,
    client: std::sync::Weak<Client>,
}

impl Window {
    pub(super) fn start(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
    ) -> Result<()> {
        self.start_into(client, tag, ost, req, bulk, None)
    }

    /// [`Window::start`], as the client known as `uuid` at the OST if given, then never
    /// sent again as a newer identity: if the OST evicted `uuid`, the request fails
    /// (`ESHUTDOWN`).
    pub(super) fn start_as(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        (req, bulk): (&OssRequest, Option<Arc<AlignedBuf>>),
        uuid: Option<[u8; 16]>,
    ) -> Result<()> {
        self.start_with(client, tag, ost, (req, bulk, None), uuid)
    }

    /// [`Window::start`], the reply's bulk received straight into `into` if it arrives
    /// whole on a TCP link (`Connection::start_into`).
    pub(super) fn start_into(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
        into: Option<AlignedBuf>,
    ) -> Result<()> {
        self.start_with(client, tag, ost, (req, bulk, into), None)
    }

    /// Starts `req` once fewer than the OST's limit of this window's RPCs are in flight:
    /// as `uuid` if given (and never sent again as another), else as the client's uuid now.
    fn start_with(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        (req, bulk, into): (&OssRequest, Option<Arc<AlignedBuf>>, Option<AlignedBuf>),
        uuid: Option<[u8; 16]>,
    ) -> Result<()> {
        let limit = client.net_config().max_rpcs_in_flight.max(1);
        if self.client.strong_count() == 0 {
            self.client = client.me.clone();
        }
        while self.pending.iter().filter(|p| p.ost == ost).count() >= limit {
            let pos = self
                .pending
                .iter()
                .position(|p| p.ost == ost)
                .expect("pending on ost");
            let p = self.pending.remove(pos).expect("pending entry");
            let tag = p.tag;
            let (r, uuid) = self.collect(p);
            self.done.push((tag, r, uuid));
        }
        let pending = match uuid {
            Some(uuid) => Pending {
                resend_evicted: false,
                ..Self::send_as(client, ost, tag, req, bulk, into, uuid)?
            },
            None => Self::send(client, ost, tag, req, bulk, into)?,
        };
        self.pending.push_back(pending);
        Ok(())
    }

    fn send(
        client: &Client,
        ost: u32,
        tag: usize,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
        into: Option<AlignedBuf>,
    ) -> Result<Pending> {
        Self::send_as(client, ost, tag, req, bulk, into, client.ost_uuid(ost))
    }

    /// Sends `req` as the client known as `uuid` at the OST.
    fn send_as(
        client: &Client,
        ost: u32,
        tag: usize,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
        into: Option<AlignedBuf>,
        uuid: [u8; 16],
    ) -> Result<Pending> {
        let conn = client.osc(ost)?;
        let bulk_rpc = match req {
            OssRequest::Write { .. } | OssRequest::WriteRuns { .. } => {
                Some((true, bulk.as_ref().map_or(0, |b| b.len() as u64)))
            }
            OssRequest::Read { len, .. } => Some((false, u64::from(*len))),
            _ => None,
        };
        if let Some((write, bytes)) = bulk_rpc {
            client.rpc_stats(ost).sent(write, bytes);
        }
        let short = matches!(req, OssRequest::Glimpse { .. } | OssRequest::StatFs);
        let mut call = OssCall::from_client(uuid, req.clone());
        call.capa = client.capa_for(ost, req);
        let capa_fid = call.capa.as_ref().map(|c| c.fid);
        let mut rpc = request(req.opcode(), ost, &call, bulk.clone());
        rpc.inline = short;
        let started = match into {
            Some(into) => conn.start_into(rpc, into),
            None => conn.start(rpc),
        };
        let reply = started.map_err(|e| crate::ClientError::Rpc(e.into()))?;
        Ok(Pending {
            ost,
            tag,
            reply,
            stats: bulk_rpc.map(|(w, _)| (client.rpc_stats(ost), w)),
            req: req.clone(),
            bulk,
            uuid,
            capa_fid,
            resend_evicted: true,
        })
    }

    /// Waits for one RPC; sent again once, under the client's new uuid, if the OST had
    /// evicted it (but a write kept behind under a lock: the eviction took the lock, and
    /// another client may have written there since, so its data is lost, never sent over
    /// the newer), and again while the OST answers that it is recovering.
    /// The reply to `p` (or to the request sent again for it) and the uuid the request
    /// it answers went under: a lock or grant it carries is this client's only while that
    /// is still its uuid at the OST.
    fn collect(&mut self, p: Pending) -> (Collected, [u8; 16]) {
        let (ost, tag, was, capa_fid) = (p.ost, p.tag, p.uuid, p.capa_fid);
        let resend_evicted = p.resend_evicted;
        let (req, bulk) = (p.req.clone(), p.bulk.clone());
        let r = collect(p.reply, p.stats);
        let again = |c: &Client, bulk| match Self::send(c, ost, tag, &req, bulk, None) {
            Ok(again) => {
                let uuid = again.uuid;
                Some((collect(again.reply, again.stats), uuid))
            }
            Err(_) => None,
        };
        match (&r, self.client.upgrade()) {
            // The OST refused the capability the request carried (made with a server key a
            // rotation has retired since, or expired on the way): new ones from the MDT,
            // and the request sent once more with them.
            // Not a write kept behind under a lock (its lock may be gone: see below), and
            // only while the client is the one it was at the OST.
            (Err(RpcError::Status(Status::Access)), Some(c))
                if capa_fid.is_some() && !req.is_kept_write() && c.ost_uuid(ost) == was =>
            {
                let fid = capa_fid.expect("guarded");
                if let Err(e) = c.renew_capas(fid) {
                    tracing::debug!("renewing the capabilities of {fid}: {e}");
                    return (r, was);
                }
                if !resend_evicted {
                    // As the identity it went under, whatever the client is known as now.
                    return match Self::send_as(&c, ost, tag, &req, bulk, None, was) {
                        Ok(again) => (collect(again.reply, again.stats), was),
                        Err(_) => (r, was),
                    };
                }
                again(&c, bulk).unwrap_or((r, was))
            }
            (Err(RpcError::Status(Status::Shutdown)), Some(c))
                if was != crate::datalocks::NO_UUID =>
            {
                c.data_evicted(ost, was);
                if req.is_kept_write() || !resend_evicted {
                    return (r, was);
                }
                again(&c, bulk).unwrap_or((r, was))
            }
            // Sent again as the same client: the OST is taking its clients' locks back.
            (Err(RpcError::Status(Status::InProgress)), Some(c)) => {
                let r = while_recovering(r, || {
                    let again = Self::send_as(&c, ost, tag, &req, bulk.clone(), None, was)
                        .map_err(|e| RpcError::Status(e.status()))?;
                    collect(again.reply, again.stats)
                });
                (r, was)
            }
            _ => (r, was),
        }
    }

    /// Waits for everything; results by tag, first error wins.
    pub(super) fn finish(self) -> Result<Vec<(usize, OssReply, Option<AlignedBuf>)>> {
        let out = self.finish_as()?;
        Ok(out.into_iter().map(|(t, r, b, _)| (t, r, b)).collect())
    }

    /// [`Window::finish`], each result with the uuid its request went under (a lock or
    /// grant it carries is this client's only while that is still its uuid at the OST).
    pub(super) fn finish_as(mut self) -> Result<Vec<ReplyAs>> {
        while let Some(p) = self.pending.pop_front() {
            let tag = p.tag;
            let (r, uuid) = self.collect(p);
            self.done.push((tag, r, uuid));
        }
        let mut out = Vec::with_capacity(self.done.len());
        let mut first_err = None;
        for (t, r, uuid) in std::mem::take(&mut self.done) {
            match r {
                Ok((reply, bulk)) => out.push((t, reply, bulk, uuid)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // RPCs abandoned without being collected (read-ahead a reader did not use) still leave
        // the in-flight count.
        for p in self.pending.drain(..) {
            if let Some((s, write)) = p.stats {
                s.done(write);
            }
        }
    }
}

fn collect(p: PendingReply, stats: Option<(Arc<OscRpcStats>, bool)>) -> Collected {
    let reply = p.wait();
    if let Some((s, write)) = stats {
        s.done(write);
    }
    decode_reply(reply?)
}

/// Sends one request to OST `ost` as the client known there as `uuid` (read before the
/// caller checked its request may still go): the reply to wait for ([`collect_one`]).
pub(crate) fn send_one(
    client: &Client,
    ost: u32,
    req: &OssRequest,
    bulk: Option<Arc<AlignedBuf>>,
    uuid: [u8; 16],
) -> Result<Pending> {
    Window::send_as(client, ost, 0, req, bulk, None, uuid)
}

/// Waits for a request sent by [`send_one`] (not sent again if the OST evicted the client).
pub(crate) fn collect_one(p: Pending) -> Collected {
    collect(p.reply, p.stats)
}

/// Sends one request to OST `ost` as the client known there as `uuid` and waits for its
/// answer, sending it again while the OST is recovering (not if it evicted the client).
pub(crate) fn call_one(
    client: &Client,
    ost: u32,
    req: &OssRequest,
    bulk: Option<Arc<AlignedBuf>>,
    uuid: [u8; 16],
) -> Collected {
    let once = || {
        let p = send_one(client, ost, req, bulk.clone(), uuid)
            .map_err(|e| RpcError::Status(e.status()))?;
        collect_one(p)
    };
    while_recovering(once(), once)
}

/// Longest a request is sent again to an OST answering that it is recovering (its window
/// is 60 s: nacre_oss::recovery::RECOVERY_MS).
pub const OST_RECOVERY_WAIT_MS_MAX: u64 = 120_000;
const RECOVERY_PAUSE_MS_MIN: u64 = 10;
const RECOVERY_PAUSE_MS_MAX: u64 = 500;

/// `first`, or while it (and each next answer) says the OST is recovering (`EINPROGRESS`:
/// its clients of before are taking their locks back), what `again` gets after a pause
/// that grows up to [`RECOVERY_PAUSE_MS_MAX`], for at most [`OST_RECOVERY_WAIT_MS_MAX`].
fn while_recovering(first: Collected, mut again: impl FnMut() -> Collected) -> Collected {
    let recovering = |r: &Collected| matches!(r, Err(RpcError::Status(Status::InProgress)));
    let deadline = std::time::Instant::now() + Duration::from_millis(OST_RECOVERY_WAIT_MS_MAX);
    let mut pause = RECOVERY_PAUSE_MS_MIN;
    let mut r = first;
    while recovering(&r) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(pause));
        pause = (pause * 2).min(RECOVERY_PAUSE_MS_MAX);
        r = again();
    }
    r
}
