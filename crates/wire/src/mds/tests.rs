//! Round trips and refusals of the metadata service messages.

use super::*;
use crate::{decode_body, encode_body};
use proptest::prelude::*;

#[test]
fn check_refuses_content_a_client_cannot_use_and_passes_the_rest() {
    use nacre_types::dirstripe::{DirHash, DirStripe};
    use nacre_types::{ObjectId, StripeObject};
    let fid = Fid::new(0x200000400, 1);
    let one = StripeObject {
        ost: 0,
        object: ObjectId { seq: 1, id: 2 },
    };
    let layout = |objects: Vec<StripeObject>, stripe_size| {
        MdsReply::Layout(LayoutInfo::File(Layout::raid0(
            stripe_size,
            objects,
            nacre_types::PoolName::NONE,
        )))
    };
    assert!(layout(vec![one], 1 << 20).check().is_ok());
    let mut pooled = Layout {
        generation: 3,
        ..Layout::raid0(
            1 << 20,
            vec![one],
            nacre_types::PoolName::new("flash").unwrap(),
        )
    };
    assert!(MdsReply::Layout(LayoutInfo::File(pooled.clone()))
        .check()
        .is_ok());
    // A pool name that is not one (bytes from the network) is refused.
    pooled.components[0].pool = postcard::from_bytes(&[b'.'; 16]).unwrap();
    assert!(MdsReply::Layout(LayoutInfo::File(pooled)).check().is_err());
    assert!(layout(vec![], 1 << 20).check().is_err());
    assert!(layout(vec![one], 0).check().is_err());
    assert!(layout(vec![one; 2001], 1 << 20).check().is_err());
    let stripe = |shards: Vec<Fid>| {
        MdsReply::DirStripe(Some(DirStripe {
            hash: DirHash::Fnv1a64,
            shards,
        }))
    };
    assert!(stripe(vec![fid, fid]).check().is_ok());
    assert!(stripe(vec![]).check().is_err());
    let dir = |name: &[u8]| MdsReply::Dir {
        entries: vec![DirEntry {
            name: name.to_vec(),
            fid,
            kind: FileKind::Regular,
        }],
        eof: true,
    };
    assert!(dir(b"ok").check().is_ok());
    for bad in [&b""[..], b"a/b", b"nul\0", b".", b"..", &[b'x'; 256]] {
        assert!(dir(bad).check().is_err(), "{bad:?}");
    }
    assert!(MdsReply::Target(vec![b'x'; 4097]).check().is_err());
    assert!(MdsReply::Xattr(vec![0; 65537]).check().is_err());
    assert!(MdsReply::XattrNames(vec![vec![b'n'; 256]]).check().is_err());
    assert!(MdsReply::Done.check().is_ok());
}

#[test]
fn readpage_opcodes_are_readdir_and_close() {
    let fid = Fid::new(1, 2);
    let ops = [
        MdsOp::ReadDir {
            fid,
            after: None,
            count: 1,
        },
        MdsOp::Close {
            fid,
            writer: true,
            written: false,
            touch: false,
            noatime: true,
        },
        MdsOp::ReadDirPlus {
            fid,
            after: None,
            count: 1,
        },
    ];
    let ops: Vec<u16> = ops.iter().map(MdsOp::opcode).collect();
    assert_eq!(ops, READPAGE_OPCODES);
    let fid = Fid::ROOT;
    let short = [
        MdsOp::GetAttr { fid },
        MdsOp::Lookup {
            parent: fid,
            name: vec![],
        },
        MdsOp::ReadLink { fid },
        MdsOp::GetXattr { fid, name: vec![] },
        MdsOp::ListXattr { fid },
        MdsOp::GetLayout { fid },
        MdsOp::GetDirStripe { fid },
        MdsOp::GetDirDefault { fid },
        MdsOp::Ping,
        MdsOp::LockCancel { handles: vec![] },
    ];
    let short: Vec<u16> = short.iter().map(MdsOp::opcode).collect();
    assert_eq!(short, INLINE_OPCODES);
    assert!(short.iter().all(|&o| !READPAGE_OPCODES.contains(&o)));
    assert!(!READPAGE_OPCODES.contains(&MdsOp::Open { fid, access: 4 }.opcode()));
}

#[test]
fn scans_round_trip() {
    let op = MdsOp::ScanDirents {
        after: Some((Fid::ROOT, b"name".to_vec())),
        count: 7,
    };
    assert_eq!(decode_body::<MdsOp>(&encode_body(&op)).unwrap(), op);
    assert!(!op.is_modifying());
    let reply = MdsReply::Inodes {
        inodes: vec![InodeSummary {
            fid: Fid::ROOT,
            kind: FileKind::Directory,
            nlink: 2,
            parent: Some(Fid::ROOT),
            orphan: false,
            shards: vec![],
        }],
        eof: true,
    };
    assert_eq!(
        decode_body::<MdsReply>(&encode_body(&reply)).unwrap(),
        reply
    );
    // Every truncation of the reply is refused (and never panics).
    let bytes = encode_body(&reply);
    for n in 0..bytes.len() {
        assert!(decode_body::<MdsReply>(&bytes[..n]).is_err(), "{n} bytes");
    }
}

