//! Network identifiers (NIDs), written as Lustre writes them: `ADDRESS@NETWORK`.
//!
//! Lustre listens on one well-known port (988) per host; Nacre keeps that default but accepts an
//! explicit port (`127.0.0.1:9001@tcp`) so several servers can share one address, as tests do.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

/// Lustre's acceptor port, used when a NID names no port.
pub const DEFAULT_PORT: u16 = 988;

/// A network identifier: a socket address on a named LNet-style network.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
pub struct Nid {
    /// IP address and port of the peer's acceptor.
    pub addr: SocketAddr,
    /// Network number: `tcp` is 0, `tcp1` is 1, and so on.
    pub net: u16,
}

/// Why a NID string did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NidError {
    /// No `@` separates address and network.
    #[error("NID '{0}' has no '@NETWORK' part (expected e.g. 192.168.1.2@tcp)")]
    MissingNetwork(String),
    /// The network is not `tcpN`.
    #[error("NID '{nid}': unsupported network '{net}' (only tcp networks exist)")]
    UnsupportedNetwork {
        /// Whole NID as given.
        nid: String,
        /// Network part.
        net: String,
    },
    /// The address did not resolve.
    #[error("NID '{nid}': bad address '{addr}'")]
    BadAddress {
        /// Whole NID as given.
        nid: String,
        /// Address part.
        addr: String,
    },
}

impl Nid {
    /// A NID for a socket address on network `tcp`.
    pub fn tcp(addr: SocketAddr) -> Nid {
        Nid { addr, net: 0 }
    }

    /// The IP address.
    pub fn ip(&self) -> IpAddr {
        self.addr.ip()
    }
}

impl std::str::FromStr for Nid {
    type Err = NidError;
    fn from_str(s: &str) -> Result<Nid, NidError> {
        let (addr, net) = s
            .rsplit_once('@')
            .ok_or_else(|| NidError::MissingNetwork(s.into()))?;
        let net_num = net
            .strip_prefix("tcp")
            .and_then(|n| {
                if n.is_empty() {
                    Some(0)
                } else {
                    n.parse::<u16>().ok()
                }
            })
            .ok_or_else(|| NidError::UnsupportedNetwork {
                nid: s.into(),
                net: net.into(),
            })?;
        let bad = || NidError::BadAddress {
            nid: s.into(),
            addr: addr.into(),
        };
        let with_port = if addr.parse::<IpAddr>().is_ok() || !addr.contains(':') {
            if addr.contains(':') {
                format!("[{addr}]:{DEFAULT_PORT}")
            } else {
                format!("{addr}:{DEFAULT_PORT}")
            }
        } else {
            addr.to_string()
        };
        let sock = with_port
            .to_socket_addrs()
            .map_err(|_| bad())?
            .next()
            .ok_or_else(bad)?;
        Ok(Nid {
            addr: sock,
            net: net_num,
        })
    }
}

impl fmt::Display for Nid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let net = if self.net == 0 {
            "tcp".to_string()
        } else {
            format!("tcp{}", self.net)
        };
        if self.addr.port() == DEFAULT_PORT {
            write!(f, "{}@{net}", self.addr.ip())
        } else {
            write!(f, "{}@{net}", self.addr)
        }
    }
}

impl fmt::Debug for Nid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lustre_form() {
        let nid: Nid = "127.0.0.1@tcp".parse().unwrap();
        assert_eq!(nid.addr.port(), DEFAULT_PORT);
        assert_eq!(nid.to_string(), "127.0.0.1@tcp");
    }

    #[test]
    fn parses_port_and_network_number() {
        let nid: Nid = "10.1.2.3:9001@tcp2".parse().unwrap();
        assert_eq!(nid.addr.port(), 9001);
        assert_eq!(nid.net, 2);
        assert_eq!(nid.to_string(), "10.1.2.3:9001@tcp2");
    }

    #[test]
    fn rejects_bad_nids() {
        assert!(matches!(
            "127.0.0.1".parse::<Nid>(),
            Err(NidError::MissingNetwork(_))
        ));
        assert!(matches!(
            "1.2.3.4@o2ib".parse::<Nid>(),
            Err(NidError::UnsupportedNetwork { .. })
        ));
        assert!(matches!(
            "1.2.3.4:x@tcp".parse::<Nid>(),
            Err(NidError::BadAddress { .. })
        ));
    }
}
