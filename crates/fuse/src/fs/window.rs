//! Statahead for lookups: a window of readdirplus entries per directory, fetched when the
//! lookups in a directory come in name order, and answering the next lookups from it.
//!
//! Why: the kernel asks for readdirplus only for a listing's first page and after lookups
//! in the directory (`FUSE_READDIRPLUS_AUTO`, fs.rs `init`), so a scan that does not stat
//! (`find -name`, IO500's pfind) gets plain pages of names (1,024 per RPC, no lock or
//! inode per entry), and `ls -l`, which reads the whole directory before its first stat,
//! would send a lookup per name. Those lookups come in name order (the MDT's order, `ls`'s
//! in the C locale); on the second in a row, the window fetches the readdirplus page after
//! the previous one (attributes and locks, in the looker's name) and answers from it.
//!
//! When it stops: a page of which fewer than a quarter of the entries were asked for before
//! a lookup went past it (pfind stats about 4% of the names; mdtest's numeric order jumps
//! about the name order) stops the window for a number of ordered misses that doubles with
//! each stop ([`BACKOFF_MIN`] to [`BACKOFF_MAX`]).
//!
//! What it answers is what a readdirplus page would have given the kernel, and only while
//! it is still current:
//! * the entry's lock is still held (a change by any other client calls it back first), and
//!   covers both the name and the attributes;
//! * this mount sent no change anywhere since the page was fetched ([`Windows::changing`]
//!   is bumped before and after every operation that changes something, so a page fetched
//!   while one was in flight is never used);
//! * the looker has the credentials the page was fetched with (the MDT checked those).
//!
//! Each entry is given once; a name in the window's range that it lacks is looked up as
//! usual (made since, or given already). At most [`WINDOWS_MAX`] directories have a window,
//! each of at most one page ([`WINDOW_ENTRIES`]).

use nacre_client::Listed;
use nacre_types::{Attr, Cred, Fid};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Entries fetched per window page (one readdirplus RPC).
pub(crate) const WINDOW_ENTRIES: u32 = super::dir::READDIRPLUS_PAGE_ENTRIES;
/// Directories with a window (or with the order of their lookups followed) at once.
pub(crate) const WINDOWS_MAX: usize = 256;
/// Ordered misses a window waits after its first stop before fetching again.
pub(crate) const BACKOFF_MIN: u32 = 4;
/// The longest a stopped window waits, in ordered misses.
pub(crate) const BACKOFF_MAX: u32 = 4_096;

/// The windows of a mount, and the count of its changes.
#[derive(Default)]
pub(crate) struct Windows {
    map: Mutex<HashMap<Fid, Arc<Mutex<Window>>>>,
    /// Bumped before and after every change this mount sends.
    changes: AtomicU64,
    /// No windows (the mount lists without readdirplus).
    off: AtomicBool,
}

impl Windows {
    /// Windows on (the default) or off.
    pub(crate) fn enable(&self, on: bool) {
        self.off.store(!on, Ordering::Relaxed);
    }

    /// Runs `op`, an operation that may change something, so that no window entry fetched
    /// before it completed is used afterwards.
    pub(crate) fn changing<R>(&self, op: impl FnOnce() -> R) -> R {
        self.changes.fetch_add(1, Ordering::AcqRel);
        let r = op();
        self.changes.fetch_add(1, Ordering::AcqRel);
        r
    }

    /// The count of changes now (read before a page is fetched).
    pub(crate) fn generation(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// The window of `dir`, made if it has none (another directory's dropped if
    /// [`WINDOWS_MAX`] have one).
    pub(crate) fn of(&self, dir: Fid) -> Arc<Mutex<Window>> {
        let mut map = self.map.lock();
        if let Some(w) = map.get(&dir) {
            return w.clone();
        }
        if map.len() >= WINDOWS_MAX {
            if let Some(victim) = map.keys().next().copied() {
                map.remove(&victim);
            }
        }
        map.entry(dir).or_default().clone()
    }
}

/// One directory's window: the entries of the page fetched last, not yet asked for, and
/// the order of the lookups that missed it.
#[derive(Default)]
pub(crate) struct Window {
    /// Who the page was fetched for, and the mount's count of changes then.
    fetched_for: Option<(Cred, u64)>,
    /// Entries not yet asked for, by name.
    entries: BTreeMap<Vec<u8>, Listed>,
    /// The last name the page covers (`None`: no page).
    end: Option<Vec<u8>>,
    /// No name followed `end` when the page was fetched.
    eof: bool,
    /// Entries the page had, and of them asked for.
    fetched: usize,
    hits: usize,
    /// The last name looked up that the window did not answer.
    last_miss: Option<Vec<u8>>,
    /// Ordered misses still to wait before the next fetch, and the next wait.
    cooldown: u32,
    backoff: u32,
}

impl Window {
    /// The entry for `name`, if the current page has it for `cred` and the mount changed
    /// nothing since (`generation`): taken, so given once.
    pub(crate) fn take(&mut self, name: &[u8], cred: &Cred, generation: u64) -> Option<Listed> {
        if !self.current(cred, generation) {
            return None;
        }
        let listed = self.entries.remove(name)?;
        self.hits += 1;
        Some(listed)
    }

