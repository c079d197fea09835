//! Directory listings for the kernel: `opendir`, `readdir`, `readdirplus` (every entry with
//! its attributes, cached by the kernel under the locks the MDT granted with the page, so
//! the stats of an `ls -l` never leave it) and `releasedir`. Statahead: while the kernel
//! consumes a page, the next one is fetched by a helper thread. The offset given with each
//! entry names it (fs/cookies.rs), so a listing resumes after that name from any stream.

use super::cookies::cookie_of;
use super::{errno, fid_of, Caller, Shared, LOCKED_TTL};
use crate::attrs::{file_attr, file_type, listed_only_attr};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, OpenFlags,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyOpen,
};
use nacre_client::{Cached, Client, ClientError, Listed};
use nacre_ldlm::msg::UPDATE;
use nacre_types::{Cred, Fid};
use parking_lot::Mutex;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Entries fetched per readdir RPC.
pub const READDIR_PAGE_ENTRIES: u32 = 1024;
/// Entries fetched per readdirplus RPC (each with attributes and a lock).
pub const READDIRPLUS_PAGE_ENTRIES: u32 = 256;
/// Entries given to the kernel that a stream keeps before it lets them go (a listing
/// resumed before them fetches them again): a stream holds about a page or two, not the
/// whole directory, whatever its size.
const GIVEN_KEPT_MAX: usize = 2 * READDIR_PAGE_ENTRIES as usize;

/// When the kernel lists a directory with every entry's attributes (`--readdirplus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Readdirplus {
    /// Every listing page with attributes and locks (the default): the stats of an
    /// `ls -l`, and of files written here since, are answered by the kernel afterwards.
    #[default]
    Always,
    /// Attributes with a listing's first reply and after lookups in the directory, plain
    /// pages otherwise (`FUSE_READDIRPLUS_AUTO`): scans that stat little (`find -name`,
    /// IO500's pfind) list names only; stats in name order after a whole listing come from
    /// the statahead window (fs/window.rs). A stat of a file written here after such a
    /// listing asks the MDT, as it did not refresh the kernel's attributes.
    Auto,
    /// Plain pages only: a lookup per name stat'ed, no statahead window.
    Off,
}

impl std::str::FromStr for Readdirplus {
    type Err = String;

    fn from_str(s: &str) -> Result<Readdirplus, String> {
        match s {
            "true" | "always" => Ok(Readdirplus::Always),
            "auto" => Ok(Readdirplus::Auto),
            "false" | "off" => Ok(Readdirplus::Off),
            _ => Err(format!("readdirplus is true, auto or false, not {s:?}")),
        }
    }
}

/// A page of a listing: entries, and whether none follow.
type Page = Result<(Vec<Listed>, bool), ClientError>;

/// Where a page came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum From {
    /// A plain page of the MDT (names only).
    Plain,
    /// A readdirplus page of the MDT, which checked that the caller may search the
    /// directory; `missed`: asked after a page built here could not begin.
    Mdt { missed: bool },
    /// A readdirplus page built here (`Client::readdir_plus_here`).
    Here,
}

/// A page fetched, the credentials it was fetched with and where it came from.
struct Fetched {
    page: Page,
    cred: Cred,
    from: From,
}

/// A readdirplus page of `fid` after `after`, fetched with `cred` (the caller's): built here
/// from a plain page when `here` and this mount can give its first entry's attributes
/// itself, else the MDT's.
fn fetch_plus(client: &Client, fid: Fid, after: Option<&[u8]>, here: bool, cred: Cred) -> Fetched {
    if here {
        match client.readdir_plus_here(fid, after, READDIR_PAGE_ENTRIES) {
            Ok(Some(page)) => {
                return Fetched {
                    page: Ok(page),
                    cred,
                    from: From::Here,
                }
            }
            Ok(None) => {
                let page = client.readdir_plus(fid, after, READDIRPLUS_PAGE_ENTRIES);
                let from = From::Mdt { missed: true };
                return Fetched { page, cred, from };
            }
            Err(e) => {
                let page = Err(e);
                return Fetched {
                    page,
                    cred,
                    from: From::Here,
                };
            }
        }
    }
    let page = client.readdir_plus(fid, after, READDIRPLUS_PAGE_ENTRIES);
    let from = From::Mdt { missed: false };
    Fetched { page, cred, from }
}

