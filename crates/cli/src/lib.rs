//! The `nacre` command's library: admin commands on a mount (`admin`: striping, remote and
//! striped directories, migration), `nacre top` (`top`), size parsing (`size`) and the panic
//! policy every `nacre` process installs (`panics`). The binary (`main.rs`, `cmd/`) parses the
//! command line; what a long-running process is made of lives in `nacre-server`.

pub mod admin;
pub mod keys;
pub mod panics;
pub mod size;
pub mod top;
