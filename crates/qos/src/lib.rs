//! A target's QoS scheduler (docs/qos.md). The rules are compiled once per change (rules.rs:
//! job patterns through globset) and a request is matched to the class of the first rule it
//! matches. Requests of a class wait, parked, until the class's token buckets (requests and
//! bytes per second at this target's share of the class's cluster-wide rate) allow them;
//! then one thread releases them into the service queue again (`Incoming::qos_release`).
//!
//! A held request holds no service thread and does not stop its connection's reader, so
//! another job's requests on the same connection go on. Held requests are bounded in number
//! and bulk bytes, past which a request is answered `EINPROGRESS` (its client sends it again
//! a little later) instead of being kept.
//!
//! A rule may also weigh its requests (`Scheduler::weight`): while a target's service
//! threads are all busy, weighted requests are taken from the queue first (`nacre-net`'s
//! service queue), up to their weight in a row before one unweighted one.
//!
//! Each second the target reports what each class asked of it (`Scheduler::report`) and
//! learns its share of each class's rate (`Scheduler::apply`); the server process carries
//! both to and from the MGS. A class it has no share of yet runs at its rate divided by the
//! file system's targets.

pub mod rules;

pub use rules::Facts;

use nacre_net::{Incoming, Outgoing};
use nacre_types::{Status, TargetKind};
use nacre_wire::qos::{QosDemand, QosReport, QosRules, QosShares};
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Most requests held back at once on one target.
pub const PARKED_REQUESTS_MAX: usize = 8_192;
/// Most bulk bytes held back at once on one target (writes carry their data).
pub const PARKED_BULK_BYTES_MAX: u64 = 64 << 20;
/// Most classes one target tracks; idle ones are forgotten first.
pub const CLASSES_MAX: usize = 16_384;
/// A class idle this long is forgotten (its counters with it).
pub const CLASS_IDLE_MS: u64 = 300_000;
/// Least rate a class's share is given (requests per second; bytes: 64 KiB/s), so a held
/// request always leaves.
const SHARE_OPS_MIN: f64 = 1.0;
const SHARE_BYTES_MIN: f64 = 65_536.0;

/// What a class did on this target (`qos_stats`, `/metrics`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClassStats {
    /// The rule.
    pub rule: String,
    /// The class.
    pub class: String,
    /// Requests served.
    pub ops: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Requests that were held back.
    pub delayed: u64,
    /// Total time they were held, microseconds.
    pub delay_us: u64,
    /// Requests answered "send again later" (held-back bounds reached).
    pub resent: u64,
    /// Held now.
    pub waiting: u64,
    /// This target's share: requests per second (0: no cap).
    pub share_ops: u64,
    /// This target's share: bytes per second (0: no cap).
    pub share_bytes: u64,
}

struct Parked {
    req: Incoming,
    bytes: u64,
    at: Instant,
}

struct Class {
    /// Share of the rate here (infinite: not capped).
    ops_per_s: f64,
    bytes_per_s: f64,
    burst_s: f64,
    ops_tokens: f64,
    bytes_tokens: f64,
    refilled: Instant,
    queue: VecDeque<Parked>,
    /// Since the last report.
    arrived_ops: u64,
    arrived_bytes: u64,
    stats: ClassStats,
    seen: Instant,
}

impl Class {
    fn refill(&mut self, now: Instant) {
        let dt = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        if self.ops_per_s.is_finite() {
            let cap = (self.ops_per_s * self.burst_s).max(1.0);
            self.ops_tokens = (self.ops_tokens + self.ops_per_s * dt).min(cap);
        }
        if self.bytes_per_s.is_finite() {
            let cap = self.bytes_per_s * self.burst_s;
            self.bytes_tokens = (self.bytes_tokens + self.bytes_per_s * dt).min(cap);
        }
    }

    /// True if a request of `bytes` may go now (it takes its tokens then; bytes may run
    /// into debt, paid back before the next one goes).
    fn take(&mut self, bytes: u64) -> bool {
        let ops_ok = !self.ops_per_s.is_finite() || self.ops_tokens >= 1.0;
        let bytes_ok = !self.bytes_per_s.is_finite() || self.bytes_tokens > 0.0;
        if !(ops_ok && bytes_ok) {
            return false;
        }
        if self.ops_per_s.is_finite() {
            self.ops_tokens -= 1.0;
        }
        if self.bytes_per_s.is_finite() {
            self.bytes_tokens -= bytes as f64;
        }
        true
    }

