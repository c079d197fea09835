//! Job ids of calling processes, as Lustre's `jobid_var` defines them: the value of an
//! environment variable of the process (default `SLURM_JOB_ID`), else `procname.uid`.
//!
//! Reading `/proc/PID/environ` takes locks of the calling process's memory, which that process
//! may hold while it waits for this very FUSE request (a page fault on a mapping of the mount,
//! direct I/O, an exec in progress). So the read runs on a helper thread and is waited for at
//! most [`ENVIRON_WAIT_MS`]; past that the request is tagged `procname.uid` (from
//! `/proc/PID/comm`, which needs no such lock) and the helper fills the cache when it can.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default `jobid_var`.
pub const JOBID_VAR_DEFAULT: &str = "SLURM_JOB_ID";
/// How long a process's job id is remembered.
pub const JOBID_CACHE_MS: u64 = 10_000;
/// Processes remembered at most.
pub const JOBID_CACHE_ENTRIES_MAX: usize = 4096;
/// How long a request waits for a process's environment.
pub const ENVIRON_WAIT_MS: u64 = 100;
/// Environment reads in progress at most (each may wait on a busy process).
pub const ENVIRON_READS_MAX: usize = 64;

/// Job ids of processes, cached.
pub struct JobIds {
    var: Arc<RwLock<String>>,
    cache: Arc<Mutex<HashMap<u32, (String, Instant)>>>,
    reads: Arc<std::sync::atomic::AtomicUsize>,
    pending: Arc<Mutex<std::collections::HashSet<u32>>>,
}

impl JobIds {
    /// Job ids by the variable named in `var` (shared with the `jobid_var` parameter):
    /// an environment variable name, `procname_uid`, or `disable`.
    pub fn new(var: Arc<RwLock<String>>) -> JobIds {
        JobIds {
            var,
            cache: Arc::new(Mutex::new(HashMap::new())),
            reads: Arc::default(),
            pending: Arc::default(),
        }
    }

    /// The job of process `pid` running as `uid` ("" if none can be told).
    pub fn of(&self, pid: u32, uid: u32) -> String {
        if pid == 0 {
            return String::new();
        }
        let var = self.var.read().clone();
        if var == "disable" {
            return String::new();
        }
        if let Some((id, at)) = self.cache.lock().get(&pid) {
            if at.elapsed() < Duration::from_millis(JOBID_CACHE_MS) {
                return id.clone();
            }
        }
        if var == "procname_uid" {
            let id = procname_uid(pid, uid);
            self.remember(pid, &id);
            return id;
        }
        self.read_environ(pid, uid, var)
    }

    fn remember(&self, pid: u32, id: &str) {
        let mut cache = self.cache.lock();
        if cache.len() >= JOBID_CACHE_ENTRIES_MAX {
            cache.clear();
        }
        cache.insert(pid, (id.to_string(), Instant::now()));
    }

    fn read_environ(&self, pid: u32, uid: u32, var: String) -> String {
        use std::sync::atomic::Ordering;
        // One read per process at a time: a process whose read is stuck is not waited for again.
        if !self.pending.lock().insert(pid) {
            return procname_uid(pid, uid);
        }
        if self.reads.fetch_add(1, Ordering::AcqRel) >= ENVIRON_READS_MAX {
            self.pending.lock().remove(&pid);
            self.reads.fetch_sub(1, Ordering::AcqRel);
            return procname_uid(pid, uid);
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (cache, reads, pending) =
            (self.cache.clone(), self.reads.clone(), self.pending.clone());
        let spawned = std::thread::Builder::new()
            .name("jobid".into())
            .spawn(move || {
                let id = env_value(pid, &var).unwrap_or_else(|| procname_uid(pid, uid));
                let mut c = cache.lock();
                if c.len() >= JOBID_CACHE_ENTRIES_MAX {
                    c.clear();
                }
                c.insert(pid, (id.clone(), Instant::now()));
                drop(c);
                pending.lock().remove(&pid);
                reads.fetch_sub(1, Ordering::AcqRel);
                let _ = tx.send(id);
            });
        if spawned.is_err() {
            self.pending.lock().remove(&pid);
            self.reads.fetch_sub(1, Ordering::AcqRel);
            return procname_uid(pid, uid);
        }
        rx.recv_timeout(Duration::from_millis(ENVIRON_WAIT_MS))
            .unwrap_or_else(|_| procname_uid(pid, uid))
    }
}

fn env_value(pid: u32, var: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{var}=");
    env.split(|&b| b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .filter(|v| !v.is_empty())
        .map(|v| nacre_types::jobid::clamp(&String::from_utf8_lossy(v)).to_string())
}

fn procname_uid(pid: u32, uid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    nacre_types::jobid::clamp(&format!("{}.{uid}", comm.trim())).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process() {
        let var = Arc::new(RwLock::new("NACRE_TEST_UNSET_VAR".to_string()));
        let j = JobIds::new(var.clone());
        let me = std::process::id();
        let id = j.of(me, 0);
        assert!(id.ends_with(".0"), "{id}");
        *var.write() = "disable".into();
        assert_eq!(j.of(me, 0), "");
        assert_eq!(j.of(0, 0), "");
    }
}
