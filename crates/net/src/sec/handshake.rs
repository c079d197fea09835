//! The handshake that opens every connection to a server holding keys:
//!
//! ```text
//! client → server  HELLO      "NACRHELO" version:u16 fsname_len:u8 fsname role:u8
//!                             name_len:u8 name bound:u8 nodemap_len:u8 nodemap
//!                             master[8] nonce_c[32]
//! server → client  CHALLENGE  "NACRCHAL" status:u8 level:u8 nonce_s[32] proof_s[32]
//! client → server  RESPONSE   "NACRRESP" proof_c[32]
//! server → client  DONE       "NACRDONE" status:u8
//! ```
//!
//! The HELLO says who the client is: the role of its key and, for a client key, its name and
//! the nodemap it is bound to (`bound` 1, else 0 and no nodemap). The server derives from
//! the file system's master secret the secret of that identity, so a proof made with it
//! shows the client holds a key of exactly that role, name and nodemap. `master` is the id
//! of the master key the client's key was made from (zeros: not known), so a server
//! holding two during a rotation picks the right one (none held: status 4). `proof_s` and
//! `proof_c` are BLAKE3 keyed with that secret over the side, the identity, the file-system
//! name, both nonces and the level, so each side proves it holds the key, a recorded
//! RESPONSE is worthless against a new server nonce, and neither the identity nor the
//! level can be changed on the way. Each direction's frame key is derived from the secret
//! and the same material (fresh per connection). Nothing else is read before DONE.

use super::session::{Opener, Sealer};
use super::{
    FsKey, Identity, KeyId, Level, Role, SecError, ServerKeys, FSNAME_BYTES_MAX, KEY_BYTES,
    KEY_ID_BYTES, KEY_NAME_BYTES_MAX,
};
use nacre_types::Status;
use nacre_wire::header::FLAG_REPLY;
use nacre_wire::{Header, HEADER_BYTES};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Handshake version spoken (2: the HELLO names the key's role, name and nodemap; 3: and
/// the id of its master key).
pub const VERSION: u16 = 3;
/// Oldest handshake version a server accepts: a HELLO of a version outside
/// `VERSION_MIN..=VERSION` is answered with a CHALLENGE of status [`WRONG_VERSION`] whose
/// level byte carries [`VERSION`], then the connection closes (docs/formats.md, "The
/// handshake"); the client reports both versions.
pub const VERSION_MIN: u16 = 3;
const HELLO: &[u8; 8] = b"NACRHELO";
const CHALLENGE: &[u8; 8] = b"NACRCHAL";
const RESPONSE: &[u8; 8] = b"NACRRESP";
const DONE: &[u8; 8] = b"NACRDONE";
/// Bytes of a nonce and of a proof.
const NONCE_BYTES: usize = 32;
/// Bytes of a HELLO before its file-system name.
const HELLO_FIXED: usize = 8 + 2 + 1;
/// Bytes of a CHALLENGE.
const CHALLENGE_BYTES: usize = 8 + 1 + 1 + NONCE_BYTES + NONCE_BYTES;
/// Bytes of a RESPONSE.
const RESPONSE_BYTES: usize = 8 + NONCE_BYTES;
/// Bytes of a DONE.
const DONE_BYTES: usize = 8 + 1;

/// Status of a CHALLENGE or DONE.
const OK: u8 = 0;
const UNKNOWN_FS: u8 = 1;
const REFUSED: u8 = 2;
/// The client key the HELLO names is revoked (`nacre nodemap revoke_key`).
const REVOKED: u8 = 3;
/// The master key the HELLO's key was made from is not held (retired in a rotation).
const STALE: u8 = 4;
/// The HELLO's handshake version is not one the server speaks; the CHALLENGE's level byte
/// is the newest it speaks.
const WRONG_VERSION: u8 = 5;

/// What a handshake leaves: the file system, the level, and each direction's protection.
pub struct Session {
    /// The file system the connection is for.
    pub fsname: String,
    /// Who the client proved it is.
    pub client: Identity,
    /// The master key the proofs were made with (the client's side: if its key names it).
    pub master: Option<KeyId>,
    /// The level its frames are protected at.
    pub level: Level,
    /// Protects what this side sends.
    pub sealer: Sealer,
    /// Checks what this side receives.
    pub opener: Opener,
}

/// A HELLO.
#[derive(Debug, PartialEq, Eq)]
pub struct Hello {
    /// The file system named.
    pub fsname: String,
    /// Who the client says it is (its proof shows it).
    pub client: Identity,
    /// The master key the client's key was made from, if it knows.
    pub master: Option<KeyId>,
    /// The client's nonce.
    pub nonce: [u8; NONCE_BYTES],
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({}, {})", self.fsname, self.level)
    }
}

