//! One metadata target: its store, allocators, open counts and the transaction helper that
//! every modifying operation uses.

use crate::osp::OstPool;
use crate::records::*;
pub use crate::tx::Tx;
use nacre_kv::{Batch, KvStore};
use nacre_ldlm::msg::{LockRef, UPDATE};
use nacre_osd::Label;
use nacre_types::limits::NAME_BYTES_MAX;
use nacre_types::{Attr, Fid, FileKind, Layout, ObjectId, Owner, Status, TimeSpec};
use nacre_wire::mds::MdsOp;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// FIDs and object ids are reserved on disk this many at a time, so a create does not have to
/// persist an allocator update.
pub const ALLOC_RESERVE: u64 = 10_000;

/// Allocation state, guarded by the MDT's write lock.
pub struct AllocState {
    pub(crate) next_fid: u64,
    pub(crate) fid_limit: u64,
    pub(crate) next_object: HashMap<u32, (u64, u64)>,
    pub(crate) inodes_used: u64,
    /// Inodes per user, group and project (quotas; counted in tx.rs).
    pub(crate) quota: crate::tx::Counts,
    /// Xids with a saved reply, per client: lets a request skip the store lookup and lets
    /// pruning delete exact keys instead of scanning over deleted ones.
    pub(crate) saved_replies: HashMap<[u8; 16], BTreeSet<u64>>,
    /// Last transaction number given.
    pub(crate) last_transno: u64,
    /// Clients in the `clients` table.
    pub(crate) clients: std::collections::HashSet<[u8; 16]>,
}

/// Saved replies kept per client at most (a well-behaved client keeps `max_rpcs_in_flight`).
pub const SAVED_REPLIES_PER_CLIENT_MAX: usize = 1024;

/// Who holds the rename lock (client uuid and xid of its request) and until when.
pub type RenameLockHolder = (([u8; 16], u64), std::time::Instant);

/// One MDT.
pub struct Mdt {
    /// Identity.
    pub label: Label,
    /// The target directory (its file system's capacity is the MDT's).
    pub dir: std::path::PathBuf,
    /// The store.
    pub kv: Arc<dyn KvStore>,
    /// OSTs for object placement.
    pub osts: Arc<OstPool>,
    /// Quota enforcement on this MDT's inodes (nacre_quota).
    pub quota: Arc<nacre_quota::Slave>,
    /// QoS: requests held to this MDT's share of their class's rate (nacre_qos).
    pub qos: nacre_qos::Scheduler,
    pub(crate) write_lock: Mutex<AllocState>,
    opens: Mutex<HashMap<Fid, u32>>,
    /// Wakes the destroy thread.
    pub destroy_signal: (Mutex<bool>, Condvar),
    /// Objects whose destruction is committed but not yet done on the OSTs.
    pub destroy_queue: Mutex<VecDeque<(u32, ObjectId)>>,
    /// The space those destroys will free (destroy_space.rs).
    pub destroy_space: crate::destroy_space::DestroySpace,
    /// Fileset roots resolved and inodes found inside them (fileset_cache.rs).
    pub filesets: crate::fileset_cache::Filesets,
    /// Ownership changes possibly pending in the `owners` table (owners.rs): 0 means none,
    /// so unlinks and the background thread leave that table alone.
    pub owners_pending: AtomicU64,
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
    /// Changelog consumers and record numbering (changelog_writer.rs).
    pub changelog: crate::changelog_writer::Changelog,
    /// Files whose migration's fence window is open (relayout.rs).
    pub relayouts_fenced: parking_lot::Mutex<std::collections::HashSet<Fid>>,
    /// Migrations in progress (0: none; removals need not look).
    pub relayouts_pending: AtomicU64,
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
    /// Highest transaction number whose change is in the journal.
    pub written_transno: AtomicU64,
    /// Highest transaction number made durable (`last_committed` in replies).
    pub last_committed_transno: AtomicU64,
    /// The recovery window after a restart (replay.rs).
    pub recovery: crate::replay::Recovery,
    /// FID and layout a replayed request's inode had, by (client, xid), for the
    /// transaction that runs it.
    replay_hints: Mutex<HashMap<([u8; 16], u64), ReplayCtx>>,
    /// The FID allocation reserved durably when this MDT started: a replayed create's FID
    /// lies below it, or at most [`crate::replay::REPLAY_AHEAD_MAX`] past it.
    pub(crate) fid_limit_at_start: u64,
    /// Each OST's object allocation reserved durably when this MDT started (`ost_next/N`):
    /// a replayed layout's objects lie within [`crate::mdt::ALLOC_RESERVE`] below it or at
    /// most [`crate::replay::REPLAY_AHEAD_MAX`] past it (objects below were given to
    /// creates that are durable).
    pub(crate) ost_next_at_start: HashMap<u32, u64>,
}

