//! `O_APPEND` across clients: an append takes a write lock on the whole of every object of
//! the file (asked for explicitly: other clients' locks there are called back first, which
//! has their kept writes written), holds them while it reads the size and writes at it, so
//! no other client's append or write can come between — as Lustre's appends do.

use crate::{Client, Result};
use nacre_ldlm::kind::Extent;
use nacre_types::Status;
use nacre_wire::oss::{OssReply, OssRequest};
use std::time::{Duration, Instant};

/// Appends on one client are serialized per file through these (hashed by FID).
pub(crate) const APPEND_SLOTS: usize = 64;
/// Tries of one append: each may find that the file's instantiated components do not reach
/// its end (it grows the layout; others' appends may push the end further meanwhile) or
/// that its locks went with an eviction before it wrote.
const APPEND_TRIES_MAX: u32 = 8;

/// How one try of an append ended.
enum Appended {
    /// Written at this offset.
    At(u64),
    /// The file's components with objects end short of this: grow the layout first.
    Grow(u64),
    /// This client was evicted (by an OST, or by the MDT refusing bytes on it) while it
    /// held the locks, before anything was written: try again.
    Again,
}

impl Client {
    /// Appends `data` at the file's true end, whatever other clients append meanwhile;
    /// returns the offset it was written at.
    pub fn append(&self, file: &crate::OpenFile, data: &[u8]) -> Result<u64> {
        file.check_writable()?;
        // Not through the page cache: its objects' sizes are not followed (vouched.rs).
        self.forget_vouched(file.fid);
        self.written.wrote(file.fid);
        self.remove_privs(file, None)?;
        self.edges.forget_file(file.fid);
        // A file all on the MDT appends there: the MDT picks the offset (crate::dom). One
        // whose bytes a migration moved to OSTs meanwhile (`ESTALE`) appends there.
        let on_mdt = match self.io_layout(file)?.get().filter(|l| l.dom_end() > 0) {
            Some(layout) => self.dom_append(file.fid, layout, data),
            None => Ok(None),
        };
        match on_mdt {
            Ok(Some(at)) => return Ok(at),
            Ok(None) => {}
            Err(e) if e.status() == Status::Stale => self.reload_layout(file)?,
            Err(e) => return Err(e),
        }
        if !self.data_locks_on() {
            // Without locks this client cannot keep others out: the size it sees (with
            // the components others instantiated) is the best it has.
            self.lockless_layout_over(file, 0, u64::MAX)?;
            let size = {
                let io = self.io_layout(file)?;
                let layout = io.get().ok_or(Status::Inval)?;
                crate::osc::glimpse(self, layout)?
                    .0
                    .max(self.dom_size(file.fid, layout)?)
            };
            let end = size.saturating_add(data.len() as u64);
            let io = self.io_layout_to(file, end)?;
            let layout = io.get().ok_or(Status::Inval)?;
            crate::osc::write(self, layout, size, data, file.owner)?;
            return Ok(size);
        }
        // The size is known only under the locks: an append reaching past the components
        // that have objects lets go of them, has the layout grown, and starts again.
        let mut end = 0;
        for _ in 0..APPEND_TRIES_MAX {
            let io = self.io_layout_to(file, end)?;
            let layout = io.get().ok_or(Status::Inval)?;
            match self.append_locked(file, layout, data)? {
                Appended::At(size) => return Ok(size),
                Appended::Grow(to) => end = to,
                Appended::Again => {}
            }
        }
        Err(Status::Io.into())
    }

