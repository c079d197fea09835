//! `nacre pool` on the MGS node: the control socket's `pool` operation, carried out by this
//! process's MGS; the MDTs of this process fetch the change before the command returns
//! (the others hear of it from the MGS's event within milliseconds).

use crate::ctl::{PoolAdmin, POOL_ANSWERED};
use nacre_mgs::{Mgs, PoolChange};
use nacre_types::PoolName;
use nacre_wire::mgs::{PoolInfo, PoolSpill};
use std::sync::Arc;

/// The pools of `fs` as `nacre pool` prints them, after [`POOL_ANSWERED`]: (`FS.POOL`,
/// member indices joined by commas, then ` spill POOL PERCENT` if it spills), only `pool`
/// unless it is empty.
fn listed(fs: &str, pool: &str, pools: &[PoolInfo]) -> Vec<(String, String)> {
    std::iter::once((POOL_ANSWERED.to_string(), fs.to_string()))
        .chain(
            pools
                .iter()
                .filter(|p| pool.is_empty() || p.name.as_str() == pool)
                .map(|p| {
                    let members: Vec<String> = p.osts.iter().map(u32::to_string).collect();
                    let spill = p.spill.map_or(String::new(), |s| {
                        format!(" spill {} {}", s.to, s.threshold_pct)
                    });
                    (format!("{fs}.{}", p.name), members.join(",") + &spill)
                }),
        )
        .collect()
}

/// The change `cmd` with its argument (see [`PoolAdmin`]).
fn change(cmd: &str, arg: &str) -> Result<PoolChange, String> {
    let osts = || -> Result<Vec<u32>, String> {
        arg.split(',')
            .filter(|w| !w.is_empty())
            .map(|w| w.parse::<u32>().map_err(|_| format!("bad OST index '{w}'")))
            .collect()
    };
    match cmd {
        "new" => Ok(PoolChange::New),
        "add" => osts().map(PoolChange::Add),
        "remove" => osts().map(PoolChange::Remove),
        "destroy" => Ok(PoolChange::Destroy),
        "spill" if arg == "off" => Ok(PoolChange::Spill(None)),
        "spill" => {
            let bad = || format!("bad spill '{arg}': expected POOL,PERCENT or off");
            let (to, pct) = arg.split_once(',').ok_or_else(bad)?;
            Ok(PoolChange::Spill(Some(PoolSpill {
                to: PoolName::new(to).map_err(|e| e.to_string())?,
                threshold_pct: pct.parse().map_err(|_| bad())?,
            })))
        }
        other => Err(format!("unknown pool command '{other}'")),
    }
}

/// The control socket's pool operation for this process's MGS.
pub fn admin(mgs: Arc<Mgs>, targets: Arc<crate::targets::Targets>) -> PoolAdmin {
    Arc::new(move |cmd: &str, fs: &str, pool: &str, arg: &str| {
        let config = mgs.config(fs)?;
        if cmd == "list" {
            if !pool.is_empty() && !config.pools.iter().any(|p| p.name.as_str() == pool) {
                return Some(Err(format!("pool {fs}.{pool} does not exist")));
            }
            return Some(Ok(listed(fs, pool, &config.pools)));
        }
        let result = PoolName::new(pool)
            .map_err(|e| e.to_string())
            .and_then(|name| Ok((name, change(cmd, arg)?)))
            .and_then(|(name, c)| {
                mgs.change_pool(fs, name, c)
                    .map_err(|e| format!("{fs}.{pool}: {e}"))
            })
            .map(|pools| listed(fs, pool, &pools));
        if result.is_ok() {
            for mdt in targets.mdts() {
                if mdt.label.fsname == fs {
                    if let Err(e) = mdt.osts.refresh_installing() {
                        tracing::warn!("{}: pool change not fetched: {e}", mdt.label.name());
                    }
                }
            }
        }
        Some(result)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_their_arguments() {
        assert_eq!(change("add", "1,3"), Ok(PoolChange::Add(vec![1, 3])));
        assert_eq!(change("remove", ""), Ok(PoolChange::Remove(vec![])));
        assert_eq!(change("spill", "off"), Ok(PoolChange::Spill(None)));
        assert_eq!(
            change("spill", "cap,80"),
            Ok(PoolChange::Spill(Some(PoolSpill {
                to: PoolName::new("cap").unwrap(),
                threshold_pct: 80
            })))
        );
        for (cmd, arg) in [
            ("add", "x"),
            ("spill", "cap"),
            ("spill", "cap,900"),
            ("zap", ""),
        ] {
            assert!(change(cmd, arg).is_err(), "{cmd} {arg}");
        }
    }
}
