//! The object storage server (OSS): serves the OSTs of one process.
//!
//! Each request names its OST in the frame header; the handler decodes an `OssCall` around an
//! `OssRequest`, runs it against that OST's `ObjectStore` (`nacre-osd`) and replies. Bulk data
//! arrives page-aligned from the network layer, with its chunks' checksums, and goes to the
//! object store without another copy. A write's bytes are reserved within the quota slave's
//! grants for the object's owner first (lib.rs); an object records its owner in the
//! `user.nacre.owner` extended attribute. A write is acknowledged once its `pwrite`
//! returned: with O_DIRECT the data is on the device; a buffered tail is in the OSS node's
//! page cache, which a kill of the server process does not lose. `Sync` fdatasyncs an
//! object (a client's `fsync`).
//!
//! The server process gives the OSS three service pools, as Lustre's OSS has: `ost_io` for
//! data (write, read, punch, fallocate, sync), `ost_create` for the MDT's object requests
//! (destroy, set owner), `ost` for the rest (enqueues, fences, data versions, quota
//! requests). Glimpses, statfs, owners, lock polls, cancels, replays, glimpse answers and
//! disconnects are served on the network thread that read them (`oss::INLINE_OPCODES` in
//! `nacre-wire`). Reads of at most 256 KiB
//! queued together are served as one batch by one service thread: each checked and locked
//! as alone, then their data read from the disk at once (`ObjectStore::read_many`), then
//! each replied to.
//!
//! * `qos`: a client I/O's QoS class, held first if capped.
//! * `nodemap`: read-only refusals (`EROFS`), the owner a mapped client's write gives a new
//!   object.
//! * `capas`: every client data request authorized by a capability, or by a lock granted
//!   with one.
//! * `claims`: client uuids bound to the key identity that used them first.
//! * `locks`: the OST's extent locks: read locks granted with reads (and write locks with
//!   writes that ask), explicit enqueues, what each request revokes, parked changes, callback
//!   polls, and evicted clients refused with `ESHUTDOWN` (docs/locking.md).
//! * `grants`: space promised to clients for their write-behind, counted against free space;
//!   an upper bound is kept on disk and held back after a restart until claimed.
//! * `recovery`: the recovery window after a start: lock holders are listed on disk, and
//!   data requests are answered `EINPROGRESS` until they took their locks back (at most
//!   60 s).
//! * `fence`: layout fences (changes issued under an older layout generation are refused,
//!   kept in an append-only log with a version, `fences.2`) and data versions, for online
//!   migration; also the change gates a fence waits on for writes in flight.
//! * `stats`: `ost.*.stats` and `osd.*.brw_stats`.

pub mod capas;
pub mod claims;
pub mod fence;
pub mod grants;
pub mod locks;
pub mod nodemap;
pub mod qos;
pub mod recovery;
pub mod stats;
mod writes;

