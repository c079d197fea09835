//! One API request run on the node's client, with the caller's credentials set on the
//! thread (lib.rs): open files are the session's handles; data goes through the client's
//! direct path (as `O_DIRECT` through the mount), and the mount's page cache of what a
//! write changed is dropped.

use crate::paths::{Walked, Walker};
use crate::{Session, Shared, API_HANDLES_MAX};
use nacre_client::{Client, ClientError, OpenFile};
use nacre_types::cred::{MAY_READ, MAY_WRITE};
use nacre_types::layout::StripeSpec;
use nacre_types::{AlignedBuf, Attr, Fid, FileKind, PoolName, SetAttr, Status};
use nacre_wire::api::{
    ApiEntry, ApiReply, ApiRequest, ApiStat, ApiStripe, API_IO_BYTES_MAX, API_READDIR_ENTRIES_MAX,
};
use nacre_wire::mds::LayoutInfo;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A file a session opened.
pub(crate) struct Handle {
    pub(crate) file: OpenFile,
    readable: bool,
    writable: bool,
}

type Answer = Result<(ApiReply, Option<AlignedBuf>), ClientError>;

fn err(s: Status) -> ClientError {
    ClientError::from(s)
}

/// Attributes as stat(2) shows them through the mount (the mount's root is inode 1).
fn stat_of(client: &Client, a: &Attr) -> ApiStat {
    let root = client.root().ok();
    ApiStat {
        ino: if Some(a.fid) == root {
            Fid::ROOT_INO
        } else {
            a.fid.to_ino()
        },
        mode: a.mode(),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        blocks: a.blocks,
        atime: (a.atime.sec, a.atime.nsec),
        mtime: (a.mtime.sec, a.mtime.nsec),
        ctime: (a.ctime.sec, a.ctime.nsec),
        rdev: a.rdev,
    }
}

/// The handle `handle` of session `s`.
fn handle(s: &Session, handle: u64) -> Result<Arc<Handle>, ClientError> {
    s.handles
        .lock()
        .get(&handle)
        .cloned()
        .ok_or_else(|| err(Status::BadF))
}

/// The entry a path must name.
fn existing(w: Walked) -> Result<Attr, ClientError> {
    w.attr.ok_or_else(|| err(Status::NoEnt))
}

/// A path whose last name must not exist yet (it is to be made).
fn new_name(w: Walked) -> Result<(Fid, Vec<u8>), ClientError> {
    match (w.attr, w.name.is_empty()) {
        (Some(_), _) | (None, true) => Err(err(Status::Exist)),
        (None, false) => Ok((w.parent, w.name)),
    }
}

/// A path whose last name is to be removed or renamed.
fn old_name(w: Walked) -> Result<(Fid, Vec<u8>), ClientError> {
    match (w.attr, w.name.is_empty()) {
        (_, true) => Err(err(Status::Busy)),
        (None, false) => Err(err(Status::NoEnt)),
        (Some(_), false) => Ok((w.parent, w.name)),
    }
}

