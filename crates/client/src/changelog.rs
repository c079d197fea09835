//! Changelogs of the MDTs (register, read, clear, deregister) and the ways between FIDs
//! and paths (`fid2path`, `path2fid`), for administrators and policy engines.

use crate::*;
use nacre_types::{Fid, Nid, Status};
use nacre_wire::mds::changelog::{ChangelogRecord, ChangelogUser, InodeStat, STATS_MAX};
use nacre_wire::mds::{MdsOp, MdsReply};

/// Deepest path `fid2path` follows (a loop in damaged metadata ends there).
pub const PATH_DEPTH_MAX: usize = 4096;

/// A name of an inode: its directory and the name there.
pub type Link = (Fid, Vec<u8>);

/// An MDT's consumers and the records it keeps.
#[derive(Clone, Debug)]
pub struct ChangelogUsers {
    /// Registered consumers.
    pub users: Vec<ChangelogUser>,
    /// Oldest record kept.
    pub first: u64,
    /// Number the next record will get.
    pub next: u64,
}

impl Client {
    /// The MGS this client mounted from.
    pub fn mgs_nid(&self) -> Nid {
        self.mgs.nid()
    }

    /// Indexes of the file system's MDTs, sorted (asks the MGS again first).
    pub fn mdt_indexes(&self) -> Vec<u32> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let mut v: Vec<u32> = self.fs_config().mdts.iter().map(|t| t.index).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Registers a changelog consumer on MDT `mdt` (root only); its id (`cl1` is 1).
    pub fn changelog_register(&self, mdt: u32, name: &str) -> Result<u32> {
        match self
            .mdc(mdt)?
            .call(MdsOp::ChangelogRegister { name: name.into() })?
        {
            MdsReply::ChangelogUser(id) => Ok(id),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Deregisters consumer `user` of MDT `mdt`.
    pub fn changelog_deregister(&self, mdt: u32, user: u32) -> Result<()> {
        self.mdc(mdt)?
            .call(MdsOp::ChangelogDeregister { user })
            .map(|_| ())
    }

    /// Consumer `user` of MDT `mdt` is done with every record up to `upto` (0: all so far).
    pub fn changelog_clear(&self, mdt: u32, user: u32, upto: u64) -> Result<()> {
        self.mdc(mdt)?
            .call(MdsOp::ChangelogClear { user, upto })
            .map(|_| ())
    }

    /// Up to `count` durable records of MDT `mdt` from `from` (0: after what `user`
    /// cleared, or the oldest kept without a user), and the number to read from next.
    pub fn changelog_read(
        &self,
        mdt: u32,
        user: u32,
        from: u64,
        count: u32,
    ) -> Result<(Vec<ChangelogRecord>, u64)> {
        match self
            .mdc(mdt)?
            .call(MdsOp::ChangelogRead { user, from, count })?
        {
            MdsReply::Changelog { records, next } => Ok((records, next)),
            _ => Err(Status::Proto.into()),
        }
    }

    /// MDT `mdt`'s changelog consumers and kept records.
    pub fn changelog_users(&self, mdt: u32) -> Result<ChangelogUsers> {
        match self.mdc(mdt)?.call(MdsOp::ChangelogUsers)? {
            MdsReply::ChangelogUsers { users, first, next } => {
                Ok(ChangelogUsers { users, first, next })
            }
            _ => Err(Status::Proto.into()),
        }
    }

    /// The names leading to `fid`: asked of its own MDT first, then of the others (an
    /// entry may live on another MDT than its inode); and the striped directory it is a
    /// shard of, if it is one.
    fn fid_links(&self, fid: Fid) -> Result<(Vec<Link>, Option<Fid>)> {
        let home = fid.mdt_index();
        let mut order = vec![home];
        order.extend(self.mdt_indexes().into_iter().filter(|i| *i != home));
        let mut shard = None;
        for index in order {
            match self.mdc(index)?.call(MdsOp::FidLinks { fid })? {
                MdsReply::Links { links, shard_of } => {
                    if !links.is_empty() {
                        return Ok((links, None));
                    }
                    if index == home {
                        shard = shard_of;
                    }
                }
                _ => return Err(Status::Proto.into()),
            }
        }
        Ok((Vec::new(), shard))
    }

    /// The path of `fid` from the file system's root (`a/b/c`; empty for the root), by its
    /// first name at each level (Lustre's `lfs fid2path`). `ENOENT` for an inode no name
    /// leads to (removed, or open and unlinked).
    pub fn fid2path(&self, fid: Fid) -> Result<Vec<u8>> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut cur = fid;
        for _ in 0..PATH_DEPTH_MAX {
            if cur == Fid::ROOT {
                parts.reverse();
                return Ok(parts.join(&b'/'));
            }
            let (links, shard_of) = self.fid_links(cur)?;
            match (links.into_iter().next(), shard_of) {
                (Some((parent, name)), _) => {
                    parts.push(name);
                    cur = parent;
                }
                // A shard's entries are its striped directory's.
                (None, Some(master)) => cur = master,
                (None, None) => return Err(Status::NoEnt.into()),
            }
        }
        Err(Status::Io.into())
    }

    /// The FID `path` (relative to the file system's root, `/`-separated) names.
    pub fn path2fid(&self, path: &[u8]) -> Result<Fid> {
        let mut fid = Fid::ROOT;
        for part in path.split(|b| *b == b'/').filter(|p| !p.is_empty()) {
            if part == b"." {
                continue;
            }
            fid = self.lookup(fid, part, false)?.fid;
        }
        Ok(fid)
    }

    /// What a policy engine indexes of each of `fids` that exists (any number, any MDTs):
    /// asked of each inode's MDT in batches of [`STATS_MAX`]; a regular file whose size the
    /// MDT does not know exactly is glimpsed on its OSTs (`glimpse_threads` at once).
    pub fn stat_many(&self, fids: &[Fid], glimpse_threads: usize) -> Result<Vec<InodeStat>> {
        let mut by_mdt: std::collections::BTreeMap<u32, Vec<Fid>> = Default::default();
        for f in fids {
            by_mdt.entry(f.mdt_index()).or_default().push(*f);
        }
        let mut out = Vec::with_capacity(fids.len());
        for (mdt, fids) in by_mdt {
            let mdc = self.mdc(mdt)?;
            for chunk in fids.chunks(STATS_MAX) {
                match mdc.call(MdsOp::StatMany {
                    fids: chunk.to_vec(),
                })? {
                    MdsReply::Stats { stats, .. } => out.extend(stats),
                    _ => return Err(Status::Proto.into()),
                }
            }
        }
        self.exact_sizes(&mut out, glimpse_threads)?;
        Ok(out)
    }

    /// Up to `count` inodes of MDT `mdt` after `after` in FID order (sizes made exact as
    /// [`Client::stat_many`] does), and whether the scan is over.
    pub fn scan_stats(
        &self,
        mdt: u32,
        after: Option<Fid>,
        count: u32,
        glimpse_threads: usize,
    ) -> Result<(Vec<InodeStat>, bool)> {
        match self.mdc(mdt)?.call(MdsOp::ScanStats { after, count })? {
            MdsReply::Stats { mut stats, eof } => {
                self.exact_sizes(&mut stats, glimpse_threads)?;
                Ok((stats, eof))
            }
            _ => Err(Status::Proto.into()),
        }
    }

    /// A page of MDT `mdt`'s directory entries in (directory, name) order after `after`,
    /// and whether it was the last.
    pub fn scan_dirents(
        &self,
        mdt: u32,
        after: Option<(Fid, Vec<u8>)>,
    ) -> Result<(Vec<nacre_wire::mds::DirentSummary>, bool)> {
        match self.mdc(mdt)?.call(MdsOp::ScanDirents {
            after,
            count: STATS_MAX as u32,
        })? {
            MdsReply::Dirents { dirents, eof } => Ok((dirents, eof)),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Fills in the sizes the MDT did not know (from the OSTs); a file removed meanwhile is
    /// dropped.
    fn exact_sizes(&self, stats: &mut Vec<InodeStat>, threads: usize) -> Result<()> {
        let todo: Vec<usize> = (0..stats.len())
            .filter(|&i| {
                stats[i].attr.kind == nacre_types::FileKind::Regular && !stats[i].size_exact
            })
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let found = parking_lot::Mutex::new(Vec::with_capacity(todo.len()));
        let failed = parking_lot::Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..threads.clamp(1, 64).min(todo.len()) {
                s.spawn(|| loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&i) = todo.get(n) else { return };
                    match self.getattr(stats[i].attr.fid) {
                        Ok(a) => found.lock().push((i, Some(a))),
                        Err(e) if e.status() == Status::NoEnt => found.lock().push((i, None)),
                        Err(e) => *failed.lock() = Some(e),
                    }
                });
            }
        });
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        let mut gone = Vec::new();
        for (i, a) in found.into_inner() {
            match a {
                Some(a) => {
                    stats[i].attr.size = a.size;
                    stats[i].attr.blocks = a.blocks;
                    stats[i].size_exact = true;
                }
                None => gone.push(i),
            }
        }
        gone.sort_unstable();
        for i in gone.into_iter().rev() {
            stats.remove(i);
        }
        Ok(())
    }
}
