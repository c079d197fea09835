//! The `fuser::Filesystem` implementation.

mod cookies;
mod data;
mod dir;
mod flock;
mod names;
mod window;
mod xattr;

use dir::DirStream;
pub use dir::{Readdirplus, READDIR_PAGE_ENTRIES};

use crate::attrs::file_attr;
use crate::pool::{self, Helpers, Lanes, HELPER_IDLE_MS, HELPER_THREADS_MAX};
use crate::{
    XATTR_API, XATTR_DF, XATTR_FID, XATTR_LMV, XATTR_LMV_DEFAULT, XATTR_LOV, XATTR_MIGRATE,
    XATTR_MKDIR, XATTR_PROJECT,
};
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use nacre_client::{Cached, Client, ClientError, OpenFile};
use nacre_ldlm::msg::{LOOKUP, UPDATE};
use nacre_types::{Fid, FileKind, SetAttr, Status, TimeSpec};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Largest write and read the kernel sends (1 MiB, the FUSE ceiling here).
pub const IO_BYTES_MAX: u32 = 1 << 20;
/// Entry and attribute timeout given to the kernel for what a metadata lock covers: it is
/// invalidated when the lock goes, so the timeout only bounds how long the kernel keeps it.
pub const LOCKED_TTL: Duration = Duration::from_secs(3_600);

/// How every regular file is opened: parallel O_DIRECT writers, and no FUSE_FLUSH at close.
/// Writes are acknowledged by the OSTs before `write` returns, so a flush has nothing to do;
/// without `FOPEN_NOFLUSH` the kernel still sends one at every close and the closer waits for
/// its answer, which queues behind the FUSE threads' other work: while they all wait for a
/// restarting server, every close — including the close-on-exec in every process spawned
/// by a program with files open here — waited too (and the restarted server could be one).
/// Files this mount has byte-range locked are opened with flushes (fs/flock.rs: a close
/// releases the closer's locks).
const OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES.union(FopenFlags::FOPEN_NOFLUSH);

/// Who asked: what the operations need of the kernel's request, owned, so a helper thread
/// can run it after the FUSE thread moved on.
struct Caller {
    cred: nacre_types::Cred,
    job: String,
}

impl Caller {
    fn uid(&self) -> u32 {
        self.cred.uid
    }

    fn gid(&self) -> u32 {
        self.cred.gid
    }
}

/// Locks deferred handles are opened under (by handle number).
const UNDEFER_LOCKS: usize = 16;

/// The access an open with `flags` wants (`O_TRUNC` wants write, as the kernel's).
fn access_of(flags: i32) -> u8 {
    use nacre_types::cred::{MAY_READ, MAY_WRITE};
    let mode = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if flags & libc::O_TRUNC != 0 {
        mode | MAY_WRITE
    } else {
        mode
    }
}

/// The mounted file system: requests run on the FUSE thread that read them, or, when it is
/// the last one free, on a helper thread (crate::pool).
pub struct NacreFs {
    shared: Arc<Shared>,
    lanes: Lanes,
    helpers: Arc<Helpers<Shared>>,
    /// When the kernel asks for readdirplus (see [`NacreFs::with_readdirplus`]).
    readdirplus: Readdirplus,
    /// Writers' handles opened for direct I/O where the kernel allows it (see
    /// [`NacreFs::with_direct_writes`]).
    direct_writes: bool,
}

/// What the operations work on.
struct Shared {
    client: Arc<Client>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    caps: crate::caps::CapsCache,

    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    /// The names behind the directory offsets given (fs/cookies.rs).
    cookies: cookies::Cookies,
    next_fh: AtomicU64,
    attr_ttl: Duration,
    entry_ttl: Duration,
    jobs: crate::jobid::JobIds,
    groups: crate::groups::Groups,
    /// The lock sink's invalidator, once the session exists.
    inval: Arc<std::sync::OnceLock<Arc<crate::inval::Invalidator>>>,
    /// Byte-range locks taken through this mount (fs/flock.rs).
    flocks: Mutex<flock::MountFlocks>,
    /// The node API's socket, once it serves (`user.nacre.api`).
    pub(crate) api: Arc<std::sync::OnceLock<std::path::PathBuf>>,
    /// A deferred handle is opened at the MDT once (`Shared::undefer`): by handle number.
    undefer_locks: [Mutex<()>; UNDEFER_LOCKS],
    /// Deferred handles (creates this mount answered, not opened at the MDT) per file.
    deferred: Mutex<HashMap<Fid, u32>>,
    /// Statahead for lookups in name order, and the count of this mount's changes
    /// (fs/window.rs).
    windows: window::Windows,
    /// Writers' handles are opened with `FOPEN_DIRECT_IO` (fs/data.rs): asked for and the
    /// kernel negotiated `FUSE_DIRECT_IO_ALLOW_MMAP` at init.
    direct_writes: std::sync::atomic::AtomicBool,
    /// The handles opened for writing with `FOPEN_DIRECT_IO` (not appenders), by handle.
    direct_writers: Mutex<HashMap<u64, Fid>>,
}

