//! Reads from the OSTs: a file range's RPCs started on every stripe at once and assembled
//! ([`ReadJob`]), received straight into a caller's buffer when they are one RPC; reads for
//! the page cache under read locks; the size of a read that came back short.

use super::objects::glimpse;
use super::window::Window;
use super::{for_each_run, max_rpc, object, subs, Sub};
use crate::datalocks::ReadLocks;
use crate::{Client, ClientError, Result};
use nacre_ldlm::kind::Extent;
use nacre_ldlm::msg::ExtentRef;
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{AlignedBuf, Layout};
use nacre_wire::oss::{OssReply, OssRequest};

/// A lock granted with a read: OST, stripe, lock, the uuid its request went under.
type Granted = (u32, usize, ExtentRef, [u8; 16]);

/// Read RPCs in flight for one file range; [`ReadJob::finish`] assembles the data.
pub struct ReadJob {
    /// File offset.
    pub offset: u64,
    /// Bytes asked for.
    pub len: usize,
    parts: Vec<Sub>,
    window: Window,
    /// The data, read already (a read of bytes on the MDT: crate::dom).
    ready: Option<AlignedBuf>,
}

impl ReadJob {
    /// A read done already: `data`, the bytes of `[offset, offset + len)` (short at the
    /// end of the file).
    pub(crate) fn ready(offset: u64, len: usize, data: AlignedBuf) -> ReadJob {
        ReadJob {
            offset,
            len,
            parts: Vec::new(),
            window: Window::default(),
            ready: Some(data),
        }
    }
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
        ready: None,
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
            ready,
        } = self;
        if let Some(data) = ready {
            return Ok((data, Vec::new()));
        }
        if parts.is_empty() {
            return Ok((AlignedBuf::zeroed(0), Vec::new()));
        }
        let replies = window.finish_as()?;
        let granted: Vec<Granted> = replies
            .iter()
            .filter_map(|(tag, r, _, sent_as)| match r {
                OssReply::Read { lock: Some(l), .. } => {
                    let stripe = parts[*tag].stripe;
                    Some((object(layout, stripe).0, stripe, *l, *sent_as))
                }
                _ => None,
            })
            .collect();
        let mut replies: Vec<_> = replies.into_iter().map(|(t, r, b, _)| (t, r, b)).collect();
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
/// at the end of the file, with no glimpse: the file has one object in one component (whose
/// end is the file's), and this client holds a lock on all of it from `offset` on (one granted with
/// this read counts), so no other client keeps writes past what was read — and this
/// client's own were written before the read.
fn ends_here(client: &Client, layout: &Layout, offset: u64, granted: &[Granted]) -> bool {
    if layout.components.len() != 1 || layout.object_count() != 1 {
        return false;
    }
    let (ost, object) = object(layout, 0);
    granted
        .iter()
        .any(|(_, _, l, _)| l.start <= offset && l.end == u64::MAX)
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
        ready: None,
    };
    match job.finish_locked(client, layout) {
        Ok((data, granted)) => {
            locks.covered &= granted.len() == asked;
            for (ost, stripe, l, sent_as) in granted {
                let map = crate::datalocks::StripeMap::of(layout, stripe);
                if !client.data_lock_granted(ost, (fid, map), l, &mut locks, sent_as) {
                    locks.covered = false;
                }
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
