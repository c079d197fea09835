//! The metadata client: sends [`MdsCall`]s carrying the client uuid and the lowest xid still
//! waiting for a reply, so the MDS can keep exactly the saved replies a resend might need.

use crate::{ClientError, Result};
use nacre_net::import_state;
use nacre_net::rpc::{decode_reply, request};
use nacre_net::Connection;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsAnswer, MdsCall, MdsOp, MdsReply, ReopenEntry, REOPEN_FIDS_MAX};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a request answered `EINPROGRESS` (the MDS is busy with it: a directory
/// migration holds what it touches, or a cross-MDT operation waits for a peer) is resent
/// before the error reaches the application.
pub const INPROGRESS_WAIT_MS_MAX: u64 = 300_000;
/// First pause before resending such a request; doubled up to [`INPROGRESS_PAUSE_MS_MAX`].
const INPROGRESS_PAUSE_MS_MIN: u64 = 20;
/// Longest pause between resends.
const INPROGRESS_PAUSE_MS_MAX: u64 = 1_000;
/// Uncommitted requests a client keeps for replay before it asks the MDT to commit
/// (`Sync`), so the list stays bounded however fast it changes things.
pub const REPLAY_LIST_MAX: usize = 16_384;

/// Metadata client for one MDT.
pub struct Mdc {
    conn: Arc<Connection>,
    /// This client's identity at the MDT (its export there); replaced after an eviction.
    uuid: Mutex<[u8; 16]>,
    /// Evictions survived: handles opened in an earlier incarnation are void.
    incarnation: AtomicU64,
    /// Files this client holds open on the MDT, with handle counts (for open replay).
    /// Files open at the MDT: (handles, of which opened for writing).
    opens: Mutex<HashMap<Fid, (u32, u32)>>,
    /// The connection's link count when the opens were last registered with the MDT: a
    /// new link may lead to a restarted MDT that forgot them.
    reopened_at: AtomicU64,
    /// Set while a `Reopen` is being sent (it must not trigger another).
    reopening: AtomicBool,
    in_flight: Mutex<BTreeSet<u64>>,
    target: u32,
    /// Requests the MDT answered but has not committed, by transno: (xid, operation),
    /// replayed if it restarts (Lustre's replay list).
    replay: Mutex<BTreeMap<u64, ReplayEntry>>,
    /// The highest transno the MDT said is committed.
    last_committed: AtomicU64,
    /// The MDT's epoch when last connected (0: not yet).
    epoch: AtomicU64,
    /// Where the object capabilities of answers go.
    capas: Arc<crate::capas::Capas>,
    /// The root directory the MDT gave this client when it connected (its nodemap's
    /// fileset, or the file system's root).
    root: Mutex<Option<Fid>>,
    /// This client's root is squashed by its nodemap (as the MDT said at connect).
    squashed: std::sync::atomic::AtomicBool,
    /// Recovery counters (`*.import`).
    pub(crate) replay_stats: ReplayStats,
    /// Metadata locks held on this MDT (only once callbacks are handled: [`Mdc::start_lock_callbacks`]).
    pub locks: nacre_ldlm::client::ClientLocks,
    /// Where revoked locks go to have the kernel forget what they covered.
    sink: std::sync::OnceLock<LockSink>,
    /// The callback thread is to stop (the client disconnects).
    locks_stopped: AtomicBool,
    /// The byte-range locks this client holds on this MDT (as the MDT granted them; owners
    /// under [`OWN`]), set again after a restart of the MDT.
    pub(crate) flocks: nacre_ldlm::flock::FlockTable,
    /// Attributes of this MDT's directories kept under `UPDATE` locks.
    pub dir_attrs: crate::dirattrs::DirAttrs,
    /// Attributes of files made and written here, kept under their `UPDATE` locks
    /// (crate::vouched).
    pub vouched: crate::vouched::Vouched,
    /// Called before every request goes out (the client sends the delegated creates it
    /// depends on: delegated.rs).
    before: std::sync::OnceLock<BeforeRequest>,
}

/// What runs before a request goes out ([`Mdc::set_before_request`]).
pub type BeforeRequest = Arc<dyn Fn(&MdsOp) + Send + Sync>;

/// The client of the owners in [`Mdc::flocks`] (the table holds this client's alone).
pub(crate) const OWN: [u8; 16] = [0; 16];

/// Told which locks are gone (called back, cancelled from the LRU, or lost with an
/// eviction or a restart of the MDT), before they are cancelled: has the kernel forget
/// what they covered.
pub type LockSink = Arc<dyn Fn(&[nacre_ldlm::client::Revoked]) + Send + Sync>;

/// A change kept for replay: its xid, request, reply and the versions it found.
type ReplayEntry = (u64, MdsOp, MdsReply, Vec<(Fid, u64)>);

/// What this client replayed across MDT restarts.
#[derive(Default)]
pub(crate) struct ReplayStats {
    /// MDT restarts this client recovered from.
    pub recoveries: AtomicU64,
    /// Requests replayed.
    pub replayed: AtomicU64,
    /// Replays the MDT refused or that failed (their effect is lost).
    pub lost: AtomicU64,
}

impl Mdc {
    /// The connection to the MDT.
    pub fn conn(&self) -> &Arc<Connection> {
        &self.conn
    }

    /// A client of MDT `target` over `conn`, keeping the object capabilities it is given
    /// in `capas`.
    pub fn new(conn: Arc<Connection>, target: u32, capas: Arc<crate::capas::Capas>) -> Mdc {
        Mdc {
            capas,
            conn,
            uuid: Mutex::new(*uuid::Uuid::new_v4().as_bytes()),
            incarnation: AtomicU64::new(0),
            opens: Mutex::new(HashMap::new()),
            reopened_at: AtomicU64::new(0),
            reopening: AtomicBool::new(false),
            in_flight: Mutex::new(BTreeSet::new()),
            target,
            replay: Mutex::new(BTreeMap::new()),
            last_committed: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            root: Mutex::new(None),
            squashed: std::sync::atomic::AtomicBool::new(false),
            replay_stats: ReplayStats::default(),
            locks: nacre_ldlm::client::ClientLocks::default(),
            sink: std::sync::OnceLock::new(),
            locks_stopped: AtomicBool::new(false),
            flocks: Default::default(),
            dir_attrs: Default::default(),
            vouched: Default::default(),
            before: std::sync::OnceLock::new(),
        }
    }

    /// Sets what runs before every request goes out (once).
    pub fn set_before_request(&self, f: BeforeRequest) {
        let _ = self.before.set(f);
    }

    /// Requests kept for replay now.
    pub fn replay_pending(&self) -> usize {
        self.replay.lock().len()
    }

    /// Notes an answer: keeps a change the MDT has not committed, drops those it has.
    /// Returns true if the list is full (the caller asks the MDT to commit).
    fn note_answer(&self, op: Option<MdsOp>, xid: u64, a: &MdsAnswer) -> bool {
        self.capas.note(&a.capas);
        // An answer from a new incarnation of the MDT before this client reconnected to it
        // (its `Connect` decides what was lost): its `last_committed` is not about our
        // changes of the old one.
        let known = self.epoch.load(Ordering::Acquire);
        // (A change answered in that moment is not kept: the restart right before it must
        // be followed by another before the next commit to lose it.)
        if known != 0 && known != a.epoch {
            return false;
        }
        let committed = self
            .last_committed
            .fetch_max(a.last_committed, Ordering::AcqRel)
            .max(a.last_committed);
        let mut list = self.replay.lock();
        if let Some(op) = op.filter(|_| a.transno > committed) {
            list.insert(
                a.transno,
                (xid, op, a.reply.clone(), a.pre_versions.clone()),
            );
        }
        if list.first_key_value().is_some_and(|(t, _)| *t <= committed) {
            *list = list.split_off(&(committed + 1));
        }
        list.len() > REPLAY_LIST_MAX
    }

    /// Starts a thread that pings the MDT every `interval_ms` (0: none) while this client
    /// exists, so the MDT does not evict it when idle. A ping to an MDT that is down waits
    /// like any request; the thread holds only a weak reference.
    pub fn start_pinger(self: &Arc<Self>, interval_ms: u64) {
        if interval_ms == 0 {
            return;
        }
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("pinger-MDT{:04x}", self.target))
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(interval_ms));
                let Some(mdc) = me.upgrade() else { return };
                if let Err(e) = mdc.call_own(MdsOp::Ping) {
                    tracing::debug!("ping of MDT{:04x}: {e}", mdc.target);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no pinger for MDT{:04x}: {e}", self.target);
        }
    }

    /// A handle on `fid` was opened at the MDT (for writing if `writer`).
    pub fn note_open(&self, fid: Fid, writer: bool) {
        let mut opens = self.opens.lock();
        let e = opens.entry(fid).or_insert((0, 0));
        e.0 += 1;
        e.1 += u32::from(writer);
    }

    /// True if this client holds `fid` open for writing at the MDT.
    pub fn holds_writer(&self, fid: Fid) -> bool {
        self.opens.lock().get(&fid).is_some_and(|n| n.1 > 0)
    }

    /// Opens this client holds at the MDT now (files open here, and opens kept).
    pub fn open_count(&self) -> u64 {
        self.opens.lock().values().map(|n| u64::from(n.0)).sum()
    }

    /// A handle on `fid` was closed (one opened for writing if `writer`).
    pub fn note_close(&self, fid: Fid, writer: bool) {
        let mut opens = self.opens.lock();
        if let Some(n) = opens.get_mut(&fid) {
            n.0 -= 1;
            n.1 = n.1.saturating_sub(u32::from(writer));
            if n.0 == 0 {
                opens.remove(&fid);
            }
        }
    }

    /// After a new link (the MDT may have restarted and forgotten this client's opens): tells
    /// the MDT which files this client holds open (Lustre's open replay). Idempotent at the
    /// MDT, so a link that did not lead to a restart costs one small request.
    fn reopen_if_relinked(&self) {
        let links = self.conn.links_made();
        if self.reopened_at.load(Ordering::Acquire) == links
            || self.reopening.swap(true, Ordering::AcqRel)
        {
            return;
        }
        if let Err(e) = self.replay_if_restarted() {
            tracing::warn!("replay to MDT{:04x}: {e}", self.target);
        }
        let opens: Vec<ReopenEntry> = self
            .opens
            .lock()
            .iter()
            .map(|(f, n)| ReopenEntry {
                fid: *f,
                handles: n.0,
                writers: n.1,
            })
            .collect();
        let mut ok = true;
        for chunk in opens.chunks(REOPEN_FIDS_MAX) {
            let op = MdsOp::Reopen {
                opens: chunk.to_vec(),
            };
            // The opens of every user of this node: sent as root, whom the MDT maps as
            // this node's nodemap says (a squashed node takes back, for writing, only what
            // its squashed root may write).
            if let Err(e) = nacre_types::cred::with(nacre_types::Cred::root(), || self.call_own(op))
            {
                tracing::warn!("reopen on MDT{:04x}: {e}", self.target);
                ok = false;
                break;
            }
        }
        if ok {
            self.reopened_at.store(links, Ordering::Release);
        }
        self.reopening.store(false, Ordering::Release);
    }

    /// The root directory of this client: the one the MDT gave when this client connected
    /// (a first request links up and connects if nothing has yet).
    pub fn root(&self) -> Result<Fid> {
        if let Some(r) = *self.root.lock() {
            return Ok(r);
        }
        self.call(MdsOp::Ping)?;
        (*self.root.lock()).ok_or(ClientError::Rpc(nacre_net::rpc::RpcError::Status(
            Status::Proto,
        )))
    }

    /// True when the MDT squashes this client's root (its nodemap is not an admin one), as
    /// it said when this client last connected (a first request connects).
    pub fn root_squashed(&self) -> Result<bool> {
        self.root()?;
        Ok(self.squashed.load(Ordering::Relaxed))
    }

    /// After a new link: asks the MDT who it is now; if it restarted and is recovering,
    /// replays every request it answered but had not committed, in transno order, then
    /// says `ReplayDone` (which returns once the MDT's recovery is complete).
    fn replay_if_restarted(&self) -> Result<()> {
        let MdsReply::Connected {
            epoch,
            recovering,
            committed_at_start,
            root,
            squashed,
            ..
        } = self.call_own(MdsOp::Connect)?
        else {
            return Err(ClientError::Rpc(nacre_net::rpc::RpcError::Status(
                Status::Proto,
            )));
        };
        *self.root.lock() = Some(root);
        self.squashed.store(squashed, Ordering::Relaxed);
        let before = self.epoch.swap(epoch, Ordering::AcqRel);
        if before == 0 || before == epoch {
            return Ok(());
        }
        // The restarted MDT holds none of this client's locks: they are replayed (and kept
        // if nothing changed there since the restart).
        self.replay_locks();
        self.replay_flocks();
        // A new MDT incarnation: what it committed before the restart is in; the rest
        // was lost with it and is replayed.
        let list: Vec<(u64, ReplayEntry)> = {
            let mut list = self.replay.lock();
            std::mem::take(&mut *list)
                .into_iter()
                .filter(|(t, _)| *t > committed_at_start)
                .collect()
        };
        self.replay_stats.recoveries.fetch_add(1, Ordering::Relaxed);
        if !recovering {
            if !list.is_empty() {
                self.replay_stats
                    .lost
                    .fetch_add(list.len() as u64, Ordering::Relaxed);
                tracing::error!(
                    "MDT{:04x} restarted and finished recovery without this client: {} \
                     acknowledged changes were lost",
                    self.target,
                    list.len()
                );
            }
            return Ok(());
        }
        tracing::info!(
            "MDT{:04x} restarted: replaying {} requests",
            self.target,
            list.len()
        );
        let total = list.len();
        for (i, (transno, entry)) in list.into_iter().enumerate() {
            match self.send_replay(transno, entry) {
                Ok(()) => {
                    self.replay_stats.replayed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.status() == Status::Shutdown => {
                    let left = (total - i) as u64;
                    self.replay_stats.lost.fetch_add(left, Ordering::Relaxed);
                    tracing::error!(
                        "MDT{:04x} closed its recovery window before this client replayed: \
                         {left} acknowledged changes were lost",
                        self.target
                    );
                    self.evicted(self.uuid());
                    return Ok(());
                }
                Err(e) => {
                    self.replay_stats.lost.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(
                        "MDT{:04x}: replay of transno {transno} failed: {e}",
                        self.target
                    );
                }
            }
        }
        self.call_own(MdsOp::ReplayDone)?;
        Ok(())
    }

    /// Sends one replay with the request's original xid and waits for its answer.
    fn send_replay(&self, transno: u64, entry: ReplayEntry) -> Result<()> {
        let (xid, op, reply, pre_versions) = entry;
        let call = MdsCall {
            lock_bits: 0,
            jobid: nacre_types::jobid::current(),
            cred: nacre_types::cred::current(),
            client: self.uuid(),
            replied_below: 0,
            op: MdsOp::Replay {
                transno,
                op: Box::new(op.clone()),
                reply: Box::new(reply),
                pre_versions,
            },
        };
        let opcode = call.op.opcode();
        let answer = self
            .conn
            .start_xid(xid, request(opcode, self.target, &call, None).inline())
            .and_then(|p| p.wait())
            .map_err(|e| ClientError::Rpc(e.into()))
            .and_then(|reply| Ok(decode_reply::<MdsAnswer>(reply)?.0))?;
        // Run again, it has a new transno: kept until the MDT commits it (at the end of
        // its recovery).
        self.note_answer(Some(op), xid, &answer);
        Ok(())
    }

    /// This client's current uuid at the MDT.
    pub fn uuid(&self) -> [u8; 16] {
        *self.uuid.lock()
    }

    /// How many times this client was evicted by the MDT (and came back as a new client).
    pub fn incarnation(&self) -> u64 {
        self.incarnation.load(Ordering::Acquire)
    }

    /// The MDT evicted the uuid `was`: become a new client (once, however many requests
    /// learn it at the same time).
    fn evicted(&self, was: [u8; 16]) {
        let mut uuid = self.uuid.lock();
        if *uuid != was {
            return;
        }
        *uuid = *uuid::Uuid::new_v4().as_bytes();
        self.incarnation.fetch_add(1, Ordering::AcqRel);
        // Its locks went with its export.
        self.drop_locks();
        self.flocks.drop_client(&OWN);
        // Its handles are void: nothing to reopen.
        self.opens.lock().clear();
        self.conn.note_state(import_state::EVICTED);
        self.conn.note_state(import_state::FULL);
        tracing::warn!(
            "evicted by MDT{:04x}: files open there before are closed; reconnected as {}",
            self.target,
            uuid::Uuid::from_bytes(*uuid)
        );
    }

    /// Sends one operation and waits for its reply (resending across reconnects). A request
    /// refused because this client was evicted is sent again once as the new client.
    pub fn call(&self, op: MdsOp) -> Result<MdsReply> {
        self.call_with(op, 0).map(|(reply, _)| reply)
    }

    /// [`Mdc::call`] asking for `lock_bits` on the inode the reply names: the lock granted
    /// with it, if any, is held (and returned) unless its callback came first.
    pub fn call_with(
        &self,
        op: MdsOp,
        lock_bits: u8,
    ) -> Result<(MdsReply, Option<nacre_ldlm::msg::LockRef>)> {
        if let Some(before) = self.before.get() {
            before(&op);
        }
        self.call_unhooked(op, lock_bits, true, None)
            .map(|(reply, lock, _)| (reply, lock))
    }

    /// A request of this `Mdc`'s own (reconnection, replay, commit, lock traffic): sent
    /// without the hook of [`Mdc::set_before_request`], which may itself be sending.
    pub(crate) fn call_own(&self, op: MdsOp) -> Result<MdsReply> {
        self.call_unhooked(op, 0, true, None)
            .map(|(reply, _, _)| reply)
    }

    /// A request that is this client incarnation's only: one refused because the client
    /// was evicted fails (`ESHUTDOWN`) instead of going again as the new client (changes
    /// a client answered itself before its eviction are void: crate::delegated).
    /// `started`: its change of a directory's names, started by the caller
    /// ([`crate::dirattrs::DirAttrs::change_start`]) and ended here.
    pub(crate) fn call_unrenewed(&self, op: MdsOp, started: Option<u64>) -> Result<MdsReply> {
        self.call_unhooked(op, 0, false, started)
            .map(|(reply, _, _)| reply)
    }

    /// [`Mdc::call_unrenewed`] for a `CreateBatch` asking for `lock_bits` on each file it
    /// makes: the reply and the locks the MDT says it granted, not yet held here (the
    /// caller takes those of its own files with [`nacre_ldlm::client::Locks::granted`];
    /// none without a lock sink).
    pub(crate) fn call_batch(
        &self,
        op: MdsOp,
        lock_bits: u8,
        started: Option<u64>,
    ) -> Result<(MdsReply, Vec<nacre_ldlm::msg::LockRef>)> {
        self.call_unhooked(op, lock_bits, false, started)
            .map(|(reply, _, locks)| (reply, locks))
    }

    /// [`Mdc::call_with`] without the hook; `renew`: a request refused because this client
    /// was evicted goes again once as the new client; `started`: the generation of its
    /// change of a directory's names if the caller started it (a delegated batch starts
    /// when its items are taken: crate::delegated::send), ended here whatever comes.
    fn call_unhooked(
        &self,
        op: MdsOp,
        lock_bits: u8,
        renew: bool,
        started: Option<u64>,
    ) -> Result<(
        MdsReply,
        Option<nacre_ldlm::msg::LockRef>,
        Vec<nacre_ldlm::msg::LockRef>,
    )> {
        let lock_bits = match self.sink.get() {
            Some(_) => lock_bits,
            None => 0,
        };
        let opcode = op.opcode();
        // A change is kept for replay until committed: the operation is needed again then.
        let keep = op.is_modifying().then(|| op.clone());
        // Kept directory attributes: what this request changes is no longer good; what a
        // read under an UPDATE lock finds may be kept (crate::dirattrs).
        let dir_change = crate::dirattrs::DirAttrs::classify(&op);
        let dir_gen = match started {
            Some(gen) => {
                assert!(
                    matches!(dir_change, crate::dirattrs::Change::Names(_)),
                    "only a change of a directory's names is started before its request"
                );
                gen
            }
            None => self.dir_attrs.change_start(dir_change),
        };
        // Kept file attributes: a change that may touch a file is counted (crate::vouched).
        let file_change = crate::vouched::touches_files(&op);
        if file_change {
            self.vouched.change_start();
        }
        // A write of bytes on the MDT changes its own file only (crate::vouched).
        let dom_written = match &op {
            MdsOp::DomWrite { fid, .. } | MdsOp::DomAppend { fid, .. } => Some(*fid),
            _ => None,
        };
        if dom_written.is_some() {
            self.vouched.dom_writing();
        }
        let dir_read = match &op {
            MdsOp::GetAttr { fid } if lock_bits & nacre_ldlm::msg::UPDATE != 0 => {
                Some(self.dir_attrs.snapshot(*fid))
            }
            _ => None,
        };
        let (xid, replied_below) = {
            let mut in_flight = self.in_flight.lock();
            let xid = self.conn.alloc_xid();
            let lowest = in_flight.first().copied().unwrap_or(xid).min(xid);
            in_flight.insert(xid);
            (xid, lowest)
        };
        let mut call = MdsCall {
            lock_bits,
            jobid: nacre_types::jobid::current(),
            cred: nacre_types::cred::current(),
            client: self.uuid(),
            replied_below,
            op,
        };
        let mut renewed = false;
        // Resent with the same xid while the MDS answers EINPROGRESS, so a request it did
        // start is finished (and answered from its saved reply), never run twice.
        let deadline = Instant::now() + Duration::from_millis(INPROGRESS_WAIT_MS_MAX);
        let mut pause = INPROGRESS_PAUSE_MS_MIN;
        let result = loop {
            let result = self
                .conn
                .start_xid(xid, request(opcode, self.target, &call, None).inline())
                .and_then(|p| p.wait())
                .map_err(|e| ClientError::Rpc(e.into()))
                .and_then(|reply| Ok(decode_reply::<MdsAnswer>(reply)?.0));
            match result {
                Err(e) if e.status() == Status::Shutdown && !renew => {
                    self.evicted(call.client);
                    break Err(e);
                }
                Err(e) if e.status() == Status::Shutdown && !renewed => {
                    // Refused before it ran: safe to send as the new client.
                    self.evicted(call.client);
                    call.client = self.uuid();
                    renewed = true;
                }
                Err(e) if e.status() == Status::InProgress && Instant::now() < deadline => {
                    // The MDT may have restarted and be waiting for this client's replays.
                    if !self.reopening.load(Ordering::Acquire) {
                        self.reopen_if_relinked();
                    }
                    std::thread::sleep(Duration::from_millis(pause));
                    pause = (pause * 2).min(INPROGRESS_PAUSE_MS_MAX);
                }
                other => break other,
            }
        };
        let result = result.and_then(|answer| match answer.reply.check() {
            Ok(()) => Ok(answer),
            Err(what) => Err(ClientError::bad_reply(
                format!("MDT{:04x}", self.target),
                what,
            )),
        });
        self.in_flight.lock().remove(&xid);
        if file_change {
            self.vouched.change_end();
        }
        if let Some(fid) = dom_written {
            let attr = match &result {
                Ok(MdsAnswer {
                    reply: MdsReply::Attr(a),
                    ..
                }) => Some(a),
                _ => None,
            };
            self.vouched.dom_wrote(fid, attr);
        }
        let full = match &result {
            Ok(answer) => self.note_answer(keep, xid, answer),
            Err(_) => false,
        };
        if !self.reopening.load(Ordering::Acquire) {
            self.reopen_if_relinked();
        }
        if full && opcode != MdsOp::Sync.opcode() {
            // Too many uncommitted changes kept: have the MDT commit them.
            if let Err(e) = self.call_own(MdsOp::Sync) {
                tracing::debug!("sync of MDT{:04x}: {e}", self.target);
            }
        }
        let held = |h: u64| self.locks.holds(h);
        // A batch that left items untried (its reply was full) still has them to make:
        // the directory's attributes after it are not its state once they are.
        let after = result
            .as_ref()
            .ok()
            .filter(|a| !left_untried(&a.reply))
            .and_then(|a| a.dir.clone());
        self.dir_attrs.change_done(dir_change, dir_gen, after, held);
        result.map(|a| {
            let lock = a
                .lock
                .filter(|l| l.is_valid() && lock_bits != 0 && self.locks.granted(*l));
            let locks = match lock_bits {
                0 => Vec::new(),
                _ => a.locks.into_iter().filter(|l| l.is_valid()).collect(),
            };
            if let (Some(snap), MdsReply::Entry { attr, .. }) = (dir_read, &a.reply) {
                if let Some(h) = self.locks.holding(attr.fid, nacre_ldlm::msg::UPDATE) {
                    self.dir_attrs.put_read(snap, attr.clone(), h);
                }
            }
            (a.reply, lock, locks)
        })
    }

    /// The attributes of directory `fid` kept under an `UPDATE` lock still held
    /// (crate::dirattrs), if any.
    pub fn kept_dir_attr(&self, fid: Fid) -> Option<nacre_types::Attr> {
        self.dir_attrs.get(fid, |h| self.locks.holds(h))
    }

    /// Replays the locks held here to a restarted MDT; drops those it refuses (and all of
    /// them if the replay fails), having the kernel forget what they covered.
    fn replay_locks(&self) {
        let held = self.locks.held();
        let mut refused = Vec::new();
        for chunk in held.chunks(nacre_ldlm::msg::REFS_PER_MESSAGE_MAX) {
            let op = MdsOp::LockReplay {
                locks: chunk.to_vec(),
            };
            match self.call_own(op) {
                Ok(MdsReply::LocksRefused(h)) => refused.extend(h),
                other => {
                    tracing::info!(
                        "lock replay to MDT{:04x}: {:?}; dropping every lock",
                        self.target,
                        other.err()
                    );
                    self.drop_locks();
                    return;
                }
            }
        }
        let gone = self.locks.remove(&refused);
        if !held.is_empty() {
            tracing::info!(
                "MDT{:04x} restarted: {} locks replayed, {} refused",
                self.target,
                held.len(),
                gone.len()
            );
        }
        if let (false, Some(sink)) = (gone.is_empty(), self.sink.get()) {
            sink(&gone);
        }
    }

    /// Sets the byte-range locks held here again on a restarted MDT (during its recovery
    /// window, before other clients' new requests); one another client took meanwhile is
    /// lost, and said so in the log.
    fn replay_flocks(&self) {
        let (mut set, mut lost) = (0, 0);
        for (fid, l) in self.flocks.all() {
            let op = MdsOp::Flock {
                fid,
                owner: l.owner.owner,
                pid: l.pid,
                kind: match l.write {
                    true => nacre_ldlm::flock::FlockKind::Write,
                    false => nacre_ldlm::flock::FlockKind::Read,
                },
                start: l.start,
                end: l.end,
                wait_ms: 0,
                reclaim: true,
            };
            match self.call_own(op) {
                Ok(MdsReply::Done) => set += 1,
                other => {
                    lost += 1;
                    tracing::error!(
                        "byte-range lock {}..={} on {fid} lost with the restart of MDT{:04x}: {:?}",
                        l.start,
                        l.end,
                        self.target,
                        other.err()
                    );
                    let range = (l.start, l.end);
                    let unlock = nacre_ldlm::flock::FlockKind::Unlock;
                    self.flocks.set(fid, l.owner, 0, unlock, range, false);
                }
            }
        }
        if set + lost > 0 {
            tracing::info!(
                "MDT{:04x} restarted: {set} byte-range locks set again, {lost} lost",
                self.target
            );
        }
    }

    /// Stops the callback thread (before a disconnect: its polls must not follow it). A
    /// poll parked at the MDT is answered by the disconnect.
    pub fn stop_lock_callbacks(&self) {
        self.locks_stopped.store(true, Ordering::Release);
    }

    /// Drops every lock held here and has the kernel forget what they covered.
    fn drop_locks(&self) {
        let all = self.locks.drain();
        if let (false, Some(sink)) = (all.is_empty(), self.sink.get()) {
            sink(&all);
        }
    }

    /// Gives lock `handle` back of this client's own will: the sink hears of it first (the
    /// kernel forgets what it covered), then the MDT.
    pub fn give_back(&self, handle: u64) {
        let gone = self.locks.take_back(&[handle]);
        if gone.is_empty() {
            return;
        }
        if let Some(sink) = self.sink.get() {
            sink(&gone);
        }
        self.cancel_locks(&[handle]);
    }

    /// Gives locks back to the MDT (best effort: an MDT that lost them has nothing to
    /// cancel).
    fn cancel_locks(&self, handles: &[u64]) {
        for chunk in handles.chunks(nacre_ldlm::msg::REFS_PER_MESSAGE_MAX) {
            let op = MdsOp::LockCancel {
                handles: chunk.to_vec(),
            };
            if let Err(e) = self.call_own(op) {
                tracing::debug!("lock cancel on MDT{:04x}: {e}", self.target);
            }
        }
    }

    /// Starts taking locks on this MDT: a thread polls it for callbacks (each wait shorter
    /// than `wait_ms`), hands the revoked locks to `sink`, then cancels them; it also
    /// cancels the least recently used locks past the LRU bound. After a restart of the
    /// MDT the locks are replayed. Holds the client weakly.
    pub fn start_lock_callbacks(self: &Arc<Self>, sink: LockSink, wait_ms: u64) {
        if self.sink.set(sink).is_err() {
            return;
        }
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(format!("ldlm-cb-MDT{:04x}", self.target))
            .spawn(move || {
                loop {
                    let Some(mdc) = me.upgrade() else { return };
                    if mdc.locks_stopped.load(Ordering::Acquire) {
                        return;
                    }
                    // A poll of a restarted MDT comes back at once; the call then reconnects
                    // and replays the locks (`replay_if_restarted`).
                    let epoch = mdc.epoch.load(Ordering::Acquire);
                    match mdc.call_own(MdsOp::LockPoll { wait_ms, epoch }) {
                        Ok(MdsReply::Blocking(refs)) if !refs.is_empty() => {
                            // Held, a test keeps the client from acting on callbacks (and
                            // from hearing of the eviction that follows) until its own
                            // next request.
                            nacre_net::fault::point("client.lock_poll.blocking");
                            let revoked = mdc.locks.blocking(&refs);
                            if let Some(sink) = mdc.sink.get() {
                                sink(&revoked);
                            }
                            let handles: Vec<u64> = refs.iter().map(|r| r.handle).collect();
                            mdc.cancel_locks(&handles);
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!("lock poll of MDT{:04x}: {e}", mdc.target);
                            mdc.drop_locks();
                            drop(mdc);
                            std::thread::sleep(Duration::from_millis(LOCK_POLL_RETRY_MS));
                            continue;
                        }
                    }
                    let excess = mdc.locks.lru_excess();
                    if !excess.is_empty() {
                        if let Some(sink) = mdc.sink.get() {
                            sink(&excess);
                        }
                        let handles: Vec<u64> = excess.iter().map(|r| r.lock.handle).collect();
                        mdc.cancel_locks(&handles);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("no lock callback thread for MDT{:04x}: {e}", self.target);
        }
    }
}

/// Pause before polling again after a failed lock poll.
const LOCK_POLL_RETRY_MS: u64 = 200;

/// True if `reply` is a batch's that left items untried (`E2BIG`: its reply was full).
fn left_untried(reply: &MdsReply) -> bool {
    match reply {
        MdsReply::Created(r) => r.iter().any(|r| matches!(r, Err(Status::TooBig))),
        MdsReply::Unlinked(r) => r.iter().any(|r| matches!(r, Err(Status::TooBig))),
        _ => false,
    }
}
