//! A worker process of a multi-host benchmark: connects to its leader, builds the workload
//! its job names (the one file that knows every workload), and runs the phases it is sent.

use crate::team::{host_path, serve, start_worker, Job};
use crate::BenchError;
use serde::de::DeserializeOwned;
use std::net::SocketAddr;

/// The parameters of `job`, as its workload takes them.
fn params<T: DeserializeOwned>(job: Job) -> Result<T, BenchError> {
    serde_json::from_value(job.params)
        .map_err(|e| BenchError::Params(format!("{} parameters: {e}", job.kind)))
}

/// A worker process's main loop: connects to the leader at `leader`, runs the phases it is
/// sent, and returns when told to exit.
pub fn worker_main(leader: SocketAddr, index: usize) -> Result<(), BenchError> {
    let mut w = start_worker(leader, index)?;
    let (storage, range) = (w.storage.clone(), w.tasks.clone());
    let (stream, reader) = (&mut w.stream, &mut w.reader);
    match w.job.kind.as_str() {
        "ior" => {
            let mut p: crate::ior::IorParams = params(w.job)?;
            p.path = host_path(&p.path, &w.host);
            let work = crate::ior::IorWork::new(p);
            serve(&work, &*storage, range, stream, reader)
        }
        "mdtest" => {
            let mut p: crate::mdtest::MdtestParams = params(w.job)?;
            p.dir = host_path(&p.dir, &w.host);
            let work = crate::mdtest::MdWork::new(p);
            serve(&work, &*storage, range, stream, reader)
        }
        "selftest" => {
            let t: crate::selftest::GroupTest = params(w.job)?;
            let work = crate::selftest::SelftestWork::new(t);
            serve(&work, &*storage, range, stream, reader)
        }
        other => Err(BenchError::Params(format!("unknown workload {other:?}"))),
    }
}
