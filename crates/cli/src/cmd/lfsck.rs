//! `nacre lfsck --namespace`: checks entries, inodes and link counts on every MDT.

use super::*;
use anyhow::bail;
use nacre_client::Client;

pub(crate) fn lfsck(source: &str, json: bool) -> anyhow::Result<()> {
    let (nid, fsname) = parse_source(source)?;
    let client = Client::mount(nid, &fsname, nacre_client::ClientConfig::default())?;
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
