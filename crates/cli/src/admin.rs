//! `setstripe`, `getstripe` and `df`, spoken through a mounted file system's virtual xattrs
//! (as `lfs` speaks through Lustre's `lustre.lov`). Their values are JSON objects
//! (`nacre_fuse::xattr_json`): read by key, other keys (`version` among them) ignored;
//! written with `"version"` [`XATTR_JSON_VERSION`] and only keys the mount's setter takes.

use crate::size::human;
use anyhow::{bail, Context};
use nacre_fuse::{
    XATTR_DF, XATTR_JSON_VERSION, XATTR_LMV, XATTR_LMV_DEFAULT, XATTR_LOV, XATTR_MIGRATE,
    XATTR_MKDIR,
};
use serde_json::Value;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn cpath(p: &Path) -> anyhow::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).context("path contains a NUL byte")
}

/// Reads an xattr of `path`.
pub fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let p = cpath(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let n = CString::new(name).expect("xattr name");
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: valid C strings and a buffer of the given length.
    let len = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if len < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(len as usize);
    Ok(buf)
}

/// Sets an xattr of `path`.
pub fn setxattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let p = cpath(path).map_err(|e| std::io::Error::other(e.to_string()))?;
    let n = CString::new(name).expect("xattr name");
    // SAFETY: valid C strings and value buffer.
    let rc = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn dir_of(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    }
}

/// Per-target usage of the file system holding `path`.
pub fn usage(path: &Path) -> anyhow::Result<Value> {
    let raw = getxattr(&dir_of(path), XATTR_DF)
        .with_context(|| format!("{} is not on a Nacre file system", path.display()))?;
    Ok(serde_json::from_slice(&raw)?)
}

/// Targets of a kind (`"-OST"`, `"-MDT"`) in a `df` reply.
fn target_count(df: &Value, kind: &str) -> usize {
    df["targets"].as_array().map_or(0, |t| {
        t.iter()
            .filter(|x| x["name"].as_str().is_some_and(|n| n.contains(kind)))
            .count()
    })
}