fn errno(e: &ClientError) -> Errno {
    let code = e.errno();
    if code == libc::EIO {
        // What an application cannot act on is worth a line in the log.
        tracing::warn!("returning EIO: {e}");
    }
    Errno::from_i32(code)
}

/// A client result with its error as an errno.
fn ok<T>(r: Result<T, ClientError>) -> Result<T, Errno> {
    r.map_err(|e| errno(&e))
}

/// Answers an operation that returns nothing.
fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    pool::leave();
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn status_errno(s: Status) -> Errno {
    Errno::from_i32(s.errno())
}

fn fid_of(ino: INodeNo) -> Result<Fid, Errno> {
    crate::fid_of_ino(ino.0).ok_or(Errno::ESTALE)
}

fn time(t: TimeOrNow) -> TimeSpec {
    match t {
        TimeOrNow::Now => TimeSpec::now(),
        TimeOrNow::SpecificTime(t) => TimeSpec::from_system_time(t),
    }
}

impl NacreFs {
    /// A file system over `client` with the given cache timeouts, served by `threads` FUSE
    /// threads.
    pub fn new(
        client: Arc<Client>,
        attr_ttl: Duration,
        entry_ttl: Duration,
        jobs: crate::jobid::JobIds,
        threads: usize,
    ) -> NacreFs {
        let shared = Arc::new(Shared::new(client, attr_ttl, entry_ttl, jobs));
        NacreFs {
            helpers: Helpers::new(
                Arc::clone(&shared),
                HELPER_THREADS_MAX,
                Duration::from_millis(HELPER_IDLE_MS),
            ),
            shared,
            lanes: Lanes::new(threads),
            readdirplus: Readdirplus::Always,
            direct_writes: true,
        }
    }

    /// Whether handles that write a file (opened write-only, or by the create that made
    /// it) are opened for direct I/O, where the kernel has what that needs (fs/data.rs):
    /// each `write` is then one request, not one per partial page plus the rest.
    pub fn with_direct_writes(mut self, on: bool) -> NacreFs {
        self.direct_writes = on;
        self
    }

    /// When the kernel lists directories with readdirplus (every entry's attributes with
    /// the listing, cached under locks: the statahead of `ls -l`); see [`Readdirplus`].
    pub fn with_readdirplus(mut self, mode: Readdirplus) -> NacreFs {
        self.readdirplus = mode;
        self.shared.windows.enable(mode != Readdirplus::Off);
        self
    }

    /// Where the mount puts its invalidator once the session (and so its notifier) exists.
    pub fn invalidator_slot(&self) -> Arc<std::sync::OnceLock<Arc<crate::inval::Invalidator>>> {
        self.shared.inval.clone()
    }

    /// What the lock sink calls before a delegation this mount holds is given back:
    /// every handle still deferred from a create it answered is opened at the MDT.
    pub fn deferred_opener(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = Arc::downgrade(&self.shared);
        move || {
            if let Some(s) = shared.upgrade() {
                s.open_deferred_all();
            }
        }
    }

    /// Where the node API's socket is named once it serves ([`crate::XATTR_API`]).
    pub fn api_slot(&self) -> Arc<std::sync::OnceLock<std::path::PathBuf>> {
        self.shared.api.clone()
    }

    fn caller(&self, req: &Request) -> Caller {
        Caller {
            cred: self.shared.groups.cred(req.pid(), req.uid(), req.gid()),
            job: self.shared.jobs.of(req.pid(), req.uid()),
        }
    }

