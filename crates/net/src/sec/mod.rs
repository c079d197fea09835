//! Shared-key security, in the manner of Lustre's SSK flavors: a file system has a secret
//! key ([`FsKey`], made by `nacre keygen`) that its servers and clients hold. A connection
//! opens with a handshake ([`handshake`]) that names the file system, then both sides prove
//! they hold its key (mutual challenge-response over fresh nonces of both, so a recorded
//! handshake cannot be replayed) and derive keys for this connection only. Every frame after
//! is then protected at the [`Level`] the server chose ([`session`]):
//!
//! * `none`: the handshake only (who may connect), frames as they are;
//! * `integrity`: a keyed MAC (BLAKE3, 128 bits) over sequence number, header and body;
//! * `bulk`: the MAC covers bulk data too;
//! * `privacy`: body and bulk encrypted with AES-256-GCM (ring), the header authenticated.
//!
//! Sequence numbers are implicit (each side counts its frames), so a frame replayed,
//! dropped or reordered within a connection fails its check, and the connection is dropped.

pub mod handshake;
mod keyfile;
pub(crate) mod keyring;
mod served;
pub mod session;

pub use keyfile::{KeyTextError, KEY_FILE_FORMAT};
pub use keyring::{
    add_key, add_key_from, capability_key, capability_keys, default_key, key_for, key_path,
    set_key_dir, KEY_DIR_DEFAULT, KEY_DIR_LOOKUPS_MAX,
};
pub use served::{accept_key, held_keys, retire_key, serve_keys, use_key, HeldKey, ServerKeys};

pub use nacre_wire::roles::Role;

/// Bytes of a file-system key.
pub const KEY_BYTES: usize = 32;
/// Longest file-system name a handshake carries.
pub const FSNAME_BYTES_MAX: usize = 64;
/// Default time a handshake may take, either side.
pub const HANDSHAKE_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Handshakes a server runs at once; connections past it are refused.
pub const HANDSHAKES_MAX: usize = 64;
/// Handshakes a server runs at once for one source address; its connections past it are
/// refused (so one host's silent connections cannot hold every slot).
pub const HANDSHAKES_PER_ADDR_MAX: usize = 8;

/// Errors of keys and handshakes.
#[derive(Debug, thiserror::Error)]
pub enum SecError {
    /// A key file could not be read or written.
    #[error("key file {path}: {cause}")]
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        cause: String,
    },
    /// The peer did not prove it holds the key (or refused ours).
    #[error("{0}")]
    Refused(String),
    /// The server retired the master key ours was made from (a key rotation).
    #[error("{why}")]
    KeyRetired {
        /// What to do about it.
        why: String,
        /// True when this process read its key file again and holds a key of another
        /// master now: connecting again may succeed.
        reloaded: bool,
    },
    /// The peer broke the handshake's format.
    #[error("handshake: {0}")]
    Protocol(String),
    /// The handshake's I/O failed or timed out.
    #[error("handshake I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A frame failed its integrity check or could not be decrypted.
    #[error("frame failed its {0} check")]
    BadFrame(&'static str),
    /// A key file of a format newer than this nacre reads ([`KeyTextError::TooNew`]).
    #[error("key file {path}: {cause}")]
    KeyFileTooNew {
        /// The file.
        path: String,
        /// The format found and the newest read.
        cause: KeyTextError,
    },
}

/// How a connection's frames are protected after the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Handshake only.
    None,
    /// MAC over header and body.
    Integrity,
    /// MAC over header, body and bulk.
    Bulk,
    /// Body and bulk encrypted (AES-256-GCM), header authenticated.
    Privacy,
}

impl Level {
    /// Every level, weakest first.
    pub const ALL: [Level; 4] = [Level::None, Level::Integrity, Level::Bulk, Level::Privacy];

