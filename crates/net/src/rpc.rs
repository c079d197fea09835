//! Typed calls: encode a message, send it, check the status, decode the reply.

use crate::{Connection, NetError, Reply, Request};
use nacre_types::{AlignedBuf, Status};
use nacre_wire::version::Range;
use nacre_wire::{decode_body, encode_body, WireError};
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// Why a typed call failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The server answered with an error status.
    #[error("{0}")]
    Status(Status),
    /// The network failed.
    #[error(transparent)]
    Net(#[from] NetError),
    /// The reply did not decode.
    #[error("bad reply: {0}")]
    Wire(#[from] WireError),
    /// The server does not speak this side's protocol version: it answered `EPROTO` with
    /// the versions it speaks (nacre_wire::version), none of which this side speaks.
    #[error("the server speaks {theirs}, this side {ours}: upgrade the older side")]
    Protocol {
        /// What this side speaks.
        ours: Range,
        /// What the server speaks.
        theirs: Range,
    },
}

impl RpcError {
    /// The status an application should see.
    pub fn status(&self) -> Status {
        match self {
            RpcError::Status(s) => *s,
            RpcError::Protocol { .. } => Status::Proto,
            RpcError::Net(NetError::TimedOut { .. }) => Status::TimedOut,
            RpcError::Net(NetError::Unreachable { .. }) => Status::Io,
            RpcError::Net(NetError::Wire(WireError::BulkChecksum { .. })) => Status::Io,
            RpcError::Net(_) | RpcError::Wire(_) => Status::Io,
        }
    }
}

/// Builds a request from a message.
pub fn request<T: Serialize>(
    opcode: u16,
    target: u32,
    msg: &T,
    bulk: Option<Arc<AlignedBuf>>,
) -> Request {
    Request {
        opcode,
        target,
        body: encode_body(msg),
        bulk,
        inline: false,
    }
}

/// Checks a reply's status and decodes its body.
pub fn decode_reply<R: DeserializeOwned>(
    reply: Reply,
) -> Result<(R, Option<AlignedBuf>), RpcError> {
    let status = reply.status();
    if status == Status::Proto {
        if let Some(theirs) = Range::decode(&reply.body) {
            // This side speaks one version, so no other is there to resend in: with more,
            // the newest both speak (nacre_wire::version::common) is the one to resend in.
            return Err(RpcError::Protocol {
                ours: Range::OURS,
                theirs,
            });
        }
    }
    if status != Status::Ok {
        return Err(RpcError::Status(status));
    }
    let msg = decode_body(&reply.body)?;
    Ok((msg, reply.bulk))
}

/// Sends a message and decodes the reply.
pub fn call<T: Serialize, R: DeserializeOwned>(
    conn: &Arc<Connection>,
    opcode: u16,
    target: u32,
    msg: &T,
) -> Result<R, RpcError> {
    let reply = conn.call(request(opcode, target, msg, None).inline())?;
    Ok(decode_reply(reply)?.0)
}
