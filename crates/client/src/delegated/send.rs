//! Sending what a delegated directory's holder answered (`CreateBatch`, `UnlinkBatch`):
//! in order, many per request; kept and sent again while the MDT does not answer; what
//! goes when a delegation is given back or lost; the thread that sends what waited.

use super::{Item, DELEGATED_SEND_MS, RETRY_MS_MAX};
use crate::dirattrs::Change;
use crate::{Client, Result};
use nacre_types::{Attr, Fid, FileKind, Status};
use nacre_wire::mds::{
    BatchCreate, BatchUnlink, MdsOp, CREATE_BATCH_DATA_BYTES_MAX, CREATE_BATCH_ITEMS_MAX,
    UNLINK_BATCH_ITEMS_MAX,
};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Client {
    /// Sends the changes answered in `dir` and not sent yet, in order (each run of creates
    /// or unlinks one batch of at most 256), and waits for any batch of it already on its
    /// way. A batch the MDT does not answer is kept to be sent again (for
    /// [`RETRY_MS_MAX`]); items it left untried (`E2BIG`: the reply was full) go in the
    /// next; one it refuses, or that the client's eviction voided, is lost: logged,
    /// counted, and the directory's listing forgotten. An item sent again that finds its
    /// work done (a create's FID taken by that very file, an unlink's name gone) was made
    /// the first time, whose answer was lost.
    pub fn flush_delegated(&self, dir: Fid) -> Result<()> {
        let Some(sending) = self
            .delegated
            .dirs
            .lock()
            .get(&dir)
            .map(|d| d.sending.clone())
        else {
            return Ok(());
        };
        let _one = sending.lock();
        let mdc = self.mdc(dir.mdt_index())?;
        let names = Change::Names(dir);
        loop {
            let (items, cred, incarnation, again, started) = {
                let mut dirs = self.delegated.dirs.lock();
                let Some(d) = dirs.get_mut(&dir) else {
                    return Ok(());
                };
                d.since = None;
                let run = leading_run(&d.items);
                let items: Vec<Item> = d.items.drain(..run).collect();
                if !d.items.is_empty() {
                    d.since = Some(Instant::now());
                }
                d.in_flight += items.len();
                // The batch's change of the directory starts now, under the delegation: a
                // change answered here after it (changed_here, under the same lock) is not
                // in its reply, whose attributes then are not kept (crate::dirattrs).
                let started = (!items.is_empty()).then(|| mdc.dir_attrs.change_start(names));
                (
                    items,
                    d.cred.clone(),
                    d.incarnation,
                    d.failing_since.is_some(),
                    started,
                )
            };
            if items.is_empty() {
                // Everything answered is made: the reads answered since follow.
                self.send_accessed(dir);
                return Ok(());
            }
            // A test holds a batch here, taken and not sent, to answer more meanwhile.
            nacre_net::fault::point("client.delegated.taken");
            let n = items.len();
            let evicted_before = mdc.incarnation() != incarnation;
            if evicted_before {
                if let Some(gen) = started {
                    mdc.dir_attrs.change_done(names, gen, None, |_| false);
                }
                // Answered by an incarnation of this client the MDT evicted: void.
                let lost = every(&items, "evicted before they were sent");
                self.delegated_done(dir, &items, n, lost);
                continue;
            }
            let cred = cred.unwrap_or_else(nacre_types::cred::current);
            let sent = nacre_types::cred::with(cred, || self.send_run(&mdc, dir, &items, started));
            self.delegated.stats.batches.fetch_add(1, Ordering::Relaxed);
            let evicted = mdc.incarnation() != incarnation;
            let results = match sent {
                Ok(r) => r,
                Err(e) => {
                    let mut dirs = self.delegated.dirs.lock();
                    if let Some(d) = dirs.get_mut(&dir) {
                        let failing = d.failing_since.get_or_insert_with(Instant::now).elapsed();
                        if !evicted && !refused(&e) && failing < Duration::from_millis(RETRY_MS_MAX)
                        {
                            // Not answered: kept, in order, to be sent again.
                            d.in_flight -= n;
                            let later = std::mem::replace(&mut d.items, items);
                            d.items.extend(later);
                            d.since.get_or_insert_with(Instant::now);
                            return Err(e);
                        }
                    }
                    drop(dirs);
                    let lost = every(&items, &e.to_string());
                    self.delegated_done(dir, &items, n, lost);
                    return Err(e);
                }
            };
            // Untried (the reply was full): sent next, first.
            let (mut lost, mut untried, mut made) = (Vec::new(), Vec::new(), Vec::new());
            for (r, i) in results.iter().zip(&items) {
                match (r, i) {
                    (Ok(Some(attr)), Item::Create(c)) => made.push((c, attr.clone())),
                    (Ok(_), _) => {}
                    (Err(Status::TooBig), _) => untried.push(i.clone()),
                    (Err(Status::Exist), Item::Create(c)) if again && self.made_before(c.fid) => {}
                    (Err(Status::NoEnt), Item::Unlink(_)) if again => {}
                    (Err(s), _) => {
                        lost.push(format!("{} ({s})", String::from_utf8_lossy(i.name())))
                    }
                }
            }
            self.keep_made(dir, &made);
            self.note_own_locks(dir, &made);
            let requeued = untried.len();
            if requeued > 0 {
                let mut dirs = self.delegated.dirs.lock();
                if let Some(d) = dirs.get_mut(&dir) {
                    let later = std::mem::replace(&mut d.items, untried);
                    d.items.extend(later);
                }
            }
            let done: Vec<Item> = items
                .into_iter()
                .zip(&results)
                .filter(|(_, r)| !matches!(r, Err(Status::TooBig)))
                .map(|(i, _)| i)
                .collect();
            self.delegated_done(dir, &done, n, lost);
            if requeued == n {
                // Nothing tried: no progress to loop on.
                return Ok(());
            }
        }
    }

    /// Sends `items` (one kind, at most a batch) as one request: a result per item (a made
    /// file's attributes as the MDT answered them).
    fn send_run(
        &self,
        mdc: &crate::mdc::Mdc,
        dir: Fid,
        items: &[Item],
        started: Option<u64>,
    ) -> Result<Vec<std::result::Result<Option<Attr>, Status>>> {
        let creates: Vec<BatchCreate> = items
            .iter()
            .filter_map(|i| match i {
                Item::Create(c) => Some(c.clone()),
                Item::Unlink(_) => None,
            })
            .collect();
        let unlinks: Vec<BatchUnlink> = items
            .iter()
            .filter_map(|i| match i {
                Item::Unlink(u) => Some(u.clone()),
                Item::Create(_) => None,
            })
            .collect();
        assert!(
            creates.is_empty() || unlinks.is_empty(),
            "a batch holds one kind of change"
        );
        if unlinks.is_empty() {
            let made = self.create_batch_started(mdc, dir, creates, started)?;
            return Ok(made.into_iter().map(|r| r.map(|(a, _)| Some(a))).collect());
        }
        let removed = Self::unlink_batch_started(mdc, dir, unlinks, started)?;
        Ok(removed.into_iter().map(|r| r.map(|()| None)).collect())
    }

    /// True if the MDT has `fid` (a create sent again whose first answer was lost). Asked
    /// without the before-request hook: the file is still answered here, and the hook
    /// would wait for the very batch this runs in.
    fn made_before(&self, fid: Fid) -> bool {
        self.mdc(fid.mdt_index())
            .and_then(|m| m.call_own(MdsOp::GetAttr { fid }))
            .is_ok_and(|r| matches!(r, nacre_wire::mds::MdsReply::Attr(a) if a.fid == fid))
    }

    /// A batch of `dir` of `n` items came back: `done` are no longer answered here (made
    /// or `lost`, logged and counted); the others went back to the directory's queue.
    fn delegated_done(&self, dir: Fid, done: &[Item], n: usize, lost: Vec<String>) {
        if let Some(d) = self.delegated.dirs.lock().get_mut(&dir) {
            d.in_flight -= n;
            d.failing_since = None;
            for i in done {
                match i {
                    Item::Create(c) => {
                        d.removing.remove(&c.fid);
                        d.answered.remove(&c.fid).map(|_| ())
                    }
                    Item::Unlink(u) => d.unlinking.remove(&u.fid).then_some(()),
                };
            }
        }
        self.delegated
            .pending
            .fetch_sub(done.len(), Ordering::AcqRel);
        self.delegated
            .data_bytes
            .fetch_sub(data_of(done), Ordering::AcqRel);
        if !lost.is_empty() {
            let what = format!(
                "refused by the MDT or voided by an eviction: {}",
                lost.join(", ")
            );
            self.note_lost(dir, lost.len(), &what);
        }
    }

    /// Counts `count` creates answered in `dir` as lost (`why`, logged) and forgets the
    /// directory's listing, which named them.
    fn note_lost(&self, dir: Fid, count: usize, why: &str) {
        self.delegated
            .stats
            .lost
            .fetch_add(count as u64, Ordering::Relaxed);
        self.complete.forget(dir);
        tracing::error!("{count} changes answered in delegated directory {dir} lost, {why}");
    }

    /// Sends every delegated directory's pending creates (`fsync`, `syncfs`, unmount).
    pub fn flush_delegated_all(&self) -> Result<()> {
        let dirs: Vec<Fid> = self.delegated.dirs.lock().keys().copied().collect();
        let mut first_err = Ok(());
        for d in dirs {
            if let Err(e) = self.flush_delegated(d) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        }
        self.drop_closed();
        first_err
    }

    /// The delegation of `dir` goes: nothing more is answered in it. Given back (`lost`
    /// false: a callback, the LRU, this client's own change), what was answered is sent
    /// first, here. Lost: see the module documentation; never sent from here, which runs
    /// inside a request of the MDT's. Returns the files whose entries and attributes the
    /// kernel kept under it, for it to forget them.
    pub(crate) fn delegation_gone(&self, dir: Fid, lost: bool) -> Vec<(Fid, Vec<u8>)> {
        let dropped = {
            let mut dirs = self.delegated.dirs.lock();
            let Some(d) = dirs.get_mut(&dir) else {
                return Vec::new();
            };
            d.closing = true;
            let kept: usize = std::mem::take(&mut d.kept)
                .values()
                .map(|k| k.data.len())
                .sum();
            self.delegated.kept_bytes.fetch_sub(kept, Ordering::AcqRel);
            let evicted = lost
                && self
                    .mdc(dir.mdt_index())
                    .map_or(true, |m| m.incarnation() != d.incarnation);
            evicted.then(|| {
                d.answered.clear();
                d.unlinking.clear();
                d.since = None;
                std::mem::take(&mut d.items)
            })
        };
        self.ask_later(dir);
        if let Some(dropped) = dropped {
            if !dropped.is_empty() {
                self.delegated
                    .pending
                    .fetch_sub(dropped.len(), Ordering::AcqRel);
                self.delegated
                    .data_bytes
                    .fetch_sub(data_of(&dropped), Ordering::AcqRel);
                let why = format!("never sent: evicted by MDT{:04x}", dir.mdt_index());
                self.note_lost(dir, dropped.len(), &why);
            }
        } else if lost {
            // The sender thread sends it once the MDT answers.
            self.wake_delegated_sender();
            return self.take_covered(dir, false);
        } else if let Err(e) = self.flush_delegated(dir) {
            tracing::warn!("sending the creates of {dir} as its delegation goes: {e}");
        }
        // After the sending: the files it made here with their own locks stay known.
        let covered = self.take_covered(dir, true);
        self.drop_closed();
        covered
    }

    /// The files of `dir` the kernel was let keep under its delegation, which goes: those
    /// it must forget now (all of them, or, with `own_locks`, those whose own lock from
    /// their batch is not held: a held one keeps them, as it would a create's).
    fn take_covered(&self, dir: Fid, own_locks: bool) -> Vec<(Fid, Vec<u8>)> {
        let covered = match self.delegated.dirs.lock().get_mut(&dir) {
            Some(d) => std::mem::take(&mut d.covered),
            None => return Vec::new(),
        };
        let mdc = self.mdc(dir.mdt_index()).ok();
        let entry = nacre_ldlm::msg::LOOKUP | nacre_ldlm::msg::UPDATE;
        covered
            .into_iter()
            .filter(|(_, c)| {
                let held = || mdc.as_ref().is_some_and(|m| m.locks.covers(c.fid, entry));
                !(own_locks && c.locked && held())
            })
            .map(|(name, c)| (c.fid, name))
            .collect()
    }

    /// Notes the files and directories of `made` (just made by a batch of `dir`) whose
    /// entries and attributes the kernel may keep past the delegation: their own lock came
    /// with the batch (crate::batch), and the MDT made them with the attributes answered
    /// here. A directory kept so keeps its subtree in the kernel (which drops it with the
    /// directory's entry). Not a file of a directory whose files start on the MDT (their
    /// pages, written under the delegation, go with it: no `DOM` lock of the file keeps
    /// them).
    fn note_own_locks(&self, dir: Fid, made: &[(&BatchCreate, Attr)]) {
        let Ok(mdc) = self.mdc(dir.mdt_index()) else {
            return;
        };
        let entry = nacre_ldlm::msg::LOOKUP | nacre_ldlm::msg::UPDATE;
        let mut dirs = self.delegated.dirs.lock();
        let Some(d) = dirs.get_mut(&dir) else {
            return;
        };
        let files_kept = d.data_bytes_max == 0;
        let kept = |k: FileKind| k == FileKind::Directory || (k == FileKind::Regular && files_kept);
        for (c, attr) in made.iter().filter(|(c, _)| kept(c.kind)) {
            let same = d.answered.get(&c.fid).is_some_and(|a| a == attr);
            if let Some(k) = d.covered.get_mut(&c.name) {
                if k.fid == c.fid {
                    k.locked = same && mdc.locks.covers(c.fid, entry);
                }
            }
        }
    }

    /// Forgets the closing directories with nothing left to send.
    fn drop_closed(&self) {
        let mut dirs = self.delegated.dirs.lock();
        dirs.retain(|_, d| {
            !(d.closing && d.items.is_empty() && d.in_flight == 0 && d.accessed.is_empty())
        });
        self.delegated.held.store(dirs.len(), Ordering::Release);
    }

    /// Wakes the sender thread (something to send).
    pub(super) fn wake_delegated_sender(&self) {
        if let Some(t) = self.delegated_sender.get() {
            t.unpark();
        }
    }

    /// Starts the thread that sends what waited [`DELEGATED_SEND_MS`], and what lost
    /// delegations left (once). It sleeps while nothing is pending (woken by the first
    /// create answered, or each second to see whether its client is gone).
    pub(super) fn start_delegated_sender(&self) {
        if self.delegated_sender_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.me.clone();
        let started = std::thread::Builder::new()
            .name("delegated-send".into())
            .spawn(move || loop {
                let idle = me
                    .upgrade()
                    .is_none_or(|c| c.delegated.pending.load(Ordering::Acquire) == 0);
                if idle {
                    std::thread::park_timeout(Duration::from_secs(1));
                } else {
                    std::thread::sleep(Duration::from_millis(DELEGATED_SEND_MS / 2));
                }
                // A test holds the sender here to keep creates answered and not sent.
                nacre_net::fault::point("client.delegated.sender");
                let Some(client) = me.upgrade() else { return };
                let due: Vec<Fid> = client
                    .delegated
                    .dirs
                    .lock()
                    .iter()
                    .filter(|(_, d)| {
                        (d.closing && !d.items.is_empty())
                            || !d.accessed.is_empty()
                            || d.since.is_some_and(|t| {
                                t.elapsed() >= Duration::from_millis(DELEGATED_SEND_MS)
                            })
                    })
                    .map(|(f, _)| *f)
                    .collect();
                for dir in due {
                    if let Err(e) = client.flush_delegated(dir) {
                        tracing::warn!("sending the creates of {dir}: {e}");
                    }
                }
                client.drop_closed();
            });
        match started {
            Ok(h) => {
                let _ = self.delegated_sender.set(h.thread().clone());
            }
            Err(e) => tracing::warn!("no thread to send delegated creates: {e}"),
        }
    }
}

