//! A network thread's loop: waits for readiness, takes the connections handed to it, gives
//! each ready connection its turn, retries the ones waiting for the budget, drops the ones
//! past their frame deadline, and closes connections.

use super::parse::Parse;
use super::{Conn, End, Thread, ON_NETWORK_THREAD, WAKE};
use crate::limits::{Budget, NetLimits, NetStats};
use crate::sec::Level;
use rustix::event::{epoll, Timespec};
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A network thread: waits for readiness, reads, parses, delivers, enforces deadlines.
pub(super) fn run(
    thread: &Thread,
    budget: &Arc<Budget>,
    stats: &Arc<NetStats>,
    stopping: &AtomicBool,
    limits: NetLimits,
) {
    ON_NETWORK_THREAD.with(|c| c.set(true));
    let mut conns: HashMap<u64, Conn> = HashMap::new();
    let mut next_token = 0u64;
    let mut events = Vec::with_capacity(256);
    // Connections whose turn ended with more to do: served again before the next wait.
    let mut again: Vec<u64> = Vec::new();
    let frame_timeout = Duration::from_millis(limits.frame_timeout_ms.max(1));
    while !stopping.load(Ordering::SeqCst) {
        // Block until something happens, waking only to enforce a deadline or retry the
        // budget: an idle server's network threads sleep.
        let paused = conns.values().any(|c| c.paused);
        let timeout = match conns.values().filter_map(|c| c.frame_started).min() {
            _ if !again.is_empty() => Some(Duration::ZERO),
            _ if paused => Some(Duration::from_millis(10)),
            Some(t) => Some((t + frame_timeout).saturating_duration_since(Instant::now())),
            None => None,
        };
        let ts = timeout.map(|d| Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: match d.is_zero() {
                true => 0,
                false => i64::from(d.subsec_nanos()).max(1_000_000),
            },
        });
        events.clear();
        if let Err(e) = epoll::wait(
            &thread.epoll,
            rustix::buffer::spare_capacity(&mut events),
            ts.as_ref(),
        ) {
            if e != rustix::io::Errno::INTR {
                tracing::error!("epoll wait failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        for ev in events.drain(..) {
            let (token, flags) = (ev.data.u64(), { ev.flags });
            if token == WAKE {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(&thread.wake, &mut b);
                for nc in thread.incoming.lock().drain(..) {
                    next_token += 1;
                    if let Err(e) = epoll::add(
                        &thread.epoll,
                        &nc.stream,
                        epoll::EventData::new_u64(next_token),
                        epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
                    ) {
                        tracing::warn!("{}: cannot watch the connection: {e}", nc.peer);
                        stats.conns_open.fetch_sub(1, Ordering::Relaxed);
                        continue;
                    }
                    conns.insert(
                        next_token,
                        Conn {
                            token: next_token,
                            stream: nc.stream,
                            peer: nc.peer,
                            bulk_len_max: nc.bulk_len_max,
                            sink: nc.sink,
                            // Level none protects no frame: nothing to check after the handshake.
                            opener: nc.opener.filter(|o| o.level() != Level::None),
                            staging: Vec::new(),
                            start: 0,
                            end: 0,
                            parse: Parse::Header,
                            frame_started: None,
                            paused: false,
                            drained: false,
                        },
                    );
                }
                continue;
            }
            let Some(c) = conns.get_mut(&token) else {
                continue;
            };
            if c.paused {
                // Nothing is read while waiting for the budget; a peer that hung up goes.
                let gone =
                    epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR;
                if flags.intersects(gone) {
                    let c = conns.remove(&token).expect("connection");
                    close(thread, c, End::Closed, stats);
                }
                continue;
            }
            if step(thread, &mut conns, token, budget, stats) {
                again.push(token);
            }
        }
        for token in std::mem::take(&mut again) {
            let busy = conns.get(&token).is_some_and(|c| !c.paused);
            if busy && step(thread, &mut conns, token, budget, stats) {
                again.push(token);
            }
        }
        retry_paused(thread, &mut conns, budget, stats);
        expire(thread, &mut conns, frame_timeout, stats);
    }
    for (_, c) in conns.drain() {
        close(thread, c, End::Closed, stats);
    }
}

/// Connections waiting for the budget try again (and read on if they got it).
fn retry_paused(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    budget: &Arc<Budget>,
    stats: &Arc<NetStats>,
) {
    let waiting: Vec<u64> = conns
        .iter()
        .filter(|(_, c)| c.paused)
        .map(|(t, _)| *t)
        .collect();
    for token in waiting {
        step(thread, conns, token, budget, stats);
    }
}

/// Reads and parses what connection `token` has; watches it for reading only while it is
/// not waiting for the budget (level-triggered readiness of unread data would spin). True
/// if its turn ended with more to do (bytes may already be staged, which no readiness event
/// will announce).
fn step(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    token: u64,
    budget: &Arc<Budget>,
    stats: &Arc<NetStats>,
) -> bool {
    let c = conns.get_mut(&token).expect("connection");
    let was_paused = c.paused;
    match c.advance(budget, stats) {
        Ok(more) if c.paused != was_paused => {
            let flags = match c.paused {
                true => epoll::EventFlags::RDHUP,
                false => epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
            };
            let data = epoll::EventData::new_u64(c.token);
            if let Err(e) = epoll::modify(&thread.epoll, &c.stream, data, flags) {
                let c = conns.remove(&token).expect("connection");
                close(thread, c, End::Bad(format!("cannot watch: {e}")), stats);
                return false;
            }
            more
        }
        Ok(more) => more,
        Err(end) => {
            let c = conns.remove(&token).expect("connection");
            close(thread, c, end, stats);
            false
        }
    }
}

/// Drops connections whose frame in progress is past its deadline.
fn expire(
    thread: &Thread,
    conns: &mut HashMap<u64, Conn>,
    frame_timeout: Duration,
    stats: &NetStats,
) {
    let now = Instant::now();
    let late: Vec<u64> = conns
        .iter()
        .filter(|(_, c)| !c.paused && c.frame_started.is_some_and(|t| now >= t + frame_timeout))
        .map(|(t, _)| *t)
        .collect();
    for token in late {
        let c = conns.remove(&token).expect("connection");
        stats.frames_timed_out.fetch_add(1, Ordering::Relaxed);
        let why = format!(
            "frame not complete {} ms after its first byte",
            frame_timeout.as_millis()
        );
        close(thread, c, End::Bad(why), stats);
    }
}

fn close(thread: &Thread, mut c: Conn, end: End, stats: &NetStats) {
    let _ = epoll::delete(&thread.epoll, c.stream.as_fd());
    let _ = c.stream.shutdown(std::net::Shutdown::Both);
    let cause = match end {
        End::Closed => "closed by peer".to_string(),
        End::Bad(why) => {
            if !why.starts_with("frame not complete") {
                stats.frames_bad.fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!("{}: {why}; dropping the connection", c.peer);
            why
        }
        End::Unauthentic(why) => {
            stats.frames_unauthentic.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("{}: {why}; dropping the connection", c.peer);
            why
        }
    };
    stats.conns_open.fetch_sub(1, Ordering::Relaxed);
    c.sink.closed(&cause);
}
