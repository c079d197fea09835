//! Online file migration, the migrator's side (docs/migrate.md): new objects from the MDT,
//! the data copied while the file stays in use, the old objects fenced on their OSTs, a
//! second copy only if the file changed meanwhile, then the MDT's atomic swap.

use crate::*;
use nacre_types::layout::StripeSpec;
use nacre_types::{Fid, Status};
use nacre_wire::mds::{MdsOp, MdsReply};
use std::time::{Duration, Instant};

/// Bytes copied per read and write.
pub const COPY_CHUNK_BYTES: usize = 16 << 20;
/// How often a long copy renews the migration's lease at the MDT (well under its fence
/// lease, crates/mds/src/relayout.rs).
pub const RENEW_MS: u64 = 5_000;

/// How a file is migrated.
#[derive(Clone, Copy, Debug, Default)]
pub struct MigrateOptions {
    /// The new striping (what it leaves unset comes from the file's current layout).
    pub spec: StripeSpec,
}

/// What a migration did.
#[derive(Clone, Debug, Default)]
pub struct MigrateReport {
    /// The file's size.
    pub size: u64,
    /// Bytes copied (twice the size when the file changed during the first copy).
    pub bytes_copied: u64,
    /// The file changed during the first copy: copied again under the fence.
    pub copied_again: bool,
    /// The new layout's stripe count, stripe size and pool.
    pub layout: Option<nacre_types::Layout>,
}

/// Most a pacer lets through at once after being idle: this long at its rate.
pub const PACER_BURST_MS: u64 = 1_000;

/// Paces work (bytes copied, files acted on) to a rate, shared by the threads of one run:
/// a virtual clock that advances by each unit's share of a second and may lag the real one
/// by at most [`PACER_BURST_MS`], so a long idle time never allows a burst beyond that.
pub struct Pacer {
    limit: u64,
    /// When everything let through so far is due.
    due: parking_lot::Mutex<Option<Instant>>,
    total: std::sync::atomic::AtomicU64,
}

