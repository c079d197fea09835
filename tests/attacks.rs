//! Attacks on the networked form, written as an attacker would: a hostile process on a
//! client host (a network namespace of its own) speaks the documented protocol to the
//! servers' ports with the testkit's raw client, with no key, and with the client keys of
//! tenants. Every request only a server or an administrator may send is refused (`EPERM`),
//! before its body is decoded, and counted (`requests_refused_role`); a tenant's key from
//! another tenant's address is refused (`EACCES`); a body that is not the request its
//! opcode names is refused (`EPROTO`). Nothing changes (checked through another mount, the
//! MGS's configuration and parameters, the OST's object owners), the servers keep running,
//! and the legitimate clients beside the attacker keep working. The same requests from a
//! server's address (no key) or with an admin key are served: the refusals are the role's.
//! docs/security.md has the table of who may send what.

use nacre_testkit::raw::RawConn;
use nacre_testkit::{mkfs, nacre_ok, ClientMount, NetHost, NetLab, ServerProc};
use nacre_types::{ObjectId, Status};
use nacre_wire::failover::FailoverRequest;
use nacre_wire::mds::MdsOp;
use nacre_wire::mgs::{FsConfig, MgsReply, MgsRequest};
use nacre_wire::oss::OssRequest;
use nacre_wire::{decode_body, encode_body};
use std::fs;
use std::path::{Path, PathBuf};

/// One MGS+MDT process on `h[0]`, one OSS process on `h[1]`, formatted under `dir`.
struct Cluster {
    mds: ServerProc,
    oss: ServerProc,
    source: String,
    fsname: &'static str,
}

impl Cluster {
    fn start(h: &[NetHost], dir: &Path, fsname: &'static str, server_args: &[&str]) -> Cluster {
        let d = |n: &str| dir.join(n);
        let mgs_nid = format!("{}@tcp", h[0].addr);
        mkfs("--mgs", 0, fsname, None, &d("mgs"));
        mkfs("--mdt", 0, fsname, Some(&mgs_nid), &d("mdt0"));
        mkfs("--ost", 0, fsname, Some(&mgs_nid), &d("ost0"));
        let mds = h[0].server(&[&d("mgs"), &d("mdt0")], server_args);
        let oss = h[1].server(&[&d("ost0")], server_args);
        Cluster {
            mds,
            oss,
            source: format!("{mgs_nid}:/{fsname}"),
            fsname,
        }
    }

    fn ost_name(&self) -> String {
        format!("{}-OST0000", self.fsname)
    }
}

/// A directory of its own for one test's targets, keys and mounts.
fn work_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nacre-attacks")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap()
}

