//! `libnacre_preload.so` on the networked form: unmodified programs — dd, cp, tar, fio
//! (psync and libaio), Python, IOR's POSIX interface (`nacre bench ior -a POSIX`) — run
//! with it on a separate `nacre mount`, and their data goes through the node's client's
//! rings: the mount's `api_stats` count every byte, the bytes are checked through the
//! kernel, and no program says it fell back. Fork, dup, mmap and a writer killed -9 are
//! shown with Python; a mount whose node API cannot be reached is served by the kernel
//! after one clear line.

use nacre_testkit::{get_param, nacre_ok, pattern, wait_for, Form, Spec, TestFs};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn preload_lib() -> PathBuf {
    let lib = nacre_testkit::nacre_bin()
        .parent()
        .unwrap()
        .join("libnacre_preload.so");
    assert!(lib.exists(), "{} is built", lib.display());
    lib
}

/// `script` run by sh with the library preloaded, in `dir`: its output (it must succeed).
fn run(dir: &Path, script: &str) -> String {
    let out = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .env("LD_PRELOAD", preload_lib())
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{script}:\n{text}");
    text
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A counter of the mount's node API.
fn stat(fs: &TestFs, fsname: &str, key: &str) -> u64 {
    get_param(fs.client_pid(), &format!("llite.{fsname}.api_stats"))
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("api_stats has {key}"))
}

/// Bytes read and written through the node's client so far.
fn moved(fs: &TestFs, fsname: &str) -> (u64, u64) {
    (
        stat(fs, fsname, "read_bytes"),
        stat(fs, fsname, "write_bytes"),
    )
}

/// The open handles the MDTs of `fs` hold for clients.
fn open_handles(fs: &TestFs) -> u64 {
    get_param(Some(fs.server_pids()[0]), "mdt.*.exports")
        .lines()
        .filter_map(|l| l.rsplit_once("open_handles: "))
        .filter_map(|(_, n)| n.trim().parse::<u64>().ok())
        .sum()
}

