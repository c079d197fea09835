//! The object storage client: file I/O split along the layout into one RPC per object range
//! (at most `max_rpc_size` each), started on every OST at once and then collected, so a
//! striped file's stripes move in parallel. Each OST connection keeps at most
//! `max_rpcs_in_flight` of a call's RPCs outstanding.

use crate::datalocks::ReadLocks;
use crate::rpc_stats::OscRpcStats;
use crate::{Client, ClientError, Result};
use nacre_ldlm::kind::Extent;
use nacre_ldlm::msg::ExtentRef;
use nacre_net::rpc::{decode_reply, request, RpcError};
use nacre_net::PendingReply;
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{AlignedBuf, Layout, ObjectId, StatFs, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// One RPC of a multi-object operation.
pub(crate) struct Sub {
    pub(crate) stripe: usize,
    pub(crate) object_offset: u64,
    pub(crate) len: u64,
}

/// An RPC in flight: OST, tag, the reply to come, the statistics to tell when it is done,
/// and the request (sent again, once, if the OST answers that it evicted this client).
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
}

/// A reply and its bulk data, or the error.
pub(crate) type Collected = std::result::Result<(OssReply, Option<AlignedBuf>), RpcError>;

/// RPCs in flight for one client call, bounded per OST.
#[derive(Default)]
pub(crate) struct Window {
    pending: VecDeque<Pending>,
    done: Vec<(usize, Collected)>,
    client: std::sync::Weak<Client>,
}

impl Window {
    fn start(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
    ) -> Result<()> {
        self.start_into(client, tag, ost, req, bulk, None)
    }

