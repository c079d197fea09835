//! The engine's index of the file system (docs/policy.md): one row per regular file (what
//! rules look at), the names of each file, the directories as a tree (for paths), a
//! least-recently-used order per pool, and the engine's own state, in an embedded
//! transactional store (nacre-kv) under the state directory.
//!
//! Tables (keys → values):
//! * `files`: FID (16 bytes) → [`FileRow`] (postcard, about 70 bytes);
//! * `names`: FID, parent FID, name → nothing (a file's hard links);
//! * `lru`: pool (16 bytes), access time (8, ordered), FID (16) → nothing;
//! * `dirs`: FID → parent FID and name (an empty name: a shard of its parent, the
//!   striped directory); also kept in memory, directories being few;
//! * `meta`: the engine's state (changelog consumers and positions, the scan, counters), and
//!   `format`, the format of the rows ([`INDEX_FORMAT`]; u32 big-endian, absent: 1, set at
//!   open by `nacre_kv::open_format`).

use crate::PolicyError;
use nacre_kv::{Batch, FjallStore, KvStore};
use nacre_types::{Fid, PoolName};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

const FILES: &str = "files";
const NAMES: &str = "names";
const LRU: &str = "lru";
const DIRS: &str = "dirs";
const META: &str = "meta";
const TABLES: [&str; 5] = [FILES, NAMES, LRU, DIRS, META];

/// The format of the index's rows this engine reads and writes: 1, the tables above with
/// [`FileRow`] in postcard (rows from before projects read as project 0). An index of a newer
/// format is refused at open ([`PolicyError::Format`]), naming both.
pub const INDEX_FORMAT: u32 = 1;

/// Deepest directory chain a path is built through (a loop in a damaged index ends there).
pub const PATH_DEPTH_MAX: usize = 4096;
/// Names of one file read at most.
pub const NAMES_PER_FILE_MAX: usize = 1024;

/// What the index keeps of a regular file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRow {
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last access (the MDT's lazy access time), seconds since the epoch.
    pub atime: i64,
    /// Last modification, seconds.
    pub mtime: i64,
    /// Last status change, seconds.
    pub ctime: i64,
    /// Creation, seconds (from its CREAT record; for files found by the first scan, their
    /// ctime then, which is no earlier than their creation).
    pub created: i64,
    /// Pool of its layout.
    pub pool: PoolName,
    /// Stripes.
    pub stripe_count: u32,
    /// Job that created it or last wrote it (empty: unknown).
    pub jobid: String,
    /// Project.
    pub project: u32,
}

/// A row as indexes written before projects keep it (read as project 0: no file had one).
#[derive(Deserialize)]
struct FileRowNoProject {
    size: u64,
    blocks: u64,
    uid: u32,
    gid: u32,
    atime: i64,
    mtime: i64,
    ctime: i64,
    created: i64,
    pool: PoolName,
    stripe_count: u32,
    jobid: String,
}

/// Decodes a row of either format.
fn decode_row(v: &[u8]) -> Result<FileRow, PolicyError> {
    if let Ok(row) = postcard::from_bytes::<FileRow>(v) {
        return Ok(row);
    }
    let o: FileRowNoProject = decode("file", v)?;
    Ok(FileRow {
        size: o.size,
        blocks: o.blocks,
        uid: o.uid,
        gid: o.gid,
        atime: o.atime,
        mtime: o.mtime,
        ctime: o.ctime,
        created: o.created,
        pool: o.pool,
        stripe_count: o.stripe_count,
        jobid: o.jobid,
        project: 0,
    })
}

impl FileRow {
    /// Bytes it holds on its OSTs (its blocks; its size when no blocks are known).
    pub fn space(&self) -> u64 {
        match self.blocks {
            0 => self.size,
            b => b.saturating_mul(512),
        }
    }
}

/// A directory's parent and name.
pub type DirName = (Fid, Vec<u8>);