/// An open directory: entries fetched so far (in name order, after `base`) and where to
/// resume.
pub(crate) struct DirStream {
    fid: Fid,
    /// The name the entries follow (`None`: the directory's start).
    base: Option<Vec<u8>>,
    entries: Vec<Listed>,
    eof: bool,
    /// The next readdirplus page, being fetched (statahead).
    ahead: Option<mpsc::Receiver<Fetched>>,
    /// The caller may list the directory but not search it: plain pages only (their
    /// entries listed without attributes).
    plain_only: bool,
    /// The credentials the MDT last answered a readdirplus page of this stream for: it
    /// checked that they may search the directory. Pages are built here only for them (an
    /// open directory keeps that permission for the stream's life, as it keeps the one to
    /// read it).
    searched: Option<Cred>,
    /// Pages built here are worth trying: none failed to begin or came short (entries of
    /// files this mount cannot vouch for: it lists the rest from the MDT's pages).
    here: bool,
}

impl DirStream {
    /// Fetches pages until entry `want - 1` is there or the listing ends; `plus`: with
    /// attributes (the kernel's readdirplus).
    fn fill(&mut self, client: &Arc<Client>, want: usize, plus: bool) -> Result<(), ClientError> {
        let plus = plus && !self.plain_only;
        while !self.eof && self.entries.len() < want {
            // A page fetched ahead: the same one a call now would return (its attributes
            // unused by a plain listing); fetched again if that failed.
            // A page fetched ahead for another caller (a descriptor passed on) is fetched
            // again in this one's name: its attributes are for those the MDT checked.
            let fetched = match self.ahead.take().map(|ahead| ahead.recv()) {
                Some(Ok(f)) if f.page.is_ok() && f.cred == nacre_types::cred::current() => f,
                _ => self.fetch(client, plus),
            };
            self.learn(&fetched);
            let (page, eof) = match fetched.page {
                // Readable, not searchable: names only, as a plain listing gives them.
                Err(e) if plus && e.status() == nacre_types::Status::Access => {
                    self.plain_only = true;
                    return self.fill(client, want, false);
                }
                r => r?,
            };
            self.entries.extend(page);
            self.eof = eof;
        }
        Ok(())
    }

    /// The kernel was given every entry before `index`: past [`GIVEN_KEPT_MAX`] of them,
    /// they are let go (the stream then follows the last of them). Growing one vector to a
    /// directory's size cost a copy of it at each doubling, into pages the process faults
    /// in.
    fn given_up_to(&mut self, index: usize) {
        if index < GIVEN_KEPT_MAX || index > self.entries.len() {
            return;
        }
        let last = self.entries[index - 1].entry.name.clone();
        self.entries.drain(..index);
        self.base = Some(last);
    }

    /// The name the next page follows.
    fn last(&self) -> Option<&[u8]> {
        let last = self.entries.last().map(|e| e.entry.name.as_slice());
        last.or(self.base.as_deref())
    }

    /// Drops the entries from `index` on, to be listed again from the MDT's readdirplus
    /// pages (an entry built here this mount cannot give).
    fn cut_at(&mut self, index: usize) {
        self.entries.truncate(index);
        self.eof = false;
        self.ahead = None;
        self.here = false;
    }

    /// Starts the listing afresh after `base` (`None`: from the directory's start).
    fn restart(&mut self, base: Option<Vec<u8>>) {
        self.entries.clear();
        self.eof = false;
        self.ahead = None;
        self.base = base;
    }

    /// The index of the first entry after `name`; the stream restarted after `name` where its
    /// entries do not reach there.
    fn after_name(&mut self, name: &[u8]) -> usize {
        let starts_before = self.base.as_deref().is_none_or(|b| b <= name);
        let index = self
            .entries
            .partition_point(|e| e.entry.name.as_slice() <= name);
        if starts_before && (index < self.entries.len() || self.eof || self.last() == Some(name)) {
            return index;
        }
        self.restart(Some(name.to_vec()));
        0
    }

