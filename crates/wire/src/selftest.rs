//! The network self-test (lnet_selftest's equivalent), served by every server process at the
//! network layer (service 0), below any file system service.
//!
//! * [`OP_SELFTEST_BRW_WRITE`]: the request's bulk is received (and its checksum verified when
//!   the sender asks), then dropped; the reply is empty.
//! * [`OP_SELFTEST_BRW_READ`]: the body is a [`BrwRead`]; the reply carries that many bulk
//!   bytes.
//!
//! Pings are [`crate::OP_PING`].

use serde::{Deserialize, Serialize};

/// Bulk write test: data in, nothing back.
pub const OP_SELFTEST_BRW_WRITE: u16 = 0x0002;
/// Bulk read test: a small request, data back.
pub const OP_SELFTEST_BRW_READ: u16 = 0x0003;

/// Body of a bulk read test request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrwRead {
    /// Bulk bytes wanted (at most the server's bulk limit).
    pub bytes: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let r = BrwRead { bytes: 1 << 20 };
        assert_eq!(decode_body::<BrwRead>(&encode_body(&r)).unwrap(), r);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_body::<BrwRead>(&bytes);
        }
    }
}
