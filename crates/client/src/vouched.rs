//! Attributes of regular files this client made and wrote, kept under its `UPDATE` lock on
//! them, so a stat after the writes costs no request (docs/plans/round-trips.md, step R4).
//!
//! While this client holds a file's `UPDATE` lock, no other client writes the file (the MDT
//! grants that bit only while no other client holds it open for writing, and calls it back
//! when one opens it so) and no other client changes its attributes (every change calls
//! the lock back first). So the file is what this client made of it: for a file it created
//! empty, each object's size and blocks are what its OST said just after this client's last
//! write to it (`OssReply::Written::object`, the largest seen: writes only grow them), and
//! its other attributes are the MDT's at the create, but for the modification and change
//! times a close of a handle that wrote moved ([`Vouched::touched`]; until that close is
//! answered, crate::written shows the last write's).
//!
//! An entry answers only while all of these hold, else the MDT is asked as before:
//! - the lock it is kept under is still held (a handle is never granted twice);
//! - no handle of the file is open for writing here (data in flight or kept);
//! - no change this client sent since the create can have touched the file: every request
//!   but creates, opens, closes and reads counts as one (unlinks, renames, links,
//!   setattrs, xattrs, layout changes: [`Vouched::change_start`], which drops every kept
//!   file, and [`Vouched::change_end`] around each);
//! - no truncate, allocation or punch of the file ran here since (each drops the entry), and
//!   every write's reply said its object's size.
//!
//! A file whose layout starts with a component on the MDT (data on the MDT, crate::dom) is
//! kept while none of its OST objects is instantiated: all its bytes are on the MDT, and its
//! size and blocks are what the MDT said after this client's last write there
//! (`MdsOp::DomWrite` and `DomAppend` answer the file's attributes; [`Vouched::dom_wrote`]).
//! Such a file may be kept with bytes already (a create that carried them,
//! crate::delegated::data: the MDT's answer counts them) if no write of bytes on the MDT
//! was sent since the create: one of the file's own answered before the create's could
//! be older than it. Instantiating an object is a layout change, which drops every kept
//! file.

use nacre_types::{Attr, Fid, FileKind, Layout, ObjectId, TimeSpec};
use nacre_wire::mds::MdsOp;
use parking_lot::Mutex;
use std::collections::HashMap;

/// True if `op` may change an existing file's attributes: every change but those that
/// make new inodes and closes (whose reply says what they changed).
pub fn touches_files(op: &MdsOp) -> bool {
    op.is_modifying()
        && !matches!(
            op,
            MdsOp::Create { .. }
                | MdsOp::Mkdir { .. }
                | MdsOp::Symlink { .. }
                | MdsOp::CreateBatch { .. }
                | MdsOp::GrantFids { .. }
                | MdsOp::Close { .. }
                // Change only their own file, which follows their reply
                // (Vouched::dom_wrote) or is dropped.
                | MdsOp::DomWrite { .. }
                | MdsOp::DomAppend { .. }
        )
}

/// Files kept at most (about 200 bytes each with a one-object layout); past it, new ones
/// are not kept (their stats ask the MDT).
pub const VOUCHED_FILES_MAX: usize = 1 << 20;

struct Entry {
    /// The `UPDATE` lock the entry is kept under.
    handle: u64,
    layout: Layout,
    /// (size, blocks) per object of `layout`, in its order; None once a write's reply did
    /// not say.
    objects: Vec<Option<(u64, u64)>>,
    /// (size, blocks) of the bytes on the MDT, for a layout with a component there.
    dom: Option<(u64, u64)>,
    /// The file's (size, blocks) from `objects` and `dom`, worked out at each change of
    /// them (None: one object's is not known): what an answer reads, so a listing's
    /// answer per entry touches neither the layout nor the objects.
    sized: Option<(u64, u64)>,
    attr: Attr,
}

impl Entry {
    /// Works `sized` out again after `objects` or `dom` changed.
    fn resize(&mut self) {
        self.sized = None;
        if self.objects.iter().any(Option::is_none) {
            return;
        }
        let objects = self.objects.iter().enumerate();
        let objects = objects.filter_map(|(i, o)| o.map(|(size, blocks)| (i, size, blocks)));
        let Some((mut size, mut blocks)) = self.layout.file_size_from_objects(objects) else {
            return;
        };
        if let Some((dom_size, dom_blocks)) = self.dom {
            size = size.max(dom_size);
            blocks = blocks.saturating_add(dom_blocks);
        }
        self.sized = Some((size, blocks));
    }
}

