//! Which descriptors are Nacre files, and what serves them.
//!
//! A descriptor is tracked when it was opened (or duplicated) through this library, or
//! was open when the process started (inherited across exec), and is a regular file on a
//! Nacre mount: a file system whose files answer the `user.nacre.api` attribute (the
//! node's client's socket). Tracking costs one `statx` per open, answered from what the
//! kernel has cached; the attribute is asked once per file system.
//!
//! Duplicates share one [`Entry`] (one open file description). An entry is *attached* —
//! made a handle of this process's session at the node's client by handing it the
//! descriptor — at its first read or write, not at open, so opening and closing costs
//! nothing more. A child after fork attaches afresh in a session of its own (the parent's
//! handles and rings are not its own): [`ProcState`] is made anew in the child.

use nacre_api::{File, Node, Ring};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How the library cuts a call's bytes over a ring (io.rs).
/// Bytes of one ring entry.
pub(crate) const CHUNK: usize = 1 << 20;
/// Chunks in flight at once (a ring's buffers).
pub(crate) const WINDOW_CHUNKS: usize = 8;
/// A ring's buffers.
pub(crate) const RING_BYTES: usize = CHUNK * WINDOW_CHUNKS;
/// A ring's entries (room for a window and an fsync).
pub(crate) const RING_ENTRIES: u32 = 32;

/// Descriptors below this number can be tracked (higher ones always go to the kernel).
pub(crate) const FDS_MAX: usize = 1 << 16;
/// Rings one process sets up per mount (threads beyond take one in turn, or use the
/// socket path when all are busy).
pub(crate) const RINGS_PER_MOUNT_MAX: usize = 16;

/// Rings per mount: [`RINGS_PER_MOUNT_MAX`], or fewer by `NACRE_PRELOAD_RINGS` (0: the
/// socket serves every call).
fn rings_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("NACRE_PRELOAD_RINGS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(RINGS_PER_MOUNT_MAX, |n: usize| n.min(RINGS_PER_MOUNT_MAX))
    })
}

/// A quick, lock-free look: is descriptor `fd` tracked? (Checked before any lock, so the
/// descriptors a signal handler writes to never take one.)
static TRACKED: [AtomicBool; FDS_MAX] = [const { AtomicBool::new(false) }; FDS_MAX];
/// The tracked descriptors' entries.
pub(crate) static TABLE: RwLock<BTreeMap<i32, Arc<Entry>>> = RwLock::new(BTreeMap::new());
/// A device (major, minor).
type Dev = (u32, u32);
/// Which file systems (by device) are Nacre mounts: the socket of their node's client.
pub(crate) static DEVS: RwLock<BTreeMap<Dev, Option<Arc<PathBuf>>>> = RwLock::new(BTreeMap::new());
static NEXT_ENTRY: AtomicU64 = AtomicU64::new(1);
static PROC: AtomicPtr<ProcState> = AtomicPtr::new(std::ptr::null_mut());

/// One open file description of a Nacre file.
pub(crate) struct Entry {
    id: u64,
    /// The node's client's socket.
    pub(crate) socket: Arc<PathBuf>,
    /// Opened with `O_APPEND` (or set so by fcntl): its writes go to the kernel, which
    /// appends atomically.
    pub(crate) append: AtomicBool,
    /// Mapped shared and writable: its fsync goes to the kernel too (dirty pages).
    pub(crate) mapped: AtomicBool,
    /// Written through the kernel (appends): its fsync goes to the kernel too.
    pub(crate) kernel_wrote: AtomicBool,
}

impl Drop for Entry {
    fn drop(&mut self) {
        // Its last descriptor closed: the handle at the node's client goes (dropping the
        // file closes it there, outside the lock).
        let gone = proc_state().files.lock().remove(&self.id);
        if let Some(Attached::Served(file, _)) = gone {
            let _in = crate::Inside::enter();
            drop(file);
        }
    }
}

/// What serves an entry in this process.
enum Attached {
    /// A handle at the node's client, and its mount's rings.
    Served(Arc<File>, Arc<Mount>),
    /// The node's client would not take it: the kernel serves it.
    Kernel,
}

/// A Nacre mount as this process reaches its node's client.
pub(crate) struct Mount {
    pub(crate) node: Node,
    rings: Mutex<Vec<Ring>>,
    /// Rings made (in the pool or taken), at most [`rings_max`].
    made: AtomicUsize,
}

