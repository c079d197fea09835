//! The namespace's unit tests.
use super::*;
use crate::msg::{LockRef, DELEGATION, LOOKUP, OPEN, UPDATE};
use nacre_types::Fid;
use std::sync::mpsc;

type Namespace = super::Namespace<InodeBits>;

const A: ClientId = [1; 16];
const B: ClientId = [2; 16];

fn fid(n: u32) -> Fid {
    Fid::new(0x2_0000_0400, n)
}

fn poller(ns: &Arc<Namespace>, c: ClientId) -> mpsc::Receiver<Vec<LockRef>> {
    let (tx, rx) = mpsc::channel();
    ns.poll(
        &c,
        10_000,
        Box::new(move |cb: Callbacks<_, _>| {
            let _ = tx.send(cb.revoke);
        }),
    );
    rx
}

#[test]
fn only_polling_clients_get_locks_and_a_grant_is_reused() {
    let ns = Namespace::new(1);
    assert!(ns.try_grant(&A, fid(1), UPDATE).is_none());
    let _rx = poller(&ns, A);
    let (g, new) = ns.try_grant(&A, fid(1), LOOKUP | UPDATE).unwrap();
    assert!(new);
    let (again, new) = ns.try_grant(&A, fid(1), UPDATE).unwrap();
    assert_eq!((again.handle, new), (g.handle, false));
    assert_eq!(ns.granted(), 1);
    assert!(ns.others_hold(&B) && !ns.others_hold(&A));
    ns.cancel(&B, &[g.handle]);
    assert_eq!(ns.granted(), 1, "another client cannot cancel it");
    ns.cancel(&A, &[g.handle]);
    assert_eq!(ns.granted(), 0);
}

#[test]
fn an_open_lock_is_called_back_from_its_own_holder_too() {
    let ns = Namespace::new(1);
    let rx_a = poller(&ns, A);
    let attrs = ns.try_grant(&A, fid(1), LOOKUP | UPDATE).unwrap().0;
    assert!(
        !ns.may_call_back(&A),
        "A's own changes leave its entry locks alone"
    );
    let open = ns.try_grant(&A, fid(1), OPEN).unwrap().0;
    assert!(open.handle != attrs.handle, "OPEN is a lock of its own");
    assert!(ns.may_call_back(&A) && ns.may_call_back(&B) && !ns.others_hold(&A));
    // A's change of the attributes leaves both; its unlink calls back the OPEN lock only.
    assert!(!ns.conflicts(Some(&A), &[(fid(1), UPDATE)]));
    assert!(ns.conflicts(Some(&A), &[(fid(1), LOOKUP | UPDATE | OPEN)]));
    let ns2 = ns.clone();
    let canceller = std::thread::spawn(move || {
        let refs = rx_a.recv().unwrap();
        assert_eq!(refs, vec![open]);
        ns2.cancel(&A, &[open.handle]);
    });
    let hold = ns.revoke(Some(&A), &[(fid(1), LOOKUP | UPDATE | OPEN)]);
    assert!(hold.waited && hold.late.is_empty());
    canceller.join().unwrap();
    drop(hold);
    assert_eq!(ns.granted(), 1);
    assert!(
        !ns.may_call_back(&A),
        "the count of A's OPEN locks follows the cancel"
    );
}

#[test]
fn a_change_calls_back_other_clients_and_waits_for_their_cancel() {
    let ns = Namespace::new(1);
    ns.contention_ms.store(0, Ordering::Relaxed);
    let rx_a = poller(&ns, A);
    let _rx_b = poller(&ns, B);
    let a = ns.try_grant(&A, fid(1), LOOKUP | UPDATE).unwrap().0;
    let b = ns.try_grant(&B, fid(1), UPDATE).unwrap().0;
    let other = ns.try_grant(&A, fid(2), UPDATE).unwrap().0;
    let ns2 = ns.clone();
    let canceller = std::thread::spawn(move || {
        let refs = rx_a.recv().unwrap();
        assert_eq!(refs, vec![a]);
        ns2.cancel(&A, &[a.handle]);
    });
    // B changes fid 1's attributes: its own lock stays, A's is called back.
    let hold = ns.revoke(Some(&B), &[(fid(1), UPDATE)]);
    canceller.join().unwrap();
    assert!(hold.late.is_empty());
    assert!(
        ns.try_grant(&A, fid(1), UPDATE).is_none(),
        "held by the change"
    );
    assert!(
        ns.try_grant(&A, fid(1), LOOKUP).is_some(),
        "other bits are free"
    );
    drop(hold);
    assert!(ns.try_grant(&A, fid(1), UPDATE).is_some());
    assert_eq!(ns.held_by(&B), 1);
    assert!(ns.state.lock().locks.contains_key(&b.handle));
    assert!(ns.state.lock().locks.contains_key(&other.handle));
    assert_eq!(ns.stats.callbacks.load(Ordering::Relaxed), 1);
}

