//! Replies no client should trust: a real server behind a proxy that speaks the protocol
//! correctly but turns one reply hostile (testkit::hostile). Bad content fails the one
//! operation with EIO at once, the cause is logged, and the mount goes on; framing faults
//! go through reconnect-and-resend and the operation succeeds. Networked only: the proxy
//! sits on the TCP path between the client process and the server process.

use nacre_testkit::hostile::{HostileProxy, Trick};
use nacre_testkit::{free_port_at, mkfs, nacre_ok, pattern, ClientMount, ServerProc};
use nacre_types::Fid;
use nacre_wire::mds::MdsOp;
use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

/// One server process (MGS, two MDTs, two OSTs) reached only through a hostile proxy.
/// Fields drop in order: the mount first, the directory last (removed while the mount was
/// still there, it was left behind).
struct Behind {
    client: ClientMount,
    _server: ServerProc,
    proxy: HostileProxy,
    _root: tempfile::TempDir,
}

fn start() -> Behind {
    let root = tempfile::Builder::new()
        .prefix("nacre-hostile")
        .tempdir_in(nacre_testkit::test_dir())
        .unwrap();
    let d = |n: &str| root.path().join(n);
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port_at("127.0.0.1"))
        .parse()
        .unwrap();
    let proxy = HostileProxy::start("127.0.0.1:0", listen);
    let nid = format!("{}@tcp", proxy.addr);
    mkfs("--mgs", 0, "hostile", None, &d("mgs"));
    for i in 0..2 {
        mkfs("--mdt", i, "hostile", Some(&nid), &d(&format!("mdt{i}")));
        mkfs("--ost", i, "hostile", Some(&nid), &d(&format!("ost{i}")));
    }
    let targets = ["mgs", "mdt0", "mdt1", "ost0", "ost1"].map(d);
    let refs: Vec<&std::path::Path> = targets.iter().map(|p| p.as_path()).collect();
    let server = ServerProc::start_at(&listen.to_string(), &refs, &["--nid", &nid]);
    // Warnings logged too (the suite runs with RUST_LOG=error): a dropped stray reply is one.
    let env = ["env".to_string(), "RUST_LOG=warn".to_string()];
    // No discovery: the server's own address would be a second rail around the proxy, and
    // which rail a request takes would decide whether a trick sees it.
    let client = ClientMount::mount_in(
        &env,
        &format!("{nid}:/hostile"),
        &d("mnt"),
        &["--discovery", "false"],
    );
    Behind {
        client,
        _server: server,
        proxy,
        _root: root,
    }
}

impl Behind {
    /// Arms `trick` (for replies to `opcode`; 0: any), runs `op`, and checks the trick
    /// fired exactly once.
    fn with_on<T>(&self, trick: Trick, opcode: u16, op: impl FnOnce() -> T) -> T {
        let before = self.proxy.fired();
        self.proxy.arm_for(trick, opcode);
        let out = op();
        self.proxy.arm(Trick::None);
        assert_eq!(self.proxy.fired(), before + 1, "{trick:?} did not fire");
        out
    }

    /// [`Behind::with_on`] for any reply.
    fn with<T>(&self, trick: Trick, op: impl FnOnce() -> T) -> T {
        self.with_on(trick, 0, op)
    }

    /// Whether the mount's log names `what` (the cause of a refused reply).
    fn logged(&self, what: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = fs::read_to_string(self.client.log_path()).unwrap_or_default();
            if log.contains(what) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn eio<T>(r: std::io::Result<T>) {
    match r {
        Ok(_) => panic!("a hostile reply must fail the operation; it succeeded"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
    }
}

/// Layouts and directory stripes no client may use. Files are made through a second mount,
/// so the first mount's lookup of each name is its first (a lookup that revalidates a cached
/// name is retried by the kernel on failure; a first lookup's failure reaches the caller).
#[test]
fn hostile_layouts_and_stripes_give_eio_and_the_mount_goes_on() {
    let b = start();
    let m = &b.client.mnt;
    let maker = ClientMount::mount(
        &format!("{}@tcp:/hostile", b.proxy.addr),
        &b._root.path().join("maker"),
        &[],
    );
    let data = pattern(3, 300_000);
    for name in ["f1", "f2"] {
        fs::write(maker.mnt.join(name), &data).unwrap();
    }
    let s = maker.mnt.join("striped");
    nacre_ok(&["mkdir", "-c", "2", s.to_str().unwrap()]);
    fs::write(s.join("x"), b"x").unwrap();
    let lookup = MdsOp::Lookup {
        parent: Fid::ROOT,
        name: Vec::new(),
    }
    .opcode();
    // A layout of no objects, then one of stripe size 0, in the answer to a lookup (in
    // falling name order: two lookups in rising order would have the second answered by
    // the directory's statahead window, crates/fuse/src/fs/window.rs, with no lookup sent).
    eio(b.with_on(Trick::LayoutNoObjects, lookup, || fs::read(m.join("f2"))));
    assert!(b.logged("layout of 0 objects"));
    eio(b.with_on(Trick::LayoutZeroStripeSize, lookup, || {
        fs::read(m.join("f1"))
    }));
    assert!(b.logged("stripe size 0"));
    assert!(fs::read(m.join("f1")).unwrap() == data, "the mount goes on");
    assert!(fs::read(m.join("f2")).unwrap() == data);
    // A directory stripe of no shards, asked for by a lookup in a striped directory.
    let stripe = MdsOp::GetDirStripe { fid: Fid::ROOT }.opcode();
    eio(b.with_on(Trick::DirStripeNoShards, stripe, || {
        fs::metadata(m.join("striped/x"))
    }));
    assert!(b.logged("directory stripe of 0 shards"));
    assert_eq!(fs::read(m.join("striped/x")).unwrap(), b"x");
}

#[test]
fn bad_bulk_and_stray_replies_do_not_reach_applications() {
    let b = start();
    let f = b.client.mnt.join("g");
    let data = pattern(4, 1 << 20);
    fs::write(&f, &data).unwrap();
    // O_DIRECT: every read goes to the OST (none is served from this node's page cache).
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f)
        .unwrap();
    let mut buf = nacre_types::AlignedBuf::zeroed(1 << 20);
    // More bulk than the read asked for: content, so EIO.
    eio(b.with(Trick::BulkLonger, || file.read_at(&mut buf, 0)));
    assert!(b.logged("answered with"));
    // A bulk shorter than its header says, then a closed connection: a framing fault, so
    // the client reconnects, resends, and the read succeeds.
    buf.fill(0);
    // On a descriptor of its own (no read-ahead of the one above can answer it).
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&f)
        .unwrap();
    let n = b.with(Trick::BulkShorter, || file.read_at(&mut buf, 0).unwrap());
    assert_eq!(n, data.len());
    assert!(buf[..] == data[..]);
    // A reply to a request never sent: dropped; every request still gets its own answer.
    b.with(Trick::UnsolicitedReply, || {
        fs::write(b.client.mnt.join("h"), b"after a stray reply").unwrap()
    });
    assert_eq!(
        fs::read(b.client.mnt.join("h")).unwrap(),
        b"after a stray reply"
    );
    assert!(b.logged("that no request waits for; dropped"));
    assert!(fs::read(&f).unwrap() == data);
}
