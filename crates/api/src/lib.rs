//! Applications' side of the node's client API (docs/api.md): open, read, write and the
//! namespace of a Nacre file system through the node's `nacre mount` process, over a Unix
//! socket — no kernel round trip through FUSE per request, and no client of its own (the
//! mount holds the locks, caches, key and recovery state once for the node). It depends on
//! `nacre-wire` and `nacre-types` only; `libnacre.so` (`nacre-capi`), the Python package
//! (`nacre-python`) and `LD_PRELOAD` (`nacre-preload`) are built on it.
//!
//! ```no_run
//! let node = nacre_api::Node::connect("/mnt/nacre")?;
//! let f = node.create("ckpt/rank0", 0o644)?;
//! f.write_all_at(&[7u8; 1 << 20], 0)?;
//! f.fsync()?;
//! # Ok::<(), nacre_api::Error>(())
//! ```
//!
//! Paths are relative to the mount's root (`a/b` and `/a/b` are the same file). A `Node` is
//! shared by threads: each call takes a socket of its own (up to `SOCKETS_MAX` kept), all
//! joined to one session. It is fork-safe: a child process opens its own session on first
//! use. A `File` has `pread`/`pwrite` calls and implements `Read`, `Write` and `Seek`. Reads
//! land straight in the caller's buffer and writes leave from it (one copy each way, in the
//! kernel's socket).
//!
//! ring.rs: `Ring`, the fast data path: a memfd and eventfds passed to the node's client with
//! `SCM_RIGHTS`, then entries prepared, submitted and waited for, many in flight from one
//! thread.

use nacre_wire::api::{
    ApiRange, ApiReply, ApiRequest, API_HEADER_VERSION, API_IO_BYTES_MAX, API_VERSION,
};
use nacre_wire::header::FLAG_REPLY;
use nacre_wire::{decode_body, encode_body, Header, HEADER_BYTES};
use parking_lot::Mutex;
use std::io::{IoSlice, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use nacre_wire::api::{ApiEntry as Entry, ApiStat as Stat, ApiStripe as Stripe};
pub use ring::{Completion, Ring};

mod ring;

/// The extended attribute of a mount's root naming its API socket.
pub const XATTR_API: &str = "user.nacre.api";
/// Sockets a [`Node`] keeps for reuse (more are opened while more threads call at once).
pub const SOCKETS_MAX: usize = 64;
/// The API version this library speaks.
pub const VERSION: u32 = API_VERSION;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node's client answered with an error.
    #[error("{op}: {}", std::io::Error::from_raw_os_error(*errno))]
    Errno {
        /// The operation.
        op: &'static str,
        /// The errno.
        errno: i32,
    },
    /// The node's client speaks no API version this library speaks.
    #[error(
        "the node's client speaks {theirs}, this library {ours}: use a libnacre of its release"
    )]
    Version {
        /// What this library speaks.
        ours: ApiRange,
        /// What the node's client speaks.
        theirs: ApiRange,
    },
    /// The node's client cannot be reached (no mount, or it stopped).
    #[error("cannot reach the node's client ({what}): {cause}")]
    Unreachable {
        /// What was tried.
        what: String,
        /// Why it failed.
        cause: std::io::Error,
    },
}

impl Error {
    /// The errno (`EIO` for a broken channel, `ENOTCONN` for an unreachable client).
    pub fn errno(&self) -> i32 {
        match self {
            Error::Errno { errno, .. } => *errno,
            Error::Unreachable { .. } => libc::ENOTCONN,
            Error::Version { .. } => libc::EPROTO,
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.errno())
    }
}

/// A result of this library.
pub type Result<T> = std::result::Result<T, Error>;

fn errno(op: &'static str, errno: i32) -> Error {
    Error::Errno { op, errno }
}

/// One socket to the node's client, joined to the session.
struct Sock {
    stream: UnixStream,
    xid: u64,
}

struct State {
    /// The process the session is of (a forked child opens its own).
    pid: u32,
    session: Option<(u64, [u8; 16])>,
    idle: Vec<Sock>,
}

struct Inner {
    socket: PathBuf,
    fsname: Mutex<String>,
    umask: u32,
    state: Mutex<State>,
}

/// The node's client, as one application process reaches it. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

