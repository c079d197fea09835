//! Frame I/O on byte streams: vectored writes of header, body and bulk; bounded reads.

use crate::sec::session::Sealer;
use crate::NetError;
use nacre_types::limits::BODY_BYTES_MAX;
use nacre_types::AlignedBuf;
use nacre_wire::{Header, HEADER_BYTES};
use std::io::{IoSlice, Read, Write};

/// A socket written with `MSG_NOSIGNAL`: a peer that went away (killed, reset) is an
/// `EPIPE` error the caller handles, never a SIGPIPE. Short commands run with SIGPIPE's
/// default disposition (they die quietly under `| head`), and so can applications linking
/// the client; `write_vectored` on a std socket is a plain `writev`, which raises it.
#[derive(Debug, Clone, Copy)]
pub struct NoSigPipe<'a, S: std::os::fd::AsFd>(pub &'a S);

impl<S: std::os::fd::AsFd> Write for NoSigPipe<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(rustix::net::send(
            self.0,
            buf,
            rustix::net::SendFlags::NOSIGNAL,
        )?)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> std::io::Result<usize> {
        Ok(rustix::net::sendmsg(
            self.0,
            bufs,
            &mut rustix::net::SendAncillaryBuffer::default(),
            rustix::net::SendFlags::NOSIGNAL,
        )?)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A frame read from a stream, checksums verified.
#[derive(Debug)]
pub struct RawFrame {
    /// Header.
    pub header: Header,
    /// Body bytes.
    pub body: Vec<u8>,
    /// Bulk data.
    pub bulk: Option<AlignedBuf>,
}

/// Writes one frame with as few syscalls as the kernel allows (one `writev` normally).
pub fn write_frame(
    w: &mut impl Write,
    header: &Header,
    body: &[u8],
    bulk: Option<&[u8]>,
) -> std::io::Result<()> {
    write_sealed(w, header, body, bulk, None)
}

/// [`write_frame`] on a connection protected by `sealer` (its handshake's session): body
/// and bulk as the level wants them, the trailer of tags between them.
///
/// Fault points (tests of end-to-end integrity): `net.corrupt_body` and `net.corrupt_bulk`
/// flip one bit of the body or bulk after the checksums (and tags) were sealed, as a bad NIC
/// or cable would; the receiver must notice.
pub fn write_sealed(
    w: &mut impl Write,
    header: &Header,
    body: &[u8],
    bulk: Option<&[u8]>,
    sealer: Option<&mut Sealer>,
) -> std::io::Result<()> {
    let sealed = sealer.map(|s| s.seal(header, body, bulk));
    let (body, bulk, trailer) = match &sealed {
        Some(s) => (&s.body[..], s.bulk.as_deref(), s.trailer()),
        None => (body, bulk, &[][..]),
    };
    if crate::fault::armed_any() {
        let flip = |bytes: &[u8]| {
            let mut copy = bytes.to_vec();
            let at = copy.len() / 2;
            copy[at] ^= 0x08;
            copy
        };
        if !body.is_empty() && crate::fault::hit("net.corrupt_body") {
            return write_plain(w, header, &flip(body), bulk, trailer);
        }
        if let Some(b) = bulk.filter(|b| !b.is_empty()) {
            if crate::fault::hit("net.corrupt_bulk") {
                return write_plain(w, header, body, Some(&flip(b)), trailer);
            }
        }
    }
    write_plain(w, header, body, bulk, trailer)
}

/// A frame to write: its header, body and bulk (if any).
pub type FrameParts<'a> = (Header, &'a [u8], Option<&'a [u8]>);

/// Writes several frames (header, body, bulk) in order with as few system calls as the
/// stream takes (one vectored write of them all, usually), each sealed by `sealer` as
/// [`write_sealed`] does. While a fault point is armed, one by one through
/// [`write_sealed`] (the corruption points act per frame).
pub fn write_sealed_many(
    w: &mut impl Write,
    frames: &[FrameParts<'_>],
    mut sealer: Option<&mut Sealer>,
) -> std::io::Result<()> {
    if crate::fault::armed_any() {
        for (header, body, bulk) in frames {
            write_sealed(w, header, body, *bulk, sealer.as_deref_mut())?;
        }
        return Ok(());
    }
    let sealed: Vec<_> = frames
        .iter()
        .map(|(h, body, bulk)| sealer.as_deref_mut().map(|s| s.seal(h, body, *bulk)))
        .collect();
    let heads: Vec<[u8; HEADER_BYTES]> = frames.iter().map(|(h, _, _)| h.encode()).collect();
    let mut slices = Vec::with_capacity(frames.len() * 4);
    for ((head, (_, body, bulk)), sealed) in heads.iter().zip(frames).zip(&sealed) {
        let (body, bulk, trailer) = match sealed {
            Some(s) => (&s.body[..], s.bulk.as_deref(), s.trailer()),
            None => (*body, *bulk, &[][..]),
        };
        for part in [&head[..], body, trailer, bulk.unwrap_or(&[])] {
            if !part.is_empty() {
                slices.push(IoSlice::new(part));
            }
        }
    }
    write_slices(w, &mut slices)
}

fn write_plain(
    w: &mut impl Write,
    header: &Header,
    body: &[u8],
    bulk: Option<&[u8]>,
    trailer: &[u8],
) -> std::io::Result<()> {
    let head = header.encode();
    // The tags go before the bulk: a receiver reads them with the body, then the bulk
    // straight into its buffer.
    let mut slices = [
        IoSlice::new(&head),
        IoSlice::new(body),
        IoSlice::new(trailer),
        IoSlice::new(bulk.unwrap_or(&[])),
    ];
    write_slices(w, &mut slices)
}

/// Writes all of `slices`, in vectored writes of at most IOV_MAX (1024) slices.
fn write_slices(w: &mut impl Write, mut slices: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !slices.is_empty() {
        let at_once = slices.len().min(1024);
        let n = w.write_vectored(&slices[..at_once])?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// Reads one frame, verifying header, body and bulk checksums. Returns `Ok(None)` on a clean
/// end of stream before a header. Lengths are bounded before any allocation.
pub fn read_frame(r: &mut impl Read, bulk_len_max: u32) -> Result<Option<RawFrame>, NetError> {
    let mut head = [0u8; HEADER_BYTES];
    let mut got = 0;
    while got < HEADER_BYTES {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Any header version: the node API's frames carry their own for ever
    // (nacre_wire::api::API_HEADER_VERSION), and a caller judges the version it reads.
    let header = Header::decode_any_version(&head, bulk_len_max)?;
    debug_assert!(header.body_len <= BODY_BYTES_MAX);
    let mut body = vec![0u8; header.body_len as usize];
    r.read_exact(&mut body)?;
    header.check_body(&body)?;
    let bulk = if header.bulk_len > 0 {
        let mut buf = AlignedBuf::for_overwrite(header.bulk_len as usize);
        r.read_exact(&mut buf)?;
        header.check_bulk(&buf)?;
        Some(buf)
    } else {
        None
    };
    Ok(Some(RawFrame { header, body, bulk }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::limits::BULK_BYTES_MAX;
    use proptest::prelude::*;

    #[test]
    fn round_trip_with_bulk() {
        let mut h = Header::request(0x0301, 1, 9);
        h.seal(b"hello", Some(&[3u8; 5000]), true);
        let mut out = Vec::new();
        write_frame(&mut out, &h, b"hello", Some(&[3u8; 5000])).unwrap();
        let f = read_frame(&mut out.as_slice(), BULK_BYTES_MAX)
            .unwrap()
            .unwrap();
        assert_eq!(f.body, b"hello");
        assert_eq!(f.bulk.unwrap().len(), 5000);
    }

    #[test]
    fn flipped_bulk_bit_is_detected() {
        let mut h = Header::request(0x0301, 1, 9);
        h.seal(b"x", Some(&[1u8; 100]), true);
        let mut out = Vec::new();
        write_frame(&mut out, &h, b"x", Some(&[1u8; 100])).unwrap();
        let last = out.len() - 1;
        out[last] ^= 0x10;
        assert!(read_frame(&mut out.as_slice(), BULK_BYTES_MAX).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = read_frame(&mut bytes.as_slice(), BULK_BYTES_MAX);
        }
    }
}
