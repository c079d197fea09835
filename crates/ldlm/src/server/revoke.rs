//! Changes that revoke locks: the callbacks, the wait for the cancels (parked or on the
//! change's thread), lock prolonging for holders still at work, and the hold a change
//! keeps on what it revoked until it is applied.

use super::*;

/// A change's hold on the bits it revoked: no lock overlapping them is granted until it is
/// dropped (after the change is applied).
pub struct Revocation<'a, K: Kind = InodeBits> {
    ns: &'a Namespace<K>,
    id: u64,
    targets: Vec<(K::Res, K::Part)>,
    /// Clients that did not cancel in time: the caller evicts them (their locks are gone
    /// already).
    pub late: Vec<ClientId>,
    /// The change had to wait for callbacks (names it resolved before may have changed).
    pub waited: bool,
}

impl<K: Kind> Drop for Revocation<'_, K> {
    fn drop(&mut self) {
        let mut s = self.ns.state.lock();
        for (res, _) in &self.targets {
            if let Some(v) = s.revoking.get_mut(res) {
                v.retain(|(id, _)| *id != self.id);
                if v.is_empty() {
                    s.revoking.remove(res);
                }
            }
        }
    }
}

impl<K: Kind> Revocation<'_, K> {
    /// [`Namespace::try_grant`] for the requester of this change while it holds it (before
    /// the change is applied): its own hold does not stand in the way, other changes' do,
    /// and a change that starts later revokes the lock. So no other client's change can come
    /// between this change and the lock, as it could after the hold is dropped.
    pub fn try_grant(
        &self,
        client: &ClientId,
        res: K::Res,
        wanted: K::Part,
    ) -> Option<(K::Ref, bool)> {
        self.ns.grant(client, res, wanted, true, Some(self.id))
    }
}

impl<K: Kind> Namespace<K> {
    /// True if a change of `targets` by `requester` would have to call back locks.
    pub fn conflicts(&self, requester: Option<&ClientId>, targets: &[(K::Res, K::Part)]) -> bool {
        !self.state.lock().conflicting(requester, targets).is_empty()
    }

    /// Like [`Namespace::revoke`] without waiting: calls back the other clients'
    /// overlapping locks and runs `done` once they are cancelled, or once the callback
    /// timeout has passed (the late clients evicted and named to `done`) — at once, on
    /// this thread, if there is nothing to wait for. The change itself then takes its
    /// hold with [`Namespace::revoke`], which finds nothing left to wait for unless a lock
    /// was granted meanwhile.
    pub fn revoke_later(
        &self,
        requester: Option<&ClientId>,
        targets: &[(K::Res, K::Part)],
        done: WhenRevoked,
    ) {
        let mut s = self.state.lock();
        let ids = s.conflicting(requester, targets);
        if ids.is_empty() {
            drop(s);
            done(Vec::new());
            return;
        }
        self.stats.revocations.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let window = Duration::from_millis(self.contention_ms.load(Ordering::Relaxed));
        s.note_contention(targets, &ids, now, window);
        s.call_back(&ids, &self.stats);
        let timeout = Duration::from_millis(self.callback_timeout_ms.load(Ordering::Relaxed));
        s.waiters.push(Waiter {
            ids,
            deadline: now + timeout,
            done,
        });
        let deliver = s.deliverable();
        let start_timer = !std::mem::replace(&mut s.timer, true);
        drop(s);
        for (reply, refs) in deliver {
            reply(refs);
        }
        self.timer_wake.notify_all();
        if start_timer {
            self.start_timer();
        }
    }

    /// Changes parked waiting for cancels now.
    pub fn parked(&self) -> usize {
        self.state.lock().waiters.len()
    }

    /// `client` is still at work under its called-back locks on `res` (writing what it
    /// kept before it cancels): the changes parked for those locks wait up to another
    /// callback timeout from now before the client is evicted (Lustre's lock prolonging), so
    /// a holder busy flushing much data is not taken for a dead one. True if any was.
    pub fn prolong(&self, client: &ClientId, res: &K::Res) -> bool {
        let mut s = self.state.lock();
        if s.waiters.is_empty() {
            return false;
        }
        let ids: Vec<u64> = s
            .by_res
            .get(res)
            .into_iter()
            .flatten()
            .copied()
            .filter(|id| s.locks[id].client == *client && s.locks[id].blocked)
            .collect();
        if ids.is_empty() {
            return false;
        }
        let timeout = Duration::from_millis(self.callback_timeout_ms.load(Ordering::Relaxed));
        let deadline = Instant::now() + timeout;
        let mut any = false;
        for w in s.waiters.iter_mut() {
            if w.ids.iter().any(|id| ids.contains(id)) && w.deadline < deadline {
                w.deadline = deadline;
                any = true;
            }
        }
        if any {
            self.stats.prolonged.fetch_add(1, Ordering::Relaxed);
        }
        any
    }

    /// A change of `targets` ((resource, part) pairs) by `requester` (None: by the server
    /// itself) is about to run: blocks new grants on them, calls back every other client's
    /// overlapping lock and waits until they are cancelled or the callback timeout has
    /// passed. Keep the returned hold until the change is applied.
    pub fn revoke(
        &self,
        requester: Option<&ClientId>,
        targets: &[(K::Res, K::Part)],
    ) -> Revocation<'_, K> {
        let mut s = self.state.lock();
        s.changed = true;
        s.note_changes(requester, targets);
        let id = s.next_revocation;
        s.next_revocation += 1;
        for (res, part) in targets {
            s.revoking.entry(*res).or_default().push((id, *part));
        }
        let mut hold = Revocation {
            ns: self,
            id,
            targets: targets.to_vec(),
            late: Vec::new(),
            waited: false,
        };
        let ids = s.conflicting(requester, targets);
        if ids.is_empty() {
            return hold;
        }
        hold.waited = true;
        self.stats.revocations.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let window = Duration::from_millis(self.contention_ms.load(Ordering::Relaxed));
        s.note_contention(targets, &ids, started, window);
        s.call_back(&ids, &self.stats);
        let now = s.deliverable();
        drop(s);
        for (reply, refs) in now {
            reply(refs);
        }
        let timeout = Duration::from_millis(self.callback_timeout_ms.load(Ordering::Relaxed));
        let deadline = started + timeout;
        let mut s = self.state.lock();
        loop {
            let left: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| s.locks.contains_key(id))
                .collect();
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let mut late: Vec<ClientId> = left.iter().map(|id| s.locks[id].client).collect();
                late.sort_unstable();
                late.dedup();
                drop(s);
                for c in &late {
                    self.evict(c);
                }
                self.stats
                    .timeouts
                    .fetch_add(late.len() as u64, Ordering::Relaxed);
                hold.late = late;
                break;
            }
            self.cancelled.wait_until(&mut s, deadline);
        }
        self.stats
            .revoke_wait_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        hold
    }
}
