//! Administration and state: usage, the namespace checker, disconnecting, import and
//! connection views.

use crate::*;
use nacre_net::Connection;
use nacre_types::{Nid, StatFs, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use nacre_wire::mgs::TargetInfo;
use std::sync::Arc;
use std::time::Duration;

/// What ids use on one target ([`Client::quota_usage`]).
#[derive(Clone, Debug)]
pub struct QuotaTargetUsage {
    /// Target name (`fs-MDT0000`).
    pub name: String,
    /// MDT or OST.
    pub kind: nacre_types::TargetKind,
    /// Index.
    pub index: u32,
    /// Bytes of each id asked for, in order: an OST's objects, an MDT's data on the MDT.
    pub bytes: Vec<u64>,
    /// Inodes of each id asked for, in order (an MDT's; zeros on an OST).
    pub inodes: Vec<u64>,
}

impl Client {
    /// Usage of every target, MDTs first.
    pub fn df(&self) -> Result<Vec<TargetUsage>> {
        // Usage is asked for rarely: take the occasion to learn of new targets.
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let fs = self.fs_config();
        let mut out = Vec::new();
        for t in &fs.mdts {
            if let MdsReply::StatFs(statfs) = self.mdc(t.index)?.call(MdsOp::StatFs)? {
                out.push(TargetUsage {
                    name: t.name(),
                    statfs,
                });
            }
        }
        for t in &fs.osts {
            out.push(TargetUsage {
                name: t.name(),
                statfs: osc::statfs(self, t.index)?,
            });
        }
        Ok(out)
    }

    /// What each of `ids` uses on every target (quotas): inodes and bytes of data on the MDT
    /// on the MDTs, bytes on the OSTs, MDTs first.
    pub fn quota_usage(&self, ids: &[nacre_types::QuotaId]) -> Result<Vec<QuotaTargetUsage>> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let fs = self.fs_config();
        let mut out = Vec::new();
        for t in &fs.mdts {
            let op = MdsOp::QuotaUsage { ids: ids.to_vec() };
            match self.mdc(t.index)?.call(op)? {
                MdsReply::QuotaUsage { inodes, dom_bytes }
                    if inodes.len() == ids.len() && dom_bytes.len() == ids.len() =>
                {
                    out.push(QuotaTargetUsage {
                        name: t.name(),
                        kind: t.kind,
                        index: t.index,
                        bytes: dom_bytes,
                        inodes,
                    })
                }
                _ => return Err(Status::Proto.into()),
            }
        }
        for t in &fs.osts {
            out.push(QuotaTargetUsage {
                name: t.name(),
                kind: t.kind,
                index: t.index,
                bytes: osc::quota_usage(self, t.index, ids)?,
                inodes: vec![0; ids.len()],
            });
        }
        Ok(out)
    }

    /// Checks every target's quota usage against a recount of what it holds (`nacre lfsck
    /// --quota`; root only), setting it to the count with `repair`: (target name, what it
    /// found), MDTs first, each MDT's inodes then its bytes of data on the MDT (named
    /// `fs-MDT0000 (data on the MDT)`).
    pub fn lfsck_quota(&self, repair: bool) -> Result<Vec<(String, nacre_types::QuotaCheck)>> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let fs = self.fs_config();
        let mut out = Vec::new();
        for t in &fs.mdts {
            match self.mdc(t.index)?.call(MdsOp::QuotaCheck { repair })? {
                MdsReply::QuotaCheck { inodes, dom_bytes } => {
                    out.push((t.name(), inodes));
                    out.push((format!("{} (data on the MDT)", t.name()), dom_bytes));
                }
                _ => return Err(Status::Proto.into()),
            }
        }
        for t in &fs.osts {
            out.push((t.name(), osc::quota_check(self, t.index, repair)?));
        }
        Ok(out)
    }

    /// How full pool `pool` is: its OSTs' used space, less what the MDTs' queued destroys
    /// will free (docs/pools.md), against their total. `ENOENT` for a pool that does not
    /// exist; an OST of the pool that is not registered yet counts for nothing.
    pub fn pool_fill(&self, pool: nacre_types::PoolName) -> Result<PoolFill> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let fs = self.fs_config();
        let members = fs
            .pools
            .iter()
            .find(|p| p.name == pool)
            .map(|p| p.osts.clone())
            .ok_or(Status::NoEnt)?;
        let mut pending: HashMap<u32, u64> = HashMap::new();
        for t in &fs.mdts {
            match self.mdc(t.index)?.call(MdsOp::DestroyPending)? {
                MdsReply::DestroyPending(v) => {
                    for (ost, bytes) in v {
                        *pending.entry(ost).or_default() += bytes;
                    }
                }
                _ => return Err(Status::Proto.into()),
            }
        }
        let mut fill = PoolFill::default();
        for t in fs.osts.iter().filter(|t| members.contains(&t.index)) {
            let s = osc::statfs(self, t.index)?;
            let used = s.bytes_total.saturating_sub(s.bytes_avail);
            let freeing = pending.get(&t.index).copied().unwrap_or(0).min(used);
            fill.bytes_total += s.bytes_total;
            fill.bytes_used += used - freeing;
            fill.bytes_freeing += freeing;
            fill.osts += 1;
        }
        Ok(fill)
    }

    /// Checks the namespace across every MDT (`nacre lfsck --namespace`): reads their inodes
    /// and directory entries page by page and reports inconsistencies. An unreachable MDT is
    /// an error, not an empty one.
    pub fn lfsck_namespace(&self) -> Result<lfsck::Report> {
        if let Err(e) = self.refresh_config() {
            tracing::debug!("configuration refresh: {e}");
        }
        let mut inodes = Vec::new();
        let mut dirents = Vec::new();
        for t in self.fs_config().mdts {
            let mdc = self.mdc(t.index)?;
            let mut after = None;
            loop {
                match mdc.call(MdsOp::ScanInodes { after, count: 4096 })? {
                    MdsReply::Inodes { inodes: page, eof } => {
                        after = page.last().map(|i| i.fid);
                        inodes.extend(page);
                        if eof || after.is_none() {
                            break;
                        }
                    }
                    _ => return Err(Status::Proto.into()),
                }
            }
            let mut after = None;
            loop {
                match mdc.call(MdsOp::ScanDirents { after, count: 4096 })? {
                    MdsReply::Dirents { dirents: page, eof } => {
                        after = page.last().map(|d| (d.parent, d.name.clone()));
                        dirents.extend(page);
                        if eof || after.is_none() {
                            break;
                        }
                    }
                    _ => return Err(Status::Proto.into()),
                }
            }
        }
        Ok(lfsck::check(&inodes, &dirents))
    }

    /// File system totals: space from the OSTs, inodes from the MDTs.
    pub fn statfs(&self) -> Result<StatFs> {
        let mut total = StatFs {
            block_size: 4096,
            ..StatFs::default()
        };
        for t in self.df()? {
            if t.name.contains("-MDT") {
                total.files_total += t.statfs.files_total;
                total.files_free += t.statfs.files_free;
            } else {
                total.bytes_total += t.statfs.bytes_total;
                total.bytes_free += t.statfs.bytes_free;
                total.bytes_avail += t.statfs.bytes_avail;
            }
        }
        Ok(total)
    }

    /// RPC statistics of the connection to OST `index` (`osc.*.rpc_stats`).
    pub fn rpc_stats(&self, index: u32) -> Arc<rpc_stats::OscRpcStats> {
        if let Some(s) = self.rpc_stats.read().get(&index) {
            return s.clone();
        }
        self.rpc_stats.write().entry(index).or_default().clone()
    }

    /// Tells every MDT this client used that it is going away (unmount), so they release
    /// its opens now rather than evict it later. Waits at most `wait` for the answers (an
    /// MDT that is down simply evicts the client later).
    pub fn disconnect(&self, wait: Duration) {
        // Creates answered here are sent before anything goes (crate::delegated).
        if let Err(e) = self.flush_delegated_all() {
            tracing::error!("sending delegated creates at disconnect: {e}");
        }
        // Data locks go back first (the OSTs then hold nothing for this client).
        let (data_tx, data_rx) = std::sync::mpsc::channel();
        if let Some(me) = self.me.upgrade() {
            let spawned = std::thread::Builder::new()
                .name("disconnect".into())
                .spawn(move || {
                    me.cancel_all_data_locks();
                    let _ = data_tx.send(());
                });
            if spawned.is_err() {
                tracing::warn!("cannot start a disconnect thread");
            }
        }
        let mdcs: Vec<_> = self.mdcs.read().values().cloned().collect();
        for m in &mdcs {
            m.stop_lock_callbacks();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        for m in &mdcs {
            let (m, tx) = (m.clone(), tx.clone());
            let spawned = std::thread::Builder::new()
                .name("disconnect".into())
                .spawn(move || {
                    let _ = tx.send(m.call(MdsOp::Disconnect));
                });
            if spawned.is_err() {
                tracing::warn!("cannot start a disconnect thread");
            }
        }
        drop(tx);
        let deadline = std::time::Instant::now() + wait;
        for _ in &mdcs {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::info!("disconnect: {e}"),
                Err(_) => {
                    tracing::info!("disconnect: an MDT did not answer in {wait:?}");
                    break;
                }
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if data_rx.recv_timeout(left).is_err() {
            tracing::info!("disconnect: an OST did not take its locks back in {wait:?}");
        }
    }

    /// `*.import` of the connection to `target` (`MDT0000`, `OST0001`, …; Lustre's
    /// import file): state, server, connections made, for an MDT this client's uuid there
    /// and the evictions it survived, and the recent state changes.
    pub fn import(&self, target: &str) -> String {
        let conn = self
            .connections()
            .into_iter()
            .find(|(name, _)| name == target)
            .map(|(_, c)| c);
        let mut s = format!("import:\n    target: {}-{target}\n", self.fsname);
        let Some(conn) = conn else {
            s += "    state: NEW\n    connects: 0";
            return s;
        };
        let st = conn.import_status();
        let servers: Vec<String> = conn.servers().iter().map(Nid::to_string).collect();
        s += &format!(
            "    state: {}\n    nid: {}\n    failover_nids: [{}]\n    connects: {}\n    failovers: {}\n    restarts_heard: {}\n",
            st.state,
            conn.nid(),
            servers.join(", "),
            st.connects,
            st.failovers,
            st.restarts_heard
        );
        let mdc = target
            .strip_prefix("MDT")
            .and_then(|i| u32::from_str_radix(i, 16).ok())
            .and_then(|i| self.mdcs.read().get(&i).cloned());
        if let Some(m) = mdc {
            let r = &m.replay_stats;
            s += &format!(
                "    client_uuid: {}\n    evictions: {}\n    replay_pending: {}\n    recoveries: {}\n    replayed: {}\n    replay_lost: {}\n",
                uuid::Uuid::from_bytes(m.uuid()),
                m.incarnation(),
                m.replay_pending(),
                r.recoveries.load(std::sync::atomic::Ordering::Relaxed),
                r.replayed.load(std::sync::atomic::Ordering::Relaxed),
                r.lost.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        s += "    state_history:\n";
        for (at, state) in st.history {
            let t = at
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            s += &format!("     - [ {t:.3}, {state} ]\n");
        }
        s.trim_end().to_string()
    }

    /// The OSTs of the file system.
    pub fn osts(&self) -> Vec<TargetInfo> {
        self.fs_config().osts
    }

    /// Every server connection of this client, named `MGS`, `MDT0000`, `OST0001`, ….
    pub fn connections(&self) -> Vec<(String, Arc<Connection>)> {
        let mut out = vec![("MGS".to_string(), self.mgs.clone())];
        let mut mdcs: Vec<(u32, Arc<Connection>)> = self
            .mdcs
            .read()
            .iter()
            .map(|(i, m)| (*i, m.conn().clone()))
            .collect();
        mdcs.sort_by_key(|(i, _)| *i);
        out.extend(mdcs.into_iter().map(|(i, c)| (format!("MDT{i:04x}"), c)));
        let mut oscs: Vec<(u32, Arc<Connection>)> = self
            .oscs
            .read()
            .iter()
            .map(|(i, c)| (*i, c.clone()))
            .collect();
        oscs.sort_by_key(|(i, _)| *i);
        out.extend(oscs.into_iter().map(|(i, c)| (format!("OST{i:04x}"), c)));
        out
    }
}

/// How full a pool is ([`Client::pool_fill`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolFill {
    /// Its OSTs' total space.
    pub bytes_total: u64,
    /// Used (total less available to users), less what queued destroys will free.
    pub bytes_used: u64,
    /// What queued destroys will free (not in `bytes_used`).
    pub bytes_freeing: u64,
    /// Its OSTs registered.
    pub osts: u32,
}

impl PoolFill {
    /// Used space in percent of the total (0 for a pool of no space).
    pub fn percent(&self) -> f64 {
        match self.bytes_total {
            0 => 0.0,
            t => self.bytes_used as f64 * 100.0 / t as f64,
        }
    }
}
