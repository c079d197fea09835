//! Extended attributes: get, set, list, remove. POSIX ACL names are refused (not supported),
//! so copying tools skip them instead of storing ACLs nothing enforces.

use crate::mdt::{Mdt, Tx};
use nacre_types::limits::{XATTR_NAME_BYTES_MAX, XATTR_VALUE_BYTES_MAX};
use nacre_types::{Fid, Status};
use nacre_wire::mds::MdsReply;

/// Most xattr names listed per inode.
pub const XATTRS_PER_INODE_MAX: usize = 1024;
/// XATTR_CREATE.
pub const XATTR_CREATE: u32 = 1;
/// XATTR_REPLACE.
pub const XATTR_REPLACE: u32 = 2;

fn check_name(name: &[u8]) -> Result<(), Status> {
    if name.is_empty() {
        return Err(Status::Inval);
    }
    if name.len() > XATTR_NAME_BYTES_MAX {
        return Err(Status::Range);
    }
    if name.starts_with(b"system.posix_acl") {
        return Err(Status::NotSupp);
    }
    Ok(())
}

/// Reads one attribute.
pub fn get(mdt: &Mdt, fid: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    check_name(name)?;
    mdt.inode(fid)?;
    match mdt.store().xattr(fid, name)? {
        Some(v) => Ok(MdsReply::Xattr(v)),
        None => Err(Status::NoData),
    }
}

/// Lists attribute names.
pub fn list(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    mdt.inode(fid)?;
    let all = mdt.store().xattrs(fid, XATTRS_PER_INODE_MAX)?;
    Ok(MdsReply::XattrNames(
        all.into_iter().map(|(name, _)| name).collect(),
    ))
}

/// Sets one attribute.
pub fn set(
    tx: &mut Tx<'_>,
    fid: Fid,
    name: &[u8],
    value: &[u8],
    flags: u32,
) -> Result<MdsReply, Status> {
    check_name(name)?;
    if value.len() > XATTR_VALUE_BYTES_MAX {
        return Err(Status::TooBig);
    }
    let mut rec = tx.inode(fid)?;
    let exists = tx.store().xattr(fid, name)?.is_some();
    if flags & XATTR_CREATE != 0 && exists {
        return Err(Status::Exist);
    }
    if flags & XATTR_REPLACE != 0 && !exists {
        return Err(Status::NoData);
    }
    rec.attr.ctime = tx.now;
    tx.put_inode(&rec);
    tx.put_xattr(fid, name, value.to_vec());
    Ok(MdsReply::Done)
}

/// Removes one attribute.
pub fn remove(tx: &mut Tx<'_>, fid: Fid, name: &[u8]) -> Result<MdsReply, Status> {
    check_name(name)?;
    let mut rec = tx.inode(fid)?;
    if tx.store().xattr(fid, name)?.is_none() {
        return Err(Status::NoData);
    }
    rec.attr.ctime = tx.now;
    tx.put_inode(&rec);
    tx.del_xattr(fid, name);
    Ok(MdsReply::Done)
}
