//! OST objects as files: `ROOT/O/<seq>/d<id % 32>/<id>`.
//!
//! Aligned writes and reads go through an O_DIRECT descriptor (no page cache on the OSS: the
//! CEA studies lost 10-20% bandwidth to page-cache reclaim); unaligned parts use a buffered
//! descriptor of the same file, which the kernel keeps coherent with the direct one.

use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{AlignedBuf, ObjectId, StatFs};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Open objects kept in the descriptor cache.
pub const OPEN_OBJECTS_MAX: usize = 1024;

/// Errors of the object store.
#[derive(Debug, thiserror::Error)]
pub enum OsdError {
    /// I/O error on the local file system (ENOSPC included).
    #[error("object {object}: {source}")]
    Io {
        /// Object.
        object: String,
        /// Error.
        source: std::io::Error,
    },
}

impl OsdError {
    /// The underlying I/O error.
    pub fn io(&self) -> &std::io::Error {
        match self {
            OsdError::Io { source, .. } => source,
        }
    }
}

struct OpenObject {
    buffered: File,
    direct: Option<File>,
}

/// An OST's object store.
pub struct ObjectStore {
    root: PathBuf,
    direct_io: AtomicBool,
    open: Mutex<HashMap<ObjectId, Arc<OpenObject>>>,
}

fn is_aligned(x: u64) -> bool {
    x.is_multiple_of(DIRECT_IO_ALIGN_BYTES as u64)
}

