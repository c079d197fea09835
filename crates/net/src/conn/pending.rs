//! A request in flight ([`PendingReply`]): waiting for its reply, and resending it (same
//! xid, `FLAG_RESEND`) on a new link, another rail or another server of the failover list,
//! until the recovery deadline.

use super::link::{abort_link, Link};
use super::{Connection, MOVED_RETRY_MS};
use crate::queue::OneshotReceiver;
use crate::{NetError, Reply, Request};
use crossbeam_channel::RecvTimeoutError;
use nacre_wire::header::FLAG_RESEND;
use nacre_wire::Header;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request in flight; [`PendingReply::wait`] returns its reply.
pub struct PendingReply {
    pub(super) conn: Arc<Connection>,
    pub(super) header: Header,
    pub(super) request: Request,
    pub(super) rx: OneshotReceiver<Result<Reply, NetError>>,
    /// The rail and link it went out on (None: not sent).
    pub(super) sent_on: Option<(usize, Arc<Link>)>,
}

impl PendingReply {
    /// The request's xid.
    pub fn xid(&self) -> u64 {
        self.header.xid
    }

    /// Waits for the reply. If the connection breaks, reconnects and resends the same xid
    /// (flagged as a resend) until `recovery_timeout_ms` has passed.
    pub fn wait(mut self) -> Result<Reply, NetError> {
        let conn = self.conn.clone();
        let rpc_timeout = Duration::from_millis(conn.config.rpc_timeout_ms);
        let rail_timeout = Duration::from_millis(conn.config.rail_timeout_ms.max(1));
        let recovery = Duration::from_millis(conn.config.recovery_timeout_ms);
        let mut recovery_deadline: Option<Instant> = None;
        let mut sent_at = Instant::now();
        loop {
            // With several rails, wait one rail timeout at a time: a rail that stays silent
            // is declared down, which fails this request over to another rail.
            let multi = conn.rails.lock().len() > 1;
            let waited = sent_at.elapsed();
            let step = if multi {
                rail_timeout.min(rpc_timeout.saturating_sub(waited))
            } else {
                rpc_timeout.saturating_sub(waited)
            };
            match self.rx.recv_timeout(step) {
                Err(RecvTimeoutError::Timeout) if multi && sent_at.elapsed() < rpc_timeout => {
                    if let Some((i, link)) = &self.sent_on {
                        conn.fail_rail(*i, link);
                    }
                    // The aborted link fails the request; resend below.
                    let deadline =
                        *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                    conn.forget(self.header.xid);
                    self.resend_until(deadline)?;
                    sent_at = Instant::now();
                    continue;
                }
                other => match other {
                    Ok(Ok(reply))
                        if reply.status() == nacre_types::Status::NoDev
                            && conn.servers.lock().list.len() > 1 =>
                    {
                        // The server does not serve the target (any more): it moved to a
                        // partner of the failover pair. Try the next server.
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        if Instant::now() >= deadline {
                            return Ok(reply);
                        }
                        conn.fail_over();
                        std::thread::sleep(Duration::from_millis(MOVED_RETRY_MS));
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                    Ok(Ok(reply)) => return Ok(reply),
                    Ok(Err(NetError::Disconnected(_))) | Err(RecvTimeoutError::Disconnected) => {
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                    Ok(Err(e)) => return Err(e),
                    Err(RecvTimeoutError::Timeout) => {
                        // No answer in time: the request or its reply may be lost. As Lustre's
                        // clients do, drop the link and resend on a new one (the server
                        // answers a request it already ran from its saved reply), until the
                        // recovery deadline.
                        conn.forget(self.header.xid);
                        let deadline =
                            *recovery_deadline.get_or_insert_with(|| Instant::now() + recovery);
                        if Instant::now() >= deadline {
                            return Err(NetError::TimedOut {
                                nid: conn.nid().to_string(),
                                timeout_ms: conn.config.rpc_timeout_ms,
                            });
                        }
                        tracing::info!(
                            "{}: no reply to xid {} in {} ms: reconnecting to resend",
                            conn.nid(),
                            self.header.xid,
                            conn.config.rpc_timeout_ms
                        );
                        if let Some((_, link)) = &self.sent_on {
                            if let Link::Tcp(tcp) = link.as_ref() {
                                abort_link(tcp);
                            }
                        }
                        self.resend_until(deadline)?;
                        sent_at = Instant::now();
                    }
                },
            }
        }
    }

    fn resend_until(&mut self, deadline: Instant) -> Result<(), NetError> {
        self.header.flags |= FLAG_RESEND;
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.conn.send(&self.header, &self.request, None, None) {
                Ok((rx, on)) => {
                    self.rx = rx;
                    self.sent_on = Some(on);
                    return Ok(());
                }
                Err(e @ NetError::Refused { .. }) => return Err(e),
                Err(e) if Instant::now() >= deadline => {
                    return Err(NetError::Unreachable {
                        nid: self.conn.nid().to_string(),
                        cause: e.to_string(),
                    })
                }
                Err(_) => {
                    // The server cannot be reached: its partner may have the target now.
                    self.conn.fail_over();
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(1000));
                }
            }
        }
    }
}
