//! A connection's frames parsed as its bytes arrive: the staging buffer, the state of the
//! frame in progress (header, budget, body, tags, bulk), the checks (checksums, and the
//! tags of a protected connection) and the delivery of each complete frame to its sink.

use super::{Conn, End, READ_BYTES_PER_TURN, STAGING_BYTES};
use crate::frame::RawFrame;
use crate::limits::{Budget, BudgetPermit, NetStats};
use crate::sec::session::{trailer_len, Opener, TRAILER_BYTES_MAX};
use crate::sec::Level;
use crate::stream::{BulkFiller, STREAMS_MAX};
use nacre_types::AlignedBuf;
use nacre_wire::{Header, HEADER_BYTES};
use rustix::net::RecvFlags;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// What a connection's current frame has got so far.
pub(super) enum Parse {
    /// Header bytes in `staging` (maybe none).
    Header,
    /// Header read; waiting for budget for its lengths.
    Budget(Header),
    /// Body bytes coming (into `body`), then bulk.
    Body {
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
    },
    /// Bulk bytes coming straight into `bulk` (with the frame's tags, if protected).
    Bulk {
        header: Header,
        body: Vec<u8>,
        bulk: AlignedBuf,
        got: usize,
        permit: Option<BudgetPermit>,
        tags: Option<Tags>,
    },
    /// Bulk bytes coming into a stream its request's handler already has
    /// ([`crate::stream`]).
    Streaming { filler: BulkFiller },
    /// The tags after the body, before the bulk (a protected connection's).
    Trailer {
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
        trailer: [u8; TRAILER_BYTES_MAX],
        got: usize,
    },
}

/// A protected frame's tags, read before its bulk.
pub(super) struct Tags {
    bytes: [u8; TRAILER_BYTES_MAX],
    len: usize,
}

/// Checks a received frame's bulk against its header. A request's bulk (a write's data)
/// keeps the checksum of each of its 4 KiB chunks, which an OST stores without computing
/// them again; a reply's is checked whole, as nothing keeps them.
fn check_bulk(header: &Header, bulk: &mut AlignedBuf) -> Result<(), End> {
    let bad = |e: nacre_wire::WireError| End::Bad(e.to_string());
    if header.is_reply() {
        return header.check_bulk(bulk).map_err(bad);
    }
    if let Some(sums) = header.check_bulk_chunked(bulk).map_err(bad)? {
        bulk.set_chunk_crc32cs(sums.into());
    }
    Ok(())
}

