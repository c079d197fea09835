//! Nodemaps (Lustre's): ranges of client addresses mapped to a policy — root squash, uid
//! and gid mapping (an offset, or id-by-id), read-only, the security level their connections
//! get. Kept by the MGS ([`NodemapSet`], `nacre nodemap`), fetched by every server process
//! and enforced there on the credentials each request carries.
//!
//! Clients no range names are treated as before nodemaps existed: trusted, root as root.
//! Peer servers calling each other are never mapped.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

/// Most nodemaps an MGS keeps.
pub const NODEMAPS_MAX: usize = 256;
/// Most address ranges per nodemap.
pub const RANGES_PER_NODEMAP_MAX: usize = 256;
/// Most id mappings per nodemap.
pub const IDMAPS_PER_NODEMAP_MAX: usize = 4_096;
/// Longest nodemap name.
pub const NODEMAP_NAME_BYTES_MAX: usize = 64;
/// Default id squashed clients act as (`nobody`).
pub const SQUASH_ID_DEFAULT: u32 = 65_534;

/// A range of client addresses, both ends included (one family).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NidRange {
    /// First address.
    pub start: IpAddr,
    /// Last address.
    pub end: IpAddr,
}

impl NidRange {
    /// Parses `10.0.0.5`, `10.0.0.5-10.0.0.9`, `10.0.0.0/24` (an optional `@tcp` is dropped).
    pub fn parse(s: &str) -> Result<NidRange, String> {
        let s = s.trim();
        let s = s.split_once('@').map_or(s, |(a, _)| a);
        let ip = |t: &str| {
            t.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("'{t}' is not an IP address"))
        };
        let r = if let Some((a, b)) = s.split_once('-') {
            NidRange {
                start: ip(a)?,
                end: ip(b)?,
            }
        } else if let Some((a, bits)) = s.split_once('/') {
            let a = ip(a)?;
            let bits: u32 = bits
                .parse()
                .map_err(|_| format!("'/{bits}' is not a prefix length"))?;
            let (lo, hi) = match a {
                IpAddr::V4(v) if bits <= 32 => {
                    let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                    let n = u32::from(v) & mask;
                    (
                        IpAddr::from((n).to_be_bytes()),
                        IpAddr::from((n | !mask).to_be_bytes()),
                    )
                }
                IpAddr::V6(v) if bits <= 128 => {
                    let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                    let n = u128::from(v) & mask;
                    (
                        IpAddr::from(n.to_be_bytes()),
                        IpAddr::from((n | !mask).to_be_bytes()),
                    )
                }
                _ => return Err(format!("prefix length {bits} too long")),
            };
            NidRange { start: lo, end: hi }
        } else {
            let a = ip(s)?;
            NidRange { start: a, end: a }
        };
        if r.start.is_ipv4() != r.end.is_ipv4() || r.start > r.end {
            return Err(format!(
                "'{s}': the range is empty or mixes address families"
            ));
        }
        Ok(r)
    }

    /// True if `ip` is in the range (an IPv4-mapped IPv6 address, as a server listening on
    /// `[::]` sees IPv4 peers, is its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.start.is_ipv4() == ip.is_ipv4() && self.start <= ip && ip <= self.end
    }

    /// True if the two ranges share an address.
    pub fn overlaps(&self, other: &NidRange) -> bool {
        self.start.is_ipv4() == other.start.is_ipv4()
            && self.start <= other.end
            && other.start <= self.end
    }
}

impl std::fmt::Display for NidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.start == self.end {
            true => write!(f, "{}", self.start),
            false => write!(f, "{}-{}", self.start, self.end),
        }
    }
}

/// `ip`, with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as its IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v) => v.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The nodemap of addresses no other nodemap's ranges hold (Lustre's `default`): it takes
/// no ranges. Without it, once any nodemap exists, such addresses are refused: an
/// administrator makes it squashed (a new nodemap's properties), trusted (`admin` and
/// `trusted` set) or leaves it out (refused).
pub const DEFAULT_NODEMAP: &str = "default";

/// What applies to a client at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies<'a> {
    /// No nodemaps exist: every client is trusted, as before nodemaps.
    Nothing,
    /// This nodemap.
    Map(&'a Nodemap),
    /// Nodemaps exist, and neither one's ranges nor a [`DEFAULT_NODEMAP`] holds it.
    Refused,
}

