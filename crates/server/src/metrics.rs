//! OpenMetrics (Prometheus) export: `GET /metrics` on a configurable address, rendered from
//! the same counters `nacre ctl get_param` shows.

use http_body_util::Full;
use hyper::body::Bytes;
use nacre_mds::mdt::Mdt;
use nacre_net::ServicePool;
use nacre_oss::OstTarget;
use nacre_params::OpStats;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Largest request head read (also hyper's smallest allowed read buffer).
pub const REQUEST_BYTES_MAX: u64 = 8 * 1024;

/// What a process exports.
#[derive(Clone, Default)]
pub struct Sources {
    /// OSTs served (shared: targets come and go with failover).
    pub osts: Arc<std::sync::RwLock<Vec<Arc<OstTarget>>>>,
    /// MDTs served (shared, as `osts`).
    pub mdts: Arc<std::sync::RwLock<Vec<Arc<Mdt>>>>,
    /// Service thread pools, by service name (`ost_io`, `mdt`, `mgs`).
    pub services: Vec<(String, Arc<ServicePool>)>,
    /// Families rendered by others in this process (a client mount's per-OST RPC
    /// counters), appended to the text.
    pub extra: Vec<ExtraFamilies>,
}

/// Something that appends its metric families (OpenMetrics text) to a scrape.
pub type ExtraFamilies = Arc<dyn Fn(&mut String) + Send + Sync>;

/// What each QoS rule's classes were served and held back on each target.
fn qos_families(out: &mut String, osts: &[Arc<OstTarget>], mdts: &[Arc<Mdt>]) {
    let stats: Vec<(String, Vec<nacre_qos::ClassStats>)> = osts
        .iter()
        .map(|o| (o.label.name(), o.qos.stats()))
        .chain(mdts.iter().map(|m| (m.label.name(), m.qos.stats())))
        .collect();
    type Pick = fn(&nacre_qos::ClassStats) -> u64;
    let families: [(&str, &str, &str, Pick); 5] = [
        (
            "nacre_qos_ops",
            "counter",
            "Requests of a QoS class served.",
            |c| c.ops,
        ),
        (
            "nacre_qos_bytes",
            "counter",
            "Bytes of a QoS class's requests served.",
            |c| c.bytes,
        ),
        (
            "nacre_qos_delayed",
            "counter",
            "Requests of a QoS class held back for its rate.",
            |c| c.delayed,
        ),
        (
            "nacre_qos_delay_microseconds",
            "counter",
            "Time requests of a QoS class were held back.",
            |c| c.delay_us,
        ),
        (
            "nacre_qos_waiting",
            "gauge",
            "Requests of a QoS class held back now.",
            |c| c.waiting,
        ),
    ];
    for (name, kind, help, pick) in families {
        let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
        let suffix = if kind == "counter" { "_total" } else { "" };
        for (target, classes) in &stats {
            for c in classes {
                let _ = writeln!(
                    out,
                    "{name}{suffix}{{target=\"{}\",rule=\"{}\",class=\"{}\"}} {}",
                    escape(target),
                    escape(&c.rule),
                    escape(&c.class),
                    pick(c)
                );
            }
        }
    }
}

/// Most ids whose usage one target exports (the largest; `nacre quota` shows any id).
pub const QUOTA_IDS_EXPORTED_MAX: usize = 1_000;

/// Usage per user, group and project on each target (the largest
/// [`QUOTA_IDS_EXPORTED_MAX`]), and the grant each target holds of each limited id.
fn quota_families(out: &mut String, osts: &[Arc<OstTarget>], mdts: &[Arc<Mdt>]) {
    /// A target's name and its ids' usage.
    type TargetUsage = (String, Vec<(nacre_types::QuotaId, u64)>);
    let bytes: Vec<TargetUsage> = osts
        .iter()
        .map(|o| (o.label.name(), o.store.usage().all()))
        .chain(
            mdts.iter()
                .map(|m| (m.label.name(), m.store().dom_byte_counts()))
                .filter(|(_, ids)| !ids.is_empty()),
        )
        .collect();
    let inodes: Vec<TargetUsage> = mdts
        .iter()
        .map(|m| (m.label.name(), m.quota_counts()))
        .collect();
    let families = [
        (
            "bytes",
            "Bytes each user, group and project has on the target (an OST's objects, an MDT's data on the MDT).",
            bytes,
        ),
        (
            "inodes",
            "Inodes each user, group and project has on the MDT.",
            inodes,
        ),
    ];
    for (unit, help, usage) in families {
        let name = format!("nacre_quota_{unit}");
        let _ = writeln!(out, "# TYPE {name} gauge\n# HELP {name} {help}");
        for (target, mut ids) in usage {
            if ids.len() > QUOTA_IDS_EXPORTED_MAX {
                ids.sort_unstable_by_key(|(_, n)| std::cmp::Reverse(*n));
                ids.truncate(QUOTA_IDS_EXPORTED_MAX);
            }
            for (q, n) in ids {
                let _ = writeln!(
                    out,
                    "{name}{{target=\"{}\",kind=\"{}\",id=\"{}\"}} {n}",
                    escape(&target),
                    q.kind.name(),
                    q.id
                );
            }
        }
    }
    let name = "nacre_quota_granted";
    let _ = writeln!(
        out,
        "# TYPE {name} gauge\n# HELP {name} Grant the quota master gave the target for a limited id (resource: bytes on an OST or of data on an MDT, inodes on an MDT; pool empty: the whole file system)."
    );
    let grants = osts
        .iter()
        .map(|o| (o.label.name(), "bytes", o.quota.grants()))
        .chain(mdts.iter().flat_map(|m| {
            [
                (m.label.name(), "inodes", m.quota.grants()),
                (m.label.name(), "bytes", m.dom_quota.grants()),
            ]
        }));
    for (target, resource, keys) in grants {
        for (k, g) in keys {
            let _ = writeln!(
                out,
                "{name}{{target=\"{}\",resource=\"{resource}\",kind=\"{}\",id=\"{}\",pool=\"{}\"}} {g}",
                escape(&target),
                k.id.kind.name(),
                k.id.id,
                escape(k.pool.as_str())
            );
        }
    }
}

/// A service's partitions as a table (`get_param *.partition_stats`).
pub fn partition_table(pool: &ServicePool) -> String {
    let mut s = format!(
        "{:<4} {:>7} {:>5} {:>7} {:>10} {:>12} {:>12} {:>12} {:>14} {:>11} {:>10} {:>10}\n",
        "cpt",
        "threads",
        "busy",
        "queued",
        "queued_max",
        "requests",
        "busy_secs",
        "wait_secs",
        "weighted_ahead",
        "plain_turns",
        "batches",
        "batched"
    );
    for (i, c) in pool.partition_stats().iter().enumerate() {
        let _ = writeln!(
            s,
            "{:<4} {:>7} {:>5} {:>7} {:>10} {:>12} {:>12.6} {:>12.6} {:>14} {:>11} {:>10} {:>10}",
            i,
            c.threads.load(Ordering::Relaxed),
            c.busy.load(Ordering::Relaxed),
            c.queued.load(Ordering::Relaxed),
            c.queued_max.load(Ordering::Relaxed),
            c.requests.load(Ordering::Relaxed),
            c.busy_ns.load(Ordering::Relaxed) as f64 / 1e9,
            c.wait_ns.load(Ordering::Relaxed) as f64 / 1e9,
            c.weighted_ahead.load(Ordering::Relaxed),
            c.plain_turns.load(Ordering::Relaxed),
            c.batches.load(Ordering::Relaxed),
            c.batched.load(Ordering::Relaxed),
        );
    }
    let _ = write!(
        s,
        "inline_requests {}",
        pool.requests_inline.load(Ordering::Relaxed)
    );
    s
}

/// Per-partition service families: (name, type, help, value of a partition).
type PartitionFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&nacre_net::PartitionStats) -> String,
);

