//! The Nacre client library: what the FUSE mount, the node API, the policy engine, the data
//! mover and the CLI are built on.
//!
//! A `Client` mounts a file system by NID and name: it fetches the configuration from the
//! MGS (and hears of target restarts from it at once), gets its root from the MDT's answer
//! to `Connect` (a fileset's root, or the file system's), talks to each MDT through an `mdc`
//! and to each OST through the `osc`.
//!
//! * `mdc`: the metadata client, one per MDT: every request carries the client uuid and the
//!   lowest xid still unanswered (exactly once); a change answered but not committed stays
//!   in the replay list until `last_committed` passes it, and is replayed after an MDT
//!   restart; a request answered `EINPROGRESS` is resent with the same xid (up to 300 s); an
//!   evicted client takes a new uuid. Its threads: a pinger per MDT and a lock callback
//!   thread per MDT.
//! * `routing`: an operation goes to its inode's or parent directory's MDT, which the FID's
//!   sequence names, and in a striped directory to the shard the name hashes to (docs/dne.md).
//! * `osc`: the object storage client: I/O split along the layout into one RPC per object
//!   range (at most `max_rpc_size` each), started on every OST at once (at most
//!   `max_rpcs_in_flight` per OST), then collected, so stripes move in parallel; glimpses
//!   for sizes. Reads can be started and finished apart, and are received straight into a
//!   caller's buffer when they are one RPC; writes are sent from a caller's aligned buffer
//!   when they are one RPC. `capa_for`: each OST request carries the capability for its
//!   object, renewed by a layout fetch past half its life.
//! * `capas`: the object capabilities this client was given with its opens.
//! * `namespace`: lookups, attributes, creates, links, renames, xattrs, layouts.
//!   `listing`: directory pages, shards merged; readdirplus pages with attributes and locks.
//! * `io`: data: reads (with read-ahead), writes straight through, syncs, allocation.
//! * `layouts`: the layout an open file's I/O uses, under the `LAYOUT` lock: held shared by
//!   I/O, let go of on callback after the I/O ends and kept writes are written, read again by
//!   the next I/O.
//! * `locking`: taking metadata locks (`enable_locks`): a callback thread per MDT polls,
//!   hands revoked locks to the mount's sink, cancels them, and replays them after a restart;
//!   replies say what the kernel may keep (`Cached`). `complete`: directories known
//!   completely (no lookup before a create). `dirattrs`: directories' attributes kept under
//!   their `UPDATE` lock, fed by the MDT's answers to this client's own changes.
//!   `opencache`: opens for reading kept under `OPEN` locks: asked for once a file is hot,
//!   taken back without a request, closed at the MDT when the lock goes.
//! * `flock`: byte-range locks: set, test, wait (kept by the file's MDT).
//! * `datalocks`: extent locks on OST objects (`enable_data_locks`): read locks asked for by
//!   page-cache reads, in use until the kernel has the data; a callback thread per OST
//!   (`datalocks/callbacks.rs`: the poll loop, glimpse answers, lock replay after an OST
//!   restart); a revoker thread that has the mount drop a file's cached data before the
//!   cancel; eviction.
//! * `writeback`: write-behind under write locks and space grant: kept pieces, and a flusher
//!   thread gathering them into large RPCs (`writeback/flusher.rs`); write-through for ids an
//!   OST says are near a quota limit (`writeback/quota_sync.rs`). Kept data is written on
//!   callback, fsync, release, reads and truncates; errors are reported at fsync; eviction
//!   drops it; writes refused as stale by a restarted OST are sent again after the lock
//!   replay unless their object changed.
//! * `append`: `O_APPEND` across clients: whole-object write locks enqueued and held while
//!   the size is read and written at.
//! * `relayout`: the migrator of online file migration: copies between data versions,
//!   fences the old objects, has the MDT swap the layout; writes refused by a fence are
//!   redone in `io`.
//! * `admin`: usage, lfsck, disconnect, imports. `lfsck`: the namespace checker over all
//!   MDTs. `changelog`: changelog consumers' calls, `fid2path` across MDTs, `path2fid`.
//!   `rpc_stats`: `osc.*.rpc_stats`.
//!
//! Consistency: without `enable_locks` and `enable_data_locks` (the FUSE mount turns both
//! on) the library caches no attributes or data: every call asks the servers, and a write
//! returns once every OST holding a part acknowledged it. With them, what a lock covers is
//! kept until the lock is called back (docs/locking.md).
//!
//! Bad content from the other side of a socket is not a panic: replies are checked
//! (`MdsReply::check`: layouts of 1..2000 objects with a valid stripe size, directory stripes
//! of 1..256 shards; a read's bulk no longer than asked), and a bad one fails the operation
//! with EIO (`ClientError::BadReply`), the cause logged; the connection stays. Locks here are
//! `parking_lot`'s, which do not poison: a FUSE handler that panicked holding one leaves it
//! usable.

