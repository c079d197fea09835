//! Who sent a request ([`Caller`]), as its connection shows it, never as its body says: the
//! identity a handshake proved (role, client key name, bound nodemap), or without keys the
//! peer's address — a registered server's address is a server ([`install_servers`]), any
//! other a client. Requests from this process itself (the in-process transport) are the
//! server's own.

use crate::sec::Identity;
use nacre_types::Status;
use nacre_wire::nodemap::{Applies, Nodemap};
use nacre_wire::roles::{Need, Role};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

/// The peer of one connection.
#[derive(Clone, Debug)]
pub struct Caller {
    /// Its address (None: this process).
    addr: Option<SocketAddr>,
    /// What its handshake proved (None: no handshake).
    proved: Option<Identity>,
}

/// The addresses of each file system's registered servers, as this process last learnt
/// them from the MGS (keyless role by address).
static SERVERS: RwLock<Option<HashMap<String, Vec<IpAddr>>>> = RwLock::new(None);

/// The name [`install_servers`] keeps the MGSs' addresses under (no file system is named
/// so: names have no parentheses).
pub const MGS_SERVERS: &str = "(mgs)";

/// Records the addresses of `fsname`'s registered servers (its targets' NIDs and service
/// nodes, as the MGS's configuration lists them).
pub fn install_servers(fsname: &str, addrs: Vec<IpAddr>) {
    let addrs = addrs.into_iter().map(|a| a.to_canonical()).collect();
    let mut servers = SERVERS.write().unwrap_or_else(|e| e.into_inner());
    servers
        .get_or_insert_with(HashMap::new)
        .insert(fsname.to_string(), addrs);
}

/// How this process learns its file systems' server addresses again (installed by a server
/// process: a fetch of each configuration from its MGS).
type Refresher = Box<dyn Fn() + Send + Sync>;
static REFRESHER: std::sync::OnceLock<Refresher> = std::sync::OnceLock::new();
/// When the last refresh started (ms since the epoch), under the lock refreshes take one
/// at a time.
static REFRESHED_MS: std::sync::Mutex<u64> = std::sync::Mutex::new(0);
/// Shortest time between the starts of two refreshes a peer's request can cause.
pub const SERVERS_REFRESH_MS_MIN: u64 = 100;
/// Requests waiting for a refresh at most; past it they are judged on what is known.
pub const RECHECKS_QUEUED_MAX: usize = 256;

/// Sets how this process learns its file systems' server addresses again: a server that
/// started or moved a moment ago is not known yet, and its first requests (a peer MDT's
/// recovery, say) are judged again after a refresh instead of refused at once.
pub fn set_servers_refresher(f: impl Fn() + Send + Sync + 'static) {
    let _ = REFRESHER.set(Box::new(f));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Learns the server addresses again, so that what is known afterwards was learnt after
/// this call began: returns at once if a refresh started since, else waits for the one
/// running and starts the next, at most one every [`SERVERS_REFRESH_MS_MIN`] (so hostile
/// requests cannot make the MGS busy, only wait).
fn refresh_servers() {
    let Some(refresh) = REFRESHER.get() else {
        return;
    };
    let asked = now_ms();
    let mut last = REFRESHED_MS.lock().unwrap_or_else(|e| e.into_inner());
    if *last > asked {
        return;
    }
    let wait = (*last + SERVERS_REFRESH_MS_MIN).saturating_sub(now_ms());
    if wait > 0 {
        std::thread::sleep(std::time::Duration::from_millis(wait));
    }
    *last = now_ms().max(asked + 1);
    refresh();
}

/// A decision about a keyless peer's request that waits for the server addresses to be
/// learnt again.
type Recheck = Box<dyn FnOnce() + Send>;

/// Runs `decide` after learning the server addresses again, on a thread of its own (not a
/// network thread: the refresh is an RPC), if the peer is one an address decides and this
/// process can learn them; else, or with [`RECHECKS_QUEUED_MAX`] waiting, at once.
pub(crate) fn after_refresh(caller: &Caller, decide: Recheck) {
    static QUEUE: std::sync::OnceLock<Option<std::sync::mpsc::SyncSender<Recheck>>> =
        std::sync::OnceLock::new();
    if caller.proved.is_some() || caller.addr.is_none() || REFRESHER.get().is_none() {
        return decide();
    }
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Recheck>(RECHECKS_QUEUED_MAX);
        std::thread::Builder::new()
            .name("role-recheck".into())
            .spawn(move || {
                // Every decision waiting when a refresh begins is judged after it: one
                // refresh for a whole queue, however fast peers are refused.
                while let Ok(first) = rx.recv() {
                    let waiting: Vec<Recheck> =
                        std::iter::once(first).chain(rx.try_iter()).collect();
                    refresh_servers();
                    for job in waiting {
                        job();
                    }
                }
            })
            .ok()
            .map(|_| tx)
    });
    match queue {
        Some(tx) => {
            if let Err(e) = tx.try_send(decide) {
                let (std::sync::mpsc::TrySendError::Full(job)
                | std::sync::mpsc::TrySendError::Disconnected(job)) = e;
                job();
            }
        }
        None => decide(),
    }
}

