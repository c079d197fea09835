//! Layout fences and data versions, for online migration (docs/migrate.md).
//!
//! **Fences.** Every write (and punch, fallocate) carries the generation of the layout it
//! was issued under. When a migration is about to swap a file's layout, the objects of the
//! old layout are fenced at generation G+1: a request carrying an older generation is
//! refused (`ESTALE`) and the client asks the MDT for the layout again, then redoes the
//! write where the layout now says. Fences are kept in an append-only log in the target
//! directory ([`FENCE_LOG_FILE`]), replayed at start, so a write issued before a crash of
//! the OSS is refused after it too, and so is a straggler to an object already destroyed
//! (which would otherwise be created again, its data lost in it). At most [`FENCES_MAX`]
//! are kept, the oldest forgotten first.
//!
//! **The log's format.** `fences.2` opens with a header, [`FENCE_LOG_MAGIC`] and the
//! version of its records (u32 little-endian, [`FENCE_LOG_VERSION`]), then the records of
//! that version: 24 bytes each, object seq (8), id (8), generation (4), crc32c of those
//! (4), all little-endian. A log whose version is newer than this nacre reads, or whose
//! header is damaged, refuses the OST's start ([`FenceError`]): never read as empty. The
//! log of before, `fences` ([`FENCE_LOG_V1_FILE`]: the same records, no header), is read
//! at start when present and replaced by `fences.2` holding every fence it kept (written
//! whole, synced, renamed; then `fences` removed). The header is on a new file because at
//! the start of `fences` it would read as a record to an older OST. A record that does not
//! decode (a crash in the middle of an append) ends the log there, and the log is then
//! written anew so that later appends follow the last good record.
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
/// The fence log of this release, in the target directory: a header, then records.
pub const FENCE_LOG_FILE: &str = "fences.2";
/// The fence log of before (version 1 records, no header), converted at start.
pub const FENCE_LOG_V1_FILE: &str = "fences";
/// First bytes of [`FENCE_LOG_FILE`].
pub const FENCE_LOG_MAGIC: [u8; 4] = *b"NFEN";
/// Version of the records this nacre writes, and the newest it reads.
pub const FENCE_LOG_VERSION: u32 = 1;
/// Bytes of the header of [`FENCE_LOG_FILE`]: magic (4), version (4).
const FENCE_HEADER_BYTES: usize = 8;

/// Why an OST's fence log cannot be used: the OST does not start (a fence forgotten would
/// let a write of an older layout through).
#[derive(Debug)]
pub enum FenceError {
    /// The log's version is newer than this nacre reads.
    TooNew {
        /// The log.
        path: String,
        /// Version found.
        found: u32,
        /// Newest this nacre reads.
        newest: u32,
    },
    /// The log's header is damaged.
    BadHeader {
        /// The log.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Display for FenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FenceError::TooNew {
                path,
                found,
                newest,
            } => write!(
                f,
                "{path}: fence log version {found} is newer than this nacre reads (up to \
                 {newest}): upgrade nacre"
            ),
            FenceError::BadHeader { path, reason } => write!(
                f,
                "{path}: damaged fence log header ({reason}); the OST does not start without \
                 its fences"
            ),
        }
    }
}

impl std::error::Error for FenceError {}

