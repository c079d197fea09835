//! `nacre migrate -c N -S SIZE -p POOL FILE|DIR...`: online migration of files to a new
//! layout (docs/migrate.md), as `lfs migrate` does; `-m MDT` (directories to another MDT) is
//! `admin::migrate`. Files already in the layout asked for are skipped, so a run stopped
//! half way through a tree resumes where it stopped.

use super::changelog::client_of;
use crate::admin::getxattr;
use anyhow::{bail, Context};
use nacre_client::relayout::{MigrateOptions, Pacer};
use nacre_types::layout::StripeSpec;
use nacre_types::{Fid, PoolName};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

/// Files migrated at once at most.
pub(crate) const JOBS_MAX: usize = 64;
/// How often `-v` prints the progress of a run.
pub(crate) const PROGRESS_MS: u64 = 2_000;

/// What a run asks for.
pub(crate) struct Request {
    /// Files migrated at once.
    pub(crate) jobs: usize,
    pub(crate) stripe_count: Option<i32>,
    pub(crate) stripe_size: Option<String>,
    pub(crate) pool: Option<String>,
    /// Bytes per second at most, as `100M` (per second).
    pub(crate) bandwidth: Option<String>,
    pub(crate) verbose: bool,
    pub(crate) json: bool,
}

#[derive(Default)]
struct Totals {
    files: u64,
    skipped: u64,
    failed: u64,
    bytes: u64,
    copied_again: u64,
}

/// True if the layout `lov` (the `user.nacre.lov` JSON) is what `spec` asks for (never for
/// a file with bytes on the MDT: a migration moves them to OSTs).
fn already(lov: &Value, spec: &StripeSpec) -> bool {
    let on_mdt = lov["components"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["pattern"] == "mdt"));
    if on_mdt {
        return false;
    }
    let count_ok = spec.stripe_count <= 0
        || lov["stripe_count"].as_i64() == Some(i64::from(spec.stripe_count));
    let size_ok =
        spec.stripe_size == 0 || lov["stripe_size"].as_u64() == Some(u64::from(spec.stripe_size));
    let pool_ok = spec.pool == PoolName::NONE || lov["pool"].as_str() == Some(spec.pool.as_str());
    count_ok && size_ok && pool_ok
}

/// Every regular file under `paths` (directories walked depth first, symlinks not
/// followed).
fn files_of(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = paths.iter().rev().cloned().collect();
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).with_context(|| p.display().to_string())?;
        if meta.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&p)?
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<_, _>>()?;
            entries.sort();
            stack.extend(entries.into_iter().rev());
        } else if meta.is_file() {
            out.push(p);
        }
    }
    Ok(out)
}

