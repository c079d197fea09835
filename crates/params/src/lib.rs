//! Parameters and statistics, in the manner of Lustre's `lctl get_param` tree.
//!
//! A `Registry` (registry.rs) maps dotted names (`osd.demo-OST0000.brw_stats`) to `Param`s
//! that render a value and may accept a new one. Names are matched with shell-style wildcards
//! per component (`osd.*.brw_stats`). Every process serves its registry on its control socket
//! (`nacre ctl`, `nacre-server`).
//!
//! Statistics are lock-free (hist.rs): `OpStats` counts operations with their latency sums
//! and extremes, as the per-operation counters `ost.*.stats` and `mdt.*.md_stats` do;
//! `Histogram` counts values in power-of-two buckets, as Lustre's `brw_stats` files do.
//! `JobStats` (jobs.rs) keeps an `OpStats` per job id, at most 1024 jobs (`*.job_stats`).
//! Writing `0` to a statistic clears it.

pub mod hist;
pub mod jobs;
pub mod registry;

pub use hist::{Histogram, OpStats};
pub use jobs::JobStats;
pub use registry::{glob_match, local_only_match, Param, ParamError, Registry, LOCAL_ONLY};
