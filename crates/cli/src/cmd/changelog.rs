//! `nacre changelog register|read|clear|deregister|users` (Lustre's `lctl
//! changelog_register`, `lfs changelog`, `lfs changelog_clear`, `lctl
//! changelog_deregister`), `nacre fid2path` and `nacre path2fid`.
//!
//! A file system is named by `MGS_NID:/FSNAME` or by a path inside a Nacre mount (whose MGS
//! and name the mount tells). These are root's commands, as in Lustre.

use super::*;
use anyhow::{bail, Context};
use clap::Subcommand;
use nacre_client::Client;
use nacre_types::Fid;
use std::path::Path;
use std::sync::Arc;

/// Records asked for per read.
const READ_BATCH_RECORDS: u32 = 4096;
/// Pause of `read --follow` when no record is new.
const FOLLOW_POLL_MS: u64 = 200;

#[derive(Subcommand)]
pub(crate) enum ChangelogCommand {
    /// Register a consumer: the MDT records changes from now on and keeps them until every
    /// consumer cleared them. Prints its id (`cl1`).
    Register {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// The MDT (index).
        #[arg(long, default_value_t = 0)]
        mdt: u32,
        /// A name for people.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Print records (`lfs changelog`): from `--from`, or after what `--user` cleared, or
    /// from the oldest kept.
    Read {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// The MDT (index).
        #[arg(long, default_value_t = 0)]
        mdt: u32,
        /// The consumer reading (`cl1`).
        #[arg(long)]
        user: Option<String>,
        /// First record.
        #[arg(long, default_value_t = 0)]
        from: u64,
        /// Most records to print (default: all there are).
        #[arg(long)]
        count: Option<u64>,
        /// Keep printing new records as they come.
        #[arg(short, long)]
        follow: bool,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// A consumer is done with the records up to `ENDREC` (0: all so far); records every
    /// consumer is done with are freed (`lfs changelog_clear`).
    Clear {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// The MDT (index).
        #[arg(long, default_value_t = 0)]
        mdt: u32,
        /// The consumer (`cl1`).
        user: String,
        /// Last record done with.
        endrec: u64,
    },
    /// Deregister a consumer (its records are freed).
    Deregister {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// The MDT (index).
        #[arg(long, default_value_t = 0)]
        mdt: u32,
        /// The consumer (`cl1`).
        user: String,
    },
    /// The consumers and the records kept, per MDT.
    Users {
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
        /// Only this MDT (index).
        #[arg(long)]
        mdt: Option<u32>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// How long a command waits for the MDTs to take its goodbye.
const DISCONNECT_WAIT_MS: u64 = 5_000;

/// A native client for one command, disconnected when the command ends: the MDTs forget
/// it at once (a restart then waits for no replay of a process that is gone).
pub(crate) struct OneShot(Arc<Client>);

impl std::ops::Deref for OneShot {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.0
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        self.0
            .disconnect(std::time::Duration::from_millis(DISCONNECT_WAIT_MS));
    }
}

/// A native client of the file system `fs` names.
pub(crate) fn client_of(fs: &str) -> anyhow::Result<OneShot> {
    let (nid, fsname) = if fs.contains(":/") {
        parse_source(fs)?
    } else {
        let df = crate::admin::usage(Path::new(fs))?;
        let mgs = df["mgs"]
            .as_str()
            .context("the mount does not tell its MGS (an older nacre mount)")?;
        let name = df["fsname"].as_str().context("the mount has no fsname")?;
        (mgs.parse()?, name.to_string())
    };
    Ok(OneShot(Client::mount(
        nid,
        &fsname,
        nacre_client::ClientConfig::default(),
    )?))
}

/// `cl3` (or `3`) → 3.
fn user_id(user: &str) -> anyhow::Result<u32> {
    let n = user.strip_prefix("cl").unwrap_or(user);
    match n.parse::<u32>() {
        Ok(id) if id > 0 => Ok(id),
        _ => bail!("bad changelog user '{user}': expected clN, e.g. cl1"),
    }
}

pub(crate) fn changelog(cmd: ChangelogCommand) -> anyhow::Result<()> {
    match cmd {
        ChangelogCommand::Register { fs, mdt, name } => {
            let c = client_of(&fs)?;
            let id = c.changelog_register(mdt, &name)?;
            println!("cl{id}");
        }
        ChangelogCommand::Read {
            fs,
            mdt,
            user,
            from,
            count,
            follow,
            json,
        } => {
            let c = client_of(&fs)?;
            let user = user.as_deref().map(user_id).transpose()?.unwrap_or(0);
            read(&c, mdt, user, from, count, follow, json)?;
        }
        ChangelogCommand::Clear {
            fs,
            mdt,
            user,
            endrec,
        } => client_of(&fs)?.changelog_clear(mdt, user_id(&user)?, endrec)?,
        ChangelogCommand::Deregister { fs, mdt, user } => {
            client_of(&fs)?.changelog_deregister(mdt, user_id(&user)?)?
        }
        ChangelogCommand::Users { fs, mdt, json } => {
            let c = client_of(&fs)?;
            let mdts = match mdt {
                Some(m) => vec![m],
                None => c.mdt_indexes(),
            };
            let mut all = Vec::new();
            for m in mdts {
                let u = c.changelog_users(m)?;
                let target = format!("{}-MDT{m:04x}", c.fsname());
                if json {
                    all.push(serde_json::json!({
                        "mdt": target,
                        "first": u.first,
                        "current_index": u.next.saturating_sub(1),
                        "users": u.users.iter().map(|x| serde_json::json!({
                            "id": format!("cl{}", x.id), "name": x.name,
                            "cleared": x.cleared, "idle_ms": x.idle_ms,
                        })).collect::<Vec<_>>(),
                    }));
                    continue;
                }
                println!("{target}: current index {}", u.next.saturating_sub(1));
                println!(
                    "{:<8} {:<16} {:>12} {:>10}",
                    "ID", "NAME", "CLEARED", "IDLE_S"
                );
                for x in u.users {
                    println!(
                        "{:<8} {:<16} {:>12} {:>10}",
                        format!("cl{}", x.id),
                        if x.name.is_empty() { "-" } else { &x.name },
                        x.cleared,
                        x.idle_ms / 1000
                    );
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            }
        }
    }
    Ok(())
}

fn read(
    c: &Client,
    mdt: u32,
    user: u32,
    from: u64,
    count: Option<u64>,
    follow: bool,
    json: bool,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut left = count.unwrap_or(u64::MAX);
    let mut from = from;
    while left > 0 {
        let ask = left.min(u64::from(READ_BATCH_RECORDS)) as u32;
        let (records, next) = c.changelog_read(mdt, user, from, ask)?;
        for r in &records {
            if json {
                writeln!(out, "{}", record_json(r))?;
            } else {
                writeln!(out, "{}", r.to_line())?;
            }
        }
        left -= records.len() as u64;
        let more = next > from && !records.is_empty();
        from = next.max(from);
        if !more {
            if !follow {
                break;
            }
            out.flush()?;
            std::thread::sleep(std::time::Duration::from_millis(FOLLOW_POLL_MS));
        }
    }
    out.flush()?;
    Ok(())
}

/// A record as JSON (names as UTF-8, lossily).
pub(crate) fn record_json(r: &nacre_wire::mds::changelog::ChangelogRecord) -> serde_json::Value {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    serde_json::json!({
        "index": r.index,
        "type": r.kind.short_name(),
        "flags": r.flags,
        "time": format!("{}.{:09}", r.time.sec, r.time.nsec),
        "target": r.target.to_string(),
        "parent": r.parent.to_string(),
        "name": lossy(&r.name),
        "source": r.source.as_ref().map(|s| serde_json::json!({
            "fid": s.fid.to_string(), "parent": s.parent.to_string(), "name": lossy(&s.name),
        })),
        "xattr": lossy(&r.xattr),
        "uid": r.uid,
        "gid": r.gid,
        "jobid": r.jobid,
    })
}

/// `nacre fid2path FS FID...`: each FID's path from the file system's root (under the
/// mount point when `FS` is one).
pub(crate) fn fid2path(fs: &str, fids: &[String]) -> anyhow::Result<()> {
    let c = client_of(fs)?;
    let prefix = match fs.contains(":/") {
        true => String::new(),
        false => mount_root(Path::new(fs))?,
    };
    let mut failed = 0;
    for f in fids {
        let fid: Fid = f
            .parse()
            .map_err(|e| anyhow::anyhow!("bad FID '{f}': {e}"))?;
        match c.fid2path(fid) {
            Ok(p) => println!("{prefix}/{}", String::from_utf8_lossy(&p)),
            Err(e) => {
                eprintln!("nacre: fid2path {fid}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} FIDs have no path", fids.len());
    }
    Ok(())
}

/// The mount point of the Nacre mount holding `path` (the deepest that contains it).
pub(crate) fn mount_root(path: &Path) -> anyhow::Result<String> {
    let abs = std::fs::canonicalize(path)?;
    let root = nacre_server::daemon::nacre_mounts()
        .into_iter()
        .map(|(dir, _)| dir)
        .filter(|dir| abs.starts_with(dir))
        .max_by_key(|dir| dir.as_os_str().len())
        .with_context(|| format!("{} is not in a Nacre mount", path.display()))?;
    Ok(root.display().to_string().trim_end_matches('/').to_string())
}

/// `nacre path2fid PATH...`: the FID of each file of a Nacre mount.
pub(crate) fn path2fid(paths: &[std::path::PathBuf]) -> anyhow::Result<()> {
    for p in paths {
        let fid = crate::admin::getxattr(p, nacre_fuse::XATTR_FID)
            .with_context(|| format!("{} is not on a Nacre file system", p.display()))?;
        println!("{}", String::from_utf8_lossy(&fid));
    }
    Ok(())
}
