//! Object storage service messages. The OST index travels in the frame header's `target`.
//! File data travels as bulk after the body, never inside it.

use nacre_ldlm::msg::ExtentRef;
use nacre_types::{Cred, ObjectId, Owner, StatFs};
use serde::{Deserialize, Serialize};

/// A request to an OST with the job it works for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OssCall {
    /// The client's uuid at this OST (all zero: a server's own request, or a client that
    /// takes no locks). Locks are held, and evictions remembered, by it.
    pub client: [u8; 16],
    /// Job id (empty: none), for per-job statistics.
    pub jobid: String,
    /// Who the request works for.
    pub cred: Cred,
    /// The request.
    pub req: OssRequest,
    /// The capability for the object the request names (clients of a fileset must show
    /// one: [`crate::capa`]).
    pub capa: Option<crate::capa::Capa>,
}

impl OssCall {
    /// Wraps `req` with the current thread's job id and credentials.
    pub fn current(req: OssRequest) -> OssCall {
        OssCall::from_client([0; 16], req)
    }

    /// Wraps `req` as [`OssCall::current`] does, from the client `client`.
    pub fn from_client(client: [u8; 16], req: OssRequest) -> OssCall {
        OssCall {
            client,
            jobid: nacre_types::jobid::current(),
            cred: nacre_types::cred::current(),
            req,
            capa: None,
        }
    }

    /// Wraps `req` as a server's own request (an MDT's object destroys and ownership
    /// changes): root, whatever client request the thread serves.
    pub fn server(req: OssRequest) -> OssCall {
        OssCall {
            client: [0; 16],
            jobid: String::new(),
            cred: Cred::root(),
            req,
            capa: None,
        }
    }
}

