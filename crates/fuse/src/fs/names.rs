//! The namespace as the kernel asks for it: lookups and attributes (cached under the
//! mount's metadata locks), creates, links, renames and removals (each marking the
//! directories it changes for the lock sink, inval.rs).

use super::*;

#[allow(clippy::too_many_arguments)]
impl Shared {
    pub(super) fn lookup(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.enter(req);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // Looked up in name order: answered from the directory's window (fs/window.rs).
        if let Some(attr) = self.statahead(parent, name.as_bytes(), &req.cred) {
            pool::leave();
            let attr = crate::attrs::file_attr(&attr);
            return reply.entry_with_ttls(&LOCKED_TTL, &LOCKED_TTL, &attr, Generation(0));
        }
        // Always the OSTs' size: the kernel applies an entry's size to a cached inode, so an MDT
        // hint here would shrink a file another thread is reading (a short read at a false EOF).
        match self.client.lookup_cached(parent, name.as_bytes()) {
            Ok((Some(a), c)) => self.reply_cached(reply, Ok((a, c))),
            // No such name, the directory's lock covering it: a negative entry the kernel
            // keeps until the lock goes (then invalidated as any entry).
            Ok((None, c)) if c.entry => {
                pool::leave();
                reply.entry_with_ttls(
                    &Duration::ZERO,
                    &LOCKED_TTL,
                    &crate::attrs::absent_attr(),
                    Generation(0),
                )
            }
            Ok((None, _)) => {
                pool::leave();
                reply.error(Errno::ENOENT)
            }
            Err(e) => self.reply_cached(reply, Err(e)),
        }
    }

