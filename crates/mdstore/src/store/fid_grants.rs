//! FID ranges granted to clients (`MdsOp::GrantFids`), which then give their own new files
//! FIDs (`MdsOp::CreateBatch`; docs/plans/round-trips.md, R2).
//!
//! Granted FIDs come from the upper half of the MDT's sequences
//! ([`FID_SEQS_CLIENT_OFFSET`]), counted by the `META` key `client_fid_next` (exact, written
//! with each grant: grants are rare). Each grant is a row of the `fid_grants` table, keyed by
//! client and first allocation number, holding its size and a bitmap of the FIDs used: a
//! FID is taken at most once (in any order: a client's directories send their batches in
//! their own order), so a FID is never given to two files, even after the first is
//! removed. The row changes in the transaction that uses the FID, so after a crash the
//! FIDs of an uncommitted batch are still free for its replay. A client keeps at most [`GRANTS_PER_CLIENT_MAX`] grants (a new one retires the
//! oldest); forgetting the client (an eviction) retires them all. What a retired grant had
//! not used is never handed out again: the sequences are 2^19 × 2^32 FIDs per MDT, so an
//! unused remainder costs nothing worth reclaiming.

use super::tx::Tx;
use super::{read_u64, scan_each};
use crate::records::{FID_GRANTS, META};
use nacre_kv::KvStore;
use nacre_types::fid::{
    FID_OIDS_PER_SEQ, FID_SEQS_CLIENT_OFFSET, FID_SEQS_PER_MDT, FID_SEQ_NORMAL,
};
use nacre_types::{Fid, Status};
use std::collections::HashMap;

/// Grants that stay valid per client.
pub const GRANTS_PER_CLIENT_MAX: usize = 4;

/// The `META` key counting the FIDs granted so far.
const NEXT_KEY: &[u8] = b"client_fid_next";

/// Usable object ids per sequence (oid 0 is never used).
const OIDS: u64 = FID_OIDS_PER_SEQ - 1;

/// One grant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// Allocation number of its first FID (the table key's second part).
    pub number: u64,
    /// Its first FID.
    pub first: Fid,
    /// How many FIDs.
    pub count: u32,
    /// The FIDs used: bit `i` of byte `i / 8` for offset `i`.
    pub used: Vec<u8>,
}

impl Grant {
    /// The offset of `fid` in this grant, if it is one of its FIDs.
    fn offset_of(&self, fid: Fid) -> Option<u32> {
        if fid.seq != self.first.seq || fid.ver != 0 || fid.oid < self.first.oid {
            return None;
        }
        let off = fid.oid - self.first.oid;
        (off < self.count).then_some(off)
    }

    /// Whether the FID at `off` was used.
    fn is_used(&self, off: u32) -> bool {
        self.used
            .get(off as usize / 8)
            .is_some_and(|b| b & (1 << (off % 8)) != 0)
    }
}

/// Every client's grants, oldest first, and the next allocation number.
#[derive(Default)]
pub struct Grants {
    by_client: HashMap<[u8; 16], Vec<Grant>>,
    next: u64,
}

impl Grants {
    /// The grants of `client`, oldest first.
    pub fn of(&self, client: &[u8; 16]) -> &[Grant] {
        self.by_client.get(client).map_or(&[], Vec::as_slice)
    }
}

fn key(client: &[u8; 16], number: u64) -> Vec<u8> {
    let mut k = client.to_vec();
    k.extend_from_slice(&number.to_be_bytes());
    k
}

fn value(g: &Grant) -> Vec<u8> {
    let mut v = g.count.to_be_bytes().to_vec();
    v.extend_from_slice(&g.used);
    v
}

/// Bytes of the bitmap of a grant of `count` FIDs.
fn bitmap_bytes(count: u32) -> usize {
    (count as usize).div_ceil(8)
}

/// The FID of allocation number `n` in MDT `index`'s granted sequences.
fn fid_of(index: u32, n: u64) -> Option<Fid> {
    let seq_off = FID_SEQS_CLIENT_OFFSET.checked_add(n / OIDS)?;
    if seq_off >= FID_SEQS_PER_MDT {
        return None;
    }
    let seq = FID_SEQ_NORMAL
        .checked_add(u64::from(index).checked_mul(FID_SEQS_PER_MDT)?)?
        .checked_add(seq_off)?;
    Some(Fid::new(seq, (n % OIDS) as u32 + 1))
}

