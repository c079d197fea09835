//! Tests of the object store.
use super::*;

#[test]
fn write_read_punch_destroy() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 77 };
    assert_eq!(store.read(obj, 0, 10).unwrap().len(), 0);
    let data = AlignedBuf::copy_from(&vec![5u8; 1 << 20]);
    store.write(obj, 0, &data, Owner::default()).unwrap();
    store
        .write(obj, (1 << 20) + 3, b"tail", Owner::default())
        .unwrap();
    assert_eq!(store.size(obj).unwrap().0, (1 << 20) + 7);
    let back = store.read(obj, 4096, 1 << 20).unwrap();
    assert_eq!(back.len(), (1 << 20) + 7 - 4096);
    assert!(back[..(1 << 20) - 4096].iter().all(|&b| b == 5));
    assert_eq!(&back[back.len() - 4..], b"tail");
    let odd = store.read(obj, 3, 5).unwrap();
    assert_eq!(&odd[..], &[5u8; 5]);
    store.punch(obj, 10).unwrap();
    assert_eq!(store.size(obj).unwrap().0, 10);
    store.sync(obj).unwrap();
    store.destroy(obj).unwrap();
    assert_eq!(store.size(obj).unwrap().0, 0);
    assert!(store.statfs().unwrap().bytes_total > 0);
}

/// A bit flipped in a stored object is an error on read, never data; the chunks
/// around it still read.
#[test]
fn a_bit_flipped_on_disk_is_reported_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 9 };
    let data = AlignedBuf::copy_from(&vec![0x5a; 64 << 10]);
    store.write(obj, 0, &data, Owner::default()).unwrap();
    let f = OpenOptions::new()
        .write(true)
        .open(store.path(obj))
        .unwrap();
    f.write_all_at(&[0x5b], 20_000).unwrap();
    f.sync_all().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap(); // no descriptor cache
    match store.read(obj, 0, 64 << 10) {
        Err(OsdError::Corrupt { offset, .. }) => assert_eq!(offset, 16384),
        other => panic!("corrupt data read as {other:?}"),
    }
    assert!(matches!(
        store.read(obj, 16384 + 100, 10),
        Err(OsdError::Corrupt { .. })
    ));
    assert_eq!(store.read(obj, 0, 16384).unwrap().len(), 16384);
    assert_eq!(store.read(obj, 20480, 4096).unwrap().len(), 4096);
    let err = store.read(obj, 16384, 1).unwrap_err();
    assert_eq!(err.io().raw_os_error(), Some(libc::EIO));
    assert_eq!(store.corrupt_chunks(), 3);
    // A damaged checksum file is noticed the same way.
    let obj2 = ObjectId { seq: 0, id: 10 };
    store.write(obj2, 0, &data, Owner::default()).unwrap();
    let sums = OpenOptions::new()
        .write(true)
        .open(store.sums_path(obj2))
        .unwrap();
    sums.write_all_at(&[1, 2, 3, 4, 5, 6, 7, 8], 0).unwrap();
    assert!(store.read(obj2, 0, 4096).is_err());
    assert!(store.read(obj2, 4096, 4096).is_ok());
}

/// A change whose checksums were written but whose data never was (the server killed
/// between the two) leaves the old data readable.
#[test]
fn a_change_cut_off_before_its_data_leaves_the_old_data_valid() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 11 };
    store
        .write(obj, 0, &[1u8; 10_000], Owner::default())
        .unwrap();
    let o = store.get(obj, false).unwrap().unwrap();
    let new = [2u8; 5000];
    let overlay = |_: u64, chunk: &mut [u8]| {
        let n = new.len().min(chunk.len());
        chunk[..n].fill(2)
    };
    store
        .resum(&o, 10_000, 10_000, 0..5000, &overlay, &|_, _| None)
        .unwrap();
    drop(o);
    let store = ObjectStore::open(dir.path()).unwrap();
    assert_eq!(&store.read(obj, 0, 10_000).unwrap()[..], &[1u8; 10_000][..]);
    store.write(obj, 0, &new, Owner::default()).unwrap();
    let back = store.read(obj, 0, 10_000).unwrap();
    assert!(back[..5000].iter().all(|&b| b == 2) && back[5000..].iter().all(|&b| b == 1));
}