mod admin;
mod append;
mod batch;
pub mod capas;
pub mod changelog;
pub mod complete;
pub mod datalocks;
mod delegated;
pub mod dirattrs;
mod dom;
pub mod edges;
mod flock;
mod io;
mod layouts;
pub mod lfsck;
mod listing;
mod locking;
pub mod mdc;
mod namespace;
pub mod opencache;
pub mod osc;
pub mod relayout;
mod routing;
pub mod rpc_stats;
pub mod vouched;
pub mod writeback;
pub mod written;

pub use admin::QuotaTargetUsage;
pub use batch::Created;
pub use flock::{FlockWait, FLOCK_WAIT_SLICE_MS};
pub use listing::Listed;
pub use locking::Cached;

use nacre_net::rpc::{call, RpcError};
use nacre_net::{Connection, NetConfig};
use nacre_types::dirstripe::DirStripe;
use nacre_types::{Attr, Fid, Layout, Nid, Owner, StatFs, Status, TimeSpec};
use nacre_wire::mds::{DirEntry, MdsOp};
use nacre_wire::mgs::{FsConfig, MgsReply, MgsRequest, TargetInfo, TargetKind};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use nacre_types::layout::{ComponentSpec, LayoutSpec, StripeSpec};

/// Client errors; [`ClientError::errno`] maps them to what an application sees.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A server returned an error or the network failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The file system configuration is unusable.
    #[error("{0}")]
    Config(String),
    /// The handle was opened before MDT `target` evicted this client: the MDT closed it.
    #[error("MDT{target:04x} evicted this client; files open before are closed there")]
    Evicted {
        /// The MDT.
        target: u32,
    },
    /// A server's reply was well-formed but its content impossible (a layout of no objects,
    /// more bulk than asked for, ...): the operation fails with EIO, the connection stays.
    #[error("bad reply from {from}: {what}")]
    BadReply {
        /// The server (target name).
        from: String,
        /// What was wrong.
        what: String,
    },
}

impl ClientError {
    /// The errno for this error.
    pub fn errno(&self) -> i32 {
        match self {
            ClientError::Rpc(e) => e.status().errno(),
            ClientError::Config(_) | ClientError::Evicted { .. } | ClientError::BadReply { .. } => {
                libc_eio()
            }
        }
    }

    /// The status for this error.
    pub fn status(&self) -> Status {
        match self {
            ClientError::Rpc(e) => e.status(),
            ClientError::Config(_) | ClientError::Evicted { .. } | ClientError::BadReply { .. } => {
                Status::Io
            }
        }
    }
}

impl ClientError {
    /// A [`ClientError::BadReply`] from `from`, logged where it is made (the application sees
    /// only EIO).
    pub fn bad_reply(from: String, what: String) -> ClientError {
        tracing::error!("bad reply from {from}: {what}");
        ClientError::BadReply { from, what }
    }
}

fn libc_eio() -> i32 {
    Status::Io.errno()
}

impl From<Status> for ClientError {
    fn from(s: Status) -> ClientError {
        ClientError::Rpc(RpcError::Status(s))
    }
}

/// Result of client calls.
pub type Result<T> = std::result::Result<T, ClientError>;

