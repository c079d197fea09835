//! File data: reads (with read-ahead), writes, syncs and space allocation.

use crate::*;
use nacre_types::{Layout, Owner, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Times one write is redone after OSTs refused it as issued under an older layout (each
/// redo reads the layout again; only a file migrated over and over again gets near it).
pub const FENCED_REDOS_MAX: u32 = 16;

impl Client {
    /// Reads file data; short only at end of file. Sequential readers get the next reads
    /// started ahead of them (up to `readahead_bytes`), so OST reads overlap the caller's work.
    pub fn read(
        &self,
        file: &OpenFile,
        offset: u64,
        len: usize,
    ) -> Result<nacre_types::AlignedBuf> {
        self.read_at(file, offset, len, true)
    }

    /// [`Client::read`], with read-ahead only if `readahead` (the FUSE mount turns it off for
    /// page-cache reads, where the kernel reads ahead itself).
    pub fn read_at(
        &self,
        file: &OpenFile,
        offset: u64,
        len: usize,
        readahead: bool,
    ) -> Result<nacre_types::AlignedBuf> {
        self.lockless_layout_over(file, offset, len as u64)?;
        let io = self.io_layout(file)?;
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        if offset < layout.dom_end() {
            return self.dom_read(file.fid, layout, offset, len, |o, l| {
                osc::read(self, layout, o, l)
            });
        }
        if !readahead || self.readahead_bytes == 0 || len == 0 {
            return osc::read(self, layout, offset, len);
        }
        let job = {
            let mut ra = file.readahead.lock();
            let job = match ra.jobs.front() {
                Some(j) if j.offset == offset && j.len == len => ra.jobs.pop_front(),
                _ => {
                    ra.jobs.clear();
                    None
                }
            };
            let sequential = offset == ra.next_offset;
            if !sequential {
                ra.eof = false;
            }
            ra.next_offset = offset + len as u64;
            if sequential && !ra.eof {
                let depth =
                    (self.readahead_bytes / len as u64).clamp(1, READAHEAD_JOBS_MAX) as usize;
                let mut next = ra
                    .jobs
                    .back()
                    .map_or(offset + len as u64, |j| j.offset + j.len as u64);
                while ra.jobs.len() < depth {
                    let ahead = osc::start_read(self, layout, next, len)?;
                    ra.jobs.push_back(ahead);
                    next += len as u64;
                }
            }
            job
        };
        let job = match job {
            Some(j) => j,
            None => osc::start_read(self, layout, offset, len)?,
        };
        let out = job.finish(self, layout)?;
        if out.len() < len {
            let mut ra = file.readahead.lock();
            ra.eof = true;
            ra.jobs.clear();
        }
        Ok(out)
    }

    /// Starts reading `len` bytes of `file` at `offset`: its RPCs go out now, and no thread
    /// waits for them until [`Client::finish_read`] (many reads in flight from one thread,
    /// as the node API's rings keep them). No read-ahead.
    /// `into`: memory the data may be received into with no copy (see
    /// [`osc::start_read_into`]); [`Client::finish_read`] returns it when it was.
    pub fn start_read(
        &self,
        file: &OpenFile,
        offset: u64,
        len: usize,
        into: Option<nacre_types::AlignedBuf>,
    ) -> Result<osc::ReadJob> {
        self.lockless_layout_over(file, offset, len as u64)?;
        let io = self.io_layout(file)?;
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        if offset < layout.dom_end() {
            // Read now: the MDT's part of a read is one request, not kept in flight.
            let data = self.dom_read(file.fid, layout, offset, len, |o, l| {
                osc::read(self, layout, o, l)
            })?;
            return Ok(osc::ReadJob::ready(offset, len, data));
        }
        osc::start_read_into(self, layout, offset, len, into)
    }

    /// Waits for a read [`Client::start_read`] started: its data, short only at end of
    /// file.
    pub fn finish_read(
        &self,
        file: &OpenFile,
        job: osc::ReadJob,
    ) -> Result<nacre_types::AlignedBuf> {
        let io = self.io_layout(file)?;
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        job.finish(self, layout)
    }

    /// Reads file data for the kernel's page cache under read locks (see
    /// [`Client::enable_data_locks`]): short only at end of file. Call
    /// [`Client::read_done`] with the locks once the data is in the cache.
    pub fn read_cached(
        &self,
        file: &OpenFile,
        offset: u64,
        len: usize,
    ) -> Result<(nacre_types::AlignedBuf, crate::datalocks::ReadLocks)> {
        let io = self.io_layout(file)?;
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        // Pages this client's writes cut in part and filled since (edges.rs).
        let page = nacre_types::page::page_bytes();
        let kept = self.edges.serve(file.fid, offset, len, page, |at| {
            self.page_locked(layout, at, page)
        });
        if let Some(bytes) = kept {
            self.edges_served.fetch_add(1, Ordering::Relaxed);
            let mut buf = nacre_types::AlignedBuf::zeroed(len);
            buf.copy_from_slice(&bytes);
            return Ok((buf, crate::datalocks::ReadLocks::new()));
        }
        if offset < layout.dom_end() {
            // The bytes on the MDT under its DOM lock where it grants one (else the mount
            // drops their pages after the read: dom.rs); the OSTs' part under their locks.
            self.dom_reads.enter(file.fid);
            let mut ost_locks = None;
            let mut dom_locked = false;
            let read =
                self.dom_read_cached(file.fid, layout, offset, len, &mut dom_locked, |o, l| {
                    let (data, locks) = osc::read_locked(self, file.fid, layout, o, l)?;
                    ost_locks = Some(locks);
                    Ok(data)
                });
            let mut locks = ost_locks.unwrap_or_else(crate::datalocks::ReadLocks::new);
            locks.covered &= dom_locked;
            locks.dom_read = true;
            return match read {
                Ok(data) => Ok((data, locks)),
                Err(e) => {
                    self.read_done(file.fid, locks);
                    Err(e)
                }
            };
        }
        osc::read_locked(self, file.fid, layout, offset, len)
    }

    /// The owner, group and project OST `ost` records for `object` (`None`: no object yet),
    /// as chown and chgrp leave them (for checks and tools).
    pub fn object_owner(&self, ost: u32, object: nacre_types::ObjectId) -> Result<Option<Owner>> {
        osc::owner(self, ost, object)
    }

    /// Clears `file`'s set-id bits before a write through it, as the kernel's
    /// `file_remove_privs` does on a local file system: set-user-ID, and set-group-ID
    /// where group-execute is set, go when the writer lacks `CAP_FSETID`. The MDT clears
    /// them as a side effect of the write, for anyone who holds the file open for writing
    /// (the writer need not own the file). `kernel`: what a FUSE mount's kernel said
    /// (`FUSE_WRITE_KILL_SUIDGID`: the writer lacks `CAP_FSETID` and the kernel saw the
    /// bits); `None` where no kernel is asked (the node API, rings, `LD_PRELOAD`, the
    /// library's own users): a writer other than root, on a file that had the bits when
    /// it was opened. The library's writes ([`Client::write`], [`Client::write_cached`],
    /// [`Client::append`]) ask it with `None` themselves.
    pub fn remove_privs(&self, file: &OpenFile, kernel: Option<bool>) -> Result<()> {
        let kill = match kernel {
            Some(k) => k,
            None if file.kernel_kills_privs => false,
            None => !nacre_types::cred::current().is_root() && file.setid.load(Ordering::Acquire),
        };
        if !kill {
            return Ok(());
        }
        let set = nacre_types::SetAttr {
            kill_suidgid: true,
            ..nacre_types::SetAttr::default()
        };
        match self.md(MdsOp::SetAttr {
            fid: file.fid,
            attr: set,
        })? {
            MdsReply::Attr(_) => {}
            _ => return Err(Status::Proto.into()),
        }
        file.setid.store(false, Ordering::Release);
        Ok(())
    }

    /// Writes file data; returns when every OST holding a part has acknowledged it.
    pub fn write(&self, file: &OpenFile, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_with(file, offset, data, None).map(|(n, _)| n)
    }

    /// [`Client::write`] of the bytes `buf` holds (memory the caller registered, e.g. a
    /// ring's buffer): each RPC whose bytes are one run of `buf` sends them with no copy.
    /// The count, and whether every RPC was sent so.
    pub fn write_buf(
        &self,
        file: &OpenFile,
        offset: u64,
        buf: nacre_types::AlignedBuf,
    ) -> Result<(usize, bool)> {
        let whole = Arc::new(buf);
        self.write_with(file, offset, &whole[..], Some(&whole))
    }

    fn write_with(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[u8],
        whole: Option<&Arc<nacre_types::AlignedBuf>>,
    ) -> Result<(usize, bool)> {
        file.check_writable()?;
        // Not through the page cache: its objects' sizes are not followed (vouched.rs).
        self.forget_vouched(file.fid);
        self.written.wrote(file.fid);
        self.remove_privs(file, None)?;
        self.edges.forget_file(file.fid);
        // The part on the MDT first (dom.rs); the rest, if any, to the OSTs.
        let on_mdt = self.dom_write_redone(file, offset, data)?;
        if on_mdt == data.len() {
            return Ok((on_mdt, false));
        }
        let (offset, data, whole) = match on_mdt {
            0 => (offset, data, whole),
            n => (offset + n as u64, &data[n..], None),
        };
        let mut refused = 0;
        let end = offset.saturating_add(data.len() as u64);
        loop {
            let io = self.io_layout_to(file, end)?;
            let written = match io.get() {
                Some(layout) => osc::write_from(self, layout, offset, data, whole, file.owner),
                None => Err(Status::Inval.into()),
            };
            match written {
                // An OST refused it as issued under an older layout (a migration fenced the
                // objects; a write straight through has no other cause of ESTALE): redone
                // where the file's layout says now.
                Err(e) if e.status() == Status::Stale && refused < FENCED_REDOS_MAX => {
                    drop(io);
                    refused += 1;
                    self.layout_redos.fetch_add(1, Ordering::Relaxed);
                    self.reload_layout(file)?;
                }
                other => return other.map(|(n, zero_copy)| (n + on_mdt, zero_copy)),
            }
        }
    }

    /// Writes the part of `data` (at `offset`) below `file`'s component on the MDT, if its
    /// layout has one; how many bytes that was. A layout that changed meanwhile (a
    /// migration took the bytes to OSTs: `ESTALE`) is read again and the write redone
    /// where it says.
    pub(crate) fn dom_write_redone(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[u8],
    ) -> Result<usize> {
        let mut refused = 0;
        loop {
            let dom_end = self.io_layout(file)?.get().map_or(0, Layout::dom_end);
            match self.dom_write(file.fid, dom_end, offset, data) {
                Err(e) if e.status() == Status::Stale && refused < FENCED_REDOS_MAX => {
                    refused += 1;
                    self.layout_redos.fetch_add(1, Ordering::Relaxed);
                    self.reload_layout(file)?;
                }
                other => return other,
            }
        }
    }

    /// Makes the file's data durable on every OST it touches, and every metadata change
    /// acknowledged so far (its creation included) durable on the MDT.
    pub fn fsync(&self, file: &OpenFile) -> Result<()> {
        let io = self.io_layout(file)?;
        self.flush_file(file.fid, io.get())?;
        if let Some(layout) = io.get() {
            osc::sync(self, layout)?;
        }
        drop(io);
        self.sync_metadata()
    }

    /// Makes every metadata change acknowledged so far durable (`fsyncdir`, `syncfs`).
    pub fn sync_metadata(&self) -> Result<()> {
        // Only MDTs this client has talked to hold changes it made.
        let mdcs: Vec<Arc<mdc::Mdc>> = self.mdcs.read().values().cloned().collect();
        for m in mdcs {
            m.call(MdsOp::Sync)?;
        }
        Ok(())
    }

    /// Preallocates or punches a range.
    pub fn fallocate(
        &self,
        file: &OpenFile,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<()> {
        file.check_writable()?;
        // Not through the page cache: its objects' sizes are not followed (vouched.rs).
        self.forget_vouched(file.fid);
        self.written.wrote(file.fid);
        self.remove_privs(file, None)?;
        self.edges.forget_file(file.fid);
        // A hole punched needs no objects where there are none.
        let end = if punch_hole {
            0
        } else {
            offset.saturating_add(len)
        };
        match self.io_layout_to(file, end)?.get() {
            Some(layout) => {
                let dom_end = layout.dom_end();
                self.dom_fallocate(file.fid, dom_end, offset, len, keep_size, punch_hole)?;
                osc::fallocate(self, layout, offset, len, keep_size, punch_hole)
            }
            None => Err(Status::Inval.into()),
        }
    }
}
