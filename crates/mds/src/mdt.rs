//! One metadata target: its store, allocators, open counts and the transaction helper that
//! every modifying operation uses.

use crate::osp::OstPool;
use nacre_kv::KvStore;
use nacre_ldlm::msg::{LockRef, UPDATE};
use nacre_mdstore::records::*;
use nacre_mdstore::store::tx::ReplayHint;
use nacre_mdstore::store::{Loaded, Store};
pub use nacre_mdstore::store::{ALLOC_RESERVE, SAVED_REPLIES_PER_CLIENT_MAX};
use nacre_osd::Label;
use nacre_types::limits::NAME_BYTES_MAX;
use nacre_types::{Attr, Fid, Layout, ObjectId, Owner, QuotaId, Status};
use nacre_wire::mds::MdsOp;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Who holds the rename lock (client uuid and xid of its request) and until when.
pub type RenameLockHolder = (([u8; 16], u64), std::time::Instant);

/// The destroys of one batch, by its ticket, waiting for the journal's sync past it.
type AwaitingSync = (nacre_kv::Ticket, Vec<(u32, ObjectId)>);

/// One MDT.
pub struct Mdt {
    /// Identity.
    pub label: Label,
    /// The target directory (its file system's capacity is the MDT's).
    pub dir: std::path::PathBuf,
    /// The store: KV store, allocation state (its lock is the write lock), durability.
    store: Store,
    /// OSTs for object placement.
    pub osts: Arc<OstPool>,
    /// Quota enforcement on this MDT's inodes (nacre_quota).
    pub quota: Arc<nacre_quota::Slave>,
    /// Quota enforcement on the bytes of data on the MDT stored here (block limits, shared
    /// with the OSTs).
    pub dom_quota: Arc<nacre_quota::Slave>,
    /// QoS: requests held to this MDT's share of their class's rate (nacre_qos).
    pub qos: nacre_qos::Scheduler,
    opens: Mutex<HashMap<Fid, u32>>,
    /// Wakes the destroy thread.
    pub destroy_signal: (Mutex<bool>, Condvar),
    /// Objects whose destruction is committed but not yet done on the OSTs.
    pub destroy_queue: Mutex<VecDeque<(u32, ObjectId)>>,
    /// Destroys of changes in the journal but not yet synced, by the ticket of their batch:
    /// queued once a sync covers them (a power loss must not find objects gone whose removal
    /// it undid). Their records are in the store: a restart queues them again.
    destroys_awaiting_sync: Mutex<Vec<AwaitingSync>>,
    /// The space those destroys will free (destroy_space.rs).
    pub destroy_space: crate::destroy_space::DestroySpace,
    /// Fileset roots resolved and inodes found inside them (fileset_cache.rs).
    pub filesets: crate::fileset_cache::Filesets,
    /// Modifying operations executed (for statistics).
    pub modifications: AtomicU64,
    sync_on_reply: AtomicBool,
    /// `mdt.*.md_stats`.
    pub md_stats: nacre_params::OpStats,
    /// `mdt.*.denied_stats`: requests the permission checks refused, by operation.
    pub denied_stats: nacre_params::OpStats,
    /// How long the object capabilities this MDT gives hold (`mdt.*.capa_lifetime_s`).
    pub capa_lifetime_s: std::sync::atomic::AtomicU64,
    /// `mdt.*.job_stats`.
    pub job_stats: nacre_params::JobStats,
    /// `mdt.*.export_stats`: the same per client NID.
    pub export_stats: nacre_params::JobStats,
    /// Cross-MDT operations coordinated here and not yet applied remotely, by FID.
    pub intents: Mutex<HashMap<Fid, IntentRecord>>,
    /// On MDT0: the file system's rename lock, its holder and when its lease ends.
    pub rename_lock: Mutex<Option<RenameLockHolder>>,
    /// Intents a request thread is driving right now (recovery leaves them alone rather
    /// than send the same updates twice).
    pub driving: Mutex<std::collections::HashSet<Fid>>,
    /// This MDT's identity as a client of the other MDTs.
    pub peer_uuid: [u8; 16],
    /// Round-robin cursor of `mkdir -i -1` placement.
    pub mkdir_rr: std::sync::atomic::AtomicUsize,
    mkdir_round_robin: AtomicBool,
    /// Inodes held by a directory migration (the `frozen` table): requests that would
    /// change them answer `EINPROGRESS`.
    pub frozen: Mutex<std::collections::HashSet<Fid>>,
    /// Held for reading by every modifying client request while it runs, for writing by a
    /// migration while it freezes, so none is half way through a frozen inode.
    pub gate: std::sync::RwLock<()>,
    /// Its clients: last heard from, open files; eviction (export.rs).
    pub exports: crate::export::Exports,
    /// Exact sizes of files no one writes (sizes.rs).
    pub sizes: crate::sizes::Sizes,
    /// Accesses recorded and not yet written (atime.rs).
    pub atimes: crate::atime::Atimes,
    /// Changelog consumers and record numbering (changelog_state.rs).
    pub changelog: crate::changelog_state::Changelog,
    /// Files whose migration's fence window is open (relayout.rs).
    pub relayouts_fenced: parking_lot::Mutex<std::collections::HashSet<Fid>>,
    /// Migrations in progress (0: none; removals need not look).
    pub relayouts_pending: AtomicU64,
    /// A directory was delegated since the start (`DelegateDir`): reads must look for
    /// delegations held by other clients (locks.rs, `park_read`).
    pub delegated: std::sync::atomic::AtomicBool,
    /// A block quota limit on the bytes on this MDT was enforced at the last quota sync
    /// (delegations.rs calls delegations back when one begins).
    pub dom_limited: std::sync::atomic::AtomicBool,
    /// Changes of the nodemaps waiting for this MDT's delegations to come back
    /// (delegations.rs, `before_nodemap_change`): none is granted meanwhile.
    pub nodemaps_changing: std::sync::atomic::AtomicU32,
    /// When each migration's migrator last renewed it (relayout.rs; in memory).
    pub relayout_leases: parking_lot::Mutex<HashMap<Fid, std::time::Instant>>,
    /// `mdt.*.relayout_fence_lease_ms`.
    pub relayout_fence_lease_ms: AtomicU64,
    /// Metadata locks granted to clients (locks.rs); in memory, new at every start.
    pub ldlm: Arc<nacre_ldlm::server::Namespace>,
    /// Byte-range locks and the requests waiting for them (flocks.rs); in memory.
    pub flocks: crate::flocks::Flocks,
    /// Orphans found at start, kept until the deadline for their clients to reopen.
    orphans_pending: Mutex<Option<(std::time::Instant, Vec<Fid>)>>,
    /// Changes at every start: a client that sees a new one replays (replay.rs).
    pub epoch: u64,
    /// The recovery window after a restart (replay.rs).
    pub recovery: crate::replay::Recovery,
    /// FID and layout a replayed request's inode had, by (client, xid), for the
    /// transaction that runs it.
    replay_hints: Mutex<HashMap<([u8; 16], u64), ReplayCtx>>,
}

