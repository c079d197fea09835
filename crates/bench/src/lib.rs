//! Benchmark drivers that speak the HPC storage community's language (`nacre bench`).
//!
//! * `ior`: IOR-like bandwidth runs — file per process or one shared file, transfer/block/
//!   segment geometry, task reordering for read-back, fsync, iterations, O_DIRECT, and IOR's
//!   data check (every word of every transfer encodes writer, offset and iteration).
//! * `mdtest`: mdtest-like metadata runs — create/stat/read/remove of files and directories,
//!   unique or shared directories, and an mdsrate-style mknod-only mode.
//! * `team`: runs a workload's tasks as threads of one process, or spread over hosts (a
//!   worker process per host started through a launcher, phases commanded over TCP JSON
//!   lines, progress streamed back), with barriers between phases as IOR's `-g`.
//! * `storage`: where tasks do their I/O: POSIX calls on a path (a Nacre mount, or any local
//!   directory as a baseline), or the native client library (`-a NACRE`).
//! * `selftest`: `nacre selftest` run at once from a group of client hosts through the same
//!   team.
//! * `plot`: rate-over-time SVG charts.
//! * `survey`: an obdfilter-survey-like driver of OST object stores.
//! * `mds_survey`: an mds-survey-like driver of a scratch MDT through `nacre_mds::execute`,
//!   the entry every network request takes.
//! * `stats`: min/mean/max/stddev over iterations.
//!
//! Results are measured, never assumed: every figure is timed around the phase it names.

pub mod ior;
pub mod mds_survey;
pub mod mdtest;
pub mod plot;
pub mod selftest;
pub mod stats;
pub mod storage;
pub mod survey;
pub mod team;
pub mod worker;

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad parameters.
    #[error("{0}")]
    Params(String),
    /// An I/O call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// Operation.
        what: &'static str,
        /// File.
        path: String,
        /// Error.
        source: std::io::Error,
    },
    /// Read-back found bytes that differ from what was written.
    #[error("data check failed: {0} errors (first at {1})")]
    DataCheck(u64, String),
}

/// Builds an I/O error for `path`.
pub fn io_err(what: &'static str, path: &std::path::Path, source: std::io::Error) -> BenchError {
    BenchError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}