impl Mount {
    /// A ring of this process's pool (made when none is free and fewer than
    /// [`RINGS_PER_MOUNT_MAX`] exist); `None` when none can be had.
    pub(crate) fn take_ring(&self) -> Option<Ring> {
        if let Some(r) = self.rings.lock().pop() {
            return Some(r);
        }
        let max = rings_max();
        if self
            .made
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return None;
        }
        match self.node.ring(RING_ENTRIES, RING_BYTES as u64) {
            Ok(r) => Some(r),
            Err(e) => {
                self.made.fetch_sub(1, Ordering::AcqRel);
                crate::say_once(&format!(
                    "no ring from the node's client ({e}): its socket serves"
                ));
                None
            }
        }
    }

    /// Gives a ring back (a broken one is dropped instead).
    pub(crate) fn put_ring(&self, ring: Ring, broken: bool) {
        if broken {
            self.made.fetch_sub(1, Ordering::AcqRel);
            drop(ring);
        } else {
            self.rings.lock().push(ring);
        }
    }
}

/// What one process (not a child after fork) holds at the node's clients.
pub(crate) struct ProcState {
    /// Mounts by socket: `None` when its node's client could not be reached.
    mounts: Mutex<HashMap<Arc<PathBuf>, Option<Arc<Mount>>>>,
    files: Mutex<HashMap<u64, Attached>>,
}

/// This process's state (made at the first use, and anew in a child after fork).
pub(crate) fn proc_state() -> &'static ProcState {
    let p = PROC.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: states are leaked, never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(ProcState {
        mounts: Mutex::new(HashMap::new()),
        files: Mutex::new(HashMap::new()),
    }));
    match PROC.compare_exchange(
        std::ptr::null_mut(),
        fresh,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: just leaked.
        Ok(_) => unsafe { &*fresh },
        Err(other) => {
            // SAFETY: ours, never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: states are leaked, never freed.
            unsafe { &*other }
        }
    }
}

/// In a child after fork (one thread): the parent's sessions, handles and rings are not
/// its own. They are left (their memory is the parent's copy); the child starts afresh.
pub(crate) fn forget_parent() {
    PROC.store(std::ptr::null_mut(), Ordering::Release);
}

/// Is `fd` tracked (lock-free)?
pub(crate) fn tracked(fd: i32) -> bool {
    usize::try_from(fd).is_ok_and(|i| i < FDS_MAX && TRACKED[i].load(Ordering::Acquire))
}

/// The entry of tracked descriptor `fd`.
pub(crate) fn entry(fd: i32) -> Option<Arc<Entry>> {
    if !tracked(fd) {
        return None;
    }
    TABLE.read().get(&fd).cloned()
}

/// Tracks `fd` as `entry`.
pub(crate) fn insert(fd: i32, entry: Arc<Entry>) {
    let Ok(i) = usize::try_from(fd) else { return };
    if i >= FDS_MAX {
        return;
    }
    let old = {
        let mut t = TABLE.write();
        TRACKED[i].store(true, Ordering::Release);
        t.insert(fd, entry)
    };
    drop(old);
}

/// Forgets `fd` (about to be closed, or replaced).
pub(crate) fn remove(fd: i32) {
    if !tracked(fd) {
        return;
    }
    let old = {
        let mut t = TABLE.write();
        TRACKED[fd as usize].store(false, Ordering::Release);
        t.remove(&fd)
    };
    // Its last descriptor: the node's client closes its handle (outside the lock).
    let _in = crate::Inside::enter();
    drop(old);
}

/// Forgets every tracked descriptor from `low` to `high`.
pub(crate) fn remove_range(low: u32, high: u32) {
    let gone: Vec<Arc<Entry>> = {
        let mut t = TABLE.write();
        let fds: Vec<i32> = t
            .range(low.min(i32::MAX as u32) as i32..=high.min(i32::MAX as u32) as i32)
            .map(|(fd, _)| *fd)
            .collect();
        fds.into_iter()
            .filter_map(|fd| {
                TRACKED[fd as usize].store(false, Ordering::Release);
                t.remove(&fd)
            })
            .collect()
    };
    let _in = crate::Inside::enter();
    drop(gone);
}

/// Makes `new` a duplicate of tracked `old` (as dup does).
pub(crate) fn duplicate(old: i32, new: i32) {
    if let Some(e) = entry(old) {
        insert(new, e);
    }
}