    /// How long until the next request may go.
    fn wait(&self) -> Duration {
        let mut s: f64 = 0.0;
        if self.ops_per_s.is_finite() && self.ops_tokens < 1.0 {
            s = s.max((1.0 - self.ops_tokens) / self.ops_per_s);
        }
        if self.bytes_per_s.is_finite() && self.bytes_tokens <= 0.0 {
            s = s.max((1.0 - self.bytes_tokens) / self.bytes_per_s);
        }
        Duration::from_secs_f64(s.min(60.0))
    }

    /// Sets this target's share (`ops`, `bytes` per second) of a rule capping `caps`
    /// (requests, bytes per second; 0: not capped).
    fn set_share(&mut self, ops: u64, bytes: u64, caps: (u64, u64)) {
        let (rule_ops, rule_bytes) = caps;
        self.ops_per_s = if rule_ops == 0 {
            f64::INFINITY
        } else {
            (ops as f64).max(SHARE_OPS_MIN)
        };
        self.bytes_per_s = if rule_bytes == 0 {
            f64::INFINITY
        } else {
            (bytes as f64).max(SHARE_BYTES_MIN)
        };
        self.stats.share_ops = if rule_ops == 0 { 0 } else { ops };
        self.stats.share_bytes = if rule_bytes == 0 { 0 } else { bytes };
    }
}

struct State {
    rules: rules::Rules,
    /// (rule, class) → class.
    classes: HashMap<(String, String), Class>,
    parked: usize,
    parked_bytes: u64,
    /// The file system's targets (a new class's default share is its rate over this).
    targets: u32,
    releaser: bool,
    stopped: bool,
}

struct Inner {
    active: AtomicBool,
    /// Some rule has a weight.
    weighted: AtomicBool,
    /// Some rule matches by project.
    projects: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
}

/// The scheduler of one target.
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl Default for Scheduler {
    fn default() -> Self {
        Scheduler::new()
    }
}

