//! Directory listings: pages in name order (a striped directory's shards merged), checked
//! before use, and the readdirplus form, whose entries carry their attributes under the
//! locks the MDT granted with them (the statahead of an `ls -l`).

use crate::*;
use nacre_ldlm::msg::{LAYOUT, LOOKUP, UPDATE};
use nacre_types::FileKind;
use nacre_wire::mds::{DirPlusEntry, MdsReply, READDIRPLUS_ENTRIES_MAX};

/// Glimpses of one readdirplus page in flight at once (files whose size the MDT does not
/// know exactly).
const PLUS_GLIMPSES_IN_FLIGHT_MAX: usize = 32;

/// An entry of a readdirplus listing.
#[derive(Clone, Debug)]
pub struct Listed {
    /// Name, inode, kind.
    pub entry: DirEntry,
    /// The attributes (a regular file's size from its objects unless the MDT knew it), what
    /// the kernel may cache of them, and the handle of the lock that covers them; `None`:
    /// look the name up on its own.
    pub attr: Option<(Attr, Cached, u64)>,
    /// The attributes are this client's own, taken when the entry is given to the kernel
    /// ([`Client::listed_here`]; `attr` is `None` until then): the listing goes on from the
    /// MDT's pages at the first it can no longer give.
    pub here: bool,
}

/// What a page entry is named.
trait Named {
    fn name(&self) -> &[u8];
}
impl Named for DirEntry {
    fn name(&self) -> &[u8] {
        &self.name
    }
}
impl Named for DirPlusEntry {
    fn name(&self) -> &[u8] {
        &self.entry.name
    }
}

/// A directory page a listing can go on from: at most `count` entries, in strictly rising
/// name order after `after`, and not empty unless it is the last (else a listing could loop
/// forever or repeat names).
fn check_page<T: Named>(
    entries: &[T],
    eof: bool,
    after: Option<&[u8]>,
    count: u32,
) -> std::result::Result<(), String> {
    if entries.len() > count as usize {
        return Err(format!("{} entries for a page of {count}", entries.len()));
    }
    if entries.is_empty() && !eof {
        return Err("an empty directory page that is not the last".into());
    }
    let mut prev = after;
    for e in entries {
        if prev.is_some_and(|p| e.name() <= p) {
            return Err("directory entries out of order".into());
        }
        prev = Some(e.name());
    }
    Ok(())
}

impl Client {
    /// One page of a directory listing, after `after`.
    pub fn readdir(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
    ) -> Result<(Vec<DirEntry>, bool)> {
        self.listing(fid, count, |shard| {
            self.page(shard, after, count, |fid| MdsOp::ReadDir {
                fid,
                after: after.map(<[u8]>::to_vec),
                count,
            })
        })
    }

    /// One page of a directory listing with every entry's attributes, the kernel's cache of
    /// them covered by locks where the MDT granted them (the names as entries of `fid`).
    /// At most [`READDIRPLUS_ENTRIES_MAX`] entries.
    pub fn readdir_plus(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
    ) -> Result<(Vec<Listed>, bool)> {
        let count = count.min(READDIRPLUS_ENTRIES_MAX);
        let (entries, eof) = self.listing(fid, count, |shard| {
            let mdc = self.mdc(shard.mdt_index())?;
            let (mut page, eof): (Vec<DirPlusEntry>, bool) =
                self.page(shard, after, count, |fid| MdsOp::ReadDirPlus {
                    fid,
                    after: after.map(<[u8]>::to_vec),
                    count,
                })?;
            // Taken as the page arrives; a lock whose callback came first is not held.
            for e in &mut page {
                e.lock = e.lock.filter(|&l| mdc.locks.granted(l));
            }
            Ok((page, eof))
        })?;
        self.plus_attrs(fid, entries).map(|listed| (listed, eof))
    }

    /// What the kernel gets of a readdirplus page: sizes glimpsed where the MDT did not
    /// know them, names recorded under their locks.
    fn plus_attrs(&self, parent: Fid, page: Vec<DirPlusEntry>) -> Result<Vec<Listed>> {
        let mut out = Vec::with_capacity(page.len());
        for chunk in page.chunks(PLUS_GLIMPSES_IN_FLIGHT_MAX) {
            let jobs: Vec<_> = chunk
                .iter()
                .map(|e| match (&e.attr, &e.layout, e.size_exact) {
                    (Some(a), Some(l), false) if a.kind == FileKind::Regular => {
                        Some(osc::start_glimpse(self, l).map(|j| (j, l)))
                    }
                    _ => None,
                })
                .collect();
            for (e, job) in chunk.iter().zip(jobs) {
                let mut attr = e.attr.clone();
                match job {
                    Some(Ok((job, layout))) => {
                        let glimpsed = job.finish(layout);
                        self.remember_layout(e.entry.fid, layout, false);
                        match (glimpsed, attr.as_mut()) {
                            (Ok((size, blocks)), Some(a)) if layout.dom_end() > 0 => {
                                // Bytes on the MDT: its size and blocks count them.
                                (a.size, a.blocks) = (size.max(a.size), blocks + a.blocks)
                            }
                            (Ok((size, blocks)), Some(a)) => (a.size, a.blocks) = (size, blocks),
                            // Listed without attributes: a stat looks it up (and reports the error).
                            _ => attr = None,
                        }
                    }
                    Some(Err(_)) => attr = None,
                    None => {}
                }
                out.push(Listed {
                    entry: e.entry.clone(),
                    attr: attr.map(|a| self.plus_cached(parent, &e.entry, a, e.lock)),
                    here: false,
                });
            }
        }
        Ok(out)
    }