/// Which kind of id a mapping is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IdKind {
    /// User ids.
    Uid,
    /// Group ids.
    Gid,
}

/// One client id and the file-system id it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    /// Kind.
    pub kind: IdKind,
    /// The id on the clients.
    pub client: u32,
    /// The id in the file system.
    pub fs: u32,
}

/// A nodemap: who its clients are and what they may do as whom.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodemap {
    /// Name.
    pub name: String,
    /// Client addresses.
    pub ranges: Vec<NidRange>,
    /// Root on these clients is root (false: squashed to `squash_uid`/`squash_gid`).
    pub admin: bool,
    /// Ids are taken as the clients send them (false: mapped by `idmaps`, then `offset`;
    /// an id neither maps is squashed; supplementary groups are the MDS's own, not the
    /// client's).
    pub trusted: bool,
    /// The user squashed ids act as.
    pub squash_uid: u32,
    /// The group squashed ids act as.
    pub squash_gid: u32,
    /// Client id N (N > 0) is file-system id N + offset (untrusted nodemaps; 0: none).
    pub offset: u32,
    /// Id-by-id mappings (untrusted nodemaps), checked before the offset.
    pub idmaps: Vec<IdMap>,
    /// Nothing may be changed from these clients (`EROFS`).
    pub readonly: bool,
    /// The security level these clients' connections get (0 none .. 3 privacy; None: the
    /// file system key's own).
    pub level: Option<u8>,
    /// A subtree (`/a/b`) that is these clients' whole file system: their root is its
    /// directory, and every inode they name must be inside it (None: all of it).
    pub fileset: Option<String>,
}

impl Nodemap {
    /// A new nodemap with Lustre's defaults: not admin, not trusted, squashed to nobody.
    pub fn new(name: &str) -> Nodemap {
        Nodemap {
            name: name.to_string(),
            ranges: Vec::new(),
            admin: false,
            trusted: false,
            squash_uid: SQUASH_ID_DEFAULT,
            squash_gid: SQUASH_ID_DEFAULT,
            offset: 0,
            idmaps: Vec::new(),
            readonly: false,
            level: None,
            fileset: None,
        }
    }

    fn squash(&self, kind: IdKind) -> u32 {
        match kind {
            IdKind::Uid => self.squash_uid,
            IdKind::Gid => self.squash_gid,
        }
    }

    /// The file-system id a client's id stands for.
    pub fn map_in(&self, kind: IdKind, id: u32) -> u32 {
        if id == 0 {
            return if self.admin { 0 } else { self.squash(kind) };
        }
        if self.trusted {
            return id;
        }
        if let Some(m) = self
            .idmaps
            .iter()
            .find(|m| m.kind == kind && m.client == id)
        {
            return m.fs;
        }
        match self.offset {
            0 => self.squash(kind),
            off => id.checked_add(off).unwrap_or(self.squash(kind)),
        }
    }

    /// The id a client is shown for a file-system id (owners in replies): the inverse of
    /// [`Nodemap::map_in`]; ids no client id maps to are shown as the squash id.
    pub fn map_out(&self, kind: IdKind, id: u32) -> u32 {
        if id == 0 || self.trusted {
            return id;
        }
        if let Some(m) = self.idmaps.iter().find(|m| m.kind == kind && m.fs == id) {
            return m.client;
        }
        match self.offset {
            0 => self.squash(kind),
            off if id > off => id - off,
            _ => self.squash(kind),
        }
    }

    /// True if ids pass both ways unchanged (trusted and admin): nothing to map.
    pub fn is_identity(&self) -> bool {
        self.trusted && self.admin
    }
}

/// Every nodemap of an MGS, with a version bumped on every change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodemapSet {
    /// Bumped on every change.
    pub version: u64,
    /// Nodemaps by name.
    pub maps: Vec<Nodemap>,
    /// Client keys no server accepts any more (`nacre nodemap revoke_key`).
    pub revoked: Vec<RevokedKey>,
}

/// A client key revoked: the key of file system `fsname` made for `name` (bound to
/// `nodemap`, if it is). Servers refuse its handshakes and drop its connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedKey {
    /// The file system.
    pub fsname: String,
    /// The key's name (`nacre keygen --name`).
    pub name: String,
    /// The nodemap it is bound to (`nacre keygen --nodemap`), if any.
    pub nodemap: Option<String>,
}