/// The FID and layout a replayed create gave its inode the first time.
pub type ReplayHint = (Fid, Option<Layout>);

/// How a replayed request is run: with its original transno and, for a create, the FID and
/// layout its inode had.
#[derive(Clone, Debug)]
pub struct ReplayCtx {
    /// The transno it had.
    pub transno: u64,
    /// The inode it created.
    pub created: Option<ReplayHint>,
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
        let fid_limit = read_u64(&*kv, b"fid_limit")?.unwrap_or(0);
        let ost_next_at_start = load_ost_next(&*kv)?;
        let inodes_used = read_u64(&*kv, b"inodes_used")?.unwrap_or(0);
        let inode_counts = crate::tx::load(&*kv)?;
        let saved_replies = load_saved_replies(&*kv)?;
        let last_transno = read_u64(&*kv, b"last_transno")?.unwrap_or(0);
        let clients = load_clients(&*kv)?;
        // Peer MDTs call as clients but do not replay: never waited for.
        let expected: std::collections::HashSet<[u8; 16]> = clients
            .iter()
            .filter(|c| !osts.is_peer(c))
            .copied()
            .collect();
        let intents = load_intents(&*kv)?;
        let frozen = load_frozen(&*kv)?;
        build_link_index(&*kv)?;
        let changelog = crate::changelog_writer::Changelog::load(&*kv)?;
        let (relayouts_pending, relayouts_fenced) = load_relayouts(&*kv)?;
        let peer_uuid = *uuid::Uuid::parse_str(&label.uuid)
            .unwrap_or_else(|_| uuid::Uuid::new_v4())
            .as_bytes();
        let kv_for_queue = kv.clone();
        let quota = Arc::new(nacre_quota::Slave::new(
            &label.fsname,
            (nacre_types::TargetKind::Mdt, label.index),
        ));
        let mdt = Mdt {
            qos: nacre_qos::Scheduler::new(),
            quota,
            label,
            dir: dir.to_path_buf(),
            kv,
            osts,
            write_lock: Mutex::new(AllocState {
                next_fid: fid_limit,
                fid_limit,
                next_object: HashMap::new(),
                inodes_used,
                quota: inode_counts,
                saved_replies,
                last_transno,
                clients,
            }),
            epoch: u64::from_be_bytes(
                uuid::Uuid::new_v4().as_bytes()[..8]
                    .try_into()
                    .expect("8 bytes"),
            ),
            written_transno: AtomicU64::new(last_transno),
            last_committed_transno: AtomicU64::new(last_transno),
            recovery: crate::replay::Recovery::new(last_transno, expected),
            replay_hints: Mutex::new(HashMap::new()),
            fid_limit_at_start: fid_limit,
            ost_next_at_start,
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
            relayout_leases: parking_lot::Mutex::new(HashMap::new()),
            relayout_fence_lease_ms: AtomicU64::new(FENCE_LEASE_MS),
            ldlm: nacre_ldlm::server::Namespace::new(fastrand::u64(1..u64::MAX / 2)),
            flocks: Default::default(),
            orphans_pending: Mutex::new(None),
            destroy_signal: (Mutex::new(false), Condvar::new()),
            destroy_queue: Mutex::new(load_destroys(&*kv_for_queue)?),
            destroy_space: crate::destroy_space::DestroySpace::default(),
            filesets: crate::fileset_cache::Filesets::default(),
            owners_pending: AtomicU64::new(
                match kv_for_queue.scan(crate::records::OWNERS, &[], None, 1) {
                    Ok(page) => page.len() as u64,
                    // Not known: look on the first pass.
                    Err(_) => 1,
                },
            ),
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
        mdt.ensure_root()?;
        mdt.cleanup_orphans()?;
        Ok(mdt)
    }

