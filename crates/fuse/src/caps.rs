//! What this client knows about `security.capability` on the files it has open.
//!
//! Before every `write` the kernel asks the file system whether the file carries file
//! capabilities (`security.capability`), to strip them (`file_remove_privs`): FUSE never marks
//! an inode as having none. Asking the MDS each time costs a metadata round trip per write,
//! and makes every write wait for the MDS — during an MDS restart the writer blocks holding
//! the inode lock, and so does anything that closes the file meanwhile. Lustre clients keep
//! xattrs in a cache; here the answer "none" is kept for as long as the file stays open on this
//! client and nobody here changes its xattrs. A capability another client sets on a file this
//! client is writing is seen at the next open (documented in docs/posix.md).

use nacre_types::Fid;
use parking_lot::Mutex;
use std::collections::HashMap;

/// The xattr the kernel asks for before each write.
pub const XATTR_CAPS: &[u8] = b"security.capability";

/// One open file's entry.
#[derive(Default)]
struct Entry {
    /// Open handles on this client.
    handles: u32,
    /// `security.capability` is known to be absent.
    no_caps: bool,
    /// Bumped by every local xattr change, so an answer that raced a change is not kept.
    generation: u64,
}

/// Open files and what is known of their capabilities.
#[derive(Default)]
pub struct CapsCache {
    files: Mutex<HashMap<Fid, Entry>>,
}

impl CapsCache {
    /// A handle on `fid` was opened.
    pub fn opened(&self, fid: Fid) {
        self.files.lock().entry(fid).or_default().handles += 1;
    }

    /// A handle on `fid` was released; the last one forgets the file.
    pub fn released(&self, fid: Fid) {
        let mut files = self.files.lock();
        if let Some(e) = files.get_mut(&fid) {
            e.handles -= 1;
            if e.handles == 0 {
                files.remove(&fid);
            }
        }
    }

    /// True if `fid` is open here and known to have no `security.capability`.
    pub fn known_absent(&self, fid: Fid) -> bool {
        self.files.lock().get(&fid).is_some_and(|e| e.no_caps)
    }

    /// The generation to pass to [`CapsCache::learned_absent`] for a lookup starting now
    /// (`None`: the file is not open here, nothing will be kept).
    pub fn generation(&self, fid: Fid) -> Option<u64> {
        self.files.lock().get(&fid).map(|e| e.generation)
    }

    /// The MDS said `fid` has no `security.capability` for a lookup begun at `generation`.
    pub fn learned_absent(&self, fid: Fid, generation: u64) {
        if let Some(e) = self.files.lock().get_mut(&fid) {
            if e.generation == generation {
                e.no_caps = true;
            }
        }
    }

    /// `fid`, open here, was just created by this client (exclusively): it has no xattrs yet.
    pub fn created(&self, fid: Fid) {
        if let Some(e) = self.files.lock().get_mut(&fid) {
            e.no_caps = true;
        }
    }

    /// An xattr of `fid` is being changed here: forget what was known.
    pub fn changed(&self, fid: Fid) {
        if let Some(e) = self.files.lock().get_mut(&fid) {
            e.generation += 1;
            e.no_caps = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fid(n: u64) -> Fid {
        Fid::new(1, n as u32)
    }

    #[test]
    fn kept_only_while_open_and_unchanged() {
        let c = CapsCache::default();
        // Not open: nothing kept.
        assert_eq!(c.generation(fid(1)), None);
        c.learned_absent(fid(1), 0);
        assert!(!c.known_absent(fid(1)));
        // Open: kept until the last handle goes.
        c.opened(fid(1));
        c.opened(fid(1));
        let g = c.generation(fid(1)).unwrap();
        c.learned_absent(fid(1), g);
        assert!(c.known_absent(fid(1)));
        c.released(fid(1));
        assert!(c.known_absent(fid(1)));
        c.released(fid(1));
        assert!(!c.known_absent(fid(1)));
        // A local change forgets, and an answer that raced the change is dropped.
        c.opened(fid(2));
        let g = c.generation(fid(2)).unwrap();
        c.changed(fid(2));
        c.learned_absent(fid(2), g);
        assert!(!c.known_absent(fid(2)));
        let g = c.generation(fid(2)).unwrap();
        c.learned_absent(fid(2), g);
        assert!(c.known_absent(fid(2)));
        c.changed(fid(2));
        assert!(!c.known_absent(fid(2)));
        // Created here: known at once, until closed.
        c.opened(fid(3));
        c.created(fid(3));
        assert!(c.known_absent(fid(3)));
        c.released(fid(3));
        c.created(fid(3));
        assert!(!c.known_absent(fid(3)));
    }
}