#[test]
fn a_client_that_does_not_cancel_is_evicted_after_the_timeout() {
    let ns = Namespace::new(1);
    ns.callback_timeout_ms.store(200, Ordering::Relaxed);
    let rx_a = poller(&ns, A);
    ns.try_grant(&A, fid(1), UPDATE).unwrap();
    ns.try_grant(&A, fid(2), UPDATE).unwrap();
    let started = Instant::now();
    let hold = ns.revoke(None, &[(fid(1), UPDATE | LOOKUP)]);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(hold.late, vec![A]);
    assert_eq!(
        ns.granted(),
        0,
        "all of the evicted client's locks are gone"
    );
    assert_eq!(rx_a.recv().unwrap().len(), 1, "the callback was sent");
    assert!(
        ns.try_grant(&A, fid(3), UPDATE).is_none(),
        "no locks until it polls"
    );
    assert_eq!(ns.stats.timeouts.load(Ordering::Relaxed), 1);
}

#[test]
fn a_contended_update_bit_is_left_out_for_a_while() {
    let ns = Namespace::new(1);
    ns.contention_ms.store(60_000, Ordering::Relaxed);
    let rx = poller(&ns, A);
    let _b = poller(&ns, B);
    let a = ns.try_grant(&A, fid(1), LOOKUP | UPDATE).unwrap().0;
    let ns2 = ns.clone();
    let t = std::thread::spawn(move || {
        let refs = rx.recv().unwrap();
        ns2.cancel(&A, &[refs[0].handle]);
    });
    drop(ns.revoke(Some(&B), &[(fid(1), UPDATE)]));
    t.join().unwrap();
    // Once is not contention: granted again.
    let again = ns.try_grant(&A, a.fid, LOOKUP | UPDATE).unwrap().0;
    assert_eq!(again.bits, LOOKUP | UPDATE);
    let rx2 = poller(&ns, A);
    let ns2 = ns.clone();
    let t = std::thread::spawn(move || {
        let refs = rx2.recv().unwrap();
        ns2.cancel(&A, &[refs[0].handle]);
    });
    drop(ns.revoke(Some(&B), &[(fid(1), UPDATE)]));
    t.join().unwrap();
    assert!(ns.try_grant(&A, a.fid, UPDATE).is_none());
    let l = ns.try_grant(&A, a.fid, LOOKUP | UPDATE).unwrap().0;
    assert_eq!(l.bits, LOOKUP, "the contended bit is left out");
    assert_eq!(ns.try_grant(&A, fid(2), UPDATE).unwrap().0.bits, UPDATE);
    ns.contention_ms.store(0, Ordering::Relaxed);
    assert_eq!(ns.try_grant(&B, a.fid, UPDATE).unwrap().0.bits, UPDATE);
}

#[test]
fn locks_are_taken_back_after_a_restart_only_while_nothing_changed() {
    let ns = Namespace::new(1_000);
    let held = [
        LockRef {
            handle: 5,
            fid: fid(1),
            bits: UPDATE,
        },
        LockRef {
            handle: 6,
            fid: fid(2),
            bits: 0,
        },
    ];
    assert_eq!(ns.restore(&A, &held), vec![6], "bits 0 are refused");
    assert_eq!(ns.held_by(&A), 1);
    assert_eq!(ns.restore(&B, &held[..1]), vec![5], "a handle in use");
    drop(ns.revoke(Some(&B), &[(fid(9), UPDATE)]));
    let later = LockRef {
        handle: 7,
        fid: fid(3),
        bits: UPDATE,
    };
    assert_eq!(ns.restore(&A, &[later]), vec![7], "a change ran");
}

