//! What the holder of a delegated directory keeps of the files it made there once their
//! creates are sent (issue 44, mdtest hard's read phase): their attributes as the MDT
//! answered the batch and the bytes the creates carried. While the delegation is held, an
//! open of such a file by its owner is answered here with a deferred handle (opened at the
//! MDT only if it is used for more than reads and its close), its reads from those bytes,
//! and its attributes here: open, read and close without a request.
//!
//! Why that is the MDT's truth: no other client reaches such a file but through its
//! directory (a lookup, a listing: they call the delegation back) or by its FID, and an
//! open or change by FID calls back the delegations of the file's directories too
//! (crates/mds/src/locks.rs); the holder's own requests that name the file, its name, or
//! change it (an open at the MDT, a write, a truncate, a setattr, a rename, a link, an
//! unlink) forget what is kept of it first ([`Client::forget_kept`]). A file whose bytes go
//! past what its create carried is not kept.
//!
//! Reads answered here are access times: recorded here as the MDT would (relatime) and
//! sent to the MDT many per request (`AccessBatch`) after the creates they follow, within
//! about a second (the sender thread's round); lost (logged) if the MDT refuses them, as the MDT loses its last
//! seconds of accesses in a crash.

use super::{Item, Kept};
use crate::Client;
use nacre_types::cred::{MAY_READ, MAY_WRITE};
use nacre_types::{Attr, Fid, TimeSpec};
use nacre_wire::mds::{BatchAccess, BatchCreate, MdsOp, ACCESS_BATCH_ITEMS_MAX};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Most bytes of files made under delegations kept here, all directories (past it, the
/// files made are not kept: their opens go to the MDT).
pub const DELEGATED_KEPT_BYTES_MAX: usize = 64 << 20;

impl Client {
    /// After a batch of `dir`'s creates was made: keeps each file `made` (its item and the
    /// attributes the MDT answered) that the kernel keeps under the delegation and whose
    /// whole contents went with its create.
    pub(super) fn keep_made(&self, dir: Fid, made: &[(&BatchCreate, Attr)]) {
        let mut dirs = self.delegated.dirs.lock();
        let Some(d) = dirs.get_mut(&dir) else {
            return;
        };
        if d.closing {
            return;
        }
        for (c, attr) in made {
            let covered = d
                .covered
                .get(&c.name)
                .is_some_and(|k| k.fid == c.fid && k.owner.is_some());
            // Not one whose name is going (removing: no open of it is answered any more).
            let going = d.removing.contains(&c.fid);
            if !covered || going || attr.fid != c.fid || attr.size != c.data.len() as u64 {
                continue;
            }
            let kept = self.delegated.kept_bytes.load(Ordering::Acquire);
            if kept + c.data.len() > DELEGATED_KEPT_BYTES_MAX {
                continue;
            }
            self.delegated
                .kept_bytes
                .fetch_add(c.data.len(), Ordering::AcqRel);
            let old = d.kept.insert(
                c.fid,
                Kept {
                    attr: attr.clone(),
                    data: Arc::new(c.data.clone()),
                },
            );
            if let Some(old) = old {
                self.delegated
                    .kept_bytes
                    .fetch_sub(old.data.len(), Ordering::AcqRel);
            }
        }
    }

    /// A handle on `fid` for `access` by `uid`, answered here (deferred: see the module
    /// documentation), if this client made it under a delegation it still holds and keeps
    /// it: its owner opening it for what the owner's class of its mode allows (root's file:
    /// anything), as the MDT would let the owner open it later.
    pub fn open_kept(&self, fid: Fid, access: u8, uid: u32) -> Option<crate::OpenFile> {
        if !self.async_dirops() || self.delegated.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        // A fileset's mount: the MDT walks every FID an `AccessBatch` names up to the
        // fileset, so such a mount answers no open itself.
        if self.mdc(0).ok()?.root().ok()? != Fid::ROOT {
            return None;
        }
        let attr = self.kept_file(fid)?.0;
        let owner_may = |may: u8, bit: u32| access & may == 0 || attr.perm & bit != 0;
        let may = attr.uid == 0 || (owner_may(MAY_READ, 0o400) && owner_may(MAY_WRITE, 0o200));
        if attr.uid != uid || !may {
            return None;
        }
        let file = self.open_deferred(&attr, None, access).ok()?;
        self.delegated.stats.opened.fetch_add(1, Ordering::Relaxed);
        Some(file)
    }

    /// `len` bytes from `offset` of the file of deferred handle `file`, read from what is
    /// kept here of it (made here, sent or not), recording the access; `None`: read it
    /// through the MDT.
    pub fn read_kept(&self, file: &crate::OpenFile, offset: u64, len: usize) -> Option<Vec<u8>> {
        if !file.deferred
            || file.access & MAY_READ == 0
            || self.delegated.held.load(Ordering::Acquire) == 0
        {
            return None;
        }
        let noatime = self.noatime.load(Ordering::Relaxed);
        let mdc = self.mdc(file.fid.mdt_index()).ok()?;
        let now = TimeSpec::now();
        let mut dirs = self.delegated.dirs.lock();
        let d = held_dir_of(&mut dirs, file.fid, &mdc)?;
        let fid = file.fid;
        let (attr, data) = match d.kept.get_mut(&fid) {
            Some(k) => (&mut k.attr, k.data.as_slice()),
            None => {
                let data = d.items.iter().rev().find_map(|i| match i {
                    Item::Create(c) if c.fid == fid => Some(c.data.as_slice()),
                    _ => None,
                })?;
                let attr = d.answered.get_mut(&fid)?;
                (attr, data)
            }
        };
        if attr.size != data.len() as u64 {
            return None;
        }
        let from = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let to = from.saturating_add(len).min(data.len());
        let out = data[from..to].to_vec();
        if !noatime && nacre_types::attr::relatime_due(attr, now) {
            attr.atime = now;
            // Sent by the sender thread on its next round (within a second).
            d.accessed.push(BatchAccess { fid, time: now });
        }
        self.delegated.stats.read.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }

    /// The attributes of a file this client made under a delegation it holds and keeps
    /// (exact: see the module documentation), and whether the kernel may keep them.
    pub(crate) fn kept_attr(&self, fid: Fid) -> Option<(Attr, bool)> {
        if self.delegated.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.kept_file(fid)
    }

    /// A file's attributes if kept here or answered here and not known made (then not for
    /// the kernel to keep; not one whose unlink was answered), while its directory's
    /// delegation is held.
    fn kept_file(&self, fid: Fid) -> Option<(Attr, bool)> {
        let mdc = self.mdc(fid.mdt_index()).ok()?;
        let mut dirs = self.delegated.dirs.lock();
        let d = held_dir_of(&mut dirs, fid, &mdc)?;
        if d.unlinking.contains(&fid) || d.removing.contains(&fid) {
            return None;
        }
        let kept = d.kept.get(&fid).map(|k| (k.attr.clone(), true));
        kept.or_else(|| d.answered.get(&fid).map(|a| (a.clone(), false)))
    }

    /// True while an open of `fid` would still be answered here: checked after a deferred
    /// handle from [`Client::open_kept`] is registered, so a removal or a delegation going
    /// meanwhile either sees the handle or is seen by it (and the handle opened at the
    /// MDT at once).
    pub fn still_kept(&self, fid: Fid) -> bool {
        self.kept_file(fid).is_some()
    }

    /// Before `name` of `parent` is removed by this mount (an unlink, a rename over it):
    /// its file is no longer answered here, so no open of it is answered from now on that
    /// the removal's opening of deferred handles would miss.
    pub fn forget_kept_name(&self, parent: Fid, name: &[u8]) {
        if self.delegated.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut dirs = self.delegated.dirs.lock();
        let Some(d) = dirs.get_mut(&parent) else {
            return;
        };
        if let Some(fid) = d.covered.get(name).map(|c| c.fid) {
            self.forget_kept_in(d, fid);
            // A file made already is never kept again (its name is no longer the mount's
            // to answer); one answered and not made is, until its create is made.
            if d.answered.contains_key(&fid) {
                d.removing.insert(fid);
            }
        }
    }

    /// Before `op` goes to an MDT: the files it names (an open at the MDT, a change) are no
    /// longer answered from what is kept here.
    pub(super) fn forget_kept(&self, op: &MdsOp) {
        if !op.is_modifying() && !matches!(op, MdsOp::Open { .. }) {
            return;
        }
        let mut fids: Vec<Fid> = op.key_fid().into_iter().collect();
        if let MdsOp::Link { fid, .. } = op {
            fids.push(*fid);
        }
        let mut dirs = self.delegated.dirs.lock();
        for d in dirs.values_mut() {
            for f in &fids {
                if d.kept.contains_key(f) {
                    self.forget_kept_in(d, *f);
                }
            }
        }
    }

    /// Forgets what is kept of `fid` in `d` (it changed, its name changed or went), and
    /// the reads of it not sent yet: the MDT might refuse them now (they are lost, as an
    /// MDT loses its last seconds of accesses in a crash).
    pub(super) fn forget_kept_in(&self, d: &mut super::Dir, fid: Fid) {
        if let Some(k) = d.kept.remove(&fid) {
            self.delegated
                .kept_bytes
                .fetch_sub(k.data.len(), Ordering::AcqRel);
        }
        d.accessed.retain(|a| a.fid != fid);
    }

    /// Sends the accesses answered in `dir` (after its creates: the caller sent those),
    /// as the files' owners (the only readers answered here). Best effort: what the MDT
    /// refuses or does not answer is logged and dropped.
    pub(super) fn send_accessed(&self, dir: Fid) {
        let accessed: Vec<(BatchAccess, (u32, u32))> = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&dir) else {
                return;
            };
            if d.accessed.is_empty() {
                return;
            }
            // Reads of files whose creates were answered since the caller sent them wait
            // for the next round (the MDT has no such file yet).
            let (later, now): (Vec<BatchAccess>, Vec<BatchAccess>) =
                std::mem::take(&mut d.accessed)
                    .into_iter()
                    .partition(|a| d.answered.contains_key(&a.fid));
            d.accessed = later;
            now.into_iter()
                .filter_map(|a| {
                    let attr = &d.kept.get(&a.fid)?.attr;
                    Some((a, (attr.uid, attr.gid)))
                })
                .collect()
        };
        if accessed.is_empty() {
            return;
        }
        let Ok(mdc) = self.mdc(dir.mdt_index()) else {
            return;
        };
        let mut by_owner: Vec<((u32, u32), Vec<BatchAccess>)> = Vec::new();
        for (a, o) in accessed {
            match by_owner.iter_mut().find(|(k, _)| *k == o) {
                Some((_, v)) => v.push(a),
                None => by_owner.push((o, vec![a])),
            }
        }
        for ((uid, gid), items) in by_owner {
            for chunk in items.chunks(ACCESS_BATCH_ITEMS_MAX) {
                let op = MdsOp::AccessBatch {
                    items: chunk.to_vec(),
                };
                let owner = nacre_types::cred::Cred::new(uid, gid, Vec::new());
                if let Err(e) = nacre_types::cred::with(owner, || mdc.call_own(op)) {
                    tracing::warn!(
                        "{} accesses of files of {dir} not recorded: {e}",
                        chunk.len()
                    );
                }
            }
        }
    }
}

/// The directory whose delegation `fid` was made (or answered) under, while that delegation
/// is held and not going.
fn held_dir_of<'a>(
    dirs: &'a mut std::collections::HashMap<Fid, super::Dir>,
    fid: Fid,
    mdc: &crate::mdc::Mdc,
) -> Option<&'a mut super::Dir> {
    let d = dirs
        .values_mut()
        .find(|d| d.kept.contains_key(&fid) || d.answered.contains_key(&fid))?;
    (!d.closing && mdc.locks.holds(d.lock)).then_some(d)
}