#[test]
fn unmodified_tools_do_their_data_io_through_the_rings() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("plt"));
    let d = fs.path("d");
    std::fs::create_dir(&d).unwrap();
    nacre_ok(&["setstripe", "-c", "2", "-S", "1M", d.to_str().unwrap()]);
    let s = fs.scratch().to_path_buf();
    let data = pattern(5, (24 << 20) + 12_345);
    std::fs::write(s.join("src"), &data).unwrap();
    let m = d.to_str().unwrap();
    let quiet = |out: &str| assert!(!out.contains("nacre-preload:"), "no fallback: {out}");

    // dd writes (and fsyncs) through the rings, then reads back with O_DIRECT.
    let (r0, w0) = moved(&fs, "plt");
    quiet(&run(
        &s,
        &format!("dd if=src of={m}/dd.bin bs=1M conv=fsync status=none"),
    ));
    let (r1, w1) = moved(&fs, "plt");
    assert!(
        w1 - w0 >= data.len() as u64,
        "dd's writes went through the rings"
    );
    assert!(
        std::fs::read(d.join("dd.bin")).unwrap() == data,
        "the kernel reads dd's bytes"
    );
    quiet(&run(
        &s,
        &format!("dd if={m}/dd.bin of=dd.back bs=64k iflag=direct status=none"),
    ));
    let (r2, _) = moved(&fs, "plt");
    assert!(
        r2 - r1 >= data.len() as u64,
        "dd's reads went through the rings"
    );
    assert!(std::fs::read(s.join("dd.back")).unwrap() == data);
    let stripe = nacre_ok(&["getstripe", d.join("dd.bin").to_str().unwrap()]);
    assert!(
        stripe.contains("stripe_count:  2") || stripe.contains("stripe_count: 2"),
        "{stripe}"
    );

    // cp in, and from one Nacre file to another (copy_file_range through the rings).
    let (_, w2) = moved(&fs, "plt");
    quiet(&run(
        &s,
        &format!("cp src {m}/cp.bin && cp {m}/cp.bin {m}/cp2.bin"),
    ));
    let (_, w3) = moved(&fs, "plt");
    assert!(
        w3 - w2 >= 2 * data.len() as u64,
        "both copies written through the rings"
    );
    assert!(std::fs::read(d.join("cp2.bin")).unwrap() == data);

    // tar a tree in and out.
    let tree = s.join("tree");
    for (i, size) in [0usize, 1, 4095, 4096, 70_001, 3 << 20].iter().enumerate() {
        let sub = tree.join(format!("d{}", i % 2));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}")), pattern(i as u64, *size)).unwrap();
    }
    let (r3, w4) = moved(&fs, "plt");
    quiet(&run(
        &s,
        &format!("tar cf {m}/t.tar tree && mkdir {m}/x && tar xf {m}/t.tar -C {m}/x"),
    ));
    let (r4, w5) = moved(&fs, "plt");
    assert!(r4 > r3 && w5 > w4, "tar's data went through the rings");
    for (i, size) in [0usize, 1, 4095, 4096, 70_001, 3 << 20].iter().enumerate() {
        let f = d.join(format!("x/tree/d{}/f{i}", i % 2));
        assert!(
            std::fs::read(&f).unwrap() == pattern(i as u64, *size),
            "{}",
            f.display()
        );
    }

    // fio, psync and libaio (32 in flight), O_DIRECT random writes verified by reading back.
    for (engine, depth) in [("psync", 1), ("libaio", 32)] {
        let (r5, w6) = moved(&fs, "plt");
        let out = run(
            &s,
            &format!(
                "fio --name=v --filename={m}/fio.{engine} --size=8m --bs=4k --rw=randwrite \
                 --ioengine={engine} --iodepth={depth} --direct=1 --verify=crc32c \
                 --do_verify=1 --verify_fatal=1"
            ),
        );
        quiet(&out);
        assert!(out.contains("err= 0"), "{out}");
        let (r6, w7) = moved(&fs, "plt");
        assert!(
            w7 - w6 >= 8 << 20 && r6 - r5 >= 8 << 20,
            "fio {engine} through the rings"
        );
    }

    // One AIO context with requests on a Nacre file and on a local one at once: both
    // served (the kernel's and the ring's completions reaped together), both verified.
    let (r5, w6) = moved(&fs, "plt");
    let out = run(
        &s,
        &format!(
            "fio --name=mix --filename={m}/mixa:mixb --size=8m --bs=4k --rw=randwrite \
             --ioengine=libaio --iodepth=16 --direct=1 --verify=crc32c --do_verify=1 \
             --verify_fatal=1"
        ),
    );
    quiet(&out);
    assert!(out.contains("err= 0"), "{out}");
    let (r6, w7) = moved(&fs, "plt");
    assert!(
        w7 - w6 >= 3 << 20 && r6 - r5 >= 3 << 20,
        "the Nacre half through the ring: {out}"
    );

    // IOR's POSIX interface: two tasks, file per process, written and read back checked.
    let out = run(
        &s,
        &format!(
            "{} bench ior -a POSIX -w -r -W -R -t 1m -b 8m -N 2 -F -e -o {m}/ior",
            nacre_testkit::nacre_bin().display()
        ),
    );
    quiet(&out);
    let (r7, w8) = moved(&fs, "plt");
    assert!(w8 - w0 > (16 << 20) && r7 - r0 > (16 << 20), "{out}");

    // Python: file objects, os.pread/readv, append, shutil (sendfile).
    let py = format!(
        r#"
import os, shutil, hashlib
p = "{m}/py.bin"
blob = os.urandom(3_000_001)
with open(p, "wb") as f:
    f.write(blob[:1_000_000]); f.write(blob[1_000_000:])
with open(p, "rb") as f:
    assert f.read() == blob
    f.seek(123_456); assert f.read(1000) == blob[123_456:124_456]
fd = os.open(p, os.O_RDONLY)
assert os.pread(fd, 4096, 2_999_000) == blob[2_999_000:2_999_000 + 4096][:1001]
a, b = bytearray(10), bytearray(20)
assert os.readv(fd, [a, b]) == 30 and bytes(a + b) == blob[:30]
assert os.lseek(fd, 0, os.SEEK_CUR) == 30
os.close(fd)
with open(p, "ab") as f:
    f.write(b"tail")
shutil.copyfile(p, p + ".copy")
assert open(p + ".copy", "rb").read() == blob + b"tail"
print("python ok", hashlib.sha256(blob).hexdigest()[:8])
"#
    );
    let (r8, w9) = moved(&fs, "plt");
    let out = run(&s, &format!("python3 -c '{}'", py.replace('\'', "\"")));
    quiet(&out);
    assert!(out.contains("python ok"), "{out}");
    let (r9, w10) = moved(&fs, "plt");
    assert!(
        r9 - r8 >= 6_000_000 && w10 - w9 >= 3_000_000,
        "Python's data through the rings"
    );
}

