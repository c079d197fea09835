//! Protocol versions between peers (docs/formats.md, "Negotiation"): which versions this
//! side speaks, and the answer to a request of one it does not.
//!
//! A server reads a request of any version whole (the 48-byte header is the same in every
//! version) and, when it does not speak that version, answers it with a reply of the
//! request's own header version, status `EPROTO` and a body of [`RANGE_BODY_BYTES`]: the
//! oldest and newest versions it speaks, u16 little-endian each. The connection stays open.
//! An error reply had an empty body before, so an older client reads this one as a plain
//! `EPROTO`; an `EPROTO` with an empty body still means a body that did not decode.
//!
//! A client that gets that answer picks the newest version both sides speak ([`common`]);
//! with none, it fails naming both ranges. Today this side speaks one version, so there is
//! nothing to resend in: the answer and the error naming both ranges are what matter, so
//! that the servers of this release answer the clients of the next one.

use crate::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};

/// Bytes of the body of an `EPROTO` answer to a request of an unspoken version.
pub const RANGE_BODY_BYTES: usize = 4;

/// The versions a peer speaks, oldest to newest (both included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Oldest version spoken.
    pub oldest: u16,
    /// Newest version spoken.
    pub newest: u16,
}

impl Range {
    /// The versions this side speaks.
    pub const OURS: Range = Range {
        oldest: PROTOCOL_VERSION_MIN,
        newest: PROTOCOL_VERSION,
    };

    /// True if `version` is in the range.
    pub fn has(self, version: u16) -> bool {
        (self.oldest..=self.newest).contains(&version)
    }

    /// The body of the `EPROTO` answer that states this range.
    pub fn encode(self) -> [u8; RANGE_BODY_BYTES] {
        let mut b = [0u8; RANGE_BODY_BYTES];
        b[..2].copy_from_slice(&self.oldest.to_le_bytes());
        b[2..].copy_from_slice(&self.newest.to_le_bytes());
        b
    }

    /// The range an `EPROTO` answer's body states; None for any other body (an empty one:
    /// a body that did not decode; anything else is not a range either).
    pub fn decode(body: &[u8]) -> Option<Range> {
        let b: &[u8; RANGE_BODY_BYTES] = body.try_into().ok()?;
        let r = Range {
            oldest: u16::from_le_bytes([b[0], b[1]]),
            newest: u16::from_le_bytes([b[2], b[3]]),
        };
        (r.oldest <= r.newest).then_some(r)
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.oldest == self.newest {
            true => write!(f, "protocol {}", self.newest),
            false => write!(f, "protocol {} to {}", self.oldest, self.newest),
        }
    }
}

/// True if this side speaks protocol `version`.
pub fn speaks(version: u16) -> bool {
    Range::OURS.has(version)
}

/// The newest version both `ours` and `theirs` speak, if any.
pub fn common(ours: Range, theirs: Range) -> Option<u16> {
    let newest = ours.newest.min(theirs.newest);
    (newest >= ours.oldest.max(theirs.oldest)).then_some(newest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_answer_states_the_range_in_four_bytes() {
        let r = Range {
            oldest: 6,
            newest: 7,
        };
        assert_eq!(r.encode(), [6, 0, 7, 0]);
        assert_eq!(Range::decode(&[6, 0, 7, 0]), Some(r));
        assert_eq!(Range::decode(&[]), None, "an empty EPROTO body is no range");
        assert_eq!(Range::decode(&[7, 0, 6, 0]), None, "oldest after newest");
        assert_eq!(Range::decode(&[6, 0, 7]), None);
        assert_eq!(r.to_string(), "protocol 6 to 7");
        assert_eq!(
            Range::OURS.to_string(),
            format!("protocol {PROTOCOL_VERSION}")
        );
        assert!(speaks(PROTOCOL_VERSION) && speaks(PROTOCOL_VERSION_MIN));
        assert!(!speaks(PROTOCOL_VERSION + 1) && !speaks(PROTOCOL_VERSION_MIN - 1));
    }

    #[test]
    fn the_common_version_is_the_newest_both_speak() {
        let r = |oldest, newest| Range { oldest, newest };
        assert_eq!(common(r(6, 8), r(5, 7)), Some(7));
        assert_eq!(common(r(6, 6), r(6, 6)), Some(6));
        assert_eq!(common(r(7, 8), r(5, 6)), None);
        assert_eq!(common(r(5, 6), r(7, 8)), None);
    }

    proptest! {
        /// Any body decodes to a range or to None, never panics, and a range survives
        /// its encoding.
        #[test]
        fn decoding_any_body_is_safe(body in proptest::collection::vec(any::<u8>(), 0..8)) {
            if let Some(r) = Range::decode(&body) {
                prop_assert_eq!(Range::decode(&r.encode()), Some(r));
                prop_assert!(r.oldest <= r.newest);
            }
        }
    }
}