/// One change to the index; a list of them is applied atomically, in order.
#[derive(Clone, Debug)]
pub enum Change {
    /// A name of a file (fid, parent, name) exists.
    AddName(Fid, Fid, Vec<u8>),
    /// That name is gone.
    RemoveName(Fid, Fid, Vec<u8>),
    /// A file's row is this (None: the file is gone with all its names).
    Row(Fid, Option<FileRow>),
    /// A directory's name (None: it is gone).
    Dir(Fid, Option<(Fid, Vec<u8>)>),
    /// An engine state key is this.
    Meta(String, Vec<u8>),
}

/// Totals of a pool in the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolTotals {
    /// Files.
    pub files: u64,
    /// Bytes ([`FileRow::space`]).
    pub bytes: u64,
}

/// The index.
pub struct Index {
    kv: FjallStore,
    dirs: RwLock<HashMap<Fid, (Fid, Vec<u8>)>>,
    totals: RwLock<HashMap<PoolName, PoolTotals>>,
    /// Held through each change of the index: the engine's rules refresh rows while the
    /// changelogs are followed, and each change reads the rows it replaces and the totals
    /// before it writes them (two at once lost a file from the totals).
    changing: parking_lot::Mutex<()>,
}

fn name_key(fid: Fid, parent: Fid, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(32 + name.len());
    k.extend_from_slice(&fid.to_key());
    k.extend_from_slice(&parent.to_key());
    k.extend_from_slice(name);
    k
}

/// An access time as 8 bytes that sort as the times do.
fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn lru_key(pool: PoolName, atime: i64, fid: Fid) -> Vec<u8> {
    let mut k = Vec::with_capacity(40);
    k.extend_from_slice(&pool_key(pool));
    k.extend_from_slice(&time_key(atime));
    k.extend_from_slice(&fid.to_key());
    k
}

fn pool_key(pool: PoolName) -> [u8; 16] {
    let mut k = [0u8; 16];
    let b = pool.as_str().as_bytes();
    k[..b.len()].copy_from_slice(b);
    k
}

fn kv_err(e: nacre_kv::KvError) -> PolicyError {
    PolicyError::Index(e.to_string())
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, v: &[u8]) -> Result<T, PolicyError> {
    postcard::from_bytes(v).map_err(|e| PolicyError::Index(format!("bad {what} record: {e}")))
}