#[derive(Default)]
struct State {
    files: HashMap<Fid, Entry>,
    /// Bumped at the start and at the end of every change that may touch a file's
    /// attributes (a create whose reply crosses one is not kept).
    epoch: u64,
    /// Such changes in flight.
    changing: u32,
    /// Writes of bytes on the MDT sent (`DomWrite`, `DomAppend`), any file.
    dom_writes: u64,
}

/// The files whose attributes this client can vouch for.
#[derive(Default)]
pub struct Vouched {
    state: Mutex<State>,
}

/// The change count (None while one is in flight) and the count of writes of bytes on the
/// MDT when a request that brings attributes was sent.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot(Option<u64>, u64);

impl Vouched {
    /// Where changes stand now (taken before a request whose reply may be kept).
    pub fn snapshot(&self) -> Snapshot {
        let s = self.state.lock();
        Snapshot((s.changing == 0).then_some(s.epoch), s.dom_writes)
    }

    /// A change that may touch files' attributes is sent: no kept file answers again (a
    /// file's attributes are the create's, which nothing brings up to date).
    pub fn change_start(&self) {
        let mut s = self.state.lock();
        s.epoch += 1;
        s.changing += 1;
        s.files.clear();
    }

    /// A write of bytes on the MDT (`DomWrite`, `DomAppend`) is sent; its answer comes to
    /// [`Vouched::dom_wrote`].
    pub fn dom_writing(&self) {
        self.state.lock().dom_writes += 1;
    }

    /// That change is answered (or failed).
    pub fn change_end(&self) {
        let mut s = self.state.lock();
        s.epoch += 1;
        s.changing = s.changing.saturating_sub(1);
    }

    /// This client created `attr`'s file (a regular file, exactly empty, or with bytes
    /// only on the MDT that its create carried) with `layout`, under `UPDATE` lock
    /// `handle`, with the create sent at `snap`.
    pub fn created(&self, attr: &Attr, layout: &Layout, handle: u64, snap: Snapshot) {
        // A file with bytes on the MDT is kept only while they are all there.
        let on_mdt = layout.dom_end() > 0;
        let empty = attr.size == 0 && attr.blocks == 0;
        if attr.kind != FileKind::Regular
            || (on_mdt && layout.object_count() > 0)
            || !(empty || on_mdt)
        {
            return;
        }
        let mut s = self.state.lock();
        if snap.0 != Some(s.epoch) || s.changing != 0 {
            return;
        }
        // Bytes its create carried: no answer of a write there since can be newer.
        if !empty && snap.1 != s.dom_writes {
            return;
        }
        if s.files.len() >= VOUCHED_FILES_MAX && !s.files.contains_key(&attr.fid) {
            return;
        }
        let mut entry = Entry {
            handle,
            objects: vec![Some((0, 0)); layout.object_count()],
            dom: on_mdt.then_some((attr.size, attr.blocks)),
            sized: None,
            layout: layout.clone(),
            attr: attr.clone(),
        };
        entry.resize();
        s.files.insert(attr.fid, entry);
    }

    /// An OST said object `object` on `ost` of file `fid` is `after` (size, blocks) just after
    /// this client's write to it (None: it did not say).
    pub fn wrote(&self, fid: Fid, ost: u32, object: ObjectId, after: Option<(u64, u64)>) {
        let mut s = self.state.lock();
        let Some(e) = s.files.get_mut(&fid) else {
            return;
        };
        let at = e
            .layout
            .objects()
            .position(|o| o.ost == ost && o.object == object);
        match (at, after) {
            (Some(i), after) => {
                e.objects[i] = after.and_then(|(size, blocks)| {
                    e.objects[i].map(|(s0, b0)| (s0.max(size), b0.max(blocks)))
                });
                e.resize();
            }
            // An object not in the layout kept: the layout changed.
            (None, _) => {
                s.files.remove(&fid);
            }
        }
    }

    /// The MDT answered this client's write of bytes of `fid` on the MDT with `attr`, the
    /// file's attributes after it (None: the write failed or the answer was not
    /// attributes; the file is not vouched for any more). Writes there only grow the
    /// file, so of answers in any order the largest stand.
    pub fn dom_wrote(&self, fid: Fid, attr: Option<&Attr>) {
        let mut s = self.state.lock();
        let Some(e) = s.files.get_mut(&fid) else {
            return;
        };
        match (e.dom.as_mut(), attr) {
            (Some(dom), Some(a)) if a.fid == fid => {
                *dom = (dom.0.max(a.size), dom.1.max(a.blocks));
                e.attr.mtime = e.attr.mtime.max(a.mtime);
                e.attr.ctime = e.attr.ctime.max(a.ctime);
                e.resize();
            }
            _ => {
                s.files.remove(&fid);
            }
        }
    }

