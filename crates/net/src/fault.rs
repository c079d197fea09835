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
//! most [`HOLD_MS_MAX`]); `NAME~hold@N` holds the Nth pass only, so a test acts while a step is held, whatever the machine's speed.
//! Several points may be armed at once (`A~hold,B`, at most [`ARMED_POINTS_MAX`]): `+B`
//! arms B beside those armed (held passes of the others stay held), `-A` disarms A alone
//! (releasing its held passes), and a plain spec replaces them all.
//! A running process is armed or disarmed through its control socket:
//! `nacre ctl --pid PID set_param fail_loc=oss.write.drop_reply` (Lustre's `fail_loc`);
//! `fail_fired` counts the armed points' firings since the last change. Unarmed, a point
//! costs one atomic load.

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
    /// Wait until the point is disarmed or replaced: on every pass (None), or on the Nth
    /// only (`NAME~hold@N`: the others go on).
    Hold(Option<u64>),
}

/// Longest a `NAME~hold` point holds a pass (a test that never disarms it).
pub const HOLD_MS_MAX: u64 = 600_000;

/// Most points armed at once; a spec naming more arms the first ones only.
pub const ARMED_POINTS_MAX: usize = 8;

/// An armed point: its name, action, passes so far, and the arming that armed it (what a
/// held pass waits on).
struct Armed {
    name: String,
    action: Action,
    passes: AtomicU64,
    arming: u64,
}

impl Armed {
    /// The point as given (`NAME`, `NAME@N`, `NAME~MS`, `NAME~hold`).
    fn spec(&self) -> String {
        match self.action {
            Action::Kill(1) => self.name.clone(),
            Action::Kill(n) => format!("{}@{n}", self.name),
            Action::Pause(ms) => format!("{}~{ms}", self.name),
            Action::Hold(None) => format!("{}~hold", self.name),
            Action::Hold(Some(n)) => format!("{}~hold@{n}", self.name),
        }
    }
}

/// Whether a point is armed: the only thing an unarmed pass reads.
static ANY: AtomicBool = AtomicBool::new(false);
/// The armed points.
static ARMED: RwLock<Vec<Armed>> = RwLock::new(Vec::new());
/// How many times an armed point fired (dropped, paused, held) since the last change.
static FIRED: AtomicU64 = AtomicU64::new(0);
/// Bumped at every change; each armed point keeps the value that armed it.
static ARMINGS: parking_lot::Mutex<u64> = parking_lot::Mutex::new(0);
/// Signalled at every change.
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

/// Arms `spec`: comma-separated points (`NAME`, `NAME@N`, `NAME~MS`, `NAME~hold`) in place
/// of those armed; `+SPEC` arms them beside those armed (one of the same name is replaced);
/// `-NAME,...` disarms those named; an empty spec or `0` disarms all (Lustre's
/// `fail_loc=0`). The fire count restarts at 0.
pub fn arm(spec: &str) {
    let spec = spec.trim();
    let mut armings = ARMINGS.lock();
    *armings += 1;
    let arming = *armings;
    let names = |list: &str| {
        list.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != "0")
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let mut slot = ARMED.write().unwrap_or_else(|e| e.into_inner());
    let (keep, add) = match spec.strip_prefix('-') {
        Some(gone) => {
            let gone = names(gone);
            slot.retain(|a| !gone.contains(&a.name));
            (true, Vec::new())
        }
        None => match spec.strip_prefix('+') {
            Some(more) => (true, names(more)),
            None => (false, names(spec)),
        },
    };
    if !keep {
        slot.clear();
    }
    for one in add {
        let (name, action) = parse(&one);
        slot.retain(|a| a.name != name);
        if slot.len() >= ARMED_POINTS_MAX {
            tracing::warn!("fault point {name} not armed: {ARMED_POINTS_MAX} are already");
            continue;
        }
        slot.push(Armed {
            name,
            action,
            passes: AtomicU64::new(0),
            arming,
        });
    }
    ANY.store(!slot.is_empty(), Ordering::Release);
    FIRED.store(0, Ordering::Relaxed);
    drop(slot);
    drop(armings);
    ARMED_CHANGED.notify_all();
}

/// The armed points as given, comma-separated (`NAME`, `NAME@N`, `NAME~MS`, `NAME~hold`),
/// empty if none.
pub fn armed_spec() -> String {
    init();
    let slot = ARMED.read().unwrap_or_else(|e| e.into_inner());
    slot.iter().map(Armed::spec).collect::<Vec<_>>().join(",")
}

/// How many times the armed points fired since the last change.
pub fn fired() -> u64 {
    FIRED.load(Ordering::Relaxed)
}

