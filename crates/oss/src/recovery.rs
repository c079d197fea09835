//! An OST's recovery after a restart (Lustre's recovery window): until the clients that
//! held locks before take them back (or [`RECOVERY_MS`] passes), no one reads, glimpses or
//! changes object data, so nothing is seen or changed that a lock not replayed yet covers
//! — a kept write acknowledged before the restart is not missed by a reader, and is not
//! lost because another client wrote the object first.
//!
//! The clients to wait for are kept on disk ([`LOCK_CLIENTS_FILE`]: a first line `# nacre
//! lock_clients 1`, its format and version, then one uuid per line in hex): a client is
//! added (synced) before its first lock here is granted, and dropped when it disconnects,
//! is evicted, or did not come back in time. A file without the first line is of version
//! 1 (written before files had one) and read; one of a newer version is ignored with a
//! warning naming both versions (what it keeps is advisory: those clients are not waited
//! for) and written anew in this version. Held requests are answered
//! `EINPROGRESS`, which clients send again with a growing pause (as with a recovering MDT):
//! a service thread never waits. Let through meanwhile: lock polls, replays, cancels and
//! glimpse answers (recovery itself), writes kept under a lock already taken back (they
//! carry this start's epoch), and what needs no lock (statfs, sync, owners, destroys of
//! objects whose files are gone). A client in the same process as the OST (the embedded
//! form) dies with it and is never waited for.

use nacre_wire::oss::OssRequest;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest an OST waits after its start for the clients of before to take their locks
/// back (they learn of the restart from the MGS at once, or at their next poll).
pub const RECOVERY_MS: u64 = 60_000;
/// File in the OST directory listing the clients that hold locks here.
pub const LOCK_CLIENTS_FILE: &str = "lock_clients";
/// Most clients listed; past it, new ones are not (they are then not waited for).
pub const LOCK_CLIENTS_MAX: usize = 65_536;
/// Version of [`LOCK_CLIENTS_FILE`] this nacre writes (first line `# nacre lock_clients 1`)
/// and the newest it reads.
pub const LOCK_CLIENTS_VERSION: u32 = 1;

type ClientId = [u8; 16];

#[derive(Default)]
struct State {
    /// Listed on disk.
    listed: HashSet<ClientId>,
    /// Listed before this start and not back yet.
    waiting: HashSet<ClientId>,
    until: Option<Instant>,
    /// How many were waited for, came back, and did not in time.
    expected: usize,
    back: usize,
    late: usize,
    ended_after: Option<Duration>,
}

/// One OST's recovery state and its list of lock holders.
pub struct Recovery {
    state: Mutex<State>,
    /// Fast check: recovery still under way.
    active: AtomicBool,
    /// Requests answered `EINPROGRESS` so far.
    held: AtomicU64,
    started: Instant,
    path: Option<PathBuf>,
}

impl Default for Recovery {
    /// No list on disk and nothing to wait for (unit tests).
    fn default() -> Self {
        Recovery {
            state: Mutex::new(State::default()),
            active: AtomicBool::new(false),
            held: AtomicU64::new(0),
            started: Instant::now(),
            path: None,
        }
    }
}

fn hex(c: &ClientId) -> String {
    c.iter().map(|b| format!("{b:02x}")).collect()
}

/// Splits the text of a small file of the OST named `name` into the version its first line
/// declares (`# nacre NAME V`; no such line: a file written before files had one, version
/// "1") and the text after that line.
pub(crate) fn split_version<'a>(text: &'a str, name: &str) -> (&'a str, &'a str) {
    let prefix = format!("# nacre {name} ");
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    match first.strip_prefix(prefix.as_str()) {
        Some(version) => (version.trim(), rest),
        None => ("1", text),
    }
}

/// True if `version` (from [`split_version`]) is one a reader of versions 1 to `newest`
/// reads.
pub(crate) fn readable(version: &str, newest: u32) -> bool {
    version
        .parse::<u32>()
        .is_ok_and(|v| (1..=newest).contains(&v))
}

