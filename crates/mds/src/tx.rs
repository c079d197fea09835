//! The transaction every modifying operation of an MDT runs in: it holds the MDT's write
//! lock, reads through it, collects the batch of changes, allocates FIDs, objects and
//! transaction numbers, and saves the reply with the change (exactly once).

use crate::mdt::*;
use crate::osp::merge_spec;
use crate::records::*;
use nacre_kv::{Batch, KvStore};
use nacre_types::fid::{FID_OIDS_PER_SEQ, FID_SEQS_PER_MDT, FID_SEQ_NORMAL};
use nacre_types::layout::StripeSpec;
use nacre_types::{
    Fid, FileKind, Layout, ObjectId, Owner, QuotaId, Status, StripeObject, TimeSpec,
};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// A modifying operation in progress: holds the write lock and collects the batch.
pub struct Tx<'a> {
    /// The MDT.
    pub mdt: &'a Mdt,
    pub(crate) alloc: MutexGuard<'a, AllocState>,
    /// Changes to commit.
    pub batch: Batch,
    /// Objects to destroy once the batch is durable.
    pub destroys: Vec<(u32, ObjectId)>,
    /// Time stamp for every change of this operation.
    pub now: TimeSpec,
    /// A directory rename's "not beneath itself" check was made across MDTs under the
    /// rename lock by the caller (the local check need not leave this MDT).
    pub ancestry_checked: bool,
    /// The client whose request this is (zero for internal work).
    pub client: [u8; 16],
    /// The credentials of that request, as its nodemap maps them (root for internal work):
    /// for the side effects the kernel ties to them (set-id bits cleared).
    pub cred: nacre_types::Cred,
    /// The transaction number given to this change (0: none).
    pub transno: u64,
    /// A replay: the FID and layout its new inode had the first time.
    pub replay: Option<ReplayHint>,
    /// A replay: the transno it had (it keeps it, so versions come out as before).
    pub forced_transno: Option<u64>,
    /// Versions of the inodes this change touched, before it (for the client to send with
    /// a replay).
    pub pre_versions: Vec<(Fid, u64)>,
    /// This change records a client's first transaction number: it is made durable before
    /// the reply (as Lustre writes a new client's slot synchronously), so a restarted MDT
    /// always waits for that client's replays.
    pub new_client: bool,
    /// This change is made durable before its reply whatever `sync_on_reply` says (an
    /// administrator's one-shot command, which stays for no replay).
    pub durable_before_reply: bool,
    /// Versions of the inodes this transaction read (so writing one back needs no read).
    pub(crate) seen_versions: std::cell::RefCell<Vec<(Fid, u64)>>,
}

