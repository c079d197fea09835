//! OpenMetrics (Prometheus) export: `GET /metrics` on a configurable address, rendered from
//! the same counters `nacre ctl get_param` shows.

use nacre_mds::mdt::Mdt;
use nacre_oss::OstTarget;
use nacre_params::OpStats;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Largest request head read.
pub const REQUEST_BYTES_MAX: u64 = 8 * 1024;

/// What a process exports.
#[derive(Clone, Default)]
pub struct Sources {
    /// OSTs served.
    pub osts: Vec<Arc<OstTarget>>,
    /// MDTs served.
    pub mdts: Vec<Arc<Mdt>>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(String, u64)>,
}

fn op_samples(f: &mut [Family; 3], labels: &str, stats: &OpStats) {
    for (i, op) in stats.names().iter().enumerate() {
        let Some(c) = stats.counter(i) else { continue };
        let n = c.count.load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let l = format!("{labels},op=\"{op}\"");
        f[0].samples.push((l.clone(), n));
        f[1].samples
            .push((l.clone(), c.sum_us.load(Ordering::Relaxed)));
        f[2].samples.push((l, c.bytes.load(Ordering::Relaxed)));
    }
}

/// Renders every metric in OpenMetrics text format.
pub fn render(src: &Sources) -> String {
    let mut target = [
        Family {
            name: "nacre_target_ops",
            help: "Requests handled, per target and operation.",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_target_op_latency_microseconds",
            help: "Sum of request service times (microseconds).",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_target_op_bytes",
            help: "Bulk bytes moved by requests.",
            samples: Vec::new(),
        },
    ];
    let mut job = [
        Family {
            name: "nacre_job_ops",
            help: "Requests handled, per target, job and operation.",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_job_op_latency_microseconds",
            help: "Sum of service times per job (microseconds).",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_job_op_bytes",
            help: "Bulk bytes moved per job.",
            samples: Vec::new(),
        },
    ];
    for o in &src.osts {
        let t = format!("target=\"{}\"", escape(&o.label.name()));
        op_samples(&mut target, &t, &o.stats);
        for (j, s) in o.job_stats.snapshot() {
            op_samples(&mut job, &format!("{t},job=\"{}\"", escape(&j)), &s);
        }
    }
    for m in &src.mdts {
        let t = format!("target=\"{}\"", escape(&m.label.name()));
        op_samples(&mut target, &t, &m.md_stats);
        for (j, s) in m.job_stats.snapshot() {
            op_samples(&mut job, &format!("{t},job=\"{}\"", escape(&j)), &s);
        }
    }
    let mut out = String::new();
    for f in target.iter().chain(job.iter()) {
        let _ = writeln!(
            out,
            "# TYPE {} counter\n# HELP {} {}",
            f.name, f.name, f.help
        );
        for (labels, v) in &f.samples {
            let _ = writeln!(out, "{}_total{{{labels}}} {v}", f.name);
        }
    }
    let _ = writeln!(out, "# TYPE nacre_ost_free_bytes gauge\n# HELP nacre_ost_free_bytes Bytes available on the OST.");
    for o in &src.osts {
        if let Ok(s) = o.store.statfs() {
            let _ = writeln!(
                out,
                "nacre_ost_free_bytes{{target=\"{}\"}} {}",
                escape(&o.label.name()),
                s.bytes_avail
            );
        }
    }
    out.push_str("# EOF\n");
    out
}

fn serve_one(src: &Sources, stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut first = String::new();
    BufReader::new((&stream).take(REQUEST_BYTES_MAX)).read_line(&mut first)?;
    let path = first.split_whitespace().nth(1).unwrap_or("");
    let (status, ctype, body) =
        if first.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                render(src),
            )
        } else {
            (
                "404 Not Found",
                "text/plain",
                "only /metrics is served here\n".to_string(),
            )
        };
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    (&stream).write_all(head.as_bytes())?;
    (&stream).write_all(body.as_bytes())
}

use std::io::Read;

/// Serves `/metrics` on `addr` from a background thread; returns the bound address.
pub fn serve(addr: SocketAddr, src: Sources) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                if let Err(e) = serve_one(&src, stream) {
                    tracing::debug!("metrics request failed: {e}");
                }
            }
        })?;
    Ok(bound)
}
