//! Job identifiers: which job an RPC works for, for per-job statistics (Lustre's jobstats).
//!
//! The client edge (the FUSE mount) learns the job of the calling process and sets it as the
//! current thread's job id; every RPC the thread sends carries it.

use std::cell::RefCell;

/// Longest job id carried (Lustre's LUSTRE_JOBID_SIZE is 32).
pub const JOBID_BYTES_MAX: usize = 32;

thread_local! {
    static CURRENT: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Makes `jobid` (truncated to [`JOBID_BYTES_MAX`] at a character boundary) the job of the RPCs
/// this thread sends next.
pub fn set_current(jobid: &str) {
    let clean = clamp(jobid);
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        c.clear();
        c.push_str(clean);
    });
}

/// The job id of this thread ("" if none).
pub fn current() -> String {
    CURRENT.with(|c| c.borrow().clone())
}

/// `jobid` cut to at most [`JOBID_BYTES_MAX`] bytes at a character boundary.
pub fn clamp(jobid: &str) -> &str {
    let mut end = jobid.len().min(JOBID_BYTES_MAX);
    while !jobid.is_char_boundary(end) {
        end -= 1;
    }
    &jobid[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clamp() {
        set_current("job42");
        assert_eq!(current(), "job42");
        set_current(&"é".repeat(40));
        assert!(current().len() <= JOBID_BYTES_MAX);
        assert_eq!(clamp("abc"), "abc");
    }
}
