//! Writes through to the OSTs: a file range split into object ranges, one RPC each, its
//! bytes gathered from the caller's data or sent as a view of the caller's aligned buffer
//! (no copy); with data locks, each write asks for a lock and for space grant.

use super::window::Window;
use super::{for_each_run, max_rpc, object, subs, Sub};
use crate::datalocks::ReadLocks;
use crate::{Client, Result};
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{AlignedBuf, Layout, Status};
use nacre_wire::oss::{OssReply, OssRequest};
use std::sync::Arc;

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
    let sent = write_subs(client, None, layout, offset, data, owner, &all, whole, None)?;
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
    // The runs come in the buffer's order: appended, never zeroed first (a page-cache
    // write kept behind is gathered here, 47 KB per IOR hard record).
    let mut buf = Vec::with_capacity(sub.len as usize);
    for_each_run(layout, sub, |file_off, at, n| {
        assert_eq!(at, buf.len(), "runs in buffer order");
        let src = (file_off - offset) as usize;
        buf.extend_from_slice(&data[src..src + n]);
    });
    assert_eq!(buf.len() as u64, sub.len, "runs cover the sub");
    buf
}

/// Writes the object ranges `parts` of `data` through, all at once. With `fid` (a mount
/// that takes data locks), each write asks for a write lock and for space grant, so the
/// next writes there may be kept. `whole`: an aligned buffer holding `data`, whose runs
/// RPCs send with no copy ([`view`]). `pinned`: an append's locks, whose identity at each OST
/// its writes go as (never again as a newer one). Whether every RPC was sent so.
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
    pinned: Option<&crate::datalocks::Pinned>,
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
        // An append's writes go as the identity its locks were found under (Pinned).
        let uuid = pinned.and_then(|p| p.of(ost)).map(|(_, uuid)| uuid);
        if let Err(e) = window.start_as(client, tag, ost, (&req, Some(buf)), uuid) {
            drop(window);
            client.read_done(fid.unwrap_or_default(), asked);
            return Err(e);
        }
    }
    let replies = match window.finish_as() {
        Ok(r) => r,
        Err(e) => {
            if e.status() == Status::DQuot {
                client.writeback.quota_refused(owner);
            }
            client.read_done(fid.unwrap_or_default(), asked);
            return Err(e);
        }
    };
    for (tag, reply, _, sent_as) in replies {
        if let OssReply::Written { sync_ids, .. } = &reply {
            client.writeback.quota_reply(owner, *sync_ids);
        }
        if let (
            OssReply::Written {
                lock,
                grant_added,
                object: after,
                ..
            },
            Some(fid),
        ) = (reply, fid)
        {
            let (ost, obj) = object(layout, parts[tag].stripe);
            if let Ok(m) = client.mdc(fid.mdt_index()) {
                m.vouched.wrote(fid, ost, obj, after);
            }
            client.add_grant_as(ost, grant_added, sent_as);
            if let Some(l) = lock {
                let map = crate::datalocks::StripeMap::of(layout, parts[tag].stripe);
                // Not held if the OST evicted `sent_as` since: the pages this write
                // leaves in the kernel are then not covered (pages_covered_for_write).
                let _ = client.data_lock_granted(ost, (fid, map), l, &mut asked, sent_as);
            }
        }
    }
    // In use until here: a callback that came meanwhile is answered now.
    client.read_done(fid.unwrap_or_default(), asked);
    Ok(all_viewed)
}
