//! `nacre df`: usage per MDT and OST, like `lfs df`.

use anyhow::bail;
use nacre_cli::admin;
use nacre_server::daemon;
use std::path::PathBuf;

/// Keeps in a `df` JSON the MDTs and the OSTs of `pool` (`POOL` or `FS.POOL`).
fn only_pool(v: &mut serde_json::Value, pool: &str) -> anyhow::Result<()> {
    let fsname = v["fsname"].as_str().unwrap_or("?").to_string();
    let name = pool.strip_prefix(&format!("{fsname}.")).unwrap_or(pool);
    let Some(members) = admin::pool_members(v, name) else {
        bail!("pool {fsname}.{name} does not exist");
    };
    if let Some(targets) = v["targets"].as_array_mut() {
        targets.retain(|t| {
            let n = t["name"].as_str().unwrap_or("");
            match n.rsplit_once("-OST") {
                Some((_, i)) => u64::from_str_radix(i, 16).is_ok_and(|i| members.contains(&i)),
                None => true,
            }
        });
    }
    v["pool"] = serde_json::Value::from(name);
    Ok(())
}

pub(crate) fn df(
    path: Option<PathBuf>,
    human: bool,
    inodes: bool,
    json: bool,
    pool: Option<String>,
) -> anyhow::Result<()> {
    let every = path.is_none();
    let mounts: Vec<PathBuf> = match path {
        Some(p) => vec![p],
        None => daemon::nacre_mounts().into_iter().map(|(p, _)| p).collect(),
    };
    if mounts.is_empty() {
        bail!("no Nacre file system is mounted");
    }
    let mut answered = 0;
    let mut last_error = None;
    for m in mounts {
        let mut v = match admin::usage(&m) {
            Ok(v) => v,
            // Of every mount, one that does not answer (its process killed, its mount point
            // left behind) is named and skipped, as `lfs df` does: the others still count.
            Err(e) if every => {
                eprintln!("nacre df: {}: {e:#}", m.display());
                last_error = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        answered += 1;
        if let Some(p) = &pool {
            only_pool(&mut v, p)?;
        }
        if json {
            println!("{v}");
        } else {
            println!("{}", admin::format_df(&m, &v, human, inodes));
        }
    }
    match (answered, last_error) {
        (0, Some(e)) => Err(e.context("no Nacre mount answered")),
        _ => Ok(()),
    }
}