    /// The close of a handle of `fid` that wrote was answered: the MDT moved the file's
    /// modification and change times to these.
    pub fn touched(&self, fid: Fid, mtime: TimeSpec, ctime: TimeSpec) {
        if let Some(e) = self.state.lock().files.get_mut(&fid) {
            e.attr.mtime = e.attr.mtime.max(mtime);
            e.attr.ctime = e.attr.ctime.max(ctime);
        }
    }

    /// `fid`'s data changed other than by a write (a truncate, an allocation, a punch):
    /// not vouched for any more.
    pub fn forget(&self, fid: Fid) {
        self.state.lock().files.remove(&fid);
    }

    /// `fid`'s attributes, if this client can vouch for them: `held` says whether a lock
    /// is still held, `writing` whether a handle of the file is open for writing here.
    pub fn answer(&self, fid: Fid, held: impl Fn(u64) -> bool, writing: bool) -> Option<Attr> {
        self.answer_held(fid, held, writing).map(|(attr, _)| attr)
    }

    /// [`Vouched::answer`], with the handle of the `UPDATE` lock the answer holds under:
    /// while it is held, the answer stands but for this client's own writes and changes.
    pub fn answer_held(
        &self,
        fid: Fid,
        held: impl Fn(u64) -> bool,
        writing: bool,
    ) -> Option<(Attr, u64)> {
        if writing {
            return None;
        }
        // Kept files are all from after the last change (change_start drops them).
        let mut s = self.state.lock();
        let e = s.files.get(&fid)?;
        if !held(e.handle) {
            s.files.remove(&fid);
            return None;
        }
        let (size, blocks) = e.sized?;
        let mut attr = e.attr.clone();
        attr.size = size;
        attr.blocks = blocks;
        Some((attr, e.handle))
    }

    /// Files kept.
    pub fn len(&self) -> usize {
        self.state.lock().files.len()
    }

    /// True if no file is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::layout::{PoolName, StripeObject};
    use nacre_types::TimeSpec;

    fn object(n: u64) -> ObjectId {
        ObjectId { seq: 0x100, id: n }
    }

    /// Two objects of 64 KiB stripes, on OSTs 0 and 1.
    fn layout() -> Layout {
        let objects = (0..2)
            .map(|i| StripeObject {
                ost: i as u32,
                object: object(i),
            })
            .collect();
        Layout::raid0(64 << 10, objects, PoolName::NONE)
    }

    fn attr(fid: Fid) -> Attr {
        let t = TimeSpec { sec: 5, nsec: 0 };
        Attr {
            fid,
            kind: FileKind::Regular,
            perm: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
            project: 0,
            proj_inherit: false,
        }
    }

    const HANDLE: u64 = 7;

    fn held(h: u64) -> bool {
        h == HANDLE
    }

    fn made(v: &Vouched, fid: Fid) {
        let snap = v.snapshot();
        v.created(&attr(fid), &layout(), HANDLE, snap);
    }

    #[test]
    fn sizes_come_from_every_objects_last_write() {
        let v = Vouched::default();
        let f = Fid::new(0x2_0000_0400, 1);
        made(&v, f);
        assert_eq!(v.answer(f, held, false).map(|a| a.size), Some(0));
        // 100 KiB: the first stripe whole on object 0, 36 KiB on object 1.
        v.wrote(f, 1, object(1), Some((36 << 10, 72)));
        v.wrote(f, 0, object(0), Some((64 << 10, 128)));
        // An older reply of object 0 coming last changes nothing.
        v.wrote(f, 0, object(0), Some((4096, 8)));
        let a = v.answer(f, held, false).unwrap();
        assert_eq!((a.size, a.blocks), (100 << 10, 200));
        assert_eq!(v.answer(f, held, true), None, "a handle open for writing");
        assert_eq!(v.answer(f, |_| false, false), None, "the lock went");
        assert!(v.is_empty(), "dropped with its lock");
    }

    /// 64 KiB on the MDT, then one object not instantiated yet.
    fn dom_layout() -> Layout {
        let mut l = Layout::raid0(64 << 10, Vec::new(), PoolName::NONE);
        l.components[0].start = 64 << 10;
        l.components[0].stripe_count = 1;
        l.components
            .insert(0, nacre_types::layout::Component::on_mdt(64 << 10));
        l
    }

