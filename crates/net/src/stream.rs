//! A request's bulk handed to its handler while it is still arriving ([`BulkStream`]), so
//! an OST can write the first part of a large write to its disk while the rest is on the
//! wire instead of paying the network and then the disk one after the other.
//!
//! The network thread that reads the connection is the only writer of the buffer
//! ([`BulkFiller`]): it receives into the part not yet filled and then publishes how far
//! the buffer is filled. The handler reads only the part published ([`BulkStream::wait_for`]),
//! which is never written again, so the two never touch the same bytes. When the last byte
//! is in, the network thread checks the frame's bulk checksum and publishes the verdict
//! ([`BulkStream::finish`]); a connection that ends first, or a frame that fails its
//! checksum, fails the stream, and the handler must not acknowledge what it did with it.
//!
//! Only requests a handler asks for ([`crate::service::Handler::streams`]) on connections
//! whose frames carry no tags (a protected connection's frame is judged whole) are
//! streamed, at most [`STREAMS_MAX`] per server at once: each holds a service thread while
//! its sender sends, so a slow sender ties up one thread for at most the frame deadline, and
//! past the limit frames are received whole first, as all are otherwise.

use crate::limits::{BudgetPermit, NetStats};
use nacre_types::crc::CHUNK_BYTES;
use nacre_types::AlignedBuf;
use nacre_wire::header::FLAG_BULK_CHECKSUM;
use nacre_wire::Header;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Most requests whose bulk is streamed to their handler at once, per server.
pub const STREAMS_MAX: u64 = 4;

/// How a streamed bulk ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The connection ended before the last byte (sender gone, frame deadline, bad frame).
    #[error("the connection ended before the bulk was whole: {0}")]
    Cut(String),
    /// The bulk arrived whole but failed the frame's checksum.
    #[error("the bulk failed its checksum: {0}")]
    Checksum(String),
}

/// How the stream stands: arriving, whole and checked, or failed.
#[derive(Debug, Clone)]
enum End {
    Open,
    Whole,
    Failed(StreamError),
}

/// A request's bulk as it arrives, shared by the network thread filling it and the
/// handler reading it. Bytes are published a whole 4 KiB chunk at a time (or to the end),
/// each chunk's crc32c with them when the sender checksummed the bulk.
pub struct BulkStream {
    /// Owns the memory `ptr` points into; never touched (moved, resized) until dropped.
    _buf: AlignedBuf,
    /// The receive budget the frame's bytes hold, given back when both the handler and
    /// the network thread are done with them.
    _permit: Option<BudgetPermit>,
    ptr: *mut u8,
    len: usize,
    /// The crc32c of each chunk, filled as the chunks are (empty: the sender sent no
    /// checksum); its memory is never moved.
    sums: Box<[u32]>,
    sums_ptr: *mut u32,
    /// Bytes at the start of the buffer received, with their chunks' checksums
    /// (published with `Release`).
    filled: AtomicUsize,
    /// The handler waits for the buffer to be filled this far (`usize::MAX`: nobody
    /// waits), so the filler wakes it only when that is so.
    wanted: AtomicUsize,
    end: Mutex<End>,
    changed: Condvar,
}

// SAFETY: the filler writes only bytes (and checksums of chunks) past `filled`, readers
// read only those before it (published with Release/Acquire), so nothing is accessed by
// both; the memory is owned by the stream and neither moved nor freed while either side
// holds it (both hold an `Arc`).
unsafe impl Send for BulkStream {}
// SAFETY: as for Send.
unsafe impl Sync for BulkStream {}

impl std::fmt::Debug for BulkStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkStream")
            .field("len", &self.len)
            .field("filled", &self.filled.load(Ordering::Relaxed))
            .finish()
    }
}

/// A prefix of a streamed bulk: its bytes, and the crc32c of each of its 4 KiB chunks
/// (the last one short if the prefix ends inside a chunk) when the sender checksummed it.
pub type Prefix<'a> = (&'a [u8], Option<&'a [u32]>);

impl BulkStream {
    /// Length of the whole bulk.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty bulk (never streamed).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes received so far (a whole number of chunks, or all).
    pub fn filled(&self) -> usize {
        self.filled.load(Ordering::SeqCst)
    }