const PARTITION_FAMILIES: [PartitionFamily; 11] = [
    (
        "nacre_service_threads",
        "gauge",
        "Service threads started, per CPU partition.",
        |c| c.threads.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_threads_busy",
        "gauge",
        "Service threads handling a request now.",
        |c| c.busy.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_queue_depth",
        "gauge",
        "Requests waiting for a service thread now.",
        |c| c.queued.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_queue_depth_max",
        "gauge",
        "Most requests ever waiting at once.",
        |c| c.queued_max.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_requests",
        "counter",
        "Requests handled by service threads.",
        |c| c.requests.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_busy_seconds",
        "counter",
        "Thread time spent handling requests; rate / threads = thread use.",
        |c| format!("{:.9}", c.busy_ns.load(Ordering::Relaxed) as f64 / 1e9),
    ),
    (
        "nacre_service_wait_seconds",
        "counter",
        "Time requests waited in the queue.",
        |c| format!("{:.9}", c.wait_ns.load(Ordering::Relaxed) as f64 / 1e9),
    ),
    (
        "nacre_service_weighted_ahead",
        "counter",
        "Requests of weighted QoS rules taken before unweighted ones that waited longer.",
        |c| c.weighted_ahead.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_plain_turns",
        "counter",
        "Unweighted requests taken while weighted ones waited (one per run of their weight).",
        |c| c.plain_turns.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_batches",
        "counter",
        "Turns in which a thread served several requests at once (reads submitted together).",
        |c| c.batches.load(Ordering::Relaxed).to_string(),
    ),
    (
        "nacre_service_batched",
        "counter",
        "Requests served in those turns.",
        |c| c.batched.load(Ordering::Relaxed).to_string(),
    ),
];

