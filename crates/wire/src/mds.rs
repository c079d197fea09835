//! Metadata service messages.
//!
//! Every request is an [`MdsCall`]: the client's uuid and the xid below which it has received
//! all replies (so the MDS can forget saved replies), around one [`MdsOp`]. Names are raw bytes:
//! POSIX names need not be UTF-8.

use nacre_types::layout::StripeSpec;
use nacre_types::{Attr, Fid, FileKind, Layout, SetAttr, StatFs};
use serde::{Deserialize, Serialize};

/// A request to the MDS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsCall {
    /// Client uuid: with the frame's xid, identifies a modifying request for exactly-once.
    pub client: [u8; 16],
    /// Every xid of this client below this one has had its reply received.
    pub replied_below: u64,
    /// Job the request works for (empty: none), for per-job statistics.
    pub jobid: String,
    /// Who the request works for: the MDT checks permissions with these.
    pub cred: nacre_types::Cred,
    /// Lock bits ([`nacre_ldlm::msg::LOOKUP`], `UPDATE`, `LAYOUT`) the client would like on
    /// the inode an entry reply names (the intent); 0: none. Only a client that polls for
    /// callbacks ([`MdsOp::LockPoll`]) is granted any.
    pub lock_bits: u8,
    /// The operation.
    pub op: MdsOp,
}