    /// The first `n` bytes (at most the length) once received, with their chunks'
    /// checksums: waits for them, or for the stream to fail. Bytes received before a
    /// failure are given all the same.
    pub fn wait_for(&self, n: usize) -> Result<Prefix<'_>, StreamError> {
        let n = n.min(self.len);
        if self.filled() < n {
            let mut end = self.end.lock().expect("stream");
            loop {
                if self.filled() >= n {
                    break;
                }
                if let End::Failed(e) = &*end {
                    return Err(e.clone());
                }
                // SeqCst with the filler's store of `filled` and load of `wanted`: one of
                // the two sides sees the other's store, so no wake-up is lost.
                self.wanted.store(n, Ordering::SeqCst);
                // Filled meanwhile (the filler saw no one waiting): do not sleep.
                if self.filled() >= n {
                    break;
                }
                end = self.changed.wait(end).expect("stream");
            }
            self.wanted.store(usize::MAX, Ordering::Release);
        }
        Ok(self.prefix(n))
    }

    /// The first `n` bytes, `n` at most what is filled.
    fn prefix(&self, n: usize) -> Prefix<'_> {
        // SAFETY: `..n` is published as filled and never written again (module docs).
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, n) };
        let sums = (!self.sums.is_empty()).then(|| {
            let chunks = n.div_ceil(CHUNK_BYTES);
            // SAFETY: the checksums of filled chunks are published with them.
            unsafe { std::slice::from_raw_parts(self.sums_ptr.cast_const(), chunks) }
        });
        (bytes, sums)
    }

    /// Waits for the stream to be over: the whole bulk, checked against the frame's
    /// checksum, with its chunks' checksums; or why it failed.
    pub fn finish(&self) -> Result<Prefix<'_>, StreamError> {
        let mut end = self.end.lock().expect("stream");
        loop {
            match &*end {
                End::Open => {
                    self.wanted.store(self.len, Ordering::Release);
                    end = self.changed.wait(end).expect("stream");
                }
                End::Whole => return Ok(self.prefix(self.len)),
                End::Failed(e) => return Err(e.clone()),
            }
        }
    }

    /// True once the stream failed (its sender went away, or its bulk failed its checksum): the
    /// request was never received whole, so it gets no reply (its sender resends it).
    pub fn failed(&self) -> bool {
        matches!(*self.end.lock().expect("stream"), End::Failed(_))
    }

    fn end_with(&self, end: End) {
        let mut e = self.end.lock().expect("stream");
        if matches!(*e, End::Open) {
            *e = end;
        }
        drop(e);
        self.changed.notify_all();
    }
}

/// The network thread's side of a [`BulkStream`]: the only writer of its buffer. Dropped
/// before the stream is whole (the connection ended), it fails the stream.
pub struct BulkFiller {
    stream: Arc<BulkStream>,
    header: Header,
    /// Bytes received (published up to the last whole chunk).
    received: usize,
    /// The crc32c of the chunks summed so far, all together.
    crc: u32,
    stats: Option<Arc<NetStats>>,
}

impl BulkFiller {
    /// A stream of `buf` (the whole bulk's length) for the frame `header`, holding
    /// `permit` (its bytes' receive budget) until the stream is dropped by both sides;
    /// `stats` counts it among the frames streaming now until it is over.
    pub fn new(
        header: Header,
        buf: AlignedBuf,
        permit: Option<BudgetPermit>,
        stats: Option<Arc<NetStats>>,
    ) -> (BulkFiller, Arc<BulkStream>) {
        let mut buf = buf;
        let ptr = buf.as_mut_ptr();
        let len = buf.len();
        let summed = header.flags & FLAG_BULK_CHECKSUM != 0;
        let mut sums =
            vec![0u32; if summed { len.div_ceil(CHUNK_BYTES) } else { 0 }].into_boxed_slice();
        let sums_ptr = sums.as_mut_ptr();
        let stream = Arc::new(BulkStream {
            _buf: buf,
            _permit: permit,
            ptr,
            len,
            sums,
            sums_ptr,
            filled: AtomicUsize::new(0),
            wanted: AtomicUsize::new(usize::MAX),
            end: Mutex::new(End::Open),
            changed: Condvar::new(),
        });
        let filler = BulkFiller {
            stream: stream.clone(),
            header,
            received: 0,
            crc: 0,
            stats,
        };
        (filler, stream)
    }

    /// The part not yet received.
    pub fn tail(&mut self) -> &mut [u8] {
        let at = self.received;
        // SAFETY: only the filler writes, and only past `filled` (`received` is at or past
        // it), which readers never read (module docs); `&mut self` makes this the only
        // such slice.
        unsafe { std::slice::from_raw_parts_mut(self.stream.ptr.add(at), self.stream.len - at) }
    }

