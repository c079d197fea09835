//! Network interfaces (LNet's NIs): the `networks` setting and interface addresses.
//!
//! `networks="tcp0(eth0)[0],tcp1(eth1)[1]"` puts interface `eth0` on network `tcp0` served by
//! CPU partition 0, and `eth1` on `tcp1` served by partition 1. `tcp(eth0,eth1)` puts two
//! interfaces on one network (multi-rail: one node, several rails). A missing `[..]` means
//! every partition.

use nacre_types::Nid;
use std::net::{IpAddr, SocketAddr};

/// Longest `networks` value accepted.
pub const NETWORKS_BYTES_MAX: usize = 4096;
/// Most interfaces one process may listen on.
pub const INTERFACES_MAX: usize = 64;

/// One interface of the `networks` setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetInterface {
    /// Network number (`tcp0` and `tcp` are 0).
    pub net: u16,
    /// Interface name.
    pub ifname: String,
    /// CPU partitions serving it (empty: all).
    pub cpts: Vec<usize>,
}

/// Parses `networks`; errors name the bad part.
pub fn parse_networks(s: &str) -> Result<Vec<NetInterface>, String> {
    if s.len() > NETWORKS_BYTES_MAX {
        return Err(format!("networks: longer than {NETWORKS_BYTES_MAX} bytes"));
    }
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let open = rest
            .find('(')
            .ok_or_else(|| format!("networks: '{rest}': expected NET(IFACE[,IFACE])[CPTS]"))?;
        let close = rest[open..]
            .find(')')
            .map(|i| open + i)
            .ok_or_else(|| format!("networks: '{rest}': '(' without ')'"))?;
        let net_name = rest[..open].trim();
        let net = net_name
            .strip_prefix("tcp")
            .and_then(|n| {
                if n.is_empty() {
                    Some(0)
                } else {
                    n.parse().ok()
                }
            })
            .ok_or_else(|| {
                format!("networks: unsupported network '{net_name}' (only tcpN networks exist)")
            })?;
        let ifaces: Vec<String> = rest[open + 1..close]
            .split(',')
            .map(|i| i.trim().to_string())
            .collect();
        if ifaces.iter().any(String::is_empty) {
            return Err(format!("networks: '{net_name}': empty interface name"));
        }
        rest = rest[close + 1..].trim_start();
        let mut cpts = Vec::new();
        if let Some(after) = rest.strip_prefix('[') {
            let end = after
                .find(']')
                .ok_or_else(|| format!("networks: '{net_name}': '[' without ']'"))?;
            cpts = nacre_cpt::parse_cpu_list(&after[..end])
                .map_err(|e| format!("networks: '{net_name}' partitions: {e}"))?;
            rest = after[end + 1..].trim_start();
        }
        for ifname in ifaces {
            out.push(NetInterface {
                net,
                ifname,
                cpts: cpts.clone(),
            });
        }
        rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
    }
    if out.is_empty() {
        return Err("networks: no interfaces given".into());
    }
    if out.len() > INTERFACES_MAX {
        return Err(format!("networks: more than {INTERFACES_MAX} interfaces"));
    }
    Ok(out)
}

/// The IPv4 address of interface `ifname` (the first one, if it has several).
pub fn interface_addr(ifname: &str) -> Result<IpAddr, String> {
    let mut found = None;
    // SAFETY: getifaddrs fills a linked list we only read and then free with freeifaddrs;
    // ifa_addr is checked for null and for AF_INET before being read as sockaddr_in.
    unsafe {
        let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut list) != 0 {
            return Err(format!("getifaddrs: {}", std::io::Error::last_os_error()));
        }
        let mut cur = list;
        while !cur.is_null() {
            let ifa = &*cur;
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy();
            if name == ifname
                && !ifa.ifa_addr.is_null()
                && i32::from((*ifa.ifa_addr).sa_family) == libc::AF_INET
            {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                found = Some(IpAddr::from(
                    u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                ));
                break;
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.ok_or_else(|| format!("interface '{ifname}' has no IPv4 address (or does not exist)"))
}

/// The NID of interface `ni` listening on `port`.
pub fn nid_of(ni: &NetInterface, port: u16) -> Result<Nid, String> {
    Ok(Nid {
        addr: SocketAddr::new(interface_addr(&ni.ifname)?, port),
        net: ni.net,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lustre_networks_syntax() {
        let n = parse_networks("tcp0(eth0)[0],tcp1(eth1)[1]").unwrap();
        assert_eq!(
            n,
            vec![
                NetInterface {
                    net: 0,
                    ifname: "eth0".into(),
                    cpts: vec![0]
                },
                NetInterface {
                    net: 1,
                    ifname: "eth1".into(),
                    cpts: vec![1]
                },
            ]
        );
        let mr = parse_networks("tcp(ib0, ib1)[0-1]").unwrap();
        assert_eq!(mr.len(), 2);
        assert!(mr.iter().all(|i| i.net == 0 && i.cpts == vec![0, 1]));
        assert_eq!(
            parse_networks("tcp2(lo)").unwrap()[0].cpts,
            Vec::<usize>::new()
        );
        assert!(parse_networks("o2ib(ib0)")
            .unwrap_err()
            .contains("unsupported network 'o2ib'"));
        assert!(parse_networks("tcp0(eth0")
            .unwrap_err()
            .contains("'(' without ')'"));
        assert!(parse_networks("tcp0(eth0)[0")
            .unwrap_err()
            .contains("'[' without ']'"));
        assert!(parse_networks("tcp0(eth0)[x]")
            .unwrap_err()
            .contains("'x' is not a number"));
        assert!(parse_networks("tcp0()")
            .unwrap_err()
            .contains("empty interface name"));
        assert!(parse_networks("").unwrap_err().contains("no interfaces"));
    }

    #[test]
    fn loopback_has_an_address() {
        assert_eq!(interface_addr("lo").unwrap(), IpAddr::from([127, 0, 0, 1]));
        assert!(interface_addr("nosuch0").unwrap_err().contains("nosuch0"));
    }
}
