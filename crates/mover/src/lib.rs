//! The data mover (docs/stage.md): a role any `nacre server` can run (`--mover DIR`). It
//! keeps a persistent queue of stage requests and their progress (`queue`, in a `nacre-kv`
//! store), answers `nacre stage` over the network (service 5, `MoverService`; `MoverClient`
//! is the command's side), and runs the requests one after the other with the client
//! library's online migration, `jobs` files at a time (each file's stripes in parallel),
//! paced by a bandwidth limit. A request interrupted by a restart runs again: files already
//! in its pool are skipped, so it resumes where it stopped.
//!
//! Built on the client library; the server crates never depend on it — the `nacre` binary
//! adds it to a server process through `ServerProcess::add_role` (`nacre-server`).

pub mod queue;

use nacre_client::relayout::{MigrateOptions, Pacer};
use nacre_client::Client;
use nacre_net::{Handler, Incoming, Outgoing};
use nacre_types::layout::StripeSpec;
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mover::{MoverReply, MoverRequest, StageState, StageStatus, STAGE_ERROR_BYTES_MAX};
use nacre_wire::{decode_body, encode_body};
use queue::Queue;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Files and directories one request may cover at most.
pub const FILES_PER_REQUEST_MAX: usize = 4_000_000;
/// Directory entries read per page while a request's trees are walked.
pub const READDIR_PAGE: u32 = 1024;
/// How often a running request's progress is written to the queue.
pub const PROGRESS_MS: u64 = 1_000;
/// Pause before the mover tries the file system again (unreachable at start, or lost).
pub const RETRY_MS: u64 = 2_000;

/// Why the mover cannot do something.
#[derive(Debug, thiserror::Error)]
pub enum MoverError {
    /// The queue cannot be read or written.
    #[error("mover queue: {0}")]
    Queue(String),
    /// The queue's store is of a format this mover does not read (newer, or damaged).
    #[error(transparent)]
    Format(#[from] nacre_kv::FormatError),
    /// Too many requests wait.
    #[error("the mover's queue is full")]
    Full,
    /// The file system refused or failed a request.
    #[error(transparent)]
    Client(#[from] nacre_client::ClientError),
}

/// How the mover runs.
#[derive(Clone, Debug)]
pub struct MoverConfig {
    /// Files moved at once.
    pub jobs: usize,
    /// Bytes per second all moves together (0: no limit).
    pub bandwidth: u64,
}

/// Connects to the file system (called again after a failure).
pub type Connect = Box<dyn Fn() -> Result<Arc<Client>, nacre_client::ClientError> + Send + Sync>;

/// A data mover.
pub struct Mover {
    queue: Queue,
    cfg: MoverConfig,
    connect: Connect,
    stop: AtomicBool,
}

impl Mover {
    /// A mover keeping its queue in `dir`; `connect` reaches the file system.
    pub fn open(
        dir: &std::path::Path,
        cfg: MoverConfig,
        connect: Connect,
    ) -> Result<Arc<Mover>, MoverError> {
        Ok(Arc::new(Mover {
            queue: Queue::open(dir)?,
            cfg,
            connect,
            stop: AtomicBool::new(false),
        }))
    }

    /// The handler of the mover's network service.
    pub fn service(self: &Arc<Self>) -> Arc<MoverService> {
        Arc::new(MoverService {
            mover: self.clone(),
        })
    }

    /// Starts the thread that runs the queue.
    pub fn start(self: &Arc<Self>) -> std::io::Result<std::thread::JoinHandle<()>> {
        let m = self.clone();
        std::thread::Builder::new()
            .name("mover".into())
            .spawn(move || m.run())
    }

    /// Asks the running thread to stop (after the file it is moving).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn run(&self) {
        let mut client: Option<Arc<Client>> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let Some(req) = self.queue.next(Duration::from_millis(500)) else {
                continue;
            };
            let c = match &client {
                Some(c) => c.clone(),
                None => match (self.connect)() {
                    Ok(c) => {
                        client = Some(c.clone());
                        c
                    }
                    Err(e) => {
                        tracing::warn!("mover: cannot reach the file system: {e}");
                        std::thread::sleep(Duration::from_millis(RETRY_MS));
                        continue;
                    }
                },
            };
            if let Err(e) = self.run_one(&c, req.id) {
                // Perhaps a server restarting: the request stays running, tried again.
                tracing::warn!("mover: request {}: {e}", req.id);
                std::thread::sleep(Duration::from_millis(RETRY_MS));
            }
        }
    }

