//! Keeping the index current: one changelog consumer per MDT, registered at the first
//! start; one full scan of every MDT's inodes and entries then; after that, the changelogs
//! alone (no scan in steady state).
//!
//! Records are applied in order, a batch (up to 4,096 records of one MDT) at a time: names
//! added and removed from the records themselves, and each inode a batch touched asked
//! of its MDT once, for the whole batch together (`StatMany`), so a file created and
//! written costs one entry of one batched request, not one call per record. The batch's
//! changes and the MDT's position commit together; the changelog is cleared after that.
//! Records from before the first scan are applied over it again: names added and removed
//! in order, attributes asked anew, so the index converges on the namespace.

use crate::index::{Change, FileRow, Index};
use crate::PolicyError;
use nacre_client::Client;
use nacre_types::{Fid, FileKind};
use nacre_wire::mds::changelog::{
    ChangelogRecord, InodeStat, RecordKind, FLAG_LAST_LINK, STATS_MAX,
};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// Records read per request.
pub const READ_RECORDS: u32 = 4096;
/// Threads glimpsing the OSTs for sizes the MDT does not know exactly.
pub const GLIMPSE_THREADS: usize = 8;
/// The name the engine's consumers are registered under.
pub const CONSUMER_NAME: &str = "nacre-policy";

/// What following did, for counters.
#[derive(Default)]
pub struct FollowStats {
    /// Records applied.
    pub records: AtomicU64,
    /// Inodes asked for.
    pub stats: AtomicU64,
    /// Inodes found by full scans.
    pub scanned: AtomicU64,
}

/// The MDTs of the client's configuration as it stands, sorted.
pub fn known_mdts(client: &Client) -> Vec<u32> {
    let mut v: Vec<u32> = client.fs_config().mdts.iter().map(|t| t.index).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The zero FID records carry where no inode is concerned.
fn is_zero(fid: Fid) -> bool {
    fid.seq == 0 && fid.oid == 0
}

fn meta_u64(ix: &Index, key: &str) -> Result<Option<u64>, PolicyError> {
    Ok(ix
        .meta(key)?
        .and_then(|v| v.try_into().ok().map(u64::from_be_bytes)))
}

fn put_u64(key: String, v: u64) -> Change {
    Change::Meta(key, v.to_be_bytes().to_vec())
}

/// The consumer id the engine holds on MDT `mdt`, if registered.
pub fn consumer(ix: &Index, mdt: u32) -> Result<Option<u32>, PolicyError> {
    Ok(meta_u64(ix, &format!("mdt/{mdt}/user"))?.map(|v| v as u32))
}

/// The next record the engine reads on MDT `mdt` (0: after what it cleared).
pub fn position(ix: &Index, mdt: u32) -> Result<u64, PolicyError> {
    Ok(meta_u64(ix, &format!("mdt/{mdt}/next"))?.unwrap_or(0))
}

/// A row from what the MDT said of a regular file, keeping what records taught (creation
/// time, job) from the row before.
pub(crate) fn row_of(
    s: &InodeStat,
    old: Option<&FileRow>,
    created: Option<i64>,
    job: Option<&str>,
) -> FileRow {
    let a = &s.attr;
    FileRow {
        size: a.size,
        blocks: a.blocks,
        uid: a.uid,
        gid: a.gid,
        project: a.project,
        atime: a.atime.sec,
        mtime: a.mtime.sec,
        ctime: a.ctime.sec,
        created: created.or(old.map(|o| o.created)).unwrap_or(a.ctime.sec),
        pool: s.pool,
        stripe_count: s.stripe_count,
        jobid: job
            .map(str::to_string)
            .or(old.map(|o| o.jobid.clone()))
            .unwrap_or_default(),
    }
}

/// Keeps an index current from one file system.
pub struct Follower<'a> {
    client: &'a Client,
    ix: &'a Index,
    /// Counters.
    pub stats: &'a FollowStats,
}