/// `nacre mkdir [-i MDT]`: a directory, on MDT `mdt` if given (a remote directory, Lustre's
/// `lfs mkdir -i`), else where the parent is.
/// `mdt` -1: the MDS picks the MDT by free inodes (or round-robin, `mkdir_placement`).
pub fn mkdir(path: &Path, mdt: Option<i64>, mode: u32) -> anyhow::Result<()> {
    let Some(mdt) = mdt else {
        use std::os::unix::fs::DirBuilderExt;
        return std::fs::DirBuilder::new()
            .mode(mode)
            .create(path)
            .with_context(|| format!("cannot create directory {}", path.display()));
    };
    let (parent, name) = parent_and_name(path)?;
    let df = usage(&parent)?;
    let want = format!("-MDT{mdt:04x}");
    let mdts: Vec<String> = df["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.contains("-MDT"))
        .map(str::to_string)
        .collect();
    if mdt < -1 {
        bail!("MDT index {mdt}: use 0 or more, or -1 to let the MDS choose");
    }
    if mdt >= 0 && !mdts.iter().any(|n| n.ends_with(&want)) {
        bail!(
            "MDT index {mdt} does not exist (the file system has {} MDTs)",
            mdts.len()
        );
    }
    let value = mkdir_value(name, mdt, mode, None);
    setxattr(&parent, XATTR_MKDIR, value.to_string().as_bytes())
        .with_context(|| format!("cannot create directory {} on MDT{mdt}", path.display()))
}

/// Where directory `path` lives: (its MDT, its stripe count; 0 if not striped).
fn dir_place(path: &Path) -> anyhow::Result<(u64, u64)> {
    let raw = getxattr(path, XATTR_LMV).with_context(|| {
        format!(
            "{} is not a directory on a Nacre file system",
            path.display()
        )
    })?;
    Ok(lmv_place(&serde_json::from_slice(&raw)?))
}

/// (MDT, stripe count) of a `user.nacre.lmv` value.
fn lmv_place(v: &Value) -> (u64, u64) {
    (
        v["mdt"].as_u64().unwrap_or(0),
        v["stripe_count"].as_u64().unwrap_or(0),
    )
}

/// `nacre migrate -m MDT DIR`: moves DIR (and, unless `dir_only`, every directory beneath
/// it) to MDT `mdt` online, with the inodes of their files (like `lfs migrate -m`).
/// Striped directories beneath are skipped with a message; DIR itself must not be striped.
pub fn migrate(path: &Path, mdt: u32, dir_only: bool, verbose: bool) -> anyhow::Result<()> {
    let df = usage(path)?;
    let want = format!("-MDT{mdt:04x}");
    let known = df["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .any(|n| n.ends_with(&want));
    if !known {
        bail!(
            "MDT index {mdt} does not exist (the file system has {} MDTs)",
            target_count(&df, "-MDT")
        );
    }
    if !path.is_dir() {
        bail!(
            "{} is not a directory (nacre migrate -m moves directories)",
            path.display()
        );
    }
    if dir_place(path)?.1 > 0 {
        bail!(
            "{} is striped: migrating striped directories is not supported",
            path.display()
        );
    }
    let (mut moved, mut already, mut skipped) = (0u64, 0u64, 0u64);
    let mut todo = vec![path.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let (at, stripes) = dir_place(&dir)?;
        if stripes > 0 {
            eprintln!("{}: striped, skipped", dir.display());
            skipped += 1;
        } else if at == u64::from(mdt) {
            already += 1;
        } else {
            let (parent, name) = parent_and_name(&dir)?;
            let value = migrate_value(name, mdt);
            setxattr(&parent, XATTR_MIGRATE, value.to_string().as_bytes()).map_err(|e| match e
                .raw_os_error()
            {
                Some(libc::EPERM) => anyhow::anyhow!("migrate {}: only root may", dir.display()),
                _ => anyhow::anyhow!("migrate {} to MDT{mdt}: {e}", dir.display()),
            })?;
            moved += 1;
            if verbose {
                println!("{}: MDT{at:04x} -> MDT{mdt:04x}", dir.display());
            }
        }
        if dir_only {
            continue;
        }
        let mut subdirs = Vec::new();
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let e = e?;
            if e.file_type()?.is_dir() {
                subdirs.push(e.path());
            }
        }
        subdirs.sort();
        todo.extend(subdirs.into_iter().rev());
    }
    println!(
        "migrated {moved} directories to MDT{mdt:04x} ({already} already there, {skipped} striped skipped)"
    );
    Ok(())
}

/// `nacre getdirstripe`: where each directory lives and its stripes, in Lustre's format.
pub fn getdirstripe(paths: &[PathBuf]) -> anyhow::Result<()> {
    for p in paths {
        if !p.is_dir() {
            bail!("{} is not a directory", p.display());
        }
        let raw = getxattr(p, XATTR_LMV)
            .with_context(|| format!("{} is not on a Nacre file system", p.display()))?;
        let v: Value = serde_json::from_slice(&raw)?;
        if paths.len() > 1 {
            println!("{}", p.display());
        }
        print!("{}", format_dirstripe(&v));
    }
    Ok(())
}

/// A `user.nacre.lmv` value as `lfs getdirstripe` prints it.
fn format_dirstripe(v: &Value) -> String {
    let count = v["stripe_count"].as_u64().unwrap_or(0);
    let shards = v["shards"].as_array().cloned().unwrap_or_default();
    let offset = shards
        .first()
        .and_then(|s| s["mdt"].as_u64())
        .or(v["mdt"].as_u64())
        .unwrap_or(0);
    let mut out = format!(
        "lmv_stripe_count: {count} lmv_stripe_offset: {offset} lmv_hash_type: {}\n",
        v["hash"].as_str().unwrap_or("none")
    );
    if count > 0 {
        out += "mdtidx\t\t FID[seq:oid:ver]\n";
        for s in shards {
            out += &format!(
                "{:>6}\t\t {}\n",
                s["mdt"].as_u64().unwrap_or(0),
                s["fid"].as_str().unwrap_or("?")
            );
        }
    }
    out
}

/// `nacre getdirstripe -D`: each directory's default for new subdirectories.
pub fn getdirstripe_default(paths: &[PathBuf]) -> anyhow::Result<()> {
    for p in paths {
        let raw = getxattr(p, XATTR_LMV_DEFAULT).with_context(|| {
            format!("{} is not a directory on a Nacre file system", p.display())
        })?;
        let v: Value = serde_json::from_slice(&raw)?;
        if paths.len() > 1 {
            println!("{}", p.display());
        }
        println!("{}", format_dir_default(&v));
    }
    Ok(())
}

/// A `user.nacre.lmv_default` value as `lfs getdirstripe -D` prints it (one line).
fn format_dir_default(v: &Value) -> String {
    match v["count"].as_i64() {
        Some(c) => format!(
            "lmv_stripe_count: {c} lmv_stripe_offset: {} lmv_hash_type: {} lmv_max_inherit: {}",
            v["start"].as_i64().unwrap_or(-1),
            v["hash"].as_str().unwrap_or("fnv_1a_64"),
            v["max_inherit"].as_i64().unwrap_or(-1)
        ),
        None => "no default".to_string(),
    }
}

/// `nacre setdirstripe -D` arguments.
pub struct DirDefaultArgs<'a> {
    /// Shards (-1: all MDTs).
    pub count: i64,
    /// First MDT (-1: the MDS picks).
    pub start: i64,
    /// Name hash.
    pub hash: Option<&'a str>,
    /// Levels that inherit it (-1: all).
    pub max_inherit: i32,
}

