//! Object owners for quotas: the owner, group and project recorded in an extended
//! attribute of each object's file (`user.nacre.owner`, 12 bytes). Its length is its
//! version: an attribute of another length is a newer nacre's, left as it is; a change that
//! would overwrite it is refused ([`OsdError::NewerOwner`], `EIO`) and logged with both
//! lengths. New facts about an object go in new attributes, never by lengthening this one.

use super::{ObjectStore, OsdError};
use crate::ranges::WHOLE;
use crate::usage::RecordedOwner;
use nacre_types::{ObjectId, Owner};
use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

impl ObjectStore {
    /// Records `owner` as the object's owner, group and project (creating an empty object if
    /// there is none, so a later write with an older owner cannot set it). Refused
    /// ([`OsdError::NewerOwner`]) if the object's owner attribute is a newer nacre's.
    pub fn set_owner(&self, object: ObjectId, owner: Owner) -> Result<(), OsdError> {
        let o = self.get(object, true)?.expect("created");
        let _change = self.change(object, WHOLE, None);
        let old = match o.recorded_owner().map_err(|e| Self::err(object, e))? {
            RecordedOwner::Absent => Owner::default(),
            RecordedOwner::Owner(old) => old,
            RecordedOwner::Newer(len) => return Err(newer_owner(object, len, "owner change")),
        };
        write_owner(&o.buffered, owner).map_err(|e| Self::err(object, e))?;
        o.set_recorded_owner(owner);
        let space = o.space().map_err(|e| Self::err(object, e))?;
        self.usage.transfer(old, owner, space);
        Ok(())
    }

    /// The object's recorded owner (`None`: no such object, or none recorded). An error
    /// ([`OsdError::NewerOwner`]) if its owner attribute is a newer nacre's.
    pub fn owner(&self, object: ObjectId) -> Result<Option<Owner>, OsdError> {
        let Some(o) = self.get(object, false)? else {
            return Ok(None);
        };
        match read_owner(&o.buffered).map_err(|e| Self::err(object, e))? {
            RecordedOwner::Absent => Ok(None),
            RecordedOwner::Owner(owner) => Ok(Some(owner)),
            RecordedOwner::Newer(len) => Err(newer_owner(object, len, "owner lookup")),
        }
    }
}

pub use crate::usage::OWNER_XATTR;

pub(super) fn read_owner(f: &File) -> std::io::Result<RecordedOwner> {
    let mut b = RecordedOwner::buffer();
    let read = rustix::fs::fgetxattr(f, OWNER_XATTR, &mut b[..]);
    RecordedOwner::from_read(&b, read, || rustix::fs::fgetxattr_query(f, OWNER_XATTR))
        .map_err(Into::into)
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

/// The refusal of `what` on `object`, whose owner attribute holds `len` bytes (a newer
/// nacre's), logged with both lengths.
pub(super) fn newer_owner(object: ObjectId, len: usize, what: &'static str) -> OsdError {
    let e = OsdError::NewerOwner {
        object: object.to_string(),
        len,
        what,
    };
    tracing::warn!("{e}");
    e
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An object whose owner attribute is 16 bytes long (a newer nacre's): writes and owner
    /// changes are refused with `EIO` and leave the attribute as it is; its space is charged
    /// to no one, by the count at start and by changes.
    #[test]
    fn an_owner_attribute_of_another_length_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let obj = ObjectId { seq: 0, id: 5 };
        let alice = Owner {
            uid: 1000,
            gid: 100,
            project: 7,
        };
        let path = {
            let store = ObjectStore::open(dir.path()).unwrap();
            store.write(obj, 0, &[1u8; 8192], alice).unwrap();
            store.path(obj)
        };
        let newer: Vec<u8> = (1..=16).collect();
        match rustix::fs::setxattr(&path, OWNER_XATTR, &newer, rustix::fs::XattrFlags::empty()) {
            Ok(()) => {}
            Err(rustix::io::Errno::NOTSUP) => return, // no extended attributes here
            Err(e) => panic!("{e}"),
        }
        let stored = || {
            let mut b = [0u8; 64];
            let n = rustix::fs::getxattr(&path, OWNER_XATTR, &mut b[..]).unwrap();
            b[..n].to_vec()
        };
        // Counted at start: charged to no one (not to root).
        let store = ObjectStore::open(dir.path()).unwrap();
        assert_eq!(store.usage().all(), Vec::new());
        for (offset, len) in [(0u64, 4096usize), (100, 10)] {
            let e = store
                .write(obj, offset, &vec![2u8; len], Owner::default())
                .unwrap_err();
            assert!(matches!(e, OsdError::NewerOwner { len: 16, .. }), "{e}");
            assert_eq!(e.raw_os_error(), Some(libc::EIO));
            assert!(e.to_string().contains("16 bytes") && e.to_string().contains("reads 12"));
        }
        assert!(matches!(
            store.set_owner(obj, alice),
            Err(OsdError::NewerOwner { len: 16, .. })
        ));
        assert!(matches!(
            store.owner(obj),
            Err(OsdError::NewerOwner { len: 16, .. })
        ));
        assert_eq!(stored(), newer);
        assert_eq!(&store.read(obj, 0, 8192).unwrap()[..], &[1u8; 8192][..]);
        // Changes that keep the attribute charge no one either.
        store.punch(obj, 1 << 20).unwrap();
        store.fallocate(obj, 0, 1 << 20, false, false).unwrap();
        assert_eq!(store.usage().all(), Vec::new());
        store.destroy(obj).unwrap();
        assert_eq!(store.usage().all(), Vec::new());
    }
}