/// Requests to an OST.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OssRequest {
    /// Write the frame's bulk data at `offset` of the object, creating it if needed.
    /// Reply: [`OssReply::Written`].
    Write {
        /// Object.
        object: ObjectId,
        /// Offset in the object.
        offset: u64,
        /// The file's owner, group and project as the writer knows them: a new object takes
        /// them (an existing one keeps its own; ownership changes come from the MDT).
        owner: Owner,
        /// The client would like a write lock (to keep its next writes as write-behind),
        /// granted after the write; only a client that polls for callbacks gets one.
        lock: bool,
        /// Bytes of this write the client kept cached under its space grant (the OST takes
        /// them off the grant); the rest was not promised space and may find none
        /// (`ENOSPC`).
        grant_used: u64,
        /// The OST start ([`OssReply::Blocking`]'s epoch) under whose write lock the data
        /// was kept, for data written behind; 0 for a write that goes straight through. An
        /// OST of another start refuses it (`ESTALE`): the client takes its locks back
        /// first ([`OssRequest::LockReplay`]), and sends it again only if no one else
        /// changed the object meanwhile.
        epoch: u64,
        /// The generation of the file's layout the write was issued under: an object a
        /// migration fenced ([`OssRequest::Fence`]) refuses an older one (`ESTALE`), and the
        /// client redoes the write where the file's layout now says.
        layout_gen: u32,
    },
    /// Read up to `len` bytes at `offset`; short at the object's end. Reply: [`OssReply::Read`]
    /// with the data as bulk.
    Read {
        /// Object.
        object: ObjectId,
        /// Offset in the object.
        offset: u64,
        /// Bytes wanted.
        len: u32,
        /// The client would like a read lock on the bytes it reads (to cache them), granted
        /// before they are read; only a client that polls for callbacks
        /// ([`OssRequest::LockPoll`]) is granted one.
        lock: bool,
    },
    /// Size and allocation of an object (Lustre's glimpse). Reply: [`OssReply::ObjectAttr`].
    Glimpse {
        /// Object.
        object: ObjectId,
    },
    /// Truncate or extend the object to `size`. Reply: [`OssReply::Done`].
    Punch {
        /// Object.
        object: ObjectId,
        /// New object size.
        size: u64,
        /// The generation of the layout it was issued under (as for a write).
        layout_gen: u32,
    },
    /// Allocate (or with `punch_hole`, deallocate) a range. Reply: [`OssReply::Done`].
    Fallocate {
        /// Object.
        object: ObjectId,
        /// Start of range.
        offset: u64,
        /// Length of range.
        len: u64,
        /// Keep the object size as it is (FALLOC_FL_KEEP_SIZE).
        keep_size: bool,
        /// Deallocate instead (FALLOC_FL_PUNCH_HOLE, implies keep_size).
        punch_hole: bool,
        /// The generation of the layout it was issued under (as for a write).
        layout_gen: u32,
    },
    /// Make the object's data durable. Reply: [`OssReply::Done`].
    Sync {
        /// Object.
        object: ObjectId,
    },
    /// Remove objects (after their file was unlinked). Reply: [`OssReply::Done`].
    Destroy {
        /// Objects.
        objects: Vec<ObjectId>,
    },
    /// Capacity of the OST. Reply: [`OssReply::StatFs`].
    StatFs,
    /// Set the owner, group and project of objects (the MDT, after a chown, chgrp or project
    /// change of their file), creating missing ones so a later write cannot bring back the
    /// old owner. At most [`SET_OWNER_OBJECTS_MAX`]. Reply: [`OssReply::Done`].
    SetOwner {
        /// Objects.
        objects: Vec<ObjectId>,
        /// Their new owner.
        owner: Owner,
    },
    /// Owner, group and project of an object. Reply: [`OssReply::Owner`].
    GetOwner {
        /// Object.
        object: ObjectId,
    },
    /// The client's callback poll: answered with the locks it must give back, at once if
    /// there are some, else when some are or after `wait_ms` (at most
    /// [`nacre_ldlm::server::POLL_WAIT_MS_MAX`]). Answered at once if `epoch` (0: none
    /// known) is not the OST's: the client's locks are from an earlier start of the OST.
    /// Reply: [`OssReply::Blocking`].
    LockPoll {
        /// Longest wait, in milliseconds.
        wait_ms: u64,
        /// The OST start the client knows ([`OssReply::Blocking`]'s).
        epoch: u64,
    },
    /// The client gives locks back (at most
    /// [`nacre_ldlm::msg::REFS_PER_MESSAGE_MAX`]). Reply: [`OssReply::Done`].
    LockCancel {
        /// Lock handles.
        handles: Vec<u64>,
    },
    /// The client goes away (unmount): its locks and its space grant are dropped. Reply:
    /// [`OssReply::Done`].
    Disconnect,
    /// The client asks for a lock on bytes `start..=end` of an object itself (an appender
    /// needs every object's end locked before it picks the offset): other clients'
    /// conflicting locks are called back first. Reply: [`OssReply::Granted`].
    Enqueue {
        /// Object.
        object: ObjectId,
        /// First byte.
        start: u64,
        /// Last byte.
        end: u64,
        /// For writing.
        write: bool,
    },
    /// The client answers glimpses ([`OssReply::Blocking`]'s `glimpses`): per object, the
    /// size it knows (the end of what it keeps unwritten there; 0: nothing kept). At most
    /// [`nacre_ldlm::msg::REFS_PER_MESSAGE_MAX`]. Reply: [`OssReply::Done`].
    GlimpseAnswer {
        /// (object, size) pairs.
        sizes: Vec<(ObjectId, u64)>,
    },
    /// After the OST restarted (a new epoch): the client asks to hold again the locks it
    /// held from its previous start (at most [`nacre_ldlm::msg::REFS_PER_MESSAGE_MAX`]).
    /// Reply: [`OssReply::Replayed`].
    LockReplay {
        /// The locks.
        locks: Vec<ExtentRef>,
        /// Space the data this client keeps for the OST (written or not yet) was granted
        /// before the restart, claimed back (Lustre's grant at reconnect; the OST held it
        /// back for its clients): sent with the first message of a replay, else 0.
        grant_bytes: u64,
    },
    /// A migration fences the objects of a layout it is replacing: from now on a change
    /// (write, punch, fallocate) issued under a layout generation below `generation` is
    /// refused (`ESTALE`). Durable before the reply; a fence never goes down. At most
    /// [`FENCE_OBJECTS_MAX`] objects. Root only. Reply: [`OssReply::Done`].
    Fence {
        /// Objects.
        objects: Vec<ObjectId>,
        /// The lowest generation their changes may carry from now on.
        generation: u32,
    },
    /// The data versions of objects (each changes with every change of its object's data,
    /// and with the OST's restart), taken after the holders of write locks on them have
    /// written what they keep when `flush` (their locks are called back first). At most
    /// [`FENCE_OBJECTS_MAX`] objects. Root only. Reply: [`OssReply::Versions`].
    DataVersion {
        /// Objects.
        objects: Vec<ObjectId>,
        /// Call back write locks on the objects first.
        flush: bool,
    },
    /// The bytes each of `ids` has on this OST (quotas; at most [`QUOTA_IDS_MAX`]). Others
    /// than root may ask for themselves, their groups and projects. Reply:
    /// [`OssReply::QuotaUsage`].
    QuotaUsage {
        /// Users, groups, projects.
        ids: Vec<nacre_types::QuotaId>,
    },
    /// Counts this OST's objects again and compares with its quota usage (`nacre lfsck
    /// --quota`); with `repair`, sets the usage to the count. Root only. Reply:
    /// [`OssReply::QuotaCheck`].
    QuotaCheck {
        /// Set the usage to the count.
        repair: bool,
    },
    /// Data kept behind under a write lock, for several byte ranges of one object at once
    /// (Lustre's bulk write of many remote niobufs): the bulk holds the runs' bytes back to
    /// back, in the order of `runs`. Checked, locked, fenced and counted as a
    /// [`OssRequest::Write`] of every run, with no lock asked; the runs must be
    /// [`runs_valid`] for the bulk (else `EPROTO`, nothing written). Written run by run, in
    /// offset order; an error stops at the run that failed. Reply: [`OssReply::Written`] of
    /// the bulk's length.
    WriteRuns {
        /// Object.
        object: ObjectId,
        /// As [`OssRequest::Write`]'s.
        owner: Owner,
        /// Bytes of the runs kept under the client's space grant.
        grant_used: u64,
        /// The OST start the data was kept under (never 0: only kept data goes this way).
        epoch: u64,
        /// As [`OssRequest::Write`]'s.
        layout_gen: u32,
        /// Where the bulk's bytes go.
        runs: Vec<Run>,
    },
}