    /// [`Window::start`], the reply's bulk received straight into `into` if it arrives
    /// whole on a TCP link (`Connection::start_into`).
    fn start_into(
        &mut self,
        client: &Client,
        tag: usize,
        ost: u32,
        req: &OssRequest,
        bulk: Option<Arc<AlignedBuf>>,
        into: Option<AlignedBuf>,
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
            let r = self.collect(p);
            self.done.push((tag, r));
        }
        let pending = Self::send(client, ost, tag, req, bulk, into)?;
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
        let conn = client.osc(ost)?;
        let bulk_rpc = match req {
            OssRequest::Write { .. } => Some((true, bulk.as_ref().map_or(0, |b| b.len() as u64))),
            OssRequest::Read { len, .. } => Some((false, u64::from(*len))),
            _ => None,
        };
        if let Some((write, bytes)) = bulk_rpc {
            client.rpc_stats(ost).sent(write, bytes);
        }
        let short = matches!(req, OssRequest::Glimpse { .. } | OssRequest::StatFs);
        let uuid = client.ost_uuid(ost);
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
        })
    }

    /// Waits for one RPC; sent again once, under the client's new uuid, if the OST had
    /// evicted it (but a write kept behind under a lock: the eviction took the lock, and
    /// another client may have written there since, so its data is lost, never sent over
    /// the newer), and again while the OST answers that it is recovering.
    fn collect(&mut self, p: Pending) -> Collected {
        let (ost, tag, was, capa_fid) = (p.ost, p.tag, p.uuid, p.capa_fid);
        let (req, bulk) = (p.req.clone(), p.bulk.clone());
        let r = collect(p.reply, p.stats);
        match (&r, self.client.upgrade()) {
            // The OST refused the capability the request carried (made with a server key a
            // rotation has retired since, or expired on the way): new ones from the MDT,
            // and the request sent once more with them.
            // Not a write kept behind under a lock (its lock may be gone: see below), and
            // only while the client is the one it was at the OST.
            (Err(RpcError::Status(Status::Access)), Some(c))
                if capa_fid.is_some()
                    && !matches!(req, OssRequest::Write { epoch, .. } if epoch != 0)
                    && c.ost_uuid(ost) == was =>
            {
                let fid = capa_fid.expect("guarded");
                if let Err(e) = c.renew_capas(fid) {
                    tracing::debug!("renewing the capabilities of {fid}: {e}");
                    return r;
                }
                match Self::send(&c, ost, tag, &req, bulk, None) {
                    Ok(again) => collect(again.reply, again.stats),
                    Err(_) => r,
                }
            }
            (Err(RpcError::Status(Status::Shutdown)), Some(c))
                if was != crate::datalocks::NO_UUID =>
            {
                c.data_evicted(ost, was);
                if matches!(req, OssRequest::Write { epoch, .. } if epoch != 0) {
                    return r;
                }
                match Self::send(&c, ost, tag, &req, bulk, None) {
                    Ok(again) => collect(again.reply, again.stats),
                    Err(_) => r,
                }
            }
            (Err(RpcError::Status(Status::InProgress)), Some(c)) => while_recovering(r, || {
                let again = Self::send(&c, ost, tag, &req, bulk.clone(), None)
                    .map_err(|e| RpcError::Status(e.status()))?;
                collect(again.reply, again.stats)
            }),
            _ => r,
        }
    }

    /// Waits for everything; results by tag, first error wins.
    fn finish(mut self) -> Result<Vec<(usize, OssReply, Option<AlignedBuf>)>> {
        while let Some(p) = self.pending.pop_front() {
            let tag = p.tag;
            let r = self.collect(p);
            self.done.push((tag, r));
        }
        let mut out = Vec::with_capacity(self.done.len());
        let mut first_err = None;
        for (t, r) in std::mem::take(&mut self.done) {
            match r {
                Ok((reply, bulk)) => out.push((t, reply, bulk)),
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

/// Splits a file range into RPC-sized object ranges.
pub(crate) fn subs(layout: &Layout, offset: u64, len: u64, max: u64) -> Vec<Sub> {
    let mut out = Vec::new();
    for chunk in layout.chunks(offset, len) {
        let mut done = 0;
        while done < chunk.len {
            let n = (chunk.len - done).min(max);
            out.push(Sub {
                stripe: chunk.stripe,
                object_offset: chunk.object_offset + done,
                len: n,
            });
            done += n;
        }
    }
    out
}

/// File offset of byte `object_offset` of stripe `stripe`.
fn file_offset(layout: &Layout, stripe: usize, object_offset: u64) -> u64 {
    let size = u64::from(layout.stripe_size);
    let count = layout.objects.len() as u64;
    (object_offset / size) * size * count + stripe as u64 * size + object_offset % size
}

/// Calls `f(file_offset, object_range_offset, len)` for each stripe-unit run of an object range.
fn for_each_run(layout: &Layout, sub: &Sub, mut f: impl FnMut(u64, usize, usize)) {
    let size = u64::from(layout.stripe_size);
    let mut done = 0u64;
    while done < sub.len {
        let obj = sub.object_offset + done;
        let n = (size - obj % size).min(sub.len - done);
        f(
            file_offset(layout, sub.stripe, obj),
            done as usize,
            n as usize,
        );
        done += n;
    }
}

pub(crate) fn object(layout: &Layout, stripe: usize) -> (u32, ObjectId) {
    let o = layout.objects[stripe];
    (o.ost, o.object)
}

fn max_rpc(client: &Client) -> u64 {
    u64::from(client.net_config().max_rpc_size.max(4096))
}

/// Writes `data` at `offset` of the file `fid` (the default FID for a caller that takes no
/// data locks), through to the OSTs: what is kept of its objects as write-behind is
/// written first.
pub fn write(
    client: &Client,
    layout: &Layout,
    offset: u64,
    data: &[u8],
    owner: nacre_types::Owner,
) -> Result<usize> {
    if data.is_empty() {
        return Ok(0);
    }
    if offset.saturating_add(data.len() as u64) > FILE_BYTES_MAX {
        return Err(Status::FBig.into());
    }
    write_from(client, layout, offset, data, None, owner).map(|(n, _)| n)
}

/// [`write`] of `data`, which `whole` holds (an aligned buffer over the same bytes, e.g. a
/// region of a ring): each RPC whose bytes are one aligned run of `whole` sends them with
/// no copy (a view of `whole`). The count, and whether every RPC was sent so.
pub fn write_from(
    client: &Client,
    layout: &Layout,
    offset: u64,
    data: &[u8],
    whole: Option<&Arc<AlignedBuf>>,
    owner: nacre_types::Owner,
) -> Result<(usize, bool)> {
    if data.is_empty() {
        return Ok((0, false));
    }
    if offset.saturating_add(data.len() as u64) > FILE_BYTES_MAX {
        return Err(Status::FBig.into());
    }
    client.flush_objects(layout);
    let all = subs(layout, offset, data.len() as u64, max_rpc(client));
    let whole = whole.filter(|w| w.len() == data.len());
    let sent = write_subs(client, None, layout, offset, data, owner, &all, whole)?;
    Ok((data.len(), sent))
}

/// The bytes object range `sub` takes of a write at file offset `offset` whose data `whole`
/// holds, as a view of `whole` (no copy), when they are one run of it starting on an
/// aligned address.
fn view(
    whole: &Arc<AlignedBuf>,
    layout: &Layout,
    sub: &Sub,
    offset: u64,
) -> Option<Arc<AlignedBuf>> {
    let mut run: Option<(usize, usize)> = None;
    let mut one = true;
    for_each_run(layout, sub, |file_off, _, n| {
        let src = (file_off - offset) as usize;
        run = match run {
            None => Some((src, src + n)),
            Some((start, end)) => {
                one &= src == end;
                Some((start, src + n))
            }
        };
    });
    let (start, end) = run?;
    if !one
        || end > whole.len()
        || !start.is_multiple_of(nacre_types::limits::DIRECT_IO_ALIGN_BYTES)
    {
        return None;
    }
    if start == 0 && end == whole.len() {
        return Some(whole.clone());
    }
    // SAFETY: `start..end` lies within `whole` (checked above), whose start is aligned, so
    // the view's start is too; `whole` is kept alive by the view. The view is only read:
    // it goes into an `Arc` and is sent as an RPC's bulk.
    let view = unsafe {
        let ptr = std::ptr::NonNull::new_unchecked(whole.as_ptr().add(start) as *mut u8);
        AlignedBuf::external(ptr, end - start, whole.clone())
    };
    Some(Arc::new(view))
}

/// [`gather`] into an aligned buffer, as an RPC sends it.
fn gather_aligned(layout: &Layout, sub: &Sub, offset: u64, data: &[u8]) -> AlignedBuf {
    // The runs cover the whole range (for_each_run): no need to zero it first (a memset
    // of each 1 MiB RPC was 7% of the mount's CPU in a streaming write).
    let mut buf = AlignedBuf::for_overwrite(sub.len as usize);
    let mut filled = 0;
    for_each_run(layout, sub, |file_off, at, n| {
        let src = (file_off - offset) as usize;
        buf[at..at + n].copy_from_slice(&data[src..src + n]);
        filled += n;
    });
    assert_eq!(
        filled as u64, sub.len,
        "a write's runs cover its object range"
    );
    buf
}

/// The bytes of `data` (written at file offset `offset`) that object range `sub` holds.
pub(crate) fn gather(layout: &Layout, sub: &Sub, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; sub.len as usize];
    for_each_run(layout, sub, |file_off, at, n| {
        let src = (file_off - offset) as usize;
        buf[at..at + n].copy_from_slice(&data[src..src + n]);
    });
    buf
}

/// Writes the object ranges `parts` of `data` through, all at once. With `fid` (a mount
/// that takes data locks), each write asks for a write lock and for space grant, so the
/// next writes there may be kept. `whole`: an aligned buffer holding `data`, whose runs
/// RPCs send with no copy ([`view`]). Whether every RPC was sent so.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_subs(
    client: &Client,
    fid: Option<nacre_types::Fid>,
    layout: &Layout,
    offset: u64,
    data: &[u8],
    owner: nacre_types::Owner,
    parts: &[Sub],
    whole: Option<&Arc<AlignedBuf>>,
) -> Result<bool> {
    let caching = fid.is_some() && client.data_locks_on();
    // Callbacks for the locks these writes may be granted can come before their replies.
    let mut asked = ReadLocks::new();
    let mut window = Window::default();
    let mut all_viewed = whole.is_some();
    for (tag, sub) in parts.iter().enumerate() {
        // Bytes `whole` (holding all of `data`, aligned) has as one run are sent as they are.
        let buf = match whole.and_then(|w| view(w, layout, sub, offset)) {
            Some(v) => v,
            None => {
                all_viewed = false;
                Arc::new(gather_aligned(layout, sub, offset, data))
            }
        };
        let (ost, object) = object(layout, sub.stripe);
        if caching {
            client.asking(ost, object, &mut asked);
        }
        let req = OssRequest::Write {
            object,
            offset: sub.object_offset,
            owner,
            lock: caching,
            grant_used: 0,
            epoch: 0,
            layout_gen: layout.generation,
        };
        if let Err(e) = window.start(client, tag, ost, &req, Some(buf)) {
            drop(window);
            client.read_done(fid.unwrap_or_default(), asked);
            return Err(e);
        }
    }
    let replies = match window.finish() {
        Ok(r) => r,
        Err(e) => {
            if e.status() == Status::DQuot {
                client.writeback.quota_refused(owner);
            }
            client.read_done(fid.unwrap_or_default(), asked);
            return Err(e);
        }
    };
    for (tag, reply, _) in replies {
        if let OssReply::Written { sync_ids, .. } = &reply {
            client.writeback.quota_reply(owner, *sync_ids);
        }
        if let (
            OssReply::Written {
                lock, grant_added, ..
            },
            Some(fid),
        ) = (reply, fid)
        {
            let ost = object(layout, parts[tag].stripe).0;
            client.writeback.add_grant(ost, grant_added);
            if let Some(l) = lock {
                let map = crate::datalocks::StripeMap::of(layout, parts[tag].stripe);
                client.data_lock_granted(ost, (fid, map), l, &mut asked);
            }
        }
    }
    // In use until here: a callback that came meanwhile is answered now.
    client.read_done(fid.unwrap_or_default(), asked);
    Ok(all_viewed)
}

/// Sends one request to OST `ost` under the client's uuid there: the reply to wait for
/// ([`collect_one`]) and the uuid it was sent under.
pub(crate) fn send_one(
    client: &Client,
    ost: u32,
    req: &OssRequest,
    bulk: Option<Arc<AlignedBuf>>,
) -> Result<(Pending, [u8; 16])> {
    let p = Window::send(client, ost, 0, req, bulk, None)?;
    let uuid = p.uuid;
    Ok((p, uuid))
}

/// Waits for a request sent by [`send_one`] (not sent again if the OST evicted the client).
pub(crate) fn collect_one(p: Pending) -> Collected {
    collect(p.reply, p.stats)
}

/// Sends one request to OST `ost` and waits for its answer, sending it again while the OST
/// is recovering (not if it evicted the client).
pub(crate) fn call_one(
    client: &Client,
    ost: u32,
    req: &OssRequest,
    bulk: Option<Arc<AlignedBuf>>,
) -> Collected {
    let once = || {
        let (p, _) =
            send_one(client, ost, req, bulk.clone()).map_err(|e| RpcError::Status(e.status()))?;
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

/// A lock granted with a read: OST, stripe, lock.
type Granted = (u32, usize, ExtentRef);

/// Read RPCs in flight for one file range; [`ReadJob::finish`] assembles the data.
pub struct ReadJob {
    /// File offset.
    pub offset: u64,
    /// Bytes asked for.
    pub len: usize,
    parts: Vec<Sub>,
    window: Window,
}

/// Starts the read RPCs of `[offset, offset + len)` on every stripe at once.
pub fn start_read(client: &Client, layout: &Layout, offset: u64, len: usize) -> Result<ReadJob> {
    start_read_into(client, layout, offset, len, None)
}

/// [`start_read`], the data received straight into `into` (at least `len` bytes) when the
/// read is one RPC whose reply arrives whole on a TCP link: [`ReadJob::finish`] then
/// returns `into` itself.
pub fn start_read_into(
    client: &Client,
    layout: &Layout,
    offset: u64,
    len: usize,
    into: Option<AlignedBuf>,
) -> Result<ReadJob> {
    client.flush_objects(layout);
    let parts = if len == 0 || offset >= FILE_BYTES_MAX {
        Vec::new()
    } else {
        subs(layout, offset, len as u64, max_rpc(client))
    };
    // One RPC covers the range in file order: its bulk is the data as it lands.
    let mut into = into.filter(|b| parts.len() == 1 && b.capacity() >= len);
    let mut window = Window::default();
    for (tag, sub) in parts.iter().enumerate() {
        let (ost, object) = object(layout, sub.stripe);
        let req = OssRequest::Read {
            object,
            offset: sub.object_offset,
            len: sub.len as u32,
            lock: false,
        };
        window.start_into(client, tag, ost, &req, None, into.take())?;
    }
    Ok(ReadJob {
        offset,
        len,
        parts,
        window,
    })
}

impl ReadJob {
    /// Waits for the RPCs and assembles the data; short only at end of file.
    pub fn finish(self, client: &Client, layout: &Layout) -> Result<AlignedBuf> {
        self.finish_locked(client, layout).map(|(data, _)| data)
    }

    /// [`ReadJob::finish`], with the locks the OSTs granted (OST, lock).
    fn finish_locked(self, client: &Client, layout: &Layout) -> Result<(AlignedBuf, Vec<Granted>)> {
        let ReadJob {
            offset,
            len,
            parts,
            window,
        } = self;
        if parts.is_empty() {
            return Ok((AlignedBuf::zeroed(0), Vec::new()));
        }
        let mut replies = window.finish()?;
        let granted: Vec<Granted> = replies
            .iter()
            .filter_map(|(tag, r, _)| match r {
                OssReply::Read { lock: Some(l), .. } => {
                    let stripe = parts[*tag].stripe;
                    Some((object(layout, stripe).0, stripe, *l))
                }
                _ => None,
            })
            .collect();
        let mut short = false;
        // Where the first part that came back short ends, as an object offset.
        let mut short_end: Option<u64> = None;
        for (tag, _, bulk) in &replies {
            let got = bulk.as_ref().map_or(0, |b| b.len());
            let sub = &parts[*tag];
            if got as u64 > sub.len {
                let (ost, _) = object(layout, sub.stripe);
                return Err(ClientError::bad_reply(
                    format!("OST{ost:04x}"),
                    format!("read of {} bytes answered with {got}", sub.len),
                ));
            }
        }
        let mut out = if parts.len() == 1 {
            let (_, _, bulk) = replies.pop().expect("one reply");
            let buf = bulk.unwrap_or_else(|| AlignedBuf::zeroed(0));
            short = buf.len() < len;
            buf
        } else {
            let mut buf = AlignedBuf::zeroed(len);
            for (tag, _, bulk) in replies {
                let sub = &parts[tag];
                let got = bulk.as_ref().map_or(0, |b| b.len());
                if (got as u64) < sub.len {
                    short = true;
                    let end = sub.object_offset + got as u64;
                    short_end = Some(short_end.map_or(end, |e| e.min(end)));
                }
                let Some(bulk) = bulk else { continue };
                for_each_run(layout, sub, |file_off, at, n| {
                    // Runs past the object's end stay zero (the glimpse below trims them).
                    let avail = got.saturating_sub(at).min(n);
                    if avail > 0 {
                        let dst = (file_off - offset) as usize;
                        buf[dst..dst + avail].copy_from_slice(&bulk[at..at + avail]);
                    }
                });
            }
            buf
        };
        if short {
            let size = if ends_here(client, layout, offset, &granted) {
                // One object, whose end is the file's: where its first short part ended
                // (a read cut into several RPCs has parts past it that came back empty;
                // a single part's reply is short already).
                short_end.unwrap_or(offset + out.len() as u64)
            } else {
                // An object ended early: the file's size says how much of the range
                // exists (holes up to it read as zeros).
                glimpse(client, layout)?.0
            };
            let want = size.saturating_sub(offset).min(len as u64) as usize;
            out = zero_extended(out, want);
        }
        Ok((out, granted))
    }
}

/// True if a read from `offset` of a file with layout `layout` that came back short ended
/// at the end of the file, with no glimpse: the file has one object (whose end is the
/// file's), and this client holds a lock on all of it from `offset` on (one granted with
/// this read counts), so no other client keeps writes past what was read — and this
/// client's own were written before the read.
fn ends_here(client: &Client, layout: &Layout, offset: u64, granted: &[Granted]) -> bool {
    if layout.objects.len() != 1 {
        return false;
    }
    let (ost, object) = object(layout, 0);
    granted
        .iter()
        .any(|(_, _, l)| l.start <= offset && l.end == u64::MAX)
        || client.holds_rest_of(ost, object, offset)
}

/// Reads `[offset, offset + len)` of file `fid` for the kernel's page cache, asking for a
/// read lock on every object range no lock of this client covers. The locks stay in use
/// until [`Client::read_done`] (after the data is in the kernel's cache).
pub fn read_locked(
    client: &Client,
    fid: nacre_types::Fid,
    layout: &Layout,
    offset: u64,
    len: usize,
) -> Result<(AlignedBuf, ReadLocks)> {
    client.flush_objects(layout);
    let mut locks = ReadLocks::new();
    let parts = if len == 0 || offset >= FILE_BYTES_MAX {
        Vec::new()
    } else {
        subs(layout, offset, len as u64, max_rpc(client))
    };
    let mut window = Window::default();
    let mut asked = 0;
    for (tag, sub) in parts.iter().enumerate() {
        let (ost, object) = object(layout, sub.stripe);
        let want = Extent::of(sub.object_offset, sub.len, false);
        let lock = client.want_data_lock(ost, object, want, &mut locks);
        asked += usize::from(lock);
        let req = OssRequest::Read {
            object,
            offset: sub.object_offset,
            len: sub.len as u32,
            lock,
        };
        if let Err(e) = window.start(client, tag, ost, &req, None) {
            drop(window);
            locks.covered = false;
            client.read_done(fid, locks);
            return Err(e);
        }
    }
    let job = ReadJob {
        offset,
        len,
        parts,
        window,
    };
    match job.finish_locked(client, layout) {
        Ok((data, granted)) => {
            locks.covered &= granted.len() == asked;
            for (ost, stripe, l) in granted {
                let map = crate::datalocks::StripeMap::of(layout, stripe);
                client.data_lock_granted(ost, (fid, map), l, &mut locks);
            }
            Ok((data, locks))
        }
        Err(e) => {
            locks.covered = false;
            client.read_done(fid, locks);
            Err(e)
        }
    }
}

/// `buf` cut or grown to `len` bytes, the new bytes zero. A bulk received over the network is
/// only as large as the server sent, so growing it may need a new buffer.
fn zero_extended(mut buf: AlignedBuf, len: usize) -> AlignedBuf {
    if len <= buf.capacity() {
        buf.set_len(len);
        return buf;
    }
    let mut grown = AlignedBuf::zeroed(len);
    grown[..buf.len()].copy_from_slice(&buf);
    grown
}

/// Reads up to `len` bytes at `offset`; short only at end of file.
pub fn read(client: &Client, layout: &Layout, offset: u64, len: usize) -> Result<AlignedBuf> {
    start_read(client, layout, offset, len)?.finish(client, layout)
}

fn per_object(
    client: &Client,
    layout: &Layout,
    req: impl Fn(usize, ObjectId) -> OssRequest,
) -> Result<Vec<(usize, OssReply)>> {
    let mut window = Window::default();
    for stripe in 0..layout.objects.len() {
        let (ost, object) = object(layout, stripe);
        window.start(client, stripe, ost, &req(stripe, object), None)?;
    }
    Ok(window
        .finish()?
        .into_iter()
        .map(|(t, r, _)| (t, r))
        .collect())
}

/// Glimpses in flight on every object of a file ([`start_glimpse`]).
pub struct GlimpseJob {
    window: Window,
}

/// Starts glimpsing every object of `layout` at once; [`GlimpseJob::finish`] waits.
pub fn start_glimpse(client: &Client, layout: &Layout) -> Result<GlimpseJob> {
    let mut window = Window::default();
    for stripe in 0..layout.objects.len() {
        let (ost, object) = object(layout, stripe);
        window.start(client, stripe, ost, &OssRequest::Glimpse { object }, None)?;
    }
    Ok(GlimpseJob { window })
}

impl GlimpseJob {
    /// File size and allocated blocks of the file whose `layout` was glimpsed.
    pub fn finish(self, layout: &Layout) -> Result<(u64, u64)> {
        let replies = self
            .window
            .finish()?
            .into_iter()
            .map(|(t, r, _)| (t, r))
            .collect();
        sizes(layout, replies)
    }
}

/// File size and allocated blocks from the objects (Lustre's glimpse).
pub fn glimpse(client: &Client, layout: &Layout) -> Result<(u64, u64)> {
    start_glimpse(client, layout)?.finish(layout)
}

/// File size and blocks from the glimpse replies of `layout`'s objects.
fn sizes(layout: &Layout, replies: Vec<(usize, OssReply)>) -> Result<(u64, u64)> {
    let objects: Vec<(usize, u64, u64)> = replies
        .into_iter()
        .filter_map(|(stripe, reply)| match reply {
            OssReply::ObjectAttr { size, blocks } => Some((stripe, size, blocks)),
            _ => None,
        })
        .collect();
    if let Some(&(stripe, s, _)) = objects.iter().find(|(_, s, _)| *s > FILE_BYTES_MAX) {
        let (ost, _) = object(layout, stripe);
        return Err(ClientError::bad_reply(
            format!("OST{ost:04x}"),
            format!("object size {s} beyond the largest file"),
        ));
    }
    Ok(layout
        .file_size_from_objects(objects)
        .expect("object sizes checked above"))
}

/// Sets the file size: every object gets the size its stripe has at that file size.
pub fn truncate(client: &Client, layout: &Layout, size: u64) -> Result<()> {
    if size > FILE_BYTES_MAX {
        return Err(Status::FBig.into());
    }
    client.flush_objects(layout);
    per_object(client, layout, |stripe, object| OssRequest::Punch {
        object,
        size: layout.object_size_for_file(stripe, size),
        layout_gen: layout.generation,
    })
    .map(|_| ())
}

/// The data version of each of `layout`'s objects, with its OST's epoch (taken after the
/// holders of write locks on them wrote what they keep, with `flush`). Root only.
pub fn data_versions(client: &Client, layout: &Layout, flush: bool) -> Result<Vec<(u64, u64)>> {
    let replies = per_object(client, layout, |_, object| OssRequest::DataVersion {
        objects: vec![object],
        flush,
    })?;
    let mut out = vec![(0, 0); layout.objects.len()];
    for (stripe, reply) in replies {
        match reply {
            OssReply::Versions { epoch, versions } if versions.len() == 1 => {
                out[stripe] = (epoch, versions[0]);
            }
            _ => return Err(Status::Proto.into()),
        }
    }
    Ok(out)
}

/// Fences `layout`'s objects at `generation`: their OSTs refuse changes issued under an
/// older one from now on. Root only.
pub fn fence(client: &Client, layout: &Layout, generation: u32) -> Result<()> {
    per_object(client, layout, |_, object| OssRequest::Fence {
        objects: vec![object],
        generation,
    })
    .map(|_| ())
}

/// Makes every object's data durable.
pub fn sync(client: &Client, layout: &Layout) -> Result<()> {
    per_object(client, layout, |_, object| OssRequest::Sync { object }).map(|_| ())
}

/// Preallocates (or punches) the objects' parts of a file range.
pub fn fallocate(
    client: &Client,
    layout: &Layout,
    offset: u64,
    len: u64,
    keep_size: bool,
    punch_hole: bool,
) -> Result<()> {
    if len == 0 || offset.saturating_add(len) > FILE_BYTES_MAX {
        return Err(Status::Inval.into());
    }
    client.flush_objects(layout);
    let mut window = Window::default();
    for (tag, chunk) in layout.chunks(offset, len).into_iter().enumerate() {
        let (ost, object) = object(layout, chunk.stripe);
        let req = OssRequest::Fallocate {
            object,
            offset: chunk.object_offset,
            len: chunk.len,
            keep_size,
            punch_hole,
            layout_gen: layout.generation,
        };
        window.start(client, tag, ost, &req, None)?;
    }
    window.finish().map(|_| ())
}

impl Client {
    /// The capability `req` to OST `ost` carries: past half its life it is renewed in the
    /// background (the request goes with the one it has, still good: a write-behind flush
    /// never waits on the MDT for it); expired, it is renewed first (a request with it
    /// would be refused) — or sent as it is if the MDT cannot give a new one now.
    pub(crate) fn capa_for(&self, ost: u32, req: &OssRequest) -> Option<nacre_wire::capa::Capa> {
        use crate::capas::Freshness;
        let (capa, state) = self.capas.lookup(ost, req)?;
        match state {
            Freshness::Fresh => Some(capa),
            Freshness::Due => {
                self.renew_capas_later(capa.fid);
                Some(capa)
            }
            Freshness::Expired => {
                if let Err(e) = self.renew_capas(capa.fid) {
                    tracing::debug!("renewing the capabilities of {}: {e}", capa.fid);
                }
                self.capas.for_request(ost, req).or(Some(capa))
            }
        }
    }

    /// Fetches `fid`'s layout from its MDT, whose answer carries fresh capabilities while
    /// this client holds the file open (noted as every answer's are).
    fn renew_capas(&self, fid: nacre_types::Fid) -> Result<()> {
        self.md(nacre_wire::mds::MdsOp::GetLayout { fid })
            .map(|_| ())
    }

    /// [`Client::renew_capas`] on a thread of its own, once at a time per file.
    fn renew_capas_later(&self, fid: nacre_types::Fid) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        if !self.capas.start_renewal(fid) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("capa-renew".into())
            .spawn(move || {
                if let Err(e) = me.renew_capas(fid) {
                    tracing::debug!("renewing the capabilities of {fid}: {e}");
                }
                me.capas.end_renewal(fid);
            });
        if spawned.is_err() {
            self.capas.end_renewal(fid);
        }
    }
}

/// Usage of one OST.
/// The owner, group and project OST `ost` records for `object` (`None`: no object yet).
pub fn owner(client: &Client, ost: u32, object: ObjectId) -> Result<Option<nacre_types::Owner>> {
    let req = OssRequest::GetOwner { object };
    let conn = client.osc(ost)?;
    let mut call = OssCall::current(req.clone());
    call.capa = client.capa_for(ost, &req);
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &call)? {
        OssReply::Owner(o) => Ok(o),
        _ => Err(Status::Proto.into()),
    }
}

/// Bytes each of `ids` has on OST `ost` (quotas).
pub fn quota_usage(client: &Client, ost: u32, ids: &[nacre_types::QuotaId]) -> Result<Vec<u64>> {
    let conn = client.osc(ost)?;
    let req = OssRequest::QuotaUsage { ids: ids.to_vec() };
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::current(req))? {
        OssReply::QuotaUsage(v) if v.len() == ids.len() => Ok(v),
        _ => Err(Status::Proto.into()),
    }
}

/// OST `ost`'s quota check (`nacre lfsck --quota`), repairing with `repair`.
pub fn quota_check(client: &Client, ost: u32, repair: bool) -> Result<nacre_types::QuotaCheck> {
    let conn = client.osc(ost)?;
    let req = OssRequest::QuotaCheck { repair };
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::current(req))? {
        OssReply::QuotaCheck(c) if c.diffs.len() <= nacre_types::QuotaCheck::DIFFS_MAX => Ok(c),
        _ => Err(Status::Proto.into()),
    }
}

/// Capacity of OST `ost`.
pub fn statfs(client: &Client, ost: u32) -> Result<StatFs> {
    let conn = client.osc(ost)?;
    match nacre_net::rpc::call::<_, OssReply>(
        &conn,
        OssRequest::StatFs.opcode(),
        ost,
        &OssCall::current(OssRequest::StatFs),
    )? {
        OssReply::StatFs(s) => Ok(s),
        _ => Err(Status::Proto.into()),
    }
}
