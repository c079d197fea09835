//! Per-job statistics (Lustre's `job_stats`): an [`OpStats`] per job id, bounded in number.

use crate::hist::OpStats;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Jobs tracked per target; the least recently active is dropped beyond this.
pub const JOBS_MAX: usize = 1024;

/// Statistics of every job seen by one target.
pub struct JobStats {
    names: &'static [&'static str],
    jobs: Mutex<HashMap<String, (Arc<OpStats>, Instant)>>,
    /// Heading and key label of the rendering (`job_stats`/`job_id`, `export_stats`/`nid`).
    labels: (&'static str, &'static str),
}

impl JobStats {
    /// Per-job statistics over the operations `names`.
    pub fn new(names: &'static [&'static str]) -> JobStats {
        JobStats::keyed(names, "job_stats", "job_id")
    }

    /// The same bounded per-key statistics under another heading and key label, e.g. per
    /// client NID (`export_stats`, `nid`), as Lustre keeps them per export.
    pub fn keyed(
        names: &'static [&'static str],
        heading: &'static str,
        key: &'static str,
    ) -> JobStats {
        JobStats {
            names,
            jobs: Mutex::new(HashMap::new()),
            labels: (heading, key),
        }
    }

    /// Counts one operation of `jobid` (ignored when empty).
    pub fn record(&self, jobid: &str, op: usize, us: u64, bytes: u64) {
        if jobid.is_empty() {
            return;
        }
        let stats = {
            let mut jobs = self.jobs.lock().expect("jobs");
            if !jobs.contains_key(jobid) && jobs.len() >= JOBS_MAX {
                if let Some(oldest) = jobs
                    .iter()
                    .min_by_key(|(_, (_, t))| *t)
                    .map(|(k, _)| k.clone())
                {
                    jobs.remove(&oldest);
                }
            }
            let entry = jobs
                .entry(jobid.to_string())
                .or_insert_with(|| (Arc::new(OpStats::new(self.names)), Instant::now()));
            entry.1 = Instant::now();
            entry.0.clone()
        };
        stats.record(op, us, bytes);
    }

    /// Count of `op` for `jobid`.
    pub fn count(&self, jobid: &str, op: usize) -> u64 {
        self.jobs
            .lock()
            .expect("jobs")
            .get(jobid)
            .map_or(0, |(s, _)| s.count(op))
    }

    /// Lustre-style YAML.
    pub fn render(&self) -> String {
        let jobs = self.snapshot();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let (heading, key) = self.labels;
        let mut out = format!("{heading}:\n");
        for (job, stats) in jobs {
            out += &format!(
                "- {:<16} {job}\n  snapshot_time:   {}\n",
                format!("{key}:"),
                now.as_secs()
            );
            for (i, name) in self.names.iter().enumerate() {
                let Some(c) = stats.counter(i) else { continue };
                let n = c.count.load(Ordering::Relaxed);
                let min = if n == 0 {
                    0
                } else {
                    c.min_us.load(Ordering::Relaxed)
                };
                out += &format!(
                    "  {:<16} {{ samples: {n:>10}, unit: usecs, min: {min}, max: {}, sum: {} }}\n",
                    format!("{name}:"),
                    c.max_us.load(Ordering::Relaxed),
                    c.sum_us.load(Ordering::Relaxed)
                );
                let bytes = c.bytes.load(Ordering::Relaxed);
                if bytes > 0 {
                    out += &format!(
                        "  {:<16} {{ samples: {n:>10}, unit: bytes, sum: {bytes} }}\n",
                        format!("{name}_bytes:")
                    );
                }
            }
        }
        out
    }

    /// Every job with its statistics, sorted by job id.
    pub fn snapshot(&self) -> Vec<(String, Arc<OpStats>)> {
        let mut jobs: Vec<(String, Arc<OpStats>)> = self
            .jobs
            .lock()
            .expect("jobs")
            .iter()
            .map(|(k, (s, _))| (k.clone(), s.clone()))
            .collect();
        jobs.sort_by(|a, b| a.0.cmp(&b.0));
        jobs
    }

    /// Forgets every job.
    pub fn clear(&self) {
        self.jobs.lock().expect("jobs").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_job_and_bounded() {
        let j = JobStats::new(&["read", "write"]);
        j.record("a", 1, 5, 100);
        j.record("b", 1, 5, 100);
        j.record("", 1, 5, 100);
        assert_eq!(j.count("a", 1), 1);
        assert!(j.render().contains("job_id:          b"));
        for i in 0..JOBS_MAX + 10 {
            j.record(&format!("job{i}"), 0, 1, 0);
        }
        assert_eq!(j.jobs.lock().unwrap().len(), JOBS_MAX);
    }
}