impl Tx<'_> {
    /// Reads an inode.
    pub fn inode(&self, fid: Fid) -> Result<InodeRecord, Status> {
        match self.mdt.kv.get(INODES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => {
                let rec = decode(&v)?;
                let mut seen = self.seen_versions.borrow_mut();
                if !seen.iter().any(|(f, _)| *f == fid) {
                    seen.push((fid, inode_version(&v)));
                }
                Ok(rec)
            }
            None => self.mdt.inode(fid),
        }
    }

    /// The version `fid` had when this transaction first read it (or reads it now).
    fn version_before(&self, fid: Fid) -> u64 {
        if let Some((_, v)) = self.seen_versions.borrow().iter().find(|(f, _)| *f == fid) {
            return *v;
        }
        self.mdt.version_of(fid).unwrap_or_else(|e| {
            tracing::warn!("{}: version of {fid}: {e}", self.mdt.label.name());
            0
        })
    }

    /// Reads a directory inode (ENOTDIR otherwise).
    pub fn dir(&self, fid: Fid) -> Result<InodeRecord, Status> {
        let rec = self.inode(fid)?;
        if rec.attr.kind != FileKind::Directory {
            return Err(Status::NotDir);
        }
        Ok(rec)
    }

    /// Looks a name up.
    pub fn lookup(&self, parent: Fid, name: &[u8]) -> Result<Option<DirentRecord>, Status> {
        self.mdt.lookup(parent, name)
    }

    /// Stores an inode.
    pub fn put_inode(&mut self, rec: &InodeRecord) {
        let fid = rec.attr.fid;
        // A change with a transno sets the version; others (internal, cross-MDT) keep it.
        let version = if self.transno > 0 {
            self.note_version(fid);
            self.transno
        } else {
            self.version_before(fid)
        };
        self.batch.put(
            INODES,
            fid.to_key().to_vec(),
            crate::records::encode_inode(rec, version),
        );
    }

    /// Adds a directory entry (and its link back from the inode: links.rs).
    pub fn put_dirent(&mut self, parent: Fid, name: &[u8], fid: Fid, kind: FileKind) {
        self.batch.put(
            DIRENTS,
            dirent_key(parent, name),
            encode(&DirentRecord { fid, kind }),
        );
        self.batch.put(
            crate::records::LINKS,
            crate::records::link_key(fid, parent, name),
            Vec::new(),
        );
    }

    /// Removes a directory entry (and its link back from the inode it named).
    pub fn del_dirent(&mut self, parent: Fid, name: &[u8]) {
        if let Ok(Some(d)) = self.mdt.lookup(parent, name) {
            self.batch.delete(
                crate::records::LINKS,
                crate::records::link_key(d.fid, parent, name),
            );
        }
        self.batch.delete(DIRENTS, dirent_key(parent, name));
    }

    /// Marks a directory changed (mtime and ctime).
    pub fn touch(&self, rec: &mut InodeRecord) {
        rec.attr.mtime = self.now;
        rec.attr.ctime = self.now;
    }

    /// The file system's default striping (the root's default) where this MDT can read it:
    /// MDT0 holds the root; other MDTs get it copied into their remote directories.
    pub fn fs_default(&self) -> Result<StripeSpec, Status> {
        if Fid::ROOT.mdt_index() != self.mdt.label.index {
            return Ok(StripeSpec::default());
        }
        Ok(self.inode(Fid::ROOT)?.dir_default.unwrap_or_default())
    }

    /// Allocates a new FID (a replay gets the one its inode had: allocation restarted
    /// past every FID handed out before the restart, so it is free).
    pub fn new_fid(&mut self) -> Fid {
        if let Some((fid, _)) = self.replay {
            self.reserve_past_fid(fid);
            // New: no version before this change (and no read to learn it).
            self.seen_versions.borrow_mut().push((fid, 0));
            return fid;
        }
        if self.alloc.next_fid >= self.alloc.fid_limit {
            self.alloc.fid_limit = self.alloc.next_fid + ALLOC_RESERVE;
            let limit = self.alloc.fid_limit;
            self.batch
                .put(META, b"fid_limit".to_vec(), limit.to_be_bytes().to_vec());
        }
        let n = self.alloc.next_fid;
        self.alloc.next_fid += 1;
        let seq = FID_SEQ_NORMAL
            + u64::from(self.mdt.label.index) * FID_SEQS_PER_MDT
            + n / (FID_OIDS_PER_SEQ - 1);
        let fid = Fid::new(seq, (n % (FID_OIDS_PER_SEQ - 1)) as u32 + 1);
        self.seen_versions.borrow_mut().push((fid, 0));
        fid
    }

    /// A replayed inode has `fid`, which this start of the MDT may not have counted as
    /// used (the reservation that covered it can be lost with the crash too): allocation
    /// continues past it.
    /// (Checked first: `replay::check_created`; a FID of no sequence of this MDT moves
    /// nothing.)
    fn reserve_past_fid(&mut self, fid: Fid) {
        let Some(n) = fid_number(self.mdt.label.index, fid) else {
            return;
        };
        if n < self.alloc.next_fid {
            return;
        }
        self.alloc.next_fid = n + 1;
        if self.alloc.next_fid >= self.alloc.fid_limit {
            self.alloc.fid_limit = self.alloc.next_fid + ALLOC_RESERVE;
            let limit = self.alloc.fid_limit;
            self.batch
                .put(META, b"fid_limit".to_vec(), limit.to_be_bytes().to_vec());
        }
    }

    /// As [`Tx::reserve_past_fid`] for a replayed file's object on `ost`.
    fn reserve_past_object(&mut self, ost: u32, object: ObjectId) -> Result<(), Status> {
        if object.seq != u64::from(self.mdt.label.index) {
            return Ok(());
        }
        let key = crate::mdt::ost_next_key(ost);
        let (next, limit) = match self.alloc.next_object.get(&ost) {
            Some(&v) => v,
            None => {
                let stored = read_u64(&*self.mdt.kv, &key)?.unwrap_or(1);
                (stored, stored)
            }
        };
        if object.id < next {
            return Ok(());
        }
        let next = object.id.checked_add(1).ok_or(Status::Inval)?;
        let limit = if next >= limit {
            let limit = next.checked_add(ALLOC_RESERVE).ok_or(Status::Inval)?;
            self.batch.put(META, key, limit.to_be_bytes().to_vec());
            limit
        } else {
            limit
        };
        self.alloc.next_object.insert(ost, (next, limit));
        Ok(())
    }

    fn new_object(&mut self, ost: u32) -> Result<ObjectId, Status> {
        let key = crate::mdt::ost_next_key(ost);
        let (next, limit) = match self.alloc.next_object.get(&ost) {
            Some(&v) => v,
            None => {
                let stored = read_u64(&*self.mdt.kv, &key)?.unwrap_or(1);
                (stored, stored)
            }
        };
        let limit = if next >= limit {
            let limit = next + ALLOC_RESERVE;
            self.batch.put(META, key, limit.to_be_bytes().to_vec());
            limit
        } else {
            limit
        };
        self.alloc.next_object.insert(ost, (next + 1, limit));
        Ok(ObjectId {
            seq: u64::from(self.mdt.label.index),
            id: next,
        })
    }

    /// Allocates the objects of a new regular file under `parent`'s striping defaults.
    pub fn new_layout(&mut self, parent: &InodeRecord, spec: StripeSpec) -> Result<Layout, Status> {
        if let Some((_, Some(layout))) = self.replay.clone() {
            // The client wrote the file's data into these objects.
            for o in &layout.objects {
                self.reserve_past_object(o.ost, o.object)?;
            }
            return Ok(layout);
        }
        let inherited = parent.dir_default.unwrap_or_default();
        let fs_default = if parent.attr.fid == Fid::ROOT {
            StripeSpec::default()
        } else {
            self.fs_default()?
        };
        let base = merge_spec(inherited, fs_default);
        let merged = merge_spec(spec, base);
        let pending = |ost| self.mdt.destroy_space.pending(ost);
        let pool = self.mdt.osts.spill_target(merged.pool, pending);
        // Spilled: the target pool's OSTs, whatever the start OST named in the full one,
        // and no more stripes than it has.
        let (spec, base) = if pool == merged.pool {
            (spec, base)
        } else {
            let spilled = StripeSpec {
                start_ost: -1,
                pool,
                ..merged
            };
            (
                StripeSpec {
                    stripe_count: 0,
                    ..spilled
                },
                spilled,
            )
        };
        let (count, size, start) = self.mdt.osts.resolve(spec, base, pool)?;
        let chosen = self.mdt.osts.choose(count as usize, start, pool)?;
        let mut objects = Vec::with_capacity(chosen.len());
        for ost in chosen {
            objects.push(StripeObject {
                ost,
                object: self.new_object(ost)?,
            });
        }
        Ok(Layout {
            stripe_size: size,
            objects,
            pool,
            generation: 0,
        })
    }

    /// The space `layout`'s objects hold (as the size of file `rec` spreads over them),
    /// counted as free while their destroys are pending (crate::destroy_space::DestroySpace).
    pub fn hint_destroy_space(&mut self, rec: &InodeRecord, layout: &Layout) {
        let size = self
            .mdt
            .sizes
            .exact(rec.attr.fid)
            .map_or(rec.attr.size, |(size, _)| size);
        for (stripe, o) in layout.objects.iter().enumerate() {
            let bytes = layout.object_size_for_file(stripe, size);
            self.mdt.destroy_space.hint(o.ost, o.object, bytes);
        }
    }

    /// Deletes an inode with its xattrs, queueing its objects for destruction.
    pub fn remove_inode(&mut self, rec: &InodeRecord) -> Result<(), Status> {
        let fid = rec.attr.fid;
        if let Some(layout) = &rec.layout {
            self.hint_destroy_space(rec, layout);
        }
        self.mdt.sizes.forget(fid);
        self.note_version(fid);
        self.batch.delete(INODES, fid.to_key().to_vec());
        if rec.orphan {
            self.batch.delete(ORPHANS, fid.to_key().to_vec());
        }
        let xattrs = self
            .mdt
            .kv
            .scan(XATTRS, &fid.to_key(), None, 100_000)
            .map_err(kv_err)?;
        for (k, _) in xattrs {
            self.batch.delete(XATTRS, k);
        }
        if let Some(layout) = &rec.layout {
            self.destroy_objects(layout);
        }
        crate::mdt::forget_relayout(self, fid)?;
        if rec.attr.kind == FileKind::Directory {
            self.batch.delete(DIRSTRIPES, fid.to_key().to_vec());
            self.batch.delete(DIRDEFAULTS, fid.to_key().to_vec());
        }
        self.count_inodes(&rec.attr, -1)?;
        Ok(())
    }

    /// Records the destruction of a layout's objects (done after the commit).
    pub fn destroy_objects(&mut self, layout: &Layout) {
        self.forget_owner_changes(layout);
        for o in &layout.objects {
            self.batch
                .put(DESTROY, destroy_key(o.ost, o.object), Vec::new());
            self.destroys.push((o.ost, o.object));
        }
    }

    /// Records in this transaction that `layout`'s objects must take `owner` (owners.rs
    /// sends it to the OSTs).
    pub fn queue_owner_change(&mut self, layout: &Layout, owner: nacre_types::Owner) {
        self.mdt.owners_pending.fetch_add(1, Ordering::AcqRel);
        for o in &layout.objects {
            self.batch.put(
                OWNERS,
                destroy_key(o.ost, o.object),
                owner.to_bytes().to_vec(),
            );
        }
    }

    /// Drops `layout`'s pending ownership changes in this transaction (its objects are being
    /// destroyed: a change sent after would create them again).
    fn forget_owner_changes(&mut self, layout: &Layout) {
        // Nothing pending anywhere (the usual case): no deletes to write.
        if self.mdt.owners_pending.load(Ordering::Acquire) == 0 {
            return;
        }
        for o in &layout.objects {
            self.batch.delete(OWNERS, destroy_key(o.ost, o.object));
        }
    }

    /// Adjusts the inode counter `df -i` reports, and the inodes of `attr`'s owner, group and
    /// project (quotas).
    pub fn count_inodes(&mut self, attr: &nacre_types::Attr, delta: i64) -> Result<(), Status> {
        // New inodes within their owner's, group's and project's quotas: checked before the
        // request ran (quota::precheck); here only an id the master refused stops it (a
        // shortage from creates that passed the check at once is let through and more
        // grant asked for: the overrun is bounded by the MDS threads, docs/quota.md).
        if delta > 0 && self.mdt.quota.any_limited() {
            let ids = nacre_types::QuotaId::of_attr(attr);
            let counts = &self.alloc.quota;
            let checked = self
                .mdt
                .quota
                .check_now(&ids, delta as u64, |q| counts.get(&q).copied().unwrap_or(0));
            if checked == Err(Status::DQuot) {
                return Err(Status::DQuot);
            }
        }
        self.alloc.inodes_used = self.alloc.inodes_used.saturating_add_signed(delta);
        let used = self.alloc.inodes_used;
        self.batch
            .put(META, b"inodes_used".to_vec(), used.to_be_bytes().to_vec());
        let owner = nacre_types::Owner::of(attr);
        charge(&mut self.alloc.quota, &mut self.batch, owner, delta);
        Ok(())
    }

    /// An inode's owner, group or project changes from `old`'s to `new`'s: its count moves.
    pub fn recount_inode(&mut self, old: &nacre_types::Attr, new: &nacre_types::Attr) {
        let (from, to) = (nacre_types::Owner::of(old), nacre_types::Owner::of(new));
        if from != to {
            charge(&mut self.alloc.quota, &mut self.batch, from, -1);
            charge(&mut self.alloc.quota, &mut self.batch, to, 1);
        }
    }

    /// Forgets every saved reply of `client` (evicted) in this transaction.
    pub fn forget_saved_replies(&mut self, client: &[u8; 16]) {
        if let Some(set) = self.alloc.saved_replies.remove(client) {
            for x in set {
                self.batch.delete(REPLIES, reply_key(client, x));
            }
        }
    }

    /// Gives this change its transaction number before it runs (a replay keeps its own),
    /// so the inodes it changes record it as their version.
    pub fn reserve_transno(&mut self) -> u64 {
        let t = self.forced_transno.unwrap_or(self.alloc.last_transno + 1);
        self.alloc.last_transno = self.alloc.last_transno.max(t);
        let last = self.alloc.last_transno;
        self.batch
            .put(META, b"last_transno".to_vec(), last.to_be_bytes().to_vec());
        self.transno = t;
        t
    }

    /// The change failed: it changed nothing and gives its number back.
    pub fn release_transno(&mut self) {
        if self.forced_transno.is_none() && self.alloc.last_transno == self.transno {
            self.alloc.last_transno -= 1;
        }
        self.transno = 0;
        self.pre_versions.clear();
    }

    /// Records `fid`'s version before this change (once).
    fn note_version(&mut self, fid: Fid) {
        if self.transno == 0 || self.pre_versions.iter().any(|(f, _)| *f == fid) {
            return;
        }
        let before = self.version_before(fid);
        self.pre_versions.push((fid, before));
    }

    /// Gives this change the next transaction number (stored with it) and, on the
    /// client's first one, records the client in the `clients` table.
    pub fn assign_transno(&mut self) -> u64 {
        let t = if self.transno > 0 {
            self.transno
        } else {
            self.reserve_transno()
        };
        let client = self.client;
        if client != [0; 16]
            && !self.alloc.clients.contains(&client)
            && !self.mdt.osts.is_peer(&client)
        {
            self.alloc.clients.insert(client);
            self.batch.put(CLIENTS, client.to_vec(), Vec::new());
            self.new_client = true;
        }
        self.transno = t;
        t
    }

    /// Removes `client` from the `clients` table in this change; false if it was not there.
    pub fn forget_client(&mut self, client: &[u8; 16]) -> bool {
        if !self.alloc.clients.remove(client) {
            return false;
        }
        self.batch.delete(CLIENTS, client.to_vec());
        true
    }

    /// True if a reply for (client, xid) is saved.
    pub fn has_saved_reply(&self, client: &[u8; 16], xid: u64) -> bool {
        self.alloc
            .saved_replies
            .get(client)
            .is_some_and(|s| s.contains(&xid))
    }

    /// Saves the reply of (client, xid) in this transaction and forgets the client's saved
    /// replies below `replied_below` (the client has them).
    pub fn save_reply(
        &mut self,
        client: &[u8; 16],
        xid: u64,
        replied_below: u64,
        saved: &SavedReply,
    ) {
        let set = self.alloc.saved_replies.entry(*client).or_default();
        let mut drop: Vec<u64> = set.range(..replied_below).copied().collect();
        while set.len() - drop.len() >= SAVED_REPLIES_PER_CLIENT_MAX {
            let Some(&oldest) = set.iter().find(|x| !drop.contains(x)) else {
                break;
            };
            drop.push(oldest);
        }
        for x in drop {
            set.remove(&x);
            self.batch.delete(REPLIES, reply_key(client, x));
        }
        set.insert(xid);
        self.batch.put(
            REPLIES,
            reply_key(client, xid),
            crate::records::encode_saved(saved),
        );
    }
}

