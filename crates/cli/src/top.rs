//! `nacre top`: a live view of the busiest jobs, clients and targets, like lltop.
//!
//! It reads the same OpenMetrics counters `/metrics` serves — from every nacre process of this
//! node over their control sockets, or from the given servers' `/metrics` endpoints — twice an
//! interval apart, and shows the rates in between: bytes read and written, data requests and
//! metadata operations per second, per job (`job_stats`), per client NID (`export_stats`) and
//! per target.

use nacre_server::ctl::{ask_all, CtlRequest};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Longest `/metrics` answer read from one server.
pub const SCRAPE_BYTES_MAX: u64 = 64 << 20;
/// How long one server may take to answer.
pub const SCRAPE_TIMEOUT_MS: u64 = 5_000;

/// What `nacre top` shows and where it looks.
#[derive(Clone, Debug)]
pub struct TopOptions {
    /// Servers' metrics addresses (`host:port`); none: this node's processes, over their
    /// control sockets.
    pub servers: Vec<String>,
    /// Seconds between the two readings a rate is computed from.
    pub interval: Duration,
    /// Screens to show (None: until interrupted).
    pub count: Option<u32>,
    /// Rows per table.
    pub rows: usize,
    /// Only targets of this file system.
    pub fsname: Option<String>,
    /// Plain output (no screen clearing), as for a pipe.
    pub batch: bool,
}

/// Counters of one key (job, client or target).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Activity {
    /// Bytes read.
    pub read_bytes: f64,
    /// Bytes written.
    pub write_bytes: f64,
    /// Requests to OSTs.
    pub data_ops: f64,
    /// Requests to MDTs.
    pub md_ops: f64,
}

impl Activity {
    fn minus(&self, before: &Activity, secs: f64) -> Activity {
        let r = |a: f64, b: f64| ((a - b).max(0.0)) / secs;
        Activity {
            read_bytes: r(self.read_bytes, before.read_bytes),
            write_bytes: r(self.write_bytes, before.write_bytes),
            data_ops: r(self.data_ops, before.data_ops),
            md_ops: r(self.md_ops, before.md_ops),
        }
    }

    fn weight(&self) -> f64 {
        self.read_bytes + self.write_bytes + (self.data_ops + self.md_ops) * 4096.0
    }
}

/// One reading: activity per job, client and target.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    /// Per job id.
    pub jobs: HashMap<String, Activity>,
    /// Per client NID.
    pub clients: HashMap<String, Activity>,
    /// Per target name.
    pub targets: HashMap<String, Activity>,
}

/// Splits `name{a="x",b="y"} value` into its parts; None for comments and malformed lines.
fn parse_sample(line: &str) -> Option<(&str, HashMap<String, String>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    let name = &line[..open];
    let value: f64 = line[close + 1..].trim().parse().ok()?;
    let mut labels = HashMap::new();
    let mut rest = &line[open + 1..close];
    while !rest.is_empty() {
        let eq = rest.find("=\"")?;
        let key = rest[..eq].trim_start_matches(',').to_string();
        let mut val = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => val.push('\n'),
                    Some((_, c)) => val.push(c),
                    None => return None,
                },
                '"' => {
                    end = Some(eq + 2 + i + 1);
                    break;
                }
                c => val.push(c),
            }
        }
        labels.insert(key, val);
        rest = &rest[end?..];
    }
    Some((name, labels, value))
}

/// Adds the counters of one OpenMetrics text to `r`.
pub fn add_metrics(r: &mut Reading, text: &str, fsname: Option<&str>) {
    for line in text.lines() {
        let Some((name, labels, value)) = parse_sample(line) else {
            continue;
        };
        let (table, key) = match name {
            "nacre_target_ops_total" | "nacre_target_op_bytes_total" => (&mut r.targets, "target"),
            "nacre_job_ops_total" | "nacre_job_op_bytes_total" => (&mut r.jobs, "job"),
            "nacre_client_ops_total" | "nacre_client_op_bytes_total" => (&mut r.clients, "client"),
            _ => continue,
        };
        let (Some(target), Some(k), Some(op)) =
            (labels.get("target"), labels.get(key), labels.get("op"))
        else {
            continue;
        };
        if let Some(fs) = fsname {
            if !target.starts_with(&format!("{fs}-")) {
                continue;
            }
        }
        let a = table.entry(k.clone()).or_default();
        let is_mdt = target.contains("-MDT");
        if name.ends_with("_bytes_total") {
            match op.as_str() {
                "read" => a.read_bytes += value,
                "write" => a.write_bytes += value,
                _ => {}
            }
        } else if is_mdt {
            a.md_ops += value;
        } else {
            a.data_ops += value;
        }
    }
}

/// Reads `/metrics` from `addr` (`host:port`).
pub fn scrape(addr: &str) -> anyhow::Result<String> {
    use std::net::ToSocketAddrs;
    let sa = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| anyhow::anyhow!("cannot resolve {addr}"))?;
    let timeout = Duration::from_millis(SCRAPE_TIMEOUT_MS);
    let mut s = TcpStream::connect_timeout(&sa, timeout)
        .map_err(|e| anyhow::anyhow!("cannot reach {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut resp = Vec::new();
    s.take(SCRAPE_BYTES_MAX).read_to_end(&mut resp)?;
    let resp = String::from_utf8_lossy(&resp);
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{addr}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        anyhow::bail!("{addr}: {}", head.lines().next().unwrap_or(""));
    }
    Ok(body.to_string())
}