#[test]
fn rename_lock_round_trips_and_refuses_truncation() {
    for acquire in [true, false] {
        let op = MdsOp::RenameLock {
            owner: ([9; 16], u64::MAX),
            acquire,
        };
        assert!(!op.is_modifying());
        assert_eq!(op.key_fid(), None);
        let bytes = encode_body(&op);
        assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
        for n in 0..bytes.len() {
            assert!(decode_body::<MdsOp>(&bytes[..n]).is_err(), "{n} bytes");
        }
    }
}

#[test]
fn migration_messages_round_trip_and_refuse_truncation() {
    let fid = Fid::new(0x2_0000_0400, 3);
    let t = nacre_types::TimeSpec { sec: 1, nsec: 2 };
    let attr = Attr {
        fid,
        kind: FileKind::Regular,
        perm: 0o644,
        uid: 1,
        gid: 2,
        nlink: 1,
        size: 4096,
        blocks: 8,
        atime: t,
        mtime: t,
        ctime: t,
        rdev: 0,
        project: 0,
        proj_inherit: false,
    };
    let bodies: Vec<Vec<u8>> = vec![
        encode_body(&MdsCall {
            lock_bits: 0,
            client: [1; 16],
            replied_below: 1,
            jobid: "j".into(),
            cred: nacre_types::Cred::new(1000, 100, vec![4, 24]),
            op: MdsOp::Migrate {
                fid,
                parent: Fid::ROOT,
                name: b"d".to_vec(),
                target: 1,
            },
        }),
        encode_body(&MdsOp::Update(RemoteUpdate::Adopt {
            dir: fid,
            xattrs: vec![(b"user.a".to_vec(), vec![1, 2])],
            entries: vec![
                AdoptEntry {
                    name: b"f".to_vec(),
                    kind: FileKind::Regular,
                    fid,
                    inode: Some(MovedInode {
                        attr,
                        layout: None,
                        symlink: Some(b"t".to_vec()),
                        xattrs: vec![],
                    }),
                },
                AdoptEntry {
                    name: b"sub".to_vec(),
                    kind: FileKind::Directory,
                    fid: Fid::ROOT,
                    inode: None,
                },
            ],
        })),
        encode_body(&MdsOp::Update(RemoteUpdate::Freeze {
            fid,
            parent: Fid::ROOT,
            name: b"d".to_vec(),
            to: Fid::ROOT,
        })),
        encode_body(&MdsOp::Update(RemoteUpdate::Repoint {
            parent: Fid::ROOT,
            name: b"d".to_vec(),
            from: fid,
            to: Fid::ROOT,
        })),
        encode_body(&MdsReply::Adopted(vec![fid, Fid::ROOT])),
        encode_body(&MdsReply::Migrated {
            fid,
            moved: 3,
            kept: 1,
        }),
    ];
    for (i, bytes) in bodies.iter().enumerate() {
        let ok = if i == 0 {
            decode_body::<MdsCall>(bytes).map(|c| encode_body(&c))
        } else if i < 4 {
            decode_body::<MdsOp>(bytes).map(|o| encode_body(&o))
        } else {
            decode_body::<MdsReply>(bytes).map(|r| encode_body(&r))
        };
        assert_eq!(&ok.unwrap(), bytes, "message {i}");
        for n in 0..bytes.len() {
            let cut = &bytes[..n];
            let refused = match i {
                0 => decode_body::<MdsCall>(cut).is_err(),
                1..=3 => decode_body::<MdsOp>(cut).is_err(),
                _ => decode_body::<MdsReply>(cut).is_err(),
            };
            assert!(refused, "message {i} cut to {n} bytes");
        }
    }
}

#[test]
fn ping_and_disconnect_round_trip_and_refuse_truncation() {
    let opens = vec![
        ReopenEntry {
            fid: Fid::new(0x2_0000_0400, 7),
            handles: 2,
            writers: 1,
        },
        ReopenEntry {
            fid: Fid::ROOT,
            handles: 1,
            writers: 0,
        },
    ];
    for op in [MdsOp::Ping, MdsOp::Disconnect, MdsOp::Reopen { opens }] {
        let call = MdsCall {
            lock_bits: 0,
            client: [3; 16],
            replied_below: 9,
            jobid: String::new(),
            cred: nacre_types::Cred::new(1000, 100, vec![4, 24]),
            op,
        };
        assert!(!call.op.is_modifying());
        assert_eq!(call.op.key_fid(), None);
        let bytes = encode_body(&call);
        assert_eq!(decode_body::<MdsCall>(&bytes).unwrap(), call);
        for n in 0..bytes.len() {
            assert!(decode_body::<MdsCall>(&bytes[..n]).is_err(), "{n} bytes");
        }
    }
}