use nacre_net::{Handler, Incoming, Outgoing};
use nacre_osd::mmp::Guard;
use nacre_osd::{Label, ObjectStore};
use nacre_types::limits::{BULK_BYTES_MAX, FILE_BYTES_MAX};
use nacre_types::{Owner, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use nacre_wire::{decode_body, encode_body};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Largest read served in a batch with others ([`OssHandler::batchable`]).
pub const BATCH_READ_BYTES_MAX: u32 = 256 << 10;

/// One OST served by this process.
pub struct OstTarget {
    /// Identity.
    pub label: Label,
    /// Objects.
    pub store: ObjectStore,
    /// Bytes written since start.
    pub write_bytes: AtomicU64,
    /// Bytes read since start.
    pub read_bytes: AtomicU64,
    /// `ost.*.stats`.
    pub stats: nacre_params::OpStats,
    /// `osd.*.brw_stats`.
    pub brw: stats::BrwStats,
    /// `ost.*.job_stats`.
    pub job_stats: nacre_params::JobStats,
    /// `ost.*.export_stats`: the same per client NID.
    pub export_stats: nacre_params::JobStats,
    /// Extent locks and evicted clients (`ldlm.namespaces.ost-*`).
    pub locks: locks::OstLocks,
    /// Space promised to clients for their write-behind (`ost.*.tot_granted`).
    pub grants: grants::Grants,
    /// Recovery after a restart, and the lock holders it waits for (`ost.*.recovery_status`).
    pub recovery: recovery::Recovery,
    /// Layout fences and data versions, for online migration (fence.rs).
    pub fences: fence::Fences,
    /// Quota enforcement on this OST's bytes (nacre_quota).
    pub quota: nacre_quota::Slave,
    /// QoS: requests held to this OST's share of their class's rate (nacre_qos).
    pub qos: nacre_qos::Scheduler,
}

impl OstTarget {
    /// Opens a formatted OST directory.
    pub fn open(dir: &Path, label: Label) -> std::io::Result<OstTarget> {
        let recovery = recovery::Recovery::open(dir);
        let grants = grants::Grants::open(dir);
        // Space is held back only for clients the recovery waits for.
        if !recovery.active() {
            grants.end_reserve();
        }
        Ok(OstTarget {
            qos: nacre_qos::Scheduler::new(),
            quota: nacre_quota::Slave::new(
                &label.fsname,
                (nacre_types::TargetKind::Ost, label.index),
                nacre_wire::quota::Resource::Blocks,
            ),
            fences: fence::Fences::load(dir)?,
            store: ObjectStore::open(dir)?,
            label,
            write_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            stats: stats::new_op_stats(),
            brw: stats::BrwStats::default(),
            job_stats: nacre_params::JobStats::new(stats::OST_OPS),
            export_stats: nacre_params::JobStats::keyed(stats::OST_OPS, "export_stats", "nid"),
            locks: locks::OstLocks::default(),
            grants,
            recovery,
        })
    }
}

impl OstTarget {
    /// Evicts `client`: its locks and its space grant are taken back and its later requests
    /// refused.
    pub fn evict(&self, client: &[u8; 16], why: &str) {
        self.locks.evict(client, why, &self.label.name());
        self.grants.release(client);
        self.recovery.forget(client);
    }
}

/// The OSS request handler for all OSTs of this process.
#[derive(Default)]
pub struct OssHandler {
    /// Keyed by target id (file-system slot and index: [`nacre_osd::Label::target_id`]), so
    /// several file systems' targets of one index are served apart.
    targets: RwLock<HashMap<u32, Guarded>>,
    /// Client uuids bound to the key identities that use them (claims.rs).
    claims: claims::Claims,
}

/// What a client uuid is bound to on this OSS: its caller's tenant and the file system it
/// works on (one OSS process may serve several, whose tenants' key names may match).
fn claim_tenant(tenant: &str, fsname: &str) -> String {
    format!("{tenant}#{fsname}")
}

/// A target and, in a failover pair, the multi-mount protection it is served under.
type Guarded = (Arc<OstTarget>, Option<Arc<Guard>>);

impl OssHandler {
    /// Evicts, from every OST served here, the clients whose key was revoked (`nacre
    /// nodemap revoke_key`): their extent locks and grants go at once, so other clients
    /// do not wait for callbacks they will never answer; their uuids are bound to nothing
    /// after (and cannot be used again: their key's handshakes are refused). Returns how
    /// many uuids were evicted.
    pub fn evict_revoked(&self) -> usize {
        let set = nacre_wire::nodemap::active();
        if set.revoked.is_empty() {
            return 0;
        }
        let targets: Vec<Arc<OstTarget>> = self
            .targets
            .read()
            .expect("targets")
            .values()
            .map(|(t, _)| t.clone())
            .collect();
        let mut evicted = 0;
        let slots: std::collections::HashSet<u16> = targets
            .iter()
            .map(|t| nacre_types::fs_slot(&t.label.fsname))
            .collect();
        for slot in slots {
            let fsname = targets
                .iter()
                .find(|t| nacre_types::fs_slot(&t.label.fsname) == slot)
                .map(|t| t.label.fsname.clone())
                .unwrap_or_default();
            let tenants: Vec<String> = nacre_net::caller::revoked_tenants(&set, slot)
                .iter()
                .map(|t| claim_tenant(t, &fsname))
                .collect();
            for client in self.claims.clients_of(&tenants) {
                for t in targets
                    .iter()
                    .filter(|t| nacre_types::fs_slot(&t.label.fsname) == slot)
                {
                    t.evict(&client, "its key is revoked");
                }
                self.claims.release(&client);
                evicted += 1;
            }
        }
        evicted
    }

    /// Every OST served here.
    pub fn all(&self) -> Vec<Arc<OstTarget>> {
        let targets = self.targets.read().expect("targets");
        targets.values().map(|(t, _)| t.clone()).collect()
    }

    /// Adds an OST.
    pub fn add_target(&self, target: Arc<OstTarget>) {
        self.add_guarded(target, None);
    }

    /// Adds an OST of a failover pair: its requests are served only while `guard` holds
    /// the target (multi-mount protection), else answered `ENODEV` (the client tries the
    /// partner).
    pub fn add_guarded(&self, target: Arc<OstTarget>, guard: Option<Arc<Guard>>) {
        let id = target.label.target_id();
        self.targets
            .write()
            .expect("targets")
            .insert(id, (target, guard));
    }

    /// Stops serving the OST of target id `id`: its requests are answered `ENODEV` from now on.
    pub fn remove_target(&self, id: u32) -> Option<Arc<OstTarget>> {
        let ost = self
            .targets
            .write()
            .expect("targets")
            .remove(&id)
            .map(|(t, _)| t)?;
        // Its locks go with it: parked polls and changes are answered now.
        ost.locks.ns.shut();
        Some(ost)
    }

    /// The OST of target id `id` ([`nacre_osd::Label::target_id`]), if served here.
    pub fn target(&self, id: u32) -> Option<Arc<OstTarget>> {
        self.targets
            .read()
            .expect("targets")
            .get(&id)
            .map(|(t, _)| t.clone())
    }

    /// The OST of target id `id` if this server may serve it now (see [`OssHandler::add_guarded`]).
    fn serving(&self, id: u32) -> Option<Arc<OstTarget>> {
        let (ost, guard) = self.targets.read().expect("targets").get(&id).cloned()?;
        guard.is_none_or(|g| g.holds()).then_some(ost)
    }

    /// Runs `call` (decoded from `incoming`) on `ost`; a read stops short of its data,
    /// which the caller reads ([`OssHandler::handle`] alone, [`OssHandler::handle_batch`]
    /// with others at once) and gives to [`read_done`].
    fn run<'a>(
        &self,
        ost: &'a OstTarget,
        call: OssCall,
        incoming: &Incoming,
    ) -> Result<Step<'a>, Status> {
        // A change holds its object's gate from its fence check until it is counted, so a
        // fence set meanwhile waits for it (fence.rs).
        let _gate = changed_object(&call.req).map(|o| ost.fences.change_gate(o));
        if locks::stale_write(ost, &call.req) || fenced(ost, &call.req) {
            return Err(Status::Stale);
        }
        // A write of runs is judged whole before anything is done for it: no other
        // client's lock is called back for a request that is refused.
        writes::check(&call.req, incoming.bulk_len())?;
        let bulk_len = incoming.bulk_len().unwrap_or(0);
        // A client about to hold its first lock here is listed first, so a restart waits
        // for it to take its locks back (recovery.rs).
        let may_lock = matches!(
            call.req,
            OssRequest::Read { lock: true, .. }
                | OssRequest::Write { lock: true, .. }
                | OssRequest::Enqueue { .. }
        );
        if may_lock && call.client != locks::NO_CLIENT {
            ost.recovery.holder(&call.client, incoming.is_local());
        }
        // Other clients' conflicting locks are called back first (the request was parked
        // while they were; this finds nothing left unless one was granted meanwhile).
        let mut hold = locks::revoke_for(ost, &call, bulk_len);
        // A lock new to the client goes again if the read fails (the client does not learn
        // of it); one it held already stays.
        let (lock, new_lock) = match locks::grant_read(ost, &call.client, &call.req) {
            Some((l, new)) => (Some(l), new),
            None => (None, false),
        };
        let req = call.req;
        let io = |e: nacre_osd::OsdError| {
            tracing::debug!("{}: {e}", ost.label.name());
            Status::from_io(&e.io())
        };
        let reply = match req {
            OssRequest::Write {
                object,
                offset,
                owner,
                lock,
                grant_used,
                ..
            } => {
                let data = match (&incoming.bulk, &incoming.stream) {
                    (Some(b), _) => writes::Data::Whole(b),
                    (None, Some(s)) => writes::Data::Arriving(s),
                    (None, None) => return Err(Status::Proto),
                };
                let place = writes::Place::At { offset, lock };
                let what = (object, owner, grant_used);
                writes::write(ost, &call.client, hold.as_ref(), what, place, data)?
            }
            OssRequest::WriteRuns {
                object,
                owner,
                grant_used,
                runs,
                ..
            } => {
                let data = writes::Data::Whole(incoming.bulk.as_ref().ok_or(Status::Proto)?);
                let what = (object, owner, grant_used);
                let place = writes::Place::Runs(&runs);
                writes::write(ost, &call.client, hold.as_ref(), what, place, data)?
            }
            OssRequest::Read {
                object,
                offset,
                len,
                ..
            } => {
                if len > BULK_BYTES_MAX {
                    if let (Some(l), true) = (lock, new_lock) {
                        ost.locks.ns.release(&call.client, l.handle);
                    }
                    return Err(Status::Inval);
                }
                return Ok(Step::Read(ReadStep {
                    object,
                    offset,
                    len,
                    client: call.client,
                    lock,
                    new_lock,
                    _hold: hold,
                    started: ost.brw.read.begin(),
                }));
            }
            OssRequest::Glimpse { object } => {
                let (size, blocks) = ost.store.size(object).map_err(io)?;
                OssReply::ObjectAttr { size, blocks }
            }
            OssRequest::Punch { object, size, .. } => {
                if size > FILE_BYTES_MAX {
                    return Err(Status::FBig);
                }
                let r = ost.store.punch(object, size).map_err(io);
                ost.fences.changed(object);
                r?;
                OssReply::Done
            }
            OssRequest::Fallocate {
                object,
                offset,
                len,
                keep_size,
                punch_hole,
                ..
            } => {
                let reserved = if punch_hole {
                    None
                } else {
                    quota_reserve(ost, object, Owner::default(), len)?.0
                };
                let r = ost
                    .store
                    .fallocate(object, offset, len, keep_size, punch_hole)
                    .map_err(io);
                if let Some(r) = reserved {
                    ost.quota.release(r);
                }
                ost.fences.changed(object);
                r?;
                OssReply::Done
            }
            OssRequest::Fence {
                objects,
                generation,
            } => {
                if !call.cred.is_root() {
                    return Err(Status::Perm);
                }
                if objects.len() > nacre_wire::oss::FENCE_OBJECTS_MAX {
                    return Err(Status::TooBig);
                }
                ost.fences
                    .fence(&objects, generation)
                    .map_err(|e| Status::from_io(&e))?;
                OssReply::Done
            }
            OssRequest::DataVersion { objects, .. } => {
                if !call.cred.is_root() {
                    return Err(Status::Perm);
                }
                if objects.len() > nacre_wire::oss::FENCE_OBJECTS_MAX {
                    return Err(Status::TooBig);
                }
                // Write locks on them were called back (`hold`): what their holders kept is
                // written.
                let (epoch, versions) = ost.fences.versions(&objects);
                OssReply::Versions { epoch, versions }
            }
            OssRequest::Sync { object } => {
                ost.store.sync(object).map_err(io)?;
                OssReply::Done
            }
            OssRequest::QuotaUsage { ids } => {
                if ids.len() > nacre_wire::oss::QUOTA_IDS_MAX {
                    return Err(Status::TooBig);
                }
                if !ids.iter().all(|q| q.visible_to(&call.cred)) {
                    return Err(Status::Perm);
                }
                let usage = ost.store.usage();
                OssReply::QuotaUsage(ids.iter().map(|q| usage.of(*q)).collect())
            }
            OssRequest::QuotaCheck { repair } => {
                if !call.cred.is_root() {
                    return Err(Status::Perm);
                }
                OssReply::QuotaCheck(
                    ost.store
                        .quota_check(repair)
                        .map_err(|e| Status::from_io(&e))?,
                )
            }
            OssRequest::Destroy { objects } => {
                for o in objects {
                    ost.store.destroy(o).map_err(io)?;
                    ost.locks.ns.forget(&o);
                }
                OssReply::Done
            }
            OssRequest::StatFs => {
                OssReply::StatFs(ost.store.statfs().map_err(|e| Status::from_io(&e))?)
            }
            OssRequest::SetOwner { objects, owner } => {
                if objects.len() > nacre_wire::oss::SET_OWNER_OBJECTS_MAX {
                    return Err(Status::TooBig);
                }
                for o in objects {
                    ost.store.set_owner(o, owner).map_err(io)?;
                }
                OssReply::Done
            }
            OssRequest::GetOwner { object } => {
                OssReply::Owner(ost.store.owner(object).map_err(io)?)
            }
            OssRequest::LockCancel { handles } => locks::cancel(ost, &call.client, &handles)?,
            OssRequest::GlimpseAnswer { sizes } => {
                locks::glimpse_answer(ost, &call.client, &sizes)?
            }
            OssRequest::LockReplay { locks, grant_bytes } => {
                let reply = locks::replay(ost, &call.client, &locks)?;
                if grant_bytes > 0 {
                    let avail = || ost.store.statfs().map_or(0, |s| s.bytes_avail);
                    ost.grants.reclaim(&call.client, grant_bytes, avail);
                }
                // Back: once every client of before is, nothing more is held back.
                ost.recovery.back(&call.client);
                if !ost.recovery.active() {
                    ost.grants.end_reserve();
                }
                reply
            }
            OssRequest::Enqueue {
                object,
                start,
                end,
                write,
            } => {
                if start > end || call.client == locks::NO_CLIENT {
                    return Err(Status::Inval);
                }
                // Conflicts were called back (parked until cancelled); then granted.
                drop(hold.take());
                let ext = nacre_ldlm::kind::Extent { start, end, write };
                OssReply::Granted(ost.locks.ns.enqueue(&call.client, object, ext).map(|l| l.0))
            }
            OssRequest::Disconnect => {
                ost.locks.ns.evict(&call.client);
                ost.grants.release(&call.client);
                ost.recovery.forget(&call.client);
                OssReply::Done
            }
            // Parked before it gets here (OssHandler::park).
            OssRequest::LockPoll { .. } => return Err(Status::Proto),
        };
        Ok(Step::Done(Outgoing::ok(encode_body(&reply))))
    }

    /// Binds the client uuid `call` names to its caller's key identity, or checks it is
    /// bound to it (claims.rs); a disconnect ends the binding. Without keys, nothing.
    fn claim(
        &self,
        caller: &nacre_net::Caller,
        call: &OssCall,
        ost: &OstTarget,
    ) -> Result<(), Status> {
        if call.client == locks::NO_CLIENT || caller.proved().is_none() {
            return Ok(());
        }
        let holds = |c: &[u8; 16]| self.all().iter().any(|t| t.locks.ns.held_by(c) > 0);
        let tenant = claim_tenant(&caller.tenant(), &ost.label.fsname);
        self.claims.claim(&call.client, &tenant, holds)?;
        if matches!(call.req, OssRequest::Disconnect) {
            self.claims.release(&call.client);
        }
        Ok(())
    }

    /// Checks `incoming` for `ost` and runs it ([`OssHandler::run`]): its meter and what
    /// came of it, or the reply of a request refused before it ran (not counted).
    fn begin<'a>(
        &self,
        ost: &'a OstTarget,
        incoming: &Incoming,
    ) -> Result<(Meter, Result<Step<'a>, Status>), Outgoing> {
        let mut call: OssCall = match decode_body(&incoming.body) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "{}: bad request from {}: {e}",
                    ost.label.name(),
                    incoming.peer
                );
                return Err(Outgoing::error(Status::Proto));
            }
        };
        if !call.cred.is_valid() {
            return Err(Outgoing::error(Status::Proto));
        }
        if ost.locks.is_evicted(&call.client) {
            return Err(Outgoing::error(Status::Shutdown));
        }
        let caller = &incoming.caller;
        let map = match call.req.opcode() == incoming.header.opcode {
            // The role table judged the header's opcode: the body must be that request.
            false => Err(Status::Proto),
            true => caller.nodemap(),
        };
        let map = map.map_err(|s| {
            nacre_net::caller::refused(|| {
                format!(
                    "{}: refused {:#06x} from {}: {}",
                    ost.label.name(),
                    incoming.header.opcode,
                    caller.describe(),
                    nacre_net::caller::refusal_reason(s)
                )
            });
            Outgoing::error(s)
        })?;
        if let Some(m) = &map {
            if let Err(s) = nodemap::check_readonly(m, &call.req) {
                return Err(Outgoing::error(s));
            }
        }
        if let Err(s) = self.claim(caller, &call, ost) {
            nacre_net::caller::refused(|| {
                format!(
                    "{}: refused {:#06x} from {}: client uuid {} is another key's",
                    ost.label.name(),
                    incoming.header.opcode,
                    caller.describe(),
                    call.client
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                )
            });
            return Err(Outgoing::error(s));
        }
        if let Err(s) = capas::check(ost, caller, &call) {
            return Err(Outgoing::error(s));
        }
        if let Some(m) = &map {
            nodemap::map_call(m, &mut call);
        }
        let meter = Meter {
            op: (call.req.opcode() & 0xff) as usize - 1,
            started: std::time::Instant::now(),
            jobid: nacre_types::jobid::clamp(&call.jobid).to_string(),
        };
        Ok((meter, self.run(ost, call, incoming)))
    }

    /// The reply of a request `begin` ran, counted in the OST's statistics.
    fn end(
        &self,
        ost: &OstTarget,
        incoming: &Incoming,
        meter: Meter,
        out: Result<Outgoing, Status>,
    ) -> Outgoing {
        let out = out.unwrap_or_else(Outgoing::error);
        let bytes =
            incoming.bulk_len().unwrap_or(0) + out.bulk.as_ref().map_or(0, |b| b.len() as u64);
        let us = meter.started.elapsed().as_micros() as u64;
        ost.stats.record(meter.op, us, bytes);
        ost.job_stats.record(&meter.jobid, meter.op, us, bytes);
        ost.export_stats
            .record(&nacre_net::peer_nid(&incoming.peer), meter.op, us, bytes);
        out
    }
}

