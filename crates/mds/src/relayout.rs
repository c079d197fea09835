//! Online file migration, the MDT's side (docs/migrate.md): new objects allocated and
//! recorded with the file (`relayouts` table), the fence window (LAYOUT locks called back,
//! layout requests answered "in progress"), and the atomic swap or the abort.
//!
//! Table `relayouts`: FID key (16) → `[1] postcard(RelayoutRecord)`.

use crate::mdt::{end_relayout, relayout_of, Mdt, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_types::layout::{LayoutSpec, StripeSpec, EXTENT_EOF};
use nacre_types::{Fid, FileKind, Layout, Status};
use nacre_wire::mds::{LayoutInfo, MdsReply};
use std::sync::atomic::Ordering;

pub use crate::mdt::FENCE_LEASE_MS;
pub use nacre_mdstore::records::{RelayoutRecord, RELAYOUTS};

/// A migration whose migrator has not renewed it (a `RelayoutBegin` again) for this long is
/// aborted (its new objects destroyed).
pub const COPY_LEASE_MS: u64 = 600_000;

/// True while `fid`'s fence window is open (its layout requests answer "in progress").
/// Asked by every open and layout request: with no migration in progress, one atomic load.
pub fn fenced(mdt: &Mdt, fid: Fid) -> bool {
    mdt.relayouts_pending.load(Ordering::Acquire) != 0 && mdt.relayouts_fenced.lock().contains(&fid)
}

fn regular(tx: &Tx<'_>, fid: Fid) -> Result<(InodeRecord, Layout), Status> {
    let rec = tx.inode(fid)?;
    if rec.attr.kind != FileKind::Regular {
        return Err(Status::Inval);
    }
    let layout = rec.layout.clone().ok_or(Status::Io)?;
    Ok((rec, layout))
}

/// `RelayoutBegin`: new objects for `fid` as `spec` asks (what it leaves unset is the
/// current layout's), recorded; a migration already in progress is handed back (a
/// migrator resumes it).
pub fn begin(tx: &mut Tx<'_>, fid: Fid, spec: StripeSpec) -> Result<MdsReply, Status> {
    let (rec, old) = regular(tx, fid)?;
    if let Some(r) = relayout_of(tx.mdt, fid)? {
        touch(tx.mdt, fid);
        return Ok(MdsReply::Relayout { old, new: r.new });
    }
    // What `spec` leaves unset is the first component's on OSTs (a composite layout is
    // migrated to a plain one, bytes on the MDT to OSTs: docs/migrate.md); the defaults
    // for a file all on the MDT.
    // (A record read from disk without components is damage: EIO, never a panic.)
    if old.components.is_empty() {
        return Err(Status::Io);
    }
    let current = match old.components.iter().find(|c| !c.is_on_mdt()) {
        Some(first) => StripeSpec {
            stripe_count: first.stripe_count,
            stripe_size: first.stripe_size,
            start_ost: -1,
            pool: first.pool,
        },
        None => StripeSpec {
            start_ost: -1,
            ..StripeSpec::default()
        },
    };
    let like = InodeRecord {
        dir_default: Some(LayoutSpec::plain(current)),
        ..rec
    };
    // Every component has its objects: the copy writes the whole file into them.
    let new = tx.new_layout(&like, &LayoutSpec::plain(spec), EXTENT_EOF)?;
    let record = RelayoutRecord {
        new: new.clone(),
        old_generation: old.generation,
        fenced: false,
    };
    tx.put_relayout(fid, &record);
    tx.mdt.relayouts_pending.fetch_add(1, Ordering::AcqRel);
    touch(tx.mdt, fid);
    Ok(MdsReply::Relayout { old, new })
}

/// `RelayoutFence`: opens the fence window (the caller's revocation of the LAYOUT locks
/// has run: every mount wrote what it kept for the old objects).
pub fn fence(tx: &mut Tx<'_>, fid: Fid) -> Result<MdsReply, Status> {
    let (_, old) = regular(tx, fid)?;
    let mut r = relayout_of(tx.mdt, fid)?.ok_or(Status::NoEnt)?;
    if r.old_generation != old.generation {
        return Err(Status::Stale);
    }
    r.fenced = true;
    tx.put_relayout(fid, &r);
    tx.mdt.relayouts_fenced.lock().insert(fid);
    touch(tx.mdt, fid);
    Ok(MdsReply::Done)
}

/// `RelayoutSwap`: the new layout becomes the file's, one generation up; the old objects
/// are destroyed once the journal holding that is synced, its bytes on the MDT (copied to
/// the new objects) in the same transaction.
pub fn swap(tx: &mut Tx<'_>, fid: Fid) -> Result<MdsReply, Status> {
    let (mut rec, old) = regular(tx, fid)?;
    let r = relayout_of(tx.mdt, fid)?.ok_or(Status::NoEnt)?;
    if !r.fenced || r.old_generation != old.generation {
        return Err(Status::Stale);
    }
    if old.dom_end() > 0 {
        let stored = tx.store().dom(fid)?.len();
        tx.delete_dom(&rec.attr, stored);
        rec.attr.blocks = 0;
        tx.mdt.sizes.changed(fid);
    }
    let mut new = r.new;
    new.generation = old.generation.wrapping_add(1);
    // The old objects' space is as good as free from now on (pool fill levels).
    tx.hint_destroy_space(&rec, &old);
    tx.destroy_objects(&old);
    rec.layout = Some(new.clone());
    rec.attr.ctime = tx.now;
    tx.put_inode(&rec);
    end_relayout(tx, fid);
    Ok(MdsReply::Layout(LayoutInfo::File(new)))
}

/// `RelayoutAbort`: the new objects go; if the old ones were fenced, the layout goes one
/// generation up, so writes issued under it again pass the fence.
pub fn abort(tx: &mut Tx<'_>, fid: Fid) -> Result<MdsReply, Status> {
    let Some(r) = relayout_of(tx.mdt, fid)? else {
        return Ok(MdsReply::Done);
    };
    if r.fenced {
        if let Ok((mut rec, mut old)) = regular(tx, fid) {
            if old.generation == r.old_generation {
                old.generation = old.generation.wrapping_add(1);
                rec.layout = Some(old);
                tx.put_inode(&rec);
            }
        }
    }
    tx.destroy_objects(&r.new);
    end_relayout(tx, fid);
    Ok(MdsReply::Done)
}

/// The migrator of `fid` is alive (its lease starts again).
fn touch(mdt: &Mdt, fid: Fid) {
    mdt.relayout_leases
        .lock()
        .insert(fid, std::time::Instant::now());
}

/// Aborts the migrations whose migrator stopped renewing them (called every few seconds):
/// a fence window after `relayout_fence_lease_ms`, a copy after [`COPY_LEASE_MS`].
pub fn expire(mdt: &Mdt) -> Result<(), Status> {
    if mdt.relayouts_pending.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let now = std::time::Instant::now();
    let late: Vec<Fid> = {
        let fenced = mdt.relayouts_fenced.lock().clone();
        let mut leases = mdt.relayout_leases.lock();
        let mut late = Vec::new();
        mdt.store().each_relayout(|fid| {
            // One found at start has its whole lease from then.
            let since = *leases.entry(fid).or_insert(now);
            let lease = if fenced.contains(&fid) {
                mdt.relayout_fence_lease_ms.load(Ordering::Relaxed)
            } else {
                COPY_LEASE_MS
            };
            if now.duration_since(since).as_millis() as u64 > lease {
                late.push(fid);
            }
        })?;
        late
    };
    for fid in late {
        tracing::warn!(
            "{}: migration of {fid} not renewed by its migrator: aborted",
            mdt.label.name()
        );
        let mut tx = mdt.begin();
        abort(&mut tx, fid)?;
        let destroys = std::mem::take(&mut tx.destroys);
        let t = tx.detach().commit()?;
        mdt.store().wait_durable(t)?;
        mdt.queue_destroys(destroys);
    }
    Ok(())
}
