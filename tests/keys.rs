//! Safe by default (docs/security.md, "Keys by default"): `nacre up` opens no port unless
//! asked, and with `--listen` requires a key it makes; `nacre mkfs --mgs` makes the file
//! system's keys (server, admin, a first client key); a server with no key refuses to start
//! unless `--insecure`; clients and tools find a file system's key in the key directory
//! (`NACRE_KEY_DIR`, default /etc/nacre). The attacker is the one of issue 41: a process on
//! the same host that speaks the documented protocol to a server port with the testkit's raw
//! client. It holds no key: the key directory is root's (0700) and each key file too (0600),
//! checked here; what it sends without one is what a local user can send.

use nacre_testkit::raw::RawConn;
use nacre_testkit::{nacre_bin, pid_of_command, ClientMount, ServerProc};
use nacre_types::Status;
use nacre_wire::encode_body;
use nacre_wire::mgs::MgsRequest;
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn work_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nacre-keys")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap()
}

/// Runs `nacre ARGS` with `NACRE_KEY_DIR=key_dir`.
fn nacre_in(key_dir: &Path, args: &[&str]) -> Output {
    Command::new(nacre_bin())
        .env("NACRE_KEY_DIR", key_dir)
        .env_remove("NACRE_INSECURE")
        .env_remove("NACRE_KEY")
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err(out: &Output) -> String {
    assert!(!out.status.success(), "succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The TCP ports process `pid` listens on (its socket inodes in LISTEN state).
fn listening_ports(pid: u32) -> Vec<u16> {
    let mut inodes = HashSet::new();
    for e in fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        if let Ok(target) = fs::read_link(e.path()) {
            let t = target.to_string_lossy().to_string();
            if let Some(i) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                inodes.insert(i.to_string());
            }
        }
    }
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == "0A" && inodes.contains(f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}

/// Mode bits and owner of `p`.
fn mode_owner(p: &Path) -> (u32, u32) {
    let m = fs::metadata(p).unwrap();
    (m.permissions().mode() & 0o777, m.uid())
}

/// Sends the frame of issue 41 (`SetParam fail_loc=net.panic` to the MGS) on a connection
/// with no key; the status it gets.
fn set_fail_loc_without_key(addr: &str, fsname: &str) -> i32 {
    let mut c = RawConn::connect(addr, fsname, [7; 16]).unwrap();
    let req = MgsRequest::SetParam {
        fsname: String::new(),
        name: "fail_loc".into(),
        value: "net.panic".into(),
    };
    c.send_raw(req.opcode(), 0, &encode_body(&req), None)
        .unwrap();
    let status = c.recv().unwrap().header.status;
    // The server closed the connection after its answer.
    assert!(c.recv().is_err(), "the connection stays open without a key");
    status
}

/// The pid of the `nacre up` serving `mnt`.
fn up_pid(mnt: &Path) -> u32 {
    let want = mnt.display().to_string();
    pid_of_command(|a| a.iter().any(|x| x == "up") && a.contains(&want)).expect("nacre up runs")
}

#[test]
fn nacre_up_opens_no_port_unless_asked_and_then_requires_its_key() {
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    let (data, mnt) = (d("data"), d("mnt"));
    fs::create_dir_all(&mnt).unwrap();
    let (data_s, mnt_s) = (data.to_str().unwrap(), mnt.to_str().unwrap());
    let up = [
        "up", data_s, "--mount", mnt_s, "--osts", "2", "--fsname", "upk",
    ];
    // No --listen: the mount works, and the process listens on no TCP port at all.
    ok(&nacre_in(&keys, &up));
    fs::write(mnt.join("f"), b"kept").unwrap();
    let pid = up_pid(&mnt);
    assert_eq!(listening_ports(pid), Vec::<u16>::new(), "nacre up listens");
    assert!(!keys.exists(), "a key made for no port");
    ok(&nacre_in(&keys, &["down", mnt_s]));
    // --insecure (as NACRE_INSECURE=1 says it to every command) opens no port either.
    let mut insecure = up.to_vec();
    insecure.push("--insecure");
    ok(&nacre_in(&keys, &insecure));
    assert_eq!(
        listening_ports(up_pid(&mnt)),
        Vec::<u16>::new(),
        "--insecure listens"
    );
    assert!(!keys.exists(), "a key made for no port");
    ok(&nacre_in(&keys, &["down", mnt_s]));
    // --listen: a key is made in the key directory, root's alone.
    let port = nacre_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut listen = up.to_vec();
    listen.extend(["--listen", &addr]);
    ok(&nacre_in(&keys, &listen));
    let pid = up_pid(&mnt);
    assert_eq!(listening_ports(pid), vec![port]);
    let key = keys.join("upk.key");
    assert_eq!(mode_owner(&keys), (0o700, 0), "the key directory");
    assert_eq!(mode_owner(&key), (0o600, 0), "the key file");
    // Issue 41's frame, sent without the key: refused before it is read, the process
    // runs on and nothing was stored.
    assert_eq!(set_fail_loc_without_key(&addr, "upk"), Status::NoKey.code());
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"kept");
    let params = nacre_testkit::get_param(Some(pid), "fail_loc");
    assert!(!params.contains("net.panic"), "{params}");
    // Another client on this host finds the key in the key directory; one given an
    // empty key directory is told what is missing.
    let other = d("other");
    let source = format!("{addr}@tcp:/upk");
    let m = ClientMount::mount_in(
        &["env".into(), format!("NACRE_KEY_DIR={}", keys.display())],
        &source,
        &other,
        &[],
    );
    assert_eq!(fs::read(other.join("f")).unwrap(), b"kept");
    drop(m);
    fs::create_dir_all(d("other2")).unwrap();
    let no_key = nacre_in(
        &d("empty"),
        &["mount", &source, d("other2").to_str().unwrap()],
    );
    assert!(err(&no_key).contains("required key not available"));
    // The same key is used again at the next start (clients keep theirs).
    let before = fs::read(&key).unwrap();
    ok(&nacre_in(&keys, &["down", mnt_s]));
    ok(&nacre_in(&keys, &listen));
    assert_eq!(fs::read(&key).unwrap(), before, "the key was replaced");
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"kept");
    ok(&nacre_in(&keys, &["down", mnt_s]));
}

