//! Several direct reads at once through one io_uring per thread.
//!
//! A service thread serving a batch of reads submits them with one system call (the block
//! layer plugs them: one doorbell for the disk, which costs a VM exit on a virtual disk)
//! and sleeps once for all of them, where a `pread` each would sleep, and be woken, once per
//! read. A thread whose kernel refuses io_uring (disabled, or a seccomp filter) is told so
//! and the caller reads one by one.
//!
//! Memory safety: a read in flight writes into its buffer until its completion is reaped.
//! Every submitted read is reaped before [`read_all`] returns; if the ring fails in a way
//! that leaves reads unreaped, their buffers are leaked (never freed under the kernel) and
//! the ring is given up for this thread.

use nacre_types::AlignedBuf;
use std::cell::RefCell;
use std::os::fd::RawFd;

/// Entries of a thread's ring: reads submitted in one turn, at most (a longer batch goes in
/// several turns).
pub const URING_ENTRIES: usize = 32;

/// One read for [`read_all`]: `want` bytes at `offset` of `fd` into `buf` (whose spare
/// capacity holds at least `want`).
pub(crate) struct Read {
    pub fd: RawFd,
    pub buf: AlignedBuf,
    pub want: usize,
    pub offset: u64,
    /// Bytes read, or the error (set by [`read_all`]).
    pub result: Option<std::io::Result<usize>>,
}

/// The thread's ring: not made yet, made, or refused by the kernel (None).
enum State {
    Unmade,
    Ready(Box<io_uring::IoUring>),
    Refused,
}

thread_local! {
    static RING: RefCell<State> = const { RefCell::new(State::Unmade) };
}

/// Runs `reads` at once on this thread's ring, each one's `result` set; false (nothing
/// done) if this thread has no ring.
pub(crate) fn read_all(reads: &mut [Read]) -> bool {
    RING.with(|cell| {
        let mut state = cell.borrow_mut();
        if matches!(*state, State::Unmade) {
            *state = match io_uring::IoUring::new(URING_ENTRIES as u32) {
                Ok(r) => State::Ready(Box::new(r)),
                Err(e) => {
                    tracing::info!("io_uring refused ({e}): this thread reads one at a time");
                    State::Refused
                }
            };
        }
        let State::Ready(ring) = &mut *state else {
            return false;
        };
        for (turn, chunk) in reads.chunks_mut(URING_ENTRIES).enumerate() {
            if let Err(e) = run_turn(ring, chunk) {
                tracing::error!("io_uring failed ({e}): reads go one at a time from now on");
                // What was not reaped may still be written by the kernel: its buffers are
                // leaked, not freed, and the reads not started are failed.
                for r in reads[turn * URING_ENTRIES..].iter_mut() {
                    if r.result.is_none() {
                        std::mem::forget(std::mem::replace(
                            &mut r.buf,
                            AlignedBuf::for_overwrite(0),
                        ));
                        r.result = Some(Err(std::io::Error::from_raw_os_error(libc::EIO)));
                    }
                }
                let State::Ready(ring) = std::mem::replace(&mut *state, State::Refused) else {
                    unreachable!("the ring was ready")
                };
                std::mem::forget(ring);
                break;
            }
        }
        true
    })
}

/// Submits `chunk` (at most [`URING_ENTRIES`]) and reaps all of it.
fn run_turn(ring: &mut io_uring::IoUring, chunk: &mut [Read]) -> std::io::Result<()> {
    assert!(chunk.len() <= URING_ENTRIES, "a turn fits the ring");
    {
        let mut sq = ring.submission();
        for (i, r) in chunk.iter_mut().enumerate() {
            let want = r.want.min(r.buf.spare_mut().len());
            let entry = io_uring::opcode::Read::new(
                io_uring::types::Fd(r.fd),
                r.buf.spare_mut().as_mut_ptr(),
                u32::try_from(want).unwrap_or(u32::MAX),
            )
            .offset(r.offset)
            .build()
            .user_data(i as u64);
            // SAFETY: the buffer stays allocated and unmoved (heap memory owned by `r`,
            // which outlives the turn) until the entry's completion is reaped below, or is
            // leaked if the ring fails; the fd is kept open by the caller.
            unsafe { sq.push(&entry) }.expect("room in the ring: one turn at a time");
        }
    }
    let mut pending = chunk.len();
    while pending > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::yield_now();
                continue;
            }
            Err(e) => return Err(e),
        }
        for cqe in ring.completion() {
            let Some(r) = chunk.get_mut(cqe.user_data() as usize) else {
                continue;
            };
            r.result = Some(match cqe.result() {
                n if n < 0 => Err(std::io::Error::from_raw_os_error(-n)),
                n => Ok(n as usize),
            });
            pending -= 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn reads_many_at_once_each_with_its_bytes_and_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(40 * 4096 + 100))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        let file = direct.unwrap_or_else(|_| std::fs::File::open(&path).unwrap());
        // More reads than the ring holds; the last ones past the end.
        let mut reads: Vec<Read> = (0..URING_ENTRIES as u64 + 10)
            .map(|i| Read {
                fd: file.as_raw_fd(),
                buf: AlignedBuf::for_overwrite(8192),
                want: 8192,
                offset: (i * 3 % 42) * 4096,
                result: None,
            })
            .collect();
        if !read_all(&mut reads) {
            eprintln!("no io_uring on this kernel: nothing to check");
            return;
        }
        for r in &mut reads {
            let n = *r.result.as_ref().unwrap().as_ref().unwrap();
            let start = (r.offset as usize).min(data.len());
            let end = (start + 8192).min(data.len());
            assert_eq!(n, end - start, "at {}", r.offset);
            r.buf.set_len(n);
            assert_eq!(&r.buf[..], &data[start..end], "at {}", r.offset);
        }
        // A bad descriptor fails its read alone.
        let mut bad = vec![
            Read {
                fd: -1,
                buf: AlignedBuf::for_overwrite(4096),
                want: 4096,
                offset: 0,
                result: None,
            },
            Read {
                fd: file.as_raw_fd(),
                buf: AlignedBuf::for_overwrite(4096),
                want: 4096,
                offset: 0,
                result: None,
            },
        ];
        assert!(read_all(&mut bad));
        assert!(bad[0].result.as_ref().unwrap().is_err());
        assert_eq!(*bad[1].result.as_ref().unwrap().as_ref().unwrap(), 4096);
    }
}