/// Operations on the namespace. Each variant names its reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsOp {
    /// Attributes of an inode (and layout of a regular file). Reply: [`MdsReply::Entry`].
    GetAttr {
        /// Inode.
        fid: Fid,
    },
    /// Look up a name. Reply: [`MdsReply::Entry`].
    Lookup {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
    },
    /// Create a non-directory inode (regular file, device, fifo, socket). Reply:
    /// [`MdsReply::Entry`] with the layout for regular files.
    Create {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Kind.
        kind: FileKind,
        /// Permission bits (umask already applied).
        perm: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Device number.
        rdev: u32,
        /// Fail with EEXIST if the name exists (O_EXCL); otherwise open the existing file.
        exclusive: bool,
        /// Register the caller as an opener (create-and-open in one RPC).
        open: bool,
        /// Access the open wants if the name exists already ([`nacre_types::cred::MAY_READ`]
        /// | [`nacre_types::cred::MAY_WRITE`]); a new file is the caller's to use.
        access: u8,
    },
    /// Create a directory. Reply: [`MdsReply::Entry`].
    Mkdir {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Permission bits.
        perm: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
    /// Create a symlink. Reply: [`MdsReply::Entry`].
    Symlink {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Link target.
        target: Vec<u8>,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
    },
    /// Add a hard link. Reply: [`MdsReply::Entry`].
    Link {
        /// Existing inode.
        fid: Fid,
        /// Directory of the new name.
        parent: Fid,
        /// New name.
        name: Vec<u8>,
    },
    /// Remove a non-directory name. Reply: [`MdsReply::Done`].
    Unlink {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
    },
    /// Remove an empty directory. Reply: [`MdsReply::Done`].
    Rmdir {
        /// Directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
    },
    /// Rename, replacing a compatible target. Reply: [`MdsReply::Done`].
    Rename {
        /// Source directory.
        src_parent: Fid,
        /// Source name.
        src_name: Vec<u8>,
        /// Target directory.
        dst_parent: Fid,
        /// Target name.
        dst_name: Vec<u8>,
        /// Fail if the target exists (RENAME_NOREPLACE).
        noreplace: bool,
    },
    /// Change attributes (size changes of regular files are done on OSTs by the client first).
    /// Reply: [`MdsReply::Attr`].
    SetAttr {
        /// Inode.
        fid: Fid,
        /// Changes.
        attr: SetAttr,
    },
    /// Read a symlink. Reply: [`MdsReply::Target`].
    ReadLink {
        /// Inode.
        fid: Fid,
    },
    /// List a directory in name order, after `after` (exclusive). Reply: [`MdsReply::Dir`].
    ReadDir {
        /// Directory.
        fid: Fid,
        /// Resume after this name; `None` starts at the beginning.
        after: Option<Vec<u8>>,
        /// Most entries wanted.
        count: u32,
    },
    /// Open an inode: registers the opener (so an unlinked open file keeps its data) and
    /// returns its attributes and layout. Reply: [`MdsReply::Entry`].
    Open {
        /// Inode.
        fid: Fid,
        /// Access wanted ([`nacre_types::cred::MAY_READ`] | [`nacre_types::cred::MAY_WRITE`];
        /// `O_TRUNC` wants write), checked against the inode's permissions.
        access: u8,
    },
    /// Close an inode opened with [`MdsOp::Open`] or a create. Reply: [`MdsReply::Done`].
    Close {
        /// Inode.
        fid: Fid,
        /// The handle was opened for writing.
        writer: bool,
        /// Data was written through it (the MDT no longer knows the file's size exactly).
        written: bool,
    },
    /// Read an extended attribute. Reply: [`MdsReply::Xattr`].
    GetXattr {
        /// Inode.
        fid: Fid,
        /// Name.
        name: Vec<u8>,
    },
    /// Set an extended attribute (flags: XATTR_CREATE = 1, XATTR_REPLACE = 2).
    /// Reply: [`MdsReply::Done`].
    SetXattr {
        /// Inode.
        fid: Fid,
        /// Name.
        name: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// Flags.
        flags: u32,
    },
    /// List extended attribute names. Reply: [`MdsReply::XattrNames`].
    ListXattr {
        /// Inode.
        fid: Fid,
    },
    /// Remove an extended attribute. Reply: [`MdsReply::Done`].
    RemoveXattr {
        /// Inode.
        fid: Fid,
        /// Name.
        name: Vec<u8>,
    },
    /// Set the layout of an empty file, or the default layout of a directory.
    /// Reply: [`MdsReply::Layout`].
    SetLayout {
        /// Inode.
        fid: Fid,
        /// Requested striping.
        spec: StripeSpec,
    },
    /// Layout of a file, or default layout of a directory. Reply: [`MdsReply::Layout`].
    GetLayout {
        /// Inode.
        fid: Fid,
    },
    /// Capacity of the MDT. Reply: [`MdsReply::StatFs`].
    StatFs,
    /// Create a directory whose inode lives on MDT `mdt` (a remote directory, `mkdir -i`);
    /// sent to the parent's MDT, which coordinates. Reply: [`MdsReply::Entry`].
    MkdirOn {
        /// Parent directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Permission bits.
        perm: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// MDT index of the new directory's inode; [`MDT_INDEX_ANY`]: the coordinator picks
        /// one by free inodes (Lustre's `lfs mkdir -i -1`).
        mdt: u32,
    },
    /// Create a striped directory: entries spread by `hash` over `count` shards on MDTs
    /// `start`, `start`+1, … (`start` [`MDT_INDEX_ANY`]: the coordinator picks). Sent to the
    /// parent's MDT. Reply: [`MdsReply::Entry`] (the master directory).
    MkdirStriped {
        /// Parent directory.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Permission bits.
        perm: u32,
        /// Owner.
        uid: u32,
        /// Group.
        gid: u32,
        /// Shards (at most the number of MDTs).
        count: u32,
        /// MDT of the master and first shard.
        start: u32,
        /// Name hash.
        hash: nacre_types::dirstripe::DirHash,
    },
    /// The stripe layout of a directory (None: not striped). Reply: [`MdsReply::DirStripe`].
    GetDirStripe {
        /// Directory.
        fid: Fid,
    },
    /// Set (or with None remove) a directory's default for new subdirectories
    /// (`setdirstripe -D`). Reply: [`MdsReply::Done`].
    SetDirDefault {
        /// Directory (for a striped one, the client sets the master and every shard).
        fid: Fid,
        /// The default.
        default: Option<nacre_types::dirstripe::DirDefault>,
    },
    /// A directory's default for new subdirectories. Reply: [`MdsReply::DirDefault`].
    GetDirDefault {
        /// Directory.
        fid: Fid,
    },
    /// MDT to MDT: reserve a FID of the receiving MDT for an inode it will create for the
    /// sender (checks it has room). Reply: [`MdsReply::Fid`].
    AllocFid,
    /// MDT to MDT: apply one update of a cross-MDT operation; idempotent, durable before the
    /// reply. Reply: [`MdsReply::Done`] (or the refusal).
    Update(RemoteUpdate),
    /// A page of the MDT's inodes in FID order, after `after` (exclusive), for the namespace
    /// checker. Reply: [`MdsReply::Inodes`].
    ScanInodes {
        /// Resume after this FID; `None` starts at the beginning.
        after: Option<Fid>,
        /// Most inodes wanted.
        count: u32,
    },
    /// A page of the MDT's directory entries in (parent, name) order, after `after`
    /// (exclusive), for the namespace checker. Reply: [`MdsReply::Dirents`].
    ScanDirents {
        /// Resume after this (parent, name); `None` starts at the beginning.
        after: Option<(Fid, Vec<u8>)>,
        /// Most entries wanted.
        count: u32,
    },
    /// Make every change committed so far durable (fsync, fsyncdir). Reply: [`MdsReply::Done`].
    Sync,
    /// Move directory `fid` (entry `name` of `parent`) to MDT `target` online (`nacre
    /// migrate -m`): a new inode there takes its attributes and entries, with its files'
    /// inodes (those open or hard-linked stay where they are); subdirectories move as
    /// entries only. Sent to the directory's MDT, which coordinates. The old FIDs answer
    /// `ESTALE` after. Reply: [`MdsReply::Migrated`].
    Migrate {
        /// The directory.
        fid: Fid,
        /// Directory holding its entry.
        parent: Fid,
        /// Its name there.
        name: Vec<u8>,
        /// MDT to move it to.
        target: u32,
    },
    /// MDT to MDT0: take (`acquire`) or give back the file system's rename lock for the
    /// operation `owner` (a coordinator's client request: uuid and xid), as Lustre's big
    /// rename lock: directory renames between different parents hold it around their loop
    /// check and change. Granted: [`MdsReply::Done`]; held by another: `EINPROGRESS`.
    RenameLock {
        /// The operation holding it.
        owner: ([u8; 16], u64),
        /// Take it (true) or give it back.
        acquire: bool,
    },
    /// "This client is alive" (Lustre's pinger): sent by an idle client every ping interval so
    /// the MDT does not evict it. Reply: [`MdsReply::Done`]; an evicted client gets
    /// `ESHUTDOWN`.
    Ping,
    /// The client is going away (unmount): the MDT drops its export now — its opens and
    /// saved replies — instead of evicting it later. Reply: [`MdsReply::Done`].
    Disconnect,
    /// After reconnecting: the files this client holds open on the MDT, with their handle
    /// counts (Lustre's open replay), so a restarted MDT keeps files unlinked while open.
    /// At most [`REOPEN_FIDS_MAX`] entries. Reply: [`MdsReply::Done`].
    Reopen {
        /// (file, open handles).
        opens: Vec<(Fid, u32)>,
    },
    /// After every new link: "who are you now?" Reply: [`MdsReply::Connected`], which tells
    /// whether the MDT restarted (its epoch changed) and is waiting for its clients' replays.
    Connect,
    /// Replay of an operation this client was answered but the MDT had not committed when
    /// it restarted (Lustre's replay), sent with the operation's original xid, one at a time
    /// in `transno` order. The MDT runs replays of all its clients in transno order during
    /// its recovery window. Reply: the operation's reply.
    Replay {
        /// The transaction number the MDT gave the operation.
        transno: u64,
        /// The operation.
        op: Box<MdsOp>,
        /// The reply it got: an inode it created is created again with the same FID and
        /// layout (clients hold the FID; the file's data is in those objects).
        reply: Box<MdsReply>,
        /// The versions the inodes it changed had before it (from its answer): the MDT
        /// refuses the replay (`ESTALE`) if one differs now — a change it depended on was
        /// lost with a client that did not come back (Lustre's version-based recovery).
        pre_versions: Vec<(Fid, u64)>,
    },
    /// This client has replayed everything it had. Reply: [`MdsReply::Done`] once the
    /// MDT's recovery is complete (or `EINPROGRESS` while it waits for other clients).
    ReplayDone,
    /// Waits for lock callbacks: answered with the locks this client must cancel as soon
    /// as there are some, or empty after `wait_ms` (at most
    /// [`nacre_ldlm::server::POLL_WAIT_MS_MAX`]). Reply: [`MdsReply::Blocking`].
    LockPoll {
        /// Longest wait, milliseconds.
        wait_ms: u64,
        /// The MDT epoch the client last connected to (0: none yet): a poll for another
        /// epoch is answered at once, so the client reconnects and replays its locks
        /// instead of waiting out the poll.
        epoch: u64,
    },
    /// Gives locks back (after a callback, or from the client's LRU). Reply:
    /// [`MdsReply::Done`].
    LockCancel {
        /// Lock handles (at most [`nacre_ldlm::msg::REFS_PER_MESSAGE_MAX`]).
        handles: Vec<u64>,
    },
    /// After the MDT restarted: the locks this client held, to be held again if nothing
    /// changed since the restart. Reply: [`MdsReply::LocksRefused`].
    LockReplay {
        /// The locks (at most [`nacre_ldlm::msg::REFS_PER_MESSAGE_MAX`]).
        locks: Vec<nacre_ldlm::msg::LockRef>,
    },
    /// [`MdsOp::ReadDir`] with every entry's attributes (FUSE's readdirplus, the statahead
    /// of `ls -l`), and for each entry of this MDT a lock of the call's `lock_bits` on its
    /// inode where one can be granted. Reply: [`MdsReply::DirPlus`].
    ReadDirPlus {
        /// Directory.
        fid: Fid,
        /// Resume after this name; `None` starts at the beginning.
        after: Option<Vec<u8>>,
        /// Most entries wanted (at most [`READDIRPLUS_ENTRIES_MAX`]).
        count: u32,
    },
    /// Sets, changes or releases a byte-range lock (`fcntl` `F_SETLK`/`F_SETLKW`, `flock`)
    /// of `owner` on bytes `start..=end` of `fid`. Reply: [`MdsReply::Done`] once held (or
    /// released); `EAGAIN` if another owner's lock is in the way and `wait_ms` is 0;
    /// [`MdsReply::FlockBlocked`] if it still is after `wait_ms` (the client asks again);
    /// `EDEADLK` if waiting would deadlock; `ENOLCK` if the MDT holds too many.
    Flock {
        /// The file.
        fid: Fid,
        /// The lock owner within the client (the kernel's).
        owner: u64,
        /// The caller's process id (reported to `F_GETLK` on other clients).
        pid: u32,
        /// Read, write or unlock.
        kind: nacre_ldlm::flock::FlockKind,
        /// First byte.
        start: u64,
        /// Last byte, inclusive (`u64::MAX`: to the end of the file).
        end: u64,
        /// Longest wait at the MDT, ms (0: do not wait; at most [`FLOCK_WAIT_MS_MAX`]).
        wait_ms: u64,
        /// A lock the client held before the MDT restarted, set again: served during the
        /// MDT's recovery window, when other byte-range requests wait (`EINPROGRESS`).
        reclaim: bool,
    },
    /// Which lock, if any, would stop `owner`'s lock of `kind` on `start..=end` of `fid`
    /// (`F_GETLK`). Reply: [`MdsReply::FlockHeld`].
    FlockTest {
        /// The file.
        fid: Fid,
        /// The lock owner within the client.
        owner: u64,
        /// Read or write.
        kind: nacre_ldlm::flock::FlockKind,
        /// First byte.
        start: u64,
        /// Last byte, inclusive.
        end: u64,
    },
}

