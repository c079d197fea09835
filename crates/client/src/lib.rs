//! The Nacre client library.
//!
//! A [`Client`] mounts a file system by NID and name: it fetches the configuration from the
//! MGS, talks to the MDT through the [`mdc`] (metadata client: exactly-once bookkeeping of
//! xids) and to OSTs through the [`osc`] (object storage client: striping, RPCs to several OSTs
//! in flight at once, glimpses for file size). The FUSE mount and the CLI are built on it; so
//! can applications that want to skip FUSE.
//!
//! Consistency model: close-to-open, and stronger for attributes — every `getattr` asks the
//! MDT and glimpses the OSTs, so a size or mode seen after another client's close is current.
//! Data is not cached in this library; writes are acknowledged by the OSTs before `write`
//! returns, and `fsync` makes them durable on every OST the file touches.

pub mod complete;
pub mod lfsck;
pub mod mdc;
pub mod osc;
pub mod rpc_stats;

use nacre_net::rpc::{call, RpcError};
use nacre_net::{Connection, NetConfig};
use nacre_types::dirstripe::{DirDefault, DirHash, DirStripe};
use nacre_types::{Attr, Fid, FileKind, Layout, Nid, Owner, SetAttr, StatFs, Status, TimeSpec};
use nacre_wire::mds::{DirEntry, LayoutInfo, MdsOp, MdsReply};
use nacre_wire::mgs::{FsConfig, MgsReply, MgsRequest, TargetInfo, TargetKind};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use nacre_types::layout::StripeSpec;

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

/// A directory page a listing can go on from: at most `count` entries, in strictly rising
/// name order after `after`, and not empty unless it is the last (else a listing could loop
/// forever or repeat names).
fn check_page(
    entries: &[DirEntry],
    eof: bool,
    after: Option<&[u8]>,
    count: u32,
) -> std::result::Result<(), String> {
    if entries.len() > count as usize {
        return Err(format!("{} entries for a page of {count}", entries.len()));
    }
    if entries.is_empty() && !eof {
        return Err("an empty directory page that is not the last".into());
    }
    let mut prev = after;
    for e in entries {
        if prev.is_some_and(|p| e.name.as_slice() <= p) {
            return Err("directory entries out of order".into());
        }
        prev = Some(&e.name);
    }
    Ok(())
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
    /// Layout (absent for non-regular files).
    pub layout: Option<Layout>,
    readahead: parking_lot::Mutex<ReadAhead>,
    /// Evictions of this client by the file's MDT before it was opened.
    incarnation: u64,
    /// The file's owner as it was opened: objects its writes create take it.
    owner: Owner,
    /// The access it was opened for ([`nacre_types::cred::MAY_WRITE`] to write through it).
    access: u8,
    /// Data was written through it (its close tells the MDT, which then no longer knows
    /// the size exactly).
    wrote: std::sync::atomic::AtomicBool,
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
        self
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
        self.owner = Owner {
            uid: attr.uid,
            gid: attr.gid,
            project: 0,
        };
        self
    }

    /// A handle on `fid`.
    pub fn new(fid: Fid, layout: Option<Layout>) -> OpenFile {
        OpenFile {
            fid,
            layout,
            readahead: parking_lot::Mutex::new(ReadAhead::default()),
            incarnation: 0,
            owner: Owner::default(),
            access: nacre_types::cred::MAY_READ | nacre_types::cred::MAY_WRITE,
            wrote: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("fid", &self.fid)
            .field("layout", &self.layout)
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
    /// Set once the client takes metadata locks ([`Client::enable_locks`]).
    lock_sink: std::sync::OnceLock<mdc::LockSink>,
    /// Directories known completely under their UPDATE lock (complete.rs).
    complete: Arc<complete::Complete>,
}

/// What the kernel may keep of an answer, by the locks this client holds on its inode:
/// the entry (name → inode) while a `LOOKUP` lock covers it, the attributes while an
/// `UPDATE` lock does. Both are invalidated through the lock sink when the lock goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    /// The name → inode binding is covered.
    pub entry: bool,
    /// The attributes (a regular file's size included) are covered.
    pub attr: bool,
}

