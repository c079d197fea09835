//! Nodemaps enforced on an OST (docs/security.md): a read-only nodemap's clients may not
//! write, punch, allocate, destroy or change owners (`EROFS`); the owner a mapped client's
//! write gives a new object is mapped to file-system ids, as its credentials are.

use nacre_types::Status;
use nacre_wire::nodemap::{IdKind, Nodemap};
use nacre_wire::oss::{OssCall, OssRequest};

/// Refuses the changes a read-only nodemap may not make.
pub fn check_readonly(m: &Nodemap, req: &OssRequest) -> Result<(), Status> {
    let change = matches!(
        req,
        OssRequest::Write { .. }
            | OssRequest::Punch { .. }
            | OssRequest::Fallocate { .. }
            | OssRequest::Destroy { .. }
            | OssRequest::SetOwner { .. }
    );
    match m.readonly && change {
        true => Err(Status::RoFs),
        false => Ok(()),
    }
}

/// Maps a request's credentials, and a write's owner, to file-system ids.
pub fn map_call(m: &Nodemap, call: &mut OssCall) {
    call.cred.uid = m.map_in(IdKind::Uid, call.cred.uid);
    call.cred.gid = m.map_in(IdKind::Gid, call.cred.gid);
    call.cred.groups = Vec::new();
    if let OssRequest::Write { owner, .. } = &mut call.req {
        owner.uid = m.map_in(IdKind::Uid, owner.uid);
        owner.gid = m.map_in(IdKind::Gid, owner.gid);
    }
}