/// Longest a [`MdsOp::Flock`] waits at the MDT before it is answered
/// [`MdsReply::FlockBlocked`].
pub const FLOCK_WAIT_MS_MAX: u64 = 60_000;

/// Most entries of one [`MdsOp::ReadDirPlus`] page (each carries attributes, maybe a
/// layout and a lock).
pub const READDIRPLUS_ENTRIES_MAX: u32 = 512;

/// One entry of a [`MdsReply::DirPlus`] page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirPlusEntry {
    /// Name, inode, kind.
    pub entry: DirEntry,
    /// The inode's attributes, read after its lock was granted; `None` for an inode of
    /// another MDT, or one whose name no longer led to it under the lock (ask again).
    pub attr: Option<Attr>,
    /// A regular file's size and blocks in `attr` are exact (else glimpse its objects).
    pub size_exact: bool,
    /// A regular file's layout, given when its size is not exact (for the glimpse).
    pub layout: Option<Layout>,
    /// The lock granted on the inode, if any.
    pub lock: Option<nacre_ldlm::msg::LockRef>,
}

/// A reply of the MDS service on the network: the transaction number the MDT gave the
/// operation (0: nothing to replay — read-only, failed, or not replayable) and the highest
/// transaction number it has made durable (`last_committed`), so the client keeps a
/// request for replay exactly until it is committed. Its encoding is the three varints and
/// the versions followed by the encoded [`MdsReply`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MdsAnswer {
    /// The operation's transaction number.
    pub transno: u64,
    /// Highest transaction number durable on the MDT.
    pub last_committed: u64,
    /// The MDT's epoch (new at every start): `last_committed` of another epoch says
    /// nothing about this client's changes of the previous one.
    pub epoch: u64,
    /// Versions (transnos of their last change) of the inodes the operation changed,
    /// before it: sent back with a replay for version checks.
    pub pre_versions: Vec<(Fid, u64)>,
    /// The lock granted with the reply (the request's `lock_bits`), if any.
    pub lock: Option<nacre_ldlm::msg::LockRef>,
    /// The attributes of the directory a name change (create, mkdir, symlink, link,
    /// unlink, rmdir) changed, as they are after it: a client holding that directory's
    /// `UPDATE` lock keeps them instead of asking again.
    pub dir: Option<Attr>,
    /// The reply.
    pub reply: MdsReply,
}

