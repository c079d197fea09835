//! Metadata locks on the client: taking them (`enable_locks`), their counters and
//! LRU bound, and what replies under them let the kernel cache ([`Cached`]).

use crate::*;
use nacre_types::Fid;
use std::sync::Arc;

/// What the kernel may keep of an answer, by the locks this client holds on its inode:
/// the entry (name → inode) while a `LOOKUP` lock covers it, the attributes while an
/// `UPDATE` lock does. Both are invalidated through the lock sink when the lock goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cached {
    /// The name → inode binding is covered.
    pub entry: bool,
    /// The attributes (a regular file's size included) are covered.
    pub attr: bool,
}
impl Client {
    /// How long a lock poll waits at the MDT: well within the RPC and rail timeouts, so a
    /// parked poll is never taken for a lost request.
    pub(crate) fn lock_poll_wait_ms(&self) -> u64 {
        (self.net.rpc_timeout_ms.min(self.net.rail_timeout_ms) / 2).clamp(100, 30_000)
    }

    /// From now on this client takes metadata locks (the FUSE mount does; a library client
    /// that does not cache need not): every MDT is polled for callbacks, and `sink` is told
    /// of every lock that goes, before it is cancelled, to have the kernel forget what it
    /// covered. Replies then say what is [`Cached`].
    pub fn enable_locks(&self, sink: mdc::LockSink) {
        // A directory stops being known completely before the kernel hears of it; a file's
        // layout is let go of (its I/O done, its kept writes written) before its LAYOUT
        // lock is cancelled (layouts.rs), and its kept open closed before its OPEN lock
        // is (opencache.rs).
        let complete = self.complete.clone();
        let me = self.me.clone();
        let sink: mdc::LockSink = Arc::new(move |revoked| {
            // The files answered under a delegation that goes: the kernel forgets their
            // entries, attributes and pages with it (as if each had gone with an UPDATE
            // lock and a DOM one: bytes written into them went with their creates).
            let mut answered_under = Vec::new();
            for r in revoked {
                // What was answered under a delegation is sent before it goes.
                if r.lock.bits & nacre_ldlm::msg::DELEGATION != 0 {
                    if let Some(client) = me.upgrade() {
                        let dir = r.lock.fid;
                        let covered = client.delegation_gone(dir, r.lost);
                        answered_under.extend(covered.into_iter().map(|(fid, name)| {
                            nacre_ldlm::client::Revoked {
                                lock: nacre_ldlm::msg::LockRef {
                                    handle: 0,
                                    fid,
                                    bits: nacre_ldlm::msg::UPDATE | nacre_ldlm::msg::DOM,
                                },
                                names: vec![(dir, name)],
                                lost: r.lost,
                            }
                        }));
                    }
                }
                if r.lock.bits & nacre_ldlm::msg::UPDATE != 0 {
                    complete.forget(r.lock.fid);
                }
                if r.lock.bits & nacre_ldlm::msg::LAYOUT != 0 {
                    if let Some(client) = me.upgrade() {
                        client.layout_called_back(r.lock.fid);
                    }
                }
                if r.lock.bits & nacre_ldlm::msg::OPEN != 0 {
                    if let Some(client) = me.upgrade() {
                        client.open_lock_gone(r.lock.fid);
                    }
                }
                if r.lock.bits & nacre_ldlm::msg::DOM != 0 {
                    if let Some(client) = me.upgrade() {
                        client.dom_lock_gone(r.lock.fid);
                    }
                }
            }
            if answered_under.is_empty() {
                sink(revoked)
            } else {
                answered_under.extend_from_slice(revoked);
                sink(&answered_under)
            }
        });
        if self.lock_sink.set(sink.clone()).is_err() {
            return;
        }
        let wait_ms = self.lock_poll_wait_ms();
        for m in self.mdcs.read().values() {
            m.start_lock_callbacks(sink.clone(), wait_ms);
        }
    }

    /// Notes the outcome of a change that puts `name` in `parent`: on success the name is
    /// there; on an error it may or may not be, so the directory is no longer known
    /// completely.
    pub(crate) fn after_add<T>(&self, parent: Fid, name: &[u8], r: Result<T>) -> Result<T> {
        match &r {
            Ok(_) => self.complete.added(parent, name),
            Err(_) => self.complete.forget(parent),
        }
        r
    }

    /// `GETATTR`s of directories answered from attributes kept under their `UPDATE` lock
    /// (crate::dirattrs).
    pub fn dir_attr_hits(&self) -> u64 {
        self.mdcs
            .read()
            .values()
            .map(|m| m.dir_attrs.hits.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Directories this client knows completely now (their lookups of absent names are
    /// answered without the MDT).
    pub fn complete_dirs(&self) -> usize {
        self.complete.len()
    }

    /// Lock counters of every MDT this client reached: (MDT index, locks held, LRU size,
    /// grants, callbacks, LRU cancels).
    pub fn lock_stats(&self) -> Vec<(u32, usize, usize, u64, u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut out: Vec<_> = self
            .mdcs
            .read()
            .iter()
            .map(|(i, m)| {
                let l = &m.locks;
                (
                    *i,
                    l.count(),
                    l.lru_size.load(Relaxed),
                    l.stats.grants.load(Relaxed),
                    l.stats.callbacks.load(Relaxed),
                    l.stats.lru_cancels.load(Relaxed),
                )
            })
            .collect();
        out.sort_unstable_by_key(|x| x.0);
        out
    }

    /// Sets the LRU bound of MDT `index`'s locks (`ldlm.namespaces.*.lru_size`).
    pub fn set_lru_size(&self, index: u32, n: usize) -> Result<()> {
        self.mdc(index)?
            .locks
            .lru_size
            .store(n, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}
