//! `setstripe`, `getstripe` and `df`, spoken through a mounted file system's virtual xattrs
//! (as `lfs` speaks through Lustre's `lustre.lov`). Their values are JSON objects
//! (`nacre_fuse::xattr_json`): read by key, other keys (`version` among them) ignored;
//! written with `"version"` [`XATTR_JSON_VERSION`] and only keys the mount's setter takes.

use crate::size::{human, parse_size};
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

/// The `user.nacre.lov` value of a composite `nacre setstripe` (`-E ...`): one entry per
/// component, its end -1 for the end of the file (pool "": none).
fn composite_value(components: &[ComponentArgs]) -> Value {
    let list: Vec<Value> = components
        .iter()
        .map(|c| {
            let mut v = serde_json::json!({
                "end": c.end.map_or(Value::from(-1), Value::from),
                "stripe_count": c.count,
                "stripe_size": c.size,
                "start_ost": c.index,
                "pool": c.pool,
            });
            // Named only where it is not the default, so a mount of before data on the
            // MDT takes every other request as it always has (and refuses this one).
            if c.on_mdt {
                v["pattern"] = Value::from("mdt");
            }
            v
        })
        .collect();
    serde_json::json!({ "version": XATTR_JSON_VERSION, "components": list })
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
    let pool = check_stripe(&df, count, size, start, pool).map_err(anyhow::Error::msg)?;
    set_lov(
        path,
        &setstripe_value(count, size, start, pool.as_deref().unwrap_or("")),
    )
}

/// `nacre setstripe -E END ... -E -1 ...`: sets a composite layout of `components` (from
/// [`parse_components`]) as a directory's default, or on a file (created if absent), each
/// component checked against the file system as [`setstripe`] checks a plain one.
pub fn setstripe_composite(path: &Path, components: &[ComponentArgs]) -> anyhow::Result<()> {
    let df = usage(path)?;
    let checked = check_components(&df, components).map_err(anyhow::Error::msg)?;
    set_lov(path, &composite_value(&checked))
}