/// Runs `req` for session `s`.
pub(crate) fn run(shared: &Shared, s: &Session, req: ApiRequest, bulk: Option<&[u8]>) -> Answer {
    let client = &*shared.client;
    let walker = Walker {
        client,
        mountpoint: &shared.mountpoint,
    };
    for p in req.paths() {
        if p.len() > nacre_wire::api::API_PATH_BYTES_MAX {
            return Err(err(Status::NameTooLong));
        }
    }
    let done = || Ok((ApiReply::Done, None));
    // What the mount's kernel cached of a name this request changed goes first.
    let entry = |parent: Fid, name: &[u8]| (shared.hooks.entry)(parent, name);
    match req {
        // Handled on the socket itself (lib.rs).
        ApiRequest::Hello { .. }
        | ApiRequest::RingSetup { .. }
        | ApiRequest::RingClose { .. }
        | ApiRequest::Attach => Err(err(Status::Proto)),
        ApiRequest::Open { path, flags, mode } => open(shared, s, &walker, &path, flags, mode),
        ApiRequest::Close { handle } => {
            let h = s.handles.lock().remove(&handle);
            let h = h.ok_or_else(|| err(Status::BadF))?;
            client.close(&h.file)?;
            done()
        }
        ApiRequest::Read {
            handle: hd,
            offset,
            len,
        } => {
            let data = ring_read(shared, &*handle(s, hd)?, offset, len, true)?;
            Ok((ApiReply::Data, Some(data)))
        }
        ApiRequest::Write { handle: hd, offset } => {
            let n = ring_write(shared, &*handle(s, hd)?, offset, bulk.unwrap_or(&[]), None)?;
            Ok((ApiReply::Written { n: n as u64 }, None))
        }
        ApiRequest::Fsync { handle: hd } => {
            client.fsync(&handle(s, hd)?.file)?;
            done()
        }
        ApiRequest::Ftruncate { handle: hd, size } => {
            let h = handle(s, hd)?;
            if !h.writable {
                return Err(err(Status::Inval));
            }
            let set = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            client.setattr(h.file.fid, set)?;
            (shared.hooks.changed)(h.file.fid, size, u64::MAX - size);
            done()
        }
        ApiRequest::Stat { path, follow } => {
            let a = existing(walker.walk(&path, follow)?)?;
            Ok((ApiReply::Stat(stat_of(client, &a)), None))
        }
        ApiRequest::Fstat { handle: hd } => {
            let a = client.getattr(handle(s, hd)?.file.fid)?;
            Ok((ApiReply::Stat(stat_of(client, &a)), None))
        }
        ApiRequest::Readdir { path, after } => {
            let dir = existing(walker.walk(&path, true)?)?;
            if dir.kind != FileKind::Directory {
                return Err(err(Status::NotDir));
            }
            let (page, eof) = client.readdir(dir.fid, after.as_deref(), API_READDIR_ENTRIES_MAX)?;
            let root = client.root().ok();
            let entries = page
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| ApiEntry {
                    ino: if Some(e.fid) == root {
                        Fid::ROOT_INO
                    } else {
                        e.fid.to_ino()
                    },
                    kind: e.kind.mode_bits(),
                    name: e.name,
                })
                .collect();
            Ok((
                ApiReply::Entries {
                    entries,
                    more: !eof,
                },
                None,
            ))
        }
        ApiRequest::Mkdir { path, mode } => {
            let (parent, name) = new_name(walker.walk(&path, false)?)?;
            client.mkdir(parent, &name, mode & 0o7777, s.cred.uid, s.cred.gid)?;
            entry(parent, &name);
            done()
        }
        ApiRequest::Rmdir { path } => {
            let (parent, name) = old_name(walker.walk(&path, false)?)?;
            client.rmdir(parent, &name)?;
            entry(parent, &name);
            done()
        }
        ApiRequest::Unlink { path } => {
            let w = walker.walk(&path, false)?;
            if w.attr
                .as_ref()
                .is_some_and(|a| a.kind == FileKind::Directory)
            {
                return Err(err(Status::IsDir));
            }
            let gone = w.attr.as_ref().map(|a| a.fid);
            let (parent, name) = old_name(w)?;
            client.unlink(parent, &name)?;
            entry(parent, &name);
            if let Some(fid) = gone {
                (shared.hooks.changed)(fid, 0, 0);
            }
            done()
        }
        ApiRequest::Rename { from, to } => {
            let (p1, n1) = old_name(walker.walk(&from, false)?)?;
            let w2 = walker.walk(&to, false)?;
            if w2.name.is_empty() {
                return Err(err(Status::Busy));
            }
            client.rename(p1, &n1, w2.parent, &w2.name, false)?;
            entry(p1, &n1);
            entry(w2.parent, &w2.name);
            done()
        }
        ApiRequest::Link {
            existing: from,
            path,
        } => {
            let a = existing(walker.walk(&from, false)?)?;
            if a.kind == FileKind::Directory {
                return Err(err(Status::Perm));
            }
            let (parent, name) = new_name(walker.walk(&path, false)?)?;
            client.link(a.fid, parent, &name)?;
            entry(parent, &name);
            (shared.hooks.changed)(a.fid, 0, 0);
            done()
        }
        ApiRequest::Symlink { target, path } => {
            let (parent, name) = new_name(walker.walk(&path, false)?)?;
            client.symlink(parent, &name, &target, s.cred.uid, s.cred.gid)?;
            entry(parent, &name);
            done()
        }
        ApiRequest::Readlink { path } => {
            let a = existing(walker.walk(&path, false)?)?;
            if a.kind != FileKind::Symlink {
                return Err(err(Status::Inval));
            }
            Ok((ApiReply::Target(client.readlink(a.fid)?), None))
        }
        ApiRequest::SetStripe {
            path,
            count,
            size,
            pool,
            mode,
        } => {
            let (parent, name) = new_name(walker.walk(&path, false)?)?;
            let pool = match pool.as_deref().filter(|p| !p.is_empty()) {
                Some(p) => PoolName::new(p).map_err(|_| err(Status::Inval))?,
                None => PoolName::default(),
            };
            let spec = StripeSpec {
                stripe_count: if count == u32::MAX { -1 } else { count as i32 },
                stripe_size: u32::try_from(size).map_err(|_| err(Status::Inval))?,
                start_ost: -1,
                pool,
            };
            // A layout this file system cannot give (more stripes than OSTs, a pool
            // without OSTs, a bad size) is the caller's error: EINVAL.
            client.check_spec(spec).map_err(|e| {
                tracing::debug!("node API: setstripe refused: {e}");
                err(Status::Inval)
            })?;
            let (attr, _) = client.create(
                parent,
                &name,
                FileKind::Regular,
                mode & 0o7777,
                s.cred.uid,
                s.cred.gid,
                0,
                true,
                false,
                0,
            )?;
            let laid = client.set_layout(attr.fid, nacre_client::LayoutSpec::plain(spec));
            if laid.is_err() {
                // Nothing half made is left behind.
                let _ = client.unlink(parent, &name);
            }
            entry(parent, &name);
            laid?;
            done()
        }
        ApiRequest::GetStripe { path } => {
            let a = existing(walker.walk(&path, true)?)?;
            match client.get_layout(a.fid)? {
                LayoutInfo::File(l) => Ok((
                    // The first component's striping (a composite layout's other components
                    // are in `nacre getstripe`), and every object's OST.
                    ApiReply::Stripe(ApiStripe {
                        count: l.components[0].stripe_count.max(0) as u32,
                        size: u64::from(l.components[0].stripe_size),
                        pool: l.components[0].pool.to_string(),
                        osts: l.objects().map(|o| o.ost).collect(),
                    }),
                    None,
                )),
                _ => Err(err(Status::Inval)),
            }
        }
    }
}