    pub(super) fn getattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        self.enter(req);
        let result = fid_of(ino).map(|f| self.client.getattr_cached(f));
        // Through a handle its MDT closed by evicting this client (which the call itself
        // may just have learned): EIO, as for every other use of that handle.
        if let Some(Err(e)) = fh.map(|fh| self.evicted_handle(fh)) {
            return reply.error(e);
        }
        pool::leave();
        match result {
            Ok(Ok((a, cached))) => reply.attr(&self.ttl(cached, self.attr_ttl), &file_attr(&a)),
            Ok(Err(e)) => reply.error(errno(&e)),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn setattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // Handles this mount answered the open of are opened at the MDT before their file's
        // mode or owner changes (the MDT checks the opener then).
        if mode.is_some() || uid.is_some() || gid.is_some() {
            self.open_deferred_of(fid);
        }
        let set = SetAttr {
            perm: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            ctime: ctime.map(TimeSpec::from_system_time),
            times_now: matches!(atime, Some(TimeOrNow::Now))
                || matches!(mtime, Some(TimeOrNow::Now)),
            from_open: fh.is_some(),
            ..SetAttr::default()
        };
        let result = self.client.setattr(fid, set);
        pool::leave();
        match result {
            Ok(a) => reply.attr(&self.attr_ttl, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn readlink(&self, req: &Caller, ino: INodeNo, reply: ReplyData) {
        self.enter(req);
        match fid_of(ino).map(|f| self.client.readlink(f)) {
            Ok(Ok(t)) => reply.data(&t),
            Ok(Err(e)) => reply.error(errno(&e)),
            Err(e) => reply.error(e),
        }
    }

    pub(super) fn mknod(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let Some(kind) = FileKind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // A regular file is answered here in a directory delegated to this mount
        // (--async-dirops), as a create without its open.
        let reply = if kind == FileKind::Regular && self.client.async_dirops() {
            let answered = self.client.create_delegated(
                parent,
                name.as_bytes(),
                mode & 0o7777,
                req.uid(),
                req.gid(),
            );
            match self.reply_delegated(reply, answered) {
                Some(reply) => reply,
                None => return,
            }
        } else {
            reply
        };
        let r = self
            .client
            .create(
                parent,
                name.as_bytes(),
                kind,
                mode & 0o7777,
                req.uid(),
                req.gid(),
                rdev,
                true,
                false,
                0,
            )
            .map(|(attr, _)| attr);
        self.reply_entry(reply, r);
    }

    pub(super) fn mkdir(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        // Answered here in a directory delegated to this mount (--async-dirops).
        let reply = if self.client.async_dirops() {
            let answered = self.client.mkdir_delegated(
                parent,
                name.as_bytes(),
                mode & 0o7777,
                req.uid(),
                req.gid(),
            );
            match self.reply_delegated(reply, answered) {
                Some(reply) => reply,
                None => return,
            }
        } else {
            reply
        };
        let r = self.client.mkdir_cached(
            parent,
            name.as_bytes(),
            (mode & 0o7777, req.uid(), req.gid()),
            LOOKUP | UPDATE,
        );
        self.reply_cached(reply, r);
    }

    /// Replies to the kernel with an entry answered on the delegated path, if it was
    /// (kept while the delegation is held, and past it under the inode's own lock from its
    /// batch; a change in it by another client calls the delegation back first) or failed;
    /// gives `reply` back when the MDT is to make it.
    fn reply_delegated(
        &self,
        reply: ReplyEntry,
        answered: nacre_client::Result<Option<(nacre_types::Attr, bool)>>,
    ) -> Option<ReplyEntry> {
        match answered {
            Ok(Some((attr, covered))) => {
                let cached = nacre_client::Cached {
                    entry: covered,
                    attr: covered,
                };
                self.reply_cached(reply, Ok((attr, cached)));
                None
            }
            Ok(None) => Some(reply),
            Err(e) => {
                pool::leave();
                reply.error(errno(&e));
                None
            }
        }
    }

    pub(super) fn unlink(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let name = name.as_bytes();
        // First: no open answered by this mount from here on misses what follows.
        self.client.forget_kept_name(parent, name);
        self.open_before_removal(parent, name);
        // Answered here in a directory delegated to this mount (--async-dirops), for a
        // file it answered the create of; sent to the MDT later.
        let r = match self.client.unlink_delegated(parent, name) {
            Ok(true) => Ok(()),
            _ => self.client.unlink(parent, name),
        };
        empty(reply, ok(r));
    }

    pub(super) fn rmdir(&self, req: &Caller, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        empty(
            reply,
            fid_of(parent).and_then(|p| ok(self.client.rmdir(p, name.as_bytes()))),
        );
    }

    pub(super) fn symlink(
        &self,
        req: &Caller,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let r = self.client.symlink(
            parent,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            req.uid(),
            req.gid(),
        );
        self.reply_entry(reply, r);
    }

    pub(super) fn rename(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent, newparent]);
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let (src, dst) = match (fid_of(parent), fid_of(newparent)) {
            (Ok(s), Ok(d)) => (s, d),
            _ => return reply.error(Errno::ESTALE),
        };
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        if !noreplace {
            self.client.forget_kept_name(dst, newname.as_bytes());
            self.open_before_removal(dst, newname.as_bytes());
        }
        match self
            .client
            .rename(src, name.as_bytes(), dst, newname.as_bytes(), noreplace)
        {
            Ok(()) => {
                reply.ok();
                // The kernel moves its dentry, which keeps the timeout of the old name's
                // entry; another client may have changed the name meanwhile (its callback
                // came while this rename held the directory), so the moved entry is
                // invalidated once the kernel is done with it, to be looked up afresh.
                if let Some(inval) = self.inval.get() {
                    inval.entry_later(newparent.0, newname.to_os_string());
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn link(
        &self,
        req: &Caller,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.enter(req);
        let _changing = self.changing(&[newparent]);
        let (fid, parent) = match (fid_of(ino), fid_of(newparent)) {
            (Ok(f), Ok(p)) => (f, p),
            _ => return reply.error(Errno::ESTALE),
        };
        self.reply_entry(reply, self.client.link(fid, parent, newname.as_bytes()));
    }

    pub(super) fn create(
        &self,
        req: &Caller,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.enter(req);
        let _changing = self.changing(&[parent]);
        let parent = match fid_of(parent) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let exclusive = flags & libc::O_EXCL != 0;
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::Regular);
        // Answered here in a directory delegated to this mount (--async-dirops): the file
        // is opened at the MDT only if the handle is used for more than its close.
        let access = access_of(flags);
        // The handle is opened at the MDT later as its owner (`Client::undefer`): only an
        // access the owner's class of the mode allows (as the MDT would not refuse it), or
        // root's.
        let owner_may = |may: u8, bit: u32| access & may == 0 || mode & bit != 0;
        let opens_later = req.uid() == 0
            || (owner_may(nacre_types::cred::MAY_READ, 0o400)
                && owner_may(nacre_types::cred::MAY_WRITE, 0o200));
        if kind == FileKind::Regular && opens_later && self.client.async_dirops() {
            let answered = self.client.create_delegated(
                parent,
                name.as_bytes(),
                mode & 0o7777,
                req.uid(),
                req.gid(),
            );
            match answered.and_then(|a| match a {
                Some((attr, covered)) => Ok(Some((
                    self.client.open_deferred(&attr, Some(parent), access)?,
                    attr,
                    covered,
                ))),
                None => Ok(None),
            }) {
                Ok(Some((mut file, attr, covered))) => {
                    pool::leave();
                    if flags & libc::O_APPEND != 0 {
                        file.set_append();
                    }
                    let fid = file.fid;
                    let flags = self.file_open_flags(&file, attr.size == 0);
                    let fh = self.add_file(file, flags);
                    self.caps.created(fid);
                    // Kept while the delegation is held (forgotten when it goes).
                    let ttl = self.ttl(covered, self.entry_ttl);
                    return reply.created(&ttl, &file_attr(&attr), Generation(0), fh, flags);
                }
                Ok(None) => {}
                Err(e) => {
                    pool::leave();
                    return reply.error(errno(&e));
                }
            }
        }
        let created = self.client.create_cached(
            parent,
            name.as_bytes(),
            (
                kind,
                mode & 0o7777,
                req.uid(),
                req.gid(),
                0,
                exclusive,
                true,
                access,
            ),
        );
        pool::leave();
        match created {
            Ok((attr, mut file, cached)) => {
                let fid = file.fid;
                if flags & libc::O_APPEND != 0 {
                    file.set_append();
                }
                let flags = self.file_open_flags(&file, attr.size == 0);
                let fh = self.add_file(file, flags);
                if exclusive {
                    // Made by this very call: no capability to strip from it yet (a
                    // non-exclusive create may have opened an existing file instead).
                    self.caps.created(fid);
                }
                let ttl = self.ttl(cached.entry && cached.attr, self.entry_ttl);
                reply.created(&ttl, &file_attr(&attr), Generation(0), fh, flags)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}