/// How a hostile connection is opened: no key, or a key file's.
#[derive(Clone)]
enum As {
    NoKey(&'static str),
    Key(PathBuf),
}

/// Opens a raw connection from `host` to `server` (`ADDR:988`) as client uuid `client`.
fn connect(host: &NetHost, server: &str, who: &As, client: [u8; 16]) -> RawConn {
    let (server, who) = (server.to_string(), who.clone());
    host.run(move || match who {
        As::NoKey(fsname) => RawConn::connect(&server, fsname, client).unwrap(),
        As::Key(path) => {
            let key = nacre_net::sec::FsKey::load(&path).unwrap();
            RawConn::connect_keyed(&server, &key, client).unwrap()
        }
    })
}

/// The status of an MGS request sent on `c`, and its reply if served.
fn mgs(c: &mut RawConn, req: &MgsRequest) -> (i32, Option<MgsReply>) {
    c.send_raw(req.opcode(), 0, &encode_body(req), None)
        .unwrap();
    let r = c.recv().unwrap_or_else(|e| panic!("{req:?}: {e}"));
    let reply = (r.header.status == 0)
        .then(|| decode_body::<MgsReply>(&r.body).ok())
        .flatten();
    (r.header.status, reply)
}

/// The status of an OSS request to OST 0 sent on `c`.
fn oss(c: &mut RawConn, req: OssRequest) -> i32 {
    c.send_oss(0, req, None).unwrap();
    c.recv().unwrap().header.status
}

/// The status of an OSS request to OST 0 sent on `c` with capability `capa`.
fn oss_capa(c: &mut RawConn, req: OssRequest, capa: Option<nacre_wire::capa::Capa>) -> i32 {
    c.send_oss_capa(0, req, None, capa).unwrap();
    c.recv().unwrap().header.status
}

/// Opens `fid` for reading from `host` as `who` (client uuid `client`) and returns the
/// capability the MDT's answer carries for `object`.
fn open_for_capa(
    host: &NetHost,
    mds_addr: &str,
    who: &As,
    client: [u8; 16],
    fid: nacre_types::Fid,
    object: ObjectId,
) -> nacre_wire::capa::Capa {
    let mut m = connect(host, mds_addr, who, client);
    let open = MdsOp::Open {
        fid,
        access: nacre_types::cred::MAY_READ,
    };
    m.send_mds(0, open).unwrap();
    let r = m.recv().unwrap();
    let a = r
        .answer()
        .unwrap_or_else(|| panic!("open: {}", r.header.status));
    *a.capas
        .iter()
        .find(|c| c.object == object)
        .unwrap_or_else(|| panic!("a capability for {object:?} in {:?}", a.capas))
}

/// The status of an MDS request to MDT 0 sent on `c`.
fn mds(c: &mut RawConn, op: MdsOp) -> i32 {
    c.send_mds(0, op).unwrap();
    c.recv().unwrap().header.status
}

/// The file system's configuration, as anyone may fetch it.
fn config(c: &mut RawConn, fsname: &str) -> FsConfig {
    match mgs(
        c,
        &MgsRequest::GetConfig {
            fsname: fsname.into(),
        },
    ) {
        (0, Some(MgsReply::Config(cfg))) => cfg,
        other => panic!("GetConfig: {:?}", other.0),
    }
}

/// A target's uuid text as the 16 bytes a client uuid is.
fn uuid_bytes(text: &str) -> [u8; 16] {
    let hex: String = text.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// Requests process `pid` refused for who sent them: by role before decoding, and by its
/// handlers after.
fn refusals(pid: u32) -> u64 {
    net_stat(pid, "requests_refused_role") + net_stat(pid, "requests_refused_caller")
}

/// A counter of a process's `net.stats`.
fn net_stat(pid: u32, name: &str) -> u64 {
    let text = nacre_testkit::get_param(Some(pid), "net.stats");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in net.stats: {text}"))
}

/// The stored persistent parameters (all file systems), as a server fetches them.
fn stored_params(c: &mut RawConn) -> Vec<(String, String)> {
    match mgs(c, &MgsRequest::GetParams { fsname: "".into() }) {
        (0, Some(MgsReply::Params { params, .. })) => params,
        other => panic!("GetParams: {:?}", other.0),
    }
}

const PERM: i32 = Status::Perm as i32;
const ACCES: i32 = Status::Access as i32;
const PROTO: i32 = Status::Proto as i32;

/// Every request of the role table only servers or administrators may send, from `who` at
/// `host`: each refused with `EPERM` (a body under another request's opcode `EPROTO`).
/// `victim` is an object of another user's file on OST 0. Each refusal is counted by the
/// MGS+MDS process or the OSS process that made it, once.
fn server_powers_refused(h: &[NetHost], host: &NetHost, cl: &Cluster, who: &As, victim: ObjectId) {
    let (mds0, oss0) = (refusals(cl.mds.pid()), refusals(cl.oss.pid()));
    let mds_addr = format!("{}:988", h[0].addr);
    let oss_addr = format!("{}:988", h[1].addr);
    let mut m = connect(host, &mds_addr, who, [0xa7; 16]);
    let cfg = config(&mut m, cl.fsname);
    let (mut at_mds, mut at_oss) = (0, 0);

    // The MGS: a fault point armed cluster-wide, a target moved to the attacker, the
    // tenants' nodemaps and the audit trail read, quota and QoS changed, a target's usage
    // reported.
    let attacker_nid = format!("{}:988@tcp", host.addr).parse().unwrap();
    let mut moved = cfg.osts[0].clone();
    moved.nids = vec![attacker_nid];
    let refused_mgs = [
        MgsRequest::SetParam {
            fsname: String::new(),
            name: "fail_loc".into(),
            value: "net.panic".into(),
        },
        MgsRequest::SetParam {
            fsname: String::new(),
            name: "osd.*.direct_io".into(),
            value: "0".into(),
        },
        MgsRequest::Register(moved),
        MgsRequest::GetNodemaps,
        // The audit trail: who administers the file system, from where.
        MgsRequest::AuditRead {
            fsname: cl.fsname.to_string(),
            epoch: 0,
            after: 0,
        },
    ];
    for req in &refused_mgs {
        assert_eq!(mgs(&mut m, req).0, PERM, "{req:?}");
        at_mds += 1;
    }
    // Refused by their opcode alone, whatever follows (nothing is decoded).
    for opcode in [0x0107u16, 0x0108, 0x010a, 0x010b, 0x010c, 0x010d, 0x010f] {
        assert_eq!(
            m.call_raw(opcode, 0, b"junk").unwrap(),
            PERM,
            "{opcode:#06x}"
        );
        at_mds += 1;
    }

    // The MDT: requests only peer MDTs send, and a client claiming a peer MDT's uuid (it
    // is public in the configuration) to escape its nodemap.
    for opcode in [0x021au16, 0x021b, 0x0221] {
        assert_eq!(
            m.call_raw(opcode, 0, b"junk").unwrap(),
            PERM,
            "{opcode:#06x}"
        );
        at_mds += 1;
    }
    let mdt_uuid = uuid_bytes(&cfg.mdts[0].uuid);
    let mut claim = connect(host, &mds_addr, who, mdt_uuid);
    let root = MdsOp::GetAttr {
        fid: nacre_types::Fid::ROOT,
    };
    assert_eq!(
        mds(&mut claim, root.clone()),
        PERM,
        "a false peer-MDT claim"
    );
    at_mds += 1;
    // A body that is not its opcode's request: an AllocFid under GetAttr's opcode.
    let body = encode_body(&nacre_wire::mds::MdsCall {
        client: [0xa7; 16],
        replied_below: 0,
        jobid: String::new(),
        cred: nacre_types::cred::current(),
        lock_bits: 0,
        op: MdsOp::AllocFid,
    });
    assert_eq!(m.call_raw(root.opcode(), 0, &body).unwrap(), PROTO);
    at_mds += 1;

    // The OST: destroying and re-owning another user's object.
    let mut o = connect(host, &oss_addr, who, [0xa7; 16]);
    let evil = nacre_types::cred::Owner {
        uid: 4242,
        gid: 4242,
        project: 0,
    };
    for req in [
        OssRequest::Destroy {
            objects: vec![victim],
        },
        OssRequest::SetOwner {
            objects: vec![victim],
            owner: evil,
        },
    ] {
        assert_eq!(oss(&mut o, req.clone()), PERM, "{req:?}");
        at_oss += 1;
    }
    // A Destroy under a read's opcode.
    let destroy = nacre_wire::oss::OssCall {
        client: [0xa7; 16],
        jobid: String::new(),
        cred: nacre_types::cred::current(),
        req: OssRequest::Destroy {
            objects: vec![victim],
        },
        capa: None,
    };
    assert_eq!(
        o.call_raw(0x0302, 0, &encode_body(&destroy)).unwrap(),
        PROTO
    );
    at_oss += 1;
    // Failover: the OST released from its server; the mover: a job run as root.
    let release = FailoverRequest::Release {
        target: cl.ost_name(),
    };
    assert_eq!(
        o.call_raw(release.opcode(), 0, &encode_body(&release))
            .unwrap(),
        PERM
    );
    assert_eq!(o.call_raw(0x0501, 0, b"junk").unwrap(), PERM, "mover job");
    at_oss += 2;
    let counted = (refusals(cl.mds.pid()) - mds0, refusals(cl.oss.pid()) - oss0);
    assert_eq!(counted, (at_mds, at_oss), "each refusal counted");
}

/// What the attacks must have left as it was: the OST still at its server, nothing
/// stored, the victim's object with its owner, its data whole through a fresh mount.
fn nothing_changed(
    h: &[NetHost],
    cl: &Cluster,
    who: &As,
    server_side: &As,
    victim: ObjectId,
    owner_before: nacre_types::cred::Owner,
    check: impl Fn(),
) {
    let mds_addr = format!("{}:988", h[0].addr);
    let mut m = connect(&h[2], &mds_addr, who, [0xa8; 16]);
    let cfg = config(&mut m, cl.fsname);
    assert_eq!(
        cfg.osts[0].nids[0].ip().to_string(),
        h[1].addr,
        "the OST was not moved"
    );
    // Stored parameters, asked from the MGS's own host as `server_side`.
    let mut at_mgs = connect(&h[0], &mds_addr, server_side, [0xa9; 16]);
    let params = stored_params(&mut at_mgs);
    assert!(params.is_empty(), "nothing stored: {params:?}");
    let oss_addr = format!("{}:988", h[1].addr);
    let mut o = connect(&h[2], &oss_addr, who, [0xa8; 16]);
    o.send_oss(0, OssRequest::GetOwner { object: victim }, None)
        .unwrap();
    let r = o.recv().unwrap();
    match r.oss() {
        Some(nacre_wire::oss::OssReply::Owner(owner)) => assert_eq!(owner, Some(owner_before)),
        _ => panic!("GetOwner of the victim: {}", r.header.status),
    }
    check();
}

/// The owner the OST records for `object`, asked from `host` as `who`.
fn owner_of(
    host: &NetHost,
    oss_addr: &str,
    who: &As,
    object: ObjectId,
) -> nacre_types::cred::Owner {
    let mut o = connect(host, oss_addr, who, [0xaa; 16]);
    o.send_oss(0, OssRequest::GetOwner { object }, None)
        .unwrap();
    match o.recv().unwrap().oss() {
        Some(nacre_wire::oss::OssReply::Owner(Some(owner))) => owner,
        other => panic!("GetOwner: {other:?}"),
    }
}

#[test]
fn without_keys_a_client_address_has_no_server_power() {
    let lab = NetLab::new(3);
    let h = &lab.hosts;
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let cl = Cluster::start(h, root.path(), "atk0", &[]);
    let mount = ClientMount::mount_in(&h[2].prefix(), &cl.source, &d("mnt"), &[]);
    let data = nacre_testkit::pattern(41, 3 << 20);
    fs::write(mount.mnt.join("victim"), &data).unwrap();
    let (_, victim) = nacre_testkit::object_of(&mount.mnt.join("victim"));
    let who = As::NoKey("atk0");
    let oss_addr = format!("{}:988", h[1].addr);
    let owner_before = owner_of(&h[2], &oss_addr, &who, victim);

    server_powers_refused(h, &h[2], &cl, &who, victim);

    nothing_changed(h, &cl, &who, &who, victim, owner_before, || {
        let other = ClientMount::mount_in(&h[2].prefix(), &cl.source, &d("other"), &[]);
        assert!(
            fs::read(other.mnt.join("victim")).unwrap() == data,
            "data whole"
        );
    });
    // The servers run on, and the legitimate client beside the attacker works.
    let (mut mds, mut oss) = (cl.mds, cl.oss);
    assert!(mds.try_wait().is_none() && oss.try_wait().is_none());
    fs::write(mount.mnt.join("after"), b"after").unwrap();
    assert_eq!(fs::read(mount.mnt.join("after")).unwrap(), b"after");

    // The same request from a server's address is a server's: stored.
    let mut at_mgs = connect(&h[0], &format!("{}:988", h[0].addr), &who, [1; 16]);
    let set = MgsRequest::SetParam {
        fsname: String::new(),
        name: "jobid_var".into(),
        value: "procname_uid".into(),
    };
    assert_eq!(mgs(&mut at_mgs, &set).0, 0, "a server's address may");
    // Fault points never, from anyone: test instruments are armed locally only.
    let fault = MgsRequest::SetParam {
        fsname: String::new(),
        name: "fail_*".into(),
        value: "net.panic".into(),
    };
    assert_eq!(mgs(&mut at_mgs, &fault).0, Status::Inval as i32);
    let out = nacre_testkit::nacre(&[
        "ctl",
        "--pid",
        &mds.pid().to_string(),
        "set_param",
        "-P",
        "fail_loc=net.panic",
    ]);
    assert!(
        !out.status.success(),
        "set_param -P of a fault point refused"
    );
    let params = stored_params(&mut at_mgs);
    assert_eq!(
        params,
        vec![("jobid_var".to_string(), "procname_uid".to_string())]
    );
    drop(mount);
    mds.stop();
    oss.stop();
}

#[test]
fn a_tenants_client_key_has_no_server_power_and_no_other_tenants_address() {
    let lab = NetLab::new(4);
    let h = &lab.hosts;
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    fs::create_dir(&keys).unwrap();
    let server_key = keys.join("server.key");
    nacre_ok(&[
        "keygen",
        "atk1",
        "-o",
        server_key.to_str().unwrap(),
        "--level",
        "integrity",
    ]);
    let sk = server_key.to_str().unwrap();
    let cl = Cluster::start(h, root.path(), "atk1", &["--key", sk]);
    // Two tenants: a on h[2] (root squashed, the default), b on h[3].
    for (name, host) in [("tenant-a", &h[2]), ("tenant-b", &h[3])] {
        nacre_tests::nodemap(&cl.mds, &["add", name]);
        nacre_tests::nodemap(
            &cl.mds,
            &["add_range", "--name", name, "--range", &host.addr],
        );
    }
    nacre_tests::enforced(&[&cl.mds, &cl.oss]);
    let derive = |name: &str, role: &str, nodemap: Option<&str>| {
        nacre_testkit::derived_key(&server_key, &keys.join(name), role, nodemap)
    };
    let (key_a, key_b) = (
        derive("a.key", "client", Some("tenant-a")),
        derive("b.key", "client", Some("tenant-b")),
    );
    let admin_key = derive("admin.key", "admin", None);
    // The administrator lays out a directory for each tenant (admin keys are never mapped).
    let top = ClientMount::mount_in(
        &h[0].prefix(),
        &cl.source,
        &d("top"),
        &["--key", admin_key.to_str().unwrap()],
    );
    fs::create_dir(top.mnt.join("b")).unwrap();
    // Tenants' roots are squashed: b's directory is open to them.
    fs::set_permissions(
        top.mnt.join("b"),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let secret = nacre_testkit::pattern(43, 1 << 20);
    fs::write(top.mnt.join("b/secret"), &secret).unwrap();
    let (_, victim) = nacre_testkit::object_of(&top.mnt.join("b/secret"));
    let tenant_a = ClientMount::mount_in(
        &h[2].prefix(),
        &cl.source,
        &d("a"),
        &["--key", key_a.to_str().unwrap()],
    );
    let tenant_b = ClientMount::mount_in(
        &h[3].prefix(),
        &cl.source,
        &d("b"),
        &["--key", key_b.to_str().unwrap()],
    );
    assert!(fs::read(tenant_b.mnt.join("b/secret")).unwrap() == secret);
    let oss_addr = format!("{}:988", h[1].addr);
    let mds_addr = format!("{}:988", h[0].addr);
    let admin = As::Key(admin_key.clone());
    let owner_before = owner_of(&h[0], &oss_addr, &admin, victim);

    // (b) Tenant b's key, stolen and used from tenant a's address: every request refused.
    let stolen = As::Key(key_b.clone());
    let mut m = connect(&h[2], &mds_addr, &stolen, [0xb1; 16]);
    let root_attr = MdsOp::GetAttr {
        fid: nacre_types::Fid::ROOT,
    };
    assert_eq!(
        mds(&mut m, root_attr.clone()),
        ACCES,
        "b's key at a's address"
    );
    let mut o = connect(&h[2], &oss_addr, &stolen, [0xb1; 16]);
    let read = OssRequest::Read {
        object: victim,
        offset: 0,
        len: 4096,
        lock: false,
    };
    assert_eq!(
        oss(&mut o, read.clone()),
        ACCES,
        "b's data read from a's address"
    );
    // From b's own address the same key reads (the refusal was the address's), with the
    // capability an open gives it; without one, or with a capability b was given shown by
    // a, nothing is read.
    let mut o_b = connect(&h[3], &oss_addr, &stolen, [0xb2; 16]);
    assert_eq!(oss(&mut o_b, read.clone()), ACCES, "no capability");
    let secret_fid = fid_at(&top.mnt.join("b/secret"));
    let capa = open_for_capa(&h[3], &mds_addr, &stolen, [0xb2; 16], secret_fid, victim);
    assert_eq!(
        oss_capa(&mut o_b, read.clone(), Some(capa)),
        0,
        "b's capability"
    );
    assert_eq!(
        oss_capa(&mut o, read.clone(), Some(capa)),
        ACCES,
        "b's capability shown from a's address"
    );
    let key_a_conn = As::Key(key_a.clone());
    let mut o_a = connect(&h[2], &oss_addr, &key_a_conn, [0xb3; 16]);
    assert_eq!(
        oss_capa(&mut o_a, read.clone(), Some(capa)),
        ACCES,
        "b's capability shown with a's key"
    );
    let mut forged = capa;
    forged.object.id += 1;
    assert_eq!(
        oss_capa(&mut o_b, read.clone(), Some(forged)),
        ACCES,
        "a capability's object changed"
    );
    let write = OssRequest::Write {
        object: victim,
        offset: 0,
        owner: nacre_types::cred::Owner::default(),
        lock: false,
        grant_used: 0,
        epoch: 0,
        layout_gen: 0,
    };
    o_b.send_oss_capa(0, write, Some(b"overwrite"), Some(capa))
        .unwrap();
    assert_eq!(
        o_b.recv().unwrap().header.status,
        ACCES,
        "a read-only open's capability writes nothing"
    );
    // Nor in a write of many runs (what a mount's write-behind sends).
    let runs = |epoch| OssRequest::WriteRuns {
        object: victim,
        owner: nacre_types::cred::Owner::default(),
        grant_used: 0,
        epoch,
        layout_gen: 0,
        runs: vec![
            nacre_wire::oss::Run { offset: 0, len: 4 },
            nacre_wire::oss::Run { offset: 8, len: 5 },
        ],
    };
    o_b.send_oss_capa(0, runs(1), Some(b"overwrite"), Some(capa))
        .unwrap();
    assert_eq!(
        o_b.recv().unwrap().header.status,
        ACCES,
        "a read-only open's capability writes no runs"
    );
    // (c) Tenant a (root squashed) may not open b's file for writing, and a layout asked
    // by FID, without an open, carries no capability: nothing of it is written.
    let mut m_a = connect(&h[2], &mds_addr, &key_a_conn, [0xb4; 16]);
    let open_w = MdsOp::Open {
        fid: secret_fid,
        access: nacre_types::cred::MAY_WRITE,
    };
    assert_eq!(mds(&mut m_a, open_w), ACCES);
    m_a.send_mds(0, MdsOp::GetLayout { fid: secret_fid })
        .unwrap();
    let a = m_a.recv().unwrap().answer().expect("a layout by FID");
    assert!(a.capas.is_empty(), "no capability without an open");
    // An open for neither reading nor writing allows neither.
    let open_none = MdsOp::Open {
        fid: secret_fid,
        access: 0,
    };
    m_a.send_mds(0, open_none).unwrap();
    let r = m_a.recv().unwrap();
    assert!(
        r.answer().is_none_or(|a| a.capas.is_empty()),
        "an open for nothing: {}",
        r.header.status
    );
    m_a.send_mds(0, MdsOp::GetLayout { fid: secret_fid })
        .unwrap();
    let a = m_a.recv().unwrap().answer().expect("a layout by FID");
    assert!(a.capas.is_empty(), "held open for nothing: no capability");
    let write_a = OssRequest::Write {
        object: victim,
        offset: 0,
        owner: nacre_types::cred::Owner::default(),
        lock: true,
        grant_used: 0,
        epoch: 0,
        layout_gen: 0,
    };
    o_a.send_oss(0, write_a, Some(b"overwrite")).unwrap();
    assert_eq!(
        o_a.recv().unwrap().header.status,
        ACCES,
        "a's write of b's data"
    );
    o_a.send_oss(0, runs(1), Some(b"overwrite")).unwrap();
    assert_eq!(
        o_a.recv().unwrap().header.status,
        ACCES,
        "a's write of runs of b's data"
    );
    let punch = OssRequest::Punch {
        object: victim,
        size: 0,
        layout_gen: 0,
    };
    assert_eq!(oss(&mut o_a, punch), ACCES, "a's truncate of b's data");
    let lock = OssRequest::Enqueue {
        object: victim,
        start: 0,
        end: u64::MAX,
        write: true,
    };
    assert_eq!(oss(&mut o_a, lock), ACCES, "a's write lock on b's data");
    // A client uuid b used at the OSS is b's: a may not cancel its locks nor end them.
    let b_uuid = [0xd7; 16];
    o_b.set_oss_client(b_uuid);
    let cancel = OssRequest::LockCancel {
        handles: Vec::new(),
    };
    assert_eq!(oss(&mut o_b, cancel.clone()), 0, "b binds its uuid");
    o_a.set_oss_client(b_uuid);
    assert_eq!(oss(&mut o_a, cancel.clone()), PERM, "a names b's uuid");
    assert_eq!(
        oss(&mut o_a, OssRequest::Disconnect),
        PERM,
        "a ends b's locks"
    );
    assert_eq!(oss(&mut o_b, OssRequest::Disconnect), 0, "b ends its own");
    o_a.set_oss_client([0xd8; 16]);
    assert_eq!(oss(&mut o_a, cancel), 0, "a's own uuid");

    // (c) Tenant a's own key (root squashed): no server or administrator power.
    let who = As::Key(key_a.clone());
    server_powers_refused(h, &h[2], &cl, &who, victim);

    // A client uuid, once used by tenant b, is b's while its export lives: tenant a naming
    // it (to end b's export, close its opens, poll its lock callbacks) is refused.
    let uuid = [0xc5; 16];
    let mut as_b = connect(&h[3], &mds_addr, &stolen, uuid);
    assert_eq!(mds(&mut as_b, MdsOp::Ping), 0);
    let mut as_a = connect(&h[2], &mds_addr, &who, uuid);
    assert_eq!(mds(&mut as_a, MdsOp::Disconnect), PERM, "b's uuid from a");
    assert_eq!(mds(&mut as_a, root_attr.clone()), PERM);
    assert_eq!(mds(&mut as_b, MdsOp::Ping), 0, "b's export lives on");

    // A key file edited to claim the admin role proves nothing: refused at the handshake.
    let text = fs::read_to_string(&key_a).unwrap();
    let forged: String = text
        .lines()
        .filter(|l| {
            !["name ", "nodemap ", "master "]
                .iter()
                .any(|f| l.starts_with(f))
        })
        .map(|l| match l.starts_with("role ") {
            true => "role admin\n".to_string(),
            false => format!("{l}\n"),
        })
        .collect();
    let forged = nacre_net::sec::FsKey::parse(&forged).unwrap();
    let refused_before = net_stat(cl.mds.pid(), "handshakes_refused");
    let m_addr = mds_addr.clone();
    let attempt = h[2].run(move || RawConn::connect_keyed(&m_addr, &forged, [0xb3; 16]).err());
    assert!(attempt.is_some(), "a forged admin key opened a session");
    assert_eq!(
        net_stat(cl.mds.pid(), "handshakes_refused"),
        refused_before + 1
    );

    nothing_changed(h, &cl, &admin, &admin, victim, owner_before, || {
        let again = ClientMount::mount_in(
            &h[3].prefix(),
            &cl.source,
            &d("b2"),
            &["--key", key_b.to_str().unwrap()],
        );
        assert!(
            fs::read(again.mnt.join("b/secret")).unwrap() == secret,
            "data whole"
        );
    });
    // The tenants' mounts work on; an administrator's key may change parameters.
    fs::write(tenant_b.mnt.join("b/after"), b"b").unwrap();
    assert_eq!(fs::read(tenant_a.mnt.join("b/after")).unwrap(), b"b");
    let mut adm = connect(&h[2], &mds_addr, &admin, [0xb4; 16]);
    let set = MgsRequest::SetParam {
        fsname: String::new(),
        name: "jobid_var".into(),
        value: "procname_uid".into(),
    };
    assert_eq!(
        mgs(&mut adm, &set).0,
        0,
        "an admin key may, from any address"
    );
    let (mut mds, mut oss) = (cl.mds, cl.oss);
    assert!(mds.try_wait().is_none() && oss.try_wait().is_none());
    drop((top, tenant_a, tenant_b));
    mds.stop();
    oss.stop();
}

/// (d) A local unprivileged user against a server's control socket, whose file a lax umask
/// (here a chmod) left open to everyone: the kernel says who connected (SO_PEERCRED), and
/// nobody's request is refused; a fault point stays disarmed and the server runs on.
#[test]
fn a_local_user_cannot_use_a_servers_control_socket() {
    let root = work_dir();
    let port = nacre_testkit::free_port();
    mkfs("--mgs", 0, "atk2", None, &root.path().join("mgs"));
    let mut server = ServerProc::start(port, &[&root.path().join("mgs")], &[]);
    let pid = server.pid().to_string();
    let socket = Path::new("/run/nacre/ctl").join(format!("{pid}.sock"));
    let mode =
        |p: &Path| std::os::unix::fs::PermissionsExt::mode(&fs::metadata(p).unwrap().permissions());
    assert_eq!(
        mode(&socket) & 0o777,
        0o600,
        "the socket is its owner's only"
    );
    fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let refused_before = net_stat(server.pid(), "requests_refused_caller");
    // The nacre binary, where nobody may run it (the build's directory is root's).
    fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let bin = root.path().join("nacre");
    fs::copy(nacre_testkit::nacre_bin(), &bin).unwrap();
    let out = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(&bin)
        .args(["ctl", "--pid", &pid, "set_param", "fail_loc=net.panic"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "nobody set a parameter");
    assert!(err.contains("root only"), "{err}");
    assert_eq!(
        net_stat(server.pid(), "requests_refused_caller"),
        refused_before + 1
    );
    let armed = nacre_testkit::get_param(Some(server.pid()), "fail_loc");
    assert!(!armed.contains("net.panic"), "armed: {armed}");
    assert!(server.try_wait().is_none(), "the server runs on");
    server.stop();
}

/// The FID of what `path` names, from its inode number.
fn fid_at(path: &Path) -> nacre_types::Fid {
    use std::os::unix::fs::MetadataExt;
    nacre_types::Fid::from_ino(fs::metadata(path).unwrap().ino()).unwrap()
}

/// The status of an MDS request sent on `c` with credentials `cred`.
fn mds_as(c: &mut RawConn, cred: &nacre_types::Cred, op: MdsOp) -> i32 {
    nacre_types::cred::with(cred.clone(), || mds(c, op))
}

/// A replay of a create of `name` in `parent` whose saved reply (the client's copy) says
/// it made `fid`.
fn forged_replay(
    transno: u64,
    parent: nacre_types::Fid,
    name: &str,
    fid: nacre_types::Fid,
) -> MdsOp {
    let create = MdsOp::Create {
        parent,
        name: name.as_bytes().to_vec(),
        kind: nacre_types::FileKind::Regular,
        perm: 0o644,
        uid: 1000,
        gid: 1000,
        rdev: 0,
        exclusive: true,
        open: false,
        access: 0,
    };
    let t = nacre_types::TimeSpec { sec: 1, nsec: 0 };
    let attr = nacre_types::Attr {
        fid,
        kind: nacre_types::FileKind::Regular,
        perm: 0o644,
        uid: 1000,
        gid: 1000,
        nlink: 1,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        rdev: 0,
        project: 0,
        proj_inherit: false,
    };
    MdsOp::Replay {
        transno,
        op: Box::new(create),
        reply: Box::new(nacre_wire::mds::MdsReply::Entry {
            attr,
            layout: None,
            size_exact: true,
        }),
        pre_versions: Vec::new(),
    }
}

/// A FID of MDT0's first sequence no file has.
fn fresh_fid() -> nacre_types::Fid {
    nacre_types::Fid::new(nacre_types::fid::FID_SEQ_NORMAL, 900_000)
}

/// A line `key: N` of an MDT's `recovery_status`.
fn recovery_stat(pid: u32, fsname: &str, key: &str) -> u64 {
    let text =
        nacre_testkit::get_param(Some(pid), &format!("mdt.{fsname}-MDT0000.recovery_status"));
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in recovery_status: {text}"))
}

/// A client (no key needed: these are a client's own requests) asks the MDT for what the
/// kernel would refuse it, as a raw client: a device node, a truncate or a set-id clear
/// through a read-only open, replays of creates over an existing inode, past the FID space
/// and from a client the MDT never knew. Each is refused and counted, and nothing changes:
/// checked through the mount, and by the FIDs the MDT hands out after.
#[test]
fn the_mdt_refuses_a_client_what_the_kernel_would() {
    let lab = NetLab::new(3);
    let h = &lab.hosts;
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let mut cl = Cluster::start(h, root.path(), "atk2", &[]);
    nacre_ok(&[
        "ctl",
        "--pid",
        &cl.mds.pid().to_string(),
        "set_param",
        "-P",
        "mdt.atk2-MDT0000.recovery_window_ms=20000",
    ]);
    let mount = ClientMount::mount_in(&h[2].prefix(), &cl.source, &d("mnt"), &[]);
    let m = &mount.mnt;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(m, fs::Permissions::from_mode(0o755)).unwrap();
    fs::create_dir(m.join("open")).unwrap();
    fs::set_permissions(m.join("open"), fs::Permissions::from_mode(0o777)).unwrap();
    let data = nacre_testkit::pattern(44, 1 << 20);
    fs::write(m.join("victim"), &data).unwrap();
    fs::set_permissions(m.join("victim"), fs::Permissions::from_mode(0o4755)).unwrap();
    let (open, victim) = (fid_at(&m.join("open")), fid_at(&m.join("victim")));
    let alice = nacre_types::Cred::new(1000, 1000, vec![]);
    let mds_addr = format!("{}:988", h[0].addr);
    let who = As::NoKey("atk2");
    let known = [0xc1; 16];
    let mut a = connect(&h[2], &mds_addr, &who, known);
    assert_eq!(mds_as(&mut a, &alice, MdsOp::Connect), 0);
    let before = refusals(cl.mds.pid());

    // mknod of a device: root's alone (a fifo is anyone's).
    let node = |kind, name: &str| MdsOp::Create {
        parent: open,
        name: name.as_bytes().to_vec(),
        kind,
        perm: 0o666,
        uid: 1000,
        gid: 1000,
        rdev: (1 << 8) | 3,
        exclusive: true,
        open: false,
        access: 0,
    };
    use nacre_types::FileKind::{BlockDevice, CharDevice, Fifo};
    assert_eq!(mds_as(&mut a, &alice, node(CharDevice, "null")), PERM);
    assert_eq!(mds_as(&mut a, &alice, node(BlockDevice, "disk")), PERM);
    assert_eq!(mds_as(&mut a, &alice, node(Fifo, "fifo")), 0, "a fifo");
    // A read-only open truncates nothing and clears no set-id bit.
    let read = nacre_types::cred::MAY_READ;
    let open_ro = MdsOp::Open {
        fid: victim,
        access: read,
    };
    assert_eq!(mds_as(&mut a, &alice, open_ro), 0);
    let cut = MdsOp::SetAttr {
        fid: victim,
        attr: nacre_types::SetAttr {
            size: Some(0),
            from_open: true,
            ..Default::default()
        },
    };
    assert_eq!(mds_as(&mut a, &alice, cut), ACCES);
    let kill = MdsOp::SetAttr {
        fid: victim,
        attr: nacre_types::SetAttr {
            kill_suidgid: true,
            ..Default::default()
        },
    };
    assert_eq!(mds_as(&mut a, &alice, kill), ACCES);
    // A close that says it wrote moves the file's times only from a handle open for
    // writing: not from the read-only open, nor from no open at all.
    let times = |c: &mut RawConn| {
        nacre_types::cred::with(alice.clone(), || {
            c.send_mds(0, MdsOp::GetAttr { fid: victim })
        })
        .unwrap();
        match c.recv().unwrap().mds() {
            Some(nacre_wire::mds::MdsReply::Entry { attr, .. }) => (attr.mtime, attr.ctime),
            other => panic!("getattr: {other:?}"),
        }
    };
    // The mount's own close of what it wrote moves them once: wait until it is done.
    nacre_testkit::wait_for("the mount's writes are closed", || {
        let sizes = nacre_testkit::get_param(Some(cl.mds.pid()), "mdt.atk2-MDT0000.sizes");
        sizes.lines().any(|l| l == "writing 0")
    });
    let before_close = times(&mut a);
    let close = MdsOp::Close {
        fid: victim,
        writer: true,
        written: true,
        touch: true,
        noatime: true,
    };
    for _ in 0..2 {
        assert_eq!(mds_as(&mut a, &alice, close.clone()), 0);
        assert_eq!(
            times(&mut a),
            before_close,
            "a close moved the victim's times"
        );
    }
    // Open for writing something it may write: a client the MDT knows from now on.
    let mine = MdsOp::Create {
        parent: open,
        name: b"mine".to_vec(),
        kind: nacre_types::FileKind::Regular,
        perm: 0o644,
        uid: 1000,
        gid: 1000,
        rdev: 0,
        exclusive: true,
        open: false,
        access: 0,
    };
    assert_eq!(mds_as(&mut a, &alice, mine), 0);
    // Once each, though the mount's locks on `victim` made the lock paths ask first.
    assert_eq!(
        refusals(cl.mds.pid()),
        before + 4,
        "each refusal counted once"
    );
    let denied = nacre_testkit::get_param(Some(cl.mds.pid()), "mdt.atk2-MDT0000.denied_stats");
    for op in ["create", "setattr"] {
        assert!(denied.contains(op), "{op} in denied_stats: {denied}");
    }

    // The MDT restarts: its recovery window opens for the clients it knew.
    drop(a);
    cl.mds.restart();
    let mut a = h[2].run({
        let addr = mds_addr.clone();
        move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                match RawConn::connect(&addr, "atk2", known) {
                    Ok(c) => return c,
                    Err(e) if std::time::Instant::now() > deadline => panic!("MDS back: {e}"),
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
                }
            }
        }
    });
    // The same client goes on with its xids (the MDT answers a repeated one from its saved
    // reply).
    a.set_xid(1_000);
    assert_eq!(mds_as(&mut a, &alice, MdsOp::Connect), 0);
    // The legitimate mount reconnects and replays on its next request (it waits for the
    // window to close, so it is asked from a thread of its own).
    let poke = {
        let p = m.join("open");
        std::thread::spawn(move || fs::read_dir(p).map(|d| d.count()))
    };
    let t = recovery_stat(cl.mds.pid(), "atk2", "transno_durable_at_start") + 1_000;
    assert_eq!(
        mds_as(
            &mut a,
            &alice,
            forged_replay(u64::MAX, open, "late", fresh_fid())
        ),
        PERM,
        "a replay past any transno the MDT gave"
    );
    assert_eq!(
        mds_as(&mut a, &alice, forged_replay(t, open, "over", victim)),
        Status::Exist as i32,
        "a replay over an existing inode"
    );
    let far = nacre_types::Fid::new(
        nacre_types::fid::FID_SEQ_NORMAL + nacre_types::fid::FID_SEQS_PER_MDT - 1,
        7,
    );
    assert_eq!(
        mds_as(&mut a, &alice, forged_replay(t + 1, open, "far", far)),
        Status::Inval as i32,
        "a replay past the FID space reserved"
    );
    let foreign = nacre_types::Fid::new(u64::MAX, u32::MAX);
    assert_eq!(
        mds_as(
            &mut a,
            &alice,
            forged_replay(t + 2, open, "foreign", foreign)
        ),
        Status::Inval as i32,
        "a replay of another MDT's (or no MDT's) FID"
    );
    // A client the MDT did not know when it restarted has nothing to replay.
    let mut stranger = connect(&h[2], &mds_addr, &who, [0xc2; 16]);
    assert_eq!(mds_as(&mut stranger, &alice, MdsOp::Connect), 0);
    assert_eq!(
        mds_as(
            &mut stranger,
            &alice,
            forged_replay(t + 3, open, "stranger", fresh_fid())
        ),
        PERM
    );
    assert_eq!(mds_as(&mut a, &alice, MdsOp::ReplayDone), 0);
    poke.join()
        .unwrap()
        .expect("the mount lists after recovery");
    let pid = cl.mds.pid();
    assert_eq!(recovery_stat(pid, "atk2", "replay_refused"), 5);
    // A reopen takes back for writing only what the caller may write now: the victim's
    // handle comes back a reader (no truncate through it), its own file's a writer.
    let mine_fid = fid_at(&m.join("open/mine"));
    let reopen = |fid| MdsOp::Reopen {
        opens: vec![nacre_wire::mds::ReopenEntry {
            fid,
            handles: 1,
            writers: 1,
        }],
    };
    let cut = |fid| MdsOp::SetAttr {
        fid,
        attr: nacre_types::SetAttr {
            size: Some(0),
            from_open: true,
            ..Default::default()
        },
    };
    assert_eq!(mds_as(&mut a, &alice, reopen(victim)), 0);
    assert_eq!(
        mds_as(&mut a, &alice, cut(victim)),
        ACCES,
        "no write open gained"
    );
    assert_eq!(mds_as(&mut a, &alice, reopen(mine_fid)), 0);
    assert_eq!(
        mds_as(&mut a, &alice, cut(mine_fid)),
        0,
        "its own file's writer"
    );
    assert!(refusals(pid) >= 4, "refusals counted after the restart");

    // Nothing changed: no forged name, the victim whole and still set-user-ID, and new
    // files get FIDs where allocation was (not past a forged one).
    let names: Vec<String> = fs::read_dir(m.join("open"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, vec!["fifo".to_string(), "mine".to_string()]);
    assert!(fs::read(m.join("victim")).unwrap() == data, "victim whole");
    let mode = fs::metadata(m.join("victim")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o4755);
    fs::write(m.join("after"), b"after").unwrap();
    let after = fid_at(&m.join("after"));
    assert_eq!(after.seq, nacre_types::fid::FID_SEQ_NORMAL, "{after}");
    drop(mount);
    cl.mds.stop();
    cl.oss.stop();
}
