//! obdfilter-survey's equivalent: drive OST object stores directly — no client, no network —
//! with `objects` objects and `threads` threads per OST, `record`-sized I/Os, in the phases
//! write, rewrite and read. It runs beside a live server safely: survey objects live in their
//! own sequence ([`SURVEY_SEQ`]) and are destroyed at the end.

use crate::BenchError;
use nacre_osd::ObjectStore;
use nacre_types::{AlignedBuf, ObjectId};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Instant;

/// Object sequence reserved for surveys (MDTs use their index as sequence).
pub const SURVEY_SEQ: u64 = u64::MAX - 1;

/// Parameters.
#[derive(Clone, Debug, Serialize)]
pub struct SurveyParams {
    /// OST directories.
    pub osts: Vec<PathBuf>,
    /// Objects per OST.
    pub objects: u64,
    /// Threads per OST.
    pub threads: usize,
    /// Bytes per I/O.
    pub record: u64,
    /// Bytes per object.
    pub size: u64,
    /// Use the direct-I/O path (as the OST does by default).
    pub direct: bool,
    /// Each thread makes its objects durable at the end of a write or rewrite, inside the
    /// timed part (as IOR's `-e` fsyncs its file before its time is taken).
    pub fsync: bool,
}

/// One phase's result.
#[derive(Clone, Debug, Serialize)]
pub struct SurveyPhase {
    /// "write", "rewrite" or "read".
    pub op: &'static str,
    /// MiB/s over all OSTs.
    pub total_mib: f64,
    /// MiB/s per OST, in the order given.
    pub per_ost_mib: Vec<f64>,
}

fn run_phase(
    p: &SurveyParams,
    stores: &[ObjectStore],
    op: &'static str,
) -> Result<SurveyPhase, BenchError> {
    let per_thread_objects = p.objects.div_ceil(p.threads as u64);
    let barrier = Barrier::new(stores.len() * p.threads);
    let results: Vec<Result<(usize, f64), BenchError>> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            for t in 0..p.threads {
                let barrier = &barrier;
                handles.push(scope.spawn(move || {
                    let mut buf = AlignedBuf::zeroed(p.record as usize);
                    buf.fill(0xa5);
                    barrier.wait();
                    let start = Instant::now();
                    let first = t as u64 * per_thread_objects;
                    for id in first..(first + per_thread_objects).min(p.objects) {
                        let object = ObjectId {
                            seq: SURVEY_SEQ,
                            id,
                        };
                        let mut off = 0;
                        while off < p.size {
                            let r = if op == "read" {
                                store.read(object, off, p.record as usize).map(|_| ())
                            } else {
                                store.write(object, off, &buf, nacre_types::Owner::default())
                            };
                            r.map_err(|e| BenchError::Params(format!("survey {op}: {e}")))?;
                            off += p.record;
                        }
                        if p.fsync && op != "read" {
                            store.sync(object).map_err(|e| {
                                BenchError::Params(format!("survey {op}: sync: {e}"))
                            })?;
                        }
                    }
                    Ok((i, start.elapsed().as_secs_f64()))
                }));
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("survey thread"))
            .collect()
    });
    let mut slowest = vec![0f64; stores.len()];
    for r in results {
        let (i, secs) = r?;
        slowest[i] = slowest[i].max(secs);
    }
    let mib_per_ost = (p.objects * p.size) as f64 / (1 << 20) as f64;
    let per_ost_mib: Vec<f64> = slowest.iter().map(|s| mib_per_ost / s.max(1e-9)).collect();
    let wall = slowest.iter().copied().fold(0.0, f64::max);
    Ok(SurveyPhase {
        op,
        total_mib: mib_per_ost * stores.len() as f64 / wall.max(1e-9),
        per_ost_mib,
    })
}

/// Runs write, rewrite and read on every OST, then destroys the survey objects.
pub fn run(p: &SurveyParams) -> Result<Vec<SurveyPhase>, BenchError> {
    run_with(p, |_| {})
}

/// [`run`], calling `progress` after each phase.
pub fn run_with(
    p: &SurveyParams,
    mut progress: impl FnMut(&SurveyPhase),
) -> Result<Vec<SurveyPhase>, BenchError> {
    if p.osts.is_empty() || p.objects == 0 || p.threads == 0 || p.record == 0 || p.size < p.record {
        return Err(BenchError::Params(
            "survey needs OSTs, objects, threads, and size >= record".into(),
        ));
    }
    if p.direct && !p.record.is_multiple_of(4096) {
        return Err(BenchError::Params(
            "direct I/O needs a record size that is a multiple of 4 KiB".into(),
        ));
    }
    let stores = p
        .osts
        .iter()
        .map(|d| {
            let s = ObjectStore::open(d).map_err(|e| crate::io_err("open", d, e))?;
            s.set_direct_io(p.direct);
            Ok(s)
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let mut phases = Vec::new();
    for op in ["write", "rewrite", "read"] {
        let ph = run_phase(p, &stores, op)?;
        progress(&ph);
        phases.push(ph);
    }
    for s in &stores {
        for id in 0..p.objects {
            let _ = s.destroy(ObjectId {
                seq: SURVEY_SEQ,
                id,
            });
        }
    }
    Ok(phases)
}

/// obdfilter-survey-like text.
pub fn format_report(p: &SurveyParams, phases: &[SurveyPhase]) -> String {
    let mut s = format!(
        "survey: {} OSTs, {} objects x {} MiB per OST, {} threads per OST, record {} KiB, direct I/O {}\n",
        p.osts.len(),
        p.objects,
        p.size >> 20,
        p.threads,
        p.record >> 10,
        if p.direct { "on" } else { "off" }
    );
    for ph in phases {
        let per: Vec<String> = ph.per_ost_mib.iter().map(|m| format!("{m:.1}")).collect();
        s += &format!(
            "{:<8} {:>10.2} MiB/s total   per OST: [{}]\n",
            ph.op,
            ph.total_mib,
            per.join(" ")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survey_runs_and_cleans_up() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let p = SurveyParams {
            osts: vec![a.path().to_path_buf(), b.path().to_path_buf()],
            objects: 4,
            threads: 2,
            record: 64 << 10,
            size: 1 << 20,
            direct: true,
            fsync: true,
        };
        let phases = run(&p).unwrap();
        assert_eq!(
            phases.iter().map(|x| x.op).collect::<Vec<_>>(),
            vec!["write", "rewrite", "read"]
        );
        assert!(phases
            .iter()
            .all(|x| x.total_mib > 0.0 && x.per_ost_mib.len() == 2));
        let store = ObjectStore::open(a.path()).unwrap();
        assert_eq!(
            store
                .size(ObjectId {
                    seq: SURVEY_SEQ,
                    id: 0
                })
                .unwrap()
                .0,
            0,
            "objects destroyed"
        );
        assert!(format_report(&p, &phases).contains("rewrite"));
    }
}
