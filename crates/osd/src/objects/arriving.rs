//! Writes of data still arriving ([`Arriving`]: a request's bulk streamed off the network):
//! each part goes to the disk as soon as it is in, while the rest is still on the wire, so
//! a large write pays the network and the disk side by side instead of one after the
//! other. The checksums of its chunks are recorded once all of it is in and checked.

use super::cache::OpenObject;
use super::{is_aligned, ObjectStore, OsdError};
use crate::csum::{self, CSUM_CHUNK_BYTES};
use nacre_types::limits::DIRECT_IO_ALIGN_BYTES;
use nacre_types::{ObjectId, Owner};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

/// The first part of an arriving write sent to the disk on its own, and the least a later
/// part waits for: smaller parts cost the disk more per byte than they gain in overlap
/// (docs/plans/round-trips.md, item 5).
pub const ARRIVING_PART_BYTES_MIN: usize = 256 * 1024;

/// Data of a write that may still be arriving.
pub trait Arriving {
    /// Its whole length.
    fn len(&self) -> usize;
    /// True if it has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes in now (a prefix).
    fn filled(&self) -> usize;
    /// The first `n` bytes once they are in, with the crc32c of each of their 4 KiB chunks
    /// when known; `Err` if they never will be. Bytes in before such a failure are given
    /// all the same.
    fn first(&self, n: usize) -> std::io::Result<(&[u8], Option<&[u32]>)>;
    /// Waits for all of it to be in and checked: `Err` if it never is, of kind
    /// [`std::io::ErrorKind::InvalidData`] if its bytes failed their check (damaged on the
    /// way).
    fn whole(&self) -> std::io::Result<()>;
}

impl ObjectStore {
    /// Writes `data` at `offset` as [`ObjectStore::write`] does, part by part as it
    /// arrives when the object takes direct I/O and the write is aligned, else once it is
    /// all in. Each part's checksums are recorded before its bytes are written, as for any
    /// write (a part cut off by a crash leaves the old bytes valid).
    ///
    /// If the data never arrives whole, the write is an error and the parts written stay
    /// (a failed write leaves its range changed in part, as a failed disk write may); if it
    /// arrived damaged, the parts written are marked so that reading them is an error
    /// ([`OsdError::Corrupt`]) until they are written again: damaged bytes never read as
    /// good data.
    pub fn write_arriving(
        &self,
        object: ObjectId,
        offset: u64,
        data: &dyn Arriving,
        owner: Owner,
    ) -> Result<(), OsdError> {
        let io = |e| Self::err(object, e);
        let len = data.len();
        let streamable = len > ARRIVING_PART_BYTES_MIN
            && is_aligned(offset)
            && len.is_multiple_of(DIRECT_IO_ALIGN_BYTES)
            && self.get(object, true)?.is_some_and(|o| o.direct.is_some());
        if !streamable {
            data.whole().map_err(io)?;
            let (all, sums) = data.first(len).map_err(io)?;
            return self.write_summed(object, offset, all, sums, owner);
        }
        self.write_held(object, offset, len as u64, owner, &|o, size| {
            self.write_parts(o, size, offset, data).map_err(io)
        })
    }