/// The umask of this process (applied to the modes of what it creates, as the kernel
/// would).
fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// The API socket a mount names (its root's [`XATTR_API`]).
pub fn socket_of(mount: &Path) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let unreachable = |cause: std::io::Error| Error::Unreachable {
        what: format!("{} names no node API", mount.display()),
        cause,
    };
    let path = std::ffi::CString::new(mount.as_os_str().as_bytes())
        .map_err(|_| errno("connect", libc::EINVAL))?;
    let name = std::ffi::CString::new(XATTR_API).expect("no NUL");
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid NUL-terminated strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(unreachable(std::io::Error::last_os_error()));
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&buf)))
}

impl Node {
    /// Connects to the node's client serving the mount at `mount` (a Nacre mount point or
    /// any path in one).
    pub fn connect(mount: impl AsRef<Path>) -> Result<Node> {
        Node::connect_socket(&socket_of(mount.as_ref())?)
    }

    /// Connects to the node's client at its API socket.
    pub fn connect_socket(socket: &Path) -> Result<Node> {
        let node = Node {
            inner: Arc::new(Inner {
                socket: socket.to_path_buf(),
                fsname: Mutex::new(String::new()),
                umask: process_umask(),
                state: Mutex::new(State {
                    pid: std::process::id(),
                    session: None,
                    idle: Vec::new(),
                }),
            }),
        };
        // The session opens now, so an unreachable client is said at once.
        let sock = node.socket()?;
        node.put_back(sock);
        Ok(node)
    }

    /// The name of the file system.
    pub fn fsname(&self) -> String {
        self.inner.fsname.lock().clone()
    }

    /// A socket of the session: an idle one, else a new one joined to it.
    fn socket(&self) -> Result<Sock> {
        let mut st = self.inner.state.lock();
        let pid = std::process::id();
        if st.pid != pid {
            // A child after fork: the parent's sockets and session are not its own.
            // (Closing the child's copies of them leaves the parent's open.)
            st.pid = pid;
            st.session = None;
            st.idle.clear();
        }
        if let Some(s) = st.idle.pop() {
            return Ok(s);
        }
        // A new socket; the first opens the session, under the lock so only one does.
        let attach = st.session;
        let mut opening = match attach {
            None => Some(st),
            Some(_) => {
                drop(st);
                None
            }
        };
        let stream =
            UnixStream::connect(&self.inner.socket).map_err(|cause| Error::Unreachable {
                what: format!("connecting to {}", self.inner.socket.display()),
                cause,
            })?;
        let mut sock = Sock { stream, xid: 1 };
        let hello = ApiRequest::Hello {
            version: API_VERSION,
            attach,
        };
        match self.exchange(&mut sock, &hello, None, None)? {
            (
                ApiReply::Hello {
                    session,
                    token,
                    fsname,
                    ..
                },
                _,
            ) => {
                if let Some(st) = opening.as_mut() {
                    st.session = Some((session, token));
                    *self.inner.fsname.lock() = fsname;
                }
                Ok(sock)
            }
            _ => Err(errno("connect", libc::EPROTO)),
        }
    }

    fn put_back(&self, sock: Sock) {
        let mut st = self.inner.state.lock();
        if st.idle.len() < SOCKETS_MAX && st.pid == std::process::id() {
            st.idle.push(sock);
        }
    }

    /// One request and its reply on a socket of the session; a reply's bulk goes into
    /// `into` (its length returned).
    fn call(
        &self,
        req: &ApiRequest,
        out: Option<&[u8]>,
        into: Option<&mut [u8]>,
    ) -> Result<(ApiReply, usize)> {
        let mut sock = self.socket()?;
        let r = self.exchange(&mut sock, req, out, into);
        match &r {
            Err(Error::Unreachable { .. }) => {}
            _ => self.put_back(sock),
        }
        r
    }

