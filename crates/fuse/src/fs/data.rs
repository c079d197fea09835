//! File data in the kernel's page cache across opens: a file is opened with
//! `FOPEN_KEEP_CACHE` while this mount holds read locks on all of every object of it and
//! everything the kernel cached of it was read under those locks; otherwise the kernel
//! drops its cached data at the open, and what it reads from then on is read under locks
//! (page-cache reads ask for them, nacre_client::datalocks). A lock's callback has the
//! kernel drop the file's cached data before the lock goes (inval.rs). Page-cache writes
//! are kept as write-behind under write locks (nacre_client::writeback), written at the
//! file's release (not in close(2)), by fsync and on callback.
//! An `O_APPEND` file is opened with `FOPEN_DIRECT_IO` and its writes go to the client's
//! append (nacre_client::append), which finds the true end of file under write locks.
//!
//! So is a writer's handle (`--direct-writes`, on by default): one opened write-only, or
//! by a create that found the file empty. Its writes are kept as write-behind as any
//! page-cache write, but each `write` comes as one request: in the kernel's write-through
//! mode a write that starts inside a page not in the cache is sent as two (that page
//! alone, then the rest), and the writers of one file are serialised on its inode lock
//! (IOR hard's 47,008-byte records: 1.78x, docs/PERFORMANCE.md). The kernel caches no page
//! of such writes (it would keep only whole pages anyway); a reader's handle of the file
//! keeps its cache, which the kernel drops over each direct write's range, and maps are
//! allowed: only where the kernel negotiated `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux 6.6+,
//! which does both), else writers' handles use the page cache as before. A handle that
//! can read a file with bytes is left to the page cache (its reads would otherwise each
//! be a request) unless a writer's direct handle of the file is open here: the writers of
//! one file then all write one way (IOR's ranks each open the shared file `O_CREAT |
//! O_RDWR`: one makes it, the others open it).

use super::*;

impl Shared {
    /// How `file` is opened: [`Shared::open_flags`], `FOPEN_DIRECT_IO` for a writer's
    /// handle (`empty`: opened by a create that found the file empty; see the module
    /// documentation), and `FOPEN_KEEP_CACHE` if its cached data is still good (else the
    /// kernel drops it, and the file's cache starts clean).
    pub(super) fn file_open_flags(&self, file: &OpenFile, empty: bool) -> FopenFlags {
        // Opened without flushes still (fs.rs: a flush at every close-on-exec of a process
        // starting another deadlocked with the job id lookup of the exec'ing process): kept
        // writes are written at the file's release, by fsync, and on callback.
        let mut flags = self.open_flags(file.fid);
        // An appender's writes go where the client finds the end of file, not where the
        // kernel's cached size says: the kernel must not cache them at its own offset.
        if file.is_append() && self.client.data_locks_on() {
            flags |= FopenFlags::FOPEN_DIRECT_IO;
        }
        if file.writable()
            && self.direct_writes.load(Ordering::Relaxed)
            && (empty
                || !file.readable()
                || self.direct_writers.lock().values().any(|f| *f == file.fid))
        {
            flags |= FopenFlags::FOPEN_DIRECT_IO;
        }
        let Some(layout) = file.layout() else {
            return flags;
        };
        if self.client.data_cached(file.fid, &layout) {
            return flags | FopenFlags::FOPEN_KEEP_CACHE;
        }
        // Before the reply: the kernel drops the cache when it gets it, and a read that
        // is not covered after this marks the file unclean again.
        self.client.data_cache_dropped(file.fid);
        flags
    }
}

