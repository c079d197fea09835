//! OST objects as files: `ROOT/O/<seq>/d<id % 32>/<id>`.
//!
//! Aligned writes and reads go through an O_DIRECT descriptor (no page cache on the OSS: the
//! CEA studies lost 10-20% bandwidth to page-cache reclaim); unaligned parts use a buffered
//! descriptor of the same file, which the kernel keeps coherent with the direct one.
//!
//! Every object's data is checksummed at rest (crc32c per 4 KiB chunk in `<id>.crc`, see
//! [`crate::csum`]): reads verify what they return, and a chunk that does not match is an
//! error ([`OsdError::Corrupt`]), never data.

mod arriving;
mod cache;
mod change;
mod owner;
mod reads;
mod sums;
mod writes;

use crate::ranges::{RangeLocks, WHOLE};
pub use arriving::{Arriving, ARRIVING_PART_BYTES_MIN};
use cache::OpenObject;
use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{ObjectId, StatFs};
pub use owner::OWNER_XATTR;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

// What the tests (objects/tests.rs, `use super::*`) take from the imports of the modules
// below.
#[cfg(test)]
use crate::csum;
#[cfg(test)]
use nacre_types::{AlignedBuf, Owner};
#[cfg(test)]
use std::fs::OpenOptions;
#[cfg(test)]
use std::os::unix::fs::FileExt;

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
    /// Stored data does not match its checksum (a bit flipped on the disk, a stray write).
    #[error("object {object}: data at offset {offset} does not match its checksum")]
    Corrupt {
        /// Object.
        object: String,
        /// First byte of the damaged 4 KiB chunk.
        offset: u64,
    },
    /// The object's owner attribute has another length than this nacre writes: a newer
    /// nacre's ([`crate::usage::RecordedOwner::Newer`]). It is left as it is and the change
    /// that would overwrite it refused (`EIO`).
    #[error(
        "object {object}: its owner attribute {xattr} holds {len} bytes, this nacre reads \
         {bytes} (a newer nacre's): left as it is, {what} refused",
        xattr = crate::usage::OWNER_XATTR,
        bytes = nacre_types::Owner::BYTES
    )]
    NewerOwner {
        /// Object.
        object: String,
        /// Length of the attribute found.
        len: usize,
        /// What was refused ("write", "owner change", "owner lookup").
        what: &'static str,
    },
}

impl OsdError {
    /// The errno this error maps to (EIO for corrupt data and a newer owner attribute).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            OsdError::Io { source, .. } => source.raw_os_error(),
            OsdError::Corrupt { .. } | OsdError::NewerOwner { .. } => Some(libc::EIO),
        }
    }

    /// The underlying I/O error (EIO for corrupt data and a newer owner attribute).
    pub fn io(&self) -> std::io::Error {
        match self {
            OsdError::Io { source, .. } => match source.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(source.kind(), source.to_string()),
            },
            OsdError::Corrupt { .. } | OsdError::NewerOwner { .. } => {
                std::io::Error::from_raw_os_error(libc::EIO)
            }
        }
    }
}

/// An OST's object store.
pub struct ObjectStore {
    root: PathBuf,
    direct_io: AtomicBool,
    /// What the store's file system says of direct I/O (probed at open): the direct
    /// descriptor is opened only if Nacre's alignment fits it.
    dio_align: crate::dioalign::DioAlign,
    open: Mutex<HashMap<ObjectId, Arc<OpenObject>>>,
    /// Reads refused because data did not match its checksum.
    corrupt_chunks: AtomicU64,
    /// Reads that went to the disk together with others (`read_many`).
    reads_together: AtomicU64,
    /// Writes written part by part as they arrived, and their parts
    /// ([`ObjectStore::write_arriving`]).
    arriving: [AtomicU64; 2],
    /// The chunks each change holds (data and checksums together), and the whole objects
    /// held by re-checks after a mismatch. Kept apart from the descriptor cache, which may
    /// evict and reopen an object while a change on it runs.
    ranges: RangeLocks,
    /// Space used per user, group and project (counted at open, kept by every change).
    usage: crate::usage::Usage,
}

fn is_aligned(x: u64) -> bool {
    x.is_multiple_of(DIRECT_IO_ALIGN_BYTES as u64)
}

impl ObjectStore {
    /// Opens the object store under `root` (created if missing).
    /// Every object is counted for quotas first ([`crate::usage`]).
    pub fn open(root: &Path) -> std::io::Result<ObjectStore> {
        std::fs::create_dir_all(root.join("O"))?;
        let started = std::time::Instant::now();
        let (usage, objects) = crate::usage::Usage::count(root)?;
        let dio_align = crate::dioalign::probe(root)?;
        if !dio_align.fits() {
            tracing::warn!(
                "{}: the file system's direct I/O ({dio_align}) does not fit Nacre's \
                 {DIRECT_IO_ALIGN_BYTES}-byte alignment: objects are read and written buffered",
                root.display()
            );
        }
        tracing::info!(
            "{}: {objects} objects counted for quotas in {} ms",
            root.display(),
            started.elapsed().as_millis()
        );
        Ok(ObjectStore {
            root: root.to_path_buf(),
            direct_io: AtomicBool::new(true),
            dio_align,
            open: Mutex::new(HashMap::new()),
            corrupt_chunks: AtomicU64::new(0),
            reads_together: AtomicU64::new(0),
            arriving: [AtomicU64::new(0), AtomicU64::new(0)],
            ranges: RangeLocks::default(),
            usage,
        })
    }

