//! Parameters and statistics, in the manner of Lustre's `lctl get_param` tree.
//!
//! A [`Registry`] maps dotted names (`osd.demo-OST0000.brw_stats`) to [`Param`]s that render a
//! value and may accept a new one. Names are matched with shell-style wildcards per component
//! (`osd.*.brw_stats`). Statistics are lock-free: [`OpStats`] counts operations with their
//! latency sums and extremes, [`Histogram`] counts values in power-of-two buckets, as Lustre's
//! `stats` and `brw_stats` files do. Writing `0` to a statistic clears it.

pub mod hist;
pub mod jobs;
pub mod registry;

pub use hist::{Histogram, OpStats};
pub use jobs::JobStats;
pub use registry::{glob_match, local_only_match, Param, ParamError, Registry, LOCAL_ONLY};
