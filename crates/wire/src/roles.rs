//! Who may send what: the role a connection proved ([`Role`]) and, for every opcode a server
//! serves over the network, the roles that may send it ([`need_of`]). The table is checked
//! by the network layer on every request before its body is decoded (docs/security.md has
//! the same table in words); each handler then checks that the body it decodes is the
//! request its header's opcode names, so a body cannot smuggle a request of another row.
//!
//! A role comes from the connection, never from a request: the key's role proved in the
//! handshake, or without keys the peer's address (a registered server's address is a
//! server, any other a client).

/// What a connection's peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A client node (a mount, a tool run on a client node).
    Client,
    /// An MDS or OSS (or MGS) acting for its targets.
    Server,
    /// An administrator's tool (failover, quota and QoS administration, mover jobs).
    Admin,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Client, Role::Server, Role::Admin];

    /// Its name (`client`, `server`, `admin`), as key files and logs say it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Server => "server",
            Role::Admin => "admin",
        }
    }

    /// The role named `s`.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == s)
    }

    /// Its code in a handshake.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The role of handshake code `c`.
    pub fn from_code(c: u8) -> Option<Role> {
        Role::ALL.get(usize::from(c)).copied()
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Who may send a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Any authenticated peer (clients are then held to their nodemap by the handler).
    Anyone,
    /// Servers only: what targets say of themselves or ask of each other.
    Server,
    /// Servers and administrators: changes to the file system's configuration.
    ServerOrAdmin,
    /// A server; without keys, a peer registering a target at its own address (the MGS
    /// then checks that the address is one the target registers, and for a target it
    /// knows, one it registered before).
    ServerOrOwnAddress,
    /// Nobody over the network (served through the local control socket only).
    Nobody,
}

impl Need {
    /// True if a peer of `role` may send it.
    pub fn allows(self, role: Role) -> bool {
        match self {
            Need::Anyone => true,
            Need::Server | Need::ServerOrOwnAddress => role == Role::Server,
            Need::ServerOrAdmin => matches!(role, Role::Server | Role::Admin),
            Need::Nobody => false,
        }
    }

    /// Its name in docs and logs.
    pub fn name(self) -> &'static str {
        match self {
            Need::Anyone => "anyone",
            Need::Server => "server",
            Need::ServerOrAdmin => "server or admin",
            Need::ServerOrOwnAddress => "server (without keys: at its own address)",
            Need::Nobody => "nobody",
        }
    }
}

/// Who may send the request of `opcode` (an opcode no service has: [`Need::Anyone`], and
/// the router answers it `ENOSYS`).
pub fn need_of(opcode: u16) -> Need {
    match opcode {
        // MGS: registering a target moves its address for everyone; parameters are stored
        // and applied by every server; nodemaps are the tenants' whole policy; quota and
        // QoS reports and grants are what targets say of their usage.
        0x0101 => Need::ServerOrOwnAddress,       // Register
        0x0103 => Need::ServerOrAdmin,            // SetParam
        0x0106 => Need::Server,                   // GetNodemaps
        0x0107 | 0x0108 => Need::ServerOrAdmin,   // QuotaSet, QuotaGrace
        0x010a | 0x010b | 0x010f => Need::Server, // QuotaAcquire, QuotaSync, QosSync
        0x0110 => Need::Server,                   // AuditRead: who did what, from where
        0x010c | 0x010d => Need::ServerOrAdmin,   // QosSet, QosDel
        // MDS: what only peer MDTs send (FIDs for a remote create, updates of a cross-MDT
        // change, the rename lock).
        0x021a | 0x021b | 0x0221 => Need::Server, // AllocFid, Update, RenameLock
        // OSS: destroying objects and changing their owners follow the MDT's namespace.
        0x0307 | 0x0309 => Need::Server, // Destroy, SetOwner
        // Failover: moving a target between servers.
        0x0401 | 0x0402 => Need::ServerOrAdmin,
        // The data mover runs jobs as root.
        0x0501..=0x0503 => Need::ServerOrAdmin,
        // The node API is served on a local socket only.
        0x0600..=0x06ff => Need::Nobody,
        _ => Need::Anyone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::FailoverRequest;
    use crate::mds::MdsOp;
    use crate::mgs::MgsRequest;
    use crate::oss::OssRequest;

    #[test]
    fn roles_round_trip_by_name_and_code() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.name()), Some(r));
            assert_eq!(Role::from_code(r.code()), Some(r));
        }
        assert_eq!(Role::parse("root"), None);
        assert_eq!(Role::from_code(3), None);
    }

    #[test]
    fn the_table_names_the_requests_it_means() {
        // The opcodes of the table are the requests' own (a renumbering cannot slip past).
        let server_only = [
            MgsRequest::Register(crate::mgs::TargetInfo {
                kind: crate::mgs::TargetKind::Ost,
                index: 0,
                fsname: "f".into(),
                uuid: "u".into(),
                nids: Vec::new(),
                servicenodes: Vec::new(),
            })
            .opcode(),
            MgsRequest::GetNodemaps.opcode(),
            MgsRequest::AuditRead {
                fsname: "f".into(),
                epoch: 0,
                after: 0,
            }
            .opcode(),
            MdsOp::AllocFid.opcode(),
            MdsOp::RenameLock {
                owner: ([0; 16], 0),
                acquire: true,
            }
            .opcode(),
            OssRequest::Destroy {
                objects: Vec::new(),
            }
            .opcode(),
        ];
        for op in server_only {
            assert!(
                matches!(need_of(op), Need::Server | Need::ServerOrOwnAddress),
                "{op:#06x}"
            );
            assert!(!need_of(op).allows(Role::Client));
            assert!(!need_of(op).allows(Role::Admin));
        }
        let admin = [
            MgsRequest::SetParam {
                fsname: String::new(),
                name: "fail_loc".into(),
                value: "net.panic".into(),
            }
            .opcode(),
            FailoverRequest::Release { target: "t".into() }.opcode(),
        ];
        for op in admin {
            assert!(!need_of(op).allows(Role::Client), "{op:#06x}");
            assert!(need_of(op).allows(Role::Admin));
            assert!(need_of(op).allows(Role::Server));
        }
        for op in [
            MgsRequest::GetConfig { fsname: "f".into() }.opcode(),
            MdsOp::Connect.opcode(),
            OssRequest::StatFs.opcode(),
            crate::OP_PING,
        ] {
            assert!(need_of(op).allows(Role::Client), "{op:#06x}");
        }
        assert!(!need_of(0x0601).allows(Role::Server));
    }
}
