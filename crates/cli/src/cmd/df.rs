//! `nacre df`: usage per MDT and OST, like `lfs df`.

use anyhow::bail;
use nacre_cli::admin;
use nacre_server::daemon;
use std::path::PathBuf;

pub(crate) fn df(
    path: Option<PathBuf>,
    human: bool,
    inodes: bool,
    json: bool,
) -> anyhow::Result<()> {
    let mounts: Vec<PathBuf> = match path {
        Some(p) => vec![p],
        None => daemon::nacre_mounts().into_iter().map(|(p, _)| p).collect(),
    };
    if mounts.is_empty() {
        bail!("no Nacre file system is mounted");
    }
    for m in mounts {
        let v = admin::usage(&m)?;
        if json {
            println!("{v}");
        } else {
            println!("{}", admin::format_df(&m, &v, human, inodes));
        }
    }
    Ok(())
}
