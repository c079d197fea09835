//! Namespace operations: lookups and attributes (with the glimpse of a file's objects),
//! creates, directories, links, renames, attribute changes, listings, xattrs, layouts.

use crate::*;
use nacre_types::dirstripe::{DirDefault, DirHash};
use nacre_types::{Attr, Fid, FileKind, Layout, SetAttr, Status};
use nacre_wire::mds::{LayoutInfo, MdsOp, MdsReply};

/// What a lookup found.
pub(crate) enum Looked {
    /// An inode: attributes, layout, whether the size is exact, what may be cached.
    Entry(Attr, Option<Layout>, bool, Cached),
    /// No such name; `covered`: a lock on the directory covers the absence.
    Absent { covered: bool },
}

impl Client {
    pub(crate) fn entry(&self, op: MdsOp) -> Result<(Attr, Option<Layout>)> {
        self.exact_entry(op).map(|(attr, layout, _)| (attr, layout))
    }

    /// [`Client::entry`], and whether the MDT gave a regular file's size exactly.
    pub(crate) fn exact_entry(&self, op: MdsOp) -> Result<(Attr, Option<Layout>, bool)> {
        self.cached_entry(op, 0, None)
            .map(|(attr, layout, exact, _)| (attr, layout, exact))
    }

    /// [`Client::exact_entry`] asking for `bits` of lock on the inode, and what the kernel
    /// may cache of it; `name` is the entry (parent as the kernel knows it, name) the
    /// kernel will cache under the lock.
    pub(crate) fn cached_entry(
        &self,
        op: MdsOp,
        bits: u8,
        name: Option<(Fid, &[u8])>,
    ) -> Result<(Attr, Option<Layout>, bool, Cached)> {
        match self.entry_or_absent(op, bits, name)? {
            Looked::Entry(attr, layout, exact, cached) => Ok((attr, layout, exact, cached)),
            Looked::Absent { .. } => Err(Status::NoEnt.into()),
        }
    }

    /// [`Client::cached_entry`], telling a name that does not exist (a lookup that asked
    /// for UPDATE may be answered so, under the directory's lock) apart.
    fn entry_or_absent(
        &self,
        mut op: MdsOp,
        bits: u8,
        name: Option<(Fid, &[u8])>,
    ) -> Result<Looked> {
        use nacre_ldlm::msg::{LOOKUP, UPDATE};
        self.to_shards(&mut op)?;
        let mut mdc = self.mdc(op.key_fid().map_or(0, Fid::mdt_index))?;
        let (mut reply, mut lock) = mdc.call_with(op, bits)?;
        if let MdsReply::NoEntry = reply {
            let covered = match (lock, name) {
                (Some(l), Some((parent, n))) if l.bits & UPDATE != 0 => {
                    mdc.locks.cover_absent(l.fid, parent, n)
                }
                _ => false,
            };
            return Ok(Looked::Absent { covered });
        }
        // An open's entry with the bytes of the file on the MDT, under the DOM lock that
        // came with it (crate::dom).
        if let MdsReply::OpenData {
            attr,
            layout,
            size_exact,
            data,
        } = reply
        {
            let dom = nacre_ldlm::msg::DOM;
            if let Some(l) = lock.filter(|l| l.bits & dom != 0 && l.fid == attr.fid) {
                self.dom_opened.put(attr.fid, l.handle, data);
            }
            reply = MdsReply::Entry {
                attr,
                layout,
                size_exact,
            };
        }
        // An entry for an inode of another MDT (a remote directory): ask that MDT.
        if let MdsReply::Remote { fid } = reply {
            mdc = self.mdc(fid.mdt_index())?;
            (reply, lock) = mdc.call_with(MdsOp::GetAttr { fid }, bits)?;
        }
        let MdsReply::Entry {
            attr,
            layout,
            size_exact: exact,
        } = reply
        else {
            return Err(Status::Proto.into());
        };
        if let (FileKind::Regular, Some(l)) = (attr.kind, &layout) {
            self.remember_layout(attr.fid, l, exact);
        }
        let cached = match lock.filter(|l| l.fid == attr.fid) {
            None => Cached::default(),
            Some(l) => Cached {
                entry: l.bits & LOOKUP != 0
                    && name.is_some_and(|(p, n)| mdc.locks.cover_name(attr.fid, p, n)),
                attr: l.bits & UPDATE != 0 && mdc.locks.covers(attr.fid, UPDATE),
            },
        };
        Ok(Looked::Entry(attr, layout, exact, cached))
    }