/// Appends `s` with its one-byte length.
fn put_short(b: &mut Vec<u8>, s: &str) {
    b.push(s.len() as u8);
    b.extend_from_slice(s.as_bytes());
}

/// Takes a string of at most `max` bytes with its one-byte length off the front of `b`.
fn take_short<'a>(b: &mut &'a [u8], max: usize, what: &str) -> Result<&'a str, SecError> {
    let bad = || SecError::Protocol(format!("HELLO: bad {what}"));
    let (&n, rest) = b.split_first().ok_or_else(bad)?;
    let n = usize::from(n);
    if n > max || rest.len() < n {
        return Err(bad());
    }
    let (s, rest) = rest.split_at(n);
    *b = rest;
    std::str::from_utf8(s).map_err(|_| bad())
}

/// Takes one byte off the front of `b`.
fn take_byte(b: &mut &[u8], what: &str) -> Result<u8, SecError> {
    let (&v, rest) = b
        .split_first()
        .ok_or_else(|| SecError::Protocol(format!("HELLO: no {what}")))?;
    *b = rest;
    Ok(v)
}

/// Bytes of a HELLO at most.
const HELLO_BYTES_MAX: usize =
    HELLO_FIXED + FSNAME_BYTES_MAX + 3 + 2 * (1 + KEY_NAME_BYTES_MAX) + KEY_ID_BYTES + NONCE_BYTES;

impl Hello {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_BYTES_MAX);
        b.extend_from_slice(HELLO);
        b.extend_from_slice(&VERSION.to_le_bytes());
        put_short(&mut b, &self.fsname);
        b.push(self.client.role.code());
        put_short(&mut b, &self.client.name);
        b.push(u8::from(self.client.nodemap.is_some()));
        put_short(&mut b, self.client.nodemap.as_deref().unwrap_or(""));
        b.extend_from_slice(&self.master.map_or([0; KEY_ID_BYTES], |m| m.0));
        b.extend_from_slice(&self.nonce);
        b
    }

    /// Checks the first [`HELLO_FIXED`] bytes: magic and version.
    fn check_fixed(fixed: &[u8]) -> Result<(), SecError> {
        if fixed.len() < HELLO_FIXED || &fixed[..8] != HELLO {
            return Err(SecError::Protocol("not a handshake HELLO".into()));
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if !(VERSION_MIN..=VERSION).contains(&version) {
            return Err(SecError::Protocol(format!(
                "handshake version {version} (this side speaks {VERSION}): upgrade the \
                 older side"
            )));
        }
        Ok(())
    }

    /// Decodes a whole HELLO.
    pub fn decode(b: &[u8]) -> Result<Hello, SecError> {
        Hello::check_fixed(b)?;
        let mut rest = &b[HELLO_FIXED - 1..];
        let fsname = take_short(&mut rest, FSNAME_BYTES_MAX, "file-system name")?;
        if fsname.is_empty() {
            return Err(SecError::Protocol("HELLO: no file-system name".into()));
        }
        let role = take_byte(&mut rest, "role")?;
        let role = Role::from_code(role)
            .ok_or_else(|| SecError::Protocol(format!("HELLO: unknown role {role}")))?;
        let name = take_short(&mut rest, KEY_NAME_BYTES_MAX, "key name")?.to_string();
        let bound = take_byte(&mut rest, "nodemap flag")?;
        let nodemap = take_short(&mut rest, KEY_NAME_BYTES_MAX, "nodemap")?.to_string();
        let nodemap = match (bound, nodemap.is_empty()) {
            (0, true) => None,
            (1, false) => Some(nodemap),
            _ => return Err(SecError::Protocol("HELLO: bad nodemap".into())),
        };
        if role != Role::Client && (!name.is_empty() || nodemap.is_some()) {
            return Err(SecError::Protocol(format!("HELLO: a {role} names no key")));
        }
        if rest.len() != KEY_ID_BYTES + NONCE_BYTES {
            return Err(SecError::Protocol("HELLO of the wrong length".into()));
        }
        let (master, nonce) = rest.split_at(KEY_ID_BYTES);
        let master: [u8; KEY_ID_BYTES] = master.try_into().expect("length checked");
        let master = (master != [0; KEY_ID_BYTES]).then_some(KeyId(master));
        let nonce: [u8; NONCE_BYTES] = nonce.try_into().expect("length checked");
        Ok(Hello {
            fsname: fsname.to_string(),
            client: Identity {
                role,
                name,
                nodemap,
            },
            master,
            nonce,
        })
    }

    /// Reads a HELLO whose first [`HELLO_FIXED`] bytes are `fixed`, field by field, never
    /// more than [`HELLO_BYTES_MAX`].
    fn read_rest(
        stream: &TcpStream,
        fixed: &[u8; HELLO_FIXED],
        deadline: Instant,
    ) -> Result<Hello, SecError> {
        Hello::check_fixed(fixed)?;
        let mut whole = fixed.to_vec();
        // fsname, then role and the name's length; the name, then the nodemap flag and
        // length; the nodemap, then the nonce.
        let mut next = usize::from(fixed[HELLO_FIXED - 1]) + 2;
        for step in 0..3 {
            let at = whole.len();
            whole.resize(at + next, 0);
            read_by(stream, &mut whole[at..], deadline)?;
            let last = whole[whole.len() - 1];
            next = match step {
                0 => usize::from(last) + 2,
                1 => usize::from(last) + KEY_ID_BYTES + NONCE_BYTES,
                _ => 0,
            };
            if whole.len() + next > HELLO_BYTES_MAX {
                return Err(SecError::Protocol("HELLO too long".into()));
            }
        }
        Hello::decode(&whole)
    }
}