/// A byte range of a [`OssRequest::WriteRuns`]: the next `len` bytes of the bulk go at
/// `offset` of the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// Offset in the object.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
}

impl Run {
    /// The first byte past the run.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

/// Most runs one [`OssRequest::WriteRuns`] carries (Lustre's bulk of 256 pages from
/// anywhere in an object, as niobufs).
pub const WRITE_RUNS_MAX: usize = 256;

/// True if `runs` may be a [`OssRequest::WriteRuns`]'s for a bulk of `bulk_len` bytes: 1 to
/// [`WRITE_RUNS_MAX`] runs, none empty, in increasing offset order without overlapping,
/// ending within [`nacre_types::limits::FILE_BYTES_MAX`], their lengths summing to the
/// bulk's.
pub fn runs_valid(runs: &[Run], bulk_len: u64) -> bool {
    if runs.is_empty() || runs.len() > WRITE_RUNS_MAX {
        return false;
    }
    let mut sum = 0u64;
    let mut next = 0u64;
    for r in runs {
        if r.len == 0 || r.offset < next || r.end() > nacre_types::limits::FILE_BYTES_MAX {
            return false;
        }
        next = r.end();
        sum += u64::from(r.len);
    }
    sum == bulk_len
}

/// Most ids one quota request names.
pub const QUOTA_IDS_MAX: usize = 1_024;

/// Most objects one [`OssRequest::Fence`] or [`OssRequest::DataVersion`] names.
pub const FENCE_OBJECTS_MAX: usize = 512;

/// Most objects one [`OssRequest::SetOwner`] names.
pub const SET_OWNER_OBJECTS_MAX: usize = 512;

/// Replies from an OST.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OssReply {
    /// Bytes written.
    Written {
        /// Bytes.
        len: u32,
        /// The write lock granted (if asked for and granted).
        lock: Option<ExtentRef>,
        /// Space added to the client's grant on this OST: it may keep that many more
        /// bytes cached before writing them.
        grant_added: u64,
        /// The object owner's user, group and project (bits 1, 2, 4) that are near a quota
        /// limit: the client writes their data synchronously (no write-behind), so
        /// `EDQUOT` reaches the writer.
        sync_ids: u8,
        /// The object's size and allocated 512-byte blocks just after this write (None if
        /// the OST could not tell): a client that is the file's only writer knows its size
        /// from these without asking.
        object: Option<(u64, u64)>,
    },
    /// Bytes read; the data is the reply's bulk.
    Read {
        /// Bytes.
        len: u32,
        /// The read lock granted, taken before the data was read (if asked for and
        /// granted).
        lock: Option<ExtentRef>,
    },
    /// Object attributes.
    ObjectAttr {
        /// Object size in bytes (0 if the object does not exist yet).
        size: u64,
        /// Allocated 512-byte blocks.
        blocks: u64,
    },
    /// Done.
    Done,
    /// Capacity.
    StatFs(StatFs),
    /// An object's owner (`None`: the object does not exist or has none recorded).
    Owner(Option<Owner>),
    /// The lock an [`OssRequest::Enqueue`] was granted (`None`: a conflicting lock came
    /// meanwhile, or the namespace is full; ask again).
    Granted(Option<ExtentRef>),
    /// Locks the client must give back (answer to [`OssRequest::LockPoll`]), objects whose
    /// size it is asked for while it keeps its write locks (glimpses, answered by
    /// [`OssRequest::GlimpseAnswer`]), and the OST's start (epoch): a client that knew
    /// another holds none of its locks any more.
    Blocking {
        /// Which start of the OST answered.
        epoch: u64,
        /// Locks called back.
        locks: Vec<ExtentRef>,
        /// Objects glimpsed.
        glimpses: Vec<ObjectId>,
    },
    /// Data versions (answer to [`OssRequest::DataVersion`]): the OST's epoch (new at
    /// every start) and one version per object asked for, in order.
    Versions {
        /// The OST's epoch.
        epoch: u64,
        /// Versions.
        versions: Vec<u64>,
    },
    /// What a [`OssRequest::LockReplay`] got back: the locks refused (the others are held
    /// again), and the objects someone else changed since the restart — what the client
    /// kept for them (cached data, writes not yet sent) is stale and must go.
    Replayed {
        /// Handles of the locks refused.
        refused: Vec<u64>,
        /// Objects changed since the restart.
        changed: Vec<ObjectId>,
    },
    /// Usage of the ids a [`OssRequest::QuotaUsage`] asked for, in order.
    QuotaUsage(Vec<u64>),
    /// What a [`OssRequest::QuotaCheck`] found (and repaired).
    QuotaCheck(nacre_types::QuotaCheck),
}

