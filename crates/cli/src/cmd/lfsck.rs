//! `nacre lfsck --namespace`: checks entries, inodes and link counts on every MDT;
//! `nacre lfsck --quota`: checks (and repairs) every target's quota usage.

use anyhow::{bail, Context};

pub(crate) fn lfsck(source: &str, json: bool) -> anyhow::Result<()> {
    let client = crate::cmd::client_of(source)?;
    let fsname = client.fsname().to_string();
    let report = client.lfsck_namespace()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "lfsck namespace of {fsname}: {} inodes, {} entries, {} inconsistencies",
            report.inodes,
            report.dirents,
            report.findings.len()
        );
        for f in &report.findings {
            println!("{:<9} {} {}", f.kind, f.fid, f.detail);
        }
    }
    if !report.findings.is_empty() {
        bail!(
            "{} namespace inconsistencies in {fsname}",
            report.findings.len()
        );
    }
    Ok(())
}

/// `nacre lfsck --quota [--dry-run]`: each target's differences (id, counted, recorded),
/// repaired unless `repair` is false (then differences make it fail).
pub(crate) fn lfsck_quota(source: &str, json: bool, repair: bool) -> anyhow::Result<()> {
    let client = crate::cmd::client_of(source)?;
    let fsname = client.fsname().to_string();
    let checks = client
        .lfsck_quota(repair)
        .with_context(|| format!("quota check of {fsname}"))?;
    let total: u64 = checks.iter().map(|(_, c)| c.diffs_total).sum();
    if json {
        let v: Vec<serde_json::Value> = checks
            .iter()
            .map(|(target, c)| {
                serde_json::json!({
                    "target": target,
                    "ids": c.ids,
                    "differences": c.diffs_total,
                    "repaired": c.repaired,
                    "diffs": c.diffs.iter().map(|(id, counted, recorded)| serde_json::json!({
                        "id": id.to_string(), "counted": counted, "recorded": recorded,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let what = if repair { "repaired" } else { "found" };
        println!("lfsck quota of {fsname}: {total} differences {what}");
        for (target, c) in &checks {
            for (id, counted, recorded) in &c.diffs {
                println!("{target} {id}: counted {counted}, recorded {recorded}");
            }
            let unlisted = c.diffs_total - c.diffs.len() as u64;
            if unlisted > 0 {
                println!("{target}: {unlisted} more");
            }
        }
    }
    if !repair && total > 0 {
        bail!("{total} quota usage differences in {fsname}");
    }
    Ok(())
}
