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
//! ([`Written::setting_times`], [`Written::close_starts`]). The kernel's release of a handle
//! comes after close(2) returned, so a `utimes` right after close(2) can reach this client
//! before that close is sent, or while it is in flight: a `utimes` waits for the closes of
//! the file in flight that move its times (they are answered first: the MDT runs requests
//! in any order), and a close that starts after it moves nothing.

use nacre_types::{Attr, Fid, TimeSpec};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;

/// Files remembered at most; past it the oldest half is forgotten (a stat of one of those
/// shows the MDT's times, from before the writes, until its close).
pub const WRITTEN_FILES_MAX: usize = 65_536;

#[derive(Default)]
struct State {
    /// (time of the last write, its sequence number) per file.
    files: HashMap<Fid, (TimeSpec, u64)>,
    /// Files whose times this client set (or is setting) after its last write of them,
    /// with the sequence number of that setting: their writes' close moves nothing.
    times_set: HashMap<Fid, u64>,
    /// Closes in flight that move their file's times, per file.
    touching: HashMap<Fid, u32>,
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
    /// Signalled when a close that moves a file's times is answered.
    touched: Condvar,
}

/// A setting of a file's times this client is sending ([`Written::setting_times`]).
#[derive(Debug)]
pub struct TimesSet {
    fid: Fid,
    seq: u64,
    before: Option<u64>,
    /// False if closes of the file that move its times were still in flight when the wait
    /// for them ended.
    pub drained: bool,
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
        // Written after any setting of its times: its close moves them again.
        s.times_set.remove(&fid);
    }

    /// This client is about to set `fid`'s modification time (a `utimes`): what it sets
    /// wins over the writes before it, here and at their close. Waits (at most `wait_ms`)
    /// until the closes of the file in flight that move its times are answered, so the MDT
    /// runs them before the setting. [`Written::times_not_set`] if the setting fails.
    pub fn setting_times(&self, fid: Fid, wait_ms: u64) -> TimesSet {
        let mut s = self.state.lock();
        s.seq += 1;
        let seq = s.seq;
        s.files.remove(&fid);
        make_room(&mut s.times_set, fid, |q| *q);
        let before = s.times_set.insert(fid, seq);
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait_ms);
        while s.touching.contains_key(&fid) {
            if self.touched.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        let drained = !s.touching.contains_key(&fid);
        TimesSet {
            fid,
            seq,
            before,
            drained,
        }
    }

    /// The setting of times `set` failed: the writes before it move the times at their
    /// close again.
    pub fn times_not_set(&self, set: TimesSet) {
        let mut s = self.state.lock();
        if s.times_set.get(&set.fid) == Some(&set.seq) {
            match set.before {
                Some(before) => s.times_set.insert(set.fid, before),
                None => s.times_set.remove(&set.fid),
            };
        }
    }

    /// A close of `fid` is about to be sent, `written` if data was written through its
    /// handle: what it covers, and whether it moves the file's times (not if this client
    /// set them after its last write of the file). One that does is in flight until
    /// [`Written::close_done`].
    pub fn close_starts(&self, fid: Fid, written: bool) -> (Closing, bool) {
        let mut s = self.state.lock();
        let touch = written && !s.times_set.contains_key(&fid);
        if touch {
            *s.touching.entry(fid).or_default() += 1;
        }
        (Closing(s.seq), touch)
    }

    /// The close of `fid` started with `touch` was answered (or failed).
    pub fn close_done(&self, fid: Fid, touch: bool) {
        if !touch {
            return;
        }
        let mut s = self.state.lock();
        if let Some(n) = s.touching.get_mut(&fid) {
            *n -= 1;
            if *n == 0 {
                s.touching.remove(&fid);
            }
        }
        drop(s);
        self.touched.notify_all();
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
        let (at, _) = w.close_starts(f, false);
        w.wrote(f);
        w.closed(f, at);
        assert_eq!(w.len(), 1, "a write after the close was sent stays");
        let (at, _) = w.close_starts(f, false);
        w.closed(f, at);
        assert!(w.is_empty());
        let mut a = attr(f);
        w.cover(&mut a);
        assert_eq!(a.mtime.sec, 1);
    }

    /// Whether a close of `fid` that wrote would move its times (taken and given back).
    fn touches(w: &Written, fid: Fid) -> bool {
        let (_, touch) = w.close_starts(fid, true);
        w.close_done(fid, touch);
        touch
    }

    #[test]
    fn times_set_after_the_writes_win() {
        let w = Written::default();
        let f = Fid::new(0x2_0000_0400, 1);
        assert!(
            touches(&w, f),
            "nothing known: a close that wrote moves them"
        );
        assert!(!w.close_starts(f, false).1, "a close that wrote nothing");
        w.wrote(f);
        assert!(touches(&w, f));
        let set = w.setting_times(f, 0);
        assert!(set.drained);
        assert!(!touches(&w, f), "set after the last write");
        let mut a = attr(f);
        w.cover(&mut a);
        assert_eq!(a.mtime.sec, 1, "the time set shows, not the write's");
        w.wrote(f);
        assert!(touches(&w, f), "written after the times were set");
        let (at, _) = w.close_starts(f, false);
        w.closed(f, at);
        let set = w.setting_times(f, 0);
        assert!(!touches(&w, f), "another handle's close after the set");
        // The setting failed: the writes' close moves them again.
        w.times_not_set(set);
        assert!(touches(&w, f));
        // A write the client forgot (past the bound) still counts after a setting.
        w.setting_times(f, 0);
        w.wrote(f);
        w.state.lock().files.clear();
        assert!(touches(&w, f));
    }

    #[test]
    fn a_setting_of_times_waits_for_the_closes_in_flight_that_move_them() {
        let w = std::sync::Arc::new(Written::default());
        let f = Fid::new(0x2_0000_0400, 1);
        w.wrote(f);
        let (_, touch) = w.close_starts(f, true);
        assert!(touch);
        // Not answered within the wait: waited for it, then said so.
        let started = std::time::Instant::now();
        assert!(!w.setting_times(f, 20).drained);
        assert!(started.elapsed() >= std::time::Duration::from_millis(20));
        // Answered while the setting waits: it goes on.
        let waiter = {
            let w = w.clone();
            std::thread::spawn(move || w.setting_times(f, 60_000).drained)
        };
        w.close_done(f, true);
        assert!(waiter.join().unwrap());
        assert!(w.state.lock().touching.is_empty());
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
