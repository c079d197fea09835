//! Tests of the write-behind pieces (writeback.rs).
use super::*;
use proptest::prelude::*;

proptest! {
    /// Kept pieces always read back as the last write of every byte, and taking runs
    /// hands every byte over once.
    #[test]
    fn pieces_agree_with_a_byte_model(
        writes in proptest::collection::vec((0u64..4096, 1usize..700, any::<u8>()), 1..40),
    ) {
        let mut o = Obj::default();
        let mut model: BTreeMap<u64, u8> = BTreeMap::new();
        for (off, len, b) in writes {
            o.insert(off, vec![b; len]);
            for i in off..off + len as u64 {
                model.insert(i, b);
            }
        }
        // Pieces never overlap and hold exactly the model.
        let mut seen: BTreeMap<u64, u8> = BTreeMap::new();
        let mut last_end = 0;
        for (k, v) in &o.pieces {
            prop_assert!(*k >= last_end);
            last_end = k + v.len() as u64;
            for (i, b) in v.iter().enumerate() {
                seen.insert(k + i as u64, *b);
            }
        }
        prop_assert_eq!(&seen, &model);
        let mut taken: BTreeMap<u64, u8> = BTreeMap::new();
        while let Some((off, buf)) = o.take_run(1000) {
            for (i, b) in buf.iter().enumerate() {
                prop_assert!(taken.insert(off + i as u64, *b).is_none());
            }
            o.inflight.clear();
        }
        prop_assert!(o.pieces.is_empty());
        prop_assert_eq!(taken, model);
    }
}
