//! The panic policy of every `nacre` process (ARCHITECTURE.md, "Panics").
//!
//! - A FUSE request handler that panics is contained (`nacre_fuse::pool::contain`): its
//!   request is answered EIO, the panic is logged, the mount serves on.
//! - Any other thread of a long-running process (`nacre server`, `nacre mount`, `nacre up`)
//!   that panics has hit a broken invariant: the process stops at once (abort), so no
//!   half-alive server keeps its targets or its clients' connections. Recovery (a restart,
//!   replays) or failover (the partner takes the targets over) follows. The embedded form is
//!   one process: it stops entirely, its mount answers ENOTCONN until `nacre up` restarts it.
//! - A short command (`nacre df`, `nacre ctl`, ...) prints one line naming the internal
//!   error, not a panic with a backtrace; one whose reader went away dies of SIGPIPE quietly.

/// Installs the policy; `daemon` for the long-running commands.
pub fn install(daemon: bool) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if nacre_fuse::pool::panic_contained() {
            default(info); // logged with its backtrace; contain() answers EIO
            return;
        }
        if daemon {
            default(info);
            tracing::error!("a broken invariant stopped this process: {info}");
            eprintln!("nacre: a broken invariant stopped this process: {info}");
            std::process::abort();
        }
        eprintln!("nacre: internal error: {info}");
    }));
}
