//! Layout fences and data versions, for online migration (docs/migrate.md).
//!
//! **Fences.** Every write (and punch, fallocate) carries the generation of the layout it
//! was issued under. When a migration is about to swap a file's layout, the objects of the
//! old layout are fenced at generation G+1: a request carrying an older generation is
//! refused (`ESTALE`) and the client asks the MDT for the layout again, then redoes the
//! write where the layout now says. Fences are kept in an append-only log in the target
//! directory (`fences`), replayed at start, so a write issued before a crash of the OSS is
//! refused after it too, and so is a straggler to an object already destroyed (which would
//! otherwise be created again, its data lost in it). At most [`FENCES_MAX`] are kept, the
//! oldest forgotten first.
//!
//! **Data versions.** Every change of an object (write, punch, fallocate) takes the next
//! number of this OST's sequence; an object's data version is the number of its last
//! change, with the OST's epoch (new at every start). Numbers are kept for at most
//! [`VERSIONS_TRACKED_MAX`] objects: past that they are all forgotten and every object
//! reports the sequence's current number (a migration in progress then sees a change and
//! copies again: never a change missed).

use nacre_types::ObjectId;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Fences kept at most (the oldest go first past it).
pub const FENCES_MAX: usize = 1_000_000;
/// Objects whose last change's number is kept at most.
pub const VERSIONS_TRACKED_MAX: usize = 262_144;
/// Bytes of one fence in the log: object seq (8), id (8), generation (4), crc32c (4).
const FENCE_RECORD_BYTES: usize = 24;

/// Shards of the change gates (objects hash to one).
const GATES: usize = 256;

/// An OST's fences and data versions.
///
/// **Change gates.** A change holds its object's gate (shared) from its fence check until
/// its data version is counted; a fence, once set, waits for the gate of each object it
/// fences (exclusive). So a write that passed the check before the fence was set has landed
/// and been counted before the fence returns: the migration's data version after the fence
/// sees it (and copies again), and nothing it copies is torn by a write still landing.
pub struct Fences {
    gates: Vec<RwLock<()>>,
    path: PathBuf,
    /// Object → the lowest layout generation its writes may carry, and when it was set (a
    /// running count, for forgetting the oldest).
    map: RwLock<HashMap<ObjectId, (u32, u64)>>,
    log: Mutex<Log>,
    versions: Mutex<Versions>,
    epoch: u64,
}

struct Log {
    file: Option<std::fs::File>,
    records: usize,
    next_order: u64,
}

#[derive(Default)]
struct Versions {
    seq: u64,
    last: HashMap<ObjectId, u64>,
    floor: u64,
}

fn encode(object: ObjectId, generation: u32) -> [u8; FENCE_RECORD_BYTES] {
    let mut r = [0u8; FENCE_RECORD_BYTES];
    r[..8].copy_from_slice(&object.seq.to_le_bytes());
    r[8..16].copy_from_slice(&object.id.to_le_bytes());
    r[16..20].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32c::crc32c(&r[..20]);
    r[20..].copy_from_slice(&crc.to_le_bytes());
    r
}

fn decode(r: &[u8]) -> Option<(ObjectId, u32)> {
    let crc = u32::from_le_bytes(r.get(20..24)?.try_into().ok()?);
    if crc32c::crc32c(&r[..20]) != crc {
        return None;
    }
    let seq = u64::from_le_bytes(r[..8].try_into().ok()?);
    let id = u64::from_le_bytes(r[8..16].try_into().ok()?);
    let generation = u32::from_le_bytes(r[16..20].try_into().ok()?);
    Some((ObjectId { seq, id }, generation))
}