/// `nacre setdirstripe -D` (Some) or `-d` (None) on directory `path`.
pub fn set_dir_default(path: &Path, args: Option<DirDefaultArgs<'_>>) -> anyhow::Result<()> {
    if !path.is_dir() {
        bail!("{} is not a directory", path.display());
    }
    let value = match args {
        None => dir_default_value(None),
        Some(a) => {
            let mdts = target_count(&usage(path)?, "-MDT") as i64;
            if a.count == 0 || a.count < -1 || a.count > mdts {
                bail!(
                    "stripe count {}: the file system has {mdts} MDTs (use 1..={mdts} or -1)",
                    a.count
                );
            }
            if a.start < -1 || a.start >= mdts {
                bail!(
                    "MDT index {} does not exist (the file system has {mdts} MDTs)",
                    a.start
                );
            }
            if a.max_inherit < -1 {
                bail!(
                    "--max-inherit {}: use 0 or more, or -1 for all levels",
                    a.max_inherit
                );
            }
            let hash = a.hash.unwrap_or("fnv_1a_64");
            hash.parse::<nacre_types::dirstripe::DirHash>()
                .map_err(anyhow::Error::msg)?;
            dir_default_value(Some(&a))
        }
    };
    setxattr(path, XATTR_LMV_DEFAULT, value.to_string().as_bytes())
        .with_context(|| format!("cannot set the default of {}", path.display()))
}

/// `nacre mkdir -c COUNT [-i START] [-H HASH]`: a striped directory (`-c -1`: over every
/// MDT; without `-i` the MDS picks the first MDT).
pub fn mkdir_striped(
    path: &Path,
    count: i64,
    start: Option<i64>,
    hash: Option<&str>,
    mode: u32,
) -> anyhow::Result<()> {
    let (parent, name) = parent_and_name(path)?;
    let mdts = target_count(&usage(&parent)?, "-MDT") as i64;
    let count = match count {
        -1 => mdts,
        c if c >= 1 && c <= mdts => c,
        c => bail!("stripe count {c}: the file system has {mdts} MDTs (use 1..={mdts} or -1)"),
    };
    let start = start.unwrap_or(-1);
    if start < -1 || start >= mdts {
        bail!("MDT index {start} does not exist (the file system has {mdts} MDTs)");
    }
    if let Some(h) = hash {
        h.parse::<nacre_types::dirstripe::DirHash>()
            .map_err(anyhow::Error::msg)?;
    }
    let value = mkdir_value(
        name,
        start,
        mode,
        Some((count, hash.unwrap_or("fnv_1a_64"))),
    );
    setxattr(&parent, XATTR_MKDIR, value.to_string().as_bytes())
        .with_context(|| format!("cannot create striped directory {}", path.display()))
}

// The values the commands set: each key one the mount's setter takes
// (`nacre_fuse::xattr_json`), and the version they are written in.

/// The `user.nacre.mkdir` value of a directory `name` on MDT `mdt` (-1: the MDS picks),
/// striped over `(count, hash)` if given.
fn mkdir_value(name: &str, mdt: i64, mode: u32, striped: Option<(i64, &str)>) -> Value {
    let mut v = serde_json::json!({
        "version": XATTR_JSON_VERSION, "name": name, "mdt": mdt, "mode": mode,
    });
    if let Some((count, hash)) = striped {
        v["count"] = count.into();
        v["hash"] = hash.into();
    }
    v
}

/// The `user.nacre.migrate` value moving directory `name` to MDT `mdt`.
fn migrate_value(name: &str, mdt: u32) -> Value {
    serde_json::json!({ "version": XATTR_JSON_VERSION, "name": name, "mdt": mdt })
}