/// A CHALLENGE.
#[derive(Debug, PartialEq, Eq)]
pub struct Challenge {
    status: u8,
    level: u8,
    nonce: [u8; NONCE_BYTES],
    proof: [u8; NONCE_BYTES],
}

impl Challenge {
    /// Its bytes.
    pub fn encode(&self) -> [u8; CHALLENGE_BYTES] {
        let mut b = [0u8; CHALLENGE_BYTES];
        b[..8].copy_from_slice(CHALLENGE);
        b[8] = self.status;
        b[9] = self.level;
        b[10..10 + NONCE_BYTES].copy_from_slice(&self.nonce);
        b[10 + NONCE_BYTES..].copy_from_slice(&self.proof);
        b
    }

    /// Decodes one.
    pub fn decode(b: &[u8]) -> Result<Challenge, SecError> {
        if b.len() != CHALLENGE_BYTES || &b[..8] != CHALLENGE {
            return Err(SecError::Protocol("not a handshake CHALLENGE".into()));
        }
        let mut c = Challenge {
            status: b[8],
            level: b[9],
            nonce: [0; NONCE_BYTES],
            proof: [0; NONCE_BYTES],
        };
        c.nonce.copy_from_slice(&b[10..10 + NONCE_BYTES]);
        c.proof.copy_from_slice(&b[10 + NONCE_BYTES..]);
        Ok(c)
    }
}

fn decode_response(b: &[u8]) -> Result<[u8; NONCE_BYTES], SecError> {
    if b.len() != RESPONSE_BYTES || &b[..8] != RESPONSE {
        return Err(SecError::Protocol("not a handshake RESPONSE".into()));
    }
    let mut p = [0u8; NONCE_BYTES];
    p.copy_from_slice(&b[8..]);
    Ok(p)
}

fn decode_done(b: &[u8]) -> Result<u8, SecError> {
    if b.len() != DONE_BYTES || &b[..8] != DONE {
        return Err(SecError::Protocol("not a handshake DONE".into()));
    }
    Ok(b[8])
}

/// Random bytes for a nonce.
fn nonce() -> Result<[u8; NONCE_BYTES], SecError> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n)
        .map_err(|e| SecError::Io(std::io::Error::other(format!("no random numbers: {e}"))))?;
    Ok(n)
}

/// What both sides compute from the client's identity, its secret and the exchange.
struct Transcript<'a> {
    fsname: &'a str,
    client: &'a Identity,
    secret: [u8; KEY_BYTES],
    nonce_c: [u8; NONCE_BYTES],
    nonce_s: [u8; NONCE_BYTES],
    level: Level,
}