    /// The page was fetched for `cred`, and the mount changed nothing since (`generation`).
    fn current(&self, cred: &Cred, generation: u64) -> bool {
        matches!(&self.fetched_for, Some((c, g)) if c == cred && *g == generation)
    }

    /// A lookup of `name` the window did not answer: `Some(after)` if a page after that
    /// name should be fetched first (see the module's rules).
    pub(crate) fn missed(&mut self, name: &[u8], cred: &Cred, generation: u64) -> Option<Vec<u8>> {
        let previous = self.last_miss.replace(name.to_vec());
        let current = self.current(cred, generation);
        let ordered = previous.as_ref().filter(|p| name > p.as_slice());
        if let Some(end) = self.end.take() {
            // Within the page: made since, or given already. Past the last name there was:
            // made since.
            if current && (name <= end.as_slice() || self.eof) {
                self.end = Some(end);
                return None;
            }
            // Leaving the page (passed, or no longer current): was it worth fetching? If
            // not (a quarter of it asked for at least), stop for a while.
            let worth = self.fetched > 0 && self.hits * 4 >= self.fetched;
            self.drop_page();
            if !worth {
                self.cooldown = self.backoff.max(BACKOFF_MIN) - 1;
                self.backoff = (self.cooldown + 1).saturating_mul(2).min(BACKOFF_MAX);
                return None;
            }
            self.backoff = BACKOFF_MIN;
            // Going on in order: the page after this one.
            if let Some(previous) = ordered.filter(|_| current) {
                return Some(end.max(previous.clone()));
            }
        }
        let previous = ordered?.clone();
        if self.cooldown > 0 {
            self.cooldown -= 1;
            return None;
        }
        Some(previous)
    }

    /// The page fetched after `after` for `cred` when the mount's count of changes was
    /// `generation`.
    pub(crate) fn fill(
        &mut self,
        after: Vec<u8>,
        page: Vec<Listed>,
        eof: bool,
        cred: &Cred,
        generation: u64,
    ) {
        self.end = Some(page.last().map_or(after.clone(), |l| l.entry.name.clone()));
        self.eof = eof;
        self.fetched = page.len();
        self.hits = 0;
        self.entries = page
            .into_iter()
            .filter(|l| l.attr.is_some())
            .map(|l| (l.entry.name.clone(), l))
            .collect();
        self.fetched_for = Some((cred.clone(), generation));
    }

