//! A connection's protection after its handshake: each direction has its own keys and
//! counts its frames; a frame's trailer (after body and bulk) carries its tags.
//!
//! * integrity and bulk: one 16-byte tag, BLAKE3 keyed with the direction's MAC key, over
//!   the frame's sequence number, header, body and (bulk level) bulk data;
//! * privacy: body and bulk each encrypted with AES-256-GCM (ring's, in assembly with the
//!   CPU's AES and carry-less multiply instructions) under the direction's key, the
//!   nonce made of the sequence number and which part it is, the header as associated data;
//!   one 16-byte tag each (the bulk's only when there is bulk).
//!
//! The header's checksums are of the plain bytes: they are checked after decryption.

use super::{Level, SecError};
use nacre_wire::Header;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use std::borrow::Cow;

/// Bytes of one tag.
pub const TAG_BYTES: usize = 16;
/// Most bytes of a frame's trailer.
pub const TRAILER_BYTES_MAX: usize = 2 * TAG_BYTES;

/// Bytes of the trailer of a frame with `bulk_len` bulk bytes at `level`.
pub fn trailer_len(level: Level, bulk_len: u32) -> usize {
    match level {
        Level::None => 0,
        Level::Integrity | Level::Bulk => TAG_BYTES,
        Level::Privacy if bulk_len > 0 => 2 * TAG_BYTES,
        Level::Privacy => TAG_BYTES,
    }
}

/// One direction's keys and frame count.
struct Direction {
    level: Level,
    mac_key: [u8; 32],
    aead: Option<LessSafeKey>,
    seq: u64,
}

impl Direction {
    fn new(level: Level, key: [u8; 32]) -> Direction {
        let aead = (level == Level::Privacy).then(|| {
            LessSafeKey::new(
                UnboundKey::new(&AES_256_GCM, &key).expect("a 32-byte key is an AES-256 key"),
            )
        });
        Direction {
            level,
            mac_key: key,
            aead,
            seq: 0,
        }
    }

    fn mac(&self, seq: u64, header: &Header, body: &[u8], bulk: Option<&[u8]>) -> [u8; TAG_BYTES] {
        let mut h = blake3::Hasher::new_keyed(&self.mac_key);
        h.update(&seq.to_le_bytes());
        h.update(&header.encode());
        h.update(&(body.len() as u64).to_le_bytes());
        h.update(body);
        if self.level == Level::Bulk {
            h.update(bulk.unwrap_or(&[]));
        }
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&h.finalize().as_bytes()[..TAG_BYTES]);
        tag
    }
}

fn nonce(seq: u64, part: u32) -> Nonce {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&seq.to_le_bytes());
    n[8..].copy_from_slice(&part.to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

/// A frame ready to write: body and bulk as they go on the wire, and its trailer.
pub struct Sealed<'a> {
    /// Body (encrypted at privacy level).
    pub body: Cow<'a, [u8]>,
    /// Bulk (encrypted at privacy level).
    pub bulk: Option<Cow<'a, [u8]>>,
    trailer: [u8; TRAILER_BYTES_MAX],
    trailer_len: usize,
}

impl Sealed<'_> {
    /// The trailer's bytes (maybe none).
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..self.trailer_len]
    }
}

/// The sending side of a connection's protection.
pub struct Sealer(Direction);

impl Sealer {
    /// Sends at `level` with `key` (from the handshake).
    pub fn new(level: Level, key: [u8; 32]) -> Sealer {
        Sealer(Direction::new(level, key))
    }

    /// The level.
    pub fn level(&self) -> Level {
        self.0.level
    }

