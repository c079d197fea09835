//! The metadata key-value store.
//!
//! `KvStore` is what the MDTs see (and the policy engine's index and the data mover's
//! queue): named tables, point reads, ordered scans, and atomic batches. A committed batch
//! is visible at once; `commit` returns once the batch is in the journal, which the kernel
//! holds even if the process dies (a kill -9 loses nothing). It is durable on stable storage
//! after `KvStore::wait_durable`, which implements group commit: concurrent waiters share
//! one journal sync, so N creates in flight cost one fdatasync, not N.
//!
//! The engine is `FjallStore`, over `fjall` (an LSM tree with a write-ahead journal).
//! Invariant: commit order is ticket order, so "ticket t durable" implies every batch before
//! t is durable.
//!
//! A store whose rows carry no version keeps its format in its `meta` table ([`open_format`]).

mod format;

pub use format::{open_format, put_format, FormatError, FORMAT_KEY};

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The engine failed (I/O error, corruption).
    #[error("metadata store error: {0}")]
    Engine(String),
    /// A table name not opened with the store.
    #[error("unknown table '{0}'")]
    UnknownTable(String),
    /// The store's engine format is not one this nacre's engine reads (docs/formats.md,
    /// gap 19: a major upgrade of fjall is an on-disk format change).
    #[error(
        "metadata store format: the engine's format {found} is not one this nacre reads \
         (fjall 3): a store of another nacre release"
    )]
    Format {
        /// What the store's marker says (or that it is unreadable).
        found: String,
    },
}

impl From<fjall::Error> for KvError {
    fn from(e: fjall::Error) -> KvError {
        match e {
            fjall::Error::InvalidVersion(v) => KvError::Format {
                found: v.map_or("unreadable".to_string(), |v| format!("{v:?}")),
            },
            e => KvError::Engine(e.to_string()),
        }
    }
}

