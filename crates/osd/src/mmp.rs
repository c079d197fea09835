//! Multi-mount protection (Lustre's MMP, from ext4): a target that two servers can reach
//! (a failover pair on shared storage) is served by at most one of them.
//!
//! The server that serves a target owns `DIR/nacre-mmp`, a small checksummed record with a
//! sequence number it rewrites (and `fdatasync`s) every `interval_ms`. Before writing, it
//! reads the record back: if another server wrote it, this one has been fenced and stops
//! serving the target ([`Guard::on_fence`]). A server that wants the target
//! ([`Guard::acquire`]):
//!
//! * takes it at once if the record is `CLEAN` (released on purpose) or missing, or if its
//!   owner ran on this same kernel (same boot id) and its process is gone;
//! * otherwise watches the sequence number for `2 × interval + 1 s`: if it moved, the owner
//!   is alive and the target is refused ([`MmpError::InUse`]);
//! * then writes its own record and reads it back after one more interval: a server that
//!   raced it and wrote later wins, this one gives up.
//!
//! The owner also holds a lease: requests are served only while its last successful update
//! is younger than `1.5 × interval` ([`Guard::holds`]). A lapsed lease (the process was
//! stopped, its disk stalled) is renewed by a read-check-write before the next request is
//! served, so a server paused long enough for its partner to take the target over finds
//! out before it serves anything more. (A request already past that check when the process
//! was paused still completes: the window ext4's MMP has too.)

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nacre_types::AlignedBuf;

/// File name of the record inside a target directory.
pub const MMP_FILE: &str = "nacre-mmp";
/// Size of the record on disk.
pub const MMP_RECORD_BYTES: usize = 160;
/// Longest owner name (a NID) stored.
pub const MMP_OWNER_BYTES_MAX: usize = 96;
/// Default update interval (ext4's default is 5 s; 1 s makes failover quicker for a write
/// of 160 bytes a second).
pub const MMP_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// Shortest update interval accepted.
pub const MMP_INTERVAL_MS_MIN: u64 = 50;
/// Longest update interval accepted.
pub const MMP_INTERVAL_MS_MAX: u64 = 60_000;
const MAGIC: u32 = 0x4e4d_4d50; // "NMMP"
/// The record's version. It stays 1: the other server of a failover pair reads the record
/// and may run the release before (a rolling upgrade), which refuses another version. New
/// fields go in [`MMP_RESERVED`]; a change that cannot be made so needs both servers of a
/// pair upgraded together, and says so.
const VERSION: u16 = 1;
/// Bytes of the record after the longest owner and before the checksum: zero, reserved for
/// compatible additions (readers of version 1 ignore them).
pub const MMP_RESERVED: std::ops::Range<usize> = 46 + MMP_OWNER_BYTES_MAX..MMP_RECORD_BYTES - 4;

/// Whether a server holds the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmpState {
    /// A server serves it and updates the record.
    Active,
    /// Released on purpose: anyone may take it at once.
    Clean,
}

/// The record in `nacre-mmp`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmpRecord {
    /// Active or clean.
    pub state: MmpState,
    /// Bumped by every update.
    pub seq: u64,
    /// Wall-clock time of the update, milliseconds since the epoch (for messages only:
    /// decisions use the sequence number, never clocks of two hosts).
    pub time_ms: u64,
    /// Process id of the owner.
    pub pid: u32,
    /// The owner's kernel boot id (`/proc/sys/kernel/random/boot_id`), so a server on the
    /// same kernel can tell that the owner process is gone.
    pub boot_id: [u8; 16],
    /// Who owns it (the server's NID).
    pub owner: String,
}

/// Why the record could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MmpError {
    /// Another server is serving the target.
    #[error("{target} is in use by {owner} (pid {pid}): its multi-mount protection record moved from sequence {before} to {after} while we watched; refusing to serve it")]
    InUse {
        /// Target directory.
        target: String,
        /// Owner recorded.
        owner: String,
        /// Its pid.
        pid: u32,
        /// Sequence number first seen.
        before: u64,
        /// Sequence number seen after the wait.
        after: u64,
    },
    /// Another server wrote the record while we were taking it.
    #[error("{target}: {owner} took the target at the same time; leaving it to that server")]
    Raced {
        /// Target directory.
        target: String,
        /// The winner.
        owner: String,
    },
    /// The record is damaged.
    #[error("{path}: damaged multi-mount protection record: {reason}")]
    Corrupt {
        /// File.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Bad setting.
    #[error("mmp interval {0} ms is out of range {MMP_INTERVAL_MS_MIN}..={MMP_INTERVAL_MS_MAX}")]
    Interval(u64),
    /// I/O error.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: String,
        /// Error.
        source: std::io::Error,
    },
}