/// Concurrent unaligned writes to one object while the descriptor cache evicts it: the
/// checksums stay right. (The change lock used to live in the cache's entry, so an
/// evicted and reopened object could have two; found by reading, not by this test,
/// which is a stress check: such races are rare on two cores.)
#[test]
fn concurrent_unaligned_writes_keep_checksums_through_cache_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let hot = ObjectId { seq: 0, id: 1 };
    std::thread::scope(|s| {
        for w in 0..2u8 {
            let store = &store;
            s.spawn(move || {
                for i in 0..400u64 {
                    // Overlapping, unaligned: every write is a read-modify-write of a chunk.
                    store
                        .write(
                            hot,
                            (i * 37) % 6000 + u64::from(w),
                            &[w + 1; 700],
                            Owner::default(),
                        )
                        .unwrap();
                }
            });
        }
        let store = &store;
        s.spawn(move || {
            for id in 0..(2 * OPEN_OBJECTS_MAX as u64) {
                store
                    .write(ObjectId { seq: 1, id }, 0, b"x", Owner::default())
                    .unwrap();
            }
        });
    });
    let all = store.read(hot, 0, 1 << 20).unwrap();
    assert!(all.len() > 6000);
    assert_eq!(store.corrupt_chunks(), 0);
}

#[derive(Debug, Clone)]
enum Change {
    Write(u64, Vec<u8>),
    Punch(u64),
    Hole(u64, u64),
    Grow(u64, u64),
}

fn change() -> impl proptest::strategy::Strategy<Value = Change> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u64..40_000, proptest::collection::vec(any::<u8>(), 1..20_000))
            .prop_map(|(o, d)| Change::Write(o, d)),
        1 => (0u64..50_000).prop_map(Change::Punch),
        1 => (0u64..40_000, 1u64..20_000).prop_map(|(o, l)| Change::Hole(o, l)),
        1 => (0u64..40_000, 1u64..20_000).prop_map(|(o, l)| Change::Grow(o, l)),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
    /// Any sequence of writes (aligned or not), truncations, holes and preallocations
    /// reads back as a simple model says, every chunk verified, none reported corrupt.
    #[test]
    fn checksums_follow_every_change(changes in proptest::collection::vec(change(), 1..12)) {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let obj = ObjectId { seq: 0, id: 1 };
        let mut model: Vec<u8> = Vec::new();
        for c in changes {
            match c {
                Change::Write(off, d) => {
                    let buf = AlignedBuf::copy_from(&d);
                    store.write(obj, off, &buf, Owner::default()).unwrap();
                    let end = off as usize + d.len();
                    if model.len() < end { model.resize(end, 0); }
                    model[off as usize..end].copy_from_slice(&d);
                }
                Change::Punch(size) => {
                    store.punch(obj, size).unwrap();
                    model.resize(size as usize, 0);
                }
                Change::Hole(off, len) => {
                    store.fallocate(obj, off, len, true, true).unwrap();
                    let end = ((off + len) as usize).min(model.len());
                    if (off as usize) < end { model[off as usize..end].fill(0); }
                }
                Change::Grow(off, len) => {
                    store.fallocate(obj, off, len, false, false).unwrap();
                    let end = (off + len) as usize;
                    if model.len() < end { model.resize(end, 0); }
                }
            }
            let whole = store.read(obj, 0, 100_000).unwrap();
            proptest::prop_assert_eq!(&whole[..], &model[..]);
            proptest::prop_assert!(carries_its_own_crc(&whole));
        }
        // Unaligned reads check their edge chunks too.
        let n = model.len();
        for (off, len) in [(1usize, 5000usize), (4095, 2), (n / 3, n / 2 + 1)] {
            let part = store.read(obj, off as u64, len).unwrap();
            let want = &model[off.min(n)..(off + len).min(n)];
            proptest::prop_assert_eq!(&part[..], want);
            proptest::prop_assert!(carries_its_own_crc(&part));
        }
        proptest::prop_assert_eq!(store.corrupt_chunks(), 0);
    }
}

