//! Layout requests: what `setstripe` asks of a file, or a directory gives its new files as
//! its default — one stripe request per component, each with the end of its extent
//! (`setstripe -E 1M -c 1 -E 1G -c 4 -E -1 -c -1`). A plain request is one component to the
//! end of the file.

use super::{ComponentKind, LayoutError, StripeSpec, COMPONENTS_MAX, DOM_BYTES_MAX, EXTENT_EOF};
use crate::limits::STRIPE_SIZE_BYTES_MIN;
use serde::{Deserialize, Serialize};

/// Stripe count a component request on the MDT is stored and sent with ([`StoredSpec`]): a
/// count every earlier version refuses (below -1), so requests kept their format.
const MDT_STRIPE_COUNT_STORED: i32 = -2;

/// One component of a layout request: its striping, to file byte `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredSpec", into = "StoredSpec")]
pub struct ComponentSpec {
    /// One past the component's last byte ([`EXTENT_EOF`]: to the end of the file); the
    /// component starts where the one before ends (the first at 0).
    pub end: u64,
    /// Its striping (zero fields: inherited, as in a plain request).
    pub stripe: StripeSpec,
    /// Where its bytes live (`-L mdt`: on the MDT, the first component only).
    pub kind: ComponentKind,
}

/// The stored and sent form of a [`ComponentSpec`]: its end and striping, a request on the
/// MDT with a stripe count of [`MDT_STRIPE_COUNT_STORED`].
#[derive(Clone, Copy, Serialize, Deserialize)]
pub struct StoredSpec {
    end: u64,
    stripe: StripeSpec,
}

impl From<StoredSpec> for ComponentSpec {
    fn from(s: StoredSpec) -> ComponentSpec {
        if s.stripe.stripe_count == MDT_STRIPE_COUNT_STORED {
            return ComponentSpec {
                end: s.end,
                stripe: StripeSpec {
                    stripe_count: 0,
                    ..s.stripe
                },
                kind: ComponentKind::Mdt,
            };
        }
        ComponentSpec {
            end: s.end,
            stripe: s.stripe,
            kind: ComponentKind::Osts,
        }
    }
}

impl From<ComponentSpec> for StoredSpec {
    fn from(c: ComponentSpec) -> StoredSpec {
        let mut stripe = c.stripe;
        if c.kind == ComponentKind::Mdt {
            stripe.stripe_count = MDT_STRIPE_COUNT_STORED;
        }
        StoredSpec { end: c.end, stripe }
    }
}

/// One component of a new file's layout request: its extent, what the file asked of it,
/// and what it inherits where it asked nothing ([`LayoutSpec::requests_for_new_file`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComponentRequest {
    /// First byte.
    pub start: u64,
    /// One past the last byte ([`EXTENT_EOF`]: the end of the file).
    pub end: u64,
    /// The file's own request (zero fields: asked nothing).
    pub asked: StripeSpec,
    /// The directory's and the file system's defaults, merged.
    pub inherited: StripeSpec,
    /// Where its bytes live.
    pub kind: ComponentKind,
}

/// A layout request: its components in extent order, the last to the end of the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutSpec {
    /// The components (1 to [`COMPONENTS_MAX`]).
    pub components: Vec<ComponentSpec>,
}

/// The default request: plain, every field inherited.
impl Default for LayoutSpec {
    fn default() -> LayoutSpec {
        LayoutSpec::plain(StripeSpec::default())
    }
}

impl LayoutSpec {
    /// A plain request: one component over the whole file.
    pub fn plain(stripe: StripeSpec) -> LayoutSpec {
        LayoutSpec {
            components: vec![ComponentSpec {
                end: EXTENT_EOF,
                stripe,
                kind: ComponentKind::Osts,
            }],
        }
    }

    /// The stripe request of a plain request (None for a composite one).
    pub fn as_plain(&self) -> Option<StripeSpec> {
        match self.components.as_slice() {
            [only] if only.end == EXTENT_EOF => Some(only.stripe),
            _ => None,
        }
    }

