//! Where benchmark tasks do their I/O: POSIX calls on a path (a Nacre FUSE mount, or any local
//! directory as a baseline), or Nacre's native client library (no FUSE, no kernel).
//!
//! The drivers only use the calls of [`Storage`] and [`BenchFile`], so one workload definition
//! measures both paths and their ratio is the FUSE overhead.

use crate::{io_err, BenchError};
use nacre_client::{Client, ClientConfig, OpenFile};
use nacre_types::cred::{MAY_READ, MAY_WRITE};
use nacre_types::{Fid, FileKind, Nid};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Most directories whose FIDs the native backend remembers.
pub const DIR_CACHE_ENTRIES_MAX: usize = 1 << 16;

/// Which interface the tasks use (IOR's `-a`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Api {
    /// POSIX system calls on a path.
    #[default]
    Posix,
    /// The native client library, mounted from the MGS; paths are inside the file system.
    Nacre {
        /// MGS NID.
        mgs: String,
        /// File system name.
        fsname: String,
    },
}

impl Api {
    /// Opens the storage this API names.
    pub fn connect(&self) -> Result<Arc<dyn Storage>, BenchError> {
        match self {
            Api::Posix => Ok(Arc::new(Posix)),
            Api::Nacre { mgs, fsname } => {
                let nid: Nid = mgs
                    .parse()
                    .map_err(|e| BenchError::Params(format!("bad MGS NID '{mgs}': {e}")))?;
                let client = Client::mount(nid, fsname, ClientConfig::default()).map_err(|e| {
                    BenchError::Params(format!("cannot mount {mgs}:/{fsname}: {e}"))
                })?;
                Ok(Arc::new(Native::new(client)))
            }
        }
    }

    /// Short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Api::Posix => "POSIX",
            Api::Nacre { .. } => "NACRE",
        }
    }
}

/// An open file of a benchmark task.
pub trait BenchFile: Send + Sync {
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Fills `buf` from `offset`; a short file is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Makes the file durable.
    fn sync_all(&self) -> std::io::Result<()>;
    /// Closes the file.
    fn close(self: Box<Self>) -> std::io::Result<()>;
}

/// The calls benchmark drivers make.
pub trait Storage: Send + Sync {
    /// Opens `path` for reading, or for reading and writing (created if missing).
    fn open(
        &self,
        path: &Path,
        write: bool,
        direct: bool,
    ) -> Result<Box<dyn BenchFile>, BenchError>;
    /// Creates a directory.
    fn mkdir(&self, path: &Path) -> Result<(), BenchError>;
    /// Removes an empty directory.
    fn rmdir(&self, path: &Path) -> Result<(), BenchError>;
    /// Stats a path.
    fn stat(&self, path: &Path) -> Result<(), BenchError>;
    /// Creates a new file (it must not exist), writes `payload`, closes it.
    fn create(&self, path: &Path, payload: &[u8]) -> Result<(), BenchError>;
    /// Creates an empty file without opening it (mdsrate's mknod).
    fn mknod(&self, path: &Path) -> Result<(), BenchError>;
    /// Opens a file, reads up to `bytes` bytes from its start, closes it.
    fn read_head(&self, path: &Path, bytes: usize) -> Result<(), BenchError>;
    /// Removes a file.
    fn unlink(&self, path: &Path) -> Result<(), BenchError>;
    /// Creates `path` and its missing parents.
    fn mkdir_all(&self, path: &Path) -> Result<(), BenchError> {
        let mut at = PathBuf::new();
        for c in path.components() {
            at.push(c);
            if matches!(c, Component::Normal(_)) && self.stat(&at).is_err() {
                match self.mkdir(&at) {
                    Err(BenchError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                    r => r?,
                }
            }
        }
        Ok(())
    }
    /// Called on each task thread before it starts (sets the job id the native client sends).
    fn enter_task(&self) {}
    /// Removes a file if it exists (cleanup).
    fn remove_quietly(&self, path: &Path) {
        let _ = self.unlink(path);
    }
}

/// POSIX system calls.
pub struct Posix;

struct PosixFile(std::fs::File);

impl BenchFile for PosixFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.0.sync_all()
    }
    fn close(self: Box<Self>) -> std::io::Result<()> {
        drop(self);
        Ok(())
    }
}

