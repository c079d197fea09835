//! The metadata server (MDS): serves MDTs. docs/mds.md is the full map: every file, the
//! store's API, the order of a request, the commit and sync rules, the on-disk records.
//!
//! An MDT keeps inodes, directory entries, layouts and xattrs in the embedded KV store
//! (`nacre_mdstore::records` lists the tables). A modifying request runs under the MDT's write lock, adds
//! its changes **and its reply** to one batch and commits it to the journal; the reply is
//! sent after that journal write. It waits for the journal sync (group commit) only with
//! `sync_on_reply`, for a client's first change and for changelog consumer changes; other
//! changes become durable at `MdsOp::Sync` (`fsync`) or the commit thread's sync every
//! commit interval, and clients replay what `last_committed` has not passed yet. Cross-MDT
//! steps are durable before their reply. A resent request (same client uuid and xid) finds
//! its saved reply instead of running twice. File creation touches only the MDT: OST object
//! ids are allocated here and the objects are created by their first write.
//!
//! Layers, lowest first; a file uses only its own layer and lower ones, and no three files
//! use each other round in a circle (`tests/layers.rs` holds the table and the exceptions
//! left, `KNOWN_UPWARD` and `KNOWN_CIRCLES`):
//! * base: in-memory tables and pure helpers with no `crate::` import: exports, byte-range
//!   locks, exact sizes, destroy space, fileset cache, nodemaps, OST placement and peer
//!   connections (`osp`), statistics.
//! * store: the crate `nacre_mdstore`, the only user of `nacre_kv`'s tables: `records` (the
//!   schema and its versions) and `store` (`Store`: reads, allocation state, durability;
//!   `store::Tx`: the write lock, the batch, FID, object and transno allocation, saved
//!   replies; `Writes`; opening and format upgrades).
//! * target: `Mdt` and its transaction wrapper `mdt::Tx`, recovery (`replay`), access times,
//!   the changelog's writer, calls to peer MDTs.
//! * ops: one file per operation (`ops`), the cross-MDT intent machinery (`dne`), directory
//!   migration (`migrate`), `links`.
//! * services: eviction, locks, delegations, permissions, changelog consumers, the MGS audit copy,
//!   destroys, ownership changes, file migration (`relayout`), quotas, QoS.
//! * handler: `MdsHandler` (here), `execute`, `route`, capabilities, filesets, byte-range
//!   lock serving.
//!
//! Invariants: a name maps to exactly one inode; a change and its saved reply commit in one
//! batch, and the reply is sent only after that batch is in the journal; an inode's objects
//! are destroyed only once the change that dropped its last link (and last opener) is
//! durable: after the commit thread's sync past it, unless the reply waited for the sync.

pub mod admin_records;
pub mod atime;
mod batch_locks;
pub mod capas;
pub mod changelog;
pub mod changelog_state;
pub mod changelog_writer;
pub mod delegations;
pub mod destroy;
pub mod destroy_space;
pub mod dne;
pub mod eviction;
mod execute;
pub mod export;
pub mod fileset;
pub mod fileset_cache;
mod flock_serve;
pub mod flocks;
pub mod links;
pub mod locks;
pub mod mdt;
pub mod migrate;
pub mod nodemap;
pub mod qos;
mod route;

pub mod ops;
pub mod osp;
pub mod owners;
pub mod peers;
pub mod perm;
pub mod placement;
pub mod quota;
pub mod relayout;
pub mod replay;
pub mod replay_mdt;
pub mod sizes;
pub mod stats;

use execute::answer;
pub use execute::execute;
use mdt::Mdt;
use nacre_net::{Handler, Incoming, Outgoing};
use nacre_osd::mmp::Guard;
use nacre_types::Status;
use nacre_wire::decode_body;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use nacre_wire::nodemap::Nodemap;
use std::collections::HashMap;

use std::sync::{Arc, RwLock};

/// The MDS request handler for every MDT of this process.
#[derive(Default)]
pub struct MdsHandler {
    /// Keyed by target id (file-system slot and index: [`nacre_osd::Label::target_id`]), so
    /// several file systems' targets of one index are served apart.
    targets: RwLock<HashMap<u32, Guarded>>,
}

/// A target and, in a failover pair, the multi-mount protection it is served under.
type Guarded = (Arc<Mdt>, Option<Arc<Guard>>);

impl MdsHandler {
    /// Adds an MDT.
    pub fn add_target(&self, mdt: Arc<Mdt>) {
        self.add_guarded(mdt, None);
    }

    /// Adds an MDT of a failover pair: its requests are served only while `guard` holds
    /// the target (multi-mount protection), else answered `ENODEV` (the client tries the
    /// partner).
    pub fn add_guarded(&self, mdt: Arc<Mdt>, guard: Option<Arc<Guard>>) {
        let id = mdt.label.target_id();
        self.targets
            .write()
            .expect("targets")
            .insert(id, (mdt, guard));
    }