    /// Fills in size and blocks of a regular file from its objects, unless the MDT gave them
    /// `exact`.
    pub(crate) fn with_glimpse(
        &self,
        mut attr: Attr,
        layout: Option<&Layout>,
        exact: bool,
    ) -> Result<Attr> {
        if exact {
            return Ok(attr);
        }
        if let (FileKind::Regular, Some(layout)) = (attr.kind, layout) {
            // Writes this client keeps count too (read first: one flushed meanwhile is in
            // the objects' sizes).
            let kept = self.writeback.size(layout).unwrap_or(0);
            glimpsed_size(&mut attr, layout, osc::glimpse(self, layout)?, kept);
            self.written.cover(&mut attr);
        }
        Ok(attr)
    }

    /// Looks up `name` in `parent`. With `glimpse`, a regular file's size and blocks come from
    /// its OSTs; without, they are the MDT's hint (cheaper, for callers that revalidate the
    /// attributes before trusting a size, as the kernel does with a zero attribute timeout).
    pub fn lookup(&self, parent: Fid, name: &[u8], glimpse: bool) -> Result<Attr> {
        let (attr, layout, exact) = self.exact_entry(MdsOp::Lookup {
            parent,
            name: name.to_vec(),
        })?;
        if glimpse {
            return self.with_glimpse(attr, layout.as_ref(), exact);
        }
        Ok(attr)
    }

    /// [`Client::lookup`] with the OSTs' size, under a lock where the MDT grants one: says
    /// what the kernel may cache of the answer.
    /// A name that does not exist is `None`, with `Cached::entry` true if the directory's
    /// lock covers its absence (the kernel may cache the negative entry).
    pub fn lookup_cached(&self, parent: Fid, name: &[u8]) -> Result<(Option<Attr>, Cached)> {
        use nacre_ldlm::msg::{LAYOUT, LOOKUP, UPDATE};
        // A name no directory can hold is refused as the MDT refuses it, before a cache
        // can call it absent (ENOENT where POSIX says ENAMETOOLONG).
        if name.len() > nacre_types::limits::NAME_BYTES_MAX {
            return Err(Status::NameTooLong.into());
        }
        if self.complete.absent(parent, name) {
            return Ok((None, Cached::default()));
        }
        let op = MdsOp::Lookup {
            parent,
            name: name.to_vec(),
        };
        match self.entry_or_absent(op, LOOKUP | UPDATE | LAYOUT, Some((parent, name)))? {
            Looked::Entry(attr, layout, exact, cached) => Ok((
                Some(self.with_glimpse(attr, layout.as_ref(), exact)?),
                cached,
            )),
            Looked::Absent { covered } => Ok((
                None,
                Cached {
                    entry: covered,
                    attr: false,
                },
            )),
        }
    }

    /// [`Client::getattr`] under an `UPDATE` lock where the MDT grants one: says whether
    /// the kernel may cache the attributes.
    pub fn getattr_cached(&self, fid: Fid) -> Result<(Attr, bool)> {
        self.getattr_with(fid, nacre_ldlm::msg::UPDATE)
    }

    /// Current attributes (regular-file size from the OSTs). For a file whose layout was seen
    /// before, its objects are glimpsed while the MDT answers (one round trip of waiting
    /// instead of two); the MDT's answer says whether that layout is still the file's, and if
    /// it is not the objects are glimpsed again.
    pub fn getattr(&self, fid: Fid) -> Result<Attr> {
        self.getattr_with(fid, 0).map(|(attr, _)| attr)
    }

