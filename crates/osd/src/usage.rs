//! Space used on an OST per user, group and project (quotas, docs/quota.md): the bytes of
//! the blocks each object holds, charged to the owner, group and project its owner record
//! names (`user.nacre.owner`; an object without one is root's). An object whose owner
//! record has another length is a newer nacre's ([`RecordedOwner::Newer`]): its owner is
//! unknown, and its space is charged to no one (logged once per count).
//!
//! Every change of an object's blocks or owner goes through [`crate::ObjectStore`] under the
//! object's change lock, which measures the blocks before and after and charges the
//! difference. Nothing is kept on disk: the store counts every object once when it opens
//! (a walk of its directories, a `stat` and an extended attribute per object), so the
//! usage is exact after any stop, a kill -9 included.

use nacre_types::{Owner, QuotaId};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// Extended attribute holding an object's [`Owner`] (12 bytes: uid, gid, project, little
/// endian), as Lustre's OST objects carry their owner for quotas.
///
/// Its length is its version: a value of another length is a newer nacre's
/// ([`RecordedOwner::Newer`]), left as it is (the change that would overwrite it is
/// refused, [`crate::OsdError::NewerOwner`]). New facts about an object (its file's FID, its
/// mirror or component, as Lustre's `filter_fid`) go in new attributes, never by
/// lengthening this one.
pub const OWNER_XATTR: &str = "user.nacre.owner";
/// Bytes read of an owner attribute at once: enough to learn the length of a longer one
/// (a longer one is measured apart).
const OWNER_READ_BYTES: usize = 64;

/// What an object's owner attribute ([`OWNER_XATTR`]) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordedOwner {
    /// No owner recorded: the object is root's.
    Absent,
    /// The owner, group and project.
    Owner(Owner),
    /// A value of this many bytes, not [`Owner::BYTES`]: a newer nacre's. Its owner is
    /// unknown: its space is charged to no one, and the value is never overwritten.
    Newer(usize),
}

impl RecordedOwner {
    /// What the attribute says, from a read of it into `buf` (`read`: its result) and, if
    /// it is longer than `buf`, `measure` (its length). `Err`: the read failed otherwise.
    pub(crate) fn from_read(
        buf: &[u8],
        read: rustix::io::Result<usize>,
        measure: impl FnOnce() -> rustix::io::Result<usize>,
    ) -> rustix::io::Result<RecordedOwner> {
        match read {
            Ok(n) => Ok(match Owner::from_bytes(&buf[..n.min(buf.len())]) {
                Some(o) => RecordedOwner::Owner(o),
                None => RecordedOwner::Newer(n),
            }),
            Err(rustix::io::Errno::NODATA) => Ok(RecordedOwner::Absent),
            Err(rustix::io::Errno::RANGE) => Ok(RecordedOwner::Newer(
                measure().unwrap_or(buf.len() + 1).max(buf.len() + 1),
            )),
            Err(e) => Err(e),
        }
    }

    /// The owner the object's space is charged to: the one recorded, root if none, none if
    /// unknown ([`RecordedOwner::Newer`]).
    pub fn charged_to(self) -> Option<Owner> {
        match self {
            RecordedOwner::Absent => Some(Owner::default()),
            RecordedOwner::Owner(o) => Some(o),
            RecordedOwner::Newer(_) => None,
        }
    }

    /// A buffer for [`RecordedOwner::from_read`].
    pub(crate) fn buffer() -> [u8; OWNER_READ_BYTES] {
        [0; OWNER_READ_BYTES]
    }
}

/// Bytes charged per user, group and project.
#[derive(Default)]
pub struct Usage {
    map: Mutex<HashMap<QuotaId, u64>>,
}