pub(crate) fn migrate_files(req: Request, paths: &[PathBuf]) -> anyhow::Result<()> {
    let pool = match req.pool.as_deref() {
        Some(p) => {
            let name = p.rsplit('.').next().unwrap_or(p);
            PoolName::new(name).map_err(|e| anyhow::anyhow!("bad pool '{p}': {e}"))?
        }
        None => PoolName::NONE,
    };
    let stripe_size = match req.stripe_size.as_deref() {
        Some(s) => u32::try_from(nacre_cli::size::parse_size(s).map_err(anyhow::Error::msg)?)
            .context("stripe size too large")?,
        None => 0,
    };
    let spec = StripeSpec {
        stripe_count: req.stripe_count.unwrap_or(0),
        stripe_size,
        start_ost: -1,
        pool,
    };
    let bandwidth = match req.bandwidth.as_deref() {
        Some(b) => nacre_cli::size::parse_size(b).map_err(anyhow::Error::msg)?,
        None => 0,
    };
    let Some(first) = paths.first() else {
        bail!("no file or directory to migrate");
    };
    let client = client_of(&first.display().to_string())?;
    client.check_spec(spec)?;
    let opts = MigrateOptions { spec };
    let pacer = Pacer::new(bandwidth);
    let files = files_of(paths)?;
    let started = Instant::now();
    let totals = std::sync::Mutex::new(Totals::default());
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Files move in parallel (each file's stripes in parallel too), sharing the limit.
    let one = |i: usize, f: &PathBuf| -> anyhow::Result<()> {
        let lov: Value = serde_json::from_slice(&getxattr(f, nacre_fuse::XATTR_LOV)?)?;
        if already(&lov, &spec) {
            totals.lock().expect("totals").skipped += 1;
            return Ok(());
        }
        let fid: Fid = String::from_utf8_lossy(&getxattr(f, nacre_fuse::XATTR_FID)?)
            .parse()
            .map_err(|e| anyhow::anyhow!("bad FID: {e}"))?;
        let r = client.migrate_file(fid, &opts, &pacer)?;
        let mut t = totals.lock().expect("totals");
        t.files += 1;
        t.bytes += r.size;
        t.copied_again += u64::from(r.copied_again);
        if req.verbose {
            eprintln!(
                "[{}/{}] {} ({} bytes{})",
                i + 1,
                files.len(),
                f.display(),
                r.size,
                if r.copied_again {
                    ", changed while copied: copied again"
                } else {
                    ""
                }
            );
        }
        Ok(())
    };
    let total_bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::symlink_metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let running = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        // Progress of a long run, also within one large file: bytes copied so far.
        if req.verbose {
            s.spawn(|| {
                let mut last = Instant::now();
                while running.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    if last.elapsed().as_millis() < u128::from(PROGRESS_MS) {
                        continue;
                    }
                    last = Instant::now();
                    let t = totals.lock().expect("totals");
                    let copied = pacer.total();
                    let secs = started.elapsed().as_secs_f64();
                    eprintln!(
                        "progress: {} of {} files, {:.1} of {:.1} MiB copied, {:.1} MiB/s",
                        t.files + t.skipped + t.failed,
                        files.len(),
                        copied as f64 / (1 << 20) as f64,
                        total_bytes as f64 / (1 << 20) as f64,
                        copied as f64 / (1 << 20) as f64 / secs.max(1e-6)
                    );
                }
            });
        }
        let mut workers = Vec::new();
        for _ in 0..req.jobs.clamp(1, JOBS_MAX) {
            workers.push(s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(f) = files.get(i) else { return };
                if let Err(e) = one(i, f) {
                    totals.lock().expect("totals").failed += 1;
                    eprintln!("nacre: migrate {}: {e:#}", f.display());
                }
            }));
        }
        for w in workers {
            if w.join().is_err() {
                totals.lock().expect("totals").failed += 1;
            }
        }
        running.store(false, std::sync::atomic::Ordering::Relaxed);
    });
    let t = totals.into_inner().expect("totals");
    let secs = started.elapsed().as_secs_f64();
    let mib_s = t.bytes as f64 / (1 << 20) as f64 / secs.max(1e-6);
    if req.json {
        println!(
            "{}",
            serde_json::json!({
                "files": t.files, "skipped": t.skipped, "failed": t.failed,
                "bytes": t.bytes, "copied_again": t.copied_again,
                "seconds": secs, "mib_per_s": mib_s,
            })
        );
    } else {
        println!(
            "migrated {} files ({} bytes, {mib_s:.1} MiB/s), {} already so, {} failed",
            t.files, t.bytes, t.skipped, t.failed
        );
    }
    if t.failed > 0 {
        bail!("{} files not migrated", t.failed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nacre_fuse::xattr_json::{lov_value, VERSION_KEY};
    use nacre_types::{Layout, ObjectId, StripeObject};
    use nacre_wire::mds::LayoutInfo;

    /// The layout the mount reads (with its `version`) is compared as before.
    #[test]
    fn a_layout_read_with_a_version_is_compared_as_before() {
        let object = |ost, id| StripeObject {
            ost,
            object: ObjectId { seq: 1, id },
        };
        let lov = lov_value(&LayoutInfo::File(Layout::raid0(
            1 << 20,
            vec![object(0, 1), object(1, 2)],
            PoolName::new("flash").unwrap(),
        )));
        assert_eq!(lov[VERSION_KEY], 1);
        let spec = |stripe_count, stripe_size, pool: &str| StripeSpec {
            stripe_count,
            stripe_size,
            start_ost: -1,
            pool: match pool {
                "" => PoolName::NONE,
                p => PoolName::new(p).unwrap(),
            },
        };
        assert!(already(&lov, &spec(2, 1 << 20, "flash")));
        assert!(already(&lov, &spec(0, 0, "")));
        assert!(!already(&lov, &spec(4, 0, "")));
        assert!(!already(&lov, &spec(0, 1 << 21, "")));
        assert!(!already(&lov, &spec(0, 0, "other")));
        let mut dom = lov.clone();
        dom["components"] = serde_json::json!([{ "pattern": "mdt" }, { "pattern": "raid0" }]);
        assert!(
            !already(&dom, &spec(0, 0, "")),
            "bytes on the MDT go to OSTs"
        );
    }
}