/// A request's operation and start, for the statistics.
struct Meter {
    op: usize,
    started: std::time::Instant,
    jobid: String,
}

/// What running a request came to: its reply, or a read whose data is read next.
enum Step<'a> {
    Done(Outgoing),
    Read(ReadStep<'a>),
}

/// A read checked and ready: the lock it was granted and the conflicting locks it holds
/// off until its data is read.
struct ReadStep<'a> {
    object: nacre_types::ObjectId,
    offset: u64,
    len: u32,
    client: [u8; 16],
    lock: Option<nacre_ldlm::msg::ExtentRef>,
    new_lock: bool,
    _hold: Option<nacre_ldlm::server::Revocation<'a, nacre_ldlm::server::Extents>>,
    started: stats::IoStart,
}

/// The reply of a request run on `ost`: a read's given its `data` (read now if not read
/// already).
fn finish(
    ost: &OstTarget,
    step: Result<Step<'_>, Status>,
    data: Option<Result<nacre_types::AlignedBuf, nacre_osd::OsdError>>,
) -> Result<Outgoing, Status> {
    match step? {
        Step::Done(out) => Ok(out),
        Step::Read(r) => {
            let data = data.unwrap_or_else(|| ost.store.read(r.object, r.offset, r.len as usize));
            read_done(ost, r, data)
        }
    }
}

