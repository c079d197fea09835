//! Requests about one OST or one of its objects: an object's recorded owner, quota usage
//! and checks, capacity.

use crate::{Client, Result};
use nacre_types::{ObjectId, StatFs, Status};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};

/// Usage of one OST.
/// The owner, group and project OST `ost` records for `object` (`None`: no object yet).
pub fn owner(client: &Client, ost: u32, object: ObjectId) -> Result<Option<nacre_types::Owner>> {
    let req = OssRequest::GetOwner { object };
    let conn = client.osc(ost)?;
    let mut call = OssCall::current(req.clone());
    call.capa = client.capa_for(ost, &req);
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &call)? {
        OssReply::Owner(o) => Ok(o),
        _ => Err(Status::Proto.into()),
    }
}

/// Bytes each of `ids` has on OST `ost` (quotas).
pub fn quota_usage(client: &Client, ost: u32, ids: &[nacre_types::QuotaId]) -> Result<Vec<u64>> {
    let conn = client.osc(ost)?;
    let req = OssRequest::QuotaUsage { ids: ids.to_vec() };
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::current(req))? {
        OssReply::QuotaUsage(v) if v.len() == ids.len() => Ok(v),
        _ => Err(Status::Proto.into()),
    }
}

/// OST `ost`'s quota check (`nacre lfsck --quota`), repairing with `repair`.
pub fn quota_check(client: &Client, ost: u32, repair: bool) -> Result<nacre_types::QuotaCheck> {
    let conn = client.osc(ost)?;
    let req = OssRequest::QuotaCheck { repair };
    match nacre_net::rpc::call::<_, OssReply>(&conn, req.opcode(), ost, &OssCall::current(req))? {
        OssReply::QuotaCheck(c) if c.diffs.len() <= nacre_types::QuotaCheck::DIFFS_MAX => Ok(c),
        _ => Err(Status::Proto.into()),
    }
}

/// Capacity of OST `ost`.
pub fn statfs(client: &Client, ost: u32) -> Result<StatFs> {
    let conn = client.osc(ost)?;
    match nacre_net::rpc::call::<_, OssReply>(
        &conn,
        OssRequest::StatFs.opcode(),
        ost,
        &OssCall::current(OssRequest::StatFs),
    )? {
        OssReply::StatFs(s) => Ok(s),
        _ => Err(Status::Proto.into()),
    }
}
