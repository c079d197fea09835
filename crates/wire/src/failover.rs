//! Failover service messages (service 4): an administrator (`nacre failover`) moves a target
//! of a failover pair between the two servers that can reach its storage.

use serde::{Deserialize, Serialize};

/// Longest target name accepted (`fsname-OST0000` and some room).
pub const TARGET_NAME_BYTES_MAX: usize = 64;

/// Requests to a server's failover service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailoverRequest {
    /// Start serving `target`, which this server stands by for: take it under multi-mount
    /// protection (waiting until its owner is known to be gone), start it and register it
    /// with the MGS. Reply: [`FailoverReply::Done`] once it serves, or `EBUSY` if another
    /// server is alive on it, `ENOENT` if this server does not stand by for it.
    Takeover {
        /// Target name, e.g. `demo-OST0001`.
        target: String,
    },
    /// Stop serving `target` cleanly (its journal synced, its protection record marked
    /// clean) and stand by for it. Reply: [`FailoverReply::Done`].
    Release {
        /// Target name.
        target: String,
    },
}

/// Replies of the failover service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailoverReply {
    /// Done.
    Done {
        /// Target name.
        target: String,
        /// How long it took, in milliseconds (a takeover waits for the owner's record).
        took_ms: u64,
    },
}

impl FailoverRequest {
    /// Opcode (service 4).
    pub fn opcode(&self) -> u16 {
        match self {
            FailoverRequest::Takeover { .. } => 0x0401,
            FailoverRequest::Release { .. } => 0x0402,
        }
    }

    /// The target named.
    pub fn target(&self) -> &str {
        match self {
            FailoverRequest::Takeover { target } | FailoverRequest::Release { target } => target,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_refuses_truncation() {
        let req = FailoverRequest::Takeover {
            target: "demo-OST0001".into(),
        };
        let reply = FailoverReply::Done {
            target: "demo-OST0001".into(),
            took_ms: 3200,
        };
        let (a, b) = (encode_body(&req), encode_body(&reply));
        assert_eq!(decode_body::<FailoverRequest>(&a).unwrap(), req);
        assert_eq!(decode_body::<FailoverReply>(&b).unwrap(), reply);
        for n in 0..a.len() {
            assert!(decode_body::<FailoverRequest>(&a[..n]).is_err());
        }
        for n in 0..b.len() {
            assert!(decode_body::<FailoverReply>(&b[..n]).is_err());
        }
        assert_eq!(req.opcode() >> 8, 4);
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_body::<FailoverRequest>(&bytes);
            let _ = decode_body::<FailoverReply>(&bytes);
        }
    }
}
