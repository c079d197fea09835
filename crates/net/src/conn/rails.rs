//! Multi-rail: a connection's rails (one link per NID of the server), their health and
//! recovery, discovery of the server's NIDs, and the choice of a live link per request.

use super::link::{abort_link, Link};
use super::{import_state, Connection};
use crate::{NetError, Request};
use nacre_types::Nid;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most rails (NIDs) one connection uses.
pub const RAILS_MAX: usize = 8;
/// How often a down rail is retried.
pub const RAIL_RETRY_MS: u64 = 500;
/// Connect timeout when (re)linking a secondary rail.
pub const RAIL_CONNECT_TIMEOUT_MS: u64 = 1_000;

/// One NID of the peer, its state and the link to it.
pub(super) struct Rail {
    pub(super) info: RailInfo,
    pub(super) link: Option<Arc<Link>>,
}

impl Rail {
    pub(super) fn new(nid: Nid, discovered: bool) -> Rail {
        Rail {
            info: RailInfo {
                nid,
                healthy: true,
                discovered,
                rpcs: 0,
                bytes: 0,
                failures: 0,
            },
            link: None,
        }
    }
}

/// What `get_param peers` shows of one rail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailInfo {
    /// The rail's NID.
    pub nid: Nid,
    /// Usable now (false while down: a recovery thread is relinking it).
    pub healthy: bool,
    /// Learnt by discovery.
    pub discovered: bool,
    /// Requests handed to it.
    pub rpcs: u64,
    /// Bulk bytes sent on it.
    pub bytes: u64,
    /// Times it was declared down.
    pub failures: u64,
}

impl Connection {
    /// Drops every link and rail, and starts over with one rail to `nid`.
    pub(super) fn switch_rails(&self, nid: Nid) {
        let mut rails = self.rails.lock();
        let from = rails.first().map(|r| r.info.nid);
        for r in rails.iter_mut() {
            if let Some(Link::Tcp(tcp)) = r.link.take().as_deref() {
                abort_link(tcp);
            }
        }
        *rails = vec![Rail::new(nid, false)];
        self.discovered.store(false, Ordering::Release);
        drop(rails);
        if let Some(from) = from.filter(|f| *f != nid) {
            tracing::info!("failing over from {from} to {nid}");
        }
        self.import.lock().failovers += 1;
        self.note_state(import_state::DISCONN);
    }

    /// The rails to the peer and their state.
    pub fn rails(&self) -> Vec<RailInfo> {
        self.rails.lock().iter().map(|r| r.info.clone()).collect()
    }

    /// Asks the peer for its NIDs (once) and adds the unknown ones as rails. Peers that do
    /// not answer discovery, and in-process peers, keep one rail.
    pub fn discover(&self) {
        if !self.config.discovery || self.discovered.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let local = matches!(self.rails.lock()[0].link.as_deref(), Some(Link::Local(_)));
        if local {
            return;
        }
        let req = Request {
            opcode: nacre_wire::OP_DISCOVER,
            target: 0,
            body: Vec::new(),
            bulk: None,
            inline: true,
        };
        let nids: Vec<Nid> = match me.call(req) {
            Ok(r) if r.status() == nacre_types::Status::Ok => {
                nacre_wire::decode_body(&r.body).unwrap_or_default()
            }
            _ => return,
        };
        let mut rails = self.rails.lock();
        for nid in nids {
            if rails.len() >= RAILS_MAX {
                break;
            }
            if rails.iter().any(|r| r.info.nid == nid) {
                continue;
            }
            tracing::debug!("{}: discovered rail {nid}", self.nid());
            rails.push(Rail::new(nid, true));
        }
    }

    /// A live link on a healthy rail: round-robin over the rails when there are several.
    /// With `charge`, the rail is charged one request of that many bulk bytes.
    pub(super) fn pick_link(&self, charge: Option<u64>) -> Result<(usize, Arc<Link>), NetError> {
        let mut rails = self.rails.lock();
        let n = rails.len();
        let start = if n > 1 {
            self.rr.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let timeout_of = |i: usize| {
            if i == 0 {
                self.config.connect_timeout_ms
            } else {
                self.config.connect_timeout_ms.min(RAIL_CONNECT_TIMEOUT_MS)
            }
        };
        let mut last_err = None;
        for k in 0..n {
            let i = (start + k) % n;
            if !rails[i].info.healthy {
                continue;
            }
            let had_link = rails[i].link.is_some();
            let live = rails[i].link.clone().filter(|l| l.alive());
            if live.is_none() && had_link {
                // The link broke since the last request.
                self.note_state(import_state::DISCONN);
            }
            let link = match live {
                Some(link) => link,
                None => match self.open_link(rails[i].info.nid, timeout_of(i)) {
                    Ok(link) => {
                        let link = Arc::new(link);
                        rails[i].link = Some(link.clone());
                        self.note_state(import_state::FULL);
                        link
                    }
                    Err(e) => {
                        self.note_state(import_state::DISCONN);
                        if n > 1 {
                            self.rail_down(&mut rails, i);
                        }
                        last_err = Some(e);
                        continue;
                    }
                },
            };
            if let Some(bytes) = charge {
                rails[i].info.rpcs += 1;
                rails[i].info.bytes += bytes;
            }
            return Ok((i, link));
        }
        Err(last_err.unwrap_or_else(|| NetError::Disconnected(self.nid().to_string())))
    }

    /// Marks rail `i` down and starts a thread that relinks it.
    pub(super) fn rail_down(&self, rails: &mut [Rail], i: usize) {
        if !rails[i].info.healthy {
            return;
        }
        rails[i].info.healthy = false;
        rails[i].info.failures += 1;
        if let Some(Link::Tcp(tcp)) = rails[i].link.take().as_deref() {
            abort_link(tcp);
        }
        tracing::info!("{}: rail {} is down", self.nid(), rails[i].info.nid);
        let weak = self.me.clone();
        let nid = rails[i].info.nid;
        let _ = std::thread::Builder::new()
            .name("rail-recovery".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(RAIL_RETRY_MS));
                let Some(conn) = weak.upgrade() else { return };
                let timeout = conn.config.connect_timeout_ms.min(RAIL_CONNECT_TIMEOUT_MS);
                if let Ok(link) = conn.open_link(nid, timeout) {
                    let mut rails = conn.rails.lock();
                    if let Some(r) = rails.iter_mut().find(|r| r.info.nid == nid) {
                        r.link = Some(Arc::new(link));
                        r.info.healthy = true;
                        tracing::info!("{}: rail {nid} is back", conn.nid());
                    }
                    return;
                }
            });
    }

    /// Declares the rail `link` belongs to down (it did not answer in time), if it is still
    /// that rail's link and the connection has another rail to use.
    pub(super) fn fail_rail(&self, i: usize, link: &Arc<Link>) {
        let mut rails = self.rails.lock();
        if rails.len() < 2 {
            return;
        }
        let same = rails
            .get(i)
            .and_then(|r| r.link.as_ref())
            .is_some_and(|l| Arc::ptr_eq(l, link));
        if same {
            self.rail_down(&mut rails, i);
        }
    }
}