impl Index {
    /// Opens (creating) the index under `dir`.
    pub fn open(dir: &Path) -> Result<Index, PolicyError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| PolicyError::Index(format!("{}: {e}", dir.display())))?;
        let path = dir.join("index");
        let kv = FjallStore::open(&path, &TABLES).map_err(kv_err)?;
        let store = format!("policy index {}", path.display());
        nacre_kv::open_format(&kv, META, &store, INDEX_FORMAT)?;
        let mut dirs = HashMap::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = kv.scan(DIRS, &[], after.as_deref(), 4096).map_err(kv_err)?;
            for (k, v) in &page {
                let fid =
                    Fid::from_key(k).ok_or_else(|| PolicyError::Index("bad dir key".into()))?;
                dirs.insert(fid, decode::<(Fid, Vec<u8>)>("directory", v)?);
            }
            match page.last() {
                Some((k, _)) if page.len() == 4096 => after = Some(k.clone()),
                _ => break,
            }
        }
        let totals = match kv.get(META, b"pool_totals").map_err(kv_err)? {
            Some(v) => decode::<Vec<(PoolName, PoolTotals)>>("totals", &v)?
                .into_iter()
                .collect(),
            None => HashMap::new(),
        };
        Ok(Index {
            kv,
            dirs: RwLock::new(dirs),
            totals: RwLock::new(totals),
            changing: parking_lot::Mutex::new(()),
        })
    }

    /// An engine state key.
    pub fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, PolicyError> {
        self.kv.get(META, key.as_bytes()).map_err(kv_err)
    }

    /// A file's row.
    pub fn file(&self, fid: Fid) -> Result<Option<FileRow>, PolicyError> {
        match self.kv.get(FILES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => Ok(Some(decode_row(&v)?)),
            None => Ok(None),
        }
    }

    /// A file's names: (directory, name).
    pub fn names(&self, fid: Fid) -> Result<Vec<(Fid, Vec<u8>)>, PolicyError> {
        let page = self
            .kv
            .scan(NAMES, &fid.to_key(), None, NAMES_PER_FILE_MAX)
            .map_err(kv_err)?;
        page.into_iter()
            .map(
                |(k, _)| match (k.get(16..).and_then(Fid::from_key), k.get(32..)) {
                    (Some(parent), Some(name)) => Ok((parent, name.to_vec())),
                    _ => Err(PolicyError::Index("bad name key".into())),
                },
            )
            .collect()
    }

    /// A directory is known.
    pub fn has_dir(&self, fid: Fid) -> bool {
        fid == Fid::ROOT || self.dirs.read().contains_key(&fid)
    }

    /// The path of directory `dir` from the root (`""` for the root itself), if every
    /// directory up to the root is known.
    pub fn dir_path(&self, dir: Fid) -> Option<String> {
        let dirs = self.dirs.read();
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut cur = dir;
        for _ in 0..PATH_DEPTH_MAX {
            if cur == Fid::ROOT {
                let mut s = String::new();
                for p in parts.iter().rev() {
                    s.push('/');
                    s.push_str(&String::from_utf8_lossy(p));
                }
                return Some(s);
            }
            let (parent, name) = dirs.get(&cur)?;
            // A shard's entries are its striped directory's: no component of its own.
            if !name.is_empty() {
                parts.push(name);
            }
            cur = *parent;
        }
        None
    }

    /// A file's path from the root by its first name (`/a/b/file`), if known.
    pub fn path(&self, fid: Fid) -> Result<Option<String>, PolicyError> {
        let Some((parent, name)) = self.names(fid)?.into_iter().next() else {
            return Ok(None);
        };
        Ok(self
            .dir_path(parent)
            .map(|d| format!("{d}/{}", String::from_utf8_lossy(&name))))
    }

    /// Up to `limit` files in least-recently-accessed order: of pool `pool` (or of every
    /// pool, pool by pool, for None), after `after` (a key this returned).
    pub fn lru(
        &self,
        pool: Option<PoolName>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Fid)>, PolicyError> {
        let prefix = pool.map(pool_key);
        let page = self
            .kv
            .scan(
                LRU,
                prefix.as_ref().map_or(&[][..], |p| &p[..]),
                after,
                limit,
            )
            .map_err(kv_err)?;
        page.into_iter()
            .map(|(k, _)| {
                let fid = k
                    .get(24..)
                    .and_then(Fid::from_key)
                    .ok_or_else(|| PolicyError::Index("bad lru key".into()))?;
                Ok((k, fid))
            })
            .collect()
    }

    /// A pool's name for people (`-` for none).
    pub fn pool_label(pool: &PoolName) -> &str {
        if pool.is_none() {
            "-"
        } else {
            pool.as_str()
        }
    }

    /// Files and bytes per pool, as indexed.
    pub fn totals(&self) -> Vec<(PoolName, PoolTotals)> {
        let mut v: Vec<_> = self.totals.read().iter().map(|(p, t)| (*p, *t)).collect();
        v.sort_by_key(|(p, _)| *p);
        v
    }

    /// Files indexed.
    pub fn files(&self) -> u64 {
        self.totals.read().values().map(|t| t.files).sum()
    }

    /// Directories indexed.
    pub fn dirs(&self) -> usize {
        self.dirs.read().len()
    }

    /// Approximate bytes the index takes on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.kv.disk_bytes()
    }

    /// Applies `changes` in order, atomically, and waits until they are durable.
    pub fn apply(&self, changes: Vec<Change>) -> Result<(), PolicyError> {
        if changes.is_empty() {
            return Ok(());
        }
        let _changing = self.changing.lock();
        let mut batch = Batch::new();
        // Rows as this batch leaves them (the old row's LRU key must go).
        let mut rows: HashMap<Fid, Option<FileRow>> = HashMap::new();
        let mut dirs: Vec<(Fid, Option<DirName>)> = Vec::new();
        let mut totals = self.totals.read().clone();
        // Names this batch added, per file (a file gone later in it loses them too).
        let mut added: HashMap<Fid, Vec<(Fid, Vec<u8>)>> = HashMap::new();
        for c in changes {
            match c {
                Change::AddName(fid, parent, name) => {
                    batch.put(NAMES, name_key(fid, parent, &name), Vec::new());
                    added.entry(fid).or_default().push((parent, name));
                }
                Change::RemoveName(fid, parent, name) => {
                    batch.delete(NAMES, name_key(fid, parent, &name))
                }
                Change::Row(fid, row) => {
                    let old = match rows.get(&fid) {
                        Some(r) => r.clone(),
                        None => self.file(fid)?,
                    };
                    if let Some(o) = &old {
                        batch.delete(LRU, lru_key(o.pool, o.atime, fid));
                        let t = totals.entry(o.pool).or_default();
                        t.files = t.files.saturating_sub(1);
                        t.bytes = t.bytes.saturating_sub(o.space());
                    }
                    match &row {
                        Some(r) => {
                            batch.put(FILES, fid.to_key().to_vec(), postcard_row(r));
                            batch.put(LRU, lru_key(r.pool, r.atime, fid), Vec::new());
                            let t = totals.entry(r.pool).or_default();
                            t.files += 1;
                            t.bytes += r.space();
                        }
                        None => {
                            batch.delete(FILES, fid.to_key().to_vec());
                            let mut names = self.names(fid)?;
                            names.extend(added.remove(&fid).unwrap_or_default());
                            for (parent, name) in names {
                                batch.delete(NAMES, name_key(fid, parent, &name));
                            }
                        }
                    }
                    rows.insert(fid, row);
                }
                Change::Dir(fid, d) => {
                    match &d {
                        Some(v) => batch.put(DIRS, fid.to_key().to_vec(), postcard_any(v)),
                        None => batch.delete(DIRS, fid.to_key().to_vec()),
                    }
                    dirs.push((fid, d));
                }
                Change::Meta(k, v) => batch.put(META, k.into_bytes(), v),
            }
        }
        totals.retain(|_, t| t.files > 0);
        let list: Vec<(PoolName, PoolTotals)> = totals.iter().map(|(p, t)| (*p, *t)).collect();
        batch.put(META, b"pool_totals".to_vec(), postcard_any(&list));
        let ticket = self.kv.commit(batch).map_err(kv_err)?;
        self.kv.wait_durable(ticket).map_err(kv_err)?;
        *self.totals.write() = totals;
        let mut map = self.dirs.write();
        for (fid, d) in dirs {
            match d {
                Some(v) => map.insert(fid, v),
                None => map.remove(&fid),
            };
        }
        Ok(())
    }

    /// Forgets every file and directory (the engine's consumers and counters stay): before
    /// a new full scan.
    pub fn clear_namespace(&self) -> Result<(), PolicyError> {
        let _changing = self.changing.lock();
        for table in [FILES, NAMES, LRU, DIRS] {
            loop {
                let page = self.kv.scan(table, &[], None, 4096).map_err(kv_err)?;
                if page.is_empty() {
                    break;
                }
                let mut b = Batch::new();
                for (k, _) in page {
                    b.delete(table, k);
                }
                self.kv.commit(b).map_err(kv_err)?;
            }
        }
        let mut b = Batch::new();
        b.delete(META, b"pool_totals".to_vec());
        let t = self.kv.commit(b).map_err(kv_err)?;
        self.kv.wait_durable(t).map_err(kv_err)?;
        self.dirs.write().clear();
        self.totals.write().clear();
        Ok(())
    }
}