impl<'a> Follower<'a> {
    /// A follower of `client`'s file system into `ix`.
    pub fn new(client: &'a Client, ix: &'a Index, stats: &'a FollowStats) -> Follower<'a> {
        Follower { client, ix, stats }
    }

    /// Registers a consumer on every MDT that has none of the engine's yet, then scans
    /// everything if the index was never filled (or asks for it again).
    pub fn start(&self) -> Result<(), PolicyError> {
        let mut fresh = false;
        for mdt in self.client.mdt_indexes() {
            if consumer(self.ix, mdt)?.is_none() {
                let id = self.client.changelog_register(mdt, CONSUMER_NAME)?;
                tracing::info!("policy: changelog consumer cl{id} on MDT{mdt:04x}");
                self.ix
                    .apply(vec![put_u64(format!("mdt/{mdt}/user"), u64::from(id))])?;
                fresh = true;
            }
        }
        let scanned = self.ix.meta("scanned")?.is_some();
        if !scanned || fresh && self.ix.files() == 0 {
            self.scan()?;
        }
        Ok(())
    }

    /// The full scan: every inode and entry of every MDT, in pages.
    pub fn scan(&self) -> Result<(), PolicyError> {
        self.ix.clear_namespace()?;
        let mdts = self.client.mdt_indexes();
        // Directories found without a name (shards of striped directories): their parent.
        let mut nameless: HashMap<Fid, Fid> = HashMap::new();
        let mut named: HashSet<Fid> = HashSet::new();
        for &mdt in &mdts {
            let mut after = None;
            loop {
                let (page, eof) =
                    self.client
                        .scan_stats(mdt, after, STATS_MAX as u32, GLIMPSE_THREADS)?;
                after = page.last().map(|s| s.attr.fid);
                let mut changes = Vec::with_capacity(page.len());
                for s in &page {
                    match s.attr.kind {
                        FileKind::Regular if !s.orphan => {
                            changes.push(Change::Row(s.attr.fid, Some(row_of(s, None, None, None))))
                        }
                        FileKind::Directory if s.attr.fid != Fid::ROOT => {
                            if let Some(p) = s.parent {
                                nameless.insert(s.attr.fid, p);
                            }
                        }
                        _ => {}
                    }
                }
                self.stats
                    .scanned
                    .fetch_add(page.len() as u64, Ordering::Relaxed);
                self.ix.apply(changes)?;
                if eof || after.is_none() {
                    break;
                }
            }
            let mut after: Option<(Fid, Vec<u8>)> = None;
            loop {
                let (page, eof) = self.client.scan_dirents(mdt, after.clone())?;
                after = page.last().map(|d| (d.parent, d.name.clone()));
                let mut changes = Vec::with_capacity(page.len());
                for d in page {
                    match d.kind {
                        FileKind::Directory => {
                            named.insert(d.fid);
                            changes.push(Change::Dir(d.fid, Some((d.parent, d.name))));
                        }
                        FileKind::Regular => changes.push(Change::AddName(d.fid, d.parent, d.name)),
                        _ => {}
                    }
                }
                self.ix.apply(changes)?;
                if eof || after.is_none() {
                    break;
                }
            }
        }
        let shards: Vec<Change> = nameless
            .into_iter()
            .filter(|(f, _)| !named.contains(f))
            .map(|(f, master)| Change::Dir(f, Some((master, Vec::new()))))
            .collect();
        self.ix.apply(shards)?;
        // Files without a name found (created between the inode and entry pages) come
        // back with their records.
        self.ix
            .apply(vec![Change::Meta("scanned".into(), b"1".to_vec())])?;
        Ok(())
    }

    /// Applies every record waiting on every MDT; returns the number applied. The MDTs
    /// are the client's configuration as it stands (kept current by the MGS's events): no
    /// request to the MGS per poll.
    pub fn catch_up(&self) -> Result<u64, PolicyError> {
        let mut total = 0;
        for mdt in known_mdts(self.client) {
            loop {
                let n = self.step(mdt)?;
                total += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Reads and applies one batch of MDT `mdt`'s records; returns how many.
    pub fn step(&self, mdt: u32) -> Result<u64, PolicyError> {
        let Some(user) = consumer(self.ix, mdt)? else {
            return Ok(0);
        };
        let from = position(self.ix, mdt)?;
        let (records, next) = self.client.changelog_read(mdt, user, from, READ_RECORDS)?;
        if records.is_empty() {
            return Ok(0);
        }
        let rescan = self.apply(&records, mdt, next)?;
        let last = records.last().map_or(0, |r| r.index);
        // Durable in the index: the MDT may free them.
        if let Err(e) = self.client.changelog_clear(mdt, user, last) {
            tracing::warn!("policy: changelog clear on MDT{mdt:04x}: {e}");
        }
        self.stats
            .records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        if rescan {
            tracing::info!("policy: a directory moved to another MDT: scanning again");
            self.scan()?;
        }
        Ok(records.len() as u64)
    }

    /// Applies `records` and the position `next` together; true if a full scan is due
    /// (a directory moved between MDTs: its inodes changed FIDs).
    fn apply(&self, records: &[ChangelogRecord], mdt: u32, next: u64) -> Result<bool, PolicyError> {
        let mut changes = Vec::new();
        let mut touched: Vec<Fid> = Vec::new();
        let mut seen: HashSet<Fid> = HashSet::new();
        let mut gone: HashSet<Fid> = HashSet::new();
        let mut created: HashMap<Fid, i64> = HashMap::new();
        let mut jobs: HashMap<Fid, String> = HashMap::new();
        let mut dirs_named: Vec<(Fid, Fid, Vec<u8>)> = Vec::new();
        let mut parents: HashSet<Fid> = HashSet::new();
        let mut rescan = false;
        let mut touch = |fid: Fid, touched: &mut Vec<Fid>| {
            if !is_zero(fid) && seen.insert(fid) {
                touched.push(fid);
            }
        };
        for r in records {
            if !r.jobid.is_empty() && matches!(r.kind, RecordKind::Create | RecordKind::Close) {
                jobs.insert(r.target, r.jobid.clone());
            }
            match r.kind {
                RecordKind::Create | RecordKind::HardLink => {
                    changes.push(Change::AddName(r.target, r.parent, r.name.clone()));
                    if r.kind == RecordKind::Create {
                        created.entry(r.target).or_insert(r.time.sec);
                    }
                    gone.remove(&r.target);
                    parents.insert(r.parent);
                    touch(r.target, &mut touched);
                }
                RecordKind::Mkdir => {
                    dirs_named.push((r.target, r.parent, r.name.clone()));
                    changes.push(Change::Dir(r.target, Some((r.parent, r.name.clone()))));
                    parents.insert(r.parent);
                }
                RecordKind::Unlink => {
                    changes.push(Change::RemoveName(r.target, r.parent, r.name.clone()));
                    if r.flags & FLAG_LAST_LINK != 0 {
                        gone.insert(r.target);
                    }
                    touch(r.target, &mut touched);
                }
                RecordKind::Rmdir => changes.push(Change::Dir(r.target, None)),
                RecordKind::Rename => {
                    if !is_zero(r.target) {
                        if self.ix.has_dir(r.target) {
                            changes.push(Change::Dir(r.target, None));
                        }
                        changes.push(Change::RemoveName(r.target, r.parent, r.name.clone()));
                        if r.flags & FLAG_LAST_LINK != 0 {
                            gone.insert(r.target);
                        }
                        touch(r.target, &mut touched);
                    }
                    if let Some(src) = &r.source {
                        parents.insert(r.parent);
                        if self.ix.has_dir(src.fid) || dirs_named.iter().any(|d| d.0 == src.fid) {
                            changes.push(Change::Dir(src.fid, Some((r.parent, r.name.clone()))));
                        } else {
                            changes.push(Change::RemoveName(src.fid, src.parent, src.name.clone()));
                            changes.push(Change::AddName(src.fid, r.parent, r.name.clone()));
                            touch(src.fid, &mut touched);
                        }
                    }
                }
                RecordKind::Close
                | RecordKind::Layout
                | RecordKind::Trunc
                | RecordKind::SetAttr => touch(r.target, &mut touched),
                RecordKind::Migrate => rescan = true,
                // Symlinks, device nodes, extended attributes and administration are
                // nothing rules look at.
                RecordKind::SoftLink
                | RecordKind::Mknod
                | RecordKind::Xattr
                | RecordKind::Admin => {}
            }
        }
        // Each touched inode asked of its MDT once, all together.
        let mut found: HashMap<Fid, InodeStat> = HashMap::new();
        let ask: Vec<Fid> = touched
            .iter()
            .copied()
            .filter(|f| !gone.contains(f))
            .collect();
        for chunk in ask.chunks(STATS_MAX) {
            for s in self.client.stat_many(chunk, GLIMPSE_THREADS)? {
                found.insert(s.attr.fid, s);
            }
        }
        self.stats
            .stats
            .fetch_add(ask.len() as u64, Ordering::Relaxed);
        // Directories no record named (shards of striped directories made since the
        // scan): their master, from the MDT.
        let unknown: Vec<Fid> = parents
            .into_iter()
            .filter(|p| {
                !is_zero(*p) && !self.ix.has_dir(*p) && !dirs_named.iter().any(|d| d.0 == *p)
            })
            .collect();
        for s in self.client.stat_many(&unknown, 1)? {
            if let (FileKind::Directory, Some(master)) = (s.attr.kind, s.parent) {
                changes.push(Change::Dir(s.attr.fid, Some((master, Vec::new()))));
            }
        }
        for fid in touched {
            let old = self.ix.file(fid)?;
            match found.get(&fid) {
                Some(s) if s.attr.kind == FileKind::Regular && !s.orphan => {
                    let row = row_of(
                        s,
                        old.as_ref(),
                        created.get(&fid).copied(),
                        jobs.get(&fid).map(String::as_str),
                    );
                    if old.as_ref() != Some(&row) {
                        changes.push(Change::Row(fid, Some(row)));
                    }
                }
                // Gone (or not a regular file): out of the index.
                _ => changes.push(Change::Row(fid, None)),
            }
        }
        changes.push(put_u64(format!("mdt/{mdt}/next"), next));
        self.ix.apply(changes)?;
        Ok(rescan)
    }
}