    pub(crate) fn getattr_with(&self, fid: Fid, bits: u8) -> Result<(Attr, bool)> {
        // A file whose create this client answered and has not sent (crate::delegated).
        // Or one it made so and keeps (crate::delegated, kept.rs).
        if let Some(mut kept) = self.kept_attr(fid) {
            self.written.cover(&mut kept.0);
            return Ok(kept);
        }
        // A directory's attributes kept under its UPDATE lock (crate::dirattrs), or a file's
        // this client made and wrote (crate::vouched).
        if bits & nacre_ldlm::msg::UPDATE != 0 {
            let mdc = self.mdc(fid.mdt_index())?;
            if let Some(attr) = mdc.kept_dir_attr(fid) {
                return Ok((attr, true));
            }
            let held = |h| mdc.locks.holds(h);
            if let Some(mut attr) = mdc.vouched.answer(fid, held, mdc.holds_writer(fid)) {
                // Its close may not be answered yet (crate::written).
                self.written.cover(&mut attr);
                return Ok((attr, true));
            }
        }
        // The MDT gave the size exactly last time: it likely will again, glimpse only if not.
        let seen = self
            .layouts
            .lock()
            .get(&fid)
            .filter(|(_, exact)| !exact)
            .map(|(l, _)| l.clone());
        let kept = seen.as_ref().and_then(|l| self.writeback.size(l));
        let early = seen.as_ref().and_then(|l| osc::start_glimpse(self, l).ok());
        let (mut attr, layout, exact, cached) =
            self.cached_entry(MdsOp::GetAttr { fid }, bits, None)?;
        if let (FileKind::Regular, Some(now), Some(seen), Some(job), false) =
            (attr.kind, layout.as_ref(), seen.as_ref(), early, exact)
        {
            if now == seen {
                glimpsed_size(&mut attr, now, job.finish(now)?, kept.unwrap_or(0));
                self.written.cover(&mut attr);
                return Ok((attr, cached.attr));
            }
        }
        Ok((
            self.with_glimpse(attr, layout.as_ref(), exact)?,
            cached.attr,
        ))
    }

    /// `fid`'s data changes other than through the page cache (a truncate, an allocation,
    /// a direct write, an append): its attributes are not answered here any more
    /// (crate::vouched).
    pub(crate) fn forget_vouched(&self, fid: Fid) {
        if let Ok(m) = self.mdc(fid.mdt_index()) {
            m.vouched.forget(fid);
        }
    }

    /// Remembers a regular file's layout for the next [`Client::getattr`] (a hint, checked
    /// against the MDT's answer each time; the map is emptied when it reaches
    /// [`LAYOUT_CACHE_ENTRIES_MAX`]).
    pub(crate) fn remember_layout(&self, fid: Fid, layout: &Layout, exact: bool) {
        let mut map = self.layouts.lock();
        if let Some((l, e)) = map.get_mut(&fid) {
            if l == layout {
                *e = exact;
                return;
            }
        }
        if map.len() >= LAYOUT_CACHE_ENTRIES_MAX {
            map.clear();
        }
        map.insert(fid, (layout.clone(), exact));
    }

