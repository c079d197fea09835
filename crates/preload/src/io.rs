//! Data through the rings: a call's bytes cut into chunks of [`CHUNK`], a window of them
//! in flight at once (a large read or write is spread over the stripes in parallel), each
//! copied between the caller's memory and the ring's buffers. When no ring can be had the
//! node's client's socket serves the call (still no kernel round trip).

use crate::table::{Mount, CHUNK, RING_BYTES, WINDOW_CHUNKS};
use nacre_api::{Completion, File, Ring};

/// The caller's memory a call names (its iovecs), seen as one run of bytes.
pub(crate) struct Bufs<'a> {
    iov: &'a [libc::iovec],
}

impl<'a> Bufs<'a> {
    /// # Safety
    /// Every iovec names memory the caller lets this call read or write.
    pub(crate) unsafe fn new(iov: &'a [libc::iovec]) -> Bufs<'a> {
        Bufs { iov }
    }

    pub(crate) fn total(&self) -> usize {
        self.iov
            .iter()
            .fold(0usize, |t, v| t.saturating_add(v.iov_len))
    }

    /// Walks the pieces of `[at, at + len)`: (iovec base, offset in the run).
    fn pieces(&self, mut at: usize, mut len: usize, mut f: impl FnMut(*mut u8, usize, usize)) {
        let mut run = 0;
        for v in self.iov {
            if len == 0 {
                return;
            }
            if at < v.iov_len {
                let n = (v.iov_len - at).min(len);
                // SAFETY: within the iovec (Bufs::new's contract).
                f(unsafe { (v.iov_base as *mut u8).add(at) }, n, run);
                run += n;
                len -= n;
                at = 0;
            } else {
                at -= v.iov_len;
            }
        }
    }

    /// Copies `src` into the caller's memory at `at`.
    pub(crate) fn put(&self, at: usize, src: &[u8]) {
        self.pieces(at, src.len(), |p, n, run| {
            // SAFETY: the caller's writable memory (Bufs::new), `src` is the ring's.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(run), p, n) }
        });
    }

    /// Copies the caller's memory at `at` into `dst`.
    pub(crate) fn get(&self, at: usize, dst: &mut [u8]) {
        self.pieces(at, dst.len(), |p, n, run| {
            // SAFETY: the caller's readable memory (Bufs::new), `dst` is the ring's.
            unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr().add(run), n) }
        });
    }
}

/// What a ring gave: bytes, or the errno; and whether the ring broke.
type Moved = (Result<usize, i32>, bool);

/// Reads into `bufs` from `file` at `offset`: the count (short at the end of file).
pub(crate) fn read(m: &Mount, file: &File, bufs: &Bufs<'_>, offset: u64) -> Result<usize, i32> {
    let total = bufs.total();
    if total == 0 {
        return Ok(0);
    }
    match m.take_ring() {
        Some(mut ring) => {
            let (r, broken) = ring_moves(&mut ring, file, bufs, offset, total, false);
            m.put_ring(ring, broken);
            r
        }
        None => socket_read(file, bufs, offset),
    }
}

/// Writes `bufs` to `file` at `offset`: the count.
pub(crate) fn write(m: &Mount, file: &File, bufs: &Bufs<'_>, offset: u64) -> Result<usize, i32> {
    let total = bufs.total();
    if total == 0 {
        return Ok(0);
    }
    match m.take_ring() {
        Some(mut ring) => {
            let (r, broken) = ring_moves(&mut ring, file, bufs, offset, total, true);
            m.put_ring(ring, broken);
            r
        }
        None => socket_write(file, bufs, offset),
    }
}

/// Makes `file`'s writes durable.
pub(crate) fn fsync(m: &Mount, file: &File) -> Result<(), i32> {
    let Some(mut ring) = m.take_ring() else {
        return file.fsync().map_err(|e| e.errno());
    };
    let mut broken = false;
    let r = match ring.prep_fsync(file, 0) {
        Err(e) => Err(e.errno()),
        Ok(()) => {
            ring.submit();
            let mut c = [Completion::default(); 1];
            match wait_all(&mut ring, &mut c) {
                Err(e) => {
                    broken = true;
                    Err(-e)
                }
                Ok(()) if c[0].result < 0 => Err(-c[0].result as i32),
                Ok(()) => Ok(()),
            }
        }
    };
    m.put_ring(ring, broken);
    r
}