    /// Stops serving the MDT of target id `id`: its requests are answered `ENODEV` from now on.
    pub fn remove_target(&self, id: u32) -> Option<Arc<Mdt>> {
        let mdt = self
            .targets
            .write()
            .expect("targets")
            .remove(&id)
            .map(|(m, _)| m)?;
        // Its locks go with it; parked polls are answered so clients move on.
        mdt.ldlm.shut();
        mdt.flocks.shut();
        Some(mdt)
    }

    /// Enforces nodemaps `set` in this process once every delegation of every MDT served
    /// here is back ([`delegations::before_nodemap_change`]); but a set that revokes a
    /// client key is enforced at once (the key's holder must not keep its access for a
    /// lock callback timeout), the delegations called back after it: what a revoked
    /// holder had not sent is lost with it.
    pub fn change_nodemaps(&self, set: nacre_wire::nodemap::NodemapSet) {
        let active = nacre_wire::nodemap::active();
        if set.revoked.iter().any(|r| !active.revoked.contains(r)) {
            nacre_wire::nodemap::install(set);
            for m in self.all() {
                delegations::revoke_all(&m, "a client key was revoked");
            }
            return;
        }
        delegations::before_nodemap_change(&self.all(), || nacre_wire::nodemap::install(set))
    }

    /// Evicts, on every MDT served here, the clients whose key was revoked.
    pub fn evict_revoked(&self) -> usize {
        self.all().iter().map(|m| eviction::evict_revoked(m)).sum()
    }

    /// Every MDT served here.
    pub fn all(&self) -> Vec<Arc<Mdt>> {
        let targets = self.targets.read().expect("targets");
        targets.values().map(|(m, _)| m.clone()).collect()
    }

    /// The MDT of target id `id` ([`nacre_osd::Label::target_id`]).
    pub fn target(&self, id: u32) -> Option<Arc<Mdt>> {
        self.targets
            .read()
            .expect("targets")
            .get(&id)
            .map(|(m, _)| m.clone())
    }

    /// The MDT of target id `id` if this server may serve it now (see [`MdsHandler::add_guarded`]).
    fn serving(&self, id: u32) -> Option<Arc<Mdt>> {
        let (mdt, guard) = self.targets.read().expect("targets").get(&id).cloned()?;
        guard.is_none_or(|g| g.holds()).then_some(mdt)
    }
}

/// An answer whose owners are shown to a mapped client as its own ids, and whose root (a
/// connect's answer) is its fileset's.
fn map_answer(mdt: &Mdt, m: &nacre_wire::nodemap::Nodemap, out: Outgoing) -> Outgoing {
    // A body from a saved reply is in this protocol: one of another was refused `EPROTO`,
    // with no body, when it was read back (dne::outgoing); what does not decode is left as is.
    match decode_body::<nacre_wire::mds::MdsAnswer>(&out.body) {
        Ok(mut a) => {
            if let MdsReply::Connected { squashed, .. } = &mut a.reply {
                *squashed = !m.admin;
            }
            if let (MdsReply::Connected { root, .. }, Some(path)) = (&mut a.reply, &m.fileset) {
                match fileset::root_of(mdt, path) {
                    Ok(f) => *root = f,
                    Err(s) => {
                        tracing::warn!("{}: fileset {path}: {s}", mdt.label.name());
                        return Outgoing::error(s);
                    }
                }
            }
            nodemap::map_reply(m, &mut a.reply);
            if let Some(d) = a.dir.as_mut() {
                nodemap::map_attr(m, d);
            }
            Outgoing {
                body: nacre_wire::encode_body(&a),
                ..out
            }
        }
        Err(_) => out,
    }
}

/// The nodemap `call`'s caller is held to (None: none, or a peer MDT's call). The body must
/// be the request its header's opcode names (the role table judged that opcode), and a
/// call naming a peer MDT as its client must come from a server: a client claiming an
/// MDT's uuid (public in the configuration) is refused, never let past its nodemap.
fn caller_map(mdt: &Mdt, req: &Incoming, call: &MdsCall) -> Result<Option<Nodemap>, Status> {
    if call.op.opcode() != req.header.opcode {
        return Err(Status::Proto);
    }
    if mdt.osts.is_peer(&call.client) {
        if req.caller.role_learning() != nacre_wire::roles::Role::Server {
            return Err(Status::Perm);
        }
        return Ok(None);
    }
    // Refused callers make no export.
    let map = req.caller.nodemap()?;
    mdt.exports.claim(&call.client, &req.caller.tenant())?;
    Ok(map)
}

impl Handler for MdsHandler {
    fn weight(&self, req: &Incoming) -> u32 {
        self.serving(req.header.target)
            .map_or(0, |mdt| qos::weight(&mdt, req))
    }