    /// Its name (`none`, `integrity`, `bulk`, `privacy`).
    pub fn name(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Integrity => "integrity",
            Level::Bulk => "bulk",
            Level::Privacy => "privacy",
        }
    }

    /// The level named `s`.
    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.name() == s)
    }

    /// Its code (0 none .. 3 privacy), as handshakes and nodemaps carry it.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The level of code `c`.
    pub fn from_code(c: u8) -> Option<Level> {
        Level::ALL.get(usize::from(c)).copied()
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A file system's key, as a key file holds it: the file system, the role its holder acts
/// as ([`Role`]), the level its servers protect connections at (clients learn the level
/// from the server, authenticated), and a secret.
///
/// Server and admin keys hold the file system's *master* secret: from it a server derives
/// the secret of every role and every client key, so it can check any peer's proof. A
/// client key holds only the secret derived for its name and the nodemap it is bound to:
/// nothing else can be derived from it (no other tenant's key, no server's, no object
/// capability).
#[derive(Clone)]
pub struct FsKey {
    fsname: String,
    secret: [u8; KEY_BYTES],
    level: Level,
    role: Role,
    /// A client key's name (empty for server and admin keys).
    name: String,
    /// The nodemap a client key is bound to (None: the nodemap of its address).
    nodemap: Option<String>,
    /// A client key's: the id of the master key it was derived from (None: a key file
    /// written before keys named their master; its handshake is checked against the
    /// server's key in use).
    master: Option<KeyId>,
}

/// Bytes of a [`KeyId`].
pub const KEY_ID_BYTES: usize = 8;

/// The public name of a master key, derived from its secret (nothing of the secret can be
/// had from it): a HELLO names the master its key was made from, so a server holding two
/// during a rotation checks the proof with the right one, and says so when it holds
/// neither any more. Shown as 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; KEY_ID_BYTES]);

impl KeyId {
    /// Parses its 16 hex digits.
    pub fn parse(s: &str) -> Option<KeyId> {
        if s.len() != 2 * KEY_ID_BYTES || !s.is_ascii() {
            return None;
        }
        let mut out = [0u8; KEY_ID_BYTES];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(KeyId(out))
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for FsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "FsKey({}, {}, {})", self.fsname, self.role, self.level)
    }
}

/// Who a key says its holder is, as a handshake proves it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The role.
    pub role: Role,
    /// A client key's name (empty otherwise).
    pub name: String,
    /// The nodemap a client key is bound to.
    pub nodemap: Option<String>,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.role)?;
        if !self.name.is_empty() {
            write!(f, " key {:?}", self.name)?;
        }
        if let Some(m) = &self.nodemap {
            write!(f, " of nodemap {m:?}")?;
        }
        Ok(())
    }
}

/// Longest client key name, and longest nodemap name a key binds.
pub const KEY_NAME_BYTES_MAX: usize = 64;

impl FsKey {
    /// A new random master key for `fsname`, held as `role` (server or admin; a client key
    /// is derived from a master with [`FsKey::client_key`]).
    pub fn generate(fsname: &str, level: Level) -> Result<FsKey, SecError> {
        check_fsname(fsname)?;
        let mut secret = [0u8; KEY_BYTES];
        getrandom::fill(&mut secret).map_err(|e| SecError::KeyFile {
            path: "(new key)".into(),
            cause: format!("no random numbers: {e}"),
        })?;
        Ok(FsKey::from_parts(fsname, secret, level))
    }

    /// A server key from its parts (tests, tools).
    pub fn from_parts(fsname: &str, secret: [u8; KEY_BYTES], level: Level) -> FsKey {
        FsKey {
            fsname: fsname.to_string(),
            secret,
            level,
            role: Role::Server,
            name: String::new(),
            nodemap: None,
            master: None,
        }
    }

    /// The id of the master key it is or was derived from (None: a client key file that
    /// does not name it).
    pub fn master_id(&self) -> Option<KeyId> {
        match self.is_master() {
            true => {
                let h = blake3::derive_key("nacre master key id 2026", &self.secret);
                let mut id = [0u8; KEY_ID_BYTES];
                id.copy_from_slice(&h[..KEY_ID_BYTES]);
                Some(KeyId(id))
            }
            false => self.master,
        }
    }

    /// The file system.
    pub fn fsname(&self) -> &str {
        &self.fsname
    }

    /// The level its servers protect connections at.
    pub fn level(&self) -> Level {
        self.level
    }

    /// The role its holder acts as.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Who a handshake with this key proves its holder is.
    pub fn identity(&self) -> Identity {
        Identity {
            role: self.role,
            name: self.name.clone(),
            nodemap: self.nodemap.clone(),
        }
    }