/// True if `ip` is a registered server's address of any file system this process knows.
pub fn is_server_addr(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    let servers = SERVERS.read().unwrap_or_else(|e| e.into_inner());
    servers
        .as_ref()
        .is_some_and(|m| m.values().any(|v| v.contains(&ip)))
}

impl Caller {
    /// This process itself.
    pub fn local() -> Caller {
        Caller {
            addr: None,
            proved: None,
        }
    }

    /// A peer at `addr` that proved `proved` (None: it ran no handshake).
    pub fn remote(addr: Option<SocketAddr>, proved: Option<Identity>) -> Caller {
        Caller {
            addr: Some(addr.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))),
            proved,
        }
    }

    /// True for this process itself.
    pub fn is_local(&self) -> bool {
        self.addr.is_none()
    }

    /// Its address (None: this process), IPv4-mapped addresses as IPv4.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
            .map(|a| SocketAddr::new(a.ip().to_canonical(), a.port()))
    }

    /// What its handshake proved (None: no handshake).
    pub fn proved(&self) -> Option<&Identity> {
        self.proved.as_ref()
    }

    /// Its role: proved by its key; without one, a registered server's address is a server
    /// and any other a client; this process is a server.
    pub fn role(&self) -> Role {
        match (&self.proved, self.addr) {
            (Some(id), _) => id.role,
            (None, None) => Role::Server,
            (None, Some(a)) if is_server_addr(a.ip()) => Role::Server,
            (None, Some(_)) => Role::Client,
        }
    }

    /// Its role, as [`Caller::role`], after learning the servers' addresses again if an
    /// address made it a client (rate-limited; an RPC: not on a network thread). For a
    /// handler's check of a keyless peer's claim to be a server.
    pub fn role_learning(&self) -> Role {
        let role = self.role();
        if role == Role::Client && self.proved.is_none() && self.addr.is_some() {
            refresh_servers();
            return self.role();
        }
        role
    }

    /// True if it may send a request that needs `need` (a keyless peer's registration is
    /// left to the MGS, which checks the address against the target's: see
    /// [`Need::ServerOrOwnAddress`]).
    pub fn may(&self, need: Need) -> bool {
        match need {
            Need::ServerOrOwnAddress if self.proved.is_none() => true,
            need => need.allows(self.role()),
        }
    }

    /// The nodemap its requests are held to (None: none, or one that changes nothing).
    /// A server's or an administrator's proved key is never mapped. A client key bound to a
    /// nodemap is held to that nodemap, and refused (`EACCES`) from an address another
    /// nodemap names or when its nodemap does not exist: one tenant's key cannot claim
    /// another's addresses. Otherwise the address decides, as without keys: a keyless
    /// peer at a registered server's address is a server (never mapped), and a client at
    /// an address no nodemap holds gets the `default` nodemap, or is refused (`EACCES`)
    /// once any nodemap exists and there is no `default` one.
    pub fn nodemap(&self) -> Result<Option<Nodemap>, Status> {
        let Some(addr) = self.addr() else {
            return Ok(None);
        };
        if self
            .proved
            .as_ref()
            .is_some_and(|id| id.role != Role::Client)
        {
            return Ok(None);
        }
        let set = nacre_wire::nodemap::active();
        let map = match self.proved.as_ref().and_then(|id| id.nodemap.as_deref()) {
            None if self.proved.is_none() && is_server_addr(addr.ip()) => None,
            None => match set.applies(addr.ip()) {
                Applies::Nothing => None,
                Applies::Map(m) => Some(m),
                // A server registered a moment ago is not refused: its address is learnt.
                Applies::Refused if self.role_learning() == Role::Server => None,
                Applies::Refused => return Err(Status::Access),
            },
            Some(bound) => {
                let Some(m) = set.maps.iter().find(|m| m.name == bound) else {
                    return Err(Status::Access);
                };
                if set.find(addr.ip()).is_some_and(|a| a.name != bound) {
                    return Err(Status::Access);
                }
                Some(m)
            }
        };
        Ok(map
            .filter(|m| !m.is_identity() || m.readonly || m.fileset.is_some())
            .cloned())
    }

    /// The tenant it acts for, which a client uuid it uses first is bound to: its proved
    /// key's identity (role, name, nodemap), which no nodemap change alters; `keyless` for
    /// every peer without a key (an address is no identity: a client's rails have several,
    /// and nodemaps change), so without keys client uuids are bound to nothing (they are
    /// random and never published); `local` for this process.
    pub fn tenant(&self) -> String {
        match (&self.addr, &self.proved) {
            (None, _) => "local".into(),
            (Some(_), Some(id)) => tenant_of(id),
            (Some(_), None) => "keyless".into(),
        }
    }

    /// Who it is, for logs: `10.0.0.5:1023 (client key "n7" of nodemap "a")`.
    pub fn describe(&self) -> String {
        match (&self.addr, &self.proved) {
            (None, _) => "this process".into(),
            (Some(a), Some(id)) => format!("{a} ({id})"),
            (Some(a), None) => format!("{a} (no key: {} by address)", self.role()),
        }
    }
}