/// How a replayed request is run: with its original transno and, for a create, the FID and
/// layout its inode had.
#[derive(Clone, Debug)]
pub struct ReplayCtx {
    /// The transno it had.
    pub transno: u64,
    /// The inode it created.
    pub created: Option<ReplayHint>,
    /// The inodes a replayed `CreateBatch` created, with their layouts.
    pub batch: Vec<ReplayHint>,
}

/// How long orphans found at start wait for their clients to reopen them (clients reconnect
/// at their next request, or ping within 25 s).
pub const ORPHAN_GRACE_MS: u64 = 60_000;

/// Default of `mdt.*.relayout_fence_lease_ms`: a fence window the migrator has not renewed
/// (a `RelayoutFence` again) for this long is aborted, so a migrator that died cannot hold
/// a file's layout requests for longer.
pub const FENCE_LEASE_MS: u64 = 30_000;

/// How `mkdir -i -1` places a new directory (`mdt.*.mkdir_placement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// By free inodes, as Lustre's mkdir QoS: round-robin while the MDTs' free inodes differ
    /// by under 17% of the most, else drawn at random weighted by free inodes.
    Space,
    /// Round-robin over the MDTs.
    RoundRobin,
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Placement, String> {
        match s.trim() {
            "space" => Ok(Placement::Space),
            "round_robin" | "round-robin" => Ok(Placement::RoundRobin),
            other => Err(format!(
                "mkdir_placement '{other}': use space or round_robin"
            )),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::Space => "space",
            Placement::RoundRobin => "round_robin",
        })
    }
}