#[test]
fn objects_keep_their_first_owner_until_set() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 1, id: 77 };
    let alice = Owner {
        uid: 1000,
        gid: 100,
        project: 5,
    };
    let bob = Owner {
        uid: 1001,
        gid: 101,
        project: 0,
    };
    assert_eq!(store.owner(obj).unwrap(), None);
    store.write(obj, 0, b"data", alice).unwrap();
    assert_eq!(store.owner(obj).unwrap(), Some(alice));
    // A stale writer does not change it; the MDT's chown does.
    store.write(obj, 4, b"more", bob).unwrap();
    assert_eq!(store.owner(obj).unwrap(), Some(alice));
    store.set_owner(obj, bob).unwrap();
    assert_eq!(store.owner(obj).unwrap(), Some(bob));
    // After the descriptor cache is dropped, it is read back from the object.
    store.set_direct_io(true);
    assert_eq!(store.owner(obj).unwrap(), Some(bob));
    // set_owner creates a missing object, so a later write keeps the owner set.
    let fresh = ObjectId { seq: 1, id: 78 };
    store.set_owner(fresh, bob).unwrap();
    store.write(fresh, 0, b"x", alice).unwrap();
    assert_eq!(store.owner(fresh).unwrap(), Some(bob));
}

/// Reads served at once (`read_many`: the direct ones submitted together) give what each
/// gives alone: the bytes, the short end of an object, nothing for an object that does not
/// exist, unaligned reads through the buffered path, and corrupt data as an error for its
/// read alone.
#[test]
fn reads_at_once_give_what_each_gives_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let (a, b, bad, none) = (
        ObjectId { seq: 0, id: 1 },
        ObjectId { seq: 0, id: 2 },
        ObjectId { seq: 0, id: 3 },
        ObjectId { seq: 0, id: 4 },
    );
    let pattern = |n: usize, k: u8| -> Vec<u8> { (0..n).map(|i| (i % 251) as u8 ^ k).collect() };
    let a_data = pattern(256 << 10, 1);
    // b ends off a block boundary, and past a block boundary.
    let b_data = pattern((64 << 10) + 1000, 2);
    store.write(a, 0, &a_data, Owner::default()).unwrap();
    store.write(b, 0, &b_data, Owner::default()).unwrap();
    store
        .write(bad, 0, &pattern(32 << 10, 3), Owner::default())
        .unwrap();
    let f = OpenOptions::new()
        .write(true)
        .open(store.path(bad))
        .unwrap();
    f.write_all_at(&[0xff], 9000).unwrap();
    f.sync_all().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap(); // no descriptor cache
    let reads = [
        (a, 0, 4096),
        (a, 8192, 65536),
        (b, 61440, 8192),  // the end: 4096 + 1000 bytes
        (b, 65536, 4096),  // 1000 bytes
        (b, 69632, 4096),  // past the end: nothing
        (a, 4097, 5000),   // unaligned: buffered
        (none, 0, 4096),   // no object: nothing
        (bad, 8192, 4096), // corrupt
        (bad, 16384, 4096),
        (a, (256 << 10) - 4096, 4096),
    ];
    let alone: Vec<_> = reads
        .iter()
        .map(|&(o, off, n)| store.read(o, off, n))
        .collect();
    let corrupt_alone = store.corrupt_chunks();
    let together = store.read_many(&reads);
    assert_eq!(together.len(), reads.len());
    // The 8 aligned reads of existing objects went to the disk at once (io_uring), where
    // the kernel has it: without it (qemu-user passes no io_uring call on), one by one, and
    // the same bytes.
    let uring = io_uring::IoUring::new(2).is_ok();
    assert_eq!(
        store.reads_together(),
        if uring { 8 } else { 0 },
        "io_uring here: {uring}"
    );
    for ((r, x), y) in reads.iter().zip(&alone).zip(&together) {
        match (x, y) {
            (Ok(x), Ok(y)) => {
                assert_eq!(&x[..], &y[..], "{r:?}");
                // Reads from the start of a chunk carry their checksum (from the chunks'
                // own), others none; either way, together as alone.
                let chunk_start = r.1 % csum::CSUM_CHUNK_BYTES == 0 && !x.is_empty();
                for b in [x, y] {
                    assert!(carries_its_own_crc(b), "{r:?}");
                    assert_eq!(b.known_crc32c().is_some(), chunk_start, "{r:?}");
                }
            }
            (
                Err(OsdError::Corrupt { offset: p, .. }),
                Err(OsdError::Corrupt { offset: q, .. }),
            ) => {
                assert_eq!(p, q, "{r:?}")
            }
            other => panic!("{r:?}: alone and together differ: {other:?}"),
        }
    }
    assert_eq!(together[2].as_ref().unwrap().len(), 4096 + 1000);
    assert_eq!(&together[3].as_ref().unwrap()[..], &b_data[65536..]);
    assert!(together[4].as_ref().unwrap().is_empty());
    assert_eq!(
        &together[5].as_ref().unwrap()[..],
        &a_data[4097..4097 + 5000]
    );
    assert!(together[6].as_ref().unwrap().is_empty());
    assert!(matches!(
        together[7],
        Err(OsdError::Corrupt { offset: 8192, .. })
    ));
    assert_eq!(together[8].as_ref().unwrap().len(), 4096);
    assert_eq!(store.corrupt_chunks(), 2 * corrupt_alone);
}

