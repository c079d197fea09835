//! The data lock callback side, per OST: the poll loop that waits for callbacks and
//! glimpses, the answers to glimpses, callbacks handed to the revoker, and the replay of
//! every lock after an OST restart.

use super::*;
impl Client {
    /// The OST start this client's locks on `ost` are from (0: none known yet, and until
    /// it is, writes to that OST are not kept behind).
    pub fn data_epoch(&self, ost: u32) -> u64 {
        if !self.data_locks.enabled() {
            return 0;
        }
        self.data_locks.ost(ost).epoch.load(Ordering::Acquire)
    }

    /// OST `o` restarted: asks it for every lock held there again. What someone else
    /// changed since the restart is lost (kept writes dropped, `EIO` at the files' next
    /// `fsync`); locks refused go with their files' cached data. False if the OST could not
    /// be asked (tried again at the next poll).
    pub(super) fn replay_data_locks(&self, o: &OstLocks, uuid: [u8; 16]) -> bool {
        let refs: Vec<ExtentRef> = o.state.lock().held.values().map(|h| h.lock).collect();
        let (mut refused, mut changed) = (Vec::new(), Vec::new());
        // What is kept for the OST (written or not) was granted space there: claimed back
        // with the first message, so the OST's restart cannot let others take it.
        let mut grant_bytes = self.writeback.dirty_on(o.ost);
        // At least one message, even with no lock to take back: the OST waits for every
        // client that held locks before its restart (nacre_oss::recovery).
        let chunks: Vec<&[ExtentRef]> = match refs.is_empty() {
            true => vec![&[]],
            false => refs.chunks(REFS_PER_MESSAGE_MAX).collect(),
        };
        for chunk in chunks {
            let req = OssRequest::LockReplay {
                locks: chunk.to_vec(),
                grant_bytes: std::mem::take(&mut grant_bytes),
            };
            match self.ost_call(o.ost, uuid, &req) {
                Ok(OssReply::Replayed {
                    refused: r,
                    changed: c,
                }) => {
                    refused.extend(r);
                    changed.extend(c);
                }
                Ok(other) => {
                    tracing::warn!("OST{:04x}: lock replay answered {other:?}", o.ost);
                    return false;
                }
                Err(e) => {
                    tracing::info!("OST{:04x}: lock replay: {e}", o.ost);
                    return false;
                }
            }
        }
        // Before the new start is known: nothing kept for a changed object is sent there.
        self.writeback.lost_objects(o.ost, &changed);
        self.writeback.grant_lost(o.ost);
        let mut s = o.state.lock();
        let gone: Vec<(u64, Vec<FileDrop>, ObjectId)> = refused
            .iter()
            .filter_map(|h| s.take(*h).map(|held| (*h, held.drops(), held.lock.object)))
            .collect();
        drop(s);
        let r = Ordering::Relaxed;
        o.stats
            .replayed
            .fetch_add((refs.len() - gone.len()) as u64, r);
        o.stats.replay_refused.fetch_add(gone.len() as u64, r);
        tracing::info!(
            "OST{:04x} restarted: {} data locks taken back, {} refused, {} objects changed there meanwhile",
            o.ost,
            refs.len() - gone.len(),
            gone.len(),
            changed.len()
        );
        if !gone.is_empty() {
            // Not held at the OST: nothing to cancel, only their cached data to drop.
            let mut rev = Revocation::of(o.ost, gone, Vec::new());
            rev.handles.clear();
            rev.objects.clear();
            self.data_locks.revoke(rev);
        }
        true
    }

    /// Sends `req` to OST `ost` as `uuid` and waits for its answer.
    pub(super) fn ost_call(&self, ost: u32, uuid: [u8; 16], req: &OssRequest) -> Result<OssReply> {
        let conn = self.osc(ost)?;
        let mut call = OssCall::from_client(uuid, req.clone());
        call.capa = self.capas.for_request(ost, req);
        Ok(nacre_net::rpc::call::<_, OssReply>(
            &conn,
            req.opcode(),
            ost,
            &call,
        )?)
    }
}