/// One change of a batch: table, key, and the new value (`None` deletes).
type Change = (&'static str, Vec<u8>, Option<Vec<u8>>);

/// A key and its value, as scans return them.
pub type Entry = (Vec<u8>, Vec<u8>);

/// An atomic set of changes.
#[derive(Default, Debug)]
pub struct Batch {
    ops: Vec<Change>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Sets `key` to `value` in `table`.
    pub fn put(&mut self, table: &'static str, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        self.ops.push((table, key.into(), Some(value.into())));
    }

    /// Removes `key` from `table`.
    pub fn delete(&mut self, table: &'static str, key: impl Into<Vec<u8>>) {
        self.ops.push((table, key.into(), None));
    }

    /// Number of changes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True if the batch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Position of a committed batch in commit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(pub u64);

/// A transactional, ordered key-value store with group commit.
pub trait KvStore: Send + Sync {
    /// Reads one key.
    fn get(&self, table: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, KvError>;
    /// Up to `limit` entries of `table` whose keys start with `prefix` and are strictly
    /// greater than `after` (when given), in key order.
    fn scan(
        &self,
        table: &'static str,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, KvError>;
    /// Applies a batch atomically; visible to readers at once, durable after `wait_durable`.
    fn commit(&self, batch: Batch) -> Result<Ticket, KvError>;
    /// Blocks until the batch of `ticket` (and all before it) is on stable storage.
    fn wait_durable(&self, ticket: Ticket) -> Result<(), KvError>;
    /// The ticket of the last committed batch.
    fn last_committed(&self) -> Ticket;
    /// Approximate bytes on disk.
    fn disk_bytes(&self) -> u64;
}

struct SyncState {
    durable: u64,
    syncing: bool,
}

/// The fjall-backed store.
pub struct FjallStore {
    db: fjall::Database,
    tables: HashMap<&'static str, fjall::Keyspace>,
    commit_lock: Mutex<()>,
    committed: AtomicU64,
    sync: Mutex<SyncState>,
    synced: Condvar,
    /// Journal syncs performed (each may cover many commits).
    pub syncs: AtomicU64,
    /// Test mode (`NACRE_KV_UNFLUSHED_JOURNAL=1`): commits stay in the process's journal
    /// buffer until a sync, so a kill -9 loses what a power loss would (everything not
    /// synced) — how recovery tests crash a node on one machine.
    unflushed: bool,
}

/// Environment variable that turns on [`FjallStore`]'s unflushed-journal test mode.
pub const UNFLUSHED_JOURNAL_ENV: &str = "NACRE_KV_UNFLUSHED_JOURNAL";

impl FjallStore {
    /// Opens (creating if needed) a store at `path` with the given tables.
    pub fn open(path: &Path, tables: &[&'static str]) -> Result<FjallStore, KvError> {
        let db = fjall::Database::builder(path).open()?;
        let mut map = HashMap::new();
        for &t in tables {
            let ks = db.keyspace(t, fjall::KeyspaceCreateOptions::default)?;
            map.insert(t, ks);
        }
        Ok(FjallStore {
            db,
            tables: map,
            commit_lock: Mutex::new(()),
            committed: AtomicU64::new(0),
            sync: Mutex::new(SyncState {
                durable: 0,
                syncing: false,
            }),
            synced: Condvar::new(),
            syncs: AtomicU64::new(0),
            unflushed: std::env::var_os(UNFLUSHED_JOURNAL_ENV).is_some_and(|v| v == "1"),
        })
    }

    fn table(&self, name: &'static str) -> Result<&fjall::Keyspace, KvError> {
        self.tables
            .get(name)
            .ok_or_else(|| KvError::UnknownTable(name.into()))
    }
}

impl KvStore for FjallStore {
    fn get(&self, table: &'static str, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        Ok(self.table(table)?.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        table: &'static str,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, KvError> {
        let ks = self.table(table)?;
        let mut out = Vec::new();
        let iter = match after {
            Some(after) => {
                let lower = std::ops::Bound::Excluded(after.to_vec());
                ks.range::<Vec<u8>, _>((lower, std::ops::Bound::Unbounded))
            }
            None => ks.prefix(prefix),
        };
        for guard in iter {
            let (k, v) = guard.into_inner()?;
            if !k.starts_with(prefix) {
                break;
            }
            out.push((k.to_vec(), v.to_vec()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn commit(&self, batch: Batch) -> Result<Ticket, KvError> {
        let mut fb = self.db.batch();
        if self.unflushed {
            fb = fb.durability(None);
        }
        for (table, key, value) in batch.ops {
            let ks = self.table(table)?;
            match value {
                Some(v) => fb.insert(ks, key, v),
                None => fb.remove(ks, key),
            }
        }
        let _order = self.commit_lock.lock().expect("commit lock");
        fb.commit()?;
        let ticket = self.committed.fetch_add(1, Ordering::AcqRel) + 1;
        Ok(Ticket(ticket))
    }

    fn wait_durable(&self, ticket: Ticket) -> Result<(), KvError> {
        let mut state = self.sync.lock().expect("sync state");
        loop {
            if state.durable >= ticket.0 {
                return Ok(());
            }
            if !state.syncing {
                state.syncing = true;
                let target = self.committed.load(Ordering::Acquire);
                drop(state);
                let result = self.db.persist(fjall::PersistMode::SyncData);
                self.syncs.fetch_add(1, Ordering::Relaxed);
                state = self.sync.lock().expect("sync state");
                state.syncing = false;
                if result.is_ok() {
                    state.durable = state.durable.max(target);
                }
                self.synced.notify_all();
                result?;
            } else {
                state = self.synced.wait(state).expect("sync state");
            }
        }
    }

    fn last_committed(&self) -> Ticket {
        Ticket(self.committed.load(Ordering::Acquire))
    }

    fn disk_bytes(&self) -> u64 {
        self.db.disk_space().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn batch_scan_and_durability() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = FjallStore::open(dir.path(), &["t"]).unwrap();
            let mut b = Batch::new();
            for i in 0..10u8 {
                b.put("t", vec![1, i], vec![i]);
            }
            b.put("t", vec![2, 0], vec![0]);
            let t = kv.commit(b).unwrap();
            kv.wait_durable(t).unwrap();
            let all = kv.scan("t", &[1], None, 100).unwrap();
            assert_eq!(all.len(), 10);
            let after = kv.scan("t", &[1], Some(&[1, 4]), 3).unwrap();
            assert_eq!(
                after.iter().map(|(k, _)| k[1]).collect::<Vec<_>>(),
                vec![5, 6, 7]
            );
        }
        let kv = FjallStore::open(dir.path(), &["t"]).unwrap();
        assert_eq!(kv.get("t", &[1, 9]).unwrap(), Some(vec![9]));
    }

    /// A store of another engine format (fjall's own marker, `version`: `FJL` and the
    /// format byte) is refused naming the metadata store's format, not as damage.
    #[test]
    fn a_store_of_another_engine_format_is_named_as_such() {
        for (byte, found) in [(2u8, "V2"), (9u8, "unreadable")] {
            let dir = tempfile::tempdir().unwrap();
            drop(FjallStore::open(dir.path(), &["t"]).unwrap());
            let marker = dir.path().join("version");
            let bytes = std::fs::read(&marker).unwrap();
            assert_eq!(&bytes[..4], b"FJL\x03", "fjall 3's marker");
            std::fs::write(&marker, [b'F', b'J', b'L', byte]).unwrap();
            let e = FjallStore::open(dir.path(), &["t"]).err().unwrap();
            assert!(
                matches!(&e, KvError::Format { found: f } if f == found),
                "{e:?}"
            );
            assert!(e.to_string().starts_with("metadata store format"), "{e}");
        }
    }

    #[test]
    fn concurrent_commits_share_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let kv = Arc::new(FjallStore::open(dir.path(), &["t"]).unwrap());
        let threads: Vec<_> = (0..8u8)
            .map(|n| {
                let kv = kv.clone();
                std::thread::spawn(move || {
                    for i in 0..50u8 {
                        let mut b = Batch::new();
                        b.put("t", vec![n, i], vec![1]);
                        let t = kv.commit(b).unwrap();
                        kv.wait_durable(t).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            kv.syncs.load(Ordering::Relaxed) < 400,
            "group commit must share syncs"
        );
        assert_eq!(kv.scan("t", &[], None, 1000).unwrap().len(), 400);
    }
}
