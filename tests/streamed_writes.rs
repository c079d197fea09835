//! Large writes written by the OST as they arrive (nacre_net::stream, nacre_osd's
//! `write_arriving`), on the networked form: direct 1 MiB writes through the mount are
//! streamed and read back whole (and are received whole first with `net.stream_bulk=0`);
//! and an attacker's connections that stall in the middle of large writes hold no more
//! than the stream slots, so other writers go on.

use nacre_net::stream::STREAMS_MAX;
use nacre_testkit::raw::RawConn;
use nacre_testkit::{object_of, pattern, Form, Spec, TestFs};
use nacre_wire::oss::OssRequest;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const MIB: usize = 1 << 20;

/// `net.stats` field `name` of server process `pid`.
fn net_stat(pid: u32, name: &str) -> u64 {
    let text = nacre_testkit::get_param(Some(pid), "net.stats");
    text.lines()
        .find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(": ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {name} in net.stats: {text}"))
}

/// Writes `data` to `p` in direct 1 MiB writes (as IOR easy with `-B`).
fn write_direct(p: &Path, data: &[u8]) {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .unwrap();
    let buf = nacre_types::AlignedBuf::copy_from(data);
    for part in buf.chunks(MIB) {
        f.write_all(part).unwrap();
    }
    f.sync_all().unwrap();
}

/// Reads `p` back with direct reads (not from the mount's cache).
fn read_direct(p: &Path, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .unwrap();
    let mut buf = nacre_types::AlignedBuf::for_overwrite(len);
    let mut at = 0;
    while at < len {
        let n = f.read_at(&mut buf[at..], at as u64).unwrap();
        assert!(n > 0, "short file at {at}");
        at += n;
    }
    buf.to_vec()
}

#[test]
fn direct_writes_of_a_mebibyte_are_written_as_they_arrive() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("strw"));
    let oss = fs.servers_mut()[1].pid();
    let data = pattern(41, 8 * MIB);
    let p = fs.path("streamed");
    let before = net_stat(oss, "frames_streamed");
    write_direct(&p, &data);
    let streamed = net_stat(oss, "frames_streamed") - before;
    assert!(streamed >= 8, "{streamed} of 8 writes streamed");
    assert!(read_direct(&p, data.len()) == data, "read back as written");

    // Off: received whole first, written all the same.
    nacre_testkit::nacre_ok(&[
        "ctl",
        "--pid",
        &oss.to_string(),
        "set_param",
        "net.stream_bulk=0",
    ]);
    let data = pattern(42, 8 * MIB);
    let q = fs.path("whole");
    let before = net_stat(oss, "frames_streamed");
    write_direct(&q, &data);
    assert_eq!(net_stat(oss, "frames_streamed"), before, "none streamed");
    assert!(read_direct(&q, data.len()) == data, "read back as written");
}

/// Forty connections each send a 1 MiB write's header, body and half its bulk to an object
/// they may write (no key: any local user), then stall. At most `STREAMS_MAX` reach a
/// service thread; the mount's writes are served meanwhile (the stalled frames are still
/// held when they are done: they did not wait for the frame deadline), and the slots come
/// back when the attacker goes.
#[test]
fn writers_that_stall_mid_bulk_hold_no_more_than_the_stream_slots() {
    let mut fs = TestFs::start_with(Form::Networked, Spec::osts(1).fsname("strs"));
    let oss = fs.servers_mut()[1].pid();
    let oss_addr = fs.servers_mut()[1].listen.clone();
    let target = fs.path("target");
    write_direct(&target, &pattern(43, MIB));
    let (ost, object) = object_of(&target);
    let bulk = pattern(44, MIB);
    let mut stalled = Vec::new();
    for i in 0..40u8 {
        let mut c = RawConn::connect(&oss_addr, "strs", [0x70 + i; 16]).unwrap();
        let write = OssRequest::Write {
            object,
            offset: 0,
            owner: nacre_types::Owner::default(),
            lock: false,
            grant_used: 0,
            epoch: 0,
            layout_gen: 0,
        };
        c.send_oss_cut(ost, write, &bulk, MIB / 2).unwrap();
        stalled.push(c);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while net_stat(oss, "frames_streaming") < STREAMS_MAX {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled writes streamed"
        );
        std::thread::yield_now();
    }
    // Another writer goes on.
    let data = pattern(45, 8 * MIB);
    let other = fs.path("other");
    write_direct(&other, &data);
    assert!(read_direct(&other, data.len()) == data);
    assert_eq!(
        net_stat(oss, "frames_streaming"),
        STREAMS_MAX,
        "the stalled writes still hold their slots: the mount did not wait them out"
    );
    drop(stalled);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while net_stat(oss, "frames_streaming") != 0 {
        assert!(std::time::Instant::now() < deadline, "slots given back");
        std::thread::yield_now();
    }
}
