//! What a long-running Nacre process is made of, whatever roles it hosts.
//!
//! [`process`] assembles a server process from formatted target directories: one network
//! listener, one service pool per role, registration with the MGS. [`targets`] holds the
//! targets a process serves or stands by for (multi-mount protection, failover, the
//! `nacre failover` service), [`target_params`] their parameters. Every process serves its
//! parameter registry on a control socket ([`ctl`], behind `nacre ctl`) and, if asked,
//! OpenMetrics at `/metrics` ([`metrics`]). [`daemon`] detaches mounts into the background,
//! stops processes cleanly within a bound, and force-unmounts.
//!
//! Invariant: nothing here depends on the client library; a client mount adds its own
//! metric families through [`metrics::Sources::extra`].

pub mod callers;
pub mod ctl;
pub mod daemon;
pub mod key_admin;
mod mdt_threads;
pub mod metrics;
mod mgs_sync;
pub mod nodemap_admin;
pub mod pool_admin;
pub mod process;
pub mod target_params;
pub mod targets;