    fn exchange(
        &self,
        sock: &mut Sock,
        req: &ApiRequest,
        out: Option<&[u8]>,
        into: Option<&mut [u8]>,
    ) -> Result<(ApiReply, usize)> {
        let broken = |cause: std::io::Error| self.broken(cause);
        sock.xid += 1;
        let body = encode_body(req);
        let mut h = Header::request(req.opcode(), 0, sock.xid);
        h.version = API_HEADER_VERSION;
        h.seal(&body, out, false);
        let head = h.encode();
        let mut slices = [
            IoSlice::new(&head),
            IoSlice::new(&body),
            IoSlice::new(out.unwrap_or(&[])),
        ];
        let mut slices: &mut [IoSlice<'_>] = &mut slices;
        while !slices.is_empty() {
            // MSG_NOSIGNAL: a node client that went away is an error here, never a
            // SIGPIPE that kills the application (whose disposition is its own).
            let n = rustix::net::sendmsg(
                &sock.stream,
                slices,
                &mut rustix::net::SendAncillaryBuffer::default(),
                rustix::net::SendFlags::NOSIGNAL,
            )
            .map_err(|e| broken(e.into()))?;
            if n == 0 {
                return Err(broken(std::io::ErrorKind::WriteZero.into()));
            }
            IoSlice::advance_slices(&mut slices, n);
        }
        self.read_reply(sock, req, into)
    }

    fn broken(&self, cause: std::io::Error) -> Error {
        Error::Unreachable {
            what: format!("talking to {}", self.inner.socket.display()),
            cause,
        }
    }

    /// Reads the reply to `req`, the socket's last request; its bulk goes into `into`.
    fn read_reply(
        &self,
        sock: &mut Sock,
        req: &ApiRequest,
        into: Option<&mut [u8]>,
    ) -> Result<(ApiReply, usize)> {
        let broken = |cause: std::io::Error| self.broken(cause);
        let proto = || broken(std::io::Error::from_raw_os_error(libc::EPROTO));
        let mut head = [0u8; HEADER_BYTES];
        sock.stream.read_exact(&mut head).map_err(broken)?;
        let rh = Header::decode_any_version(&head, API_IO_BYTES_MAX).map_err(|_| proto())?;
        if rh.flags & FLAG_REPLY == 0 || rh.xid != sock.xid {
            return Err(proto());
        }
        let mut rbody = vec![0u8; rh.body_len as usize];
        sock.stream.read_exact(&mut rbody).map_err(broken)?;
        rh.check_body(&rbody).map_err(|_| proto())?;
        let bulk = rh.bulk_len as usize;
        match into {
            Some(buf) if bulk <= buf.len() => {
                sock.stream.read_exact(&mut buf[..bulk]).map_err(broken)?
            }
            _ if bulk == 0 => {}
            _ => return Err(proto()),
        }
        if rh.status != 0 {
            if let (libc::EPROTO, ApiRequest::Hello { .. }) = (rh.status, req) {
                if let Some(theirs) = ApiRange::decode(&rbody) {
                    return Err(Error::Version {
                        ours: ApiRange::OURS,
                        theirs,
                    });
                }
            }
            return Err(errno(op_name(req), rh.status));
        }
        let reply: ApiReply = decode_body(&rbody).map_err(|_| proto())?;
        Ok((reply, bulk))
    }

    /// Sets up a ring with the node's client: the request, then its three descriptors
    /// (memfd, submission eventfd, completion eventfd) on the same socket.
    fn ring_setup(
        &self,
        entries: u32,
        buffer_bytes: u64,
        fds: [&rustix::fd::OwnedFd; 3],
    ) -> Result<u64> {
        use rustix::fd::AsFd;
        let req = ApiRequest::RingSetup {
            entries,
            buffer_bytes,
        };
        let fds = [fds[0].as_fd(), fds[1].as_fd(), fds[2].as_fd()];
        ring::ring_id(self.call_with_fds(&req, b'R', &fds)?)
    }

    /// A request answered `SendFds`, then `fds` sent with the one byte `tag` on the same
    /// socket, then its reply.
    fn call_with_fds(
        &self,
        req: &ApiRequest,
        tag: u8,
        fds: &[rustix::fd::BorrowedFd<'_>],
    ) -> Result<ApiReply> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let mut sock = self.socket()?;
        match self.exchange(&mut sock, req, None, None)?.0 {
            ApiReply::SendFds => {}
            _ => return Err(errno(op_name(req), libc::EPROTO)),
        }
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(errno(op_name(req), libc::EINVAL));
        }
        let sent = rustix::net::sendmsg(
            &sock.stream,
            &[IoSlice::new(&[tag])],
            &mut control,
            SendFlags::NOSIGNAL,
        );
        if let Err(e) = sent {
            return Err(self.broken(e.into()));
        }
        let r = self.read_reply(&mut sock, req, None);
        if !matches!(r, Err(Error::Unreachable { .. })) {
            self.put_back(sock);
        }
        Ok(r?.0)
    }

