//! The background threads' stop flag: a sleep that ends early when the process stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Sleeps for `period` in short steps; returns true as soon as `stop` is set.
pub fn sleep_unless(stop: &AtomicBool, period: Duration) -> bool {
    let step = Duration::from_millis(50);
    let mut slept = Duration::ZERO;
    while slept < period {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        std::thread::sleep(step);
        slept += step;
    }
    stop.load(Ordering::Relaxed)
}