#[test]
fn a_parked_change_runs_once_its_locks_are_cancelled_or_their_holders_evicted() {
    let ns = Namespace::new(1);
    let rx_a = poller(&ns, A);
    let a = ns.try_grant(&A, fid(1), UPDATE).unwrap().0;
    let (tx, done) = mpsc::channel();
    let t = tx.clone();
    ns.revoke_later(
        Some(&B),
        &[(fid(1), UPDATE)],
        Box::new(move |late| t.send(late).unwrap()),
    );
    assert_eq!(ns.parked(), 1);
    assert_eq!(rx_a.recv().unwrap(), vec![a]);
    assert!(done.try_recv().is_err(), "ran before the cancel");
    ns.cancel(&A, &[a.handle]);
    assert_eq!(done.try_recv().unwrap(), Vec::<ClientId>::new());
    assert_eq!(ns.parked(), 0);
    // Nothing to wait for: runs at once.
    let t = tx.clone();
    ns.revoke_later(
        None,
        &[(fid(2), UPDATE)],
        Box::new(move |l| t.send(l).unwrap()),
    );
    assert_eq!(done.try_recv().unwrap(), Vec::<ClientId>::new());
    // A holder that never cancels is evicted at the timeout, then the change runs.
    ns.callback_timeout_ms.store(100, Ordering::Relaxed);
    let _rx_a = poller(&ns, A);
    ns.try_grant(&A, fid(3), UPDATE).unwrap();
    ns.revoke_later(
        None,
        &[(fid(3), UPDATE)],
        Box::new(move |l| tx.send(l).unwrap()),
    );
    assert_eq!(done.recv_timeout(Duration::from_secs(10)).unwrap(), vec![A]);
    assert_eq!(ns.held_by(&A), 0);
}

#[test]
fn a_target_going_away_answers_its_polls_and_drops_its_locks() {
    let ns = Namespace::new(1);
    let rx = poller(&ns, A);
    ns.try_grant(&A, fid(1), UPDATE).unwrap();
    ns.shut();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), vec![]);
    assert_eq!((ns.granted(), ns.clients()), (0, 0));
}

#[test]
fn a_parked_poll_is_answered_when_its_wait_is_over() {
    let ns = Namespace::new(1);
    let (tx, rx) = mpsc::channel();
    ns.poll(
        &A,
        50,
        Box::new(move |cb: Callbacks<_, _>| {
            let _ = tx.send(cb.revoke);
        }),
    );
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), vec![]);
}

#[test]
fn extent_locks_are_called_back_by_the_changes_they_conflict_with() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    ns.contention_ms.store(0, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    ns.poll(
        &A,
        10_000,
        Box::new(move |cb: Callbacks<_, _>| {
            let _ = tx.send(cb.revoke);
        }),
    );
    let _b = {
        let (tx, rx) = mpsc::channel();
        ns.poll(&B, 10_000, Box::new(move |r| drop(tx.send(r.revoke))));
        rx
    };
    let o = ObjectId { seq: 1, id: 7 };
    let (a, new) = ns.try_grant(&A, o, Extent::of(0, 4096, false)).unwrap();
    assert!(new);
    assert_eq!((a.start, a.end, a.write), (0, u64::MAX, false), "widened");
    // B reading conflicts with no read lock; B's own read lock shares.
    assert!(!ns.conflicts(Some(&B), &[(o, Extent::of(0, 10, false))]));
    let (b, _) = ns
        .try_grant(&B, o, Extent::of(1 << 20, 4096, false))
        .unwrap();
    assert_eq!((b.start, b.end), (0, u64::MAX));
    // A write lock is refused while another client reads those bytes.
    assert!(ns.try_grant(&B, o, Extent::of(0, 10, true)).is_none());
    // B writes: A's read lock is called back, B's own stays.
    let ns2 = ns.clone();
    let t = std::thread::spawn(move || {
        let refs = rx.recv().unwrap();
        ns2.cancel(&A, &[refs[0].handle]);
        refs
    });
    drop(ns.revoke(Some(&B), &[(o, Extent::of(100, 10, true))]));
    assert_eq!(t.join().unwrap(), vec![a]);
    assert_eq!((ns.held_by(&A), ns.held_by(&B)), (0, 1));
    // Another object is untouched by all this.
    assert!(ns
        .try_grant(&A, ObjectId { seq: 1, id: 8 }, Extent::of(0, 1, true))
        .is_some());
    // A destroyed object's locks are dropped without callbacks.
    let callbacks = ns.stats.callbacks.load(Ordering::Relaxed);
    assert_eq!(ns.forget(&o), 1);
    assert_eq!((ns.held_by(&B), ns.held_by(&A)), (0, 1));
    assert_eq!(ns.stats.callbacks.load(Ordering::Relaxed), callbacks);
}

