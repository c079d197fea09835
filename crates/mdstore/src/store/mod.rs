//! The MDT's store (docs/plans/mds-layers.md §3): the only handle on its KV store, the
//! allocation state its transactions take under the write lock, the marks a restart checks
//! replays against, and durability. It knows no operation.

mod dom_quota;
pub mod fid_grants;
pub mod open;
pub mod tx;

pub use open::Loaded;
pub use tx::Tx;

use crate::records::{
    decode_dom, decode_record, destroy_key, dirent_key, inode_version, remote_link_key, reply_key,
    xattr_key, DirentRecord, InodeRecord, Record, RelayoutRecord, SavedReply, CHANGELOG,
    CHANGELOG_USERS, DESTROY, DIRDEFAULTS, DIRENTS, DIRSTRIPES, DOM, INODES, LINKS, META, MOVED,
    OWNERS, QUOTA_USAGE, RELAYOUTS, REMOTE_LINKS, REPLIES, XATTRS,
};
use nacre_kv::{Batch, KvStore, Ticket};
use nacre_types::dirstripe::{DirDefault, DirStripe};
use nacre_types::{Fid, ObjectId, QuotaId, Status};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// FIDs and object ids are reserved on disk this many at a time, so a create does not have to
/// persist an allocator update.
pub const ALLOC_RESERVE: u64 = 10_000;

/// Entries read per page while listing a whole directory ([`Store::dir_entries`]).
const DIR_SCAN_PAGE_ENTRIES: usize = 1024;

/// Saved replies kept per client at most (a well-behaved client keeps `max_rpcs_in_flight`).
pub const SAVED_REPLIES_PER_CLIENT_MAX: usize = 1024;

/// (key or name, value) pairs, in key order, as a scan reads them.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// A directory's entries as (name, entry) pairs, in name order.
pub type Dirents = Vec<(Vec<u8>, DirentRecord)>;

/// Allocation state, guarded by the MDT's write lock.
pub struct AllocState {
    next_fid: u64,
    fid_limit: u64,
    next_object: HashMap<u32, (u64, u64)>,
    inodes_used: u64,
    /// Inodes per user, group and project (quotas; counted in tx.rs).
    quota: tx::Counts,
    /// Bytes of data on the MDT per user, group and project (quotas; dom_quota.rs).
    dom_bytes: tx::Counts,
    /// Xids with a saved reply, per client: lets a request skip the store lookup and lets
    /// pruning delete exact keys instead of scanning over deleted ones.
    saved_replies: HashMap<[u8; 16], BTreeSet<u64>>,
    /// Last transaction number given.
    last_transno: u64,
    /// Clients in the `clients` table.
    clients: HashSet<[u8; 16]>,
    /// FID ranges granted to clients (fid_grants.rs).
    grants: fid_grants::Grants,
}

/// One MDT's store: its KV store and allocation state (opened by [`Store::open`]).
pub struct Store {
    /// The only handle on the MDT's KV store.
    kv: Arc<dyn KvStore>,
    /// The MDT's index (its FID sequences and object sequence).
    index: u32,
    /// The MDT's name (log lines).
    name: String,
    /// The allocation state; its lock is the MDT's write lock (commit order = lock order).
    alloc: Mutex<AllocState>,
    /// The FID allocation reserved durably when this MDT started: a replayed create's FID
    /// lies below it, or at most `nacre_mds::replay::REPLAY_AHEAD_MAX` past it.
    fid_limit_at_start: u64,
    /// Each OST's object allocation reserved durably when this MDT started (`ost_next/N`):
    /// a replayed layout's objects lie within [`ALLOC_RESERVE`] below it or at most
    /// `nacre_mds::replay::REPLAY_AHEAD_MAX` past it (objects below were given to creates
    /// that are durable).
    ost_next_at_start: HashMap<u32, u64>,
    /// Ownership changes possibly pending in the `owners` table (owners.rs): 0 means none,
    /// so unlinks and the background thread leave that table alone.
    owners_pending: AtomicU64,
    /// Highest transaction number whose change is in the journal.
    written_transno: AtomicU64,
    /// Highest transaction number made durable (`last_committed` in replies).
    last_committed_transno: AtomicU64,
}