    /// True for a composite request (more than one component).
    pub fn is_composite(&self) -> bool {
        self.components.len() > 1
    }

    /// Each component's extent and request, in order.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64, StripeSpec)> + '_ {
        self.extents_with_kinds()
            .map(|(s, e, stripe, _)| (s, e, stripe))
    }

    /// Each component's extent, request and kind, in order.
    pub fn extents_with_kinds(
        &self,
    ) -> impl Iterator<Item = (u64, u64, StripeSpec, ComponentKind)> + '_ {
        let starts = std::iter::once(0).chain(self.components.iter().map(|c| c.end));
        starts
            .zip(&self.components)
            .map(|(start, c)| (start, c.end, c.stripe, c.kind))
    }

    /// One past the last byte of its component on the MDT (0: none).
    pub fn dom_end(&self) -> u64 {
        match self.components.first() {
            Some(c) if c.kind == ComponentKind::Mdt => c.end,
            _ => 0,
        }
    }

    /// The first component's stripe request (a plain request's only one).
    pub fn first(&self) -> StripeSpec {
        self.components
            .first()
            .map_or_else(StripeSpec::default, |c| c.stripe)
    }

    /// The request a new file is laid out by, merged: [`LayoutSpec::requests_for_new_file`]
    /// with each component's asked fields over its inherited ones.
    pub fn for_new_file(
        own: &LayoutSpec,
        dir: Option<&LayoutSpec>,
        fs: Option<&LayoutSpec>,
    ) -> LayoutSpec {
        LayoutSpec {
            components: LayoutSpec::requests_for_new_file(own, dir, fs)
                .into_iter()
                .map(|r| ComponentSpec {
                    end: r.end,
                    stripe: r.asked.over(r.inherited),
                    kind: r.kind,
                })
                .collect(),
        }
    }

    /// What a new file is laid out by, per component: its own request (`own`: what
    /// `setstripe` or the create asked; the default plain request when nothing was), over
    /// its directory's default (`dir`), over the file system's (`fs`, the root's default;
    /// None where the directory is the root). A composite request is taken whole — a
    /// composite `own`, or else a directory default (else the file system's) when `own`
    /// asks nothing — each component's unset fields inherited from the first components
    /// below it; otherwise the result is plain, `own` over the first components of `dir`
    /// and `fs` (as Lustre: a plain `setstripe -c 2` in a directory of composite default
    /// makes a plain file). What was asked and what was inherited stay apart: an
    /// inherited stripe count larger than a pool has is cut to it, an asked one is refused
    /// (`OstPool::resolve`).
    pub fn requests_for_new_file(
        own: &LayoutSpec,
        dir: Option<&LayoutSpec>,
        fs: Option<&LayoutSpec>,
    ) -> Vec<ComponentRequest> {
        let first = |l: Option<&LayoutSpec>| l.map_or_else(StripeSpec::default, LayoutSpec::first);
        let asks_nothing = own.as_plain() == Some(StripeSpec::default());
        // (template, its components asked by the file itself, base of unset fields)
        let (template, asked, base) = if own.is_composite() {
            (own, true, first(dir).over(first(fs)))
        } else if let (true, Some(d)) = (asks_nothing, dir.filter(|d| d.is_composite())) {
            (d, false, first(fs))
        } else if let (true, None, Some(f)) = (asks_nothing, dir, fs.filter(|f| f.is_composite())) {
            (f, false, StripeSpec::default())
        } else {
            return vec![ComponentRequest {
                start: 0,
                end: EXTENT_EOF,
                asked: own.first(),
                inherited: first(dir).over(first(fs)),
                kind: ComponentKind::Osts,
            }];
        };
        template
            .extents_with_kinds()
            .map(|(start, end, stripe, kind)| match asked {
                true => ComponentRequest {
                    start,
                    end,
                    asked: stripe,
                    inherited: base,
                    kind,
                },
                false => ComponentRequest {
                    start,
                    end,
                    asked: StripeSpec::default(),
                    inherited: stripe.over(base),
                    kind,
                },
            })
            .collect()
    }

    /// Checks the request's shape: 1 to [`COMPONENTS_MAX`] components whose ends rise, each
    /// a multiple of 64 KiB and of the component's stripe size where it names one (and of
    /// the next component's, where it starts), the last [`EXTENT_EOF`]. Stripe counts and
    /// pools are checked against the file system where it is laid out. A component on the
    /// MDT is the first, ends at most at [`DOM_BYTES_MAX`] on a multiple of 64 KiB, and names
    /// no striping (its stripe is its extent).
    pub fn check(&self) -> Result<(), LayoutError> {
        if self.components.is_empty() || self.components.len() > COMPONENTS_MAX {
            return Err(LayoutError::BadComponents);
        }
        if self.components.last().map(|c| c.end) != Some(EXTENT_EOF) {
            return Err(LayoutError::BadComponents);
        }
        for (i, (start, end, stripe, kind)) in self.extents_with_kinds().enumerate() {
            if kind == ComponentKind::Mdt {
                let ok = i == 0
                    && end <= DOM_BYTES_MAX
                    && end.is_multiple_of(u64::from(STRIPE_SIZE_BYTES_MIN))
                    && stripe.stripe_count == 0
                    && stripe.stripe_size == 0
                    && stripe.start_ost < 0
                    && stripe.pool.is_none();
                if !ok {
                    return Err(LayoutError::BadMdtComponent);
                }
                continue;
            }
            if stripe.stripe_size != 0 {
                super::check_stripe_size(stripe.stripe_size)?;
            }
            if stripe.stripe_count < -1 {
                return Err(LayoutError::BadStripeCount(stripe.stripe_count));
            }
            if !stripe.pool.is_valid() {
                return Err(LayoutError::BadPool);
            }
            let size = u64::from(stripe.stripe_size.max(STRIPE_SIZE_BYTES_MIN));
            let aligned = |x: u64| x == EXTENT_EOF || x.is_multiple_of(size);
            // After a component on the MDT, a start on 64 KiB will do (`Layout::check`).
            let after_mdt = i == 1 && self.components[0].kind == ComponentKind::Mdt;
            let start_ok = aligned(start)
                || (after_mdt && start.is_multiple_of(u64::from(STRIPE_SIZE_BYTES_MIN)));
            if start >= end || !start_ok || !aligned(end) {
                return Err(LayoutError::BadExtent {
                    start,
                    end,
                    stripe_size: stripe.stripe_size,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolName;

    fn comp(end: u64, count: i32, size: u32) -> ComponentSpec {
        ComponentSpec {
            end,
            stripe: StripeSpec {
                stripe_count: count,
                stripe_size: size,
                start_ost: -1,
                pool: PoolName::NONE,
            },
            kind: ComponentKind::Osts,
        }
    }

    fn plain(count: i32) -> LayoutSpec {
        LayoutSpec::plain(StripeSpec {
            stripe_count: count,
            ..StripeSpec::default()
        })
    }

    #[test]
    fn new_files_take_their_own_request_else_their_directorys_else_the_file_systems() {
        let pfl = LayoutSpec {
            components: vec![comp(1 << 20, 1, 0), comp(EXTENT_EOF, -1, 4 << 20)],
        };
        let nothing = LayoutSpec::plain(StripeSpec::default());
        let fs = LayoutSpec::plain(StripeSpec {
            stripe_size: 2 << 20,
            ..StripeSpec::default()
        });
        // A composite directory default, the file asking nothing: the default's
        // components, their unset stripe size from the file system's.
        let got = LayoutSpec::for_new_file(&nothing, Some(&pfl), Some(&fs));
        assert_eq!(got.components.len(), 2);
        assert_eq!(got.components[0].stripe.stripe_size, 2 << 20);
        assert_eq!(got.components[1].stripe.stripe_size, 4 << 20);
        assert_eq!(got.components[1].stripe.stripe_count, -1);
        // A plain request of its own: plain, over the directory's first component.
        let got = LayoutSpec::for_new_file(&plain(3), Some(&pfl), Some(&fs));
        assert_eq!(got.as_plain().map(|s| s.stripe_count), Some(3));
        // A composite request of its own wins over a plain default.
        let got = LayoutSpec::for_new_file(&pfl, Some(&plain(2)), None);
        assert_eq!(got.components.len(), 2);
        assert_eq!(got.components[0].stripe.stripe_count, 1);
        // No directory default: the file system's, composite or plain.
        let got = LayoutSpec::for_new_file(&nothing, None, Some(&pfl));
        assert!(got.is_composite());
        let got = LayoutSpec::for_new_file(&nothing, Some(&plain(2)), Some(&fs));
        assert_eq!(
            got.as_plain().map(|s| (s.stripe_count, s.stripe_size)),
            Some((2, 2 << 20))
        );
    }

    /// What a file asked and what it inherits stay apart (an inherited stripe count a
    /// pool cannot meet any more is cut to the pool, an asked one refused): a directory's
    /// default, plain or composite, is inherited; the file's own request is asked.
    #[test]
    fn asked_and_inherited_stay_apart() {
        let pfl = LayoutSpec {
            components: vec![comp(1 << 20, 1, 0), comp(EXTENT_EOF, 4, 0)],
        };
        let nothing = LayoutSpec::default();
        for r in LayoutSpec::requests_for_new_file(&nothing, Some(&pfl), None) {
            assert_eq!(r.asked, StripeSpec::default());
        }
        let r = LayoutSpec::requests_for_new_file(&nothing, Some(&plain(2)), None);
        assert_eq!(
            (r[0].asked.stripe_count, r[0].inherited.stripe_count),
            (0, 2)
        );
        let r = LayoutSpec::requests_for_new_file(&pfl, Some(&plain(2)), None);
        assert_eq!(r[1].asked.stripe_count, 4);
        assert_eq!(r[1].inherited.stripe_count, 2);
        let r = LayoutSpec::requests_for_new_file(&plain(3), Some(&plain(2)), None);
        assert_eq!(
            (r[0].asked.stripe_count, r[0].inherited.stripe_count),
            (3, 2)
        );
    }

    #[test]
    fn requests_run_to_the_end_of_the_file_on_stripe_boundaries() {
        let pfl = LayoutSpec {
            components: vec![
                comp(1 << 20, 1, 0),
                comp(1 << 30, 4, 1 << 20),
                comp(EXTENT_EOF, -1, 4 << 20),
            ],
        };
        assert_eq!(pfl.check(), Ok(()));
        assert!(pfl.is_composite() && pfl.as_plain().is_none());
        assert_eq!(
            pfl.extents().map(|(s, e, _)| (s, e)).collect::<Vec<_>>(),
            vec![(0, 1 << 20), (1 << 20, 1 << 30), (1 << 30, EXTENT_EOF)]
        );
        let plain = LayoutSpec::plain(StripeSpec::default());
        assert_eq!(plain.check(), Ok(()));
        assert_eq!(plain.as_plain(), Some(StripeSpec::default()));
        // Not to the end; ends that do not rise; an end off the stripe size; none.
        for bad in [
            vec![comp(1 << 20, 1, 0)],
            vec![
                comp(1 << 20, 1, 0),
                comp(1 << 20, 1, 0),
                comp(EXTENT_EOF, 1, 0),
            ],
            vec![comp(1 << 20, 1, 4 << 20), comp(EXTENT_EOF, 1, 0)],
            vec![comp(100_000, 1, 0), comp(EXTENT_EOF, 1, 0)],
            vec![comp(1 << 20, -2, 0), comp(EXTENT_EOF, 1, 0)],
            vec![],
        ] {
            assert!(
                LayoutSpec {
                    components: bad.clone()
                }
                .check()
                .is_err(),
                "{bad:?}"
            );
        }
        let many = vec![comp(EXTENT_EOF, 1, 0); COMPONENTS_MAX + 1];
        assert_eq!(
            LayoutSpec { components: many }.check(),
            Err(LayoutError::BadComponents)
        );
    }
}