impl Transcript<'_> {
    fn material(&self, side: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(HELLO_BYTES_MAX + 16 + NONCE_BYTES);
        m.extend_from_slice(side);
        put_short(&mut m, self.fsname);
        m.push(self.client.role.code());
        put_short(&mut m, &self.client.name);
        m.push(u8::from(self.client.nodemap.is_some()));
        put_short(&mut m, self.client.nodemap.as_deref().unwrap_or(""));
        m.extend_from_slice(&self.nonce_c);
        m.extend_from_slice(&self.nonce_s);
        m.push(self.level.code());
        m
    }

    fn proof(&self, side: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(&self.secret, &self.material(side))
    }

    fn frame_key(&self, direction: &str) -> [u8; 32] {
        let mut m = self.secret.to_vec();
        m.extend_from_slice(&self.material(b"frames"));
        blake3::derive_key(&format!("nacre shared-key frames 2026 {direction}"), &m)
    }

    fn session(&self, client_side: bool, master: Option<KeyId>) -> Session {
        let (c2s, s2c) = (
            self.frame_key("client-to-server"),
            self.frame_key("server-to-client"),
        );
        let (send, recv) = match client_side {
            true => (c2s, s2c),
            false => (s2c, c2s),
        };
        Session {
            fsname: self.fsname.to_string(),
            client: self.client.clone(),
            master,
            level: self.level,
            sealer: Sealer::new(self.level, send),
            opener: Opener::new(self.level, recv),
        }
    }
}

/// Reads exactly `buf.len()` bytes before `deadline`.
fn read_by(mut s: &TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), SecError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(SecError::Io(std::io::ErrorKind::TimedOut.into()));
    }
    s.set_read_timeout(Some(left))?;
    s.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => SecError::Refused(
            "the peer closed the connection during the handshake (does it hold this file \
             system's key?)"
                .into(),
        ),
        _ => SecError::Io(e),
    })
}

fn write_by(mut s: &TcpStream, buf: &[u8], deadline: Instant) -> Result<(), SecError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(SecError::Io(std::io::ErrorKind::TimedOut.into()));
    }
    s.set_write_timeout(Some(left))?;
    s.write_all(buf)?;
    Ok(())
}

/// A peer that sent a frame instead of a HELLO (a client given no key) is answered, for
/// that frame, `ENOKEY`, so it fails at once with a clear error instead of retrying; its
/// request is not read past its header.
fn refuse_keyless(stream: &TcpStream, first: &[u8; HELLO_FIXED], deadline: Instant) {
    let mut head = [0u8; HEADER_BYTES];
    head[..HELLO_FIXED].copy_from_slice(first);
    if read_by(stream, &mut head[HELLO_FIXED..], deadline).is_err() {
        return;
    }
    let Ok(request) = Header::decode_any_version(&head, u32::MAX) else {
        return;
    };
    if request.is_reply() {
        return;
    }
    let mut reply = request;
    reply.flags = FLAG_REPLY;
    reply.status = Status::NoKey.code();
    reply.seal(&[], None, false);
    let _ = write_by(stream, &reply.encode(), deadline);
}

/// The client's side: proves it holds `key` and checks the server does. The stream's
/// timeouts are cleared after.
pub fn client(stream: &TcpStream, key: &FsKey, timeout: Duration) -> Result<Session, SecError> {
    let deadline = Instant::now() + timeout;
    let nonce_c = nonce()?;
    let hello = Hello {
        fsname: key.fsname().to_string(),
        client: key.identity(),
        master: key.master_id(),
        nonce: nonce_c,
    };
    write_by(stream, &hello.encode(), deadline)?;
    let mut b = [0u8; CHALLENGE_BYTES];
    read_by(stream, &mut b, deadline)?;
    let ch = Challenge::decode(&b)?;
    match ch.status {
        OK => {}
        UNKNOWN_FS => {
            return Err(SecError::Refused(format!(
                "the server holds no key of file system {}",
                key.fsname()
            )))
        }
        REVOKED => {
            return Err(SecError::Refused(format!(
                "this {} of {} is revoked: ask the administrator for a new key",
                key.identity(),
                key.fsname()
            )))
        }
        WRONG_VERSION => {
            return Err(SecError::Protocol(format!(
                "the server speaks handshake version {}, this side {VERSION_MIN} to \
                 {VERSION}: upgrade the older side",
                ch.level
            )))
        }
        STALE => {
            // A rotation retired the master this key was made from: the administrator put
            // the new key where this one came from; the next connection uses it.
            let reloaded = super::keyring::reload_key(key.fsname(), key.master_id());
            return Err(SecError::KeyRetired {
                why: format!(
                    "the keys differ: this {} of {} was made from a server key the servers \
                     do not hold (retired in a key rotation, or never theirs){}",
                    key.identity(),
                    key.fsname(),
                    match reloaded {
                        true => ": the new key in its place is used from now on",
                        false => ": ask the administrator for the new key",
                    }
                ),
                reloaded,
            });
        }
        s => {
            return Err(SecError::Refused(format!(
                "the server refused the connection ({s})"
            )))
        }
    }
    let level = Level::from_code(ch.level)
        .ok_or_else(|| SecError::Protocol(format!("unknown level {}", ch.level)))?;
    let t = Transcript {
        fsname: key.fsname(),
        client: &hello.client,
        secret: key.own_secret(),
        nonce_c,
        nonce_s: ch.nonce,
        level,
    };
    if t.proof(b"server") != blake3::Hash::from(ch.proof) {
        return Err(SecError::Refused(format!(
            "the server did not prove it holds the key of {}: the keys differ",
            key.fsname()
        )));
    }
    let mut resp = Vec::with_capacity(RESPONSE_BYTES);
    resp.extend_from_slice(RESPONSE);
    resp.extend_from_slice(t.proof(b"client").as_bytes());
    write_by(stream, &resp, deadline)?;
    let mut d = [0u8; DONE_BYTES];
    read_by(stream, &mut d, deadline)?;
    if decode_done(&d)? != OK {
        return Err(SecError::Refused(format!(
            "the server refused this client's key of {}",
            key.fsname()
        )));
    }
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(None)?;
    Ok(t.session(true, key.master_id()))
}