    /// Serves a file this process opened through the mount (a kernel file descriptor of a
    /// regular file of this mount) through the node's client: a [`File`] with the access
    /// `fd` was opened with, positioned at 0 (the descriptor's own offset is the kernel's).
    /// The descriptor is not kept; it stays the caller's. What LD_PRELOAD builds on.
    pub fn attach(&self, fd: rustix::fd::BorrowedFd<'_>) -> Result<File> {
        match self.call_with_fds(&ApiRequest::Attach, b'F', &[fd])? {
            ApiReply::Opened { handle, stat } => Ok(self.file(handle, stat)),
            _ => Err(errno("attach", libc::EPROTO)),
        }
    }

    fn file(&self, handle: u64, stat: Stat) -> File {
        File {
            node: self.clone(),
            handle,
            pid: std::process::id(),
            pos: AtomicU64::new(0),
            stat,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn done(&self, req: ApiRequest) -> Result<()> {
        match self.call(&req, None, None)?.0 {
            ApiReply::Done => Ok(()),
            _ => Err(errno(op_name(&req), libc::EPROTO)),
        }
    }

    /// Opens `path` with open(2) `flags` (`mode`: of a file `O_CREAT` makes, before the
    /// umask).
    pub fn open(&self, path: impl AsRef<[u8]>, flags: i32, mode: u32) -> Result<File> {
        let req = ApiRequest::Open {
            path: path.as_ref().to_vec(),
            flags,
            mode: mode & !self.inner.umask,
        };
        match self.call(&req, None, None)?.0 {
            ApiReply::Opened { handle, stat } => Ok(self.file(handle, stat)),
            _ => Err(errno("open", libc::EPROTO)),
        }
    }

    /// Creates (or truncates) `path` for writing, as `creat(2)`.
    pub fn create(&self, path: impl AsRef<[u8]>, mode: u32) -> Result<File> {
        self.open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, mode)
    }

    /// Attributes of `path` (a final symbolic link followed).
    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_with(path.as_ref(), true)
    }

    /// Attributes of `path` itself (a final symbolic link not followed).
    pub fn lstat(&self, path: impl AsRef<[u8]>) -> Result<Stat> {
        self.stat_with(path.as_ref(), false)
    }

    fn stat_with(&self, path: &[u8], follow: bool) -> Result<Stat> {
        let req = ApiRequest::Stat {
            path: path.to_vec(),
            follow,
        };
        match self.call(&req, None, None)?.0 {
            ApiReply::Stat(s) => Ok(s),
            _ => Err(errno("stat", libc::EPROTO)),
        }
    }

    /// Every entry of directory `path` (without `.` and `..`), in name order.
    pub fn readdir(&self, path: impl AsRef<[u8]>) -> Result<Vec<Entry>> {
        let mut all: Vec<Entry> = Vec::new();
        loop {
            let req = ApiRequest::Readdir {
                path: path.as_ref().to_vec(),
                after: all.last().map(|e| e.name.clone()),
            };
            match self.call(&req, None, None)?.0 {
                ApiReply::Entries { entries, more } => {
                    let got = entries.len();
                    all.extend(entries);
                    if !more || got == 0 {
                        return Ok(all);
                    }
                }
                _ => return Err(errno("readdir", libc::EPROTO)),
            }
        }
    }

    /// Makes directory `path`.
    pub fn mkdir(&self, path: impl AsRef<[u8]>, mode: u32) -> Result<()> {
        self.done(ApiRequest::Mkdir {
            path: path.as_ref().to_vec(),
            mode: mode & !self.inner.umask,
        })
    }

    /// Removes the empty directory `path`.
    pub fn rmdir(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.done(ApiRequest::Rmdir {
            path: path.as_ref().to_vec(),
        })
    }

    /// Removes the name `path`.
    pub fn unlink(&self, path: impl AsRef<[u8]>) -> Result<()> {
        self.done(ApiRequest::Unlink {
            path: path.as_ref().to_vec(),
        })
    }

