//! CPU partitions of a service over real TCP: pinning, the portal rotor's three modes,
//! interfaces bound to partitions, and thread growth up to threads_max.

use nacre_net::{
    Connection, Handler, Incoming, Listen, NetConfig, Outgoing, Rotor, Server, ServiceConfig,
    ServicePartition, ServicePool,
};
use nacre_types::Nid;
use nacre_wire::Service;
use std::collections::HashMap;
use std::sync::Arc;

/// Answers with the serving thread's name and its allowed CPUs; the body's first 8 bytes are
/// the request's affinity key; a body of [ms] sleeps.
struct WhoServes;

impl Handler for WhoServes {
    fn handle(&self, req: &Incoming) -> Outgoing {
        if req.body.len() == 1 {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(req.body[0])));
        }
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        let name = std::thread::current().name().unwrap().to_string();
        Outgoing::ok(format!("{name} {cpus}").into_bytes())
    }

    fn affinity(&self, req: &Incoming) -> Option<u64> {
        let key: [u8; 8] = req.body.get(..8)?.try_into().ok()?;
        Some(u64::from_le_bytes(key))
    }
}

fn cpus() -> Vec<usize> {
    nacre_cpt::Topology::read().unwrap().cpus()
}

/// A server on 127.0.0.1 (partition 0's interface) and 127.0.0.2 (partition 1's), with a
/// two-partition service pinned to the first and last CPU.
fn server(threads: (usize, usize)) -> (Arc<Server>, Arc<ServicePool>) {
    let c = cpus();
    let listens = [
        Listen {
            addr: "127.0.0.1:0".parse().unwrap(),
            cpts: vec![0],
        },
        Listen {
            addr: "127.0.0.2:0".parse().unwrap(),
            cpts: vec![1],
        },
    ];
    let server = Server::bind_all(&listens, 1 << 20).unwrap();
    let config = ServiceConfig {
        name: "who".into(),
        partitions: vec![
            ServicePartition {
                cpt: 0,
                cpus: vec![c[0]],
            },
            ServicePartition {
                cpt: 1,
                cpus: vec![c[c.len() - 1]],
            },
        ],
        threads_min: threads.0,
        threads_max: threads.1,
        queue_depth: 64,
    };
    let pool = ServicePool::start(config, Arc::new(WhoServes));
    server.add_service(Service::Oss, pool.clone());
    (server, pool)
}

fn tcp(addr: std::net::SocketAddr) -> Arc<Connection> {
    nacre_net::local::unregister(addr);
    Connection::connect(Nid::tcp(addr), NetConfig::default()).unwrap()
}

/// (partition, allowed CPUs) of the thread that served a request with `body`.
fn ask(conn: &Arc<Connection>, body: &[u8]) -> (usize, String) {
    let reply = conn
        .call(nacre_net::Request {
            opcode: 0x0301,
            target: 0,
            body: body.to_vec(),
            bulk: None,
            inline: false,
        })
        .unwrap();
    let text = String::from_utf8(reply.body).unwrap();
    let (name, cpus) = text.split_once(' ').unwrap();
    // Thread names are who_CPT_N.
    let cpt = name.split('_').nth(1).unwrap().parse().unwrap();
    (cpt, cpus.to_string())
}

#[test]
fn threads_are_pinned_to_their_partition() {
    let (server, _pool) = server((1, 1));
    server.router().set_rotor(Rotor::On);
    let conn = tcp(server.addrs()[0]);
    let c = cpus();
    let mut seen = HashMap::new();
    for _ in 0..4 {
        let (cpt, allowed) = ask(&conn, b"x");
        seen.insert(cpt, allowed);
    }
    assert_eq!(seen[&0], c[0].to_string());
    assert_eq!(seen[&1], c[c.len() - 1].to_string());
}

#[test]
fn rotor_off_serves_each_interface_on_its_partition() {
    let (server, _pool) = server((1, 2));
    assert_eq!(server.router().rotor(), Rotor::Off);
    let (a, b) = (tcp(server.addrs()[0]), tcp(server.addrs()[1]));
    for _ in 0..5 {
        assert_eq!(ask(&a, b"x").0, 0, "127.0.0.1 is partition 0's interface");
        assert_eq!(ask(&b, b"x").0, 1, "127.0.0.2 is partition 1's interface");
    }
}

