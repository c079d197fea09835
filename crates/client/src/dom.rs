//! Data on the MDT, on the client: the bytes of a file below its layout's component on the
//! MDT (`Layout::dom_end`) are read and written with MDS requests (`MdsOp::DomRead`,
//! `DomWrite`, `DomAppend`), the rest through its OST objects as any file's. A range that
//! spans both is split at the component's end; every path that moves file bytes (reads,
//! the page cache's reads and writes, appends, allocations) goes through here first.
//!
//! A read that finds fewer bytes stored on the MDT than it asked for is at the end of the
//! file unless the file goes on past them: on its OSTs (their bytes past the component, or
//! their size after a truncate up, which a glimpse finds) — the bytes between then read as
//! zeros, a hole. The MDT keeps the stored bytes as long as the file is inside the
//! component (crates/mds/src/ops/dom.rs), so a file without objects needs no glimpse.
//!
//! Not cached by the kernel yet: a page-cache read of these bytes is answered uncovered by
//! locks (the mount drops the pages after it), until the MDT grants a lock on them.

use crate::{osc, Client, Result};
use nacre_types::{AlignedBuf, Fid, Layout, Status};
use nacre_wire::mds::{MdsOp, MdsReply, DOM_RPC_BYTES_MAX};

impl Client {
    /// Reads `[offset, offset + len)` of file `fid` (layout `layout`, with a component on
    /// the MDT that `offset` is below): the part below the component's end from the MDT,
    /// the rest by `rest(offset, len)` (an OST read, short only at the end of the file).
    /// Short only at the end of the file.
    pub(crate) fn dom_read(
        &self,
        fid: Fid,
        layout: &Layout,
        offset: u64,
        len: usize,
        rest: impl FnOnce(u64, usize) -> Result<AlignedBuf>,
    ) -> Result<AlignedBuf> {
        let dom_end = layout.dom_end();
        assert!(offset < dom_end, "a read below the component on the MDT");
        let end = offset.saturating_add(len as u64);
        let here = (end.min(dom_end) - offset) as usize;
        let mut got = self.dom_stored(fid, offset, here)?;
        let tail = match end > dom_end {
            true => Some(rest(dom_end, (end - dom_end) as usize)?),
            false => None,
        };
        if got.len() < here {
            // Fewer bytes stored than asked: a hole if the file goes on past them.
            let size = match (&tail, layout.object_count()) {
                (Some(t), _) if !t.is_empty() => u64::MAX,
                (_, 0) => 0,
                _ => {
                    let kept = self.writeback.size(layout).unwrap_or(0);
                    osc::glimpse(self, layout)?.0.max(kept)
                }
            };
            let want = (size.saturating_sub(offset) as usize).clamp(got.len(), here);
            got.resize(want, 0);
        }
        if got.len() == here {
            if let Some(t) = tail {
                got.extend_from_slice(&t);
            }
        }
        let mut out = AlignedBuf::zeroed(got.len());
        out.copy_from_slice(&got);
        Ok(out)
    }

    /// The size the MDT knows of file `fid` where its layout has a component on the MDT:
    /// at least the end of its bytes there (0 for a file without one: its OSTs say).
    pub(crate) fn dom_size(&self, fid: Fid, layout: &Layout) -> Result<u64> {
        if layout.dom_end() == 0 {
            return Ok(0);
        }
        match self.md(MdsOp::GetAttr { fid })? {
            MdsReply::Attr(a) | MdsReply::Entry { attr: a, .. } => Ok(a.size),
            _ => Err(Status::Proto.into()),
        }
    }

    /// The bytes the MDT stores for `fid` in `[offset, offset + len)`, short where they end.
    fn dom_stored(&self, fid: Fid, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut got = Vec::with_capacity(len);
        while got.len() < len {
            let n = (len - got.len()).min(DOM_RPC_BYTES_MAX as usize);
            let at = offset + got.len() as u64;
            let data = match self.md(MdsOp::DomRead {
                fid,
                offset: at,
                len: n as u32,
            })? {
                MdsReply::DomData(d) if d.len() <= n => d,
                _ => return Err(Status::Proto.into()),
            };
            let short = data.len() < n;
            got.extend_from_slice(&data);
            if short {
                break;
            }
        }
        Ok(got)
    }

    /// Writes the part of `data` (at `offset`) below the component on the MDT of a file
    /// whose layout has one ending at `dom_end`; returns how many bytes of `data` that was
    /// (the rest goes to the OSTs).
    pub(crate) fn dom_write(
        &self,
        fid: Fid,
        dom_end: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<usize> {
        if offset >= dom_end {
            return Ok(0);
        }
        let here = ((dom_end - offset) as usize).min(data.len());
        for (i, piece) in data[..here].chunks(DOM_RPC_BYTES_MAX as usize).enumerate() {
            let at = offset + (i * DOM_RPC_BYTES_MAX as usize) as u64;
            match self.md(MdsOp::DomWrite {
                fid,
                offset: at,
                data: piece.to_vec(),
            })? {
                MdsReply::Attr(_) => {}
                _ => return Err(Status::Proto.into()),
            }
        }
        Ok(here)
    }

    /// Appends `data` on the MDT where every byte of the file is there and `data` fits
    /// below the component's end: the offset it went at, or None (the file has objects, or
    /// it would not fit: the caller appends under its OST locks).
    pub(crate) fn dom_append(&self, fid: Fid, layout: &Layout, data: &[u8]) -> Result<Option<u64>> {
        if layout.object_count() > 0 || data.len() as u64 > layout.dom_end() {
            return Ok(None);
        }
        match self.md(MdsOp::DomAppend {
            fid,
            data: data.to_vec(),
        }) {
            Ok(MdsReply::Attr(a)) if a.size >= data.len() as u64 => {
                Ok(Some(a.size - data.len() as u64))
            }
            Ok(_) => Err(Status::Proto.into()),
            Err(e) if e.status() == Status::FBig => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An allocation (or a hole punched) over the part of `[offset, offset + len)` below
    /// the component on the MDT: a hole punched there is written as zeros over the bytes
    /// stored; an allocation without `keep_size` extends the stored bytes with zeros to its
    /// end (one that keeps the size allocates nothing here: the MDT stores what is written).
    pub(crate) fn dom_fallocate(
        &self,
        fid: Fid,
        dom_end: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<()> {
        if offset >= dom_end || (keep_size && !punch_hole) {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(dom_end);
        let here = (end - offset) as usize;
        let stored = self.dom_stored(fid, offset, here)?.len();
        let zeros = match punch_hole {
            // Over what is stored (a punch never makes the file longer).
            true => (offset, stored),
            // Past what is stored, to the end of the allocation.
            false => (offset + stored as u64, here - stored),
        };
        if zeros.1 > 0 {
            self.dom_write(fid, dom_end, zeros.0, &vec![0; zeros.1])?;
        }
        Ok(())
    }
}