impl MdsAnswer {
    /// The encoding of an answer's fields but its reply, which the reply's own encoding
    /// follows: a server prefixes a reply it holds encoded (a saved one) without decoding
    /// it.
    pub fn encode_head(
        transno: u64,
        last_committed: u64,
        epoch: u64,
        pre_versions: &[(Fid, u64)],
        lock: Option<nacre_ldlm::msg::LockRef>,
        dir: Option<&Attr>,
    ) -> Vec<u8> {
        crate::encode_body(&(transno, last_committed, epoch, pre_versions, lock, dir))
    }
}

/// Most files one [`MdsOp::Reopen`] lists (a client with more sends several).
pub const REOPEN_FIDS_MAX: usize = 16_384;

/// [`MdsOp::MkdirOn`]'s MDT index meaning "the coordinator chooses".
pub const MDT_INDEX_ANY: u32 = u32::MAX;

/// Requests served by the MDS readpage service `mdt_readpage` (Lustre's MDS_READPAGE_PORTAL):
/// directory pages (with attributes too), and closes (as Lustre does, so a close never
/// waits behind the creates and opens queued in `mdt`). Everything else is served by `mdt`.
pub const READPAGE_OPCODES: [u16; 3] = [0x020c, 0x020e, 0x022b];

/// Requests a server serves to completion on the network thread that read them: short reads
/// of one MDT's records that wait on no lock, disk write or other server (getattr, lookup,
/// readlink, getxattr, listxattr, getlayout, getdirstripe, getdirdefault, ping, and lock
/// cancels, which wake the changes waiting for them).
pub const INLINE_OPCODES: [u16; 10] = [
    0x0201, 0x0202, 0x020b, 0x020f, 0x0211, 0x0214, 0x021d, 0x021f, 0x0222, 0x0229,
];

impl MdsOp {
    /// The inode the operation is about: the parent directory for name operations, the
    /// inode itself otherwise (the hash rotor keeps one directory's requests together).
    pub fn key_fid(&self) -> Option<Fid> {
        match self {
            MdsOp::Lookup { parent, .. }
            | MdsOp::Create { parent, .. }
            | MdsOp::Mkdir { parent, .. }
            | MdsOp::Symlink { parent, .. }
            | MdsOp::Link { parent, .. }
            | MdsOp::Unlink { parent, .. }
            | MdsOp::Rmdir { parent, .. } => Some(*parent),
            MdsOp::Rename { src_parent, .. } => Some(*src_parent),
            MdsOp::GetAttr { fid }
            | MdsOp::SetAttr { fid, .. }
            | MdsOp::ReadLink { fid }
            | MdsOp::ReadDir { fid, .. }
            | MdsOp::ReadDirPlus { fid, .. }
            | MdsOp::Flock { fid, .. }
            | MdsOp::FlockTest { fid, .. }
            | MdsOp::Open { fid, .. }
            | MdsOp::Close { fid, .. }
            | MdsOp::GetXattr { fid, .. }
            | MdsOp::SetXattr { fid, .. }
            | MdsOp::ListXattr { fid }
            | MdsOp::RemoveXattr { fid, .. }
            | MdsOp::SetLayout { fid, .. }
            | MdsOp::GetLayout { fid } => Some(*fid),
            MdsOp::MkdirOn { parent, .. } | MdsOp::MkdirStriped { parent, .. } => Some(*parent),
            MdsOp::GetDirStripe { fid }
            | MdsOp::SetDirDefault { fid, .. }
            | MdsOp::GetDirDefault { fid }
            | MdsOp::Migrate { fid, .. } => Some(*fid),
            MdsOp::Update(u) => Some(u.fid()),
            MdsOp::StatFs
            | MdsOp::Sync
            | MdsOp::Ping
            | MdsOp::Disconnect
            | MdsOp::Reopen { .. }
            | MdsOp::Connect
            | MdsOp::Replay { .. }
            | MdsOp::ReplayDone
            | MdsOp::LockPoll { .. }
            | MdsOp::LockCancel { .. }
            | MdsOp::LockReplay { .. }
            | MdsOp::AllocFid
            | MdsOp::RenameLock { .. }
            | MdsOp::ScanInodes { .. }
            | MdsOp::ScanDirents { .. } => None,
        }
    }

