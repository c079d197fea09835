//! `nacre mkfs`: formats an MGS, MDT or OST directory.

use anyhow::bail;
use clap::Args;
use nacre_osd::Label;
use nacre_types::{Nid, TargetKind};
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct MkfsArgs {
    /// Format a management target.
    #[arg(long, group = "kind")]
    pub(crate) mgs: bool,
    /// Format a metadata target.
    #[arg(long, group = "kind")]
    pub(crate) mdt: bool,
    /// Format an object storage target.
    #[arg(long, group = "kind")]
    pub(crate) ost: bool,
    /// Target index.
    #[arg(long, default_value_t = 0)]
    pub(crate) index: u32,
    /// File system name.
    #[arg(long)]
    pub(crate) fsname: String,
    /// MGS NID (e.g. 10.0.0.1@tcp).
    #[arg(long)]
    pub(crate) mgsnode: Option<Nid>,
    /// A server that may serve this target (repeat for each server of its failover pair,
    /// as Lustre's `--servicenode`); enables multi-mount protection.
    #[arg(long = "servicenode")]
    pub(crate) servicenodes: Vec<Nid>,
    /// Overwrite an existing label.
    #[arg(long)]
    pub(crate) reformat: bool,
    /// Target directory.
    pub(crate) dir: PathBuf,
}

pub(crate) fn mkfs(a: MkfsArgs) -> anyhow::Result<()> {
    let kind = match (a.mgs, a.mdt, a.ost) {
        (true, _, _) => TargetKind::Mgt,
        (_, true, _) => TargetKind::Mdt,
        (_, _, true) => TargetKind::Ost,
        _ => bail!("give one of --mgs, --mdt, --ost"),
    };
    if kind != TargetKind::Mgt && a.mgsnode.is_none() {
        bail!("--mgsnode is required for an {}", kind.as_str());
    }
    let mut label = Label::new(kind, a.index, &a.fsname, a.mgsnode)?;
    if !a.servicenodes.is_empty() {
        if kind == TargetKind::Mgt {
            bail!("--servicenode: an MGS target does not fail over");
        }
        if a.servicenodes.len() > nacre_osd::label::SERVICENODES_MAX {
            bail!(
                "at most {} --servicenode",
                nacre_osd::label::SERVICENODES_MAX
            );
        }
        label.servicenodes = a.servicenodes.clone();
    }
    label.write(&a.dir, a.reformat)?;
    println!(
        "formatted {} (uuid {}) in {}",
        label.name(),
        label.uuid,
        a.dir.display()
    );
    Ok(())
}
