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
            let dom_bytes = old.dom_end() > 0 && !tx.store().dom(fid)?.is_empty();
            if dom_bytes || has_data(tx.mdt, &old)? {
                return Err(Status::Exist);
            }
            let parent_like = nacre_mdstore::records::InodeRecord {
                dir_default: tx.fs_default()?,
                ..rec.clone()
            };
            let layout = tx.new_layout(&parent_like, spec, 0)?;
            tx.destroy_objects(&old);
            rec.layout = Some(layout.clone());
            rec.attr.ctime = tx.now;
            tx.put_inode(&rec);
            Ok(MdsReply::Layout(LayoutInfo::File(layout)))
        }
        _ => Err(Status::Inval),
    }
}

/// Instantiates the components of file `fid` that start below `end` and have no objects
/// yet (`MdsOp::LayoutIntent`): a write, truncate or allocation is about to reach byte
/// `end - 1`. The objects the file has stay; its generation too (no writer is fenced).
/// Idempotent: a file already instantiated that far is answered as it is. A replay gives
/// the new components the objects its first run gave them (the client may have written
/// into them), once they are checked to be ones that run could have allocated.
pub fn intent(tx: &mut Tx<'_>, fid: Fid, end: u64) -> Result<MdsReply, Status> {
    let mut rec = tx.inode(fid)?;
    match rec.attr.kind {
        FileKind::Regular => {}
        FileKind::Directory => return Err(Status::IsDir),
        _ => return Err(Status::Inval),
    }
    if end > nacre_types::limits::FILE_BYTES_MAX {
        return Err(Status::FBig);
    }
    let mut layout = rec.layout.clone().ok_or(Status::Io)?;
    let grown = match tx.replay.clone() {
        Some((_, Some(said))) => adopt_replayed(tx, &mut layout, &said, end)?,
        _ => tx.instantiate(&mut layout, end)?,
    };
    if grown {
        rec.layout = Some(layout.clone());
        tx.put_inode(&rec);
    }
    Ok(MdsReply::Layout(LayoutInfo::File(layout)))
}

/// A replayed intent: the components `said` (the layout its first run answered) gave
/// objects that `layout` lacks take those objects, checked (`replay_mdt::check_objects`);
/// any other component below `end` is instantiated anew. True if the layout grew.
fn adopt_replayed(
    tx: &mut Tx<'_>,
    layout: &mut nacre_types::Layout,
    said: &nacre_types::Layout,
    end: u64,
) -> Result<bool, Status> {
    if said.components.len() != layout.components.len() {
        return Err(Status::Inval);
    }
    let mut grown = false;
    for (now, then) in layout.components.iter_mut().zip(&said.components) {
        if (now.start, now.end, now.stripe_size) != (then.start, then.end, then.stripe_size) {
            return Err(Status::Inval);
        }
        if now.is_instantiated() {
            if now.objects != then.objects && then.is_instantiated() {
                return Err(Status::Inval);
            }
            continue;
        }
        if !then.is_instantiated() {
            continue;
        }
        crate::replay_mdt::check_objects(tx.mdt, &then.objects)?;
        for o in &then.objects {
            tx.reserve_past_object(o.ost, o.object)?;
        }
        now.objects = then.objects.clone();
        now.stripe_count = then.stripe_count;
        now.pool = then.pool;
        grown = true;
    }
    layout.check().map_err(|_| Status::Inval)?;
    let mut seen = std::collections::HashSet::new();
    if !layout.objects().all(|o| seen.insert((o.ost, o.object))) {
        return Err(Status::Inval);
    }
    Ok(tx.instantiate(layout, end)? || grown)
}