/// Polls OST `o` for callbacks for as long as the client lives.
pub(super) fn poll_loop(me: Weak<Client>, o: Arc<OstLocks>) {
    loop {
        let Some(client) = me.upgrade() else { return };
        if client.data_locks.stopping.load(Ordering::Acquire) {
            o.polling.store(false, Ordering::Release);
            return;
        }
        let wait_ms = client.lock_poll_wait_ms();
        let req = OssRequest::LockPoll {
            wait_ms,
            epoch: o.epoch.load(Ordering::Acquire),
        };
        let uuid = o.uuid();
        let answer: Result<OssReply> = client.ost_call(o.ost, uuid, &req);
        match answer {
            Ok(OssReply::Blocking {
                epoch,
                locks,
                glimpses,
            }) => {
                let known = o.epoch.load(Ordering::Acquire);
                if known != epoch {
                    // The OST restarted: its locks are asked for again before the new
                    // start is known here (until then, kept data is refused there).
                    if known != 0 && !client.replay_data_locks(&o, uuid) {
                        drop(client);
                        std::thread::sleep(Duration::from_millis(POLL_RETRY_MS));
                        continue;
                    }
                    o.epoch.store(epoch, Ordering::Release);
                    client.writeback.new_epoch();
                }
                called_back(&client, &o, &locks);
                answer_glimpses(&client, &o, uuid, &glimpses);
            }
            Ok(_) => {}
            Err(e) if e.status() == Status::Shutdown => {
                // A test holds the poll here so the eviction is learned some other way.
                nacre_net::fault::point("client.ost_poll.evicted");
                client.data_evicted(o.ost, uuid)
            }
            Err(e) => {
                tracing::debug!("OST{:04x}: lock poll: {e}", o.ost);
                drop(client);
                std::thread::sleep(Duration::from_millis(POLL_RETRY_MS));
            }
        }
    }
}

/// Glimpses: the OST asks for the size of `objects` as this client knows it (it holds write
/// locks there and may keep writes it has not sent): the end of what it keeps, 0 for none.
/// Answered from memory, without a flush, and the locks stay.
pub(super) fn answer_glimpses(client: &Client, o: &OstLocks, uuid: [u8; 16], objects: &[ObjectId]) {
    if objects.is_empty() {
        return;
    }
    o.stats
        .glimpses
        .fetch_add(objects.len() as u64, Ordering::Relaxed);
    let sizes = objects
        .iter()
        .take(REFS_PER_MESSAGE_MAX)
        .map(|obj| (*obj, client.writeback.kept_end(o.ost, *obj)))
        .collect();
    if let Err(e) = client.ost_call(o.ost, uuid, &OssRequest::GlimpseAnswer { sizes }) {
        // Unanswered, the OST evicts this client after the callback timeout.
        tracing::debug!("OST{:04x}: glimpse answer: {e}", o.ost);
    }
}

/// Locks called back: those not in use go to the revoker (their files' data dropped, then
/// cancelled); those in use when their reads are done; unknown ones are remembered.
pub(super) fn called_back(client: &Client, o: &OstLocks, locks: &[ExtentRef]) {
    if locks.is_empty() {
        return;
    }
    o.stats
        .callbacks
        .fetch_add(locks.len() as u64, Ordering::Relaxed);
    let mut s = o.state.lock();
    let mut gone = Vec::new();
    let mut orphans = Vec::new();
    for l in locks {
        let reading = s.inflight.contains_key(&l.object);
        match s.held.get_mut(&l.handle) {
            Some(h) if h.users > 0 => h.revoked = true,
            Some(_) => {
                let h = s.take(l.handle).expect("held");
                gone.push((l.handle, h.drops(), l.object));
            }
            // A read asking for a lock on the object is in flight: its grant may be
            // this one, handled when the read is done.
            None if reading => {
                if s.early.insert(l.handle, l.object).is_none() {
                    s.early_order.push_back(l.handle);
                    if s.early_order.len() > EARLY_REMEMBERED_MAX {
                        if let Some(old) = s.early_order.pop_front() {
                            s.early.remove(&old);
                        }
                    }
                }
            }
            // Granted to a read that failed: nothing was cached under it.
            None => orphans.push(l.handle),
        }
    }
    drop(s);
    if !gone.is_empty() || !orphans.is_empty() {
        client
            .data_locks
            .revoke(Revocation::of(o.ost, gone, orphans));
    }
}
