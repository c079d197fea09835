//! Page edges: the bytes of the pages a page-cache write covered only in part, kept by the
//! client while a lock of its own covers them (issue 44 item 6).
//!
//! A FUSE mount without the kernel's writeback cache never keeps a page a write covered in
//! part: the kernel keeps the whole pages this mount wrote (under its locks, across opens),
//! but every page a record boundary cuts is read again, one small RPC each. IOR hard's read
//! phase (47,008-byte records of a shared file, written through the same mount) read back
//! one page per record so. Here the client keeps the bytes each page-cache write put in
//! such an edge page; once the writes of its neighbours have filled a page, a page-cache
//! read of it is answered from memory.
//!
//! What is kept is this client's own latest bytes, so it is right while no one else can
//! change them: only pages a lock of this client covered when written are kept, and a
//! page is answered only while a lock still covers it (a lock called back is not, from the
//! callback on); a revoked lock's drops remove its pages here as they go from the kernel
//! (`Client::enable_data_locks`). Every other way this client changes a file's bytes (a
//! write straight through, an append, an allocation or a hole punched, a truncate) forgets
//! the file's pages first. A page a write covers whole is forgotten here: the kernel keeps
//! it. At most [`EDGE_BYTES_MAX`] are kept; the oldest pages go first.

use crate::datalocks::FileDrop;
use nacre_types::Fid;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Most bytes of edge pages kept (pages of the system's size).
pub const EDGE_BYTES_MAX: usize = 64 << 20;
/// The largest page size a system has (64 KiB on some aarch64 kernels).
const PAGE_BYTES_MAX: u64 = 64 << 10;

/// One page's bytes and which of them a write put there.
struct Frag {
    data: Box<[u8]>,
    /// Written ranges `[start, end)` within the page, sorted, disjoint, not touching.
    valid: Vec<(usize, usize)>,
}

impl Frag {
    fn new(page: usize) -> Frag {
        Frag {
            data: vec![0; page].into_boxed_slice(),
            valid: Vec::new(),
        }
    }

    /// Puts `bytes` at `at` in the page and notes them written.
    fn add(&mut self, at: usize, bytes: &[u8]) {
        let end = at + bytes.len();
        assert!(
            end <= self.data.len(),
            "an edge write stays within its page"
        );
        self.data[at..end].copy_from_slice(bytes);
        let (mut s, mut e) = (at, end);
        self.valid.retain(|&(a, b)| {
            if b < s || a > e {
                return true;
            }
            s = s.min(a);
            e = e.max(b);
            false
        });
        let i = self.valid.partition_point(|&(a, _)| a < s);
        self.valid.insert(i, (s, e));
    }

    /// True once every byte of the page was written.
    fn full(&self) -> bool {
        self.valid == [(0, self.data.len())]
    }
}

#[derive(Default)]
struct Inner {
    /// By file, then page offset.
    files: HashMap<Fid, BTreeMap<u64, Frag>>,
    /// Pages in the order they were first kept (some may be gone since).
    order: VecDeque<(Fid, u64)>,
    /// Pages kept.
    pages: usize,
    bytes: usize,
}

impl Inner {
    fn remove(&mut self, fid: Fid, at: u64) {
        let Some(pages) = self.files.get_mut(&fid) else {
            return;
        };
        if let Some(f) = pages.remove(&at) {
            self.bytes -= f.data.len();
            self.pages -= 1;
        }
        if pages.is_empty() {
            self.files.remove(&fid);
        }
    }

    fn get(&self, fid: Fid, at: u64) -> Option<&Frag> {
        self.files.get(&fid)?.get(&at)
    }
}

/// The edge pages of this client's files.
#[derive(Default)]
pub struct Edges {
    inner: Mutex<Inner>,
}

impl Edges {
    /// A page-cache write of `data` at `offset` of `fid` succeeded: pages it covers whole
    /// are forgotten (the kernel keeps them), pages it covers in part keep its bytes where
    /// `locked(page_offset)` says a lock of this client covers that page, and are forgotten
    /// where none does.
    pub fn wrote(
        &self,
        fid: Fid,
        offset: u64,
        data: &[u8],
        page: u64,
        locked: impl Fn(u64) -> bool,
    ) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        let mut inner = self.inner.lock();
        let mut at = offset / page * page;
        while at < end {
            let (s, e) = (offset.max(at), end.min(at + page));
            if (s == at && e == at + page) || !locked(at) {
                inner.remove(fid, at);
            } else {
                let bytes = &data[(s - offset) as usize..(e - offset) as usize];
                let new = !inner.files.get(&fid).is_some_and(|p| p.contains_key(&at));
                if new {
                    inner.order.push_back((fid, at));
                    inner.pages += 1;
                    inner.bytes += page as usize;
                }
                inner
                    .files
                    .entry(fid)
                    .or_default()
                    .entry(at)
                    .or_insert_with(|| Frag::new(page as usize))
                    .add((s - at) as usize, bytes);
            }
            at += page;
        }
        while inner.bytes > EDGE_BYTES_MAX {
            let Some((f, at)) = inner.order.pop_front() else {
                break;
            };
            inner.remove(f, at);
        }
        if inner.order.len() > 2 * inner.pages + 1024 {
            let Inner { files, order, .. } = &mut *inner;
            order.retain(|(f, at)| files.get(f).is_some_and(|p| p.contains_key(at)));
        }
    }

    /// The bytes of `fid`'s `offset..offset + len` if every page of it is kept whole and
    /// `locked(page_offset)` says a lock of this client still covers it; `offset` and
    /// `len` whole pages.
    pub fn serve(
        &self,
        fid: Fid,
        offset: u64,
        len: usize,
        page: u64,
        locked: impl Fn(u64) -> bool,
    ) -> Option<Vec<u8>> {
        if len == 0 || !offset.is_multiple_of(page) || !(len as u64).is_multiple_of(page) {
            return None;
        }
        let inner = self.inner.lock();
        if !inner.files.contains_key(&fid) {
            return None;
        }
        let mut out = Vec::with_capacity(len);
        let mut at = offset;
        while at < offset + len as u64 {
            let f = inner.get(fid, at).filter(|f| f.full())?;
            if !locked(at) {
                return None;
            }
            out.extend_from_slice(&f.data);
            at += page;
        }
        Some(out)
    }

    /// Forgets the pages `drops` name (a file whole, or a byte range of it).
    pub fn forget(&self, drops: &[FileDrop]) {
        let mut inner = self.inner.lock();
        for d in drops {
            let Some(pages) = inner.files.get(&d.fid) else {
                continue;
            };
            let gone: Vec<u64> = match d.range {
                None => pages.keys().copied().collect(),
                // A page starting more than a page below `off` ends before it.
                Some((off, len)) => pages
                    .range(off.saturating_sub(PAGE_BYTES_MAX)..off.saturating_add(len))
                    .filter(|(at, f)| **at + f.data.len() as u64 > off)
                    .map(|(at, _)| *at)
                    .collect(),
            };
            for at in gone {
                inner.remove(d.fid, at);
            }
        }
    }

    /// Forgets every page of `fid` (a change of its bytes other than a page-cache write).
    pub fn forget_file(&self, fid: Fid) {
        self.forget(&[FileDrop { fid, range: None }]);
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;
    fn fid() -> Fid {
        Fid::new(0x2_0000_0400, 7)
    }

    #[test]
    fn two_writes_that_meet_in_a_page_fill_it() {
        let e = Edges::default();
        let a: Vec<u8> = (0..6000).map(|i| i as u8).collect();
        let b: Vec<u8> = (0..5000).map(|i| (i * 7) as u8).collect();
        e.wrote(fid(), 0, &a, P, |_| true);
        // Page 1 (4096..8192) holds 4096..6000 only: not whole yet.
        assert_eq!(e.serve(fid(), P, P as usize, P, |_| true), None);
        e.wrote(fid(), 6000, &b, P, |_| true);
        let got = e.serve(fid(), P, P as usize, P, |_| true).unwrap();
        let mut want = a[4096..6000].to_vec();
        want.extend_from_slice(&b[..8192 - 6000]);
        assert_eq!(got, want);
        // Page 0 was written whole: the kernel keeps it, not this.
        assert_eq!(e.serve(fid(), 0, P as usize, P, |_| true), None);
        // Not while no lock covers it; nor unaligned.
        assert_eq!(e.serve(fid(), P, P as usize, P, |_| false), None);
        assert_eq!(e.serve(fid(), P + 1, P as usize, P, |_| true), None);
    }

    #[test]
    fn a_later_write_wins_and_forgetting_drops_pages() {
        let e = Edges::default();
        e.wrote(fid(), 100, &[1; 4000], P, |_| true);
        e.wrote(fid(), 0, &[2; 200], P, |_| true);
        let got = e.serve(fid(), 0, P as usize, P, |_| true).unwrap();
        assert!(got[..200].iter().all(|&x| x == 2) && got[200..].iter().all(|&x| x == 1));
        // A write with no lock covering its page forgets it.
        e.wrote(fid(), 10, &[3; 10], P, |_| false);
        assert_eq!(e.serve(fid(), 0, P as usize, P, |_| true), None);
        e.wrote(fid(), 0, &[4; 100], P, |_| true);
        e.wrote(fid(), 100, &[4; 3996], P, |_| true);
        assert!(e.serve(fid(), 0, P as usize, P, |_| true).is_some());
        e.forget(&[FileDrop {
            fid: fid(),
            range: Some((5000, 10)),
        }]);
        assert!(e.serve(fid(), 0, P as usize, P, |_| true).is_some());
        e.forget(&[FileDrop {
            fid: fid(),
            range: Some((4095, 1)),
        }]);
        assert_eq!(e.serve(fid(), 0, P as usize, P, |_| true), None);
        assert_eq!(e.bytes(), 0);
    }

    #[test]
    fn kept_bytes_stay_within_their_bound() {
        let e = Edges::default();
        let n = EDGE_BYTES_MAX as u64 / P + 100;
        for i in 0..n {
            e.wrote(fid(), i * P + 1, &[9; 10], P, |_| true);
        }
        assert!(e.bytes() <= EDGE_BYTES_MAX, "{} kept", e.bytes());
    }
}
