//! `nacre pool`: OST pools, as `lctl pool_new|pool_add|pool_remove|pool_destroy` and `lfs
//! pool_list` keep them. Changes go to the MGS of this node (run them on the MGS node, as
//! `lctl pool_*` are); the MDTs and clients hear of them at once (the MGS's event).

use super::ctl::ctl_ask;
use anyhow::{bail, Context};
use clap::Subcommand;

/// Most OSTs one `OST[...]` range names.
pub const OSTS_PER_RANGE_MAX: usize = 65_536;

#[derive(Subcommand)]
pub(crate) enum PoolCommand {
    /// Make an empty pool: `nacre pool new FS.POOL`.
    New {
        /// `FSNAME.POOL`.
        pool: String,
    },
    /// Add OSTs: `nacre pool add FS.POOL OST[0-3] OST0007 ...`.
    Add {
        /// `FSNAME.POOL`.
        pool: String,
        /// OSTs: `OST0003`, `FS-OST0003`, `FS-OST0003_UUID`, or ranges `OST[0-3,8,10-20/2]`.
        #[arg(required = true)]
        osts: Vec<String>,
    },
    /// Take OSTs out of a pool (files already there stay where they are).
    Remove {
        /// `FSNAME.POOL`.
        pool: String,
        /// OSTs, as for `add`.
        #[arg(required = true)]
        osts: Vec<String>,
    },
    /// Spill new files into another pool while this one is full (Lustre's pool spilling):
    /// `nacre pool spill FS.POOL --to POOL2 --threshold 90`, or `--off`.
    Spill {
        /// `FSNAME.POOL`.
        pool: String,
        /// The pool new files go to instead.
        #[arg(long, required_unless_present = "off")]
        to: Option<String>,
        /// Percent of the pool's space used from which they do (1-100).
        #[arg(long, default_value_t = 90)]
        threshold: u8,
        /// End the pool's spilling.
        #[arg(long, conflicts_with = "to")]
        off: bool,
    },
    /// Remove an empty pool.
    Destroy {
        /// `FSNAME.POOL`.
        pool: String,
    },
    /// List the pools of a file system, or the OSTs of one: `nacre pool list FS[.POOL]`.
    List {
        /// `FSNAME` or `FSNAME.POOL`.
        target: String,
    },
}

/// Splits `FS.POOL` (`POOL` may be absent for `list`).
fn split(arg: &str, need_pool: bool) -> anyhow::Result<(&str, &str)> {
    let (fs, pool) = match arg.split_once('.') {
        Some((fs, pool)) => (fs, pool),
        None => (arg, ""),
    };
    if fs.is_empty() || (need_pool && pool.is_empty()) {
        bail!("'{arg}': expected FSNAME.POOL");
    }
    if !pool.is_empty() {
        nacre_types::PoolName::new(pool)?;
    }
    Ok((fs, pool))
}

/// OST indices named by `arg` (see [`PoolCommand::Add`]).
pub(crate) fn parse_osts(arg: &str) -> anyhow::Result<Vec<u32>> {
    let bad = || format!("'{arg}': expected OSTxxxx (hex) or OST[a-b,c,...] (decimal ranges)");
    let rest = arg.trim_end_matches("_UUID");
    let rest = match rest.find("OST") {
        Some(i) => &rest[i + 3..],
        None => bail!(bad()),
    };
    if let Some(inner) = rest.strip_prefix('[') {
        let inner = inner.strip_suffix(']').with_context(bad)?;
        let mut out = Vec::new();
        for part in inner.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => (
                    r,
                    s.parse::<u32>().ok().filter(|s| *s > 0).with_context(bad)?,
                ),
                None => (part, 1),
            };
            let (a, b) = match range.split_once('-') {
                Some((a, b)) => (a.parse::<u32>(), b.parse::<u32>()),
                None => (range.parse::<u32>(), range.parse::<u32>()),
            };
            let (a, b) = (a.ok().with_context(bad)?, b.ok().with_context(bad)?);
            if a > b {
                bail!(bad());
            }
            for i in (a..=b).step_by(step as usize) {
                if out.len() >= OSTS_PER_RANGE_MAX {
                    bail!("'{arg}': more than {OSTS_PER_RANGE_MAX} OSTs");
                }
                out.push(i);
            }
        }
        return Ok(out);
    }
    if rest.is_empty() || rest.len() > 8 {
        bail!(bad());
    }
    Ok(vec![u32::from_str_radix(rest, 16)
        .ok()
        .with_context(bad)?])
}