/// True if the checksum a read's buffer carries, if any, is that of its bytes.
fn carries_its_own_crc(b: &AlignedBuf) -> bool {
    b.known_crc32c().is_none_or(|c| c == crc32c::crc32c(b))
}

#[test]
fn a_read_from_a_chunk_start_carries_the_checksum_of_all_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 5 };
    let data: Vec<u8> = (0..(1 << 20) + 777).map(|i| (i * 7 % 253) as u8).collect();
    store.write(obj, 0, &data, Owner::default()).unwrap();
    for (off, len) in [
        (0u64, 1usize << 20),
        (4096, 4096),
        (8192, 100),
        (1 << 20, 4096),
        ((1 << 20) - 4096, 1 << 20),
    ] {
        let b = store.read(obj, off, len).unwrap();
        let end = (off as usize + len).min(data.len());
        assert_eq!(&b[..], &data[off as usize..end]);
        assert_eq!(b.known_crc32c(), Some(crc32c::crc32c(&b)), "{off}+{len}");
    }
    // A change of the bytes forgets it.
    let mut b = store.read(obj, 0, 8192).unwrap();
    b[0] ^= 1;
    assert_eq!(b.known_crc32c(), None);
}

/// A write whose buffer carries its chunks' checksums (kept when its frame's bulk was
/// checked) stores the checksums a write computing them stores, wherever it starts; what
/// it wrote reads back checked.
#[test]
fn a_write_with_its_chunks_checksums_stores_what_one_computing_them_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let data: Vec<u8> = (0..(64 << 10) + 1000)
        .map(|i| (i * 13 % 251) as u8)
        .collect();
    let mut buf = AlignedBuf::copy_from(&data);
    buf.set_chunk_crc32cs(nacre_types::crc::chunked(&data).0.into());
    for (id, offset) in [(1u64, 0u64), (2, 4096), (3, 1000), (4, 8192 + 4095)] {
        let plain = ObjectId { seq: 0, id };
        let summed = ObjectId { seq: 1, id };
        // Something there before, so the slots have a previous checksum too.
        for o in [plain, summed] {
            store.write(o, 0, &[7u8; 20_000], Owner::default()).unwrap();
        }
        store.write(plain, offset, &data, Owner::default()).unwrap();
        store
            .write_buf(summed, offset, &buf, Owner::default())
            .unwrap();
        assert_eq!(
            std::fs::read(store.sums_path(plain)).unwrap(),
            std::fs::read(store.sums_path(summed)).unwrap(),
            "written at {offset}"
        );
        let back = store.read(summed, offset, data.len()).unwrap();
        assert_eq!(&back[..], &data[..], "written at {offset}");
    }
    assert_eq!(store.corrupt_chunks(), 0);
}

/// The byte written at `at` by [`writes_of_disjoint_chunks_run_together_and_read_back`].
fn piece_byte(at: u64) -> u8 {
    (at / 4096 % 251) as u8 ^ (at % 7) as u8
}