    /// A readdirplus page built here: a plain page of `fid` (names only, a fraction of a
    /// readdirplus page's cost at the MDT and no lock per entry) whose entries' attributes
    /// this client gives itself as each is given ([`Client::listed_here`]; the caller
    /// lists the rest from the MDT's pages from the first it cannot). `None` when it cannot
    /// give the first: ask the MDT for a readdirplus page. The caller answers for the
    /// permission to search `fid` (the MDT checks it for a readdirplus page, not for a
    /// plain one).
    pub fn readdir_plus_here(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
    ) -> Result<Option<(Vec<Listed>, bool)>> {
        let (page, eof) = self.readdir(fid, after, count)?;
        // Only the first is looked up now: each is again as it is given (its writes since
        // move its attributes), once.
        if page.first().is_some_and(|e| self.vouched_attr(e).is_none()) {
            return Ok(None);
        }
        let out = page
            .into_iter()
            .map(|entry| Listed {
                entry,
                attr: None,
                here: true,
            })
            .collect();
        Ok(Some((out, eof)))
    }

    /// The attributes of `entry` (listed in `parent`) this client can give without asking,
    /// what the kernel may cache of them and the lock they hold under: a regular file it
    /// made and wrote and can vouch for (crate::vouched) under its `UPDATE` lock, shown
    /// with its last write's time (crate::written). The name is recorded under the file's
    /// `LOOKUP` lock if one is held.
    pub fn listed_here(&self, parent: Fid, entry: &DirEntry) -> Option<(Attr, Cached, u64)> {
        let (mut attr, handle) = self.vouched_attr(entry)?;
        self.written.cover(&mut attr);
        let mdc = self.mdc(entry.fid.mdt_index()).ok()?;
        let cached = Cached {
            entry: mdc.locks.cover_name(entry.fid, parent, &entry.name),
            attr: true,
        };
        Some((attr, cached, handle))
    }

    /// The attributes this client vouches for of `entry`'s file, and the lock they hold
    /// under.
    fn vouched_attr(&self, entry: &DirEntry) -> Option<(Attr, u64)> {
        if entry.kind != FileKind::Regular {
            return None;
        }
        // A file made under a delegation still held: what is kept of it is its state (its
        // reads answered here move its access time), given under the file's own lock (a
        // batch's: the vouching below); one answered and not known made is not given.
        let kept = match self.kept_attr(entry.fid) {
            Some((attr, true)) => Some(attr),
            Some((_, false)) => return None,
            None => None,
        };
        let mdc = self.mdc(entry.fid.mdt_index()).ok()?;
        let held = |h| mdc.locks.holds(h);
        let writing = mdc.holds_writer(entry.fid);
        let (vouched, handle) = mdc.vouched.answer_held(entry.fid, held, writing)?;
        let attr = match kept {
            Some(k) if k.size == vouched.size => k,
            Some(_) => return None,
            None => vouched,
        };
        (attr.fid == entry.fid && attr.kind == entry.kind).then_some((attr, handle))
    }

    fn plus_cached(
        &self,
        parent: Fid,
        entry: &DirEntry,
        attr: Attr,
        lock: Option<nacre_ldlm::msg::LockRef>,
    ) -> (Attr, Cached, u64) {
        let Some(lock) = lock else {
            return (attr, Cached::default(), 0);
        };
        let Ok(mdc) = self.mdc(lock.fid.mdt_index()) else {
            return (attr, Cached::default(), 0);
        };
        let cached = Cached {
            entry: lock.bits & LOOKUP != 0 && mdc.locks.cover_name(entry.fid, parent, &entry.name),
            attr: lock.bits & UPDATE != 0 && mdc.locks.covers(entry.fid, UPDATE),
        };
        (attr, cached, lock.handle)
    }

    /// True if this client holds locks on `fid` that cover all of `bits`.
    pub fn lock_covers(&self, fid: Fid, bits: u8) -> bool {
        self.mdc(fid.mdt_index())
            .is_ok_and(|m| m.locks.covers(fid, bits))
    }