/// Sets layout value `spec` on `path` (a file created first if absent).
fn set_lov(path: &Path, spec: &Value) -> anyhow::Result<()> {
    if !path.exists() {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
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

/// Checks a stripe request (count, size, first OST, pool) against the file system whose
/// `df` JSON is `df`; returns its pool without an `FS.` prefix (None: no pool).
fn check_stripe(
    df: &Value,
    count: i64,
    size: u64,
    start: i64,
    pool: Option<&str>,
) -> Result<Option<String>, String> {
    let fsname = df["fsname"].as_str().unwrap_or("?");
    if count < -1 {
        return Err(format!(
            "stripe count {count} is invalid (use -1 for all OSTs)"
        ));
    }
    // `-p FS.POOL` is taken as `-p POOL` (as lfs does).
    let pool = pool
        .filter(|p| !p.is_empty())
        .map(|p| p.strip_prefix(&format!("{fsname}.")).unwrap_or(p));
    match pool {
        None => check_osts(df, count, start)?,
        Some(p) => check_pool(df, count, start, p)?,
    }
    check_stripe_size(size)?;
    Ok(pool.map(str::to_string))
}

/// Checks a stripe count and first OST against every OST of the file system.
fn check_osts(df: &Value, count: i64, start: i64) -> Result<(), String> {
    let fsname = df["fsname"].as_str().unwrap_or("?");
    let osts = target_count(df, "-OST");
    if count > osts as i64 {
        return Err(format!(
            "stripe count {count} exceeds the {osts} OSTs of fs '{fsname}'"
        ));
    }
    if start >= osts as i64 {
        return Err(format!(
            "start OST index {start} does not exist (fs '{fsname}' has {osts} OSTs)"
        ));
    }
    Ok(())
}

/// Checks a stripe count and first OST against the members of pool `pool`.
fn check_pool(df: &Value, count: i64, start: i64, pool: &str) -> Result<(), String> {
    let fsname = df["fsname"].as_str().unwrap_or("?");
    nacre_types::PoolName::new(pool).map_err(|e| e.to_string())?;
    let members =
        pool_members(df, pool).ok_or_else(|| format!("pool {fsname}.{pool} does not exist"))?;
    if members.is_empty() {
        return Err(format!(
            "pool {fsname}.{pool} has no OSTs (nacre pool add {fsname}.{pool} OST...)"
        ));
    }
    if count > members.len() as i64 {
        return Err(format!(
            "stripe count {count} exceeds the {} OSTs of pool {fsname}.{pool}",
            members.len()
        ));
    }
    if start >= 0 && !members.contains(&(start as u64)) {
        return Err(format!(
            "OST index {start} is not in pool {fsname}.{pool} ({members:?})"
        ));
    }
    Ok(())
}

/// The unit of stripe sizes and component ends: 64 KiB.
const STRIPE_UNIT: u64 = 64 * 1024;

/// Checks a stripe size (0: the default).
fn check_stripe_size(size: u64) -> Result<(), String> {
    if size != 0
        && (!size.is_multiple_of(STRIPE_UNIT) || size > u64::from(u32::MAX) - (STRIPE_UNIT - 1))
    {
        return Err(format!(
            "stripe size {size} must be a multiple of 64 KiB, at most 4 GiB"
        ));
    }
    Ok(())
}

/// One component of a composite `nacre setstripe`: an `-E END` and the `-c`, `-S`, `-i`
/// and `-p` after it (until the next `-E`). What is not given is inherited or the file
/// system's default, as in a plain `nacre setstripe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentArgs {
    /// One past its last byte (it starts where the one before ends, the first at 0);
    /// `None`: the end of the file (`-E -1`, `-E eof`).
    pub end: Option<u64>,
    /// Stripe count (`-c`; -1: all OSTs of its pool, 0: default).
    pub count: i64,
    /// Stripe size in bytes (`-S`; 0: default).
    pub size: u64,
    /// First OST index (`-i`; -1: chosen by the MDS).
    pub index: i64,
    /// OST pool (`-p`; "": none).
    pub pool: String,
    /// On the MDT (`-L mdt`, data on the MDT: the first component only, at most 1 MiB, no
    /// striping options); `-L raid0` (the default): striped over OSTs.
    pub on_mdt: bool,
}

impl ComponentArgs {
    /// A component ending at `end` (None: the end of the file), every other setting unset.
    pub fn ending(end: Option<u64>) -> ComponentArgs {
        ComponentArgs {
            end,
            count: 0,
            size: 0,
            index: -1,
            pool: String::new(),
            on_mdt: false,
        }
    }
}

/// Parses the component options of a composite `nacre setstripe`, given in command-line
/// order as option and value pairs (`["-E", "1M", "-c", "1", "-E", "-1", "-c", "-1"]`;
/// `-E`, `-c`, `-S`, `-i`, `-p`, `-L` or their long names). Each `-E END` (a size with a K/M/G/T
/// suffix, or `-1`/`eof` for the end of the file) starts a component; the options after it,
/// until the next `-E`, apply to that component only. Refused: an option before the first
/// `-E` or given twice in a component, ends that do not rise, an end not a multiple of
/// 64 KiB or of the stripe size of the component it ends or the one it starts, a bad stripe
/// size, a last component not ending at `-1`, and a component on the MDT (`-L mdt`) that is
/// not the first, ends past 1 MiB or has striping options.
pub fn parse_components(args: &[String]) -> Result<Vec<ComponentArgs>, String> {
    let mut components: Vec<ComponentArgs> = Vec::new();
    let mut given: Vec<&'static str> = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let option = component_option(flag)
            .ok_or_else(|| format!("{flag} is not a component option (-E, -c, -S, -i, -p, -L)"))?;
        if option == "-E" {
            components.push(ComponentArgs::ending(parse_end(value)?));
            given.clear();
            continue;
        }
        let n = components.len();
        if n == 0 {
            return Err(format!(
                "-c/-S/-i/-p/-L before the first -E ({flag} {value}): with -E, each applies to \
                 the component the -E before it starts"
            ));
        }
        if given.contains(&option) {
            return Err(format!("component {n}: {option} given twice"));
        }
        given.push(option);
        set_component_option(&mut components[n - 1], option, value)
            .map_err(|e| format!("component {n}: {e}"))?;
    }
    check_extents(&components)?;
    Ok(components)
}

/// The short name of a component option (`--stripe-count`: `-c`), if `flag` is one.
fn component_option(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "-E" | "--component-end" => "-E",
        "-c" | "--stripe-count" => "-c",
        "-S" | "--stripe-size" => "-S",
        "-i" | "--stripe-index" => "-i",
        "-p" | "--pool" => "-p",
        "-L" | "--layout" => "-L",
        _ => return None,
    })
}

/// The end an `-E` names: None for the end of the file (`-1`, `eof`).
fn parse_end(value: &str) -> Result<Option<u64>, String> {
    let value = value.trim();
    if value == "-1" || value.eq_ignore_ascii_case("eof") {
        return Ok(None);
    }
    parse_size(value).map(Some).map_err(|_| {
        format!("-E {value}: an end is a size (K/M/G/T suffixes), or -1 for the end of the file")
    })
}

/// Sets `option` (`-c`, `-S`, `-i` or `-p`) of component `c` to `value`.
fn set_component_option(c: &mut ComponentArgs, option: &str, value: &str) -> Result<(), String> {
    match option {
        "-c" => {
            c.count = value
                .trim()
                .parse()
                .map_err(|_| format!("bad stripe count '{value}'"))?
        }
        "-S" => c.size = parse_size(value)?,
        "-L" => {
            c.on_mdt = match value.trim() {
                "mdt" => true,
                "raid0" => false,
                other => return Err(format!("-L {other}: a layout is mdt or raid0")),
            }
        }
        "-i" => {
            c.index = value
                .trim()
                .parse()
                .map_err(|_| format!("bad stripe index '{value}'"))?
        }
        _ => c.pool = value.to_string(),
    }
    Ok(())
}