/// `nacre server --listen ADDR --target DIR...` with `NACRE_KEY_DIR=key_dir`.
fn server_in(key_dir: &Path, listen: &str, targets: &[PathBuf], extra: &[&str]) -> ServerProc {
    let mut args = vec!["server".to_string(), "--listen".into(), listen.into()];
    for t in targets {
        args.extend(["--target".into(), t.display().to_string()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let prefix = [
        "env".to_string(),
        "-u".into(),
        "NACRE_INSECURE".into(),
        format!("NACRE_KEY_DIR={}", key_dir.display()),
    ];
    ServerProc::spawn_in(&prefix, args, listen.into())
}

/// `NACRE_INSECURE` as the docs and bench/common.sh set it (`=1`) makes a keyless file
/// system; `=0` does not; a value that is not a yes or a no is refused, naming it. (Clap
/// took only `true` or `false` from the environment, so every bench script stopped.)
#[test]
fn nacre_insecure_takes_one_and_zero_from_the_environment() {
    let root = work_dir();
    let mkfs = |value: &str, dir: &str| -> (Output, PathBuf) {
        let keys = root.path().join(format!("keys-{dir}"));
        let target = root.path().join(dir);
        let out = Command::new(nacre_bin())
            .env("NACRE_KEY_DIR", &keys)
            .env("NACRE_INSECURE", value)
            .env_remove("NACRE_KEY")
            .args(["mkfs", "--mgs", "--fsname", "ins", target.to_str().unwrap()])
            .output()
            .unwrap();
        (out, keys)
    };
    for (value, dir) in [("1", "one"), ("true", "t"), ("yes", "y")] {
        let (out, keys) = mkfs(value, dir);
        ok(&out);
        assert!(
            !keys.join("ins.key").exists(),
            "NACRE_INSECURE={value} made a key"
        );
    }
    // An OST and an MDT formatted with it set (it is meant for every command): nothing
    // to do there, not an error (it stopped bench/forms.sh); asked on their command line,
    // refused with the reason.
    let target = |kind: &str, dir: &str, extra: &[&str]| {
        Command::new(nacre_bin())
            .env("NACRE_INSECURE", "1")
            .args([
                "mkfs",
                kind,
                "--fsname",
                "ins",
                "--mgsnode",
                "127.0.0.1:9@tcp",
            ])
            .args(extra)
            .arg(root.path().join(dir))
            .output()
            .unwrap()
    };
    ok(&target("--ost", "ost0", &[]));
    ok(&target("--mdt", "mdt0", &[]));
    let e = err(&target("--ost", "ost1", &["--no-key"]));
    assert!(e.contains("keys are made with the MGS"), "{e}");
    let (out, keys) = mkfs("0", "zero");
    ok(&out);
    assert!(
        keys.join("ins.key").exists(),
        "NACRE_INSECURE=0 made no key"
    );
    let (out, _) = mkfs("maybe", "maybe");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("maybe"), "{err}");
}

#[test]
fn mkfs_makes_the_keys_and_a_server_without_one_does_not_start() {
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    let port = nacre_testkit::free_port();
    let listen = format!("127.0.0.1:{port}");
    let nid = format!("{listen}@tcp");
    // mkfs --mgs makes three keys, each root's alone.
    let out = ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--fsname",
            "mk",
            d("mgs").to_str().unwrap(),
        ],
    ));
    assert!(out.contains("server key of mk"), "{out}");
    for f in ["mk.key", "mk-admin.key", "mk-client.key"] {
        assert_eq!(mode_owner(&keys.join(f)), (0o600, 0), "{f}");
    }
    for (kind, dir) in [("--mdt", "mdt0"), ("--ost", "ost0")] {
        ok(&nacre_in(
            &keys,
            &[
                "mkfs",
                kind,
                "--fsname",
                "mk",
                "--mgsnode",
                &nid,
                d(dir).to_str().unwrap(),
            ],
        ));
    }
    // An MGS formatted again keeps the server key: keys given out stay good.
    let server_key = fs::read(keys.join("mk.key")).unwrap();
    ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--reformat",
            "--fsname",
            "mk",
            d("mgs").to_str().unwrap(),
        ],
    ));
    assert_eq!(fs::read(keys.join("mk.key")).unwrap(), server_key);
    // With the server key gone, the admin and client keys left beside it were made from
    // another: refused, not kept as if they were good.
    let moved = d("mk.key.moved");
    fs::rename(keys.join("mk.key"), &moved).unwrap();
    let mgs_dir = d("mgs");
    let remkfs = [
        "mkfs",
        "--mgs",
        "--reformat",
        "--fsname",
        "mk",
        mgs_dir.to_str().unwrap(),
    ];
    let e = err(&nacre_in(&keys, &remkfs));
    assert!(e.contains("was made from another server key"), "{e}");
    assert!(!keys.join("mk.key").exists(), "no server key made");
    fs::rename(&moved, keys.join("mk.key")).unwrap();
    ok(&nacre_in(&keys, &remkfs));
    assert_eq!(fs::read(keys.join("mk.key")).unwrap(), server_key);
    // --no-key belongs to the MGS.
    let e = err(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--ost",
            "--no-key",
            "--index",
            "1",
            "--fsname",
            "mk",
            "--mgsnode",
            &nid,
            d("ost1").to_str().unwrap(),
        ],
    ));
    assert!(e.contains("--no-key"), "{e}");
    let targets = [d("mgs"), d("mdt0"), d("ost0")];
    let target_args: Vec<String> = targets
        .iter()
        .flat_map(|t| ["--target".to_string(), t.display().to_string()])
        .collect();
    // A server that finds no key refuses to start, and says where it looked and what to do.
    let mut args = vec!["server", "--listen", &listen];
    args.extend(target_args.iter().map(String::as_str));
    let e = err(&nacre_in(&d("elsewhere"), &args));
    assert!(
        e.contains("no key of mk") && e.contains("elsewhere/mk.key") && e.contains("--insecure"),
        "{e}"
    );
    // A client key in the server's place is no server key.
    fs::create_dir(d("clientdir")).unwrap();
    fs::set_permissions(d("clientdir"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::copy(keys.join("mk-client.key"), d("clientdir").join("mk.key")).unwrap();
    let e = err(&nacre_in(&d("clientdir"), &args));
    assert!(e.contains("client key"), "{e}");
    // With the key directory mkfs wrote, it serves; keyless frames are refused.
    let server = server_in(&keys, &listen, &targets, &[]);
    assert_eq!(
        set_fail_loc_without_key(&listen, "mk"),
        Status::NoKey.code()
    );
    // A client node holding the client key as mk.key mounts; as a client it may not
    // administer (quotas are the admin's); the admin key may.
    let source = format!("{nid}:/mk");
    let client_env = [
        "env".into(),
        format!("NACRE_KEY_DIR={}", d("clientdir").display()),
    ];
    let m = ClientMount::mount_in(&client_env, &source, &d("mnt"), &[]);
    fs::write(m.mnt.join("x"), b"through the client key").unwrap();
    assert_eq!(
        fs::read(m.mnt.join("x")).unwrap(),
        b"through the client key"
    );
    let setquota = ["setquota", "-u", "1000", "-B", "8M", source.as_str()];
    let e = err(&nacre_in(&d("clientdir"), &setquota));
    assert!(e.contains("needs an admin or server key"), "{e}");
    let admin = Command::new(nacre_bin())
        .env("NACRE_KEY", keys.join("mk-admin.key"))
        .env("NACRE_KEY_DIR", d("empty"))
        .args(setquota)
        .output()
        .unwrap();
    ok(&admin);
    // The MGS's audit trail says who did it, from where, and what.
    let audit = nacre_testkit::get_param(Some(server.pid()), "mgs.audit");
    let line = audit
        .lines()
        .find(|l| l.contains("setquota fs=\"mk\""))
        .unwrap_or_else(|| panic!("no setquota in the audit trail: {audit}"));
    assert!(
        line.contains("127.0.0.1") && line.contains("admin") && line.ends_with(": done"),
        "{line}"
    );
    drop(m);
    server.stop();
    // --insecure serves a file system made with --no-key, and says so at start.
    ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--no-key",
            "--fsname",
            "nk",
            d("nkmgs").to_str().unwrap(),
        ],
    ));
    assert!(!keys.join("nk.key").exists());
    let e = err(&nacre_in(
        &keys,
        &[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            d("nkmgs").to_str().unwrap(),
        ],
    ));
    assert!(e.contains("no key of nk"), "{e}");
    let log = d("insecure.log");
    let mut child = Command::new(nacre_bin())
        .env("NACRE_KEY_DIR", &keys)
        .env("RUST_LOG", "warn")
        .args([
            "server",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
            "--target",
        ])
        .arg(d("nkmgs"))
        .stdout(std::process::Stdio::piped())
        .stderr(fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("serving"), "{line}");
    let said = fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("--insecure: serving nk without a file-system key"),
        "{said}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `nacre keygen --from SERVER_KEY --role client --name NAME -o OUT`.
