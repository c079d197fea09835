//! Named fault points for recovery tests.
//!
//! `fault::point("mds.mkdir_remote.after_local_commit")` does nothing unless the process was
//! started with `NACRE_FAULT` naming that point: then the process kills itself with SIGKILL
//! right there, exactly as `kill -9` at that step would (no destructors, no flushing). Tests
//! start a server with the variable set, make it reach the point, restart it without, and
//! check what survived. `NAME@N` fires on the Nth pass of the point only (earlier passes go
//! on), for a step that the test's own setup also takes. `NAME~MS` does not kill: every
//! pass sleeps MS milliseconds there, to hold two operations in a chosen interleaving.
//! `NAME~hold` holds every pass there until the point is disarmed or another is armed (at
//! most [`HOLD_MS_MAX`]), so a test acts while a step is held, whatever the machine's speed.
//! A running process is armed or disarmed through its control socket:
//! `nacre ctl --pid PID set_param fail_loc=oss.write.drop_reply` (Lustre's `fail_loc`);
//! `fail_loc.fired` counts the armed point's firings. Unarmed, a point costs one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Once, RwLock};

/// Environment variable naming the point armed at start.
pub const FAULT_ENV: &str = "NACRE_FAULT";

/// What an armed point does.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    /// SIGKILL (or drop, at a drop point) on this pass (1: the first).
    Kill(u64),
    /// Sleep this many milliseconds on every pass.
    Pause(u64),
    /// Wait on every pass until the point is disarmed or replaced.
    Hold,
}

/// Longest a `NAME~hold` point holds a pass (a test that never disarms it).
pub const HOLD_MS_MAX: u64 = 600_000;

/// The armed point: its name, action and passes so far.
struct Armed {
    name: String,
    action: Action,
    passes: AtomicU64,
}

/// Whether a point is armed: the only thing an unarmed pass reads.
static ANY: AtomicBool = AtomicBool::new(false);
/// The armed point.
static ARMED: RwLock<Option<Armed>> = RwLock::new(None);
/// How many times an armed point fired (dropped, paused) since it was armed.
static FIRED: AtomicU64 = AtomicU64::new(0);
/// Bumped at every arm or disarm: what a held pass waits for.
static ARMINGS: parking_lot::Mutex<u64> = parking_lot::Mutex::new(0);
/// Signalled at every arm or disarm.
static ARMED_CHANGED: parking_lot::Condvar = parking_lot::Condvar::new();
/// Reads [`FAULT_ENV`] once.
static FROM_ENV: Once = Once::new();

fn init() {
    FROM_ENV.call_once(|| {
        if let Ok(v) = std::env::var(FAULT_ENV) {
            arm(&v);
        }
    });
}

/// Arms `spec` (`NAME`, `NAME@N`, `NAME~MS`) in place of any armed point; an empty spec or
/// `0` disarms (Lustre's `fail_loc=0`). The fire count restarts at 0.
pub fn arm(spec: &str) {
    let spec = spec.trim();
    let armed = (!spec.is_empty() && spec != "0").then(|| {
        let (name, action) = parse(spec);
        Armed {
            name,
            action,
            passes: AtomicU64::new(0),
        }
    });
    let mut slot = ARMED.write().unwrap_or_else(|e| e.into_inner());
    ANY.store(armed.is_some(), Ordering::Release);
    *slot = armed;
    FIRED.store(0, Ordering::Relaxed);
    drop(slot);
    *ARMINGS.lock() += 1;
    ARMED_CHANGED.notify_all();
}

/// The armed point as given (`NAME`, `NAME@N`, `NAME~MS`), empty if none.
pub fn armed_spec() -> String {
    init();
    let slot = ARMED.read().unwrap_or_else(|e| e.into_inner());
    match slot.as_ref() {
        None => String::new(),
        Some(Armed {
            name,
            action: Action::Kill(1),
            ..
        }) => name.clone(),
        Some(Armed {
            name,
            action: Action::Kill(n),
            ..
        }) => format!("{name}@{n}"),
        Some(Armed {
            name,
            action: Action::Pause(ms),
            ..
        }) => format!("{name}~{ms}"),
        Some(Armed {
            name,
            action: Action::Hold,
            ..
        }) => format!("{name}~hold"),
    }
}

