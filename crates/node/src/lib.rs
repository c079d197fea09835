//! The node's client API (docs/api.md): the `nacre mount` process serves its client (one set
//! of locks, caches, key and recovery state for the node) to the node's applications over a
//! Unix socket, so they reach the file system without a kernel round trip per request.
//! Frames are the network's (header, postcard body of `nacre_wire::api`, bulk).
//!
//! Who calls is the kernel's word, taken when the caller connected (`SO_PEERCRED`: pid, uid,
//! gid; `SO_PEERGROUPS`: its supplementary groups), never the caller's and never read later
//! from a pid that may have been reused: every request runs with those credentials, and the
//! MDTs check them as they check the kernel's.
//!
//! A **session** is one application process: its first socket opens it, further sockets of
//! the same process join it (threads each take a socket of their own), and the files it
//! opened are closed (their opens at the MDTs, their write-behind written) when its last
//! socket goes, however the process ended (a kill -9 included): no lock or recovery state is
//! left behind it.
//!
//! Threads: one acceptor (`api-accept`) and one thread per socket (`api`), which runs each
//! request on the client with the caller's credentials and job set on the thread; per ring,
//! a taker (`api-ring`) and up to 32 workers (`api-ring-io`).
//!
//! * paths.rs: paths walked from the mount's root through the client's lookups, each checked
//!   by the MDT against the caller's credentials.
//! * ops.rs: each request run on the client. Data goes through the client's direct path
//!   (reads and writes straight to the OSTs), and the mount's kernel caches are told what
//!   changed (through the hooks the mount gives). `attach`: a kernel descriptor of the mount
//!   handed over (`SCM_RIGHTS`) becomes a handle for the access it was opened with.
//! * ring.rs: rings: the application's memfd mapped here; a taker thread polls only as long
//!   as recent gaps between submissions were short and sleeps on an eventfd otherwise;
//!   workers run the entries (reads land in the ring's buffers, writes leave from them) and
//!   publish completions.
//!
//! Limits: `API_CONNS_MAX` sockets at once (a thread each), `API_SESSIONS_MAX` sessions,
//! `API_HANDLES_MAX` open files per session, 64 rings per session and 256 per mount (ring.rs);
//! frames bounded as on the network.

mod ops;
pub mod paths;
mod ring;

use nacre_client::Client;
use nacre_net::frame::{read_frame, write_frame};
use nacre_types::{Cred, Fid, Status};
use nacre_wire::api::{ApiRange, ApiReply, ApiRequest, API_IO_BYTES_MAX, API_VERSION};
use nacre_wire::header::FLAG_REPLY;
use nacre_wire::{decode_body, encode_body, Header};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Sockets served at once (each has a thread while it is open).
pub const API_CONNS_MAX: usize = 1024;
/// Sessions (application processes) at once.
pub const API_SESSIONS_MAX: usize = 1024;
/// Files one session holds open at once.
pub const API_HANDLES_MAX: usize = 65_536;
/// Longest a reply may take to be written to a caller that does not read it (then its
/// socket is dropped).
pub const API_REPLY_TIMEOUT_MS: u64 = 30_000;

/// Told what a request changed: a name (its directory and the name).
pub type EntryHook = Box<dyn Fn(Fid, &[u8]) + Send + Sync>;
/// Told what a request changed: bytes of a file (the file, offset, length).
pub type DataHook = Box<dyn Fn(Fid, u64, u64) + Send + Sync>;

/// What the API takes from the mount it serves beside its client.
pub struct Hooks {
    /// The job id of process `pid` running as `uid` (the mount's `jobid_var`).
    pub jobid: Box<dyn Fn(u32, u32) -> String + Send + Sync>,
    /// Bytes `[offset, offset + len)` of `fid` (or its attributes) changed through the
    /// API: what the mount's kernel cached of them must go before the reply.
    pub changed: DataHook,
    /// Entry `name` of directory `parent` was made, removed or renamed through the API:
    /// the mount's kernel must forget it and its directory's listing before the reply.
    pub entry: EntryHook,
}

