//! Data on the MDT (table `dom`): `[1] bytes`, the bytes of a file's component on the MDT
//! from byte 0, as long as the file's bytes there (a file whose size ends inside the
//! component has exactly its size stored; shorter only where the file continues on its OSTs
//! past a hole). Written in the transaction that changes the file's size and times with it.

use super::versions::RecordError;

/// Version byte of data-on-MDT records.
pub(crate) const DOM_RECORD_VERSION: u8 = 1;
/// The record's name in errors.
const NAME: &str = "data-on-MDT record";

pub use nacre_types::layout::dom_charged_bytes;

/// The stored form of a file's bytes on the MDT.
pub fn encode_dom(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + bytes.len());
    out.push(DOM_RECORD_VERSION);
    out.extend_from_slice(bytes);
    out
}

/// The bytes of a stored data-on-MDT record (a newer version is [`RecordError::TooNew`]).
pub fn decode_dom(stored: &[u8]) -> Result<&[u8], RecordError> {
    match stored.split_first() {
        Some((&DOM_RECORD_VERSION, bytes)) => Ok(bytes),
        Some((&v, _)) if v > DOM_RECORD_VERSION => Err(RecordError::TooNew {
            what: NAME,
            found: v,
            newest: DOM_RECORD_VERSION,
        }),
        Some((&v, _)) => Err(RecordError::unknown_version(NAME, v)),
        None => Err(RecordError::Damaged {
            what: NAME,
            detail: "empty".to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_and_other_versions_are_refused_by_name() {
        // A stored sample of version 1: keeps decoding.
        assert_eq!(decode_dom(&[1, b'a', b'b']), Ok(&b"ab"[..]));
        assert_eq!(decode_dom(&encode_dom(b"")), Ok(&b""[..]));
        assert!(decode_dom(&[2, 0]).unwrap_err().is_too_new());
        assert!(!decode_dom(&[0, 0]).unwrap_err().is_too_new());
        assert!(decode_dom(&[]).is_err());
    }
}