/// A descriptor just opened (`flags` as given to open): tracked if it is a regular file
/// of a Nacre mount.
pub(crate) fn opened(fd: i32, flags: i32) {
    if fd < 0 || fd as usize >= FDS_MAX || flags & libc::O_PATH != 0 {
        return;
    }
    // SAFETY: the caller's new descriptor, borrowed for these calls only.
    let bfd = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    if let Some(socket) = nacre_socket(bfd) {
        let append =
            rustix::fs::fcntl_getfl(bfd).is_ok_and(|f| f.contains(rustix::fs::OFlags::APPEND));
        insert(
            fd,
            Arc::new(Entry {
                id: NEXT_ENTRY.fetch_add(1, Ordering::Relaxed),
                socket,
                append: AtomicBool::new(append),
                mapped: AtomicBool::new(false),
                kernel_wrote: AtomicBool::new(false),
            }),
        );
    }
}

/// The node's client's socket if `fd` is a regular file of a Nacre mount. (Raw system
/// calls: nothing here comes back through this library.)
fn nacre_socket(fd: rustix::fd::BorrowedFd<'_>) -> Option<Arc<PathBuf>> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::TYPE,
    )
    .ok()?;
    // Regular files only; FUSE mounts have anonymous devices (major 0).
    if u32::from(st.stx_mode) & libc::S_IFMT != libc::S_IFREG || st.stx_dev_major != 0 {
        return None;
    }
    let dev = (st.stx_dev_major, st.stx_dev_minor);
    if let Some(known) = DEVS.read().get(&dev) {
        return known.clone();
    }
    let mut buf = [0u8; 4096];
    let socket = match rustix::fs::fgetxattr(fd, nacre_api::XATTR_API, &mut buf) {
        Ok(n) if n > 0 => {
            use std::os::unix::ffi::OsStrExt;
            Some(Arc::new(PathBuf::from(std::ffi::OsStr::from_bytes(
                &buf[..n],
            ))))
        }
        _ => None,
    };
    DEVS.write().insert(dev, socket.clone());
    socket
}

/// The descriptors open when the process started (inherited across exec) that are Nacre
/// files.
pub(crate) fn scan_inherited() {
    let Ok(dir) = rustix::fs::open(
        "/proc/self/fd",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) else {
        return;
    };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&dir) else {
        return;
    };
    let mut fds = Vec::new();
    while let Some(Ok(e)) = entries.read() {
        if let Some(fd) = e
            .file_name()
            .to_str()
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
        {
            fds.push(fd);
        }
    }
    use rustix::fd::AsRawFd;
    let own = dir.as_raw_fd();
    for fd in fds.into_iter().filter(|fd| *fd != own) {
        opened(fd, 0);
    }
}

/// What serves `entry` (descriptor `fd`) in this process: its file at the node's client
/// and the mount, attached now if it is not yet (and `attach`); `None` when the kernel
/// serves it.
pub(crate) fn served(entry: &Entry, fd: i32, attach: bool) -> Option<(Arc<File>, Arc<Mount>)> {
    let state = proc_state();
    match state.files.lock().get(&entry.id) {
        Some(Attached::Served(f, m)) => return Some((f.clone(), m.clone())),
        Some(Attached::Kernel) => return None,
        None if !attach => return None,
        None => {}
    }
    let attached = match mount(state, &entry.socket) {
        // SAFETY: the caller's descriptor, open for this call.
        Some(m) => match m
            .node
            .attach(unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) })
        {
            Ok(f) => Attached::Served(Arc::new(f), m),
            Err(e) => {
                crate::say_once(&format!(
                    "the node's client would not serve a file ({e}): the kernel serves it"
                ));
                Attached::Kernel
            }
        },
        None => Attached::Kernel,
    };
    let mut files = state.files.lock();
    let now = files.entry(entry.id).or_insert(attached);
    match now {
        Attached::Served(f, m) => Some((f.clone(), m.clone())),
        Attached::Kernel => None,
    }
}

/// The mount whose node's client listens at `socket`, connected at first use; `None`
/// (said once) when it cannot be reached.
fn mount(state: &ProcState, socket: &Arc<PathBuf>) -> Option<Arc<Mount>> {
    if let Some(m) = state.mounts.lock().get(socket) {
        return m.clone();
    }
    let m = match Node::connect_socket(socket) {
        Ok(node) => Some(Arc::new(Mount {
            node,
            rings: Mutex::new(Vec::new()),
            made: AtomicUsize::new(0),
        })),
        Err(e) => {
            crate::say_once(&format!(
                "{e}; this process's I/O on that mount goes through the kernel (FUSE)"
            ));
            None
        }
    };
    state
        .mounts
        .lock()
        .entry(socket.clone())
        .or_insert(m)
        .clone()
}