    /// True while the lock `handle` on `fid` (from a [`Listed`] entry) is still held: what
    /// it covered is still current.
    pub fn holds_lock(&self, fid: Fid, handle: u64) -> bool {
        self.mdc(fid.mdt_index())
            .is_ok_and(|m| m.locks.holds(handle))
    }

    /// A listing page of `fid`: a plain directory's page from `one`, or a striped
    /// directory's, its shards' pages merged in name order up to the lowest last name of a
    /// shard with more to come (names past it may still be missing), so the order is
    /// stable and resuming after a name skips nothing.
    fn listing<T: Named>(
        &self,
        fid: Fid,
        count: u32,
        one: impl Fn(Fid) -> Result<(Vec<T>, bool)>,
    ) -> Result<(Vec<T>, bool)> {
        let Some(stripe) = self.dir_stripe(fid)? else {
            return one(fid);
        };
        let mut merged = Vec::new();
        let mut bound: Option<Vec<u8>> = None;
        for &shard in &stripe.shards {
            let (page, eof) = one(shard)?;
            if !eof {
                if let Some(last) = page.last() {
                    if bound.as_deref().is_none_or(|b| last.name() < b) {
                        bound = Some(last.name().to_vec());
                    }
                }
            }
            merged.extend(page);
        }
        merged.sort_by(|a, b| a.name().cmp(b.name()));
        if let Some(b) = &bound {
            merged.retain(|e| e.name() <= b.as_slice());
        }
        let complete = bound.is_none() && merged.len() <= count as usize;
        merged.truncate(count as usize);
        Ok((merged, complete))
    }

    /// One directory's (or shard's) page, checked; a directory migrated while listed goes
    /// on at its new FID (once).
    fn page<T: Named + PageOf>(
        &self,
        fid: Fid,
        after: Option<&[u8]>,
        count: u32,
        op: impl Fn(Fid) -> MdsOp,
    ) -> Result<(Vec<T>, bool)> {
        let mut fid = fid;
        for _ in 0..2 {
            let reply = self
                .mdc(fid.mdt_index())?
                .call_with(op(fid), T::LOCK_BITS)?
                .0;
            if let MdsReply::Remote { fid: new } = reply {
                fid = new;
                continue;
            }
            let (entries, eof) = T::of(reply).ok_or(ClientError::from(Status::Proto))?;
            check_page(&entries, eof, after, count).map_err(|what| {
                ClientError::bad_reply(format!("MDT{:04x}", fid.mdt_index()), what)
            })?;
            return Ok((entries, eof));
        }
        Err(Status::Stale.into())
    }
}

/// The page a listing reply carries, by entry type.
trait PageOf: Sized {
    /// Lock bits asked for each entry.
    const LOCK_BITS: u8;
    fn of(reply: MdsReply) -> Option<(Vec<Self>, bool)>;
}
impl PageOf for DirEntry {
    const LOCK_BITS: u8 = 0;
    fn of(reply: MdsReply) -> Option<(Vec<Self>, bool)> {
        match reply {
            MdsReply::Dir { entries, eof } => Some((entries, eof)),
            _ => None,
        }
    }
}
impl PageOf for DirPlusEntry {
    const LOCK_BITS: u8 = LOOKUP | UPDATE | LAYOUT;
    fn of(reply: MdsReply) -> Option<(Vec<Self>, bool)> {
        match reply {
            MdsReply::DirPlus { entries, eof } => Some((entries, eof)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::FileKind;

    fn entry(name: &str) -> DirEntry {
        DirEntry {
            name: name.as_bytes().to_vec(),
            fid: Fid::new(0x200000400, 1),
            kind: FileKind::Regular,
        }
    }

    #[test]
    fn directory_pages_that_could_loop_a_listing_are_refused() {
        let page = [entry("a"), entry("b")];
        assert!(check_page(&page, false, None, 2).is_ok());
        assert!(check_page(&page, true, Some(b"0"), 4).is_ok());
        assert!(
            check_page::<DirEntry>(&[], true, Some(b"z"), 4).is_ok(),
            "an empty last page"
        );
        assert!(
            check_page::<DirEntry>(&[], false, None, 4).is_err(),
            "empty, more to come: a loop"
        );
        assert!(
            check_page(&page, false, None, 1).is_err(),
            "more than asked"
        );
        assert!(
            check_page(&page, false, Some(b"b"), 4).is_err(),
            "not after `after`"
        );
        let back = [entry("b"), entry("a")];
        assert!(check_page(&back, true, None, 4).is_err(), "out of order");
        let twice = [entry("a"), entry("a")];
        assert!(check_page(&twice, true, None, 4).is_err(), "a name twice");
    }
}