/// The reply of read `r` on `ost`, given its data. A lock new to the client goes again if
/// the read failed (the client does not learn of it); one it held already stays.
fn read_done(
    ost: &OstTarget,
    r: ReadStep<'_>,
    data: Result<nacre_types::AlignedBuf, nacre_osd::OsdError>,
) -> Result<Outgoing, Status> {
    let data = match data {
        Ok(d) => d,
        Err(e) => {
            if let (Some(l), true) = (r.lock, r.new_lock) {
                ost.locks.ns.release(&r.client, l.handle);
            }
            tracing::debug!("{}: {e}", ost.label.name());
            return Err(Status::from_io(&e.io()));
        }
    };
    ost.brw.read.end(r.started, data.len() as u64);
    ost.read_bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    let body = encode_body(&OssReply::Read {
        len: data.len() as u32,
        lock: r.lock,
    });
    Ok(Outgoing {
        status: Status::Ok,
        body,
        bulk: Some(data),
    })
}

/// The object `req` changes under a layout generation (writes, punches, allocations).
fn changed_object(req: &OssRequest) -> Option<nacre_types::ObjectId> {
    match req {
        OssRequest::Write { object, .. }
        | OssRequest::WriteRuns { object, .. }
        | OssRequest::Punch { object, .. }
        | OssRequest::Fallocate { object, .. } => Some(*object),
        _ => None,
    }
}

