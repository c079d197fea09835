//! `nacre plan`: checkpoint sizing as Sandia sized Astra's flash tier (Daly's rule for the
//! checkpoint interval, 80% of the machine's memory per checkpoint), and the OSTs and OSS
//! nodes that bandwidth takes, from per-OST rates `nacre bench survey` measured (or given)
//! and the network link of an OSS.

use anyhow::{bail, Context};
use clap::Args;
use nacre_cli::size::parse_size;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct PlanArgs {
    /// Compute nodes that checkpoint at once.
    #[arg(long)]
    pub(crate) nodes: u64,
    /// Memory per node (K/M/G/T, powers of 1024), e.g. 128G.
    #[arg(long = "mem-per-node")]
    pub(crate) mem_per_node: String,
    /// The job's mean time to interrupt, e.g. 72h, 3d, 90m, 3600s.
    #[arg(long)]
    pub(crate) jmtti: String,
    /// Share of the memory a checkpoint writes.
    #[arg(long = "ckpt-fraction", default_value_t = 0.8)]
    pub(crate) ckpt_fraction: f64,
    /// Daly's bound: JMTTI / checkpoint time must exceed this (200 keeps the time lost to
    /// checkpoints and restarts small).
    #[arg(long = "daly-ratio", default_value_t = 200.0)]
    pub(crate) daly_ratio: f64,
    /// Write rate of one OST, bytes per second (K/M/G/T suffixes), e.g. 2G.
    #[arg(long = "ost-write-rate", conflicts_with = "survey")]
    pub(crate) ost_write_rate: Option<String>,
    /// `nacre bench survey --json` output: the slowest OST's write rate is taken.
    #[arg(long)]
    pub(crate) survey: Option<PathBuf>,
    /// OSTs one OSS node serves.
    #[arg(long = "osts-per-oss", default_value_t = 4)]
    pub(crate) osts_per_oss: u64,
    /// Network link of one OSS, bits per second (K/M/G/T, powers of 1000), e.g. 200G.
    #[arg(long = "oss-link")]
    pub(crate) oss_link: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What a plan says.
#[derive(Debug, serde::Serialize, PartialEq)]
pub(crate) struct Plan {
    /// Longest a checkpoint may take, seconds.
    pub(crate) checkpoint_s: f64,
    /// Bytes one checkpoint writes.
    pub(crate) checkpoint_bytes: f64,
    /// Write bandwidth needed, bytes per second.
    pub(crate) bandwidth: f64,
    /// Per-OST write rate used, bytes per second.
    pub(crate) ost_rate: Option<f64>,
    /// OSTs needed.
    pub(crate) osts: Option<u64>,
    /// OSS nodes needed for those OSTs.
    pub(crate) oss_for_osts: Option<u64>,
    /// OSS nodes needed for the network links.
    pub(crate) oss_for_links: Option<u64>,
    /// OSS nodes needed (the larger).
    pub(crate) oss: Option<u64>,
}

/// Seconds in `s`: a number with `s`, `m`, `h` or `d`.
fn parse_duration_s(s: &str) -> anyhow::Result<f64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1.0),
        Some('m') => (&s[..s.len() - 1], 60.0),
        Some('h') => (&s[..s.len() - 1], 3600.0),
        Some('d') => (&s[..s.len() - 1], 86400.0),
        _ => bail!("'{s}': expected a duration such as 72h, 3d, 90m or 3600s"),
    };
    let n: f64 = num
        .parse()
        .with_context(|| format!("'{s}': expected a duration such as 72h"))?;
    if !(n.is_finite() && n > 0.0) {
        bail!("'{s}': the duration must be positive");
    }
    Ok(n * mult)
}

/// Bits per second in `s`: a number with K, M, G or T (powers of 1000), as links are sold.
fn parse_bits(s: &str) -> anyhow::Result<f64> {
    let s = s.trim().trim_end_matches("b/s").trim_end_matches("bps");
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        Some('T') => (&s[..s.len() - 1], 1e12),
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .with_context(|| format!("'{s}': expected a link speed such as 100G"))?;
    if !(n.is_finite() && n > 0.0) {
        bail!("'{s}': the link speed must be positive");
    }
    Ok(n * mult)
}

/// The slowest OST's write rate (bytes/s) in a survey's JSON.
fn survey_rate(text: &str) -> anyhow::Result<f64> {
    let v: serde_json::Value = serde_json::from_str(text).context("not a survey's JSON")?;
    let write = v
        .as_array()
        .and_then(|phases| phases.iter().find(|p| p["op"] == "write"))
        .context("the survey has no write phase")?;
    let slowest = write["per_ost_mib"]
        .as_array()
        .context("the survey has no per-OST rates")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .fold(f64::INFINITY, f64::min);
    if !(slowest.is_finite() && slowest > 0.0) {
        bail!("the survey's write rates are not usable");
    }
    Ok(slowest * (1u64 << 20) as f64)
}

/// What a plan is made from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inputs {
    /// Compute nodes.
    pub(crate) nodes: u64,
    /// Bytes of memory per node.
    pub(crate) mem_per_node: u64,
    /// The job's mean time to interrupt, seconds.
    pub(crate) jmtti_s: f64,
    /// Share of the memory a checkpoint writes.
    pub(crate) fraction: f64,
    /// Daly's ratio.
    pub(crate) daly: f64,
    /// One OST's write rate, bytes/s.
    pub(crate) ost_rate: Option<f64>,
    /// OSTs per OSS.
    pub(crate) osts_per_oss: u64,
    /// An OSS's link, bits/s.
    pub(crate) link_bits: Option<f64>,
}