fn postcard_row(r: &FileRow) -> Vec<u8> {
    postcard_any(r)
}

fn postcard_any<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing plain structs into a Vec cannot fail.
    postcard::to_allocvec(v).expect("postcard encodes plain data")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pool: &str, atime: i64, size: u64) -> FileRow {
        FileRow {
            size,
            blocks: 0,
            uid: 0,
            gid: 0,
            atime,
            mtime: atime,
            ctime: atime,
            created: atime,
            pool: PoolName::new(pool).unwrap(),
            stripe_count: 1,
            jobid: String::new(),
            project: 0,
        }
    }

    #[test]
    fn rows_from_before_projects_read_as_project_0() {
        #[derive(Serialize)]
        struct Old {
            size: u64,
            blocks: u64,
            uid: u32,
            gid: u32,
            atime: i64,
            mtime: i64,
            ctime: i64,
            created: i64,
            pool: PoolName,
            stripe_count: u32,
            jobid: String,
        }
        let r = row("flash", 5, 7);
        let old = Old {
            size: r.size,
            blocks: r.blocks,
            uid: r.uid,
            gid: r.gid,
            atime: r.atime,
            mtime: r.mtime,
            ctime: r.ctime,
            created: r.created,
            pool: r.pool,
            stripe_count: r.stripe_count,
            jobid: "j".into(),
        };
        let read = decode_row(&postcard::to_allocvec(&old).unwrap()).unwrap();
        assert_eq!(
            read,
            FileRow {
                jobid: "j".into(),
                ..r.clone()
            }
        );
        let mut p = r;
        p.project = 9;
        assert_eq!(decode_row(&postcard_row(&p)).unwrap(), p);
        assert!(decode_row(&[1, 2]).is_err());
    }

    #[test]
    fn a_new_index_is_format_1_an_old_one_gets_the_key_and_a_newer_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Index::open(dir.path()).unwrap();
        let format = ix.kv.get(META, nacre_kv::FORMAT_KEY).unwrap();
        assert_eq!(format, Some(vec![0, 0, 0, 1]));
        drop(ix);
        // An index written before formats were kept: rows and no `format` key.
        let old = tempfile::tempdir().unwrap();
        let fid = Fid::new(0x200000400, 1);
        {
            let kv = FjallStore::open(&old.path().join("index"), &TABLES).unwrap();
            let mut b = Batch::new();
            b.put(
                FILES,
                fid.to_key().to_vec(),
                postcard_row(&row("flash", 5, 7)),
            );
            b.put(META, b"scanned".to_vec(), b"1".to_vec());
            let t = kv.commit(b).unwrap();
            kv.wait_durable(t).unwrap();
        }
        let ix = Index::open(old.path()).unwrap();
        assert_eq!(ix.file(fid).unwrap(), Some(row("flash", 5, 7)));
        assert_eq!(ix.meta("scanned").unwrap(), Some(b"1".to_vec()));
        assert_eq!(ix.meta("format").unwrap(), Some(vec![0, 0, 0, 1]));
        // A full rescan keeps it.
        ix.clear_namespace().unwrap();
        assert_eq!(ix.meta("format").unwrap(), Some(vec![0, 0, 0, 1]));
        drop(ix);
        // Format 2: refused, naming both.
        {
            let kv = FjallStore::open(&old.path().join("index"), &TABLES).unwrap();
            let mut b = Batch::new();
            nacre_kv::put_format(&mut b, META, INDEX_FORMAT + 1);
            let t = kv.commit(b).unwrap();
            kv.wait_durable(t).unwrap();
        }
        match Index::open(old.path()) {
            Err(PolicyError::Format(nacre_kv::FormatError::TooNew { found, newest, .. })) => {
                assert_eq!((found, newest), (2, 1));
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("an index of format 2 opened"),
        }
        let e = Index::open(old.path()).err().unwrap().to_string();
        assert!(e.contains("policy index"), "{e}");
        assert!(e.contains("has format 2; this nacre reads up to 1"), "{e}");
    }

    #[test]
    fn rows_names_paths_and_lru_order() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Index::open(dir.path()).unwrap();
        let (d1, d2, shard) = (
            Fid::new(0x200000400, 1),
            Fid::new(0x200000400, 2),
            Fid::new(0x240000400, 1),
        );
        let f = |n: u32| Fid::new(0x200000400, 100 + n);
        ix.apply(vec![
            Change::Dir(d1, Some((Fid::ROOT, b"a".to_vec()))),
            Change::Dir(d2, Some((d1, b"b".to_vec()))),
            Change::Dir(shard, Some((d2, Vec::new()))),
            Change::AddName(f(1), shard, b"x".to_vec()),
            Change::Row(f(1), Some(row("flash", 50, 10))),
            Change::AddName(f(2), d1, b"y".to_vec()),
            Change::Row(f(2), Some(row("flash", -5, 20))),
            Change::Row(f(3), Some(row("cap", 1, 30))),
        ])
        .unwrap();
        assert_eq!(ix.path(f(1)).unwrap().as_deref(), Some("/a/b/x"));
        assert_eq!(ix.path(f(2)).unwrap().as_deref(), Some("/a/y"));
        assert_eq!(ix.path(f(3)).unwrap(), None);
        let flash = PoolName::new("flash").unwrap();
        let order: Vec<Fid> = ix
            .lru(Some(flash), None, 10)
            .unwrap()
            .into_iter()
            .map(|x| x.1)
            .collect();
        assert_eq!(order, vec![f(2), f(1)]);
        // A new access time moves the file in the order; totals follow.
        ix.apply(vec![Change::Row(f(2), Some(row("flash", 90, 20)))])
            .unwrap();
        let order: Vec<Fid> = ix
            .lru(Some(flash), None, 10)
            .unwrap()
            .into_iter()
            .map(|x| x.1)
            .collect();
        assert_eq!(order, vec![f(1), f(2)]);
        assert_eq!(ix.files(), 3);
        // Gone: row, names and order entry.
        ix.apply(vec![Change::Row(f(1), None)]).unwrap();
        assert_eq!(ix.names(f(1)).unwrap(), vec![]);
        assert_eq!(ix.lru(Some(flash), None, 10).unwrap().len(), 1);
        drop(ix);
        // Reopened: directories and totals are back.
        let ix = Index::open(dir.path()).unwrap();
        assert_eq!(ix.path(f(2)).unwrap().as_deref(), Some("/a/y"));
        assert_eq!(ix.files(), 2);
        assert_eq!(ix.totals().iter().map(|(_, t)| t.bytes).sum::<u64>(), 50);
    }

    /// The engine's rules refresh rows while the changelogs are followed: changes applied
    /// from two threads at once keep the totals exact (they lost files before changes were
    /// serialized: each read the totals, committed, then wrote them back).
    #[test]
    fn changes_from_two_threads_at_once_keep_the_totals_exact() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Index::open(dir.path()).unwrap();
        let per_thread = 200u32;
        std::thread::scope(|s| {
            for t in 0..2u32 {
                let ix = &ix;
                s.spawn(move || {
                    for n in 0..per_thread {
                        let fid = Fid::new(0x200000400, t * 10_000 + n);
                        ix.apply(vec![Change::Row(fid, Some(row("flash", 1, 10)))])
                            .unwrap();
                        // And a refresh of one already there, as a rule's pass makes.
                        let again = Fid::new(0x200000400, t * 10_000 + n / 2);
                        ix.apply(vec![Change::Row(again, Some(row("flash", 2, 10)))])
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(ix.files(), u64::from(2 * per_thread));
        drop(ix);
        // And as kept on disk.
        assert_eq!(
            Index::open(dir.path()).unwrap().files(),
            u64::from(2 * per_thread)
        );
    }
}