/// Mount settings.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Network settings (RPCs in flight, RPC size, checksums, timeouts).
    pub net: NetConfig,
    /// Bytes read ahead of a sequential reader (Lustre's `max_read_ahead_per_file_mb`); 0 off.
    pub readahead_bytes: u64,
    /// How often each MDT is pinged so it does not evict this client (Lustre's
    /// `ping_interval`); 0: never (the client is evicted when idle for `evict_timeout_ms`).
    pub ping_interval_ms: u64,
}

/// Default ping interval (Lustre's: `obd_timeout` / 4; MDTs evict after 150 s of silence).
pub const PING_INTERVAL_MS_DEFAULT: u64 = 25_000;

/// Default read-ahead window.
pub const READAHEAD_BYTES_DEFAULT: u64 = 4 << 20;
/// Most reads started ahead of one reader.
pub const READAHEAD_JOBS_MAX: u64 = 4;

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            net: NetConfig::default(),
            readahead_bytes: READAHEAD_BYTES_DEFAULT,
            ping_interval_ms: PING_INTERVAL_MS_DEFAULT,
        }
    }
}

/// An open regular file: its FID, layout and read-ahead state.
pub struct OpenFile {
    /// Inode.
    pub fid: Fid,
    /// Layout (absent for non-regular files), shared by this client's handles on the file
    /// and kept under the MDT's `LAYOUT` lock (layouts.rs).
    layout: Arc<layouts::LayoutSlot>,
    readahead: parking_lot::Mutex<ReadAhead>,
    /// Evictions of this client by the file's MDT before it was opened.
    incarnation: u64,
    /// The file's owner as it was opened: objects its writes create take it.
    owner: Owner,
    /// The access it was opened for ([`nacre_types::cred::MAY_WRITE`] to write through it).
    access: u8,
    /// The file had set-id bits a write clears when it was opened (and no write through
    /// this handle has cleared them since): [`Client::remove_privs`].
    setid: std::sync::atomic::AtomicBool,
    /// A kernel says which writes through it clear set-id bits (a FUSE mount's handle,
    /// `FUSE_HANDLE_KILLPRIV_V2`): the library's writes leave it to the caller.
    kernel_kills_privs: bool,
    /// Data was written through it (its close tells the MDT, which then no longer knows
    /// the size exactly).
    wrote: std::sync::atomic::AtomicBool,
    /// Opened with `O_APPEND`: writes go to the end of file ([`Client::append`]).
    append: bool,
    /// The job that opened it: its close works for that job too (a kernel's release
    /// comes from no process).
    jobid: String,
    /// Made by a create this client answered itself (delegated.rs), not open at the MDT:
    /// [`Client::undefer`] opens it there before it is used for anything but its close.
    deferred: bool,
    /// The delegated directory it was answered in, if made by a create answered here:
    /// its opening at the MDT is counted there (`Dir::opened_files`).
    answered_in: Option<Fid>,
}

/// Sequential-read detection and the reads started ahead of the reader.
#[derive(Default)]
struct ReadAhead {
    next_offset: u64,
    eof: bool,
    jobs: std::collections::VecDeque<osc::ReadJob>,
}

impl OpenFile {
    /// The handle, opened for `access`.
    fn with_access(mut self, access: u8) -> OpenFile {
        self.access = access;
        self.jobid = nacre_types::jobid::current();
        self
    }

    /// Marks the handle as opened with `O_APPEND`.
    pub fn set_append(&mut self) {
        self.append = true;
    }

    /// Marks the handle as a kernel's: the kernel says which writes through it clear
    /// set-id bits ([`Client::remove_privs`] with its word), the library's writes do not
    /// decide it themselves.
    pub fn set_kernel_kills_privs(&mut self) {
        self.kernel_kills_privs = true;
    }

    /// True once data was written (or a size changed) through the handle.
    pub fn has_written(&self) -> bool {
        self.wrote.load(std::sync::atomic::Ordering::Acquire)
    }

    /// True if the handle was opened with `O_APPEND`.
    pub fn is_append(&self) -> bool {
        self.append
    }

