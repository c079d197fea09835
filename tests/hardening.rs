//! Servers bounded against any client (docs/hardening.md), on the networked form: thousands
//! of live connections on a bounded set of network threads, and an abuse run where hostile
//! connections are dropped and counted while legitimate work completes.

use nacre_testkit::raw::{raise_nofile, root, rss_kib, threads_of, RawConn};
use nacre_testkit::{nacre_ok, pattern, ClientMount, Form, Spec, TestFs};
use nacre_types::ObjectId;
use nacre_wire::mds::{MdsOp, MdsReply};
use nacre_wire::oss::{OssReply, OssRequest};
use serde_json::Value;
use std::fs;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The object of a one-stripe file: (OST index, object id).
fn object_of(path: &std::path::Path) -> (u32, ObjectId) {
    let l: Value =
        serde_json::from_str(&nacre_ok(&["getstripe", "--json", path.to_str().unwrap()])).unwrap();
    let o = &l["objects"][0];
    (
        o["ost"].as_u64().unwrap() as u32,
        ObjectId {
            seq: o["seq"].as_u64().unwrap(),
            id: o["id"].as_u64().unwrap(),
        },
    )
}

/// `net.stats` of a server process, as `name -> value`.
fn net_stats(pid: u32) -> std::collections::HashMap<String, u64> {
    let text = nacre_ok(&[
        "ctl",
        "--pid",
        &pid.to_string(),
        "get_param",
        "-n",
        "net.stats",
    ]);
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().parse().unwrap_or(0)))
        .collect()
}

/// Astra's clients all mount every server: 2,000 live connections (from four client
/// threads, each its own set of sockets) doing metadata and small reads against one MDS and
/// one OSS. Server threads stay bounded (before this design every connection had a thread:
/// 2,000 idle connections took an MDS from 33 to 1,109 threads), every reply is right, and
/// thread counts and memory are printed.
#[test]
fn two_thousand_connections_on_a_bounded_set_of_threads() {
    raise_nofile(16_384);
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1));
    let data = pattern(11, 64 << 10);
    let f = fs.path("small");
    fs::write(&f, &data).unwrap();
    let (ost, object) = object_of(&f);
    let (mds_pid, oss_pid) = (fs.servers_mut()[0].pid(), fs.servers_mut()[1].pid());
    let (mds_addr, oss_addr) = (
        fs.servers_mut()[0].listen.clone(),
        fs.servers_mut()[1].listen.clone(),
    );
    let before = (threads_of(mds_pid), threads_of(oss_pid));
    let rss_before = (rss_kib(mds_pid), rss_kib(oss_pid));
    const WORKERS: usize = 4;
    const PER_SERVER: usize = 250; // per worker: 4 x (250 + 250) = 2,000 connections
    let held = Arc::new(Barrier::new(WORKERS + 1));
    let done = Arc::new(Barrier::new(WORKERS + 1));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (held, done, data) = (held.clone(), done.clone(), data.clone());
            let (mds_addr, oss_addr) = (mds_addr.clone(), oss_addr.clone());
            std::thread::spawn(move || {
                let mut conns = Vec::new();
                for i in 0..PER_SERVER {
                    let mut uuid = [0u8; 16];
                    uuid[..8].copy_from_slice(&((w * PER_SERVER + i) as u64 + 1).to_le_bytes());
                    conns.push((true, RawConn::connect(&mds_addr, uuid).unwrap()));
                    conns.push((false, RawConn::connect(&oss_addr, uuid).unwrap()));
                }
                for _round in 0..3 {
                    for (mds, c) in &mut conns {
                        match mds {
                            true => c.send_mds(0, MdsOp::GetAttr { fid: root() }),
                            false => {
                                let req = OssRequest::Read {
                                    object,
                                    offset: 4096,
                                    len: 4096,
                                };
                                c.send_oss(ost, req, None)
                            }
                        }
                        .unwrap();
                    }
                    for (mds, c) in &mut conns {
                        let r = c.recv().unwrap();
                        match mds {
                            true => assert!(
                                matches!(r.mds(), Some(MdsReply::Entry { .. })),
                                "status {}",
                                r.header.status
                            ),
                            false => {
                                assert!(matches!(r.oss(), Some(OssReply::Read { .. })));
                                assert_eq!(r.bulk, &data[4096..8192]);
                            }
                        }
                    }
                }
                held.wait(); // all connections open while the servers are measured
                done.wait();
            })
        })
        .collect();
    held.wait();
    let during = (threads_of(mds_pid), threads_of(oss_pid));
    let rss_during = (rss_kib(mds_pid), rss_kib(oss_pid));
    let (mds_stats, oss_stats) = (net_stats(mds_pid), net_stats(oss_pid));
    done.wait();
    for w in workers {
        w.join().unwrap();
    }
    eprintln!(
        "2,000 connections: MDS threads {} -> {} (network {}), OSS threads {} -> {} \
         (network {}); RSS MDS {} -> {} KiB, OSS {} -> {} KiB; open: MDS {}, OSS {}",
        before.0 .0,
        during.0 .0,
        during.0 .1,
        before.1 .0,
        during.1 .0,
        during.1 .1,
        rss_before.0,
        rss_during.0,
        rss_before.1,
        rss_during.1,
        mds_stats["conns_open"],
        oss_stats["conns_open"],
    );
    assert!(mds_stats["conns_open"] >= 1_000, "{mds_stats:?}");
    assert!(oss_stats["conns_open"] >= 1_000, "{oss_stats:?}");
    // One network thread per CPU partition, whatever the connections; service threads grow
    // with load up to their maximum (64 MDS, 32 OSS per partition), never with connections.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (name, (all, net)) in [("MDS", during.0), ("OSS", during.1)] {
        assert!((1..=cpus).contains(&net), "{name}: {net} network threads");
        assert!(all < 150, "{name}: {all} threads for 1,000 connections");
    }
    // Memory per connection stays small: well under 64 KiB each.
    for (name, b, d) in [
        ("MDS", rss_before.0, rss_during.0),
        ("OSS", rss_before.1, rss_during.1),
    ] {
        assert!(
            d.saturating_sub(b) < 1_000 * 64,
            "{name}: RSS {b} -> {d} KiB"
        );
    }
}