    /// One try of [`Client::append`] with `layout`, under every object's write lock.
    fn append_locked(
        &self,
        file: &crate::OpenFile,
        layout: &nacre_types::Layout,
        data: &[u8],
    ) -> crate::Result<Appended> {
        let slot = (file.fid.to_ino() % APPEND_SLOTS as u64) as usize;
        let _serial = self.appends[slot].lock();
        let whole = Extent {
            start: 0,
            end: u64::MAX,
            write: true,
        };
        let deadline = Instant::now() + Duration::from_millis(self.net_config().rpc_timeout_ms);
        // Every object's lock, taken in stripe order and held (in use) until the write is
        // in place: a callback for one waits.
        let mut handles: Vec<(u32, u64)> = Vec::new();
        let mut pins = crate::datalocks::Pinned::default();
        let result = (|| {
            for (stripe, o) in layout.objects().enumerate() {
                let map = crate::datalocks::StripeMap::of(layout, stripe);
                loop {
                    // The uuid first: a lock found after it is this identity's or a newer
                    // one's (then writes sent as this one are refused, never misplaced).
                    let uuid = self.ost_uuid(o.ost);
                    if let Some((h, evictions)) = self.use_write_lock(o.ost, o.object, whole) {
                        handles.push((o.ost, h));
                        pins.add(o.ost, evictions, uuid);
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(Status::TimedOut.into());
                    }
                    self.polls(o.ost);
                    let req = OssRequest::Enqueue {
                        object: o.object,
                        start: 0,
                        end: u64::MAX,
                        write: true,
                    };
                    let mut asked = crate::datalocks::ReadLocks::new();
                    self.asking(o.ost, o.object, &mut asked);
                    let sent_as = self.ost_uuid(o.ost);
                    let answer = crate::osc::call_one(self, o.ost, &req, None, sent_as)
                        .map_err(crate::ClientError::from);
                    if let Ok((OssReply::Granted(Some(l)), _)) = &answer {
                        // Not held if the OST evicted `sent_as` since: the loop asks again.
                        let _ =
                            self.data_lock_granted(o.ost, (file.fid, map), *l, &mut asked, sent_as);
                    }
                    // A callback that came before the grant is answered now.
                    self.read_done(file.fid, asked);
                    match answer {
                        Ok((OssReply::Granted(Some(_)), _)) => {}
                        Ok((OssReply::Granted(None), _)) => {
                            // Not a lock holder yet (its first poll is on its way), or a
                            // conflicting lock came meanwhile: ask again.
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Ok(_) => return Err(Status::Proto.into()),
                        // The OST evicted `sent_as` before its lock poll told this client:
                        // the refusal tells it (its locks and kept data there go, once), and
                        // the enqueue goes again as the new identity.
                        Err(e) if e.status() == Status::Shutdown => {
                            self.data_evicted(o.ost, sent_as)
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            // No other client holds a lock on any of the objects: the OSTs' sizes and what
            // this client keeps are the file's size. What is kept is read first: a flush
            // that lands meanwhile is then in the OSTs' sizes.
            let kept = self.writeback.size(layout).unwrap_or(0);
            let (size, _) = crate::osc::glimpse(self, layout)?;
            // Bytes on the MDT: appends of other clients there are not under these locks
            // (a file that reaches its OSTs has its end there, but for a truncate back).
            let size = size.max(kept).max(self.dom_size(file.fid, layout)?);
            let end = size.saturating_add(data.len() as u64);
            if layout.instantiated_end() < end {
                return Ok(Appended::Grow(end));
            }
            // A test holds an append here, its size read, to evict this client meanwhile.
            nacre_net::fault::point("client.append.sized");
            match self.write_cached_with(file, layout, size, data, Some(&pins)) {
                Ok(_) => Ok(Appended::At(size)),
                // An OST evicted this client while the append held its locks (found so
                // here, or refused as the identity the locks were found under) before any
                // of it was in place: another client may have appended at `size`
                // meanwhile, and the append starts again. (Found after some of it was in
                // place: `EIO`, nothing written as a newer identity.)
                Err(e) if e.status() == Status::Shutdown => Ok(Appended::Again),
                Err(e) => Err(e),
            }
        })();
        for (ost, h) in handles {
            self.done_with_lock(ost, h);
        }
        result
    }
}