/// The opcode of [`OssRequest::Read`] (a server can tell reads by the frame header alone).
pub const OST_READ: u16 = 0x0302;

/// The opcode of [`OssRequest::Write`].
pub const OST_WRITE: u16 = 0x0301;

/// The opcode of [`OssRequest::WriteRuns`].
pub const OST_WRITE_RUNS: u16 = 0x0315;

/// Requests served by the OSS I/O service `ost_io` (Lustre's OST_IO_PORTAL): everything that
/// moves or changes an object's data.
pub const IO_OPCODES: [u16; 6] = [OST_WRITE, OST_READ, 0x0304, 0x0305, 0x0306, OST_WRITE_RUNS];
/// Requests served by `ost_create` (Lustre's OST_CREATE_PORTAL): object lifecycle requests the
/// MDT's OSP sends, so they never wait behind bulk I/O. Nacre creates objects on their first
/// write, so this is where destroys and ownership changes go.
pub const CREATE_OPCODES: [u16; 2] = [0x0307, 0x0309];
// Everything else (glimpse, statfs) is served by the `ost` service.
/// Requests a server serves to completion on the network thread that read them: an object's
/// size (glimpse, one fstat), the OST's capacity (statvfs), an object's owner, lock polls
/// (parked) and cancels.
pub const INLINE_OPCODES: [u16; 8] = [
    0x0303, 0x0308, 0x030a, 0x030b, 0x030c, 0x030d, 0x030f, 0x0310,
];