    /// The directory whose names the operation changes (create, mkdir, symlink, link,
    /// unlink, rmdir): its answer carries the directory's attributes after the change
    /// ([`MdsAnswer::dir`]).
    pub fn names_changed_in(&self) -> Option<Fid> {
        match self {
            MdsOp::Create { parent, .. }
            | MdsOp::Mkdir { parent, .. }
            | MdsOp::Symlink { parent, .. }
            | MdsOp::Link { parent, .. }
            | MdsOp::Unlink { parent, .. }
            | MdsOp::Rmdir { parent, .. } => Some(*parent),
            _ => None,
        }
    }

    /// Opcode (service 2).
    pub fn opcode(&self) -> u16 {
        0x0200
            | match self {
                MdsOp::GetAttr { .. } => 1,
                MdsOp::Lookup { .. } => 2,
                MdsOp::Create { .. } => 3,
                MdsOp::Mkdir { .. } => 4,
                MdsOp::Symlink { .. } => 5,
                MdsOp::Link { .. } => 6,
                MdsOp::Unlink { .. } => 7,
                MdsOp::Rmdir { .. } => 8,
                MdsOp::Rename { .. } => 9,
                MdsOp::SetAttr { .. } => 10,
                MdsOp::ReadLink { .. } => 11,
                MdsOp::ReadDir { .. } => 12,
                MdsOp::Open { .. } => 13,
                MdsOp::Close { .. } => 14,
                MdsOp::GetXattr { .. } => 15,
                MdsOp::SetXattr { .. } => 16,
                MdsOp::ListXattr { .. } => 17,
                MdsOp::RemoveXattr { .. } => 18,
                MdsOp::SetLayout { .. } => 19,
                MdsOp::GetLayout { .. } => 20,
                MdsOp::StatFs => 21,
                MdsOp::Sync => 22,
                MdsOp::ScanInodes { .. } => 23,
                MdsOp::ScanDirents { .. } => 24,
                MdsOp::MkdirOn { .. } => 25,
                MdsOp::AllocFid => 26,
                MdsOp::Update(_) => 27,
                MdsOp::MkdirStriped { .. } => 28,
                MdsOp::GetDirStripe { .. } => 29,
                MdsOp::SetDirDefault { .. } => 30,
                MdsOp::GetDirDefault { .. } => 31,
                MdsOp::Migrate { .. } => 32,
                MdsOp::RenameLock { .. } => 33,
                MdsOp::Ping => 34,
                MdsOp::Disconnect => 35,
                MdsOp::Reopen { .. } => 36,
                MdsOp::Connect => 37,
                MdsOp::Replay { .. } => 38,
                MdsOp::ReplayDone => 39,
                MdsOp::LockPoll { .. } => 40,
                MdsOp::LockCancel { .. } => 41,
                MdsOp::LockReplay { .. } => 42,
                MdsOp::ReadDirPlus { .. } => 43,
                MdsOp::Flock { .. } => 44,
                MdsOp::FlockTest { .. } => 45,
            }
    }

    /// True for operations that change state and therefore get exactly-once treatment.
    pub fn is_modifying(&self) -> bool {
        !matches!(
            self,
            MdsOp::GetAttr { .. }
                | MdsOp::Lookup { .. }
                | MdsOp::ReadLink { .. }
                | MdsOp::ReadDir { .. }
                | MdsOp::ReadDirPlus { .. }
                // Byte-range locks: in memory, set again by their holders after a restart;
                // setting or releasing a lock twice is the same as once.
                | MdsOp::Flock { .. }
                | MdsOp::FlockTest { .. }
                | MdsOp::Open { .. }
                | MdsOp::GetXattr { .. }
                | MdsOp::ListXattr { .. }
                | MdsOp::GetLayout { .. }
                | MdsOp::StatFs
                                | MdsOp::Sync
                                | MdsOp::Ping
                // Handled apart: it ends the client's export.
                                | MdsOp::Disconnect
                                | MdsOp::Reopen { .. }
                // Recovery: handled apart (a replay runs its operation as such).
                | MdsOp::Connect
                | MdsOp::Replay { .. }
                | MdsOp::ReplayDone
                // Lock traffic: in memory, lost with a restart by design.
                | MdsOp::LockPoll { .. }
                | MdsOp::LockCancel { .. }
                | MdsOp::LockReplay { .. }
                | MdsOp::ScanInodes { .. }
                | MdsOp::ScanDirents { .. }
                | MdsOp::GetDirStripe { .. }
                | MdsOp::GetDirDefault { .. }
                // Idempotent by construction, committed by their own transaction.
                                | MdsOp::AllocFid
                | MdsOp::Update(_)
                | MdsOp::RenameLock { .. }
        )
    }
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode.
    pub fid: Fid,
    /// Kind.
    pub kind: FileKind,
}

