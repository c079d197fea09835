//! The `fuser::Filesystem` implementation.

mod data;
mod dir;
mod flock;

use dir::DirStream;
pub use dir::READDIR_PAGE_ENTRIES;

use crate::attrs::file_attr;
use crate::pool::{self, Helpers, Lanes, HELPER_IDLE_MS, HELPER_THREADS_MAX};
use crate::{XATTR_DF, XATTR_LMV, XATTR_LMV_DEFAULT, XATTR_LOV, XATTR_MIGRATE, XATTR_MKDIR};
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use nacre_client::{Cached, Client, ClientError, OpenFile, StripeSpec};
use nacre_ldlm::msg::{LOOKUP, UPDATE};
use nacre_types::{Fid, FileKind, SetAttr, Status, TimeSpec};
use nacre_wire::mds::LayoutInfo;
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
    /// Ask the kernel for readdirplus (see [`NacreFs::with_readdirplus`]).
    readdirplus: bool,
}

/// What the operations work on.
struct Shared {
    client: Arc<Client>,
    files: Mutex<HashMap<u64, Arc<OpenFile>>>,
    caps: crate::caps::CapsCache,

    dirs: Mutex<HashMap<u64, Arc<Mutex<DirStream>>>>,
    next_fh: AtomicU64,
    attr_ttl: Duration,
    entry_ttl: Duration,
    jobs: crate::jobid::JobIds,
    groups: crate::groups::Groups,
    /// The lock sink's invalidator, once the session exists.
    inval: Arc<std::sync::OnceLock<Arc<crate::inval::Invalidator>>>,
    /// Byte-range locks taken through this mount (fs/flock.rs).
    flocks: Mutex<flock::MountFlocks>,
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
    Fid::from_ino(ino.0).ok_or(Errno::ESTALE)
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
            readdirplus: true,
        }
    }

    /// Whether the kernel lists directories with readdirplus (every entry's attributes with
    /// the listing, cached under locks: the statahead of `ls -l`; on by default) or plain
    /// readdir (a lookup per name the program then stats).
    pub fn with_readdirplus(mut self, on: bool) -> NacreFs {
        self.readdirplus = on;
        self
    }

    /// Where the mount puts its invalidator once the session (and so its notifier) exists.
    pub fn invalidator_slot(&self) -> Arc<std::sync::OnceLock<Arc<crate::inval::Invalidator>>> {
        self.shared.inval.clone()
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
            next_fh: AtomicU64::new(1),
            attr_ttl,
            entry_ttl,
            jobs,
            groups: Default::default(),
            inval: Default::default(),
            flocks: Default::default(),
        }
    }

    /// Tags the RPCs this thread sends for `req` with the caller's job id.
    fn enter(&self, req: &Caller) {
        nacre_types::jobid::set_current(&req.job);
        nacre_types::cred::set_current(Some(req.cred.clone()));
    }

    fn add_file(&self, file: OpenFile) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.caps.opened(file.fid);
        self.files.lock().insert(fh, Arc::new(file));
        FileHandle(fh)
    }

    /// `Err(EIO)` if `fh` is an open file its MDT closed by evicting this client.
    fn evicted_handle(&self, fh: FileHandle) -> Result<(), Errno> {
        match self.file(fh) {
            Err(e) if e != Errno::EBADF => Err(e),
            _ => Ok(()),
        }
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
        Ok(file)
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

    fn layout_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let value = match self.client.get_layout(fid)? {
            LayoutInfo::File(l) => serde_json::json!({
                "kind": "file",
                "stripe_count": l.objects.len(),
                "stripe_size": l.stripe_size,
                "pattern": "raid0",
                "objects": l.objects.iter().map(|o| serde_json::json!({
                    "ost": o.ost, "seq": o.object.seq, "id": o.object.id,
                })).collect::<Vec<_>>(),
            }),
            LayoutInfo::Dir(spec) => serde_json::json!({
                "kind": "dir",
                "default": spec.map(|s| serde_json::json!({
                    "stripe_count": s.stripe_count, "stripe_size": s.stripe_size, "start_ost": s.start_ost,
                })),
            }),
            LayoutInfo::None => serde_json::json!({ "kind": "none" }),
        };
        Ok(value.to_string().into_bytes())
    }

    fn df_json(&self) -> Result<Vec<u8>, ClientError> {
        let targets: Vec<_> = self
            .client
            .df()?
            .into_iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "bytes_total": t.statfs.bytes_total,
                    "bytes_free": t.statfs.bytes_free,
                    "bytes_avail": t.statfs.bytes_avail,
                    "files_total": t.statfs.files_total,
                    "files_free": t.statfs.files_free,
                })
            })
            .collect();
        Ok(
            serde_json::json!({ "fsname": self.client.fsname(), "targets": targets })
                .to_string()
                .into_bytes(),
        )
    }

    fn virtual_xattr(&self, fid: Fid, name: &OsStr) -> Option<Result<Vec<u8>, ClientError>> {
        match name.as_bytes() {
            n if n == XATTR_LOV.as_bytes() => Some(self.layout_json(fid)),
            n if n == XATTR_DF.as_bytes() => Some(self.df_json()),
            n if n == XATTR_LMV.as_bytes() => Some(self.lmv_json(fid)),
            n if n == XATTR_LMV_DEFAULT.as_bytes() => Some(self.lmv_default_json(fid)),
            _ => None,
        }
    }

    fn mkdir_on(&self, parent: Fid, value: &[u8], uid: u32, gid: u32) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_MKDIR} value: {why}"));
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| bad(&e.to_string()))?;
        let name = v["name"].as_str().ok_or_else(|| bad("no name"))?;
        let mdt = match v["mdt"].as_i64() {
            Some(-1) => nacre_wire::mds::MDT_INDEX_ANY,
            Some(m) => u32::try_from(m).map_err(|_| bad("bad mdt"))?,
            None => return Err(bad("no mdt")),
        };
        let mode = v["mode"].as_u64().unwrap_or(0o755) as u32 & 0o7777;
        if let Some(count) = v["count"].as_u64() {
            let count = u32::try_from(count).map_err(|_| bad("bad count"))?;
            let hash = match v["hash"].as_str() {
                Some(h) => h.parse().map_err(|e: String| bad(&e))?,
                None => nacre_types::dirstripe::DirHash::Fnv1a64,
            };
            let r = self.client.mkdir_striped(
                parent,
                name.as_bytes(),
                mode,
                uid,
                gid,
                count,
                mdt,
                hash,
            );
            self.forget_entry_later(parent, name);
            return r.map(|_| ());
        }
        let r = self
            .client
            .mkdir_on(parent, name.as_bytes(), mode, uid, gid, mdt);
        self.forget_entry_later(parent, name);
        r.map(|_| ())
    }

    /// A change made behind the kernel's back (through a virtual xattr) to `parent`/`name`:
    /// this mount's own locks were not called back by it, so the kernel's entry (a negative
    /// one, or the directory's old FID) is invalidated once the kernel lets go of the
    /// directory (it holds it for the xattr call).
    fn forget_entry_later(&self, parent: Fid, name: &str) {
        if let Some(inval) = self.inval.get() {
            inval.entry_later(parent.to_ino(), name.into());
        }
    }

    /// This mount's change of directories `dirs`, under way until the guard is dropped
    /// (after the reply): entry invalidations in them wait for its end (inval.rs).
    fn changing(&self, dirs: &[INodeNo]) -> Option<crate::inval::Changing> {
        let inos: Vec<u64> = dirs.iter().map(|d| d.0).collect();
        self.inval.get().map(|inval| inval.changing(&inos))
    }

    /// Pages of file `fid` the kernel cached without a data lock of this mount covering
    /// them (read or written through unlocked: refused, contended) go once the kernel lets
    /// go of them.
    fn drop_pages_later(&self, fid: Fid, offset: u64, len: u64) {
        if let Some(inval) = self.inval.get() {
            inval.data_later(fid.to_ino(), offset, len);
        }
    }

    fn migrate(&self, parent: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_MIGRATE} value: {why}"));
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| bad(&e.to_string()))?;
        let name = v["name"].as_str().ok_or_else(|| bad("no name"))?;
        let mdt = v["mdt"]
            .as_u64()
            .and_then(|m| u32::try_from(m).ok())
            .ok_or_else(|| bad("no mdt"))?;
        let r = self.client.migrate(parent, name.as_bytes(), mdt);
        self.forget_entry_later(parent, name);
        let (fid, moved, kept) = r?;
        tracing::info!(
            "migrated {name} to MDT{mdt:04x} as {fid}: {moved} inodes moved, {kept} kept"
        );
        Ok(())
    }

    fn lmv_default_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let v = match self.client.dir_default(fid)? {
            Some(d) => serde_json::json!({
                "count": d.count,
                "start": if d.start == u32::MAX { -1 } else { i64::from(d.start) },
                "hash": d.hash.name(),
                "max_inherit": d.max_inherit,
            }),
            None => serde_json::json!({}),
        };
        Ok(v.to_string().into_bytes())
    }

    fn set_lmv_default(&self, fid: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_LMV_DEFAULT}: {why}"));
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| bad(&e.to_string()))?;
        let default = match v["count"].as_i64() {
            None => None,
            Some(count) => Some(nacre_types::dirstripe::DirDefault {
                count: i32::try_from(count).map_err(|_| bad("count"))?,
                start: match v["start"].as_i64().unwrap_or(-1) {
                    -1 => u32::MAX,
                    s => u32::try_from(s).map_err(|_| bad("start"))?,
                },
                hash: v["hash"]
                    .as_str()
                    .unwrap_or("fnv_1a_64")
                    .parse()
                    .map_err(|e: String| bad(&e))?,
                max_inherit: v["max_inherit"]
                    .as_i64()
                    .map_or(Ok(nacre_types::dirstripe::DIR_DEFAULT_MAX_INHERIT), |m| {
                        i32::try_from(m).map_err(|_| bad("max_inherit"))
                    })?,
            }),
        };
        self.client.set_dir_default(fid, default)
    }

    fn lmv_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let stripe = self.client.dir_stripe(fid)?;
        let v = match stripe {
            Some(s) => serde_json::json!({
                "mdt": fid.mdt_index(),
                "stripe_count": s.shards.len(),
                "hash": s.hash.name(),
                "shards": s.shards.iter().map(|f| serde_json::json!({
                    "mdt": f.mdt_index(),
                    "fid": f.to_string(),
                })).collect::<Vec<_>>(),
            }),
            None => serde_json::json!({ "mdt": fid.mdt_index(), "stripe_count": 0 }),
        };
        Ok(v.to_string().into_bytes())
    }

    fn set_lov(&self, fid: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_LOV} value: {why}"));
        let v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| bad(&e.to_string()))?;
        let field = |k: &str, default: i64| v.get(k).and_then(|x| x.as_i64()).unwrap_or(default);
        let spec = StripeSpec {
            stripe_count: i32::try_from(field("stripe_count", 0))
                .map_err(|_| bad("stripe_count"))?,
            stripe_size: u32::try_from(field("stripe_size", 0)).map_err(|_| bad("stripe_size"))?,
            start_ost: i32::try_from(field("start_ost", -1)).map_err(|_| bad("start_ost"))?,
        };
        self.client.set_layout(fid, spec).map(|_| ())
    }
}

