//! Tests of the write-behind pieces (writeback.rs).
use super::*;
use proptest::prelude::*;

proptest! {
    /// Kept pieces always read back as the last write of every byte, and taking RPCs of
    /// runs hands every byte over once.
    #[test]
    fn pieces_agree_with_a_byte_model(
        writes in proptest::collection::vec((0u64..4096, 1usize..700, any::<u8>()), 1..40),
        runs_max in 1usize..5,
    ) {
        let mut o = Obj::default();
        let mut model: BTreeMap<u64, u8> = BTreeMap::new();
        for (off, len, b) in writes {
            o.insert(off, vec![b; len], 1);
            for i in off..off + len as u64 {
                model.insert(i, b);
            }
        }
        // Pieces never overlap and hold exactly the model.
        let mut seen: BTreeMap<u64, u8> = BTreeMap::new();
        let mut last_end = 0;
        for (k, v) in &o.pieces {
            prop_assert!(*k >= last_end);
            last_end = k + v.bytes.len() as u64;
            for (i, b) in v.bytes.iter().enumerate() {
                seen.insert(k + i as u64, *b);
            }
        }
        prop_assert_eq!(&seen, &model);
        let mut taken: BTreeMap<u64, u8> = BTreeMap::new();
        while let Some((runs, buf)) = o.take_runs(1000, runs_max) {
            // Runs in order, apart (a gap between two), as many as allowed, their
            // lengths the buffer's, the RPC within its bound.
            prop_assert!(runs.len() <= runs_max && buf.len() <= 1000);
            prop_assert!(runs.windows(2).all(|w| w[0].1 < w[1].0));
            let mut at = 0usize;
            for (s, e) in runs {
                for i in s..e {
                    prop_assert!(taken.insert(i, buf[at]).is_none());
                    at += 1;
                }
            }
            prop_assert_eq!(at, buf.len());
            o.inflight.clear();
        }
        prop_assert!(o.pieces.is_empty());
        prop_assert_eq!(taken, model);
    }
}

/// What the flusher does with an RPC that came back written (flusher.rs `finish`, without
/// the client): its range leaves the object, and the object once nothing is left.
fn written_back(wb: &Writeback, key: Key, range: (u64, u64)) {
    let mut st = wb.st.lock();
    let o = st.objs.get_mut(&key).expect("object kept");
    o.inflight.retain(|f| f.range != range);
    if o.is_empty() {
        st.objs.remove(&key);
    }
    drop(st);
    wb.cv.notify_all();
}

/// The first RPC's bytes the flusher would take from `o` when it sends one run each.
fn take_one(o: &mut Obj, max: u64) -> Option<(u64, AlignedBuf)> {
    let (runs, buf) = o.take_runs(max, 1)?;
    Some((runs[0].0, buf))
}

/// The object of the tests below.
const KEY: Key = (0, ObjectId { seq: 0, id: 7 });

/// What the tests' writes are kept as: file, owner, layout generation.
fn tag() -> (Fid, Owner, u32) {
    (Fid::default(), Owner::default(), 0)
}

/// A write of 4 KiB at 0 kept, then a reader waiting for it (`flush_before`) in a thread
/// that says when it went on; returns once the reader marked the write due.
fn reader_behind_one_write() -> (
    std::sync::Arc<Writeback>,
    std::sync::mpsc::Receiver<()>,
    std::thread::JoinHandle<()>,
) {
    let wb = std::sync::Arc::new(Writeback::default());
    wb.add_grant(0, 1 << 20);
    assert!(wb
        .keep(KEY, tag(), (0, 0), vec![1; 4096], 1 << 20)
        .is_none());
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = {
        let wb = wb.clone();
        std::thread::spawn(move || {
            wb.flush_before(&[KEY]);
            tx.send(()).unwrap();
        })
    };
    while !wb.st.lock().objs.get(&KEY).expect("kept").urgent {
        std::thread::yield_now();
    }
    (wb, rx, reader)
}

/// A read (or `fsync`) waits for the writes kept before it, not for the writes a writer
/// keeps making meanwhile: it used to wait until the object had nothing kept, which a
/// writer that never pauses never allowed (a reader beside a writer on one mount stalled
/// until the writer blocked on something else: up to 1.3 s per read).
#[test]
fn a_read_waits_for_earlier_writes_only() {
    let (wb, rx, reader) = reader_behind_one_write();
    let (key, tag) = (KEY, tag());
    // The flusher takes the first write (the reader marked it due), then the writer keeps
    // another before that RPC comes back.
    let taken = wb
        .st
        .lock()
        .objs
        .get_mut(&key)
        .map(|o| take_one(o, 1 << 20))
        .expect("kept")
        .expect("a run");
    assert!(wb
        .keep(key, tag, (8192, 0), vec![2; 4096], 1 << 20)
        .is_none());
    assert!(
        rx.try_recv().is_err(),
        "the reader went on before its write was written"
    );
    written_back(&wb, key, (taken.0, taken.0 + 4096));
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the reader still waits for a write kept after it began");
    reader.join().unwrap();
    assert!(wb.holds_any(&[key]), "the later write is still kept");
}

