//! Named fault points for recovery tests.
//!
//! `fault::point("mds.mkdir_remote.after_local_commit")` does nothing unless the process was
//! started with `NACRE_FAULT` naming that point: then the process kills itself with SIGKILL
//! right there, exactly as `kill -9` at that step would (no destructors, no flushing). Tests
//! start a server with the variable set, make it reach the point, restart it without, and
//! check what survived. `NAME@N` fires on the Nth pass of the point only (earlier passes go
//! on), for a step that the test's own setup also takes. `NAME~MS` does not kill: every
//! pass sleeps MS milliseconds there, to hold two operations in a chosen interleaving.
//! Unarmed, a point costs one load of an already-initialised value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Environment variable naming the armed fault point.
pub const FAULT_ENV: &str = "NACRE_FAULT";

/// What an armed point does.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// SIGKILL on this pass (1: the first).
    Kill(u64),
    /// Sleep this many milliseconds on every pass.
    Pause(u64),
}

/// The armed point and what it does.
fn armed() -> Option<&'static (String, Action)> {
    static ARMED: OnceLock<Option<(String, Action)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var(FAULT_ENV).ok().filter(|v| !v.is_empty())?;
            Some(parse(&v))
        })
        .as_ref()
}

/// `NAME`, `NAME@N` (a count that does not parse counts as 1) or `NAME~MS`.
fn parse(v: &str) -> (String, Action) {
    if let Some((name, ms)) = v.rsplit_once('~') {
        return (name.to_string(), Action::Pause(ms.parse().unwrap_or(1000)));
    }
    match v.rsplit_once('@') {
        Some((name, n)) => (
            name.to_string(),
            Action::Kill(n.parse().unwrap_or(1).max(1)),
        ),
        None => (v.to_string(), Action::Kill(1)),
    }
}

/// Passes fault point `name`; kills the process if it is the armed one (on its armed pass).
pub fn point(name: &str) {
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let Some((armed, action)) = armed() else {
        return;
    };
    if armed != name {
        return;
    }
    let nth = match action {
        Action::Pause(ms) => {
            tracing::warn!("fault point {name} reached: pausing {ms} ms");
            std::thread::sleep(std::time::Duration::from_millis(*ms));
            return;
        }
        Action::Kill(nth) => *nth,
    };
    if PASSES.fetch_add(1, Ordering::Relaxed) + 1 == nth {
        tracing::warn!("fault point {name} reached: killing this process (SIGKILL)");
        // SAFETY: sending a signal to ourselves.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        // SIGKILL is not deliverable late; never go on past an armed point.
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn armed_names_parse_with_and_without_a_pass_count() {
        use super::Action::{Kill, Pause};
        assert_eq!(super::parse("a.b"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b@3"), ("a.b".to_string(), Kill(3)));
        assert_eq!(super::parse("a.b@x"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b@0"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b~250"), ("a.b".to_string(), Pause(250)));
    }
}
