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

use super::Shared;
use fuser::FopenFlags;
use nacre_client::OpenFile;

impl Shared {
    /// How `file` is opened: [`Shared::open_flags`], and `FOPEN_KEEP_CACHE` if its cached
    /// data is still good (else the kernel drops it, and the file's cache starts clean).
    pub(super) fn file_open_flags(&self, file: &OpenFile) -> FopenFlags {
        // Opened without flushes still (fs.rs: a flush at every close-on-exec of a process
        // starting another deadlocked with the job id lookup of the exec'ing process): kept
        // writes are written at the file's release, by fsync, and on callback.
        let mut flags = self.open_flags(file.fid);
        // An appender's writes go where the client finds the end of file, not where the
        // kernel's cached size says: the kernel must not cache them at its own offset.
        if file.is_append() && self.client.data_locks_on() {
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