    /// Runs `op` here if another FUSE thread stays free, else on a helper.
    fn run(&self, req: &Request, op: impl FnOnce(&Shared, &Caller) + Send + 'static) {
        let caller = self.caller(req);
        match self.lanes.enter() {
            Some(lane) => Lanes::run_inline(lane, || op(&self.shared, &caller)),
            None => self.helpers.submit(move |shared| op(shared, &caller)),
        }
    }

    /// [`NacreFs::run`] for an operation that may change something: no statahead entry
    /// fetched before it completed is used after it (fs/window.rs).
    fn run_changing(&self, req: &Request, op: impl FnOnce(&Shared, &Caller) + Send + 'static) {
        self.run(req, move |fs, c| fs.windows.changing(|| op(fs, c)));
    }
}

impl Drop for NacreFs {
    fn drop(&mut self) {
        self.helpers.close();
    }
}

impl Shared {
    fn new(
        client: Arc<Client>,
        attr_ttl: Duration,
        entry_ttl: Duration,
        jobs: crate::jobid::JobIds,
    ) -> Shared {
        Shared {
            client,
            files: Mutex::new(HashMap::new()),
            caps: Default::default(),

            dirs: Mutex::new(HashMap::new()),
            cookies: Default::default(),
            next_fh: AtomicU64::new(1),
            attr_ttl,
            entry_ttl,
            jobs,
            groups: Default::default(),
            inval: Default::default(),
            api: Default::default(),
            undefer_locks: std::array::from_fn(|_| Mutex::new(())),
            deferred: Default::default(),
            flocks: Default::default(),
            windows: Default::default(),
            direct_writes: Default::default(),
            direct_writers: Default::default(),
        }
    }

    /// Tags the RPCs this thread sends for `req` with the caller's job id.
    fn enter(&self, req: &Caller) {
        nacre_types::jobid::set_current(&req.job);
        nacre_types::cred::set_current(Some(req.cred.clone()));
    }

    /// Keeps `file`, opened with `flags`, under a new handle number.
    fn add_file(&self, mut file: OpenFile, flags: FopenFlags) -> FileHandle {
        // The kernel says which writes clear set-id bits (fs/data.rs `write`).
        file.set_kernel_kills_privs();
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if flags.contains(FopenFlags::FOPEN_DIRECT_IO) && file.writable() && !file.is_append() {
            self.direct_writers.lock().insert(fh, file.fid);
        }
        self.caps.opened(file.fid);
        if file.is_deferred() {
            *self.deferred.lock().entry(file.fid).or_insert(0) += 1;
        }
        self.files.lock().insert(fh, Arc::new(file));
        FileHandle(fh)
    }

    /// `Err(EIO)` if `fh` is an open file its MDT closed by evicting this client.
    fn evicted_handle(&self, fh: FileHandle) -> Result<(), Errno> {
        // The handle as it is (a deferred one is not opened at the MDT for this).
        let Some(file) = self.files.lock().get(&fh.0).cloned() else {
            return Ok(());
        };
        self.client.check_handle(&file).map_err(|e| errno(&e))
    }

    /// The open file behind `fh`; `EIO` once its MDT has evicted this client (the handle
    /// was closed there).
    fn file(&self, fh: FileHandle) -> Result<Arc<OpenFile>, Errno> {
        let file = {
            let files = self.files.lock();
            // A broken invariant while holding the lock every file operation takes, for the
            // test of the panic policy (pool::contain): the others must go on.
            assert!(
                !nacre_net::fault::hit("fuse.open_files.panic"),
                "fault point fuse.open_files.panic"
            );
            files.get(&fh.0).cloned().ok_or(Errno::EBADF)?
        };
        if let Err(e) = self.client.check_handle(&file) {
            tracing::warn!("{e}");
            return Err(errno(&e));
        }
        if file.is_deferred() {
            return self.undefer(fh, &file);
        }
        Ok(file)
    }