/// A label value escaped for OpenMetrics text (backslash, double quote, newline).
pub fn escape(v: &str) -> String {
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
    let mut client = [
        Family {
            name: "nacre_client_ops",
            help: "Requests handled, per target, client NID and operation.",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_client_op_latency_microseconds",
            help: "Sum of service times per client (microseconds).",
            samples: Vec::new(),
        },
        Family {
            name: "nacre_client_op_bytes",
            help: "Bulk bytes moved per client.",
            samples: Vec::new(),
        },
    ];
    let (osts, mdts) = (
        src.osts.read().expect("sources").clone(),
        src.mdts.read().expect("sources").clone(),
    );
    let targets = osts
        .iter()
        .map(|o| (o.label.name(), &o.stats, &o.job_stats, &o.export_stats))
        .chain(
            mdts.iter()
                .map(|m| (m.label.name(), &m.md_stats, &m.job_stats, &m.export_stats)),
        );
    for (name, stats, jobs, exports) in targets {
        let t = format!("target=\"{}\"", escape(&name));
        op_samples(&mut target, &t, stats);
        for (j, s) in jobs.snapshot() {
            op_samples(&mut job, &format!("{t},job=\"{}\"", escape(&j)), &s);
        }
        for (c, s) in exports.snapshot() {
            op_samples(&mut client, &format!("{t},client=\"{}\"", escape(&c)), &s);
        }
    }
    let mut out = String::new();
    for f in target.iter().chain(job.iter()).chain(client.iter()) {
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
    for o in &osts {
        if let Ok(s) = o.store.statfs() {
            let _ = writeln!(
                out,
                "nacre_ost_free_bytes{{target=\"{}\"}} {}",
                escape(&o.label.name()),
                s.bytes_avail
            );
        }
    }
    quota_families(&mut out, &osts, &mdts);
    qos_families(&mut out, &osts, &mdts);
    for (name, kind, help, value) in PARTITION_FAMILIES {
        let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
        let suffix = if kind == "counter" { "_total" } else { "" };
        for (service, pool) in &src.services {
            for (cpt, c) in pool.partition_stats().iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{suffix}{{service=\"{}\",cpt=\"{cpt}\"}} {}",
                    escape(service),
                    value(c)
                );
            }
        }
    }
    let _ = writeln!(out, "# TYPE nacre_service_inline_requests counter\n# HELP nacre_service_inline_requests Requests of in-process clients handled in the caller's thread.");
    for (service, pool) in &src.services {
        let _ = writeln!(
            out,
            "nacre_service_inline_requests_total{{service=\"{}\"}} {}",
            escape(service),
            pool.requests_inline.load(Ordering::Relaxed)
        );
    }
    for family in &src.extra {
        family(&mut out);
    }
    out.push_str("# EOF\n");
    out
}

/// The answer to one HTTP request: the metrics for `GET /metrics`, 404 otherwise.
fn answer(
    src: &Sources,
    req: &hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let (status, ctype, body) =
        if req.method() == hyper::Method::GET && req.uri().path() == "/metrics" {
            (
                hyper::StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                render(src),
            )
        } else {
            (
                hyper::StatusCode::NOT_FOUND,
                "text/plain",
                "only /metrics is served here\n".to_string(),
            )
        };
    let mut resp = hyper::Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(ctype),
    );
    resp
}

/// Serves `/metrics` on `addr` from a background thread (HTTP/1.1 by `hyper` on a
/// single-threaded runtime): at most [`crate::callers::CALLERS_MAX`] callers at once (further
/// ones wait in the listen backlog), each given [`crate::callers::CALLER_TIMEOUT_MS`] to send
/// its request head and as long again for the whole exchange, request heads of at most
/// [`REQUEST_BYTES_MAX`], one request per connection. Returns the bound address.
pub fn serve(addr: SocketAddr, src: Sources) -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)
        .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let src = Arc::new(src);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || runtime.block_on(accept_loop(listener, src)))?;
    Ok(bound)
}

async fn accept_loop(listener: std::net::TcpListener, src: Arc<Sources>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("metrics: cannot listen: {e}");
            return;
        }
    };
    let callers = Arc::new(tokio::sync::Semaphore::new(crate::callers::CALLERS_MAX));
    let timeout = Duration::from_millis(crate::callers::CALLER_TIMEOUT_MS);
    loop {
        let Ok(permit) = callers.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors or memory: wait a little rather than spin.
                tracing::warn!("metrics: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let src = src.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let resp = answer(&src, &req);
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(timeout)
                .max_buf_size(REQUEST_BYTES_MAX as usize)
                .keep_alive(false)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            match tokio::time::timeout(timeout * 2, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("metrics request failed: {e}"),
                Err(_) => tracing::debug!("metrics caller timed out"),
            }
        });
    }
}