impl Hooks {
    /// Hooks of a client with no mount beside it: no groups, no job ids, no page cache.
    pub fn plain() -> Hooks {
        Hooks {
            jobid: Box::new(|_, _| String::new()),
            changed: Box::new(|_, _, _| {}),
            entry: Box::new(|_, _| {}),
        }
    }
}

/// Counters of the API (`llite.*.api_stats`).
#[derive(Default, Debug)]
pub struct ApiStats {
    /// Sockets accepted.
    pub conns: AtomicU64,
    /// Sockets refused (past [`API_CONNS_MAX`] or [`API_SESSIONS_MAX`]).
    pub refused: AtomicU64,
    /// Requests served.
    pub requests: AtomicU64,
    /// Bytes read through the API.
    pub read_bytes: AtomicU64,
    /// Bytes written through the API.
    pub write_bytes: AtomicU64,
    /// Sessions ended with files still open (their process died or did not close them).
    pub orphaned_sessions: AtomicU64,
    /// Files closed for sessions that ended with them open.
    pub orphaned_files: AtomicU64,
    /// Bytes of ring reads received straight into the ring's buffers (no copy in the
    /// node's client).
    pub landed_bytes: AtomicU64,
    /// Bytes of ring writes sent straight from the ring's buffers (no copy in the node's
    /// client).
    pub sent_bytes: AtomicU64,
    /// Rings refused for their memory (not a sealed plain memfd: e.g. hugetlbfs).
    pub rings_refused: AtomicU64,
}

/// One application process.
pub(crate) struct Session {
    id: u64,
    token: [u8; 16],
    pid: u32,
    pub(crate) cred: Cred,
    pub(crate) jobid: String,
    sockets: AtomicUsize,
    pub(crate) handles: Mutex<HashMap<u64, Arc<ops::Handle>>>,
    pub(crate) next_handle: AtomicU64,
    rings: Mutex<HashMap<u64, Arc<ring::Ring>>>,
    next_ring: AtomicU64,
}

/// What every socket's thread shares.
pub(crate) struct Shared {
    pub(crate) client: Arc<Client>,
    pub(crate) mountpoint: PathBuf,
    /// The mount's device (major, minor), learnt at the first attach.
    pub(crate) mount_dev: std::sync::OnceLock<(u32, u32)>,
    pub(crate) hooks: Hooks,
    pub(crate) stats: ApiStats,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    next_session: AtomicU64,
    conns: AtomicUsize,
    /// Rings served, all sessions together.
    rings: AtomicUsize,
    stop: AtomicBool,
}

/// The API's listener in a mount process.
pub struct NodeApi {
    shared: Arc<Shared>,
    socket: PathBuf,
}