/// The operations, as the kernel asks them (run by [`NacreFs::run`]), with
/// `fuser::Filesystem`'s arguments.
#[allow(clippy::too_many_arguments)]
impl Shared {
    fn lookup(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.enter(req);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // Always the OSTs' size: the kernel applies an entry's size to a cached inode, so an MDT
        // hint here would shrink a file another thread is reading (a short read at a false EOF).
        match self.client.lookup_cached(parent, name.as_bytes()) {
            Ok((Some(a), c)) => self.reply_cached(reply, Ok((a, c))),
            // No such name, the directory's lock covering it: a negative entry the kernel
            // keeps until the lock goes (then invalidated as any entry).
            Ok((None, c)) if c.entry => {
                pool::leave();
                reply.entry_with_ttls(
                    &Duration::ZERO,
                    &LOCKED_TTL,
                    &crate::attrs::absent_attr(),
                    Generation(0),
                )
            }
            Ok((None, _)) => {
                pool::leave();
                reply.error(Errno::ENOENT)
            }
            Err(e) => self.reply_cached(reply, Err(e)),
        }
    }

    fn getattr(&self, req: &Caller, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.enter(req);
        let result = fid_of(ino).map(|f| self.client.getattr_cached(f));
        // Through a handle its MDT closed by evicting this client (which the call itself
        // may just have learned): EIO, as for every other use of that handle.
        if let Some(Err(e)) = fh.map(|fh| self.evicted_handle(fh)) {
            return reply.error(e);
        }
        pool::leave();
        match result {
            Ok(Ok((a, cached))) => reply.attr(&self.ttl(cached, self.attr_ttl), &file_attr(&a)),
            Ok(Err(e)) => reply.error(errno(&e)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            ctime: ctime.map(TimeSpec::from_system_time),
            times_now: matches!(atime, Some(TimeOrNow::Now))
                || matches!(mtime, Some(TimeOrNow::Now)),
            from_open: fh.is_some(),
        };
        let result = self.client.setattr(fid, set);
        pool::leave();
        match result {
            Ok(a) => reply.attr(&self.attr_ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, req: &Caller, ino: INodeNo, reply: ReplyData) {
        self.enter(req);
        match fid_of(ino).map(|f| self.client.readlink(f)) {
            Ok(Ok(t)) => reply.data(&t),
            Ok(Err(e)) => reply.error(errno(&e)),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let Some(kind) = FileKind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self
            .client
            .create(
                parent,
                name.as_bytes(),
                kind,
                mode & 0o7777,
                req.uid(),
                req.gid(),
                rdev,
                true,
                false,
                0,
            )
            .map(|(attr, _)| attr);
        self.reply_entry(reply, r);
    }

    fn mkdir(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self.client.mkdir_cached(
            parent,
            name.as_bytes(),
            (mode & 0o7777, req.uid(), req.gid()),
            LOOKUP | UPDATE,
        );
        self.reply_cached(reply, r);
    }

    fn unlink(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        empty(
            reply,
            fid_of(parent).and_then(|p| ok(self.client.unlink(p, name.as_bytes()))),
        );
    }

    fn rmdir(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        empty(
            reply,
            fid_of(parent).and_then(|p| ok(self.client.rmdir(p, name.as_bytes()))),
        );
    }

    fn symlink(
        &self,
        req: &Caller,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self.client.symlink(
            parent,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            req.uid(),
            req.gid(),
        );
        self.reply_entry(reply, r);
    }

    fn rename(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent, newparent]);
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let (src, dst) = match (fid_of(parent), fid_of(newparent)) {
            (Ok(s), Ok(d)) => (s, d),
            _ => return reply.error(Errno::ESTALE),
        };
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self
            .client
            .rename(src, name.as_bytes(), dst, newname.as_bytes(), noreplace)
        {
            Ok(()) => {
                reply.ok();
                // The kernel moves its dentry, which keeps the timeout of the old name's
                // entry; another client may have changed the name meanwhile (its callback
                // came while this rename held the directory), so the moved entry is
                // invalidated once the kernel is done with it, to be looked up afresh.
                if let Some(inval) = self.inval.get() {
                    inval.entry_later(newparent.0, newname.to_os_string());
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(
        &self,
        req: &Caller,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[newparent]);
        let (fid, parent) = match (fid_of(ino), fid_of(newparent)) {
            (Ok(f), Ok(p)) => (f, p),
            _ => return reply.error(Errno::ESTALE),
        };
        self.reply_entry(reply, self.client.link(fid, parent, newname.as_bytes()));
    }

    fn open(&self, req: &Caller, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let result = self.client.open(fid, access_of(flags.0));
        pool::leave();
        match result {
            Ok((_, mut file)) => {
                if flags.0 & libc::O_APPEND != 0 {
                    file.set_append();
                }
                let flags = self.file_open_flags(&file);
                reply.opened(self.add_file(file), flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
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

    fn write(
        &self,
        req: &Caller,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.enter(req);
        let file = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // Page-cache writes are kept as write-behind where a write lock allows (fs/data.rs);
        // O_DIRECT writes go through.
        let direct = flags.0 & libc::O_DIRECT != 0;
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

    fn release(
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
        if let Some(f) = &file {
            self.caps.released(f.fid);
            self.release_flocks(f.fid, fh);
        }

        let closed = file.map(|f| self.client.close(&f));
        pool::leave();
        match closed {
            Some(Err(e)) => reply.error(errno(&e)),
            _ => reply.ok(),
        }
    }

    fn fsync(
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

    fn fsyncdir(
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

    fn setxattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.caps.changed(fid);
        let r = if name.as_bytes() == XATTR_LOV.as_bytes() {
            self.set_lov(fid, value)
        } else if name.as_bytes() == XATTR_DF.as_bytes() {
            Err(ClientError::from(Status::Perm))
        } else if name.as_bytes() == XATTR_MKDIR.as_bytes() {
            self.mkdir_on(fid, value, req.uid(), req.gid())
        } else if name.as_bytes() == XATTR_LMV_DEFAULT.as_bytes() {
            self.set_lmv_default(fid, value)
        } else if name.as_bytes() == XATTR_MIGRATE.as_bytes() {
            if req.uid() == 0 {
                self.migrate(fid, value)
            } else {
                Err(ClientError::from(Status::Perm))
            }
        } else {
            self.client
                .setxattr(fid, name.as_bytes(), value, flags as u32)
        };
        match r {
            Ok(()) => reply.ok(),
            Err(ClientError::Config(msg)) => {
                tracing::warn!("{msg}");
                reply.error(Errno::EINVAL)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getxattr(&self, req: &Caller, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let caps = name.as_bytes() == crate::caps::XATTR_CAPS;
        if caps && self.caps.known_absent(fid) {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        let generation = if caps {
            self.caps.generation(fid)
        } else {
            None
        };
        let value = match self.virtual_xattr(fid, name) {
            Some(v) => v,
            None => self.client.getxattr(fid, name.as_bytes()),
        };
        if let (Some(g), Err(e)) = (generation, &value) {
            if e.errno() == libc::ENODATA {
                self.caps.learned_absent(fid, g);
            }
        }
        match value {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(status_errno(Status::Range)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, req: &Caller, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        match self.client.listxattr(fid) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if size == 0 {
                    reply.size(buf.len() as u32)
                } else if buf.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&buf)
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, req: &Caller, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        empty(
            reply,
            fid_of(ino).and_then(|f| {
                self.caps.changed(f);
                ok(self.client.removexattr(f, name.as_bytes()))
            }),
        );
    }

    fn create(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let exclusive = flags & libc::O_EXCL != 0;
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::Regular);
        let created = self.client.create_cached(
            parent,
            name.as_bytes(),
            (
                kind,
                mode & 0o7777,
                req.uid(),
                req.gid(),
                0,
                exclusive,
                true,
                access_of(flags),
            ),
        );
        pool::leave();
        match created {
            Ok((attr, mut file, cached)) => {
                let fid = file.fid;
                if flags & libc::O_APPEND != 0 {
                    file.set_append();
                }
                let flags = self.file_open_flags(&file);
                let fh = self.add_file(file);
                if exclusive {
                    // Made by this very call: no capability to strip from it yet (a
                    // non-exclusive create may have opened an existing file instead).
                    self.caps.created(fid);
                }
                let ttl = self.ttl(cached.entry && cached.attr, self.entry_ttl);
                reply.created(&ttl, &file_attr(&attr), Generation(0), fh, flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
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

impl Filesystem for NacreFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(IO_BYTES_MAX);
        let _ = config.set_max_readahead(IO_BYTES_MAX);
        let _ = config.set_max_background(64);
        // Readdirplus always (not adaptively): an `ls -l` gets every entry's attributes
        // with its listing, under locks, instead of a lookup per name afterwards.
        // Byte-range locks and flock() go to the MDT (fs/flock.rs), so they hold across
        // mounts.
        let mut wanted = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_POSIX_LOCKS
            | InitFlags::FUSE_FLOCK_LOCKS;
        if self.readdirplus {
            wanted |= InitFlags::FUSE_DO_READDIRPLUS;
        }
        let _ = config.add_capabilities(wanted & config.capabilities());
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| {
            fs.mkdir(c, parent, &name, mode, umask, reply)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_os_string();
        self.run(req, move |fs, c| fs.unlink(c, parent, &name, reply));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.to_os_string();
        self.run(req, move |fs, c| fs.rmdir(c, parent, &name, reply));
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| {
            fs.link(c, ino, newparent, &newname, reply)
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.run(req, move |fs, c| fs.open(c, ino, flags, reply));
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
            }),
            None => {
                let data = data.to_vec();
                self.helpers.submit(move |fs| {
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| fs.removexattr(c, ino, &name, reply));
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
        self.run(req, move |fs, c| {
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
        self.run(req, move |fs, c| {
            fs.fallocate(c, ino, fh, offset, length, mode, reply)
        });
    }
}
