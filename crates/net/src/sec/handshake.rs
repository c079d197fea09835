//! The handshake that opens every connection to a server holding keys:
//!
//! ```text
//! client → server  HELLO      "NACRHELO" version:u16 fsname_len:u8 fsname nonce_c[32]
//! server → client  CHALLENGE  "NACRCHAL" status:u8 level:u8 nonce_s[32] proof_s[32]
//! client → server  RESPONSE   "NACRRESP" proof_c[32]
//! server → client  DONE       "NACRDONE" status:u8
//! ```
//!
//! `proof_s` and `proof_c` are BLAKE3 keyed with the file system's key over the role, the
//! file-system name, both nonces and the level, so each side proves it holds the key, a
//! recorded RESPONSE is worthless against a new server nonce, and the level the server
//! chose cannot be changed on the way. Each direction's frame key is derived from the key
//! and both nonces (fresh per connection). Nothing else is read before DONE.

use super::session::{Opener, Sealer};
use super::{FsKey, Level, SecError, ServerKeys, FSNAME_BYTES_MAX};
use nacre_types::Status;
use nacre_wire::header::FLAG_REPLY;
use nacre_wire::{Header, HEADER_BYTES};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Handshake version spoken.
pub const VERSION: u16 = 1;
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

/// What a handshake leaves: the file system, the level, and each direction's protection.
pub struct Session {
    /// The file system the connection is for.
    pub fsname: String,
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
    /// The client's nonce.
    pub nonce: [u8; NONCE_BYTES],
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({}, {})", self.fsname, self.level)
    }
}

impl Hello {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HELLO_FIXED + self.fsname.len() + NONCE_BYTES);
        b.extend_from_slice(HELLO);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.push(self.fsname.len() as u8);
        b.extend_from_slice(self.fsname.as_bytes());
        b.extend_from_slice(&self.nonce);
        b
    }

    /// The length of the file-system name its first [`HELLO_FIXED`] bytes announce.
    fn name_len(fixed: &[u8]) -> Result<usize, SecError> {
        if fixed.len() < HELLO_FIXED || &fixed[..8] != HELLO {
            return Err(SecError::Protocol("not a handshake HELLO".into()));
        }
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if version != VERSION {
            return Err(SecError::Protocol(format!(
                "handshake version {version} (this side speaks {VERSION})"
            )));
        }
        let n = usize::from(fixed[10]);
        if n == 0 || n > FSNAME_BYTES_MAX {
            return Err(SecError::Protocol(format!("file-system name of {n} bytes")));
        }
        Ok(n)
    }

    /// Decodes a whole HELLO.
    pub fn decode(b: &[u8]) -> Result<Hello, SecError> {
        let n = Hello::name_len(b)?;
        if b.len() != HELLO_FIXED + n + NONCE_BYTES {
            return Err(SecError::Protocol("HELLO of the wrong length".into()));
        }
        let fsname = std::str::from_utf8(&b[HELLO_FIXED..HELLO_FIXED + n])
            .map_err(|_| SecError::Protocol("file-system name is not UTF-8".into()))?
            .to_string();
        let mut nonce = [0u8; NONCE_BYTES];
        nonce.copy_from_slice(&b[HELLO_FIXED + n..]);
        Ok(Hello { fsname, nonce })
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

/// What both sides compute from the key and the exchange.
struct Transcript<'a> {
    key: &'a FsKey,
    nonce_c: [u8; NONCE_BYTES],
    nonce_s: [u8; NONCE_BYTES],
    level: Level,
}

impl Transcript<'_> {
    fn material(&self, role: &[u8]) -> Vec<u8> {
        let mut m = Vec::with_capacity(16 + FSNAME_BYTES_MAX + 2 * NONCE_BYTES);
        m.extend_from_slice(role);
        m.push(self.key.fsname().len() as u8);
        m.extend_from_slice(self.key.fsname().as_bytes());
        m.extend_from_slice(&self.nonce_c);
        m.extend_from_slice(&self.nonce_s);
        m.push(self.level.code());
        m
    }

    fn proof(&self, role: &[u8]) -> blake3::Hash {
        blake3::keyed_hash(self.key.secret(), &self.material(role))
    }

    fn frame_key(&self, direction: &str) -> [u8; 32] {
        let mut m = self.key.secret().to_vec();
        m.extend_from_slice(&self.material(b"frames"));
        blake3::derive_key(&format!("nacre shared-key frames 2026 {direction}"), &m)
    }

    fn session(&self, client_side: bool) -> Session {
        let (c2s, s2c) = (
            self.frame_key("client-to-server"),
            self.frame_key("server-to-client"),
        );
        let (send, recv) = match client_side {
            true => (c2s, s2c),
            false => (s2c, c2s),
        };
        Session {
            fsname: self.key.fsname().to_string(),
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
    let Ok(request) = Header::decode(&head, u32::MAX) else {
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
        s => {
            return Err(SecError::Refused(format!(
                "the server refused the connection ({s})"
            )))
        }
    }
    let level = Level::from_code(ch.level)
        .ok_or_else(|| SecError::Protocol(format!("unknown level {}", ch.level)))?;
    let t = Transcript {
        key,
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
    Ok(t.session(true))
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
    let n = Hello::name_len(&fixed)?;
    let mut rest = vec![0u8; n + NONCE_BYTES];
    read_by(stream, &mut rest, deadline)?;
    let mut whole = fixed.to_vec();
    whole.extend_from_slice(&rest);
    let hello = Hello::decode(&whole)?;
    let Some(key) = keys.get(&hello.fsname) else {
        let no = Challenge {
            status: UNKNOWN_FS,
            level: 0,
            nonce: [0; NONCE_BYTES],
            proof: [0; NONCE_BYTES],
        };
        let _ = write_by(stream, &no.encode(), deadline);
        return Err(SecError::Refused(format!(
            "a client named file system {:?}, whose key this server does not hold",
            hello.fsname
        )));
    };
    let t = Transcript {
        key,
        nonce_c: hello.nonce,
        nonce_s: nonce()?,
        level: level_for(key),
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
            "a client did not prove it holds the key of {}",
            key.fsname()
        )));
    }
    done.push(OK);
    write_by(stream, &done, deadline)?;
    stream.set_read_timeout(None)?;
    Ok(t.session(false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::TcpListener;

    fn keys(k: &FsKey) -> ServerKeys {
        let mut s = ServerKeys::default();
        s.add(k.clone());
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
            nonce: [9; NONCE_BYTES],
        };
        let old = Transcript {
            key: &k,
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

    proptest! {
        #[test]
        fn decoders_never_panic_and_hello_round_trips(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            name in "[a-z0-9]{1,64}",
            n in any::<[u8; 32]>(),
        ) {
            let _ = Hello::decode(&bytes);
            let _ = Hello::name_len(&bytes);
            let _ = Challenge::decode(&bytes);
            let _ = decode_response(&bytes);
            let _ = decode_done(&bytes);
            let h = Hello { fsname: name, nonce: n };
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