impl Mdt {
    /// Opens an MDT on its store; creates the root directory on first start.
    pub fn open(
        label: Label,
        dir: &std::path::Path,
        kv: Arc<dyn KvStore>,
        osts: Arc<OstPool>,
    ) -> Result<Mdt, Status> {
        let (store, loaded) = Store::open(kv, label.index, &label.name())?;
        let Loaded {
            clients,
            intents,
            frozen,
            destroys,
            relayouts: (relayouts_pending, relayouts_fenced),
        } = loaded;
        // Peer MDTs call as clients but do not replay: never waited for.
        let expected: std::collections::HashSet<[u8; 16]> = clients
            .iter()
            .filter(|c| !osts.is_peer(c))
            .copied()
            .collect();
        let changelog = crate::changelog_state::Changelog::load(&store)?;
        let last_transno = store.last_committed_transno();
        let peer_uuid = *uuid::Uuid::parse_str(&label.uuid)
            .unwrap_or_else(|_| uuid::Uuid::new_v4())
            .as_bytes();
        let quota = Arc::new(nacre_quota::Slave::new(
            &label.fsname,
            (nacre_types::TargetKind::Mdt, label.index),
            nacre_wire::quota::Resource::Inodes,
        ));
        let dom_quota = Arc::new(nacre_quota::Slave::new(
            &label.fsname,
            (nacre_types::TargetKind::Mdt, label.index),
            nacre_wire::quota::Resource::Blocks,
        ));
        let mdt = Mdt {
            qos: nacre_qos::Scheduler::new(),
            quota,
            dom_quota,
            label,
            dir: dir.to_path_buf(),
            store,
            osts,
            epoch: u64::from_be_bytes(
                uuid::Uuid::new_v4().as_bytes()[..8]
                    .try_into()
                    .expect("8 bytes"),
            ),
            recovery: crate::replay::Recovery::new(last_transno, expected),
            replay_hints: Mutex::new(HashMap::new()),
            opens: Mutex::new(HashMap::new()),
            intents: Mutex::new(intents),
            driving: Mutex::new(std::collections::HashSet::new()),
            rename_lock: Mutex::new(None),
            peer_uuid,
            mkdir_rr: std::sync::atomic::AtomicUsize::new(0),
            mkdir_round_robin: AtomicBool::new(false),
            frozen: Mutex::new(frozen),
            gate: std::sync::RwLock::new(()),
            exports: crate::export::Exports::default(),
            sizes: crate::sizes::Sizes::default(),
            atimes: crate::atime::Atimes::default(),
            changelog,
            relayouts_fenced: parking_lot::Mutex::new(relayouts_fenced),
            relayouts_pending: AtomicU64::new(relayouts_pending),
            delegated: std::sync::atomic::AtomicBool::new(false),
            dom_limited: std::sync::atomic::AtomicBool::new(false),
            nodemaps_changing: std::sync::atomic::AtomicU32::new(0),
            relayout_leases: parking_lot::Mutex::new(HashMap::new()),
            relayout_fence_lease_ms: AtomicU64::new(FENCE_LEASE_MS),
            ldlm: nacre_ldlm::server::Namespace::new(fastrand::u64(1..u64::MAX / 2)),
            flocks: Default::default(),
            orphans_pending: Mutex::new(None),
            destroy_signal: (Mutex::new(false), Condvar::new()),
            destroy_queue: Mutex::new(destroys),
            destroys_awaiting_sync: Mutex::new(Vec::new()),
            destroy_space: crate::destroy_space::DestroySpace::default(),
            filesets: crate::fileset_cache::Filesets::default(),
            modifications: AtomicU64::new(0),
            sync_on_reply: AtomicBool::new(false),
            md_stats: nacre_params::OpStats::new(crate::stats::MD_OPS),
            denied_stats: nacre_params::OpStats::new(crate::stats::MD_OPS),
            capa_lifetime_s: std::sync::atomic::AtomicU64::new(nacre_wire::capa::CAPA_LIFETIME_S),
            job_stats: nacre_params::JobStats::new(crate::stats::MD_OPS),
            export_stats: nacre_params::JobStats::keyed(
                crate::stats::MD_OPS,
                "export_stats",
                "nid",
            ),
        };
        mdt.store.ensure_root()?;
        mdt.cleanup_orphans()?;
        Ok(mdt)
    }