#[test]
fn a_glimpse_asks_the_write_lock_holders_and_leaves_their_locks() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    let o = ObjectId { seq: 1, id: 9 };
    let whole = Extent {
        start: 0,
        end: u64::MAX,
        write: false,
    };
    let (tx_a, rx_a) = mpsc::channel();
    ns.poll(&A, 10_000, Box::new(move |cb| drop(tx_a.send(cb))));
    // Nobody holds a write lock: nothing to ask, answered at once.
    assert!(!ns.glimpse_needed(Some(&B), &o, &whole));
    let (tx, rx) = mpsc::channel();
    let t = tx.clone();
    ns.glimpse(
        Some(&B),
        o,
        whole,
        Box::new(move |v| {
            let _ = t.send(v);
        }),
    );
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), None);
    // A writes under a write lock: two glimpses share one question to A.
    ns.try_grant(&A, o, Extent::of(0, 4096, true)).unwrap();
    assert!(ns.glimpse_needed(Some(&B), &o, &whole));
    assert!(!ns.glimpse_needed(Some(&A), &o, &whole), "not its own");
    for _ in 0..2 {
        let t = tx.clone();
        ns.glimpse(
            Some(&B),
            o,
            whole,
            Box::new(move |v| {
                let _ = t.send(v);
            }),
        );
    }
    let asked = rx_a.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!((asked.revoke, asked.glimpse), (vec![], vec![o]));
    assert!(rx.try_recv().is_err(), "waits for A's answer");
    ns.glimpse_answer(&B, &o, 1 << 40);
    assert!(rx.try_recv().is_err(), "B was not asked");
    ns.glimpse_answer(&A, &o, 8192);
    for _ in 0..2 {
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Some(8192));
    }
    assert_eq!(ns.held_by(&A), 1, "the lock stays");
    assert_eq!(ns.stats.callbacks.load(Ordering::Relaxed), 0);
    assert_eq!(ns.stats.glimpses.load(Ordering::Relaxed), 1);
    assert_eq!(ns.glimpses_waiting(), 0);
}

#[test]
fn a_holder_that_does_not_answer_a_glimpse_is_evicted() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    ns.callback_timeout_ms
        .store(CALLBACK_TIMEOUT_MS_MIN, Ordering::Relaxed);
    let o = ObjectId { seq: 1, id: 10 };
    ns.poll(&A, 10_000, Box::new(|_| {}));
    ns.try_grant(&A, o, Extent::of(0, 4096, true)).unwrap();
    let (tx, rx) = mpsc::channel();
    let whole = Extent {
        start: 0,
        end: u64::MAX,
        write: false,
    };
    ns.glimpse(
        Some(&B),
        o,
        whole,
        Box::new(move |v| {
            let _ = tx.send(v);
        }),
    );
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), None);
    assert_eq!(ns.held_by(&A), 0, "evicted");
    assert_eq!(ns.stats.timeouts.load(Ordering::Relaxed), 1);
}

#[test]
fn changes_waiting_for_one_callback_do_not_make_a_resource_contended() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    let o = ObjectId { seq: 1, id: 11 };
    ns.poll(&A, 10_000, Box::new(|_| {}));
    ns.poll(&B, 10_000, Box::new(|_| {}));
    ns.try_grant(&A, o, Extent::of(0, 4096, true)).unwrap();
    // Three reads of B wait for the one callback of A's write lock.
    for i in 0..3 {
        ns.revoke_later(
            Some(&B),
            &[(o, Extent::of(i * 4096, 4096, false))],
            Box::new(|_| {}),
        );
    }
    assert_eq!(ns.stats.callbacks.load(Ordering::Relaxed), 1);
    let (handle, _) = {
        let s = ns.state.lock();
        let id = *s.locks.keys().next().unwrap();
        (id, ())
    };
    ns.cancel(&A, &[handle]);
    // B's read lock is not narrowed: the object is not contended.
    let (b, _) = ns.try_grant(&B, o, Extent::of(0, 4096, false)).unwrap();
    assert_eq!((b.start, b.end), (0, u64::MAX), "widened");
}