impl Storage for Posix {
    fn open(
        &self,
        path: &Path,
        write: bool,
        direct: bool,
    ) -> Result<Box<dyn BenchFile>, BenchError> {
        let mut o = OpenOptions::new();
        o.read(true);
        if write {
            o.write(true).create(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        let f = o.open(path).map_err(|e| io_err("open", path, e))?;
        Ok(Box::new(PosixFile(f)))
    }
    fn mkdir(&self, path: &Path) -> Result<(), BenchError> {
        std::fs::create_dir(path).map_err(|e| io_err("mkdir", path, e))
    }
    fn rmdir(&self, path: &Path) -> Result<(), BenchError> {
        std::fs::remove_dir(path).map_err(|e| io_err("rmdir", path, e))
    }
    fn stat(&self, path: &Path) -> Result<(), BenchError> {
        std::fs::metadata(path)
            .map(|_| ())
            .map_err(|e| io_err("stat", path, e))
    }
    fn create(&self, path: &Path, payload: &[u8]) -> Result<(), BenchError> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err("create", path, e))?;
        if !payload.is_empty() {
            f.write_all(payload).map_err(|e| io_err("write", path, e))?;
        }
        Ok(())
    }
    fn mknod(&self, path: &Path) -> Result<(), BenchError> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io_err("mknod", path, std::io::ErrorKind::InvalidInput.into()))?;
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::mknod(c.as_ptr(), libc::S_IFREG | 0o644, 0) } != 0 {
            return Err(io_err("mknod", path, std::io::Error::last_os_error()));
        }
        Ok(())
    }
    fn read_head(&self, path: &Path, bytes: usize) -> Result<(), BenchError> {
        let mut f = std::fs::File::open(path).map_err(|e| io_err("open", path, e))?;
        if bytes > 0 {
            let mut buf = vec![0u8; bytes];
            f.read(&mut buf).map_err(|e| io_err("read", path, e))?;
        }
        Ok(())
    }
    fn unlink(&self, path: &Path) -> Result<(), BenchError> {
        std::fs::remove_file(path).map_err(|e| io_err("unlink", path, e))
    }
}

/// The native client library. Paths are absolute inside the file system (`/dir/file`).
/// Directory FIDs are remembered once resolved (the bench creates and removes its own
/// directories, so it knows when they change), so each call costs the RPCs a kernel with a
/// warm dentry cache would send.
pub struct Native {
    client: Arc<Client>,
    dirs: Mutex<HashMap<PathBuf, Fid>>,
    jobid: String,
}

/// The job id a native-client process reports: `$SLURM_JOB_ID` if set, else Lustre's
/// `procname_uid` form.
fn native_jobid() -> String {
    if let Ok(j) = std::env::var("SLURM_JOB_ID") {
        if !j.is_empty() {
            return j;
        }
    }
    let name = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "nacre".into());
    // SAFETY: getuid has no preconditions.
    format!("{name}.{}", unsafe { libc::getuid() })
}

fn client_io(e: nacre_client::ClientError) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.errno())
}

struct NativeFile {
    client: Arc<Client>,
    file: OpenFile,
}

impl BenchFile for NativeFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let n = self
            .client
            .write(&self.file, offset, buf)
            .map_err(client_io)?;
        if n != buf.len() {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        Ok(())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let got = self
            .client
            .read(&self.file, offset, buf.len())
            .map_err(client_io)?;
        if got.len() != buf.len() {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.copy_from_slice(&got);
        Ok(())
    }
    fn sync_all(&self) -> std::io::Result<()> {
        self.client.fsync(&self.file).map_err(client_io)
    }
    fn close(self: Box<Self>) -> std::io::Result<()> {
        self.client.close(&self.file).map_err(client_io)
    }
}

impl Native {
    /// Wraps a mounted client.
    pub fn new(client: Arc<Client>) -> Native {
        Native {
            client,
            dirs: Mutex::new(HashMap::new()),
            jobid: native_jobid(),
        }
    }

    fn err(what: &'static str, path: &Path, e: nacre_client::ClientError) -> BenchError {
        io_err(what, path, client_io(e))
    }

    /// The FID of directory `path`.
    fn dir(&self, path: &Path) -> Result<Fid, BenchError> {
        if let Some(f) = self.dirs.lock().expect("dir cache").get(path) {
            return Ok(*f);
        }
        let mut fid = Fid::ROOT;
        for c in path.components() {
            match c {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(name) => {
                    fid = self
                        .client
                        .lookup(fid, name.as_bytes(), false)
                        .map_err(|e| Self::err("lookup", path, e))?
                        .fid;
                }
                _ => {
                    return Err(BenchError::Params(format!(
                        "native API paths must be absolute without '..': {}",
                        path.display()
                    )))
                }
            }
        }
        let mut dirs = self.dirs.lock().expect("dir cache");
        if dirs.len() >= DIR_CACHE_ENTRIES_MAX {
            dirs.clear();
        }
        dirs.insert(path.to_path_buf(), fid);
        Ok(fid)
    }

