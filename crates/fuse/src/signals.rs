//! Whether a process waiting in a FUSE request was signalled. The FUSE layer this mount is
//! built on does not pass the kernel's `FUSE_INTERRUPT` on (it answers `ENOSYS`, and the
//! kernel then waits for a request already read without letting even `SIGKILL` through),
//! so a request that may wait for long (a byte-range lock held on another mount) asks the
//! kernel instead whether its caller has a signal pending, and gives up with `EINTR`.

/// Signal numbers are bits `1 << (n - 1)` of the masks in `/proc/TID/status`.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// True if thread `tid` (a FUSE request's caller) has a signal pending that it neither
/// blocks nor ignores — or is gone. Reads `/proc/TID/status` (no exec lock is taken, so
/// this cannot wait on the caller).
pub fn pending(tid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{tid}/status")) {
        Ok(text) => pending_in(&text),
        Err(_) => true,
    }
}

/// [`pending`] on the text of a `status` file.
pub fn pending_in(status: &str) -> bool {
    let mask = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0)
    };
    let pending = mask("SigPnd:") | mask("ShdPnd:");
    let wanted = pending & !mask("SigBlk:") & !mask("SigIgn:");
    wanted != 0 || pending & SIGKILL_BIT != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_signals_count_unless_blocked_or_ignored() {
        let status = |pnd: &str, shd: &str, blk: &str, ign: &str| {
            format!("Name:\tx\nSigQ:\t0/1\nSigPnd:\t{pnd}\nShdPnd:\t{shd}\nSigBlk:\t{blk}\nSigIgn:\t{ign}\n")
        };
        let zero = "0000000000000000";
        assert!(!pending_in(&status(zero, zero, zero, zero)));
        // SIGINT (2) pending for the process.
        assert!(pending_in(&status(zero, "0000000000000002", zero, zero)));
        // Blocked or ignored: not a reason to give up.
        assert!(!pending_in(&status(
            "0000000000000002",
            zero,
            "0000000000000002",
            zero
        )));
        assert!(!pending_in(&status(
            zero,
            "0000000000000002",
            zero,
            "0000000000000002"
        )));
        // SIGKILL always is.
        assert!(pending_in(&status(
            zero,
            "0000000000000100",
            "0000000000000100",
            zero
        )));
        // This thread has none pending; a thread that is gone counts as signalled.
        assert!(!pending(std::process::id()));
        assert!(pending(u32::MAX));
    }
}