#[test]
fn reclaimed_locks_come_back_unless_someone_else_changed_their_object() {
    use crate::kind::{Extent, Extents};
    use crate::msg::ExtentRef;
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1_000);
    ns.open_reclaim(60_000);
    let obj = |id| ObjectId { seq: 1, id };
    let lock = |handle, id, write| ExtentRef {
        handle,
        object: obj(id),
        start: 0,
        end: u64::MAX,
        write,
    };
    // A changed object 1 itself, B changed object 2, B only read object 3, B holds a read
    // lock on object 4.
    drop(ns.revoke(Some(&A), &[(obj(1), Extent::of(0, 10, true))]));
    drop(ns.revoke(Some(&B), &[(obj(2), Extent::of(0, 10, true))]));
    drop(ns.revoke(Some(&B), &[(obj(3), Extent::of(0, 10, false))]));
    ns.poll(&B, 10_000, Box::new(|_| {}));
    ns.try_grant(&B, obj(4), Extent::of(0, 10, false)).unwrap();
    let got = ns.reclaim(
        &A,
        &[
            lock(1, 1, true),
            lock(2, 2, true),
            lock(3, 3, true),
            lock(4, 4, true),
        ],
    );
    assert_eq!(got.refused, vec![2, 4]);
    assert_eq!(got.changed, vec![obj(2)]);
    assert_eq!(ns.held_by(&A), 2);
    // Taken back, not granted here: no authority of their own (an OST wants a capability
    // for I/O under them), where a lock granted here has it.
    assert!(!ns.holds_where(&A, &obj(1), |_| true));
    ns.poll(&A, 10_000, Box::new(|_| {}));
    ns.try_grant(&A, obj(5), Extent::of(0, 10, true)).unwrap();
    assert!(ns.holds_where(&A, &obj(5), |e| e.write));
    assert!(!ns.holds_where(&B, &obj(5), |_| true), "another client's");
    // A change by B now calls A's reclaimed lock back like any other.
    assert!(ns.conflicts(Some(&B), &[(obj(3), Extent::of(0, 1, true))]));
    // Once the window is over nothing is known: every reclaim is refused as changed.
    let late = super::Namespace::<Extents>::new(1);
    late.open_reclaim(0);
    assert!(!late.reclaiming());
    let got = late.reclaim(&A, &[lock(7, 5, false)]);
    assert_eq!((got.refused, got.changed), (vec![7], vec![obj(5)]));
}

#[test]
fn a_holder_at_work_under_a_called_back_lock_is_given_more_time() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    ns.callback_timeout_ms.store(1_000, Ordering::Relaxed);
    let o = ObjectId { seq: 1, id: 12 };
    ns.poll(&A, 10_000, Box::new(|_| {}));
    ns.try_grant(&A, o, Extent::of(0, 4096, true)).unwrap();
    assert!(!ns.prolong(&A, &o), "nothing waits yet");
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    ns.revoke_later(
        Some(&B),
        &[(o, Extent::of(0, 10, false))],
        Box::new(move |late| {
            let _ = tx.send((late, started.elapsed()));
        }),
    );
    // A writes for longer than the callback timeout before it cancels, a write every
    // quarter of it: each pushes the deadline back. (The sleeps are A's work, not waits.)
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(250));
        assert!(ns.prolong(&A, &o));
        assert!(!ns.prolong(&B, &o), "B holds nothing there");
    }
    assert!(rx.try_recv().is_err(), "evicted while at work");
    let (late, waited) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(late, vec![A], "evicted once silent");
    assert!(waited >= Duration::from_millis(1_500), "{waited:?}");
    assert_eq!(ns.stats.prolonged.load(Ordering::Relaxed), 6);
}

