//! `nacre project`: project IDs of files and directories (Lustre's `lfs project`), spoken
//! through the mount's virtual xattr `user.nacre.project`. A directory with the inherit flag
//! (`-s`, shown `P`) gives its project to every new entry, and the flag to new
//! subdirectories; quotas count a project's blocks and inodes.

use crate::admin::{getxattr, setxattr};
use anyhow::{bail, Context};
use clap::Args;
use nacre_fuse::XATTR_PROJECT;
use std::path::{Path, PathBuf};

/// `nacre project` arguments.
#[derive(Args, Debug)]
pub(crate) struct ProjectArgs {
    /// Set this project ID (root only).
    #[arg(short = 'p', long = "proj-id")]
    project: Option<u32>,
    /// With `-p`: set the inherit flag on directories, so their new entries take the
    /// project.
    #[arg(short = 's', long = "set-inherit", requires = "project")]
    inherit: bool,
    /// Clear: project 0 and no inherit flag (with `-k`, keep the ID).
    #[arg(short = 'C', long, conflicts_with_all = ["project", "check"])]
    clear: bool,
    /// With `-C`: keep the project ID, clear only the inherit flag.
    #[arg(short = 'k', long, requires = "clear")]
    keep: bool,
    /// Check that every file and directory has the directory's project (or `-p`'s) and
    /// every directory the inherit flag; list those that do not, and fail if any.
    #[arg(short = 'c', long)]
    check: bool,
    /// Recurse into directories.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// List a directory itself, not its entries.
    #[arg(short = 'd', long, conflicts_with = "recursive")]
    directory: bool,
    /// Files and directories in a Nacre mount.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
}

/// A file's project and inherit flag.
fn project_of(path: &Path) -> anyhow::Result<(u32, bool)> {
    let v = getxattr(path, XATTR_PROJECT)
        .with_context(|| format!("{}: not on a Nacre file system", path.display()))?;
    let text = String::from_utf8_lossy(&v);
    let mut words = text.split_whitespace();
    let id = words
        .next()
        .and_then(|w| w.parse().ok())
        .with_context(|| format!("{}: bad project value {text:?}", path.display()))?;
    Ok((id, words.next() == Some("inherit")))
}

fn set(path: &Path, id: u32, inherit: Option<bool>) -> anyhow::Result<()> {
    let value = match inherit {
        None => id.to_string(),
        Some(true) => format!("{id} inherit"),
        Some(false) => format!("{id} noinherit"),
    };
    setxattr(path, XATTR_PROJECT, value.as_bytes()).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => {
            anyhow::anyhow!("{}: only root may change projects ({e})", path.display())
        }
        _ => anyhow::anyhow!("{}: {e}", path.display()),
    })
}

/// Regular files and directories at and under `path` (entries only if `depth` > 0, the
/// path itself if `itself`), in walk order; symlinks and special files carry no project of
/// their own here and are skipped.
fn walk(path: &Path, itself: bool, recursive: bool, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| path.display().to_string())?;
    if itself && (meta.is_file() || meta.is_dir()) {
        out.push(path.to_path_buf());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| path.display().to_string())?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .with_context(|| path.display().to_string())?;
    entries.sort();
    for e in entries {
        if recursive {
            walk(&e, true, true, out)?;
        } else {
            let m = std::fs::symlink_metadata(&e).with_context(|| e.display().to_string())?;
            if m.is_file() || m.is_dir() {
                out.push(e);
            }
        }
    }
    Ok(())
}

/// Runs `nacre project`.
pub(crate) fn project(a: ProjectArgs) -> anyhow::Result<()> {
    let mut failed = false;
    for path in &a.paths {
        let is_dir = std::fs::symlink_metadata(path)
            .with_context(|| path.display().to_string())?
            .is_dir();
        if a.check {
            let want = match a.project {
                Some(id) => id,
                None => project_of(path)?.0,
            };
            let mut all = Vec::new();
            walk(path, true, true, &mut all)?;
            for p in all {
                let (id, inherit) = project_of(&p)?;
                let dir = std::fs::symlink_metadata(&p)?.is_dir();
                if id != want || (dir && !inherit) {
                    println!(
                        "{} - project identifier is not set (inode={id}, tree={want}){}",
                        p.display(),
                        if dir && !inherit {
                            ", inherit flag is not set"
                        } else {
                            ""
                        }
                    );
                    failed = true;
                }
            }
            continue;
        }
        let changing = a.project.is_some() || a.clear;
        // Changes apply to the path itself and, with -r, everything under it; listings show
        // a directory's entries unless -d.
        let mut targets = Vec::new();
        if changing {
            walk(path, true, a.recursive, &mut targets)?;
            if !a.recursive {
                targets.truncate(1);
            }
        } else if a.directory || !is_dir {
            targets.push(path.clone());
        } else {
            walk(path, false, a.recursive, &mut targets)?;
        }
        for p in targets {
            let dir = std::fs::symlink_metadata(&p)?.is_dir();
            if let Some(id) = a.project {
                set(&p, id, (a.inherit && dir).then_some(true))?;
            } else if a.clear {
                let id = if a.keep { project_of(&p)?.0 } else { 0 };
                set(&p, id, dir.then_some(false))?;
            } else {
                let (id, inherit) = project_of(&p)?;
                println!(
                    "{id:>5} {} {}",
                    if inherit { 'P' } else { '-' },
                    p.display()
                );
            }
        }
    }
    if failed {
        bail!("some files do not carry the project");
    }
    Ok(())
}
