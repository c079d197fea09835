//! Routes a request to the service pool of its opcode (a portal, as Lustre calls it: the
//! MDS's readdir and close requests go to `mdt_readpage`, not behind creates in `mdt`), else
//! of its opcode's service byte, answering pings and discovery itself.

use crate::queue::OneshotSender;
use crate::service::{Incoming, Outgoing, ReplySink, Rotor, ServicePool};
use crate::{NetError, Reply};
use nacre_types::Nid;
use nacre_types::{AlignedBuf, Status};
use nacre_wire::{Header, Service, OP_DISCOVER, OP_PING};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Routes requests to service pools by the opcode's service byte.
#[derive(Default)]
pub struct Router {
    services: RwLock<HashMap<u8, Arc<ServicePool>>>,
    portals: RwLock<HashMap<u16, Arc<ServicePool>>>,
    next_partition: AtomicUsize,
    rotor: AtomicU8,
    nids: RwLock<Vec<Nid>>,
    /// Opcodes served to completion on the network thread that read them (short requests
    /// that cannot block), and whether that is on (`net.run_inline`).
    inline: RwLock<std::collections::HashSet<u16>>,
    inline_off: std::sync::atomic::AtomicBool,
    /// Bulk is not streamed to the handlers that ask for it (`net.stream_bulk` off).
    stream_off: std::sync::atomic::AtomicBool,
    /// While a server process is still adding its services, requests for a service it does
    /// not serve yet wait (instead of failing with ENOSYS) until it is ready.
    starting: std::sync::Mutex<bool>,
    started: std::sync::Condvar,
}

/// Longest a request waits for its service while the server is starting.
pub const STARTING_WAIT_MS_MAX: u64 = 60_000;

impl Router {
    /// Adds (or replaces) the pool serving `service`.
    pub fn add(&self, service: Service, pool: Arc<ServicePool>) {
        let old = self
            .services
            .write()
            .expect("router")
            .insert(service as u8, pool);
        if let Some(old) = old {
            if !self.in_use(&old) {
                old.stop();
            }
        }
    }

    /// Routes the requests of `opcodes` to `pool` instead of their service's pool (Lustre's
    /// request portals: one service's requests split over several thread pools, so that one
    /// kind never waits behind another).
    pub fn add_portal(&self, opcodes: &[u16], pool: Arc<ServicePool>) {
        let mut portals = self.portals.write().expect("router");
        let mut replaced = Vec::new();
        for &op in opcodes {
            if let Some(old) = portals.insert(op, pool.clone()) {
                if !Arc::ptr_eq(&old, &pool) {
                    replaced.push(old);
                }
            }
        }
        drop(portals);
        for old in replaced {
            if !self.in_use(&old) {
                old.stop();
            }
        }
    }

    fn in_use(&self, pool: &Arc<ServicePool>) -> bool {
        let portals = self.portals.read().expect("router");
        let services = self.services.read().expect("router");
        portals
            .values()
            .chain(services.values())
            .any(|p| Arc::ptr_eq(p, pool))
    }

    /// Marks the server as starting (`true`: requests for services not added yet wait) or
    /// ready (`false`: they get ENOSYS).
    pub fn set_starting(&self, starting: bool) {
        *self.starting.lock().expect("starting") = starting;
        self.started.notify_all();
    }

    /// Waits, as routing `op` would, while the server is starting and serves no pool of
    /// it yet (by then a starting server process has learnt who its peers are).
    pub(crate) fn wait_for_service(&self, op: u16) {
        let _ = self.pool_for(op);
    }

    /// True if the handler of the request `header` wants its bulk while it arrives
    /// ([`crate::service::Handler::streams`]); false while it has no pool yet.
    pub(crate) fn streams(&self, header: &Header) -> bool {
        // A pool with no more threads than streams could have them all waiting for bulk
        // that a network thread, waiting for room in that pool's queue, does not read.
        !self.stream_off.load(Ordering::Relaxed)
            && self.pool_now(header.opcode).is_some_and(|p| {
                p.threads_max() as u64 > crate::stream::STREAMS_MAX && p.handler().streams(header)
            })
    }

    /// Whether bulk is streamed to the handlers that ask for it (`net.stream_bulk`, on by
    /// default).
    pub fn stream_on(&self) -> bool {
        !self.stream_off.load(Ordering::Relaxed)
    }

    /// Turns streaming bulk to handlers on or off, for frames whose body arrives after.
    pub fn set_stream_on(&self, on: bool) {
        self.stream_off.store(!on, Ordering::Relaxed);
    }

    /// The pool serving `op` now, if any.
    fn pool_now(&self, op: u16) -> Option<Arc<ServicePool>> {
        let portal = self.portals.read().expect("router").get(&op).cloned();
        portal.or_else(|| {
            let service = (op >> 8) as u8;
            self.services.read().expect("router").get(&service).cloned()
        })
    }

