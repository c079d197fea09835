//! Shared-key security on the networked form (separate server processes, separate mount
//! processes, TCP): every level serves a mount given the key; a mount or a native client
//! without the key or with a wrong one is refused at once; a recorded handshake replayed
//! to a server process and a frame changed on the way are refused.

use nacre_testkit::{nacre, nacre_ok, pattern, Form, Spec, TestFs};
use nacre_types::Nid;
use nacre_wire::Header;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `nacre keygen FSNAME -o DIR/NAME --level LEVEL`, checked to be readable by its owner only.
fn keygen(dir: &Path, name: &str, fsname: &str, level: &str) -> PathBuf {
    let p = dir.join(name);
    nacre_ok(&[
        "keygen",
        fsname,
        "-o",
        p.to_str().unwrap(),
        "--level",
        level,
    ]);
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a key file is made readable by its owner only");
    p
}

fn keyed_fs(fsname: &str, key: &Path) -> TestFs {
    let k = key.to_str().unwrap();
    TestFs::start_with(
        Form::Networked,
        Spec::osts(2)
            .mdts(2)
            .fsname(fsname)
            .server_args(&["--key", k])
            .mount_args(&["--key", k]),
    )
}

/// A counter of `net.stats`, summed over the server processes of `fs`.
fn net_stat(fs: &TestFs, name: &str) -> u64 {
    fs.server_pids()
        .iter()
        .map(|pid| {
            let pid = pid.to_string();
            nacre_ok(&["ctl", "--pid", &pid, "get_param", "-n", "net.stats"])
                .lines()
                .filter_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

#[test]
fn every_level_serves_a_mount_given_the_key() {
    let keys = tempfile::tempdir().unwrap();
    for (i, level) in ["none", "integrity", "bulk", "privacy"].iter().enumerate() {
        let fsname = format!("seclv{i}");
        let key = keygen(keys.path(), &fsname, &fsname, level);
        let fs = keyed_fs(&fsname, &key);
        // Data striped over both OSTs (bulk both ways), names on both MDTs.
        nacre_ok(&[
            "setstripe",
            "-c",
            "2",
            "-S",
            "1M",
            fs.path("big").to_str().unwrap(),
        ]);
        let data = pattern(8 << 20, i + 1);
        std::fs::write(fs.path("big"), &data).unwrap();
        nacre_ok(&["mkdir", "-i", "1", fs.path("remote").to_str().unwrap()]);
        for n in 0..20 {
            std::fs::write(fs.path(&format!("remote/f{n}")), format!("{level} {n}")).unwrap();
        }
        // Read back through a second mount (nothing from this mount's cache).
        let other = fs.scratch().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let _m = fs.mount_another(&other, &["--key", key.to_str().unwrap()]);
        assert!(
            std::fs::read(other.join("big")).unwrap() == data,
            "{level}: data intact"
        );
        for n in 0..20 {
            let got = std::fs::read_to_string(other.join(format!("remote/f{n}"))).unwrap();
            assert_eq!(got, format!("{level} {n}"));
        }
        assert_eq!(net_stat(&fs, "frames_unauthentic"), 0);
        assert_eq!(net_stat(&fs, "handshakes_refused"), 0);
    }
}

#[test]
fn mounts_and_native_clients_without_the_key_or_with_a_wrong_one_are_refused() {
    let keys = tempfile::tempdir().unwrap();
    let key = keygen(keys.path(), "right", "secrf", "integrity");
    let wrong = keygen(keys.path(), "wrong", "secrf", "integrity");
    let fs = keyed_fs("secrf", &key);
    let refused_before = net_stat(&fs, "handshakes_refused");
    let mnt = fs.scratch().join("m");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    // No key: the servers answer ENOKEY; the mount fails with that, at once.
    let out = nacre(&["mount", "--foreground", &fs.source(), m]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a mount without the key succeeded");
    assert!(err.contains("required key not available"), "{err}");
    // A wrong key: the server does not prove it holds that key, the mount says so.
    let w = wrong.to_str().unwrap();
    let out = nacre(&["mount", "--foreground", "--key", w, &fs.source(), m]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a mount with a wrong key succeeded");
    assert!(err.contains("keys differ"), "{err}");
    // A key file others may read is refused before anything is sent.
    let loose = keys.path().join("loose");
    std::fs::copy(&key, &loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = nacre(&[
        "mount",
        "--foreground",
        "--key",
        loose.to_str().unwrap(),
        &fs.source(),
        m,
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("chmod 600"));
    // The native library without a key: refused too.
    let mgs: Nid = fs.mgs_nid.parse().unwrap();
    let mut config = nacre_client::ClientConfig::default();
    config.net.key = None;
    config.net.connect_timeout_ms = 3_000;
    let e = nacre_client::Client::mount(mgs, "secrf", config)
        .err()
        .expect("a native client without the key mounted");
    assert!(e.to_string().contains("required key not available"), "{e}");
    assert!(
        net_stat(&fs, "handshakes_refused") > refused_before,
        "the servers counted the refusals"
    );
}

/// Flips a byte of the first frame with a body a client sends through the proxy, fixing up
/// the header's checksums as an attacker would: only the MAC can tell.
fn tamper_first_body(h: &mut Header, body: &mut [u8]) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if body.is_empty() || DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    body[0] ^= 0xff;
    h.seal(body, None, false);
}

#[test]
fn a_server_process_refuses_a_replayed_handshake_and_drops_a_tampered_frame() {
    let keys = tempfile::tempdir().unwrap();
    let key = keygen(keys.path(), "k", "secrp", "integrity");
    let fs = keyed_fs("secrp", &key);
    let mgs: Nid = fs.mgs_nid.parse().unwrap();
    let proxy = nacre_testkit::proxy::start(mgs.addr, "secrp", 16, tamper_first_body);
    let unauthentic_before = net_stat(&fs, "frames_unauthentic");
    // A native client given the key, reaching the MGS through the proxy: its first request
    // is changed on the way, dropped by the server, and sent again intact.
    let mut config = nacre_client::ClientConfig::default();
    config.net.key = Some(std::sync::Arc::new(
        nacre_net::sec::FsKey::load(&key).unwrap(),
    ));
    let client = nacre_client::Client::mount(Nid::tcp(proxy.addr), "secrp", config).unwrap();
    client
        .mkdir(nacre_types::Fid::ROOT, b"through-proxy", 0o755, 0, 0)
        .unwrap();
    assert!(fs.path("through-proxy").is_dir());
    assert_eq!(
        net_stat(&fs, "frames_unauthentic"),
        unauthentic_before + 1,
        "the changed frame was caught by the server process"
    );
    // Everything the client sent to the MGS, replayed on a new connection: the server's
    // new challenge cannot be answered by the old response.
    let refused_before = net_stat(&fs, "handshakes_refused");
    let captured = proxy.recorded.lock().unwrap().clone();
    let mut replay = std::net::TcpStream::connect(mgs.addr).unwrap();
    replay.write_all(&captured).unwrap();
    replay
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = replay.read_to_end(&mut answer);
    assert!(answer.len() < 200, "only the handshake's answers came back");
    nacre_testkit::wait_for("the replay refused", || {
        net_stat(&fs, "handshakes_refused") > refused_before
    });
}
