//! Nacre's policy engine (`nacre policy`, docs/policy.md): the data management RobinHood
//! does for Lustre, built in.
//!
//! * `rules`: the TOML rules file — conditions on path, pool, size, owner, group, job
//!   and ages, pool fill triggers, and actions (migrate, purge, report); `names`: user and
//!   group names resolved through the system's name service;
//! * `index`: the engine's own index of the file system in a `nacre-kv` store: a row per
//!   regular file, names, directories, and least-recently-used order per pool;
//! * `follow`: one full scan at first start (`ScanStats`, `ScanDirents`), then the MDTs'
//!   changelogs, applied in batches with one `StatMany` per batch of records;
//! * `engine`: rules evaluated over the index, candidates checked again against the MDTs,
//!   actions paced by bandwidth and files-per-second limits;
//! * `run`: the process — the state directory (locked: one engine per directory), a
//!   follower thread, evaluations every interval (or once), the status file `nacre policy
//!   status` reads, and the counters `/metrics` shows.
//!
//! Built on the client library only: no server crate depends on it.

pub mod engine;
pub mod follow;
pub mod index;
pub mod names;
pub mod rules;
pub mod run;

pub use rules::Config;

/// Why the engine cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The rules file is wrong (what and where).
    #[error("rules: {0}")]
    Rules(String),
    /// The index cannot be read or written.
    #[error("policy index: {0}")]
    Index(String),
    /// The index's store is of a format this engine does not read (newer, or damaged).
    #[error(transparent)]
    Format(#[from] nacre_kv::FormatError),
    /// The file system refused or failed a request.
    #[error(transparent)]
    Client(#[from] nacre_client::ClientError),
    /// A report could not be written.
    #[error("report: {0}")]
    Report(String),
    /// Another engine runs on the same state directory.
    #[error("another policy engine (pid {0}) uses this state directory")]
    Busy(String),
}

impl From<nacre_types::Status> for PolicyError {
    fn from(s: nacre_types::Status) -> PolicyError {
        PolicyError::Client(s.into())
    }
}
