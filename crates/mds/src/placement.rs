//! Where a file's data goes: the layout of a new file (its request over its directory's
//! default over the file system's), and the objects of a component instantiated as the
//! file grows (`MdsOp::LayoutIntent`).
//!
//! A new file gets objects for the components that start below the `upto` its creator
//! asks for — the first one at least, Lustre's choice for progressive layouts — and every
//! other component is resolved (count, size, pool, first OST) but left without objects.
//! Components are instantiated in file order, so the numbers of the objects a file has
//! never change as it grows ([`nacre_types::Layout::check`]): chunks, extent locks,
//! capabilities and kept writes of a client with the old layout stay right. Instantiating
//! is not a new layout generation: no writer is fenced.

use crate::mdt::{Mdt, Tx};
use nacre_mdstore::records::InodeRecord;
use nacre_types::layout::{
    Component, ComponentKind, ComponentRequest, ComponentSpec, LayoutSpec, StripeSpec, EXTENT_EOF,
};
use nacre_types::limits::STRIPE_COUNT_MAX;
use nacre_types::{Fid, Layout, PoolName, Status, StripeObject};

impl Tx<'_> {
    /// Allocates the layout of a new regular file: `spec` (its own request) over
    /// `parent`'s default over the file system's ([`LayoutSpec::for_new_file`]), with
    /// objects for every component that starts below `upto` (the first always). Every
    /// component is resolved first: a request the OSTs cannot meet, or whose extents do
    /// not fall on its components' stripe sizes, is refused (`EINVAL`) before any object is
    /// allocated. A replay gets the layout its first run gave.
    pub fn new_layout(
        &mut self,
        parent: &InodeRecord,
        spec: &LayoutSpec,
        upto: u64,
    ) -> Result<Layout, Status> {
        if let Some((_, Some(layout))) = self.replay.clone() {
            // The client wrote the file's data into these objects.
            for o in layout.objects() {
                self.reserve_past_object(o.ost, o.object)?;
            }
            return Ok(layout);
        }
        let fs_default = if parent.attr.fid == Fid::ROOT {
            None
        } else {
            self.fs_default()?
        };
        let requests = LayoutSpec::requests_for_new_file(
            spec,
            parent.dir_default.as_ref(),
            fs_default.as_ref(),
        );
        let merged = LayoutSpec {
            components: requests
                .iter()
                .map(|r| ComponentSpec {
                    end: r.end,
                    // A component on the MDT inherits no striping: it has none.
                    stripe: match r.kind {
                        ComponentKind::Mdt => StripeSpec::default(),
                        ComponentKind::Osts => r.asked.over(r.inherited),
                    },
                    kind: r.kind,
                })
                .collect(),
        };
        merged.check().map_err(|_| Status::Inval)?;
        let mut components = Vec::with_capacity(requests.len());
        let mut after_mdt = false;
        for r in requests {
            if r.kind == ComponentKind::Mdt {
                components.push(Component::on_mdt(r.end));
                after_mdt = true;
                continue;
            }
            let (count, size, first, pool) = self.resolve_component(r.asked, r.inherited)?;
            let aligned = |x: u64| x == EXTENT_EOF || x.is_multiple_of(u64::from(size));
            // The first component after one on the MDT may start inside its first stripe
            // (nacre_types::Layout::check).
            let start_ok = aligned(r.start) || after_mdt;
            after_mdt = false;
            if !start_ok || !aligned(r.end) {
                return Err(Status::Inval);
            }
            let asked = r.asked.over(r.inherited);
            components.push(Component {
                start: r.start,
                end: r.end,
                stripe_size: size,
                // "Every OST of the pool" is counted when the component is instantiated.
                stripe_count: if asked.stripe_count == -1 {
                    -1
                } else {
                    i32::from(count)
                },
                start_ost: first.map_or(-1, |f| f as i32),
                pool,
                objects: Vec::new(),
                kind: ComponentKind::Osts,
            });
        }
        let mut layout = Layout {
            components,
            generation: 0,
        };
        self.instantiate(&mut layout, upto.max(1))?;
        Ok(layout)
    }

    /// Gives objects to every component of `layout` that starts below `end` and has none;
    /// true if any was. Each is resolved again against the OSTs as they are now (a pool
    /// that lost OSTs since the file was made cuts its count, a full one spills, as for a
    /// new file), and the layout's objects stay within [`STRIPE_COUNT_MAX`].
    pub fn instantiate(&mut self, layout: &mut Layout, end: u64) -> Result<bool, Status> {
        let mut any = false;
        for c in 0..layout.components.len() {
            let comp = &layout.components[c];
            if comp.start >= end || comp.is_instantiated() {
                continue;
            }
            let stored = StripeSpec {
                stripe_count: comp.stripe_count,
                stripe_size: comp.stripe_size,
                start_ost: comp.start_ost,
                pool: comp.pool,
            };
            let (count, _, first, pool) = self.resolve_component(StripeSpec::default(), stored)?;
            let room = usize::from(STRIPE_COUNT_MAX) - layout.object_count();
            let count = usize::from(count).min(room);
            if count == 0 {
                return Err(Status::FBig);
            }
            let mut objects = Vec::with_capacity(count);
            for ost in self.mdt.osts.choose(count, first, pool)? {
                objects.push(StripeObject {
                    ost,
                    object: self.new_object(ost)?,
                });
            }
            let comp = &mut layout.components[c];
            comp.stripe_count = objects.len() as i32;
            comp.pool = pool;
            comp.objects = objects;
            any = true;
        }
        assert!(
            layout.check().is_ok(),
            "a layout made here is valid: {layout:?}"
        );
        Ok(any)
    }

    /// The stripe count, stripe size, first OST and pool of a component the file asked
    /// `asked` of, inheriting `inherited` (kept apart: `OstPool::resolve` cuts an inherited
    /// count to a pool that lost OSTs, not an asked one), spilled to another pool where its
    /// own is full (`OstPool::spill_target`).
    fn resolve_component(
        &self,
        asked: StripeSpec,
        inherited: StripeSpec,
    ) -> Result<(u16, u32, Option<u32>, PoolName), Status> {
        resolve_component(self.mdt, asked, inherited, true)
    }
}

