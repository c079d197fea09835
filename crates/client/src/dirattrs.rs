//! Attributes of directories kept on the client under its `UPDATE` lock on them, one table
//! per MDT. The kernel drops a directory's attributes after every create or unlink in it
//! and asks for them again before the next name there (its permission check): without this
//! table every create or unlink costs a second round trip.
//!
//! Entries come from `GETATTR` replies under the lock and from the attributes the MDT sends
//! back with this client's own name changes in the directory (`MdsAnswer::dir`). One is
//! answered from only while the very lock it was kept under is still held: another
//! client's change of the directory calls that lock back before it runs, and a handle is
//! never granted twice. This client's own changes are ordered by generations: a reply that
//! may predate another of its changes of the directory (or any change it cannot place:
//! renames, migrations, setattr, replays) is not kept.

use nacre_types::{Attr, Fid, FileKind};
use nacre_wire::mds::MdsOp;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Directories remembered at most per MDT (past it, all are forgotten at once).
pub const DIRS_MAX: usize = 16_384;

#[derive(Default)]
struct Dir {
    /// Attributes, and the lock (handle) they are kept under.
    kept: Option<(Attr, u64)>,
    /// The lock the attributes were last good under, remembered while changes run.
    handle: Option<u64>,
    /// This client's changes of the directory in flight.
    changing: u32,
    /// Set anew at each change's start and end.
    gen: u64,
}

#[derive(Default)]
struct State {
    dirs: HashMap<Fid, Dir>,
    /// Set anew by every change that may touch any directory (setattr, rename, ...).
    epoch: u64,
    next_gen: u64,
}

impl State {
    fn next(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    fn room_for(&mut self, fid: Fid) {
        if self.dirs.len() >= DIRS_MAX && !self.dirs.contains_key(&fid) {
            // Directories being changed stay (their changes' ends find them).
            self.dirs.retain(|_, d| d.changing > 0);
        }
    }
}

/// Where a read of a directory's attributes stands among this client's changes: taken
/// when it is sent ([`DirAttrs::snapshot`]).
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    gen: Option<u64>,
    epoch: u64,
}

/// How a request changes directories ([`DirAttrs::classify`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// None (a read, an open or close).
    None,
    /// A name in this directory (the MDT answers with its attributes after the change).
    Names(Fid),
    /// Maybe any directory's attributes, in ways the reply does not tell.
    Any,
}

/// See the module notes.
#[derive(Default)]
pub struct DirAttrs {
    state: Mutex<State>,
    /// Reads answered from the table.
    pub hits: AtomicU64,
}

impl DirAttrs {
    /// How `op` changes directories.
    pub fn classify(op: &MdsOp) -> Change {
        if let Some(dir) = op.names_changed_in() {
            return Change::Names(dir);
        }
        match op {
            MdsOp::Close { .. } | MdsOp::GrantFids { .. } => Change::None,
            // A replayed change, or a lock taken back by a restarted MDT whose other
            // changes may be lost: nothing kept can be placed any more.
            MdsOp::Replay { .. } | MdsOp::LockReplay { .. } => Change::Any,
            op if op.is_modifying() => Change::Any,
            _ => Change::None,
        }
    }

