//! Attacks on the node API by a local process (docs/security.md, "What each actor can do";
//! issue 41 (d)): the node API serves every local user alike (who calls is the kernel's
//! word, `SO_PEERCRED`), so what one process can send there, any user can. The attacker
//! speaks the API protocol itself over the mount's socket, as a hostile program would.

use nacre_testkit::{get_param, on_both_forms, Form, Spec, TestFs};
use nacre_types::Status;
use nacre_wire::api::{ApiReply, ApiRequest, API_IO_BYTES_MAX, API_VERSION};
use nacre_wire::{decode_body, encode_body, Header, HEADER_BYTES};
use rustix::fd::{AsFd, OwnedFd};
use std::io::{IoSlice, Read, Write};
use std::os::unix::net::UnixStream;

/// A raw connection to a node API socket.
struct RawApi {
    s: UnixStream,
    xid: u64,
}

impl RawApi {
    fn connect(fs: &TestFs) -> RawApi {
        RawApi::connect_at(&fs.mnt)
    }

    fn connect_at(mnt: &std::path::Path) -> RawApi {
        let sock = nacre_api::socket_of(mnt).unwrap();
        RawApi {
            s: UnixStream::connect(sock).unwrap(),
            xid: 0,
        }
    }

    fn send(&mut self, req: &ApiRequest) {
        self.send_as(req, nacre_wire::api::API_HEADER_VERSION);
    }

    /// Sends `req` in a frame of header version `version`.
    fn send_as(&mut self, req: &ApiRequest, version: u16) {
        self.xid += 1;
        let body = encode_body(req);
        let mut h = Header::request(req.opcode(), 0, self.xid);
        h.version = version;
        h.seal(&body, None, false);
        self.s.write_all(&h.encode()).unwrap();
        self.s.write_all(&body).unwrap();
    }

    /// The next reply: its status and, if 0, its body.
    fn recv(&mut self) -> (i32, Option<ApiReply>) {
        let (h, body) = self.recv_raw();
        let reply = (h.status == 0).then(|| decode_body(&body).unwrap());
        (h.status, reply)
    }

    /// The next reply's header and body as they are.
    fn recv_raw(&mut self) -> (Header, Vec<u8>) {
        let mut head = [0u8; HEADER_BYTES];
        self.s.read_exact(&mut head).unwrap();
        let h = Header::decode_any_version(&head, API_IO_BYTES_MAX).unwrap();
        assert_eq!(h.xid, self.xid);
        let mut body = vec![0u8; h.body_len as usize];
        self.s.read_exact(&mut body).unwrap();
        assert_eq!(h.bulk_len, 0);
        (h, body)
    }

    fn hello(&mut self) {
        self.send(&ApiRequest::Hello {
            version: API_VERSION,
            attach: None,
        });
        assert!(matches!(self.recv(), (0, Some(ApiReply::Hello { .. }))));
    }

    /// Asks for a ring of `entries` and `buffer_bytes` over memory `mem`: the status.
    fn ring_setup(&mut self, entries: u32, buffer_bytes: u64, mem: &OwnedFd) -> i32 {
        self.send(&ApiRequest::RingSetup {
            entries,
            buffer_bytes,
        });
        assert!(matches!(self.recv(), (0, Some(ApiReply::SendFds))));
        let flags = rustix::event::EventfdFlags::CLOEXEC;
        let (sq, cq) = (
            rustix::event::eventfd(0, flags).unwrap(),
            rustix::event::eventfd(0, flags).unwrap(),
        );
        let fds = [mem.as_fd(), sq.as_fd(), cq.as_fd()];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
        rustix::net::sendmsg(
            &self.s,
            &[IoSlice::new(b"R")],
            &mut control,
            rustix::net::SendFlags::NOSIGNAL,
        )
        .unwrap();
        self.recv().0
    }
}

