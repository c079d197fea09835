//! The namespace's timer thread: answers parked polls whose wait is over, evicts the
//! clients that did not cancel a called-back lock or answer a glimpse in time, and runs the
//! changes that waited for them.

use super::{Callbacks, ClientId, Kind, Namespace, Waiter, POLL_WAIT_MS_MAX};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<K: Kind> Namespace<K> {
    /// Parked changes whose callbacks were not all answered in time: evicts the clients
    /// still holding their locks, then runs them.
    fn time_out(&self, waiters: Vec<Waiter>) {
        for w in waiters {
            let mut late: Vec<ClientId> = {
                let s = self.state.lock();
                w.ids
                    .iter()
                    .filter_map(|id| s.locks.get(id).map(|l| l.client))
                    .collect()
            };
            late.sort_unstable();
            late.dedup();
            for c in &late {
                self.evict(c);
            }
            self.stats
                .timeouts
                .fetch_add(late.len() as u64, Ordering::Relaxed);
            (w.done)(late);
        }
    }

    /// The thread answering parked polls whose wait is over; it sleeps until the next
    /// deadline and ends with the namespace.
    pub(super) fn start_timer(&self) {
        let me = self.me.clone();
        let spawned = std::thread::Builder::new()
            .name("ldlm-polls".into())
            .spawn(move || loop {
                let Some(ns) = me.upgrade() else { return };
                let mut s = ns.state.lock();
                let now = Instant::now();
                let mut due = Vec::new();
                let mut next = now + Duration::from_millis(POLL_WAIT_MS_MAX);
                let mut expired = Vec::new();
                for (c, h) in s.holders.iter_mut() {
                    match &h.poll {
                        Some((_, d)) if *d <= now => {
                            due.push(h.poll.take().expect("some").0);
                            expired.push(*c);
                        }
                        Some((_, d)) => next = next.min(*d),
                        None => {}
                    }
                }
                // Parked changes whose callbacks timed out: the late clients are evicted.
                let mut late_waiters = Vec::new();
                for w in std::mem::take(&mut s.waiters) {
                    if w.deadline <= now {
                        late_waiters.push(w);
                    } else {
                        next = next.min(w.deadline);
                        s.waiters.push(w);
                    }
                }
                if !late_waiters.is_empty() {
                    drop(s);
                    ns.time_out(late_waiters);
                    continue;
                }
                // Glimpses not answered in time: the silent clients are evicted.
                let mut silent = Vec::new();
                for g in s.glimpses.values() {
                    if g.deadline <= now {
                        silent.extend(g.waiting.iter().copied());
                    } else {
                        next = next.min(g.deadline);
                    }
                }
                if !silent.is_empty() {
                    drop(s);
                    silent.sort_unstable();
                    silent.dedup();
                    // Counted first: the eviction runs the glimpses' waiters.
                    ns.stats
                        .timeouts
                        .fetch_add(silent.len() as u64, Ordering::Relaxed);
                    for c in &silent {
                        ns.evict(c);
                    }
                    continue;
                }
                // A client whose poll expired with nothing held is forgotten (it is known
                // again at its next poll): one that went away leaves nothing behind.
                for c in expired {
                    if s.holders[&c].locks.is_empty() && s.holders[&c].idle() {
                        s.holders.remove(&c);
                    }
                }
                if due.is_empty() {
                    if s.waiters.is_empty()
                        && s.glimpses.is_empty()
                        && s.holders.values().all(|h| h.poll.is_none())
                    {
                        // Nothing parked: the next poll starts another.
                        s.timer = false;
                        return;
                    }
                    // Woken by a new poll, or at the next deadline (at most a second).
                    let wake = next.min(now + Duration::from_secs(1));
                    ns.timer_wake.wait_until(&mut s, wake);
                    continue;
                }
                drop(s);
                for reply in due {
                    reply(Callbacks::none());
                }
            });
        if let Err(e) = spawned {
            // Polls are then answered only by callbacks; clients repoll after errors.
            self.state.lock().timer = false;
            eprintln!("ldlm: no poll timer thread: {e}");
        }
    }
}