/// The components a new file made in `dir` gets when it asks for nothing itself (a create
/// answered by a delegation's holder, a batch's item): the directory's default over the
/// file system's, as [`Tx::new_layout`] reads them.
pub(crate) fn new_file_requests(
    mdt: &Mdt,
    dir: &InodeRecord,
) -> Result<Vec<ComponentRequest>, Status> {
    let fs_default = match dir.attr.fid == Fid::ROOT || Fid::ROOT.mdt_index() != mdt.label.index {
        true => None,
        false => mdt.inode(Fid::ROOT)?.dir_default,
    };
    Ok(LayoutSpec::requests_for_new_file(
        &LayoutSpec::plain(StripeSpec::default()),
        dir.dir_default.as_ref(),
        fs_default.as_ref(),
    ))
}

/// Whether a new file made in `dir` asking for nothing would get its first objects now
/// (its first component's pool has OSTs, enough for its stripe count, its start OST among
/// them), without choosing any: the error its create would get otherwise (`ENOSPC`: a pool without
/// OSTs; `EINVAL`: a request no OST set meets). A delegation is granted only where this
/// holds (its holder answers creates the MDT could not refuse later).
pub(crate) fn placeable(mdt: &Mdt, dir: &InodeRecord) -> Result<(), Status> {
    let requests = new_file_requests(mdt, dir)?;
    let Some(first) = requests.first() else {
        return Ok(());
    };
    if first.kind == ComponentKind::Mdt {
        return Ok(());
    }
    // Resolved against the pool's OSTs (`OstPool::resolve`: some, the start OST one of
    // them, no more stripes than they are), all `OstPool::choose` asks of them.
    resolve_component(mdt, first.asked, first.inherited, false).map(|_| ())
}

/// See [`Tx::resolve_component`]; `placing`: a file is placed by it (a spill is counted).
fn resolve_component(
    mdt: &Mdt,
    asked: StripeSpec,
    inherited: StripeSpec,
    placing: bool,
) -> Result<(u16, u32, Option<u32>, PoolName), Status> {
    let merged = asked.over(inherited);
    let pending = |ost| mdt.destroy_space.pending(ost);
    let pool = match placing {
        true => mdt.osts.spill_target(merged.pool, pending),
        false => mdt.osts.spill_target_uncounted(merged.pool, pending),
    };
    // Spilled: the target pool's OSTs, whatever the start OST named in the full one,
    // and no more stripes than it has.
    let (spec, base) = if pool == merged.pool {
        (asked, inherited)
    } else {
        let spilled = StripeSpec {
            start_ost: -1,
            pool,
            ..merged
        };
        (
            StripeSpec {
                stripe_count: 0,
                ..spilled
            },
            spilled,
        )
    };
    let (count, size, first) = mdt.osts.resolve(spec, base, pool)?;
    Ok((count, size, first, pool))
}