/// Opens, reads, writes, releases, syncs and space allocation of regular files.
#[allow(clippy::too_many_arguments)]
impl Shared {
    pub(super) fn open(&self, req: &Caller, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // A file this mount made under a delegation it holds, and keeps: answered here,
        // opened at the MDT only if the handle is used for more than reads (a truncating
        // open changes it: to the MDT).
        if flags.0 & libc::O_TRUNC == 0 {
            if let Some(mut file) = self.client.open_kept(fid, access_of(flags.0), req.uid()) {
                if flags.0 & libc::O_APPEND != 0 {
                    file.set_append();
                }
                let open_flags = self.file_open_flags(&file, false);
                let fh = self.add_file(file, open_flags);
                // A removal of its name, or the delegation going, since it was answered:
                // opened at the MDT now (either of them would have missed it).
                if !self.client.still_kept(fid) {
                    if let Err(e) = self.file(fh) {
                        self.forget_handle(fh, fid);
                        pool::leave();
                        return reply.error(e);
                    }
                }
                pool::leave();
                return reply.opened(fh, open_flags);
            }
        }
        // The kernel checked the caller's permission (default_permissions): an open this
        // mount kept may be handed out again (nacre_client::opencache).
        let result = self.client.open_checked(fid, access_of(flags.0));
        pool::leave();
        match result {
            Ok(mut file) => {
                if flags.0 & libc::O_APPEND != 0 {
                    file.set_append();
                }
                let flags = self.file_open_flags(&file, false);
                reply.opened(self.add_file(file, flags), flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn read(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.enter(req);
        // Through a handle this mount answered on a file it made and keeps: from its bytes.
        if let Some(data) = self.read_kept(fh, offset, size) {
            pool::leave();
            return reply.data(&data);
        }
        let file = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // The kernel reads ahead for page-cache reads; O_DIRECT readers get the client's.
        let direct = flags.0 & libc::O_DIRECT != 0;
        if !direct && self.client.data_locks_on() {
            // Under read locks, held until the data is in the kernel's cache (fs/data.rs).
            let result = self.client.read_cached(&file, offset, size as usize);
            pool::leave();
            return match result {
                Ok((data, locks)) => {
                    let covered = locks.covered;
                    reply.data(&data);
                    self.client.read_done(file.fid, locks);
                    if !covered {
                        self.drop_pages_later(file.fid, offset, u64::from(size));
                    }
                }
                Err(e) => reply.error(errno(&e)),
            };
        }
        let result = self.client.read_at(&file, offset, size as usize, direct);
        pool::leave();
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn write(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.enter(req);
        let direct = flags.0 & libc::O_DIRECT != 0;
        if self.kept_with_create(fh, offset, data, direct) {
            pool::leave();
            // The pages the kernel keeps of it are covered by the delegation, as the
            // file's entry and attributes are: dropped with them when it goes.
            return reply.written(data.len() as u32);
        }
        let file = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // FUSE_HANDLE_KILLPRIV_V2: the kernel leaves clearing set-id bits to the file
        // system, and says when this writer lacks CAP_FSETID on a file that has them.
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        if let Err(e) = self.client.remove_privs(&file, Some(kill)) {
            pool::leave();
            return reply.error(errno(&e));
        }
        // Page-cache writes are kept as write-behind where a write lock allows (fs/data.rs);
        // O_DIRECT writes go through.
        let result = if file.is_append() && self.client.data_locks_on() {
            // At the true end of file, whatever the kernel's cached size says (fs/data.rs).
            self.client.append(&file, data).map(|_| data.len())
        } else if !direct && self.client.data_locks_on() {
            let n = self.client.write_cached(&file, offset, data);
            // Pages the kernel keeps of this write with no lock of this mount covering
            // them (the OST gave none) would never be dropped when another mount changes
            // them.
            if n.is_ok()
                && !self
                    .client
                    .pages_covered_for_write(&file, offset, data.len() as u64)
            {
                self.drop_pages_later(file.fid, offset, data.len() as u64);
            }
            n
        } else {
            self.client.write(&file, offset, data)
        };
        pool::leave();
        match result {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn release(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let file = self.files.lock().remove(&fh.0);
        self.direct_writers.lock().remove(&fh.0);
        if let Some(f) = &file {
            if f.is_deferred() {
                self.deferred_gone(f.fid);
            }
            self.caps.released(f.fid);
            self.release_flocks(f.fid, fh);
        }

        let closed = file.map(|f| (self.client.close(&f), f));
        pool::leave();
        // Its times moved at the MDT: what the kernel kept from before is stale.
        let closed = closed.map(|(r, f)| {
            if r.is_ok() && f.has_written() {
                if let Some(inval) = self.inval.get() {
                    inval.attributes(crate::ino_of(f.fid));
                }
            }
            r
        });
        match closed {
            Some(Err(e)) => reply.error(errno(&e)),
            _ => reply.ok(),
        }
    }

    pub(super) fn fsync(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        empty(reply, self.file(fh).and_then(|f| ok(self.client.fsync(&f))));
    }

    pub(super) fn fsyncdir(
        &self,
        req: &Caller,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        match self.client.sync_metadata() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn fallocate(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        if mode & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE) != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let r = self
            .file(fh)
            .and_then(|f| ok(self.client.fallocate(&f, offset, length, keep_size, punch)));
        empty(reply, r);
    }
}
