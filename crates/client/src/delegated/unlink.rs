//! Unlinks this client answers itself in a directory delegated to it: of files it
//! answered the create of under the same delegation (their name, FID and owner are known
//! here, nothing else can have changed them), sent later many per request
//! (`UnlinkBatch`) in order with the creates. What the MDT could refuse is ruled out first:
//! the caller's write and search permission on the directory and the sticky bit's rule
//! (the directory's attributes as delegated, the file's owner as answered). A file open
//! here stays open: the MDT keeps it as an orphan until its last close, as for an unlink it
//! answers itself (the FUSE mount opens a handle deferred at its create before the name
//! goes).

use super::{Covered, Item};
use crate::{Client, Result};
use nacre_types::cred::{MAY_EXEC, MAY_WRITE};
use nacre_types::{Fid, TimeSpec};
use nacre_wire::mds::{BatchUnlink, MdsOp, UNLINK_BATCH_ITEMS_MAX};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The sticky bit of a directory: only a name's owner (or the directory's) removes it.
const STICKY: u32 = 0o1000;

impl Client {
    /// Removes `name` from `parent` on the delegated path if it applies (true: answered
    /// here); false: remove it with the MDT. See the module documentation.
    pub fn unlink_delegated(&self, parent: Fid, name: &[u8]) -> Result<bool> {
        if !self.async_dirops()
            || self.delegated.held.load(Ordering::Acquire) == 0
            || self.delegated.pending.load(Ordering::Acquire) >= super::DELEGATED_PENDING_MAX
        {
            return Ok(false);
        }
        let cred = nacre_types::cred::current();
        let mdc = self.mdc(parent.mdt_index())?;
        let now = TimeSpec::now();
        let full = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&parent) else {
                return Ok(false);
            };
            if d.closing || !mdc.locks.holds(d.lock) {
                return Ok(false);
            }
            let Some(&Covered {
                fid,
                owner: Some(owner),
                ..
            }) = d.covered.get(name)
            else {
                return Ok(false);
            };
            if !cred.is_root() {
                let a = &d.attr;
                let may = nacre_types::cred::permits(
                    &cred,
                    a.perm,
                    a.uid,
                    a.gid,
                    true,
                    MAY_WRITE | MAY_EXEC,
                );
                let sticky_refuses = a.perm & STICKY != 0 && a.uid != cred.uid && owner != cred.uid;
                if !may || sticky_refuses {
                    // The MDT answers why.
                    return Ok(false);
                }
            }
            if d.cred.as_ref().is_some_and(|c| *c != cred)
                && (!d.items.is_empty() || d.in_flight > 0)
            {
                drop(dirs);
                self.flush_delegated(parent)?;
                return self.unlink_delegated(parent, name);
            }
            d.cred = Some(cred);
            d.covered.remove(name);
            self.forget_kept_in(d, fid);
            d.items.push(Item::Unlink(BatchUnlink {
                fid,
                name: name.to_vec(),
                time: now,
            }));
            d.unlinking.insert(fid);
            if let Some(a) = d.answered.get_mut(&fid) {
                a.nlink = 0;
            }
            d.since.get_or_insert_with(Instant::now);
            d.attr.mtime = now;
            d.attr.ctime = now;
            // Under the delegation's lock, as the item's queueing: a batch taken before
            // this is not kept as the directory's state after it (send.rs).
            mdc.dir_attrs
                .changed_here(parent, |a| (a.mtime, a.ctime) = (now, now));
            if self.delegated.pending.fetch_add(1, Ordering::AcqRel) == 0 {
                self.wake_delegated_sender();
            }
            d.items.len() >= UNLINK_BATCH_ITEMS_MAX
        };
        self.delegated
            .stats
            .unlinked
            .fetch_add(1, Ordering::Relaxed);
        self.complete.removed(parent, name);
        if full {
            // Answered whatever becomes of the send: what failed is kept and sent again.
            if let Err(e) = self.flush_delegated(parent) {
                tracing::warn!("sending the changes of {parent}: {e}");
            }
        }
        Ok(true)
    }

    /// The file `name` of `parent` leads to, if this client answered its create under the
    /// delegation it holds of `parent` and the kernel keeps it.
    pub fn delegated_name(&self, parent: Fid, name: &[u8]) -> Option<Fid> {
        if self.delegated.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        let dirs = self.delegated.dirs.lock();
        let c = dirs.get(&parent)?.covered.get(name)?;
        c.owner.is_some().then_some(c.fid)
    }

    /// Before `op` goes to the MDT: a name it removes, replaces or makes anew, or a file
    /// whose owner it changes, is one this client no longer unlinks itself (what it knows
    /// of it may be stale). The kernel still forgets it when the delegation goes.
    pub(super) fn stale_covered(&self, op: &MdsOp) {
        let mut names: Vec<(Fid, &[u8])> = Vec::with_capacity(2);
        match op {
            MdsOp::Rename {
                src_parent,
                src_name,
                dst_parent,
                dst_name,
                ..
            } => {
                names.push((*src_parent, src_name));
                names.push((*dst_parent, dst_name));
            }
            MdsOp::Unlink { parent, name }
            | MdsOp::Rmdir { parent, name }
            | MdsOp::Create { parent, name, .. }
            | MdsOp::Mkdir { parent, name, .. }
            | MdsOp::MkdirOn { parent, name, .. }
            | MdsOp::MkdirStriped { parent, name, .. }
            | MdsOp::Symlink { parent, name, .. }
            | MdsOp::Link { parent, name, .. } => names.push((*parent, name)),
            MdsOp::SetAttr { fid, attr } if attr.uid.is_some() => {
                for d in self.delegated.dirs.lock().values_mut() {
                    for c in d.covered.values_mut().filter(|c| c.fid == *fid) {
                        c.owner = None;
                    }
                }
            }
            _ => {}
        }
        if names.is_empty() {
            return;
        }
        let mut dirs = self.delegated.dirs.lock();
        for (parent, name) in names {
            let Some(d) = dirs.get_mut(&parent) else {
                continue;
            };
            if let Some(c) = d.covered.get_mut(name) {
                c.owner = None;
                let fid = c.fid;
                self.forget_kept_in(d, fid);
            }
        }
    }
}