fn client_key(server_key: &Path, name: &str, out: &Path) {
    ok(&nacre_in(
        Path::new("/nonexistent"),
        &[
            "keygen",
            "--from",
            server_key.to_str().unwrap(),
            "--role",
            "client",
            "--name",
            name,
            "-o",
            out.to_str().unwrap(),
        ],
    ));
}

#[test]
fn a_revoked_client_key_is_refused_and_the_other_keys_go_on() {
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    let listen = format!("127.0.0.1:{}", nacre_testkit::free_port());
    let nid = format!("{listen}@tcp");
    ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--fsname",
            "rv",
            d("mgs").to_str().unwrap(),
        ],
    ));
    for (kind, dir) in [("--mdt", "mdt0"), ("--ost", "ost0")] {
        ok(&nacre_in(
            &keys,
            &[
                "mkfs",
                kind,
                "--fsname",
                "rv",
                "--mgsnode",
                &nid,
                d(dir).to_str().unwrap(),
            ],
        ));
    }
    let server = server_in(&keys, &listen, &[d("mgs"), d("mdt0"), d("ost0")], &[]);
    let pid = server.pid().to_string();
    let server_key = keys.join("rv.key");
    // A changelog consumer: the MDT copies the MGS's audit trail into its changelog.
    let source = format!("{nid}:/rv");
    assert_eq!(
        ok(&nacre_in(&keys, &["changelog", "register", &source])).trim(),
        "cl1"
    );
    // Two tenants' client keys, each in a key directory of its own, as on their nodes.
    let mut mounts = Vec::new();
    for name in ["lab", "ward"] {
        let dir = d(&format!("{name}-keys"));
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        client_key(&server_key, name, &dir.join("rv.key"));
        let env = ["env".into(), format!("NACRE_KEY_DIR={}", dir.display())];
        let m = ClientMount::mount_in(&env, &format!("{nid}:/rv"), &d(name), &[]);
        fs::write(m.mnt.join(name), name.as_bytes()).unwrap();
        mounts.push((dir, m));
    }
    let nodemap = |verb: &str| {
        ok(&nacre_in(
            &keys,
            &[
                "nodemap",
                "--pid",
                &pid,
                verb,
                "--fsname",
                "rv",
                "--key-name",
                "lab",
            ],
        ))
    };
    nodemap("revoke_key");
    let list = ok(&nacre_in(&keys, &["nodemap", "--pid", &pid, "list"]));
    assert!(list.contains("(revoked keys): rv:lab"), "{list}");
    // The lab's mount loses its connections at its next request and cannot open new ones.
    let (lab_dir, lab) = &mounts[0];
    nacre_testkit::wait_for("the revoked key's mount refused", || {
        fs::write(lab.mnt.join("after"), b"x").is_err()
    });
    // The MDT evicts the lab's client at once (its locks go: nobody waits for callbacks
    // it will never answer).
    nacre_testkit::wait_for("the revoked key's client evicted", || {
        let status = nacre_testkit::get_param(Some(server.pid()), "mdt.rv-MDT0000.recovery_status");
        status.lines().any(|l| l.trim() == "evicted_clients: 1")
    });
    // The ward's mount goes on, and sees that nothing of the lab's got through after.
    let ward = &mounts[1].1;
    fs::write(ward.mnt.join("after-ward"), b"ward").unwrap();
    assert_eq!(fs::read(ward.mnt.join("lab")).unwrap(), b"lab");
    assert!(
        !ward.mnt.join("after").exists(),
        "a revoked key's create got through"
    );
    // A new mount with the revoked key is told why, at once.
    fs::create_dir_all(d("lab2")).unwrap();
    let e = err(&nacre_in(
        lab_dir,
        &["mount", &source, d("lab2").to_str().unwrap()],
    ));
    assert!(e.contains("revoked"), "{e}");
    // The raw handshake with the revoked key is refused, and counted.
    let refused_before = net_stat(server.pid(), "handshakes_refused");
    let key = nacre_net::sec::FsKey::load(&lab_dir.join("rv.key")).unwrap();
    let raw = nacre_testkit::raw::RawConn::connect_keyed(&listen, &key, [3; 16]);
    let why = raw.err().expect("a revoked key's handshake").to_string();
    assert!(why.contains("revoked"), "{why}");
    assert_eq!(
        net_stat(server.pid(), "handshakes_refused"),
        refused_before + 1
    );
    // Taken back, the key mounts again; the trail says who did both.
    nodemap("unrevoke_key");
    let m = ClientMount::mount_in(
        &["env".into(), format!("NACRE_KEY_DIR={}", lab_dir.display())],
        &format!("{nid}:/rv"),
        &d("lab3"),
        &[],
    );
    assert_eq!(fs::read(m.mnt.join("after-ward")).unwrap(), b"ward");
    let audit = nacre_testkit::get_param(Some(server.pid()), "mgs.audit");
    assert!(
        audit.contains("RevokeKey") && audit.contains("UnrevokeKey"),
        "{audit}"
    );
    // An administrator sets a quota over the network with the admin key.
    let admin = Command::new(nacre_bin())
        .env("NACRE_KEY", keys.join("rv-admin.key"))
        .env("NACRE_KEY_DIR", d("empty"))
        .args(["setquota", "-u", "1000", "-B", "8M", &source])
        .output()
        .unwrap();
    ok(&admin);
    // The changelog holds each, in order: who, what, and that it was done.
    let want = [
        "the control socket (root on this host): nodemap RevokeKey",
        "the control socket (root on this host): nodemap UnrevokeKey",
        "(admin): setquota fs=\"rv\"",
    ];
    let mut lines = Vec::new();
    nacre_testkit::wait_for("the audit records in the changelog", || {
        let text = ok(&nacre_in(&keys, &["changelog", "read", &source]));
        lines = text
            .lines()
            .filter(|l| l.contains("30ADMIN"))
            .map(str::to_string)
            .collect();
        lines.len() >= want.len()
    });
    assert_eq!(lines.len(), want.len(), "{lines:#?}");
    for (line, want) in lines.iter().zip(want) {
        assert!(
            line.contains(want) && line.ends_with(": done"),
            "{line} lacks {want}"
        );
        assert!(line.contains(" u=0:0 "), "{line}");
    }
    drop(m);
    drop(mounts);
    server.stop();
}