/// Huge pages kept available while it lives (the kernel's pool raised to at least
/// `pages`, put back after), so a hugetlbfs mapping would succeed: a refusal is the node
/// API's, not the kernel's. One at a time in this process (each puts back what it found).
struct HugePages {
    old: String,
    _one: std::sync::MutexGuard<'static, ()>,
}

static HUGE_PAGES: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl HugePages {
    fn reserve(pages: u64) -> HugePages {
        let one = HUGE_PAGES.lock().unwrap_or_else(|e| e.into_inner());
        let path = "/proc/sys/vm/nr_hugepages";
        let old = std::fs::read_to_string(path).unwrap();
        let have: u64 = old.trim().parse().unwrap();
        std::fs::write(path, (have + pages).to_string()).unwrap();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let free: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("HugePages_Free:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        let guard = HugePages { old, _one: one };
        assert!(
            free >= pages,
            "the kernel gave {free} huge pages of {pages}"
        );
        guard
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/vm/nr_hugepages", self.old.trim());
    }
}

/// A memfd of `len` bytes (rounded up to `unit`), sealed against shrinking as the node
/// API asks, of huge pages if `huge`.
fn sealed_memfd(len: u64, huge: bool) -> OwnedFd {
    use rustix::fs::MemfdFlags;
    let mut flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    let mut size = len;
    if huge {
        flags |= MemfdFlags::HUGETLB;
        size = len.div_ceil(2 << 20) * (2 << 20);
    }
    let mem = rustix::fs::memfd_create("hostile-ring", flags).unwrap();
    rustix::fs::ftruncate(&mem, size).unwrap();
    rustix::fs::fcntl_add_seals(&mem, rustix::fs::SealFlags::SHRINK).unwrap();
    mem
}

/// The rings the mount refused for their memory (`llite.FS.api_stats` `rings_refused`).
fn refused(pid: u32, fsname: &str) -> u64 {
    let text = get_param(Some(pid), &format!("llite.{fsname}.api_stats"));
    text.lines()
        .find_map(|l| l.strip_prefix("rings_refused "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rings_refused in {text}"))
}

/// A ring over a hugetlbfs memfd, sealed as asked: holes punched in it fault again only
/// while the system has huge pages to spare, and SIGBUS the mount when it has none. The
/// node API refuses it (`EINVAL`), counts and logs it, and the mount serves on; the same
/// request over a plain memfd is served (the refusal is the memory's, not the request's).
fn a_hugetlb_ring_is_refused(form: Form) {
    let fsname = match form {
        Form::Embedded => "hugee",
        Form::Networked => "hugen",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let pid = fs.client_pid().unwrap();
    let (entries, buffer_bytes) = (16, 1 << 20);
    let len = nacre_wire::ring::ring_bytes(entries, buffer_bytes);
    let _pages = HugePages::reserve(4);
    let before = refused(pid, fsname);
    let mut a = RawApi::connect(&fs);
    a.hello();
    let huge = sealed_memfd(len, true);
    assert_eq!(
        a.ring_setup(entries, buffer_bytes, &huge),
        Status::Inval.code()
    );
    assert_eq!(refused(pid, fsname), before + 1, "counted");
    // Punching a hole now touches nothing of the mount's.
    rustix::fs::fallocate(
        &huge,
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        0,
        2 << 20,
    )
    .unwrap();
    assert_eq!(
        a.ring_setup(entries, buffer_bytes, &sealed_memfd(len, false)),
        0
    );
    std::fs::write(fs.path("after"), b"served").unwrap();
    assert_eq!(std::fs::read(fs.path("after")).unwrap(), b"served");
    assert_eq!(fs.client_pid(), Some(pid), "the mount runs on");
}

/// A `Hello` of an API version the node does not speak is answered `EPROTO` with the range
/// it speaks (8 bytes), and the socket stays open for a `Hello` it does; the frames' header
/// version is the API's own and never the network protocol's (a frame of any header version
/// is read: a network protocol change breaks no deployed application).
fn another_api_version_is_answered_with_the_range(form: Form) {
    use nacre_wire::api::ApiRange;
    let fsname = match form {
        Form::Embedded => "apive",
        Form::Networked => "apivn",
    };
    let fs = TestFs::start_with(form, Spec::osts(1).fsname(fsname));
    let mut a = RawApi::connect(&fs);
    for version in [API_VERSION + 1, 0, u32::MAX] {
        a.send(&ApiRequest::Hello {
            version,
            attach: None,
        });
        let (h, body) = a.recv_raw();
        assert_eq!(h.status, Status::Proto.code(), "API {version}");
        assert_eq!(
            ApiRange::decode(&body),
            Some(ApiRange::OURS),
            "API {version}"
        );
    }
    // Refused before any session: nothing else is served yet.
    a.send(&ApiRequest::Stat {
        path: b"/".to_vec(),
        follow: false,
    });
    assert_eq!(a.recv().0, Status::Proto.code());
    let mut a = RawApi::connect(&fs);
    a.send_as(
        &ApiRequest::Hello {
            version: API_VERSION,
            attach: None,
        },
        nacre_wire::PROTOCOL_VERSION + 1,
    );
    assert!(matches!(a.recv(), (0, Some(ApiReply::Hello { .. }))));
    std::fs::write(fs.path("after"), b"served").unwrap();
    assert_eq!(std::fs::read(fs.path("after")).unwrap(), b"served");
}

on_both_forms!(
    a_hugetlb_ring_is_refused,
    another_api_version_is_answered_with_the_range
);

/// Groups of the groups probe: a directory only the first may enter, one only the second.
const PROBE_GROUPS: [u32; 2] = [70_001, 70_002];

/// A caller's groups are the kernel's record of when it connected (`SO_PEERGROUPS`), not
/// what `/proc/PID` says later (when the pid may be another process's): a process that
/// connects in group A, then changes to group B before its hello, is served as A.
#[test]
fn callers_groups_are_the_kernels_when_they_connected() {
    let fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("peergrp"));
    for (name, gid) in ["g1", "g2"].iter().zip(PROBE_GROUPS) {
        let dir = fs.path(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        std::os::unix::fs::chown(&dir, Some(0), Some(gid)).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o070))
            .unwrap();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            &nacre_tests::test_name(module_path!(), "groups_probe"),
            "--nocapture",
        ])
        .env("NACRE_PROBE_MNT", &fs.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("PROBE g1 0") && text.contains("PROBE g2 13"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run by `callers_groups_are_the_kernels_when_they_connected` in a process of its own (it
/// changes the process's ids): connects to the node API as uid 1000 in group A, changes its
/// groups to B, then says hello and looks into A's and B's directories.
#[test]
#[ignore = "a helper run in a process of its own"]
fn groups_probe() {
    let mnt = std::path::PathBuf::from(std::env::var("NACRE_PROBE_MNT").unwrap());
    let [a, b] = PROBE_GROUPS;
    let keep_root = 0;
    // SAFETY: plain system calls changing this process's own ids.
    unsafe {
        assert_eq!(libc::setgroups(1, &a), 0);
        assert_eq!(libc::setresgid(1000, 1000, keep_root), 0);
        assert_eq!(libc::setresuid(1000, 1000, keep_root), 0);
    }
    let mut api = RawApi::connect_at(&mnt);
    // SAFETY: as above (the saved uid 0 lets this process be root again for a moment).
    unsafe {
        assert_eq!(libc::setresuid(u32::MAX, 0, u32::MAX), 0);
        assert_eq!(libc::setgroups(1, &b), 0);
        assert_eq!(libc::setresuid(u32::MAX, 1000, u32::MAX), 0);
    }
    api.hello();
    for dir in ["g1", "g2"] {
        api.send(&ApiRequest::Stat {
            path: format!("{dir}/f").into_bytes(),
            follow: false,
        });
        let (status, _) = api.recv();
        println!("PROBE {dir} {}", status.abs());
    }
}