impl std::fmt::Display for RevokedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.fsname, self.name)?;
        if let Some(m) = &self.nodemap {
            write!(f, "@{m}")?;
        }
        Ok(())
    }
}

impl RevokedKey {
    /// Parses `FSNAME:NAME` or `FSNAME:NAME@NODEMAP`.
    pub fn parse(s: &str) -> Result<RevokedKey, String> {
        let bad = || format!("'{s}': expected FSNAME:KEYNAME or FSNAME:KEYNAME@NODEMAP");
        let (fsname, rest) = s.split_once(':').ok_or_else(bad)?;
        let (name, nodemap) = match rest.split_once('@') {
            Some((n, m)) => (n, Some(m.to_string())),
            None => (rest, None),
        };
        if fsname.is_empty() || name.is_empty() || nodemap.as_deref() == Some("") {
            return Err(bad());
        }
        Ok(RevokedKey {
            fsname: fsname.into(),
            name: name.into(),
            nodemap,
        })
    }
}

/// Client keys revoked at most (`nacre nodemap revoke_key`).
pub const REVOKED_KEYS_MAX: usize = 4096;

impl NodemapSet {
    /// True when the client key `name` (bound to `nodemap`) of the file system of slot
    /// `fs_slot` is revoked.
    pub fn is_revoked(&self, fs_slot: u16, name: &str, nodemap: Option<&str>) -> bool {
        self.revoked.iter().any(|r| {
            r.name == name
                && r.nodemap.as_deref() == nodemap
                && nacre_types::fs_slot(&r.fsname) == fs_slot
        })
    }

    /// The nodemap whose ranges hold `ip`, if any (ranges of nodemaps never overlap).
    pub fn find(&self, ip: IpAddr) -> Option<&Nodemap> {
        self.maps
            .iter()
            .find(|m| m.ranges.iter().any(|r| r.contains(ip)))
    }

    /// What applies to a client at `ip`: the nodemap whose ranges hold it, else the
    /// [`DEFAULT_NODEMAP`], else (nodemaps exist) refusal.
    pub fn applies(&self, ip: IpAddr) -> Applies<'_> {
        if self.maps.is_empty() {
            return Applies::Nothing;
        }
        match self
            .find(ip)
            .or_else(|| self.maps.iter().find(|m| m.name == DEFAULT_NODEMAP))
        {
            Some(m) => Applies::Map(m),
            None => Applies::Refused,
        }
    }
}

/// The nodemaps this process enforces (fetched from the MGS by the server process).
static ACTIVE: RwLock<Option<Arc<NodemapSet>>> = RwLock::new(None);

/// Installs the nodemaps this process enforces, unless a newer version is installed
/// already (two threads may each hold a set across a wait for delegations: the older one
/// never replaces the newer).
pub fn install(set: NodemapSet) {
    let mut active = ACTIVE.write().expect("nodemaps");
    if active.as_ref().is_some_and(|a| a.version > set.version) {
        return;
    }
    *active = Some(Arc::new(set));
}

