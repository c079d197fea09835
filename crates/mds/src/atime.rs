//! Lazy access times (relatime-like), so policies can use a file's access age.
//!
//! Precision, stated: a file's access is recorded when its last opener closes it (an open
//! the client keeps under an OPEN lock closes when the lock goes), and only where Linux's
//! `relatime` would record it: the stored access time is not after the last modification
//! or change, or is a day old or more ([`RELATIME_S`]). Recorded accesses are kept in memory
//! and written with one transaction every [`ATIME_FLUSH_MS`] (ops/atime_flush.rs) (and at a clean stop), without
//! waiting for the disk: a crash of the MDT loses at most the accesses of the last few
//! seconds, never anything else. A client's own `utimes` always wins (it is a change).

use nacre_types::{Attr, Fid, TimeSpec};
use parking_lot::Mutex;
use std::collections::HashMap;

pub use nacre_types::attr::RELATIME_S;
/// How often recorded accesses are written.
pub const ATIME_FLUSH_MS: u64 = 5_000;
/// Accesses waiting to be written at most; past it, accesses wait for the next flush.
pub const ATIMES_PENDING_MAX: usize = 65_536;

/// Accesses recorded and not yet written.
#[derive(Default)]
pub struct Atimes {
    pending: Mutex<HashMap<Fid, TimeSpec>>,
    /// Flushes that wrote something, done.
    pub(crate) flushes: std::sync::atomic::AtomicU64,
}

/// True if an access at `now` to a file with `attr` is to be recorded (relatime).
pub fn due(attr: &Attr, now: TimeSpec) -> bool {
    nacre_types::attr::relatime_due(attr, now)
}

impl Atimes {
    /// Records an access to `fid` at `now` (nothing past [`ATIMES_PENDING_MAX`]).
    pub fn accessed(&self, fid: Fid, now: TimeSpec) {
        let mut p = self.pending.lock();
        if p.len() < ATIMES_PENDING_MAX || p.contains_key(&fid) {
            let t = p.entry(fid).or_insert(now);
            *t = (*t).max(now);
        }
    }

    /// Accesses waiting to be written.
    pub fn pending(&self) -> usize {
        self.pending.lock().len()
    }

    /// Flushes that wrote something so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Takes every recorded access (for the flush: ops/atime_flush.rs).
    pub(crate) fn take(&self) -> HashMap<Fid, TimeSpec> {
        std::mem::take(&mut *self.pending.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64) -> TimeSpec {
        TimeSpec { sec, nsec: 0 }
    }

    #[test]
    fn relatime_rules() {
        let mut a = Attr {
            fid: Fid::ROOT,
            kind: nacre_types::FileKind::Regular,
            perm: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            blocks: 0,
            atime: t(100),
            mtime: t(50),
            ctime: t(50),
            rdev: 0,
            project: 0,
            proj_inherit: false,
        };
        assert!(!due(&a, t(200)), "read since the last change, within a day");
        assert!(due(&a, t(100 + RELATIME_S)), "a day old");
        a.mtime = t(150);
        assert!(due(&a, t(200)), "changed since the last read");
        let p = Atimes::default();
        let f = Fid::new(0x2_0000_0400, 1);
        p.accessed(f, t(300));
        p.accessed(f, t(200));
        assert_eq!(p.take().get(&f), Some(&t(300)), "the latest access wins");
        assert_eq!(p.pending(), 0);
    }
}