    pub(crate) fn layout_of(&self, fid: Fid) -> Result<Layout> {
        match self.md(MdsOp::GetLayout { fid })? {
            MdsReply::Layout(LayoutInfo::File(l)) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a non-directory node; with `open`, the MDS also registers it as open (one RPC
    /// for create-and-open) and the returned handle must be closed with [`Client::close`].
    /// `access` ([`nacre_types::cred::MAY_READ`] | [`nacre_types::cred::MAY_WRITE`]) is
    /// checked if the name exists already and is opened instead.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        parent: Fid,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        exclusive: bool,
        open: bool,
        access: u8,
    ) -> Result<(Attr, OpenFile)> {
        let args = (kind, perm, uid, gid, rdev, exclusive, open, access);
        self.create_with(parent, name, args, 0)
            .map(|(attr, file, _)| (attr, file))
    }

    /// [`Client::create`] (arguments in order after `name`) under a lock on the new entry
    /// where the MDT grants one: says what the kernel may cache of it.
    #[allow(clippy::type_complexity)]
    pub fn create_cached(
        &self,
        parent: Fid,
        name: &[u8],
        args: (FileKind, u32, u32, u32, u32, bool, bool, u8),
    ) -> Result<(Attr, OpenFile, Cached)> {
        use nacre_ldlm::msg::{LAYOUT, LOOKUP, UPDATE};
        self.create_with(parent, name, args, LOOKUP | UPDATE | LAYOUT)
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn create_with(
        &self,
        parent: Fid,
        name: &[u8],
        args: (FileKind, u32, u32, u32, u32, bool, bool, u8),
        bits: u8,
    ) -> Result<(Attr, OpenFile, Cached)> {
        let (kind, perm, uid, gid, rdev, exclusive, open, access) = args;
        let op = MdsOp::Create {
            parent,
            name: name.to_vec(),
            kind,
            perm,
            uid,
            gid,
            rdev,
            exclusive,
            open,
            access,
        };
        let mdc = self.mdc(parent.mdt_index())?;
        let snap = mdc.vouched.snapshot();
        let r = self.cached_entry(op, bits, Some((parent, name)));
        let (attr, layout, exact, cached) = self.after_add(parent, name, r)?;
        // A new file, empty, under this client's UPDATE lock: its stats after the writes
        // can be answered here (crate::vouched).
        // (Not a file made on another MDT than its directory's: the snapshot is this one's.)
        let here = attr.fid.mdt_index() == parent.mdt_index();
        if let (true, true, true, true, Some(l)) = (cached.attr, exact, open, here, &layout) {
            if let Some(h) = mdc.locks.holding(attr.fid, nacre_ldlm::msg::UPDATE) {
                mdc.vouched.created(&attr, l, h, snap);
            }
        }
        let attr = if exclusive {
            attr
        } else {
            self.with_glimpse(attr, layout.as_ref(), exact)?
        };
        let file = OpenFile::with_slot(self.layout_slot(attr.fid, layout))
            .owned_by(&attr)
            .with_access(access);
        let file = self.registered(file)?;
        Ok((attr, file, cached))
    }

    /// `file` as opened in the current incarnation of this client at its MDT.
    pub(crate) fn registered(&self, mut file: OpenFile) -> Result<OpenFile> {
        let mdc = self.mdc(file.fid.mdt_index())?;
        file.incarnation = mdc.incarnation();
        mdc.note_open(file.fid, file.writable());
        Ok(file)
    }

    /// `Err(Evicted)` if `file` was opened before its MDT evicted this client: the MDT has
    /// closed it, so it must not be used (as Lustre invalidates such handles).
    pub fn check_handle(&self, file: &OpenFile) -> Result<()> {
        let target = file.fid.mdt_index();
        let mdc = self.mdcs.read().get(&target).cloned();
        match mdc {
            Some(m) if m.incarnation() != file.incarnation => Err(ClientError::Evicted { target }),
            _ => Ok(()),
        }
    }

    /// Opens `fid` for `access` ([`nacre_types::cred::MAY_READ`] |
    /// [`nacre_types::cred::MAY_WRITE`]; `O_TRUNC` wants write), which the MDT checks against
    /// the caller's credentials, and registers the opener with it.
    pub fn open(&self, fid: Fid, access: u8) -> Result<(Attr, OpenFile)> {
        let (attr, layout) = self.entry(MdsOp::Open { fid, access })?;
        let file = OpenFile::with_slot(self.layout_slot(fid, layout))
            .owned_by(&attr)
            .with_access(access);
        Ok((attr, self.registered(file)?))
    }

    /// Closes an open file (a handle voided by an eviction is already closed at the MDT).
    pub fn close(&self, file: &OpenFile) -> Result<()> {
        // Never opened at the MDT, never used for I/O (Client::undefer).
        if file.is_deferred() {
            return Ok(());
        }
        // Kept writes reach the OSTs first; what they refused is this close's error.
        let layout = file.layout();
        let flushed = self.flush_file(file.fid, layout.as_ref());
        if self.check_handle(file).is_err() {
            return flushed;
        }
        // Kept open under an OPEN lock (opencache.rs): closed when the lock goes.
        if flushed.is_ok() && self.keep_open(file) {
            return flushed;
        }
        let writer = file.access & nacre_types::cred::MAY_WRITE != 0;
        let closed = self.close_at_mdt(file);
        // Once its last writer closed a file, the MDT learns its size within moments
        // (crates/mds/src/sizes.rs), so the next getattr likely gets it exactly: it need not
        // glimpse the objects beside the MDT's answer (a glimpse that, while this client
        // holds the write locks, the OST would ask this client back about). Only a hint:
        // an answer without the exact size is glimpsed after it, and corrects the hint.
        if let (true, Ok(_), Some(layout)) = (writer, &closed, &layout) {
            self.remember_layout(file.fid, layout, true);
        }
        closed.map(|_| ()).and(flushed)
    }

    /// Tells `file`'s MDT it is closed (unless an eviction voided it: closed there
    /// already).
    pub(crate) fn close_at_mdt(&self, file: &OpenFile) -> Result<MdsReply> {
        self.check_handle(file)?;
        if let Ok(mdc) = self.mdc(file.fid.mdt_index()) {
            mdc.note_close(file.fid, file.writable());
        }
        // A close from no job (the kernel's release) works for the job that opened.
        let own = nacre_types::jobid::current();
        if own.is_empty() {
            nacre_types::jobid::set_current(&file.jobid);
        }
        let written = file.wrote.load(std::sync::atomic::Ordering::Acquire);
        let (at, touch) = self.written.close_starts(file.fid, written);
        let r = self.md(MdsOp::Close {
            fid: file.fid,
            writer: file.access & nacre_types::cred::MAY_WRITE != 0,
            written,
            touch,
            noatime: self.noatime.load(std::sync::atomic::Ordering::Relaxed),
        });
        self.written.close_done(file.fid, touch);
        // The MDT moved the file's times past every write this close covers; a file whose
        // attributes this client answers takes them (crate::vouched).
        if written && r.is_ok() {
            if let (Ok(MdsReply::Attr(a)), Ok(mdc)) = (&r, self.mdc(file.fid.mdt_index())) {
                mdc.vouched.touched(file.fid, a.mtime, a.ctime);
            }
            self.written.closed(file.fid, at);
        }
        if own.is_empty() {
            nacre_types::jobid::set_current("");
        }
        r
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: Fid, name: &[u8], perm: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.mkdir_cached(parent, name, (perm, uid, gid), 0)
            .map(|(attr, _)| attr)
    }

    /// [`Client::mkdir`] under `bits` of lock on the new directory where the MDT grants
    /// them: says what the kernel may cache of it.
    pub fn mkdir_cached(
        &self,
        parent: Fid,
        name: &[u8],
        (perm, uid, gid): (u32, u32, u32),
        bits: u8,
    ) -> Result<(Attr, Cached)> {
        let op = MdsOp::Mkdir {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
        };
        let r = self.cached_entry(op, bits, Some((parent, name)));
        let (attr, _, _, cached) = self.after_add(parent, name, r)?;
        // Made here under an UPDATE lock: empty, and this client sees every change to it
        // while the lock lasts (a striped directory's entries are in its shards: not so).
        if cached.attr && matches!(self.dir_stripe(attr.fid), Ok(None)) {
            self.complete.made(attr.fid);
        }
        Ok((attr, cached))
    }

    /// Creates a directory whose inode (and so its contents) lives on MDT `mdt` (`nacre
    /// mkdir -i`; [`nacre_wire::mds::MDT_INDEX_ANY`]: the parent's MDT picks one by free
    /// inodes); the parent's MDT coordinates (docs/dne.md).
    pub fn mkdir_on(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        mdt: u32,
    ) -> Result<Attr> {
        let known = mdt == nacre_wire::mds::MDT_INDEX_ANY
            || self.fs_config().mdts.iter().any(|t| t.index == mdt);
        if !known {
            self.refresh_config()?;
            if !self.fs_config().mdts.iter().any(|t| t.index == mdt) {
                return Err(ClientError::Config(format!(
                    "MDT index {mdt} is not configured"
                )));
            }
        }
        let r = self.entry(MdsOp::MkdirOn {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
            mdt,
        });
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Moves directory `name` of `parent` to MDT `target` online (`nacre migrate -m`): its
    /// inode, entries and its files' inodes (open or hard-linked ones stay where they are)
    /// go to the target; subdirectories move as entries (migrate each for a whole tree).
    /// Returns the directory's new FID and how many inodes moved and stayed.
    pub fn migrate(&self, parent: Fid, name: &[u8], target: u32) -> Result<(Fid, u64, u64)> {
        if !self.fs_config().mdts.iter().any(|t| t.index == target) {
            self.refresh_config()?;
            if !self.fs_config().mdts.iter().any(|t| t.index == target) {
                return Err(ClientError::Config(format!(
                    "MDT index {target} is not configured"
                )));
            }
        }
        let parent = self.shard_of(parent, name)?;
        let fid = self.lookup(parent, name, false)?.fid;
        let op = MdsOp::Migrate {
            fid,
            parent,
            name: name.to_vec(),
            target,
        };
        match self.mdc(fid.mdt_index())?.call(op)? {
            MdsReply::Migrated { fid, moved, kept } => Ok((fid, moved, kept)),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a striped directory (`nacre mkdir -c`): its entries spread by `hash` over
    /// `count` shards on MDTs `start`, `start`+1, … (`start` MDT_INDEX_ANY: the MDS picks).
    #[allow(clippy::too_many_arguments)]
    pub fn mkdir_striped(
        &self,
        parent: Fid,
        name: &[u8],
        perm: u32,
        uid: u32,
        gid: u32,
        count: u32,
        start: u32,
        hash: DirHash,
    ) -> Result<Attr> {
        let r = self.entry(MdsOp::MkdirStriped {
            parent,
            name: name.to_vec(),
            perm,
            uid,
            gid,
            count,
            start,
            hash,
        });
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Sets (None: removes) a directory's default for new subdirectories (`setdirstripe
    /// -D`): on a striped directory, on its master and every shard (whichever receives a
    /// mkdir). Not atomic across MDTs: run again after a failure.
    pub fn set_dir_default(&self, dir: Fid, default: Option<DirDefault>) -> Result<()> {
        let mut dirs = vec![dir];
        if let Some(s) = self.dir_stripe(dir)? {
            dirs.extend(s.shards.iter().copied());
        }
        for d in dirs {
            self.mdc(d.mdt_index())?
                .call(MdsOp::SetDirDefault { fid: d, default })?;
        }
        Ok(())
    }

    /// A directory's default for new subdirectories.
    pub fn dir_default(&self, dir: Fid) -> Result<Option<DirDefault>> {
        match self.md(MdsOp::GetDirDefault { fid: dir })? {
            MdsReply::DirDefault(d) => Ok(d),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Creates a symlink.
    pub fn symlink(
        &self,
        parent: Fid,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let op = MdsOp::Symlink {
            parent,
            name: name.to_vec(),
            target: target.to_vec(),
            uid,
            gid,
        };
        let r = self.entry(op);
        Ok(self.after_add(parent, name, r)?.0)
    }

    /// Reads a symlink.
    pub fn readlink(&self, fid: Fid) -> Result<Vec<u8>> {
        match self.md(MdsOp::ReadLink { fid })? {
            MdsReply::Target(t) => Ok(t),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Adds a hard link.
    pub fn link(&self, fid: Fid, parent: Fid, name: &[u8]) -> Result<Attr> {
        let r = self.entry(MdsOp::Link {
            fid,
            parent,
            name: name.to_vec(),
        });
        let (attr, layout) = self.after_add(parent, name, r)?;
        self.with_glimpse(attr, layout.as_ref(), false)
    }

    /// Removes a name.
    pub fn unlink(&self, parent: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::Unlink {
            parent,
            name: name.to_vec(),
        })?;
        self.complete.removed(parent, name);
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::Rmdir {
            parent,
            name: name.to_vec(),
        })?;
        self.complete.removed(parent, name);
        Ok(())
    }

    /// Renames.
    pub fn rename(
        &self,
        src_parent: Fid,
        src: &[u8],
        dst_parent: Fid,
        dst: &[u8],
        noreplace: bool,
    ) -> Result<()> {
        let op = MdsOp::Rename {
            src_parent,
            src_name: src.to_vec(),
            dst_parent,
            dst_name: dst.to_vec(),
            noreplace,
        };
        let r = self.md(op);
        match &r {
            Ok(_) => self.complete.removed(src_parent, src),
            Err(_) => self.complete.forget(src_parent),
        }
        self.after_add(dst_parent, dst, r).map(|_| ())
    }

    /// Changes attributes; the MDT checks the caller may make the change. A size change cuts
    /// the OST objects after the MDT checked the caller may write (a refused truncate cuts
    /// nothing) and before it records the size.
    pub fn setattr(&self, fid: Fid, set: SetAttr) -> Result<Attr> {
        let Some(size) = set.size else {
            return self.setattr_now(fid, set);
        };
        self.edges.forget_file(fid);
        self.forget_vouched(fid);
        // A truncate: the objects are cut first, then the MDT records the size (so a size it
        // learns by glimpsing is never one from before the cut). Through a descriptor this
        // client holds open for writing, that handle covers the cut; otherwise the truncate
        // opens the file for writing around it, which checks the caller's write permission
        // before anything is cut and keeps the MDT from learning the size meanwhile.
        // Without a handle open for writing here, "through a descriptor" is a path's
        // truncate: its write permission is checked before anything is cut.
        let mut set = set;
        if set.from_open && !self.mdc(fid.mdt_index())?.holds_writer(fid) {
            set.from_open = false;
        }
        if set.from_open {
            let (attr, layout) = self.entry(MdsOp::GetAttr { fid })?;
            let mut layout = Self::truncatable(&attr, layout)?;
            if layout.instantiated_end() < size {
                // The new last byte's component gets its objects (they hold the size).
                layout = self.grow_layout(fid, size)?;
            }
            osc::truncate(self, &layout, size)?;
            return self.setattr_now(fid, set);
        }
        let (attr, file) = self.open(fid, nacre_types::cred::MAY_WRITE)?;
        file.wrote.store(true, std::sync::atomic::Ordering::Release);
        let result = self
            .io_layout_to(&file, size)
            .and_then(|io| Self::truncatable(&attr, io.get().cloned()))
            .and_then(|layout| osc::truncate(self, &layout, size))
            .and_then(|()| self.setattr_now(fid, set));
        let closed = self.close(&file);
        let attr = result?;
        closed?;
        Ok(attr)
    }

    /// The layout of a file that may be truncated (`EISDIR` or `EINVAL` otherwise).
    pub(crate) fn truncatable(attr: &Attr, layout: Option<Layout>) -> Result<Layout> {
        match (attr.kind, layout) {
            (FileKind::Regular, Some(layout)) => Ok(layout),
            (FileKind::Directory, _) => Err(Status::IsDir.into()),
            _ => Err(Status::Inval.into()),
        }
    }

    /// The MDT's part of [`Client::setattr`] (after any cut of the objects).
    pub(crate) fn setattr_now(&self, fid: Fid, set: SetAttr) -> Result<Attr> {
        let owner_or_mode = SetAttr {
            perm: set.perm,
            uid: set.uid,
            gid: set.gid,
            ..SetAttr::default()
        };
        let truncate = set.size.is_some();
        // A utimes after the writes: their close no longer moves the times, and one in
        // flight is answered first (crate::written).
        let times = set
            .mtime
            .is_some()
            .then(|| self.written.setting_times(fid, self.net.rpc_timeout_ms));
        let set_now = self.md(MdsOp::SetAttr { fid, attr: set });
        if truncate {
            // Bytes an open brought from the MDT before the cut (crate::dom).
            self.dom_opened.forget(fid);
        }
        let attr = match set_now {
            Ok(MdsReply::Attr(a)) => a,
            other => {
                if let Some(times) = times {
                    self.written.times_not_set(times);
                }
                return Err(other.err().unwrap_or_else(|| Status::Proto.into()));
            }
        };
        // A striped directory's shards check names' permissions: they follow the master.
        if attr.kind == FileKind::Directory && owner_or_mode != SetAttr::default() {
            if let Some(stripe) = self.dir_stripe(fid)? {
                for &shard in stripe.shards.iter().filter(|&&s| s != fid) {
                    self.md(MdsOp::SetAttr {
                        fid: shard,
                        attr: owner_or_mode.clone(),
                    })?;
                }
            }
        }
        if attr.kind == FileKind::Regular {
            let layout = self.layout_of(fid)?;
            return self.with_glimpse(attr, Some(&layout), false);
        }
        Ok(attr)
    }

    /// Reads an xattr.
    pub fn getxattr(&self, fid: Fid, name: &[u8]) -> Result<Vec<u8>> {
        match self.md(MdsOp::GetXattr {
            fid,
            name: name.to_vec(),
        })? {
            MdsReply::Xattr(v) => Ok(v),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Sets an xattr.
    pub fn setxattr(&self, fid: Fid, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let op = MdsOp::SetXattr {
            fid,
            name: name.to_vec(),
            value: value.to_vec(),
            flags,
        };
        self.md(op).map(|_| ())
    }

    /// Lists xattr names.
    pub fn listxattr(&self, fid: Fid) -> Result<Vec<Vec<u8>>> {
        match self.md(MdsOp::ListXattr { fid })? {
            MdsReply::XattrNames(v) => Ok(v),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Removes an xattr.
    pub fn removexattr(&self, fid: Fid, name: &[u8]) -> Result<()> {
        self.md(MdsOp::RemoveXattr {
            fid,
            name: name.to_vec(),
        })
        .map(|_| ())
    }

    /// Layout of a file, or default striping of a directory.
    pub fn get_layout(&self, fid: Fid) -> Result<LayoutInfo> {
        match self.md(MdsOp::GetLayout { fid })? {
            MdsReply::Layout(l) => Ok(l),
            _ => Err(Status::Proto.into()),
        }
    }

    /// Sets a directory's default layout (plain or composite), or lays out an empty file
    /// again.
    pub fn set_layout(&self, fid: Fid, spec: LayoutSpec) -> Result<LayoutInfo> {
        spec.check()
            .map_err(|e| ClientError::Config(format!("{e} (file system '{}')", self.fsname)))?;
        for c in &spec.components {
            self.check_spec(c.stripe)?;
        }
        self.own_layout_change(fid, || {
            match self.md(MdsOp::SetLayout {
                fid,
                spec: spec.clone(),
            })? {
                MdsReply::Layout(l) => Ok(l),
                _ => Err(Status::Proto.into()),
            }
        })
    }

    /// Validates a striping request against this file system, with a message naming the cause.
    pub fn check_spec(&self, spec: StripeSpec) -> Result<()> {
        let known = self.fs_config().osts.len() as u32;
        if spec.resolve(StripeSpec::default(), known).is_err() {
            self.refresh_config()?;
        }
        let osts = self.fs_config().osts.len() as u32;
        spec.resolve(StripeSpec::default(), osts)
            .map(|_| ())
            .map_err(|e| ClientError::Config(format!("{e} (file system '{}')", self.fsname)))
    }
}

/// Sets a regular file's size and blocks in `attr` (the MDT's answer) from its objects'
/// glimpse (`glimpsed`) and what this client keeps of it (`kept`); where its layout has a
/// component on the MDT, the MDT's own size and blocks (in `attr`) count too (crate::dom).
fn glimpsed_size(attr: &mut Attr, layout: &Layout, glimpsed: (u64, u64), kept: u64) {
    let (mdt_size, mdt_blocks) = match layout.dom_end() {
        0 => (0, 0),
        _ => (attr.size, attr.blocks),
    };
    attr.size = glimpsed.0.max(kept).max(mdt_size);
    attr.blocks = glimpsed.1 + mdt_blocks;
}
