//! Glimpses (Lustre's glimpse ASTs): a request that only needs to know what the holders of
//! conflicting locks know — on an OST, an object's size while a client keeps writes to it
//! under a write lock — asks them through their callback polls instead of calling their
//! locks back, so a `stat` of a file being written does not make its writer flush and
//! start over. Concurrent glimpses of one resource share one round of questions.

use super::{finish_glimpses, ClientId, Glimpse, GlimpseDone, Kind, Namespace};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl<K: Kind> Namespace<K> {
    /// The clients other than `requester` holding locks on `res` that conflict with `part`
    /// (sorted, each once).
    fn glimpse_holders(
        s: &super::State<K>,
        requester: Option<&ClientId>,
        res: &K::Res,
        part: &K::Part,
    ) -> Vec<ClientId> {
        let mut out: Vec<ClientId> = s
            .by_res
            .get(res)
            .into_iter()
            .flatten()
            .map(|id| &s.locks[id])
            .filter(|l| Some(&l.client) != requester && K::conflicts(&l.part, part))
            .map(|l| l.client)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// True if a glimpse of `part` of `res` by `requester` has someone to ask.
    pub fn glimpse_needed(
        &self,
        requester: Option<&ClientId>,
        res: &K::Res,
        part: &K::Part,
    ) -> bool {
        !Self::glimpse_holders(&self.state.lock(), requester, res, part).is_empty()
    }

    /// Asks the other clients holding locks on `res` that conflict with `part` for their
    /// value of it, without taking their locks back; `done` gets the largest answer once
    /// every one answered (at once, on this thread, with `None` if no one is to be asked).
    /// A client that does not answer within the callback timeout is evicted (its locks are
    /// gone, so what it knew was lost with them) and `done` runs without its answer.
    pub fn glimpse(
        &self,
        requester: Option<&ClientId>,
        res: K::Res,
        part: K::Part,
        done: GlimpseDone,
    ) {
        let mut s = self.state.lock();
        let holders = Self::glimpse_holders(&s, requester, &res, &part);
        if holders.is_empty() {
            drop(s);
            done(None);
            return;
        }
        let timeout = Duration::from_millis(self.callback_timeout_ms.load(Ordering::Relaxed));
        let mut ask = Vec::new();
        let g = s.glimpses.entry(res).or_insert_with(|| Glimpse {
            waiting: HashSet::new(),
            answer: None,
            deadline: Instant::now() + timeout,
            done: Vec::new(),
        });
        g.done.push(done);
        // A round under way asks only the holders it did not ask yet (a lock granted
        // since): the others' answers will come.
        for c in holders {
            if g.waiting.insert(c) {
                ask.push(c);
            }
        }
        for c in &ask {
            if let Some(h) = s.holders.get_mut(c) {
                h.glimpses.push(res);
            }
        }
        self.stats
            .glimpses
            .fetch_add(ask.len() as u64, Ordering::Relaxed);
        let deliver = s.deliverable();
        let start_timer = !std::mem::replace(&mut s.timer, true);
        drop(s);
        for (reply, due) in deliver {
            reply(due);
        }
        self.timer_wake.notify_all();
        if start_timer {
            self.start_timer();
        }
    }

    /// `client` answers the glimpse of `res` with `value` (an answer nobody waits for any
    /// more is ignored).
    pub fn glimpse_answer(&self, client: &ClientId, res: &K::Res, value: u64) {
        let mut s = self.state.lock();
        let Some(g) = s.glimpses.get_mut(res) else {
            return;
        };
        if !g.waiting.remove(client) {
            return;
        }
        g.answer = Some(g.answer.map_or(value, |a| a.max(value)));
        if !g.waiting.is_empty() {
            return;
        }
        let g = s.glimpses.remove(res).expect("present");
        drop(s);
        finish_glimpses(vec![(g.answer, g.done)]);
    }

    /// Glimpses waiting for answers now.
    pub fn glimpses_waiting(&self) -> usize {
        self.state.lock().glimpses.len()
    }
}
