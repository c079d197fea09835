//! `nacre quota`: what a user, group or project uses (Lustre's `lfs quota`): blocks on the
//! OSTs, inodes on the MDTs, in total and per target with `-v` (docs/quota.md).

use anyhow::{bail, Context};
use clap::Args;
use nacre_types::{QuotaId, QuotaKind, TargetKind};

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
    /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
    fs: String,
}

/// A user or group given by name or number.
fn id_of(db: nacre_policy::names::Db, what: &str, given: &str) -> anyhow::Result<u32> {
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
    use nacre_policy::names::Db;
    let one = |kind, id| vec![QuotaId { kind, id }];
    Ok(match (&a.user, &a.group, a.project) {
        (Some(u), _, _) => one(QuotaKind::User, id_of(Db::User, "user", u)?),
        (_, Some(g), _) => one(QuotaKind::Group, id_of(Db::Group, "group", g)?),
        (_, _, Some(p)) => one(QuotaKind::Project, p),
        // SAFETY: getuid and getgid cannot fail.
        _ => unsafe {
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
    let mut out = Vec::new();
    for (i, q) in ids.iter().enumerate() {
        let sum = |kind| -> u64 {
            targets
                .iter()
                .filter(|t| t.kind == kind)
                .map(|t| t.usage[i])
                .sum()
        };
        let (bytes, inodes) = (sum(TargetKind::Ost), sum(TargetKind::Mdt));
        if a.json {
            out.push(serde_json::json!({
                "kind": q.kind.name(),
                "id": q.id,
                "bytes": bytes,
                "inodes": inodes,
                "targets": targets.iter().map(|t| serde_json::json!({
                    "target": t.name,
                    if t.kind == TargetKind::Mdt { "inodes" } else { "bytes" }: t.usage[i],
                })).collect::<Vec<_>>(),
            }));
            continue;
        }
        println!("Disk quotas for {} {}:", q.kind.name(), q.id);
        println!("{:>24} {:>12} {:>10}", "Filesystem", "kbytes", "files");
        println!("{:>24} {:>12} {:>10}", a.fs, bytes.div_ceil(1024), inodes);
        if a.verbose {
            for t in &targets {
                let (kb, files) = match t.kind {
                    TargetKind::Mdt => ("-".to_string(), t.usage[i].to_string()),
                    _ => (t.usage[i].div_ceil(1024).to_string(), "-".to_string()),
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