/// Threads writing interleaved 64 KiB pieces of one object (each piece extending it, as
/// the pieces of a large write sent together do) run beside each other and leave every
/// byte, checksum and quota charge as written one at a time would.
#[test]
fn writes_of_disjoint_chunks_run_together_and_read_back() {
    const PIECE: u64 = 64 << 10;
    const THREADS: u64 = 4;
    const PIECES: u64 = 32;
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let alice = Owner {
        uid: 1000,
        gid: 100,
        project: 0,
    };
    let mut round = 0u64;
    // Rounds on fresh objects until two writes have run together (bounded: the first
    // rounds do on any machine with more than one thread able to run).
    while store.writes_together() == 0 {
        assert!(round < 200, "no two writes of one object ever ran together");
        let obj = ObjectId { seq: 0, id: round };
        // The first write records the owner (it holds the whole object).
        store.write(obj, 0, &[0u8; 4096], alice).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let store = &store;
                s.spawn(move || {
                    for i in 0..PIECES {
                        let at = (i * THREADS + t) * PIECE;
                        let mut buf = AlignedBuf::for_overwrite(PIECE as usize);
                        for (k, b) in buf.iter_mut().enumerate() {
                            *b = piece_byte(at + k as u64);
                        }
                        store.write(obj, at, &buf, alice).unwrap();
                    }
                });
            }
        });
        let all = store
            .read(obj, 0, (THREADS * PIECES * PIECE) as usize + 1)
            .unwrap();
        assert_eq!(all.len() as u64, THREADS * PIECES * PIECE);
        for (k, &b) in all.iter().enumerate() {
            assert_eq!(b, piece_byte(k as u64), "byte {k} of round {round}");
        }
        assert!(carries_its_own_crc(&all));
        round += 1;
    }
    assert_eq!(store.corrupt_chunks(), 0);
    let (counted, _) = crate::usage::Usage::count(dir.path()).unwrap();
    assert_eq!(store.usage().all(), counted.all());
}

/// Aligned writes (holding their chunks), unaligned writes, truncations, holes and
/// preallocations (holding the whole object) racing on one object never leave a chunk
/// whose checksum does not match, nor a quota charge that a recount disagrees with.
#[test]
fn racing_changes_of_every_kind_keep_checksums_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 1 };
    let owner = Owner {
        uid: 7,
        gid: 7,
        project: 7,
    };
    store.write(obj, 0, &[1u8; 4096], owner).unwrap();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let store = &store;
            s.spawn(move || {
                let buf = AlignedBuf::copy_from(&[t as u8 + 2; 3 * 4096]);
                for i in 0..300u64 {
                    let chunk = (i * 5 + t * 3) % 40;
                    store.write(obj, chunk * 4096, &buf, owner).unwrap();
                }
            });
        }
        let store = &store;
        s.spawn(move || {
            for i in 0..150u64 {
                match i % 4 {
                    0 => store.write(obj, (i * 997) % 150_000, &[9u8; 1000], owner),
                    1 => store.punch(obj, 20_000 + (i * 1234) % 140_000),
                    2 => store.fallocate(obj, (i * 4321) % 100_000, 9000, true, true),
                    _ => store.fallocate(obj, (i * 777) % 160_000, 5000, false, false),
                }
                .unwrap();
            }
        });
    });
    let all = store.read(obj, 0, 1 << 20).unwrap();
    assert!(carries_its_own_crc(&all));
    for off in [1u64, 4095, 5000, 77_777] {
        store.read(obj, off, 10_000).unwrap();
    }
    assert_eq!(store.corrupt_chunks(), 0);
    let (counted, _) = crate::usage::Usage::count(dir.path()).unwrap();
    assert_eq!(store.usage().all(), counted.all());
}

/// An object whose size ends inside a chunk: a whole-chunk write past that end grows the
/// chunk with zeros, so it must not run beside a write of that chunk (it holds the whole
/// object). Raced many times: the write of the chunk and the write past it.
#[test]
fn a_write_past_a_partial_last_chunk_does_not_race_a_write_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectId { seq: 0, id: 1 };
    let owner = Owner::default();
    store.write(obj, 0, &[1u8; 4096], owner).unwrap();
    let chunk = AlignedBuf::copy_from(&[2u8; 4096]);
    for i in 0..400u64 {
        let k = i % 8;
        store.punch(obj, k * 4096 + 100 + i % 3).unwrap();
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let (store, go, chunk) = (&store, &go, &chunk);
            s.spawn(move || {
                go.wait();
                store.write(obj, k * 4096, chunk, owner).unwrap();
            });
            s.spawn(move || {
                go.wait();
                store.write(obj, (k + 2) * 4096, chunk, owner).unwrap();
            });
        });
        let all = store.read(obj, 0, 1 << 20).unwrap();
        assert_eq!(all.len() as u64, (k + 3) * 4096);
        assert_eq!(&all[(k * 4096) as usize..][..4096], &chunk[..]);
        assert!(all[((k + 1) * 4096) as usize..][..4096]
            .iter()
            .all(|&b| b == 0));
    }
    assert_eq!(store.corrupt_chunks(), 0);
}