/// True if `req` changes an object fenced past the layout generation it carries.
fn fenced(ost: &OstTarget, req: &OssRequest) -> bool {
    match req {
        OssRequest::Write {
            object, layout_gen, ..
        }
        | OssRequest::WriteRuns {
            object, layout_gen, ..
        }
        | OssRequest::Punch {
            object, layout_gen, ..
        }
        | OssRequest::Fallocate {
            object, layout_gen, ..
        } => !ost.fences.is_empty() && ost.fences.refuses(*object, *layout_gen),
        _ => false,
    }
}

impl Handler for OssHandler {
    fn weight(&self, req: &Incoming) -> u32 {
        self.serving(req.header.target)
            .map_or(0, |ost| qos::weight(&ost, req))
    }

    fn park(&self, req: Incoming) -> Option<Incoming> {
        let poll = OssRequest::LockPoll {
            wait_ms: 0,
            epoch: 0,
        }
        .opcode();
        let is_poll = req.header.opcode == poll;
        let Some(ost) = self.serving(req.header.target) else {
            return Some(req);
        };
        // A capped class's requests wait for their share of its rate (qos.rs).
        let req = qos::admit(&ost, req)?;
        // While clients of before take their locks back, data requests wait (recovery.rs).
        if ost.recovery.active() {
            if let Ok(call) = decode_body::<OssCall>(&req.body) {
                if !ost.locks.is_evicted(&call.client) && ost.recovery.holds(&call.req) {
                    req.respond(Outgoing::error(Status::InProgress));
                    return None;
                }
            }
        }
        // Nothing to wait for without locks: no decode (a poll always waits).
        if !is_poll && ost.locks.ns.granted() == 0 {
            return Some(req);
        }
        let Ok(call) = decode_body::<OssCall>(&req.body) else {
            return Some(req);
        };
        let refused = call.req.opcode() != req.header.opcode
            || req.caller.nodemap().map_or(true, |m| {
                m.is_some_and(|m| nodemap::check_readonly(&m, &call.req).is_err())
            })
            || capas::allowed(&ost, &req.caller, &call).is_err()
            || self.claim(&req.caller, &call, &ost).is_err();
        let bulk_len = Some(u64::from(req.header.bulk_len));
        if refused
            || writes::check(&call.req, bulk_len).is_err()
            || ost.locks.is_evicted(&call.client)
            || !call.cred.is_valid()
            || locks::stale_write(&ost, &call.req)
        {
            return Some(req);
        }
        match call.req {
            OssRequest::LockPoll { wait_ms, epoch } => {
                locks::poll(&ost, call.client, wait_ms, epoch, req);
                None
            }
            OssRequest::Glimpse { object } => locks::park_glimpse(&ost, req, &call, object),
            _ => locks::park_change(&ost, req, &call),
        }
    }

