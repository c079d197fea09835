//! `nacre qos add|del|list`: cluster-wide QoS rules (docs/qos.md), kept by the MGS and
//! enforced by every MDT and OST together.

use anyhow::bail;
use clap::Subcommand;
use nacre_wire::mgs::{MgsReply, MgsRequest};
use nacre_wire::qos::{QosRule, QosRules};

/// `nacre qos` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum QosCommand {
    /// Add a rule (or replace the one of its name): each job, user, group, project, client
    /// or operation it matches (each distinct value: a class) is held to `--ops` requests
    /// and `--bytes` bytes per second over every MDT and OST together; requests over the
    /// rate wait. Root on an admin node.
    Add {
        /// The rule's name.
        name: String,
        /// Job id patterns (`*`, `?`).
        #[arg(long = "job")]
        jobs: Vec<String>,
        /// Users (name or uid).
        #[arg(long = "uid")]
        uids: Vec<String>,
        /// Groups (name or gid).
        #[arg(long = "gid")]
        gids: Vec<String>,
        /// Projects (OST requests, by the object's project).
        #[arg(long = "project")]
        projects: Vec<u32>,
        /// Client address ranges (`10.0.0.5`, `10.0.0.0/24`, `10.0.0.5-10.0.0.9`).
        #[arg(long = "nid")]
        nids: Vec<String>,
        /// Operations (`create`, `unlink`, `getattr`, `write`, `read`, ... as `md_stats`
        /// and `stats` name them).
        #[arg(long = "op")]
        ops: Vec<String>,
        /// Requests per second of each class (0: no cap).
        #[arg(long = "ops-rate", default_value = "0")]
        ops_per_s: u64,
        /// Bytes per second of each class (K/M/G suffixes; 0: no cap).
        #[arg(long = "bytes-rate", default_value = "0")]
        bytes_per_s: String,
        /// Seconds of its rate a class may use at once after being idle.
        #[arg(long, default_value = "1")]
        burst: u32,
        /// Weight (1 to 64): while the servers are busy, the rule's requests are served
        /// before unweighted ones, up to this many in a row while those wait (an
        /// interactive job's latency beside a batch job).
        #[arg(long, default_value = "0")]
        weight: u32,
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
    },
    /// Remove a rule.
    Del {
        /// The rule's name.
        name: String,
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
    },
    /// List the rules.
    List {
        /// JSON instead of the table.
        #[arg(long)]
        json: bool,
        /// `MGS_NID:/FSNAME` or a path in a Nacre mount.
        fs: String,
    },
}

/// Runs `nacre qos`.
pub(crate) fn qos(c: QosCommand) -> anyhow::Result<()> {
    use super::quota::id_of;
    use nacre_policy::names::Db;
    let (fs, req) = match c {
        QosCommand::Add {
            name,
            jobs,
            uids,
            gids,
            projects,
            nids,
            ops,
            ops_per_s,
            bytes_per_s,
            burst,
            weight,
            fs,
        } => {
            let rule = QosRule {
                name,
                jobs,
                uids: uids
                    .iter()
                    .map(|u| id_of(Db::User, "user", u))
                    .collect::<anyhow::Result<_>>()?,
                gids: gids
                    .iter()
                    .map(|g| id_of(Db::Group, "group", g))
                    .collect::<anyhow::Result<_>>()?,
                projects,
                nids: nids
                    .iter()
                    .map(|n| nacre_wire::nodemap::NidRange::parse(n).map_err(anyhow::Error::msg))
                    .collect::<anyhow::Result<_>>()?,
                ops,
                ops_per_s,
                bytes_per_s: nacre_types::units::parse_size(&bytes_per_s)
                    .map_err(|e| anyhow::anyhow!("--bytes-rate: {e}"))?,
                burst_s: burst.max(1),
                weight,
            };
            rule.check()?;
            (
                fs,
                MgsRequest::QosSet {
                    fsname: String::new(),
                    rule,
                },
            )
        }
        QosCommand::Del { name, fs } => (
            fs,
            MgsRequest::QosDel {
                fsname: String::new(),
                name,
            },
        ),
        QosCommand::List { json, fs } => {
            let client = crate::cmd::client_of(&fs)?;
            let rules = ask(
                &client,
                MgsRequest::QosGet {
                    fsname: client.fsname().to_string(),
                },
            )?;
            print(&rules, json)?;
            return Ok(());
        }
    };
    let client = crate::cmd::client_of(&fs)?;
    let fsname = client.fsname().to_string();
    let req = match req {
        MgsRequest::QosSet { rule, .. } => MgsRequest::QosSet { fsname, rule },
        MgsRequest::QosDel { name, .. } => MgsRequest::QosDel { fsname, name },
        other => other,
    };
    let rules = ask(&client, req)?;
    print(&rules, false)
}

/// Sends `req` to the MGS; the rules it answers with.
fn ask(client: &nacre_client::Client, req: MgsRequest) -> anyhow::Result<QosRules> {
    let what = match &req {
        MgsRequest::QosSet { rule, .. } => format!("rule {}", rule.name),
        MgsRequest::QosDel { name, .. } => format!("rule {name}"),
        _ => "rules".to_string(),
    };
    match client.mgs_call(&req) {
        Ok(MgsReply::QosRules(r)) => Ok(r),
        Ok(_) => bail!("unexpected answer from the MGS"),
        Err(e) if e.status() == nacre_types::Status::Perm => {
            bail!("the MGS refuses: administration needs an admin or server key (a client key may not), or without keys an admin nodemap")
        }
        Err(e) if e.status() == nacre_types::Status::NoEnt => bail!("no {what}"),
        Err(e) if e.status() == nacre_types::Status::TooBig => {
            bail!(
                "too many rules (at most {})",
                nacre_wire::qos::QOS_RULES_MAX
            )
        }
        Err(e) => bail!("{what}: {e}"),
    }
}

fn print(rules: &QosRules, json: bool) -> anyhow::Result<()> {
    if json {
        let v: Vec<serde_json::Value> = rules
            .rules
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "jobs": r.jobs,
                    "uids": r.uids,
                    "gids": r.gids,
                    "projects": r.projects,
                    "nids": r.nids.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                    "ops": r.ops,
                    "ops_per_s": r.ops_per_s,
                    "bytes_per_s": r.bytes_per_s,
                    "burst_s": r.burst_s,
                    "weight": r.weight,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    for r in &rules.rules {
        let mut what = Vec::new();
        let list =
            |k: &str, v: Vec<String>| (!v.is_empty()).then(|| format!("{k}={}", v.join(",")));
        what.extend(list("job", r.jobs.clone()));
        what.extend(list("uid", r.uids.iter().map(u32::to_string).collect()));
        what.extend(list("gid", r.gids.iter().map(u32::to_string).collect()));
        what.extend(list(
            "project",
            r.projects.iter().map(u32::to_string).collect(),
        ));
        what.extend(list("nid", r.nids.iter().map(|n| n.to_string()).collect()));
        what.extend(list("op", r.ops.clone()));
        println!(
            "{} {} ops_rate={} bytes_rate={} burst={}s weight={}",
            r.name,
            if what.is_empty() {
                "*".to_string()
            } else {
                what.join(" ")
            },
            r.ops_per_s,
            r.bytes_per_s,
            r.burst_s,
            r.weight
        );
    }
    Ok(())
}
