//! `nacre quota`: what a user, group or project uses (Lustre's `lfs quota`): blocks on the
//! OSTs, inodes on the MDTs, in total and per target with `-v` (docs/quota.md).

use anyhow::{bail, Context};
use clap::Args;
use nacre_types::{QuotaId, QuotaKind, TargetKind};
use nacre_wire::quota::{QuotaEntry, QuotaKey};

/// `nacre quota` arguments.
#[derive(Args, Debug)]
pub(crate) struct QuotaArgs {
    /// A user (name or uid).
    #[arg(short = 'u', long = "user", group = "who")]
    user: Option<String>,
    /// A group (name or gid).
    #[arg(short = 'g', long = "group", group = "who")]
    group: Option<String>,
    /// A project ID.
    #[arg(short = 'p', long = "project", group = "who")]
    project: Option<u32>,
    /// Per MDT and OST too.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Only this OST pool: its OSTs' usage and the id's limits on the pool.
    #[arg(long)]
    pool: Option<String>,
    /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
    fs: String,
}

/// `nacre setquota` arguments.
#[derive(Args, Debug)]
pub(crate) struct SetquotaArgs {
    /// A user (name or uid).
    #[arg(short = 'u', long = "user", group = "who")]
    user: Option<String>,
    /// A group (name or gid).
    #[arg(short = 'g', long = "group", group = "who")]
    group: Option<String>,
    /// A project ID.
    #[arg(short = 'p', long = "project", group = "who")]
    project: Option<u32>,
    /// Grace times instead of an id's limits (`--block-grace`, `--inode-grace`).
    #[arg(short = 't', long = "times", group = "who")]
    times: bool,
    /// Block soft limit (K/M/G/T suffixes; 0: none).
    #[arg(short = 'b', long = "block-softlimit", default_value = "0")]
    block_soft: String,
    /// Block hard limit.
    #[arg(short = 'B', long = "block-hardlimit", default_value = "0")]
    block_hard: String,
    /// Inode soft limit.
    #[arg(short = 'i', long = "inode-softlimit", default_value = "0")]
    inode_soft: String,
    /// Inode hard limit.
    #[arg(short = 'I', long = "inode-hardlimit", default_value = "0")]
    inode_hard: String,
    /// With `-t`: grace time of block soft limits (`90s`, `30m`, `12h`, `1w`; 0: a week).
    #[arg(long, default_value = "0")]
    block_grace: String,
    /// With `-t`: grace time of inode soft limits.
    #[arg(long, default_value = "0")]
    inode_grace: String,
    /// Limits on the blocks of this OST pool's OSTs instead of the whole file system
    /// (Lustre's pool quotas; both apply).
    #[arg(long, conflicts_with = "times")]
    pool: Option<String>,
    /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
    fs: String,
}

/// Longest `nacre setquota` waits for every target to learn the change.
const SYNC_WAIT_MS: u64 = 5_000;