pub(crate) fn pool(cmd: PoolCommand) -> anyhow::Result<()> {
    let (verb, target, osts) = match &cmd {
        PoolCommand::New { pool } => ("new", pool, Vec::new()),
        PoolCommand::Add { pool, osts } => ("add", pool, osts.clone()),
        PoolCommand::Remove { pool, osts } => ("remove", pool, osts.clone()),
        PoolCommand::Spill { pool, .. } => ("spill", pool, Vec::new()),
        PoolCommand::Destroy { pool } => ("destroy", pool, Vec::new()),
        PoolCommand::List { target } => ("list", target, Vec::new()),
    };
    let (fs, pool) = split(target, verb != "list")?;
    let value = match &cmd {
        PoolCommand::Spill { off: true, .. } => "off".to_string(),
        PoolCommand::Spill { to, threshold, .. } => {
            let to = to.as_deref().unwrap_or("");
            let to = to.strip_prefix(&format!("{fs}.")).unwrap_or(to);
            nacre_types::PoolName::new(to)?;
            if !(1..=100).contains(threshold) {
                bail!("--threshold must be 1 to 100 (percent of the pool's space used)");
            }
            format!("{to},{threshold}")
        }
        _ => {
            let mut indices = Vec::new();
            for o in &osts {
                indices.extend(parse_osts(o)?);
            }
            indices.sort_unstable();
            indices.dedup();
            let value: Vec<String> = indices.iter().map(u32::to_string).collect();
            value.join(",")
        }
    };
    let request = format!("{verb} {fs} {pool}");
    let mut answers = ctl_ask("pool", request.trim_end(), Some(&value), None)?;
    let answered = answers
        .iter()
        .any(|(k, _)| k == nacre_server::ctl::POOL_ANSWERED);
    answers.retain(|(k, _)| k != nacre_server::ctl::POOL_ANSWERED);
    if !answered {
        bail!("no MGS of file system '{fs}' runs on this node (run nacre pool on the MGS node)");
    }
    match verb {
        "list" if pool.is_empty() => {
            println!("Pools from {fs}:");
            for (name, _) in &answers {
                println!("{name}");
            }
        }
        "list" => {
            println!("Pool: {fs}.{pool}");
            for (_, members) in &answers {
                let (members, spill) = members.split_once(" spill ").unwrap_or((members, ""));
                for i in members.split(',').filter(|m| !m.is_empty()) {
                    let i: u32 = i.parse().unwrap_or(0);
                    println!("{fs}-OST{i:04x}_UUID");
                }
                if let Some((to, pct)) = spill.split_once(' ') {
                    println!("spills into {fs}.{to} above {pct}% used");
                }
            }
        }
        _ => {
            let now = answers
                .iter()
                .find(|(name, _)| *name == format!("{fs}.{pool}"))
                .map(|(_, m)| m.clone());
            match now {
                Some(m) if m.is_empty() || m.starts_with(' ') => {
                    println!(
                        "{fs}.{pool}: no OSTs{}",
                        m.replace(" spill ", ", spills into ")
                    )
                }
                Some(m) => println!(
                    "{fs}.{pool}: OSTs {}",
                    m.replace(" spill ", ", spills into ")
                ),
                None => println!("{fs}.{pool}: destroyed"),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ost_names_and_ranges() {
        assert_eq!(parse_osts("OST000a").unwrap(), vec![10]);
        assert_eq!(parse_osts("demo-OST0003_UUID").unwrap(), vec![3]);
        assert_eq!(parse_osts("OST[0-3]").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(
            parse_osts("demo-OST[1,4-5,10-16/3]").unwrap(),
            vec![1, 4, 5, 10, 13, 16]
        );
        for bad in [
            "",
            "MDT0000",
            "OST",
            "OST[3-1]",
            "OST[1-2",
            "OSTzz",
            "OST[1/0]",
            "OST123456789",
        ] {
            assert!(parse_osts(bad).is_err(), "{bad}");
        }
        assert!(parse_osts("OST[0-4294967295]").is_err(), "bounded");
        assert_eq!(split("demo.flash", true).unwrap(), ("demo", "flash"));
        assert_eq!(split("demo", false).unwrap(), ("demo", ""));
        assert!(split("demo", true).is_err());
        assert!(split("demo.bad.name", true).is_err());
    }
}