#[test]
fn recovery_messages_round_trip_and_refuse_truncation() {
    let replay = MdsOp::Replay {
        transno: 41,
        op: Box::new(MdsOp::Unlink {
            parent: Fid::ROOT,
            name: b"f".to_vec(),
        }),
        reply: Box::new(MdsReply::Done),
        pre_versions: vec![(Fid::ROOT, 40)],
    };
    let poll = MdsOp::LockPoll {
        wait_ms: 30_000,
        epoch: 7,
    };
    let lock_replay = MdsOp::LockReplay {
        locks: vec![nacre_ldlm::msg::LockRef {
            handle: 3,
            fid: Fid::ROOT,
            bits: nacre_ldlm::msg::UPDATE,
        }],
    };
    let cancel = MdsOp::LockCancel {
        handles: vec![1, u64::MAX],
    };
    for op in [
        MdsOp::Connect,
        replay,
        MdsOp::ReplayDone,
        poll,
        cancel,
        lock_replay,
    ] {
        assert!(!op.is_modifying());
        let bytes = encode_body(&op);
        assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
        for n in 0..bytes.len() {
            assert!(decode_body::<MdsOp>(&bytes[..n]).is_err(), "{n} bytes");
        }
    }
    let answer = MdsAnswer {
        transno: 300,
        last_committed: 299,
        epoch: 0x1234_5678_9abc,
        pre_versions: vec![(Fid::ROOT, 7)],
        lock: Some(nacre_ldlm::msg::LockRef {
            handle: 9,
            fid: Fid::ROOT,
            bits: nacre_ldlm::msg::LOOKUP,
        }),
        locks: vec![nacre_ldlm::msg::LockRef {
            handle: 10,
            fid: Fid::new(0x2_0000_0400, 11),
            bits: nacre_ldlm::msg::LOOKUP | nacre_ldlm::msg::UPDATE,
        }],
        dir: Some(Attr {
            fid: Fid::ROOT,
            kind: FileKind::Directory,
            perm: 0o755,
            uid: 0,
            gid: 0,
            nlink: 3,
            size: 4096,
            blocks: 8,
            atime: nacre_types::TimeSpec { sec: 5, nsec: 6 },
            mtime: nacre_types::TimeSpec { sec: 7, nsec: 8 },
            ctime: nacre_types::TimeSpec { sec: 7, nsec: 8 },
            rdev: 0,
            project: 0,
            proj_inherit: false,
        }),
        capas: vec![crate::capa::Capa::issue(
            &[2; 32],
            Fid::new(0x2_0000_0400, 3),
            1,
            nacre_types::ObjectId { seq: 0, id: 44 },
            2,
            crate::capa::CAPA_READ,
            [5; 16],
        )],
        reply: MdsReply::Connected {
            epoch: 7,
            recovering: true,
            last_committed: 299,
            committed_at_start: 250,
            root: Fid::new(0x2_0000_0400, 9),
            squashed: true,
        },
    };
    let bytes = encode_body(&answer);
    assert_eq!(decode_body::<MdsAnswer>(&bytes).unwrap(), answer);
    for n in 0..bytes.len() {
        assert!(decode_body::<MdsAnswer>(&bytes[..n]).is_err(), "{n} bytes");
    }
    // The envelope is the two varints then the reply's own encoding (the server
    // prefixes a saved reply without decoding it).
    let head = (
        300u64,
        299u64,
        0x1234_5678_9abcu64,
        vec![(Fid::ROOT, 7u64)],
        answer.lock,
        answer.locks.clone(),
        answer.dir.clone(),
        answer.capas.clone(),
    );
    let mut prefixed = postcard::to_allocvec(&head).unwrap();
    prefixed.extend(encode_body(&answer.reply));
    assert_eq!(prefixed, bytes);
    // `encode_head` gives no capabilities (the MDS adds them for a fileset's client).
    let plain = MdsAnswer {
        capas: Vec::new(),
        ..answer.clone()
    };
    let bytes = encode_body(&plain);
    let mut head = MdsAnswer::encode_head(
        300,
        299,
        0x1234_5678_9abc,
        &[(Fid::ROOT, 7)],
        answer.lock,
        &answer.locks,
        answer.dir.as_ref(),
    );
    head.extend(encode_body(&answer.reply));
    assert_eq!(head, bytes, "encode_head is the same head");
}

#[test]
fn round_trip() {
    let call = MdsCall {
        lock_bits: 0,
        client: [7; 16],
        replied_below: 5,
        jobid: "job42".into(),
        cred: nacre_types::Cred::new(1000, 100, vec![4, 24]),
        op: MdsOp::Rename {
            src_parent: Fid::ROOT,
            src_name: b"a".to_vec(),
            dst_parent: Fid::ROOT,
            dst_name: vec![0xff, 0xfe],
            noreplace: true,
        },
    };
    assert_eq!(decode_body::<MdsCall>(&encode_body(&call)).unwrap(), call);
}

fn plus_entry(name: Vec<u8>, ino: u32, size: u64, bits: u8, exact: bool) -> DirPlusEntry {
    let fid = Fid::new(0x2_0000_0400, ino);
    let t = nacre_types::TimeSpec { sec: 5, nsec: 6 };
    DirPlusEntry {
        entry: DirEntry {
            name,
            fid,
            kind: FileKind::Regular,
        },
        attr: Some(Attr {
            fid,
            kind: FileKind::Regular,
            perm: 0o640,
            uid: 3,
            gid: 4,
            nlink: 1,
            size,
            blocks: size / 512,
            atime: t,
            mtime: t,
            ctime: t,
            rdev: 0,
            project: 0,
            proj_inherit: false,
        }),
        size_exact: exact,
        layout: None,
        lock: (bits != 0).then_some(nacre_ldlm::msg::LockRef {
            handle: u64::from(ino) * 7,
            fid,
            bits,
        }),
    }
}

