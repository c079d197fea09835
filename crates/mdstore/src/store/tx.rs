//! The transaction every modifying operation of an MDT runs in, at the store's level: it
//! holds the MDT's write lock, reads through it, collects the batch of changes, allocates
//! FIDs, objects and transaction numbers, and saves the reply with the change (exactly
//! once). What needs the rest of the MDT (object placement, quotas, sizes) is the wrapper's,
//! `nacre_mds::mdt::Tx`.

use super::{
    kv_err, read_u64, AllocState, Store, Writes, ALLOC_RESERVE, SAVED_REPLIES_PER_CLIENT_MAX,
};
use crate::records::*;
use nacre_kv::{Batch, KvStore, Ticket};
use nacre_types::dirstripe::{DirDefault, DirStripe};
use nacre_types::fid::{FID_OIDS_PER_SEQ, FID_SEQS_PER_MDT, FID_SEQ_NORMAL};
use nacre_types::layout::LayoutSpec;
use nacre_types::{Fid, FileKind, Layout, ObjectId, Owner, QuotaId, Status, TimeSpec};
use nacre_wire::mds::changelog::ChangelogRecord;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// The FID and layout a replayed create gave its inode the first time.
pub type ReplayHint = (Fid, Option<Layout>);

/// A modifying operation in progress: holds the write lock and collects the batch.
pub struct Tx<'a> {
    /// The store.
    store: &'a Store,
    alloc: MutexGuard<'a, AllocState>,
    /// Changes to commit.
    batch: Batch,
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
    /// The FID the next new inode takes: given by the client from its grants
    /// (`MdsOp::CreateBatch`, checked by [`Tx::take_granted_fid`]).
    pub given_fid: Option<Fid>,
    /// Versions of the inodes this transaction read (so writing one back needs no read).
    seen_versions: std::cell::RefCell<Vec<(Fid, u64)>>,
}

impl Store {
    /// Starts a transaction: takes the write lock (commit order = lock order).
    pub fn begin(&self) -> Tx<'_> {
        Tx {
            store: self,
            alloc: self.alloc.lock().expect("write lock"),
            batch: Batch::new(),
            destroys: Vec::new(),
            now: TimeSpec::now(),
            ancestry_checked: false,
            client: [0; 16],
            cred: nacre_types::Cred::root(),
            transno: 0,
            replay: None,
            forced_transno: None,
            pre_versions: Vec::new(),
            new_client: false,
            durable_before_reply: false,
            given_fid: None,
            seen_versions: std::cell::RefCell::new(Vec::new()),
        }
    }
}

impl<'a> Tx<'a> {
    /// The store this transaction writes.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// Reads an inode.
    pub fn inode(&self, fid: Fid) -> Result<InodeRecord, Status> {
        match self.store.kv.get(INODES, &fid.to_key()).map_err(kv_err)? {
            Some(v) => {
                let rec: InodeRecord = self.store.decode(&v)?;
                let mut seen = self.seen_versions.borrow_mut();
                if !seen.iter().any(|(f, _)| *f == fid) {
                    seen.push((fid, inode_version(&v)));
                }
                Ok(rec)
            }
            None => self.store.inode(fid),
        }
    }