    fn affinity(&self, incoming: &Incoming) -> Option<u64> {
        let call: OssCall = decode_body(&incoming.body).ok()?;
        let o = call.req.key_object()?;
        Some(o.seq.rotate_left(32) ^ o.id)
    }

    fn fault_name(&self, incoming: &Incoming) -> Option<String> {
        let call: OssCall = decode_body(&incoming.body).ok()?;
        let op = stats::OST_OPS.get((call.req.opcode() & 0xff) as usize - 1)?;
        Some(format!("oss.{op}"))
    }

    fn handle(&self, incoming: &Incoming) -> Outgoing {
        let Some(ost) = self.serving(incoming.header.target) else {
            return Outgoing::error(Status::NoDev);
        };
        let (meter, step) = match self.begin(&ost, incoming) {
            Ok(begun) => begun,
            Err(refused) => return refused,
        };
        let out = finish(&ost, step, None);
        self.end(&ost, incoming, meter, out)
    }

    /// Small reads: served together, their data read at once. A large read's own disk
    /// time outweighs what a batch saves, and it would hold up the small reads of its batch
    /// (and, with few threads serving batches, the disk's parallelism).
    /// Large writes are written as their data arrives (nacre_osd's `write_arriving`).
    fn streams(&self, header: &nacre_wire::Header) -> bool {
        header.opcode == nacre_wire::oss::OST_WRITE
            && header.bulk_len as usize > nacre_osd::objects::ARRIVING_PART_BYTES_MIN
    }