/// The `user.nacre.lmv_default` value of a default (None: removes it).
fn dir_default_value(args: Option<&DirDefaultArgs<'_>>) -> Value {
    match args {
        None => serde_json::json!({ "version": XATTR_JSON_VERSION }),
        Some(a) => serde_json::json!({
            "version": XATTR_JSON_VERSION,
            "count": a.count,
            "start": a.start,
            "hash": a.hash.unwrap_or("fnv_1a_64"),
            "max_inherit": a.max_inherit,
        }),
    }
}

/// The `user.nacre.lov` value `nacre setstripe` sets (pool "": none).
fn setstripe_value(count: i64, size: u64, start: i64, pool: &str) -> Value {
    serde_json::json!({
        "version": XATTR_JSON_VERSION,
        "stripe_count": count,
        "stripe_size": size,
        "start_ost": start,
        "pool": pool,
    })
}

/// The directory a new `path` goes in, and its name.
fn parent_and_name(path: &Path) -> anyhow::Result<(PathBuf, &str)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{}: no directory name", path.display()))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}

/// `nacre setstripe`: sets a directory's default layout, or creates a file with a layout.
pub fn setstripe(
    path: &Path,
    count: i64,
    size: u64,
    start: i64,
    pool: Option<&str>,
) -> anyhow::Result<()> {
    let df = usage(path)?;
    let osts = target_count(&df, "-OST");
    let fsname = df["fsname"].as_str().unwrap_or("?").to_string();
    if count < -1 {
        bail!("stripe count {count} is invalid (use -1 for all OSTs)");
    }
    let pool = pool.filter(|p| !p.is_empty());
    match pool {
        None => {
            if count > osts as i64 {
                bail!("stripe count {count} exceeds the {osts} OSTs of fs '{fsname}'");
            }
            if start >= osts as i64 {
                bail!("start OST index {start} does not exist (fs '{fsname}' has {osts} OSTs)");
            }
        }
        Some(p) => {
            // `-p FS.POOL` is taken as `-p POOL` (as lfs does).
            let p = p.strip_prefix(&format!("{fsname}.")).unwrap_or(p);
            nacre_types::PoolName::new(p)?;
            let members = pool_members(&df, p)
                .with_context(|| format!("pool {fsname}.{p} does not exist"))?;
            if members.is_empty() {
                bail!("pool {fsname}.{p} has no OSTs (nacre pool add {fsname}.{p} OST...)");
            }
            if count > members.len() as i64 {
                bail!(
                    "stripe count {count} exceeds the {} OSTs of pool {fsname}.{p}",
                    members.len()
                );
            }
            if start >= 0 && !members.contains(&(start as u64)) {
                bail!("OST index {start} is not in pool {fsname}.{p} ({members:?})");
            }
        }
    }
    if size != 0 && (!size.is_multiple_of(65536) || size > u64::from(u32::MAX - 65535)) {
        bail!("stripe size {size} must be a multiple of 64 KiB, at most 4 GiB");
    }
    if !path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
    let pool = pool.map(|p| p.strip_prefix(&format!("{fsname}.")).unwrap_or(p));
    let spec = setstripe_value(count, size, start, pool.unwrap_or(""));
    setxattr(path, XATTR_LOV, spec.to_string().as_bytes()).map_err(|e| match e.raw_os_error() {
        Some(libc::EEXIST) => anyhow::anyhow!(
            "cannot change the layout of {}: it already holds data",
            path.display()
        ),
        Some(libc::ENOSPC) => anyhow::anyhow!(
            "setstripe {}: no space in the pool's OSTs (or the pool lost its OSTs)",
            path.display()
        ),
        _ => anyhow::anyhow!("setstripe {}: {e}", path.display()),
    })
}