/// Runs `nacre setquota`.
pub(crate) fn setquota(a: SetquotaArgs) -> anyhow::Result<()> {
    use nacre_types::units::{parse_duration_s, parse_size};
    let client = crate::cmd::client_of(&a.fs)?;
    let fsname = client.fsname().to_string();
    let req = if a.times {
        nacre_wire::mgs::MgsRequest::QuotaGrace {
            fsname,
            block_s: parse_duration_s(&a.block_grace).map_err(anyhow::Error::msg)?,
            inode_s: parse_duration_s(&a.inode_grace).map_err(anyhow::Error::msg)?,
        }
    } else {
        let Some(id) = named_id(&a.user, &a.group, a.project)? else {
            bail!("say whose limits: -u USER, -g GROUP, -p PROJECT (or -t for grace times)")
        };
        if id.id == 0 && id.kind != QuotaKind::Project {
            bail!("root's usage is counted but never limited (as in Lustre): no limits for {id}");
        }
        let size = |what: &str, s: &str| parse_size(s).map_err(|e| anyhow::anyhow!("{what}: {e}"));
        let count = |what: &str, s: &str| {
            s.parse::<u64>()
                .map_err(|e| anyhow::anyhow!("{what}: {s}: {e}"))
        };
        let limits = nacre_wire::quota::QuotaLimits {
            block_soft: size("block soft limit", &a.block_soft)?,
            block_hard: size("block hard limit", &a.block_hard)?,
            inode_soft: count("inode soft limit", &a.inode_soft)?,
            inode_hard: count("inode hard limit", &a.inode_hard)?,
        };
        let pool = match &a.pool {
            Some(p) => {
                if limits.inode_soft != 0 || limits.inode_hard != 0 {
                    bail!("a pool's limits are on blocks only (-b, -B): pools are sets of OSTs");
                }
                nacre_types::PoolName::new(p)?
            }
            None => nacre_types::PoolName::NONE,
        };
        nacre_wire::mgs::MgsRequest::QuotaSet {
            fsname,
            key: nacre_wire::quota::QuotaKey { id, pool },
            limits,
        }
    };
    match client.mgs_call(&req) {
        Ok(nacre_wire::mgs::MgsReply::Quotas(v)) if v.unsynced == 0 => Ok(()),
        // Enforced on return: every target has learnt the change (within a second).
        Ok(nacre_wire::mgs::MgsReply::Quotas(_)) => {
            let deadline =
                std::time::Instant::now() + std::time::Duration::from_millis(SYNC_WAIT_MS);
            let ask = nacre_wire::mgs::MgsRequest::QuotaGet {
                fsname: client.fsname().to_string(),
                ids: Vec::new(),
            };
            loop {
                std::thread::sleep(std::time::Duration::from_millis(50));
                match client.mgs_call(&ask) {
                    Ok(nacre_wire::mgs::MgsReply::Quotas(v)) if v.unsynced == 0 => return Ok(()),
                    Ok(nacre_wire::mgs::MgsReply::Quotas(v))
                        if std::time::Instant::now() >= deadline =>
                    {
                        eprintln!(
                            "nacre: set; {} targets have not learnt it yet (unreachable?): they will when they report",
                            v.unsynced
                        );
                        return Ok(());
                    }
                    Ok(nacre_wire::mgs::MgsReply::Quotas(_)) => {}
                    Ok(_) => bail!("unexpected answer from the MGS"),
                    Err(e) => bail!("setquota: {e}"),
                }
            }
        }
        Ok(_) => bail!("unexpected answer from the MGS"),
        Err(e) if e.status() == nacre_types::Status::Perm => {
            bail!("the MGS refuses: administration needs an admin or server key (a client key may not), or without keys an admin nodemap")
        }
        Err(e) if e.status() == nacre_types::Status::Inval => {
            bail!("a soft limit above its hard limit")
        }
        Err(e) if e.status() == nacre_types::Status::NoEnt => {
            bail!(
                "no pool {} in {}",
                a.pool.as_deref().unwrap_or("?"),
                client.fsname()
            )
        }
        Err(e) => bail!("setquota: {e}"),
    }
}

/// The id `-u`, `-g` or `-p` names (`None`: none given).
fn named_id(
    user: &Option<String>,
    group: &Option<String>,
    project: Option<u32>,
) -> anyhow::Result<Option<QuotaId>> {
    use nacre_policy::names::Db;
    let (kind, id) = match (user, group, project) {
        (Some(u), _, _) => (QuotaKind::User, id_of(Db::User, "user", u)?),
        (_, Some(g), _) => (QuotaKind::Group, id_of(Db::Group, "group", g)?),
        (_, _, Some(p)) => (QuotaKind::Project, p),
        _ => return Ok(None),
    };
    Ok(Some(QuotaId { kind, id }))
}

/// A user or group given by name or number.
pub(crate) fn id_of(db: nacre_policy::names::Db, what: &str, given: &str) -> anyhow::Result<u32> {
    if let Ok(n) = given.parse::<u32>() {
        return Ok(n);
    }
    match nacre_policy::names::resolve(db, given) {
        Ok(Some(id)) => Ok(id),
        Ok(None) => bail!("no {what} '{given}' is known here"),
        Err(e) => bail!("{what} {e}"),
    }
}

