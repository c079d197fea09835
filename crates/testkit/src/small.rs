//! A networked file system whose OSTs may each sit on a size-limited tmpfs (a small device,
//! to fill): an MGS+MDT server process on 127.0.0.1 and one OSS process on 127.0.0.2 serving
//! every OST, formatted by hand so the OST directories can be mounted first.

use crate::{free_port_at, mkfs, ClientMount, ServerProc, Tmpfs};
use std::path::{Path, PathBuf};

/// The file system; servers stop, tmpfs unmount and directories go when it is dropped
/// (fields drop in order: mounts are taken by the caller and dropped first).
pub struct SmallFs {
    /// The OSS process.
    pub oss: ServerProc,
    /// The MGS+MDT process.
    pub mds: ServerProc,
    _tmpfs: Vec<Tmpfs>,
    /// OST directories, by index.
    pub osts: Vec<PathBuf>,
    /// `MGS_NID:/FSNAME`.
    pub source: String,
    root: tempfile::TempDir,
}

impl SmallFs {
    /// Starts `fsname` with one OST per entry of `osts`: on a tmpfs of that size
    /// (`Some("64m")`) or on the test directory's file system (`None`).
    pub fn start(fsname: &str, osts: &[Option<&str>]) -> SmallFs {
        let root = tempfile::tempdir_in(crate::test_dir()).expect("test directory");
        let d = |n: &str| root.path().join(n);
        let mut tmpfs = Vec::new();
        let mut dirs = Vec::new();
        for (i, size) in osts.iter().enumerate() {
            let dir = d(&format!("ost{i}"));
            if let Some(size) = size {
                tmpfs.push(Tmpfs::mount(&dir, size));
            }
            dirs.push(dir);
        }
        let mgs_addr = format!("127.0.0.1:{}", free_port_at("127.0.0.1"));
        let nid = format!("{mgs_addr}@tcp");
        mkfs("--mgs", 0, fsname, None, &d("mgs"));
        mkfs("--mdt", 0, fsname, Some(&nid), &d("mdt0"));
        for (i, dir) in dirs.iter().enumerate() {
            mkfs("--ost", i as u32, fsname, Some(&nid), dir);
        }
        let mds = ServerProc::start_at(&mgs_addr, &[&d("mgs"), &d("mdt0")], &[]);
        let oss_addr = format!("127.0.0.2:{}", free_port_at("127.0.0.2"));
        let targets: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        let oss = ServerProc::start_at(&oss_addr, &targets, &[]);
        SmallFs {
            oss,
            mds,
            _tmpfs: tmpfs,
            osts: dirs,
            source: format!("{nid}:/{fsname}"),
            root,
        }
    }

    /// A client process mounting the file system at a directory of its own named `name`.
    pub fn mount(&self, name: &str) -> ClientMount {
        ClientMount::mount(&self.source, &self.dir(name), &[])
    }

    /// A path in the file system's scratch directory (not in the file system).
    pub fn dir(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }
}

/// How full the file system holding `dir` is, in percent (used: total less available).
pub fn fill_percent(dir: &Path) -> f64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: zeroed statvfs is a valid out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: NUL-terminated path, valid out-parameter.
    assert_eq!(
        unsafe { libc::statvfs(c.as_ptr(), &mut st) },
        0,
        "statvfs {}",
        dir.display()
    );
    (st.f_blocks - st.f_bavail) as f64 * 100.0 / st.f_blocks as f64
}

/// `GET /metrics` at `addr`: the body.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect to /metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read /metrics");
    resp.split_once("\r\n\r\n")
        .expect("an HTTP answer")
        .1
        .to_string()
}
