//! The flusher thread of the write-behind (writeback.rs): picks what is ready, writes it in
//! RPCs of up to `max_rpc_size`, several in flight per OST, and takes each reply back.

use super::*;
use nacre_net::rpc::RpcError;
use nacre_wire::oss::{Run, WRITE_RUNS_MAX};

/// Picks what to write now: runs of due objects, within each OST's RPCs in flight (one run
/// per RPC to an OST that takes no [`OssRequest::WriteRuns`]).
fn pick(st: &mut State, max_rpc: u64, per_ost: usize, idle: Duration) -> Vec<Work> {
    let mut out = Vec::new();
    let now = Instant::now();
    let half = DIRTY_BYTES_PER_OST_MAX / 2;
    let State {
        objs,
        dirty,
        inflight,
        single_runs,
        ..
    } = st;
    for (key, o) in objs.iter_mut() {
        loop {
            if o.pieces.is_empty() || inflight.get(&key.0).copied().unwrap_or(0) >= per_ost {
                break;
            }
            let due = o.urgent
                || o.first_run() >= max_rpc
                || o.touched.is_some_and(|t| now.duration_since(t) >= idle)
                || dirty.get(&key.0).copied().unwrap_or(0) >= half;
            if !due {
                break;
            }
            let runs_max = match single_runs.contains(&key.0) {
                true => 1,
                false => WRITE_RUNS_MAX,
            };
            let Some((runs, buf)) = o.take_runs(max_rpc, runs_max) else {
                break;
            };
            *inflight.entry(key.0).or_default() += 1;
            out.push(Work {
                key: *key,
                fid: o.fid,
                owner: o.owner,
                layout_gen: o.layout_gen,
                job: o.job.clone(),
                cred: o.cred.clone(),
                runs,
                buf,
            });
        }
    }
    out
}