/// One MDT's part of a cross-MDT operation, sent by the coordinating MDT (docs/dne.md).
/// Applying one twice is the same as once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteUpdate {
    /// Create directory inode `attr.fid` (whose entry is `parent`'s, on the coordinator)
    /// unless it exists.
    CreateDir {
        /// Attributes of the new directory (its FID from [`MdsOp::AllocFid`]).
        attr: Attr,
        /// Directory holding its entry.
        parent: Fid,
        /// Default striping for files created in it (the coordinator's effective default
        /// there, as the file system default lives on MDT0).
        dir_default: Option<StripeSpec>,
        /// For the master of a striped directory: its shards.
        stripe: Option<nacre_types::dirstripe::DirStripe>,
        /// Default for its own new subdirectories (inherited from its parent's).
        default: Option<nacre_types::dirstripe::DirDefault>,
    },
    /// Destroy directory inode `fid` if it is empty (`ENOTEMPTY` otherwise); done if absent.
    DestroyDir {
        /// The directory.
        fid: Fid,
    },
    /// Count entry (`parent`, `name`) on the coordinator as a link of non-directory inode
    /// `fid` (a hard link across MDTs); done if already counted.
    AddLink {
        /// The inode.
        fid: Fid,
        /// Directory of the entry (on the coordinator).
        parent: Fid,
        /// Name of the entry.
        name: Vec<u8>,
    },
    /// Put entry (`parent`, `name`) → `fid` on the receiving MDT, the target of a rename
    /// across MDTs: done if it already names `fid`; `EEXIST` with `noreplace`; over a
    /// directory `EISDIR` (moving a directory: an empty one of the receiving MDT is replaced,
    /// `ENOTEMPTY` if not empty; one of another MDT only when it is `replaces`, already
    /// destroyed there by the coordinator; `EXDEV` if striped or elsewhere otherwise), over a
    /// non-directory when moving one `ENOTDIR`; otherwise the entry it replaces loses its
    /// link. A non-directory living on the receiving MDT gains a link here; a directory adds
    /// to its new parent's link count.
    InsertEntry {
        /// The inode.
        fid: Fid,
        /// Its kind.
        kind: FileKind,
        /// Directory (on the receiving MDT).
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Refuse to replace an existing entry.
        noreplace: bool,
        /// A directory of another MDT the entry named, destroyed there already (it was
        /// empty): the entry is replaced without touching it.
        replaces: Option<Fid>,
    },
    /// Set directory `fid`'s `..` to `parent` (a directory moved across MDTs).
    SetParent {
        /// The directory.
        fid: Fid,
        /// Its new parent.
        parent: Fid,
    },
    /// Stop counting entry (`parent`, `name`) as a link of `fid` (it was removed); the inode
    /// goes with its last link (kept while open). Done if not counted.
    DropLink {
        /// The inode.
        fid: Fid,
        /// Directory of the entry (on the coordinator).
        parent: Fid,
        /// Name of the entry.
        name: Vec<u8>,
    },
    /// Migration: hold entry (`parent`, `name`) while directory `fid` moves to `to` — no
    /// rename or removal of an entry naming `fid` until [`RemoteUpdate::Repoint`]. Done if
    /// it names `to` already; `ENOENT` if it names neither.
    Freeze {
        /// The directory being moved.
        fid: Fid,
        /// Directory of its entry (on the receiving MDT).
        parent: Fid,
        /// Name of its entry.
        name: Vec<u8>,
        /// Its new FID.
        to: Fid,
    },
    /// Migration: put the moved directory `dir`'s entries (and attributes `xattrs`) here;
    /// an entry carrying its inode gets a new inode of this MDT. Entries already present
    /// are kept as they are (idempotent by name). Reply: [`MdsReply::Adopted`], the FID each
    /// entry names here, in order.
    Adopt {
        /// The new directory (created by [`RemoteUpdate::CreateDir`]).
        dir: Fid,
        /// The directory's extended attributes.
        xattrs: Vec<(Vec<u8>, Vec<u8>)>,
        /// Entries, at most [`ADOPT_ENTRIES_MAX`].
        entries: Vec<AdoptEntry>,
    },
    /// Migration: entry (`parent`, `name`) now names `to` instead of `from` (and is no
    /// longer held). Done if it names `to` already.
    Repoint {
        /// Directory of the entry.
        parent: Fid,
        /// Name.
        name: Vec<u8>,
        /// Old FID of the directory.
        from: Fid,
        /// New FID.
        to: Fid,
    },
}

/// Most entries in one [`RemoteUpdate::Adopt`].
pub const ADOPT_ENTRIES_MAX: usize = 1024;

/// One entry of a directory being migrated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Kind.
    pub kind: FileKind,
    /// The inode it names now.
    pub fid: Fid,
    /// The inode itself when it moves too (it gets a new FID on the receiving MDT).
    pub inode: Option<MovedInode>,
}