/// Checks the components' extents: 1 to `COMPONENTS_MAX`, ends rising, each a multiple of
/// 64 KiB and of its component's stripe size (as is its start), the last to the end of the
/// file.
fn check_extents(components: &[ComponentArgs]) -> Result<(), String> {
    let max = nacre_types::layout::COMPONENTS_MAX;
    if components.is_empty() || components.len() > max {
        return Err(format!(
            "a composite layout has 1 to {max} components (-E END ...), not {}",
            components.len()
        ));
    }
    let mut start = 0;
    for (i, c) in components.iter().enumerate() {
        let name = component_name(i, start, c.end);
        let after_mdt = i == 1 && components[0].on_mdt;
        check_extent(start, c, after_mdt).map_err(|e| format!("{name}: {e}"))?;
        match c.end {
            Some(end) => start = end,
            None if i + 1 < components.len() => {
                return Err(format!(
                    "{name}: only the last component may end at -1 (the end of the file)"
                ))
            }
            None => return Ok(()),
        }
    }
    Err(format!(
        "the last component ends at {}: it must end at -1 (-E -1, the end of the file)",
        short_size(start)
    ))
}

/// Checks one component's stripe size and its extent from `start`.
fn check_extent(start: u64, c: &ComponentArgs, after_mdt: bool) -> Result<(), String> {
    check_stripe_size(c.size)?;
    if c.on_mdt {
        let max = nacre_types::layout::DOM_BYTES_MAX;
        if start != 0 {
            return Err("-L mdt: only the first component may be on the MDT".to_string());
        }
        match c.end {
            Some(end) if end <= max => {}
            _ => {
                return Err(format!(
                    "-L mdt: a component on the MDT ends at most at {} (-E {})",
                    max,
                    short_size(max)
                ))
            }
        }
        if c.count != 0 || c.size != 0 || c.index != -1 || !c.pool.is_empty() {
            return Err("-L mdt: a component on the MDT takes no -c, -S, -i or -p".to_string());
        }
    }
    if let Some(end) = c.end {
        if end <= start {
            return Err(format!(
                "end {end} does not rise above its start {start} (ends must rise)"
            ));
        }
        if !end.is_multiple_of(STRIPE_UNIT) {
            return Err(format!("end {end} is not a multiple of 64 KiB"));
        }
    }
    if c.size != 0 {
        // After a component on the MDT, the start may be inside the first stripe.
        let start = Some(start).filter(|_| !after_mdt);
        for (what, at) in [("start", start), ("end", c.end)] {
            if let Some(at) = at.filter(|at| !at.is_multiple_of(c.size)) {
                return Err(format!(
                    "{what} {at} is not a multiple of its stripe size {}",
                    c.size
                ));
            }
        }
    }
    Ok(())
}

/// Checks each component against the file system whose `df` JSON is `df`, as a plain
/// request is, its errors naming the component; returns them with their pools without an
/// `FS.` prefix.
fn check_components(
    df: &Value,
    components: &[ComponentArgs],
) -> Result<Vec<ComponentArgs>, String> {
    let mut start = 0;
    let mut checked = Vec::with_capacity(components.len());
    for (i, c) in components.iter().enumerate() {
        if c.on_mdt {
            checked.push(c.clone());
            start = c.end.unwrap_or(u64::MAX);
            continue;
        }
        let pool = check_stripe(df, c.count, c.size, c.index, Some(c.pool.as_str()))
            .map_err(|e| format!("{}: {e}", component_name(i, start, c.end)))?;
        checked.push(ComponentArgs {
            pool: pool.unwrap_or_default(),
            ..c.clone()
        });
        start = c.end.unwrap_or(u64::MAX);
    }
    Ok(checked)
}

/// How errors name component `i` (from 0) of extent `start..end`: `component 2 (1M..1G)`.
fn component_name(i: usize, start: u64, end: Option<u64>) -> String {
    let end = end.map_or_else(|| "EOF".to_string(), short_size);
    format!("component {} ({}..{end})", i + 1, short_size(start))
}

/// `bytes` with the largest binary suffix that divides it (`1M`, `64K`, `1000`).
fn short_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| bytes != 0 && bytes.is_multiple_of(*unit))
        .map_or_else(
            || bytes.to_string(),
            |(unit, suffix)| format!("{}{suffix}", bytes / unit),
        )
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

mod getstripe;
#[cfg(test)]
mod tests;

pub use getstripe::{format_layout, layout};
