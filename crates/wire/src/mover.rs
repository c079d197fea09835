//! Data mover service messages (service 5): `nacre stage in|out|status|cancel` queue and
//! watch the movement of files and trees between pools for jobs, served by a server process
//! that runs the data mover role (docs/stage.md).

use nacre_types::PoolName;
use serde::{Deserialize, Serialize};

/// Most paths one stage request names.
pub const STAGE_PATHS_MAX: usize = 1024;
/// Longest path (bytes) a stage request names.
pub const STAGE_PATH_BYTES_MAX: usize = 4096;
/// Most requests one status answer lists.
pub const STAGE_STATES_MAX: usize = 1024;
/// Longest error message kept with a request.
pub const STAGE_ERROR_BYTES_MAX: usize = 1024;

/// Which way a request moves data (both are migrations to its pool; the name says what for).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Before a job: into the fast pool.
    In,
    /// After a job: out to the capacity pool.
    Out,
}

impl Direction {
    /// `in` or `out`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }
}

/// What a request asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRequest {
    /// In or out.
    pub direction: Direction,
    /// The pool the files go to.
    pub pool: PoolName,
    /// The job it is for (empty: none).
    pub job: String,
    /// Files and directories (whole trees), from the file system's root (`/a/b`).
    pub paths: Vec<Vec<u8>>,
}

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StageStatus {
    /// Waiting for the mover.
    Queued,
    /// Files are moving.
    Running,
    /// Every file is in its pool.
    Done,
    /// Over, with files that could not be moved (see the error).
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

impl StageStatus {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            StageStatus::Queued => "queued",
            StageStatus::Running => "running",
            StageStatus::Done => "done",
            StageStatus::Failed => "failed",
            StageStatus::Cancelled => "cancelled",
        }
    }

    /// Over: it will not change again.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            StageStatus::Done | StageStatus::Failed | StageStatus::Cancelled
        )
    }
}

/// A request and its progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageState {
    /// Its number at this mover.
    pub id: u64,
    /// What it asks for.
    pub request: StageRequest,
    /// Where it is.
    pub status: StageStatus,
    /// Files found under its paths (known once it runs).
    pub files_total: u64,
    /// Files moved.
    pub files_done: u64,
    /// Files already in the pool.
    pub files_skipped: u64,
    /// Files that could not be moved.
    pub files_failed: u64,
    /// Bytes of the files found.
    pub bytes_total: u64,
    /// Bytes of the files moved or skipped.
    pub bytes_done: u64,
    /// When it was queued (seconds since the epoch).
    pub submitted_s: i64,
    /// When it ended.
    pub finished_s: Option<i64>,
    /// The first error met.
    pub error: String,
}

/// Requests to a data mover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoverRequest {
    /// Queues a request; durable before the reply. Reply: [`MoverReply::Submitted`].
    Submit(StageRequest),
    /// Requests, all or of one job or one id, newest last. Reply: [`MoverReply::States`].
    Status {
        /// Only this job's.
        job: Option<String>,
        /// Only this one.
        id: Option<u64>,
    },
    /// Cancels a request, or every unfinished request of a job. Reply:
    /// [`MoverReply::Cancelled`].
    Cancel {
        /// Every request of this job.
        job: Option<String>,
        /// This one.
        id: Option<u64>,
    },
}

/// Replies of a data mover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoverReply {
    /// Queued as this id.
    Submitted(u64),
    /// Requests and their progress.
    States(Vec<StageState>),
    /// Requests cancelled.
    Cancelled(u64),
}

impl MoverRequest {
    /// Opcode (service 5).
    pub fn opcode(&self) -> u16 {
        match self {
            MoverRequest::Submit(_) => 0x0501,
            MoverRequest::Status { .. } => 0x0502,
            MoverRequest::Cancel { .. } => 0x0503,
        }
    }

    /// Checks what decoding cannot: counts and lengths within their limits.
    pub fn check(&self) -> Result<(), String> {
        let job_ok = |j: &str| j.len() <= nacre_types::jobid::JOBID_BYTES_MAX;
        match self {
            MoverRequest::Submit(r) => {
                if r.paths.is_empty() || r.paths.len() > STAGE_PATHS_MAX {
                    return Err(format!("{} paths (1 to {STAGE_PATHS_MAX})", r.paths.len()));
                }
                if let Some(p) = r.paths.iter().find(|p| {
                    p.len() > STAGE_PATH_BYTES_MAX || p.first() != Some(&b'/') || p.contains(&0)
                }) {
                    return Err(format!(
                        "bad path {:?}: from the root, at most {STAGE_PATH_BYTES_MAX} bytes",
                        String::from_utf8_lossy(&p[..p.len().min(64)])
                    ));
                }
                if r.pool.is_none() {
                    return Err("no pool".into());
                }
                match job_ok(&r.job) {
                    true => Ok(()),
                    false => Err("job id too long".into()),
                }
            }
            MoverRequest::Status { job, .. } | MoverRequest::Cancel { job, .. } => {
                match job.as_deref().is_none_or(job_ok) {
                    true => Ok(()),
                    false => Err("job id too long".into()),
                }
            }
        }
    }
}