/// The nodemaps this process enforces (empty until installed).
pub fn active() -> Arc<NodemapSet> {
    ACTIVE.read().expect("nodemaps").clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    /// The only test of this crate that installs a set (the set is the process's).
    #[test]
    fn an_older_set_never_replaces_a_newer_one() {
        let set = |version| NodemapSet {
            version,
            ..NodemapSet::default()
        };
        install(set(7));
        install(set(6));
        assert_eq!(active().version, 7);
        install(set(8));
        assert_eq!(active().version, 8);
    }

    #[test]
    fn revoked_keys_parse_and_print_as_the_cli_names_them() {
        for text in ["demo:lab", "demo:lab@tenant"] {
            assert_eq!(RevokedKey::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "demo", ":lab", "demo:", "demo:lab@", "demo:@x"] {
            assert!(RevokedKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unlisted_addresses_get_the_default_nodemap_or_are_refused() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut set = NodemapSet::default();
        assert_eq!(set.applies(ip("10.0.0.1")), Applies::Nothing, "no nodemaps");
        let mut lab = Nodemap::new("lab");
        lab.ranges.push(NidRange::parse("10.0.0.0/24").unwrap());
        set.maps.push(lab);
        assert!(matches!(set.applies(ip("10.0.0.9")), Applies::Map(m) if m.name == "lab"));
        // A server on [::] sees IPv4 peers as IPv4-mapped IPv6 addresses.
        assert!(matches!(set.applies(ip("::ffff:10.0.0.9")), Applies::Map(m) if m.name == "lab"));
        assert_eq!(set.applies(ip("10.0.1.1")), Applies::Refused, "unlisted");
        assert_eq!(set.applies(ip("::ffff:10.0.1.1")), Applies::Refused);
        set.maps.push(Nodemap::new(DEFAULT_NODEMAP));
        assert!(
            matches!(set.applies(ip("10.0.1.1")), Applies::Map(m) if m.name == DEFAULT_NODEMAP)
        );
    }

    #[test]
    fn ranges_parse_and_contain() {
        let r = NidRange::parse("10.0.0.0/24").unwrap();
        assert!(r.contains("10.0.0.255".parse().unwrap()));
        assert!(!r.contains("10.0.1.0".parse().unwrap()));
        let r = NidRange::parse("127.0.0.5-127.0.0.9@tcp").unwrap();
        assert!(r.contains("127.0.0.7".parse().unwrap()));
        assert_eq!(r.to_string(), "127.0.0.5-127.0.0.9");
        assert!(r.overlaps(&NidRange::parse("127.0.0.9").unwrap()));
        assert!(!r.overlaps(&NidRange::parse("127.0.0.10").unwrap()));
        for bad in ["", "x", "10.0.0.9-10.0.0.1", "10.0.0.1-::1", "10.0.0.0/33"] {
            assert!(NidRange::parse(bad).is_err(), "{bad}");
        }
        assert!(NidRange::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
    }

    #[test]
    fn ids_map_in_and_out() {
        let mut m = Nodemap::new("t");
        assert_eq!(m.map_in(IdKind::Uid, 0), SQUASH_ID_DEFAULT, "root squashed");
        assert_eq!(
            m.map_in(IdKind::Uid, 500),
            SQUASH_ID_DEFAULT,
            "unmapped squashed"
        );
        m.offset = 100_000;
        m.idmaps.push(IdMap {
            kind: IdKind::Uid,
            client: 500,
            fs: 7_000,
        });
        assert_eq!(m.map_in(IdKind::Uid, 500), 7_000);
        assert_eq!(m.map_out(IdKind::Uid, 7_000), 500);
        assert_eq!(m.map_in(IdKind::Uid, 501), 100_501);
        assert_eq!(m.map_out(IdKind::Uid, 100_501), 501);
        assert_eq!(m.map_in(IdKind::Gid, 501), 100_501);
        assert_eq!(
            m.map_out(IdKind::Uid, 42),
            SQUASH_ID_DEFAULT,
            "outside the map"
        );
        assert_eq!(
            m.map_in(IdKind::Uid, u32::MAX),
            SQUASH_ID_DEFAULT,
            "no overflow"
        );
        m.admin = true;
        assert_eq!(m.map_in(IdKind::Uid, 0), 0);
        m.trusted = true;
        assert!(m.is_identity());
        assert_eq!(m.map_in(IdKind::Uid, 501), 501);
    }

    proptest! {
        #[test]
        fn an_offset_maps_back_what_it_maps_in(id in 1u32..1_000_000, off in 1u32..1_000_000) {
            let mut m = Nodemap::new("p");
            m.offset = off;
            prop_assert_eq!(m.map_out(IdKind::Uid, m.map_in(IdKind::Uid, id)), id);
        }

        #[test]
        fn a_nodemap_set_round_trips_and_refuses_truncation(n in 0usize..4, off in any::<u32>()) {
            let mut set = NodemapSet {
                version: 9,
                maps: Vec::new(),
                revoked: Vec::new(),
            };
            for i in 0..n {
                let mut m = Nodemap::new(&format!("m{i}"));
                m.offset = off;
                m.ranges.push(NidRange::parse(&format!("10.{i}.0.0/16")).unwrap());
                m.level = Some(2);
                m.fileset = Some("/sub".into());
                set.maps.push(m);
            }
            let b = encode_body(&set);
            prop_assert_eq!(decode_body::<NodemapSet>(&b).unwrap(), set);
            for k in 0..b.len() {
                prop_assert!(decode_body::<NodemapSet>(&b[..k]).is_err());
            }
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_body::<NodemapSet>(&bytes);
            if let Ok(s) = std::str::from_utf8(&bytes) {
                let _ = NidRange::parse(s);
            }
        }
    }
}