    /// `n` more bytes were written into [`BulkFiller::tail`]: the chunks they complete are
    /// summed and published, waking the handler if it waits for them.
    pub fn received(&mut self, n: usize) {
        let BulkFiller {
            stream: s,
            received,
            crc: whole,
            ..
        } = self;
        *received += n;
        assert!(*received <= s.len, "a stream filled past its length");
        let before = s.filled.load(Ordering::Relaxed);
        let upto = match *received {
            r if r == s.len => r,
            r => r / CHUNK_BYTES * CHUNK_BYTES,
        };
        if upto == before {
            return;
        }
        if !s.sums.is_empty() {
            for c in before / CHUNK_BYTES..upto.div_ceil(CHUNK_BYTES) {
                let from = c * CHUNK_BYTES;
                let to = (from + CHUNK_BYTES).min(s.len);
                // SAFETY: received, not yet published: only the filler touches it.
                let chunk = unsafe { std::slice::from_raw_parts(s.ptr.add(from), to - from) };
                let crc = crc32c::crc32c(chunk);
                // SAFETY: as for the chunk: its checksum is published with it.
                unsafe { *s.sums_ptr.add(c) = crc };
                *whole = match c {
                    0 => crc,
                    _ => nacre_types::crc::append(*whole, crc, to - from),
                };
            }
        }
        s.filled.store(upto, Ordering::SeqCst);
        if upto >= s.wanted.load(Ordering::SeqCst) {
            // Taken so a waiter between its check and its wait is not missed.
            drop(s.end.lock().expect("stream"));
            s.changed.notify_all();
        }
    }

    /// True when every byte is in.
    pub fn is_full(&self) -> bool {
        self.received == self.stream.len
    }

    /// Ends a full stream: checks the bulk against the frame's checksum (from its chunks'
    /// checksums, summed as they came) and publishes the verdict. `Err` (the checksum
    /// failed) drops the connection, as for a frame received whole.
    pub fn complete(self) -> Result<(), String> {
        assert!(self.is_full(), "a stream completed before it was full");
        let summed = !self.stream.sums.is_empty();
        let result = match summed && self.crc != self.header.bulk_crc {
            false => {
                self.stream.end_with(End::Whole);
                Ok(())
            }
            true => {
                let why = format!(
                    "bulk checksum mismatch: header {:#010x}, data {:#010x}",
                    self.header.bulk_crc, self.crc
                );
                self.stream
                    .end_with(End::Failed(StreamError::Checksum(why.clone())));
                Err(why)
            }
        };
        drop(self);
        result
    }
}

impl Drop for BulkFiller {
    fn drop(&mut self) {
        // A no-op if complete() ended it.
        self.stream
            .end_with(End::Failed(StreamError::Cut("the connection ended".into())));
        if let Some(s) = &self.stats {
            s.frames_streaming.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(bulk: &[u8], checksum: bool) -> Header {
        let mut h = Header::request(0x0501, 1, 0);
        h.seal(&[], Some(bulk), checksum);
        h
    }

    #[test]
    fn a_reader_gets_each_part_as_it_arrives_then_the_checked_whole() {
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        let (mut filler, stream) = BulkFiller::new(
            header_of(&data, true),
            AlignedBuf::for_overwrite(data.len()),
            None,
            None,
        );
        let reader = {
            let stream = stream.clone();
            std::thread::spawn(move || {
                let first = stream.wait_for(16 * 1024).expect("first part").0.to_vec();
                let (all, sums) = stream.finish().expect("whole");
                (first, all.to_vec(), sums.map(|s| s.to_vec()))
            })
        };
        for part in data.chunks(16 * 1024) {
            filler.tail()[..part.len()].copy_from_slice(part);
            filler.received(part.len());
        }
        filler.complete().expect("checksum");
        let (first, all, sums) = reader.join().expect("reader");
        assert_eq!(first, data[..16 * 1024]);
        assert_eq!(all, data);
        let sums = sums.expect("the sender checksummed it");
        assert_eq!(sums.len(), 16);
        assert_eq!(sums[3], crc32c::crc32c(&data[3 * 4096..4 * 4096]));
    }

    #[test]
    fn a_cut_connection_or_a_bad_checksum_fails_the_stream() {
        let data = vec![7u8; 8192];
        let (mut filler, stream) = BulkFiller::new(
            header_of(&data, true),
            AlignedBuf::for_overwrite(8192),
            None,
            None,
        );
        filler.tail()[..4096].copy_from_slice(&data[..4096]);
        filler.received(4096);
        assert_eq!(stream.wait_for(4096).expect("first half").0, &data[..4096]);
        drop(filler);
        assert!(matches!(stream.wait_for(8192), Err(StreamError::Cut(_))));
        assert!(matches!(stream.finish(), Err(StreamError::Cut(_))));

        let (mut filler, stream) = BulkFiller::new(
            header_of(&data, true),
            AlignedBuf::for_overwrite(8192),
            None,
            None,
        );
        filler.tail().copy_from_slice(&data);
        filler.tail_flip_for_test();
        filler.received(8192);
        assert!(filler.complete().is_err());
        assert!(matches!(stream.finish(), Err(StreamError::Checksum(_))));
    }

    impl BulkFiller {
        fn tail_flip_for_test(&mut self) {
            self.tail()[100] ^= 1;
        }
    }
}