    /// Renames `from` to `to`.
    pub fn rename(&self, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) -> Result<()> {
        self.done(ApiRequest::Rename {
            from: from.as_ref().to_vec(),
            to: to.as_ref().to_vec(),
        })
    }

    /// Makes `path` a hard link to `existing`.
    pub fn link(&self, existing: impl AsRef<[u8]>, path: impl AsRef<[u8]>) -> Result<()> {
        self.done(ApiRequest::Link {
            existing: existing.as_ref().to_vec(),
            path: path.as_ref().to_vec(),
        })
    }

    /// Makes `path` a symbolic link holding `target`.
    pub fn symlink(&self, target: impl AsRef<[u8]>, path: impl AsRef<[u8]>) -> Result<()> {
        self.done(ApiRequest::Symlink {
            target: target.as_ref().to_vec(),
            path: path.as_ref().to_vec(),
        })
    }

    /// What the symbolic link `path` holds.
    pub fn readlink(&self, path: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let req = ApiRequest::Readlink {
            path: path.as_ref().to_vec(),
        };
        match self.call(&req, None, None)?.0 {
            ApiReply::Target(t) => Ok(t),
            _ => Err(errno("readlink", libc::EPROTO)),
        }
    }

    /// Creates the empty file `path` striped over `count` OSTs (0: the default; `u32::MAX`:
    /// all) in chunks of `size` bytes (0: the default), in OST pool `pool`.
    pub fn setstripe(
        &self,
        path: impl AsRef<[u8]>,
        count: u32,
        size: u64,
        pool: Option<&str>,
        mode: u32,
    ) -> Result<()> {
        self.done(ApiRequest::SetStripe {
            path: path.as_ref().to_vec(),
            count,
            size,
            pool: pool.map(str::to_string),
            mode: mode & !self.inner.umask,
        })
    }

    /// The layout of the regular file `path`.
    pub fn getstripe(&self, path: impl AsRef<[u8]>) -> Result<Stripe> {
        let req = ApiRequest::GetStripe {
            path: path.as_ref().to_vec(),
        };
        match self.call(&req, None, None)?.0 {
            ApiReply::Stripe(s) => Ok(s),
            _ => Err(errno("getstripe", libc::EPROTO)),
        }
    }
}

fn op_name(req: &ApiRequest) -> &'static str {
    match req {
        ApiRequest::Hello { .. } => "connect",
        ApiRequest::Open { .. } => "open",
        ApiRequest::Close { .. } => "close",
        ApiRequest::Read { .. } => "read",
        ApiRequest::Write { .. } => "write",
        ApiRequest::Fsync { .. } => "fsync",
        ApiRequest::Ftruncate { .. } => "ftruncate",
        ApiRequest::Stat { .. } => "stat",
        ApiRequest::Fstat { .. } => "fstat",
        ApiRequest::Readdir { .. } => "readdir",
        ApiRequest::Mkdir { .. } => "mkdir",
        ApiRequest::Rmdir { .. } => "rmdir",
        ApiRequest::Unlink { .. } => "unlink",
        ApiRequest::Rename { .. } => "rename",
        ApiRequest::Link { .. } => "link",
        ApiRequest::Symlink { .. } => "symlink",
        ApiRequest::Readlink { .. } => "readlink",
        ApiRequest::SetStripe { .. } => "setstripe",
        ApiRequest::GetStripe { .. } => "getstripe",
        ApiRequest::RingSetup { .. } | ApiRequest::RingClose { .. } => "ring",
        ApiRequest::Attach => "attach",
    }
}

/// An open file. Shared by threads (`read_at`/`write_at` take `&self`); the position of
/// `Read`/`Write`/`Seek` is the file's own. Closed when dropped (errors lost: call
/// [`File::close`] to see them).
pub struct File {
    node: Node,
    handle: u64,
    /// The process that opened it: a child after fork holds a copy it cannot use (its
    /// session is its own), and whose drop leaves the parent's file open.
    pid: u32,
    pos: AtomicU64,
    stat: Stat,
    closed: std::sync::atomic::AtomicBool,
}

impl File {
    /// Its handle at the node's client: `EBADF` in a child after fork (the handle is its
    /// parent's session's).
    pub(crate) fn handle(&self) -> Result<u64> {
        if self.pid != std::process::id() {
            return Err(errno("file", libc::EBADF));
        }
        Ok(self.handle)
    }

