//! Changes of an object: the chunks a change holds (data and checksums together), and the
//! space it takes or frees, charged to the object's owner when the last change running
//! lets go.

use super::cache::OpenObject;
use super::ObjectStore;
use nacre_types::ObjectId;
use std::sync::Arc;

/// Chunks of an object a change holds ([`ObjectStore::change`]), given back when it drops.
pub(super) struct Change<'a> {
    store: &'a ObjectStore,
    object: ObjectId,
    range: std::ops::Range<u64>,
    /// The object, when the change is charged to its owner.
    o: Option<Arc<OpenObject>>,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        let object = self.object;
        let settle = |before: u64| {
            let Some(o) = &self.o else { return };
            match o.space() {
                Ok(after) => {
                    // An object of unknown owner (a newer nacre's record) is charged to no
                    // one, as the count at start does.
                    if let Some(owner) = o.charged_to() {
                        self.store.usage.charge(owner, after as i64 - before as i64);
                    }
                }
                Err(e) => tracing::error!("object {object}: its space after a change: {e}"),
            }
        };
        self.store.ranges.give(object, self.range.clone(), &settle);
    }
}

impl ObjectStore {
    /// Holds chunks `range` of `object` ([`WHOLE`]: all of it) for a change. With `o`, the
    /// space the change takes or frees is charged to the object's owner (`default` if none
    /// is recorded; the change may record one; no one if it is unknown) when the last
    /// change of the object running lets go.
    pub(super) fn change(
        &self,
        object: ObjectId,
        range: std::ops::Range<u64>,
        o: Option<&Arc<OpenObject>>,
    ) -> Change<'_> {
        let measure = o.map(|o| {
            move || match o.space() {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!("object {object}: its space before a change: {e}");
                    None
                }
            }
        });
        self.ranges.take(
            object,
            range.clone(),
            measure.as_ref().map(|f| f as &dyn Fn() -> Option<u64>),
        );
        Change {
            store: self,
            object,
            range,
            o: o.cloned(),
        }
    }
}