impl Usage {
    /// Charges `bytes` (negative: frees) to `owner`'s user, group and project.
    pub fn charge(&self, owner: Owner, bytes: i64) {
        if bytes == 0 {
            return;
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for q in QuotaId::of_owner(owner) {
            let e = map.entry(q).or_insert(0);
            *e = e.saturating_add_signed(bytes);
            if *e == 0 {
                map.remove(&q);
            }
        }
    }

    /// Moves `bytes` from `from`'s user, group and project to `to`'s.
    pub fn transfer(&self, from: Owner, to: Owner, bytes: u64) {
        if from != to {
            self.charge(from, -(bytes as i64));
            self.charge(to, bytes as i64);
        }
    }

    /// Bytes charged to `id`.
    pub fn of(&self, id: QuotaId) -> u64 {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&id).copied().unwrap_or(0)
    }

    /// Every id with bytes charged, in order.
    pub fn all(&self) -> Vec<(QuotaId, u64)> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(QuotaId, u64)> = map.iter().map(|(q, b)| (*q, *b)).collect();
        v.sort_unstable();
        v
    }

    /// A copy of the map.
    pub fn snapshot(&self) -> HashMap<QuotaId, u64> {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes `other`'s counts as its own (a repair).
    pub fn replace(&self, other: Usage) {
        let counted = other.map.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.map.lock().unwrap_or_else(|e| e.into_inner()) = counted;
    }

    /// Counts every object under `root/O` (its blocks, charged to its recorded owner; an
    /// object whose owner is unknown, [`RecordedOwner::Newer`], to no one: logged once).
    /// Returns the usage and the objects counted.
    pub fn count(root: &Path) -> std::io::Result<(Usage, u64)> {
        use std::os::unix::fs::MetadataExt;
        let usage = Usage::default();
        let mut objects = 0;
        // Objects of unknown owner: how many, and the first (for the log).
        let mut unknown: (u64, Option<(std::path::PathBuf, usize)>) = (0, None);
        let o = root.join("O");
        for seq in read_dir_or_empty(&o)? {
            for bucket in read_dir_or_empty(&seq)? {
                for obj in read_dir_or_empty(&bucket)? {
                    // Object files are named by their decimal id; the checksum sidecars
                    // (`<id>.crc`) and anything else are not objects.
                    let name = obj.file_name().and_then(|n| n.to_str());
                    if !name.is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
                        continue;
                    }
                    let meta = match std::fs::symlink_metadata(&obj) {
                        Ok(m) => m,
                        // Destroyed while counted (the store counts before serving).
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e),
                    };
                    match owner_at(&obj)? {
                        RecordedOwner::Newer(len) => {
                            unknown.0 += 1;
                            if unknown.1.is_none() {
                                unknown.1 = Some((obj.clone(), len));
                            }
                        }
                        recorded => {
                            let owner = recorded.charged_to().unwrap_or_default();
                            usage.charge(owner, (meta.blocks() * 512) as i64);
                        }
                    }
                    objects += 1;
                }
            }
        }
        if let (n, Some((first, len))) = unknown {
            tracing::warn!(
                "{}: {n} objects have an owner attribute {OWNER_XATTR} of another length than \
                 {} bytes (a newer nacre's; the first: {}, {len} bytes): their owner is \
                 unknown and their space charged to no one",
                root.display(),
                Owner::BYTES,
                first.display()
            );
        }
        Ok((usage, objects))
    }
}

