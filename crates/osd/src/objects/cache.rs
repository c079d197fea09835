//! The open-object cache: each open object's descriptors (buffered, direct, checksums)
//! and its recorded owner, at most `OPEN_OBJECTS_MAX` objects at once.

use super::owner::read_owner;
use super::{ObjectStore, OsdError, OPEN_OBJECTS_MAX};
use crate::usage::RecordedOwner;
use nacre_types::{ObjectId, Owner};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};

pub(super) struct OpenObject {
    pub(super) buffered: File,
    pub(super) direct: Option<File>,
    /// The checksum sidecar.
    pub(super) sums: File,
    /// The object's owner as recorded (`None`: not looked at yet). Read and changed under
    /// the object's change lock.
    owner: Mutex<Option<RecordedOwner>>,
}

impl OpenObject {
    pub(super) fn size(&self) -> std::io::Result<u64> {
        Ok(self.buffered.metadata()?.len())
    }

    /// Bytes of the blocks the object holds (what quotas charge).
    pub(super) fn space(&self) -> std::io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.buffered.metadata()?.blocks() * 512)
    }

    /// The owner recorded on the object (none where the file system keeps no extended
    /// attributes), read once.
    pub(super) fn recorded_owner(&self) -> std::io::Result<RecordedOwner> {
        let mut cached = self.owner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = *cached {
            return Ok(o);
        }
        let o = match read_owner(&self.buffered) {
            Ok(o) => o,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => RecordedOwner::Absent,
            Err(e) => return Err(e),
        };
        *cached = Some(o);
        Ok(o)
    }

    /// The owner the object's space is charged to ([`RecordedOwner::charged_to`]; root
    /// when its attribute cannot be read, `None` when a newer nacre's).
    pub(super) fn charged_to(&self) -> Option<Owner> {
        match self.recorded_owner() {
            Ok(r) => r.charged_to(),
            Err(_) => Some(Owner::default()),
        }
    }

    pub(super) fn set_recorded_owner(&self, owner: Owner) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = Some(RecordedOwner::Owner(owner));
    }
}

impl ObjectStore {
    pub(super) fn get(
        &self,
        object: ObjectId,
        create: bool,
    ) -> Result<Option<Arc<OpenObject>>, OsdError> {
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
        let sums = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.sums_path(object))
            .map_err(|e| Self::err(object, e))?;
        let o = Arc::new(OpenObject {
            buffered,
            direct,
            sums,
            owner: Mutex::new(None),
        });
        let mut open = self.open.lock().expect("open objects");
        if open.len() >= OPEN_OBJECTS_MAX {
            if let Some(k) = open.keys().next().copied() {
                open.remove(&k);
            }
        }
        open.insert(object, o.clone());
        Ok(Some(o))
    }
}