    /// Seals the next frame; `header` is final (checksums of the plain bytes set). Frames
    /// must be written in the order they were sealed.
    pub fn seal<'a>(
        &mut self,
        header: &Header,
        body: &'a [u8],
        bulk: Option<&'a [u8]>,
    ) -> Sealed<'a> {
        let d = &mut self.0;
        let seq = d.seq;
        d.seq += 1;
        let mut out = Sealed {
            body: Cow::Borrowed(body),
            bulk: bulk.map(Cow::Borrowed),
            trailer: [0; TRAILER_BYTES_MAX],
            trailer_len: trailer_len(d.level, bulk.map_or(0, |b| b.len() as u32)),
        };
        match (&d.aead, d.level) {
            (_, Level::None) => {}
            (Some(aead), Level::Privacy) => {
                let aad = header.encode();
                let (b, tag) = encrypt(aead, seq, 0, &aad, body);
                out.body = Cow::Owned(b);
                out.trailer[..TAG_BYTES].copy_from_slice(&tag);
                if let Some(bulk) = bulk.filter(|b| !b.is_empty()) {
                    let (b, tag) = encrypt(aead, seq, 1, &aad, bulk);
                    out.bulk = Some(Cow::Owned(b));
                    out.trailer[TAG_BYTES..].copy_from_slice(&tag);
                }
            }
            _ => {
                let tag = d.mac(seq, header, body, bulk);
                out.trailer[..TAG_BYTES].copy_from_slice(&tag);
            }
        }
        out
    }
}

/// Encrypts a copy of `plain` (the plain bytes stay with the request, for a resend).
fn encrypt(
    aead: &LessSafeKey,
    seq: u64,
    part: u32,
    aad: &[u8],
    plain: &[u8],
) -> (Vec<u8>, [u8; TAG_BYTES]) {
    let mut out = plain.to_vec();
    let tag = aead
        .seal_in_place_separate_tag(nonce(seq, part), Aad::from(aad), &mut out)
        .expect("a frame is far below AES-GCM's message limit");
    let mut t = [0u8; TAG_BYTES];
    t.copy_from_slice(tag.as_ref());
    (out, t)
}

/// Decrypts `cipher` in place, checking its tag.
fn decrypt(
    aead: &LessSafeKey,
    seq: u64,
    part: u32,
    aad: &[u8],
    cipher: &mut [u8],
    tag: &[u8],
) -> Result<(), SecError> {
    let tag = Tag::try_from(tag).map_err(|_| SecError::BadFrame("privacy"))?;
    aead.open_in_place_separate_tag(nonce(seq, part), Aad::from(aad), tag, cipher, 0..)
        .map(|_| ())
        .map_err(|_| SecError::BadFrame("privacy"))
}

/// The receiving side of a connection's protection.
pub struct Opener(Direction);

impl Opener {
    /// Receives at `level` with `key` (from the handshake).
    pub fn new(level: Level, key: [u8; 32]) -> Opener {
        Opener(Direction::new(level, key))
    }

    /// The level.
    pub fn level(&self) -> Level {
        self.0.level
    }

