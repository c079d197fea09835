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
    let mounts: Vec<PathBuf> = match path {
        Some(p) => vec![p],
        None => daemon::nacre_mounts().into_iter().map(|(p, _)| p).collect(),
    };
    if mounts.is_empty() {
        bail!("no Nacre file system is mounted");
    }
    for m in mounts {
        let mut v = admin::usage(&m)?;
        if let Some(p) = &pool {
            only_pool(&mut v, p)?;
        }
        if json {
            println!("{v}");
        } else {
            println!("{}", admin::format_df(&m, &v, human, inodes));
        }
    }
    Ok(())
}