/// Loads the grants of MDT `index` (a row that cannot be read stops the start: a grant
/// misread could let a FID be given twice).
pub(crate) fn load(kv: &dyn KvStore, index: u32) -> Result<Grants, Status> {
    let mut grants = Grants {
        next: read_u64(kv, NEXT_KEY)?.unwrap_or(0),
        ..Grants::default()
    };
    scan_each(kv, FID_GRANTS, &[], 1024, |k, v| {
        let (client, number) = k.split_at_checked(16).ok_or(Status::Io)?;
        let client: [u8; 16] = client.try_into().map_err(|_| Status::Io)?;
        let number = u64::from_be_bytes(number.try_into().map_err(|_| Status::Io)?);
        let (count, used) = v.split_at_checked(4).ok_or(Status::Io)?;
        let count = u32::from_be_bytes(count.try_into().map_err(|_| Status::Io)?);
        if used.len() != bitmap_bytes(count) {
            return Err(Status::Io);
        }
        let first = fid_of(index, number).ok_or(Status::Io)?;
        let g = Grant {
            number,
            first,
            count,
            used: used.to_vec(),
        };
        grants.by_client.entry(client).or_default().push(g);
        Ok(())
    })?;
    for list in grants.by_client.values_mut() {
        list.sort_by_key(|g| g.number);
    }
    Ok(grants)
}

impl Tx<'_> {
    /// Grants this transaction's client `count` FIDs (1 or more; fewer when the current
    /// sequence ends first), retiring its oldest grant past [`GRANTS_PER_CLIENT_MAX`].
    pub fn grant_fids(&mut self, count: u32) -> Result<Grant, Status> {
        if count == 0 || self.client == [0; 16] {
            return Err(Status::Inval);
        }
        let index = self.store().index;
        let client = self.client;
        let (grant, retired) = {
            let grants = self.grants_mut();
            let mut n = grants.next;
            // Within one sequence: the rest of this one if it holds any, else the next.
            let left = OIDS - n % OIDS;
            let count = u64::from(count).min(left) as u32;
            let first = fid_of(index, n).ok_or(Status::NoSpc)?;
            let grant = Grant {
                number: n,
                first,
                count,
                used: vec![0; bitmap_bytes(count)],
            };
            n += u64::from(count);
            grants.next = n;
            let list = grants.by_client.entry(client).or_default();
            list.push(grant.clone());
            let retired: Vec<Grant> = match list.len() > GRANTS_PER_CLIENT_MAX {
                true => list.drain(..list.len() - GRANTS_PER_CLIENT_MAX).collect(),
                false => Vec::new(),
            };
            (grant, retired)
        };
        let next = self.grants_mut().next;
        self.put(META, NEXT_KEY.to_vec(), next.to_be_bytes().to_vec());
        self.put(FID_GRANTS, key(&client, grant.number), value(&grant));
        for g in retired {
            self.delete(FID_GRANTS, key(&client, g.number));
        }
        // Durable before the client is told: a restart must not grant it again.
        self.durable_before_reply = true;
        Ok(grant)
    }

    /// Takes `fid` from this transaction's client's grants for a new file: refused
    /// (`EPERM`) unless it is one of them, and (`EEXIST`) if it was taken before.
    pub fn take_granted_fid(&mut self, fid: Fid) -> Result<(), Status> {
        let client = self.client;
        let (number, g) = {
            let grants = self.grants_mut();
            let list = grants.by_client.get_mut(&client).ok_or(Status::Perm)?;
            let (g, off) = list
                .iter_mut()
                .find_map(|g| g.offset_of(fid).map(|off| (g, off)))
                .ok_or(Status::Perm)?;
            if g.is_used(off) {
                return Err(Status::Exist);
            }
            g.used[off as usize / 8] |= 1 << (off % 8);
            (g.number, g.clone())
        };
        self.put(FID_GRANTS, key(&client, number), value(&g));
        Ok(())
    }

    /// Retires every grant of `client` (it is forgotten: evicted); true if it had any.
    pub(crate) fn retire_grants(&mut self, client: &[u8; 16]) -> bool {
        let gone = self
            .grants_mut()
            .by_client
            .remove(client)
            .unwrap_or_default();
        let any = !gone.is_empty();
        for g in gone {
            self.delete(FID_GRANTS, key(client, g.number));
        }
        any
    }
}