    /// Checks (and at privacy level decrypts in place) the next frame received, given its
    /// trailer. A failure means the frame was changed, replayed, dropped or reordered on
    /// the way: the connection must be dropped.
    pub fn open(
        &mut self,
        header: &Header,
        body: &mut [u8],
        bulk: Option<&mut [u8]>,
        trailer: &[u8],
    ) -> Result<(), SecError> {
        let d = &mut self.0;
        let want = trailer_len(d.level, bulk.as_ref().map_or(0, |b| b.len() as u32));
        if trailer.len() != want {
            return Err(SecError::BadFrame("trailer length"));
        }
        let seq = d.seq;
        d.seq += 1;
        match (&d.aead, d.level) {
            (_, Level::None) => Ok(()),
            (Some(aead), Level::Privacy) => {
                let aad = header.encode();
                decrypt(aead, seq, 0, &aad, body, &trailer[..TAG_BYTES])?;
                if let Some(bulk) = bulk.filter(|b| !b.is_empty()) {
                    decrypt(aead, seq, 1, &aad, bulk, &trailer[TAG_BYTES..])?;
                }
                Ok(())
            }
            _ => {
                let tag = d.mac(seq, header, body, bulk.as_deref());
                // Constant time: no early exit on the first differing byte.
                let diff = tag.iter().zip(trailer).fold(0u8, |a, (x, y)| a | (x ^ y));
                match diff {
                    0 => Ok(()),
                    _ => Err(SecError::BadFrame("integrity")),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(level: Level) -> (Sealer, Opener) {
        (Sealer::new(level, [7; 32]), Opener::new(level, [7; 32]))
    }

    fn frame(body: &[u8], bulk: Option<&[u8]>) -> Header {
        let mut h = Header::request(0x0301, 1, 9);
        h.seal(body, bulk, true);
        h
    }

    #[test]
    fn every_level_round_trips_in_order() {
        for level in Level::ALL {
            let (mut s, mut o) = pair(level);
            for i in 0..3u8 {
                let body = vec![i; 100];
                let bulk = vec![i + 1; 5000];
                let h = frame(&body, Some(&bulk));
                let sealed = s.seal(&h, &body, Some(&bulk));
                let mut b = sealed.body.to_vec();
                let mut k = sealed.bulk.as_ref().unwrap().to_vec();
                if level == Level::Privacy {
                    assert_ne!(b, body, "encrypted");
                    assert_ne!(k, bulk, "encrypted");
                }
                o.open(&h, &mut b, Some(&mut k), sealed.trailer()).unwrap();
                assert_eq!((b, k), (body, bulk), "{level}");
            }
        }
    }

    #[test]
    fn a_replayed_or_skipped_frame_fails() {
        for level in [Level::Integrity, Level::Bulk, Level::Privacy] {
            let (mut s, mut o) = pair(level);
            let h = frame(b"one", None);
            let first = s.seal(&h, b"one", None);
            let (b1, t1) = (first.body.to_vec(), first.trailer().to_vec());
            o.open(&h, &mut b1.clone(), None, &t1).unwrap();
            // The same frame again: its sequence number is past.
            assert!(o.open(&h, &mut b1.clone(), None, &t1).is_err(), "{level}");
        }
    }

    #[test]
    fn bulk_is_covered_only_from_the_bulk_level_up() {
        for (level, covered) in [
            (Level::Integrity, false),
            (Level::Bulk, true),
            (Level::Privacy, true),
        ] {
            let (mut s, mut o) = pair(level);
            let bulk = vec![3u8; 4096];
            let h = frame(b"b", Some(&bulk));
            let sealed = s.seal(&h, b"b", Some(&bulk));
            let mut k = sealed.bulk.as_ref().unwrap().to_vec();
            k[100] ^= 1;
            let r = o.open(
                &h,
                &mut sealed.body.to_vec(),
                Some(&mut k),
                sealed.trailer(),
            );
            assert_eq!(r.is_err(), covered, "{level}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any one bit flipped in body, bulk or trailer is caught at every protecting level
        /// (the bulk from the bulk level up).
        #[test]
        fn a_flipped_bit_is_caught(
            body in proptest::collection::vec(any::<u8>(), 1..300),
            bulk in proptest::collection::vec(any::<u8>(), 1..3000),
            which in 0usize..3,
            at in any::<usize>(),
            bit in 0u8..8,
            level in prop_oneof![Just(Level::Bulk), Just(Level::Privacy)],
        ) {
            let (mut s, mut o) = pair(level);
            let h = frame(&body, Some(&bulk));
            let sealed = s.seal(&h, &body, Some(&bulk));
            let (mut b, mut k, mut t) = (
                sealed.body.to_vec(),
                sealed.bulk.as_ref().unwrap().to_vec(),
                sealed.trailer().to_vec(),
            );
            let v = match which { 0 => &mut b, 1 => &mut k, _ => &mut t };
            let n = v.len();
            v[at % n] ^= 1 << bit;
            prop_assert!(o.open(&h, &mut b, Some(&mut k), &t).is_err());
        }

        /// A header changed on the way fails too.
        #[test]
        fn a_changed_header_is_caught(xid in any::<u64>(), level in prop_oneof![Just(Level::Integrity), Just(Level::Privacy)]) {
            let (mut s, mut o) = pair(level);
            let h = frame(b"x", None);
            let sealed = s.seal(&h, b"x", None);
            let mut other = h;
            other.xid = xid;
            prop_assume!(xid != h.xid);
            prop_assert!(o.open(&other, &mut sealed.body.to_vec(), None, sealed.trailer()).is_err());
        }
    }
}
