//! The mover's queue: every request and its progress, in an embedded transactional store
//! under the mover's directory (so it survives a restart), mirrored in memory.
//!
//! Tables: `requests` (id, 8 bytes big-endian → postcard `StageState`) and `meta`, whose
//! `format` key (u32 big-endian; absent: 1, set at open) is the format of the rows
//! ([`QUEUE_FORMAT`]; `nacre_kv::open_format`).

use crate::MoverError;
use nacre_kv::{Batch, FjallStore, KvStore};
use nacre_wire::mover::{StageRequest, StageState, StageStatus, STAGE_STATES_MAX};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::path::Path;

const REQUESTS: &str = "requests";
const META: &str = "meta";

/// The format of the queue's rows this mover reads and writes: 1, postcard `StageState`. A
/// queue of a newer format is refused at open (`MoverError::Format`), naming both.
pub const QUEUE_FORMAT: u32 = 1;

/// Finished requests kept at most (the oldest go first).
pub const FINISHED_KEPT_MAX: usize = 10_000;
/// Unfinished requests queued at most (a submit past it is refused `EAGAIN`).
pub const QUEUED_MAX: usize = 10_000;

fn kv_err(e: nacre_kv::KvError) -> MoverError {
    MoverError::Queue(e.to_string())
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The queue.
pub struct Queue {
    kv: FjallStore,
    states: Mutex<BTreeMap<u64, StageState>>,
    changed: Condvar,
}

impl Queue {
    /// Opens (creating) the queue in `dir`; requests that were running are run again.
    pub fn open(dir: &Path) -> Result<Queue, MoverError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| MoverError::Queue(format!("{}: {e}", dir.display())))?;
        let path = dir.join("queue");
        let kv = FjallStore::open(&path, &[REQUESTS, META]).map_err(kv_err)?;
        let store = format!("mover queue {}", path.display());
        nacre_kv::open_format(&kv, META, &store, QUEUE_FORMAT)?;
        let mut states = BTreeMap::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = kv
                .scan(REQUESTS, &[], after.as_deref(), 1024)
                .map_err(kv_err)?;
            for (k, v) in &page {
                let s: StageState = postcard::from_bytes(v)
                    .map_err(|e| MoverError::Queue(format!("bad request record: {e}")))?;
                states.insert(s.id, s);
                after = Some(k.clone());
            }
            if page.len() < 1024 {
                break;
            }
        }
        Ok(Queue {
            kv,
            states: Mutex::new(states),
            changed: Condvar::new(),
        })
    }

    fn put(&self, batch: &mut Batch, s: &StageState) {
        // Plain data: encoding into a Vec cannot fail.
        let v = postcard::to_allocvec(s).expect("postcard encodes plain data");
        batch.put(REQUESTS, s.id.to_be_bytes().to_vec(), v);
    }

    fn commit(&self, batch: Batch, durable: bool) -> Result<(), MoverError> {
        let t = self.kv.commit(batch).map_err(kv_err)?;
        if durable {
            self.kv.wait_durable(t).map_err(kv_err)?;
        }
        Ok(())
    }

    /// Queues `request`; durable when this returns its id.
    pub fn submit(&self, request: StageRequest) -> Result<u64, MoverError> {
        let mut states = self.states.lock();
        if states.values().filter(|s| !s.status.is_final()).count() >= QUEUED_MAX {
            return Err(MoverError::Full);
        }
        let id = states.keys().next_back().map_or(1, |k| k + 1);
        let s = StageState {
            id,
            request,
            status: StageStatus::Queued,
            files_total: 0,
            files_done: 0,
            files_skipped: 0,
            files_failed: 0,
            bytes_total: 0,
            bytes_done: 0,
            submitted_s: now_s(),
            finished_s: None,
            error: String::new(),
        };
        let mut batch = Batch::new();
        self.put(&mut batch, &s);
        // The oldest finished requests make room.
        let finished: Vec<u64> = states
            .values()
            .filter(|s| s.status.is_final())
            .map(|s| s.id)
            .collect();
        let drop_n = finished.len().saturating_sub(FINISHED_KEPT_MAX - 1);
        for old in &finished[..drop_n] {
            batch.delete(REQUESTS, old.to_be_bytes().to_vec());
        }
        self.commit(batch, true)?;
        for old in &finished[..drop_n] {
            states.remove(old);
        }
        states.insert(id, s);
        self.changed.notify_all();
        Ok(id)
    }

    /// Requests of `job` (or all), or request `id`, newest last (at most
    /// [`STAGE_STATES_MAX`], the newest).
    pub fn status(&self, job: Option<&str>, id: Option<u64>) -> Vec<StageState> {
        let states = self.states.lock();
        let mut v: Vec<StageState> = states
            .values()
            .filter(|s| id.is_none_or(|i| s.id == i) && job.is_none_or(|j| s.request.job == j))
            .cloned()
            .collect();
        let skip = v.len().saturating_sub(STAGE_STATES_MAX);
        v.drain(..skip);
        v
    }

    /// Cancels request `id`, or every unfinished request of `job`; how many.
    pub fn cancel(&self, job: Option<&str>, id: Option<u64>) -> Result<u64, MoverError> {
        let mut states = self.states.lock();
        let mut batch = Batch::new();
        let mut n = 0;
        let now = now_s();
        let chosen: Vec<u64> = states
            .values()
            .filter(|s| !s.status.is_final())
            .filter(|s| id.is_some_and(|i| s.id == i) || job.is_some_and(|j| s.request.job == j))
            .map(|s| s.id)
            .collect();
        for i in chosen {
            if let Some(s) = states.get_mut(&i) {
                s.status = StageStatus::Cancelled;
                s.finished_s = Some(now);
                let s = s.clone();
                self.put(&mut batch, &s);
                n += 1;
            }
        }
        if n > 0 {
            self.commit(batch, true)?;
        }
        self.changed.notify_all();
        Ok(n)
    }

    /// The oldest request to run (a running one first: it was interrupted), waiting at
    /// most `wait` for one.
    pub fn next(&self, wait: std::time::Duration) -> Option<StageState> {
        let mut states = self.states.lock();
        let pick = |states: &BTreeMap<u64, StageState>| {
            states
                .values()
                .find(|s| s.status == StageStatus::Running)
                .or_else(|| states.values().find(|s| s.status == StageStatus::Queued))
                .cloned()
        };
        if let Some(s) = pick(&states) {
            return Some(s);
        }
        self.changed.wait_for(&mut states, wait);
        pick(&states)
    }

    /// Request `id` as it is now.
    pub fn get(&self, id: u64) -> Option<StageState> {
        self.states.lock().get(&id).cloned()
    }

    /// Updates request `id` with `f` unless it is over (cancelled meanwhile); durable if
    /// `durable`. Returns the state after, or None if it was over.
    pub fn update(
        &self,
        id: u64,
        durable: bool,
        f: impl FnOnce(&mut StageState),
    ) -> Result<Option<StageState>, MoverError> {
        let mut states = self.states.lock();
        let Some(s) = states.get_mut(&id) else {
            return Ok(None);
        };
        if s.status.is_final() {
            return Ok(None);
        }
        f(s);
        if s.status.is_final() && s.finished_s.is_none() {
            s.finished_s = Some(now_s());
        }
        let s = s.clone();
        let mut batch = Batch::new();
        self.put(&mut batch, &s);
        self.commit(batch, durable)?;
        self.changed.notify_all();
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::PoolName;
    use nacre_wire::mover::Direction;

    fn req(job: &str) -> StageRequest {
        StageRequest {
            direction: Direction::In,
            pool: PoolName::new("flash").unwrap(),
            job: job.into(),
            paths: vec![b"/a".to_vec()],
        }
    }

    #[test]
    fn a_new_queue_is_format_1_and_an_old_one_gets_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path()).unwrap();
        let format = q.kv.get(META, nacre_kv::FORMAT_KEY).unwrap();
        assert_eq!(format, Some(vec![0, 0, 0, 1]));
        drop(q);
        // A queue written before formats were kept: requests and no `format` key.
        let old = tempfile::tempdir().unwrap();
        {
            let kv = FjallStore::open(&old.path().join("queue"), &[REQUESTS, META]).unwrap();
            let s = StageState {
                id: 7,
                request: req("old"),
                status: StageStatus::Queued,
                files_total: 0,
                files_done: 0,
                files_skipped: 0,
                files_failed: 0,
                bytes_total: 0,
                bytes_done: 0,
                submitted_s: 1,
                finished_s: None,
                error: String::new(),
            };
            let mut b = Batch::new();
            b.put(
                REQUESTS,
                7u64.to_be_bytes().to_vec(),
                postcard::to_allocvec(&s).unwrap(),
            );
            let t = kv.commit(b).unwrap();
            kv.wait_durable(t).unwrap();
        }
        let q = Queue::open(old.path()).unwrap();
        assert_eq!(q.get(7).unwrap().request.job, "old");
        let format = q.kv.get(META, nacre_kv::FORMAT_KEY).unwrap();
        assert_eq!(format, Some(vec![0, 0, 0, 1]));
    }

    #[test]
    fn a_queue_of_a_newer_format_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = FjallStore::open(&dir.path().join("queue"), &[REQUESTS, META]).unwrap();
            let mut b = Batch::new();
            nacre_kv::put_format(&mut b, META, QUEUE_FORMAT + 1);
            let t = kv.commit(b).unwrap();
            kv.wait_durable(t).unwrap();
        }
        match Queue::open(dir.path()) {
            Err(MoverError::Format(nacre_kv::FormatError::TooNew { found, newest, .. })) => {
                assert_eq!((found, newest), (2, 1));
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a queue of format 2 opened"),
        }
        let e = Queue::open(dir.path()).err().unwrap().to_string();
        assert!(e.contains("has format 2; this nacre reads up to 1"), "{e}");
    }

    #[test]
    fn requests_survive_a_restart_and_running_ones_come_first() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::open(dir.path()).unwrap();
        let a = q.submit(req("1")).unwrap();
        let b = q.submit(req("2")).unwrap();
        let c = q.submit(req("2")).unwrap();
        assert_eq!((a, b, c), (1, 2, 3));
        q.update(b, true, |s| s.status = StageStatus::Running)
            .unwrap();
        assert_eq!(q.cancel(Some("1"), None).unwrap(), 1);
        // Cancelled: no longer updated.
        assert!(q.update(a, true, |s| s.files_done = 5).unwrap().is_none());
        drop(q);
        let q = Queue::open(dir.path()).unwrap();
        assert_eq!(q.get(a).unwrap().status, StageStatus::Cancelled);
        let next = q.next(std::time::Duration::ZERO).unwrap();
        assert_eq!(next.id, b);
        assert_eq!(q.status(Some("2"), None).len(), 2);
        assert_eq!(q.submit(req("3")).unwrap(), 4);
    }
}
