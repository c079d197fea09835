//! Parameters of the targets a server serves (`osd.*`, `ost.*`, `mdt.*`), registered when a
//! target starts and removed when it stops.

use nacre_mds::mdt::Mdt;
use nacre_oss::OstTarget;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// `osd.NAME.*` and `ost.NAME.*` parameters of one OST.
pub fn register_ost_params(r: &nacre_params::Registry, t: &Arc<OstTarget>) {
    let name = t.label.name();
    let ns = format!("ldlm.namespaces.ost-{name}");
    register_namespace(r, &ns, &t.locks.ns);
    let a = t.clone();
    r.add_fn(format!("{ns}.evicted"), move || {
        a.locks.evicted_count().to_string()
    });
    let a = t.clone();
    r.add_fn(format!("ost.{name}.tot_granted"), move || {
        a.grants.total().to_string()
    });
    let a = t.clone();
    r.add_fn(format!("ost.{name}.grant_reserve"), move || {
        a.grants.reserve().to_string()
    });
    let a = t.clone();
    r.add_fn(format!("ost.{name}.recovery_status"), move || {
        a.recovery.status()
    });
    let (a, b) = (t.clone(), t.clone());
    r.add_rw(
        format!("osd.{name}.brw_stats"),
        move || a.brw.render(),
        move |v| clear_with(v, || b.brw.clear()),
    );
    let (a, b) = (t.clone(), t.clone());
    r.add_rw(
        format!("ost.{name}.stats"),
        move || a.stats.render(),
        move |v| clear_with(v, || b.stats.clear()),
    );
    let (a, b) = (t.clone(), t.clone());
    r.add_rw(
        format!("ost.{name}.job_stats"),
        move || a.job_stats.render(),
        move |v| clear_with(v, || b.job_stats.clear()),
    );
    let a = t.clone();
    r.add_fn(format!("ost.{name}.qos_stats"), move || a.qos.stats_text());
    let a = t.clone();
    r.add_fn(format!("ost.{name}.qos_rules_version"), move || {
        a.qos.version().to_string()
    });
    let (a, b) = (t.clone(), t.clone());
    r.add_rw(
        format!("ost.{name}.export_stats"),
        move || a.export_stats.render(),
        move |v| clear_with(v, || b.export_stats.clear()),
    );
    let (a, b) = (t.clone(), t.clone());
    r.add_rw(
        format!("osd.{name}.direct_io"),
        move || u8::from(a.store.direct_io()).to_string(),
        move |v| {
            b.store.set_direct_io(parse_bool(v)?);
            Ok(())
        },
    );
    let a = t.clone();
    r.add_fn(format!("osd.{name}.dio_align"), move || {
        a.store.dio_align().to_string()
    });
    for (param, pick) in [
        (
            "kbytestotal",
            (|s: nacre_types::StatFs| s.bytes_total / 1024) as fn(nacre_types::StatFs) -> u64,
        ),
        ("kbytesfree", |s| s.bytes_free / 1024),
        ("kbytesavail", |s| s.bytes_avail / 1024),
    ] {
        let a = t.clone();
        r.add_fn(format!("osd.{name}.{param}"), move || {
            a.store
                .statfs()
                .map(|s| pick(s).to_string())
                .unwrap_or_else(|e| e.to_string())
        });
    }
    let a = t.clone();
    r.add_fn(format!("osd.{name}.uuid"), move || a.label.uuid.clone());
    // Reads refused because stored data did not match its checksum (bit rot).
    let a = t.clone();
    r.add_fn(format!("osd.{name}.checksum_errors"), move || {
        a.store.corrupt_chunks().to_string()
    });
    // Reads submitted to the disk together with others (a batch of ost_io: io_uring).
    let a = t.clone();
    r.add_fn(format!("osd.{name}.reads_together"), move || {
        a.store.reads_together().to_string()
    });
    // Writes that ran beside another write of the same object (disjoint chunks).
    let a = t.clone();
    r.add_fn(format!("osd.{name}.writes_together"), move || {
        a.store.writes_together().to_string()
    });
    // Writes written part by part as they arrived (large writes streamed off the network).
    let a = t.clone();
    r.add_fn(format!("osd.{name}.writes_arriving"), move || {
        let (writes, parts) = a.store.writes_arriving();
        format!("writes: {writes}\nparts: {parts}")
    });
}