/// Waits for `out.len()` completions: `Err(-errno)` when the ring broke.
fn wait_all(ring: &mut Ring, out: &mut [Completion]) -> Result<(), i32> {
    let mut got = 0;
    while got < out.len() {
        let want = out.len() - got;
        match ring.wait_into(want, &mut out[got..], None) {
            Ok(n) => got += n,
            Err(e) => return Err(-e.errno()),
        }
    }
    Ok(())
}

/// Moves `total` bytes between `bufs` and `file` at `offset` through `ring`, a window of
/// chunks at a time; stops at the first short or failed chunk (the bytes before it are the
/// answer, or its errno when there are none).
fn ring_moves(
    ring: &mut Ring,
    file: &File,
    bufs: &Bufs<'_>,
    offset: u64,
    total: usize,
    writing: bool,
) -> Moved {
    let mut done = 0usize;
    let mut cqes = [Completion::default(); WINDOW_CHUNKS];
    while done < total {
        let window = (total - done).min(RING_BYTES);
        let n = window.div_ceil(CHUNK);
        for i in 0..n {
            let len = CHUNK.min(window - i * CHUNK);
            let at = offset + (done + i * CHUNK) as u64;
            let buf_at = i * CHUNK;
            let prepped = if writing {
                bufs.get(done + i * CHUNK, &mut ring.buffers()[buf_at..buf_at + len]);
                ring.prep_write(file, at, buf_at as u64, len as u32, i as u64)
            } else {
                ring.prep_read(file, at, buf_at as u64, len as u32, i as u64)
            };
            if let Err(e) = prepped {
                // Nothing of this window was submitted (preps are published together).
                return (if done > 0 { Ok(done) } else { Err(e.errno()) }, true);
            }
        }
        ring.submit();
        if let Err(e) = wait_all(ring, &mut cqes[..n]) {
            return (if done > 0 { Ok(done) } else { Err(-e) }, true);
        }
        let mut results = [0i64; WINDOW_CHUNKS];
        for c in &cqes[..n] {
            if let Some(r) = results.get_mut(c.user_data as usize) {
                *r = c.result;
            }
        }
        for (i, r) in results.iter().take(n).enumerate() {
            let len = CHUNK.min(window - i * CHUNK);
            if *r < 0 {
                return (if done > 0 { Ok(done) } else { Err(-*r as i32) }, false);
            }
            let moved = (*r as usize).min(len);
            if !writing {
                bufs.put(done, &ring.buffers()[i * CHUNK..i * CHUNK + moved]);
            }
            done += moved;
            if moved < len {
                return (Ok(done), false);
            }
        }
    }
    (Ok(done), false)
}

/// [`read`] through the socket: straight into the caller's memory, iovec by iovec.
fn socket_read(file: &File, bufs: &Bufs<'_>, offset: u64) -> Result<usize, i32> {
    let mut done = 0usize;
    for v in bufs.iov {
        // SAFETY: the caller's writable memory (Bufs::new).
        let b = unsafe { std::slice::from_raw_parts_mut(v.iov_base as *mut u8, v.iov_len) };
        match file.read_at(b, offset + done as u64) {
            Ok(n) => {
                done += n;
                if n < b.len() {
                    break;
                }
            }
            Err(e) if done == 0 => return Err(e.errno()),
            Err(_) => break,
        }
    }
    Ok(done)
}

/// [`write`] through the socket.
fn socket_write(file: &File, bufs: &Bufs<'_>, offset: u64) -> Result<usize, i32> {
    let mut done = 0usize;
    for v in bufs.iov {
        // SAFETY: the caller's readable memory (Bufs::new).
        let b = unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
        match file.write_at(b, offset + done as u64) {
            Ok(n) => done += n,
            Err(e) if done == 0 => return Err(e.errno()),
            Err(_) => break,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::Bufs;

    #[test]
    fn bytes_cross_iovec_boundaries_both_ways() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 0];
        let mut c = [0u8; 5];
        let iov = [
            libc::iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: 0,
            },
            libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            },
        ];
        // SAFETY: the arrays above, alive for the test.
        let bufs = unsafe { Bufs::new(&iov) };
        assert_eq!(bufs.total(), 8);
        bufs.put(2, b"wxyz");
        let mut out = [0u8; 8];
        bufs.get(0, &mut out);
        assert_eq!(&out, b"\0\0wxyz\0\0");
        let mut mid = [0u8; 3];
        bufs.get(3, &mut mid);
        assert_eq!(&mid, b"xyz");
        bufs.put(6, b"!!");
        assert_eq!(&c, b"xyz!!");
        assert_eq!(&a, b"\0\0w");
    }
}
