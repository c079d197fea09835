//! `nacre setstripe` and `nacre getstripe`: file layouts, plain or composite (Lustre's
//! progressive file layouts, `-E`), and directory defaults.

use anyhow::{bail, Context};
use clap::{ArgAction, ArgMatches, Args, CommandFactory};
use nacre_cli::admin;
use nacre_cli::size::parse_size;
use std::path::PathBuf;

/// `nacre setstripe` arguments: one striping for the whole file (plain), or with `-E` a
/// composite layout of components by file extent, each `-E END` followed by the options of
/// its component.
#[derive(Args)]
#[command(after_help = SETSTRIPE_AFTER_HELP)]
pub(crate) struct SetstripeArgs {
    /// Start a new component ending at END (K/M/G/T suffixes; -1 or eof: the end of the
    /// file): the -c, -S, -i and -p after it, until the next -E, apply to that component
    /// only (unset: inherited or the default). The last component ends at -1.
    #[arg(
        short = 'E',
        long = "component-end",
        value_name = "END",
        action = ArgAction::Append,
        allow_hyphen_values = true
    )]
    pub(crate) ends: Vec<String>,
    /// Stripe count (-1: all OSTs, 0: default); after an -E, of its component only.
    #[arg(
        short = 'c',
        long = "stripe-count",
        value_name = "COUNT",
        action = ArgAction::Append,
        allow_hyphen_values = true
    )]
    pub(crate) count: Vec<i64>,
    /// Stripe size (K/M/G suffixes; 0: default).
    #[arg(
        short = 'S',
        long = "stripe-size",
        value_name = "SIZE",
        action = ArgAction::Append
    )]
    pub(crate) size: Vec<String>,
    /// First OST index (-1: chosen by the MDS).
    #[arg(
        short = 'i',
        long = "stripe-index",
        value_name = "INDEX",
        action = ArgAction::Append,
        allow_hyphen_values = true
    )]
    pub(crate) index: Vec<i64>,
    /// OST pool to allocate in (`nacre pool`); a directory's new files inherit it.
    #[arg(short = 'p', long = "pool", value_name = "POOL", action = ArgAction::Append)]
    pub(crate) pool: Vec<String>,
    /// Where a component's bytes live, after its -E: `mdt` (data on the MDT: the first
    /// component only, at most 1M, no -c/-S/-i/-p) or `raid0` (striped over OSTs, the
    /// default).
    #[arg(
        short = 'L',
        long = "layout",
        value_name = "PATTERN",
        action = ArgAction::Append
    )]
    pub(crate) pattern: Vec<String>,
    /// File or directory.
    pub(crate) path: PathBuf,
}

/// What `nacre setstripe --help` shows after the options: the composite form.
const SETSTRIPE_AFTER_HELP: &str = "\
Composite layouts (Lustre's progressive file layouts): each -E END starts a component
ending at END, and the -c, -S, -i and -p after it apply to that component only. The first
component starts at 0, each next one where the one before ends, the last ends at -1:

  nacre setstripe -E 4M -c 1 -E 1G -c 4 -S 4M -E -1 -c -1 -p capacity PATH

(the first 4 MiB on one OST, up to 1 GiB over 4 OSTs in 4 MiB stripes, the rest over
every OST of pool 'capacity'). Ends and stripe sizes are multiples of 64 KiB, and each
end a multiple of the stripe sizes of the components on both sides of it.