/// How many of `items`, from the first, go in one batch: the changes of one kind, at most
/// a batch's worth (of items, and of the bytes creates carry).
pub(super) fn leading_run(items: &[Item]) -> usize {
    let Some(first) = items.first() else {
        return 0;
    };
    let (creates, max) = match first {
        Item::Create(_) => (true, CREATE_BATCH_ITEMS_MAX),
        Item::Unlink(_) => (false, UNLINK_BATCH_ITEMS_MAX),
    };
    let mut bytes = 0;
    items
        .iter()
        .take(max)
        .take_while(|i| matches!(i, Item::Create(_)) == creates)
        .take_while(|i| {
            bytes += data_of(std::slice::from_ref(*i));
            bytes <= CREATE_BATCH_DATA_BYTES_MAX
        })
        .count()
        .max(1)
}

/// The bytes `items` carry (creates of files written before they were sent).
pub(super) fn data_of(items: &[Item]) -> usize {
    items
        .iter()
        .map(|i| match i {
            Item::Create(c) => c.data.len(),
            Item::Unlink(_) => 0,
        })
        .sum()
}

/// `why` for each of `items`, as a lost change is logged.
fn every(items: &[Item], why: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| format!("{} ({why})", String::from_utf8_lossy(i.name())))
        .collect()
}

/// True if the MDT answered `e` to the whole batch: sending it again gets the same answer
/// (anything else — the network, a restart — is worth sending again).
fn refused(e: &crate::ClientError) -> bool {
    use nacre_net::RpcError;
    matches!(
        e,
        crate::ClientError::Rpc(RpcError::Status(
            Status::Perm
                | Status::Access
                | Status::RoFs
                | Status::Inval
                | Status::Proto
                | Status::NotDir
                | Status::NoEnt
                | Status::Stale
                | Status::XDev
                | Status::DQuot
                | Status::NotSupp
                | Status::Shutdown
        ))
    )
}