impl NodeApi {
    /// Serves `client` (mounted at `mountpoint`) on a Unix socket at `socket` (replacing a
    /// stale one), open to every local user: the credentials of each caller are the
    /// kernel's, and the MDTs check them.
    pub fn start(
        client: Arc<Client>,
        mountpoint: &Path,
        socket: &Path,
        hooks: Hooks,
    ) -> std::io::Result<Arc<NodeApi>> {
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666))?;
        let shared = Arc::new(Shared {
            client,
            mountpoint: mountpoint.to_path_buf(),
            mount_dev: std::sync::OnceLock::new(),
            hooks,
            stats: ApiStats::default(),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            conns: AtomicUsize::new(0),
            rings: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("api-accept".into())
            .spawn(move || accept(&s, &listener))?;
        Ok(Arc::new(NodeApi {
            shared,
            socket: socket.to_path_buf(),
        }))
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The counters.
    pub fn stats(&self) -> &ApiStats {
        &self.shared.stats
    }

    /// Sessions open now and the files they hold open.
    pub fn sessions(&self) -> (usize, usize) {
        let sessions = self.shared.sessions.lock();
        let files = sessions.values().map(|s| s.handles.lock().len()).sum();
        (sessions.len(), files)
    }

    /// Stops taking sockets (those open end with their callers) and removes the socket.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which sees the flag.
        let _ = UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for NodeApi {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept(shared: &Arc<Shared>, listener: &UnixListener) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        if shared.conns.fetch_add(1, Ordering::AcqRel) >= API_CONNS_MAX {
            shared.conns.fetch_sub(1, Ordering::AcqRel);
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("node API: {API_CONNS_MAX} sockets open; one more refused");
            continue;
        }
        shared.stats.conns.fetch_add(1, Ordering::Relaxed);
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("api".into())
            .spawn(move || {
                serve(&s, stream);
                s.conns.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            shared.conns.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Who is at the other end of a socket, as the kernel recorded it when it connected.
struct Peer {
    pid: u32,
    uid: u32,
    gid: u32,
    /// Supplementary groups (`SO_PEERGROUPS`).
    groups: Vec<u32>,
}

/// The kernel's word on who is at the other end.
fn peer(stream: &UnixStream) -> std::io::Result<Peer> {
    let c = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(Peer {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
        groups: peer_groups(stream)?,
    })
}

/// Most supplementary groups a caller has (the kernel's `NGROUPS_MAX`).
const PEER_GROUPS_MAX: usize = 65_536;

/// The supplementary groups of the process at the other end when it connected
/// (`SO_PEERGROUPS`, Linux 4.13).
fn peer_groups(stream: &UnixStream) -> std::io::Result<Vec<u32>> {
    use std::os::fd::AsRawFd;
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<u32>()) as libc::socklen_t;
        // SAFETY: a valid socket, and a buffer of `len` bytes the kernel writes into.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<u32>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        // Too small: `len` says how much is needed.
        if e.raw_os_error() != Some(libc::ERANGE) || n <= groups.len() || n > PEER_GROUPS_MAX {
            return Err(e);
        }
        groups.resize(n, 0);
    }
}

/// Serves one socket until its caller closes it (or breaks the protocol).
fn serve(shared: &Arc<Shared>, mut stream: UnixStream) {
    let Ok(who) = peer(&stream) else {
        return;
    };
    let pid = who.pid;
    let timeout = std::time::Duration::from_millis(API_REPLY_TIMEOUT_MS);
    let _ = stream.set_write_timeout(Some(timeout));
    let mut session: Option<Arc<Session>> = None;
    loop {
        let frame = match read_frame(&mut stream, API_IO_BYTES_MAX) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                tracing::debug!("node API: pid {pid}: {e}");
                break;
            }
        };
        let req: ApiRequest = match decode_body(&frame.body) {
            Ok(r) => r,
            Err(_) => {
                if reply(&mut stream, &frame.header, Err(Status::Proto.code()), None).is_err() {
                    break;
                }
                continue;
            }
        };
        let answer = match (&session, req) {
            (None, ApiRequest::Hello { version, .. }) if !ApiRange::OURS.has(version) => {
                // Another API version: refused with the range this node speaks, and the
                // socket stays open for a `Hello` in one of them.
                tracing::debug!(
                    "node API: pid {pid} speaks API {version}; this node speaks {}",
                    ApiRange::OURS
                );
                if refuse_version(&mut stream, &frame.header).is_err() {
                    break;
                }
                continue;
            }
            (None, ApiRequest::Hello { attach, .. }) => match hello(shared, attach, &who) {
                Ok(s) => {
                    let a = ApiReply::Hello {
                        version: API_VERSION,
                        session: s.id,
                        token: s.token,
                        fsname: shared.client.fsname().to_string(),
                    };
                    session = Some(s);
                    Ok((a, None))
                }
                Err(st) => Err(st.code()),
            },
            // Nothing before the hello, and no second one.
            (None, _) | (Some(_), ApiRequest::Hello { .. }) => {
                let _ = reply(&mut stream, &frame.header, Err(Status::Proto.code()), None);
                break;
            }
            (
                Some(s),
                ApiRequest::RingSetup {
                    entries,
                    buffer_bytes,
                },
            ) => {
                let s = s.clone();
                match setup_ring(
                    shared,
                    &s,
                    &mut stream,
                    &frame.header,
                    entries,
                    buffer_bytes,
                ) {
                    Ok(id) => Ok((ApiReply::Ring { id }, None)),
                    Err(SetupError::Refused(st)) => Err(st.code()),
                    Err(SetupError::Broken) => break,
                }
            }
            (Some(s), ApiRequest::Attach) => {
                let s = s.clone();
                match take_fd(&mut stream, &frame.header) {
                    Some(fd) => {
                        shared.stats.requests.fetch_add(1, Ordering::Relaxed);
                        nacre_types::cred::set_current(Some(s.cred.clone()));
                        nacre_types::jobid::set_current(&s.jobid);
                        let r = ops::attach(shared, &s, fd);
                        nacre_types::cred::set_current(None);
                        r.map_err(|e| e.errno())
                    }
                    None => break,
                }
            }
            (Some(s), ApiRequest::RingClose { id }) => match s.rings.lock().remove(&id) {
                Some(r) => {
                    shared.rings.fetch_sub(1, Ordering::AcqRel);
                    r.stop();
                    Ok((ApiReply::Done, None))
                }
                None => Err(Status::Inval.code()),
            },
            (Some(s), req) => {
                shared.stats.requests.fetch_add(1, Ordering::Relaxed);
                nacre_types::cred::set_current(Some(s.cred.clone()));
                nacre_types::jobid::set_current(&s.jobid);
                let r = ops::run(shared, s, req, frame.bulk.as_deref());
                nacre_types::cred::set_current(None);
                r.map_err(|e| e.errno())
            }
        };
        let (out, bulk) = match answer {
            Ok((a, bulk)) => (Ok(a), bulk),
            Err(errno) => (Err(errno), None),
        };
        if reply(&mut stream, &frame.header, out, bulk.as_deref()).is_err() {
            break;
        }
    }
    if let Some(s) = session {
        leave(shared, &s);
    }
}

/// Opens a session, or joins one of the same process.
fn hello(
    shared: &Shared,
    attach: Option<(u64, [u8; 16])>,
    who: &Peer,
) -> Result<Arc<Session>, Status> {
    let (pid, uid, gid) = (who.pid, who.uid, who.gid);
    let mut sessions = shared.sessions.lock();
    if let Some((id, token)) = attach {
        let s = sessions.get(&id).ok_or(Status::NoEnt)?;
        // Another process (a child after fork included) opens its own session.
        if s.token != token || s.pid != pid {
            return Err(Status::Access);
        }
        s.sockets.fetch_add(1, Ordering::AcqRel);
        return Ok(s.clone());
    }
    if sessions.len() >= API_SESSIONS_MAX {
        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
        return Err(Status::Again);
    }
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).map_err(|_| Status::Io)?;
    let s = Arc::new(Session {
        id: shared.next_session.fetch_add(1, Ordering::Relaxed),
        token,
        pid,
        // Root's groups do not matter (it passes every check), as for FUSE callers.
        cred: Cred::new(
            uid,
            gid,
            if uid == 0 {
                Vec::new()
            } else {
                who.groups.clone()
            },
        ),
        jobid: (shared.hooks.jobid)(pid, uid),
        sockets: AtomicUsize::new(1),
        handles: Mutex::new(HashMap::new()),
        next_handle: AtomicU64::new(1),
        rings: Mutex::new(HashMap::new()),
        next_ring: AtomicU64::new(1),
    });
    sessions.insert(s.id, s.clone());
    Ok(s)
}