impl Pacer {
    /// A pacer of `limit` units per second (0: none).
    pub fn new(limit: u64) -> Pacer {
        Pacer {
            limit,
            due: parking_lot::Mutex::new(None),
            total: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Units let through so far.
    pub fn total(&self) -> u64 {
        self.total.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `n` more units: waits until they fit the rate.
    pub fn moved(&self, n: u64) {
        self.total
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        if self.limit == 0 {
            return;
        }
        let now = Instant::now();
        let wait = {
            let mut due = self.due.lock();
            let floor = now
                .checked_sub(Duration::from_millis(PACER_BURST_MS))
                .unwrap_or(now);
            let at = due.map_or(now, |d| d.max(floor))
                + Duration::from_secs_f64(n as f64 / self.limit as f64);
            *due = Some(at);
            at.checked_duration_since(now)
        };
        if let Some(w) = wait {
            std::thread::sleep(w);
        }
    }
}

impl Client {
    /// Migrates regular file `fid` to the layout `opts` asks for while it stays in use.
    pub fn migrate_file(
        &self,
        fid: Fid,
        opts: &MigrateOptions,
        pacer: &Pacer,
    ) -> Result<MigrateReport> {
        self.forget_vouched(fid);
        let (old, new) = match self.md(MdsOp::RelayoutBegin {
            fid,
            spec: opts.spec,
        })? {
            MdsReply::Relayout { old, new } => (old, new),
            _ => return Err(Status::Proto.into()),
        };
        let done = self.relayout(fid, &old, &new, pacer);
        if done.is_err() {
            if let Err(e) = self.md(MdsOp::RelayoutAbort { fid }) {
                tracing::warn!("migration of {fid}: abort: {e}");
            }
        }
        done
    }

    fn relayout(
        &self,
        fid: Fid,
        old: &nacre_types::Layout,
        new: &nacre_types::Layout,
        pacer: &Pacer,
    ) -> Result<MigrateReport> {
        let owner = nacre_types::Owner::of(&self.getattr(fid)?);
        let mut report = MigrateReport::default();
        // Copy while the file is in use, between two versions taken after the writers
        // flushed (bytes on the MDT: compared with what was copied once the fence holds
        // their changes back).
        let before = osc::data_versions(self, old, true)?;
        let size = self.relayout_size(fid, old)?;
        // Asking again for the migration in progress renews it (its spec is not looked at).
        let renew_copy = || {
            self.md(MdsOp::RelayoutBegin {
                fid,
                spec: StripeSpec::default(),
            })
            .map(|_| ())
        };
        let dom = read_dom(self, fid, old, size)?;
        write_runs(self, new, 0, &dom, owner)?;
        report.bytes_copied += dom.len() as u64;
        let start = dom.len() as u64;
        report.bytes_copied += copy(self, old, new, start, size, owner, pacer, &renew_copy)?;
        let after = osc::data_versions(self, old, true)?;
        // Nothing reaches the old objects any more: mounts let go of the layout (LAYOUT
        // locks), the OSTs refuse the rest.
        self.md(MdsOp::RelayoutFence { fid })?;
        osc::fence(self, old, old.generation + 1)?;
        let fenced = osc::data_versions(self, old, true)?;
        let size_now = self.relayout_size(fid, old)?;
        let dom_now = read_dom(self, fid, old, size_now)?;
        if fenced != before || after != before || size_now != size || dom_now != dom {
            // Changed meanwhile: copied again, frozen now.
            osc::truncate(self, new, 0)?;
            let renew_fence = || self.md(MdsOp::RelayoutFence { fid }).map(|_| ());
            write_runs(self, new, 0, &dom_now, owner)?;
            let start = dom_now.len() as u64;
            report.bytes_copied += dom_now.len() as u64
                + copy(self, old, new, start, size_now, owner, pacer, &renew_fence)?;
            report.copied_again = true;
        }
        report.size = size_now;
        match self.md(MdsOp::RelayoutSwap { fid })? {
            MdsReply::Layout(nacre_wire::mds::LayoutInfo::File(l)) => report.layout = Some(l),
            _ => return Err(Status::Proto.into()),
        }
        Ok(report)
    }
}

impl Client {
    /// The size of file `fid` laid out as `layout`: its OSTs' and, for bytes on the MDT,
    /// what the MDT knows.
    fn relayout_size(&self, fid: Fid, layout: &nacre_types::Layout) -> Result<u64> {
        let (glimpsed, _) = osc::glimpse(self, layout)?;
        Ok(glimpsed.max(self.dom_size(fid, layout)?))
    }
}

/// The bytes of file `fid` (of `size` bytes, laid out as `layout`) below its component on
/// the MDT's end: empty for a file without one.
fn read_dom(c: &Client, fid: Fid, layout: &nacre_types::Layout, size: u64) -> Result<Vec<u8>> {
    let here = size.min(layout.dom_end());
    if here == 0 {
        return Ok(Vec::new());
    }
    // Nothing past the component is asked for: `rest` is never called.
    let got = c.dom_read(fid, layout, 0, here as usize, |_, _| {
        Err(Status::Proto.into())
    })?;
    Ok(got.to_vec())
}

/// Writes the runs of `buf` that are not whole zero blocks at `at` in layout `to`.
fn write_runs(
    c: &Client,
    to: &nacre_types::Layout,
    at: u64,
    buf: &[u8],
    owner: nacre_types::Owner,
) -> Result<()> {
    for (start, end) in data_runs(buf) {
        osc::write(c, to, at + start as u64, &buf[start..end], owner)?;
    }
    Ok(())
}

/// Granularity of the holes a copy keeps.
pub const HOLE_GRAIN_BYTES: usize = 1 << 20;

/// The byte ranges of `buf` to write: consecutive [`HOLE_GRAIN_BYTES`] blocks that are not
/// all zeros, merged.
fn data_runs(buf: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, block) in buf.chunks(HOLE_GRAIN_BYTES).enumerate() {
        if block.iter().all(|b| *b == 0) {
            continue;
        }
        let (start, end) = (i * HOLE_GRAIN_BYTES, i * HOLE_GRAIN_BYTES + block.len());
        match runs.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => runs.push((start, end)),
        }
    }
    runs
}

/// Copies bytes `start..size` of the file from layout `from` to layout `to` (and sets the
/// new objects' size); the bytes read.
#[allow(clippy::too_many_arguments)]
fn copy(
    c: &Client,
    from: &nacre_types::Layout,
    to: &nacre_types::Layout,
    start: u64,
    size: u64,
    owner: nacre_types::Owner,
    pacer: &Pacer,
    renew: &dyn Fn() -> Result<()>,
) -> Result<u64> {
    let mut off = start;
    let mut renewed = Instant::now();
    let chunk = |at: u64| (size - at).min(COPY_CHUNK_BYTES as u64) as usize;
    // The next chunk is read while this one is written.
    let mut reading = (size > start)
        .then(|| osc::start_read(c, from, start, chunk(start)))
        .transpose()?;
    while let Some(job) = reading.take() {
        if renewed.elapsed() >= Duration::from_millis(RENEW_MS) {
            renew()?;
            renewed = Instant::now();
        }
        let buf = job.finish(c, from)?;
        if buf.is_empty() {
            break;
        }
        let next = off + buf.len() as u64;
        if next < size {
            reading = Some(osc::start_read(c, from, next, chunk(next))?);
        }
        // Holes stay holes: runs of whole zero blocks are not written (the new objects are
        // empty; the size is set at the end).
        write_runs(c, to, off, &buf, owner)?;
        off = next;
        pacer.moved(buf.len() as u64);
    }
    // The file's size, whatever its last chunk held.
    osc::truncate(c, to, size)?;
    Ok(off - start)
}

#[cfg(test)]
mod tests {
    #[test]
    fn data_runs_skip_zero_blocks_and_merge_the_rest() {
        let g = super::HOLE_GRAIN_BYTES;
        let mut buf = vec![0u8; 5 * g + 10];
        buf[3] = 1; // block 0
        buf[g + 7] = 1; // block 1: merged with 0
        buf[4 * g] = 1; // block 4
        buf[5 * g + 9] = 1; // the short tail block: merged with 4
        assert_eq!(
            super::data_runs(&buf),
            vec![(0, 2 * g), (4 * g, 5 * g + 10)]
        );
        assert!(super::data_runs(&vec![0u8; 3 * g]).is_empty());
    }
}