    /// Parent FID and last name of `path`.
    fn split<'a>(&self, path: &'a Path) -> Result<(Fid, &'a [u8]), BenchError> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(BenchError::Params(format!(
                "no file name in {}",
                path.display()
            )));
        };
        Ok((self.dir(parent)?, name.as_bytes()))
    }

    /// Creates a regular file: `exclusive` fails if it exists (O_EXCL), otherwise an existing
    /// file is opened (O_CREAT alone, so tasks racing to create one shared file all win).
    fn create_node(
        &self,
        path: &Path,
        open: bool,
        exclusive: bool,
    ) -> Result<OpenFile, BenchError> {
        let (parent, name) = self.split(path)?;
        let me = nacre_types::cred::current();
        let (_, file) = self
            .client
            .create(
                parent,
                name,
                FileKind::Regular,
                0o644,
                me.uid,
                me.gid,
                0,
                exclusive,
                open,
                MAY_READ | MAY_WRITE,
            )
            .map_err(|e| Self::err("create", path, e))?;
        Ok(file)
    }
}

impl Storage for Native {
    fn enter_task(&self) {
        nacre_types::jobid::set_current(&self.jobid);
    }
    fn open(
        &self,
        path: &Path,
        write: bool,
        _direct: bool,
    ) -> Result<Box<dyn BenchFile>, BenchError> {
        let (parent, name) = self.split(path)?;
        let file = match self.client.lookup(parent, name, false) {
            Ok(attr) => {
                let access = if write {
                    MAY_READ | MAY_WRITE
                } else {
                    MAY_READ
                };
                self.client
                    .open(attr.fid, access)
                    .map_err(|e| Self::err("open", path, e))?
                    .1
            }
            Err(e) if write && e.errno() == libc::ENOENT => self.create_node(path, true, false)?,
            Err(e) => return Err(Self::err("open", path, e)),
        };
        Ok(Box::new(NativeFile {
            client: self.client.clone(),
            file,
        }))
    }
    fn mkdir(&self, path: &Path) -> Result<(), BenchError> {
        let (parent, name) = self.split(path)?;
        let attr = self
            .client
            .mkdir(parent, name, 0o755, 0, 0)
            .map_err(|e| Self::err("mkdir", path, e))?;
        self.dirs
            .lock()
            .expect("dir cache")
            .insert(path.to_path_buf(), attr.fid);
        Ok(())
    }
    fn rmdir(&self, path: &Path) -> Result<(), BenchError> {
        let (parent, name) = self.split(path)?;
        self.client
            .rmdir(parent, name)
            .map_err(|e| Self::err("rmdir", path, e))?;
        self.dirs.lock().expect("dir cache").remove(path);
        Ok(())
    }
    fn stat(&self, path: &Path) -> Result<(), BenchError> {
        let (parent, name) = self.split(path)?;
        self.client
            .lookup(parent, name, true)
            .map(|_| ())
            .map_err(|e| Self::err("stat", path, e))
    }
    fn create(&self, path: &Path, payload: &[u8]) -> Result<(), BenchError> {
        let file = self.create_node(path, true, true)?;
        let wrote = if payload.is_empty() {
            Ok(0)
        } else {
            self.client.write(&file, 0, payload)
        };
        let closed = self.client.close(&file);
        wrote.map_err(|e| Self::err("write", path, e))?;
        closed.map_err(|e| Self::err("close", path, e))
    }
    fn mknod(&self, path: &Path) -> Result<(), BenchError> {
        self.create_node(path, false, true).map(|_| ())
    }
    fn read_head(&self, path: &Path, bytes: usize) -> Result<(), BenchError> {
        let (parent, name) = self.split(path)?;
        let attr = self
            .client
            .lookup(parent, name, false)
            .map_err(|e| Self::err("open", path, e))?;
        let (_, file) = self
            .client
            .open(attr.fid, MAY_READ)
            .map_err(|e| Self::err("open", path, e))?;
        let read = if bytes > 0 {
            self.client.read_at(&file, 0, bytes, false).map(|_| ())
        } else {
            Ok(())
        };
        let closed = self.client.close(&file);
        read.map_err(|e| Self::err("read", path, e))?;
        closed.map_err(|e| Self::err("close", path, e))
    }
    fn unlink(&self, path: &Path) -> Result<(), BenchError> {
        let (parent, name) = self.split(path)?;
        self.client
            .unlink(parent, name)
            .map_err(|e| Self::err("unlink", path, e))
    }
}