#[test]
fn a_change_is_granted_a_lock_under_its_own_hold_but_not_under_anothers() {
    use crate::kind::{Extent, Extents};
    use nacre_types::ObjectId;
    let ns = super::Namespace::<Extents>::new(1);
    let _a = {
        let (tx, rx) = mpsc::channel();
        ns.poll(&A, 10_000, Box::new(move |r| drop(tx.send(r.revoke))));
        rx
    };
    let _b = {
        let (tx, rx) = mpsc::channel();
        ns.poll(&B, 10_000, Box::new(move |r| drop(tx.send(r.revoke))));
        rx
    };
    let o = ObjectId { seq: 1, id: 9 };
    let bytes = Extent::of(4096, 8192, true);
    let hold_a = ns.revoke(Some(&A), &[(o, bytes)]);
    // Once the hold is let go another client's change could come before the lock: so the
    // lock is taken under it, where A's own hold does not stand in the way...
    assert!(
        ns.try_grant(&A, o, bytes).is_none(),
        "a hold refuses grants"
    );
    let (l, new) = hold_a.try_grant(&A, o, bytes).unwrap();
    assert!(new && l.write && l.start <= 4096 && l.end >= 4096 + 8191);
    ns.cancel(&A, &[l.handle]);
    // ...but another change under way on those bytes does.
    let hold_b = ns.revoke(Some(&B), &[(o, Extent::of(8192, 10, true))]);
    assert!(hold_a.try_grant(&A, o, bytes).is_none());
    assert!(
        hold_a
            .try_grant(&A, o, Extent::of(0, 4096, false))
            .is_some_and(|(l, _)| l.end < 8192),
        "clear of B's change"
    );
    drop(hold_b);
    drop(hold_a);
}

#[test]
fn a_delegation_is_one_clients_and_shuts_others_out_of_update() {
    let ns = Namespace::new(1);
    let (_ra, _rb) = (poller(&ns, A), poller(&ns, B));
    // Only with UPDATE.
    assert_eq!(ns.enqueue(&A, fid(1), DELEGATION), None);
    let (d, _) = ns.enqueue(&A, fid(1), UPDATE | DELEGATION).unwrap();
    assert_eq!(d.bits, UPDATE | DELEGATION);
    // Another client gets the name's lock, never the contents' nor a delegation.
    let (l, _) = ns.enqueue(&B, fid(1), LOOKUP | UPDATE).unwrap();
    assert_eq!(l.bits, LOOKUP);
    assert_eq!(ns.enqueue(&B, fid(1), UPDATE | DELEGATION), None);
    // A change of the contents calls the delegation back (it is held with UPDATE).
    assert!(ns.conflicts(Some(&B), &[(fid(1), UPDATE)]));
    ns.cancel(&A, &[d.handle]);
    // While another holds UPDATE, no delegation: UPDATE alone.
    let (u, _) = ns.enqueue(&B, fid(1), UPDATE).unwrap();
    assert_eq!(u.bits, UPDATE);
    let (a, _) = ns.enqueue(&A, fid(1), UPDATE | DELEGATION).unwrap();
    assert_eq!(a.bits, UPDATE, "no delegation beside B's UPDATE");
    // Another directory is another matter.
    assert!(ns
        .enqueue(&A, fid(2), UPDATE | DELEGATION)
        .is_some_and(|(l, _)| l.bits == UPDATE | DELEGATION));
}

/// Every delegation can be called back at once (a rule its holders check changed): they
/// are found by their bits, stay their holder's while it gives them back (what it sends
/// then is still under them), and are gone once cancelled.
#[test]
fn delegations_are_found_and_stay_their_holders_while_called_back() {
    let ns = Namespace::new(1);
    let rx_a = poller(&ns, A);
    let _rx_b = poller(&ns, B);
    let d = ns.try_grant(&A, fid(1), UPDATE | DELEGATION).unwrap().0;
    assert_eq!(d.bits, UPDATE | DELEGATION);
    ns.try_grant(&B, fid(2), LOOKUP | UPDATE).unwrap();
    let delegated = |bits: &u8| bits & DELEGATION != 0;
    assert_eq!(ns.resources_where(delegated), vec![fid(1)]);
    let (tx, done) = mpsc::channel();
    ns.revoke_later(
        None,
        &[(fid(1), DELEGATION)],
        Box::new(move |late| {
            let _ = tx.send(late);
        }),
    );
    let called: Vec<u64> = rx_a.recv().unwrap().iter().map(|r| r.handle).collect();
    assert_eq!(called, vec![d.handle]);
    assert!(
        ns.holds_or_cancels(&A, &fid(1), delegated),
        "while it gives it back"
    );
    assert!(
        !ns.holds_where(&A, &fid(1), delegated),
        "no longer granted as held"
    );
    assert!(!ns.holds_or_cancels(&B, &fid(1), delegated), "never B's");
    ns.cancel(&A, &[d.handle]);
    assert_eq!(done.recv().unwrap(), Vec::<ClientId>::new(), "none late");
    assert!(!ns.holds_or_cancels(&A, &fid(1), delegated));
    assert!(ns.resources_where(delegated).is_empty());
}