Data on the MDT (Lustre's DoM): -L mdt puts the first component's bytes on the file's
MDT, up to its end (at most 1M), so a small file is read and written with the MDT alone:

  nacre setstripe -E 64K -L mdt -E -1 -c 4 PATH

Those bytes have one copy, as the MDT has.";

/// `nacre setstripe`: a plain layout from the options, or with `-E` a composite one from
/// the options in the order given.
pub(crate) fn setstripe(a: SetstripeArgs) -> anyhow::Result<()> {
    if a.ends.is_empty() {
        if !a.pattern.is_empty() {
            bail!("-L applies to a component: give it after the -E that starts it");
        }
        return setstripe_plain(&a);
    }
    let components = admin::parse_components(&options_in_order()?).map_err(anyhow::Error::msg)?;
    admin::setstripe_composite(&a.path, &components)
}

/// `nacre setstripe` without `-E`: each option at most once.
fn setstripe_plain(a: &SetstripeArgs) -> anyhow::Result<()> {
    let count = at_most_once("-c", &a.count)?.copied().unwrap_or(0);
    let size = match at_most_once("-S", &a.size)? {
        Some(s) => parse_size(s).map_err(anyhow::Error::msg)?,
        None => 0,
    };
    let index = at_most_once("-i", &a.index)?.copied().unwrap_or(-1);
    let pool = at_most_once("-p", &a.pool)?;
    admin::setstripe(&a.path, count, size, index, pool.map(String::as_str))
}

/// The value of an option given at most once (several: only with -E, one per component).
fn at_most_once<'a, T>(option: &str, values: &'a [T]) -> anyhow::Result<Option<&'a T>> {
    match values {
        [] => Ok(None),
        [v] => Ok(Some(v)),
        _ => bail!(
            "{option} given {} times: a layout of several components takes -E before each \
             component's options (nacre setstripe --help)",
            values.len()
        ),
    }
}

/// The component options of this `nacre setstripe` as option and value pairs in the order
/// given (`-E 1M -c 1 -E -1 -c -1`), for [`admin::parse_components`]: clap keeps the
/// values of each option in order but not the order among options, so the command line
/// is matched again for the values' positions.
fn options_in_order() -> anyhow::Result<Vec<String>> {
    let argv = std::iter::once("nacre".to_string()).chain(crate::command_args());
    let matches = crate::Cli::command().try_get_matches_from(argv)?;
    let m = matches
        .subcommand_matches("setstripe")
        .context("not a nacre setstripe command line")?;
    Ok(ordered_options(m))
}

/// The component options in `m` (setstripe's matches) as option and value pairs, sorted
/// by their position on the command line.
fn ordered_options(m: &ArgMatches) -> Vec<String> {
    let ids = [
        ("ends", "-E"),
        ("count", "-c"),
        ("size", "-S"),
        ("index", "-i"),
        ("pool", "-p"),
        ("pattern", "-L"),
    ];
    let mut found: Vec<(usize, &str, String)> = Vec::new();
    for (id, option) in ids {
        let (Some(at), Some(values)) = (m.indices_of(id), m.get_raw(id)) else {
            continue;
        };
        for (i, v) in at.zip(values) {
            found.push((i, option, v.to_string_lossy().into_owned()));
        }
    }
    found.sort_by_key(|(i, _, _)| *i);
    found
        .into_iter()
        .flat_map(|(_, option, value)| [option.to_string(), value])
        .collect()
}

/// `nacre getstripe`: each path's layout (a file's, or a directory's default) as `lfs
/// getstripe` prints it, plain or composite, or as its JSON.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Clap's matches give the component options back in the order they were given,
    /// whatever their form (`--component-end=1G`, `-c4`).
    #[test]
    fn component_options_come_back_in_command_line_order() {
        let line = [
            "setstripe",
            "-E",
            "4M",
            "-c",
            "1",
            "--component-end=1G",
            "-c4",
            "-S",
            "4M",
            "-E",
            "-1",
            "-c",
            "-1",
            "--pool",
            "capacity",
            "/m/f",
        ];
        let m = SetstripeArgs::augment_args(clap::Command::new("setstripe"))
            .try_get_matches_from(line)
            .unwrap();
        assert_eq!(
            ordered_options(&m),
            [
                "-E", "4M", "-c", "1", "-E", "1G", "-c", "4", "-S", "4M", "-E", "-1", "-c", "-1",
                "-p", "capacity",
            ]
        );
    }
}
