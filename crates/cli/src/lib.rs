//! The `nacre` command: one binary that is any set of servers, a client mount, the embedded
//! all-in-one file system (`nacre up`), and the admin tools (`setstripe`, `getstripe`, `df`).
//!
//! [`server`] assembles a server process from formatted target directories: one network
//! listener, one service pool per role, registration with the MGS. [`daemon`] detaches mounts
//! into the background and stops them cleanly.

pub mod admin;
pub mod ctl;
pub mod daemon;
pub mod metrics;
pub mod panics;
pub mod server;
pub mod target_params;
pub mod targets;

pub mod size;
pub mod top;