/// Why a ring was not set up.
enum SetupError {
    /// Answered with this status.
    Refused(Status),
    /// The socket broke (or its caller broke the protocol): it is dropped.
    Broken,
}

/// Sets up a ring for session `s`: checks the sizes, asks for the descriptors (answering
/// the request `req` with `SendFds`), takes them, maps the ring and starts serving it.
fn setup_ring(
    shared: &Arc<Shared>,
    s: &Arc<Session>,
    stream: &mut UnixStream,
    req: &Header,
    entries: u32,
    buffer_bytes: u64,
) -> Result<u64, SetupError> {
    nacre_wire::ring::check_sizes(entries, buffer_bytes)
        .map_err(|_| SetupError::Refused(Status::Inval))?;
    if s.rings.lock().len() >= ring::RINGS_PER_SESSION_MAX
        || shared.rings.load(Ordering::Acquire) >= ring::RINGS_MAX
    {
        return Err(SetupError::Refused(Status::MFile));
    }
    reply(stream, req, Ok(ApiReply::SendFds), None).map_err(|_| SetupError::Broken)?;
    let timeout = std::time::Duration::from_millis(API_REPLY_TIMEOUT_MS);
    let _ = stream.set_read_timeout(Some(timeout));
    let fds = recv_fds::<3>(stream, b'R');
    let _ = stream.set_read_timeout(None);
    let fds = fds.ok_or(SetupError::Broken)?;
    let r = ring::Ring::start(shared, s, entries, buffer_bytes, fds)
        .map_err(|e| SetupError::Refused(Status::from_code(e.errno())))?;
    let id = s.next_ring.fetch_add(1, Ordering::Relaxed);
    s.rings.lock().insert(id, r);
    shared.rings.fetch_add(1, Ordering::AcqRel);
    Ok(id)
}

