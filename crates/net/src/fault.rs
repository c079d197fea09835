//! Named fault points for recovery tests.
//!
//! `fault::point("mds.mkdir_remote.after_local_commit")` does nothing unless the process was
//! started with `NACRE_FAULT` naming that point: then the process kills itself with SIGKILL
//! right there, exactly as `kill -9` at that step would (no destructors, no flushing). Tests
//! start a server with the variable set, make it reach the point, restart it without, and
//! check what survived. Unarmed, a point costs one load of an already-initialised value.

use std::sync::OnceLock;

/// Environment variable naming the armed fault point.
pub const FAULT_ENV: &str = "NACRE_FAULT";

fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(FAULT_ENV).ok().filter(|v| !v.is_empty()))
        .as_deref()
}

/// Passes fault point `name`; kills the process if it is the armed one.
pub fn point(name: &str) {
    if armed() == Some(name) {
        tracing::warn!("fault point {name} reached: killing this process (SIGKILL)");
        // SAFETY: sending a signal to ourselves.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        // SIGKILL is not deliverable late; never go on past an armed point.
        std::process::abort();
    }
}