    /// The version `fid` had when this transaction first read it (or reads it now).
    fn version_before(&self, fid: Fid) -> u64 {
        if let Some((_, v)) = self.seen_versions.borrow().iter().find(|(f, _)| *f == fid) {
            return *v;
        }
        self.store.version_of(fid).unwrap_or_else(|e| {
            tracing::warn!("{}: version of {fid}: {e}", self.store.name);
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
        self.store.lookup(parent, name)
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
            encode_record(&DirentRecord { fid, kind }),
        );
        self.batch.put(
            crate::records::LINKS,
            crate::records::link_key(fid, parent, name),
            Vec::new(),
        );
    }

    /// Removes a directory entry (and its link back from the inode it named).
    pub fn del_dirent(&mut self, parent: Fid, name: &[u8]) {
        if let Ok(Some(d)) = self.store.lookup(parent, name) {
            self.batch.delete(
                crate::records::LINKS,
                crate::records::link_key(d.fid, parent, name),
            );
        }
        self.batch.delete(DIRENTS, dirent_key(parent, name));
    }

    /// Sets the extended attribute `name` of inode `fid`.
    pub fn put_xattr(&mut self, fid: Fid, name: &[u8], value: Vec<u8>) {
        self.batch.put(XATTRS, xattr_key(fid, name), value);
    }

    /// Removes the extended attribute `name` of inode `fid`.
    pub fn del_xattr(&mut self, fid: Fid, name: &[u8]) {
        self.batch.delete(XATTRS, xattr_key(fid, name));
    }

    /// Records directory `fid`'s stripe layout (its shards).
    pub fn put_dir_stripe(&mut self, fid: Fid, stripe: &DirStripe) {
        self.batch
            .put(DIRSTRIPES, fid.to_key().to_vec(), encode_record(stripe));
    }

    /// Sets directory `fid`'s default for new subdirectories.
    pub fn put_dir_default(&mut self, fid: Fid, default: &DirDefault) {
        self.batch
            .put(DIRDEFAULTS, fid.to_key().to_vec(), encode_record(default));
    }

    /// Removes directory `fid`'s default for new subdirectories.
    pub fn del_dir_default(&mut self, fid: Fid) {
        self.batch.delete(DIRDEFAULTS, fid.to_key().to_vec());
    }

    /// Records the link of inode `fid` from entry `name` of `parent` (on another MDT).
    pub fn put_remote_link(&mut self, fid: Fid, parent: Fid, name: &[u8]) {
        self.batch
            .put(REMOTE_LINKS, remote_link_key(fid, parent, name), Vec::new());
    }

    /// Removes the link of inode `fid` from entry `name` of `parent`.
    pub fn del_remote_link(&mut self, fid: Fid, parent: Fid, name: &[u8]) {
        self.batch
            .delete(REMOTE_LINKS, remote_link_key(fid, parent, name));
    }

    /// Makes `rec` an orphan (unlinked while open): flagged, stored, and in the orphan index.
    pub fn mark_orphan(&mut self, rec: &mut InodeRecord) {
        rec.orphan = true;
        self.put_inode(rec);
        self.batch
            .put(ORPHANS, rec.attr.fid.to_key().to_vec(), Vec::new());
    }

    /// Records a cross-MDT operation's intent (coordinated here, or owed by this MDT).
    pub fn put_intent(&mut self, intent: &IntentRecord) {
        self.batch
            .put(INTENTS, intent.key.to_key().to_vec(), encode_record(intent));
    }

    /// Removes a cross-MDT operation's intent (keyed by `key`).
    pub fn del_intent(&mut self, key: Fid) {
        self.batch.delete(INTENTS, key.to_key().to_vec());
    }

    /// Holds inode `fid` for a directory migration (the `frozen` table).
    pub fn freeze(&mut self, fid: Fid) {
        self.batch.put(FROZEN, fid.to_key().to_vec(), Vec::new());
    }

    /// Lifts a directory migration's hold on inode `fid`.
    pub fn unfreeze(&mut self, fid: Fid) {
        self.batch.delete(FROZEN, fid.to_key().to_vec());
    }

    /// Removes inode `old`, moved to `new` by a directory migration (its objects are the
    /// new inode's now), with its xattrs, and records where it went.
    pub fn move_inode(&mut self, old: Fid, new: Fid) -> Result<(), Status> {
        let attr = self.inode(old)?.attr;
        self.batch.delete(INODES, old.to_key().to_vec());
        for (k, _) in self.store.xattrs(old, 100_000)? {
            self.batch.delete(XATTRS, xattr_key(old, &k));
        }
        self.batch
            .put(MOVED, old.to_key().to_vec(), new.to_key().to_vec());
        self.count_inodes(&attr, -1);
        Ok(())
    }

    /// Adds changelog record `index` and records `next` as the next record's number.
    pub fn put_changelog_record(&mut self, index: u64, rec: &ChangelogRecord, next: u64) {
        self.batch
            .put(CHANGELOG, index.to_be_bytes().to_vec(), encode_record(rec));
        self.batch.put(
            META,
            b"changelog_next".to_vec(),
            next.to_be_bytes().to_vec(),
        );
    }

    /// Records changelog consumer `id` (`encoded`: its record).
    pub fn put_changelog_user(&mut self, id: u32, encoded: Vec<u8>) {
        self.batch
            .put(CHANGELOG_USERS, changelog_user_key(id), encoded);
    }

    /// Removes changelog consumer `id`.
    pub fn del_changelog_user(&mut self, id: u32) {
        self.batch.delete(CHANGELOG_USERS, changelog_user_key(id));
    }

    /// Sets a `META` value.
    pub fn put_meta(&mut self, key: &[u8], value: Vec<u8>) {
        self.batch.put(META, key.to_vec(), value);
    }

    /// Stores `bytes` as the bytes of file `fid`'s component on the MDT (data on the MDT),
    /// replacing `old_len` stored bytes: the difference is charged to `owner`'s user, group
    /// and project (quotas; checked first by `nacre_mds::mdt::Tx::put_dom`).
    pub fn put_dom(&mut self, owner: Owner, fid: Fid, old_len: usize, bytes: &[u8]) {
        self.batch
            .put(DOM, fid.to_key().to_vec(), encode_dom(bytes));
        let delta = dom_charged_bytes(bytes.len()) as i64 - dom_charged_bytes(old_len) as i64;
        charge_in(
            QUOTA_DOM_BYTES,
            &mut self.alloc.dom_bytes,
            &mut self.batch,
            owner,
            delta,
        );
    }

    /// Deletes file `fid`'s `stored` bytes on the MDT, given back to `owner`'s user, group
    /// and project (quotas).
    pub fn delete_dom(&mut self, owner: Owner, fid: Fid, stored: usize) {
        self.batch.delete(DOM, fid.to_key().to_vec());
        let bytes = dom_charged_bytes(stored) as i64;
        charge_in(
            QUOTA_DOM_BYTES,
            &mut self.alloc.dom_bytes,
            &mut self.batch,
            owner,
            -bytes,
        );
    }

    /// A file's owner, group or project changes from `old`'s to `new`'s: its bytes on the
    /// MDT (`stored` of them) move with it.
    pub fn recount_dom(&mut self, old: &nacre_types::Attr, new: &nacre_types::Attr, stored: usize) {
        let (from, to) = (nacre_types::Owner::of(old), nacre_types::Owner::of(new));
        let bytes = dom_charged_bytes(stored) as i64;
        if from != to && bytes > 0 {
            charge_in(
                QUOTA_DOM_BYTES,
                &mut self.alloc.dom_bytes,
                &mut self.batch,
                from,
                -bytes,
            );
            charge_in(
                QUOTA_DOM_BYTES,
                &mut self.alloc.dom_bytes,
                &mut self.batch,
                to,
                bytes,
            );
        }
    }

    /// Records the migration of file `fid`.
    pub fn put_relayout(&mut self, fid: Fid, rec: &RelayoutRecord) {
        self.batch
            .put(RELAYOUTS, fid.to_key().to_vec(), encode_record(rec));
    }

    /// Removes the record of file `fid`'s migration.
    pub fn del_relayout(&mut self, fid: Fid) {
        self.batch.delete(RELAYOUTS, fid.to_key().to_vec());
    }

    /// True if this transaction records no change (yet).
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Drops every change this transaction recorded (its operation failed).
    pub fn discard(&mut self) {
        self.batch = Batch::new();
    }

    /// Commits the changes recorded so far, even none (visible at once, durable after
    /// [`Store::wait_durable`] of the ticket); the write lock is held until the transaction
    /// is dropped.
    pub fn commit(&mut self) -> Result<Ticket, Status> {
        let batch = std::mem::take(&mut self.batch);
        self.store.kv.commit(batch).map_err(kv_err)
    }

    /// Commits as [`Tx::commit`] does, for a change nothing waits on: a failure is only
    /// logged, as a warning saying `what` failed.
    pub fn commit_or_warn(&mut self, what: &str) {
        let batch = std::mem::take(&mut self.batch);
        if let Err(e) = self.store.kv.commit(batch) {
            tracing::warn!("{}: {what}: {e}", self.store.name);
        }
    }

    /// Ends the transaction, releasing the write lock, and keeps its changes to commit
    /// without it.
    pub fn detach(self) -> Writes<'a> {
        Writes {
            store: self.store,
            batch: self.batch,
        }
    }

