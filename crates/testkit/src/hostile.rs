//! A hostile peer that speaks the protocol correctly: a TCP proxy between clients and a real
//! server that forwards every frame, and on command turns one reply into well-formed but
//! hostile content (a layout of no objects, a zero stripe size, a directory stripe of no
//! shards, more bulk than asked), breaks one frame (a bulk shorter than its header announces,
//! then the connection closes), or slips in a reply to a request never sent. Each trick
//! fires once; then the proxy forwards faithfully again, so a test can show the mount goes on.
//!
//! Servers advertise the proxy's address (`nacre server --nid PROXY`), so every client
//! connection, to the MGS, MDTs and OSTs alike, passes through it.

use nacre_wire::header::{Header, FLAG_BULK_CHECKSUM, HEADER_BYTES};
use nacre_wire::mds::{LayoutInfo, MdsAnswer, MdsReply};
use nacre_wire::oss::OssReply;
use nacre_wire::{decode_body, encode_body, Service};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The trick the proxy plays on the next reply it fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trick {
    /// Forward everything unchanged.
    None,
    /// A file layout (MDS reply) with no objects.
    LayoutNoObjects,
    /// A file layout (MDS reply) with stripe size 0.
    LayoutZeroStripeSize,
    /// A directory stripe (MDS reply) of no shards.
    DirStripeNoShards,
    /// A read reply (OSS) with 4 KiB more bulk than asked, its header consistent.
    BulkLonger,
    /// A read reply (OSS) whose header announces more bulk than follows; then the
    /// connection closes (a framing fault: the client reconnects and resends).
    BulkShorter,
    /// A reply to an xid never sent, before the next reply of any kind.
    UnsolicitedReply,
}

struct State {
    trick: Mutex<Trick>,
    /// Only replies of this opcode are spoiled (0: any).
    opcode: AtomicU64,
    fired: AtomicU64,
}

/// The proxy; runs until the test process ends.
pub struct HostileProxy {
    /// The address clients reach it at.
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl HostileProxy {
    /// A proxy on `listen` (e.g. `127.0.0.1:0`) in front of the server at `upstream`.
    pub fn start(listen: &str, upstream: SocketAddr) -> HostileProxy {
        let listener = TcpListener::bind(listen).expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let state = Arc::new(State {
            trick: Mutex::new(Trick::None),
            opcode: AtomicU64::new(0),
            fired: AtomicU64::new(0),
        });
        let s = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || copy_raw(c2, s2));
                let s = s.clone();
                std::thread::spawn(move || forward_replies(server, client, &s));
            }
        });
        HostileProxy { addr, state }
    }

    /// Arms `trick` for the next reply it fits.
    pub fn arm(&self, trick: Trick) {
        self.arm_for(trick, 0);
    }

    /// Arms `trick` for the next reply of `opcode` it fits (0: any opcode). The kernel
    /// retries some failed requests on its own (a failed revalidation becomes a new
    /// lookup), so a test that wants the application to see the failure picks the request.
    pub fn arm_for(&self, trick: Trick, opcode: u16) {
        self.state.opcode.store(u64::from(opcode), Ordering::SeqCst);
        *self.state.trick.lock().unwrap() = trick;
    }

    /// How many tricks fired so far.
    pub fn fired(&self) -> u64 {
        self.state.fired.load(Ordering::SeqCst)
    }
}

