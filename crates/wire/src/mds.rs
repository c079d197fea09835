//! Metadata service messages.
//!
//! Every request is an [`MdsCall`]: the client's uuid and the xid below which it has received
//! all replies (so the MDS can forget saved replies), around one [`MdsOp`]. Names are raw bytes:
//! POSIX names need not be UTF-8.

use nacre_types::layout::{LayoutSpec, StripeSpec};
use nacre_types::{Attr, Fid, FileKind, Layout, SetAttr};
use serde::{Deserialize, Serialize};

mod batch;
pub mod changelog;
mod remote;
mod reply;
pub use batch::*;
pub use remote::*;
pub use reply::*;

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
    /// Close an inode opened with [`MdsOp::Open`] or a create. Reply: [`MdsReply::Done`],
    /// or for the close of a handle that wrote [`MdsReply::Attr`]: the file's attributes
    /// with the modification and change times that close set (its size and blocks are
    /// the MDT's record, not the file's: the MDT learns those later from the OSTs).
    Close {
        /// Inode.
        fid: Fid,
        /// The handle was opened for writing.
        writer: bool,
        /// Data was written through it (the MDT no longer knows the file's size exactly).
        written: bool,
        /// The close moves the file's modification and change times (`written`, and data
        /// was written through the client's handles after it last set the file's times:
        /// a `utimes` after the writes and before the close is what the file keeps).
        touch: bool,
        /// The client is mounted `noatime`: a read through it records no access.
        noatime: bool,
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
        /// Requested layout: plain, or components by extent.
        spec: LayoutSpec,
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
        /// The files and their handles.
        opens: Vec<ReopenEntry>,
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
    /// Registers a changelog consumer: the MDT records changes from now on and keeps them
    /// until every consumer cleared them. Root only. Reply: [`MdsReply::ChangelogUser`].
    ChangelogRegister {
        /// A name for people (at most
        /// [`changelog::CHANGELOG_USER_NAME_BYTES_MAX`] bytes; may be empty).
        name: String,
    },
    /// Deregisters a consumer (its records are freed). Root only. Reply:
    /// [`MdsReply::Done`].
    ChangelogDeregister {
        /// Its id.
        user: u32,
    },
    /// A consumer is done with every record up to `upto` (0: every record so far). Root
    /// only. Reply: [`MdsReply::Done`].
    ChangelogClear {
        /// Its id.
        user: u32,
        /// Last record cleared.
        upto: u64,
    },
    /// Reads records from `from` on (0 with a `user`: after what it cleared; 0 without:
    /// the oldest kept), only records already durable. Root only. Reply:
    /// [`MdsReply::Changelog`].
    ChangelogRead {
        /// The consumer reading (0: none; else it counts as active).
        user: u32,
        /// First record wanted.
        from: u64,
        /// Most records wanted (at most [`changelog::CHANGELOG_READ_RECORDS_MAX`]).
        count: u32,
    },
    /// The consumers and the records kept. Root only. Reply:
    /// [`MdsReply::ChangelogUsers`].
    ChangelogUsers,
    /// The names in directories of this MDT that lead to `fid` (Lustre's link EA, read for
    /// `fid2path`). Root only. Reply: [`MdsReply::Links`].
    FidLinks {
        /// The inode.
        fid: Fid,
    },
    /// Starts (or resumes) the online migration of regular file `fid` (docs/migrate.md): new
    /// objects as `spec` asks (what it leaves unset is the current layout's), recorded
    /// with the file. Root only. Reply: [`MdsReply::Relayout`].
    RelayoutBegin {
        /// The file.
        fid: Fid,
        /// The new striping.
        spec: StripeSpec,
    },
    /// Opens the migration's fence window: the file's LAYOUT locks are called back and
    /// its layout requests wait until the swap or abort. Root only. Reply:
    /// [`MdsReply::Done`].
    RelayoutFence {
        /// The file.
        fid: Fid,
    },
    /// Makes the new layout the file's, one generation up; the old objects are destroyed
    /// once that is durable. Root only. Reply: [`MdsReply::Layout`].
    RelayoutSwap {
        /// The file.
        fid: Fid,
    },
    /// Gives the migration up: the new objects go; a fenced layout goes one generation up.
    /// Root only. Reply: [`MdsReply::Done`].
    RelayoutAbort {
        /// The file.
        fid: Fid,
    },
    /// What a policy engine indexes of each of `fids` (inodes of this MDT): attributes,
    /// exact size when known, pool. Inodes that do not exist are left out. Root only.
    /// Reply: [`MdsReply::Stats`].
    StatMany {
        /// The inodes (at most [`changelog::STATS_MAX`]).
        fids: Vec<Fid>,
    },
    /// [`MdsOp::StatMany`] of a page of the MDT's inodes in FID order, after `after`
    /// (exclusive): a policy engine's first scan. Root only. Reply: [`MdsReply::Stats`].
    ScanStats {
        /// Resume after this FID; `None` starts at the beginning.
        after: Option<Fid>,
        /// Most inodes wanted (at most [`changelog::STATS_MAX`]).
        count: u32,
    },
    /// The bytes that object destroys this MDT queued will free, per OST (counted as free
    /// by whatever acts on pool fill levels). Reply: [`MdsReply::DestroyPending`].
    DestroyPending,
    /// The inodes each of `ids` has on this MDT (quotas; at most
    /// [`crate::oss::QUOTA_IDS_MAX`]). Others than root may ask for themselves, their
    /// groups and projects. Reply: [`MdsReply::QuotaUsage`].
    QuotaUsage {
        /// Users, groups, projects.
        ids: Vec<nacre_types::QuotaId>,
    },
    /// Counts this MDT's inodes again and compares with its quota usage (`nacre lfsck
    /// --quota`); with `repair`, sets the usage to the count. Root only. Reply:
    /// [`MdsReply::QuotaCheck`].
    QuotaCheck {
        /// Set the usage to the count.
        repair: bool,
    },
    /// A write, truncate or allocation of the file is about to reach byte `end - 1`:
    /// instantiate every component of its layout that starts below `end` and has no
    /// objects yet (Lustre's layout intent, `LAYOUT_INTENT_WRITE`/`TRUNC`). The objects a
    /// file already has stay, so no writer is fenced; other clients' `LAYOUT` locks are
    /// called back so they read the grown layout. Sent by a client that holds the file
    /// open for writing or may write it. Reply: [`MdsReply::Layout`] (the file's layout).
    LayoutIntent {
        /// The file.
        fid: Fid,
        /// One past the last byte about to be written (at most
        /// [`nacre_types::limits::FILE_BYTES_MAX`]).
        end: u64,
    },
    /// Reads bytes of a file's component on the MDT (data on the MDT): at most
    /// [`DOM_RPC_BYTES_MAX`], all below the component's end. Sent by a client that holds the
    /// file open or may read it. Reply: [`MdsReply::DomData`] — the bytes the MDT holds in
    /// the range, short where its stored bytes end (the client tells a hole from the end of
    /// the file by the file's size).
    DomRead {
        /// The file.
        fid: Fid,
        /// First byte.
        offset: u64,
        /// Bytes wanted.
        len: u32,
    },
    /// Writes bytes into a file's component on the MDT, with its size (raised to the
    /// write's end) and modification time, in one transaction: at most
    /// [`DOM_RPC_BYTES_MAX`], all below the component's end. Sent by a client that holds
    /// the file open for writing or may write it. Reply: [`MdsReply::Attr`] (the file's
    /// attributes after the write).
    DomWrite {
        /// The file.
        fid: Fid,
        /// First byte.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Appends bytes at the end of a file whose bytes are all on the MDT (a component on
    /// the MDT, no object instantiated), when they fit below the component's end: the MDT
    /// picks the offset, so appends of several clients never overlap. `EFBIG` where they
    /// would not fit or the file has objects (the client appends under OST locks then).
    /// Who may send it: as [`MdsOp::DomWrite`]. Reply: [`MdsReply::Attr`] (the size after
    /// it: the bytes went at `size - data.len()`).
    DomAppend {
        /// The file.
        fid: Fid,
        /// The bytes (at most [`DOM_RPC_BYTES_MAX`]).
        data: Vec<u8>,
    },
    /// Grants the caller (its client uuid, as its export) a range of FIDs of this MDT that
    /// only it may give to the files it creates with [`MdsOp::CreateBatch`]: the client
    /// becomes their allocator (docs/plans/round-trips.md, R2). The grant is durable before
    /// the reply; at most [`FID_GRANTS_PER_CLIENT_MAX`] stay valid per client (a new one
    /// retires the oldest), and an eviction retires them all. Who may send it: any client
    /// that may change the namespace (not a read-only nodemap). Reply:
    /// [`MdsReply::FidRange`].
    GrantFids {
        /// FIDs wanted (1 to [`FID_GRANT_COUNT_MAX`]; the grant may be smaller).
        count: u32,
    },
    /// Creates regular files in one directory, each with the FID the client gave it from a
    /// range this MDT granted it ([`MdsOp::GrantFids`]), in any order, never a FID given
    /// before: one transaction and one transno for them all. Every
    /// item passes the checks a [`MdsOp::Create`] of the call's credentials would (write and
    /// search on the directory, owner and group claims, inode quota, the name new); one that
    /// fails is answered its error in its place and the others are made. No file is opened
    /// at the MDT. Who may send it: whoever may create in `parent`, for FIDs of its own
    /// grants. Reply: [`MdsReply::Created`], one result per item in order.
    CreateBatch {
        /// Directory (not striped: a striped directory's names are in its shards).
        parent: Fid,
        /// The files (1 to [`CREATE_BATCH_ITEMS_MAX`]).
        items: Vec<BatchCreate>,
    },
    /// Delegates directory `fid` to the caller: asked with lock bits `UPDATE | DELEGATION`,
    /// granted after every other client's `UPDATE` and `DELEGATION` locks on it were called
    /// back (nacre_ldlm::msg::DELEGATION); the lock comes in [`MdsAnswer::lock`]. `EBUSY` when
    /// another client was granted a lock on it meanwhile (ask again, or create without a
    /// delegation). Refused (`EOPNOTSUPP`) for a striped directory or one of another MDT,
    /// while this MDT enforces inode quotas (a create answered by a client could not be
    /// refused later), and to a client whose nodemap maps ids (its own permission checks
    /// would not be the MDT's). Who may send it: whoever may create in the directory
    /// (write and search), not a read-only nodemap. Not modifying: a lock, in memory, lost
    /// with a restart. Reply: [`MdsReply::Delegated`], the directory's attributes under the
    /// lock and how many bytes a file made under it may carry with its create.
    DelegateDir {
        /// The directory.
        fid: Fid,
    },
    /// Removes names of one directory, each of a regular file of this MDT named by the FID
    /// the client saw it lead to, in order: one transaction and one transno. Every item
    /// passes the checks an [`MdsOp::Unlink`] of the call's credentials would (write and
    /// search on the directory, the sticky bit); the name must lead to the item's FID
    /// (`ESTALE` otherwise: the name changed since the client looked) of a file, not a
    /// directory (`EISDIR`), on this MDT (`EXDEV`: unlink a remote inode by name); one that
    /// fails is answered its error in its place and changes nothing, the others are
    /// removed. What goes with a file's last link goes as with an unlink (an open file
    /// becomes an orphan). Who may send it: whoever may remove those names from `parent`.
    /// Reply: [`MdsReply::Unlinked`], one result per item in order.
    UnlinkBatch {
        /// Directory (not striped: a striped directory's names are in its shards).
        parent: Fid,
        /// The names (1 to [`UNLINK_BATCH_ITEMS_MAX`]).
        items: Vec<BatchUnlink>,
    },
    /// Reads of files of this MDT that the client answered itself (files it made under a
    /// delegation it holds, read from the bytes it sent with their creates): each is
    /// recorded as an access where the MDT records a reader's close (relatime, lazily:
    /// crates/mds/src/atime.rs), at the item's time if it is not after the MDT's clock and
    /// within [`BATCH_TIME_SKEW_MS_MAX`] of it (the MDT's own time otherwise). Who may send
    /// it: whoever may read every file named (`EACCES` for the whole batch otherwise,
    /// `ENOENT` if one does not exist). Not modifying: accesses are kept in memory and
    /// written lazily, as a close's are; sent twice, the later time wins. Reply:
    /// [`MdsReply::Done`].
    AccessBatch {
        /// The files read and when (1 to [`ACCESS_BATCH_ITEMS_MAX`], all of this MDT).
        items: Vec<BatchAccess>,
    },
}

/// Most FIDs one [`MdsOp::GrantFids`] grants.
pub const FID_GRANT_COUNT_MAX: u32 = 65_536;

/// FID grants that stay valid per client ([`MdsOp::GrantFids`]).
pub const FID_GRANTS_PER_CLIENT_MAX: usize = 4;

/// Most bytes one [`MdsOp::DomRead`] or [`MdsOp::DomWrite`] moves (the rest of a larger
/// range takes more requests): well within a request's body limit.
pub const DOM_RPC_BYTES_MAX: u32 = 512 * 1024;

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
    /// The locks granted with a [`MdsOp::CreateBatch`]'s files (the request's `lock_bits`
    /// on each regular file it made, at most one per item; none for an item refused, nor
    /// for a resend answered from the batch's saved reply): taken before the files were
    /// made, so they cover the reply's attributes. Empty for every other request.
    pub locks: Vec<nacre_ldlm::msg::LockRef>,
    /// The attributes of the directory a name change (create, mkdir, symlink, link,
    /// unlink, rmdir) changed, as they are after it: a client holding that directory's
    /// `UPDATE` lock keeps them instead of asking again.
    pub dir: Option<Attr>,
    /// Capabilities for the objects of the layouts the reply hands out (clients of a
    /// fileset only; [`crate::capa`]).
    pub capas: Vec<crate::capa::Capa>,
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
        locks: &[nacre_ldlm::msg::LockRef],
        dir: Option<&Attr>,
    ) -> Vec<u8> {
        let capas: &[crate::capa::Capa] = &[];
        crate::encode_body(&(
            transno,
            last_committed,
            epoch,
            pre_versions,
            lock,
            locks,
            dir,
            capas,
        ))
    }
}