    /// Marks a directory changed (mtime and ctime).
    pub fn touch(&self, rec: &mut InodeRecord) {
        rec.attr.mtime = self.now;
        rec.attr.ctime = self.now;
    }

    /// The file system's default layout (the root's default, plain or composite) where
    /// this MDT can read it: MDT0 holds the root; other MDTs get it copied into their
    /// remote directories. None: nothing set (Nacre's defaults).
    pub fn fs_default(&self) -> Result<Option<LayoutSpec>, Status> {
        if Fid::ROOT.mdt_index() != self.store.index {
            return Ok(None);
        }
        Ok(self.inode(Fid::ROOT)?.dir_default)
    }

    /// Allocates a new FID (a replay gets the one its inode had: allocation restarted
    /// past every FID handed out before the restart, so it is free).
    pub fn new_fid(&mut self) -> Fid {
        if let Some(fid) = self.given_fid.take() {
            self.seen_versions.borrow_mut().push((fid, 0));
            return fid;
        }
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
            + u64::from(self.store.index) * FID_SEQS_PER_MDT
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
        let Some(n) = fid_number(self.store.index, fid) else {
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

    /// As `Tx::reserve_past_fid` for a replayed file's object on `ost`.
    pub fn reserve_past_object(&mut self, ost: u32, object: ObjectId) -> Result<(), Status> {
        if object.seq != u64::from(self.store.index) {
            return Ok(());
        }
        let key = super::ost_next_key(ost);
        let (next, limit) = match self.alloc.next_object.get(&ost) {
            Some(&v) => v,
            None => {
                let stored = read_u64(&*self.store.kv, &key)?.unwrap_or(1);
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

    /// Allocates an object on OST `ost`.
    pub fn new_object(&mut self, ost: u32) -> Result<ObjectId, Status> {
        let key = super::ost_next_key(ost);
        let (next, limit) = match self.alloc.next_object.get(&ost) {
            Some(&v) => v,
            None => {
                let stored = read_u64(&*self.store.kv, &key)?.unwrap_or(1);
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
            seq: u64::from(self.store.index),
            id: next,
        })
    }

    /// The store's part of removing an inode (`nacre_mds::mdt::Tx::remove_inode`): its version
    /// noted, its record, orphan index entry and xattrs deleted, its objects' destruction
    /// recorded.
    pub fn remove_inode_records(&mut self, rec: &InodeRecord) -> Result<(), Status> {
        let fid = rec.attr.fid;
        self.note_version(fid);
        self.batch.delete(INODES, fid.to_key().to_vec());
        if rec.orphan {
            self.batch.delete(ORPHANS, fid.to_key().to_vec());
        }
        let xattrs = self
            .store
            .kv
            .scan(XATTRS, &fid.to_key(), None, 100_000)
            .map_err(kv_err)?;
        for (k, _) in xattrs {
            self.batch.delete(XATTRS, k);
        }
        if let Some(layout) = &rec.layout {
            if layout.dom_end() > 0 {
                let stored = self.store.dom(fid)?.len();
                self.delete_dom(Owner::of(&rec.attr), fid, stored);
            }
            self.destroy_objects(layout);
        }
        Ok(())
    }

    /// The rest of removing an inode, after its migration went: a directory's stripe and
    /// default records, and the inode counts.
    pub fn remove_inode_rest(&mut self, rec: &InodeRecord) {
        let fid = rec.attr.fid;
        if rec.attr.kind == FileKind::Directory {
            self.batch.delete(DIRSTRIPES, fid.to_key().to_vec());
            self.batch.delete(DIRDEFAULTS, fid.to_key().to_vec());
        }
        self.count_inodes(&rec.attr, -1);
    }

    /// Records the destruction of a layout's objects (done after the commit).
    pub fn destroy_objects(&mut self, layout: &Layout) {
        self.forget_owner_changes(layout);
        for o in layout.objects() {
            self.batch
                .put(DESTROY, destroy_key(o.ost, o.object), Vec::new());
            self.destroys.push((o.ost, o.object));
        }
    }

    /// Records in this transaction that `layout`'s objects must take `owner` (owners.rs
    /// sends it to the OSTs).
    pub fn queue_owner_change(&mut self, layout: &Layout, owner: nacre_types::Owner) {
        self.store.owners_pending.fetch_add(1, Ordering::AcqRel);
        for o in layout.objects() {
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
        if self.store.owners_pending.load(Ordering::Acquire) == 0 {
            return;
        }
        for o in layout.objects() {
            self.batch.delete(OWNERS, destroy_key(o.ost, o.object));
        }
    }

    /// Adjusts the inode counter `df -i` reports, and the inodes of `attr`'s owner, group and
    /// project (quotas). No quota check: `nacre_mds::mdt::Tx::count_inodes` makes it first.
    pub fn count_inodes(&mut self, attr: &nacre_types::Attr, delta: i64) {
        self.alloc.inodes_used = self.alloc.inodes_used.saturating_add_signed(delta);
        let used = self.alloc.inodes_used;
        self.batch
            .put(META, b"inodes_used".to_vec(), used.to_be_bytes().to_vec());
        let owner = nacre_types::Owner::of(attr);
        charge(&mut self.alloc.quota, &mut self.batch, owner, delta);
    }

    /// The inodes `id` has here, as this transaction counts them.
    pub fn inode_count(&self, id: QuotaId) -> u64 {
        self.alloc.quota.get(&id).copied().unwrap_or(0)
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
    /// client's first one, records the client in the `clients` table (unless
    /// `record_client` is false: a peer MDT, which never replays).
    pub fn assign_transno(&mut self, record_client: bool) -> u64 {
        let t = if self.transno > 0 {
            self.transno
        } else {
            self.reserve_transno()
        };
        let client = self.client;
        if client != [0; 16] && !self.alloc.clients.contains(&client) && record_client {
            self.alloc.clients.insert(client);
            self.batch.put(CLIENTS, client.to_vec(), Vec::new());
            self.new_client = true;
        }
        self.transno = t;
        t
    }

    /// Removes `client` from the `clients` table and retires its FID grants in this change;
    /// false if it was in neither (nothing to commit).
    pub fn forget_client(&mut self, client: &[u8; 16]) -> bool {
        // Its FID grants go whether or not it was given transnos (then this change holds
        // only their deletion, and must be committed all the same).
        let retired = self.retire_grants(client);
        if !self.alloc.clients.remove(client) {
            return retired;
        }
        self.batch.delete(CLIENTS, client.to_vec());
        true
    }

    /// The FID grants (fid_grants.rs), under the write lock.
    pub(crate) fn grants_mut(&mut self) -> &mut super::fid_grants::Grants {
        &mut self.alloc.grants
    }

    /// Puts `key` → `value` in `table` in this transaction.
    pub(crate) fn put(&mut self, table: &'static str, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put(table, key, value);
    }

    /// Deletes `key` of `table` in this transaction.
    pub(crate) fn delete(&mut self, table: &'static str, key: Vec<u8>) {
        self.batch.delete(table, key);
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
        self.batch
            .put(REPLIES, reply_key(client, xid), encode_record(saved));
    }
}

/// The allocation number of `fid` in MDT `index`'s sequences (`Tx::new_fid`'s `n`), if it
/// is one of them.
pub fn fid_number(index: u32, fid: Fid) -> Option<u64> {
    let base = FID_SEQ_NORMAL.checked_add(u64::from(index).checked_mul(FID_SEQS_PER_MDT)?)?;
    let seq_off = fid.seq.checked_sub(base)?;
    // The upper half is granted to clients (fid_grants.rs): not allocated here.
    if seq_off >= nacre_types::fid::FID_SEQS_CLIENT_OFFSET || fid.oid == 0 {
        return None;
    }
    seq_off
        .checked_mul(FID_OIDS_PER_SEQ - 1)?
        .checked_add(u64::from(fid.oid - 1))
}

/// Inodes counted per id.
pub type Counts = HashMap<QuotaId, u64>;

/// Loads the counts (counting every inode first on an MDT that has none yet; `name`: the
/// MDT's, for log lines).
pub fn load(kv: &dyn KvStore, name: &str) -> Result<Counts, Status> {
    if read_u64(kv, b"quota_counted")?.is_none() {
        let counts = count(kv, name)?;
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
    read_counts(kv, QUOTA_USAGE)
}

/// The counts a quota usage table (`quota_usage`, `quota_dom_bytes`) records.
pub(crate) fn read_counts(kv: &dyn KvStore, table: &'static str) -> Result<Counts, Status> {
    let mut counts = Counts::new();
    super::scan_each(kv, table, &[], 4096, |k, v| {
        match (QuotaId::from_key(k), v.try_into()) {
            (Some(q), Ok(n)) => {
                counts.insert(q, u64::from_be_bytes(n));
            }
            _ => tracing::warn!("quotas: damaged usage record skipped"),
        }
        Ok(())
    })?;
    Ok(counts)
}

/// Counts every inode of the store by its owner, group and project (what the table must
/// say; `lfsck --quota` compares them). A damaged inode is skipped; one of a newer version
/// than this nacre reads stops the count with an error (logged naming MDT `name`): skipped,
/// its owner would be counted one inode short.
pub fn count(kv: &dyn KvStore, name: &str) -> Result<Counts, Status> {
    let mut counts = Counts::new();
    super::scan_each(kv, INODES, &[], 4096, |_, v| {
        match decode_record::<InodeRecord>(v) {
            Ok(rec) => {
                for q in QuotaId::of_attr(&rec.attr) {
                    *counts.entry(q).or_insert(0) += 1;
                }
            }
            Err(e) if e.is_too_new() => return Err(e.logged(name)),
            Err(e) => tracing::warn!("{name}: quotas: {e}: skipped in the count"),
        }
        Ok(())
    })?;
    Ok(counts)
}

/// Adds `delta` inodes to `owner`'s user, group and project in `counts`, recording the new
/// counts in `batch`.
pub fn charge(counts: &mut Counts, batch: &mut Batch, owner: Owner, delta: i64) {
    charge_in(QUOTA_USAGE, counts, batch, owner, delta)
}

/// Adds `delta` to `owner`'s user, group and project in `counts`, recording the new counts
/// in `table` through `batch`.
pub(crate) fn charge_in(
    table: &'static str,
    counts: &mut Counts,
    batch: &mut Batch,
    owner: Owner,
    delta: i64,
) {
    if delta == 0 {
        return;
    }
    for q in QuotaId::of_owner(owner) {
        let n = counts.entry(q).or_insert(0);
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            counts.remove(&q);
            batch.delete(table, q.to_key().to_vec());
        } else {
            batch.put(table, q.to_key().to_vec(), n.to_be_bytes().to_vec());
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