    /// The handle `fh` (made by a create this mount answered: `file`) opened at the MDT,
    /// in its place (once: a second caller finds it done).
    fn undefer(&self, fh: FileHandle, file: &Arc<OpenFile>) -> Result<Arc<OpenFile>, Errno> {
        let _one = self.undefer_locks[fh.0 as usize % UNDEFER_LOCKS].lock();
        match self.files.lock().get(&fh.0) {
            Some(now) if !now.is_deferred() => return Ok(now.clone()),
            Some(_) => {}
            // Released meanwhile.
            None => return Err(Errno::EBADF),
        }
        let mut opened = self.client.undefer(file).map_err(|e| errno(&e))?;
        opened.set_kernel_kills_privs();
        let opened = Arc::new(opened);
        let mut files = self.files.lock();
        if !files.contains_key(&fh.0) {
            // Released while it was being opened: closed again, not brought back.
            drop(files);
            if let Err(e) = self.client.close(&opened) {
                tracing::warn!("closing {} released while it opened: {e}", file.fid);
            }
            return Err(Errno::EBADF);
        }
        files.insert(fh.0, opened.clone());
        drop(files);
        self.deferred_gone(file.fid);
        Ok(opened)
    }

    /// True if a page-cache write through deferred handle `fh` was kept to go with its
    /// file's create (`nacre_client::Client::write_delegated`); else the write goes as any
    /// other, the handle opened at the MDT first.
    fn kept_with_create(&self, fh: FileHandle, offset: u64, data: &[u8], direct: bool) -> bool {
        if direct || self.deferred.lock().is_empty() {
            return false;
        }
        let Some(file) = self.files.lock().get(&fh.0).cloned() else {
            return false;
        };
        file.is_deferred()
            && self.client.check_handle(&file).is_ok()
            && self.client.write_delegated(&file, offset, data)
    }

    /// The bytes a read through deferred handle `fh` gets from what this mount keeps of
    /// its file (`nacre_client::Client::read_kept`); `None`: the handle is opened at the
    /// MDT and the read goes as any other.
    fn read_kept(&self, fh: FileHandle, offset: u64, size: u32) -> Option<Vec<u8>> {
        if self.deferred.lock().is_empty() {
            return None;
        }
        let file = self.files.lock().get(&fh.0).cloned()?;
        if !file.is_deferred() || self.client.check_handle(&file).is_err() {
            return None;
        }
        self.client.read_kept(&file, offset, size as usize)
    }

    /// Drops handle `fh` on `fid` that was never handed to the kernel (its open failed).
    fn forget_handle(&self, fh: FileHandle, fid: Fid) {
        self.direct_writers.lock().remove(&fh.0);
        if let Some(f) = self.files.lock().remove(&fh.0) {
            if f.is_deferred() {
                self.deferred_gone(fid);
            }
            self.caps.released(fid);
        }
    }

    /// A deferred handle on `fid` was opened at the MDT or released.
    fn deferred_gone(&self, fid: Fid) {
        let mut deferred = self.deferred.lock();
        if let Some(n) = deferred.get_mut(&fid) {
            *n -= 1;
            if *n == 0 {
                deferred.remove(&fid);
            }
        }
    }

    /// Before `name` of `parent` is removed (an unlink, a rename over it): the deferred
    /// handles on its file are opened at the MDT, so the file lives on while they are open
    /// (a file no handle holds open at the MDT goes with its last name).
    fn open_before_removal(&self, parent: Fid, name: &[u8]) {
        if self.deferred.lock().is_empty() {
            return;
        }
        let fid = match self.client.delegated_name(parent, name) {
            Some(f) => f,
            None => match self.client.lookup(parent, name, false) {
                Ok(a) => a.fid,
                // Nothing to open: the removal answers the error.
                Err(_) => return,
            },
        };
        if !self.deferred.lock().contains_key(&fid) {
            return;
        }
        self.undefer_where(|f| f.fid == fid, "before its name goes");
    }

    /// Opens at the MDT every handle still deferred from its create: a delegation goes,
    /// after which another client may unlink the file, which lives on only for the handles
    /// the MDT knows open (its creates were sent first, as the delegation went).
    pub(crate) fn open_deferred_all(&self) {
        if self.deferred.lock().is_empty() {
            return;
        }
        self.undefer_where(|_| true, "as its delegation goes");
    }

    /// Opens at the MDT the deferred handles of `fid` (logged if one fails).
    pub(super) fn open_deferred_of(&self, fid: Fid) {
        if self.deferred.lock().contains_key(&fid) {
            self.undefer_where(|f| f.fid == fid, "before its mode or owner changes");
        }
    }

