//! Directory offsets that name an entry. The offset the kernel gets with each entry (where a
//! listing goes on after it) is a hash of the entry's name, the same whichever open stream
//! gave it, and the mount keeps the names behind the offsets it gave. A listing resumed at
//! an offset goes on after that name, in the directory as it is then — not at an index
//! into one stream's own list of entries, which means another name in another stream.
//!
//! It matters because the kernel does not keep offsets to the stream that gave them: it
//! serves a directory's later listings from the pages of an earlier one
//! (`FOPEN_CACHE_DIR`), and when a lock callback drops those pages half-way, it goes on
//! through the reader's own stream at the cached offset; `telldir` values move between
//! streams the same way. Listings are in name order at the MDTs, so a name is a position
//! there that no change elsewhere in the directory moves (Lustre's readdir cookies are
//! name hashes for the same reason).
//!
//! Two names of one directory with the same 62-bit hash would share an offset (a listing
//! resumed there goes on after one of them); at a million entries the odds are about one in
//! ten million.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Names kept behind offsets, over all directories (past it, the books of directories no
/// stream has open go first, then all but the one being listed); an offset whose name is
/// no longer kept is found by listing the directory again from its start.
pub const COOKIE_NAMES_MAX: usize = 512 * 1024;

/// The first offset an entry may have (0, 1 and 2 are the listing's start, `.` and `..`).
pub const FIRST_ENTRY_COOKIE: u64 = 3;

/// The offset of the entry after which a listing resumes at it: a hash of its name (the
/// same for the mount's whole life: the standard hasher with fixed keys), at least
/// [`FIRST_ENTRY_COOKIE`] and below 2^62 + 3 (a positive `off_t`).
pub fn cookie_of(name: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    FIRST_ENTRY_COOKIE + (h.finish() >> 2)
}

/// The names behind the offsets given for one directory.
#[derive(Default)]
struct Book {
    names: HashMap<u64, Box<[u8]>>,
    /// Streams open on the directory now.
    streams: u32,
}

/// The names behind the offsets this mount gave, per directory (by inode number).
#[derive(Default)]
pub(crate) struct Cookies {
    inner: Mutex<Books>,
}

#[derive(Default)]
struct Books {
    dirs: HashMap<u64, Book>,
    /// Names kept, over all directories.
    names: usize,
}

impl Cookies {
    /// A stream on directory `dir` opens.
    pub fn opened(&self, dir: u64) {
        self.inner.lock().dirs.entry(dir).or_default().streams += 1;
    }

    /// A stream on directory `dir` is released.
    pub fn released(&self, dir: u64) {
        let mut books = self.inner.lock();
        if let Some(b) = books.dirs.get_mut(&dir) {
            b.streams = b.streams.saturating_sub(1);
        }
    }

    /// Keeps the names behind the offsets `given` (offset, name) for directory `dir`.
    pub fn record(&self, dir: u64, given: Vec<(u64, Box<[u8]>)>) {
        let mut books = self.inner.lock();
        if books.names + given.len() > COOKIE_NAMES_MAX {
            books.make_room(dir, given.len());
        }
        let book = books.dirs.entry(dir).or_default();
        let before = book.names.len();
        for (cookie, name) in given {
            book.names.insert(cookie, name);
        }
        let added = book.names.len() - before;
        books.names += added;
    }

    /// The name behind offset `cookie` of directory `dir`, if still kept.
    pub fn name_of(&self, dir: u64, cookie: u64) -> Option<Box<[u8]>> {
        self.inner
            .lock()
            .dirs
            .get(&dir)?
            .names
            .get(&cookie)
            .cloned()
    }

    /// Names kept now (over all directories).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.inner.lock().names
    }
}

impl Books {
    /// Forgets books until `more` names fit: those of directories no stream has open first,
    /// then all but `dir`'s.
    fn make_room(&mut self, dir: u64, more: usize) {
        for open_too in [false, true] {
            let drop: Vec<u64> = self
                .dirs
                .iter()
                .filter(|(d, b)| **d != dir && (open_too || b.streams == 0))
                .map(|(d, _)| *d)
                .collect();
            for d in drop {
                if self.names + more <= COOKIE_NAMES_MAX {
                    return;
                }
                let b = self.dirs.get_mut(&d).expect("listed");
                self.names -= b.names.len();
                b.names = HashMap::new();
                if b.streams == 0 {
                    self.dirs.remove(&d);
                }
            }
        }
        if self.names + more > COOKIE_NAMES_MAX {
            // The directory being listed alone is past the limit: start its book afresh.
            if let Some(b) = self.dirs.get_mut(&dir) {
                self.names -= b.names.len();
                b.names = HashMap::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_past_the_dots_and_positive() {
        for n in 0..10_000u32 {
            let c = cookie_of(format!("f{n}").as_bytes());
            assert!(c >= FIRST_ENTRY_COOKIE);
            assert!(c < i64::MAX as u64);
        }
        assert_eq!(cookie_of(b"same"), cookie_of(b"same"));
        assert_ne!(cookie_of(b"a"), cookie_of(b"b"));
    }

    #[test]
    fn names_are_kept_within_the_limit_and_open_directories_last() {
        let c = Cookies::default();
        c.opened(1);
        let batch = |from: usize, n: usize| {
            (from..from + n)
                .map(|i| {
                    let name = format!("n{i}").into_bytes().into_boxed_slice();
                    (cookie_of(&name), name)
                })
                .collect::<Vec<_>>()
        };
        c.record(1, batch(0, 1000));
        let first = cookie_of(b"n5");
        assert_eq!(c.name_of(1, first).as_deref(), Some(&b"n5"[..]));
        // A closed directory fills the rest; the next one's names push it out, not dir 1's.
        c.record(2, batch(1000, COOKIE_NAMES_MAX - 1000));
        assert_eq!(c.kept(), COOKIE_NAMES_MAX);
        c.record(3, batch(0, 10));
        assert!(c.kept() <= COOKIE_NAMES_MAX);
        assert!(c.name_of(2, cookie_of(b"n2000")).is_none());
        assert_eq!(c.name_of(1, first).as_deref(), Some(&b"n5"[..]));
        assert_eq!(c.name_of(3, first).as_deref(), Some(&b"n5"[..]));
        c.released(1);
        // Past the limit with only dir 1 open: the directory being listed keeps its own.
        c.record(4, batch(0, COOKIE_NAMES_MAX));
        assert!(c.kept() <= COOKIE_NAMES_MAX);
        assert!(c.name_of(1, first).is_none());
        assert_eq!(c.name_of(4, first).as_deref(), Some(&b"n5"[..]));
    }
}
