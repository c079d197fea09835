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

impl Client {
    /// Appends `data` at the file's true end, whatever other clients append meanwhile;
    /// returns the offset it was written at.
    pub fn append(&self, file: &crate::OpenFile, data: &[u8]) -> Result<u64> {
        file.check_writable()?;
        self.remove_privs(file, None)?;
        let io = self.io_layout(file)?;
        let Some(layout) = io.get() else {
            return Err(Status::Inval.into());
        };
        if !self.data_locks_on() {
            // Without locks this client cannot keep others out: the size it sees is the
            // best it has.
            let size = crate::osc::glimpse(self, layout)?.0;
            crate::osc::write(self, layout, size, data, file.owner)?;
            return Ok(size);
        }
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
        let mut pinned: Vec<(u32, u64)> = Vec::new();
        let result = (|| {
            for (stripe, o) in layout.objects().enumerate() {
                let map = crate::datalocks::StripeMap::of(layout, stripe);
                loop {
                    if let Some(h) = self.use_write_lock(o.ost, o.object, whole) {
                        pinned.push((o.ost, h));
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
                    let answer = crate::osc::call_one(self, o.ost, &req, None).map_err(Into::into);
                    if let Ok((OssReply::Granted(Some(l)), _)) = &answer {
                        self.data_lock_granted(o.ost, (file.fid, map), *l, &mut asked);
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
                        Err(e) => return Err(e),
                    }
                }
            }
            // No other client holds a lock on any of the objects: the OSTs' sizes and what
            // this client keeps are the file's size. What is kept is read first: a flush
            // that lands meanwhile is then in the OSTs' sizes.
            let kept = self.writeback.size(layout).unwrap_or(0);
            let (size, _) = crate::osc::glimpse(self, layout)?;
            let size = size.max(kept);
            self.write_cached_with(file, layout, size, data)?;
            Ok(size)
        })();
        for (ost, h) in pinned {
            self.done_with_lock(ost, h);
        }
        result
    }
}