/// Reads up to `len` bytes of `h` at `offset` (a request's, or a ring entry's); `ahead`:
/// the client may read ahead of a sequential reader (one request at a time: a ring's
/// requests in flight together are their own read-ahead, and a client's would read the
/// same bytes twice).
pub(crate) fn ring_read(
    shared: &Shared,
    h: &Handle,
    offset: u64,
    len: u32,
    ahead: bool,
) -> Result<AlignedBuf, ClientError> {
    if !h.readable {
        return Err(err(Status::BadF));
    }
    let data = shared
        .client
        .read_at(&h.file, offset, len.min(API_IO_BYTES_MAX) as usize, ahead)?;
    shared
        .stats
        .read_bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(data)
}

/// Starts reading up to `len` bytes of `h` at `offset` ([`finish_read`] waits), into
/// `into` with no copy where the client can.
pub(crate) fn start_read(
    shared: &Shared,
    h: &Handle,
    offset: u64,
    len: u32,
    into: Option<AlignedBuf>,
) -> Result<nacre_client::osc::ReadJob, ClientError> {
    if !h.readable {
        return Err(err(Status::BadF));
    }
    shared
        .client
        .start_read(&h.file, offset, len.min(API_IO_BYTES_MAX) as usize, into)
}

/// Waits for a read [`start_read`] started.
pub(crate) fn finish_read(
    shared: &Shared,
    h: &Handle,
    job: nacre_client::osc::ReadJob,
) -> Result<AlignedBuf, ClientError> {
    let data = shared.client.finish_read(&h.file, job)?;
    shared
        .stats
        .read_bytes
        .fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(data)
}