impl Scheduler {
    /// A scheduler with no rules (every request goes at once).
    pub fn new() -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                active: AtomicBool::new(false),
                weighted: AtomicBool::new(false),
                projects: AtomicBool::new(false),
                state: Mutex::new(State {
                    rules: rules::Rules::default(),
                    classes: HashMap::new(),
                    parked: 0,
                    parked_bytes: 0,
                    targets: 1,
                    releaser: false,
                    stopped: false,
                }),
                cv: Condvar::new(),
            }),
        }
    }

    /// True if some rule is set (otherwise nothing need be asked of a request).
    pub fn active(&self) -> bool {
        self.inner.active.load(Ordering::Relaxed)
    }

    /// True if some rule has a weight (otherwise [`Scheduler::weight`] need not be asked).
    pub fn weighted(&self) -> bool {
        self.inner.weighted.load(Ordering::Relaxed)
    }

    /// True if some rule matches by project (otherwise a request's project need not be
    /// found).
    pub fn wants_projects(&self) -> bool {
        self.inner.projects.load(Ordering::Relaxed)
    }

    /// The weight of the first rule a request matches (0: none).
    pub fn weight(&self, facts: &Facts<'_>) -> u32 {
        if !self.weighted() {
            return 0;
        }
        let st = self.inner.state.lock();
        st.rules.classify(facts).map_or(0, |(r, _)| r.weight)
    }

    /// True if some rule caps the rate of requests and may match one of operations `ops`
    /// ([`rules::Rules::caps_any`]).
    pub fn caps_any(&self, ops: &[&str]) -> bool {
        self.active() && self.inner.state.lock().rules.caps_any(ops)
    }

    /// Version of the rules applied.
    pub fn version(&self) -> u64 {
        self.inner.state.lock().rules.version()
    }

    /// Takes the rules of `version`, for a file system of `targets` targets. Classes start
    /// again; what was held back goes at once.
    pub fn set_rules(&self, rules: &QosRules, targets: u32) {
        // Rules come from the MGS: only those it would itself accept are taken.
        let mut checked = QosRules {
            version: rules.version,
            rules: Vec::new(),
        };
        for r in rules.rules.iter().take(nacre_wire::qos::QOS_RULES_MAX) {
            match r.check() {
                Ok(()) => checked.rules.push(r.clone()),
                Err(e) => tracing::warn!("QoS rule {:.64} from the MGS ignored: {e}", r.name),
            }
        }
        let rules = &checked;
        let held: Vec<Parked> = {
            let mut st = self.inner.state.lock();
            st.rules = rules::Rules::new(rules);
            st.targets = targets.max(1);
            let held = st
                .classes
                .drain()
                .flat_map(|(_, c)| c.queue.into_iter())
                .collect();
            st.parked = 0;
            st.parked_bytes = 0;
            self.inner
                .active
                .store(!st.rules.is_empty(), Ordering::Relaxed);
            self.inner
                .weighted
                .store(rules.rules.iter().any(|r| r.weight > 0), Ordering::Relaxed);
            self.inner.projects.store(
                rules.rules.iter().any(|r| !r.projects.is_empty()),
                Ordering::Relaxed,
            );
            held
        };
        for p in held {
            p.req.qos_release();
        }
    }

    /// Lets `req` through now (`Some`), or holds it until its class's share allows it
    /// (`None`: the scheduler owns it, and queues it again or answers it).
    pub fn admit(&self, req: Incoming, facts: &Facts<'_>) -> Option<Incoming> {
        if !self.active() || req.qos_admitted() {
            return Some(req);
        }
        let now = Instant::now();
        let mut st = self.inner.state.lock();
        let Some((rule, class)) = st.rules.classify(facts) else {
            return Some(req);
        };
        let (caps, burst_s) = ((rule.ops_per_s, rule.bytes_per_s), rule.burst_s);
        let key = (rule.name.clone(), class);
        if key.1.len() > nacre_wire::qos::QOS_CLASS_BYTES_MAX {
            // A class too long to report (a huge job id): not held, and said.
            tracing::warn!(
                "QoS: a class of rule {} too long to track goes uncapped",
                key.0
            );
            return Some(req);
        }
        if !st.classes.contains_key(&key) {
            if st.classes.len() >= CLASSES_MAX {
                forget_idle(&mut st, now);
            }
            if st.classes.len() >= CLASSES_MAX {
                // Bounded: past it, unknown classes go uncapped (and say so).
                tracing::warn!(
                    "QoS: more than {CLASSES_MAX} classes; {} goes uncapped",
                    key.1
                );
                return Some(req);
            }
            let n = u64::from(st.targets);
            let mut c = Class {
                ops_per_s: f64::INFINITY,
                bytes_per_s: f64::INFINITY,
                burst_s: f64::from(burst_s.max(1)),
                ops_tokens: 0.0,
                bytes_tokens: 0.0,
                refilled: now,
                queue: VecDeque::new(),
                arrived_ops: 0,
                arrived_bytes: 0,
                stats: ClassStats {
                    rule: key.0.clone(),
                    class: key.1.clone(),
                    ..ClassStats::default()
                },
                seen: now,
            };
            c.set_share(caps.0 / n, caps.1 / n, caps);
            // A new class may use one second of its share at once.
            c.ops_tokens = c.ops_per_s.min(1e12);
            c.bytes_tokens = c.bytes_per_s.min(1e15);
            st.classes.insert(key.clone(), c);
        }
        let bytes = facts.bytes;
        let (parked, parked_bytes) = (st.parked, st.parked_bytes);
        let c = st.classes.get_mut(&key).expect("class just made");
        c.seen = now;
        c.arrived_ops += 1;
        c.arrived_bytes += bytes;
        c.refill(now);
        if c.queue.is_empty() && c.take(bytes) {
            c.stats.ops += 1;
            c.stats.bytes += bytes;
            return Some(req);
        }
        let bulk = req.bulk.as_ref().map_or(0, |b| b.len() as u64);
        if parked >= PARKED_REQUESTS_MAX || parked_bytes + bulk > PARKED_BULK_BYTES_MAX {
            c.stats.resent += 1;
            drop(st);
            req.respond(Outgoing::error(Status::InProgress));
            return None;
        }
        c.queue.push_back(Parked {
            req,
            bytes,
            at: now,
        });
        c.stats.waiting += 1;
        st.parked += 1;
        st.parked_bytes += bulk;
        let start = !st.releaser;
        st.releaser = true;
        drop(st);
        if start {
            let weak = Arc::downgrade(&self.inner);
            let spawned = std::thread::Builder::new()
                .name("qos-release".into())
                .spawn(move || releaser(weak));
            if let Err(e) = spawned {
                tracing::error!("QoS: cannot start the releaser: {e}");
                self.inner.state.lock().releaser = false;
            }
        }
        self.inner.cv.notify_one();
        None
    }

    /// What each class asked of this target since the last report (arrived and still held).
    pub fn report(&self, fsname: &str, target: (TargetKind, u32)) -> QosReport {
        let mut st = self.inner.state.lock();
        let version = st.rules.version();
        let mut demands: Vec<QosDemand> = st
            .classes
            .iter_mut()
            .filter(|(_, c)| c.arrived_ops > 0 || !c.queue.is_empty())
            .map(|((rule, class), c)| {
                let held_bytes: u64 = c.queue.iter().map(|p| p.bytes).sum();
                let d = QosDemand {
                    rule: rule.clone(),
                    class: class.clone(),
                    ops: c.arrived_ops + c.queue.len() as u64,
                    bytes: c.arrived_bytes + held_bytes,
                };
                c.arrived_ops = 0;
                c.arrived_bytes = 0;
                d
            })
            .collect();
        demands.sort_unstable_by_key(|d| std::cmp::Reverse(d.ops));
        demands.truncate(nacre_wire::qos::QOS_CLASSES_PER_REPORT_MAX);
        QosReport {
            fsname: fsname.to_string(),
            target,
            version,
            demands,
        }
    }

    /// The MGS's answer to a report: this target's shares. The caller fetches the rules
    /// when `a.version` differs from [`Scheduler::version`].
    pub fn apply(&self, a: &QosShares) {
        let mut st = self.inner.state.lock();
        st.targets = a.targets.max(1);
        let State { rules, classes, .. } = &mut *st;
        for (rule, class, ops, bytes) in &a.shares {
            let (Some(r), Some(c)) = (
                rules.rule(rule),
                classes.get_mut(&(rule.clone(), class.clone())),
            ) else {
                continue;
            };
            c.refill(Instant::now());
            c.set_share(*ops, *bytes, (r.ops_per_s, r.bytes_per_s));
        }
        drop(st);
        self.inner.cv.notify_one();
    }

    /// Every class's counters, by rule and class.
    pub fn stats(&self) -> Vec<ClassStats> {
        let st = self.inner.state.lock();
        let mut v: Vec<ClassStats> = st.classes.values().map(|c| c.stats.clone()).collect();
        v.sort_by(|a, b| (&a.rule, &a.class).cmp(&(&b.rule, &b.class)));
        v
    }

    /// The counters as a table (`mdt.*.qos_stats`, `ost.*.qos_stats`).
    pub fn stats_text(&self) -> String {
        use std::fmt::Write;
        let mut s = format!(
            "{:<16} {:<32} {:>10} {:>14} {:>10} {:>12} {:>8} {:>8} {:>10} {:>14}\n",
            "rule",
            "class",
            "ops",
            "bytes",
            "delayed",
            "delay_avg_us",
            "resent",
            "waiting",
            "share_ops",
            "share_bytes"
        );
        for c in self.stats() {
            let _ = writeln!(
                s,
                "{:<16} {:<32} {:>10} {:>14} {:>10} {:>12} {:>8} {:>8} {:>10} {:>14}",
                c.rule,
                c.class,
                c.ops,
                c.bytes,
                c.delayed,
                c.delay_us.checked_div(c.delayed).unwrap_or(0),
                c.resent,
                c.waiting,
                c.share_ops,
                c.share_bytes
            );
        }
        s
    }
}