/// Writes `listed` to `path` anew in this nacre's version, durably: a new file, synced,
/// renamed over the old one, then the directory synced.
fn write_list(path: &Path, listed: &HashSet<ClientId>) -> std::io::Result<()> {
    let mut text = format!("# nacre {LOCK_CLIENTS_FILE} {LOCK_CLIENTS_VERSION}\n");
    for c in listed {
        text.push_str(&hex(c));
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

fn parse(line: &str) -> Option<ClientId> {
    let line = line.trim();
    if line.len() != 32 {
        return None;
    }
    let mut c = [0u8; 16];
    for (i, b) in c.iter_mut().enumerate() {
        *b = u8::from_str_radix(line.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(c)
}

impl Recovery {
    /// The recovery of the OST in `dir`: the clients it lists are waited for. Lines that are
    /// not client ids (a torn last line) are skipped. A list of a newer version is ignored
    /// (logged) and written anew, empty, in this version.
    pub fn open(dir: &Path) -> Recovery {
        let path = dir.join(LOCK_CLIENTS_FILE);
        let listed: HashSet<ClientId> = match std::fs::read_to_string(&path) {
            Ok(text) => match split_version(&text, LOCK_CLIENTS_FILE) {
                (version, list) if readable(version, LOCK_CLIENTS_VERSION) => {
                    list.lines().filter_map(parse).collect()
                }
                (version, _) => {
                    tracing::warn!(
                        "{}: format version {version}, newer than this nacre reads \
                         ({LOCK_CLIENTS_VERSION}): its clients are not waited for; written \
                         anew",
                        path.display()
                    );
                    let none = HashSet::new();
                    if let Err(e) = write_list(&path, &none) {
                        tracing::warn!("{}: {e}", path.display());
                    }
                    none
                }
            },
            Err(e) => {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!("{}: {e}; no client waited for", path.display());
                }
                HashSet::new()
            }
        };
        let now = Instant::now();
        let waiting = listed.clone();
        let active = !waiting.is_empty();
        let state = State {
            expected: waiting.len(),
            until: active.then(|| now + Duration::from_millis(RECOVERY_MS)),
            listed,
            waiting,
            ..State::default()
        };
        Recovery {
            state: Mutex::new(state),
            active: AtomicBool::new(active),
            held: AtomicU64::new(0),
            started: now,
            path: Some(path),
        }
    }

    /// True while clients of before are still awaited (ends recovery when the window is
    /// over: the late ones are dropped from the list).
    pub fn active(&self) -> bool {
        if !self.active.load(Ordering::Acquire) {
            return false;
        }
        let mut s = self.state.lock();
        if s.until.is_some_and(|t| Instant::now() >= t) {
            let late: Vec<ClientId> = s.waiting.drain().collect();
            s.late = late.len();
            for c in &late {
                s.listed.remove(c);
                tracing::warn!("client {} did not come back to take its locks", hex(c));
            }
            self.end(&mut s);
            self.rewrite(&s);
        }
        self.active.load(Ordering::Acquire)
    }

    fn end(&self, s: &mut State) {
        s.until = None;
        s.ended_after = Some(self.started.elapsed());
        self.active.store(false, Ordering::Release);
    }

    /// True if `req` must wait for the end of recovery (then counted as held).
    pub fn holds(&self, req: &OssRequest) -> bool {
        let wait = match req {
            OssRequest::Read { .. }
            | OssRequest::Glimpse { .. }
            | OssRequest::Punch { .. }
            | OssRequest::Fallocate { .. }
            | OssRequest::Enqueue { .. } => true,
            // A kept write carries the start it was kept under: this one's (its lock is
            // back) goes on, another's is refused as stale.
            OssRequest::Write { epoch, .. } | OssRequest::WriteRuns { epoch, .. } => *epoch == 0,
            _ => false,
        };
        if wait && self.active() {
            self.held.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// `client` took its locks back (its replay came, even an empty one).
    pub fn back(&self, client: &ClientId) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let mut s = self.state.lock();
        if s.waiting.remove(client) {
            s.back += 1;
            if s.waiting.is_empty() {
                self.end(&mut s);
            }
        }
    }

    /// `client` is about to be granted a lock: listed (synced) first, unless it runs in this
    /// process (`local`) or is listed already.
    pub fn holder(&self, client: &ClientId, local: bool) {
        if local {
            return;
        }
        let mut s = self.state.lock();
        if s.listed.contains(client) || s.listed.len() >= LOCK_CLIENTS_MAX {
            return;
        }
        s.listed.insert(*client);
        let Some(path) = &self.path else { return };
        let appended = match std::fs::OpenOptions::new().append(true).open(path) {
            Ok(mut f) => f
                .write_all(format!("{}\n", hex(client)).as_bytes())
                .and_then(|()| f.sync_data()),
            // The first client listed: the file is made with its version line first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_list(path, &s.listed),
            Err(e) => Err(e),
        };
        if let Err(e) = appended {
            tracing::warn!(
                "{}: {e}; client not waited for after a restart",
                path.display()
            );
        }
    }

    /// `client` left (disconnected, evicted): not waited for after a restart.
    pub fn forget(&self, client: &ClientId) {
        let mut s = self.state.lock();
        let listed = s.listed.remove(client);
        if s.waiting.remove(client) && s.waiting.is_empty() {
            self.end(&mut s);
        }
        if listed {
            self.rewrite(&s);
        }
    }

    /// Writes the list anew, in this nacre's version (a stale line only makes a restart
    /// wait longer).
    fn rewrite(&self, s: &State) {
        let Some(path) = &self.path else { return };
        if let Err(e) = write_list(path, &s.listed) {
            tracing::warn!("{}: {e}", path.display());
        }
    }

    /// Lustre's `recovery_status`.
    pub fn status(&self) -> String {
        let active = self.active();
        let s = self.state.lock();
        let status = if active {
            "RECOVERING"
        } else if s.expected == 0 {
            "INACTIVE"
        } else {
            "COMPLETE"
        };
        let mut out = format!(
            "status: {status}\nclients_expected: {}\nclients_back: {}\nclients_waiting: {}\n\
             clients_late: {}\nrequests_held: {}\n",
            s.expected,
            s.back,
            s.waiting.len(),
            s.late,
            self.held.load(Ordering::Relaxed)
        );
        if let Some(t) = s.until.filter(|_| active) {
            let left = t.saturating_duration_since(Instant::now());
            out.push_str(&format!("time_remaining_ms: {}\n", left.as_millis()));
        }
        if let Some(d) = s.ended_after {
            out.push_str(&format!("recovery_duration_ms: {}\n", d.as_millis()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::ObjectId;

    const A: ClientId = [1; 16];
    const B: ClientId = [2; 16];
    const O: ObjectId = ObjectId { seq: 1, id: 2 };

    fn read() -> OssRequest {
        OssRequest::Read {
            object: O,
            offset: 0,
            len: 1,
            lock: true,
        }
    }

    #[test]
    fn clients_of_before_are_waited_for_until_they_are_back() {
        let dir = tempfile::tempdir().unwrap();
        let r = Recovery::open(dir.path());
        assert!(!r.active() && !r.holds(&read()));
        r.holder(&A, false);
        r.holder(&B, false);
        r.holder(&[3; 16], true);
        r.forget(&B);
        drop(r);
        // Started again: only A is awaited; data requests are held, recovery ones are not.
        let r = Recovery::open(dir.path());
        assert!(r.active());
        assert!(r.holds(&read()));
        assert!(r.holds(&OssRequest::Glimpse { object: O }));
        let write = |epoch| OssRequest::Write {
            object: O,
            offset: 0,
            owner: Default::default(),
            lock: true,
            grant_used: 0,
            epoch,
            layout_gen: 0,
        };
        assert!(r.holds(&write(0)));
        assert!(!r.holds(&write(7)));
        assert!(!r.holds(&OssRequest::StatFs));
        assert!(!r.holds(&OssRequest::LockReplay {
            locks: vec![],
            grant_bytes: 0
        }));
        r.back(&B);
        assert!(r.active());
        r.back(&A);
        assert!(!r.active() && !r.holds(&read()));
        let status = r.status();
        assert!(status.contains("status: COMPLETE"), "{status}");
        assert!(status.contains("requests_held: 3"), "{status}");
        // A stays listed: a next restart waits for it again.
        drop(r);
        assert!(Recovery::open(dir.path()).active());
    }

    /// The list holding client A, as this version writes it.
    const LIST_V1: &str = "# nacre lock_clients 1\n01010101010101010101010101010101\n";

    #[test]
    fn the_list_opens_with_its_version_and_one_without_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_CLIENTS_FILE);
        let r = Recovery::open(dir.path());
        r.holder(&A, false);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), LIST_V1);
        r.holder(&B, false);
        r.forget(&B);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), LIST_V1);
        drop(r);
        let r = Recovery::open(dir.path());
        assert!(r.active());
        r.back(&A);
        assert!(!r.active());
        // A list written before lists had a version line: read as version 1, and given
        // the line when written anew.
        std::fs::write(&path, format!("{}\n{}\n", hex(&A), hex(&B))).unwrap();
        let r = Recovery::open(dir.path());
        assert!(r.active());
        assert!(r.status().contains("clients_expected: 2"), "{}", r.status());
        r.forget(&B);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), LIST_V1);
    }

    #[test]
    fn a_newer_list_is_ignored_and_written_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_CLIENTS_FILE);
        std::fs::write(&path, format!("# nacre lock_clients 2\n{}\n", hex(&A))).unwrap();
        let r = Recovery::open(dir.path());
        assert!(!r.active());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# nacre lock_clients 1\n"
        );
        r.holder(&A, false);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), LIST_V1);
    }

    #[test]
    fn a_torn_list_is_read_as_far_as_it_goes_and_late_clients_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(LOCK_CLIENTS_FILE),
            format!("{}\n0102", hex(&A)),
        )
        .unwrap();
        let r = Recovery::open(dir.path());
        assert!(r.active());
        r.state.lock().until = Some(Instant::now());
        assert!(!r.active());
        assert!(r.status().contains("clients_late: 1"));
        drop(r);
        assert!(!Recovery::open(dir.path()).active());
    }
}