    fn ensure_root(&self) -> Result<(), Status> {
        if self.label.index != 0
            || self
                .kv
                .get(INODES, &Fid::ROOT.to_key())
                .map_err(kv_err)?
                .is_some()
        {
            return Ok(());
        }
        let now = TimeSpec::now();
        let root = InodeRecord {
            attr: Attr {
                fid: Fid::ROOT,
                kind: FileKind::Directory,
                perm: 0o755,
                uid: 0,
                gid: 0,
                nlink: 2,
                size: 4096,
                blocks: 8,
                atime: now,
                mtime: now,
                ctime: now,
                rdev: 0,
                project: 0,
                proj_inherit: false,
            },
            layout: None,
            dir_default: None,
            symlink: None,
            parent: Some(Fid::ROOT),
            orphan: false,
        };
        let mut b = Batch::new();
        b.put(
            INODES,
            Fid::ROOT.to_key().to_vec(),
            crate::records::encode_inode(&root, 0),
        );
        // The root is an inode like any other in `df -i`.
        let mut alloc = self.write_lock.lock().expect("write lock");
        alloc.inodes_used += 1;
        b.put(
            META,
            b"inodes_used".to_vec(),
            alloc.inodes_used.to_be_bytes().to_vec(),
        );
        crate::tx::charge(&mut alloc.quota, &mut b, Owner::of(&root.attr), 1);
        drop(alloc);
        let t = self.kv.commit(b).map_err(kv_err)?;
        self.kv.wait_durable(t).map_err(kv_err)
    }

    /// Files unlinked while open when the MDT stopped: their clients re-register their opens
    /// as they reconnect (`Reopen`, Lustre's open replay), so they are removed only after
    /// [`ORPHAN_GRACE_MS`] if nobody has reopened them ([`Mdt::reap_orphans`]).
    fn cleanup_orphans(&self) -> Result<(), Status> {
        let orphans = self.find_orphans()?;
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
        let batch = std::mem::take(&mut tx.batch);
        let destroys = std::mem::take(&mut tx.destroys);
        drop(tx);
        if !batch.is_empty() {
            let t = self.kv.commit(batch).map_err(kv_err)?;
            self.kv.wait_durable(t).map_err(kv_err)?;
        }
        self.queue_destroys(destroys);
        tracing::info!(
            "{}: {removed} unreopened orphans removed",
            self.label.name()
        );
        Ok(())
    }

