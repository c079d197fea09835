//! The `nacre` command. The binary (main.rs) parses the command line and dispatches to one
//! module per command with its arguments (`cmd/`): `up` (the embedded form), `server`,
//! `mount`, `mkfs`, `ctl`, `node_api` (the node API beside a mount), `bench`, `selftest`,
//! `stripe`, `dirs`, `df`, `lfsck`, `top`, `changelog` (changelogs, `fid2path`, `path2fid`),
//! `project`, `quota` (`nacre quota`, `nacre setquota`), `qos`, `migrate`
//! (`nacre migrate -c/-S/-p` over files and trees), `policy`, `stage`, `pool`, `nodemap`,
//! `key`, `keygen`, `plan`, and `docs` (`nacre gen-docs`: man pages and completions for
//! packaging). What a long-running process is made of lives in `nacre-server`.
//!
//! `nacre up` is the embedded form: an MGS, its MDTs and OSTs and a client mount in one
//! process. The client reaches the servers through the in-process transport (no sockets,
//! no copies); with `--listen` the servers also take other processes' clients and tools.
//!
//! This library holds what the commands share: admin commands on a mount (`admin`: striping,
//! remote and striped directories, migration), `nacre top` (`top`: rates from two readings of
//! the counters, per job, client and target), the keys given to the process (`keys`), size
//! parsing (`size`), and the panic policy every `nacre` process installs (`panics`):
//!
//! * A FUSE request handler (a FUSE thread or one of its helpers, `nacre_fuse::pool::contain`)
//!   that panics is contained: the request's reply, dropped unsent while unwinding, answers
//!   EIO; the panic is logged and counted; the thread serves on. The client and FUSE crates
//!   (and the client side of `nacre_net::conn`) use `parking_lot` locks, which do not poison,
//!   so a handler that panicked holding one leaves it usable. Tested on both forms
//!   (`tests/posix.rs`, fault point `fuse.open_files.panic` inside the open-files lock).
//! * Any other thread of a long-running process (`nacre server`, `nacre mount`, `nacre up`)
//!   that panics stops the process at once (abort): a server never goes on half alive,
//!   holding its targets and its clients' connections without serving them; clients resend
//!   to the restarted server (recovery) or to its failover partner. The embedded form is one
//!   process: it stops entirely, and its mount answers ENOTCONN until `nacre up` restarts it
//!   from its targets. Tested (`tests/failures.rs`, fault point `net.panic` in a service
//!   thread, armed through the control socket).
//! * A short command (`df`, `ctl`, `getstripe`, ...) prints one line, `nacre: internal error:
//!   ...`; one whose reader went away (`nacre ctl list_param | head`) dies of SIGPIPE
//!   quietly, as `ls` does; daemons keep SIGPIPE ignored. Sockets are never written so as to
//!   raise it: frames go out through `nacre_net::frame::NoSigPipe` (`send`/`sendmsg` with
//!   `MSG_NOSIGNAL`; std's `write_vectored` is a plain `writev`), and the node API
//!   (`nacre-api`, so libnacre, Python and `LD_PRELOAD`) sends with `MSG_NOSIGNAL` too. A
//!   peer that went away is an `EPIPE` the caller handles: the client reconnects and
//!   replays, the API answers ENOTCONN. Tested (`crates/net/tests/sigpipe.rs`, `tests/api.rs`
//!   `an_application_outlives_its_node_client`).

pub mod admin;
pub mod keys;
pub mod panics;
pub mod size;
pub mod top;