    /// The parts of [`ObjectStore::write_arriving`], written as they come with the object's
    /// range held; `size`: the object's size before.
    fn write_parts(
        &self,
        o: &OpenObject,
        size: u64,
        offset: u64,
        data: &dyn Arriving,
    ) -> std::io::Result<()> {
        let direct = o.direct.as_ref().expect("checked by write_arriving");
        let len = data.len();
        let mut size = size;
        let mut done = 0usize;
        let mut failed = None;
        while done < len {
            // At least a part's worth more, then all that is in by then, whole blocks.
            let want = (done + ARRIVING_PART_BYTES_MIN).min(len);
            let upto = match data.first(want) {
                Ok(_) => match data.filled().max(want) {
                    f if f >= len => len,
                    f => f / DIRECT_IO_ALIGN_BYTES * DIRECT_IO_ALIGN_BYTES,
                },
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let (bytes, sums) = data.first(upto)?;
            let at = offset + done as u64;
            let part = &bytes[done..upto];
            let end = at + part.len() as u64;
            // Every chunk of the part is whole (the write is aligned).
            let whole = |c: u64, chunk_len: usize| {
                let cs = c * CSUM_CHUNK_BYTES;
                if cs < at || cs + chunk_len as u64 > end {
                    return None;
                }
                let i = ((cs - offset) / CSUM_CHUNK_BYTES) as usize;
                let known = sums.and_then(|s| s.get(i).copied());
                let from = (cs - at) as usize;
                Some(known.unwrap_or_else(|| crc32c::crc32c(&part[from..from + chunk_len])))
            };
            self.resum(o, size, size.max(end), at..end, &|_, _| {}, &whole)?;
            if let Err(e) = direct.write_all_at(part, at) {
                failed = Some(e);
                break;
            }
            size = size.max(end);
            done = upto;
            self.arriving[1].fetch_add(1, Ordering::Relaxed);
        }
        self.arriving[0].fetch_add(1, Ordering::Relaxed);
        let failed = match failed {
            None => data.whole().err(),
            Some(e) => Some(e),
        };
        match failed {
            None => Ok(()),
            Some(e) => {
                if e.kind() == std::io::ErrorKind::InvalidData && done > 0 {
                    self.mark_damaged(o, offset, &data.first(done)?.0[..done])?;
                }
                Err(e)
            }
        }
    }

    /// Marks the chunks `written` (bytes that arrived damaged) now holds at `offset` so
    /// that neither checksum of their slots matches them: reading them is an error until
    /// they are written again.
    fn mark_damaged(&self, o: &OpenObject, offset: u64, written: &[u8]) -> std::io::Result<()> {
        let range = csum::chunks(offset, written.len() as u64);
        let mut slots = csum::read_slots(&o.sums, range.clone())?;
        for (slot, chunk) in slots
            .iter_mut()
            .zip(written.chunks(CSUM_CHUNK_BYTES as usize))
        {
            let crc = crc32c::crc32c(chunk);
            *slot = csum::Slot {
                cur: crc ^ 1,
                prev: crc ^ 2,
            };
        }
        csum::write_slots(&o.sums, range.start, &slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::AlignedBuf;
    use std::sync::{Condvar, Mutex};

    /// Data let in by the test, part by part; each wait of the writer is reported.
    struct Gate {
        data: AlignedBuf,
        state: Mutex<GateState>,
        changed: Condvar,
    }

    #[derive(Default)]
    struct GateState {
        open: usize,
        /// The most the writer has asked for.
        asked: usize,
        failure: Option<std::io::ErrorKind>,
    }

    impl Gate {
        fn new(len: usize) -> Gate {
            let bytes: Vec<u8> = (0..len).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
            Gate {
                data: AlignedBuf::copy_from(&bytes),
                state: Mutex::new(GateState::default()),
                changed: Condvar::new(),
            }
        }

        fn open_to(&self, n: usize) {
            self.state.lock().unwrap().open = n;
            self.changed.notify_all();
        }

        fn fail(&self, kind: std::io::ErrorKind) {
            self.state.lock().unwrap().failure = Some(kind);
            self.changed.notify_all();
        }

        /// Waits until the writer asks for more than `n` bytes.
        fn asked_past(&self, n: usize) {
            let mut s = self.state.lock().unwrap();
            while s.asked <= n {
                s = self.changed.wait(s).unwrap();
            }
        }
    }

    impl Arriving for Gate {
        fn len(&self) -> usize {
            self.data.len()
        }

        fn filled(&self) -> usize {
            self.state.lock().unwrap().open
        }

        fn first(&self, n: usize) -> std::io::Result<(&[u8], Option<&[u32]>)> {
            let mut s = self.state.lock().unwrap();
            s.asked = s.asked.max(n);
            self.changed.notify_all();
            while s.open < n {
                if let Some(kind) = s.failure {
                    return Err(kind.into());
                }
                s = self.changed.wait(s).unwrap();
            }
            Ok((&self.data[..n], None))
        }

        fn whole(&self) -> std::io::Result<()> {
            self.first(self.data.len()).map(|_| ())?;
            match self.state.lock().unwrap().failure {
                Some(kind) => Err(kind.into()),
                None => Ok(()),
            }
        }
    }

    fn store() -> (tempfile::TempDir, ObjectStore) {
        let base = std::env::var("NACRE_TEST_DIR").unwrap_or_else(|_| "/var/tmp".into());
        let dir = tempfile::tempdir_in(base).unwrap();
        let mut store = ObjectStore::open(dir.path()).unwrap();
        if std::env::var_os("NACRE_UNDER_QEMU").is_some()
            && store.dio_align == crate::dioalign::DioAlign::Unsupported
        {
            // qemu-user answers statx(STATX_DIOALIGN) with the mask bit set and the two
            // alignments zero (it copies only the fields it knows), while the host's
            // O_DIRECT, which it passes through, works: these tests are of the direct path.
            store.dio_align = crate::dioalign::DioAlign::Unknown;
        }
        (dir, store)
    }

    const LEN: usize = 1 << 20;
    const OBJ: ObjectId = ObjectId { seq: 0, id: 5 };

    /// Runs a write of `gate` on a thread of its own; `steps` lets data in and checks
    /// what the store holds meanwhile.
    fn write_with(store: &ObjectStore, gate: &Gate, steps: impl FnOnce()) -> Result<(), OsdError> {
        std::thread::scope(|s| {
            let writer = s.spawn(|| store.write_arriving(OBJ, 0, gate, Owner::default()));
            let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(steps));
            if let Err(panic) = stepped {
                // The writer is let go before the failure is reported.
                gate.fail(std::io::ErrorKind::ConnectionReset);
                let _ = writer.join();
                std::panic::resume_unwind(panic);
            }
            writer.join().unwrap()
        })
    }

    #[test]
    fn a_write_reaches_the_disk_part_by_part_as_it_arrives() {
        let (_dir, store) = store();
        assert!(
            store.get(OBJ, true).unwrap().unwrap().direct.is_some(),
            "direct I/O here"
        );
        let gate = Gate::new(LEN);
        let first = ARRIVING_PART_BYTES_MIN;
        write_with(&store, &gate, || {
            gate.open_to(first);
            // The writer waits for more only once the first part is written, checksums
            // and all, while the rest has not arrived.
            gate.asked_past(first);
            assert_eq!(store.read(OBJ, 0, first).unwrap()[..], gate.data[..first]);
            gate.open_to(LEN);
        })
        .unwrap();
        assert_eq!(store.read(OBJ, 0, LEN).unwrap()[..], gate.data[..]);
        assert_eq!(store.size(OBJ).unwrap().0, LEN as u64);
        assert_eq!(store.writes_arriving(), (1, 2), "two parts");
    }

    #[test]
    fn a_write_whose_sender_goes_away_keeps_what_it_wrote_readable() {
        let (_dir, store) = store();
        let gate = Gate::new(LEN);
        let first = ARRIVING_PART_BYTES_MIN;
        let r = write_with(&store, &gate, || {
            gate.open_to(first);
            gate.asked_past(first);
            gate.fail(std::io::ErrorKind::ConnectionReset);
        });
        assert!(r.is_err());
        assert_eq!(store.read(OBJ, 0, LEN).unwrap()[..], gate.data[..first]);
    }

    #[test]
    fn a_write_that_arrived_damaged_never_reads_as_good_data() {
        let (_dir, store) = store();
        let old = AlignedBuf::copy_from(&vec![3u8; LEN]);
        store.write(OBJ, 0, &old, Owner::default()).unwrap();
        let gate = Gate::new(LEN);
        // All of it arrives, and fails its check.
        let r = write_with(&store, &gate, || {
            let mut s = gate.state.lock().unwrap();
            (s.open, s.failure) = (LEN, Some(std::io::ErrorKind::InvalidData));
            gate.changed.notify_all();
        });
        assert!(r.is_err());
        for at in [0, LEN / 2, LEN - 4096] {
            assert!(
                matches!(
                    store.read(OBJ, at as u64, 4096),
                    Err(OsdError::Corrupt { .. })
                ),
                "chunk at {at}"
            );
        }
        // Written again, it reads.
        store.write(OBJ, 0, &old, Owner::default()).unwrap();
        assert_eq!(store.read(OBJ, 0, LEN).unwrap()[..], old[..]);
    }
}