impl OssRequest {
    /// The object the request is about (None for requests on several or none).
    pub fn key_object(&self) -> Option<ObjectId> {
        match self {
            OssRequest::Write { object, .. }
            | OssRequest::WriteRuns { object, .. }
            | OssRequest::Read { object, .. }
            | OssRequest::Glimpse { object }
            | OssRequest::Punch { object, .. }
            | OssRequest::Fallocate { object, .. }
            | OssRequest::Sync { object }
            | OssRequest::GetOwner { object }
            | OssRequest::Enqueue { object, .. } => Some(*object),
            OssRequest::Destroy { .. }
            | OssRequest::StatFs
            | OssRequest::SetOwner { .. }
            | OssRequest::LockPoll { .. }
            | OssRequest::LockCancel { .. }
            | OssRequest::GlimpseAnswer { .. }
            | OssRequest::LockReplay { .. }
            | OssRequest::Fence { .. }
            | OssRequest::DataVersion { .. }
            | OssRequest::QuotaUsage { .. }
            | OssRequest::QuotaCheck { .. }
            | OssRequest::Disconnect => None,
        }
    }

    /// Opcode (service 3).
    pub fn opcode(&self) -> u16 {
        match self {
            OssRequest::Write { .. } => OST_WRITE,
            OssRequest::Read { .. } => OST_READ,
            OssRequest::Glimpse { .. } => 0x0303,
            OssRequest::Punch { .. } => 0x0304,
            OssRequest::Fallocate { .. } => 0x0305,
            OssRequest::Sync { .. } => 0x0306,
            OssRequest::Destroy { .. } => 0x0307,
            OssRequest::StatFs => 0x0308,
            OssRequest::SetOwner { .. } => 0x0309,
            OssRequest::GetOwner { .. } => 0x030a,
            OssRequest::LockPoll { .. } => 0x030b,
            OssRequest::LockCancel { .. } => 0x030c,
            OssRequest::Disconnect => 0x030d,
            OssRequest::Enqueue { .. } => 0x030e,
            OssRequest::GlimpseAnswer { .. } => 0x030f,
            OssRequest::LockReplay { .. } => 0x0310,
            OssRequest::Fence { .. } => 0x0311,
            OssRequest::DataVersion { .. } => 0x0312,
            OssRequest::QuotaUsage { .. } => 0x0313,
            OssRequest::QuotaCheck { .. } => 0x0314,
            OssRequest::WriteRuns { .. } => OST_WRITE_RUNS,
        }
    }