    /// The inodes marked orphan (unlinked while open), from the `orphans` index. An MDT
    /// formatted before the index existed is scanned once to build it.
    fn find_orphans(&self) -> Result<Vec<Fid>, Status> {
        if read_u64(&*self.kv, b"orphan_index")?.is_none() {
            let found = self.scan_orphans()?;
            let mut b = Batch::new();
            for fid in &found {
                b.put(ORPHANS, fid.to_key().to_vec(), Vec::new());
            }
            b.put(META, b"orphan_index".to_vec(), 1u64.to_be_bytes().to_vec());
            let t = self.kv.commit(b).map_err(kv_err)?;
            self.kv.wait_durable(t).map_err(kv_err)?;
            return Ok(found);
        }
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .kv
                .scan(ORPHANS, &[], after.as_deref(), 1024)
                .map_err(kv_err)?;
            let Some(last) = page.last() else { break };
            after = Some(last.0.clone());
            for (k, _) in &page {
                match Fid::from_key(k) {
                    Some(fid) => out.push(fid),
                    None => tracing::warn!("{}: bad orphan index key", self.label.name()),
                }
            }
        }
        Ok(out)
    }

    /// Every inode marked orphan, by a scan of all inodes.
    fn scan_orphans(&self) -> Result<Vec<Fid>, Status> {
        let mut after: Option<Vec<u8>> = None;
        let mut orphans = Vec::new();
        loop {
            let page = self
                .kv
                .scan(INODES, &[], after.as_deref(), 1024)
                .map_err(kv_err)?;
            let Some(last) = page.last() else { break };
            after = Some(last.0.clone());
            for (_, v) in &page {
                let rec: InodeRecord = decode(v)?;
                if rec.orphan {
                    orphans.push(rec.attr.fid);
                }
            }
        }
        Ok(orphans)
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
        // Read before the sync: every change with a transno up to here is in the batches
        // the sync covers.
        let written = self.written_transno.load(Ordering::Acquire);
        let last = self.kv.last_committed();
        if last > durable {
            self.kv.wait_durable(last).map_err(kv_err)?;
        }
        self.last_committed_transno
            .fetch_max(written, Ordering::AcqRel);
        Ok(last)
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
        Ok(self
            .kv
            .get(INODES, &fid.to_key())
            .map_err(kv_err)?
            .map_or(0, |v| inode_version(&v)))
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
        if transno > 0 {
            self.written_transno.fetch_max(transno, Ordering::AcqRel);
        }
    }

    /// Removes `client` from the `clients` table (it disconnected or was evicted): a
    /// restart no longer waits for it.
    pub fn forget_client(&self, client: &[u8; 16]) {
        let mut tx = self.begin();
        if !tx.forget_client(client) {
            return;
        }
        let batch = std::mem::take(&mut tx.batch);
        if let Err(e) = self.kv.commit(batch) {
            tracing::warn!("{}: cannot forget client: {e}", self.label.name());
        }
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
            alloc: self.write_lock.lock().expect("write lock"),
            batch: Batch::new(),
            destroys: Vec::new(),
            now: TimeSpec::now(),
            ancestry_checked: false,
            client: [0; 16],
            cred: nacre_types::Cred::root(),
            transno: 0,
            replay: None,
            forced_transno: None,
            pre_versions: Vec::new(),
            new_client: false,
            durable_before_reply: false,
            seen_versions: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Reads an inode (`ESTALE` for one a migration moved to another MDT).
    pub fn inode(&self, fid: Fid) -> Result<InodeRecord, Status> {
        match self.kv.get(INODES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => decode(&v),
            None if self.moved_to(fid)?.is_some() => Err(Status::Stale),
            None => Err(Status::NoEnt),
        }
    }

    /// Reads the record of the inode `fid` moved to, if a migration moved it.
    pub fn moved_to(&self, fid: Fid) -> Result<Option<Fid>, Status> {
        Ok(self
            .kv
            .get(MOVED, &fid.to_key())
            .map_err(kv_err)?
            .and_then(|v| Fid::from_key(&v)))
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: Fid, name: &[u8]) -> Result<Option<DirentRecord>, Status> {
        match self
            .kv
            .get(DIRENTS, &dirent_key(parent, name))
            .map_err(kv_err)?
        {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
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
        let alloc = self.write_lock.lock().expect("write lock");
        let mut v: Vec<(nacre_types::QuotaId, u64)> =
            alloc.quota.iter().map(|(q, n)| (*q, *n)).collect();
        drop(alloc);
        v.sort_unstable();
        v
    }

    /// The inodes each of `ids` has here (quotas).
    pub fn inodes_of(&self, ids: &[nacre_types::QuotaId]) -> Vec<u64> {
        let alloc = self.write_lock.lock().expect("write lock");
        ids.iter()
            .map(|q| alloc.quota.get(q).copied().unwrap_or(0))
            .collect()
    }

    /// Number of inodes (approximate: counted by scanning is too slow; uses the store size).
    pub fn statfs(&self) -> Result<nacre_types::StatFs, Status> {
        let mut st = nacre_osd::objects::statvfs(&self.dir).map_err(|e| Status::from_io(&e))?;
        let used = self.write_lock.lock().expect("write lock").inodes_used;
        st.files_free = st.bytes_avail / 1024;
        st.files_total = used + st.files_free;
        Ok(st)
    }
}

/// Converts a store error to a status (logged: it means the MDT's disk is failing).
pub fn kv_err(e: nacre_kv::KvError) -> Status {
    tracing::error!("MDT store: {e}");
    Status::Io
}

/// Calls `f` with every entry of `table` whose key starts with `prefix`, in key order,
/// reading `page` entries at a time.
fn scan_each(
    kv: &dyn KvStore,
    table: &'static str,
    prefix: &[u8],
    page: usize,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), Status>,
) -> Result<(), Status> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let entries = kv
            .scan(table, prefix, after.as_deref(), page)
            .map_err(kv_err)?;
        let Some(last) = entries.last() else {
            return Ok(());
        };
        after = Some(last.0.clone());
        for (k, v) in &entries {
            f(k, v)?;
        }
    }
}