    /// Forgets the page (a fetch failed, or it is no longer current).
    pub(crate) fn drop_page(&mut self) {
        self.entries.clear();
        self.end = None;
        self.eof = false;
        self.fetched = 0;
        self.hits = 0;
        self.fetched_for = None;
    }
}

impl super::Shared {
    /// The attributes of `name` in `parent` from the directory's window, with what the
    /// kernel may cache of them (both, always: see the module's rules), fetching the next
    /// page first where the lookups come in order; `None`: look it up as usual.
    pub(super) fn statahead(&self, parent: Fid, name: &[u8], cred: &Cred) -> Option<Attr> {
        // Lookups this mount answers itself (a directory it made, or holds delegated), and
        // names no directory holds (refused by the lookup itself, ENAMETOOLONG).
        if self.windows.off.load(Ordering::Relaxed)
            || name.len() > nacre_types::limits::NAME_BYTES_MAX
            || self.client.answers_lookups_in(parent)
        {
            return None;
        }
        let window = self.windows.of(parent);
        let mut w = window.lock();
        let generation = self.windows.generation();
        let listed = match w.take(name, cred, generation) {
            Some(listed) => listed,
            None => {
                let after = w.missed(name, cred, generation)?;
                match self
                    .client
                    .readdir_plus(parent, Some(&after), WINDOW_ENTRIES)
                {
                    Ok((page, eof)) => w.fill(after, page, eof, cred, generation),
                    Err(_) => {
                        w.drop_page();
                        return None;
                    }
                }
                w.take(name, cred, self.windows.generation())?
            }
        };
        drop(w);
        let (attr, cached, handle) = listed.attr?;
        let current = cached.entry && cached.attr && self.client.holds_lock(attr.fid, handle);
        current.then_some(attr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_client::Cached;
    use nacre_types::{FileKind, TimeSpec};
    use nacre_wire::mds::DirEntry;

    fn cred(uid: u32) -> Cred {
        Cred {
            uid,
            gid: uid,
            groups: Vec::new(),
        }
    }

    fn listed(name: &str) -> Listed {
        let fid = Fid::new(0x200, name.len() as u32);
        let t = TimeSpec::default();
        let attr = Attr {
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
        };
        Listed {
            entry: DirEntry {
                name: name.as_bytes().to_vec(),
                fid,
                kind: FileKind::Regular,
            },
            attr: Some((attr, Cached::default(), 1)),
            here: false,
        }
    }

    fn names(from: u32, to: u32) -> Vec<String> {
        (from..to).map(|i| format!("f{i:05}")).collect()
    }

    /// Runs lookups of `asked` (in that order) against a directory of `dir` names: how
    /// many the window answered, and how many pages it fetched.
    fn run(dir: &[String], asked: &[String]) -> (usize, usize) {
        let (me, mut w) = (cred(1), Window::default());
        let (mut hits, mut pages) = (0, 0);
        for name in asked {
            if w.take(name.as_bytes(), &me, 0).is_some() {
                hits += 1;
                continue;
            }
            if let Some(after) = w.missed(name.as_bytes(), &me, 0) {
                pages += 1;
                let page: Vec<Listed> = dir
                    .iter()
                    .filter(|n| n.as_bytes() > after.as_slice())
                    .take(WINDOW_ENTRIES as usize)
                    .map(|n| listed(n))
                    .collect();
                let eof = dir
                    .iter()
                    .filter(|n| n.as_bytes() > after.as_slice())
                    .count()
                    <= WINDOW_ENTRIES as usize;
                w.fill(after, page, eof, &me, 0);
                if w.take(name.as_bytes(), &me, 0).is_some() {
                    hits += 1;
                }
            }
        }
        (hits, pages)
    }

    #[test]
    fn stats_in_name_order_are_answered_from_pages() {
        let dir = names(0, 5_000);
        let (hits, pages) = run(&dir, &dir);
        // The first lookup goes alone; from the second, every name comes from a page.
        assert_eq!(hits, 4_999);
        assert_eq!(pages, 4_999usize.div_ceil(WINDOW_ENTRIES as usize));
    }

    #[test]
    fn sparse_stats_stop_the_window_and_it_backs_off() {
        // pfind: one name in 25.
        let dir = names(0, 50_000);
        let asked: Vec<String> = dir.iter().step_by(25).cloned().collect();
        let (hits, pages) = run(&dir, &asked);
        // Without stopping, a page per 10 lookups (2,000 / 10 = 200 pages).
        assert!(
            pages <= 12,
            "{pages} pages fetched for {} lookups",
            asked.len()
        );
        assert!(hits <= pages * 11, "{hits} hits from {pages} pages");
    }

    #[test]
    fn numeric_order_is_not_name_order_and_fetches_little() {
        // mdtest's order: file.0, file.1, ..., file.10 (which sorts before file.2).
        let dir: Vec<String> = (0..20_000).map(|i| format!("file.{i}")).collect();
        let mut sorted = dir.clone();
        sorted.sort();
        let (_, pages) = run(&sorted, &dir);
        // Fewer entries fetched than names stat'ed (without the stop, a page per 11).
        let fetched = pages * WINDOW_ENTRIES as usize;
        assert!(
            fetched < dir.len(),
            "{pages} pages fetched for a numeric-order stat"
        );
    }

    #[test]
    fn creates_of_new_names_fetch_almost_nothing() {
        // The kernel looks each new name up before creating it, and each create is a
        // change: pages that answer nothing stop the window for longer and longer.
        let (me, mut w) = (cred(1), Window::default());
        let mut pages = 0;
        for (i, name) in names(0, 10_000).iter().enumerate() {
            let generation = 2 * i as u64;
            assert!(w.take(name.as_bytes(), &me, generation).is_none());
            if let Some(after) = w.missed(name.as_bytes(), &me, generation) {
                pages += 1;
                w.fill(after, Vec::new(), true, &me, generation);
            }
        }
        assert!(pages <= 16, "{pages} pages fetched for 10,000 creates");
    }

    #[test]
    fn nothing_is_answered_after_a_change_or_for_another_caller() {
        let dir = names(0, 1_000);
        let (me, other) = (cred(1), cred(2));
        let mut w = Window::default();
        assert!(w.missed(b"f00000", &me, 7).is_none());
        let after = w.missed(b"f00001", &me, 7).unwrap();
        let page = dir.iter().skip(1).take(256).map(|n| listed(n)).collect();
        w.fill(after, page, false, &me, 7);
        assert!(w.take(b"f00002", &other, 7).is_none(), "another caller");
        assert!(w.take(b"f00002", &me, 8).is_none(), "after a change");
        assert!(w.take(b"f00002", &me, 7).is_some());
        assert!(w.take(b"f00002", &me, 7).is_none(), "given twice");
        // A miss under a new count of changes drops the page.
        let _ = w.missed(b"f00003", &me, 8);
        assert!(w.end.is_none() && w.entries.is_empty());
        assert!(w.take(b"f00004", &me, 7).is_none());
    }

    #[test]
    fn the_number_of_windows_is_bounded() {
        let windows = Windows::default();
        for i in 0..(WINDOWS_MAX as u64 * 3) {
            windows.of(Fid::new(0x300, i as u32));
        }
        assert_eq!(windows.map.lock().len(), WINDOWS_MAX);
    }
}