impl ObjectStore {
    /// Opens the object store under `root` (created if missing).
    pub fn open(root: &Path) -> std::io::Result<ObjectStore> {
        std::fs::create_dir_all(root.join("O"))?;
        Ok(ObjectStore {
            root: root.to_path_buf(),
            direct_io: AtomicBool::new(true),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Turns the direct-I/O path on or off (the `osd.*.direct_io` setting).
    pub fn set_direct_io(&self, on: bool) {
        self.direct_io.store(on, Ordering::Relaxed);
        self.open.lock().expect("open objects").clear();
    }

    /// True if aligned I/O bypasses the page cache.
    pub fn direct_io(&self) -> bool {
        self.direct_io.load(Ordering::Relaxed)
    }

    /// Path of an object's file.
    pub fn path(&self, object: ObjectId) -> PathBuf {
        self.root
            .join("O")
            .join(object.seq.to_string())
            .join(format!("d{}", object.id % 32))
            .join(object.id.to_string())
    }

    fn err(object: ObjectId, source: std::io::Error) -> OsdError {
        OsdError::Io {
            object: object.to_string(),
            source,
        }
    }

    fn get(&self, object: ObjectId, create: bool) -> Result<Option<Arc<OpenObject>>, OsdError> {
        if let Some(o) = self.open.lock().expect("open objects").get(&object) {
            return Ok(Some(o.clone()));
        }
        let path = self.path(object);
        let buffered = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| Self::err(object, e))?;
                }
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|e| Self::err(object, e))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::err(object, e)),
        };
        let direct = if self.direct_io() {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .ok()
        } else {
            None
        };
        let o = Arc::new(OpenObject { buffered, direct });
        let mut open = self.open.lock().expect("open objects");
        if open.len() >= OPEN_OBJECTS_MAX {
            if let Some(k) = open.keys().next().copied() {
                open.remove(&k);
            }
        }
        open.insert(object, o.clone());
        Ok(Some(o))
    }

    /// Writes `data` at `offset`, creating the object. `data` should be page-aligned in memory
    /// (an [`AlignedBuf`]) for the direct path to be taken.
    pub fn write(&self, object: ObjectId, offset: u64, data: &[u8]) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let mem_aligned = (data.as_ptr() as usize).is_multiple_of(DIRECT_IO_ALIGN_BYTES);
        let direct_len = (data.len() / DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES;
        let mut done = 0;
        if let (Some(direct), true, true) = (&o.direct, mem_aligned, is_aligned(offset)) {
            if direct_len > 0 {
                direct
                    .write_all_at(&data[..direct_len], offset)
                    .map_err(|e| Self::err(object, e))?;
                done = direct_len;
            }
        }
        if done < data.len() {
            o.buffered
                .write_all_at(&data[done..], offset + done as u64)
                .map_err(|e| Self::err(object, e))?;
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `offset`; shorter at the end of the object, empty if the
    /// object does not exist.
    pub fn read(&self, object: ObjectId, offset: u64, len: usize) -> Result<AlignedBuf, OsdError> {
        // Every byte exposed is read from the file (the length is cut to what was read).
        let mut buf = AlignedBuf::for_overwrite(len);
        let Some(o) = self.get(object, false)? else {
            buf.set_len(0);
            return Ok(buf);
        };
        let use_direct = o.direct.is_some() && is_aligned(offset);
        let file = if use_direct {
            o.direct.as_ref().expect("direct")
        } else {
            &o.buffered
        };
        let mut got = 0;
        loop {
            let want = if use_direct {
                len.div_ceil(DIRECT_IO_ALIGN_BYTES) * DIRECT_IO_ALIGN_BYTES
            } else {
                len
            };
            if got >= len {
                break;
            }
            let n = match file.read_at(&mut buf.spare_mut()[got..want], offset + got as u64) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Self::err(object, e)),
            };
            if n == 0 {
                break;
            }
            got += n;
            if use_direct && got % DIRECT_IO_ALIGN_BYTES != 0 {
                break;
            }
        }
        buf.set_len(got.min(len));
        Ok(buf)
    }

    /// Size and allocated 512-byte blocks; (0, 0) if the object does not exist.
    pub fn size(&self, object: ObjectId) -> Result<(u64, u64), OsdError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(self.path(object)) {
            Ok(m) => Ok((m.len(), m.blocks())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
            Err(e) => Err(Self::err(object, e)),
        }
    }

    /// Sets the object's size (creating it if needed).
    pub fn punch(&self, object: ObjectId, size: u64) -> Result<(), OsdError> {
        if size == 0 && self.get(object, false)?.is_none() {
            return Ok(());
        }
        let o = self.get(object, true)?.expect("created");
        o.buffered.set_len(size).map_err(|e| Self::err(object, e))
    }

    /// Preallocates (or with `punch_hole` deallocates) a range.
    pub fn fallocate(
        &self,
        object: ObjectId,
        offset: u64,
        len: u64,
        keep_size: bool,
        punch_hole: bool,
    ) -> Result<(), OsdError> {
        use std::os::fd::AsRawFd;
        let o = self.get(object, true)?.expect("created");
        let mut mode = 0;
        if keep_size || punch_hole {
            mode |= libc::FALLOC_FL_KEEP_SIZE;
        }
        if punch_hole {
            mode |= libc::FALLOC_FL_PUNCH_HOLE;
        }
        // SAFETY: plain syscall on an owned, open descriptor.
        let rc =
            unsafe { libc::fallocate(o.buffered.as_raw_fd(), mode, offset as i64, len as i64) };
        if rc != 0 {
            return Err(Self::err(object, std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Makes the object's data durable.
    pub fn sync(&self, object: ObjectId) -> Result<(), OsdError> {
        match self.get(object, false)? {
            Some(o) => o.buffered.sync_data().map_err(|e| Self::err(object, e)),
            None => Ok(()),
        }
    }

    /// Removes an object (missing objects are fine: destroy is idempotent).
    pub fn destroy(&self, object: ObjectId) -> Result<(), OsdError> {
        self.open.lock().expect("open objects").remove(&object);
        match std::fs::remove_file(self.path(object)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Self::err(object, e)),
        }
    }

    /// Capacity of the file system holding the objects.
    pub fn statfs(&self) -> std::io::Result<StatFs> {
        statvfs(&self.root)
    }
}

/// `statvfs` of a path as a [`StatFs`].
pub fn statvfs(path: &Path) -> std::io::Result<StatFs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: zeroed statvfs is a valid out-parameter; c is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok(StatFs {
        bytes_total: st.f_blocks as u64 * frsize,
        bytes_free: st.f_bfree as u64 * frsize,
        bytes_avail: st.f_bavail as u64 * frsize,
        files_total: st.f_files as u64,
        files_free: st.f_ffree as u64,
        block_size: st.f_bsize as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_punch_destroy() {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let obj = ObjectId { seq: 0, id: 77 };
        assert_eq!(store.read(obj, 0, 10).unwrap().len(), 0);
        let data = AlignedBuf::copy_from(&vec![5u8; 1 << 20]);
        store.write(obj, 0, &data).unwrap();
        store.write(obj, (1 << 20) + 3, b"tail").unwrap();
        assert_eq!(store.size(obj).unwrap().0, (1 << 20) + 7);
        let back = store.read(obj, 4096, 1 << 20).unwrap();
        assert_eq!(back.len(), (1 << 20) + 7 - 4096);
        assert!(back[..(1 << 20) - 4096].iter().all(|&b| b == 5));
        assert_eq!(&back[back.len() - 4..], b"tail");
        let odd = store.read(obj, 3, 5).unwrap();
        assert_eq!(&odd[..], &[5u8; 5]);
        store.punch(obj, 10).unwrap();
        assert_eq!(store.size(obj).unwrap().0, 10);
        store.sync(obj).unwrap();
        store.destroy(obj).unwrap();
        assert_eq!(store.size(obj).unwrap().0, 0);
        assert!(store.statfs().unwrap().bytes_total > 0);
    }
}