/// Writes `data` to `h` at `offset` (at its end with `O_APPEND`), the mount's kernel told;
/// the count written. `buf`: an aligned buffer over the same bytes (a ring's region,
/// lent), sent with no copy where each RPC's bytes are one run of it.
pub(crate) fn ring_write(
    shared: &Shared,
    h: &Handle,
    offset: u64,
    data: &[u8],
    buf: Option<AlignedBuf>,
) -> Result<usize, ClientError> {
    if !h.writable {
        return Err(err(Status::BadF));
    }
    if data.is_empty() {
        return Ok(0);
    }
    let client = &shared.client;
    let len = data.len() as u64;
    let at = if h.file.is_append() {
        client.append(&h.file, data)?
    } else {
        let sent = match buf {
            Some(b) => client.write_buf(&h.file, offset, b)?.1,
            None => client.write(&h.file, offset, data).map(|_| false)?,
        };
        if sent {
            shared.stats.sent_bytes.fetch_add(len, Ordering::Relaxed);
        }
        offset
    };
    (shared.hooks.changed)(h.file.fid, at, len);
    shared.stats.write_bytes.fetch_add(len, Ordering::Relaxed);
    Ok(data.len())
}

/// The device and inode of what `fd` (or `path` from `fd`) is, from what the kernel
/// has cached (`AT_STATX_DONT_SYNC`: the mount's own kernel is not asked back).
fn dev_ino_of(
    fd: impl rustix::fd::AsFd,
    path: &str,
) -> Result<((u32, u32), u64, u16), ClientError> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        fd,
        path,
        AtFlags::EMPTY_PATH | AtFlags::STATX_DONT_SYNC,
        StatxFlags::TYPE | StatxFlags::INO,
    )
    .map_err(|e| err(Status::from_code(e.raw_os_error())))?;
    Ok((
        (st.stx_dev_major, st.stx_dev_minor),
        st.stx_ino,
        st.stx_mode,
    ))
}

/// `Attach`: makes the kernel file descriptor `fd` the caller opened through this mount a
/// handle of session `s`. The descriptor proves the access (the kernel checked it when it
/// was opened): it must be a regular file of this mount, and it is opened here at the MDT
/// for the access it was opened with (`O_RDONLY`, `O_WRONLY`, `O_RDWR`; `O_APPEND` kept).
/// It is closed before the reply: the handle lives until `Close` or the session's end.
pub(crate) fn attach(shared: &Shared, s: &Session, fd: rustix::fd::OwnedFd) -> Answer {
    let client = &*shared.client;
    let mount_dev = match shared.mount_dev.get() {
        Some(d) => *d,
        None => {
            let cwd = rustix::fs::CWD;
            let at = shared
                .mountpoint
                .to_str()
                .ok_or_else(|| err(Status::Inval))?;
            let (dev, _, _) = dev_ino_of(cwd, at)?;
            *shared.mount_dev.get_or_init(|| dev)
        }
    };
    let (dev, ino, mode) = dev_ino_of(&fd, "")?;
    // Another file system's file, or a directory, pipe or device: not this mount's to
    // serve.
    if dev != mount_dev {
        return Err(err(Status::XDev));
    }
    if u32::from(mode) & libc::S_IFMT != libc::S_IFREG {
        return Err(err(Status::Inval));
    }
    let fid = Fid::from_ino(ino).ok_or_else(|| err(Status::Inval))?;
    let flags =
        rustix::fs::fcntl_getfl(&fd).map_err(|e| err(Status::from_code(e.raw_os_error())))?;
    if flags.contains(rustix::fs::OFlags::PATH) {
        return Err(err(Status::BadF));
    }
    let access = match flags & rustix::fs::OFlags::RWMODE {
        f if f == rustix::fs::OFlags::WRONLY => MAY_WRITE,
        f if f == rustix::fs::OFlags::RDWR => MAY_READ | MAY_WRITE,
        _ => MAY_READ,
    };
    drop(fd);
    if s.handles.lock().len() >= API_HANDLES_MAX {
        return Err(err(Status::MFile));
    }
    let (attr, mut file) = client.open(fid, access)?;
    if flags.contains(rustix::fs::OFlags::APPEND) {
        file.set_append();
    }
    Ok(register(client, s, attr, file, access))
}