/// One reading of this node's processes and the remote servers.
pub fn read_all(opts: &TopOptions) -> anyhow::Result<Reading> {
    let mut r = Reading::default();
    let fs = opts.fsname.as_deref();
    let req = CtlRequest {
        op: "metrics".into(),
        pattern: String::new(),
        value: None,
    };
    if opts.servers.is_empty() {
        for (_, reply) in ask_all(&req)? {
            for (_, text) in reply.params {
                add_metrics(&mut r, &text, fs);
            }
        }
    }
    for s in &opts.servers {
        add_metrics(&mut r, &scrape(s)?, fs);
    }
    Ok(r)
}

fn table(title: &str, rows: &HashMap<String, Activity>, max: usize) -> String {
    let mut v: Vec<(&String, &Activity)> = rows.iter().filter(|(_, a)| a.weight() > 0.0).collect();
    v.sort_by(|a, b| b.1.weight().total_cmp(&a.1.weight()).then(a.0.cmp(b.0)));
    let mut s = format!(
        "{title:<32} {:>12} {:>12} {:>10} {:>10}\n",
        "read MB/s", "write MB/s", "data op/s", "md op/s"
    );
    for (k, a) in v.iter().take(max) {
        s += &format!(
            "{:<32} {:>12.2} {:>12.2} {:>10.1} {:>10.1}\n",
            k,
            a.read_bytes / 1e6,
            a.write_bytes / 1e6,
            a.data_ops,
            a.md_ops
        );
    }
    if v.is_empty() {
        s += "  (idle)\n";
    }
    s
}

/// The screen for two readings `secs` apart.
pub fn render(before: &Reading, after: &Reading, secs: f64, rows: usize) -> String {
    let rates = |a: &HashMap<String, Activity>, b: &HashMap<String, Activity>| {
        a.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.minus(&b.get(k).copied().unwrap_or_default(), secs),
                )
            })
            .collect::<HashMap<_, _>>()
    };
    let mut s = String::new();
    s += &table("JOB", &rates(&after.jobs, &before.jobs), rows);
    s.push('\n');
    s += &table("CLIENT", &rates(&after.clients, &before.clients), rows);
    s.push('\n');
    s += &table("TARGET", &rates(&after.targets, &before.targets), rows);
    s
}

/// Runs the view.
pub fn run(opts: &TopOptions) -> anyhow::Result<()> {
    let mut before = read_all(opts)?;
    let mut at = Instant::now();
    let mut shown = 0;
    loop {
        std::thread::sleep(opts.interval);
        let after = read_all(opts)?;
        let secs = at.elapsed().as_secs_f64();
        at = Instant::now();
        let body = render(&before, &after, secs, opts.rows);
        let stamp = chrono_like_now();
        let mut out = std::io::stdout().lock();
        if !opts.batch {
            write!(out, "\x1b[H\x1b[2J")?;
        }
        writeln!(
            out,
            "nacre top — {stamp}, over {secs:.1} s, {}\n",
            if opts.servers.is_empty() {
                "this node".to_string()
            } else {
                opts.servers.join(", ")
            }
        )?;
        write!(out, "{body}")?;
        if opts.batch {
            writeln!(out)?;
        }
        out.flush()?;
        before = after;
        shown += 1;
        if opts.count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
    }
}

/// UTC wall-clock time as `HH:MM:SS`.
fn chrono_like_now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!(
        "{:02}:{:02}:{:02} UTC",
        (t / 3600) % 24,
        (t / 60) % 60,
        t % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_escaped_labels_parse() {
        let (name, labels, v) =
            parse_sample(r#"nacre_job_ops_total{target="fs-OST0000",job="a\"b,c",op="write"} 42"#)
                .unwrap();
        assert_eq!(name, "nacre_job_ops_total");
        assert_eq!(labels["job"], "a\"b,c");
        assert_eq!(labels["op"], "write");
        assert_eq!(v, 42.0);
        assert!(parse_sample("# TYPE x counter").is_none());
        assert!(parse_sample("garbage{").is_none());
        assert!(parse_sample(r#"x{a="unterminated} 1"#).is_none());
    }

    #[test]
    fn rates_rank_the_busiest_first() {
        let text = |w: u64, md: u64| {
            format!(
                "nacre_job_op_bytes_total{{target=\"fs-OST0000\",job=\"big\",op=\"write\"}} {w}\n\
                 nacre_job_ops_total{{target=\"fs-OST0000\",job=\"big\",op=\"write\"}} {}\n\
                 nacre_job_ops_total{{target=\"fs-MDT0000\",job=\"small\",op=\"create\"}} {md}\n\
                 nacre_job_ops_total{{target=\"other-MDT0000\",job=\"else\",op=\"create\"}} 99\n",
                w >> 20
            )
        };
        let (mut a, mut b) = (Reading::default(), Reading::default());
        add_metrics(&mut a, &text(0, 0), Some("fs"));
        add_metrics(&mut b, &text(20 << 20, 10), Some("fs"));
        assert!(
            !b.jobs.contains_key("else"),
            "other file systems are left out"
        );
        let screen = render(&a, &b, 2.0, 10);
        let big = screen.lines().position(|l| l.starts_with("big")).unwrap();
        let small = screen.lines().position(|l| l.starts_with("small")).unwrap();
        assert!(big < small, "{screen}");
        let cols: Vec<&str> = screen
            .lines()
            .nth(big)
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(cols, ["big", "0.00", "10.49", "10.0", "0.0"]);
        assert!(screen.contains("CLIENT") && screen.contains("(idle)"));
    }
}
