//! The Debian package, as an admin installs it: built by scripts/build-deb.sh, unpacked into a
//! clean root, and what its units and mount helper run, run from there (the test machine has
//! no systemd as PID 1, so the units' commands run by hand, with `NOTIFY_SOCKET` as systemd
//! sets it for `Type=notify`).

use nacre_testkit::{free_port_at, nacre_bin, sh};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `KEY=` of a unit file.
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {unit}"))
        .to_string()
}

/// The next notification a service sent on `sock`.
fn notification(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).expect("no notification in time");
    String::from_utf8_lossy(&buf[..n]).trim().to_string()
}

/// A child process killed if the test ends early.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_package_installs_units_helper_docs_and_they_run() {
    let tmp = tempfile::Builder::new()
        .prefix("nacre-deb")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let script = nacre_testkit::tests_dir().join("../scripts/build-deb.sh");
    let out = Command::new(&script)
        .arg("--bin")
        .arg(nacre_bin())
        .arg("--out")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let info = sh(&format!("dpkg-deb -I {}", deb.display()));
    assert!(
        info.contains("Package: nacre") && info.contains("Depends: fuse3"),
        "{info}"
    );
    let root = tmp.path().join("root");
    sh(&format!("dpkg-deb -x {} {}", deb.display(), root.display()));
    for f in [
        "usr/bin/nacre",
        "lib/systemd/system/nacre-server@.service",
        "lib/systemd/system/nacre-mount@.service",
        "usr/share/man/man1/nacre.1.gz",
        "usr/share/man/man1/nacre-server.1.gz",
        "usr/share/man/man1/nacre-mount.1.gz",
        "usr/share/bash-completion/completions/nacre",
        "usr/share/zsh/vendor-completions/_nacre",
        "usr/share/fish/vendor_completions.d/nacre.fish",
        "usr/share/doc/nacre/examples/server.conf",
        "lib/systemd/system/nacre-policy@.service",
        "usr/share/doc/nacre/examples/policy.toml",
        "usr/share/nacre/slurm/prolog.sh",
        "usr/share/nacre/slurm/epilog.sh",
    ] {
        assert!(root.join(f).exists(), "{f} missing from the package");
    }
    let link = std::fs::read_link(root.join("sbin/mount.nacre")).unwrap();
    assert_eq!(link, Path::new("/usr/bin/nacre"));
    let man = sh(&format!(
        "zcat {}",
        root.join("usr/share/man/man1/nacre-server.1.gz").display()
    ));
    assert!(
        man.contains("conns\\-max") || man.contains("conns-max"),
        "{man}"
    );
    let bash =
        std::fs::read_to_string(root.join("usr/share/bash-completion/completions/nacre")).unwrap();
    assert!(bash.contains("setstripe"));

    // What nacre-server@t1 runs, from the unpacked root: without debug information, as
    // Debian ships binaries (the release build's is 120 MB with it).
    let nacre = root.join("usr/bin/nacre");
    let sections = sh(&format!("readelf -S --wide {}", nacre.display()));
    assert!(
        sections.contains(".text") && !sections.contains(".debug_info"),
        "{sections}"
    );
    let unit =
        std::fs::read_to_string(root.join("lib/systemd/system/nacre-server@.service")).unwrap();
    assert_eq!(unit_value(&unit, "Type"), "notify");
    assert_eq!(unit_value(&unit, "Restart"), "on-failure");
    let exec = unit_value(&unit, "ExecStart")
        .replace("%i", "t1")
        .replace("/usr/bin/nacre", nacre.to_str().unwrap())
        .replace("/etc/nacre/", &format!("{}/etc/nacre/", root.display()));
    let srv = tmp.path().join("srv");
    let listen = format!("127.0.0.1:{}", free_port_at("127.0.0.1"));
    let nid = format!("{listen}@tcp");
    let n = nacre.to_str().unwrap();
    sh(&format!(
        "{n} mkfs --mgs --fsname pkg {}/mgs",
        srv.display()
    ));
    sh(&format!(
        "{n} mkfs --mdt --index 0 --fsname pkg --mgsnode {nid} {}/mdt0",
        srv.display()
    ));
    sh(&format!(
        "{n} mkfs --ost --index 0 --fsname pkg --mgsnode {nid} {}/ost0",
        srv.display()
    ));
    std::fs::write(
        root.join("etc/nacre/t1.conf"),
        format!(
            "listen = {listen}\ntarget = {0}/mgs\ntarget = {0}/mdt0\ntarget = {0}/ost0\n",
            srv.display()
        ),
    )
    .unwrap();
    let notify_path = tmp.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut words = exec.split_whitespace();
    let mut server = Child(
        Command::new(words.next().unwrap())
            .args(words)
            .env("NOTIFY_SOCKET", &notify_path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert_eq!(notification(&notify), "READY=1");

    // mount -t nacre, as mount(8) runs the helper (fstab options included).
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(&nacre, bin.join("mount.nacre")).unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let helper = Command::new(bin.join("mount.nacre"))
        .arg(format!("{nid}:/pkg"))
        .arg(&mnt)
        .args(["-o", "rw,_netdev,noauto,checksum=true,max_rpcs_in_flight=4"])
        .output()
        .unwrap();
    assert!(
        helper.status.success(),
        "{}",
        String::from_utf8_lossy(&helper.stderr)
    );
    std::fs::write(mnt.join("hello"), b"from the package").unwrap();
    assert_eq!(
        std::fs::read(mnt.join("hello")).unwrap(),
        b"from the package"
    );
    let bad = Command::new(bin.join("mount.nacre"))
        .arg(format!("{nid}:/pkg"))
        .arg(&mnt)
        .args(["-o", "bogus=1"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(32), "mount(8)'s failure code");
    nacre_testkit::nacre_ok(&["umount", mnt.to_str().unwrap()]);

    // SIGTERM, as systemd stops the unit: STOPPING=1, then gone.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    assert_eq!(notification(&notify), "STOPPING=1");
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