    /// True if the handle was opened for reading.
    pub fn readable(&self) -> bool {
        self.access & nacre_types::cred::MAY_READ != 0
    }

    /// True if the handle was opened for writing.
    pub fn writable(&self) -> bool {
        self.access & nacre_types::cred::MAY_WRITE != 0
    }

    /// Whether the handle may write (`EBADF` otherwise, as for a descriptor opened read-only).
    fn check_writable(&self) -> Result<()> {
        if self.access & nacre_types::cred::MAY_WRITE == 0 {
            return Err(Status::BadF.into());
        }
        self.wrote.store(true, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The handle, knowing its file's owner from `attr`.
    fn owned_by(mut self, attr: &Attr) -> OpenFile {
        self.owner = Owner::of(attr);
        self.setid = std::sync::atomic::AtomicBool::new(nacre_types::attr::has_setid(attr.perm));
        self
    }

    /// The file's layout as last known (absent for non-regular files); I/O takes it
    /// through the client, which reads it again once a layout change called it back.
    pub fn layout(&self) -> Option<Layout> {
        self.layout.snapshot()
    }

    /// A handle on `fid` with `layout`, of its own (a client's opens share one per file).
    pub fn new(fid: Fid, layout: Option<Layout>) -> OpenFile {
        OpenFile::with_slot(Arc::new(layouts::LayoutSlot::new(fid, layout, true)))
    }

    /// A new handle on the same open at the MDT (a kept open handed out again), for
    /// `access`, with nothing of this one's use.
    fn reopened(&self, access: u8) -> OpenFile {
        OpenFile {
            incarnation: self.incarnation,
            owner: self.owner,
            setid: std::sync::atomic::AtomicBool::new(
                self.setid.load(std::sync::atomic::Ordering::Acquire),
            ),
            kernel_kills_privs: self.kernel_kills_privs,
            ..OpenFile::with_slot(self.layout.clone()).with_access(access)
        }
    }

    /// A handle on the file of `slot`.
    fn with_slot(layout: Arc<layouts::LayoutSlot>) -> OpenFile {
        OpenFile {
            fid: layout.fid(),
            layout,
            readahead: parking_lot::Mutex::new(ReadAhead::default()),
            incarnation: 0,
            owner: Owner::default(),
            access: nacre_types::cred::MAY_READ | nacre_types::cred::MAY_WRITE,
            setid: std::sync::atomic::AtomicBool::new(false),
            kernel_kills_privs: false,
            wrote: std::sync::atomic::AtomicBool::new(false),
            append: false,
            jobid: String::new(),
            deferred: false,
            answered_in: None,
        }
    }

    /// Made by a create this client answered itself and not open at the MDT yet.
    pub fn is_deferred(&self) -> bool {
        self.deferred
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("fid", &self.fid)
            .field("layout", &self.layout())
            .finish()
    }
}

/// Per-target usage, as `nacre df` prints it.
#[derive(Clone, Debug)]
pub struct TargetUsage {
    /// Target name, e.g. `demo-OST0001`.
    pub name: String,
    /// Usage.
    pub statfs: StatFs,
}

/// Directory stripe layouts a client remembers at most before starting over.
pub const STRIPE_CACHE_ENTRIES_MAX: usize = 65_536;
/// Regular files whose layout a client remembers for early glimpses.
pub const LAYOUT_CACHE_ENTRIES_MAX: usize = 65_536;

/// A mounted Nacre file system.
pub struct Client {
    fsname: String,
    mgs: Arc<Connection>,
    config: RwLock<FsConfig>,
    mdcs: RwLock<HashMap<u32, Arc<mdc::Mdc>>>,
    /// Object capabilities the MDTs gave (a fileset's client only).
    pub(crate) capas: Arc<capas::Capas>,
    /// Stripe layouts of directories used so far (None: not striped). FIDs are never reused
    /// and a directory's striping never changes (until migration exists), so entries stay
    /// right; the map is emptied when it reaches [`STRIPE_CACHE_ENTRIES_MAX`].
    stripes: RwLock<HashMap<Fid, Option<Arc<DirStripe>>>>,
    /// Layouts of regular files seen so far, and whether the MDT last gave their size
    /// exactly (hints for [`Client::getattr`]).
    layouts: parking_lot::Mutex<HashMap<Fid, (Layout, bool)>>,
    oscs: RwLock<HashMap<u32, Arc<Connection>>>,
    rpc_stats: RwLock<HashMap<u32, Arc<rpc_stats::OscRpcStats>>>,
    net: NetConfig,
    readahead_bytes: u64,
    ping_interval_ms: u64,
    /// Mounted `noatime`: closes ask the MDT to record no access ([`Client::set_noatime`]).
    noatime: std::sync::atomic::AtomicBool,
    /// Set once the client takes metadata locks ([`Client::enable_locks`]).
    lock_sink: std::sync::OnceLock<mdc::LockSink>,
    /// Directories known completely under their UPDATE lock (complete.rs).
    complete: Arc<complete::Complete>,
    /// Directories delegated to this client and the creates it answered in them
    /// (delegated.rs).
    delegated: delegated::Delegated,
    /// The thread sending delegated creates, once started.
    delegated_sender: std::sync::OnceLock<std::thread::Thread>,
    delegated_sender_started: std::sync::atomic::AtomicBool,
    /// Creates in delegated directories are answered here (`set_async_dirops`: off for a
    /// library client until set; the mount sets it from `--async-dirops`, on by default).
    async_dirops: std::sync::atomic::AtomicBool,
    /// Extent locks on OST objects (datalocks.rs).
    data_locks: datalocks::DataLocks,
    /// Write-behind under write locks (writeback.rs).
    writeback: Arc<writeback::Writeback>,
    /// Times of this client's writes its MDTs have not heard of yet (written.rs).
    pub(crate) written: written::Written,
    /// Bytes of pages page-cache writes covered in part (edges.rs).
    pub(crate) edges: edges::Edges,
    /// Page-cache reads of bytes on the MDT in flight (crate::dom).
    pub(crate) dom_reads: dom::DomReads,
    /// Bytes on the MDT that opens brought, under their `DOM` locks (crate::dom).
    pub(crate) dom_opened: dom::DomOpened,
    /// Page-cache reads of bytes on the MDT answered with what their open brought.
    pub dom_open_hits: std::sync::atomic::AtomicU64,
    /// Layouts of the files open here, under their LAYOUT locks (layouts.rs).
    layout_slots: layouts::Slots,
    /// Appends on this client, serialized per file (append.rs).
    appends: [parking_lot::Mutex<()>; append::APPEND_SLOTS],
    /// Opens kept under `OPEN` locks (opencache.rs).
    opens: opencache::OpenCache,
    /// Writes redone after an OST refused them as issued under an older layout (a
    /// migration's fence).
    pub layout_redos: std::sync::atomic::AtomicU64,
    /// Layout intents sent: components instantiated ahead of a write, truncate or
    /// allocation reaching them.
    pub layout_grows: std::sync::atomic::AtomicU64,
    /// Page-cache reads answered from edge pages this client wrote (edges.rs), no RPC.
    pub edges_served: std::sync::atomic::AtomicU64,
    me: std::sync::Weak<Client>,
}

/// How often a mount asks the MGS again for a file system not registered yet, or whose
/// MDT0 has not (within the connect timeout).
pub const MDT0_POLL_MS: u64 = 100;

impl Client {
    /// Mounts `fsname` from the MGS at `mgs`: fetches the configuration and reaches MDT0 (the
    /// other MDTs when an operation first needs them).
    /// Fails if the MGS cannot be reached within `connect_timeout_ms`, or if the file system
    /// and its MDT0 have not registered with it within as long again.
    pub fn mount(mgs: Nid, fsname: &str, mut config: ClientConfig) -> Result<Arc<Client>> {
        // Every frame names the file system (its slot) and every link proves its key.
        config.net = config.net.for_fs(fsname);
        if let Some(k) = config.net.key.as_ref().filter(|k| k.fsname() != fsname) {
            return Err(ClientError::Config(format!(
                "no key of file system '{fsname}' was given (the key given is file system \
                 '{}'s): give its key with --key",
                k.fsname()
            )));
        }
        let mut first = config.net.clone();
        first.recovery_timeout_ms = first.connect_timeout_ms;
        let probe = Connection::connect(mgs, first)
            .map_err(|e| ClientError::Config(format!("cannot reach the MGS at {mgs}: {e}")))?;
        drop(probe);
        let mgs_conn = Connection::new(mgs, config.net.clone());
        // A mount started with the servers (a script, a boot) may reach the MGS before the
        // file system's targets have registered with it (the file system unknown, or
        // without MDT0): asked again for `connect_timeout_ms`, then that error.
        let waited = std::time::Instant::now();
        let fs = loop {
            let not_yet = match fetch_config(&mgs_conn, fsname) {
                Ok(fs) if fs.mdts.iter().any(|t| t.index == 0) => break fs,
                Ok(_) => ClientError::Config(format!(
                    "file system '{fsname}' has no MDT0 registered (waited {} ms)",
                    config.net.connect_timeout_ms
                )),
                Err(e @ ClientError::Config(_)) => e,
                Err(e) => return Err(e),
            };
            if waited.elapsed() >= Duration::from_millis(config.net.connect_timeout_ms) {
                return Err(not_yet);
            }
            std::thread::sleep(Duration::from_millis(MDT0_POLL_MS));
        };
        let client = Arc::new_cyclic(|me| Client {
            me: me.clone(),
            data_locks: datalocks::DataLocks::default(),
            writeback: Arc::default(),
            written: written::Written::default(),
            edges: edges::Edges::default(),
            dom_reads: dom::DomReads::default(),
            dom_opened: dom::DomOpened::default(),
            dom_open_hits: std::sync::atomic::AtomicU64::new(0),
            layout_slots: Default::default(),
            appends: std::array::from_fn(|_| parking_lot::Mutex::new(())),
            opens: opencache::OpenCache::default(),
            layout_redos: std::sync::atomic::AtomicU64::new(0),
            layout_grows: std::sync::atomic::AtomicU64::new(0),
            edges_served: std::sync::atomic::AtomicU64::new(0),
            fsname: fsname.into(),
            mgs: mgs_conn,
            mdcs: RwLock::new(HashMap::new()),
            capas: Arc::default(),
            stripes: RwLock::new(HashMap::new()),
            layouts: parking_lot::Mutex::new(HashMap::new()),
            config: RwLock::new(fs),
            oscs: RwLock::new(HashMap::new()),
            rpc_stats: RwLock::new(HashMap::new()),
            net: config.net,
            readahead_bytes: config.readahead_bytes,
            ping_interval_ms: config.ping_interval_ms,
            noatime: std::sync::atomic::AtomicBool::new(false),
            lock_sink: std::sync::OnceLock::new(),
            complete: Arc::new(complete::Complete::default()),
            delegated: Default::default(),
            delegated_sender: std::sync::OnceLock::new(),
            delegated_sender_started: Default::default(),
            async_dirops: Default::default(),
        });
        client.getattr(client.root()?)?;
        start_watch(&client);
        Ok(client)
    }

    /// Target `kind` `index` restarted (the MGS says), maybe on the partner of its failover
    /// pair: learn where it is now and drop the links to it, so requests waiting there are
    /// resent at once (to the new server if it moved).
    fn relink(&self, kind: TargetKind, index: u32) {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("config refresh after a restart: {e}");
        }
        let conn = match kind {
            TargetKind::Mdt => self.mdcs.read().get(&index).map(|m| m.conn().clone()),
            TargetKind::Ost => self.oscs.read().get(&index).cloned(),
            TargetKind::Mgt => None,
        };
        if let Some(conn) = conn {
            let servers = {
                let fs = self.config.read();
                let list = match kind {
                    TargetKind::Mdt => &fs.mdts,
                    _ => &fs.osts,
                };
                list.iter().find(|t| t.index == index).and_then(servers_of)
            };
            if let Some((current, others)) = servers {
                conn.set_servers(current, &others);
            }
            tracing::info!(
                "{}{index:04x} restarted (MGS): reconnecting to {}",
                kind.as_str().to_uppercase(),
                conn.nid()
            );
            conn.relink();
            // An idle client reconnects now too: a restarted MDT waits for every client it
            // knows to replay (or say it has nothing) before it serves anyone.
            if kind == TargetKind::Mdt {
                let mdc = self.mdcs.read().get(&index).cloned();
                if let Some(mdc) = mdc {
                    let spawned = std::thread::Builder::new()
                        .name("mdc-reconnect".into())
                        .spawn(move || {
                            if let Err(e) = mdc.call(MdsOp::Ping) {
                                tracing::debug!("reconnect ping: {e}");
                            }
                        });
                    if let Err(e) = spawned {
                        tracing::warn!("no reconnect thread: {e}");
                    }
                }
            }
        }
    }

    /// This client's root directory: the file system's, or the subtree its nodemap gives
    /// it (a fileset), as MDT0 said when this client connected.
    pub fn root(&self) -> Result<Fid> {
        self.mdc(0)?.root()
    }

    /// Mount option `noatime`: reads through this client record no access time at the
    /// MDT (which records them at close, as `relatime` would: mds atime.rs).
    pub fn set_noatime(&self, on: bool) {
        self.noatime.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// True when MDT0 squashes this client's root (its nodemap is not an admin one): root
    /// here is not root on the file system, so its mounts default to `nosuid,nodev`.
    pub fn root_squashed(&self) -> Result<bool> {
        self.mdc(0)?.root_squashed()
    }

    /// File system name.
    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// The configuration as last fetched.
    pub fn fs_config(&self) -> FsConfig {
        self.config.read().clone()
    }

    /// Network settings.
    pub fn net_config(&self) -> &NetConfig {
        &self.net
    }

    /// Sends `req` to the MGS (quota limits and the like).
    pub fn mgs_call(&self, req: &MgsRequest) -> Result<MgsReply> {
        Ok(call::<_, MgsReply>(&self.mgs, req.opcode(), 0, req)?)
    }

    /// Fetches the file system's configuration (targets, pools) from the MGS again.
    pub fn refresh_config(&self) -> Result<()> {
        let fs = fetch_config(&self.mgs, &self.fsname)?;
        *self.config.write() = fs;
        Ok(())
    }

    /// A connection to target `index` among `targets` of the configuration (asking the MGS
    /// again if it is not known yet), with its failover list.
    fn connect_to(
        &self,
        targets: fn(&FsConfig) -> &[TargetInfo],
        index: u32,
        kind: &str,
    ) -> Result<Arc<Connection>> {
        let find = |fs: &FsConfig| {
            targets(fs)
                .iter()
                .find(|t| t.index == index)
                .and_then(servers_of)
                .map(|(current, others)| {
                    let conn = Connection::new(current, self.net.clone());
                    conn.set_servers(current, &others);
                    conn
                })
        };
        if let Some(n) = find(&self.config.read()) {
            return Ok(n);
        }
        self.refresh_config()?;
        find(&self.config.read())
            .ok_or_else(|| ClientError::Config(format!("{kind} index {index} is not configured")))
    }

    /// Connection to OST `index`.
    pub(crate) fn osc(&self, index: u32) -> Result<Arc<Connection>> {
        if let Some(c) = self.oscs.read().get(&index) {
            return Ok(c.clone());
        }
        let conn = self.connect_to(|fs| &fs.osts, index, "OST")?;
        Ok(self.oscs.write().entry(index).or_insert(conn).clone())
    }

    /// The metadata client of MDT `index`.
    pub(crate) fn mdc(&self, index: u32) -> Result<Arc<mdc::Mdc>> {
        if let Some(m) = self.mdcs.read().get(&index) {
            return Ok(m.clone());
        }
        let conn = self.connect_to(|fs| &fs.mdts, index, "MDT")?;
        let m = Arc::new(mdc::Mdc::new(conn, index, self.capas.clone()));
        let mut mdcs = self.mdcs.write();
        let m = mdcs.entry(index).or_insert_with(|| {
            m.start_pinger(self.ping_interval_ms);
            let me = self.me.clone();
            m.set_before_request(Arc::new(move |op| {
                if let Some(c) = me.upgrade() {
                    c.dom_changing(op);
                    c.before_request(op);
                }
            }));
            if let Some(sink) = self.lock_sink.get() {
                m.start_lock_callbacks(sink.clone(), self.lock_poll_wait_ms());
            }
            m
        });
        Ok(m.clone())
    }
}

/// Fetches a file system's configuration from the MGS.
pub fn fetch_config(mgs: &Arc<Connection>, fsname: &str) -> Result<FsConfig> {
    let req = MgsRequest::GetConfig {
        fsname: fsname.into(),
    };
    match call::<_, MgsReply>(mgs, req.opcode(), 0, &req) {
        Ok(MgsReply::Config(c)) => Ok(c),
        Ok(_) => Err(Status::Proto.into()),
        Err(RpcError::Status(Status::NoEnt)) => Err(ClientError::Config(format!(
            "file system '{fsname}' is not known to the MGS at {}",
            mgs.nid()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Where a target is served now and which other servers may serve it.
fn servers_of(t: &TargetInfo) -> Option<(Nid, Vec<Nid>)> {
    let current = t
        .nids
        .first()
        .copied()
        .or(t.servicenodes.first().copied())?;
    // Other NIDs of the current server are rails (discovery finds them), not partners.
    let others = t
        .servicenodes
        .iter()
        .filter(|n| **n != current && !t.nids.contains(n))
        .copied()
        .collect();
    Some((current, others))
}

/// Pause before polling the MGS again after a failed or empty-handed poll.
const WATCH_RETRY_MS: u64 = 1_000;

/// Imperative recovery: a thread long-polls the MGS for target (re)starts and relinks to a
/// restarted target at once, so requests waiting on a server that died without a word (a
/// crashed node) are resent now rather than after the RPC timeout. Holds the client weakly.
fn start_watch(client: &Arc<Client>) {
    let (me, mgs, fsname) = (
        Arc::downgrade(client),
        client.mgs.clone(),
        client.fsname.clone(),
    );
    // Answered before the RPC timeout, so a held poll is never taken for a lost one.
    let wait_ms = (client.net.rpc_timeout_ms / 2).clamp(100, 30_000) as u32;
    let spawned = std::thread::Builder::new()
        .name("mgs-watch".into())
        .spawn(move || {
            let mut after = None;
            loop {
                let req = MgsRequest::WaitTargets {
                    fsname: fsname.clone(),
                    after: after.unwrap_or(u64::MAX),
                    wait_ms: if after.is_some() { wait_ms } else { 0 },
                };
                let started = std::time::Instant::now();
                let polled = after.is_some();
                let reply = call::<_, MgsReply>(&mgs, req.opcode(), 0, &req);
                let Some(client) = me.upgrade() else { return };
                let mut idle = polled;
                match reply {
                    Ok(MgsReply::Targets { seq, started }) => {
                        if after.is_some() {
                            for (kind, index) in started {
                                client.relink(kind, index);
                                idle = false;
                            }
                        }
                        after = Some(seq);
                    }
                    Ok(_) => {
                        tracing::debug!("MGS watch: unexpected reply");
                        idle = true;
                    }
                    Err(e) => {
                        tracing::debug!("MGS watch: {e}");
                        idle = true;
                    }
                }
                drop(client);
                // Never spin: a poll answered early with nothing new (or an error) waits.
                let quick = started.elapsed() < Duration::from_millis(u64::from(wait_ms) / 2);
                if idle && quick {
                    std::thread::sleep(Duration::from_millis(WATCH_RETRY_MS));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no MGS watch thread: {e}");
    }
}

/// The current time, for `utimens(UTIME_NOW)`.
pub fn now() -> TimeSpec {
    TimeSpec::now()
}