impl Store {
    /// The MDT's index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Decodes a record read from this store (of any version its type reads). A damaged
    /// record, or one of a newer version than this nacre reads, is logged once with the
    /// MDT's name and is `EIO`.
    pub fn decode<T: Record>(&self, bytes: &[u8]) -> Result<T, Status> {
        decode_record(bytes).map_err(|e| e.logged(&self.name))
    }

    /// Reads an inode (`ESTALE` for one a migration moved to another MDT).
    pub fn inode(&self, fid: Fid) -> Result<InodeRecord, Status> {
        match self.kv.get(INODES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => self.decode(&v),
            None if self.moved_to(fid)?.is_some() => Err(Status::Stale),
            None => Err(Status::NoEnt),
        }
    }

    /// The version of `fid`: the transno of its last change (0: none recorded, or no such
    /// inode).
    pub fn version_of(&self, fid: Fid) -> Result<u64, Status> {
        Ok(self
            .kv
            .get(INODES, &fid.to_key())
            .map_err(kv_err)?
            .map_or(0, |v| inode_version(&v)))
    }

    /// Where a migration moved the inode `fid`, if it did.
    pub fn moved_to(&self, fid: Fid) -> Result<Option<Fid>, Status> {
        Ok(self
            .kv
            .get(MOVED, &fid.to_key())
            .map_err(kv_err)?
            .and_then(|v| Fid::from_key(&v)))
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: Fid, name: &[u8]) -> Result<Option<DirentRecord>, Status> {
        match self
            .kv
            .get(DIRENTS, &dirent_key(parent, name))
            .map_err(kv_err)?
        {
            Some(v) => Ok(Some(self.decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Up to `count` entries of directory `dir` after the name `after`, in name order, as
    /// (name, entry), and whether they are its last (one more is read to know: it is not
    /// decoded).
    pub fn dir_page(
        &self,
        dir: Fid,
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<(Dirents, bool), Status> {
        let prefix = dir.to_key();
        let after_key = after.map(|name| dirent_key(dir, name));
        let page = self
            .kv
            .scan(DIRENTS, &prefix, after_key.as_deref(), count + 1)
            .map_err(kv_err)?;
        let eof = page.len() <= count;
        let mut entries = Vec::with_capacity(page.len().min(count));
        for (k, v) in page.into_iter().take(count) {
            let rec: DirentRecord = self.decode(&v)?;
            entries.push((k[prefix.len()..].to_vec(), rec));
        }
        Ok((entries, eof))
    }

    /// Every entry of directory `dir`, in name order, as (name, entry).
    pub fn dir_entries(&self, dir: Fid) -> Result<Dirents, Status> {
        let prefix = dir.to_key();
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .kv
                .scan(DIRENTS, &prefix, after.as_deref(), DIR_SCAN_PAGE_ENTRIES)
                .map_err(kv_err)?;
            let Some(last) = page.last() else {
                return Ok(out);
            };
            after = Some(last.0.clone());
            for (k, v) in &page {
                out.push((k[prefix.len()..].to_vec(), self.decode(v)?));
            }
        }
    }

    /// True if directory `dir` has no entries.
    pub fn dir_is_empty(&self, dir: Fid) -> Result<bool, Status> {
        Ok(self
            .kv
            .scan(DIRENTS, &dir.to_key(), None, 1)
            .map_err(kv_err)?
            .is_empty())
    }

    /// The extended attribute `name` of inode `fid`, if it has it.
    pub fn xattr(&self, fid: Fid, name: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.kv.get(XATTRS, &xattr_key(fid, name)).map_err(kv_err)
    }

    /// The extended attributes of inode `fid`, as (name, value) pairs in name order, `max`
    /// at most.
    pub fn xattrs(&self, fid: Fid, max: usize) -> Result<Entries, Status> {
        let prefix = fid.to_key();
        Ok(self
            .kv
            .scan(XATTRS, &prefix, None, max)
            .map_err(kv_err)?
            .into_iter()
            .map(|(k, v)| (k[prefix.len()..].to_vec(), v))
            .collect())
    }

    /// The default for new subdirectories of directory `fid`, if it has one here.
    pub fn dir_default(&self, fid: Fid) -> Result<Option<DirDefault>, Status> {
        match self.kv.get(DIRDEFAULTS, &fid.to_key()).map_err(kv_err)? {
            Some(v) => Ok(Some(self.decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The stripe layout of directory `fid`, if it is here and striped.
    pub fn dir_stripe(&self, fid: Fid) -> Result<Option<DirStripe>, Status> {
        match self.kv.get(DIRSTRIPES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => Ok(Some(self.decode(&v)?)),
            None => Ok(None),
        }
    }

    /// True if the link of inode `fid` from entry `name` of `parent` (on another MDT) is
    /// recorded here.
    pub fn has_remote_link(&self, fid: Fid, parent: Fid, name: &[u8]) -> Result<bool, Status> {
        Ok(self
            .kv
            .get(REMOTE_LINKS, &remote_link_key(fid, parent, name))
            .map_err(kv_err)?
            .is_some())
    }

    /// The bytes of file `fid`'s component on the MDT (empty: none stored).
    pub fn dom(&self, fid: Fid) -> Result<Vec<u8>, Status> {
        match self.kv.get(DOM, &fid.to_key()).map_err(kv_err)? {
            Some(v) => decode_dom(&v)
                .map(<[u8]>::to_vec)
                .map_err(|e| e.logged(&self.name)),
            None => Ok(Vec::new()),
        }
    }

    /// The migration of file `fid` in progress, if any.
    pub fn relayout(&self, fid: Fid) -> Result<Option<RelayoutRecord>, Status> {
        match self.kv.get(RELAYOUTS, &fid.to_key()).map_err(kv_err)? {
            Some(v) => self.decode(&v).map(Some),
            None => Ok(None),
        }
    }

    /// Calls `f` with the file of every migration in progress, in FID order (reading a page
    /// of 1 024 records at a time; a record with a bad key is skipped).
    pub fn each_relayout(&self, mut f: impl FnMut(Fid)) -> Result<(), Status> {
        let mut page_after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .kv
                .scan(RELAYOUTS, &[], page_after.as_deref(), 1024)
                .map_err(kv_err)?;
            let Some(last) = page.last() else {
                return Ok(());
            };
            page_after = Some(last.0.clone());
            for (k, _) in &page {
                let Some(fid) = Fid::from_key(k) else {
                    continue;
                };
                f(fid);
            }
        }
    }

    /// Up to `max` pending ownership changes, as (object key, owner), in key order.
    pub fn owner_changes(&self, max: usize) -> Result<Entries, Status> {
        self.kv.scan(OWNERS, &[], None, max).map_err(kv_err)
    }

    /// The owner `object` of OST `ost` is still to take, if any.
    pub fn owner_change(&self, ost: u32, object: ObjectId) -> Result<Option<Vec<u8>>, Status> {
        self.kv
            .get(OWNERS, &destroy_key(ost, object))
            .map_err(kv_err)
    }

    /// The saved reply of (client, xid), if there is one.
    pub fn saved_reply(&self, client: &[u8; 16], xid: u64) -> Result<Option<SavedReply>, Status> {
        match self
            .kv
            .get(REPLIES, &reply_key(client, xid))
            .map_err(kv_err)?
        {
            Some(v) => self.decode(&v).map(Some),
            None => Ok(None),
        }
    }

    /// Up to `count` changelog records from number `from` on, as (number key, encoded
    /// record), in number order.
    pub fn changelog_page(&self, from: u64, count: usize) -> Result<Entries, Status> {
        let after = from.checked_sub(1).map(|a| a.to_be_bytes());
        self.kv
            .scan(CHANGELOG, &[], after.as_ref().map(|a| &a[..]), count)
            .map_err(kv_err)
    }

    /// The changelog consumers, as (id key, encoded record), `max` at most.
    pub fn changelog_users(&self, max: usize) -> Result<Entries, Status> {
        self.kv
            .scan(CHANGELOG_USERS, &[], None, max)
            .map_err(kv_err)
    }

    /// A `META` value.
    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Status> {
        self.kv.get(META, key).map_err(kv_err)
    }

    /// A `META` value, none if it cannot be read (not logged: for a caller that falls back
    /// to a default).
    pub fn meta_or_none(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.kv.get(META, key).ok().flatten()
    }

    /// A `META` value that is a big-endian `u64`.
    pub fn meta_u64(&self, key: &[u8]) -> Result<Option<u64>, Status> {
        read_u64(&*self.kv, key)
    }

    /// The saved reply of (client, xid), none if there is none or it cannot be read (not
    /// logged: for a caller that does without; one that needs it reads it with
    /// [`Store::saved_reply`], which reports a damaged or newer record).
    pub fn saved_reply_or_none(&self, client: &[u8; 16], xid: u64) -> Option<SavedReply> {
        self.kv
            .get(REPLIES, &reply_key(client, xid))
            .ok()
            .flatten()
            .and_then(|v| decode_record(&v).ok())
    }

    /// Up to `count` stored inodes after `after`, in FID order.
    pub fn inode_page(
        &self,
        after: Option<Fid>,
        count: usize,
    ) -> Result<Vec<(Fid, InodeRecord)>, Status> {
        let after = after.map(Fid::to_key);
        let page = self
            .kv
            .scan(INODES, &[], after.as_ref().map(|k| &k[..]), count)
            .map_err(kv_err)?;
        page.into_iter()
            .map(|(k, v)| Ok((Fid::from_key(&k).ok_or(Status::Io)?, self.decode(&v)?)))
            .collect::<Result<Vec<_>, Status>>()
    }

    /// Up to `count` directory entries after (parent, name) `after`, in (parent, name)
    /// order, as (parent, name, entry).
    pub fn dirent_page(
        &self,
        after: Option<(Fid, &[u8])>,
        count: usize,
    ) -> Result<Vec<(Fid, Vec<u8>, DirentRecord)>, Status> {
        let after = after.map(|(p, n)| dirent_key(p, n));
        let page = self
            .kv
            .scan(DIRENTS, &[], after.as_deref(), count)
            .map_err(kv_err)?;
        let mut out = Vec::with_capacity(page.len());
        for (k, v) in page {
            let parent = Fid::from_key(&k).ok_or(Status::Io)?;
            let rec: DirentRecord = self.decode(&v)?;
            out.push((parent, k[16..].to_vec(), rec));
        }
        Ok(out)
    }

    /// The (directory, name) pairs the link index has for inode `fid`, `max` records read
    /// at most (records with no directory FID skipped; the entries are not checked).
    pub fn links_of(&self, fid: Fid, max: usize) -> Result<Vec<(Fid, Vec<u8>)>, Status> {
        let prefix = fid.to_key();
        let page = self.kv.scan(LINKS, &prefix, None, max).map_err(kv_err)?;
        Ok(page
            .into_iter()
            .filter_map(|(k, _)| {
                let parent = k.get(16..32).and_then(Fid::from_key)?;
                Some((parent, k[32..].to_vec()))
            })
            .collect())
    }

    /// Inodes in use (`df -i`).
    pub fn inodes_used(&self) -> u64 {
        self.alloc.lock().expect("write lock").inodes_used
    }

    /// Every id with inodes here and their count, in order (quotas).
    pub fn inode_counts(&self) -> Vec<(QuotaId, u64)> {
        let alloc = self.alloc.lock().expect("write lock");
        let mut v: Vec<(QuotaId, u64)> = alloc.quota.iter().map(|(q, n)| (*q, *n)).collect();
        drop(alloc);
        v.sort_unstable();
        v
    }

    /// The inodes each of `ids` has here (quotas).
    pub fn inodes_of(&self, ids: &[QuotaId]) -> Vec<u64> {
        let alloc = self.alloc.lock().expect("write lock");
        ids.iter()
            .map(|q| alloc.quota.get(q).copied().unwrap_or(0))
            .collect()
    }

    /// The bytes of data on the MDT each of `ids` has here (quotas).
    pub fn dom_bytes_of(&self, ids: &[QuotaId]) -> Vec<u64> {
        let alloc = self.alloc.lock().expect("write lock");
        ids.iter()
            .map(|q| alloc.dom_bytes.get(q).copied().unwrap_or(0))
            .collect()
    }

    /// Every id with bytes of data on the MDT here and their count, in order (quotas).
    pub fn dom_byte_counts(&self) -> Vec<(QuotaId, u64)> {
        let alloc = self.alloc.lock().expect("write lock");
        let mut v: Vec<(QuotaId, u64)> = alloc.dom_bytes.iter().map(|(q, n)| (*q, *n)).collect();
        drop(alloc);
        v.sort_unstable();
        v
    }

    /// Counts every inode again and compares with the table (and the counts in memory);
    /// with `repair`, the count replaces both, durably. Holds the write lock while it counts
    /// (changes wait: the count and the table are of the same moment).
    pub fn quota_check(&self, repair: bool) -> Result<nacre_types::QuotaCheck, Status> {
        let mut alloc = self.alloc.lock().expect("write lock");
        let counted = tx::count(&*self.kv, &self.name)?;
        self.check_usage(QUOTA_USAGE, counted, &mut alloc.quota, repair)
    }

    /// Compares `counted` with usage table `table` (and `memory`, its counts in memory);
    /// with `repair`, the count replaces both, durably. The caller holds the write lock.
    pub(crate) fn check_usage(
        &self,
        table: &'static str,
        counted: tx::Counts,
        memory: &mut tx::Counts,
        repair: bool,
    ) -> Result<nacre_types::QuotaCheck, Status> {
        let recorded = tx::read_counts(&*self.kv, table)?;
        let mut check = nacre_types::QuotaCheck::compare(&counted, &recorded);
        if check.diffs_total == 0 && *memory != recorded {
            // The table is right but memory is not: reported as the table's.
            check = nacre_types::QuotaCheck::compare(&counted, memory);
        }
        if repair && check.diffs_total > 0 {
            let mut b = Batch::new();
            for q in recorded.keys().filter(|q| !counted.contains_key(q)) {
                b.delete(table, q.to_key().to_vec());
            }
            for (q, n) in &counted {
                b.put(table, q.to_key().to_vec(), n.to_be_bytes().to_vec());
            }
            let t = self.kv.commit(b).map_err(kv_err)?;
            self.kv.wait_durable(t).map_err(kv_err)?;
            *memory = counted;
            check.repaired = true;
            tracing::warn!(
                "{}: {table} of {} ids repaired",
                self.name,
                check.diffs_total
            );
        }
        Ok(check)
    }

    /// The FID allocation reserved durably when this MDT started.
    pub fn fid_limit_at_start(&self) -> u64 {
        self.fid_limit_at_start
    }

    /// OST `ost`'s object allocation reserved durably when this MDT started, if it had one.
    pub fn ost_next_at_start(&self, ost: u32) -> Option<u64> {
        self.ost_next_at_start.get(&ost).copied()
    }

    /// Ownership changes possibly pending (0: none; owners.rs).
    pub fn owners_pending(&self) -> u64 {
        self.owners_pending.load(Ordering::Acquire)
    }

    /// A pass that read `seen` found no ownership change left: none is pending, unless a
    /// change was queued meanwhile.
    pub fn owners_settled(&self, seen: u64) {
        let _ = self
            .owners_pending
            .compare_exchange(seen, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Makes every committed change durable if something was committed since `durable`;
    /// returns the new durable ticket.
    pub fn commit_pass(&self, durable: Ticket) -> Result<Ticket, Status> {
        // Read before the sync: every change with a transno up to here is in the batches
        // the sync covers.
        let written = self.written_transno.load(Ordering::Acquire);
        let last = self.kv.last_committed();
        if last > durable {
            self.kv.wait_durable(last).map_err(kv_err)?;
        }
        self.last_committed_transno
            .fetch_max(written, Ordering::AcqRel);
        Ok(last)
    }

    /// Blocks until the commit of `ticket` (and every one before it) is durable.
    pub fn wait_durable(&self, ticket: Ticket) -> Result<(), Status> {
        self.kv.wait_durable(ticket).map_err(kv_err)
    }

    /// Makes every committed change durable now.
    pub fn sync_all(&self) -> Result<(), Status> {
        self.kv
            .wait_durable(self.kv.last_committed())
            .map_err(kv_err)
    }

    /// Writes of a background pass, outside any transaction: no write lock, no transaction
    /// number.
    pub fn writes(&self) -> Writes<'_> {
        Writes {
            store: self,
            batch: Batch::new(),
        }
    }

    /// A change with transaction number `transno` is in the journal.
    pub fn note_written(&self, transno: u64) {
        if transno > 0 {
            self.written_transno.fetch_max(transno, Ordering::AcqRel);
        }
    }

    /// The highest transaction number made durable (`last_committed` in replies).
    pub fn last_committed_transno(&self) -> u64 {
        self.last_committed_transno.load(Ordering::Acquire)
    }
}

/// Writes without the write lock and without a transaction number ([`Store::writes`]; or
/// a transaction's changes once its lock is released, `Tx::detach`).
pub struct Writes<'a> {
    store: &'a Store,
    batch: Batch,
}

impl Writes<'_> {
    /// Forgets the destroys of `objects` of OST `ost` (done).
    pub fn forget_destroys(&mut self, ost: u32, objects: &[ObjectId]) {
        for o in objects {
            self.batch.delete(DESTROY, destroy_key(ost, *o));
        }
    }

    /// Forgets the ownership change of `object` of OST `ost` (sent).
    pub fn forget_owner_change(&mut self, ost: u32, object: ObjectId) {
        self.batch.delete(OWNERS, destroy_key(ost, object));
    }

    /// Forgets the ownership change record of key `key` (a damaged record).
    pub fn forget_owner_key(&mut self, key: Vec<u8>) {
        self.batch.delete(OWNERS, key);
    }

    /// Frees changelog records `first..end` and records `end` as the first kept.
    pub fn purge_changelog(&mut self, first: u64, end: u64) {
        for index in first..end {
            self.batch.delete(CHANGELOG, index.to_be_bytes().to_vec());
        }
        self.batch.put(
            META,
            b"changelog_first".to_vec(),
            end.to_be_bytes().to_vec(),
        );
    }

    /// Sets a `META` value.
    pub fn put_meta(&mut self, key: &[u8], value: Vec<u8>) {
        self.batch.put(META, key.to_vec(), value);
    }

    /// True if nothing is to be written.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Commits the writes (visible at once, durable after [`Store::wait_durable`]).
    pub fn commit(self) -> Result<Ticket, Status> {
        self.store.kv.commit(self.batch).map_err(kv_err)
    }
}

/// Converts a store error to a status (logged: it means the MDT's disk is failing).
pub fn kv_err(e: nacre_kv::KvError) -> Status {
    tracing::error!("MDT store: {e}");
    Status::Io
}

/// Reads a `META` value that is a big-endian `u64`.
pub(crate) fn read_u64(kv: &dyn KvStore, key: &[u8]) -> Result<Option<u64>, Status> {
    match kv.get(META, key).map_err(kv_err)? {
        Some(v) if v.len() == 8 => Ok(Some(u64::from_be_bytes(v.try_into().expect("8 bytes")))),
        Some(_) => Err(Status::Io),
        None => Ok(None),
    }
}

/// Calls `f` with every entry of `table` whose key starts with `prefix`, in key order,
/// reading `page` entries at a time.
pub(crate) fn scan_each(
    kv: &dyn KvStore,
    table: &'static str,
    prefix: &[u8],
    page: usize,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), Status>,
) -> Result<(), Status> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let entries = kv
            .scan(table, prefix, after.as_deref(), page)
            .map_err(kv_err)?;
        let Some(last) = entries.last() else {
            return Ok(());
        };
        after = Some(last.0.clone());
        for (k, v) in &entries {
            f(k, v)?;
        }
    }
}

/// The `META` key of OST `ost`'s object allocation reserved.
pub(crate) fn ost_next_key(ost: u32) -> Vec<u8> {
    format!("ost_next/{ost}").into_bytes()
}