/// A counter of a process's `net.stats`.
fn net_stat(pid: u32, name: &str) -> u64 {
    let text = nacre_testkit::get_param(Some(pid), "net.stats");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in net.stats: {text}"))
}

/// The master key id of the key in `path`.
fn master_of(path: &Path) -> String {
    nacre_net::sec::FsKey::load(path)
        .unwrap()
        .master_id()
        .unwrap()
        .to_string()
}

/// A key directory of a client node's own (0700), holding a client key of `server_key`.
fn client_node(dir: &Path, server_key: &Path, fsname: &str, name: &str) {
    fs::create_dir(dir).unwrap();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
    client_key(server_key, name, &dir.join(format!("{fsname}.key")));
}

#[test]
fn the_server_key_rotates_while_servers_and_mounts_run() {
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    let (mds_addr, oss_addr) = (
        format!("127.0.0.1:{}", nacre_testkit::free_port()),
        format!("127.0.0.1:{}", nacre_testkit::free_port()),
    );
    let nid = format!("{mds_addr}@tcp");
    ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--fsname",
            "rot",
            d("mgs").to_str().unwrap(),
        ],
    ));
    for (kind, dir) in [("--mdt", "mdt0"), ("--ost", "ost0")] {
        ok(&nacre_in(
            &keys,
            &[
                "mkfs",
                kind,
                "--fsname",
                "rot",
                "--mgsnode",
                &nid,
                d(dir).to_str().unwrap(),
            ],
        ));
    }
    // An MGS+MDS process and an OSS process, each a server node of its own.
    let mds = server_in(&keys, &mds_addr, &[d("mgs"), d("mdt0")], &[]);
    let oss = server_in(&keys, &oss_addr, &[d("ost0")], &[]);
    let pids = [mds.pid(), oss.pid()];
    let old_server = keys.join("rot.key");
    let old_id = master_of(&old_server);
    // A client node with a key of the old master, a file written and one held open.
    client_node(&d("node-keys"), &old_server, "rot", "node");
    let env = |dir: &Path| {
        [
            "env".to_string(),
            format!("NACRE_KEY_DIR={}", dir.display()),
        ]
    };
    let source = format!("{nid}:/rot");
    let node = ClientMount::mount_in(&env(&d("node-keys")), &source, &d("node"), &[]);
    fs::write(node.mnt.join("before"), b"before").unwrap();
    let mut held = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(node.mnt.join("held"))
        .unwrap();
    std::io::Write::write_all(&mut held, &[1u8; 1 << 20]).unwrap();
    held.sync_all().unwrap();
    // An old key that no one updates: a raw connection opened with it now, and a key
    // directory that keeps it.
    client_node(&d("stale-keys"), &old_server, "rot", "stale");
    let stale_key = nacre_net::sec::FsKey::load(&d("stale-keys").join("rot.key")).unwrap();
    let mut stale_conn = RawConn::connect_keyed(&mds_addr, &stale_key, [5; 16]).unwrap();
    // Answered (a refusal of the empty body), the connection kept.
    stale_conn
        .call_raw(0x0301, 0, &[])
        .expect("the old key's connection is served before the rotation");
    let key = |pid: u32, args: &[&str]| {
        let pid = pid.to_string();
        let mut all = vec!["key", "--pid", &pid];
        all.extend_from_slice(args);
        nacre_in(&keys, &all)
    };
    // Step 1: a new master key, accepted beside the old one on every server.
    let new_server = keys.join("rot-new.key");
    ok(&nacre_in(
        &keys,
        &["keygen", "rot", "-o", new_server.to_str().unwrap()],
    ));
    let new_id = master_of(&new_server);
    for pid in pids {
        ok(&key(pid, &["add", new_server.to_str().unwrap()]));
        let list = ok(&key(pid, &["list"]));
        assert!(
            list.contains(&format!("rot:{old_id} in use"))
                && list.contains(&format!("rot:{new_id} accepted")),
            "{list}"
        );
    }
    // A client node given a key of the new master mounts beside the old ones.
    client_node(&d("new-keys"), &new_server, "rot", "new");
    let fresh = ClientMount::mount_in(&env(&d("new-keys")), &source, &d("fresh"), &[]);
    assert_eq!(fs::read(fresh.mnt.join("before")).unwrap(), b"before");
    fs::write(fresh.mnt.join("from-new"), b"new").unwrap();
    // A file the node holds no lock on, opened there for O_DIRECT reads now: the
    // capabilities the node holds for it are made with the old master.
    fs::write(fresh.mnt.join("direct"), vec![5u8; 1 << 20]).unwrap();
    let direct = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(node.mnt.join("direct"))
            .unwrap()
    };
    // Step 2: every server uses it; the old key's clients go on meanwhile. The MDS first:
    // the capabilities it gives now are made with the new key, which the OSS, still using
    // the old one, takes.
    ok(&key(pids[0], &["use", new_server.to_str().unwrap()]));
    fs::write(node.mnt.join("capability"), vec![3u8; 1 << 20]).unwrap();
    assert_eq!(
        fs::read(fresh.mnt.join("capability")).unwrap(),
        vec![3u8; 1 << 20]
    );
    ok(&key(pids[1], &["use", new_server.to_str().unwrap()]));
    fs::write(node.mnt.join("between"), b"between").unwrap();
    assert_eq!(fs::read(node.mnt.join("from-new")).unwrap(), b"new");
    // The client node gets its new key in place of the old one.
    let replaced = d("node-keys").join("rot.key.new");
    client_key(&new_server, "node", &replaced);
    fs::rename(&replaced, d("node-keys").join("rot.key")).unwrap();
    // The key in use cannot be retired; then step 3: the old one is, everywhere.
    let e = err(&key(pids[0], &["retire", "rot", &new_id]));
    assert!(e.contains("`nacre key use` another first"), "{e}");
    // The OSS first: the node's connection to the MDS (made with the old key) lives on,
    // so the node holds the old capabilities of `direct` still. The OST refuses them; the
    // client gets new ones from the MDT and reads.
    for pid in [pids[1], pids[0]] {
        ok(&key(pid, &["retire", "rot", &old_id]));
        let list = ok(&key(pid, &["list"]));
        assert!(!list.contains(&old_id), "{list}");
        if pid == pids[1] {
            let mut buf = vec![0u8; (1 << 20) + 4096];
            let at = buf.as_ptr().align_offset(4096);
            let aligned = &mut buf[at..at + (1 << 20)];
            let n = std::os::unix::fs::FileExt::read_at(&direct, aligned, 0).unwrap();
            assert_eq!(n, 1 << 20);
            assert!(aligned.iter().all(|&b| b == 5));
        }
    }
    // The connection the old key opened is dropped at its next request.
    assert!(
        stale_conn.call_raw(0x0301, 0, &[]).is_err(),
        "a connection of a retired key still served"
    );
    // The node's mount goes on with its new key, through the file it held open.
    std::io::Write::write_all(&mut held, &[2u8; 1 << 20]).unwrap();
    held.sync_all().unwrap();
    drop(held);
    let back = fs::read(node.mnt.join("held")).unwrap();
    assert_eq!(back.len(), 2 << 20);
    assert!(back[..1 << 20].iter().all(|&b| b == 1) && back[1 << 20..].iter().all(|&b| b == 2));
    fs::write(node.mnt.join("after"), b"after").unwrap();
    assert_eq!(fs::read(fresh.mnt.join("after")).unwrap(), b"after");
    assert_eq!(fs::read(fresh.mnt.join("between")).unwrap(), b"between");
    // A node still holding the old key is told to get the new one.
    fs::create_dir_all(d("stale")).unwrap();
    let e = err(&nacre_in(
        &d("stale-keys"),
        &["mount", &source, d("stale").to_str().unwrap()],
    ));
    assert!(e.contains("retired"), "{e}");
    let refused_before = net_stat(pids[0], "handshakes_refused");
    let why = RawConn::connect_keyed(&mds_addr, &stale_key, [6; 16])
        .err()
        .expect("a retired key's handshake")
        .to_string();
    assert!(why.contains("retired"), "{why}");
    assert_eq!(net_stat(pids[0], "handshakes_refused"), refused_before + 1);
    // Nothing was restarted.
    for pid in pids {
        assert!(Path::new(&format!("/proc/{pid}")).exists());
    }
    drop(direct);
    drop(fresh);
    drop(node);
    oss.stop();
    mds.stop();
}