#[test]
fn readdirplus_pages_are_checked() {
    let good = MdsReply::DirPlus {
        entries: vec![plus_entry(b"a".to_vec(), 1, 10, 3, true)],
        eof: true,
    };
    assert!(good.check().is_ok());
    // Attributes or a lock of another inode than the entry's, a lock with unknown bits,
    // a bad name, too many entries: refused.
    let mut other_attr = plus_entry(b"a".to_vec(), 1, 10, 3, true);
    other_attr.attr.as_mut().unwrap().fid = Fid::new(0x2_0000_0400, 2);
    let mut other_lock = plus_entry(b"a".to_vec(), 1, 10, 3, true);
    other_lock.lock.as_mut().unwrap().fid = Fid::ROOT;
    let odd_bits = plus_entry(b"a".to_vec(), 1, 10, 0x80, true);
    let bad_name = plus_entry(b"a/b".to_vec(), 1, 10, 3, true);
    for e in [other_attr, other_lock, odd_bits, bad_name] {
        let page = MdsReply::DirPlus {
            entries: vec![e.clone()],
            eof: true,
        };
        assert!(page.check().is_err(), "{e:?}");
    }
    let many = MdsReply::DirPlus {
        entries: (0..=READDIRPLUS_ENTRIES_MAX)
            .map(|i| plus_entry(format!("f{i}").into_bytes(), i + 1, 0, 0, true))
            .collect(),
        eof: false,
    };
    assert!(many.check().is_err());
}

