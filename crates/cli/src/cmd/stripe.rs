//! `nacre setstripe` and `nacre getstripe`: file layouts and directory defaults.

use clap::Args;
use nacre_cli::admin;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct SetstripeArgs {
    /// Stripe count (-1: all OSTs, 0: default).
    #[arg(
        short = 'c',
        long = "stripe-count",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub(crate) count: i64,
    /// Stripe size (K/M/G suffixes; 0: default).
    #[arg(short = 'S', long = "stripe-size", default_value = "0")]
    pub(crate) size: String,
    /// First OST index (-1: chosen by the MDS).
    #[arg(short = 'i', long = "stripe-index", default_value_t = -1, allow_hyphen_values = true)]
    pub(crate) index: i64,
    /// OST pool to allocate in (`nacre pool`); a directory's new files inherit it.
    #[arg(short = 'p', long = "pool")]
    pub(crate) pool: Option<String>,
    /// File or directory.
    pub(crate) path: PathBuf,
}

pub(crate) fn getstripe(paths: &[PathBuf], json: bool) -> anyhow::Result<()> {
    for p in paths {
        let v = admin::layout(p)?;
        if json {
            println!("{v}");
        } else {
            print!("{}", admin::format_layout(p, &v));
        }
    }
    Ok(())
}