pub(crate) fn compute(i: Inputs) -> anyhow::Result<Plan> {
    let Inputs {
        nodes,
        mem_per_node,
        jmtti_s,
        fraction,
        daly,
        ost_rate,
        osts_per_oss,
        link_bits,
    } = i;
    if nodes == 0 || mem_per_node == 0 {
        bail!("nodes and memory per node must be positive");
    }
    if !(fraction > 0.0 && fraction <= 1.0) {
        bail!("--ckpt-fraction must be in (0, 1]");
    }
    if !(daly.is_finite() && daly > 0.0) {
        bail!("--daly-ratio must be positive");
    }
    if osts_per_oss == 0 {
        bail!("--osts-per-oss must be positive");
    }
    let checkpoint_s = jmtti_s / daly;
    let checkpoint_bytes = nodes as f64 * mem_per_node as f64 * fraction;
    let bandwidth = checkpoint_bytes / checkpoint_s;
    let osts = ost_rate.map(|r| (bandwidth / r).ceil() as u64);
    let oss_for_osts = osts.map(|o| o.div_ceil(osts_per_oss));
    let oss_for_links = link_bits.map(|b| (bandwidth / (b / 8.0)).ceil() as u64);
    let oss = match (oss_for_osts, oss_for_links) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    Ok(Plan {
        checkpoint_s,
        checkpoint_bytes,
        bandwidth,
        ost_rate,
        osts,
        oss_for_osts,
        oss_for_links,
        oss,
    })
}

fn gib(b: f64) -> f64 {
    b / (1u64 << 30) as f64
}

pub(crate) fn plan(a: PlanArgs) -> anyhow::Result<()> {
    let mem = parse_size(&a.mem_per_node).map_err(anyhow::Error::msg)?;
    let jmtti = parse_duration_s(&a.jmtti)?;
    let ost_rate = match (&a.ost_write_rate, &a.survey) {
        (Some(r), _) => Some(parse_size(r).map_err(anyhow::Error::msg)? as f64),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Some(survey_rate(&text).with_context(|| path.display().to_string())?)
        }
        (None, None) => None,
    };
    let link = a.oss_link.as_deref().map(parse_bits).transpose()?;
    let p = compute(Inputs {
        nodes: a.nodes,
        mem_per_node: mem,
        jmtti_s: jmtti,
        fraction: a.ckpt_fraction,
        daly: a.daly_ratio,
        ost_rate,
        osts_per_oss: a.osts_per_oss,
        link_bits: link,
    })?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
        return Ok(());
    }
    println!(
        "checkpoint time bound: {:.0} s (JMTTI {:.0} s / {})",
        p.checkpoint_s, jmtti, a.daly_ratio
    );
    println!(
        "checkpoint size: {:.1} TiB ({:.0}% of {} nodes x {})",
        gib(p.checkpoint_bytes) / 1024.0,
        a.ckpt_fraction * 100.0,
        a.nodes,
        a.mem_per_node
    );
    println!(
        "write bandwidth needed: {:.1} GiB/s ({:.1} GB/s)",
        gib(p.bandwidth),
        p.bandwidth / 1e9
    );
    match (p.ost_rate, p.osts, p.oss_for_osts) {
        (Some(r), Some(o), Some(s)) => println!(
            "OSTs: {o} at {:.0} MiB/s each (slowest measured, or given); OSS nodes for them: {s} at {} OSTs each",
            r / (1u64 << 20) as f64,
            a.osts_per_oss
        ),
        _ => println!("OSTs: give --ost-write-rate or --survey (nacre bench survey --json)"),
    }
    if let (Some(n), Some(l)) = (p.oss_for_links, &a.oss_link) {
        println!("OSS nodes for the network: {n} at {l}b/s each");
    }
    if let Some(n) = p.oss {
        println!("OSS nodes: {n}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASTRA: Inputs = Inputs {
        nodes: 2592,
        mem_per_node: 128 << 30,
        jmtti_s: 72.0 * 3600.0,
        fraction: 0.8,
        daly: 200.0,
        ost_rate: None,
        osts_per_oss: 4,
        link_bits: None,
    };

    #[test]
    fn astras_numbers() {
        // 2,592 nodes of 128 GiB, JMTTI 72 h: 1,296 s, 204.8 GiB/s.
        let p = compute(ASTRA).unwrap();
        assert!((p.checkpoint_s - 1296.0).abs() < 1e-9);
        assert!(
            (gib(p.bandwidth) - 204.8).abs() < 1e-9,
            "{}",
            gib(p.bandwidth)
        );
        // 2 GiB/s per OST: 103 OSTs, 26 OSS at 4 each; 100 Gb/s links: 18 OSS.
        let p = compute(Inputs {
            ost_rate: Some((2u64 << 30) as f64),
            link_bits: Some(100e9),
            ..ASTRA
        })
        .unwrap();
        assert_eq!((p.osts, p.oss_for_osts), (Some(103), Some(26)));
        assert_eq!(p.oss_for_links, Some(18));
        assert_eq!(p.oss, Some(26));
        assert_eq!(parse_duration_s("3d").unwrap(), 259_200.0);
        assert!(parse_duration_s("72").is_err() && parse_duration_s("-1h").is_err());
        assert_eq!(parse_bits("200G").unwrap(), 200e9);
        assert!(compute(Inputs { nodes: 0, ..ASTRA }).is_err());
        assert!(compute(Inputs {
            fraction: 1.5,
            ..ASTRA
        })
        .is_err());
        let survey = r#"[{"op":"write","total_mib":300.0,"per_ost_mib":[100.0,200.0]}]"#;
        assert_eq!(survey_rate(survey).unwrap(), 100.0 * 1048576.0);
        assert!(survey_rate("[]").is_err() && survey_rate("nope").is_err());
    }
}