/// The same when a later write replaces the earlier one's bytes before the flusher took
/// them: the read waits for the later write (which carries those bytes) instead of going
/// on and reading from the OST what was there before both.
#[test]
fn a_read_waits_for_an_earlier_write_a_later_one_replaced() {
    let (wb, rx, reader) = reader_behind_one_write();
    let (key, tag) = (KEY, tag());
    // A later write over the same bytes, and one gathered after them, before the flusher.
    assert!(wb.keep(key, tag, (0, 0), vec![2; 4096], 1 << 20).is_none());
    assert!(wb
        .keep(key, tag, (4096, 0), vec![3; 4096], 1 << 20)
        .is_none());
    // Any wake-up: the reader must still wait for the bytes over the first write's.
    wb.cv.notify_all();
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "the reader went on with the first write's bytes never written"
    );
    let taken = wb
        .st
        .lock()
        .objs
        .get_mut(&key)
        .map(|o| take_one(o, 1 << 20))
        .expect("kept")
        .expect("a run");
    assert_eq!(taken.1.len(), 8192);
    written_back(&wb, key, (0, 8192));
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the reader still waits once everything was written");
    reader.join().unwrap();
}

/// Bytes the flusher took before an eviction are lost: sent after the client took its new
/// uuid at the OST, they would land after the writes of the mount the eviction let go on
/// (the regression behind `an_evicted_mount_loses_its_kept_writes_and_says_so`).
#[test]
fn an_eviction_loses_what_the_flusher_took_and_did_not_send() {
    let wb = Writeback::default();
    wb.add_grant(0, 1 << 20);
    assert!(wb
        .keep(KEY, tag(), (0, 0), vec![2; 4096], 1 << 20)
        .is_none());
    assert!(wb
        .keep(KEY, tag(), (8192, 0), vec![2; 4096], 1 << 20)
        .is_none());
    let (off, buf) = {
        let mut st = wb.st.lock();
        take_one(st.objs.get_mut(&KEY).expect("kept"), 1 << 20)
    }
    .expect("a run to send");
    let range = (off, off + buf.len() as u64);
    assert!(!wb.is_lost(KEY, &[range]));
    wb.evicted(0, 1);
    assert!(wb.is_lost(KEY, &[range]), "taken bytes may still be sent");
    assert_eq!(wb.take_error(Fid::default()), Some(Status::Io));
    let st = wb.st.lock();
    assert!(st.objs[&KEY].pieces.is_empty(), "kept bytes survive");
}

/// A write that found its lock before an eviction is not kept, even if a grant to the
/// client's new identity came in between: the lock it was written under is gone, so no
/// callback would ever flush what was kept (a review of 624cbc3 found it could be).
#[test]
fn a_write_under_a_lock_an_eviction_took_is_not_kept() {
    let wb = Writeback::default();
    wb.add_grant(0, 1 << 20);
    // The write found its lock at eviction count 0; the OST evicts; the new identity is
    // granted space again before the write is kept.
    wb.evicted(0, 1);
    wb.add_grant(0, 1 << 20);
    assert!(
        wb.keep(KEY, tag(), (0, 0), vec![5; 4096], 1 << 20)
            .is_some(),
        "kept under a lock the eviction took"
    );
    assert!(!wb.holds_any(&[KEY]));
    // A lock of the new identity (found at count 1) keeps writes again.
    assert!(wb
        .keep(KEY, tag(), (0, 1), vec![5; 4096], 1 << 20)
        .is_none());
    assert!(wb.holds_any(&[KEY]));
}

/// Kept bytes with gaps go in one RPC of many runs (IOR hard's interleaved records: one
/// rank ahead of the other leaves a gap after nearly every record), within the RPC's bound
/// and the runs' limit, and never over bytes an RPC in flight carries.
#[test]
fn kept_bytes_with_gaps_go_as_one_rpc_of_many_runs() {
    let mut o = Obj::default();
    for i in 0..8u64 {
        o.insert(i * 10_000, vec![i as u8; 4_000], i + 1);
    }
    let (runs, buf) = o.take_runs(1 << 20, 3).expect("runs");
    assert_eq!(runs, vec![(0, 4_000), (10_000, 14_000), (20_000, 24_000)]);
    assert_eq!(buf.len(), 12_000);
    assert!(buf[..4_000].iter().all(|b| *b == 0) && buf[8_000..].iter().all(|b| *b == 2));
    // Cut at the RPC's bound, inside a run: the rest stays kept.
    let (runs, buf) = o.take_runs(6_000, 256).expect("runs");
    assert_eq!(runs, vec![(30_000, 34_000), (40_000, 42_000)]);
    assert_eq!(buf.len(), 6_000);
    assert_eq!(o.pieces.keys().next(), Some(&42_000));
    // A write over bytes in flight waits for that RPC: nothing from there on is taken.
    o.insert(40_500, vec![9; 10], 20);
    assert!(o.take_runs(1 << 20, 256).is_none());
    o.inflight.retain(|f| f.range != (40_000, 42_000));
    let (runs, _) = o.take_runs(1 << 20, 256).expect("runs");
    assert_eq!(runs[0], (40_500, 40_510));
}