impl MmpRecord {
    /// The on-disk bytes: magic, version, state, seq, time, pid, boot id, owner, zeros
    /// ([`MMP_RESERVED`]), crc32c.
    pub fn encode(&self) -> [u8; MMP_RECORD_BYTES] {
        let mut b = [0u8; MMP_RECORD_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        let state: u16 = match self.state {
            MmpState::Active => 1,
            MmpState::Clean => 2,
        };
        b[6..8].copy_from_slice(&state.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.time_ms.to_le_bytes());
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b[28..44].copy_from_slice(&self.boot_id);
        let owner = self.owner.as_bytes();
        let n = owner.len().min(MMP_OWNER_BYTES_MAX);
        b[44..46].copy_from_slice(&(n as u16).to_le_bytes());
        b[46..46 + n].copy_from_slice(&owner[..n]);
        let crc = crc32c::crc32c(&b[..MMP_RECORD_BYTES - 4]);
        b[MMP_RECORD_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a record; any damage is an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<MmpRecord, String> {
        if b.len() != MMP_RECORD_BYTES {
            return Err(format!("{} bytes, expected {MMP_RECORD_BYTES}", b.len()));
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err("bad magic".into());
        }
        let crc = crc32c::crc32c(&b[..MMP_RECORD_BYTES - 4]);
        if crc != u32_at(MMP_RECORD_BYTES - 4) {
            return Err("checksum mismatch".into());
        }
        if u16_at(4) != VERSION {
            return Err(format!("unknown version {}", u16_at(4)));
        }
        let state = match u16_at(6) {
            1 => MmpState::Active,
            2 => MmpState::Clean,
            s => return Err(format!("bad state {s}")),
        };
        let n = usize::from(u16_at(44));
        if n > MMP_OWNER_BYTES_MAX {
            return Err(format!("owner of {n} bytes"));
        }
        let owner = std::str::from_utf8(&b[46..46 + n])
            .map_err(|_| "owner is not UTF-8".to_string())?
            .to_string();
        Ok(MmpRecord {
            state,
            seq: u64_at(8),
            time_ms: u64_at(16),
            pid: u32_at(24),
            boot_id: b[28..44].try_into().expect("16 bytes"),
            owner,
        })
    }
}

/// This kernel's boot id (zeros if it cannot be read: then no owner looks local).
pub fn boot_id() -> [u8; 16] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    uuid::Uuid::parse_str(text.trim())
        .map(|u| *u.as_bytes())
        .unwrap_or([0; 16])
}

fn pid_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists; no signal is sent.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Bytes read and written through the direct descriptor: one aligned block holding the
/// record and zeros (an O_DIRECT transfer must be a multiple of the device's block size).
pub const MMP_BLOCK_BYTES: usize = 4096;

/// The record file of a target directory.
///
/// The record is read and written with O_DIRECT where the file system allows it, like
/// ext4's MMP block I/O: two servers sharing a device through different kernels each have
/// their own page cache, and a buffered read could return this kernel's stale copy of a
/// block the partner has rewritten. Where O_DIRECT is refused (tmpfs, some FUSE or network
/// file systems), buffered I/O is used; that is right on one kernel and on file systems
/// whose clients keep their caches coherent.
pub struct MmpFile {
    path: PathBuf,
    file: File,
    direct: Option<File>,
    direct_ok: AtomicBool,
}

impl MmpFile {
    /// Opens (creating) the record of target directory `dir`.
    pub fn open(dir: &Path) -> Result<MmpFile, MmpError> {
        let path = dir.join(MMP_FILE);
        let open = |flags: i32| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(flags)
                .open(&path)
        };
        let file = open(0).map_err(|source| MmpError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let direct = open(libc::O_DIRECT).ok();
        Ok(MmpFile {
            direct_ok: AtomicBool::new(direct.is_some()),
            path,
            file,
            direct,
        })
    }

    /// True while the record goes past the page cache (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct().is_some()
    }

    fn io(&self, source: std::io::Error) -> MmpError {
        MmpError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// The descriptor for direct I/O, if it is still usable.
    fn direct(&self) -> Option<&File> {
        self.direct
            .as_ref()
            .filter(|_| self.direct_ok.load(Ordering::Relaxed))
    }

    /// Notes that the file system refused a direct transfer (EINVAL): buffered from now on.
    fn direct_refused(&self, e: &std::io::Error) -> bool {
        if e.raw_os_error() == Some(libc::EINVAL) {
            tracing::warn!(path = %self.path.display(), "O_DIRECT refused for the MMP record; using buffered I/O");
            self.direct_ok.store(false, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Reads up to `buf.len()` bytes at offset 0 (fewer at end of file).
    fn read_into(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// One direct read of the block at offset 0 (retried only if interrupted).
    fn read_direct(file: &File, block: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match file.read_at(block, 0) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    /// The record, or None if the file is empty (never written: free).
    pub fn read(&self) -> Result<Option<MmpRecord>, MmpError> {
        let mut block = AlignedBuf::zeroed(MMP_BLOCK_BYTES);
        let got = match self.direct() {
            // One aligned transfer; a short one is the end of the file (a record written
            // by the buffered path is 160 bytes long).
            Some(f) => match Self::read_direct(f, &mut block) {
                Ok(n) => n,
                Err(e) if self.direct_refused(&e) => {
                    Self::read_into(&self.file, &mut block[..MMP_RECORD_BYTES])
                        .map_err(|e| self.io(e))?
                }
                Err(e) => return Err(self.io(e)),
            },
            None => Self::read_into(&self.file, &mut block[..MMP_RECORD_BYTES])
                .map_err(|e| self.io(e))?,
        };
        if got == 0 {
            return Ok(None);
        }
        MmpRecord::decode(&block[..got.min(MMP_RECORD_BYTES)])
            .map(Some)
            .map_err(|reason| MmpError::Corrupt {
                path: self.path.display().to_string(),
                reason,
            })
    }

    /// Writes the record durably.
    pub fn write(&self, rec: &MmpRecord) -> Result<(), MmpError> {
        if let Some(f) = self.direct() {
            let mut block = AlignedBuf::zeroed(MMP_BLOCK_BYTES);
            block[..MMP_RECORD_BYTES].copy_from_slice(&rec.encode());
            match f.write_all_at(&block, 0).and_then(|()| f.sync_data()) {
                Ok(()) => return Ok(()),
                Err(e) if self.direct_refused(&e) => {}
                Err(e) => return Err(self.io(e)),
            }
        }
        self.file
            .write_all_at(&rec.encode(), 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| self.io(e))
    }
}

/// How long a taker watches a live-looking record before taking it (`2 × interval + 1 s`,
/// as ext4).
pub fn takeover_wait_ms(interval_ms: u64) -> u64 {
    2 * interval_ms + 1_000
}

/// What the owner of a target keeps: the record, its lease, and the thread that renews it.
pub struct Guard {
    file: MmpFile,
    owner: String,
    boot_id: [u8; 16],
    interval_ms: u64,
    /// The sequence number this server wrote last (under the lock: renewals are serialised).
    seq: Mutex<u64>,
    /// Lease end, in ms since `epoch`.
    lease_until_ms: AtomicU64,
    epoch: Instant,
    fenced: AtomicBool,
    released: AtomicBool,
    on_fence: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Guard {
    /// Takes target directory `dir` for `owner` (a NID), waiting as the module explains;
    /// fails with [`MmpError::InUse`] if another server is alive on it.
    pub fn acquire(dir: &Path, owner: &str, interval_ms: u64) -> Result<Arc<Guard>, MmpError> {
        if !(MMP_INTERVAL_MS_MIN..=MMP_INTERVAL_MS_MAX).contains(&interval_ms) {
            return Err(MmpError::Interval(interval_ms));
        }
        let file = MmpFile::open(dir)?;
        let me = boot_id();
        let target = dir.display().to_string();
        let first = file.read()?;
        if let Some(rec) = first.as_ref().filter(|r| r.state == MmpState::Active) {
            let local = rec.boot_id == me && me != [0; 16];
            let gone = local && !pid_alive(rec.pid);
            if !gone {
                tracing::info!(
                    "{target}: owned by {} (pid {}); watching its record for {} ms",
                    rec.owner,
                    rec.pid,
                    takeover_wait_ms(interval_ms)
                );
                std::thread::sleep(Duration::from_millis(takeover_wait_ms(interval_ms)));
                let now = file.read()?;
                if now.as_ref() != Some(rec) {
                    let now = now.unwrap_or_else(|| rec.clone());
                    return Err(MmpError::InUse {
                        target,
                        owner: now.owner,
                        pid: now.pid,
                        before: rec.seq,
                        after: now.seq,
                    });
                }
            }
        }
        let seq = first
            .map_or(0, |r| r.seq)
            .wrapping_add(1 + u64::from(std::process::id()));
        let guard = Arc::new(Guard {
            file,
            owner: owner.to_string(),
            boot_id: me,
            interval_ms,
            seq: Mutex::new(seq),
            lease_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            fenced: AtomicBool::new(false),
            released: AtomicBool::new(false),
            on_fence: Mutex::new(None),
        });
        guard.file.write(&guard.record(MmpState::Active, seq))?;
        // A server that raced us (read the same record, wrote after us) has overwritten
        // ours by now: the later writer keeps the target.
        std::thread::sleep(Duration::from_millis(interval_ms));
        match guard.file.read()? {
            Some(r) if r.seq == seq && r.owner == guard.owner && r.pid == std::process::id() => {}
            other => {
                return Err(MmpError::Raced {
                    target,
                    owner: other.map_or_else(|| "nobody".into(), |r| r.owner),
                })
            }
        }
        guard.renew()?;
        let weak = Arc::downgrade(&guard);
        std::thread::Builder::new()
            .name("mmp".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(interval_ms));
                let Some(g) = weak.upgrade() else { return };
                if g.released.load(Ordering::Acquire) || g.fenced.load(Ordering::Acquire) {
                    return;
                }
                if let Err(e) = g.renew() {
                    tracing::warn!("{}: MMP update failed: {e}", g.file.path.display());
                }
            })
            .map_err(|e| guard.file.io(e))?;
        Ok(guard)
    }

    fn record(&self, state: MmpState, seq: u64) -> MmpRecord {
        MmpRecord {
            state,
            seq,
            time_ms: now_ms(),
            pid: std::process::id(),
            boot_id: self.boot_id,
            owner: self.owner.clone(),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Reads the record, checks it is still ours, writes the next sequence number and
    /// extends the lease; fences this server if another one wrote the record.
    fn renew(&self) -> Result<(), MmpError> {
        let mut seq = self.seq.lock().expect("mmp seq");
        if self.fenced.load(Ordering::Acquire) {
            return Ok(());
        }
        let ours = matches!(self.file.read()?, Some(r) if r.seq == *seq && r.owner == self.owner && r.pid == std::process::id());
        if !ours {
            drop(seq);
            self.fence();
            return Ok(());
        }
        let next = seq.wrapping_add(1);
        self.file.write(&self.record(MmpState::Active, next))?;
        *seq = next;
        let lease = self.interval_ms + self.interval_ms / 2;
        self.lease_until_ms
            .store(self.elapsed_ms() + lease, Ordering::Release);
        Ok(())
    }

    fn fence(&self) {
        if self.fenced.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::error!(
            "{}: another server took this target over; no longer serving it",
            self.file.path.display()
        );
        if let Some(f) = self.on_fence.lock().expect("on_fence").take() {
            f();
        }
    }

    /// Runs `f` once if this server is fenced (another one took the target).
    pub fn on_fence(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_fence.lock().expect("on_fence") = Some(Box::new(f));
        if self.fenced.load(Ordering::Acquire) {
            if let Some(f) = self.on_fence.lock().expect("on_fence").take() {
                f();
            }
        }
    }

    /// True while this server may serve the target: the lease is current, or renewing it
    /// now succeeds. Cheap (one atomic load) while the lease is current.
    pub fn holds(&self) -> bool {
        if self.fenced.load(Ordering::Acquire) || self.released.load(Ordering::Acquire) {
            return false;
        }
        if self.elapsed_ms() < self.lease_until_ms.load(Ordering::Acquire) {
            return true;
        }
        if let Err(e) = self.renew() {
            tracing::warn!("{}: MMP check failed: {e}", self.file.path.display());
            return false;
        }
        !self.fenced.load(Ordering::Acquire)
            && self.elapsed_ms() < self.lease_until_ms.load(Ordering::Acquire)
    }

    /// True once another server took the target.
    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Gives the target up on purpose: the record says `CLEAN`, so a partner takes it at
    /// once. Does nothing if this server was fenced.
    pub fn release(&self) -> Result<(), MmpError> {
        let seq = self.seq.lock().expect("mmp seq");
        if self.fenced.load(Ordering::Acquire) || self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match self.file.read()? {
            Some(r) if r.seq == *seq && r.owner == self.owner => {}
            _ => return Ok(()),
        }
        self.file
            .write(&self.record(MmpState::Clean, seq.wrapping_add(1)))
    }
}

/// A standby server's view of a target it may take over: how long the record has not moved.
pub struct Watch {
    file: MmpFile,
    last: Option<MmpRecord>,
    since: Instant,
}

impl Watch {
    /// Starts watching target directory `dir`.
    pub fn new(dir: &Path) -> Result<Watch, MmpError> {
        let file = MmpFile::open(dir)?;
        let last = file.read()?;
        Ok(Watch {
            file,
            last,
            since: Instant::now(),
        })
    }

    /// Reads the record again; returns it and for how long it has been unchanged.
    pub fn poll(&mut self) -> Result<(Option<MmpRecord>, Duration), MmpError> {
        let now = self.file.read()?;
        if now != self.last {
            self.last = now.clone();
            self.since = Instant::now();
        }
        Ok((now, self.since.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn record_round_trips_and_damage_is_refused() {
        let rec = MmpRecord {
            state: MmpState::Active,
            seq: 42,
            time_ms: 7,
            pid: 1234,
            boot_id: [9; 16],
            owner: "10.0.0.1:988@tcp".into(),
        };
        let b = rec.encode();
        assert_eq!(MmpRecord::decode(&b).unwrap(), rec);
        for i in 0..b.len() {
            let mut c = b;
            c[i] ^= 0x10;
            assert!(MmpRecord::decode(&c).is_err(), "flip at {i} accepted");
        }
        assert!(MmpRecord::decode(&b[..100]).is_err());
    }

    #[test]
    fn the_reserved_bytes_are_zero_even_with_the_longest_owner() {
        assert_eq!(MMP_RESERVED, 142..156);
        for owner in [
            "a@tcp".to_string(),
            "x".repeat(MMP_OWNER_BYTES_MAX),
            "y".repeat(200),
        ] {
            let b = MmpRecord { owner, ..sample(1) }.encode();
            assert!(b[MMP_RESERVED].iter().all(|&x| x == 0), "{b:?}");
        }
    }

    #[test]
    fn a_live_owner_keeps_the_target_and_a_release_hands_it_over() {
        let dir = tempfile::tempdir().unwrap();
        let a = Guard::acquire(dir.path(), "a@tcp", 50).unwrap();
        assert!(a.holds());
        // Same process, so the record's pid is alive: the taker must watch it, and sees it
        // move (the owner's thread renews it).
        match Guard::acquire(dir.path(), "b@tcp", 50) {
            Err(MmpError::InUse { owner, .. }) => assert_eq!(owner, "a@tcp"),
            Err(e) => panic!("expected InUse, got {e}"),
            Ok(_) => panic!("a live owner's target was taken"),
        }
        assert!(a.holds());
        a.release().unwrap();
        assert!(!a.holds());
        let rec = MmpFile::open(dir.path()).unwrap().read().unwrap().unwrap();
        assert_eq!(rec.state, MmpState::Clean);
        let started = Instant::now();
        let b = Guard::acquire(dir.path(), "b@tcp", 50).unwrap();
        assert!(b.holds());
        // A clean record is taken without the watch (only the race check's interval).
        assert!(started.elapsed() < Duration::from_millis(takeover_wait_ms(50)));
    }

    #[test]
    fn a_stalled_owner_loses_the_target_and_learns_it_before_serving() {
        let dir = tempfile::tempdir().unwrap();
        let a = Guard::acquire(dir.path(), "a@tcp", 50).unwrap();
        let fenced = Arc::new(AtomicBool::new(false));
        let f = fenced.clone();
        a.on_fence(move || f.store(true, Ordering::Release));
        // Stall a's renewals: its lock held, as a stopped process would hold nothing.
        let stall = a.seq.lock().unwrap();
        let b = Guard::acquire(dir.path(), "b@tcp", 50).unwrap();
        drop(stall);
        assert!(b.holds());
        // a's lease has lapsed; its next check reads b's record and fences a.
        assert!(!a.holds());
        assert!(a.fenced());
        // The callback runs on the thread that fenced a (its renewal thread, or this one),
        // right after the flag: waited for, not assumed (it lost that race under emulation).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !fenced.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the fence callback never ran");
            std::thread::yield_now();
        }
        assert!(b.holds());
        let rec = MmpFile::open(dir.path()).unwrap().read().unwrap().unwrap();
        assert_eq!(rec.owner, "b@tcp");
    }

    #[test]
    fn a_watch_sees_a_record_stop_moving() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watch::new(dir.path()).unwrap();
        let a = Guard::acquire(dir.path(), "a@tcp", 50).unwrap();
        std::thread::sleep(Duration::from_millis(120));
        let (rec, still) = w.poll().unwrap();
        assert_eq!(rec.unwrap().owner, "a@tcp");
        assert!(still < Duration::from_millis(100));
        a.release().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let (rec, _) = w.poll().unwrap();
        assert_eq!(rec.unwrap().state, MmpState::Clean);
        std::thread::sleep(Duration::from_millis(200));
        let (_, still) = w.poll().unwrap();
        assert!(still >= Duration::from_millis(200));
    }

    /// Whether page 0 of `path` is in this kernel's page cache (mincore on a mapping).
    fn first_page_cached(path: &Path) -> bool {
        use std::os::fd::AsRawFd;
        let f = File::open(path).unwrap();
        // SAFETY: a read-only shared mapping of one page of a file at least one byte long,
        // unmapped before return; mincore writes one byte into `vec`.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            let mut vec = 0u8;
            assert_eq!(libc::mincore(p, 4096, &mut vec), 0);
            libc::munmap(p, 4096);
            vec & 1 == 1
        }
    }

    fn sample(seq: u64) -> MmpRecord {
        MmpRecord {
            state: MmpState::Active,
            seq,
            time_ms: 7,
            pid: 42,
            boot_id: [3; 16],
            owner: "a@tcp".into(),
        }
    }

    #[test]
    fn the_record_goes_past_the_page_cache_where_the_file_system_allows_it() {
        // ext4 (the test directory) takes O_DIRECT: a partner on another kernel rewrites
        // the block behind this kernel's cache, so the record must never be read from it.
        let base = std::env::var("NACRE_TEST_DIR").unwrap_or_else(|_| "/var/tmp".into());
        let dir = tempfile::tempdir_in(base).unwrap();
        let path = dir.path().join(MMP_FILE);
        // A record written by the buffered path (160 bytes) is read through the direct one.
        std::fs::write(&path, sample(1).encode()).unwrap();
        let f = MmpFile::open(dir.path()).unwrap();
        assert!(f.is_direct());
        assert_eq!(f.read().unwrap().unwrap(), sample(1));
        f.write(&sample(2)).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            MMP_BLOCK_BYTES as u64
        );
        // The direct write dropped the cached page, and the direct read did not bring it back.
        assert_eq!(f.read().unwrap().unwrap(), sample(2));
        assert!(
            !first_page_cached(&path),
            "the MMP record was read through the page cache"
        );
        assert!(f.is_direct());
        // The probe works: a buffered read caches the page (and decodes the padded block).
        let bytes = std::fs::read(&path).unwrap();
        assert!(first_page_cached(&path));
        assert_eq!(
            MmpRecord::decode(&bytes[..MMP_RECORD_BYTES]).unwrap(),
            sample(2)
        );
    }

    #[test]
    fn records_written_by_either_path_are_read_by_the_other() {
        // Where O_DIRECT is refused (checked at open, or EINVAL on a transfer) the record
        // is buffered; a partner may use either path on the same record.
        let base = std::env::var("NACRE_TEST_DIR").unwrap_or_else(|_| "/var/tmp".into());
        let dir = tempfile::tempdir_in(base).unwrap();
        let direct = MmpFile::open(dir.path()).unwrap();
        let buffered = MmpFile::open(dir.path()).unwrap();
        buffered.direct_ok.store(false, Ordering::Relaxed);
        assert!(direct.is_direct() && !buffered.is_direct());
        assert_eq!(buffered.read().unwrap(), None);
        buffered.write(&sample(5)).unwrap();
        assert_eq!(direct.read().unwrap().unwrap(), sample(5));
        direct.write(&sample(6)).unwrap();
        assert_eq!(buffered.read().unwrap().unwrap(), sample(6));
        buffered.write(&sample(7)).unwrap();
        assert_eq!(direct.read().unwrap().unwrap(), sample(7));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = MmpRecord::decode(&bytes);
        }
    }
}
