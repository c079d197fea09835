//! The background threads of a served MDT: commits, cross-MDT intents, destroys,
//! lazy access times, and its view of the MGS's configuration and the OSTs' space.

use crate::stopping::sleep_unless;
use nacre_mds::mdt::Mdt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often an MDT retries the cross-MDT operations a crash left pending.
pub const INTENT_RETRY_MS: u64 = 1_000;
/// How often an MDT refreshes its view of the OSTs.
pub const OST_REFRESH_MS: u64 = 5_000;
/// Longest wait of an MDT at the MGS for a configuration change (so a stop is not held up).
pub const CONFIG_WATCH_WAIT_MS: u32 = 1_000;

/// Starts them; they end when `stop` is set.
pub(crate) fn spawn(
    mdt: &Arc<Mdt>,
    stop: &Arc<AtomicBool>,
    commit_interval_ms: u64,
) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    let (s, m) = (stop.clone(), mdt.clone());
    threads.push(
        std::thread::Builder::new()
            .name("mdt-commit".into())
            .spawn(move || {
                let mut durable = nacre_kv::Ticket(0);
                let tick = Duration::from_millis(commit_interval_ms.clamp(10, 60_000));
                loop {
                    let stopping = sleep_unless(&s, tick);
                    match m.commit_pass(durable) {
                        Ok(t) => durable = t,
                        Err(e) => tracing::error!("{}: journal sync failed: {e}", m.label.name()),
                    }
                    if stopping {
                        return;
                    }
                }
            })
            .expect("spawn commit thread"),
    );
    let (s, m) = (stop.clone(), mdt.clone());
    threads.push(
        std::thread::Builder::new()
            .name("mdt-destroy".into())
            .spawn(move || nacre_mds::destroy::run(m, s))
            .expect("spawn destroy thread"),
    );
    // Cross-MDT operations a crash interrupted finish as soon as their peer answers.
    let (s, m) = (stop.clone(), mdt.clone());
    threads.push(
        std::thread::Builder::new()
            .name("mdt-intents".into())
            .spawn(move || loop {
                nacre_mds::dne::recover_pass(&m);
                if sleep_unless(&s, Duration::from_millis(INTENT_RETRY_MS)) {
                    return;
                }
            })
            .expect("spawn intents thread"),
    );
    let (s, m) = (stop.clone(), mdt.clone());
    threads.push(
        std::thread::Builder::new()
            .name("mdt-atime".into())
            .spawn(move || loop {
                let stopping =
                    sleep_unless(&s, Duration::from_millis(nacre_mds::atime::ATIME_FLUSH_MS));
                if let Err(e) = nacre_mds::ops::atime_flush::flush(&m) {
                    tracing::warn!("{}: access times not written: {e}", m.label.name());
                }
                // Idle changelog consumers, and records every consumer cleared.
                if let Err(e) = nacre_mds::changelog::maintain(&m) {
                    tracing::warn!("{}: changelog maintenance: {e}", m.label.name());
                }
                // Migrations whose migrator died.
                if let Err(e) = nacre_mds::relayout::expire(&m) {
                    tracing::warn!("{}: migration leases: {e}", m.label.name());
                }
                if stopping {
                    return;
                }
            })
            .expect("spawn atime thread"),
    );
    let (s, m) = (stop.clone(), mdt.clone());
    threads.push(
        std::thread::Builder::new()
            .name("mdt-osp".into())
            .spawn(move || {
                // The configuration is fetched again as soon as the MGS says it changed (a
                // target registered, a pool changed: `nacre pool` is seen at once), and the
                // OSTs' free space every OST_REFRESH_MS. The waits at the MGS are short so
                // that a stop is not held up. The first refresh (the OSTs' free space, which
                // the start does not wait for) comes at once.
                let mut after = None;
                let mut refreshed: Option<std::time::Instant> = None;
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    let changed = match m.osts.watch(after, CONFIG_WATCH_WAIT_MS) {
                        Ok((seq, changed)) => {
                            after = Some(seq);
                            changed
                        }
                        Err(e) => {
                            tracing::debug!("MGS watch: {e}");
                            if sleep_unless(&s, Duration::from_millis(CONFIG_WATCH_WAIT_MS.into()))
                            {
                                return;
                            }
                            false
                        }
                    };
                    let due = refreshed
                        .is_none_or(|t| t.elapsed() >= Duration::from_millis(OST_REFRESH_MS));
                    if changed || due {
                        if let Err(e) = m.osts.refresh_installing() {
                            tracing::debug!("OST refresh: {e}");
                        }
                        refreshed = Some(std::time::Instant::now());
                    }
                }
            })
            .expect("spawn osp thread"),
    );
    threads
}