/// `mdt.NAME.*` parameters of one MDT.
pub fn register_mdt_params(r: &nacre_params::Registry, m: &Arc<Mdt>) {
    let name = m.label.name();
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.md_stats"),
        move || a.md_stats.render(),
        move |v| clear_with(v, || b.md_stats.clear()),
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.denied_stats"),
        move || a.denied_stats.render(),
        move |v| clear_with(v, || b.denied_stats.clear()),
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.job_stats"),
        move || a.job_stats.render(),
        move |v| clear_with(v, || b.job_stats.clear()),
    );
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.qos_stats"), move || a.qos.stats_text());
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.qos_rules_version"), move || {
        a.qos.version().to_string()
    });
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.export_stats"),
        move || a.export_stats.render(),
        move |v| clear_with(v, || b.export_stats.clear()),
    );
    // The pools as this MDT uses them (Lustre's `lod.*.pools.*`), and its spilled
    // allocations.
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.pools"), move || {
        a.osts
            .pools()
            .iter()
            .map(|(p, osts)| {
                let members: Vec<String> = osts.iter().map(u32::to_string).collect();
                format!("{p} {}", members.join(","))
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.destroy_pending"), move || {
        // Objects removed since the start whose destroy is not done, and their bytes.
        let (objects, bytes) = a.destroy_space.total();
        let awaiting = a.destroys_awaiting_sync();
        format!("objects {objects}\nbytes {bytes}\nawaiting_sync {awaiting}")
    });
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.sizes"), move || {
        // Exact sizes the MDT serves without a glimpse (crate nacre_mds::sizes).
        let s = a.sizes.status();
        format!(
            "known {}\nqueued {}\nlearned {}\nwriting {}",
            s.known, s.queued, s.learned, s.writing
        )
    });
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.atime"), move || {
        format!(
            "pending {}\nflushes {}",
            a.atimes.pending(),
            a.atimes.flushes()
        )
    });
    // Changelog consumers and records (Lustre's `mdd.*.changelog_users`), and its limits.
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.changelog_users"), move || {
        let s = a.changelog.status();
        let mut out = format!(
            "current_index {}\nfirst {}\nwritten {}\nfreed {}\ndropped_users {}",
            s.next.saturating_sub(1),
            s.first,
            s.written,
            s.freed,
            s.dropped_users
        );
        for u in s.users {
            out.push_str(&format!(
                "\ncl{} {} cleared {} idle_ms {}",
                u.id,
                if u.name.is_empty() { "-" } else { &u.name },
                u.cleared,
                u.idle_ms
            ));
        }
        out
    });
    for (param, pick) in [
        (
            "changelog_records_max",
            (|m: &Mdt| &m.changelog.records_max) as fn(&Mdt) -> &std::sync::atomic::AtomicU64,
        ),
        ("changelog_idle_ms_max", |m: &Mdt| &m.changelog.idle_ms_max),
        ("relayout_fence_lease_ms", |m: &Mdt| {
            &m.relayout_fence_lease_ms
        }),
    ] {
        let (a, b) = (m.clone(), m.clone());
        r.add_rw(
            format!("mdt.{name}.{param}"),
            move || {
                pick(&a)
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .to_string()
            },
            move |v| {
                let n: u64 = v.trim().parse().map_err(|e| format!("{e}"))?;
                if n == 0 {
                    return Err("must be at least 1".into());
                }
                pick(&b).store(n, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            },
        );
    }
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.pool_spills"), move || {
        a.osts
            .spilled
            .load(std::sync::atomic::Ordering::Relaxed)
            .to_string()
    });
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.mkdir_placement"),
        move || a.mkdir_placement().to_string(),
        move |v| {
            b.set_mkdir_placement(v.parse()?);
            Ok(())
        },
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.sync_on_reply"),
        move || u8::from(a.sync_on_reply()).to_string(),
        move |v| {
            b.set_sync_on_reply(parse_bool(v)?);
            Ok(())
        },
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_fn(format!("mdt.{name}.filestotal"), move || {
        a.statfs()
            .map(|s| s.files_total.to_string())
            .unwrap_or_default()
    });
    r.add_fn(format!("mdt.{name}.filesfree"), move || {
        b.statfs()
            .map(|s| s.files_free.to_string())
            .unwrap_or_default()
    });
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.uuid"), move || a.label.uuid.clone());
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.evict_timeout_ms"),
        move || {
            a.exports
                .evict_timeout_ms
                .load(Ordering::Relaxed)
                .to_string()
        },
        move |v| {
            let ms: u64 = v.trim().parse().map_err(|_| "expected milliseconds")?;
            if ms < nacre_mds::export::EVICT_TIMEOUT_MS_MIN {
                return Err(format!(
                    "at least {} ms",
                    nacre_mds::export::EVICT_TIMEOUT_MS_MIN
                ));
            }
            b.exports.evict_timeout_ms.store(ms, Ordering::Relaxed);
            Ok(())
        },
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.capa_lifetime_s"),
        move || a.capa_lifetime_s.load(Ordering::Relaxed).to_string(),
        move |v| {
            use nacre_wire::capa::CAPA_LIFETIME_S_MIN;
            let s: u64 = v.trim().parse().map_err(|_| "expected seconds")?;
            if s < CAPA_LIFETIME_S_MIN {
                return Err(format!("at least {CAPA_LIFETIME_S_MIN} s"));
            }
            b.capa_lifetime_s.store(s, Ordering::Relaxed);
            Ok(())
        },
    );
    let (a, b) = (m.clone(), m.clone());
    r.add_rw(
        format!("mdt.{name}.recovery_window_ms"),
        move || a.recovery.window_ms.load(Ordering::Relaxed).to_string(),
        move |v| {
            let ms: u64 = v.trim().parse().map_err(|_| "expected milliseconds")?;
            if ms < nacre_mds::replay::RECOVERY_WINDOW_MS_MIN {
                return Err(format!(
                    "at least {} ms",
                    nacre_mds::replay::RECOVERY_WINDOW_MS_MIN
                ));
            }
            b.recovery.window_ms.store(ms, Ordering::Relaxed);
            Ok(())
        },
    );
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.recovery_status"), move || {
        recovery_status(&a)
    });
    register_ldlm_params(r, m);
    let a = m.clone();
    r.add_fn(format!("mdt.{name}.exports"), move || {
        a.exports
            .list()
            .iter()
            .map(|(c, quiet, opens)| {
                format!(
                    "{}: idle_ms: {} open_handles: {opens}",
                    nacre_mds::export::client_name(c),
                    quiet.as_millis()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
}

/// `ldlm.namespaces.mdt-NAME.*`: the MDT's lock namespace (docs/locking.md).
fn register_ldlm_params(r: &nacre_params::Registry, m: &Arc<Mdt>) {
    let ns = format!("ldlm.namespaces.mdt-{}", m.label.name());
    let a = m.clone();
    r.add_fn(format!("{ns}.flocks"), move || {
        format!(
            "granted {}\nwaiting {}",
            a.flocks.table.count(),
            a.flocks.parked()
        )
    });
    register_namespace(r, &ns, &m.ldlm);
}

/// `ldlm.namespaces.NS.*` of any lock namespace: counts, counters, timeouts, bounds.
pub(crate) fn register_namespace<K: nacre_ldlm::kind::Kind>(
    r: &nacre_params::Registry,
    ns: &str,
    ns_: &Arc<nacre_ldlm::server::Namespace<K>>,
) {
    let a = ns_.clone();
    r.add_fn(format!("{ns}.lock_count"), move || a.granted().to_string());
    let a = ns_.clone();
    r.add_fn(format!("{ns}.stats"), move || {
        let s = &a.stats;
        let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        format!(
            "granted {}\nclients {}\nparked {}\ngrants {}\nrefused {}\ncallbacks {}\ncancels {}\n\
             revocations {}\nrevoke_wait_us {}\ntimeouts {}\nreplayed {}\nreplay_refused {}\n\
             glimpses {}\nreplay_changed {}\nprolonged {}",
            a.granted(),
            a.clients(),
            a.parked(),
            n(&s.grants),
            n(&s.refused),
            n(&s.callbacks),
            n(&s.cancels),
            n(&s.revocations),
            n(&s.revoke_wait_us),
            n(&s.timeouts),
            n(&s.replayed),
            n(&s.replay_refused),
            n(&s.glimpses),
            n(&s.replay_changed),
            n(&s.prolonged)
        )
    });
    let (a, b) = (ns_.clone(), ns_.clone());
    r.add_rw(
        format!("{ns}.callback_timeout_ms"),
        move || a.callback_timeout_ms.load(Ordering::Relaxed).to_string(),
        move |v| {
            let ms: u64 = v.trim().parse().map_err(|_| "expected milliseconds")?;
            let min = nacre_ldlm::server::CALLBACK_TIMEOUT_MS_MIN;
            if ms < min {
                return Err(format!("at least {min} ms"));
            }
            b.callback_timeout_ms.store(ms, Ordering::Relaxed);
            Ok(())
        },
    );
    let (a, b) = (ns_.clone(), ns_.clone());
    r.add_rw(
        format!("{ns}.contention_ms"),
        move || a.contention_ms.load(Ordering::Relaxed).to_string(),
        move |v| {
            let ms: u64 = v.trim().parse().map_err(|_| "expected milliseconds")?;
            b.contention_ms.store(ms, Ordering::Relaxed);
            Ok(())
        },
    );
    let (a, b) = (ns_.clone(), ns_.clone());
    r.add_rw(
        format!("{ns}.locks_max"),
        move || a.locks_max.load(Ordering::Relaxed).to_string(),
        move |v| {
            let n = parse_count(v)?;
            b.locks_max.store(n as u64, Ordering::Relaxed);
            Ok(())
        },
    );
}

/// `mdt.*.recovery_status`, in Lustre's shape. There is no recovery window yet (replay is
/// not built: an MDT restarts complete), so the state is always COMPLETE; the rest is live.
pub fn recovery_status(m: &Mdt) -> String {
    let x = &m.exports;
    let mut s = m.recovery.status();
    s += &format!(
        "connected_clients: {}\nevicted_clients: {}\nevict_timeout_ms: {}\n",
        x.connected(),
        x.evicted_total.load(Ordering::Relaxed),
        x.evict_timeout_ms.load(Ordering::Relaxed)
    );
    let evictions = x.evictions();
    if !evictions.is_empty() {
        s += "evictions:\n";
        for e in evictions {
            let at =
                e.at.duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
            s += &format!(
                "  - client: {} at: {at} silent_ms: {} opens_dropped: {}\n",
                nacre_mds::export::client_name(&e.client),
                e.silent_ms,
                e.opens_dropped
            );
        }
    }
    s.trim_end().to_string()
}

pub fn clear_with(value: &str, clear: impl Fn()) -> Result<(), String> {
    if value.trim() == "0" || value.trim() == "clear" {
        clear();
        Ok(())
    } else {
        Err("statistics accept only 0 (clear)".into())
    }
}

pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        "1" | "on" | "true" => Ok(true),
        "0" | "off" | "false" => Ok(false),
        v => Err(format!("'{v}' is not 0 or 1")),
    }
}

pub fn parse_count(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("'{}' is not a count", value.trim()))
}