impl Client {
    /// Mounts `fsname` from the MGS at `mgs`: fetches the configuration and reaches MDT0 (the
    /// other MDTs when an operation first needs them).
    /// Fails within `connect_timeout_ms` if the MGS cannot be reached.
    pub fn mount(mgs: Nid, fsname: &str, config: ClientConfig) -> Result<Arc<Client>> {
        let mut first = config.net.clone();
        first.recovery_timeout_ms = first.connect_timeout_ms;
        let probe = Connection::connect(mgs, first)
            .map_err(|e| ClientError::Config(format!("cannot reach the MGS at {mgs}: {e}")))?;
        drop(probe);
        let mgs_conn = Connection::new(mgs, config.net.clone());
        let fs = fetch_config(&mgs_conn, fsname)?;
        if !fs.mdts.iter().any(|t| t.index == 0) {
            return Err(ClientError::Config(format!(
                "file system '{fsname}' has no MDT0 registered"
            )));
        }
        let client = Arc::new(Client {
            fsname: fsname.into(),
            mgs: mgs_conn,
            mdcs: RwLock::new(HashMap::new()),
            stripes: RwLock::new(HashMap::new()),
            layouts: parking_lot::Mutex::new(HashMap::new()),
            config: RwLock::new(fs),
            oscs: RwLock::new(HashMap::new()),
            rpc_stats: RwLock::new(HashMap::new()),
            net: config.net,
            readahead_bytes: config.readahead_bytes,
            ping_interval_ms: config.ping_interval_ms,
            lock_sink: std::sync::OnceLock::new(),
            complete: Arc::new(complete::Complete::default()),
        });
        client.getattr(Fid::ROOT)?;
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

    fn refresh_config(&self) -> Result<()> {
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
        let m = Arc::new(mdc::Mdc::new(conn, index));
        let mut mdcs = self.mdcs.write();
        let m = mdcs.entry(index).or_insert_with(|| {
            m.start_pinger(self.ping_interval_ms);
            if let Some(sink) = self.lock_sink.get() {
                m.start_lock_callbacks(sink.clone(), self.lock_poll_wait_ms());
            }
            m
        });
        Ok(m.clone())
    }

    /// How long a lock poll waits at the MDT: well within the RPC and rail timeouts, so a
    /// parked poll is never taken for a lost request.
    fn lock_poll_wait_ms(&self) -> u64 {
        (self.net.rpc_timeout_ms.min(self.net.rail_timeout_ms) / 2).clamp(100, 30_000)
    }

    /// From now on this client takes metadata locks (the FUSE mount does; a library client
    /// that does not cache need not): every MDT is polled for callbacks, and `sink` is told
    /// of every lock that goes, before it is cancelled, to have the kernel forget what it
    /// covered. Replies then say what is [`Cached`].
    pub fn enable_locks(&self, sink: mdc::LockSink) {
        // A directory stops being known completely before the kernel hears of it.
        let complete = self.complete.clone();
        let sink: mdc::LockSink = Arc::new(move |revoked| {
            for r in revoked {
                if r.lock.bits & nacre_ldlm::msg::UPDATE != 0 {
                    complete.forget(r.lock.fid);
                }
            }
            sink(revoked)
        });
        if self.lock_sink.set(sink.clone()).is_err() {
            return;
        }
        let wait_ms = self.lock_poll_wait_ms();
        for m in self.mdcs.read().values() {
            m.start_lock_callbacks(sink.clone(), wait_ms);
        }
    }

    /// Notes the outcome of a change that puts `name` in `parent`: on success the name is
    /// there; on an error it may or may not be, so the directory is no longer known
    /// completely.
    fn after_add<T>(&self, parent: Fid, name: &[u8], r: Result<T>) -> Result<T> {
        match &r {
            Ok(_) => self.complete.added(parent, name),
            Err(_) => self.complete.forget(parent),
        }
        r
    }

    /// Directories this client knows completely now (their lookups of absent names are
    /// answered without the MDT).
    pub fn complete_dirs(&self) -> usize {
        self.complete.len()
    }

    /// Lock counters of every MDT this client reached: (MDT index, locks held, LRU size,
    /// grants, callbacks, LRU cancels).
    pub fn lock_stats(&self) -> Vec<(u32, usize, usize, u64, u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut out: Vec<_> = self
            .mdcs
            .read()
            .iter()
            .map(|(i, m)| {
                let l = &m.locks;
                (
                    *i,
                    l.count(),
                    l.lru_size.load(Relaxed),
                    l.stats.grants.load(Relaxed),
                    l.stats.callbacks.load(Relaxed),
                    l.stats.lru_cancels.load(Relaxed),
                )
            })
            .collect();
        out.sort_unstable_by_key(|x| x.0);
        out
    }

    /// Sets the LRU bound of MDT `index`'s locks (`ldlm.namespaces.*.lru_size`).
    pub fn set_lru_size(&self, index: u32, n: usize) -> Result<()> {
        self.mdc(index)?
            .locks
            .lru_size
            .store(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Sends an operation to the MDT that holds it: the parent directory's (its shard's, in
    /// a striped directory) for name operations, the inode's otherwise (a FID names its MDT).
    fn md(&self, mut op: MdsOp) -> Result<MdsReply> {
        self.to_shards(&mut op)?;
        let index = op.key_fid().map_or(0, Fid::mdt_index);
        self.mdc(index)?.call(op)
    }

    /// The stripe layout of directory `dir` (None: not striped), cached.
    pub fn dir_stripe(&self, dir: Fid) -> Result<Option<Arc<DirStripe>>> {
        if let Some(s) = self.stripes.read().get(&dir) {
            return Ok(s.clone());
        }
        let op = MdsOp::GetDirStripe { fid: dir };
        let stripe = match self.mdc(dir.mdt_index())?.call(op)? {
            MdsReply::DirStripe(s) => s.map(Arc::new),
            _ => return Err(Status::Proto.into()),
        };
        let mut map = self.stripes.write();
        if map.len() >= STRIPE_CACHE_ENTRIES_MAX {
            map.clear();
        }
        map.insert(dir, stripe.clone());
        Ok(stripe)
    }

    /// The directory that holds `name` of `dir`: its shard if `dir` is striped.
    fn shard_of(&self, dir: Fid, name: &[u8]) -> Result<Fid> {
        if name == b"." || name == b".." {
            return Ok(dir);
        }
        Ok(match self.dir_stripe(dir)? {
            Some(s) => s.shard_for(name),
            None => dir,
        })
    }

    /// Points a name operation at the shard that holds the name.
    fn to_shards(&self, op: &mut MdsOp) -> Result<()> {
        match op {
            MdsOp::Lookup { parent, name }
            | MdsOp::Create { parent, name, .. }
            | MdsOp::Mkdir { parent, name, .. }
            | MdsOp::MkdirOn { parent, name, .. }
            | MdsOp::MkdirStriped { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Link { parent, name, .. }
            | MdsOp::Unlink { parent, name }
            | MdsOp::Rmdir { parent, name } => *parent = self.shard_of(*parent, name)?,
            MdsOp::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                ..
            } => {
                *src_parent = self.shard_of(*src_parent, src_name)?;
                *dst_parent = self.shard_of(*dst_parent, dst_name)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn entry(&self, op: MdsOp) -> Result<(Attr, Option<Layout>)> {
        self.exact_entry(op).map(|(attr, layout, _)| (attr, layout))
    }

    /// [`Client::entry`], and whether the MDT gave a regular file's size exactly.
    fn exact_entry(&self, op: MdsOp) -> Result<(Attr, Option<Layout>, bool)> {
        self.cached_entry(op, 0, None)
            .map(|(attr, layout, exact, _)| (attr, layout, exact))
    }

    /// [`Client::exact_entry`] asking for `bits` of lock on the inode, and what the kernel
    /// may cache of it; `name` is the entry (parent as the kernel knows it, name) the
    /// kernel will cache under the lock.
    fn cached_entry(
        &self,
        mut op: MdsOp,
        bits: u8,
        name: Option<(Fid, &[u8])>,
    ) -> Result<(Attr, Option<Layout>, bool, Cached)> {
        use nacre_ldlm::msg::{LOOKUP, UPDATE};
        self.to_shards(&mut op)?;
        let mut mdc = self.mdc(op.key_fid().map_or(0, Fid::mdt_index))?;
        let (mut reply, mut lock) = mdc.call_with(op, bits)?;
        // An entry for an inode of another MDT (a remote directory): ask that MDT.
        if let MdsReply::Remote { fid } = reply {
            mdc = self.mdc(fid.mdt_index())?;
            (reply, lock) = mdc.call_with(MdsOp::GetAttr { fid }, bits)?;
        }
        let MdsReply::Entry {
            attr,
            layout,
            size_exact: exact,
        } = reply
        else {
            return Err(Status::Proto.into());
        };
        if let (FileKind::Regular, Some(l)) = (attr.kind, &layout) {
            self.remember_layout(attr.fid, l, exact);
        }
        let cached = match lock.filter(|l| l.fid == attr.fid) {
            None => Cached::default(),
            Some(l) => Cached {
                entry: l.bits & LOOKUP != 0
                    && name.is_some_and(|(p, n)| mdc.locks.cover_name(attr.fid, p, n)),
                attr: l.bits & UPDATE != 0 && mdc.locks.covers(attr.fid, UPDATE),
            },
        };
        Ok((attr, layout, exact, cached))
    }

    /// Fills in size and blocks of a regular file from its objects, unless the MDT gave them
    /// `exact`.
    fn with_glimpse(&self, mut attr: Attr, layout: Option<&Layout>, exact: bool) -> Result<Attr> {
        if exact {
            return Ok(attr);
        }
        if let (FileKind::Regular, Some(layout)) = (attr.kind, layout) {
            let (size, blocks) = osc::glimpse(self, layout)?;
            attr.size = size;
            attr.blocks = blocks;
        }
        Ok(attr)
    }

    /// Looks up `name` in `parent`. With `glimpse`, a regular file's size and blocks come from
    /// its OSTs; without, they are the MDT's hint (cheaper, for callers that revalidate the
    /// attributes before trusting a size, as the kernel does with a zero attribute timeout).
    pub fn lookup(&self, parent: Fid, name: &[u8], glimpse: bool) -> Result<Attr> {
        let (attr, layout, exact) = self.exact_entry(MdsOp::Lookup {
            parent,
            name: name.to_vec(),
        })?;
        if glimpse {
            return self.with_glimpse(attr, layout.as_ref(), exact);
        }
        Ok(attr)
    }

    /// [`Client::lookup`] with the OSTs' size, under a lock where the MDT grants one: says
    /// what the kernel may cache of the answer.
    pub fn lookup_cached(&self, parent: Fid, name: &[u8]) -> Result<(Attr, Cached)> {
        use nacre_ldlm::msg::{LOOKUP, UPDATE};
        if self.complete.absent(parent, name) {
            return Err(Status::NoEnt.into());
        }
        let op = MdsOp::Lookup {
            parent,
            name: name.to_vec(),
        };
        let (attr, layout, exact, cached) =
            self.cached_entry(op, LOOKUP | UPDATE, Some((parent, name)))?;
        Ok((self.with_glimpse(attr, layout.as_ref(), exact)?, cached))
    }

    /// [`Client::getattr`] under an `UPDATE` lock where the MDT grants one: says whether
    /// the kernel may cache the attributes.
    pub fn getattr_cached(&self, fid: Fid) -> Result<(Attr, bool)> {
        self.getattr_with(fid, nacre_ldlm::msg::UPDATE)
    }

    /// Current attributes (regular-file size from the OSTs). For a file whose layout was seen
    /// before, its objects are glimpsed while the MDT answers (one round trip of waiting
    /// instead of two); the MDT's answer says whether that layout is still the file's, and if
    /// it is not the objects are glimpsed again.
    pub fn getattr(&self, fid: Fid) -> Result<Attr> {
        self.getattr_with(fid, 0).map(|(attr, _)| attr)
    }

    fn getattr_with(&self, fid: Fid, bits: u8) -> Result<(Attr, bool)> {
        // The MDT gave the size exactly last time: it likely will again, glimpse only if not.
        let seen = self
            .layouts
            .lock()
            .get(&fid)
            .filter(|(_, exact)| !exact)
            .map(|(l, _)| l.clone());
        let early = seen.as_ref().and_then(|l| osc::start_glimpse(self, l).ok());
        let (mut attr, layout, exact, cached) =
            self.cached_entry(MdsOp::GetAttr { fid }, bits, None)?;
        if let (FileKind::Regular, Some(now), Some(seen), Some(job), false) =
            (attr.kind, layout.as_ref(), seen.as_ref(), early, exact)
        {
            if now == seen {
                (attr.size, attr.blocks) = job.finish(now)?;
                return Ok((attr, cached.attr));
            }
        }
        Ok((
            self.with_glimpse(attr, layout.as_ref(), exact)?,
            cached.attr,
        ))
    }

    /// Remembers a regular file's layout for the next [`Client::getattr`] (a hint, checked
    /// against the MDT's answer each time; the map is emptied when it reaches
    /// [`LAYOUT_CACHE_ENTRIES_MAX`]).
    fn remember_layout(&self, fid: Fid, layout: &Layout, exact: bool) {
        let mut map = self.layouts.lock();
        if let Some((l, e)) = map.get_mut(&fid) {
            if l == layout {
                *e = exact;
                return;
            }
        }
        if map.len() >= LAYOUT_CACHE_ENTRIES_MAX {
            map.clear();
        }
        map.insert(fid, (layout.clone(), exact));
    }

    fn layout_of(&self, fid: Fid) -> Result<Layout> {
        match self.md(MdsOp::GetLayout { fid })? {
            MdsReply::Layout(LayoutInfo::File(l)) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a non-directory node; with `open`, the MDS also registers it as open (one RPC
    /// for create-and-open) and the returned handle must be closed with [`Client::close`].
    /// `access` ([`nacre_types::cred::MAY_READ`] | [`nacre_types::cred::MAY_WRITE`]) is
    /// checked if the name exists already and is opened instead.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        parent: Fid,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        exclusive: bool,
        open: bool,
        access: u8,
    ) -> Result<(Attr, OpenFile)> {
        let args = (kind, perm, uid, gid, rdev, exclusive, open, access);
        self.create_with(parent, name, args, 0)
            .map(|(attr, file, _)| (attr, file))
    }

    /// [`Client::create`] (arguments in order after `name`) under a lock on the new entry
    /// where the MDT grants one: says what the kernel may cache of it.
    #[allow(clippy::type_complexity)]
    pub fn create_cached(
        &self,
        parent: Fid,
        name: &[u8],
        args: (FileKind, u32, u32, u32, u32, bool, bool, u8),
    ) -> Result<(Attr, OpenFile, Cached)> {
        use nacre_ldlm::msg::{LOOKUP, UPDATE};
        self.create_with(parent, name, args, LOOKUP | UPDATE)
    }

    #[allow(clippy::type_complexity)]
    fn create_with(
        &self,
        parent: Fid,
        name: &[u8],
        args: (FileKind, u32, u32, u32, u32, bool, bool, u8),
        bits: u8,
    ) -> Result<(Attr, OpenFile, Cached)> {
        let (kind, perm, uid, gid, rdev, exclusive, open, access) = args;
        let op = MdsOp::Create {
            parent,
            name: name.to_vec(),
            kind,
            perm,
            uid,
            gid,
            rdev,
            exclusive,
            open,
            access,
        };
        let r = self.cached_entry(op, bits, Some((parent, name)));
        let (attr, layout, exact, cached) = self.after_add(parent, name, r)?;
        let attr = if exclusive {
            attr
        } else {
            self.with_glimpse(attr, layout.as_ref(), exact)?
        };
        let file = OpenFile::new(attr.fid, layout)
            .owned_by(&attr)
            .with_access(access);
        let file = self.registered(file)?;
        Ok((attr, file, cached))
    }

    /// `file` as opened in the current incarnation of this client at its MDT.
    fn registered(&self, mut file: OpenFile) -> Result<OpenFile> {
        let mdc = self.mdc(file.fid.mdt_index())?;
        file.incarnation = mdc.incarnation();
        mdc.note_open(file.fid);
        Ok(file)
    }

    /// `Err(Evicted)` if `file` was opened before its MDT evicted this client: the MDT has
    /// closed it, so it must not be used (as Lustre invalidates such handles).
    pub fn check_handle(&self, file: &OpenFile) -> Result<()> {
        let target = file.fid.mdt_index();
        let mdc = self.mdcs.read().get(&target).cloned();
        match mdc {
            Some(m) if m.incarnation() != file.incarnation => Err(ClientError::Evicted { target }),
            _ => Ok(()),
        }
    }

    /// Opens `fid` for `access` ([`nacre_types::cred::MAY_READ`] |
    /// [`nacre_types::cred::MAY_WRITE`]; `O_TRUNC` wants write), which the MDT checks against
    /// the caller's credentials, and registers the opener with it.
    pub fn open(&self, fid: Fid, access: u8) -> Result<(Attr, OpenFile)> {
        let (attr, layout) = self.entry(MdsOp::Open { fid, access })?;
        let file = OpenFile::new(fid, layout)
            .owned_by(&attr)
            .with_access(access);
        Ok((attr, self.registered(file)?))
    }

    /// Closes an open file (a handle voided by an eviction is already closed at the MDT).
    pub fn close(&self, file: &OpenFile) -> Result<()> {
        if self.check_handle(file).is_err() {
            return Ok(());
        }
        if let Ok(mdc) = self.mdc(file.fid.mdt_index()) {
            mdc.note_close(file.fid);
        }
        self.md(MdsOp::Close {
            fid: file.fid,
            writer: file.access & nacre_types::cred::MAY_WRITE != 0,
            written: file.wrote.load(std::sync::atomic::Ordering::Acquire),
        })
        .map(|_| ())
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Fid, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.mkdir_cached(parent, name, (perm, uid, gid), 0)
            .map(|(attr, _)| attr)
    }

    /// [`Client::mkdir`] under `bits` of lock on the new directory where the MDT grants
    /// them: says what the kernel may cache of it.
    pub fn mkdir_cached(
        &self,
        parent: Fid,
        name: &[u8],
        (perm, uid, gid): (u32, u32, u32),
        bits: u8,
    ) -> Result<(Attr, Cached)> {
        let op = MdsOp::Mkdir {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
        };
        let r = self.cached_entry(op, bits, Some((parent, name)));
        let (attr, _, _, cached) = self.after_add(parent, name, r)?;
        // Made here under an UPDATE lock: empty, and this client sees every change to it
        // while the lock lasts (a striped directory's entries are in its shards: not so).
        if cached.attr && matches!(self.dir_stripe(attr.fid), Ok(None)) {
            self.complete.made(attr.fid);
        }
        Ok((attr, cached))
    }

    /// Creates a directory whose inode (and so its contents) lives on MDT `mdt` (`nacre
    /// mkdir -i`; [`nacre_wire::mds::MDT_INDEX_ANY`]: the parent's MDT picks one by free
    /// inodes); the parent's MDT coordinates (docs/dne.md).
    pub fn mkdir_on(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        mdt: u32,
    ) -> Result<Attr> {
        let known = mdt == nacre_wire::mds::MDT_INDEX_ANY
            || self.fs_config().mdts.iter().any(|t| t.index == mdt);
        if !known {
            self.refresh_config()?;
            if !self.fs_config().mdts.iter().any(|t| t.index == mdt) {
                return Err(ClientError::Config(format!(
                    "MDT index {mdt} is not configured"
                )));
            }
        }
        let r = self.entry(MdsOp::MkdirOn {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
            mdt,
        });
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Moves directory `name` of `parent` to MDT `target` online (`nacre migrate -m`): its
    /// inode, entries and its files' inodes (open or hard-linked ones stay where they are)
    /// go to the target; subdirectories move as entries (migrate each for a whole tree).
    /// Returns the directory's new FID and how many inodes moved and stayed.
    pub fn migrate(&self, parent: Fid, name: &[u8], target: u32) -> Result<(Fid, u64, u64)> {
        if !self.fs_config().mdts.iter().any(|t| t.index == target) {
            self.refresh_config()?;
            if !self.fs_config().mdts.iter().any(|t| t.index == target) {
                return Err(ClientError::Config(format!(
                    "MDT index {target} is not configured"
                )));
            }
        }
        let parent = self.shard_of(parent, name)?;
        let fid = self.lookup(parent, name, false)?.fid;
        let op = MdsOp::Migrate {
            fid,
            parent,
            name: name.to_vec(),
            target,
        };
        match self.mdc(fid.mdt_index())?.call(op)? {
            MdsReply::Migrated { fid, moved, kept } => Ok((fid, moved, kept)),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a striped directory (`nacre mkdir -c`): its entries spread by `hash` over
    /// `count` shards on MDTs `start`, `start`+1, … (`start` MDT_INDEX_ANY: the MDS picks).
    #[allow(clippy::too_many_arguments)]
    pub fn mkdir_striped(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        count: u32,
        start: u32,
        hash: DirHash,
    ) -> Result<Attr> {
        let r = self.entry(MdsOp::MkdirStriped {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
            count,
            start,
            hash,
        });
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Sets (None: removes) a directory's default for new subdirectories (`setdirstripe
    /// -D`): on a striped directory, on its master and every shard (whichever receives a
    /// mkdir). Not atomic across MDTs: run again after a failure.
    pub fn set_dir_default(&self, dir: Fid, default: Option<DirDefault>) -> Result<()> {
        let mut dirs = vec![dir];
        if let Some(s) = self.dir_stripe(dir)? {
            dirs.extend(s.shards.iter().copied());
        }
        for d in dirs {
            self.mdc(d.mdt_index())?
                .call(MdsOp::SetDirDefault { fid: d, default })?;
        }
        Ok(())
    }

    /// A directory's default for new subdirectories.
    pub fn dir_default(&self, dir: Fid) -> Result<Option<DirDefault>> {
        match self.md(MdsOp::GetDirDefault { fid: dir })? {
            MdsReply::DirDefault(d) => Ok(d),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a symlink.
    pub fn symlink(
        &self,
        parent: Fid,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let op = MdsOp::Symlink {
            parent,
            name: name.to_vec(),
            target: target.to_vec(),
            uid,
            gid,
        };
        let r = self.entry(op);
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Reads a symlink.
    pub fn readlink(&self, fid: Fid) -> Result<Vec<u8>> {
        match self.md(MdsOp::ReadLink { fid })? {
            MdsReply::Target(t) => Ok(t),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Adds a hard link.
    pub fn link(&self, fid: Fid, parent: Fid, name: &[u8]) -> Result<Attr> {
        let r = self.entry(MdsOp::Link {
            fid,
            parent,
            name: name.to_vec(),
        });
        let (attr, layout) = self.after_add(parent, name, r)?;
        self.with_glimpse(attr, layout.as_ref(), false)
    }

    /// Removes a name.
    pub fn unlink(&self, parent: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::Unlink {
            parent,
            name: name.to_vec(),
        })?;
        self.complete.removed(parent, name);
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::Rmdir {
            parent,
            name: name.to_vec(),
        })?;
        self.complete.removed(parent, name);
        Ok(())
    }

    /// Renames.
    pub fn rename(
        &self,
        src_parent: Fid,
        src: &[u8],
        dst_parent: Fid,
        dst: &[u8],
        noreplace: bool,
    ) -> Result<()> {
        let op = MdsOp::Rename {
            src_parent,
            src_name: src.to_vec(),
            dst_parent,
            dst_name: dst.to_vec(),
            noreplace,
        };
        let r = self.md(op);
        match &r {
            Ok(_) => self.complete.removed(src_parent, src),
            Err(_) => self.complete.forget(src_parent),
        }
        self.after_add(dst_parent, dst, r).map(|_| ())
    }

    /// Changes attributes; the MDT checks the caller may make the change. A size change cuts
    /// the OST objects after the MDT checked the caller may write (a refused truncate cuts
    /// nothing) and before it records the size.
    pub fn setattr(&self, fid: Fid, set: SetAttr) -> Result<Attr> {
        let Some(size) = set.size else {
            return self.setattr_now(fid, set);
        };
        // A truncate: the objects are cut first, then the MDT records the size (so a size it
        // learns by glimpsing is never one from before the cut). Through a descriptor this
        // client holds open for writing, that handle covers the cut; otherwise the truncate
        // opens the file for writing around it, which checks the caller's write permission
        // before anything is cut and keeps the MDT from learning the size meanwhile.
        if set.from_open {
            let (attr, layout) = self.entry(MdsOp::GetAttr { fid })?;
            let layout = Self::truncatable(&attr, layout)?;
            osc::truncate(self, &layout, size)?;
            return self.setattr_now(fid, set);
        }
        let (attr, file) = self.open(fid, nacre_types::cred::MAY_WRITE)?;
        file.wrote.store(true, std::sync::atomic::Ordering::Release);
        let result = Self::truncatable(&attr, file.layout.clone())
            .and_then(|layout| osc::truncate(self, &layout, size))
            .and_then(|()| self.setattr_now(fid, set));
        let closed = self.close(&file);
        let attr = result?;
        closed?;
        Ok(attr)
    }

    /// The layout of a file that may be truncated (`EISDIR` or `EINVAL` otherwise).
    fn truncatable(attr: &Attr, layout: Option<Layout>) -> Result<Layout> {
        match (attr.kind, layout) {
            (FileKind::Regular, Some(layout)) => Ok(layout),
            (FileKind::Directory, _) => Err(Status::IsDir.into()),
            _ => Err(Status::Inval.into()),
        }
    }

    /// The MDT's part of [`Client::setattr`] (after any cut of the objects).
    fn setattr_now(&self, fid: Fid, set: SetAttr) -> Result<Attr> {
        let owner_or_mode = SetAttr {
            perm: set.perm,
            uid: set.uid,
            gid: set.gid,
            ..SetAttr::default()
        };
        let attr = match self.md(MdsOp::SetAttr { fid, attr: set })? {
            MdsReply::Attr(a) => a,
            _ => return Err(Status::Proto.into()),
        };
        // A striped directory's shards check names' permissions: they follow the master.
        if attr.kind == FileKind::Directory && owner_or_mode != SetAttr::default() {
            if let Some(stripe) = self.dir_stripe(fid)? {
                for &shard in stripe.shards.iter().filter(|&&s| s != fid) {
                    self.md(MdsOp::SetAttr {
                        fid: shard,
                        attr: owner_or_mode.clone(),
                    })?;
                }
            }
        }
        if attr.kind == FileKind::Regular {
            let layout = self.layout_of(fid)?;
            return self.with_glimpse(attr, Some(&layout), false);
        }
        Ok(attr)
    }

    /// One page of a directory listing, after `after`.
    pub fn readdir(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let Some(stripe) = self.dir_stripe(fid)? else {
            return self.readdir_one(fid, after, count);
        };
        // A striped directory lists as one: its shards' pages merged in name order, up to
        // the lowest last name of a shard with more to come (names past it may still be
        // missing), so the order is stable and resuming after a name skips nothing.
        let mut merged = Vec::new();
        let mut bound: Option<Vec<u8>> = None;
        for &shard in &stripe.shards {
            let (page, eof) = self.readdir_one(shard, after, count)?;
            if !eof {
                if let Some(last) = page.last() {
                    if bound.as_ref().is_none_or(|b| last.name < *b) {
                        bound = Some(last.name.clone());
                    }
                }
            }
            merged.extend(page);
        }
        merged.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(b) = &bound {
            merged.retain(|e| e.name <= *b);
        }
        let complete = bound.is_none() && merged.len() <= count as usize;
        merged.truncate(count as usize);
        Ok((merged, complete))
    }

    fn readdir_one(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let mut fid = fid;
        // A directory migrated while listed: its listing goes on at its new FID (once).
        for _ in 0..2 {
            match self.md(MdsOp::ReadDir {
                fid,
                after: after.map(<[u8]>::to_vec),
                count,
            })? {
                MdsReply::Dir { entries, eof } => {
                    check_page(&entries, eof, after, count).map_err(|what| {
                        ClientError::bad_reply(format!("MDT{:04x}", fid.mdt_index()), what)
                    })?;
                    return Ok((entries, eof));
                }
                MdsReply::Remote { fid: new } => fid = new,
                _ => return Err(Status::Proto.into()),
            }
        }
        Err(Status::Stale.into())
    }

    /// Reads an xattr.
    pub fn getxattr(&self, fid: Fid, name: &[u8]) -> Result<Vec<u8>> {
        match self.md(MdsOp::GetXattr {
            fid,
            name: name.to_vec(),
        })? {
            MdsReply::Xattr(v) => Ok(v),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Sets an xattr.
    pub fn setxattr(&self, fid: Fid, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let op = MdsOp::SetXattr {
            fid,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        };
        self.md(op).map(|_| ())
    }

    /// Lists xattr names.
    pub fn listxattr(&self, fid: Fid) -> Result<Vec<Vec<u8>>> {
        match self.md(MdsOp::ListXattr { fid })? {
            MdsReply::XattrNames(v) => Ok(v),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Removes an xattr.
    pub fn removexattr(&self, fid: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::RemoveXattr {
            fid,
            name: name.to_vec(),
        })
        .map(|_| ())
    }

    /// Layout of a file, or default striping of a directory.
    pub fn get_layout(&self, fid: Fid) -> Result<LayoutInfo> {
        match self.md(MdsOp::GetLayout { fid })? {
            MdsReply::Layout(l) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Sets a directory's default striping, or lays out an empty file again.
    pub fn set_layout(&self, fid: Fid, spec: StripeSpec) -> Result<LayoutInfo> {
        self.check_spec(spec)?;
        match self.md(MdsOp::SetLayout { fid, spec })? {
            MdsReply::Layout(l) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Validates a striping request against this file system, with a message naming the cause.
    pub fn check_spec(&self, spec: StripeSpec) -> Result<()> {
        let known = self.fs_config().osts.len() as u32;
        if spec.resolve(StripeSpec::default(), known).is_err() {
            self.refresh_config()?;
        }
        let osts = self.fs_config().osts.len() as u32;
        spec.resolve(StripeSpec::default(), osts)
            .map(|_| ())
            .map_err(|e| ClientError::Config(format!("{e} (file system '{}')", self.fsname)))
    }

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
        let Some(layout) = &file.layout else {
            return Err(Status::Inval.into());
        };
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

    /// The owner, group and project OST `ost` records for `object` (`None`: no object yet),
    /// as chown and chgrp leave them (for checks and tools).
    pub fn object_owner(&self, ost: u32, object: nacre_types::ObjectId) -> Result<Option<Owner>> {
        osc::owner(self, ost, object)
    }

    /// Writes file data; returns when every OST holding a part has acknowledged it.
    pub fn write(&self, file: &OpenFile, offset: u64, data: &[u8]) -> Result<usize> {
        file.check_writable()?;
        match &file.layout {
            Some(layout) => osc::write(self, layout, offset, data, file.owner),
            None => Err(Status::Inval.into()),
        }
    }

    /// Makes the file's data durable on every OST it touches, and every metadata change
    /// acknowledged so far (its creation included) durable on the MDT.
    pub fn fsync(&self, file: &OpenFile) -> Result<()> {
        if let Some(layout) = &file.layout {
            osc::sync(self, layout)?;
        }
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
        match &file.layout {
            Some(layout) => osc::fallocate(self, layout, offset, len, keep_size, punch_hole),
            None => Err(Status::Inval.into()),
        }
    }

    /// Usage of every target, MDTs first.
    pub fn df(&self) -> Result<Vec<TargetUsage>> {
        // Usage is asked for rarely: take the occasion to learn of new targets.
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let fs = self.fs_config();
        let mut out = Vec::new();
        for t in &fs.mdts {
            if let MdsReply::StatFs(statfs) = self.mdc(t.index)?.call(MdsOp::StatFs)? {
                out.push(TargetUsage {
                    name: t.name(),
                    statfs,
                });
            }
        }
        for t in &fs.osts {
            out.push(TargetUsage {
                name: t.name(),
                statfs: osc::statfs(self, t.index)?,
            });
        }
        Ok(out)
    }

    /// Checks the namespace across every MDT (`nacre lfsck --namespace`): reads their inodes
    /// and directory entries page by page and reports inconsistencies. An unreachable MDT is
    /// an error, not an empty one.
    pub fn lfsck_namespace(&self) -> Result<lfsck::Report> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let mut inodes = Vec::new();
        let mut dirents = Vec::new();
        for t in self.fs_config().mdts {
            let mdc = self.mdc(t.index)?;
            let mut after = None;
            loop {
                match mdc.call(MdsOp::ScanInodes { after, count: 4096 })? {
                    MdsReply::Inodes { inodes: page, eof } => {
                        after = page.last().map(|i| i.fid);
                        inodes.extend(page);
                        if eof || after.is_none() {
                            break;
                        }
                    }
                    _ => return Err(Status::Proto.into()),
                }
            }
            let mut after = None;
            loop {
                match mdc.call(MdsOp::ScanDirents { after, count: 4096 })? {
                    MdsReply::Dirents { dirents: page, eof } => {
                        after = page.last().map(|d| (d.parent, d.name.clone()));
                        dirents.extend(page);
                        if eof || after.is_none() {
                            break;
                        }
                    }
                    _ => return Err(Status::Proto.into()),
                }
            }
        }
        Ok(lfsck::check(&inodes, &dirents))
    }

    /// File system totals: space from the OSTs, inodes from the MDTs.
    pub fn statfs(&self) -> Result<StatFs> {
        let mut total = StatFs {
            block_size: 4096,
            ..StatFs::default()
        };
        for t in self.df()? {
            if t.name.contains("-MDT") {
                total.files_total += t.statfs.files_total;
                total.files_free += t.statfs.files_free;
            } else {
                total.bytes_total += t.statfs.bytes_total;
                total.bytes_free += t.statfs.bytes_free;
                total.bytes_avail += t.statfs.bytes_avail;
            }
        }
        Ok(total)
    }

    /// RPC statistics of the connection to OST `index` (`osc.*.rpc_stats`).
    pub fn rpc_stats(&self, index: u32) -> Arc<rpc_stats::OscRpcStats> {
        if let Some(s) = self.rpc_stats.read().get(&index) {
            return s.clone();
        }
        self.rpc_stats.write().entry(index).or_default().clone()
    }

    /// Tells every MDT this client used that it is going away (unmount), so they release
    /// its opens now rather than evict it later. Waits at most `wait` for the answers (an
    /// MDT that is down simply evicts the client later).
    pub fn disconnect(&self, wait: Duration) {
        let mdcs: Vec<_> = self.mdcs.read().values().cloned().collect();
        for m in &mdcs {
            m.stop_lock_callbacks();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        for m in &mdcs {
            let (m, tx) = (m.clone(), tx.clone());
            let spawned = std::thread::Builder::new()
                .name("disconnect".into())
                .spawn(move || {
                    let _ = tx.send(m.call(MdsOp::Disconnect));
                });
            if spawned.is_err() {
                tracing::warn!("cannot start a disconnect thread");
            }
        }
        drop(tx);
        let deadline = std::time::Instant::now() + wait;
        for _ in &mdcs {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::info!("disconnect: {e}"),
                Err(_) => {
                    tracing::info!("disconnect: an MDT did not answer in {wait:?}");
                    break;
                }
            }
        }
    }

    /// `*.import` of the connection to `target` (`MDT0000`, `OST0001`, …; Lustre's
    /// import file): state, server, connections made, for an MDT this client's uuid there
    /// and the evictions it survived, and the recent state changes.
    pub fn import(&self, target: &str) -> String {
        let conn = self
            .connections()
            .into_iter()
            .find(|(name, _)| name == target)
            .map(|(_, c)| c);
        let mut s = format!("import:\n    target: {}-{target}\n", self.fsname);
        let Some(conn) = conn else {
            s += "    state: NEW\n    connects: 0";
            return s;
        };
        let st = conn.import_status();
        let servers: Vec<String> = conn.servers().iter().map(Nid::to_string).collect();
        s += &format!(
            "    state: {}\n    nid: {}\n    failover_nids: [{}]\n    connects: {}\n    failovers: {}\n    restarts_heard: {}\n",
            st.state,
            conn.nid(),
            servers.join(", "),
            st.connects,
            st.failovers,
            st.restarts_heard
        );
        let mdc = target
            .strip_prefix("MDT")
            .and_then(|i| u32::from_str_radix(i, 16).ok())
            .and_then(|i| self.mdcs.read().get(&i).cloned());
        if let Some(m) = mdc {
            let r = &m.replay_stats;
            s += &format!(
                "    client_uuid: {}\n    evictions: {}\n    replay_pending: {}\n    recoveries: {}\n    replayed: {}\n    replay_lost: {}\n",
                uuid::Uuid::from_bytes(m.uuid()),
                m.incarnation(),
                m.replay_pending(),
                r.recoveries.load(std::sync::atomic::Ordering::Relaxed),
                r.replayed.load(std::sync::atomic::Ordering::Relaxed),
                r.lost.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        s += "    state_history:\n";
        for (at, state) in st.history {
            let t = at
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            s += &format!("     - [ {t:.3}, {state} ]\n");
        }
        s.trim_end().to_string()
    }

    /// The OSTs of the file system.
    pub fn osts(&self) -> Vec<TargetInfo> {
        self.fs_config().osts
    }

    /// Every server connection of this client, named `MGS`, `MDT0000`, `OST0001`, ….
    pub fn connections(&self) -> Vec<(String, Arc<Connection>)> {
        let mut out = vec![("MGS".to_string(), self.mgs.clone())];
        let mut mdcs: Vec<(u32, Arc<Connection>)> = self
            .mdcs
            .read()
            .iter()
            .map(|(i, m)| (*i, m.conn().clone()))
            .collect();
        mdcs.sort_by_key(|(i, _)| *i);
        out.extend(mdcs.into_iter().map(|(i, c)| (format!("MDT{i:04x}"), c)));
        let mut oscs: Vec<(u32, Arc<Connection>)> = self
            .oscs
            .read()
            .iter()
            .map(|(i, c)| (*i, c.clone()))
            .collect();
        oscs.sort_by_key(|(i, _)| *i);
        out.extend(oscs.into_iter().map(|(i, c)| (format!("OST{i:04x}"), c)));
        out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> DirEntry {
        DirEntry {
            name: name.as_bytes().to_vec(),
            fid: Fid::new(0x200000400, 1),
            kind: FileKind::Regular,
        }
    }

    #[test]
    fn directory_pages_that_could_loop_a_listing_are_refused() {
        let page = [entry("a"), entry("b")];
        assert!(check_page(&page, false, None, 2).is_ok());
        assert!(check_page(&page, true, Some(b"0"), 4).is_ok());
        assert!(
            check_page(&[], true, Some(b"z"), 4).is_ok(),
            "an empty last page"
        );
        assert!(
            check_page(&[], false, None, 4).is_err(),
            "empty, more to come: a loop"
        );
        assert!(
            check_page(&page, false, None, 1).is_err(),
            "more than asked"
        );
        assert!(
            check_page(&page, false, Some(b"b"), 4).is_err(),
            "not after `after`"
        );
        let back = [entry("b"), entry("a")];
        assert!(check_page(&back, true, None, 4).is_err(), "out of order");
        let twice = [entry("a"), entry("a")];
        assert!(check_page(&twice, true, None, 4).is_err(), "a name twice");
    }
}