/// Requests go through untouched.
fn copy_raw(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// One frame read off a stream.
struct Frame {
    header: Header,
    body: Vec<u8>,
    bulk: Vec<u8>,
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Frame> {
    let mut h = [0u8; HEADER_BYTES];
    s.read_exact(&mut h)?;
    let header = Header::decode(&h, u32::MAX).map_err(std::io::Error::other)?;
    let mut body = vec![0; header.body_len as usize];
    s.read_exact(&mut body)?;
    let mut bulk = vec![0; header.bulk_len as usize];
    s.read_exact(&mut bulk)?;
    Ok(Frame { header, body, bulk })
}

fn write_frame(s: &mut TcpStream, f: &Frame) -> std::io::Result<()> {
    s.write_all(&f.header.encode())?;
    s.write_all(&f.body)?;
    s.write_all(&f.bulk)
}

/// Re-seals `f` after its body or bulk changed (checksums and lengths consistent).
fn reseal(f: &mut Frame) {
    let checksum = f.header.flags & FLAG_BULK_CHECKSUM != 0;
    let bulk = (!f.bulk.is_empty()).then_some(&f.bulk[..]);
    f.header.seal(&f.body, bulk, checksum);
}

fn forward_replies(mut server: TcpStream, mut client: TcpStream, state: &State) {
    while let Ok(mut f) = read_frame(&mut server) {
        let wanted = state.opcode.load(Ordering::SeqCst);
        let trick = match wanted == 0 || wanted == u64::from(f.header.opcode) {
            true => *state.trick.lock().unwrap(),
            false => Trick::None,
        };
        let service = Service::of_opcode(f.header.opcode);
        let fired = match (trick, service) {
            (Trick::UnsolicitedReply, _) => {
                let mut stray = Frame {
                    header: f.header,
                    body: f.body.clone(),
                    bulk: f.bulk.clone(),
                };
                stray.header.xid = u64::MAX / 7;
                write_frame(&mut client, &stray).is_ok()
            }
            (Trick::BulkLonger, Some(Service::Oss)) if is_read(&f) => {
                f.bulk.extend_from_slice(&[0x5a; 4096]);
                reseal(&mut f);
                true
            }
            (Trick::BulkShorter, Some(Service::Oss)) if is_read(&f) && f.bulk.len() > 1 => {
                let half = f.bulk.len() / 2;
                let _ = client.write_all(&f.header.encode());
                let _ = client.write_all(&f.body);
                let _ = client.write_all(&f.bulk[..half]);
                *state.trick.lock().unwrap() = Trick::None;
                state.fired.fetch_add(1, Ordering::SeqCst);
                let _ = client.shutdown(std::net::Shutdown::Both);
                let _ = server.shutdown(std::net::Shutdown::Both);
                return;
            }
            (
                Trick::LayoutNoObjects | Trick::LayoutZeroStripeSize | Trick::DirStripeNoShards,
                Some(Service::Mds),
            ) => spoil_mds(&mut f, trick),
            _ => false,
        };
        if fired {
            *state.trick.lock().unwrap() = Trick::None;
            state.fired.fetch_add(1, Ordering::SeqCst);
        }
        if write_frame(&mut client, &f).is_err() {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
}

fn is_read(f: &Frame) -> bool {
    f.header.status == 0
        && !f.bulk.is_empty()
        && matches!(decode_body::<OssReply>(&f.body), Ok(OssReply::Read { .. }))
}

/// Applies an MDS trick to `f` if its reply carries what the trick spoils.
fn spoil_mds(f: &mut Frame, trick: Trick) -> bool {
    if f.header.status != 0 {
        return false;
    }
    let Ok(mut answer) = decode_body::<MdsAnswer>(&f.body) else {
        return false;
    };
    let spoiled = match (trick, &mut answer.reply) {
        (
            Trick::LayoutNoObjects,
            MdsReply::Entry {
                layout: Some(l), ..
            }
            | MdsReply::Layout(LayoutInfo::File(l)),
        ) => {
            for c in &mut l.components {
                c.objects.clear();
            }
            true
        }
        (
            Trick::LayoutZeroStripeSize,
            MdsReply::Entry {
                layout: Some(l), ..
            }
            | MdsReply::Layout(LayoutInfo::File(l)),
        ) => {
            l.components[0].stripe_size = 0;
            true
        }
        (Trick::DirStripeNoShards, MdsReply::DirStripe(Some(s))) => {
            s.shards.clear();
            true
        }
        _ => false,
    };
    if spoiled {
        f.body = encode_body(&answer);
        reseal(f);
    }
    spoiled
}
