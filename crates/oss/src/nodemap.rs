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
            | OssRequest::WriteRuns { .. }
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
    if let Some(owner) = call.req.write_owner_mut() {
        owner.uid = m.map_in(IdKind::Uid, owner.uid);
        owner.gid = m.map_in(IdKind::Gid, owner.gid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_types::{ObjectId, Owner};
    use nacre_wire::oss::Run;

    /// Both kinds of write are changes a read-only nodemap refuses, and both have the
    /// owner they give a new object mapped (a write of many runs is no way around either).
    #[test]
    fn every_kind_of_write_is_refused_read_only_and_has_its_owner_mapped() {
        let mut m = Nodemap::new("t");
        m.offset = 10_000;
        let owner = Owner {
            uid: 5,
            gid: 6,
            project: 0,
        };
        let object = ObjectId { seq: 0, id: 1 };
        let writes = [
            OssRequest::Write {
                object,
                offset: 0,
                owner,
                lock: false,
                grant_used: 0,
                epoch: 0,
                layout_gen: 0,
            },
            OssRequest::WriteRuns {
                object,
                owner,
                grant_used: 0,
                epoch: 1,
                layout_gen: 0,
                runs: vec![Run { offset: 0, len: 1 }],
            },
        ];
        for req in writes {
            assert_eq!(check_readonly(&m, &req), Ok(()));
            m.readonly = true;
            assert_eq!(check_readonly(&m, &req), Err(Status::RoFs), "{req:?}");
            m.readonly = false;
            let mut call = OssCall::current(req);
            map_call(&m, &mut call);
            let mapped = *call.req.write_owner_mut().expect("a write");
            assert_eq!((mapped.uid, mapped.gid), (10_005, 10_006), "{:?}", call.req);
        }
    }
}