impl Conn {
    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Receives into the staging buffer; Ok(false) when nothing more is there now.
    fn fill(&mut self) -> Result<bool, End> {
        if self.staging.is_empty() {
            self.staging = vec![0; STAGING_BYTES];
        }
        if self.start > 0 && self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.end == self.staging.len() {
            self.staging.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let mut staging = std::mem::take(&mut self.staging);
        let got = self.receive(&mut staging[self.end..]);
        self.staging = staging;
        match got? {
            Some(n) => {
                self.end += n;
                self.frame_started.get_or_insert_with(Instant::now);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// One receive into `dst` without waiting: `Some(bytes)`, or `None` when nothing is
    /// there now (or the last receive of this turn already drained the socket).
    fn receive(&mut self, dst: &mut [u8]) -> Result<Option<usize>, End> {
        if self.drained {
            return Ok(None);
        }
        match rustix::net::recv(&self.stream, &mut *dst, RecvFlags::DONTWAIT) {
            Ok((0, _)) => Err(End::Closed),
            Ok((n, _)) => {
                self.drained = n < dst.len();
                Ok(Some(n))
            }
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => Ok(None),
            Err(e) => Err(End::Bad(format!("receive failed: {e}"))),
        }
    }

    /// Moves up to `dst.len()` staged bytes into `dst`; returns how many.
    fn take(&mut self, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.buffered());
        dst[..n].copy_from_slice(&self.staging[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// Parses and receives as far as possible this turn. Ok(true): more may be there.
    pub(super) fn advance(
        &mut self,
        budget: &Arc<Budget>,
        stats: &Arc<NetStats>,
    ) -> Result<bool, End> {
        let mut read = 0usize;
        self.drained = false;
        loop {
            if read >= READ_BYTES_PER_TURN {
                return Ok(true);
            }
            let parse = std::mem::replace(&mut self.parse, Parse::Header);
            match parse {
                Parse::Header => {
                    if self.buffered() < HEADER_BYTES {
                        self.parse = Parse::Header;
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    let mut head = [0u8; HEADER_BYTES];
                    self.take(&mut head);
                    // Any version: a request of a version the server does not speak is
                    // read whole and answered (`ServerSink`), not dropped.
                    let header = Header::decode_any_version(&head, self.bulk_len_max)
                        .map_err(|e| End::Bad(e.to_string()))?;
                    self.parse = Parse::Budget(header);
                }
                Parse::Budget(header) => {
                    let bytes = u64::from(header.body_len) + u64::from(header.bulk_len);
                    let permit = match bytes {
                        0 => None,
                        n => match budget.try_take(n) {
                            Some(p) => Some(p),
                            None => {
                                if !self.paused {
                                    stats.budget_waits.fetch_add(1, Ordering::Relaxed);
                                }
                                self.parse = Parse::Budget(header);
                                self.paused = true;
                                // The deadline is the sender's: waiting here is not.
                                self.frame_started = Some(Instant::now());
                                return Ok(false);
                            }
                        },
                    };
                    self.paused = false;
                    let bulk = (header.bulk_len > 0).then(|| {
                        let len = header.bulk_len as usize;
                        match self.sink.bulk_into(&header) {
                            Some(mut b) if b.capacity() >= len => {
                                b.set_len(len);
                                b
                            }
                            _ => AlignedBuf::for_overwrite(len),
                        }
                    });
                    let body = Vec::with_capacity((header.body_len as usize).min(STAGING_BYTES));
                    self.parse = Parse::Body {
                        header,
                        body,
                        bulk,
                        permit,
                    };
                }
                Parse::Body {
                    header,
                    mut body,
                    bulk,
                    permit,
                } => {
                    let want = header.body_len as usize - body.len();
                    let n = want.min(self.buffered());
                    body.extend_from_slice(&self.staging[self.start..self.start + n]);
                    self.start += n;
                    if body.len() < header.body_len as usize {
                        self.parse = Parse::Body {
                            header,
                            body,
                            bulk,
                            permit,
                        };
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    // A protected frame's trailer of tags comes next, before its bulk (it
                    // arrives with the body; the bulk still goes straight into its buffer);
                    // its checksums are of the plain bytes: checked once it is open.
                    match (&self.opener, bulk) {
                        (Some(o), bulk) if trailer_len(o.level(), header.bulk_len) > 0 => {
                            self.parse = Parse::Trailer {
                                header,
                                body,
                                bulk,
                                permit,
                                trailer: [0; TRAILER_BYTES_MAX],
                                got: 0,
                            };
                        }
                        (_, bulk) => {
                            header
                                .check_body(&body)
                                .map_err(|e| End::Bad(e.to_string()))?;
                            match bulk {
                                None => self.deliver(header, body, None, permit)?,
                                Some(bulk) if self.sink.streams(&header) && stream_slot(stats) => {
                                    // The budget goes with the buffer: held until the
                                    // handler and this thread are both done with it.
                                    let (filler, stream) =
                                        BulkFiller::new(header, bulk, permit, Some(stats.clone()));
                                    stats.frames_streamed.fetch_add(1, Ordering::Relaxed);
                                    self.parse = Parse::Streaming { filler };
                                    self.sink
                                        .frame_streamed(header, body, stream)
                                        .map_err(End::Bad)?;
                                }
                                Some(bulk) => {
                                    self.parse = Parse::Bulk {
                                        header,
                                        body,
                                        bulk,
                                        got: 0,
                                        permit,
                                        tags: None,
                                    }
                                }
                            }
                        }
                    }
                }
                Parse::Bulk {
                    header,
                    body,
                    mut bulk,
                    mut got,
                    permit,
                    tags,
                } => {
                    got += self.take(&mut bulk[got..]);
                    if got < bulk.len() {
                        // Straight into the aligned buffer: no staging copy for bulk.
                        let n = self.receive(&mut bulk[got..])?;
                        got += n.unwrap_or(0);
                        read += n.unwrap_or(0);
                        self.parse = Parse::Bulk {
                            header,
                            body,
                            bulk,
                            got,
                            permit,
                            tags,
                        };
                        match n {
                            Some(_) => continue,
                            None => return Ok(false),
                        }
                    }
                    match tags {
                        Some(t) => self.open_and_deliver(header, body, Some(bulk), permit, &t)?,
                        None => {
                            check_bulk(&header, &mut bulk)?;
                            self.deliver(header, body, Some(bulk), permit)?;
                        }
                    }
                }
                Parse::Streaming { mut filler } => {
                    let staged = self.take(filler.tail());
                    if staged > 0 {
                        filler.received(staged);
                    }
                    if !filler.is_full() {
                        // Straight into the stream's buffer, published as it comes.
                        let n = self.receive(filler.tail())?;
                        if let Some(n) = n {
                            filler.received(n);
                            read += n;
                        }
                        if !filler.is_full() {
                            self.parse = Parse::Streaming { filler };
                            match n {
                                Some(_) => continue,
                                None => return Ok(false),
                            }
                        }
                    }
                    filler.complete().map_err(End::Bad)?;
                    self.frame_done();
                }
                Parse::Trailer {
                    header,
                    body,
                    bulk,
                    permit,
                    mut trailer,
                    mut got,
                } => {
                    let want = trailer_len(
                        self.opener.as_ref().map_or(Level::None, Opener::level),
                        header.bulk_len,
                    );
                    got += self.take(&mut trailer[got..want]);
                    if got < want {
                        self.parse = Parse::Trailer {
                            header,
                            body,
                            bulk,
                            permit,
                            trailer,
                            got,
                        };
                        let before = self.buffered();
                        if !self.fill()? {
                            return Ok(false);
                        }
                        read += self.buffered() - before;
                        continue;
                    }
                    let tags = Tags {
                        bytes: trailer,
                        len: want,
                    };
                    match bulk {
                        Some(bulk) => {
                            self.parse = Parse::Bulk {
                                header,
                                body,
                                bulk,
                                got: 0,
                                permit,
                                tags: Some(tags),
                            }
                        }
                        None => self.open_and_deliver(header, body, None, permit, &tags)?,
                    }
                }
            }
        }
    }

    /// Checks (and at privacy level decrypts) a protected frame with its tags, then its
    /// checksums, and delivers it.
    fn open_and_deliver(
        &mut self,
        header: Header,
        mut body: Vec<u8>,
        mut bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
        tags: &Tags,
    ) -> Result<(), End> {
        let opener = self
            .opener
            .as_mut()
            .expect("a trailer is read only when protected");
        opener
            .open(
                &header,
                &mut body,
                bulk.as_deref_mut(),
                &tags.bytes[..tags.len],
            )
            .map_err(|e| End::Unauthentic(e.to_string()))?;
        header
            .check_body(&body)
            .map_err(|e| End::Bad(e.to_string()))?;
        if let Some(b) = bulk.as_mut() {
            check_bulk(&header, b)?;
        }
        self.deliver(header, body, bulk, permit)
    }

    fn deliver(
        &mut self,
        header: Header,
        body: Vec<u8>,
        bulk: Option<AlignedBuf>,
        permit: Option<BudgetPermit>,
    ) -> Result<(), End> {
        self.sink
            .frame(RawFrame { header, body, bulk }, permit)
            .map_err(End::Bad)?;
        self.frame_done();
        Ok(())
    }

    /// A frame is over: the next starts with a header.
    fn frame_done(&mut self) {
        self.parse = Parse::Header;
        if self.buffered() == 0 {
            // Idle: no frame in progress, no staging memory held.
            self.frame_started = None;
            (self.start, self.end) = (0, 0);
            self.staging = Vec::new();
        } else {
            self.frame_started = Some(Instant::now());
        }
    }
}

/// Takes one of the server's [`STREAMS_MAX`] stream slots, if one is free.
fn stream_slot(stats: &NetStats) -> bool {
    let before = stats.frames_streaming.fetch_add(1, Ordering::AcqRel);
    if before < STREAMS_MAX {
        return true;
    }
    stats.frames_streaming.fetch_sub(1, Ordering::AcqRel);
    false
}