impl MoverReply {
    /// Checks what decoding cannot (a client's view of a mover's answer).
    pub fn check(&self) -> Result<(), String> {
        match self {
            MoverReply::States(s) if s.len() > STAGE_STATES_MAX => {
                Err(format!("{} requests in one answer", s.len()))
            }
            MoverReply::States(s) => s.iter().try_for_each(|x| {
                MoverRequest::Submit(x.request.clone()).check()?;
                match x.error.len() <= STAGE_ERROR_BYTES_MAX {
                    true => Ok(()),
                    false => Err("error message too long".into()),
                }
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    fn state(paths: Vec<Vec<u8>>, job: String, n: u64) -> StageState {
        StageState {
            id: n,
            request: StageRequest {
                direction: if n.is_multiple_of(2) {
                    Direction::In
                } else {
                    Direction::Out
                },
                pool: PoolName::new("flash").unwrap(),
                job,
                paths,
            },
            status: StageStatus::Running,
            files_total: n,
            files_done: n / 2,
            files_skipped: 1,
            files_failed: 0,
            bytes_total: n << 20,
            bytes_done: n << 19,
            submitted_s: 5,
            finished_s: n.is_multiple_of(3).then_some(9),
            error: String::new(),
        }
    }

    proptest! {
        #[test]
        fn mover_messages_round_trip_and_refuse_truncation(
            paths in proptest::collection::vec(proptest::collection::vec(1u8..=255, 0..40), 0..5),
            job in "[a-z0-9.]{0,40}",
            n in any::<u64>(),
        ) {
            let paths: Vec<Vec<u8>> = paths.into_iter().map(|mut p| { p.insert(0, b'/'); p }).collect();
            let req = StageRequest {
                direction: Direction::In,
                pool: PoolName::new("flash").unwrap(),
                job: job.clone(),
                paths: paths.clone(),
            };
            let refused = paths.is_empty() || job.len() > nacre_types::jobid::JOBID_BYTES_MAX;
            for r in [
                MoverRequest::Submit(req),
                MoverRequest::Status { job: Some(job.clone()), id: Some(n) },
                MoverRequest::Cancel { job: None, id: Some(n) },
            ] {
                let bytes = encode_body(&r);
                let back = decode_body::<MoverRequest>(&bytes).unwrap();
                prop_assert_eq!(&back, &r);
                let bad = match &r {
                    MoverRequest::Submit(_) => refused,
                    MoverRequest::Status { .. } => job.len() > nacre_types::jobid::JOBID_BYTES_MAX,
                    MoverRequest::Cancel { .. } => false,
                };
                prop_assert_eq!(back.check().is_err(), bad);
                for k in 0..bytes.len() {
                    prop_assert!(decode_body::<MoverRequest>(&bytes[..k]).is_err());
                }
            }
            for r in [
                MoverReply::Submitted(n),
                MoverReply::Cancelled(n),
                MoverReply::States(vec![state(paths.clone(), job.clone(), n)]),
            ] {
                let bytes = encode_body(&r);
                let back = decode_body::<MoverReply>(&bytes).unwrap();
                prop_assert_eq!(&back, &r);
                for k in 0..bytes.len() {
                    prop_assert!(decode_body::<MoverReply>(&bytes[..k]).is_err());
                }
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(r) = decode_body::<MoverRequest>(&bytes) {
                let _ = r.check();
            }
            if let Ok(r) = decode_body::<MoverReply>(&bytes) {
                let _ = r.check();
            }
        }
    }

    #[test]
    fn relative_paths_and_no_pool_are_refused() {
        let mut r = StageRequest {
            direction: Direction::Out,
            pool: PoolName::NONE,
            job: String::new(),
            paths: vec![b"/a".to_vec()],
        };
        assert!(MoverRequest::Submit(r.clone()).check().is_err());
        r.pool = PoolName::new("cap").unwrap();
        assert!(MoverRequest::Submit(r.clone()).check().is_ok());
        r.paths = vec![b"a/b".to_vec()];
        assert!(MoverRequest::Submit(r).check().is_err());
    }
}