    /// Opens at the MDT the deferred handles of files `which` picks (`why`, logged if one
    /// fails).
    fn undefer_where(&self, which: impl Fn(&OpenFile) -> bool, why: &str) {
        let handles: Vec<(u64, Arc<OpenFile>)> = self
            .files
            .lock()
            .iter()
            .filter(|(_, f)| f.is_deferred() && which(f))
            .map(|(fh, f)| (*fh, f.clone()))
            .collect();
        for (fh, f) in handles {
            if let Err(e) = self.undefer(FileHandle(fh), &f) {
                tracing::warn!("opening {} {why}: {e:?}", f.fid);
            }
        }
    }

    fn reply_entry(&self, reply: ReplyEntry, r: Result<nacre_types::Attr, ClientError>) {
        pool::leave();
        match r {
            Ok(a) => reply.entry(&self.entry_ttl, &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// Replies with an entry, its timeouts long where a lock covers it.
    fn reply_cached(&self, reply: ReplyEntry, r: Result<(nacre_types::Attr, Cached), ClientError>) {
        pool::leave();
        match r {
            Ok((a, c)) => reply.entry_with_ttls(
                &self.ttl(c.attr, self.attr_ttl),
                &self.ttl(c.entry, self.entry_ttl),
                &file_attr(&a),
                Generation(0),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// [`LOCKED_TTL`] if a lock covers it, else `plain`.
    fn ttl(&self, covered: bool, plain: Duration) -> Duration {
        match covered {
            true => LOCKED_TTL.max(plain),
            false => plain,
        }
    }
}

/// The operations, as the kernel asks them (run by [`NacreFs::run`]), with
/// `fuser::Filesystem`'s arguments.
#[allow(clippy::too_many_arguments)]
impl Shared {
    fn statfs(&self, req: &Caller, _ino: INodeNo, reply: ReplyStatfs) {
        self.enter(req);
        match self.client.statfs() {
            Ok(s) => {
                let bsize = 4096u64;
                reply.statfs(
                    s.bytes_total / bsize,
                    s.bytes_free / bsize,
                    s.bytes_avail / bsize,
                    s.files_total,
                    s.files_free,
                    bsize as u32,
                    nacre_types::limits::NAME_BYTES_MAX as u32,
                    bsize as u32,
                )
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for NacreFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(IO_BYTES_MAX);
        let _ = config.set_max_readahead(IO_BYTES_MAX);
        let _ = config.set_max_background(64);
        // Readdirplus always by default: every listing refreshes the attributes the kernel
        // holds (a stat of a file written here after a listing of its directory costs
        // nothing). `auto`: the kernel asks for attributes with a listing's first reply and
        // after lookups in the directory, plain pages otherwise (a scan that does not stat
        // lists 1,024 names per RPC, with no lock or inode per entry); lookups in name
        // order after a whole listing are answered by the directory's statahead window
        // (fs/window.rs), a readdirplus page per 256 names instead of a lookup each.
        // Byte-range locks and flock() go to the MDT (fs/flock.rs), so they hold across
        // mounts.
        // Set-id bits are cleared by the MDT, as a side effect of the write, truncate or
        // chown the kernel says called for it (HANDLE_KILLPRIV_V2), not by a chmod the
        // kernel would send in the writer's name (which the owner check refuses).
        let mut wanted = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_POSIX_LOCKS
            | InitFlags::FUSE_FLOCK_LOCKS
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        match self.readdirplus {
            Readdirplus::Always => wanted |= InitFlags::FUSE_DO_READDIRPLUS,
            Readdirplus::Auto => {
                wanted |= InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO
            }
            Readdirplus::Off => {}
        }
        // Direct I/O for writers' handles only where the kernel keeps the page cache of
        // the file's other handles right across their writes and allows shared maps of
        // them: the kernels that offer FUSE_DIRECT_IO_ALLOW_MMAP (6.6+; fs/data.rs).
        let allow_mmap = InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        if self.direct_writes && config.capabilities().contains(allow_mmap) {
            wanted |= allow_mmap;
        }
        let _ = config.add_capabilities(wanted & config.capabilities());
        self.shared.direct_writes.store(
            self.direct_writes && config.capabilities().contains(allow_mmap),
            Ordering::Relaxed,
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name.to_os_string();
        self.run(req, move |fs, c| fs.lookup(c, parent, &name, reply));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.run(req, move |fs, c| fs.getattr(c, ino, fh, reply));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.run_changing(req, move |fs, c| {
            fs.setattr(
                c, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime,
                flags, reply,
            )
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.run(req, move |fs, c| fs.readlink(c, ino, reply));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| {
            fs.mknod(c, parent, &name, mode, umask, rdev, reply)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| {
            fs.mkdir(c, parent, &name, mode, umask, reply)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| fs.unlink(c, parent, &name, reply));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| fs.rmdir(c, parent, &name, reply));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let link_name = link_name.to_os_string();
        let target = target.to_path_buf();
        self.run_changing(req, move |fs, c| {
            fs.symlink(c, parent, &link_name, &target, reply)
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let name = name.to_os_string();
        let newname = newname.to_os_string();
        self.run_changing(req, move |fs, c| {
            fs.rename(c, parent, &name, newparent, &newname, flags, reply)
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let newname = newname.to_os_string();
        self.run_changing(req, move |fs, c| {
            fs.link(c, ino, newparent, &newname, reply)
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match access_of(flags.0) & nacre_types::cred::MAY_WRITE {
            0 => self.run(req, move |fs, c| fs.open(c, ino, flags, reply)),
            _ => self.run_changing(req, move |fs, c| fs.open(c, ino, flags, reply)),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.run(req, move |fs, c| {
            fs.read(c, ino, fh, offset, size, flags, lock_owner, reply)
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Not through `run`: the data is copied only when a helper takes the write.
        let caller = self.caller(req);
        match self.lanes.enter() {
            Some(lane) => Lanes::run_inline(lane, || {
                self.shared.windows.changing(|| {
                    self.shared.write(
                        &caller,
                        ino,
                        fh,
                        offset,
                        data,
                        write_flags,
                        flags,
                        lock_owner,
                        reply,
                    )
                })
            }),
            None => {
                let data = data.to_vec();
                self.helpers.submit(move |fs| {
                    fs.windows.changing(|| {
                        fs.write(
                            &caller,
                            ino,
                            fh,
                            offset,
                            &data,
                            write_flags,
                            flags,
                            lock_owner,
                            reply,
                        )
                    })
                });
            }
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.run(req, move |fs, c| fs.flush(c, ino, fh, lock_owner, reply));
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        self.run(req, move |fs, c| {
            fs.release(c, ino, fh, flags, lock_owner, flush, reply)
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.run(req, move |fs, c| fs.fsync(c, ino, fh, datasync, reply));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let caller = self.caller(req);
        self.shared.opendir(&caller, ino, flags, reply);
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.run(req, move |fs, c| fs.readdir(c, ino, fh, offset, reply));
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: fuser::ReplyLock,
    ) {
        self.run(req, move |fs, c| {
            fs.getlk(c, ino, lock_owner, (start, end), typ, reply)
        });
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        // A wait is given up when the waiting thread is signalled (signals.rs).
        let waiter = sleep.then_some(req.pid());
        self.run(req, move |fs, c| {
            fs.setlk(
                c,
                ino,
                fh,
                lock_owner,
                (start, end),
                (typ, pid),
                waiter,
                reply,
            )
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: fuser::ReplyDirectoryPlus,
    ) {
        self.run(req, move |fs, c| fs.readdirplus(c, ino, fh, offset, reply));
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let caller = self.caller(req);
        self.shared.releasedir(&caller, ino, fh, flags, reply);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.run(req, move |fs, c| fs.fsyncdir(c, ino, fh, datasync, reply));
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.run(req, move |fs, c| fs.statfs(c, ino, reply));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name.to_os_string();
        let value = value.to_vec();
        self.run_changing(req, move |fs, c| {
            fs.setxattr(c, ino, &name, &value, flags, position, reply)
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.to_os_string();
        self.run(req, move |fs, c| fs.getxattr(c, ino, &name, size, reply));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.run(req, move |fs, c| fs.listxattr(c, ino, size, reply));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| fs.removexattr(c, ino, &name, reply));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let name = name.to_os_string();
        self.run_changing(req, move |fs, c| {
            fs.create(c, parent, &name, mode, umask, flags, reply)
        });
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.run_changing(req, move |fs, c| {
            fs.fallocate(c, ino, fh, offset, length, mode, reply)
        });
    }
}
