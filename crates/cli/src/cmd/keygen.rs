//! `nacre keygen`: a new file-system key (Lustre's `lgss_sk -w`).

use clap::Args;
use nacre_net::sec::{FsKey, Level};
use std::path::PathBuf;

/// `nacre keygen FSNAME -o FILE [--level LEVEL]`.
#[derive(Args)]
pub(crate) struct KeygenArgs {
    /// The file system the key is for.
    pub(crate) fsname: String,
    /// Where to write it (made with mode 0600; an existing file is never overwritten).
    #[arg(short = 'o', long)]
    pub(crate) output: PathBuf,
    /// How servers protect connections: none (the handshake proves the key; frames as
    /// they are), integrity (a MAC on every message), bulk (on bulk data too) or privacy
    /// (everything encrypted, AES-256-GCM).
    #[arg(long, default_value = "integrity")]
    pub(crate) level: String,
}

pub(crate) fn keygen(a: KeygenArgs) -> anyhow::Result<()> {
    let level = Level::parse(&a.level).ok_or_else(|| {
        anyhow::anyhow!(
            "--level {}: expected none, integrity, bulk or privacy",
            a.level
        )
    })?;
    let key = FsKey::generate(&a.fsname, level)?;
    key.save(&a.output)?;
    println!(
        "wrote the key of {} (level {level}) to {}: give it to its servers and clients \
         with --key (readable by root only)",
        a.fsname,
        a.output.display()
    );
    Ok(())
}
