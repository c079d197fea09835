//! The metadata client: sends [`MdsCall`]s carrying the client uuid and the lowest xid still
//! waiting for a reply, so the MDS can keep exactly the saved replies a resend might need.

use crate::{ClientError, Result};
use nacre_net::rpc::{decode_reply, request};
use nacre_net::Connection;
use nacre_types::Status;
use nacre_wire::mds::{MdsCall, MdsOp, MdsReply};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a request answered `EINPROGRESS` (the MDS is busy with it: a directory
/// migration holds what it touches, or a cross-MDT operation waits for a peer) is resent
/// before the error reaches the application.
pub const INPROGRESS_WAIT_MS_MAX: u64 = 300_000;
/// First pause before resending such a request; doubled up to [`INPROGRESS_PAUSE_MS_MAX`].
const INPROGRESS_PAUSE_MS_MIN: u64 = 20;
/// Longest pause between resends.
const INPROGRESS_PAUSE_MS_MAX: u64 = 1_000;

/// Metadata client for one MDT.
pub struct Mdc {
    conn: Arc<Connection>,
    uuid: [u8; 16],
    in_flight: Mutex<BTreeSet<u64>>,
    target: u32,
}

impl Mdc {
    /// The connection to the MDT.
    pub fn conn(&self) -> &Arc<Connection> {
        &self.conn
    }

    /// A client of MDT `target` over `conn`.
    pub fn new(conn: Arc<Connection>, target: u32) -> Mdc {
        Mdc {
            conn,
            uuid: *uuid::Uuid::new_v4().as_bytes(),
            in_flight: Mutex::new(BTreeSet::new()),
            target,
        }
    }

    /// Sends one operation and waits for its reply (resending across reconnects).
    pub fn call(&self, op: MdsOp) -> Result<MdsReply> {
        let opcode = op.opcode();
        let (xid, replied_below) = {
            let mut in_flight = self.in_flight.lock().expect("in flight");
            let xid = self.conn.alloc_xid();
            let lowest = in_flight.first().copied().unwrap_or(xid).min(xid);
            in_flight.insert(xid);
            (xid, lowest)
        };
        let call = MdsCall {
            jobid: nacre_types::jobid::current(),
            client: self.uuid,
            replied_below,
            op,
        };
        // Resent with the same xid while the MDS answers EINPROGRESS, so a request it did
        // start is finished (and answered from its saved reply), never run twice.
        let deadline = Instant::now() + Duration::from_millis(INPROGRESS_WAIT_MS_MAX);
        let mut pause = INPROGRESS_PAUSE_MS_MIN;
        let result = loop {
            let result = self
                .conn
                .start_xid(xid, request(opcode, self.target, &call, None).inline())
                .and_then(|p| p.wait())
                .map_err(|e| ClientError::Rpc(e.into()))
                .and_then(|reply| Ok(decode_reply::<MdsReply>(reply)?.0));
            match result {
                Err(e) if e.status() == Status::InProgress && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(pause));
                    pause = (pause * 2).min(INPROGRESS_PAUSE_MS_MAX);
                }
                other => break other,
            }
        };
        self.in_flight.lock().expect("in flight").remove(&xid);
        result
    }
}