#[test]
fn a_file_system_formatted_without_keys_is_given_keys_and_keeps_its_data() {
    let root = work_dir();
    let d = |n: &str| root.path().join(n);
    let keys = d("keys");
    let listen = format!("127.0.0.1:{}", nacre_testkit::free_port());
    let nid = format!("{listen}@tcp");
    ok(&nacre_in(
        &keys,
        &[
            "mkfs",
            "--mgs",
            "--no-key",
            "--fsname",
            "up",
            d("mgs").to_str().unwrap(),
        ],
    ));
    for (kind, dir) in [("--mdt", "mdt0"), ("--ost", "ost0")] {
        ok(&nacre_in(
            &keys,
            &[
                "mkfs",
                kind,
                "--fsname",
                "up",
                "--mgsnode",
                &nid,
                d(dir).to_str().unwrap(),
            ],
        ));
    }
    assert!(!keys.join("up.key").exists(), "--no-key made a key");
    let targets = [d("mgs"), d("mdt0"), d("ost0")];
    // Served keyless, as before keys were the default; a keyless mount writes.
    let server = server_in(&keys, &listen, &targets, &["--insecure"]);
    let source = format!("{nid}:/up");
    let env = |dir: &Path| {
        [
            "env".to_string(),
            format!("NACRE_KEY_DIR={}", dir.display()),
        ]
    };
    fs::create_dir_all(d("empty")).unwrap();
    let old = ClientMount::mount_in(&env(&d("empty")), &source, &d("old"), &[]);
    fs::write(old.mnt.join("data"), vec![7u8; 3 << 20]).unwrap();
    drop(old);
    server.stop();
    // The upgrade (docs/security.md): a server key on the server, a client key on the client
    // node, the servers restarted without --insecure.
    fs::create_dir_all(&keys).unwrap();
    fs::set_permissions(&keys, fs::Permissions::from_mode(0o700)).unwrap();
    ok(&nacre_in(
        &keys,
        &["keygen", "up", "-o", keys.join("up.key").to_str().unwrap()],
    ));
    client_node(&d("node-keys"), &keys.join("up.key"), "up", "node");
    let server = server_in(&keys, &listen, &targets, &[]);
    let node = ClientMount::mount_in(&env(&d("node-keys")), &source, &d("node"), &[]);
    assert_eq!(fs::read(node.mnt.join("data")).unwrap(), vec![7u8; 3 << 20]);
    fs::write(node.mnt.join("after"), b"keyed").unwrap();
    // A keyless mount is refused now, and says why.
    fs::create_dir_all(d("keyless")).unwrap();
    let e = err(&nacre_in(
        &d("empty"),
        &["mount", &source, d("keyless").to_str().unwrap()],
    ));
    assert!(e.contains("required key not available"), "{e}");
    drop(node);
    server.stop();
}