impl From<FenceError> for std::io::Error {
    fn from(e: FenceError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

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

/// The header of [`FENCE_LOG_FILE`] in this nacre's version.
fn header() -> [u8; FENCE_HEADER_BYTES] {
    let mut h = [0u8; FENCE_HEADER_BYTES];
    h[..4].copy_from_slice(&FENCE_LOG_MAGIC);
    h[4..].copy_from_slice(&FENCE_LOG_VERSION.to_le_bytes());
    h
}

/// The records of the `fences.2` at `path` whose bytes are `bytes`, after its header; an
/// error if the header is damaged or its version newer than this nacre reads.
fn records_of<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8], FenceError> {
    let bad = |reason: String| FenceError::BadHeader {
        path: path.display().to_string(),
        reason,
    };
    let Some(h) = bytes.get(..FENCE_HEADER_BYTES) else {
        return Err(bad(format!(
            "{} bytes, shorter than its header of {FENCE_HEADER_BYTES}",
            bytes.len()
        )));
    };
    if h[..4] != FENCE_LOG_MAGIC {
        return Err(bad(format!("bad magic {:02x?}", &h[..4])));
    }
    let found = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    if found > FENCE_LOG_VERSION {
        return Err(FenceError::TooNew {
            path: path.display().to_string(),
            found,
            newest: FENCE_LOG_VERSION,
        });
    }
    if found == 0 {
        return Err(bad("version 0".into()));
    }
    Ok(&bytes[FENCE_HEADER_BYTES..])
}

/// The fences of a log's records, in order, up to the first that does not decode (a crash
/// in the middle of an append: the log ends there, logged), and whether one did not.
fn read_records(path: &Path, bytes: &[u8]) -> (Vec<(ObjectId, u32)>, bool) {
    let mut out = Vec::with_capacity(bytes.len() / FENCE_RECORD_BYTES);
    for r in bytes.chunks(FENCE_RECORD_BYTES) {
        match decode(r) {
            Some(f) => out.push(f),
            None => {
                tracing::warn!("{}: damaged fence record: log ends there", path.display());
                return (out, true);
            }
        }
    }
    (out, false)
}

/// The bytes of `path`, `None` if it does not exist.
fn read_if_any(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the log at `path` (a [`FENCE_LOG_FILE`]) anew, the header then `records`,
/// durably: a new file, synced, renamed over it, then the directory synced.
fn write_log(path: &Path, records: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_file_name(format!("{FENCE_LOG_FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&header())?;
        f.write_all(records)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    sync_parent(path)
}

/// Syncs the directory holding `path`.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

impl Fences {
    /// Loads the fences of the target in `dir` (none if it has no log yet): those of
    /// [`FENCE_LOG_V1_FILE`] if present (the log of before, then converted: module docs),
    /// then those of [`FENCE_LOG_FILE`]. A damaged record (a crash in the middle of an
    /// append) ends its log there, which is then written anew. An error
    /// ([`FenceError`] inside) if the log's header is damaged or newer than this nacre.
    pub fn load(dir: &Path) -> std::io::Result<Fences> {
        let path = dir.join(FENCE_LOG_FILE);
        let old_path = dir.join(FENCE_LOG_V1_FILE);
        let current = match read_if_any(&path)? {
            Some(bytes) => Some(read_records(&path, records_of(&path, &bytes)?)),
            None => None,
        };
        let old = read_if_any(&old_path)?.map(|bytes| read_records(&old_path, &bytes));
        let converting = old.is_some();
        // The log of before first: what was appended to the new one came after it.
        let mut damaged = false;
        let mut read = Vec::new();
        for (fences, torn) in old.into_iter().chain(current) {
            read.extend(fences);
            damaged |= torn;
        }
        let mut map = HashMap::new();
        let mut order = 0u64;
        for (object, generation) in &read {
            let e = map.entry(*object).or_insert((0, 0));
            e.0 = e.0.max(*generation);
            e.1 = order;
            order += 1;
        }
        let records = read.len();
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
        // A log grown well past what it holds, or cut short by damage (later appends would
        // follow the damaged record, and be lost with it), is written anew; so is the log
        // of before, in this version.
        let live = fences.map.read().len();
        if damaged
            || converting
            || records > 2 * live.max(1024)
            || records != live && records > FENCES_MAX
        {
            fences.compact()?;
        }
        if converting {
            match std::fs::remove_file(&old_path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            sync_parent(&old_path)?;
            tracing::info!(
                "{}: {records} fence records read and converted to {} ({live} fences)",
                old_path.display(),
                fences.path.display()
            );
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
            let open = || std::fs::OpenOptions::new().append(true).open(&self.path);
            let file = match open() {
                Ok(f) => f,
                // The first fence of this OST: the log is made with its header first.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    write_log(&self.path, &[])?;
                    open()?
                }
                Err(e) => return Err(e),
            };
            log.file = Some(file);
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

    /// Writes the log anew, in this nacre's version, with one record per fence kept.
    fn compact(&self) -> std::io::Result<()> {
        let mut log = self.log.lock();
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
        write_log(&self.path, &bytes)?;
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
        // A torn last record is dropped, the rest kept; fences set after it are kept too.
        let path = dir.path().join(FENCE_LOG_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[7; 10]);
        std::fs::write(&path, &bytes).unwrap();
        let torn = Fences::load(dir.path()).unwrap();
        assert_eq!(torn.len(), 2);
        torn.fence(&[obj(9)], 5).unwrap();
        let again = Fences::load(dir.path()).unwrap();
        assert_eq!(again.len(), 3);
        assert_eq!(again.generation(obj(9)), 5);
    }

    /// `fences` as the baseline wrote it (version 1, no header): (0:1 at 3), (5:77 at 2),
    /// (0:1 at 4).
    const FENCES_V1: &str = "0000000000000000010000000000000003000000370b96ef\
        05000000000000004d00000000000000020000003b6f9df7\
        0000000000000000010000000000000004000000fdb396f6";
    /// `fences.2` of version 1 holding one fence: 5:77 at 2.
    const FENCES_2_V1: &str = "4e46454e01000000\
        05000000000000004d00000000000000020000003b6f9df7";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_log_of_before_is_converted_keeping_every_fence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FENCE_LOG_V1_FILE), unhex(FENCES_V1)).unwrap();
        let f = Fences::load(dir.path()).unwrap();
        let check = |f: &Fences| {
            assert_eq!(f.len(), 2);
            assert_eq!(f.generation(obj(1)), 4);
            assert_eq!(f.generation(ObjectId { seq: 5, id: 77 }), 2);
        };
        check(&f);
        assert!(!dir.path().join(FENCE_LOG_V1_FILE).exists());
        let log = std::fs::read(dir.path().join(FENCE_LOG_FILE)).unwrap();
        assert_eq!(&log[..8], b"NFEN\x01\x00\x00\x00");
        assert_eq!(log.len(), 8 + 2 * FENCE_RECORD_BYTES);
        check(&Fences::load(dir.path()).unwrap());
        // A crash between the new log's rename and the old one's removal: both are read.
        std::fs::write(dir.path().join(FENCE_LOG_V1_FILE), unhex(FENCES_V1)).unwrap();
        check(&Fences::load(dir.path()).unwrap());
        assert!(!dir.path().join(FENCE_LOG_V1_FILE).exists());
    }

    #[test]
    fn the_log_is_written_in_its_version_and_appends_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FENCE_LOG_FILE);
        let f = Fences::load(dir.path()).unwrap();
        assert!(!path.exists());
        f.fence(&[ObjectId { seq: 5, id: 77 }], 2).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), unhex(FENCES_2_V1));
        f.fence(&[obj(1), obj(2)], 7).unwrap();
        drop(f);
        let again = Fences::load(dir.path()).unwrap();
        assert_eq!(again.len(), 3);
        assert_eq!(again.generation(obj(2)), 7);
        assert_eq!(again.generation(ObjectId { seq: 5, id: 77 }), 2);
        // The stored sample reads as written.
        std::fs::write(&path, unhex(FENCES_2_V1)).unwrap();
        assert_eq!(Fences::load(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn a_newer_or_damaged_header_refuses_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FENCE_LOG_FILE);
        let mut newer = unhex(FENCES_2_V1);
        newer[4] = 2;
        std::fs::write(&path, &newer).unwrap();
        let e = Fences::load(dir.path()).err().expect("a newer log refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let text = e.to_string();
        assert!(
            text.contains("version 2") && text.contains("up to 1"),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            newer,
            "a newer log was changed"
        );
        for damaged in [&b"XFEN\x01\x00\x00\x00"[..], &b"NFE"[..], &b""[..]] {
            std::fs::write(&path, damaged).unwrap();
            let e = Fences::load(dir.path())
                .err()
                .expect("a damaged header refused");
            assert!(e.to_string().contains("damaged fence log header"), "{e}");
        }
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