/// The member OST indices of pool `name` in a `df` JSON, if the pool exists.
pub fn pool_members(df: &Value, name: &str) -> Option<Vec<u64>> {
    df["pools"]
        .as_array()?
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .map(|p| {
            p["osts"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default()
        })
}

/// The layout JSON of `path`.
pub fn layout(path: &Path) -> anyhow::Result<Value> {
    let raw = getxattr(path, XATTR_LOV)
        .with_context(|| format!("{}: cannot read layout", path.display()))?;
    Ok(serde_json::from_slice(&raw)?)
}

/// Formats a layout as `lfs getstripe` does.
pub fn format_layout(path: &Path, v: &Value) -> String {
    let mut s = format!("{}\n", path.display());
    match v["kind"].as_str() {
        Some("file") => {
            let objects = v["objects"].as_array().cloned().unwrap_or_default();
            let first = objects.first().map_or(0, |o| o["ost"].as_u64().unwrap_or(0));
            s += &format!("lmm_stripe_count:  {}\n", v["stripe_count"]);
            s += &format!("lmm_stripe_size:   {}\n", v["stripe_size"]);
            s += "lmm_pattern:       raid0\n";
            s += &format!("lmm_stripe_offset: {first}\n");
            if let Some(pool) = v["pool"].as_str().filter(|p| !p.is_empty()) {
                s += &format!("lmm_pool:          {pool}\n");
            }
            s += "\tobdidx\t\t objid\t\t objid\t\t group\n";
            for o in objects {
                let id = o["id"].as_u64().unwrap_or(0);
                let ost = o["ost"].as_u64().unwrap_or(0);
                let seq = o["seq"].as_u64().unwrap_or(0);
                s += &format!("\t{ost:>6}\t{id:>14}\t{id:>#14x}\t{seq:>14}\n");
            }
        }
        Some("dir") => match v["default"].as_object() {
            Some(d) => {
                let pool = match d.get("pool").and_then(Value::as_str) {
                    Some(p) if !p.is_empty() => format!(" pool:          {p}"),
                    _ => String::new(),
                };
                s += &format!(
                    "stripe_count:  {} stripe_size:   {} pattern:       raid0 stripe_offset: {}{pool}\n",
                    d["stripe_count"], d["stripe_size"], d["start_ost"]
                );
            }
            None => s += "stripe_count:  0 stripe_size:   0 pattern:       raid0 stripe_offset: -1 (file system default)\n",
        },
        _ => s += "(no layout)\n",
    }
    s
}

/// Formats `df` output for one mount like `lfs df`.
pub fn format_df(mount: &Path, df: &Value, human_sizes: bool, inodes: bool) -> String {
    let mut s = String::new();
    let head = if inodes {
        ("Inodes", "IUsed", "IFree", "IUse%")
    } else if human_sizes {
        ("bytes", "Used", "Available", "Use%")
    } else {
        ("1K-blocks", "Used", "Available", "Use%")
    };
    s += &format!(
        "{:<24}{:>12}{:>12}{:>12}{:>6} Mounted on\n",
        "UUID", head.0, head.1, head.2, head.3
    );
    let fmt = |v: u64| {
        if inodes {
            v.to_string()
        } else if human_sizes {
            human(v)
        } else {
            (v / 1024).to_string()
        }
    };
    let mut totals = [0u64; 3];
    for t in df["targets"].as_array().cloned().unwrap_or_default() {
        let name = t["name"].as_str().unwrap_or("?");
        let is_mdt = name.contains("-MDT");
        let (total, free, avail) = if inodes {
            let tot = t["files_total"].as_u64().unwrap_or(0);
            let fr = t["files_free"].as_u64().unwrap_or(0);
            (tot, fr, fr)
        } else {
            (
                t["bytes_total"].as_u64().unwrap_or(0),
                t["bytes_free"].as_u64().unwrap_or(0),
                t["bytes_avail"].as_u64().unwrap_or(0),
            )
        };
        let used = total.saturating_sub(free);
        let pct = if total == 0 {
            0
        } else {
            (used * 100).div_ceil(total)
        };
        let kind = if is_mdt { "MDT" } else { "OST" };
        let index = name
            .rsplit(kind)
            .next()
            .and_then(|i| u32::from_str_radix(i, 16).ok())
            .unwrap_or(0);
        s += &format!(
            "{:<24}{:>12}{:>12}{:>12}{:>5}% {}[{kind}:{index}]\n",
            format!("{name}_UUID"),
            fmt(total),
            fmt(used),
            fmt(avail),
            pct,
            mount.display()
        );
        if is_mdt == inodes {
            totals[0] += total;
            totals[1] += used;
            totals[2] += avail;
        }
    }
    let pct = if totals[0] == 0 {
        0
    } else {
        (totals[1] * 100).div_ceil(totals[0])
    };
    s += &format!(
        "\n{:<24}{:>12}{:>12}{:>12}{:>5}% {}\n",
        "filesystem_summary:",
        fmt(totals[0]),
        fmt(totals[1]),
        fmt(totals[2]),
        pct,
        mount.display()
    );
    s
}

#[cfg(test)]
mod tests;