    #[test]
    fn bytes_on_the_mdt_come_from_the_mdts_answers() {
        let v = Vouched::default();
        let f = Fid::new(0x2_0000_0400, 6);
        v.created(&attr(f), &dom_layout(), HANDLE, v.snapshot());
        assert_eq!(v.answer(f, held, false).map(|a| a.size), Some(0));
        let mut after = attr(f);
        after.size = 3901;
        after.blocks = 8;
        after.mtime.sec += 3;
        after.ctime.sec += 3;
        // A write of another file changes nothing here; an older answer coming last
        // neither.
        let mut other = after.clone();
        other.fid = Fid::new(0x2_0000_0400, 7);
        other.size = 9;
        v.dom_wrote(other.fid, Some(&other));
        v.dom_wrote(f, Some(&after));
        v.dom_wrote(f, Some(&attr(f)));
        let a = v.answer(f, held, false).unwrap();
        assert_eq!((a.size, a.blocks, a.mtime), (3901, 8, after.mtime));
        // An answer for another file than asked, or a failed write: not vouched for.
        v.dom_wrote(f, Some(&other));
        assert_eq!(v.answer(f, held, false), None);
        v.created(&attr(f), &dom_layout(), HANDLE, v.snapshot());
        v.dom_wrote(f, None);
        assert_eq!(v.answer(f, held, false), None);
        // A write reaching an object: the layout kept has none.
        v.created(&attr(f), &dom_layout(), HANDLE, v.snapshot());
        v.wrote(f, 0, object(0), Some((1, 8)));
        assert_eq!(v.answer(f, held, false), None);
        // Bytes on the MDT of a file with objects are not followed: not kept.
        let mut with_objects = dom_layout();
        with_objects.components[1].objects = vec![StripeObject {
            ost: 0,
            object: object(0),
        }];
        v.created(&attr(f), &with_objects, HANDLE, v.snapshot());
        assert_eq!(v.answer(f, held, false), None);
        // Made with bytes its create carried: kept, unless a write there was sent since.
        let snap = v.snapshot();
        v.created(&after, &dom_layout(), HANDLE, snap);
        assert_eq!(v.answer(f, held, false).map(|a| a.size), Some(3901));
        v.forget(f);
        let snap = v.snapshot();
        v.dom_writing();
        v.created(&after, &dom_layout(), HANDLE, snap);
        assert_eq!(
            v.answer(f, held, false),
            None,
            "a write there crossed the create"
        );
        // Not with bytes, without a component on the MDT.
        v.created(&after, &layout(), HANDLE, v.snapshot());
        assert_eq!(v.answer(f, held, false), None);
        // A file without a component on the MDT whose bytes are said to be there: dropped.
        made(&v, f);
        v.dom_wrote(f, Some(&after));
        assert_eq!(v.answer(f, held, false), None);
    }

    #[test]
    fn a_written_close_moves_the_times() {
        let v = Vouched::default();
        let f = Fid::new(0x2_0000_0400, 5);
        made(&v, f);
        let before = v.answer(f, held, false).unwrap();
        let later = TimeSpec {
            sec: before.mtime.sec + 5,
            nsec: 0,
        };
        v.touched(f, later, later);
        let a = v.answer(f, held, false).unwrap();
        assert_eq!((a.mtime, a.ctime), (later, later));
        // An older answer arriving last moves nothing back.
        v.touched(f, before.mtime, before.ctime);
        assert_eq!(v.answer(f, held, false).unwrap().mtime, later);
    }

    #[test]
    fn a_change_stops_answers() {
        let v = Vouched::default();
        let f = Fid::new(0x2_0000_0400, 2);
        made(&v, f);
        v.wrote(f, 0, object(0), Some((10, 8)));
        assert_eq!(v.answer(f, held, false).map(|a| a.size), Some(10));
        v.change_start();
        assert_eq!(v.answer(f, held, false), None, "a change in flight");
        v.change_end();
        assert_eq!(v.answer(f, held, false), None, "a change since");
    }

    #[test]
    fn what_cannot_be_followed_is_not_answered() {
        let v = Vouched::default();
        let f = Fid::new(0x2_0000_0400, 3);
        made(&v, f);
        v.wrote(f, 0, object(0), None);
        assert_eq!(v.answer(f, held, false), None, "a reply without the size");
        made(&v, f);
        v.wrote(f, 0, object(0), Some((u64::MAX, 8)));
        assert_eq!(v.answer(f, held, false), None, "an object beyond any file");
        made(&v, f);
        v.wrote(f, 3, object(9), Some((1, 8)));
        assert_eq!(
            v.answer(f, held, false),
            None,
            "an object not in the layout"
        );
        made(&v, f);
        v.forget(f);
        assert_eq!(v.answer(f, held, false), None, "a truncate");
        // Only empty regular files without bytes on the MDT, made with no change crossing.
        let g = Fid::new(0x2_0000_0400, 4);
        let mut a = attr(g);
        a.size = 1;
        v.created(&a, &layout(), HANDLE, v.snapshot());
        let snap = v.snapshot();
        v.change_start();
        v.created(&attr(g), &layout(), HANDLE, snap);
        v.change_end();
        assert_eq!(v.answer(g, held, false), None);
    }
}
