//! A bare protocol client on one TCP connection: frames built and read by hand, for tests
//! that need many connections (far more than client processes would make) or connections
//! that misbehave on purpose (half frames, announced bulk never sent, replies never read).

use nacre_types::Fid;
use nacre_wire::header::{Header, FLAG_BULK_CHECKSUM, HEADER_BYTES};
use nacre_wire::mds::{MdsAnswer, MdsCall, MdsOp, MdsReply};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};
use nacre_wire::{decode_body, encode_body};
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One connection to a server.
pub struct RawConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    client: [u8; 16],
    xid: u64,
    /// The file system's frame slot, put beside each target index.
    slot: u16,
    /// The connection's protection, after a handshake with a key ([`RawConn::connect_keyed`]).
    session: Option<nacre_net::sec::handshake::Session>,
    /// The protocol version of the frames it sends (this side's unless set with
    /// [`RawConn::set_version`]).
    version: u16,
    /// The client uuid OSS requests name (zero, a client that takes no locks, unless set
    /// with [`RawConn::set_oss_client`]).
    oss_client: [u8; 16],
}

/// A reply as read off the wire.
pub struct RawReply {
    /// Its header (status, xid).
    pub header: Header,
    /// Its body.
    pub body: Vec<u8>,
    /// Its bulk.
    pub bulk: Vec<u8>,
}

impl RawConn {
    /// Connects to `addr` (`IP:PORT`) as a client of uuid `client` of file system `fsname`.
    pub fn connect(addr: &str, fsname: &str, client: [u8; 16]) -> std::io::Result<RawConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(RawConn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            client,
            xid: 1,
            slot: nacre_types::fs_slot(fsname),
            session: None,
            version: nacre_wire::PROTOCOL_VERSION,
            oss_client: [0; 16],
        })
    }

    /// Numbers the next request `xid` (a client's xids never repeat: one that reconnects
    /// goes on from where it was, or the MDT answers a request from the saved reply of the
    /// one that had its xid).
    pub fn set_xid(&mut self, xid: u64) {
        self.xid = xid;
    }

    /// Sends the next frames in protocol `version` (a client of another release).
    pub fn set_version(&mut self, version: u16) {
        self.version = version;
    }

    /// Names `uuid` as the client of the OSS requests sent from now on.
    pub fn set_oss_client(&mut self, uuid: [u8; 16]) {
        self.oss_client = uuid;
    }

    /// Connects to `addr` holding `key` (its handshake first, then every frame sealed and
    /// every reply opened at the level the server chose), as a client of uuid `client`.
    pub fn connect_keyed(
        addr: &str,
        key: &nacre_net::sec::FsKey,
        client: [u8; 16],
    ) -> std::io::Result<RawConn> {
        let mut c = RawConn::connect(addr, key.fsname(), client)?;
        let session = nacre_net::sec::handshake::client(&c.writer, key, Duration::from_secs(10))
            .map_err(std::io::Error::other)?;
        c.writer.set_read_timeout(Some(Duration::from_secs(60)))?;
        c.session = Some(session);
        Ok(c)
    }

    /// Sends `body` under `opcode` to `target` and reads its reply's status (0: served,
    /// else the negative errno), or the I/O error that ended the connection.
    pub fn call_raw(&mut self, opcode: u16, target: u32, body: &[u8]) -> std::io::Result<i32> {
        self.send_raw(opcode, target, body, None)?;
        Ok(self.recv()?.header.status)
    }

    /// The socket itself (to misbehave on it).
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.writer
    }

    /// The next request goes with the xid of the last one sent: a resend, as a client
    /// sends one whose answer it did not get.
    pub fn reuse_xid(&mut self) {
        self.xid = self.xid.saturating_sub(1);
    }

    /// Sends an MDS request to MDT `target`; returns its xid.
    pub fn send_mds(&mut self, target: u32, op: MdsOp) -> std::io::Result<u64> {
        self.send_mds_with(target, op, 0)
    }

    /// [`RawConn::send_mds`] asking for `lock_bits`.
    pub fn send_mds_with(&mut self, target: u32, op: MdsOp, lock_bits: u8) -> std::io::Result<u64> {
        let opcode = op.opcode();
        let call = MdsCall {
            lock_bits,
            client: self.client,
            replied_below: self.xid,
            jobid: "raw".into(),
            cred: nacre_types::cred::current(),
            op,
        };
        self.send_raw(opcode, target, &encode_body(&call), None)
    }

    /// Sends an OSS request to OST `target`, with `bulk` for a write; returns its xid.
    pub fn send_oss(
        &mut self,
        target: u32,
        req: OssRequest,
        bulk: Option<&[u8]>,
    ) -> std::io::Result<u64> {
        self.send_oss_capa(target, req, bulk, None)
    }

    /// [`RawConn::send_oss`] showing capability `capa`.
    pub fn send_oss_capa(
        &mut self,
        target: u32,
        req: OssRequest,
        bulk: Option<&[u8]>,
        capa: Option<nacre_wire::capa::Capa>,
    ) -> std::io::Result<u64> {
        let opcode = req.opcode();
        let body = self.oss_body(req, capa);
        self.send_raw(opcode, target, &body, bulk)
    }

    /// [`RawConn::send_oss`] of a frame that stops after `bulk_sent` bytes of its bulk (a
    /// sender that stalls, or goes away, in the middle of a write); returns its xid.
    pub fn send_oss_cut(
        &mut self,
        target: u32,
        req: OssRequest,
        bulk: &[u8],
        bulk_sent: usize,
    ) -> std::io::Result<u64> {
        let opcode = req.opcode();
        let body = self.oss_body(req, None);
        let (xid, frame) = self.frame(opcode, target, &body, Some(bulk));
        let unsent = bulk.len() - bulk_sent.min(bulk.len());
        self.writer.write_all(&frame[..frame.len() - unsent])?;
        Ok(xid)
    }

    fn oss_body(&self, req: OssRequest, capa: Option<nacre_wire::capa::Capa>) -> Vec<u8> {
        encode_body(&OssCall {
            client: self.oss_client,
            jobid: "raw".into(),
            cred: nacre_types::cred::current(),
            req,
            capa,
        })
    }

    /// Sends a request of any service: `body` as it is, under `opcode` (which need not be
    /// the body's own: a hostile peer's choice), to target index `target`; returns its xid.
    pub fn send_raw(
        &mut self,
        opcode: u16,
        target: u32,
        body: &[u8],
        bulk: Option<&[u8]>,
    ) -> std::io::Result<u64> {
        let (xid, frame) = self.frame(opcode, target, body, bulk);
        self.writer.write_all(&frame)?;
        Ok(xid)
    }

    /// The next request's frame (its xid taken): header, body, tags if protected, bulk.
    fn frame(
        &mut self,
        opcode: u16,
        target: u32,
        body: &[u8],
        bulk: Option<&[u8]>,
    ) -> (u64, Vec<u8>) {
        self.xid += 1;
        let target = nacre_types::target_id(self.slot, target);
        let mut h = Header::request(opcode, target, self.xid);
        h.version = self.version;
        h.flags |= FLAG_BULK_CHECKSUM;
        h.seal(body, bulk, true);
        let mut frame = h.encode().to_vec();
        match self.session.as_mut() {
            Some(s) => {
                // Tags go between body and bulk.
                let sealed = s.sealer.seal(&h, body, bulk);
                frame.extend_from_slice(&sealed.body);
                frame.extend_from_slice(sealed.trailer());
                frame.extend_from_slice(sealed.bulk.as_deref().unwrap_or(&[]));
            }
            None => {
                frame.extend_from_slice(body);
                frame.extend_from_slice(bulk.unwrap_or(&[]));
            }
        }
        (self.xid, frame)
    }

    /// Reads the next reply (of any protocol version).
    pub fn recv(&mut self) -> std::io::Result<RawReply> {
        let mut head = [0u8; HEADER_BYTES];
        self.reader.read_exact(&mut head)?;
        let header = Header::decode_any_version(&head, u32::MAX).map_err(std::io::Error::other)?;
        let mut body = vec![0; header.body_len as usize];
        self.reader.read_exact(&mut body)?;
        // A protected frame's tags come between its body and its bulk.
        let trailer_len = self.session.as_ref().map_or(0, |s| {
            nacre_net::sec::session::trailer_len(s.level, header.bulk_len)
        });
        let mut trailer = vec![0; trailer_len];
        self.reader.read_exact(&mut trailer)?;
        let mut bulk = vec![0; header.bulk_len as usize];
        self.reader.read_exact(&mut bulk)?;
        if let Some(s) = self.session.as_mut() {
            let bulk_ref = (!bulk.is_empty()).then_some(&mut bulk[..]);
            s.opener
                .open(&header, &mut body, bulk_ref, &trailer)
                .map_err(std::io::Error::other)?;
        }
        Ok(RawReply { header, body, bulk })
    }
}