/// The tenant a key identity is ([`Caller::tenant`]): `key:ROLE/NAME/NODEMAP`.
pub fn tenant_of(id: &Identity) -> String {
    format!(
        "key:{}/{}/{}",
        id.role,
        id.name,
        id.nodemap.as_deref().unwrap_or("")
    )
}

/// The tenants of the client keys of file system slot `fs_slot` revoked in `set`.
pub fn revoked_tenants(set: &nacre_wire::nodemap::NodemapSet, fs_slot: u16) -> Vec<String> {
    set.revoked
        .iter()
        .filter(|r| nacre_types::fs_slot(&r.fsname) == fs_slot)
        .map(|r| {
            tenant_of(&Identity {
                role: Role::Client,
                name: r.name.clone(),
                nodemap: r.nodemap.clone(),
            })
        })
        .collect()
}

/// Seconds since the epoch of the last refusal logged by [`refused`].
static REFUSAL_LOGGED_S: AtomicU64 = AtomicU64::new(0);
static REFUSALS_UNLOGGED: AtomicU64 = AtomicU64::new(0);
/// Requests a handler refused for who sent them (`requests_refused_caller` in `net.stats`).
static REFUSED_BY_HANDLERS: AtomicU64 = AtomicU64::new(0);

/// Requests this process's handlers refused for who sent them (a false peer claim, a key
/// at another tenant's address, a target moved by a keyless client, a body that is not
/// its opcode's request), since start.
pub fn refused_by_handlers() -> u64 {
    REFUSED_BY_HANDLERS.load(Ordering::Relaxed)
}

/// Counts a request refused for who sent it and logs it (`what` says who asked what), at
/// most once a second in this process, with how many refusals went unlogged since: a
/// flood of hostile requests cannot flood the log.
pub fn refused(what: impl FnOnce() -> String) {
    REFUSED_BY_HANDLERS.fetch_add(1, Ordering::Relaxed);
    log_refusal(what);
}

/// Logs a refusal counted elsewhere, rate-limited as [`refused`] does.
pub(crate) fn log_refusal(what: impl FnOnce() -> String) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if REFUSAL_LOGGED_S.swap(now, Ordering::Relaxed) == now {
        REFUSALS_UNLOGGED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let more = REFUSALS_UNLOGGED.swap(0, Ordering::Relaxed);
    tracing::warn!(
        "{}{}",
        what(),
        match more {
            0 => String::new(),
            n => format!(" ({n} more refusals not logged in the last second)"),
        }
    );
}

/// Why a handler refused a caller, for logs: the status it answered.
pub fn refusal_reason(status: Status) -> &'static str {
    match status {
        Status::Perm => {
            "its role may not, or it named a client uuid a server or another tenant holds"
        }
        Status::Access => "its key is bound to another nodemap than its address's",
        Status::Proto => "its body is not the request its opcode names",
        _ => "refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_key_only_registered_server_addresses_are_servers() {
        let a: SocketAddr = "10.77.0.1:1023".parse().unwrap();
        let c = Caller::remote(Some(a), None);
        assert_eq!(c.role(), Role::Client);
        assert!(!c.may(Need::Server));
        assert!(c.may(Need::ServerOrOwnAddress), "left to the MGS");
        install_servers("rolefs", vec!["10.77.0.1".parse().unwrap()]);
        assert_eq!(c.role(), Role::Server);
        // IPv4-mapped addresses are the same address.
        let mapped: SocketAddr = "[::ffff:10.77.0.1]:1023".parse().unwrap();
        assert_eq!(Caller::remote(Some(mapped), None).role(), Role::Server);
        install_servers("rolefs", Vec::new());
        assert_eq!(c.role(), Role::Client);
        assert_eq!(Caller::local().role(), Role::Server);
    }

    #[test]
    fn a_proved_key_decides_the_role_whatever_the_address() {
        install_servers("rolefs2", vec!["10.78.0.1".parse().unwrap()]);
        let a: SocketAddr = "10.78.0.1:5000".parse().unwrap();
        let client = Identity {
            role: Role::Client,
            name: "n".into(),
            nodemap: None,
        };
        let c = Caller::remote(Some(a), Some(client));
        assert_eq!(c.role(), Role::Client);
        assert!(!c.may(Need::ServerOrOwnAddress));
        assert!(!c.may(Need::Server));
        assert!(c.may(Need::Anyone));
    }
}