    /// The store (its reads, durability, counts; no handle).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Files unlinked while open when the MDT stopped: their clients re-register their opens
    /// as they reconnect (`Reopen`, Lustre's open replay), so they are removed only after
    /// [`ORPHAN_GRACE_MS`] if nobody has reopened them ([`Mdt::reap_orphans`]).
    fn cleanup_orphans(&self) -> Result<(), Status> {
        let orphans = self.store.orphans()?;
        if !orphans.is_empty() {
            tracing::info!(
                "{}: {} files unlinked while open: kept {} ms for their clients to reopen",
                self.label.name(),
                orphans.len(),
                ORPHAN_GRACE_MS
            );
            *self.orphans_pending.lock().expect("orphans") = Some((
                std::time::Instant::now() + std::time::Duration::from_millis(ORPHAN_GRACE_MS),
                orphans,
            ));
        }
        Ok(())
    }

    /// The orphans found at start still waiting for their clients to reopen them.
    pub fn pending_orphans(&self) -> Vec<Fid> {
        self.orphans_pending
            .lock()
            .expect("orphans")
            .as_ref()
            .map(|(_, f)| f.clone())
            .unwrap_or_default()
    }

    /// Removes the orphans found at start that no client reopened, once their grace time is
    /// over (called by the destroy thread).
    pub fn reap_orphans(&self) -> Result<(), Status> {
        let fids = {
            let mut pending = self.orphans_pending.lock().expect("orphans");
            match pending.as_ref() {
                Some((deadline, _)) if std::time::Instant::now() >= *deadline => {
                    pending.take().map(|(_, f)| f).unwrap_or_default()
                }
                _ => return Ok(()),
            }
        };
        let mut tx = self.begin();
        let mut removed = 0;
        for fid in fids {
            if self.is_open(fid) {
                continue;
            }
            match tx.inode(fid) {
                Ok(rec) if rec.orphan => {
                    tx.remove_inode(&rec)?;
                    removed += 1;
                }
                Ok(_) | Err(Status::NoEnt) => {}
                Err(e) => return Err(e),
            }
        }
        let destroys = std::mem::take(&mut tx.destroys);
        let w = tx.detach();
        if !w.is_empty() {
            let t = w.commit()?;
            self.store.wait_durable(t)?;
        }
        self.queue_destroys(destroys);
        tracing::info!(
            "{}: {removed} unreopened orphans removed",
            self.label.name()
        );
        Ok(())
    }

    /// True if every modifying reply waits for the journal sync (the `sync_on_reply` setting);
    /// otherwise replies follow the journal write, and syncs come from `fsync`, `fsyncdir`
    /// and the commit thread.
    pub fn sync_on_reply(&self) -> bool {
        self.sync_on_reply.load(Ordering::Relaxed)
    }

    /// How `mkdir -i -1` places new directories.
    pub fn mkdir_placement(&self) -> Placement {
        if self.mkdir_round_robin.load(Ordering::Relaxed) {
            Placement::RoundRobin
        } else {
            Placement::Space
        }
    }