/// The flusher: starts due RPCs, then waits for the oldest in flight (or, with none, for
/// work); ends with the client, or once stopped with nothing left.
pub(super) fn flusher(me: std::sync::Weak<Client>, wb: Arc<Writeback>) {
    let mut flying: VecDeque<Flying> = VecDeque::new();
    loop {
        let Some(c) = me.upgrade() else { return };
        let max_rpc = u64::from(c.net_config().max_rpc_size.max(4096));
        let per_ost = c.net_config().max_rpcs_in_flight.max(1);
        let work = {
            let mut st = wb.st.lock();
            pick(
                &mut st,
                max_rpc,
                per_ost,
                Duration::from_millis(IDLE_FLUSH_MS),
            )
        };
        for Work {
            key,
            fid,
            owner,
            layout_gen,
            job,
            cred,
            runs,
            buf,
        } in work
        {
            // Sent as the writer's.
            nacre_types::jobid::set_current(&job);
            nacre_types::cred::set_current(cred.clone());
            let epoch = c.data_epoch(key.0);
            let req = write_request(key.1, (owner, layout_gen), epoch, &runs);
            let buf = Arc::new(buf);
            // The uuid is read before the check: an eviction drops what was taken
            // (Writeback::evicted) before the client's new uuid can be read, so these bytes,
            // written under the old uuid's locks, go as the old client (and are refused) or
            // not at all, never as the new one after someone else's.
            let uuid = c.ost_uuid(key.0);
            let reply = if wb.is_lost(key, &runs) {
                None
            } else {
                match osc::send_one(&c, key.0, &req, Some(buf.clone()), uuid) {
                    Ok(p) => {
                        wb.stats.rpcs.fetch_add(1, Ordering::Relaxed);
                        let n = runs.len() as u64;
                        wb.stats.runs.fetch_add(n, Ordering::Relaxed);
                        if n > 1 {
                            wb.stats.rpcs_of_runs.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(p)
                    }
                    Err(e) => {
                        tracing::warn!("OST{:04x}: write-behind: {e}", key.0);
                        None
                    }
                }
            };
            flying.push_back(Flying {
                key,
                runs,
                fid,
                reply,
                uuid,
                owner,
                layout_gen,
                job,
                cred,
                buf,
                epoch,
            });
        }
        let Some(f) = flying.pop_front() else {
            drop(c);
            let mut st = wb.st.lock();
            if st.stop && st.objs.is_empty() {
                st.running = false;
                return;
            }
            // New work wakes this; kept data comes due after its idle time. With nothing
            // kept, it sleeps until something is.
            if st.objs.is_empty() {
                wb.cv.wait(&mut st);
            } else {
                wb.cv
                    .wait_for(&mut st, Duration::from_millis(IDLE_FLUSH_MS / 4));
            }
            continue;
        };
        let mut f = f;
        let mut result = match f.reply.take() {
            Some(p) => osc::collect_one(p),
            None => Err(RpcError::Status(Status::Io)),
        };
        if is_stale(&result) {
            result = send_again(&c, &wb, &mut f);
        }
        if f.runs.len() > 1 && matches!(result, Err(RpcError::Status(Status::Proto))) {
            // An OST of before write RPCs of many runs: one run per RPC to it from now on.
            wb.st.lock().single_runs.insert(f.key.0);
            tracing::info!("OST{:04x} takes one byte range per write RPC", f.key.0);
            result = send_singly(&c, &wb, &f);
        }
        finish(&c, f.key, &f.runs, f.fid, f.uuid, result);
    }
}

/// The write RPC of kept data of `object` in `runs` (offset, end), under OST start `epoch`:
/// a [`OssRequest::Write`] for one run, else a [`OssRequest::WriteRuns`].
fn write_request(
    object: ObjectId,
    (owner, layout_gen): (Owner, u32),
    epoch: u64,
    runs: &[(u64, u64)],
) -> OssRequest {
    let grant_used = runs.iter().map(|(s, e)| e - s).sum();
    match runs {
        [(offset, _)] => OssRequest::Write {
            object,
            offset: *offset,
            owner,
            lock: false,
            grant_used,
            epoch,
            layout_gen,
        },
        _ => OssRequest::WriteRuns {
            object,
            owner,
            grant_used,
            epoch,
            layout_gen,
            runs: runs
                .iter()
                .map(|&(offset, end)| Run {
                    offset,
                    // At most `max_rpc_size` (a u32) each.
                    len: (end - offset) as u32,
                })
                .collect(),
        },
    }
}

/// `f`'s runs sent one per RPC, in order, waiting for each (an OST that does not take
/// [`OssRequest::WriteRuns`]): each under the start `f` was last sent under and, refused
/// as stale (an older OST does not decode a write of runs far enough to find it stale),
/// sent again as any kept write is ([`send_again`]); the first error, else a reply of every
/// byte with the grants added up.
fn send_singly(c: &Client, wb: &Writeback, f: &Flying) -> osc::Collected {
    let mut at = 0usize;
    let (mut granted, mut ids) = (0u64, 0u8);
    let mut last = None;
    for &(s, e) in &f.runs {
        let n = (e - s) as usize;
        let mut buf = AlignedBuf::for_overwrite(n);
        buf.copy_from_slice(&f.buf[at..at + n]);
        at += n;
        let mut one = Flying {
            key: f.key,
            runs: vec![(s, e)],
            fid: f.fid,
            reply: None,
            uuid: f.uuid,
            owner: f.owner,
            layout_gen: f.layout_gen,
            job: f.job.clone(),
            cred: f.cred.clone(),
            buf: Arc::new(buf),
            epoch: f.epoch,
        };
        nacre_types::jobid::set_current(&one.job);
        nacre_types::cred::set_current(one.cred.clone());
        let req = write_request(one.key.1, (one.owner, one.layout_gen), one.epoch, &one.runs);
        let mut result = osc::call_one(c, one.key.0, &req, Some(one.buf.clone()), one.uuid);
        if is_stale(&result) {
            result = send_again(c, wb, &mut one);
        }
        let (reply, bulk) = result?;
        if let OssReply::Written {
            grant_added,
            sync_ids,
            ..
        } = &reply
        {
            granted += grant_added;
            ids |= sync_ids;
        }
        last = Some((reply, bulk));
    }
    match last {
        Some((OssReply::Written { lock, object, .. }, bulk)) => Ok((
            OssReply::Written {
                len: at as u32,
                lock,
                grant_added: granted,
                sync_ids: ids,
                object,
            },
            bulk,
        )),
        other => other.ok_or(RpcError::Status(Status::Io)),
    }
}

fn is_stale(result: &osc::Collected) -> bool {
    matches!(result, Err(RpcError::Status(Status::Stale)))
}

/// The OST refused `f` as stale (it restarted since the write lock was granted): waits
/// until this client took its locks back there, then sends it again under the new start —
/// unless someone else changed the object meanwhile (lost: `EIO`). `f` keeps the start and
/// uuid it was last sent under.
fn send_again(c: &Client, wb: &Writeback, f: &mut Flying) -> osc::Collected {
    let stale = || Err(RpcError::Status(Status::Stale));
    let mut sent = f.epoch;
    for _ in 0..STALE_RESENDS_MAX {
        let deadline = Instant::now() + Duration::from_millis(STALE_WAIT_MS);
        let (epoch, uuid) = loop {
            let epoch = c.data_epoch(f.key.0);
            // Read before the check, as in the flusher.
            let uuid = c.ost_uuid(f.key.0);
            let mut st = wb.st.lock();
            if st
                .objs
                .get(&f.key)
                .is_some_and(|o| f.runs.iter().any(|r| o.lost.contains(r)))
            {
                return Err(RpcError::Status(Status::Io));
            }
            if epoch != sent && epoch != 0 {
                break (epoch, uuid);
            }
            if Instant::now() >= deadline {
                return stale();
            }
            // Woken by the new start (Writeback::new_epoch); the bound only covers a
            // wake-up that came between the check and the wait.
            wb.cv
                .wait_for(&mut st, Duration::from_millis(IDLE_FLUSH_MS / 4));
        };
        sent = epoch;
        (f.epoch, f.uuid) = (epoch, uuid);
        nacre_types::jobid::set_current(&f.job);
        nacre_types::cred::set_current(f.cred.clone());
        let req = write_request(f.key.1, (f.owner, f.layout_gen), epoch, &f.runs);
        let result = osc::call_one(c, f.key.0, &req, Some(f.buf.clone()), uuid);
        if !is_stale(&result) {
            return result;
        }
    }
    stale()
}

/// A write RPC of the flusher came back.
fn finish(
    c: &Client,
    key: Key,
    runs: &[(u64, u64)],
    fid: Fid,
    uuid: [u8; 16],
    result: std::result::Result<(OssReply, Option<AlignedBuf>), nacre_net::rpc::RpcError>,
) {
    let len: u64 = runs.iter().map(|(s, e)| e - s).sum();
    let evicted = matches!(result, Err(RpcError::Status(Status::Shutdown)));
    let mut st = c.writeback.st.lock();
    if let Some(n) = st.inflight.get_mut(&key.0) {
        *n = n.saturating_sub(1);
    }
    if let Some(d) = st.dirty.get_mut(&key.0) {
        *d -= len.min(*d);
    }
    let owner = st.objs.get(&key).map(|o| o.owner);
    let mut granted = 0;
    match &result {
        Ok((
            OssReply::Written {
                grant_added,
                sync_ids,
                object,
                ..
            },
            _,
        )) => {
            if let Ok(m) = c.mdc(fid.mdt_index()) {
                m.vouched.wrote(fid, key.0, key.1, *object);
            }
            // Taken once the state is let go: this client's only while `uuid` is its
            // uuid at the OST (Client::add_grant_as).
            granted = *grant_added;
            c.writeback.stats.bytes.fetch_add(len, Ordering::Relaxed);
            if let (Some(owner), true) = (owner, *sync_ids != 0 || !st.quota_sync.is_empty()) {
                drop(st);
                c.writeback.quota_reply(owner, *sync_ids);
                st = c.writeback.st.lock();
            }
        }
        Ok(_) => {
            st.errors.insert(fid, Status::Proto);
        }
        Err(e) => {
            tracing::warn!("OST{:04x}: write-behind of {len} bytes lost: {e}", key.0);
            c.writeback
                .stats
                .lost_bytes
                .fetch_add(len, Ordering::Relaxed);
            // Lost to an eviction: an I/O error, as on any file system that lost data.
            let status = if evicted { Status::Io } else { e.status() };
            st.errors.insert(fid, status);
            if let (Some(owner), Status::DQuot) = (owner, status) {
                drop(st);
                c.writeback.quota_refused(owner);
                st = c.writeback.st.lock();
            }
        }
    }
    if let Some(o) = st.objs.get_mut(&key) {
        o.inflight.retain(|f| !runs.contains(&f.range));
        o.lost.retain(|r| !runs.contains(r));
        if o.is_empty() {
            st.objs.remove(&key);
        }
    }
    drop(st);
    c.add_grant_as(key.0, granted, uuid);
    c.writeback.cv.notify_all();
    if evicted {
        // Only while the client is still the one the OST evicted: a late refusal must not
        // drop what was kept since, as the new client.
        if c.data_locks_on() {
            c.data_evicted(key.0, uuid);
        } else {
            // Without data locks no write was kept under one: there is no count to pass.
            c.writeback.evicted(key.0, 0);
        }
    }
}