#[test]
fn rotor_on_spreads_requests_round_robin() {
    let (server, _pool) = server((1, 2));
    server.router().set_rotor(Rotor::On);
    let conn = tcp(server.addrs()[0]);
    let mut count = [0; 2];
    for _ in 0..10 {
        count[ask(&conn, b"x").0] += 1;
    }
    assert_eq!(count, [5, 5], "one connection, both partitions, in turn");
}

#[test]
fn rotor_hash_keeps_one_object_on_one_partition() {
    let (server, _pool) = server((1, 2));
    server.router().set_rotor(Rotor::Hash);
    let (a, b) = (tcp(server.addrs()[0]), tcp(server.addrs()[1]));
    let mut used = [0; 2];
    for key in 0u64..16 {
        let body = key.to_le_bytes();
        let first = ask(&a, &body).0;
        for _ in 0..3 {
            assert_eq!(ask(&a, &body).0, first, "key {key} moved");
            assert_eq!(
                ask(&b, &body).0,
                first,
                "key {key} depends on the interface"
            );
        }
        used[first] += 1;
    }
    assert!(
        used[0] > 0 && used[1] > 0,
        "keys spread over both: {used:?}"
    );
    // No key: the interface's partition.
    assert_eq!(ask(&b, b"x").0, 1);
}

#[test]
fn threads_grow_under_load_up_to_threads_max() {
    let (server, pool) = server((1, 3));
    let conn = tcp(server.addrs()[0]);
    let stats = &pool.partition_stats()[0];
    assert_eq!(stats.threads.load(std::sync::atomic::Ordering::Relaxed), 1);
    let pending: Vec<_> = (0..8)
        .map(|_| {
            conn.start(nacre_net::Request {
                opcode: 0x0301,
                target: 0,
                body: vec![30],
                bulk: None,
                inline: false,
            })
            .unwrap()
        })
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
    assert_eq!(
        stats.threads.load(std::sync::atomic::Ordering::Relaxed),
        3,
        "grown to threads_max, not beyond"
    );
    assert!(pool.set_threads_max(0).is_err());
    pool.set_threads_max(4).unwrap();
    pool.set_threads_min(4).unwrap();
    assert_eq!(stats.threads.load(std::sync::atomic::Ordering::Relaxed), 4);
}

/// The service (thread-name prefix) that served opcode `op`.
fn served_by(conn: &Arc<Connection>, op: u16) -> String {
    let reply = conn
        .call(nacre_net::Request {
            opcode: op,
            target: 0,
            body: b"x".to_vec(),
            bulk: None,
            inline: false,
        })
        .unwrap();
    let text = String::from_utf8(reply.body).unwrap();
    text.split('_').next().unwrap().to_string()
}

#[test]
fn portals_route_chosen_opcodes_to_their_own_pool() {
    let (server, main) = server((1, 1));
    let side = ServicePool::start(
        ServiceConfig::unpinned("side", 1, 1, 64),
        Arc::new(WhoServes),
    );
    server.add_portal(&[0x0302, 0x0304], side.clone());
    let conn = tcp(server.addrs()[0]);
    assert_eq!(served_by(&conn, 0x0301), "who");
    assert_eq!(served_by(&conn, 0x0302), "side");
    assert_eq!(served_by(&conn, 0x0304), "side");
    assert_eq!(
        served_by(&conn, 0x0308),
        "who",
        "the service's other opcodes"
    );
    // Replacing the service's default pool keeps the portal's pool serving.
    let other = ServicePool::start(
        ServiceConfig::unpinned("other", 1, 1, 64),
        Arc::new(WhoServes),
    );
    server.add_service(Service::Oss, other);
    assert_eq!(served_by(&conn, 0x0301), "other");
    assert_eq!(served_by(&conn, 0x0302), "side");
    assert!(main.is_stopped(), "the replaced pool was stopped");
    assert!(!side.is_stopped());
}