/// True if `fid` is in MDT `index`'s granted sequences (a client's FID, never one the MDT
/// allocates itself).
pub fn is_granted_range(index: u32, fid: Fid) -> bool {
    let Some(base) = u64::from(index)
        .checked_mul(FID_SEQS_PER_MDT)
        .and_then(|b| b.checked_add(FID_SEQ_NORMAL))
    else {
        return false;
    };
    matches!(fid.seq.checked_sub(base), Some(off) if (FID_SEQS_CLIENT_OFFSET..FID_SEQS_PER_MDT).contains(&off))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::TABLES;
    use crate::store::Store;
    use nacre_kv::FjallStore;
    use std::sync::Arc;

    fn open(dir: &std::path::Path) -> Store {
        let kv = FjallStore::open(&dir.join("db"), &TABLES).unwrap();
        Store::open(Arc::new(kv), 3, "MDT0003").unwrap().0
    }

    /// Runs `f` in a transaction of `client`, committed durably.
    fn tx_of<T>(store: &Store, client: [u8; 16], f: impl FnOnce(&mut Tx<'_>) -> T) -> T {
        let mut tx = store.begin();
        tx.client = client;
        let out = f(&mut tx);
        let t = tx.commit().unwrap();
        store.kv.wait_durable(t).unwrap();
        out
    }

    #[test]
    fn a_granted_fid_is_taken_once_in_order_by_its_client_alone_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = ([0xa; 16], [0xb; 16]);
        let (ga, gb) = {
            let store = open(dir.path());
            let ga = tx_of(&store, a, |tx| tx.grant_fids(100)).unwrap();
            let gb = tx_of(&store, b, |tx| tx.grant_fids(100)).unwrap();
            assert_eq!((ga.count, gb.count), (100, 100));
            assert_eq!(ga.first.mdt_index(), 3);
            assert!(is_granted_range(3, ga.first) && is_granted_range(3, gb.first));
            assert_ne!(ga.first, gb.first, "two clients never share FIDs");
            let at = |g: &Grant, i: u32| Fid::new(g.first.seq, g.first.oid + i);
            tx_of(&store, a, |tx| {
                assert_eq!(tx.take_granted_fid(at(&ga, 5)), Ok(()));
                assert_eq!(tx.take_granted_fid(at(&ga, 5)), Err(Status::Exist), "twice");
                assert_eq!(tx.take_granted_fid(at(&ga, 2)), Ok(()), "in any order");
                assert_eq!(tx.take_granted_fid(at(&ga, 2)), Err(Status::Exist));
                assert_eq!(tx.take_granted_fid(at(&gb, 0)), Err(Status::Perm), "b's");
                assert_eq!(
                    tx.take_granted_fid(at(&ga, 100)),
                    Err(Status::Perm),
                    "past it"
                );
                assert_eq!(tx.take_granted_fid(Fid::ROOT), Err(Status::Perm));
            });
            (ga, gb)
        };
        // Restarted: the grants and what was taken are as committed.
        let store = open(dir.path());
        let at = |g: &Grant, i: u32| Fid::new(g.first.seq, g.first.oid + i);
        tx_of(&store, a, |tx| {
            assert_eq!(tx.take_granted_fid(at(&ga, 5)), Err(Status::Exist));
            assert_eq!(tx.take_granted_fid(at(&ga, 2)), Err(Status::Exist));
            assert_eq!(tx.take_granted_fid(at(&ga, 3)), Ok(()));
            assert_eq!(tx.take_granted_fid(at(&ga, 99)), Ok(()), "the last");
        });
        let again = tx_of(&store, a, |tx| tx.grant_fids(10)).unwrap();
        assert!(again.first.oid >= gb.first.oid + 100, "never granted twice");
        // Past the most kept, the oldest goes.
        for _ in 0..GRANTS_PER_CLIENT_MAX {
            tx_of(&store, a, |tx| tx.grant_fids(1)).unwrap();
        }
        tx_of(&store, a, |tx| {
            assert_eq!(
                tx.take_granted_fid(at(&ga, 7)),
                Err(Status::Perm),
                "retired"
            );
        });
        // A client forgotten (evicted) loses its grants, on disk too.
        tx_of(&store, b, |tx| {
            tx.assign_transno(true);
        });
        tx_of(&store, b, |tx| assert!(tx.forget_client(&[0xb; 16])));
        drop(store);
        let store = open(dir.path());
        tx_of(&store, b, |tx| {
            assert_eq!(tx.take_granted_fid(at(&gb, 1)), Err(Status::Perm));
        });
        assert!(store.alloc.lock().unwrap().grants.of(&b).is_empty());
        // A client never given a transno (only grants) loses them as well, on disk too.
        let c = [0xc; 16];
        tx_of(&store, c, |tx| tx.grant_fids(5)).unwrap();
        tx_of(&store, c, |tx| {
            assert!(tx.forget_client(&c), "its grants to commit")
        });
        drop(store);
        let store = open(dir.path());
        assert!(store.alloc.lock().unwrap().grants.of(&c).is_empty());
        assert_eq!(
            store.alloc.lock().unwrap().grants.of(&a).len(),
            GRANTS_PER_CLIENT_MAX
        );
    }

    #[test]
    fn granted_fids_are_of_the_mdt_and_of_the_upper_half() {
        for index in [0u32, 1, 7] {
            for n in [0u64, 1, OIDS - 1, OIDS, 5 * OIDS + 17] {
                let fid = fid_of(index, n).expect("in range");
                assert_eq!(fid.mdt_index(), index, "n {n}");
                assert!(is_granted_range(index, fid));
                assert!(!is_granted_range(index + 1, fid));
                assert_eq!(
                    super::super::tx::fid_number(index, fid),
                    None,
                    "not the MDT's own"
                );
                assert_ne!(fid.oid, 0);
            }
        }
        let last = (FID_SEQS_PER_MDT - FID_SEQS_CLIENT_OFFSET) * OIDS;
        assert!(fid_of(0, last - 1).is_some());
        assert_eq!(fid_of(0, last), None);
        assert_eq!(fid_of(0, u64::MAX), None);
    }
}