/// The `META` key of OST `ost`'s object allocation reserved.
pub(crate) fn ost_next_key(ost: u32) -> Vec<u8> {
    format!("ost_next/{ost}").into_bytes()
}

/// Every OST's object allocation reserved (`ost_next/N` in `META`).
fn load_ost_next(kv: &dyn KvStore) -> Result<HashMap<u32, u64>, Status> {
    let mut out = HashMap::new();
    scan_each(kv, META, b"ost_next/", 1_024, |k, v| {
        let ost = std::str::from_utf8(&k[b"ost_next/".len()..])
            .ok()
            .and_then(|s| s.parse().ok());
        let next = v
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes);
        if let (Some(ost), Some(next)) = (ost, next) {
            out.insert(ost, next);
        }
        Ok(())
    })?;
    Ok(out)
}

pub(crate) fn read_u64(kv: &dyn KvStore, key: &[u8]) -> Result<Option<u64>, Status> {
    match kv.get(META, key).map_err(kv_err)? {
        Some(v) if v.len() == 8 => Ok(Some(u64::from_be_bytes(v.try_into().expect("8 bytes")))),
        Some(_) => Err(Status::Io),
        None => Ok(None),
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

fn load_clients(kv: &dyn KvStore) -> Result<std::collections::HashSet<[u8; 16]>, Status> {
    let mut out = std::collections::HashSet::new();
    scan_each(kv, CLIENTS, &[], 1024, |k, _| {
        out.insert(k.try_into().map_err(|_| Status::Io)?);
        Ok(())
    })?;
    Ok(out)
}

fn load_intents(kv: &dyn KvStore) -> Result<HashMap<Fid, IntentRecord>, Status> {
    let mut out = HashMap::new();
    scan_each(kv, INTENTS, &[], 1024, |k, v| {
        out.insert(Fid::from_key(k).ok_or(Status::Io)?, decode(v)?);
        Ok(())
    })?;
    Ok(out)
}

fn load_frozen(kv: &dyn KvStore) -> Result<std::collections::HashSet<Fid>, Status> {
    let mut out = std::collections::HashSet::new();
    scan_each(kv, crate::records::FROZEN, &[], 1024, |k, _| {
        out.insert(Fid::from_key(k).ok_or(Status::Io)?);
        Ok(())
    })?;
    Ok(out)
}

/// Builds the link index (links.rs) from the entries of an MDT formatted before it existed
/// (once, at start; `meta` `link_index` says it is built).
fn build_link_index(kv: &dyn nacre_kv::KvStore) -> Result<(), Status> {
    if read_u64(kv, b"link_index")?.is_some() {
        return Ok(());
    }
    let mut after: Option<Vec<u8>> = None;
    let mut count = 0u64;
    loop {
        let page = kv
            .scan(DIRENTS, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        let mut b = Batch::new();
        for (k, v) in &page {
            let (Some(parent), Ok(d)) = (
                k.get(..16).and_then(Fid::from_key),
                decode::<DirentRecord>(v),
            ) else {
                tracing::warn!("links: damaged directory entry skipped");
                continue;
            };
            b.put(LINKS, link_key(d.fid, parent, &k[16..]), Vec::new());
            count += 1;
        }
        kv.commit(b).map_err(kv_err)?;
    }
    let mut b = Batch::new();
    b.put(META, b"link_index".to_vec(), 1u64.to_be_bytes().to_vec());
    let t = kv.commit(b).map_err(kv_err)?;
    kv.wait_durable(t).map_err(kv_err)?;
    if count > 0 {
        tracing::info!("links: index of {count} existing entries built");
    }
    Ok(())
}

fn load_destroys(kv: &dyn KvStore) -> Result<VecDeque<(u32, ObjectId)>, Status> {
    let mut out = VecDeque::new();
    scan_each(kv, DESTROY, &[], 4096, |k, _| {
        out.extend(parse_destroy_key(k));
        Ok(())
    })?;
    Ok(out)
}

fn load_saved_replies(kv: &dyn KvStore) -> Result<HashMap<[u8; 16], BTreeSet<u64>>, Status> {
    let mut out: HashMap<[u8; 16], BTreeSet<u64>> = HashMap::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(REPLIES, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (k, _) in &page {
            if let (Some(c), Some(x)) = (k.get(..16), k.get(16..24)) {
                let client: [u8; 16] = c.try_into().expect("16 bytes");
                out.entry(client)
                    .or_default()
                    .insert(u64::from_be_bytes(x.try_into().expect("8 bytes")));
            }
        }
    }
    Ok(out)
}

/// The migration of `fid` in progress, if any.
pub(crate) fn relayout_of(mdt: &Mdt, fid: Fid) -> Result<Option<RelayoutRecord>, Status> {
    match mdt.kv.get(RELAYOUTS, &fid.to_key()).map_err(kv_err)? {
        Some(v) => decode(&v).map(Some),
        None => Ok(None),
    }
}

/// `fid`'s migration ends in `tx` (swapped, aborted, or its file removed): its record, its
/// fence window and its lease go.
pub(crate) fn end_relayout(tx: &mut Tx<'_>, fid: Fid) {
    tx.batch.delete(RELAYOUTS, fid.to_key().to_vec());
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

/// (migrations in progress, files whose fence window is open), read at start.
fn load_relayouts(
    kv: &dyn nacre_kv::KvStore,
) -> Result<(u64, std::collections::HashSet<Fid>), Status> {
    let mut count = 0;
    let mut fenced = std::collections::HashSet::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(RELAYOUTS, &[], after.as_deref(), 1024)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (k, v) in &page {
            count += 1;
            if let (Some(fid), Ok(r)) = (Fid::from_key(k), decode::<RelayoutRecord>(v)) {
                if r.fenced {
                    fenced.insert(fid);
                }
            }
        }
    }
    Ok((count, fenced))
}

/// Commits a transaction and waits until it is durable.
pub(crate) fn commit_durable(mdt: &Mdt, mut tx: Tx<'_>) -> Result<(), Status> {
    let batch = std::mem::take(&mut tx.batch);
    if batch.is_empty() {
        return Ok(());
    }
    let ticket = mdt.kv.commit(batch).map_err(kv_err)?;
    drop(tx);
    crate::mdt::note_modification(mdt);
    mdt.kv.wait_durable(ticket).map_err(kv_err)
}

/// Advances the modification counter (statistics).
pub fn note_modification(mdt: &Mdt) {
    mdt.modifications.fetch_add(1, Ordering::Relaxed);
}