fn read_dir_or_empty(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.map(|e| e.path())).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The owner recorded on the object file at `path` (none where the file system keeps no
/// extended attributes, or the object was destroyed meanwhile).
fn owner_at(path: &Path) -> std::io::Result<RecordedOwner> {
    let mut b = RecordedOwner::buffer();
    let read = rustix::fs::getxattr(path, OWNER_XATTR, &mut b[..]);
    match RecordedOwner::from_read(&b, read, || rustix::fs::getxattr_query(path, OWNER_XATTR)) {
        Ok(r) => Ok(r),
        Err(rustix::io::Errno::NOTSUP | rustix::io::Errno::NOENT) => Ok(RecordedOwner::Absent),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::{ObjectId, QuotaKind};

    #[test]
    fn every_change_keeps_the_usage_equal_to_a_recount() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::ObjectStore::open(dir.path()).unwrap();
        let alice = Owner {
            uid: 1000,
            gid: 100,
            project: 7,
        };
        let bob = Owner {
            uid: 1001,
            gid: 100,
            project: 0,
        };
        let obj = |id| ObjectId { seq: 0, id };
        let data = nacre_types::AlignedBuf::zeroed(1 << 20);
        let recount = |store: &crate::ObjectStore| {
            let (counted, _) = Usage::count(dir.path()).unwrap();
            assert_eq!(store.usage().all(), counted.all());
            counted.all()
        };
        store.write(obj(1), 0, &data, alice).unwrap();
        store.write(obj(1), 4 << 20, &data[..4096], alice).unwrap();
        store.write(obj(2), 0, &data[..100], bob).unwrap();
        let user = |id| QuotaId {
            kind: QuotaKind::User,
            id,
        };
        assert!(store.usage().of(user(1000)) >= (1 << 20) + 4096);
        recount(&store);
        store.punch(obj(1), 8192).unwrap();
        recount(&store);
        store.fallocate(obj(2), 0, 1 << 20, false, false).unwrap();
        recount(&store);
        store.fallocate(obj(2), 0, 1 << 20, true, true).unwrap();
        recount(&store);
        store.set_owner(obj(1), bob).unwrap();
        assert_eq!(store.usage().of(user(1000)), 0);
        recount(&store);
        store.punch(obj(3), 1 << 20).unwrap(); // an object with no owner: root's
        recount(&store);
        for id in 1..=3 {
            store.destroy(obj(id)).unwrap();
        }
        assert_eq!(recount(&store), Vec::new());
    }

    #[test]
    fn a_check_finds_blocks_changed_behind_the_store_and_repairs_them() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::ObjectStore::open(dir.path()).unwrap();
        let alice = Owner {
            uid: 1000,
            gid: 100,
            project: 7,
        };
        let obj = ObjectId { seq: 0, id: 1 };
        let data = nacre_types::AlignedBuf::zeroed(1 << 20);
        store.write(obj, 0, &data, alice).unwrap();
        assert_eq!(store.quota_check(false).unwrap().diffs_total, 0);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(store.path(obj))
            .unwrap();
        f.write_all(&[7; 1 << 20]).unwrap();
        f.sync_all().unwrap();
        let user = QuotaId {
            kind: QuotaKind::User,
            id: 1000,
        };
        let before = store.usage().of(user);
        let found = store.quota_check(false).unwrap();
        assert_eq!(found.diffs_total, 3, "{found:?}");
        assert!(!found.repaired);
        assert!(found.diffs.contains(&(user, before + (1 << 20), before)));
        assert_eq!(
            store.usage().of(user),
            before,
            "a check alone repairs nothing"
        );
        assert!(store.quota_check(true).unwrap().repaired);
        assert_eq!(store.usage().of(user), before + (1 << 20));
        assert_eq!(store.quota_check(false).unwrap().diffs_total, 0);
    }

    #[test]
    fn charges_move_and_vanish_at_zero() {
        let u = Usage::default();
        let a = Owner {
            uid: 1,
            gid: 10,
            project: 7,
        };
        let b = Owner {
            uid: 2,
            gid: 10,
            project: 0,
        };
        u.charge(a, 8192);
        u.transfer(a, b, 4096);
        let id = |kind, id| QuotaId { kind, id };
        assert_eq!(u.of(id(QuotaKind::User, 1)), 4096);
        assert_eq!(u.of(id(QuotaKind::User, 2)), 4096);
        assert_eq!(u.of(id(QuotaKind::Group, 10)), 8192);
        assert_eq!(u.of(id(QuotaKind::Project, 7)), 4096);
        u.charge(a, -4096);
        u.charge(b, -4096);
        assert!(u.all().is_empty(), "{:?}", u.all());
    }
}