    /// Sets the `mkdir -i -1` placement.
    pub fn set_mkdir_placement(&self, p: Placement) {
        self.mkdir_round_robin
            .store(p == Placement::RoundRobin, Ordering::Relaxed);
    }

    /// Sets `sync_on_reply`.
    pub fn set_sync_on_reply(&self, on: bool) {
        self.sync_on_reply.store(on, Ordering::Relaxed);
    }

    /// Makes every committed change durable if something was committed since `durable`;
    /// returns the new durable ticket (the commit thread calls this every commit interval).
    pub fn commit_pass(&self, durable: nacre_kv::Ticket) -> Result<nacre_kv::Ticket, Status> {
        let synced = self.store.commit_pass(durable)?;
        self.queue_synced_destroys(synced);
        Ok(synced)
    }

    /// Queues the destroys of the batch of `ticket` once the journal is synced past it
    /// ([`Mdt::commit_pass`]); at once if `synced` (its sync was waited for already).
    pub fn queue_destroys_when_synced(
        &self,
        ticket: nacre_kv::Ticket,
        synced: bool,
        destroys: Vec<(u32, ObjectId)>,
    ) {
        if synced || destroys.is_empty() {
            return self.queue_destroys(destroys);
        }
        self.destroy_space.queued(&destroys);
        self.destroys_awaiting_sync
            .lock()
            .expect("destroys awaiting sync")
            .push((ticket, destroys));
    }

    /// Objects whose destroy waits for the journal's sync.
    pub fn destroys_awaiting_sync(&self) -> usize {
        let awaiting = self
            .destroys_awaiting_sync
            .lock()
            .expect("destroys awaiting sync");
        awaiting.iter().map(|(_, d)| d.len()).sum()
    }

    /// Queues the destroys of batches up to `synced`, now durable.
    fn queue_synced_destroys(&self, synced: nacre_kv::Ticket) {
        let ready: Vec<(u32, ObjectId)> = {
            let mut awaiting = self
                .destroys_awaiting_sync
                .lock()
                .expect("destroys awaiting sync");
            let (ready, waiting) = std::mem::take(&mut *awaiting)
                .into_iter()
                .partition::<Vec<_>, _>(|(t, _)| *t <= synced);
            *awaiting = waiting;
            ready.into_iter().flat_map(|(_, d)| d).collect()
        };
        if !ready.is_empty() {
            self.destroy_queue
                .lock()
                .expect("destroy queue")
                .extend(ready);
            self.kick_destroyer();
        }
    }

    /// Syncs the journal now (end of recovery); logs a failure.
    pub fn sync_now(&self) {
        if let Err(e) = self.commit_pass(nacre_kv::Ticket(0)) {
            tracing::error!("{}: journal sync failed: {e}", self.label.name());
        }
    }

    /// The replay of (client, xid) is to run as `ctx` says.
    pub fn set_replay_hint(&self, client: &[u8; 16], xid: u64, ctx: ReplayCtx) {
        self.replay_hints
            .lock()
            .expect("replay hints")
            .insert((*client, xid), ctx);
    }

    /// The version of `fid`: the transno of its last change (0: none recorded, or no such
    /// inode).
    pub fn version_of(&self, fid: Fid) -> Result<u64, Status> {
        self.store.version_of(fid)
    }

    /// Takes the hint of (client, xid), if any.
    pub fn take_replay_hint(&self, client: &[u8; 16], xid: u64) -> Option<ReplayCtx> {
        self.replay_hints
            .lock()
            .expect("replay hints")
            .remove(&(*client, xid))
    }

    /// A change with transaction number `transno` is in the journal.
    pub fn note_written(&self, transno: u64) {
        self.store.note_written(transno);
    }

    /// Removes `client` from the `clients` table (it disconnected or was evicted): a
    /// restart no longer waits for it.
    pub fn forget_client(&self, client: &[u8; 16]) {
        let mut tx = self.begin();
        if !tx.forget_client(client) {
            return;
        }
        tx.commit_or_warn("cannot forget client");
    }

