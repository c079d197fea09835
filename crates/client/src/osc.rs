//! The object storage client: file I/O split along the layout into one RPC per object range
//! (at most `max_rpc_size` each), started on every OST at once and then collected, so a
//! striped file's stripes move in parallel. Each OST connection keeps at most
//! `max_rpcs_in_flight` of a call's RPCs outstanding.

use crate::rpc_stats::OscRpcStats;
use crate::{Client, ClientError, Result};
use nacre_net::rpc::{decode_reply, request, RpcError};
use nacre_net::PendingReply;
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{AlignedBuf, Layout, ObjectId, StatFs, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use std::collections::VecDeque;
use std::sync::Arc;

/// One RPC of a multi-object operation.
struct Sub {
    stripe: usize,
    object_offset: u64,
    len: u64,
}

/// An RPC in flight: OST, tag, the reply to come, and the statistics to tell when it is done.
type Pending = (u32, usize, PendingReply, Option<(Arc<OscRpcStats>, bool)>);

/// A reply and its bulk data, or the error.
type Collected = std::result::Result<(OssReply, Option<AlignedBuf>), RpcError>;

/// RPCs in flight for one client call, bounded per OST.
#[derive(Default)]
pub(crate) struct Window {
    pending: VecDeque<Pending>,
    done: Vec<(usize, Collected)>,
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
        let limit = client.net_config().max_rpcs_in_flight.max(1);
        while self.pending.iter().filter(|(o, _, _, _)| *o == ost).count() >= limit {
            let pos = self
                .pending
                .iter()
                .position(|(o, _, _, _)| *o == ost)
                .expect("pending on ost");
            let (_, t, p, stats) = self.pending.remove(pos).expect("pending entry");
            self.done.push((t, collect(p, stats)));
        }
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
        let mut rpc = request(req.opcode(), ost, &OssCall::current(req.clone()), bulk);
        rpc.inline = short;
        let pending = conn
            .start(rpc)
            .map_err(|e| crate::ClientError::Rpc(e.into()))?;
        self.pending.push_back((
            ost,
            tag,
            pending,
            bulk_rpc.map(|(w, _)| (client.rpc_stats(ost), w)),
        ));
        Ok(())
    }

    /// Waits for everything; results by tag, first error wins.
    fn finish(mut self) -> Result<Vec<(usize, OssReply, Option<AlignedBuf>)>> {
        for (_, t, p, stats) in self.pending.drain(..) {
            self.done.push((t, collect(p, stats)));
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
        for (_, _, _, stats) in self.pending.drain(..) {
            if let Some((s, write)) = stats {
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
fn subs(layout: &Layout, offset: u64, len: u64, max: u64) -> Vec<Sub> {
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

fn object(layout: &Layout, stripe: usize) -> (u32, ObjectId) {
    let o = layout.objects[stripe];
    (o.ost, o.object)
}

fn max_rpc(client: &Client) -> u64 {
    u64::from(client.net_config().max_rpc_size.max(4096))
}

/// Writes `data` at `offset`.
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
    let mut window = Window::default();
    for (tag, sub) in subs(layout, offset, data.len() as u64, max_rpc(client))
        .iter()
        .enumerate()
    {
        let mut buf = AlignedBuf::zeroed(sub.len as usize);
        for_each_run(layout, sub, |file_off, at, n| {
            let src = (file_off - offset) as usize;
            buf[at..at + n].copy_from_slice(&data[src..src + n]);
        });
        let (ost, object) = object(layout, sub.stripe);
        let req = OssRequest::Write {
            object,
            offset: sub.object_offset,
            owner,
        };
        window.start(client, tag, ost, &req, Some(Arc::new(buf)))?;
    }
    window.finish()?;
    Ok(data.len())
}

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
    let parts = if len == 0 || offset >= FILE_BYTES_MAX {
        Vec::new()
    } else {
        subs(layout, offset, len as u64, max_rpc(client))
    };
    let mut window = Window::default();
    for (tag, sub) in parts.iter().enumerate() {
        let (ost, object) = object(layout, sub.stripe);
        let req = OssRequest::Read {
            object,
            offset: sub.object_offset,
            len: sub.len as u32,
        };
        window.start(client, tag, ost, &req, None)?;
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
        let ReadJob {
            offset,
            len,
            parts,
            window,
        } = self;
        if parts.is_empty() {
            return Ok(AlignedBuf::zeroed(0));
        }
        let mut replies = window.finish()?;
        let mut short = false;
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
                short |= (got as u64) < sub.len;
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
            // An object ended early: the file's size says how much of the range exists (holes
            // up to it read as zeros).
            let (size, _) = glimpse(client, layout)?;
            let want = size.saturating_sub(offset).min(len as u64) as usize;
            out = zero_extended(out, want);
        }
        Ok(out)
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
    per_object(client, layout, |stripe, object| OssRequest::Punch {
        object,
        size: layout.object_size_for_file(stripe, size),
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
    let mut window = Window::default();
    for (tag, chunk) in layout.chunks(offset, len).into_iter().enumerate() {
        let (ost, object) = object(layout, chunk.stripe);
        let req = OssRequest::Fallocate {
            object,
            offset: chunk.object_offset,
            len: chunk.len,
            keep_size,
            punch_hole,
        };
        window.start(client, tag, ost, &req, None)?;
    }
    window.finish().map(|_| ())
}

/// Usage of one OST.
/// The owner, group and project OST `ost` records for `object` (`None`: no object yet).
pub fn owner(client: &Client, ost: u32, object: ObjectId) -> Result<Option<nacre_types::Owner>> {
    let req = OssRequest::GetOwner { object };
    let conn = client.osc(ost)?;
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::current(req))? {
        OssReply::Owner(o) => Ok(o),
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