/// The ids asked for: the one named, or the caller's user and group.
fn ids_of(a: &QuotaArgs) -> anyhow::Result<Vec<QuotaId>> {
    Ok(match named_id(&a.user, &a.group, a.project)? {
        Some(id) => vec![id],
        // SAFETY: getuid and getgid cannot fail.
        None => unsafe {
            vec![
                QuotaId {
                    kind: QuotaKind::User,
                    id: libc::getuid(),
                },
                QuotaId {
                    kind: QuotaKind::Group,
                    id: libc::getgid(),
                },
            ]
        },
    })
}

/// Runs `nacre quota`.
pub(crate) fn quota(a: QuotaArgs) -> anyhow::Result<()> {
    let ids = ids_of(&a)?;
    let client = crate::cmd::client_of(&a.fs)?;
    let targets = client
        .quota_usage(&ids)
        .with_context(|| format!("quota usage of {}", a.fs))?;
    let view = match client.mgs_call(&nacre_wire::mgs::MgsRequest::QuotaGet {
        fsname: client.fsname().to_string(),
        ids: ids.clone(),
    }) {
        Ok(nacre_wire::mgs::MgsReply::Quotas(v)) => v,
        Ok(_) => bail!("unexpected answer from the MGS"),
        Err(e) => bail!("quota limits of {}: {e}", a.fs),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // The grace left of a soft limit passed at `since` ("-": not passed; "none": over).
    let grace_left = |since: u64, grace: u64| -> String {
        if since == 0 {
            "-".into()
        } else {
            match (since + grace).checked_sub(now) {
                Some(left) if left > 0 => format!("{left}s"),
                _ => "none".into(),
            }
        }
    };
    let config = client.fs_config();
    // With --pool: that pool's OSTs only.
    let pool = match &a.pool {
        Some(p) => {
            let name = nacre_types::PoolName::new(p)?;
            let Some(info) = config.pool(name) else {
                bail!("no pool {p} in {}", client.fsname())
            };
            Some((name, info.osts.clone()))
        }
        None => None,
    };
    let members_of = |pool: nacre_types::PoolName| -> Vec<u32> {
        config
            .pool(pool)
            .map(|p| p.osts.clone())
            .unwrap_or_default()
    };
    let entry = |key: QuotaKey| {
        view.entries
            .iter()
            .find(|e| e.key == key)
            .cloned()
            .unwrap_or(QuotaEntry {
                key,
                limits: Default::default(),
                block_soft_since: 0,
                inode_soft_since: 0,
                block_granted: 0,
                inode_granted: 0,
            })
    };
    let mut out = Vec::new();
    for (i, q) in ids.iter().enumerate() {
        let in_pool = |members: &[u32], t: &&nacre_client::QuotaTargetUsage| {
            t.kind != TargetKind::Mdt && members.contains(&t.index)
        };
        let bytes_in = |members: &[u32]| -> u64 {
            targets
                .iter()
                .filter(|t| in_pool(members, t))
                .map(|t| t.bytes[i])
                .sum()
        };
        let (bytes, inodes, e, shown): (u64, Option<u64>, QuotaEntry, Vec<_>) = match &pool {
            Some((name, members)) => (
                bytes_in(members),
                None,
                entry(QuotaKey {
                    id: *q,
                    pool: *name,
                }),
                targets.iter().filter(|t| in_pool(members, t)).collect(),
            ),
            // Bytes: every OST's, and every MDT's data on the MDT.
            None => (
                targets.iter().map(|t| t.bytes[i]).sum(),
                Some(targets.iter().map(|t| t.inodes[i]).sum()),
                entry(QuotaKey::global(*q)),
                targets.iter().collect(),
            ),
        };
        // Without --pool: the id's pool limits after its own.
        let pools: Vec<(QuotaEntry, u64)> = match pool {
            Some(_) => Vec::new(),
            None => view
                .entries
                .iter()
                .filter(|e| e.key.id == *q && !e.key.pool.is_none())
                .map(|e| (e.clone(), bytes_in(&members_of(e.key.pool))))
                .collect(),
        };
        let l = e.limits;
        let bgrace = grace_left(e.block_soft_since, view.block_grace_s);
        let igrace = grace_left(e.inode_soft_since, view.inode_grace_s);
        if a.json {
            let mut v = serde_json::json!({
                "kind": q.kind.name(),
                "id": q.id,
                "bytes": bytes,
                "block_soft": l.block_soft,
                "block_hard": l.block_hard,
                "block_grace": bgrace,
                "block_granted": e.block_granted,
                "targets": shown.iter().map(|t| {
                    let mut v = serde_json::json!({ "target": t.name, "bytes": t.bytes[i] });
                    if t.kind == TargetKind::Mdt {
                        v["inodes"] = t.inodes[i].into();
                    }
                    v
                }).collect::<Vec<_>>(),
            });
            if let Some(inodes) = inodes {
                v["inodes"] = inodes.into();
                v["inode_soft"] = l.inode_soft.into();
                v["inode_hard"] = l.inode_hard.into();
                v["inode_grace"] = igrace.clone().into();
                v["inode_granted"] = e.inode_granted.into();
            }
            if let Some((name, _)) = &pool {
                v["pool"] = name.as_str().into();
            } else {
                v["pools"] = pools
                    .iter()
                    .map(|(p, bytes)| {
                        serde_json::json!({
                            "pool": p.key.pool.as_str(),
                            "bytes": bytes,
                            "block_soft": p.limits.block_soft,
                            "block_hard": p.limits.block_hard,
                            "block_grace": grace_left(p.block_soft_since, view.block_grace_s),
                            "block_granted": p.block_granted,
                        })
                    })
                    .collect::<Vec<_>>()
                    .into();
            }
            out.push(v);
            continue;
        }
        println!("Disk quotas for {} {}:", q.kind.name(), q.id);
        println!(
            "{:>24} {:>12} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>8}",
            "Filesystem", "kbytes", "quota", "limit", "grace", "files", "quota", "limit", "grace"
        );
        let over = |used: u64, soft: u64, hard: u64| {
            if (hard > 0 && used >= hard) || (soft > 0 && used > soft) {
                "*"
            } else {
                ""
            }
        };
        let label = match &pool {
            Some((name, _)) => format!("{} pool {}", a.fs, name.as_str()),
            None => a.fs.clone(),
        };
        let (files, isoft, ihard) = match inodes {
            Some(n) => (
                format!("{n}{}", over(n, l.inode_soft, l.inode_hard)),
                l.inode_soft.to_string(),
                l.inode_hard.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        let igrace = if inodes.is_some() { igrace } else { "-".into() };
        println!(
            "{label:>24} {:>12} {:>10} {:>10} {bgrace:>8} {files:>10} {isoft:>10} {ihard:>10} {igrace:>8}",
            format!(
                "{}{}",
                bytes.div_ceil(1024),
                over(bytes, l.block_soft, l.block_hard)
            ),
            l.block_soft / 1024,
            l.block_hard / 1024,
        );
        for (p, bytes) in &pools {
            let pl = p.limits;
            println!(
                "{:>24} {:>12} {:>10} {:>10} {:>8}",
                format!("pool {}", p.key.pool.as_str()),
                format!(
                    "{}{}",
                    bytes.div_ceil(1024),
                    over(*bytes, pl.block_soft, pl.block_hard)
                ),
                pl.block_soft / 1024,
                pl.block_hard / 1024,
                grace_left(p.block_soft_since, view.block_grace_s),
            );
        }
        if a.verbose {
            for t in &shown {
                let kb = t.bytes[i].div_ceil(1024).to_string();
                let files = match t.kind {
                    TargetKind::Mdt => t.inodes[i].to_string(),
                    _ => "-".to_string(),
                };
                println!("{:>24} {kb:>12} {files:>10}", t.name);
            }
        }
    }
    if a.json {
        println!("{}", serde_json::Value::Array(out));
    }
    Ok(())
}