/// An inode moving to another MDT with its directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedInode {
    /// Attributes (the FID is replaced by the receiving MDT's).
    pub attr: Attr,
    /// Objects of a regular file (they stay where they are).
    pub layout: Option<Layout>,
    /// Target of a symlink.
    pub symlink: Option<Vec<u8>>,
    /// Extended attributes.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RemoteUpdate {
    /// The inode the update is about.
    pub fn fid(&self) -> Fid {
        match self {
            RemoteUpdate::CreateDir { attr, .. } => attr.fid,
            RemoteUpdate::DestroyDir { fid }
            | RemoteUpdate::AddLink { fid, .. }
            | RemoteUpdate::InsertEntry { fid, .. }
            | RemoteUpdate::SetParent { fid, .. }
            | RemoteUpdate::DropLink { fid, .. }
            | RemoteUpdate::Freeze { fid, .. } => *fid,
            RemoteUpdate::Adopt { dir, .. } => *dir,
            RemoteUpdate::Repoint { parent, .. } => *parent,
        }
    }
}

/// What the namespace checker needs of one inode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeSummary {
    /// Inode.
    pub fid: Fid,
    /// Kind.
    pub kind: FileKind,
    /// Link count as stored.
    pub nlink: u32,
    /// Parent of a directory.
    pub parent: Option<Fid>,
    /// Unlinked while open (kept until the last close; no entry names it).
    pub orphan: bool,
    /// Shards, if it is the master of a striped directory.
    pub shards: Vec<Fid>,
}

/// One stored directory entry, with its directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirentSummary {
    /// Directory.
    pub parent: Fid,
    /// Name.
    pub name: Vec<u8>,
    /// Inode named.
    pub fid: Fid,
    /// Kind recorded in the entry.
    pub kind: FileKind,
}

/// A file's layout or a directory's default striping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutInfo {
    /// A regular file's objects.
    File(Layout),
    /// A directory's default for new files (`None`: inherits the file system default).
    Dir(Option<StripeSpec>),
    /// Not a regular file or directory.
    None,
}

/// Replies from the MDS. Errors travel in the header status with an empty body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MdsReply {
    /// Attributes.
    Attr(Attr),
    /// An inode and, for regular files, its layout.
    Entry {
        /// Attributes.
        attr: Attr,
        /// Layout of a regular file.
        layout: Option<Layout>,
        /// A regular file's size and blocks in `attr` are exact (no one writes it and the
        /// MDT knows them): no glimpse is needed.
        size_exact: bool,
    },
    /// Symlink target.
    Target(Vec<u8>),
    /// A page of directory entries.
    Dir {
        /// Entries in name order.
        entries: Vec<DirEntry>,
        /// No entries follow.
        eof: bool,
    },
    /// Extended attribute value.
    Xattr(Vec<u8>),
    /// Extended attribute names.
    XattrNames(Vec<Vec<u8>>),
    /// Layout.
    Layout(LayoutInfo),
    /// Capacity.
    StatFs(StatFs),
    /// Done, nothing to return.
    Done,
    /// A FID reserved by [`MdsOp::AllocFid`].
    Fid(Fid),
    /// A directory's stripe layout (None: not striped).
    DirStripe(Option<nacre_types::dirstripe::DirStripe>),
    /// A directory's default for new subdirectories.
    DirDefault(Option<nacre_types::dirstripe::DirDefault>),
    /// The name is an entry of this MDT for an inode of another MDT: ask that one for it.
    Remote {
        /// The inode (its MDT is `fid.mdt_index()`).
        fid: Fid,
    },
    /// A page of inodes in FID order.
    Inodes {
        /// Inodes.
        inodes: Vec<InodeSummary>,
        /// No inodes follow.
        eof: bool,
    },
    /// A page of directory entries in (parent, name) order.
    Dirents {
        /// Entries.
        dirents: Vec<DirentSummary>,
        /// No entries follow.
        eof: bool,
    },
    /// The FIDs the entries of a [`RemoteUpdate::Adopt`] name on the receiving MDT.
    Adopted(Vec<Fid>),
    /// A directory moved by [`MdsOp::Migrate`].
    Migrated {
        /// Its new FID.
        fid: Fid,
        /// Inodes that moved with it (files, symlinks).
        moved: u64,
        /// Entries whose inodes stayed where they were (subdirectories, open or
        /// hard-linked files, inodes of other MDTs).
        kept: u64,
    },
    /// Locks the client must cancel (answer to [`MdsOp::LockPoll`]).
    Blocking(Vec<nacre_ldlm::msg::LockRef>),
    /// The name does not exist: the answer to a [`MdsOp::Lookup`] that asked for a lock,
    /// which is then on the directory (its UPDATE bit covers the absence).
    NoEntry,
    /// Handles of replayed locks the MDT did not take back (answer to
    /// [`MdsOp::LockReplay`]): the client drops them.
    LocksRefused(Vec<u64>),
    /// Another owner's lock is still in the way after the wait (answer to
    /// [`MdsOp::Flock`]): ask again.
    FlockBlocked,
    /// The lock in the way, if any (answer to [`MdsOp::FlockTest`]).
    FlockHeld(Option<nacre_ldlm::flock::Flock>),
    /// A page of directory entries with attributes and locks (answer to
    /// [`MdsOp::ReadDirPlus`]).
    DirPlus {
        /// Entries in name order.
        entries: Vec<DirPlusEntry>,
        /// No entries follow.
        eof: bool,
    },
    /// Answer to [`MdsOp::Connect`].
    Connected {
        /// Changes at every start of the MDT: a client that saw another one must replay.
        epoch: u64,
        /// The MDT waits for its clients' replays (its recovery window is open).
        recovering: bool,
        /// Highest transaction number durable on the MDT.
        last_committed: u64,
        /// Highest transaction number the store held when this incarnation started: a
        /// client's changes above it were lost with the restart (and are replayed, or,
        /// once recovery is over, gone).
        committed_at_start: u64,
    },
}