/// The allocation number of `fid` in MDT `index`'s sequences (`Tx::new_fid`'s `n`), if it
/// is one of them.
pub fn fid_number(index: u32, fid: Fid) -> Option<u64> {
    let base = FID_SEQ_NORMAL.checked_add(u64::from(index).checked_mul(FID_SEQS_PER_MDT)?)?;
    let seq_off = fid.seq.checked_sub(base)?;
    if seq_off >= FID_SEQS_PER_MDT || fid.oid == 0 {
        return None;
    }
    seq_off
        .checked_mul(FID_OIDS_PER_SEQ - 1)?
        .checked_add(u64::from(fid.oid - 1))
}

/// Inodes counted per id.
pub type Counts = HashMap<QuotaId, u64>;

/// Loads the counts (counting every inode first on an MDT that has none yet).
pub fn load(kv: &dyn KvStore) -> Result<Counts, Status> {
    if read_u64(kv, b"quota_counted")?.is_none() {
        let counts = count(kv)?;
        let mut b = Batch::new();
        for (q, n) in &counts {
            b.put(QUOTA_USAGE, q.to_key().to_vec(), n.to_be_bytes().to_vec());
        }
        b.put(META, b"quota_counted".to_vec(), 1u64.to_be_bytes().to_vec());
        let t = kv.commit(b).map_err(kv_err)?;
        kv.wait_durable(t).map_err(kv_err)?;
        tracing::info!("quotas: the inodes of {} ids counted", counts.len());
        return Ok(counts);
    }
    read_table(kv)
}