/// Most files one [`MdsOp::Reopen`] lists (a client with more sends several).
pub const REOPEN_FIDS_MAX: usize = 16_384;
/// Most handles one [`MdsOp::Reopen`] counts over all its files.
pub const REOPEN_HANDLES_MAX: u64 = 1 << 20;

/// One file a client holds open, in a [`MdsOp::Reopen`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReopenEntry {
    /// The file.
    pub fid: Fid,
    /// Handles open on it.
    pub handles: u32,
    /// Of those, the handles opened for writing (taken back as such only if the caller may
    /// write the file now).
    pub writers: u32,
}

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
            | MdsOp::GetLayout { fid }
            | MdsOp::FidLinks { fid }
            | MdsOp::RelayoutBegin { fid, .. }
            | MdsOp::RelayoutFence { fid }
            | MdsOp::RelayoutSwap { fid }
            | MdsOp::RelayoutAbort { fid }
            | MdsOp::LayoutIntent { fid, .. }
            | MdsOp::DomRead { fid, .. }
            | MdsOp::DomWrite { fid, .. }
            | MdsOp::DomAppend { fid, .. } => Some(*fid),
            MdsOp::CreateBatch { parent, .. } | MdsOp::UnlinkBatch { parent, .. } => Some(*parent),
            MdsOp::DelegateDir { fid } => Some(*fid),
            // Routed by its first file (all of one MDT).
            MdsOp::AccessBatch { items } => items.first().map(|i| i.fid),
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
            | MdsOp::GrantFids { .. }
            | MdsOp::RenameLock { .. }
            | MdsOp::ScanInodes { .. }
            | MdsOp::ScanDirents { .. }
            | MdsOp::StatMany { .. }
            | MdsOp::ScanStats { .. }
            | MdsOp::DestroyPending
            | MdsOp::QuotaUsage { .. }
            | MdsOp::QuotaCheck { .. }
            | MdsOp::ChangelogRegister { .. }
            | MdsOp::ChangelogDeregister { .. }
            | MdsOp::ChangelogClear { .. }
            | MdsOp::ChangelogRead { .. }
            | MdsOp::ChangelogUsers => None,
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
            | MdsOp::Rmdir { parent, .. }
            | MdsOp::CreateBatch { parent, .. }
            | MdsOp::UnlinkBatch { parent, .. } => Some(*parent),
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
                MdsOp::ChangelogRegister { .. } => 46,
                MdsOp::ChangelogDeregister { .. } => 47,
                MdsOp::ChangelogClear { .. } => 48,
                MdsOp::ChangelogRead { .. } => 49,
                MdsOp::ChangelogUsers => 50,
                MdsOp::FidLinks { .. } => 51,
                MdsOp::RelayoutBegin { .. } => 52,
                MdsOp::RelayoutFence { .. } => 53,
                MdsOp::RelayoutSwap { .. } => 54,
                MdsOp::RelayoutAbort { .. } => 55,
                MdsOp::StatMany { .. } => 56,
                MdsOp::ScanStats { .. } => 57,
                MdsOp::DestroyPending => 58,
                MdsOp::QuotaUsage { .. } => 59,
                MdsOp::QuotaCheck { .. } => 60,
                MdsOp::LayoutIntent { .. } => 61,
                MdsOp::DomRead { .. } => 62,
                MdsOp::DomWrite { .. } => 63,
                MdsOp::DomAppend { .. } => 64,
                MdsOp::GrantFids { .. } => 65,
                MdsOp::CreateBatch { .. } => 66,
                MdsOp::DelegateDir { .. } => 67,
                MdsOp::UnlinkBatch { .. } => 68,
                MdsOp::AccessBatch { .. } => 69,
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
                | MdsOp::DomRead { .. }
                // Accesses: in memory, written lazily (as a close's).
                | MdsOp::AccessBatch { .. }
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
                // A lock: in memory, lost with a restart.
                | MdsOp::DelegateDir { .. }
                | MdsOp::ScanInodes { .. }
                | MdsOp::ScanDirents { .. }
                | MdsOp::ChangelogRead { .. }
                | MdsOp::ChangelogUsers
                | MdsOp::FidLinks { .. }
                | MdsOp::StatMany { .. }
                | MdsOp::ScanStats { .. }
                | MdsOp::DestroyPending
                | MdsOp::QuotaUsage { .. }
                | MdsOp::QuotaCheck { .. }
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

#[cfg(test)]
mod tests;