impl Fences {
    /// Loads the fences of the target in `dir` (none if it has no log yet). A damaged
    /// record (a crash in the middle of an append) ends the log there.
    pub fn load(dir: &Path) -> std::io::Result<Fences> {
        let path = dir.join("fences");
        let mut map = HashMap::new();
        let mut order = 0u64;
        let mut records = 0;
        match std::fs::read(&path) {
            Ok(bytes) => {
                for r in bytes.chunks(FENCE_RECORD_BYTES) {
                    let Some((object, generation)) = decode(r) else {
                        tracing::warn!("{}: damaged fence record: log ends there", path.display());
                        break;
                    };
                    let e = map.entry(object).or_insert((0, 0));
                    e.0 = e.0.max(generation);
                    e.1 = order;
                    order += 1;
                    records += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let fences = Fences {
            gates: (0..GATES).map(|_| RwLock::new(())).collect(),
            path,
            map: RwLock::new(map),
            log: Mutex::new(Log {
                file: None,
                records,
                next_order: order,
            }),
            versions: Mutex::new(Versions::default()),
            epoch: fastrand::u64(1..u64::MAX),
        };
        // A log grown well past what it holds (or cut short by damage) is written anew.
        let live = fences.map.read().len();
        if records > 2 * live.max(1024) || records != live && records > FENCES_MAX {
            fences.compact()?;
        }
        Ok(fences)
    }

    /// The gate a change of `object` holds while it is checked, made and counted.
    pub fn change_gate(&self, object: ObjectId) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.gate(object).read()
    }

    fn gate(&self, object: ObjectId) -> &RwLock<()> {
        let h = object.seq.rotate_left(17) ^ object.id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.gates[(h % GATES as u64) as usize]
    }

    /// True if a request carrying layout `generation` may not change `object`.
    pub fn refuses(&self, object: ObjectId, generation: u32) -> bool {
        self.map
            .read()
            .get(&object)
            .is_some_and(|(g, _)| generation < *g)
    }

    /// The lowest generation `object`'s writes may carry (0: not fenced).
    pub fn generation(&self, object: ObjectId) -> u32 {
        self.map.read().get(&object).map_or(0, |(g, _)| *g)
    }

    /// Fences `objects` at `generation` (a fence never goes down), durably.
    pub fn fence(&self, objects: &[ObjectId], generation: u32) -> std::io::Result<()> {
        let mut log = self.log.lock();
        let mut bytes = Vec::with_capacity(objects.len() * FENCE_RECORD_BYTES);
        {
            let mut map = self.map.write();
            for o in objects {
                let order = log.next_order;
                log.next_order += 1;
                let e = map.entry(*o).or_insert((0, order));
                e.0 = e.0.max(generation);
                e.1 = order;
                bytes.extend_from_slice(&encode(*o, e.0));
            }
            if map.len() > FENCES_MAX {
                let mut by_age: Vec<(u64, ObjectId)> =
                    map.iter().map(|(o, (_, order))| (*order, *o)).collect();
                by_age.sort_unstable();
                for (_, o) in by_age.iter().take(map.len() - FENCES_MAX) {
                    map.remove(o);
                }
            }
        }
        if log.file.is_none() {
            log.file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        let file = log.file.as_mut().expect("opened above");
        file.write_all(&bytes)?;
        file.sync_data()?;
        log.records += objects.len();
        let live = self.map.read().len();
        let compact = log.records > 2 * live.max(1024);
        drop(log);
        // Changes that passed their check before the fence was set land and are counted
        // before it returns.
        for o in objects {
            drop(self.gate(*o).write());
        }
        if compact {
            self.compact()?;
        }
        Ok(())
    }

    /// Writes the log anew with one record per fence kept.
    fn compact(&self) -> std::io::Result<()> {
        let mut log = self.log.lock();
        let tmp = self.path.with_extension("new");
        let mut entries: Vec<(u64, ObjectId, u32)> = self
            .map
            .read()
            .iter()
            .map(|(o, (g, order))| (*order, *o, *g))
            .collect();
        entries.sort_unstable();
        let mut bytes = Vec::with_capacity(entries.len() * FENCE_RECORD_BYTES);
        for (_, o, g) in &entries {
            bytes.extend_from_slice(&encode(*o, *g));
        }
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        log.file = None;
        log.records = entries.len();
        Ok(())
    }

    /// Fences kept.
    pub fn len(&self) -> usize {
        self.map.read().len()
    }

    /// True if no object is fenced.
    pub fn is_empty(&self) -> bool {
        self.map.read().is_empty()
    }

    /// Records a change of `object` (after it is made).
    pub fn changed(&self, object: ObjectId) {
        let mut v = self.versions.lock();
        v.seq += 1;
        let seq = v.seq;
        if v.last.len() >= VERSIONS_TRACKED_MAX && !v.last.contains_key(&object) {
            v.last.clear();
            v.floor = seq;
        }
        v.last.insert(object, seq);
    }

    /// The data version of each of `objects`, and this OST's epoch.
    pub fn versions(&self, objects: &[ObjectId]) -> (u64, Vec<u64>) {
        let v = self.versions.lock();
        let out = objects
            .iter()
            .map(|o| v.last.get(o).copied().unwrap_or(v.floor))
            .collect();
        (self.epoch, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(id: u64) -> ObjectId {
        ObjectId { seq: 0, id }
    }

    #[test]
    fn fences_refuse_older_generations_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let f = Fences::load(dir.path()).unwrap();
        assert!(!f.refuses(obj(1), 0));
        f.fence(&[obj(1), obj(2)], 3).unwrap();
        f.fence(&[obj(1)], 2).unwrap(); // never goes down
        assert!(f.refuses(obj(1), 2));
        assert!(!f.refuses(obj(1), 3));
        assert!(!f.refuses(obj(3), 0));
        let again = Fences::load(dir.path()).unwrap();
        assert_eq!(again.generation(obj(1)), 3);
        assert_eq!(again.generation(obj(2)), 3);
        assert_eq!(again.len(), 2);
        // A torn last record is dropped, the rest kept.
        let path = dir.path().join("fences");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[7; 10]);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(Fences::load(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn versions_change_with_every_change_and_never_repeat_after_forgetting() {
        let dir = tempfile::tempdir().unwrap();
        let f = Fences::load(dir.path()).unwrap();
        let (epoch, v0) = f.versions(&[obj(1), obj(2)]);
        f.changed(obj(1));
        let (e1, v1) = f.versions(&[obj(1), obj(2)]);
        assert_eq!(epoch, e1);
        assert_ne!(v0[0], v1[0]);
        assert_eq!(v0[1], v1[1]);
        // Forgetting everything moves every untracked object's version.
        for id in 10..(10 + VERSIONS_TRACKED_MAX as u64) {
            f.changed(obj(id));
        }
        let (_, v2) = f.versions(&[obj(2)]);
        assert_ne!(v2[0], v1[1]);
        // Another start: another epoch.
        assert_ne!(Fences::load(dir.path()).unwrap().versions(&[]).0, epoch);
    }
}