/// Answers an `Attach` with `SendFds` and takes the descriptor sent with one byte `F`;
/// `None` when the socket broke or its caller broke the protocol (it is dropped).
fn take_fd(stream: &mut UnixStream, req: &Header) -> Option<rustix::fd::OwnedFd> {
    reply(stream, req, Ok(ApiReply::SendFds), None).ok()?;
    let timeout = std::time::Duration::from_millis(API_REPLY_TIMEOUT_MS);
    let _ = stream.set_read_timeout(Some(timeout));
    let fds = recv_fds::<1>(stream, b'F');
    let _ = stream.set_read_timeout(None);
    let [fd] = fds?;
    Some(fd)
}

/// `N` descriptors, sent with one byte `tag` (`R`: a ring's three; `F`: a file to attach).
fn recv_fds<const N: usize>(stream: &UnixStream, tag: u8) -> Option<[rustix::fd::OwnedFd; N]> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    // Room for three, the most any request sends: more are refused below.
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = rustix::net::recvmsg(
        stream,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    if got.bytes != 1 || byte[0] != tag {
        return None;
    }
    fds.try_into().ok()
}

/// One socket of `s` closed; the last closes the files it left open and its rings.
fn leave(shared: &Shared, s: &Arc<Session>) {
    if s.sockets.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    shared.sessions.lock().remove(&s.id);
    for (_, r) in s.rings.lock().drain() {
        shared.rings.fetch_sub(1, Ordering::AcqRel);
        r.stop();
    }
    let left: Vec<Arc<ops::Handle>> = s.handles.lock().drain().map(|(_, h)| h).collect();
    if left.is_empty() {
        return;
    }
    shared
        .stats
        .orphaned_sessions
        .fetch_add(1, Ordering::Relaxed);
    nacre_types::cred::set_current(Some(s.cred.clone()));
    for h in left {
        shared.stats.orphaned_files.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = shared.client.close(&h.file) {
            tracing::warn!(
                "node API: closing {} left open by pid {}: {e}",
                h.file.fid,
                s.pid
            );
        }
    }
    nacre_types::cred::set_current(None);
}

/// Answers the request of `req`: a reply, or an errno.
/// Answers a `Hello` of an API version this node does not speak: `EPROTO`, with the
/// range it speaks as the body (nacre_wire::api::ApiRange).
fn refuse_version(stream: &mut UnixStream, req: &Header) -> std::io::Result<()> {
    let mut h = *req;
    h.flags = FLAG_REPLY;
    h.status = Status::Proto.code();
    let body = ApiRange::OURS.encode();
    h.seal(&body, None, false);
    write_frame(stream, &h, &body, None)
}

fn reply(
    stream: &mut UnixStream,
    req: &Header,
    out: Result<ApiReply, i32>,
    bulk: Option<&[u8]>,
) -> std::io::Result<()> {
    let mut h = *req;
    h.flags = FLAG_REPLY;
    let body = match out {
        Ok(a) => {
            h.status = 0;
            encode_body(&a)
        }
        Err(errno) => {
            h.status = errno;
            Vec::new()
        }
    };
    let bulk = if h.status == 0 { bulk } else { None };
    h.seal(&body, bulk, false);
    write_frame(stream, &h, &body, bulk)
}