/// The counts as the table records them.
pub(crate) fn read_table(kv: &dyn KvStore) -> Result<Counts, Status> {
    let mut counts = Counts::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(QUOTA_USAGE, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (k, v) in &page {
            match (QuotaId::from_key(k), v.as_slice().try_into()) {
                (Some(q), Ok(n)) => {
                    counts.insert(q, u64::from_be_bytes(n));
                }
                _ => tracing::warn!("quotas: damaged usage record skipped"),
            }
        }
    }
    Ok(counts)
}

/// Counts every inode of the store by its owner, group and project (what the table must
/// say; `lfsck --quota` compares them).
pub fn count(kv: &dyn KvStore) -> Result<Counts, Status> {
    let mut counts = Counts::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = kv
            .scan(INODES, &[], after.as_deref(), 4096)
            .map_err(kv_err)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        for (_, v) in &page {
            match decode::<InodeRecord>(v) {
                Ok(rec) => {
                    for q in QuotaId::of_attr(&rec.attr) {
                        *counts.entry(q).or_insert(0) += 1;
                    }
                }
                Err(_) => tracing::warn!("quotas: damaged inode skipped in the count"),
            }
        }
    }
    Ok(counts)
}

/// Adds `delta` inodes to `owner`'s user, group and project in `counts`, recording the new
/// counts in `batch`.
pub fn charge(counts: &mut Counts, batch: &mut Batch, owner: Owner, delta: i64) {
    if delta == 0 {
        return;
    }
    for q in QuotaId::of_owner(owner) {
        let n = counts.entry(q).or_insert(0);
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            counts.remove(&q);
            batch.delete(QUOTA_USAGE, q.to_key().to_vec());
        } else {
            batch.put(QUOTA_USAGE, q.to_key().to_vec(), n.to_be_bytes().to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fid_numbers_are_new_fids_inverse_and_never_overflow() {
        // Tx::new_fid: seq = base + n / (OIDS - 1), oid = n % (OIDS - 1) + 1.
        for index in [0u32, 1, 7] {
            for n in [
                0u64,
                1,
                FID_OIDS_PER_SEQ - 2,
                FID_OIDS_PER_SEQ - 1,
                123_456_789_012,
            ] {
                let seq = FID_SEQ_NORMAL
                    + u64::from(index) * FID_SEQS_PER_MDT
                    + n / (FID_OIDS_PER_SEQ - 1);
                let fid = Fid::new(seq, (n % (FID_OIDS_PER_SEQ - 1)) as u32 + 1);
                assert_eq!(fid_number(index, fid), Some(n));
                assert_eq!(fid_number(index + 1, fid), None, "another MDT's");
            }
        }
        assert_eq!(fid_number(0, Fid::new(u64::MAX, u32::MAX)), None);
        assert_eq!(fid_number(u32::MAX, Fid::new(u64::MAX, 1)), None);
        assert_eq!(fid_number(0, Fid::new(FID_SEQ_NORMAL, 0)), None, "oid 0");
        assert_eq!(fid_number(0, Fid::ROOT), None);
    }
}
