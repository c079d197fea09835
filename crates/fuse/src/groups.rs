//! Credentials of calling processes: the kernel's FUSE request says the caller's uid, gid and
//! thread id, not its supplementary groups, which the MDT needs for its permission checks. They
//! are read from `/proc/TID/status` (as libfuse's `fuse_req_getgroups` does) and remembered for
//! [`GROUPS_CACHE_MS`] per (thread, uid, gid). Root is not looked up: it passes every check.
//! `/proc/TID/status` needs none of the locks of the caller's memory that `environ` does, so it
//! is read on the request's own thread.

use nacre_types::cred::CRED_GROUPS_MAX;
use nacre_types::Cred;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a process's groups are remembered (a `setgroups` shows within this).
pub const GROUPS_CACHE_MS: u64 = 1_000;
/// Callers remembered at most.
pub const GROUPS_CACHE_ENTRIES_MAX: usize = 4096;

/// A caller: (thread id, uid, gid).
type CallerKey = (u32, u32, u32);

/// Supplementary groups of callers, cached.
#[derive(Default)]
pub struct Groups {
    cache: Mutex<HashMap<CallerKey, (Vec<u32>, Instant)>>,
}

impl Groups {
    /// The credentials of thread `pid` calling as `uid`/`gid`.
    pub fn cred(&self, pid: u32, uid: u32, gid: u32) -> Cred {
        if uid == 0 || pid == 0 {
            return Cred::new(uid, gid, Vec::new());
        }
        let key = (pid, uid, gid);
        if let Some((groups, at)) = self.cache.lock().get(&key) {
            if at.elapsed() < Duration::from_millis(GROUPS_CACHE_MS) {
                return Cred::new(uid, gid, groups.clone());
            }
        }
        let groups = read_groups(pid).unwrap_or_default();
        let mut cache = self.cache.lock();
        if cache.len() >= GROUPS_CACHE_ENTRIES_MAX {
            cache.retain(|_, (_, at)| at.elapsed() < Duration::from_millis(GROUPS_CACHE_MS));
            if cache.len() >= GROUPS_CACHE_ENTRIES_MAX {
                cache.clear();
            }
        }
        cache.insert(key, (groups.clone(), Instant::now()));
        Cred::new(uid, gid, groups)
    }
}

/// The `Groups:` line of `/proc/PID/status` (None if the process is gone).
fn read_groups(pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(parse_groups(&status))
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .take(CRED_GROUPS_MAX)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line_parses() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 1000 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 24, 27, 1000]);
        assert!(parse_groups("Groups:\t\n").is_empty());
        assert!(parse_groups("nothing").is_empty());
    }

    #[test]
    fn this_process_groups_are_read() {
        let me = std::process::id();
        let g = Groups::default();
        let cred = g.cred(me, 1234, 5678);
        assert_eq!((cred.uid, cred.gid), (1234, 5678));
        let own = read_groups(me).expect("own status");
        assert_eq!(cred.groups, own);
        assert!(g.cred(me, 0, 0).groups.is_empty());
    }
}
