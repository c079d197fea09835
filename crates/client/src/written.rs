//! Modification times of files this client is writing, until a close tells their MDT.
//!
//! POSIX has `write` mark the file's modification and change times. Nacre's MDT moves them
//! at the close of a handle that wrote (crates/mds `ops::open::touch_written`, in its own
//! clock), or when a writer is evicted; until then it still has the times from before the
//! writes. So this client remembers, per file, when it last wrote it (its own clock), and
//! every answer it gives with a glimpsed size (a file someone writes: the MDT does not know
//! its size) carries the later of the MDT's times and that one. An entry goes once a close
//! sent after its last write is answered: the MDT's times are then later than every write
//! it covers. Other clients see the new times once that close reached the MDT (as NFS's
//! close-to-open).
//!
//! A `utimes` this client sends after the writes is what the file keeps: the close then
//! says it moves nothing (`Close::touch` false) unless a write came after the `utimes`
//! ([`Written::set_times`], [`Written::touches`]). The kernel's release of a handle comes
//! after close(2) returned, so a `utimes` right after close(2) can reach the MDT before it.

use nacre_types::{Attr, Fid, TimeSpec};
use parking_lot::Mutex;
use std::collections::HashMap;

/// Files remembered at most; past it the oldest half is forgotten (a stat of one of those
/// shows the MDT's times, from before the writes, until its close).
pub const WRITTEN_FILES_MAX: usize = 65_536;

#[derive(Default)]
struct State {
    /// (time of the last write, its sequence number) per file.
    files: HashMap<Fid, (TimeSpec, u64)>,
    /// The sequence number of this client's last setting of each file's times.
    times_set: HashMap<Fid, u64>,
    seq: u64,
}

/// Keeps at most [`WRITTEN_FILES_MAX`] entries of `map` (whose values hold sequence numbers)
/// before `fid` goes in: past it, the older half goes.
fn make_room<V>(map: &mut HashMap<Fid, V>, fid: Fid, seq: impl Fn(&V) -> u64) {
    if map.len() < WRITTEN_FILES_MAX || map.contains_key(&fid) {
        return;
    }
    let mut seqs: Vec<u64> = map.values().map(&seq).collect();
    seqs.sort_unstable();
    let cut = seqs[seqs.len() / 2];
    map.retain(|_, v| seq(v) > cut);
}

/// The files this client wrote and whose close has not yet told their MDT.
#[derive(Default)]
pub struct Written {
    state: Mutex<State>,
}

/// Where the writes of a file stood when a close was sent ([`Written::closing`]).
#[derive(Clone, Copy, Debug)]
pub struct Closing(u64);

impl Written {
    /// `fid` is written now.
    pub fn wrote(&self, fid: Fid) {
        let now = TimeSpec::now();
        let mut s = self.state.lock();
        s.seq += 1;
        let seq = s.seq;
        make_room(&mut s.files, fid, |(_, q)| *q);
        s.files.insert(fid, (now, seq));
    }

    /// This client set `fid`'s modification time (a `utimes`, answered): what it set wins
    /// over the writes before it, here and at their close.
    pub fn set_times(&self, fid: Fid) {
        let mut s = self.state.lock();
        s.seq += 1;
        let seq = s.seq;
        s.files.remove(&fid);
        make_room(&mut s.times_set, fid, |q| *q);
        s.times_set.insert(fid, seq);
    }

    /// Whether a close of a handle of `fid` that wrote moves the file's times: not if this
    /// client set them after its last write of the file.
    pub fn touches(&self, fid: Fid) -> bool {
        let s = self.state.lock();
        match (s.times_set.get(&fid), s.files.get(&fid)) {
            (None, _) => true,
            (Some(set), Some((_, wrote))) => wrote > set,
            (Some(_), None) => false,
        }
    }

    /// A close of `fid` is about to be sent: what it covers.
    pub fn closing(&self) -> Closing {
        Closing(self.state.lock().seq)
    }

    /// The close taken at `at` was answered: the MDT's times cover every write before it.
    pub fn closed(&self, fid: Fid, at: Closing) {
        let mut s = self.state.lock();
        if s.files.get(&fid).is_some_and(|(_, q)| *q <= at.0) {
            s.files.remove(&fid);
        }
    }

    /// Puts the time of this client's last write of `attr`'s file into its modification
    /// and change times, where it is later.
    pub fn cover(&self, attr: &mut Attr) {
        let s = self.state.lock();
        if s.files.is_empty() {
            return;
        }
        if let Some((t, _)) = s.files.get(&attr.fid) {
            attr.mtime = attr.mtime.max(*t);
            attr.ctime = attr.ctime.max(*t);
        }
    }

    /// Files remembered.
    pub fn len(&self) -> usize {
        self.state.lock().files.len()
    }

    /// True if no file is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::FileKind;

    fn attr(fid: Fid) -> Attr {
        Attr {
            fid,
            kind: FileKind::Regular,
            perm: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            blocks: 0,
            atime: TimeSpec { sec: 1, nsec: 0 },
            mtime: TimeSpec { sec: 1, nsec: 0 },
            ctime: TimeSpec { sec: 1, nsec: 0 },
            rdev: 0,
            project: 0,
            proj_inherit: false,
        }
    }

    #[test]
    fn a_write_shows_until_a_close_after_it_is_answered() {
        let w = Written::default();
        let f = Fid::new(0x2_0000_0400, 1);
        let g = Fid::new(0x2_0000_0400, 2);
        w.wrote(f);
        let mut a = attr(f);
        w.cover(&mut a);
        assert!(a.mtime.sec > 1 && a.ctime == a.mtime, "{a:?}");
        let mut b = attr(g);
        w.cover(&mut b);
        assert_eq!(b.mtime.sec, 1, "another file");
        let at = w.closing();
        w.wrote(f);
        w.closed(f, at);
        assert_eq!(w.len(), 1, "a write after the close was sent stays");
        let at = w.closing();
        w.closed(f, at);
        assert!(w.is_empty());
        let mut a = attr(f);
        w.cover(&mut a);
        assert_eq!(a.mtime.sec, 1);
    }

    #[test]
    fn times_set_after_the_writes_win() {
        let w = Written::default();
        let f = Fid::new(0x2_0000_0400, 1);
        assert!(w.touches(f), "nothing known: a close that wrote moves them");
        w.wrote(f);
        assert!(w.touches(f));
        w.set_times(f);
        assert!(!w.touches(f), "set after the last write");
        let mut a = attr(f);
        w.cover(&mut a);
        assert_eq!(a.mtime.sec, 1, "the time set shows, not the write's");
        w.wrote(f);
        assert!(w.touches(f), "written after the times were set");
        let at = w.closing();
        w.closed(f, at);
        w.set_times(f);
        assert!(!w.touches(f), "another handle's close after the set");
    }

    #[test]
    fn bounded() {
        let w = Written::default();
        for n in 0..(WRITTEN_FILES_MAX as u32 + 10) {
            w.wrote(Fid::new(0x2_0000_0400, n));
        }
        assert!(w.len() <= WRITTEN_FILES_MAX);
        let mut a = attr(Fid::new(0x2_0000_0400, WRITTEN_FILES_MAX as u32 + 9));
        w.cover(&mut a);
        assert!(a.mtime.sec > 1, "the newest stays");
    }
}