    /// What a fetched page says of the pages after it: who the MDT checked, and whether
    /// building them here is still worth it.
    fn learn(&mut self, fetched: &Fetched) {
        match (&fetched.page, fetched.from) {
            (Ok(_), From::Mdt { missed }) => {
                self.searched = Some(fetched.cred.clone());
                self.here &= !missed;
            }
            // Short of half a page: this mount made few of the files listed.
            (Ok((page, eof)), From::Here) => {
                self.here &= *eof || page.len() >= READDIR_PAGE_ENTRIES as usize / 2;
            }
            _ => {}
        }
    }

    /// Whether the next readdirplus page may be built here for `cred`.
    fn may_build_here(&self, cred: &Cred) -> bool {
        self.here && self.searched.as_ref() == Some(cred)
    }

    fn fetch(&self, client: &Client, plus: bool) -> Fetched {
        let after = self.last();
        let cred = nacre_types::cred::current();
        if plus {
            let here = self.may_build_here(&cred);
            return fetch_plus(client, self.fid, after, here, cred);
        }
        let page = client
            .readdir(self.fid, after, READDIR_PAGE_ENTRIES)
            .map(|(page, eof)| {
                let page = page
                    .into_iter()
                    .map(|entry| Listed {
                        entry,
                        attr: None,
                        here: false,
                    })
                    .collect();
                (page, eof)
            });
        Fetched {
            page,
            cred,
            from: From::Plain,
        }
    }

    /// Statahead: once the kernel is past half of what was fetched, the next page is
    /// fetched by a helper thread while it reads on.
    fn read_ahead(&mut self, client: &Arc<Client>, pos: usize) {
        if self.eof || self.ahead.is_some() || pos < self.entries.len() / 2 {
            return;
        }
        let (tx, rx) = mpsc::sync_channel(1);
        let client = client.clone();
        let fid = self.fid;
        let after = self.last().map(<[u8]>::to_vec);
        // In the caller's name: the MDT checks its permissions and counts the page to its
        // job (a helper thread has no credentials of its own: the mount's would be used).
        let (cred, job) = (nacre_types::cred::current(), nacre_types::jobid::current());
        let here = self.may_build_here(&cred);
        let spawned = std::thread::Builder::new()
            .name("nacre-statahead".into())
            .spawn(move || {
                nacre_types::cred::set_current(Some(cred.clone()));
                nacre_types::jobid::set_current(&job);
                let _ = tx.send(fetch_plus(&client, fid, after.as_deref(), here, cred));
            });
        if spawned.is_ok() {
            self.ahead = Some(rx);
        }
    }
}

/// The name of the entry a listing of `fid` resumes after at offset `cookie` (one of this
/// stream's, else found by listing the directory again from its start); `None`: no entry
/// has that offset.
fn name_at(client: &Client, fid: Fid, cookie: u64) -> Result<Option<Vec<u8>>, ClientError> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, eof) = client.readdir(fid, after.as_deref(), READDIR_PAGE_ENTRIES)?;
        if let Some(e) = page.iter().find(|e| cookie_of(&e.name) == cookie) {
            return Ok(Some(e.name.clone()));
        }
        match (eof, page.last()) {
            (false, Some(last)) => after = Some(last.name.clone()),
            _ => return Ok(None),
        }
    }
}

/// What `.` and `..` carry in a readdirplus reply (the kernel links neither).
fn dot_attr(ino: INodeNo) -> FileAttr {
    let mut attr = crate::attrs::absent_attr();
    attr.ino = ino;
    attr.kind = FileType::Directory;
    attr
}

#[allow(clippy::too_many_arguments)]
impl Shared {
    pub(super) fn opendir(&self, req: &Caller, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let stream = DirStream {
            fid,
            base: None,
            entries: Vec::new(),
            eof: false,
            ahead: None,
            plain_only: false,
            searched: None,
            here: true,
        };
        self.cookies.opened(ino.0);
        self.dirs.lock().insert(fh, Arc::new(Mutex::new(stream)));
        reply.opened(FileHandle(fh), self.listing_flags(fid));
    }

    /// The kernel caches a directory's listing while this mount holds its `UPDATE` lock
    /// (which a change in it calls back, and the callback drops the cached listing with
    /// the attributes); the kernel itself also starts the listing afresh when the
    /// directory's modification time or version moved.
    fn listing_flags(&self, dir: Fid) -> FopenFlags {
        let Some(inval) = self.inval.get() else {
            return FopenFlags::empty();
        };
        // Noted before the lock is checked: a callback after the check finds it noted.
        if !inval.cache_listing(crate::ino_of(dir)) {
            return FopenFlags::empty();
        }
        match self.client.lock_covers(dir, UPDATE) {
            true => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            false => FopenFlags::empty(),
        }
    }