impl RawReply {
    /// The MDS reply, if the request succeeded.
    pub fn mds(&self) -> Option<MdsReply> {
        (self.header.status == 0)
            .then(|| decode_body::<MdsAnswer>(&self.body).ok().map(|a| a.reply))
            .flatten()
    }

    /// The whole MDS answer (reply and capabilities), if the request succeeded.
    pub fn answer(&self) -> Option<MdsAnswer> {
        (self.header.status == 0)
            .then(|| decode_body::<MdsAnswer>(&self.body).ok())
            .flatten()
    }

    /// The OSS reply, if the request succeeded.
    pub fn oss(&self) -> Option<OssReply> {
        (self.header.status == 0)
            .then(|| decode_body::<OssReply>(&self.body).ok())
            .flatten()
    }
}

/// The root directory's FID (what a bare client asks about first).
pub fn root() -> Fid {
    Fid::ROOT
}

/// Threads of process `pid` now, and how many of them are network threads (`socknal_sd*`).
pub fn threads_of(pid: u32) -> (usize, usize) {
    let mut all = 0;
    let mut net = 0;
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in dir.flatten() {
            all += 1;
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.starts_with("socknal_sd") {
                net += 1;
            }
        }
    }
    (all, net)
}

/// Resident memory of process `pid`, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Raises this process's open-file limit to `n` (children inherit it): thousands of
/// connections need more descriptors than the usual 1024.
pub fn raise_nofile(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = n.min(lim.rlim_max.max(n));
        lim.rlim_max = lim.rlim_max.max(n);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
}