impl MdsReply {
    /// Checks content a well-formed reply may still get wrong, before a client uses it:
    /// layouts (objects, stripe size), directory stripes (shards), entry names (1 to 255
    /// bytes, no `/` or NUL), page sizes, symlink targets and xattr sizes. The reason on
    /// failure.
    pub fn check(&self) -> Result<(), String> {
        use nacre_types::limits::{
            NAME_BYTES_MAX, READDIR_ENTRIES_MAX, SYMLINK_BYTES_MAX, XATTR_NAME_BYTES_MAX,
            XATTR_VALUE_BYTES_MAX,
        };
        let at_most = |what: &str, n: usize, max: usize| match n > max {
            true => Err(format!("{what} of {n} bytes (at most {max})")),
            false => Ok(()),
        };
        match self {
            MdsReply::Entry {
                layout: Some(l), ..
            }
            | MdsReply::Layout(LayoutInfo::File(l)) => l.check().map_err(|e| e.to_string()),
            MdsReply::DirStripe(Some(s)) => s.check(),
            MdsReply::Dir { entries, .. } => {
                if entries.len() > READDIR_ENTRIES_MAX as usize {
                    return Err(format!("directory page of {} entries", entries.len()));
                }
                entries.iter().try_for_each(|e| check_name(&e.name))
            }
            MdsReply::FlockHeld(Some(l)) if l.start > l.end => {
                Err(format!("a byte-range lock from {} to {}", l.start, l.end))
            }
            MdsReply::DirPlus { entries, .. } => {
                if entries.len() > READDIRPLUS_ENTRIES_MAX as usize {
                    return Err(format!("directory page of {} entries", entries.len()));
                }
                entries.iter().try_for_each(|e| {
                    check_name(&e.entry.name)?;
                    if let Some(l) = &e.layout {
                        l.check().map_err(|e| e.to_string())?;
                    }
                    match (&e.attr, &e.lock) {
                        (Some(a), _) if a.fid != e.entry.fid => {
                            Err("attributes of another inode than the entry's".into())
                        }
                        (_, Some(l)) if l.fid != e.entry.fid || !l.is_valid() => {
                            Err("a lock on another inode than the entry's".into())
                        }
                        _ => Ok(()),
                    }
                })
            }
            MdsReply::Target(t) => at_most("symlink target", t.len(), SYMLINK_BYTES_MAX),
            MdsReply::LocksRefused(h) if h.len() > nacre_ldlm::msg::REFS_PER_MESSAGE_MAX => {
                Err(format!("{} refused locks in one answer", h.len()))
            }
            MdsReply::Blocking(refs) => {
                if refs.len() > nacre_ldlm::msg::REFS_PER_MESSAGE_MAX {
                    return Err(format!("{} lock callbacks in one answer", refs.len()));
                }
                match refs.iter().all(|r| r.is_valid()) {
                    true => Ok(()),
                    false => Err("a lock callback with unknown bits".into()),
                }
            }
            MdsReply::Xattr(v) => at_most("xattr value", v.len(), XATTR_VALUE_BYTES_MAX),
            MdsReply::XattrNames(names) => names
                .iter()
                .try_for_each(|n| at_most("xattr name", n.len(), XATTR_NAME_BYTES_MAX)),
            _ => {
                let _ = NAME_BYTES_MAX;
                Ok(())
            }
        }
    }
}

/// A directory entry's name as a client may hand it to the kernel: 1 to 255 bytes, no `/`
/// or NUL, not `.` or `..` (the client adds those itself).
fn check_name(name: &[u8]) -> Result<(), String> {
    let bad = name.is_empty()
        || name.len() > nacre_types::limits::NAME_BYTES_MAX
        || name.contains(&b'/')
        || name.contains(&0)
        || name == b"."
        || name == b"..";
    match bad {
        true => Err(format!(
            "directory entry name {:?} ({} bytes)",
            String::from_utf8_lossy(&name[..name.len().min(64)]),
            name.len()
        )),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
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
            MdsReply::Layout(LayoutInfo::File(Layout {
                stripe_size,
                objects,
            }))
        };
        assert!(layout(vec![one], 1 << 20).check().is_ok());
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
        let opens = vec![(Fid::new(0x2_0000_0400, 7), 2), (Fid::ROOT, 1)];
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
            }),
            reply: MdsReply::Connected {
                epoch: 7,
                recovering: true,
                last_committed: 299,
                committed_at_start: 250,
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
            answer.dir.clone(),
        );
        let mut prefixed = postcard::to_allocvec(&head).unwrap();
        prefixed.extend(encode_body(&answer.reply));
        assert_eq!(prefixed, bytes);
        let mut head = MdsAnswer::encode_head(
            300,
            299,
            0x1234_5678_9abc,
            &[(Fid::ROOT, 7)],
            answer.lock,
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
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_body::<MdsCall>(&bytes);
                        let _ = decode_body::<MdsReply>(&bytes);
            let _ = decode_body::<MdsAnswer>(&bytes);
        }
    }
}
