//! `nacre mkdir -i/-c`, `nacre migrate -m`, `nacre getdirstripe` and `nacre setdirstripe`:
//! remote, striped and migrated directories (Lustre's `lfs mkdir`, `lfs migrate -m`,
//! `lfs getdirstripe`, `lfs setdirstripe`).

use anyhow::{bail, Context};
use nacre_cli::admin;
use std::path::Path;

/// `nacre mkdir [-i MDT] [-c COUNT [-H HASH]] [-m MODE] PATH`.
pub(crate) fn mkdir(
    path: &Path,
    mdt: Option<i64>,
    count: Option<i64>,
    hash: Option<&str>,
    mode: &str,
) -> anyhow::Result<()> {
    let mode = u32::from_str_radix(mode, 8)
        .with_context(|| format!("bad mode '{mode}': expected octal, e.g. 755"))?;
    match count {
        Some(c) => admin::mkdir_striped(path, c, mdt, hash, mode & 0o7777),
        None if hash.is_some() => bail!("-H needs -c (a striped directory)"),
        None => admin::mkdir(path, mdt, mode & 0o7777),
    }
}

/// `nacre getdirstripe [-D] PATH...`.
pub(crate) fn getdirstripe(paths: &[std::path::PathBuf], default: bool) -> anyhow::Result<()> {
    match default {
        true => admin::getdirstripe_default(paths),
        false => admin::getdirstripe(paths),
    }
}

/// What `nacre setdirstripe` was asked.
pub(crate) struct SetDirStripe<'a> {
    pub(crate) default: bool,
    pub(crate) delete: bool,
    pub(crate) count: i64,
    pub(crate) mdt: Option<i64>,
    pub(crate) hash: Option<&'a str>,
    pub(crate) max_inherit: i32,
}

/// `nacre setdirstripe [-D|-d] -c COUNT [-i MDT] [-H HASH] PATH`: a new striped directory, or
/// (with -D) the default of new subdirectories, or (with -d) no default.
pub(crate) fn setdirstripe(path: &Path, a: SetDirStripe<'_>) -> anyhow::Result<()> {
    if a.delete {
        return admin::set_dir_default(path, None);
    }
    if !a.default {
        return admin::mkdir_striped(path, a.count, a.mdt, a.hash, 0o755);
    }
    admin::set_dir_default(
        path,
        Some(admin::DirDefaultArgs {
            count: a.count,
            start: a.mdt.unwrap_or(-1),
            hash: a.hash,
            max_inherit: a.max_inherit,
        }),
    )
}