    /// The kept attributes of directory `fid`, if `held` says the lock they were kept
    /// under is still held.
    pub fn get(&self, fid: Fid, held: impl Fn(u64) -> bool) -> Option<Attr> {
        let (attr, handle) = self.state.lock().dirs.get(&fid)?.kept.clone()?;
        if !held(handle) {
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(attr)
    }

    /// Taken before a read of `fid`'s attributes is sent.
    pub fn snapshot(&self, fid: Fid) -> Snapshot {
        let s = self.state.lock();
        Snapshot {
            gen: s.dirs.get(&fid).map(|d| d.gen),
            epoch: s.epoch,
        }
    }

    /// A read of `attr` sent at `snap` came back under lock `handle`: kept if it is a
    /// directory's and no change of this client may have come between.
    pub fn put_read(&self, snap: Snapshot, attr: Attr, handle: u64) {
        if attr.kind != FileKind::Directory {
            return;
        }
        let mut s = self.state.lock();
        if s.epoch != snap.epoch {
            return;
        }
        let fid = attr.fid;
        match (s.dirs.get_mut(&fid), snap.gen) {
            (Some(d), Some(g)) if d.gen == g && d.changing == 0 => {
                d.kept = Some((attr, handle));
                d.handle = Some(handle);
            }
            (None, None) => {
                s.room_for(fid);
                let gen = s.next();
                s.dirs.insert(
                    fid,
                    Dir {
                        kept: Some((attr, handle)),
                        handle: Some(handle),
                        changing: 0,
                        gen,
                    },
                );
            }
            _ => {}
        }
    }

    /// This client changed names in `fid` without the MDT (a create, mkdir or unlink it
    /// answered itself under a delegation, which the MDT will make as answered): what is
    /// kept of its attributes gets the change (`change`), and a read sent before this is
    /// not kept.
    pub fn changed_here(&self, fid: Fid, change: impl FnOnce(&mut Attr)) {
        let mut s = self.state.lock();
        let next = s.next();
        if let Some(d) = s.dirs.get_mut(&fid) {
            d.gen = next;
            if let Some((attr, _)) = d.kept.as_mut() {
                change(attr);
            }
        }
    }

    /// This client starts a request that changes directories as `change` says: what is
    /// kept of them is no longer good. Returns the generation to end it with.
    pub fn change_start(&self, change: Change) -> u64 {
        // Reads (most requests) touch nothing here.
        if change == Change::None {
            return 0;
        }
        let mut s = self.state.lock();
        let gen = s.next();
        match change {
            Change::None => {}
            Change::Names(fid) => {
                s.room_for(fid);
                let d = s.dirs.entry(fid).or_default();
                d.kept = None;
                d.changing += 1;
                d.gen = gen;
            }
            Change::Any => {
                s.epoch = gen;
                for d in s.dirs.values_mut() {
                    d.kept = None;
                    d.handle = None;
                    d.gen = gen;
                }
            }
        }
        gen
    }

    /// The request started at `gen` is answered, with the directory's attributes after it
    /// if the MDT sent them (`after`): they are kept if no other change of the directory by
    /// this client overlapped it and the lock the directory's attributes were last good
    /// under is still held (`held`; another client's change would have called it back).
    pub fn change_done(
        &self,
        change: Change,
        gen: u64,
        after: Option<Attr>,
        held: impl Fn(u64) -> bool,
    ) {
        let Change::Names(fid) = change else {
            return;
        };
        let mut s = self.state.lock();
        let next = s.next();
        let Some(d) = s.dirs.get_mut(&fid) else {
            return;
        };
        d.changing = d.changing.saturating_sub(1);
        let alone = d.gen == gen;
        d.gen = next;
        if let (true, 0, Some(a), Some(h)) = (alone, d.changing, after, d.handle) {
            if a.fid == fid && a.kind == FileKind::Directory && held(h) {
                d.kept = Some((a, h));
                return;
            }
        }
        if !alone {
            // Which of the overlapping answers is the latest is not known.
            d.handle = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::TimeSpec;

    fn dir(n: u32, nlink: u32) -> Attr {
        let t = TimeSpec {
            sec: i64::from(nlink),
            nsec: 0,
        };
        Attr {
            fid: Fid::new(0x2_0000_0400, n),
            kind: FileKind::Directory,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink,
            size: 4096,
            blocks: 8,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
            project: 0,
            proj_inherit: false,
        }
    }

    #[test]
    fn kept_while_the_lock_is_held_and_changed_by_own_changes_only_in_order() {
        let t = DirAttrs::default();
        let d = dir(1, 2);
        let held = |h: u64| h == 7;
        // A read under lock 7 is kept, and answered from while 7 is held.
        let snap = t.snapshot(d.fid);
        t.put_read(snap, d.clone(), 7);
        assert_eq!(t.get(d.fid, held), Some(d.clone()));
        assert_eq!(t.get(d.fid, |_| false), None, "lock gone: not answered");
        // An own create: nothing is answered while it runs; its reply's attributes after.
        let c = Change::Names(d.fid);
        let g = t.change_start(c);
        assert_eq!(t.get(d.fid, held), None);
        t.change_done(c, g, Some(dir(1, 3)), held);
        assert_eq!(t.get(d.fid, held).map(|a| a.nlink), Some(3));
        // Two own changes overlap: neither reply is kept, nor a read sent meanwhile.
        let snap = t.snapshot(d.fid);
        let (g1, g2) = (t.change_start(c), t.change_start(c));
        t.change_done(c, g2, Some(dir(1, 5)), held);
        t.change_done(c, g1, Some(dir(1, 4)), held);
        t.put_read(snap, dir(1, 4), 7);
        assert_eq!(t.get(d.fid, held), None);
        // A read sent after them is kept again.
        let snap = t.snapshot(d.fid);
        t.put_read(snap, dir(1, 5), 7);
        assert_eq!(t.get(d.fid, held).map(|a| a.nlink), Some(5));
        // A change the table cannot place (a rename) drops everything, and a read sent
        // before it is not kept.
        let snap = t.snapshot(d.fid);
        t.change_start(Change::Any);
        assert_eq!(t.get(d.fid, held), None);
        t.put_read(snap, dir(1, 5), 7);
        assert_eq!(t.get(d.fid, held), None);
        // Files are never kept.
        let mut f = dir(2, 1);
        f.kind = FileKind::Regular;
        let snap = t.snapshot(f.fid);
        t.put_read(snap, f.clone(), 7);
        assert_eq!(t.get(f.fid, held), None);
    }

    #[test]
    fn a_reply_is_kept_only_under_the_lock_held_before_the_change() {
        let t = DirAttrs::default();
        let d = dir(3, 2);
        let c = Change::Names(d.fid);
        // No attributes known under a lock before the change: its reply is not kept.
        let g = t.change_start(c);
        t.change_done(c, g, Some(dir(3, 3)), |_| true);
        assert_eq!(t.get(d.fid, |_| true), None);
        // Known under lock 1, which went meanwhile: not kept either.
        let snap = t.snapshot(d.fid);
        t.put_read(snap, dir(3, 3), 1);
        let g = t.change_start(c);
        t.change_done(c, g, Some(dir(3, 4)), |h| h == 2);
        assert_eq!(t.get(d.fid, |_| true), None);
    }

    #[test]
    fn the_table_is_bounded() {
        let t = DirAttrs::default();
        for n in 0..(DIRS_MAX as u32 + 10) {
            let snap = t.snapshot(dir(n, 2).fid);
            t.put_read(snap, dir(n, 2), 1);
        }
        assert!(t.state.lock().dirs.len() <= DIRS_MAX);
    }
}