    /// True for the requests that write file data ([`OssRequest::Write`],
    /// [`OssRequest::WriteRuns`]).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            OssRequest::Write { .. } | OssRequest::WriteRuns { .. }
        )
    }

    /// The OST start a write carries (0: written through; never 0 for data kept behind);
    /// None for other requests.
    pub fn write_epoch(&self) -> Option<u64> {
        match self {
            OssRequest::Write { epoch, .. } | OssRequest::WriteRuns { epoch, .. } => Some(*epoch),
            _ => None,
        }
    }

    /// True for data written behind under a write lock (a write whose epoch is not 0).
    pub fn is_kept_write(&self) -> bool {
        self.write_epoch().is_some_and(|e| e != 0)
    }

    /// The owner a write gives a new object.
    pub fn write_owner_mut(&mut self) -> Option<&mut Owner> {
        match self {
            OssRequest::Write { owner, .. } | OssRequest::WriteRuns { owner, .. } => Some(owner),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn portal_opcodes_name_the_intended_requests() {
        let o = ObjectId { seq: 1, id: 2 };
        let io = [
            OssRequest::Write {
                object: o,
                offset: 0,
                owner: Owner::default(),
                lock: false,
                grant_used: 0,
                epoch: 0,
                layout_gen: 0,
            },
            OssRequest::Read {
                object: o,
                offset: 0,
                len: 1,
                lock: false,
            },
            OssRequest::Punch {
                object: o,
                size: 0,
                layout_gen: 0,
            },
            OssRequest::Fallocate {
                object: o,
                offset: 0,
                len: 1,
                keep_size: false,
                punch_hole: false,
                layout_gen: 0,
            },
            OssRequest::Sync { object: o },
            OssRequest::WriteRuns {
                object: o,
                owner: Owner::default(),
                grant_used: 0,
                epoch: 1,
                layout_gen: 0,
                runs: vec![Run { offset: 0, len: 1 }],
            },
        ];
        let io: Vec<u16> = io.iter().map(OssRequest::opcode).collect();
        assert_eq!(io, IO_OPCODES);
        assert_eq!(
            [
                OssRequest::Destroy { objects: vec![o] }.opcode(),
                OssRequest::SetOwner {
                    objects: vec![o],
                    owner: Owner::default()
                }
                .opcode()
            ],
            CREATE_OPCODES
        );
        for other in [
            OssRequest::Glimpse { object: o },
            OssRequest::StatFs,
            OssRequest::GetOwner { object: o },
            OssRequest::LockPoll {
                wait_ms: 0,
                epoch: 0,
            },
            OssRequest::LockCancel { handles: vec![] },
            OssRequest::Disconnect,
            OssRequest::GlimpseAnswer { sizes: vec![] },
            OssRequest::LockReplay {
                locks: vec![],
                grant_bytes: 0,
            },
        ] {
            assert!(INLINE_OPCODES.contains(&other.opcode()));
            assert!(!IO_OPCODES.contains(&other.opcode()));
            assert!(!CREATE_OPCODES.contains(&other.opcode()));
        }
        // An enqueue may wait for callbacks: served by the `ost` pool, never inline.
        let enqueue = OssRequest::Enqueue {
            object: o,
            start: 0,
            end: 9,
            write: true,
        }
        .opcode();
        assert!(!INLINE_OPCODES.contains(&enqueue) && !IO_OPCODES.contains(&enqueue));
    }

    #[test]
    fn write_runs_are_bounded() {
        let runs = |n: u64| -> Vec<Run> {
            (0..n)
                .map(|i| Run {
                    offset: i * 10,
                    len: 5,
                })
                .collect()
        };
        let max = WRITE_RUNS_MAX as u64;
        assert!(runs_valid(&runs(max), max * 5));
        assert!(!runs_valid(&runs(max + 1), (max + 1) * 5));
        assert!(!runs_valid(&[], 0));
    }

    #[test]
    fn round_trip() {
        let req = OssRequest::Read {
            object: ObjectId { seq: 0, id: 9 },
            offset: 4096,
            len: 1 << 20,
            lock: true,
        };
        assert_eq!(decode_body::<OssRequest>(&encode_body(&req)).unwrap(), req);
    }

    proptest! {
        #[test]
        fn calls_with_credentials_and_owners_round_trip(
            uid in any::<u32>(),
            gid in any::<u32>(),
            groups in proptest::collection::vec(any::<u32>(), 0..8),
            project in any::<u32>(),
            ids in proptest::collection::vec(any::<u64>(), 1..8),
        ) {
            let owner = Owner { uid, gid, project };
            let objects: Vec<ObjectId> = ids.iter().map(|&id| ObjectId { seq: 3, id }).collect();
            for req in [
                OssRequest::SetOwner { objects: objects.clone(), owner },
                OssRequest::GetOwner { object: objects[0] },
                OssRequest::Write { object: objects[0], offset: ids[0], owner, lock: true,
                                    grant_used: ids[0], epoch: u64::from(gid), layout_gen: uid },
                OssRequest::WriteRuns { object: objects[0], owner, grant_used: ids[0],
                                        epoch: u64::from(gid), layout_gen: uid,
                                        runs: ids.iter().map(|&id| Run { offset: id, len: uid }).collect() },
                OssRequest::Punch { object: objects[0], size: ids[0], layout_gen: gid },
                OssRequest::Fence { objects: objects.clone(), generation: uid },
                OssRequest::DataVersion { objects: objects.clone(), flush: uid & 1 == 0 },
                OssRequest::QuotaUsage { ids: nacre_types::QuotaId::of_owner(owner).to_vec() },
                OssRequest::QuotaCheck { repair: uid & 1 == 0 },
                OssRequest::LockPoll { wait_ms: ids[0], epoch: u64::from(uid) },
                OssRequest::LockCancel { handles: ids.clone() },
                OssRequest::Enqueue { object: objects[0], start: ids[0], end: u64::MAX,
                                      write: uid & 1 == 0 },
                OssRequest::GlimpseAnswer {
                    sizes: objects.iter().zip(&ids).map(|(o, s)| (*o, *s)).collect(),
                },
                OssRequest::LockReplay {
                    locks: ids.iter().map(|&handle| ExtentRef { handle, object: objects[0],
                        start: 0, end: handle, write: handle & 1 == 0 }).collect(),
                    grant_bytes: ids[0],
                },
            ] {
                let call = OssCall {
                    client: [gid as u8; 16],
                    jobid: "job".into(),
                    cred: Cred::new(uid, gid, groups.clone()),
                    req,
                    capa: (uid % 2 == 0).then(|| crate::capa::Capa::issue(&[1; 32], nacre_types::Fid::new(u64::from(uid), gid), gid, objects[0], uid, (gid % 4) as u8, [gid as u8; 16])),
                };
                prop_assert_eq!(decode_body::<OssCall>(&encode_body(&call)).unwrap(), call);
            }
            let reply = OssReply::Owner(Some(owner));
            prop_assert_eq!(decode_body::<OssReply>(&encode_body(&reply)).unwrap(), reply);
            let lock = ExtentRef { handle: ids[0], object: objects[0], start: 0, end: u64::MAX,
                                   write: uid & 1 == 0 };
            for reply in [
                OssReply::Read { len: gid, lock: Some(lock) },
                OssReply::Written { len: uid, lock: Some(lock), grant_added: ids[0], sync_ids: gid as u8,
                                    object: Some((ids[0], u64::from(gid))) },
                OssReply::Written { len: gid, lock: None, grant_added: 0, sync_ids: 0, object: None },
                OssReply::Granted(Some(lock)),
                OssReply::Granted(None),
                OssReply::Blocking { epoch: u64::from(project), locks: vec![lock; ids.len()],
                                     glimpses: objects.clone() },
                OssReply::Replayed { refused: ids.clone(), changed: objects.clone() },
                OssReply::Versions { epoch: u64::from(uid), versions: ids.clone() },
                OssReply::QuotaUsage(ids.clone()),
                OssReply::QuotaCheck(nacre_types::QuotaCheck {
                    ids: ids.len() as u64,
                    diffs: nacre_types::QuotaId::of_owner(owner).iter().map(|q| (*q, ids[0], u64::from(gid))).collect(),
                    diffs_total: u64::from(uid),
                    repaired: gid & 1 == 0,
                }),
            ] {
                let bytes = encode_body(&reply);
                prop_assert_eq!(decode_body::<OssReply>(&bytes).unwrap(), reply);
                for n in 0..bytes.len() {
                    prop_assert!(decode_body::<OssReply>(&bytes[..n]).is_err());
                }
            }
        }

        /// `runs_valid` accepts exactly the run lists a byte model accepts: each byte of
        /// the object written once, the bulk's bytes each used once, in offset order.
        #[test]
        fn runs_valid_agrees_with_a_model(
            runs in proptest::collection::vec((0u64..200, 0u32..40), 0..8),
            extra in 0u64..3,
            huge in any::<bool>(),
        ) {
            let mut runs: Vec<Run> = runs.into_iter().map(|(offset, len)| Run { offset, len }).collect();
            if huge {
                if let Some(r) = runs.last_mut() {
                    r.offset = nacre_types::limits::FILE_BYTES_MAX - u64::from(r.len) / 2;
                }
            }
            let sum: u64 = runs.iter().map(|r| u64::from(r.len)).sum();
            let bulk = sum + extra;
            let mut model = extra == 0 && !runs.is_empty() && runs.len() <= WRITE_RUNS_MAX;
            let mut seen_end = 0u64;
            for r in &runs {
                let end = r.offset + u64::from(r.len);
                model &= r.len > 0 && r.offset >= seen_end && end <= nacre_types::limits::FILE_BYTES_MAX;
                seen_end = seen_end.max(end);
            }
            prop_assert_eq!(runs_valid(&runs, bulk), model);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_body::<OssRequest>(&bytes);
            let _ = decode_body::<OssCall>(&bytes);
            let _ = decode_body::<OssReply>(&bytes);
        }
    }
}