/// `NAME`, `NAME@N` (a count that does not parse counts as 1), `NAME~MS`, `NAME~hold` or
/// `NAME~hold@N`.
fn parse(v: &str) -> (String, Action) {
    if let Some((name, hold)) = v.rsplit_once('~') {
        if hold == "hold" {
            return (name.to_string(), Action::Hold(None));
        }
        if let Some(n) = hold.strip_prefix("hold@") {
            let nth = n.parse().unwrap_or(1).max(1);
            return (name.to_string(), Action::Hold(Some(nth)));
        }
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

/// What passing `name` does now: None if it is not armed.
fn pass(name: &str) -> Option<Step> {
    if !armed_any() {
        return None;
    }
    let slot = ARMED.read().unwrap_or_else(|e| e.into_inner());
    let armed = slot.iter().find(|a| a.name == name)?;
    Some(match armed.action {
        Action::Pause(ms) => Step::Pause(ms),
        Action::Hold(None) => Step::Hold(armed.arming),
        Action::Hold(Some(nth)) => match armed.passes.fetch_add(1, Ordering::Relaxed) + 1 == nth {
            true => Step::Hold(armed.arming),
            false => Step::Pass,
        },
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
    /// Hold while the point stays armed by this arming.
    Hold(u64),
}

/// True while point `name` is armed by `arming` (neither disarmed nor armed anew).
fn still_armed(name: &str, arming: u64) -> bool {
    let slot = ARMED.read().unwrap_or_else(|e| e.into_inner());
    slot.iter().any(|a| a.name == name && a.arming == arming)
}

/// Holds the calling thread while point `name` stays armed by `arming` (at most
/// [`HOLD_MS_MAX`]).
fn hold(name: &str, arming: u64) {
    tracing::warn!("fault point {name} reached: held until disarmed");
    FIRED.fetch_add(1, Ordering::Relaxed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(HOLD_MS_MAX);
    let mut armings = ARMINGS.lock();
    while still_armed(name, arming) {
        if ARMED_CHANGED.wait_until(&mut armings, deadline).timed_out() {
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
        assert_eq!(super::parse("a.b~hold"), ("a.b".to_string(), Hold(None)));
        assert_eq!(
            super::parse("a.b~hold@2"),
            ("a.b".to_string(), Hold(Some(2)))
        );
    }

    /// The armed points are the process's: tests that arm them run one at a time.
    static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    /// Passes `name` on a thread of its own; the flag turns true once it went past.
    fn passing(
        name: &'static str,
    ) -> (
        std::thread::JoinHandle<()>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use std::sync::atomic::Ordering;
        let passed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let t = {
            let passed = passed.clone();
            std::thread::spawn(move || {
                super::point(name);
                passed.store(true, Ordering::SeqCst);
            })
        };
        (t, passed)
    }

    /// Waits until the armed points fired `n` times since the last change.
    fn fired(n: u64) {
        while super::fired() < n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_held_point_holds_until_disarmed() {
        use std::sync::atomic::Ordering;
        let _serial = SERIAL.lock();
        super::arm("test.held~hold");
        assert_eq!(super::armed_spec(), "test.held~hold");
        let (t, passed) = passing("test.held");
        fired(1);
        assert!(!passed.load(Ordering::SeqCst), "went past a held point");
        super::arm("0");
        t.join().unwrap();
        assert!(passed.load(Ordering::SeqCst));
        assert_eq!(super::armed_spec(), "");
    }

    #[test]
    fn points_armed_beside_others_leave_their_holds_held() {
        use std::sync::atomic::Ordering;
        let _serial = SERIAL.lock();
        super::arm("test.a~hold,test.b@2");
        assert_eq!(super::armed_spec(), "test.a~hold,test.b@2");
        let (a, a_passed) = passing("test.a");
        fired(1);
        // Another held point armed beside it: the first stays held.
        super::arm("+test.c~hold");
        assert_eq!(super::armed_spec(), "test.a~hold,test.b@2,test.c~hold");
        let (c, c_passed) = passing("test.c");
        fired(1);
        assert!(!a_passed.load(Ordering::SeqCst), "+ released a held point");
        // One disarmed: its pass goes on, the other's stays held.
        super::arm("-test.c");
        c.join().unwrap();
        assert!(c_passed.load(Ordering::SeqCst));
        assert!(!a_passed.load(Ordering::SeqCst), "- released another point");
        assert_eq!(super::armed_spec(), "test.a~hold,test.b@2");
        // A plain spec replaces them all: every hold is released.
        super::arm("test.d");
        a.join().unwrap();
        assert!(a_passed.load(Ordering::SeqCst));
        assert_eq!(super::armed_spec(), "test.d");
        super::arm("0");
    }

    #[test]
    fn a_point_held_on_its_first_pass_lets_the_next_go() {
        use std::sync::atomic::Ordering;
        let _serial = SERIAL.lock();
        super::arm("test.once~hold@1");
        assert_eq!(super::armed_spec(), "test.once~hold@1");
        let (first, first_passed) = passing("test.once");
        fired(1);
        // The second pass goes on while the first is held.
        super::point("test.once");
        assert!(
            !first_passed.load(Ordering::SeqCst),
            "the first pass went on"
        );
        super::arm("0");
        first.join().unwrap();
        assert!(first_passed.load(Ordering::SeqCst));
    }

    #[test]
    fn no_more_than_the_most_points_are_armed() {
        let _serial = SERIAL.lock();
        let many: Vec<String> = (0..super::ARMED_POINTS_MAX + 3)
            .map(|i| format!("test.p{i}"))
            .collect();
        super::arm(&many.join(","));
        let armed = super::armed_spec();
        assert_eq!(armed.split(',').count(), super::ARMED_POINTS_MAX);
        // Re-arming one already armed replaces it, at the limit.
        super::arm("+test.p0~hold");
        assert!(super::armed_spec().ends_with("test.p0~hold"));
        assert_eq!(
            super::armed_spec().split(',').count(),
            super::ARMED_POINTS_MAX
        );
        super::arm("0");
    }
}