    fn batchable(&self, req: &Incoming) -> bool {
        req.header.opcode == nacre_wire::oss::OST_READ
            && decode_body::<OssCall>(&req.body).is_ok_and(
                |c| matches!(c.req, OssRequest::Read { len, .. } if len <= BATCH_READ_BYTES_MAX),
            )
    }

    /// Reads, each checked and locked as alone; their data read at once, per OST
    /// ([`ObjectStore::read_many`]).
    fn handle_batch(&self, reqs: &[&Incoming]) -> Vec<Outgoing> {
        let osts: Vec<Option<Arc<OstTarget>>> =
            reqs.iter().map(|r| self.serving(r.header.target)).collect();
        let mut begun = Vec::with_capacity(reqs.len());
        for (req, ost) in reqs.iter().zip(&osts) {
            begun.push(match ost {
                None => Err(Outgoing::error(Status::NoDev)),
                Some(ost) => self.begin(ost, req),
            });
        }
        // The data of the reads, per OST, in one call each.
        let mut data: Vec<Option<Result<nacre_types::AlignedBuf, nacre_osd::OsdError>>> =
            (0..reqs.len()).map(|_| None).collect();
        let mut done = vec![false; reqs.len()];
        for i in 0..reqs.len() {
            if done[i] {
                continue;
            }
            let mut which = Vec::new();
            let mut wanted = Vec::new();
            for j in i..reqs.len() {
                let same_ost = match (&osts[i], &osts[j]) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                };
                if let (true, Ok((_, Ok(Step::Read(r))))) = (same_ost, &begun[j]) {
                    which.push(j);
                    wanted.push((r.object, r.offset, r.len as usize));
                    done[j] = true;
                }
            }
            if let Some(ost) = &osts[i] {
                for (j, got) in which.into_iter().zip(ost.store.read_many(&wanted)) {
                    data[j] = Some(got);
                }
            }
        }
        begun
            .into_iter()
            .zip(reqs)
            .zip(osts.iter().zip(data))
            .map(|((b, req), (ost, data))| {
                let (meter, step) = match b {
                    Ok(begun) => begun,
                    Err(refused) => return refused,
                };
                let ost = ost.as_ref().expect("a request begun has its OST");
                let out = finish(ost, step, data);
                self.end(ost, req, meter, out)
            })
            .collect()
    }
}

/// Reserves `bytes` for a change of `object` within the quotas of its recorded owner (or
/// `owner`, which a write gives an object that has none); `None` when nothing is limited.
/// With it, which of the owner's user, group and project are near a limit (bits 1, 2, 4:
/// the client writes their data synchronously, [`OssReply::Written::sync_ids`]).
pub(crate) fn quota_reserve(
    ost: &OstTarget,
    object: nacre_types::ObjectId,
    owner: Owner,
    bytes: u64,
) -> Result<(Option<nacre_quota::Reservation>, u8), Status> {
    if !ost.quota.any_limited() {
        return Ok((None, 0));
    }
    let owner = match ost.store.owner(object) {
        Ok(Some(o)) => o,
        Ok(None) => owner,
        Err(e) => return Err(Status::from_io(&e.io())),
    };
    let usage = ost.store.usage();
    let ids = nacre_types::QuotaId::of_owner(owner);
    let reserved = ost.quota.reserve(&ids, bytes, |q| usage.of(q))?;
    Ok((Some(reserved), ost.quota.near(&ids)))
}