    /// True for a key holding the file system's master secret (server and admin keys).
    pub fn is_master(&self) -> bool {
        self.role != Role::Client
    }

    /// The same master key held as `role` (server or admin); `None` for a client key,
    /// from which no other role can be had.
    pub fn as_role(&self, role: Role) -> Option<FsKey> {
        (self.is_master() && role != Role::Client).then(|| FsKey {
            role,
            ..self.clone()
        })
    }

    /// A client key named `name`, bound to `nodemap` (None: its holder's address decides
    /// its nodemap), derived from this master key; `None` for a client key.
    pub fn client_key(&self, name: &str, nodemap: Option<&str>) -> Result<FsKey, SecError> {
        if !self.is_master() {
            return Err(SecError::Refused(
                "a client key is made from the file system's server or admin key, not from \
                 another client key"
                    .into(),
            ));
        }
        let id = Identity {
            role: Role::Client,
            name: name.to_string(),
            nodemap: nodemap.map(str::to_string),
        };
        check_identity(&id)?;
        Ok(FsKey {
            fsname: self.fsname.clone(),
            secret: self.secret_of(&id),
            level: self.level,
            role: Role::Client,
            name: id.name,
            nodemap: id.nodemap,
            master: self.master_id(),
        })
    }

    /// The secret a peer of identity `id` proves itself with, derived from the master
    /// secret (only a master key can derive it).
    fn secret_of(&self, id: &Identity) -> [u8; KEY_BYTES] {
        assert!(self.is_master(), "only a master key derives role secrets");
        let mut m = self.secret.to_vec();
        for part in [
            id.name.as_bytes(),
            id.nodemap.as_deref().unwrap_or("").as_bytes(),
        ] {
            m.push(part.len() as u8);
            m.extend_from_slice(part);
        }
        m.push(u8::from(id.nodemap.is_some()));
        let context = match id.role {
            Role::Client => "nacre client key 2026",
            Role::Server => "nacre server key 2026",
            Role::Admin => "nacre admin key 2026",
        };
        blake3::derive_key(context, &m)
    }

    /// The secret this key's holder proves itself with in a handshake.
    pub(crate) fn own_secret(&self) -> [u8; KEY_BYTES] {
        match self.is_master() {
            true => self.secret_of(&self.identity()),
            false => self.secret,
        }
    }

    /// The secret a peer claiming `id` must prove (a master key only).
    pub(crate) fn peer_secret(&self, id: &Identity) -> Option<[u8; KEY_BYTES]> {
        self.is_master().then(|| self.secret_of(id))
    }
}

/// Checks a key's name and nodemap: printable, within [`KEY_NAME_BYTES_MAX`].
fn check_identity(id: &Identity) -> Result<(), SecError> {
    for (what, v) in [
        ("name", id.name.as_str()),
        ("nodemap", id.nodemap.as_deref().unwrap_or("")),
    ] {
        // `@`, `:` and `/` separate a key's parts where it is named (`FS:NAME@NODEMAP`,
        // tenants `key:ROLE/NAME/NODEMAP`): a name holding one could be taken for another.
        if v.len() > KEY_NAME_BYTES_MAX
            || v.chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '@' | ':' | '/'))
        {
            return Err(SecError::Protocol(format!(
                "key {what} {v:?}: at most {KEY_NAME_BYTES_MAX} bytes, no spaces, '@', ':' or '/'"
            )));
        }
    }
    if id.nodemap.as_deref() == Some("") {
        return Err(SecError::Protocol(
            "a key bound to a nodemap names it".into(),
        ));
    }
    Ok(())
}

fn check_fsname(fsname: &str) -> Result<(), SecError> {
    if fsname.is_empty() || fsname.len() > FSNAME_BYTES_MAX {
        return Err(SecError::Protocol(format!(
            "file-system name {fsname:?}: 1 to {FSNAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_cannot_hold_the_separators_that_name_keys() {
        let master = FsKey::generate("lustre", Level::Bulk).unwrap();
        for bad in ["lab@site", "fs:lab", "a/b"] {
            assert!(master.client_key(bad, None).is_err(), "{bad}");
            assert!(
                master.client_key("lab", Some(bad)).is_err(),
                "nodemap {bad}"
            );
        }
        assert!(master.client_key("lab-2_x.y", Some("tenant")).is_ok());
    }
}