    /// Space used per user, group and project.
    pub fn usage(&self) -> &crate::usage::Usage {
        &self.usage
    }

    /// Counts every object again and compares with the usage kept (`nacre lfsck
    /// --quota`); with `repair`, the count replaces it. Every change of the store waits
    /// while it counts (the count and the usage it is compared with are of the same
    /// moment).
    pub fn quota_check(&self, repair: bool) -> std::io::Result<nacre_types::QuotaCheck> {
        struct Frozen<'a>(&'a RangeLocks);
        impl Drop for Frozen<'_> {
            fn drop(&mut self) {
                self.0.thaw();
            }
        }
        self.ranges.freeze();
        let _frozen = Frozen(&self.ranges);
        let (counted, objects) = crate::usage::Usage::count(&self.root)?;
        let mut check =
            nacre_types::QuotaCheck::compare(&counted.snapshot(), &self.usage.snapshot());
        if repair && check.diffs_total > 0 {
            self.usage.replace(counted);
            check.repaired = true;
            tracing::warn!(
                "{}: quota usage of {} ids repaired ({objects} objects counted)",
                self.root.display(),
                check.diffs_total
            );
        }
        Ok(check)
    }

    /// Turns the direct-I/O path on or off (the `osd.*.direct_io` setting).
    pub fn set_direct_io(&self, on: bool) {
        self.direct_io.store(on, Ordering::Relaxed);
        self.open.lock().expect("open objects").clear();
    }

    /// True if aligned I/O bypasses the page cache: the setting is on and the file
    /// system's direct-I/O alignment fits Nacre's ([`ObjectStore::dio_align`]).
    pub fn direct_io(&self) -> bool {
        self.direct_io.load(Ordering::Relaxed) && self.dio_align.fits()
    }

    /// What the store's file system said of direct I/O when the store opened.
    pub fn dio_align(&self) -> crate::dioalign::DioAlign {
        self.dio_align
    }

    /// Path of an object's file.
    pub fn path(&self, object: ObjectId) -> PathBuf {
        self.root
            .join("O")
            .join(object.seq.to_string())
            .join(format!("d{}", object.id % 32))
            .join(object.id.to_string())
    }

    /// Where an object's checksums are kept.
    pub fn sums_path(&self, object: ObjectId) -> PathBuf {
        let mut p = self.path(object);
        p.set_extension("crc");
        p
    }

    /// Reads that found data not matching its checksum.
    pub fn corrupt_chunks(&self) -> u64 {
        self.corrupt_chunks.load(Ordering::Relaxed)
    }

    /// Writes that ran beside another write of the same object since start (of disjoint
    /// chunks, see [`ObjectStore::write`]).
    pub fn writes_together(&self) -> u64 {
        self.ranges.together()
    }

    /// Reads submitted to the disk together with others since start
    /// ([`ObjectStore::read_many`]).
    pub fn reads_together(&self) -> u64 {
        self.reads_together.load(Ordering::Relaxed)
    }

    /// Writes written part by part as they arrived since start, and their parts (a write
    /// all of which was in when it started is one part).
    pub fn writes_arriving(&self) -> (u64, u64) {
        let [w, p] = &self.arriving;
        (w.load(Ordering::Relaxed), p.load(Ordering::Relaxed))
    }

    fn err(object: ObjectId, source: std::io::Error) -> OsdError {
        OsdError::Io {
            object: object.to_string(),
            source,
        }
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

    /// Size and allocated 512-byte blocks through the object's open handle (just after a
    /// write: no path lookup); (0, 0) if the object does not exist.
    pub fn size_open(&self, object: ObjectId) -> Result<(u64, u64), OsdError> {
        use std::os::unix::fs::MetadataExt;
        match self.get(object, false)? {
            Some(o) => {
                let m = o.buffered.metadata().map_err(|e| Self::err(object, e))?;
                Ok((m.len(), m.blocks()))
            }
            None => Ok((0, 0)),
        }
    }

    /// Makes the object's data durable.
    pub fn sync(&self, object: ObjectId) -> Result<(), OsdError> {
        match self.get(object, false)? {
            Some(o) => {
                o.buffered.sync_data().map_err(|e| Self::err(object, e))?;
                o.sums.sync_data().map_err(|e| Self::err(object, e))
            }
            None => Ok(()),
        }
    }

    /// Removes an object (missing objects are fine: destroy is idempotent).
    pub fn destroy(&self, object: ObjectId) -> Result<(), OsdError> {
        let _change = self.change(object, WHOLE, None);
        // What it held is freed from its owner's usage.
        if let Some(o) = self.get(object, false)? {
            let space = o.space().map_err(|e| Self::err(object, e))?;
            if let Some(owner) = o.charged_to() {
                self.usage.charge(owner, -(space as i64));
            }
        }
        self.open.lock().expect("open objects").remove(&object);
        let _ = std::fs::remove_file(self.sums_path(object));
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
mod tests;