    /// Hands committed object destroys to the destroy thread.
    pub fn queue_destroys(&self, destroys: Vec<(u32, ObjectId)>) {
        if destroys.is_empty() {
            return;
        }
        self.destroy_space.queued(&destroys);
        self.destroy_queue
            .lock()
            .expect("destroy queue")
            .extend(destroys);
        self.kick_destroyer();
    }

    /// Starts a modifying operation: takes the write lock (commit order = lock order).
    pub fn begin(&self) -> Tx<'_> {
        Tx {
            mdt: self,
            tx: self.store.begin(),
            replayed_batch: Vec::new(),
        }
    }

    /// Reads an inode (`ESTALE` for one a migration moved to another MDT).
    pub fn inode(&self, fid: Fid) -> Result<InodeRecord, Status> {
        self.store.inode(fid)
    }

    /// Reads the record of the inode `fid` moved to, if a migration moved it.
    pub fn moved_to(&self, fid: Fid) -> Result<Option<Fid>, Status> {
        self.store.moved_to(fid)
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: Fid, name: &[u8]) -> Result<Option<DirentRecord>, Status> {
        self.store.lookup(parent, name)
    }

    /// True if `op` would change an inode a directory migration holds here (the inode itself,
    /// the directory of a name, or the inode an entry it renames or removes names).
    pub(crate) fn held_by_migration(&self, op: &MdsOp) -> bool {
        use nacre_wire::mds::RemoteUpdate;
        let frozen = self.frozen.lock().expect("frozen");
        if frozen.is_empty() {
            return false;
        }
        let named = |parent: &Fid, name: &[u8]| {
            self.lookup(*parent, name)
                .ok()
                .flatten()
                .is_some_and(|d| frozen.contains(&d.fid))
        };
        if let MdsOp::Open { fid, .. } = op {
            // A migrating directory may be opened (listed); its files may not.
            return frozen.contains(fid)
                && !self.intents.lock().expect("intents").contains_key(fid);
        }
        if op.key_fid().is_some_and(|f| frozen.contains(&f)) {
            return true;
        }
        match op {
            MdsOp::Unlink { parent, name } | MdsOp::Rmdir { parent, name } => named(parent, name),
            MdsOp::UnlinkBatch { parent, items } => items.iter().any(|i| named(parent, &i.name)),
            MdsOp::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                ..
            } => {
                frozen.contains(dst_parent)
                    || named(src_parent, src_name)
                    || (dst_parent.mdt_index() == self.label.index && named(dst_parent, dst_name))
            }
            MdsOp::Link { fid, parent, .. } => frozen.contains(fid) || frozen.contains(parent),
            MdsOp::Update(RemoteUpdate::InsertEntry { parent, name, .. }) => {
                frozen.contains(parent) || named(parent, name)
            }
            _ => false,
        }
    }

    /// Registers an opener: `client` opened `fid` for `access`.
    pub fn add_open(&self, client: &[u8; 16], fid: Fid, access: u8) {
        self.exports.opened(client, fid, access);
        let mut opens = self.opens.lock().expect("opens");
        let n = opens.entry(fid).or_insert(0);
        *n = n.saturating_add(1);
    }

    /// Drops an opener; returns true when it was the last.
    pub fn drop_open(&self, fid: Fid) -> bool {
        let mut opens = self.opens.lock().expect("opens");
        match opens.get_mut(&fid) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                opens.remove(&fid);
                true
            }
            None => true,
        }
    }

    /// True if some client has the inode open.
    pub fn is_open(&self, fid: Fid) -> bool {
        self.opens.lock().expect("opens").contains_key(&fid)
    }

    /// Grants `client` `bits` of `fid` if it can: a regular file's UPDATE only while no other
    /// client writes it. Checked after the grant: an open for writing registers its writer
    /// before its revocation ends, so either the check sees it or the revocation calls the
    /// new lock back.
    pub(crate) fn grant_lock(
        &self,
        client: &[u8; 16],
        fid: Fid,
        bits: u8,
    ) -> Option<(LockRef, bool)> {
        let (lock, new) = self.ldlm.try_grant(client, fid, bits)?;
        if lock.bits & UPDATE != 0 && self.sizes.written_by_others(fid, client) {
            if new {
                self.ldlm.release(client, lock.handle);
            }
            let rest = lock.bits & !UPDATE;
            if rest == 0 {
                return None;
            }
            return self.ldlm.try_grant(client, fid, rest);
        }
        Some((lock, new))
    }

    /// Wakes the destroy thread.
    pub fn kick_destroyer(&self) {
        let (lock, cv) = &self.destroy_signal;
        *lock.lock().expect("destroy signal") = true;
        cv.notify_one();
    }

    /// Every id with inodes here and their count, in order (quotas).
    pub fn quota_counts(&self) -> Vec<(nacre_types::QuotaId, u64)> {
        self.store.inode_counts()
    }

    /// The inodes each of `ids` has here (quotas).
    pub fn inodes_of(&self, ids: &[nacre_types::QuotaId]) -> Vec<u64> {
        self.store.inodes_of(ids)
    }

    /// Number of inodes (approximate: counted by scanning is too slow; uses the store size).
    pub fn statfs(&self) -> Result<nacre_types::StatFs, Status> {
        let mut st = nacre_osd::objects::statvfs(&self.dir).map_err(|e| Status::from_io(&e))?;
        let used = self.store.inodes_used();
        st.files_free = st.bytes_avail / 1024;
        st.files_total = used + st.files_free;
        Ok(st)
    }
}

