//! What a long-running Nacre process is made of, whatever roles it hosts.
//!
//! Invariant: nothing here depends on the client library; a client mount adds its own metric
//! families through `metrics::Sources::extra`, and a role composed from outside the server
//! crates (the data mover) through `ServerProcess::add_role`.
//!
//! * `process`: server assembly. `nacre server --target DIR...` reads each target's label and
//!   starts one listener with a service pool per role present: `mgs`; `mdt` and
//!   `mdt_readpage` for MDTs; `ost_io`, `ost_create` and `ost` for OSTs; `selftest`; and
//!   `failover` where a target has service nodes. Pools start only once their targets did:
//!   until then the router holds their requests. Every target registers with the MGS.
//! * `mgs_sync` (one thread, once a second): persistent parameters and nodemaps from the
//!   MGS, applied before the process serves; and, over a connection per file system, each
//!   target's quota report and the quota slaves' way to the master, and each target's QoS
//!   demands, shares and rules.
//! * `targets`: the targets a process serves (`--target`) or stands by for (`--standby`),
//!   under multi-mount protection, and the failover service behind `nacre failover`
//!   (`--failover auto` takes a target over when its partner stops renewing it;
//!   docs/recovery.md).
//! * `mdt_threads`: a served MDT's background threads: `mdt-commit` (a journal sync every
//!   commit interval), `mdt-destroy`, `mdt-intents`, `mdt-atime`, and `mdt-osp` (the MGS's
//!   configuration and the OSTs' space).
//! * `target_params`: the targets' parameters (`osd.*`, `ost.*`, `mdt.*`).
//! * `pool_admin`: `nacre pool` on the MGS node. `nodemap_admin`: `nacre nodemap` on the MGS
//!   node. `key_admin`: `nacre key` (server-key rotation of a running process).
//! * `ctl`: the control socket behind `nacre ctl`: every process serves its registry on
//!   `/run/nacre/ctl/PID.sock` (one JSON request line, one JSON reply line).
//! * `metrics`: OpenMetrics at `/metrics` (HTTP by `hyper` on a single-threaded runtime); the
//!   control socket serves the same text.
//! * `callers`: both endpoints serve up to 4 callers at once, with timeouts, so a stalled
//!   caller delays no one.
//! * `daemon`: background mounts, bounded stops, and `umount -f`.
//!
//! One process may serve targets of several file systems (and one MGS manage them), as Lustre
//! serves several fsnames: every frame's target field names the file system's slot beside
//! the target's index, handlers key targets by both, each file system's targets talk to their
//! MGS over a connection of their own file system, and a connection whose handshake proved
//! one file system's key may name only that file system's targets (docs/multifs.md).

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
mod stopping;
pub mod target_params;
pub mod targets;