/// How many times the armed point fired since it was armed.
pub fn fired() -> u64 {
    FIRED.load(Ordering::Relaxed)
}

/// `NAME`, `NAME@N` (a count that does not parse counts as 1), `NAME~MS` or `NAME~hold`.
fn parse(v: &str) -> (String, Action) {
    if let Some((name, "hold")) = v.rsplit_once('~') {
        return (name.to_string(), Action::Hold);
    }
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

/// True if any fault point is armed in this process (callers then build point names).
pub fn armed_any() -> bool {
    init();
    ANY.load(Ordering::Acquire)
}

/// What passing `name` does now: None if it is not the armed point.
fn pass(name: &str) -> Option<Step> {
    if !armed_any() {
        return None;
    }
    let slot = ARMED.read().unwrap_or_else(|e| e.into_inner());
    let armed = slot.as_ref().filter(|a| a.name == name)?;
    Some(match armed.action {
        Action::Pause(ms) => Step::Pause(ms),
        Action::Hold => Step::Hold(*ARMINGS.lock()),
        Action::Kill(nth) => match armed.passes.fetch_add(1, Ordering::Relaxed) + 1 == nth {
            true => Step::Fire,
            false => Step::Pass,
        },
    })
}

/// What an armed point does on one pass.
enum Step {
    Pass,
    Fire,
    Pause(u64),
    /// Hold until the armings count moves past this one.
    Hold(u64),
}

/// Holds the calling thread until the point armed at `armings` is disarmed or replaced (at
/// most [`HOLD_MS_MAX`]).
fn hold(name: &str, armings: u64) {
    tracing::warn!("fault point {name} reached: held until disarmed");
    FIRED.fetch_add(1, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(HOLD_MS_MAX);
    let mut now = ARMINGS.lock();
    while *now == armings {
        if ARMED_CHANGED.wait_until(&mut now, deadline).timed_out() {
            tracing::warn!("fault point {name}: held {HOLD_MS_MAX} ms, going on");
            return;
        }
    }
}

/// Passes a *drop* point `name` (a request or reply a test wants lost): true on the armed
/// pass only (the first, or the Nth with `NAME@N`), so a resend goes through.
pub fn hit(name: &str) -> bool {
    match pass(name) {
        Some(Step::Fire) => {
            tracing::warn!("fault point {name} fired");
            FIRED.fetch_add(1, Ordering::Relaxed);
            true
        }
        Some(Step::Pause(ms)) => {
            FIRED.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            false
        }
        Some(Step::Hold(armings)) => {
            hold(name, armings);
            false
        }
        _ => false,
    }
}

/// Passes fault point `name`; kills the process if it is the armed one (on its armed pass).
pub fn point(name: &str) {
    match pass(name) {
        Some(Step::Pause(ms)) => {
            tracing::warn!("fault point {name} reached: pausing {ms} ms");
            FIRED.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
        Some(Step::Hold(armings)) => hold(name, armings),
        Some(Step::Fire) => {
            tracing::warn!("fault point {name} reached: killing this process (SIGKILL)");
            // SAFETY: sending a signal to ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            // SIGKILL is not deliverable late; never go on past an armed point.
            std::process::abort();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn armed_names_parse_with_and_without_a_pass_count() {
        use super::Action::{Hold, Kill, Pause};
        assert_eq!(super::parse("a.b"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b@3"), ("a.b".to_string(), Kill(3)));
        assert_eq!(super::parse("a.b@x"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b@0"), ("a.b".to_string(), Kill(1)));
        assert_eq!(super::parse("a.b~250"), ("a.b".to_string(), Pause(250)));
        assert_eq!(super::parse("a.b~hold"), ("a.b".to_string(), Hold));
    }

    #[test]
    fn a_held_point_holds_until_disarmed() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        super::arm("test.held~hold");
        assert_eq!(super::armed_spec(), "test.held~hold");
        let passed = Arc::new(AtomicBool::new(false));
        let t = {
            let passed = passed.clone();
            std::thread::spawn(move || {
                super::point("test.held");
                passed.store(true, Ordering::SeqCst);
            })
        };
        while super::fired() == 0 {
            std::thread::yield_now();
        }
        assert!(!passed.load(Ordering::SeqCst), "went past a held point");
        super::arm("0");
        t.join().unwrap();
        assert!(passed.load(Ordering::SeqCst));
    }
}