/// A modifying operation in progress ([`Mdt::begin`]): the store's transaction
/// ([`nacre_mdstore::store::Tx`], which it dereferences to) and what needs the rest of the MDT:
/// object placement, destroy-space hints, exact sizes, quota enforcement, the relayout
/// bookkeeping of a removed inode, and which clients are peers.
pub struct Tx<'a> {
    /// The MDT.
    pub mdt: &'a Mdt,
    tx: nacre_mdstore::store::Tx<'a>,
    /// A replayed `CreateBatch`: the FIDs and layouts its files had (ReplayCtx::batch).
    pub replayed_batch: Vec<ReplayHint>,
}

impl<'a> std::ops::Deref for Tx<'a> {
    type Target = nacre_mdstore::store::Tx<'a>;
    fn deref(&self) -> &nacre_mdstore::store::Tx<'a> {
        &self.tx
    }
}

impl std::ops::DerefMut for Tx<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

impl Tx<'_> {
    /// The space `layout`'s objects hold (as the size of file `rec` spreads over them),
    /// counted as free while their destroys are pending (crate::destroy_space::DestroySpace).
    pub fn hint_destroy_space(&mut self, rec: &InodeRecord, layout: &Layout) {
        let size = self
            .mdt
            .sizes
            .exact(rec.attr.fid)
            .map_or(rec.attr.size, |(size, _)| size);
        for (stripe, o) in layout.objects().enumerate() {
            let bytes = layout.object_size_for_file(stripe, size);
            self.mdt.destroy_space.hint(o.ost, o.object, bytes);
        }
    }

    /// Deletes an inode with its xattrs, queueing its objects for destruction.
    pub fn remove_inode(&mut self, rec: &InodeRecord) -> Result<(), Status> {
        let fid = rec.attr.fid;
        if let Some(layout) = &rec.layout {
            self.hint_destroy_space(rec, layout);
        }
        self.mdt.sizes.forget(fid);
        self.tx.remove_inode_records(rec)?;
        forget_relayout(self, fid)?;
        self.tx.remove_inode_rest(rec);
        Ok(())
    }

    /// Adjusts the inode counter `df -i` reports, and the inodes of `attr`'s owner, group and
    /// project (quotas).
    pub fn count_inodes(&mut self, attr: &Attr, delta: i64) -> Result<(), Status> {
        // New inodes within their owner's, group's and project's quotas: checked before the
        // request ran (quota::precheck); here only an id the master refused stops it (a
        // shortage from creates that passed the check at once is let through and more
        // grant asked for: the overrun is bounded by the MDS threads, docs/quota.md).
        if delta > 0 && self.mdt.quota.any_limited() {
            let ids = QuotaId::of_attr(attr);
            let tx = &self.tx;
            let checked = self
                .mdt
                .quota
                .check_now(&ids, delta as u64, |q| tx.inode_count(q));
            if checked == Err(Status::DQuot) {
                return Err(Status::DQuot);
            }
        }
        self.tx.count_inodes(attr, delta);
        Ok(())
    }

    /// Counts new inode `attr` against its owner's, group's and project's quotas without
    /// a check: a create a delegation's holder answered already (ops/batch.rs).
    pub fn count_answered_inode(&mut self, attr: &Attr) {
        self.tx.count_inodes(attr, 1);
    }

    /// Stores `bytes` as file `attr.fid`'s bytes on the MDT in place of `old_len` of them,
    /// charged to its owner, group and project. Their growth fits the block quotas: the
    /// request reserved it before it ran (crate::quota::reserve_dom).
    pub fn put_dom(&mut self, attr: &Attr, old_len: usize, bytes: &[u8]) {
        self.tx.put_dom(Owner::of(attr), attr.fid, old_len, bytes);
    }

    /// Deletes file `attr.fid`'s `stored` bytes on the MDT (moved to OSTs), given back to
    /// its owner's, group's and project's usage.
    pub fn delete_dom(&mut self, attr: &Attr, stored: usize) {
        self.tx.delete_dom(Owner::of(attr), attr.fid, stored);
    }

    /// Gives this change the next transaction number (stored with it) and, on the
    /// client's first one, records the client in the `clients` table (a peer MDT, which
    /// never replays, is not recorded).
    pub fn assign_transno(&mut self) -> u64 {
        let record_client = !self.mdt.osts.is_peer(&self.tx.client);
        self.tx.assign_transno(record_client)
    }

    /// Commits the transaction (if it changes anything) and waits until it is durable,
    /// with the write lock released.
    pub fn commit_durable(mut self) -> Result<(), Status> {
        if self.tx.is_empty() {
            return Ok(());
        }
        let ticket = self.tx.commit()?;
        let mdt = self.mdt;
        drop(self);
        note_modification(mdt);
        mdt.store().wait_durable(ticket)
    }
}

