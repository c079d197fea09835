//! The table against a model that keeps, for every byte of a small file, which owners hold
//! it and how: every request's outcome and every byte's holders must agree.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const BYTES: u64 = 24;

fn owner(n: u8) -> Owner {
    Owner {
        client: [n / 2; 16],
        owner: u64::from(n % 2),
    }
}

/// Per byte: owner → write. Byte `BYTES` stands for every byte from `BYTES` on (only
/// ranges to the end of the file reach there, so they are all held alike).
type Model = Vec<BTreeMap<Owner, bool>>;

/// The model's bytes of a range.
fn bytes(start: u64, end: u64) -> std::ops::RangeInclusive<u64> {
    start..=end.min(BYTES)
}

fn model_conflict(m: &Model, o: Owner, kind: FlockKind, start: u64, end: u64) -> bool {
    if kind == FlockKind::Unlock {
        return false;
    }
    bytes(start, end).any(|b| {
        m[b as usize]
            .iter()
            .any(|(h, w)| *h != o && (*w || kind == FlockKind::Write))
    })
}

fn table_bytes(t: &FlockTable, fid: Fid) -> Model {
    let mut m: Model = vec![BTreeMap::new(); BYTES as usize + 1];
    for l in t.held(fid) {
        for b in bytes(l.start, l.end) {
            assert!(
                m[b as usize].insert(l.owner, l.write).is_none(),
                "byte {b} held twice by one owner"
            );
        }
    }
    m
}

fn kind_of(k: u8) -> FlockKind {
    match k % 3 {
        0 => FlockKind::Read,
        1 => FlockKind::Write,
        _ => FlockKind::Unlock,
    }
}

proptest! {
    #[test]
    fn the_table_agrees_with_a_byte_model(
        ops in proptest::collection::vec((0u8..4, 0u8..3, 0..BYTES, 0..BYTES, any::<bool>()), 1..120)
    ) {
        let t = FlockTable::new();
        let fid = Fid::new(0x2_0000_0400, 1);
        let mut m: Model = vec![BTreeMap::new(); BYTES as usize + 1];
        for (o, k, a, b, to_end) in ops {
            let (o, kind) = (owner(o), kind_of(k));
            let start = a.min(b);
            // Some ranges run to the end of the file (as `flock` and `l_len = 0` do).
            let end = if to_end { u64::MAX } else { a.max(b) };
            let conflicts = model_conflict(&m, o, kind, start, end);
            prop_assert_eq!(t.test(fid, o, kind, (start, end)).is_some(), conflicts);
            let out = t.set(fid, o, 7, kind, (start, end), false);
            match out {
                SetOutcome::Conflict(c) => {
                    prop_assert!(conflicts);
                    prop_assert!(c.owner != o && c.start <= end && start <= c.end);
                }
                SetOutcome::Granted => {
                    prop_assert!(!conflicts);
                    for byte in bytes(start, end) {
                        let held = &mut m[byte as usize];
                        match kind {
                            FlockKind::Unlock => { held.remove(&o); }
                            k => { held.insert(o, k == FlockKind::Write); }
                        }
                    }
                }
                other => prop_assert!(false, "{:?}", other),
            }
            prop_assert_eq!(&table_bytes(&t, fid), &m);
            // One owner's locks never overlap or touch with the same kind (merged).
            let mut mine: Vec<Flock> = t.held(fid).into_iter().filter(|l| l.owner == o).collect();
            mine.sort_by_key(|l| l.start);
            for w in mine.windows(2) {
                prop_assert!(w[0].end < w[1].start);
                prop_assert!(w[0].write != w[1].write || w[0].end + 1 < w[1].start);
            }
        }
        prop_assert_eq!(t.count(), t.held(fid).len());
    }
}

#[test]
fn a_wait_that_closes_a_cycle_is_a_deadlock() {
    let t = FlockTable::new();
    let fid = Fid::new(0x2_0000_0400, 1);
    let (a, b, c) = (owner(0), owner(1), owner(2));
    let w = FlockKind::Write;
    assert_eq!(t.set(fid, a, 1, w, (0, 9), true), SetOutcome::Granted);
    assert_eq!(t.set(fid, b, 2, w, (10, 19), true), SetOutcome::Granted);
    assert_eq!(t.set(fid, c, 3, w, (20, 29), true), SetOutcome::Granted);
    // a waits for b, b for c: c asking for a's range would wait for a.
    assert!(matches!(
        t.set(fid, a, 1, w, (10, 10), true),
        SetOutcome::Conflict(_)
    ));
    assert!(matches!(
        t.set(fid, b, 2, w, (20, 20), true),
        SetOutcome::Conflict(_)
    ));
    assert_eq!(t.set(fid, c, 3, w, (0, 0), true), SetOutcome::Deadlock);
    assert_eq!(t.waiting(), 2);
    // Without waiting, the same request is a plain conflict.
    assert!(matches!(
        t.set(fid, c, 3, w, (0, 0), false),
        SetOutcome::Conflict(_)
    ));
    // b gives up: no cycle any more.
    t.stop_waiting(b);
    assert!(matches!(
        t.set(fid, c, 3, w, (0, 0), true),
        SetOutcome::Conflict(_)
    ));
}

#[test]
fn a_client_that_goes_frees_its_locks_and_waits() {
    let t = FlockTable::new();
    let (f, g) = (Fid::new(0x2_0000_0400, 1), Fid::new(0x2_0000_0400, 2));
    let (a, a2, b) = (owner(0), owner(1), owner(2));
    assert_eq!(a.client, a2.client);
    let w = FlockKind::Write;
    assert_eq!(t.set(f, a, 1, w, (0, u64::MAX), false), SetOutcome::Granted);
    assert_eq!(
        t.set(g, a2, 1, FlockKind::Read, (5, 6), false),
        SetOutcome::Granted
    );
    assert!(matches!(
        t.set(f, b, 2, w, (3, 3), true),
        SetOutcome::Conflict(_)
    ));
    let mut freed = t.drop_client(&a.client);
    freed.sort();
    assert_eq!(freed, vec![f, g]);
    assert_eq!((t.count(), t.waiting()), (0, 0));
    assert_eq!(t.set(f, b, 2, w, (3, 3), true), SetOutcome::Granted);
    assert!(t.drop_owner(f, b));
    assert!(!t.drop_owner(f, b));
    assert_eq!(t.count(), 0);
}