    /// The attributes it was opened with.
    pub fn opened_stat(&self) -> &Stat {
        &self.stat
    }

    /// Reads up to `buf.len()` bytes at `offset` (fewer at the end of file).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(API_IO_BYTES_MAX as usize);
            let req = ApiRequest::Read {
                handle: self.handle()?,
                offset: offset + done as u64,
                len: want as u32,
            };
            let (_, n) = self
                .node
                .call(&req, None, Some(&mut buf[done..done + want]))?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Writes `buf` at `offset` (at the end of file if opened with `O_APPEND`).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            let chunk = &buf[done..(done + API_IO_BYTES_MAX as usize).min(buf.len())];
            let req = ApiRequest::Write {
                handle: self.handle()?,
                offset: offset + done as u64,
            };
            match self.node.call(&req, Some(chunk), None)?.0 {
                ApiReply::Written { n } => done += n as usize,
                _ => return Err(errno("write", libc::EPROTO)),
            }
        }
        Ok(done)
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write_at(buf, offset).map(|_| ())
    }

    /// Reads into `bufs` in order, from `offset`.
    pub fn readv_at(&self, bufs: &mut [std::io::IoSliceMut<'_>], offset: u64) -> Result<usize> {
        let mut at = offset;
        let mut total = 0;
        for b in bufs.iter_mut() {
            let n = self.read_at(b, at)?;
            total += n;
            at += n as u64;
            if n < b.len() {
                break;
            }
        }
        Ok(total)
    }

    /// Writes `bufs` in order, from `offset`.
    pub fn writev_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> Result<usize> {
        let mut at = offset;
        for b in bufs {
            at += self.write_at(b, at)? as u64;
        }
        Ok((at - offset) as usize)
    }

    /// Makes what was written durable.
    pub fn fsync(&self) -> Result<()> {
        self.node.done(ApiRequest::Fsync {
            handle: self.handle()?,
        })
    }

    /// Sets the file's size.
    pub fn set_len(&self, size: u64) -> Result<()> {
        self.node.done(ApiRequest::Ftruncate {
            handle: self.handle()?,
            size,
        })
    }

    /// Current attributes.
    pub fn stat(&self) -> Result<Stat> {
        let req = ApiRequest::Fstat {
            handle: self.handle()?,
        };
        match self.node.call(&req, None, None)?.0 {
            ApiReply::Stat(s) => Ok(s),
            _ => Err(errno("fstat", libc::EPROTO)),
        }
    }

    /// Closes the file: what the close reports (kept writes refused) is returned.
    pub fn close(self) -> Result<()> {
        self.close_shared()
    }

    /// [`File::close`] through a shared reference (for bindings whose objects are shared):
    /// the first call closes, later ones do nothing; calls on a closed file fail `EBADF`.
    pub fn close_shared(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) || self.pid != std::process::id() {
            return Ok(());
        }
        self.node.done(ApiRequest::Close {
            handle: self.handle()?,
        })
    }

    /// The position `Read`, `Write` and `Seek` use.
    pub fn position(&self) -> u64 {
        self.pos.load(Ordering::Relaxed)
    }

    /// Sets the position.
    pub fn set_position(&self, at: u64) {
        self.pos.store(at, Ordering::Relaxed);
    }

    /// Moves the position on by `n` (after reading or writing `n` bytes at it).
    pub fn advance(&self, n: u64) {
        self.pos.fetch_add(n, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("handle", &self.handle)
            .field("position", &self.position())
            .finish()
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let _ = self.close_shared();
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.read_at(buf, self.position())?;
        self.pos.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.write_at(buf, self.position())?;
        self.pos.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl std::io::Seek for File {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let base = match to {
            std::io::SeekFrom::Start(o) => {
                self.pos.store(o, Ordering::Relaxed);
                return Ok(o);
            }
            std::io::SeekFrom::Current(d) => (self.position(), d),
            std::io::SeekFrom::End(d) => (self.stat()?.size, d),
        };
        let at = base
            .0
            .checked_add_signed(base.1)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        self.pos.store(at, Ordering::Relaxed);
        Ok(at)
    }
}