/// Makes `file` (opened for `access`) a handle of session `s`: the reply.
fn register(
    client: &Client,
    s: &Session,
    attr: Attr,
    file: OpenFile,
    access: u8,
) -> (ApiReply, Option<AlignedBuf>) {
    let stat = stat_of(client, &attr);
    let h = Arc::new(Handle {
        file,
        readable: access & MAY_READ != 0,
        writable: access & MAY_WRITE != 0,
    });
    let id = s.next_handle.fetch_add(1, Ordering::Relaxed);
    s.handles.lock().insert(id, h);
    (ApiReply::Opened { handle: id, stat }, None)
}

/// open(2): walks, creates with `O_CREAT`, checks the kinds, opens at the MDT (which checks
/// the caller's access), truncates with `O_TRUNC`.
fn open(
    shared: &Shared,
    s: &Session,
    walker: &Walker,
    path: &[u8],
    flags: i32,
    mode: u32,
) -> Answer {
    let client = &*shared.client;
    let mut access = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        libc::O_RDWR => MAY_READ | MAY_WRITE,
        _ => return Err(err(Status::Inval)),
    };
    if flags & libc::O_TRUNC != 0 {
        access |= MAY_WRITE;
    }
    if s.handles.lock().len() >= API_HANDLES_MAX {
        return Err(err(Status::MFile));
    }
    let creat = flags & libc::O_CREAT != 0;
    let excl = flags & libc::O_EXCL != 0;
    let w = walker.walk(path, flags & libc::O_NOFOLLOW == 0 && !(creat && excl))?;
    let (attr, file) = match w.attr {
        None if creat && !w.name.is_empty() => {
            let made = client.create(
                w.parent,
                &w.name,
                FileKind::Regular,
                mode & 0o7777,
                s.cred.uid,
                s.cred.gid,
                0,
                excl,
                true,
                access,
            )?;
            (shared.hooks.entry)(w.parent, &w.name);
            made
        }
        None => return Err(err(Status::NoEnt)),
        Some(_) if creat && excl => return Err(err(Status::Exist)),
        Some(a) => {
            match a.kind {
                FileKind::Directory => return Err(err(Status::IsDir)),
                FileKind::Symlink => return Err(err(Status::Loop)),
                _ if flags & libc::O_DIRECTORY != 0 => return Err(err(Status::NotDir)),
                _ => {}
            }
            let (attr, file) = client.open(a.fid, access)?;
            if flags & libc::O_TRUNC != 0 && attr.size > 0 {
                let set = SetAttr {
                    size: Some(0),
                    ..SetAttr::default()
                };
                if let Err(e) = client.setattr(attr.fid, set) {
                    let _ = client.close(&file);
                    return Err(e);
                }
                (shared.hooks.changed)(attr.fid, 0, u64::MAX);
            }
            (attr, file)
        }
    };
    let mut file = file;
    if flags & libc::O_APPEND != 0 {
        file.set_append();
    }
    Ok(register(client, s, attr, file, access))
}
