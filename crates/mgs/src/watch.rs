//! Imperative recovery: the MGS tells clients at once when a target (re)starts.
//!
//! Every registration of a target is an event (a restarted server registers its targets
//! again). Clients long-poll with [`MgsRequest::WaitTargets`](nacre_wire::mgs::MgsRequest):
//! a poll with nothing new is parked — held without a service thread — until an event for
//! its file system arrives or its wait ends; a small timer thread ends the waits.

use nacre_net::{Incoming, Outgoing};
use nacre_types::TargetKind;
use nacre_wire::encode_body;
use nacre_wire::mgs::{MgsReply, WAIT_TARGETS_MS_MAX};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Events remembered per file system; a client further behind is told every target.
pub const EVENTS_KEPT_MAX: usize = 1_024;
/// Polls parked at once; more are answered at once (the client waits before polling again).
pub const PARKED_MAX: usize = 65_536;

#[derive(Default)]
struct FsEvents {
    seq: u64,
    /// (seq, kind, index), oldest first.
    log: VecDeque<(u64, TargetKind, u32)>,
    /// Every target ever registered (for clients too far behind).
    targets: Vec<(TargetKind, u32)>,
}

struct Parked {
    fsname: String,
    after: u64,
    deadline: Instant,
    req: Incoming,
}

#[derive(Default)]
struct State {
    events: HashMap<String, FsEvents>,
    parked: Vec<Parked>,
    timer_running: bool,
}

/// The event log and the parked polls.
#[derive(Default)]
pub struct Watch {
    inner: Arc<(Mutex<State>, Condvar)>,
}

impl State {
    /// The reply to a poll of `fsname` after `after`: `None` if nothing is new.
    fn news(&self, fsname: &str, after: u64) -> Option<MgsReply> {
        let ev = self.events.get(fsname)?;
        if ev.seq <= after {
            return None;
        }
        let behind = ev.log.front().is_none_or(|(s, ..)| *s > after + 1);
        let mut started: Vec<(TargetKind, u32)> = if behind {
            ev.targets.clone()
        } else {
            ev.log
                .iter()
                .filter(|(s, ..)| *s > after)
                .map(|(_, k, i)| (*k, *i))
                .collect()
        };
        started.sort_by_key(|(k, i)| (k.as_str(), *i));
        started.dedup();
        Some(MgsReply::Targets {
            seq: ev.seq,
            started,
        })
    }

    fn seq(&self, fsname: &str) -> u64 {
        self.events.get(fsname).map_or(0, |e| e.seq)
    }
}

fn answer(req: Incoming, reply: &MgsReply) {
    req.respond(Outgoing::ok(encode_body(reply)));
}

impl Watch {
    /// Target `kind` `index` of `fsname` registered: an event; parked polls of that file
    /// system are answered now.
    pub fn started(&self, fsname: &str, kind: TargetKind, index: u32) {
        let (lock, _) = &*self.inner;
        let mut s = lock.lock().expect("watch");
        let ev = s.events.entry(fsname.to_string()).or_default();
        ev.seq += 1;
        let seq = ev.seq;
        ev.log.push_back((seq, kind, index));
        while ev.log.len() > EVENTS_KEPT_MAX {
            ev.log.pop_front();
        }
        if !ev.targets.contains(&(kind, index)) {
            ev.targets.push((kind, index));
        }
        let parked = std::mem::take(&mut s.parked);
        let (ready, waiting): (Vec<_>, Vec<_>) =
            parked.into_iter().partition(|p| p.fsname == fsname);
        s.parked = waiting;
        let replies: Vec<_> = ready
            .into_iter()
            .map(|p| {
                let r = s.news(&p.fsname, p.after);
                (p.req, r)
            })
            .collect();
        let current = s.seq(fsname);
        drop(s);
        for (req, r) in replies {
            let r = r.unwrap_or(MgsReply::Targets {
                seq: current,
                started: Vec::new(),
            });
            answer(req, &r);
        }
    }

    /// A poll: answered now if there is news (or no room to park it), else parked.
    pub fn poll(&self, req: Incoming, fsname: String, after: u64, wait_ms: u32) {
        let (lock, cv) = &*self.inner;
        let mut s = lock.lock().expect("watch");
        if let Some(r) = s.news(&fsname, after) {
            drop(s);
            return answer(req, &r);
        }
        let wait = Duration::from_millis(u64::from(wait_ms.min(WAIT_TARGETS_MS_MAX)));
        if wait.is_zero() || s.parked.len() >= PARKED_MAX {
            let seq = s.seq(&fsname);
            drop(s);
            return answer(
                req,
                &MgsReply::Targets {
                    seq,
                    started: Vec::new(),
                },
            );
        }
        s.parked.push(Parked {
            fsname,
            after,
            deadline: Instant::now() + wait,
            req,
        });
        if !s.timer_running {
            s.timer_running = true;
            let inner = self.inner.clone();
            let spawned = std::thread::Builder::new()
                .name("mgs-watch".into())
                .spawn(move || timer(inner));
            if spawned.is_err() {
                s.timer_running = false;
                tracing::warn!("MGS: no timer thread: parked polls wait for an event");
            }
        }
        cv.notify_one();
    }
}

/// Answers parked polls whose wait is over, sleeping until the next deadline; exits when
/// nothing is parked (the next park starts it again).
fn timer(inner: Arc<(Mutex<State>, Condvar)>) {
    let (lock, cv) = &*inner;
    let mut s = lock.lock().expect("watch");
    loop {
        let now = Instant::now();
        let parked = std::mem::take(&mut s.parked);
        let (due, waiting): (Vec<_>, Vec<_>) = parked.into_iter().partition(|p| p.deadline <= now);
        s.parked = waiting;
        let due: Vec<_> = due.into_iter().map(|p| (s.seq(&p.fsname), p.req)).collect();
        if !due.is_empty() {
            drop(s);
            for (seq, req) in due {
                answer(
                    req,
                    &MgsReply::Targets {
                        seq,
                        started: Vec::new(),
                    },
                );
            }
            s = lock.lock().expect("watch");
            continue;
        }
        let Some(next) = s.parked.iter().map(|p| p.deadline).min() else {
            s.timer_running = false;
            return;
        };
        s = cv
            .wait_timeout(s, next.saturating_duration_since(now))
            .expect("watch")
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn news_since_a_point_and_everything_for_the_far_behind() {
        let mut s = State::default();
        assert!(s.news("fs", 0).is_none());
        let ev = s.events.entry("fs".into()).or_default();
        for (i, (k, idx)) in [
            (TargetKind::Mdt, 0),
            (TargetKind::Ost, 1),
            (TargetKind::Mdt, 0),
        ]
        .into_iter()
        .enumerate()
        {
            ev.seq = i as u64 + 1;
            ev.log.push_back((ev.seq, k, idx));
            if !ev.targets.contains(&(k, idx)) {
                ev.targets.push((k, idx));
            }
        }
        assert!(s.news("fs", 3).is_none());
        assert_eq!(
            s.news("fs", 2),
            Some(MgsReply::Targets {
                seq: 3,
                started: vec![(TargetKind::Mdt, 0)]
            })
        );
        // The log lost its start: a client at 0 is told every target.
        s.events.get_mut("fs").unwrap().log.pop_front();
        assert_eq!(
            s.news("fs", 0),
            Some(MgsReply::Targets {
                seq: 3,
                started: vec![(TargetKind::Mdt, 0), (TargetKind::Ost, 1)]
            })
        );
    }
}