impl<'a> Tx<'a> {
    /// Ends the transaction, releasing the write lock, and keeps its changes to commit
    /// without it (a by-value call does not go through `Deref`).
    pub fn detach(self) -> nacre_mdstore::store::Writes<'a> {
        self.tx.detach()
    }
}

/// Checks a name component.
pub fn check_name(name: &[u8]) -> Result<(), Status> {
    if name.len() > NAME_BYTES_MAX {
        return Err(Status::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Status::Inval);
    }
    Ok(())
}

/// The migration of `fid` in progress, if any.
pub(crate) fn relayout_of(mdt: &Mdt, fid: Fid) -> Result<Option<RelayoutRecord>, Status> {
    mdt.store().relayout(fid)
}

/// `fid`'s migration ends in `tx` (swapped, aborted, or its file removed): its record, its
/// fence window and its lease go.
pub(crate) fn end_relayout(tx: &mut Tx<'_>, fid: Fid) {
    tx.del_relayout(fid);
    tx.mdt.relayouts_fenced.lock().remove(&fid);
    tx.mdt.relayout_leases.lock().remove(&fid);
    tx.mdt.relayouts_pending.fetch_sub(1, Ordering::AcqRel);
}

/// A removed file's migration goes with it (its new objects destroyed too).
pub(crate) fn forget_relayout(tx: &mut Tx<'_>, fid: Fid) -> Result<(), Status> {
    if tx.mdt.relayouts_pending.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    if let Some(r) = relayout_of(tx.mdt, fid)? {
        tx.destroy_objects(&r.new);
        end_relayout(tx, fid);
    }
    Ok(())
}

/// Advances the modification counter (statistics).
pub fn note_modification(mdt: &Mdt) {
    mdt.modifications.fetch_add(1, Ordering::Relaxed);
}
