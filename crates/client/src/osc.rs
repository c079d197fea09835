//! The object storage client: file I/O split along the layout into one RPC per object range
//! (at most `max_rpc_size` each), started on every OST at once and then collected, so a
//! striped file's stripes move in parallel. Each OST connection keeps at most
//! `max_rpcs_in_flight` of a call's RPCs outstanding.

mod capa;
mod objects;
mod ost;
mod reads;
mod window;
mod writes;

use crate::Client;
use nacre_types::{Layout, ObjectId};
pub use objects::{
    data_versions, fallocate, fence, glimpse, start_glimpse, sync, truncate, GlimpseJob,
};
pub use ost::{owner, quota_check, quota_usage, statfs};
pub use reads::{read, read_locked, start_read, start_read_into, ReadJob};
pub use window::OST_RECOVERY_WAIT_MS_MAX;
pub(crate) use window::{call_one, collect_one, send_one, Collected, Pending};
pub(crate) use writes::{gather, write_subs};
pub use writes::{write, write_from};

/// One RPC of a multi-object operation.
pub(crate) struct Sub {
    pub(crate) stripe: usize,
    pub(crate) object_offset: u64,
    pub(crate) len: u64,
}

/// Splits a file range into RPC-sized object ranges.
pub(crate) fn subs(layout: &Layout, offset: u64, len: u64, max: u64) -> Vec<Sub> {
    let mut out = Vec::new();
    for chunk in layout.chunks(offset, len) {
        let mut done = 0;
        while done < chunk.len {
            let n = (chunk.len - done).min(max);
            out.push(Sub {
                stripe: chunk.stripe,
                object_offset: chunk.object_offset + done,
                len: n,
            });
            done += n;
        }
    }
    out
}

/// File offset of byte `object_offset` of object `stripe` (numbered across the layout's
/// components; its component maps absolute file offsets).
fn file_offset(layout: &Layout, stripe: usize, object_offset: u64) -> u64 {
    let (c, index) = layout.component_of(stripe);
    let comp = &layout.components[c];
    let size = u64::from(comp.stripe_size);
    let count = comp.objects.len() as u64;
    (object_offset / size) * size * count + index as u64 * size + object_offset % size
}

/// Calls `f(file_offset, object_range_offset, len)` for each stripe-unit run of an object range.
fn for_each_run(layout: &Layout, sub: &Sub, mut f: impl FnMut(u64, usize, usize)) {
    let (c, _) = layout.component_of(sub.stripe);
    let size = u64::from(layout.components[c].stripe_size);
    let mut done = 0u64;
    while done < sub.len {
        let obj = sub.object_offset + done;
        let n = (size - obj % size).min(sub.len - done);
        f(
            file_offset(layout, sub.stripe, obj),
            done as usize,
            n as usize,
        );
        done += n;
    }
}

pub(crate) fn object(layout: &Layout, stripe: usize) -> (u32, ObjectId) {
    let o = *layout.object(stripe);
    (o.ost, o.object)
}

fn max_rpc(client: &Client) -> u64 {
    u64::from(client.net_config().max_rpc_size.max(4096))
}