/// Answers a HELLO with a CHALLENGE of refusal `status` (best effort: the connection
/// closes after).
fn refuse(stream: &TcpStream, status: u8, deadline: Instant) {
    refuse_with(stream, status, 0, deadline);
}

/// [`refuse`] with `level` in the CHALLENGE's level byte (a [`WRONG_VERSION`] refusal
/// carries the server's newest handshake version there).
fn refuse_with(stream: &TcpStream, status: u8, level: u8, deadline: Instant) {
    let no = Challenge {
        status,
        level,
        nonce: [0; NONCE_BYTES],
        proof: [0; NONCE_BYTES],
    };
    let _ = write_by(stream, &no.encode(), deadline);
}

/// The server's side: reads the HELLO, answers for the file system it names with the level
/// `level_for` picks, and checks the client's proof. Nothing but the handshake is read.
pub fn serve(
    stream: &TcpStream,
    keys: &ServerKeys,
    level_for: impl Fn(&FsKey) -> Level,
    timeout: Duration,
) -> Result<Session, SecError> {
    let deadline = Instant::now() + timeout;
    let mut fixed = [0u8; HELLO_FIXED];
    read_by(stream, &mut fixed, deadline)?;
    if &fixed[..8] != HELLO {
        refuse_keyless(stream, &fixed, deadline);
        return Err(SecError::Refused(
            "a client sent a request without the handshake (it holds no key)".into(),
        ));
    }
    let version = u16::from_le_bytes([fixed[8], fixed[9]]);
    if !(VERSION_MIN..=VERSION).contains(&version) {
        // Answered (never just closed), so the client names the versions, not a key.
        let newest = u8::try_from(VERSION).unwrap_or(u8::MAX);
        refuse_with(stream, WRONG_VERSION, newest, deadline);
        return Err(SecError::Protocol(format!(
            "a peer's handshake version is {version} (this side speaks {VERSION_MIN} to \
             {VERSION}): answered with this side's"
        )));
    }
    let hello = Hello::read_rest(stream, &fixed, deadline)?;
    if hello.client.role == Role::Client
        && nacre_wire::nodemap::active().is_revoked(
            nacre_types::fs_slot(&hello.fsname),
            &hello.client.name,
            hello.client.nodemap.as_deref(),
        )
    {
        refuse(stream, REVOKED, deadline);
        return Err(SecError::Refused(format!(
            "a peer presented the {} of {}, which is revoked",
            hello.client, hello.fsname
        )));
    }
    if keys.serves(&hello.fsname) && keys.find(&hello.fsname, hello.master).is_none() {
        refuse(stream, STALE, deadline);
        return Err(SecError::Refused(format!(
            "a peer presented the {} of {} made from master key {}, which this server \
             does not hold (retired)",
            hello.client,
            hello.fsname,
            hello.master.map_or("?".to_string(), |m| m.to_string())
        )));
    }
    let Some((key, secret)) = keys
        .find(&hello.fsname, hello.master)
        .and_then(|k| Some((k.clone(), k.peer_secret(&hello.client)?)))
    else {
        refuse(stream, UNKNOWN_FS, deadline);
        return Err(SecError::Refused(format!(
            "a client named file system {:?}, whose key this server does not hold",
            hello.fsname
        )));
    };
    let t = Transcript {
        fsname: key.fsname(),
        client: &hello.client,
        secret,
        nonce_c: hello.nonce,
        nonce_s: nonce()?,
        level: level_for(&key),
    };
    let ch = Challenge {
        status: OK,
        level: t.level.code(),
        nonce: t.nonce_s,
        proof: *t.proof(b"server").as_bytes(),
    };
    write_by(stream, &ch.encode(), deadline)?;
    let mut r = [0u8; RESPONSE_BYTES];
    read_by(stream, &mut r, deadline)?;
    let proof = decode_response(&r)?;
    let mut done = Vec::with_capacity(DONE_BYTES);
    done.extend_from_slice(DONE);
    if t.proof(b"client") != blake3::Hash::from(proof) {
        done.push(REFUSED);
        let _ = write_by(stream, &done, deadline);
        return Err(SecError::Refused(format!(
            "a peer did not prove it holds the {} of {}",
            hello.client,
            key.fsname()
        )));
    }
    done.push(OK);
    write_by(stream, &done, deadline)?;
    stream.set_read_timeout(None)?;
    Ok(t.session(false, key.master_id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sec::serve_keys;
    use proptest::prelude::*;
    use std::net::TcpListener;

    fn keys(k: &FsKey) -> ServerKeys {
        let mut s = ServerKeys::default();
        s.add(k.clone()).unwrap();
        s
    }

    /// Runs a server handshake on one end of a loopback pair and `client` on the other.
    fn run(
        server_keys: ServerKeys,
        client: impl FnOnce(TcpStream) -> Result<Session, SecError>,
    ) -> (Result<Session, SecError>, Result<Session, SecError>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            serve(&s, &server_keys, |k| k.level(), Duration::from_secs(5))
        });
        let c = client(TcpStream::connect(addr).unwrap());
        (c, t.join().unwrap())
    }

    #[test]
    fn the_same_key_opens_a_session_both_ways() {
        let k = FsKey::generate("fs1", Level::Privacy).unwrap();
        let kc = k.clone();
        let (c, s) = run(keys(&k), move |st| client(&st, &kc, Duration::from_secs(5)));
        let (mut c, mut s) = (c.unwrap(), s.unwrap());
        assert_eq!((c.level, s.level), (Level::Privacy, Level::Privacy));
        let mut h = nacre_wire::Header::request(0x0301, 1, 1);
        h.seal(b"hi", None, true);
        let sealed = c.sealer.seal(&h, b"hi", None);
        let mut body = sealed.body.to_vec();
        s.opener
            .open(&h, &mut body, None, sealed.trailer())
            .unwrap();
        assert_eq!(body, b"hi");
    }

    #[test]
    fn during_a_rotation_keys_of_both_masters_are_taken_and_then_only_the_new() {
        let old = FsKey::generate("fs1", Level::Integrity).unwrap();
        let new = FsKey::generate("fs1", Level::Integrity).unwrap();
        let server = keys(&old);
        serve_keys(&server);
        crate::sec::accept_key(new.clone()).unwrap();
        for master in [&old, &new] {
            let c = master.client_key("lab", None).unwrap();
            let (c, s) = run(server.clone(), move |st| {
                client(&st, &c, Duration::from_secs(5))
            });
            c.unwrap();
            assert_eq!(s.unwrap().master, master.master_id());
        }
        crate::sec::use_key(new.clone()).unwrap();
        crate::sec::retire_key("fs1", old.master_id().unwrap()).unwrap();
        let c = old.client_key("lab", None).unwrap();
        let (c, s) = run(server.clone(), move |st| {
            client(&st, &c, Duration::from_secs(5))
        });
        let e = c.unwrap_err();
        assert!(
            matches!(
                &e,
                SecError::KeyRetired {
                    reloaded: false,
                    ..
                }
            ),
            "{e}"
        );
        assert!(s.unwrap_err().to_string().contains("retired"));
        let c = new.client_key("lab", None).unwrap();
        let (c, _) = run(server, move |st| client(&st, &c, Duration::from_secs(5)));
        c.unwrap();
    }

    #[test]
    fn a_wrong_key_or_an_unknown_file_system_is_refused_on_both_sides() {
        let k = FsKey::generate("fs1", Level::None).unwrap();
        let wrong = FsKey::generate("fs1", Level::None).unwrap();
        let (c, s) = run(keys(&k), move |st| {
            client(&st, &wrong, Duration::from_secs(5))
        });
        assert!(c.unwrap_err().to_string().contains("keys differ"));
        assert!(s.is_err());
        let other = FsKey::generate("fs2", Level::None).unwrap();
        let (c, s) = run(keys(&k), move |st| {
            client(&st, &other, Duration::from_secs(5))
        });
        assert!(c
            .unwrap_err()
            .to_string()
            .contains("no key of file system fs2"));
        assert!(s.is_err());
    }

    #[test]
    fn a_hello_of_another_version_is_answered_with_the_servers_version() {
        let k = FsKey::generate("fs1", Level::Integrity).unwrap();
        for version in [VERSION + 1, VERSION_MIN - 1] {
            let kc = k.clone();
            let answer = std::sync::Arc::new(std::sync::Mutex::new(None));
            let got = answer.clone();
            let (c, s) = run(keys(&k), move |st| {
                let mut hello = Hello {
                    fsname: kc.fsname().to_string(),
                    client: kc.identity(),
                    master: kc.master_id(),
                    nonce: [7; NONCE_BYTES],
                }
                .encode();
                hello[8..10].copy_from_slice(&version.to_le_bytes());
                let deadline = Instant::now() + Duration::from_secs(5);
                write_by(&st, &hello, deadline)?;
                let mut b = [0u8; CHALLENGE_BYTES];
                read_by(&st, &mut b, deadline)?;
                *got.lock().unwrap() = Some(Challenge::decode(&b)?);
                Err(SecError::Protocol("raw client".into()))
            });
            assert!(c.is_err());
            let ch = answer.lock().unwrap().take().expect("the server answered");
            assert_eq!((ch.status, u16::from(ch.level)), (WRONG_VERSION, VERSION));
            assert!(s
                .unwrap_err()
                .to_string()
                .contains(&format!("is {version}")));
        }
    }

    #[test]
    fn a_client_told_another_version_names_both() {
        let k = FsKey::generate("fs1", Level::Integrity).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // A server of the next handshake version, answering as this one does.
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut fixed = [0u8; HELLO_FIXED];
            read_by(&s, &mut fixed, deadline).unwrap();
            let no = Challenge {
                status: WRONG_VERSION,
                level: (VERSION + 1) as u8,
                nonce: [0; NONCE_BYTES],
                proof: [0; NONCE_BYTES],
            };
            write_by(&s, &no.encode(), deadline).unwrap();
        });
        let st = TcpStream::connect(addr).unwrap();
        let e = client(&st, &k, Duration::from_secs(5)).err().unwrap();
        t.join().unwrap();
        assert!(
            e.to_string().contains(&format!(
                "speaks handshake version {}, this side {VERSION_MIN} to {VERSION}",
                VERSION + 1
            )),
            "{e}"
        );
    }

    #[test]
    fn a_recorded_handshake_replayed_is_refused() {
        let k = FsKey::generate("fs1", Level::Integrity).unwrap();
        let kc = k.clone();
        // Record what a real client sends.
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let (c, s) = run(keys(&k), move |st| {
            let r = client(&st, &kc, Duration::from_secs(5));
            let _ = sent_tx.send(());
            r
        });
        c.unwrap();
        s.unwrap();
        sent_rx.recv().unwrap();
        // Replaying its HELLO and RESPONSE cannot answer a new server nonce.
        let hello = Hello {
            fsname: "fs1".into(),
            client: k.identity(),
            master: k.master_id(),
            nonce: [9; NONCE_BYTES],
        };
        let id = k.identity();
        let old = Transcript {
            fsname: "fs1",
            client: &id,
            secret: k.own_secret(),
            nonce_c: [9; NONCE_BYTES],
            nonce_s: [1; NONCE_BYTES],
            level: Level::Integrity,
        };
        let (c, s) = run(keys(&k), move |st| {
            write_by(
                &st,
                &hello.encode(),
                Instant::now() + Duration::from_secs(5),
            )?;
            let mut ch = [0u8; CHALLENGE_BYTES];
            read_by(&st, &mut ch, Instant::now() + Duration::from_secs(5))?;
            let mut resp = RESPONSE.to_vec();
            resp.extend_from_slice(old.proof(b"client").as_bytes());
            write_by(&st, &resp, Instant::now() + Duration::from_secs(5))?;
            let mut d = [0u8; DONE_BYTES];
            read_by(&st, &mut d, Instant::now() + Duration::from_secs(5))?;
            match decode_done(&d)? {
                OK => Err(SecError::Protocol("accepted".into())),
                _ => Err(SecError::Refused("refused".into())),
            }
        });
        assert!(c.unwrap_err().to_string().contains("refused"));
        assert!(s.unwrap_err().to_string().contains("did not prove"));
    }

    /// Speaks a client's side with `secret` while claiming `claim`: what a holder of one
    /// key does to pass as another.
    fn claim_as(
        st: &TcpStream,
        fsname: &str,
        claim: Identity,
        secret: [u8; KEY_BYTES],
    ) -> Result<Session, SecError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let hello = Hello {
            fsname: fsname.into(),
            client: claim,
            master: None,
            nonce: [7; NONCE_BYTES],
        };
        write_by(st, &hello.encode(), deadline)?;
        let mut b = [0u8; CHALLENGE_BYTES];
        read_by(st, &mut b, deadline)?;
        let ch = Challenge::decode(&b)?;
        let t = Transcript {
            fsname,
            client: &hello.client,
            secret,
            nonce_c: hello.nonce,
            nonce_s: ch.nonce,
            level: Level::from_code(ch.level).unwrap(),
        };
        let mut resp = RESPONSE.to_vec();
        resp.extend_from_slice(t.proof(b"client").as_bytes());
        write_by(st, &resp, deadline)?;
        let mut d = [0u8; DONE_BYTES];
        read_by(st, &mut d, deadline)?;
        match decode_done(&d)? {
            OK => Ok(t.session(true, None)),
            _ => Err(SecError::Refused("refused".into())),
        }
    }

    #[test]
    fn a_client_key_proves_its_own_name_and_nodemap_and_nothing_else() {
        let master = FsKey::generate("fs1", Level::Integrity).unwrap();
        let tenant = master.client_key("node7", Some("tenant-a")).unwrap();
        let tc = tenant.clone();
        let (c, s) = run(keys(&master), move |st| {
            client(&st, &tc, Duration::from_secs(5))
        });
        c.unwrap();
        let s = s.unwrap();
        assert_eq!(s.client, tenant.identity());
        assert_eq!(s.client.role, Role::Client);
        assert_eq!(s.client.nodemap.as_deref(), Some("tenant-a"));
        // Its secret, with any other claim: another nodemap, no nodemap, another name, the
        // server or admin role.
        let claims = [
            Identity {
                nodemap: Some("tenant-b".into()),
                ..tenant.identity()
            },
            Identity {
                nodemap: None,
                ..tenant.identity()
            },
            Identity {
                name: "node8".into(),
                ..tenant.identity()
            },
            master.identity(),
            master.as_role(Role::Admin).unwrap().identity(),
        ];
        for claim in claims {
            let secret = tenant.own_secret();
            let what = claim.to_string();
            let (c, s) = run(keys(&master), move |st| claim_as(&st, "fs1", claim, secret));
            assert!(c.is_err(), "{what} accepted");
            assert!(
                s.unwrap_err().to_string().contains("did not prove"),
                "{what}"
            );
        }
        // A client key makes no other key, and no object capabilities.
        assert!(tenant.client_key("x", None).is_err());
        assert!(tenant.as_role(Role::Server).is_none());
        assert!(ServerKeys::default().add(tenant).is_err());
    }

    #[test]
    fn an_admin_key_proves_the_admin_role() {
        let master = FsKey::generate("fs1", Level::None).unwrap();
        let admin = master.as_role(Role::Admin).unwrap();
        let (c, s) = run(keys(&master), move |st| {
            client(&st, &admin, Duration::from_secs(5))
        });
        c.unwrap();
        assert_eq!(s.unwrap().client.role, Role::Admin);
    }

    proptest! {
        #[test]
        fn decoders_never_panic_and_hello_round_trips(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            name in "[a-z0-9]{1,64}",
            n in any::<[u8; 32]>(),
        ) {
            let _ = Hello::decode(&bytes);
            let _ = Hello::check_fixed(&bytes);
            let _ = Challenge::decode(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_done(&bytes);
            let client = Identity {
                role: Role::from_code(n[0] % 3).unwrap(),
                name: String::new(),
                nodemap: None,
            };
            let client = match client.role {
                Role::Client => Identity {
                    name: name.clone(),
                    nodemap: (n[1] % 2 == 0).then(|| name.clone()),
                    ..client
                },
                _ => client,
            };
            let master = (n[2] % 2 == 0).then(|| KeyId(n[3..11].try_into().unwrap()))
                .filter(|m| m.0 != [0; KEY_ID_BYTES]);
            let h = Hello { fsname: name, client, master, nonce: n };
            let enc = h.encode();
            prop_assert_eq!(Hello::decode(&enc).unwrap(), h);
            for cut in 0..enc.len() {
                prop_assert!(Hello::decode(&enc[..cut]).is_err());
            }
            let c = Challenge { status: 0, level: 2, nonce: n, proof: n };
            prop_assert_eq!(Challenge::decode(&c.encode()).unwrap(), c);
        }
    }
}
