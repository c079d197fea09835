//! Operations on every object of a file at once: glimpses (the file's size), punches,
//! data versions, fences, syncs, preallocation.

use super::object;
use super::window::Window;
use crate::{Client, ClientError, Result};
use nacre_types::limits::FILE_BYTES_MAX;
use nacre_types::{Layout, ObjectId, Status};
use nacre_wire::oss::{OssReply, OssRequest};

fn per_object(
    client: &Client,
    layout: &Layout,
    req: impl Fn(usize, ObjectId) -> OssRequest,
) -> Result<Vec<(usize, OssReply)>> {
    let mut window = Window::default();
    for stripe in 0..layout.object_count() {
        let (ost, object) = object(layout, stripe);
        window.start(client, stripe, ost, &req(stripe, object), None)?;
    }
    Ok(window
        .finish()?
        .into_iter()
        .map(|(t, r, _)| (t, r))
        .collect())
}

/// Glimpses in flight on every object of a file ([`start_glimpse`]).
pub struct GlimpseJob {
    window: Window,
}

/// Starts glimpsing every object of `layout` at once; [`GlimpseJob::finish`] waits.
pub fn start_glimpse(client: &Client, layout: &Layout) -> Result<GlimpseJob> {
    let mut window = Window::default();
    for stripe in 0..layout.object_count() {
        let (ost, object) = object(layout, stripe);
        window.start(client, stripe, ost, &OssRequest::Glimpse { object }, None)?;
    }
    Ok(GlimpseJob { window })
}

impl GlimpseJob {
    /// File size and allocated blocks of the file whose `layout` was glimpsed.
    pub fn finish(self, layout: &Layout) -> Result<(u64, u64)> {
        let replies = self
            .window
            .finish()?
            .into_iter()
            .map(|(t, r, _)| (t, r))
            .collect();
        sizes(layout, replies)
    }
}

/// File size and allocated blocks from the objects (Lustre's glimpse).
pub fn glimpse(client: &Client, layout: &Layout) -> Result<(u64, u64)> {
    start_glimpse(client, layout)?.finish(layout)
}

/// File size and blocks from the glimpse replies of `layout`'s objects.
fn sizes(layout: &Layout, replies: Vec<(usize, OssReply)>) -> Result<(u64, u64)> {
    let objects: Vec<(usize, u64, u64)> = replies
        .into_iter()
        .filter_map(|(stripe, reply)| match reply {
            OssReply::ObjectAttr { size, blocks } => Some((stripe, size, blocks)),
            _ => None,
        })
        .collect();
    if let Some(&(stripe, s, _)) = objects.iter().find(|(_, s, _)| *s > FILE_BYTES_MAX) {
        let (ost, _) = object(layout, stripe);
        return Err(ClientError::bad_reply(
            format!("OST{ost:04x}"),
            format!("object size {s} beyond the largest file"),
        ));
    }
    Ok(layout
        .file_size_from_objects(objects)
        .expect("object sizes checked above"))
}

/// Sets the file size: every object gets the size its stripe has at that file size.
pub fn truncate(client: &Client, layout: &Layout, size: u64) -> Result<()> {
    if size > FILE_BYTES_MAX {
        return Err(Status::FBig.into());
    }
    client.flush_objects(layout);
    per_object(client, layout, |stripe, object| OssRequest::Punch {
        object,
        size: layout.object_size_for_file(stripe, size),
        layout_gen: layout.generation,
    })
    .map(|_| ())
}

/// The data version of each of `layout`'s objects, with its OST's epoch (taken after the
/// holders of write locks on them wrote what they keep, with `flush`). Root only.
pub fn data_versions(client: &Client, layout: &Layout, flush: bool) -> Result<Vec<(u64, u64)>> {
    let replies = per_object(client, layout, |_, object| OssRequest::DataVersion {
        objects: vec![object],
        flush,
    })?;
    let mut out = vec![(0, 0); layout.object_count()];
    for (stripe, reply) in replies {
        match reply {
            OssReply::Versions { epoch, versions } if versions.len() == 1 => {
                out[stripe] = (epoch, versions[0]);
            }
            _ => return Err(Status::Proto.into()),
        }
    }
    Ok(out)
}

/// Fences `layout`'s objects at `generation`: their OSTs refuse changes issued under an
/// older one from now on. Root only.
pub fn fence(client: &Client, layout: &Layout, generation: u32) -> Result<()> {
    per_object(client, layout, |_, object| OssRequest::Fence {
        objects: vec![object],
        generation,
    })
    .map(|_| ())
}

/// Makes every object's data durable.
pub fn sync(client: &Client, layout: &Layout) -> Result<()> {
    per_object(client, layout, |_, object| OssRequest::Sync { object }).map(|_| ())
}

/// Preallocates (or punches) the objects' parts of a file range.
pub fn fallocate(
    client: &Client,
    layout: &Layout,
    offset: u64,
    len: u64,
    keep_size: bool,
    punch_hole: bool,
) -> Result<()> {
    if len == 0 || offset.saturating_add(len) > FILE_BYTES_MAX {
        return Err(Status::Inval.into());
    }
    client.flush_objects(layout);
    let mut window = Window::default();
    for (tag, chunk) in layout.chunks(offset, len).into_iter().enumerate() {
        let (ost, object) = object(layout, chunk.stripe);
        let req = OssRequest::Fallocate {
            object,
            offset: chunk.object_offset,
            len: chunk.len,
            keep_size,
            punch_hole,
            layout_gen: layout.generation,
        };
        window.start(client, tag, ost, &req, None)?;
    }
    window.finish().map(|_| ())
}