    fn stream(&self, fh: FileHandle) -> Option<Arc<Mutex<DirStream>>> {
        self.dirs.lock().get(&fh.0).cloned()
    }

    /// Where in `stream`'s entries a listing of directory `ino` goes on at offset `offset`
    /// (at least 2: past `.` and `..`).
    fn resume(&self, stream: &mut DirStream, ino: INodeNo, offset: u64) -> Result<usize, Errno> {
        if offset < super::cookies::FIRST_ENTRY_COOKIE {
            if stream.base.is_some() {
                stream.restart(None);
            }
            return Ok(0);
        }
        let name = match self.cookies.name_of(ino.0, offset) {
            Some(name) => name.into_vec(),
            None => match stream
                .entries
                .iter()
                .find(|e| cookie_of(&e.entry.name) == offset)
            {
                Some(e) => e.entry.name.clone(),
                None => match name_at(&self.client, stream.fid, offset) {
                    Ok(Some(name)) => name,
                    Ok(None) => return Err(Errno::EINVAL),
                    Err(e) => return Err(errno(&e)),
                },
            },
        };
        Ok(stream.after_name(&name))
    }

    pub(super) fn readdir(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.enter(req);
        let Some(stream) = self.stream(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut stream = stream.lock();
        if offset == 0 {
            // Opened or rewound: the directory as it is now.
            if !stream.entries.is_empty() || stream.base.is_some() {
                stream.restart(None);
            }
            if reply.add(ino, 1, FileType::Directory, ".") {
                return reply.ok();
            }
        }
        if offset <= 1 && reply.add(INodeNo(1), 2, FileType::Directory, "..") {
            return reply.ok();
        }
        let mut index = match self.resume(&mut stream, ino, offset) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let mut given = Vec::new();
        loop {
            if let Err(e) = stream.fill(&self.client, index + 1, false) {
                return reply.error(errno(&e));
            }
            let Some(listed) = stream.entries.get(index) else {
                break;
            };
            let entry = &listed.entry;
            let cookie = cookie_of(&entry.name);
            let full = reply.add(
                INodeNo(crate::ino_of(entry.fid)),
                cookie,
                file_type(entry.kind),
                OsStr::from_bytes(&entry.name),
            );
            if full {
                break;
            }
            given.push((cookie, entry.name.clone().into_boxed_slice()));
            index += 1;
        }
        stream.given_up_to(index);
        self.cookies.record(ino.0, given);
        reply.ok();
    }

    /// Entries with their attributes: the kernel links each name to its inode and keeps
    /// both for as long as a lock covers them (until the lock's callback invalidates
    /// them), or revalidates them at their next use where none does.
    pub(super) fn readdirplus(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.enter(req);
        let Some(stream) = self.stream(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut stream = stream.lock();
        let zero = Duration::ZERO;
        if offset == 0 {
            // Opened or rewound: the directory as it is now.
            if !stream.entries.is_empty() || stream.base.is_some() {
                stream.restart(None);
            }
            if reply.add(ino, 1, ".", &zero, &dot_attr(ino), Generation(0)) {
                return reply.ok();
            }
        }
        let up = INodeNo(1);
        if offset <= 1 && reply.add(up, 2, "..", &zero, &dot_attr(up), Generation(0)) {
            return reply.ok();
        }
        let mut index = match self.resume(&mut stream, ino, offset) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let mut given = Vec::new();
        // At most a page per reply, however large the kernel's buffer (up to 1 MiB, some
        // 6,900 entries it would link): it asks for the rest plainly unless the caller
        // looked names up meanwhile, and lookups in name order have their own statahead
        // (fs/window.rs).
        while given.len() < READDIRPLUS_PAGE_ENTRIES as usize {
            if let Err(e) = stream.fill(&self.client, index + 1, true) {
                return reply.error(errno(&e));
            }
            stream.read_ahead(&self.client, index);
            let dir = stream.fid;
            let Some(listed) = stream.entries.get_mut(index) else {
                break;
            };
            let (ino, kind) = (crate::ino_of(listed.entry.fid), listed.entry.kind);
            // Given once: an entry read again (a rewound listing) is listed only.
            let here = std::mem::take(&mut listed.here);
            let mut fetched = listed.attr.take();
            if here {
                // This mount's own: as they are now (its writes since move them).
                fetched = self.client.listed_here(dir, &listed.entry);
                if fetched.is_none() {
                    // It no longer vouches for this one (or never did: a page built here
                    // checks its first entry only): the rest comes from the MDT's pages.
                    stream.cut_at(index);
                    continue;
                }
            }
            let (attr, ttl) = match &fetched {
                Some((a, c, _)) if *c == Cached::default() => {
                    (file_attr(a), self.attr_ttl.min(self.entry_ttl))
                }
                // Its lock still held: nothing changed since the attributes were read (this
                // mount's own were read under it just now).
                Some((a, c, handle)) if here || self.client.holds_lock(a.fid, *handle) => {
                    let ttl = match c.entry && c.attr {
                        true => LOCKED_TTL,
                        false => self.attr_ttl.min(self.entry_ttl),
                    };
                    (file_attr(a), ttl)
                }
                _ => (listed_only_attr(ino, kind), Duration::ZERO),
            };
            let cookie = cookie_of(&listed.entry.name);
            let full = reply.add(
                INodeNo(ino),
                cookie,
                OsStr::from_bytes(&listed.entry.name),
                &ttl,
                &attr,
                Generation(0),
            );
            if full {
                // Not taken by the kernel: given again with the next call (this mount's
                // own as they are then).
                let listed = &mut stream.entries[index];
                match here {
                    true => listed.here = true,
                    false => listed.attr = fetched,
                }
                break;
            }
            given.push((cookie, listed.entry.name.clone().into_boxed_slice()));
            index += 1;
        }
        stream.given_up_to(index);
        self.cookies.record(ino.0, given);
        reply.ok();
    }

    pub(super) fn releasedir(
        &self,
        req: &Caller,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        if self.dirs.lock().remove(&fh.0).is_some() {
            self.cookies.released(ino.0);
        }
        reply.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::FileKind;
    use nacre_wire::mds::DirEntry;

    fn name(i: usize) -> Vec<u8> {
        format!("f{i:05}").into_bytes()
    }

    /// A stream of `n` entries fetched from the directory's start, more to come.
    fn stream(n: usize) -> DirStream {
        let entries = (0..n)
            .map(|i| Listed {
                entry: DirEntry {
                    name: name(i),
                    fid: Fid::new(0x200000400, i as u32 + 1),
                    kind: FileKind::Regular,
                },
                attr: None,
                here: false,
            })
            .collect();
        DirStream {
            fid: Fid::new(0x200000400, 0),
            base: None,
            entries,
            eof: false,
            ahead: None,
            plain_only: false,
            searched: None,
            here: false,
        }
    }

    #[test]
    fn given_entries_are_let_go_and_a_listing_resumed_before_them_starts_again() {
        let mut s = stream(3 * GIVEN_KEPT_MAX);
        // Fewer than the most kept: all stay.
        s.given_up_to(GIVEN_KEPT_MAX - 1);
        assert_eq!(s.entries.len(), 3 * GIVEN_KEPT_MAX);
        let at = 2 * GIVEN_KEPT_MAX;
        s.given_up_to(at);
        assert_eq!(s.entries.len(), GIVEN_KEPT_MAX);
        assert_eq!(s.entries[0].entry.name, name(at));
        // Resumed after a name still kept: from there.
        assert_eq!(s.after_name(&name(at + 5)), 6);
        assert_eq!(s.entries.len(), GIVEN_KEPT_MAX, "nothing fetched again");
        // Resumed right after the last let go: from the first kept.
        assert_eq!(s.after_name(&name(at - 1)), 0);
        assert_eq!(s.entries[0].entry.name, name(at));
        // Resumed after a name let go (a seekdir back): fetched again from there, never
        // from the first kept (the names between would be skipped).
        assert_eq!(s.after_name(&name(100)), 0);
        assert!(s.entries.is_empty(), "the stream starts again");
        assert_eq!(s.base, Some(name(100)));
        assert_eq!(s.last(), Some(&name(100)[..]));
    }
}