#[test]
fn fork_dup_mmap_and_a_killed_writer_under_the_preload() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("plf"));
    let s = fs.scratch().to_path_buf();
    let m = fs.mnt.to_str().unwrap().to_string();
    // dup shares the position; a child after fork writes at it and the parent goes on
    // from where the child left it; a shared mapping's change is seen by a read through
    // the rings after fsync.
    let py = format!(
        r#"
import os, mmap
p = "{m}/f.bin"
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"a" * 100000)
fd2 = os.dup(fd)
os.write(fd2, b"b" * 100000)
assert os.lseek(fd, 0, os.SEEK_CUR) == 200000
pid = os.fork()
if pid == 0:
    os.write(fd, b"c" * 100000)
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
os.write(fd, b"d" * 100000)
os.fsync(fd)
data = os.pread(fd, 400000, 0)
assert data == b"a" * 100000 + b"b" * 100000 + b"c" * 100000 + b"d" * 100000, len(data)
mm = mmap.mmap(fd, 400000)
mm[0:5] = b"MMAP!"
mm.close()
os.fsync(fd)
assert os.pread(fd, 5, 0) == b"MMAP!"
os.close(fd2)
os.close(fd)
print("fork ok")
"#
    );
    let (r0, w0) = moved(&fs, "plf");
    let out = run(&s, &format!("python3 -c '{}'", py.replace('\'', "\"")));
    assert!(
        out.contains("fork ok") && !out.contains("nacre-preload:"),
        "{out}"
    );
    let (r1, w1) = moved(&fs, "plf");
    assert!(
        w1 - w0 >= 400_000 && r1 - r0 >= 400_000,
        "parent and child through the rings"
    );
    let back = std::fs::read(fs.path("f.bin")).unwrap();
    assert_eq!(&back[..5], b"MMAP!");
    assert_eq!(&back[300_000..300_010], b"dddddddddd");

    // A writer killed -9 mid-write: its session, rings and open file go.
    let before = open_handles(&fs);
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import os\nf = os.open('{m}/dying', os.O_WRONLY | os.O_CREAT, 0o644)\nwhile True:\n    os.write(f, b'x' * 65536)\n"
        ))
        .env("LD_PRELOAD", preload_lib())
        .spawn()
        .unwrap();
    wait_for("the writer's data arriving", || {
        std::fs::metadata(fs.path("dying")).is_ok_and(|md| md.len() >= 4 << 20)
    });
    assert!(stat(&fs, "plf", "sessions") >= 1);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for("the killed session gone", || {
        stat(&fs, "plf", "sessions") == 0
    });
    assert_eq!(stat(&fs, "plf", "files_open"), 0);
    wait_for("no open left at the MDT", || open_handles(&fs) <= before);
    std::fs::OpenOptions::new()
        .append(true)
        .open(fs.path("dying"))
        .unwrap();
    std::fs::remove_file(fs.path("dying")).unwrap();
}

#[test]
fn without_its_node_api_the_kernel_serves_and_says_so() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("plu"));
    let socket = nacre_api::socket_of(&fs.mnt).unwrap();
    // The node API unreachable (its socket gone), the mount still up.
    std::fs::remove_file(&socket).unwrap();
    let s = fs.scratch().to_path_buf();
    let data = pattern(9, 3 << 20);
    std::fs::write(s.join("src"), &data).unwrap();
    let m = fs.mnt.to_str().unwrap();
    let (r0, w0) = moved(&fs, "plu");
    let out = run(&s, &format!("dd if=src of={m}/k.bin bs=1M status=none"));
    assert!(
        out.contains("nacre-preload:") && out.contains("goes through the kernel"),
        "one clear line: {out}"
    );
    assert_eq!(out.matches("nacre-preload:").count(), 1, "said once: {out}");
    assert_eq!(moved(&fs, "plu"), (r0, w0), "nothing through the node API");
    assert!(std::fs::read(fs.path("k.bin")).unwrap() == data);
}

/// POSIX edge cases of the read and write families (tests/c/preload_check.c: positions,
/// short reads and holes, EINVAL and EBADF, readv/preadv2/pwritev, dup/dup2/F_DUPFD,
/// ftruncate, copy_file_range offsets, close_range, O_APPEND, a shared mapping) hold the
/// same through the kernel and through the library, on a networked mount.
#[test]
fn posix_edges_are_the_kernels_through_the_library() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(2).fsname("ple"));
    let exe = fs.scratch().join("preload_check");
    let src = nacre_testkit::tests_dir().join("c/preload_check.c");
    let cc = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", text(&cc));
    for (i, preload) in [false, true].into_iter().enumerate() {
        let dir = fs.path(&format!("run{i}"));
        std::fs::create_dir(&dir).unwrap();
        let (r0, w0) = moved(&fs, "ple");
        let mut cmd = Command::new(&exe);
        cmd.arg(&dir);
        if preload {
            cmd.env("LD_PRELOAD", preload_lib());
        }
        let out = cmd.output().unwrap();
        let t = text(&out);
        assert!(
            out.status.success() && t.starts_with("ok"),
            "preload {preload}: {t}"
        );
        let (r1, w1) = moved(&fs, "ple");
        if preload {
            assert!(
                w1 - w0 >= 3 << 20 && r1 - r0 >= 3 << 20,
                "through the rings"
            );
        } else {
            assert_eq!(
                (r1, w1),
                (r0, w0),
                "the control run goes through the kernel only"
            );
        }
    }
}
