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

/// A networked file system whose servers hold `key` and whose mount holds a client key
/// made from it (`KEY.client`).
fn keyed_fs(fsname: &str, key: &Path) -> TestFs {
    let k = key.to_str().unwrap();
    let client = nacre_testkit::derived_key(key, &client_key_of(key), "client", None);
    TestFs::start_with(
        Form::Networked,
        Spec::osts(2)
            .mdts(2)
            .fsname(fsname)
            .server_args(&["--key", k])
            .mount_args(&["--key", client.to_str().unwrap()]),
    )
}

/// Where [`keyed_fs`] keeps the client key made from `key`.
fn client_key_of(key: &Path) -> PathBuf {
    key.with_extension("client")
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
        let data = pattern(i as u64 + 1, 8 << 20);
        std::fs::write(fs.path("big"), &data).unwrap();
        nacre_ok(&["mkdir", "-i", "1", fs.path("remote").to_str().unwrap()]);
        for n in 0..20 {
            std::fs::write(fs.path(&format!("remote/f{n}")), format!("{level} {n}")).unwrap();
        }
        // Read back through a second mount (nothing from this mount's cache).
        let other = fs.scratch().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let _m = fs.mount_another(&other, &["--key", client_key_of(&key).to_str().unwrap()]);
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

/// The options of the mount at `mnt`, as /proc/self/mountinfo lists them.
fn mount_flags(mnt: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_str().unwrap();
    let line = info
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(want))
        .unwrap_or_else(|| panic!("{want} not mounted"));
    line.split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect()
}

/// Runs `path -u` as user nobody: the effective uid it printed, or the error that kept it
/// from running.
fn euid_of_running_as_nobody(path: &Path) -> Result<String, String> {
    let out = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(path)
        .arg("-u")
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

#[test]
fn mount_options_the_kernel_enforces_are_honoured() {
    use std::os::unix::fs::PermissionsExt;
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1));
    // A root-owned set-user-ID copy of `id`, and a device node (/dev/null's numbers).
    let tool = fs.path("id-suid");
    std::fs::copy("/usr/bin/id", &tool).unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let null = nacre_tests::c(&fs.path("null"));
    let rc = unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod: errno {}", nacre_tests::last_errno());
    // The defaults: set-id bits take effect, device nodes open, files run.
    assert_eq!(euid_of_running_as_nobody(&tool).unwrap(), "0");
    std::fs::OpenOptions::new()
        .write(true)
        .open(fs.path("null"))
        .unwrap();
    let flags = mount_flags(&fs.mnt);
    assert!(!flags.contains(&"nosuid".to_string()), "{flags:?}");

    let mnt = |name: &str| {
        let p = fs.scratch().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    };
    let (nosuid_dir, locked_dir) = (mnt("nosuid"), mnt("locked"));
    let _nosuid = fs.mount_another(&nosuid_dir, &["-o", "nosuid"]);
    let _locked = fs.mount_another(&locked_dir, &["-o", "ro,nodev,noexec"]);
    assert!(mount_flags(&nosuid_dir).contains(&"nosuid".to_string()));
    let locked_flags = mount_flags(&locked_dir);
    for f in ["ro", "nodev", "noexec"] {
        assert!(
            locked_flags.contains(&f.to_string()),
            "{f}: {locked_flags:?}"
        );
    }
    // nosuid: the same file runs as its caller.
    let nobody = euid_of_running_as_nobody(&nosuid_dir.join("id-suid")).unwrap();
    assert_ne!(
        nobody, "0",
        "a set-user-ID file on a nosuid mount made nobody root"
    );
    // noexec: nothing runs; nodev: the device node does not open; ro: nothing changes.
    let e = std::process::Command::new(locked_dir.join("id-suid"))
        .output()
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "noexec: {e}");
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(locked_dir.join("null"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "nodev: {e}");
    let e = std::fs::write(locked_dir.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "ro: {e}");
    assert!(!fs.path("new").exists());
    // An option the kernel has no flag for is refused, not dropped.
    let out = nacre(&[
        "mount",
        "-o",
        "nosuid,bogus",
        &fs.source(),
        mnt("bogus").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bogus"));
}

/// Capabilities run out (`mdt.*.capa_lifetime_s`, here 3 s) and a native client holding a
/// file open renews them: past half their life in the background, once expired before the
/// request that needs one (by fetching the layout again, which carries new ones while the
/// file is open). Its reads go on past the first capability's expiry.
#[test]
fn a_client_holding_a_file_open_renews_its_capabilities() {
    let keys = tempfile::tempdir().unwrap();
    let key = keygen(keys.path(), "renew", "secrn", "integrity");
    let fs = keyed_fs("secrn", &key);
    let data = pattern(5, 1 << 20);
    std::fs::write(fs.path("f"), &data).unwrap();
    let mds = fs.server_pids()[0].to_string();
    nacre_ok(&[
        "ctl",
        "--pid",
        &mds,
        "set_param",
        "mdt.secrn-MDT0000.capa_lifetime_s=3",
    ]);
    let mut config = nacre_client::ClientConfig::default();
    let client_key = nacre_net::sec::FsKey::load(&client_key_of(&key)).unwrap();
    config.net.key = Some(std::sync::Arc::new(client_key));
    let mgs: Nid = fs.source().split_once(":/").unwrap().0.parse().unwrap();
    let client = nacre_client::Client::mount(mgs, "secrn", config).unwrap();
    let fid = client
        .lookup(client.root().unwrap(), b"f", false)
        .unwrap()
        .fid;
    let (_, file) = client.open(fid, nacre_types::cred::MAY_READ).unwrap();
    let opened = std::time::Instant::now();
    let read = |at: usize| client.read(&file, at as u64, 4096).map(|b| b.to_vec());
    assert_eq!(read(0).unwrap(), &data[..4096]);
    // Past the first capabilities' life: the reads need new ones.
    nacre_testkit::wait_for("the first capabilities expired", || {
        opened.elapsed() > Duration::from_secs(4)
    });
    for at in [8192, 1 << 19, 0] {
        assert_eq!(read(at).unwrap(), &data[at..at + 4096], "read at {at}");
    }
    client.close(&file).unwrap();
}