impl Drop for Scheduler {
    /// The target is no longer served here: what is held is answered `ENODEV` (its client
    /// moves to the target's next server).
    fn drop(&mut self) {
        let held: Vec<Parked> = {
            let mut st = self.inner.state.lock();
            st.stopped = true;
            st.classes
                .drain()
                .flat_map(|(_, c)| c.queue.into_iter())
                .collect()
        };
        self.inner.cv.notify_all();
        for p in held {
            p.req.respond(Outgoing::error(Status::NoDev));
        }
    }
}

/// The client address of a peer named `ip:port` (none for in-process peers).
pub fn peer_ip(peer: &str) -> Option<std::net::IpAddr> {
    peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip())
}

/// Forgets classes idle for [`CLASS_IDLE_MS`] with nothing held.
fn forget_idle(st: &mut State, now: Instant) {
    let idle = Duration::from_millis(CLASS_IDLE_MS);
    st.classes
        .retain(|_, c| !c.queue.is_empty() || now.duration_since(c.seen) < idle);
}

/// Releases held requests as their classes' tokens allow, until the scheduler is dropped.
fn releaser(inner: Weak<Inner>) {
    loop {
        let Some(me) = inner.upgrade() else { return };
        let mut go = Vec::new();
        {
            let mut st = me.state.lock();
            if st.stopped {
                return;
            }
            let now = Instant::now();
            let mut next: Option<Duration> = None;
            let mut freed = (0usize, 0u64);
            for c in st.classes.values_mut() {
                if c.queue.is_empty() {
                    continue;
                }
                c.refill(now);
                while let Some(p) = c.queue.front() {
                    if !c.take(p.bytes) {
                        break;
                    }
                    let p = c.queue.pop_front().expect("front");
                    let held = now.duration_since(p.at);
                    c.stats.ops += 1;
                    c.stats.bytes += p.bytes;
                    c.stats.delayed += 1;
                    c.stats.delay_us += held.as_micros() as u64;
                    c.stats.waiting -= 1;
                    freed.0 += 1;
                    freed.1 += p.req.bulk.as_ref().map_or(0, |b| b.len() as u64);
                    go.push(p.req);
                }
                if !c.queue.is_empty() {
                    let w = c.wait().max(Duration::from_micros(100));
                    next = Some(next.map_or(w, |n| n.min(w)));
                }
            }
            st.parked -= freed.0;
            st.parked_bytes -= freed.1;
            if go.is_empty() {
                // Nothing to send now: sleep until the first class may go (or a change).
                let wait = next.unwrap_or(Duration::from_secs(1));
                me.cv.wait_for(&mut st, wait);
            }
        };
        drop(me);
        for req in go {
            req.qos_release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_wire::qos::QosRule;

    fn rules(ops: u64) -> QosRules {
        QosRules {
            version: 1,
            rules: vec![QosRule {
                name: "r".into(),
                jobs: vec!["noisy*".into()],
                ops_per_s: ops,
                burst_s: 1,
                ..Default::default()
            }],
        }
    }

    #[test]
    fn a_class_goes_at_its_share_with_its_burst_and_pays_byte_debts() {
        let rule = QosRule {
            name: "r".into(),
            ops_per_s: 100,
            bytes_per_s: 1 << 20,
            burst_s: 2,
            ..Default::default()
        };
        let t0 = Instant::now();
        let mut c = Class {
            ops_per_s: 0.0,
            bytes_per_s: 0.0,
            burst_s: 2.0,
            ops_tokens: 0.0,
            bytes_tokens: 0.0,
            refilled: t0,
            queue: VecDeque::new(),
            arrived_ops: 0,
            arrived_bytes: 0,
            stats: ClassStats::default(),
            seen: t0,
        };
        c.set_share(100, 1 << 20, (rule.ops_per_s, rule.bytes_per_s));
        // Ten simulated seconds idle fill the bucket to two seconds of rate, no more.
        c.refill(t0 + Duration::from_secs(10));
        let mut went = 0;
        while c.take(0) {
            went += 1;
        }
        assert_eq!(went, 200);
        assert!(
            (c.wait().as_secs_f64() - 0.01).abs() < 1e-6,
            "{:?}",
            c.wait()
        );
        // Then a hundred a second.
        let mut t = t0 + Duration::from_secs(10);
        let mut went = 0;
        for _ in 0..1000 {
            t += Duration::from_millis(1);
            c.refill(t);
            while c.take(0) {
                went += 1;
            }
        }
        assert!((99..=101).contains(&went), "{went}");
        // A large write takes the bytes into debt: the next waits until it is paid.
        c.ops_tokens = 10.0;
        c.bytes_tokens = 1.0;
        assert!(c.take(4 << 20));
        assert!(!c.take(0));
        assert!(c.wait() >= Duration::from_secs(3), "{:?}", c.wait());
        // No cap on a kind: never waits on it.
        let free = QosRule {
            bytes_per_s: 0,
            ..rule
        };
        c.set_share(100, 0, (free.ops_per_s, free.bytes_per_s));
        c.bytes_tokens = -1e9;
        assert!(c.take(1 << 30));
        assert_eq!(c.stats.share_bytes, 0);
    }

    #[test]
    fn reports_name_the_demand_and_shares_apply() {
        let s = Scheduler::new();
        assert!(!s.active());
        s.set_rules(&rules(1000), 2);
        assert!(s.active());
        assert_eq!(s.version(), 1);
        assert!(s.report("fs", (TargetKind::Mdt, 0)).demands.is_empty());
        s.apply(&QosShares {
            version: 1,
            shares: vec![("r".into(), "job=noisy.1".into(), 300, 0)],
            targets: 2,
        });
        // No class yet: nothing to apply to, no stats.
        assert!(s.stats().is_empty());
        assert!(s.stats_text().starts_with("rule"));
    }
}