proptest! {
    #[test]
    fn readdirplus_round_trips_and_refuses_truncation(
        names in proptest::collection::vec(proptest::collection::vec(1u8..=255, 1..40), 0..8),
        size in any::<u64>(),
        bits in 0u8..8,
        exact in any::<bool>(),
        after in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
        count in any::<u32>(),
    ) {
        let op = MdsOp::ReadDirPlus { fid: Fid::ROOT, after, count };
        let bytes = encode_body(&op);
        prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
        let reply = MdsReply::DirPlus {
            entries: names
                .into_iter()
                .enumerate()
                .map(|(i, n)| plus_entry(n, i as u32 + 1, size, bits, exact))
                .collect(),
            eof: exact,
        };
        let bytes = encode_body(&reply);
        prop_assert_eq!(decode_body::<MdsReply>(&bytes).unwrap(), reply);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn flock_messages_round_trip_and_refuse_truncation(
        owner in any::<u64>(),
        pid in any::<u32>(),
        k in 0u8..3,
        start in any::<u64>(),
        end in any::<u64>(),
        wait_ms in any::<u64>(),
        reclaim in any::<bool>(),
        held in any::<bool>(),
    ) {
        use nacre_ldlm::flock::{Flock, FlockKind, Owner};
        let kind = [FlockKind::Read, FlockKind::Write, FlockKind::Unlock][k as usize];
        let fid = Fid::new(0x2_0000_0400, 9);
        let ops = [
            MdsOp::Flock { fid, owner, pid, kind, start, end, wait_ms, reclaim },
            MdsOp::FlockTest { fid, owner, kind, start, end },
        ];
        let lock = Flock { owner: Owner { client: [3; 16], owner }, pid, start, end, write: k == 1 };
        let replies = [
            MdsReply::FlockBlocked,
            MdsReply::FlockHeld(held.then_some(lock)),
        ];
        for op in ops {
            prop_assert!(!op.is_modifying());
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
        }
        for r in replies {
            let bytes = encode_body(&r);
            let back = decode_body::<MdsReply>(&bytes).unwrap();
            // A lock whose range ends before it starts is refused by the client's check.
            prop_assert_eq!(back.check().is_err(), held && start > end && matches!(r, MdsReply::FlockHeld(_)));
            prop_assert_eq!(back, r);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
            }
        }
    }

    #[test]
    fn changelog_messages_round_trip_and_refuse_truncation(
        names in proptest::collection::vec(proptest::collection::vec(1u8..=255, 0..300), 0..6),
        kind in 0usize..super::changelog::RecordKind::ALL.len(),
        index in any::<u64>(),
        flags in any::<u32>(),
        user in any::<u32>(),
        count in any::<u32>(),
        jobid in "[a-z.0-9]{0,40}",
    ) {
        use changelog::*;
        let fid = Fid::new(0x2_0000_0400, 3);
        let ops = [
            MdsOp::ChangelogRegister { name: jobid.clone() },
            MdsOp::ChangelogDeregister { user },
            MdsOp::ChangelogClear { user, upto: index },
            MdsOp::ChangelogRead { user, from: index, count },
            MdsOp::ChangelogUsers,
            MdsOp::FidLinks { fid },
        ];
        for op in ops {
            // Reads change nothing; registrations and clears are run exactly once.
            let reads = matches!(
                op,
                MdsOp::ChangelogRead { .. } | MdsOp::ChangelogUsers | MdsOp::FidLinks { .. }
            );
            prop_assert_eq!(op.is_modifying(), !reads);
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
        }
        let records: Vec<ChangelogRecord> = names
            .iter()
            .enumerate()
            .map(|(i, n)| ChangelogRecord {
                index: index.wrapping_add(i as u64),
                kind: RecordKind::ALL[kind],
                flags,
                time: nacre_types::TimeSpec { sec: i as i64, nsec: 0 },
                target: fid,
                parent: Fid::ROOT,
                name: n.clone(),
                source: (i % 2 == 1).then(|| RenameSource { fid, parent: fid, name: n.clone() }),
                xattr: Vec::new(),
                uid: user,
                gid: flags,
                jobid: jobid.clone(),
            })
            .collect();
        let long = names.iter().any(|n| n.len() > 255) || (!names.is_empty() && jobid.len() > 32);
        let links: Vec<(Fid, Vec<u8>)> = names.iter().map(|n| (fid, n.clone())).collect();
        let bad_link = names.iter().any(|n| n.is_empty() || n.len() > 255 || n.contains(&b'/'));
        let replies = [
            (MdsReply::Changelog { records, next: index }, long),
            (MdsReply::ChangelogUser(user), false),
            (
                MdsReply::ChangelogUsers {
                    users: vec![ChangelogUser { id: user, name: jobid.clone(), cleared: index, idle_ms: 1 }],
                    first: index,
                    next: index,
                },
                false,
            ),
            (MdsReply::Links { links, shard_of: None }, bad_link),
        ];
        for (r, refused) in replies {
            let bytes = encode_body(&r);
            let back = decode_body::<MdsReply>(&bytes).unwrap();
            prop_assert_eq!(back.check().is_err(), refused);
            prop_assert_eq!(back, r);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
            }
        }
    }

    /// `SetLayout` with any request a raw client could send (up to 20 components, any
    /// ends, counts, sizes and pool bytes): it round-trips, refuses every truncation, and
    /// its shape check answers without panicking — accepting only requests to the end of
    /// the file with rising ends.
    #[test]
    fn set_layout_requests_round_trip_and_their_check_never_panics(
        parts in proptest::collection::vec(
            (
                any::<u64>(),
                prop_oneof![any::<i32>(), -3..3i32],
                any::<u32>(),
                any::<i32>(),
                any::<[u8; 16]>(),
                any::<bool>(),
            ),
            0..20,
        ),
        eof in any::<bool>(),
    ) {
        use nacre_types::layout::{ComponentKind, ComponentSpec, EXTENT_EOF};
        let mut components: Vec<ComponentSpec> = parts
            .iter()
            .map(|&(end, count, size, start, pool, mdt)| ComponentSpec {
                end,
                stripe: StripeSpec {
                    stripe_count: count,
                    stripe_size: size,
                    start_ost: start,
                    pool: postcard::from_bytes(&pool).unwrap(),
                },
                kind: if mdt { ComponentKind::Mdt } else { ComponentKind::Osts },
            })
            .collect();
        if let (true, Some(last)) = (eof, components.last_mut()) {
            last.end = EXTENT_EOF;
        }
        let spec = LayoutSpec { components };
        if spec.check().is_ok() {
            prop_assert_eq!(spec.components.last().map(|c| c.end), Some(EXTENT_EOF));
            let ends: Vec<u64> = spec.components.iter().map(|c| c.end).collect();
            prop_assert!(ends.windows(2).all(|w| w[0] < w[1]));
        }
        let valid = spec.check().is_ok();
        let op = MdsOp::SetLayout { fid: Fid::new(0x2_0000_0400, 9), spec };
        let bytes = encode_body(&op);
        let back = decode_body::<MdsOp>(&bytes).unwrap();
        // A valid request comes back as it was; any request's bytes decode to a request
        // that encodes to them again (a component's kind rides in its stripe count, which
        // a request on OSTs may not give: `check` refuses those).
        if valid {
            prop_assert_eq!(&back, &op);
        }
        prop_assert_eq!(encode_body(&back), bytes.clone());
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
    }

    /// `DomRead` and `DomWrite` with any file, offset, length and bytes: a write is
    /// modifying (exactly once, replayed), a read is not; both are routed to their file's
    /// MDT, round-trip and refuse every truncation; any bytes after their opcodes decode
    /// to them or an error, never a panic; a reply of more bytes than one may carry is
    /// refused.
    #[test]
    fn dom_requests_round_trip_and_refuse_truncation(
        seq in any::<u64>(),
        oid in any::<u32>(),
        offset in any::<u64>(),
        len in any::<u32>(),
        data in proptest::collection::vec(any::<u8>(), 0..300),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let fid = Fid::new(seq, oid);
        let read = MdsOp::DomRead { fid, offset, len };
        let write = MdsOp::DomWrite { fid, offset, data: data.clone() };
        let append = MdsOp::DomAppend { fid, data: data.clone() };
        prop_assert!(!read.is_modifying() && write.is_modifying() && append.is_modifying());
        prop_assert_eq!(
            (read.opcode(), write.opcode(), append.opcode()),
            (0x023e, 0x023f, 0x0240)
        );
        for op in [read, write, append] {
            prop_assert_eq!(op.key_fid(), Some(fid));
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
            let mut hostile = bytes[..1].to_vec();
            hostile.extend_from_slice(&junk);
            let _ = decode_body::<MdsOp>(&hostile);
        }
        prop_assert!(MdsReply::DomData(data).check().is_ok());
        let big = MdsReply::DomData(vec![0; DOM_RPC_BYTES_MAX as usize + 1]);
        prop_assert!(big.check().is_err());
    }

    /// `GrantFids`, `CreateBatch` and `DelegateDir` with any counts, FIDs, names and owners: modifying
    /// (exactly once, replayed), a batch routed to its directory's MDT (whose names it
    /// changes), a grant to none; both round-trip and refuse every truncation; any bytes
    /// after their opcodes decode to them or an error, never a panic. A reply of more
    /// results than a batch may hold, or a grant of no FID, or one past its sequence's end,
    /// is refused.
    #[test]
    fn batches_and_grants_round_trip_and_refuse_truncation(
        count in any::<u32>(),
        parent in any::<u64>(),
        items in proptest::collection::vec(
            (any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..40),
             any::<u32>(), any::<u32>(), (any::<u32>(), any::<i64>(), any::<u32>()),
             proptest::collection::vec(any::<u8>(), 0..64)),
            0..6,
        ),
        oid in any::<u32>(),
        data_bytes_max in any::<u32>(),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let dir = Fid::new(parent, 1);
        let items: Vec<BatchCreate> = items
            .into_iter()
            .map(|(seq, oid, name, perm, uid, (gid, sec, nsec), data)| BatchCreate {
                fid: Fid::new(seq, oid),
                kind: if perm & 1 == 0 { FileKind::Regular } else { FileKind::Directory },
                name,
                perm,
                uid,
                gid,
                time: nacre_types::TimeSpec { sec, nsec },
                data,
            })
            .collect();
        let grant = MdsOp::GrantFids { count };
        let batch = MdsOp::CreateBatch { parent: dir, items };
        prop_assert!(grant.is_modifying() && batch.is_modifying());
        prop_assert_eq!((grant.opcode(), batch.opcode()), (0x0241, 0x0242));
        prop_assert_eq!((grant.key_fid(), batch.key_fid()), (None, Some(dir)));
        prop_assert_eq!(batch.names_changed_in(), Some(dir));
        let delegate = MdsOp::DelegateDir { fid: dir };
        prop_assert!(!delegate.is_modifying(), "a lock: not replayed");
        prop_assert_eq!((delegate.opcode(), delegate.key_fid()), (0x0243, Some(dir)));
        for op in [grant, batch, delegate] {
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
            let mut hostile = bytes[..1].to_vec();
            hostile.extend_from_slice(&junk);
            let _ = decode_body::<MdsOp>(&hostile);
        }
        let range = MdsReply::FidRange { first: Fid::new(parent, oid), count };
        let fits = count > 0 && oid > 0 && u64::from(oid) + u64::from(count) <= 1 << 32;
        prop_assert_eq!(range.check().is_ok(), fits);
        let t = nacre_types::TimeSpec { sec: 1, nsec: 2 };
        let attr = Attr {
            fid: Fid::new(parent, 2),
            kind: FileKind::Regular,
            perm: 0o644,
            uid: 1,
            gid: 2,
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
        let ok = Ok((attr.clone(), None));
        let full = MdsReply::Created(vec![ok.clone(); CREATE_BATCH_ITEMS_MAX]);
        prop_assert!(full.check().is_ok());
        let over = MdsReply::Created(vec![ok; CREATE_BATCH_ITEMS_MAX + 1]);
        prop_assert!(decode_body::<MdsReply>(&encode_body(&over)).unwrap().check().is_err());
        // A delegation promises no more bytes per create than an item may carry.
        let delegated = MdsReply::Delegated { attr, data_bytes_max, mkdirs: count & 1 == 0, empty: count & 2 == 0 };
        let bytes = encode_body(&delegated);
        prop_assert_eq!(&decode_body::<MdsReply>(&bytes).unwrap(), &delegated);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
        let fits = data_bytes_max as usize <= CREATE_DATA_BYTES_MAX;
        prop_assert_eq!(delegated.check().is_ok(), fits);
    }

    /// `UnlinkBatch` with any FIDs, names and times: modifying (exactly once, replayed),
    /// routed to its directory's MDT (whose names it changes); it round-trips and refuses
    /// every truncation; any bytes after its opcode decode to it or an error, never a
    /// panic. A reply of more results than a batch may hold is refused.
    #[test]
    fn unlink_batches_round_trip_and_refuse_truncation(
        parent in any::<u64>(),
        items in proptest::collection::vec(
            (any::<u64>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..40),
             (any::<i64>(), any::<u32>())),
            0..6,
        ),
        errs in proptest::collection::vec(any::<bool>(), 0..8),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let dir = Fid::new(parent, 1);
        let items: Vec<BatchUnlink> = items
            .into_iter()
            .map(|(seq, oid, name, (sec, nsec))| BatchUnlink {
                fid: Fid::new(seq, oid),
                name,
                time: nacre_types::TimeSpec { sec, nsec },
            })
            .collect();
        let batch = MdsOp::UnlinkBatch { parent: dir, items };
        prop_assert!(batch.is_modifying());
        prop_assert_eq!(batch.opcode(), 0x0244);
        prop_assert_eq!((batch.key_fid(), batch.names_changed_in()), (Some(dir), Some(dir)));
        let bytes = encode_body(&batch);
        prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), batch);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
        let mut hostile = bytes[..1].to_vec();
        hostile.extend_from_slice(&junk);
        let _ = decode_body::<MdsOp>(&hostile);
        let results: Vec<Result<(), nacre_types::Status>> = errs
            .iter()
            .map(|e| if *e { Err(nacre_types::Status::Stale) } else { Ok(()) })
            .collect();
        let reply = MdsReply::Unlinked(results);
        let bytes = encode_body(&reply);
        prop_assert_eq!(decode_body::<MdsReply>(&bytes).unwrap(), reply.clone());
        prop_assert!(reply.check().is_ok());
        let over = MdsReply::Unlinked(vec![Ok(()); UNLINK_BATCH_ITEMS_MAX + 1]);
        prop_assert!(decode_body::<MdsReply>(&encode_body(&over)).unwrap().check().is_err());
    }

    /// `AccessBatch` with any FIDs and times: not modifying (accesses are kept in memory),
    /// routed to its first file's MDT, names no directory; it round-trips and refuses every
    /// truncation; any bytes after its opcode decode to it or an error, never a panic.
    #[test]
    fn access_batches_round_trip_and_refuse_truncation(
        items in proptest::collection::vec(
            (any::<u64>(), any::<u32>(), (any::<i64>(), any::<u32>())),
            0..8,
        ),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let items: Vec<BatchAccess> = items
            .into_iter()
            .map(|(seq, oid, (sec, nsec))| BatchAccess {
                fid: Fid::new(seq, oid),
                time: nacre_types::TimeSpec { sec, nsec },
            })
            .collect();
        let first = items.first().map(|i| i.fid);
        let batch = MdsOp::AccessBatch { items };
        prop_assert!(!batch.is_modifying());
        prop_assert_eq!(batch.opcode(), 0x0245);
        prop_assert_eq!((batch.key_fid(), batch.names_changed_in()), (first, None));
        let bytes = encode_body(&batch);
        prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), batch);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
        let mut hostile = bytes[..1].to_vec();
        hostile.extend_from_slice(&junk);
        let _ = decode_body::<MdsOp>(&hostile);
    }

    /// `LayoutIntent` with any file and end: modifying (exactly once, replayed), routed to
    /// its file's MDT, round-trips and refuses every truncation; any bytes after its
    /// opcode decode to it or an error, never a panic.
    #[test]
    fn layout_intents_round_trip_and_refuse_truncation(
        seq in any::<u64>(),
        oid in any::<u32>(),
        end in any::<u64>(),
        junk in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let fid = Fid::new(seq, oid);
        let op = MdsOp::LayoutIntent { fid, end };
        prop_assert!(op.is_modifying());
        prop_assert_eq!(op.key_fid(), Some(fid));
        prop_assert_eq!(op.opcode(), 0x023d);
        let bytes = encode_body(&op);
        prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
        let mut hostile = bytes[..1].to_vec();
        hostile.extend_from_slice(&junk);
        let _ = decode_body::<MdsOp>(&hostile);
    }

    #[test]
    fn relayout_messages_round_trip_and_refuse_truncation(
        count in -1i32..64,
        size in any::<u32>(),
        generation in any::<u32>(),
        ids in proptest::collection::vec(any::<u64>(), 0..5),
    ) {
        use nacre_types::{ObjectId, StripeObject};
        let fid = Fid::new(0x2_0000_0400, 5);
        let spec = StripeSpec { stripe_count: count, stripe_size: size, start_ost: -1,
                                pool: nacre_types::PoolName::NONE };
        for op in [
            MdsOp::RelayoutBegin { fid, spec },
            MdsOp::RelayoutFence { fid },
            MdsOp::RelayoutSwap { fid },
            MdsOp::RelayoutAbort { fid },
        ] {
            prop_assert!(op.is_modifying());
            prop_assert_eq!(op.key_fid(), Some(fid));
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
        }
        let layout = |ids: &[u64]| Layout {
            generation,
            ..Layout::raid0(
                1 << 20,
                ids.iter().map(|&id| StripeObject { ost: 0, object: ObjectId { seq: 1, id } })
                    .collect(),
                nacre_types::PoolName::NONE,
            )
        };
        let reply = MdsReply::Relayout { old: layout(&ids), new: layout(&ids) };
        let bytes = encode_body(&reply);
        let back = decode_body::<MdsReply>(&bytes).unwrap();
        // A layout without objects is refused by the client's check (its stripe count of
        // 0 reads back as a component on the MDT, which a whole-file one cannot be).
        prop_assert_eq!(back.check().is_err(), ids.is_empty());
        if !ids.is_empty() {
            prop_assert_eq!(&back, &reply);
        }
        prop_assert_eq!(encode_body(&back), bytes.clone());
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
    }

    #[test]
    fn stat_messages_round_trip_and_refuse_truncation(
        seqs in proptest::collection::vec(any::<u32>(), 0..40),
        count in any::<u32>(),
        size in any::<u64>(),
        exact in any::<bool>(),
        extra in 0usize..3,
    ) {
        use changelog::{InodeStat, STATS_MAX};
        let fids: Vec<Fid> = seqs.iter().map(|&s| Fid::new(0x2_0000_0400, s)).collect();
        for op in [
            MdsOp::StatMany { fids: fids.clone() },
            MdsOp::ScanStats { after: fids.first().copied(), count },
        ] {
            // Reads: no exactly-once treatment, no lock key.
            prop_assert!(!op.is_modifying());
            prop_assert_eq!(op.key_fid(), None);
            let bytes = encode_body(&op);
            prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), op);
            for n in 0..bytes.len() {
                prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
            }
        }
        let stat = |fid: Fid| InodeStat {
            attr: nacre_types::Attr {
                fid,
                kind: nacre_types::FileKind::Regular,
                perm: 0o644,
                uid: count,
                gid: 7,
                nlink: 1,
                size,
                blocks: size / 512,
                atime: nacre_types::TimeSpec { sec: 1, nsec: 2 },
                mtime: nacre_types::TimeSpec { sec: 3, nsec: 4 },
                ctime: nacre_types::TimeSpec { sec: 5, nsec: 6 },
                rdev: 0,
                project: 0,
                proj_inherit: false,
            },
            size_exact: exact,
            pool: nacre_types::PoolName::new("flash").unwrap(),
            stripe_count: 2,
            parent: exact.then_some(Fid::ROOT),
            orphan: !exact,
        };
        let reply = MdsReply::Stats { stats: fids.iter().map(|f| stat(*f)).collect(), eof: exact };
        let bytes = encode_body(&reply);
        let back = decode_body::<MdsReply>(&bytes).unwrap();
        prop_assert!(back.check().is_ok());
        prop_assert_eq!(back, reply);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
        let pending = MdsReply::DestroyPending(seqs.iter().map(|&s| (s, size)).collect());
        let bytes = encode_body(&pending);
        prop_assert_eq!(decode_body::<MdsReply>(&bytes).unwrap(), pending);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
        prop_assert!(!MdsOp::DestroyPending.is_modifying());
        let ids: Vec<nacre_types::QuotaId> = seqs.iter().map(|&s| nacre_types::QuotaId {
            kind: nacre_types::QuotaKind::ALL[s as usize % 3],
            id: s,
        }).collect();
        let usage = MdsOp::QuotaUsage { ids: ids.clone() };
        prop_assert!(!usage.is_modifying());
        let bytes = encode_body(&usage);
        prop_assert_eq!(decode_body::<MdsOp>(&bytes).unwrap(), usage);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsOp>(&bytes[..n]).is_err());
        }
        let counts = MdsReply::QuotaUsage {
            inodes: ids.iter().map(|q| u64::from(q.id)).collect(),
            dom_bytes: ids.iter().map(|q| u64::from(q.id) * 4096).collect(),
        };
        prop_assert!(counts.check().is_ok());
        let uneven = MdsReply::QuotaUsage { inodes: vec![1; ids.len() + 1], dom_bytes: vec![0; ids.len()] };
        prop_assert!(uneven.check().is_err());
        let bytes = encode_body(&counts);
        prop_assert_eq!(decode_body::<MdsReply>(&bytes).unwrap(), counts);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
        prop_assert_eq!(decode_body::<MdsOp>(&encode_body(&MdsOp::DestroyPending)).unwrap(), MdsOp::DestroyPending);
        let op = MdsOp::QuotaCheck { repair: seqs.len() % 2 == 0 };
        prop_assert!(!op.is_modifying());
        prop_assert_eq!(decode_body::<MdsOp>(&encode_body(&op)).unwrap(), op);
        let check = MdsReply::QuotaCheck {
            inodes: nacre_types::QuotaCheck {
                ids: ids.len() as u64,
                diffs: ids.iter().map(|q| (*q, u64::from(q.id), 0)).collect(),
                diffs_total: ids.len() as u64 + extra as u64,
                repaired: true,
            },
            dom_bytes: nacre_types::QuotaCheck { ids: 1, ..nacre_types::QuotaCheck::default() },
        };
        let bytes = encode_body(&check);
        prop_assert_eq!(decode_body::<MdsReply>(&bytes).unwrap(), check);
        for n in 0..bytes.len() {
            prop_assert!(decode_body::<MdsReply>(&bytes[..n]).is_err());
        }
        let too_many = nacre_types::QuotaCheck {
            diffs: vec![(ids.first().copied().unwrap_or(nacre_types::QuotaId { kind: nacre_types::QuotaKind::User, id: 1 }), 1, 0); nacre_types::QuotaCheck::DIFFS_MAX + 1 + extra],
            ..nacre_types::QuotaCheck::default()
        };
        let many = MdsReply::QuotaCheck { inodes: too_many.clone(), dom_bytes: nacre_types::QuotaCheck::default() };
        prop_assert!(decode_body::<MdsReply>(&encode_body(&many)).unwrap().check().is_err());
        let many = MdsReply::QuotaCheck { inodes: nacre_types::QuotaCheck::default(), dom_bytes: too_many };
        prop_assert!(decode_body::<MdsReply>(&encode_body(&many)).unwrap().check().is_err());
        // More inodes than one answer may carry: refused by the client's check.
        let many = MdsReply::Stats { stats: vec![stat(Fid::ROOT); STATS_MAX + 1 + extra], eof: true };
        prop_assert!(decode_body::<MdsReply>(&encode_body(&many)).unwrap().check().is_err());
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_body::<MdsCall>(&bytes);
                    let _ = decode_body::<MdsReply>(&bytes);
        let _ = decode_body::<MdsAnswer>(&bytes);
    }
}
