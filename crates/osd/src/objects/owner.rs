//! Object owners for quotas: the owner, group and project recorded in an extended
//! attribute of each object's file.

use super::{ObjectStore, OsdError};
use crate::ranges::WHOLE;
use nacre_types::{ObjectId, Owner};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

impl ObjectStore {
    /// Records `owner` as the object's owner, group and project (creating an empty object if
    /// there is none, so a later write with an older owner cannot set it).
    pub fn set_owner(&self, object: ObjectId, owner: Owner) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let _change = self.change(object, WHOLE, None);
        let old = o
            .recorded_owner()
            .map_err(|e| Self::err(object, e))?
            .unwrap_or_default();
        write_owner(&o.buffered, owner).map_err(|e| Self::err(object, e))?;
        o.set_recorded_owner(owner);
        let space = o.space().map_err(|e| Self::err(object, e))?;
        self.usage.transfer(old, owner, space);
        Ok(())
    }

    /// The object's recorded owner (`None`: no such object, or none recorded).
    pub fn owner(&self, object: ObjectId) -> Result<Option<Owner>, OsdError> {
        match self.get(object, false)? {
            Some(o) => read_owner(&o.buffered).map_err(|e| Self::err(object, e)),
            None => Ok(None),
        }
    }
}

pub use crate::usage::OWNER_XATTR;

pub(super) fn read_owner(f: &File) -> std::io::Result<Option<Owner>> {
    let mut b = [0u8; Owner::BYTES];
    match rustix::fs::fgetxattr(f, OWNER_XATTR, &mut b) {
        Ok(n) => Ok(Owner::from_bytes(&b[..n])),
        Err(rustix::io::Errno::NODATA) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn write_owner(f: &File, owner: Owner) -> std::io::Result<()> {
    rustix::fs::fsetxattr(
        f,
        OWNER_XATTR,
        &owner.to_bytes(),
        rustix::fs::XattrFlags::empty(),
    )
    .map_err(Into::into)
}

/// A write goes on when the object's file system keeps no extended attributes (the owner is
/// then not recorded: said once); any other error fails it.
pub(super) fn owner_unsupported(object: ObjectId, e: std::io::Error) -> Result<(), OsdError> {
    static SAID: AtomicBool = AtomicBool::new(false);
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        if !SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!("object {object}: the OST's file system keeps no extended attributes: object owners are not recorded");
        }
        return Ok(());
    }
    Err(ObjectStore::err(object, e))
}