    fn park(&self, req: Incoming) -> Option<Incoming> {
        // Lock polls wait for callbacks; changes that must wait for other clients' cancels
        // wait parked too. Their opcodes say so before anything is decoded.
        let poll = MdsOp::LockPoll {
            wait_ms: 0,
            epoch: 0,
        };
        let Some(mdt) = self.serving(req.header.target) else {
            return Some(req);
        };
        // A capped class's requests wait for their share of its rate (qos.rs).
        let req = qos::admit(&mdt, req)?;
        if flock_serve::is_flock(req.header.opcode) {
            // Byte-range locks: served here, in memory; a request that must wait stays
            // parked. One its caller may not send is refused by `handle`.
            return match decode_body::<MdsCall>(&req.body) {
                Ok(call) if caller_map(&mdt, &req, &call).is_ok() => {
                    flock_serve::serve(&mdt, req, call);
                    None
                }
                _ => Some(req),
            };
        }
        if req.header.opcode != poll.opcode() {
            // A change its caller may not make (a read-only nodemap, a false peer claim) is
            // refused by `handle`, before it could call anyone's locks back.
            if let Ok(call) = decode_body::<MdsCall>(&req.body) {
                match caller_map(&mdt, &req, &call) {
                    Err(_) => return Some(req),
                    Ok(Some(m)) if nodemap::check_readonly(&m, &call.op).is_err() => {
                        return Some(req)
                    }
                    Ok(_) => {}
                }
            }
            return locks::park_change(&mdt, req);
        }
        match decode_body::<MdsCall>(&req.body) {
            // A poll for another tenant's uuid is refused by `handle`.
            Ok(call) if caller_map(&mdt, &req, &call).is_err() => Some(req),
            Ok(MdsCall {
                client,
                op: MdsOp::LockPoll { wait_ms, epoch },
                ..
            }) => {
                // A client that knew another incarnation of the MDT must reconnect (and
                // replay its locks) first: answered at once.
                let wait_ms = if epoch != 0 && epoch != mdt.epoch {
                    0
                } else {
                    wait_ms
                };
                locks::poll(&mdt, client, wait_ms, req);
                None
            }
            _ => Some(req),
        }
    }

    fn handle(&self, req: &Incoming) -> Outgoing {
        let Some(mdt) = self.serving(req.header.target) else {
            return Outgoing::error(Status::NoDev);
        };
        let mut call: MdsCall = match decode_body(&req.body) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("{}: bad request from {}: {e}", mdt.label.name(), req.peer);
                return Outgoing::error(Status::Proto);
            }
        };
        // A client of a nodemap acts as the file-system ids it maps to (peer MDTs never).
        let map = match caller_map(&mdt, req, &call) {
            Ok(m) => m,
            Err(s) => {
                nacre_net::caller::refused(|| {
                    format!(
                        "{}: refused {:#06x} from {}: {}",
                        mdt.label.name(),
                        req.header.opcode,
                        req.caller.describe(),
                        nacre_net::caller::refusal_reason(s)
                    )
                });
                return Outgoing::error(s);
            }
        };
        if let Some(m) = &map {
            if let Err(s) = nodemap::check_readonly(m, &call.op) {
                return Outgoing::error(s);
            }
            if let Some(path) = &m.fileset {
                if let Err(s) = fileset::check(&mdt, path, &call.op) {
                    return Outgoing::error(s);
                }
            }
            // A delegated directory's creates are checked by the client itself, with the
            // ids it has: only a client whose ids are the file system's may check them.
            if matches!(call.op, MdsOp::DelegateDir { .. }) && !m.is_identity() {
                return Outgoing::error(Status::NotSupp);
            }
            nodemap::map_request(m, &mut call.cred, &mut call.op);
        }
        let out = execute(&mdt, &call, req.header.xid, &nacre_net::peer_nid(&req.peer));
        let out = answer(&mdt, &call, req.header.xid, out);
        let out = capas::attach(&mdt, req, &call, out);
        match &map {
            Some(m) if out.status == Status::Ok && (!m.is_identity() || m.fileset.is_some()) => {
                map_answer(&mdt, m, out)
            }
            _ => out,
        }
    }

    fn affinity(&self, req: &Incoming) -> Option<u64> {
        let call: MdsCall = decode_body(&req.body).ok()?;
        let fid = call.op.key_fid()?;
        Some(fid.seq.rotate_left(32) ^ u64::from(fid.oid))
    }

    fn fault_name(&self, req: &Incoming) -> Option<String> {
        let call: MdsCall = decode_body(&req.body).ok()?;
        let op = stats::MD_OPS.get((call.op.opcode() & 0xff) as usize - 1)?;
        Some(format!("mds.{op}"))
    }
}