    /// Runs request `id` to its end (or until it is cancelled or the mover stops).
    fn run_one(&self, c: &Client, id: u64) -> Result<(), MoverError> {
        let Some(req) = self
            .queue
            .update(id, true, |s| s.status = StageStatus::Running)?
        else {
            return Ok(());
        };
        let files = match walk(c, &req) {
            Ok(f) => f,
            Err(e) if e.status() == Status::NoEnt || e.status() == Status::NotDir => {
                self.queue.update(id, true, |s| {
                    s.status = StageStatus::Failed;
                    s.error = format!("a path does not exist: {e}");
                })?;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let pool = req.request.pool;
        // What each file is now: its size and pool.
        let mut todo = Vec::new();
        let (mut total, mut bytes_total, mut skipped, mut bytes_skipped) = (0, 0, 0, 0);
        // Asked a batch at a time: only (file, size) of those to move is kept.
        for chunk in files.chunks(nacre_wire::mds::changelog::STATS_MAX) {
            for s in c.stat_many(chunk, 8)? {
                if s.attr.kind != FileKind::Regular {
                    continue;
                }
                total += 1;
                bytes_total += s.attr.size;
                if s.pool == pool {
                    skipped += 1;
                    bytes_skipped += s.attr.size;
                } else {
                    todo.push((s.attr.fid, s.attr.size));
                }
            }
        }
        // Cancelled while its trees were walked: nothing more.
        let Some(_) = self.queue.update(id, true, |s| {
            s.files_total = total;
            s.bytes_total = bytes_total;
            s.files_skipped = skipped;
            s.files_done = 0;
            s.files_failed = 0;
            s.bytes_done = bytes_skipped;
        })?
        else {
            return Ok(());
        };
        let pacer = Pacer::new(self.cfg.bandwidth);
        let opts = MigrateOptions {
            spec: StripeSpec {
                stripe_count: 0,
                stripe_size: 0,
                start_ost: -1,
                pool,
            },
        };
        let next = AtomicU64::new(0);
        let done = AtomicU64::new(0);
        let bytes = AtomicU64::new(bytes_skipped);
        let failed = AtomicU64::new(0);
        let error = parking_lot::Mutex::new(String::new());
        let over = AtomicBool::new(false);
        let last = parking_lot::Mutex::new(Instant::now());
        std::thread::scope(|s| {
            for _ in 0..self.cfg.jobs.clamp(1, 64).min(todo.len()) {
                s.spawn(|| loop {
                    if over.load(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(fid, size)) = todo.get(i) else {
                        return;
                    };
                    match c.migrate_file(fid, &opts, &pacer) {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::Relaxed);
                            bytes.fetch_add(size, Ordering::Relaxed);
                        }
                        // Removed meanwhile: nothing left to move.
                        Err(e) if e.status() == Status::NoEnt => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            let mut err = error.lock();
                            if err.is_empty() {
                                *err = format!("{fid}: {e}");
                                err.truncate(STAGE_ERROR_BYTES_MAX);
                            }
                        }
                    }
                    let mut l = last.lock();
                    if l.elapsed() >= Duration::from_millis(PROGRESS_MS) {
                        *l = Instant::now();
                        let r = self.queue.update(id, false, |st| {
                            st.files_done = done.load(Ordering::Relaxed);
                            st.files_failed = failed.load(Ordering::Relaxed);
                            st.bytes_done = bytes.load(Ordering::Relaxed);
                        });
                        // Cancelled (or the queue failing): the others stop too.
                        if !matches!(r, Ok(Some(_))) {
                            over.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        if self.stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (d, f) = (done.into_inner(), failed.into_inner());
        let err = error.into_inner();
        self.queue.update(id, true, |s| {
            s.files_done = d;
            s.files_failed = f;
            s.bytes_done = bytes.load(Ordering::Relaxed);
            s.status = if f == 0 {
                StageStatus::Done
            } else {
                StageStatus::Failed
            };
            s.error = err;
        })?;
        Ok(())
    }
}

/// Every regular file under the request's paths (directories walked, symlinks not
/// followed), by FID.
fn walk(c: &Client, req: &StageState) -> Result<Vec<Fid>, nacre_client::ClientError> {
    let mut out = Vec::new();
    let mut dirs = Vec::new();
    for p in &req.request.paths {
        let fid = c.path2fid(p)?;
        match c.getattr(fid)?.kind {
            FileKind::Directory => dirs.push(fid),
            FileKind::Regular => out.push(fid),
            _ => {}
        }
    }
    while let Some(d) = dirs.pop() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (page, eof) = c.readdir(d, after.as_deref(), READDIR_PAGE)?;
            for e in &page {
                match e.kind {
                    FileKind::Directory if e.name != b"." && e.name != b".." => dirs.push(e.fid),
                    FileKind::Regular => out.push(e.fid),
                    _ => {}
                }
            }
            if out.len() + dirs.len() > FILES_PER_REQUEST_MAX {
                return Err(Status::TooBig.into());
            }
            match page.last() {
                Some(e) if !eof => after = Some(e.name.clone()),
                _ => break,
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The mover's network service (service 5).
pub struct MoverService {
    mover: Arc<Mover>,
}

impl Handler for MoverService {
    fn handle(&self, req: &Incoming) -> Outgoing {
        let r: MoverRequest = match decode_body::<MoverRequest>(&req.body) {
            // The role table judged the header's opcode: the body must be that request.
            Ok(r) if r.opcode() == req.header.opcode => r,
            _ => return Outgoing::error(Status::Proto),
        };
        if let Err(e) = r.check() {
            tracing::debug!("mover: refused from {}: {e}", req.peer);
            return Outgoing::error(Status::Inval);
        }
        let q = &self.mover.queue;
        let reply = match r {
            MoverRequest::Submit(s) => q.submit(s).map(MoverReply::Submitted),
            MoverRequest::Status { job, id } => {
                Ok(MoverReply::States(q.status(job.as_deref(), id)))
            }
            MoverRequest::Cancel { job, id } => {
                q.cancel(job.as_deref(), id).map(MoverReply::Cancelled)
            }
        };
        match reply {
            Ok(r) => Outgoing::ok(encode_body(&r)),
            Err(MoverError::Full) => Outgoing::error(Status::Again),
            Err(e) => {
                tracing::warn!("mover: {e}");
                Outgoing::error(Status::Io)
            }
        }
    }
}

/// A connection to a data mover, for `nacre stage`.
pub struct MoverClient {
    conn: Arc<nacre_net::Connection>,
}

/// How long `nacre stage` waits for a mover to connect and answer.
pub const MOVER_CALL_TIMEOUT_MS: u64 = 30_000;

impl MoverClient {
    /// Connects to the data mover at `nid`.
    pub fn connect(nid: nacre_types::Nid) -> Result<MoverClient, nacre_net::NetError> {
        let cfg = nacre_net::NetConfig {
            connect_timeout_ms: 3_000,
            rpc_timeout_ms: MOVER_CALL_TIMEOUT_MS,
            recovery_timeout_ms: MOVER_CALL_TIMEOUT_MS,
            ..nacre_net::NetConfig::default()
        };
        Ok(MoverClient {
            conn: nacre_net::Connection::connect(nid, cfg)?,
        })
    }

    fn call(&self, req: &MoverRequest) -> Result<MoverReply, nacre_net::RpcError> {
        let r: MoverReply = nacre_net::rpc::call(&self.conn, req.opcode(), 0, req)?;
        match r.check() {
            Ok(()) => Ok(r),
            Err(e) => {
                tracing::warn!("bad answer from the data mover: {e}");
                Err(nacre_net::RpcError::Status(Status::Proto))
            }
        }
    }

    /// Queues a request; its id.
    pub fn submit(&self, r: nacre_wire::mover::StageRequest) -> Result<u64, nacre_net::RpcError> {
        match self.call(&MoverRequest::Submit(r))? {
            MoverReply::Submitted(id) => Ok(id),
            _ => Err(nacre_net::RpcError::Status(Status::Proto)),
        }
    }

    /// Requests of `job`, or request `id`, or all.
    pub fn status(
        &self,
        job: Option<String>,
        id: Option<u64>,
    ) -> Result<Vec<StageState>, nacre_net::RpcError> {
        match self.call(&MoverRequest::Status { job, id })? {
            MoverReply::States(s) => Ok(s),
            _ => Err(nacre_net::RpcError::Status(Status::Proto)),
        }
    }

    /// Cancels request `id` or the unfinished requests of `job`; how many.
    pub fn cancel(&self, job: Option<String>, id: Option<u64>) -> Result<u64, nacre_net::RpcError> {
        match self.call(&MoverRequest::Cancel { job, id })? {
            MoverReply::Cancelled(n) => Ok(n),
            _ => Err(nacre_net::RpcError::Status(Status::Proto)),
        }
    }
}
