//! Several callers at once, a bounded number: the control socket serves each caller on a
//! thread of its own, at most [`CALLERS_MAX`] at a time (further callers wait in the listen
//! backlog), each with read and write timeouts, so a stalled caller delays no one. `/metrics`
//! (metrics.rs) keeps the same bounds on its HTTP server.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

/// Callers served at once by one endpoint.
pub const CALLERS_MAX: usize = 4;
/// How long a caller may take to send its request or read its answer.
pub const CALLER_TIMEOUT_MS: u64 = 5_000;

/// The callers an endpoint is serving now.
#[derive(Clone, Default)]
pub struct Callers {
    active: Arc<(Mutex<usize>, Condvar)>,
}

impl Callers {
    /// Runs `job` (one caller) on a thread of its own once fewer than [`CALLERS_MAX`] run.
    pub fn serve(&self, name: &str, job: impl FnOnce() + Send + 'static) {
        let (count, freed) = &*self.active;
        {
            let mut n = count.lock();
            while *n >= CALLERS_MAX {
                freed.wait(&mut n);
            }
            *n += 1;
        }
        let active = self.active.clone();
        let done = move || {
            let (count, freed) = &*active;
            *count.lock() -= 1;
            freed.notify_one();
        };
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                job();
                done();
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a {name} thread: {e}");
            let (count, freed) = &*self.active;
            *count.lock() -= 1;
            freed.notify_one();
        }
    }
}

/// Accepts callers from `incoming` on a background thread named `name` and serves each with
/// `serve_one` (at most [`CALLERS_MAX`] at once); a failed caller is logged.
pub fn serve_all<S, I, F>(name: &str, incoming: I, serve_one: F) -> std::io::Result<()>
where
    S: Send + 'static,
    I: Iterator<Item = std::io::Result<S>> + Send + 'static,
    F: Fn(S) -> std::io::Result<()> + Send + Sync + 'static,
{
    let caller = format!("{name}-caller");
    let what = name.to_string();
    let serve_one = Arc::new(serve_one);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let callers = Callers::default();
            for stream in incoming {
                let stream = match stream {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors or memory: wait a little rather than spin.
                        tracing::warn!("{what}: accept failed: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    }
                };
                let (serve_one, what) = (serve_one.clone(), what.clone());
                callers.serve(&caller, move || {
                    if let Err(e) = serve_one(stream) {
                        tracing::debug!("{what} request failed: {e}");
                    }
                });
            }
        })?;
    Ok(())
}
