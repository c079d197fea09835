//! GetLayout and SetLayout: a file's objects, a directory's default striping.

use crate::mdt::{Mdt, Tx};
use nacre_net::rpc::call;
use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Fid, FileKind, Status};
use nacre_wire::mds::{LayoutInfo, MdsReply};
use nacre_wire::oss::{OssCall, OssReply, OssRequest};

/// The layout of a file or the default of a directory.
pub fn get(mdt: &Mdt, fid: Fid) -> Result<MdsReply, Status> {
    let rec = mdt.inode(fid)?;
    Ok(MdsReply::Layout(match rec.attr.kind {
        FileKind::Regular => LayoutInfo::File(rec.layout.ok_or(Status::Io)?),
        FileKind::Directory => LayoutInfo::Dir(rec.dir_default),
        _ => LayoutInfo::None,
    }))
}

/// True if any object of the file holds data (asks the OSTs).
fn has_data(mdt: &Mdt, layout: &nacre_types::Layout) -> Result<bool, Status> {
    for o in layout.objects() {
        let conn = mdt.osts.conn(o.ost).ok_or(Status::Io)?;
        let req = OssRequest::Glimpse { object: o.object };
        match call::<_, OssReply>(&conn, req.opcode(), o.ost, &OssCall::server(req)) {
            Ok(OssReply::ObjectAttr { size, .. }) if size > 0 => return Ok(true),
            Ok(_) => {}
            Err(e) => return Err(e.status()),
        }
    }
    Ok(false)
}

/// Sets a directory's default layout, or re-lays-out an empty file. A directory's plain
/// request is merged into its plain default (what it leaves unset is kept), a composite one
/// replaces the default, and the plain default request clears it.
pub fn set(tx: &mut Tx<'_>, fid: Fid, spec: &LayoutSpec) -> Result<MdsReply, Status> {
    spec.check().map_err(|_| Status::Inval)?;
    let mut rec = tx.inode(fid)?;
    match rec.attr.kind {
        FileKind::Directory => {
            // Every component's request must be one the OSTs can meet now.
            for c in &spec.components {
                tx.mdt
                    .osts
                    .resolve(c.stripe, StripeSpec::default(), c.stripe.pool)?;
            }
            rec.dir_default = match (spec.as_plain(), rec.dir_default.as_ref()) {
                (Some(s), _) if s == StripeSpec::default() => None,
                (Some(s), Some(old)) => match old.as_plain() {
                    Some(old) => Some(LayoutSpec::plain(s.over(old))),
                    None => Some(spec.clone()),
                },
                _ => Some(spec.clone()),
            };
            rec.attr.ctime = tx.now;
            tx.put_inode(&rec);
            Ok(MdsReply::Layout(LayoutInfo::Dir(rec.dir_default)))
        }
        FileKind::Regular => {
            let old = rec.layout.clone().ok_or(Status::Io)?;
            if has_data(tx.mdt, &old)? {
                return Err(Status::Exist);
            }
            let parent_like = nacre_mdstore::records::InodeRecord {
                dir_default: tx.fs_default()?,
                ..rec.clone()
            };
            let layout = tx.new_layout(&parent_like, spec)?;
            tx.destroy_objects(&old);
            rec.layout = Some(layout.clone());
            rec.attr.ctime = tx.now;
            tx.put_inode(&rec);
            Ok(MdsReply::Layout(LayoutInfo::File(layout)))
        }
        _ => Err(Status::Inval),
    }
}