    /// The pool serving `op`, waiting while the server is starting and has none yet.
    fn pool_for(&self, op: u16) -> Option<Arc<ServicePool>> {
        let find = || self.pool_now(op);
        if let Some(p) = find() {
            return Some(p);
        }
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(STARTING_WAIT_MS_MAX);
        let mut starting = self.starting.lock().expect("starting");
        while *starting {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            starting = self
                .started
                .wait_timeout(starting, deadline - now)
                .expect("starting")
                .0;
        }
        drop(starting);
        find()
    }

    /// Sets the NIDs discovery answers with (every interface of this process).
    pub fn set_nids(&self, nids: Vec<Nid>) {
        *self.nids.write().expect("nids") = nids;
    }

    /// How requests are spread over a service's partitions.
    pub fn rotor(&self) -> Rotor {
        match self.rotor.load(Ordering::Relaxed) {
            1 => Rotor::On,
            2 => Rotor::Hash,
            _ => Rotor::Off,
        }
    }

    /// Sets the rotor; takes effect for the next request.
    pub fn set_rotor(&self, rotor: Rotor) {
        let v = match rotor {
            Rotor::Off => 0,
            Rotor::On => 1,
            Rotor::Hash => 2,
        };
        self.rotor.store(v, Ordering::Relaxed);
    }

    /// Routes a request that arrived on a connection of CPU partition `cpt`: one of the
    /// short opcodes ([`Router::run_inline`]) is served here, on the network thread, with no
    /// hand-off to a service thread; any other goes to its service's queue.
    pub(crate) fn route(&self, req: Incoming, cpt: usize) {
        let inline = !self.inline_off.load(Ordering::Relaxed)
            && self
                .inline
                .read()
                .expect("router")
                .contains(&req.header.opcode);
        self.route_with(req, cpt, inline)
    }

    /// Serves `opcodes` to completion on the network threads: for requests that are short
    /// and cannot block (no disk write, no wait on a lock or another server), whose handler
    /// costs less than the two thread wake-ups a hand-off to a service thread and back takes.
    /// Their replies are written at once or the connection is dropped (the client resends).
    pub fn run_inline(&self, opcodes: &[u16]) {
        self.inline.write().expect("router").extend(opcodes);
    }

    /// Whether short requests run on the network threads (`net.run_inline`, on by default).
    pub fn inline_on(&self) -> bool {
        !self.inline_off.load(Ordering::Relaxed)
    }

    /// Turns serving short requests on the network threads on or off.
    pub fn set_inline_on(&self, on: bool) {
        self.inline_off.store(!on, Ordering::Relaxed);
    }

    fn route_with(&self, req: Incoming, cpt_hint: usize, inline: bool) {
        if req.header.opcode == OP_PING {
            req.reply(Outgoing::ok(Vec::new()));
            return;
        }
        if req.header.opcode == OP_DISCOVER {
            let nids = self.nids.read().expect("nids").clone();
            req.reply(Outgoing::ok(nacre_wire::encode_body(&nids)));
            return;
        }
        let pool = self.pool_for(req.header.opcode);
        match pool {
            Some(pool) if inline => pool.run_inline(req),
            Some(pool) => {
                let mut req = req;
                req.weight = pool.weight_of(&req);
                let i = pool.choose(self.rotor(), cpt_hint, &req);
                pool.dispatch(req, i)
            }
            None => req.reply(Outgoing::error(Status::NoSys)),
        }
    }

    /// Delivers an in-process request; the reply arrives on `reply_to`.
    pub(crate) fn deliver_local(
        &self,
        header: Header,
        body: Vec<u8>,
        bulk: Option<Arc<AlignedBuf>>,
        reply_to: OneshotSender<Result<Reply, NetError>>,
        inline: bool,
    ) {
        let req = Incoming {
            header,
            body,
            bulk,
            stream: None,
            peer: "local".into(),
            caller: local_caller(),
            reply_to: ReplySink::Local(reply_to),
            _budget: None,
            home: None,
            resubmits: 0,
            qos_admitted: false,
            weight: 0,
        };
        let hint = self.next_partition.fetch_add(1, Ordering::Relaxed);
        self.route_with(req, hint, inline);
    }

    pub(crate) fn stop(&self) {
        let mut pools: Vec<Arc<ServicePool>> = Vec::new();
        let portals: Vec<_> = self.portals.write().expect("router").drain().collect();
        let services: Vec<_> = self.services.write().expect("router").drain().collect();
        let drained = portals
            .into_iter()
            .map(|(_, p)| p)
            .chain(services.into_iter().map(|(_, p)| p));
        for p in drained {
            if !pools.iter().any(|q| Arc::ptr_eq(q, &p)) {
                pools.push(p);
            }
        }
        for p in pools {
            p.stop();
        }
    }
}

/// The caller of every in-process request (one, shared).
fn local_caller() -> Arc<crate::Caller> {
    static LOCAL: std::sync::OnceLock<Arc<crate::Caller>> = std::sync::OnceLock::new();
    LOCAL
        .get_or_init(|| Arc::new(crate::Caller::local()))
        .clone()
}
