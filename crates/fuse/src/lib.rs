//! The FUSE mount: `NacreFs` (fs.rs) implements `fuser::Filesystem` over a
//! `nacre_client::Client`, translating kernel requests into client calls and client errors
//! into errnos. It holds only open-file and open-directory handles; the client holds the
//! rest.
//!
//! Threads. The kernel hands requests to the FUSE threads (`--fuse-threads`, 4 by default),
//! each reading `/dev/fuse` in turn and running the request itself. The last free FUSE
//! thread hands its request to on-demand helper threads instead (pool.rs: up to 256, gone
//! after 10 s idle), so requests waiting for a server never hold every thread. A panic in a
//! request handler is contained (`pool::contain`): the request answers EIO and the thread
//! serves on.
//!
//! Caching. Entries and attributes a metadata lock covers are given to the kernel with a
//! one-hour timeout and invalidated when the lock goes (inval.rs); the rest with the mount's
//! timeouts, zero by default. File data stays in the kernel's page cache across opens while
//! the mount holds read locks on the file's objects (fs/data.rs: `FOPEN_KEEP_CACHE`);
//! page-cache writes are kept as write-behind under write locks; `O_APPEND` files are opened
//! with `FOPEN_DIRECT_IO` and append under whole-object write locks (docs/locking.md).
//! `--data-cache false` drops a file's cached pages at every open.
//!
//! * inval.rs: the lock sink: the kernel forgets attributes, entries and cached listings when
//!   a lock goes; entries in directories this mount's own change holds wait for its end.
//! * fs/names.rs: lookups, attributes, creates, links, renames, removals.
//! * fs/data.rs: opens, reads, writes, releases, syncs, allocation.
//! * fs/dir.rs: opendir, readdir, readdirplus (always, or with `--readdirplus auto` plain
//!   pages where the caller does not stat). Statahead: the next page is fetched while the kernel reads;
//!   listings are cached under the directory's `UPDATE` lock.
//! * fs/window.rs: the statahead window: lookups in name order after a listing answered
//!   from readdirplus pages fetched ahead, while their locks are held and this mount changed
//!   nothing since.
//! * fs/cookies.rs: directory offsets are hashes of entry names, the names kept per
//!   directory, so a listing resumes after that name from any stream.
//! * fs/flock.rs: `getlk`/`setlk` to the MDT; locks are released by flush (files this mount
//!   locked are opened with flushes), by release, and when a waiter's file was closed
//!   meanwhile. A wait is given up (`EINTR`) once the waiting thread has a signal pending
//!   (signals.rs).
//! * fs/xattr.rs: virtual and stored xattrs. The virtual ones (as Lustre exposes
//!   `lustre.lov`), not listed by `listxattr` so copying tools do not carry them:
//!   `user.nacre.lov` (layout, default striping), `user.nacre.df` (usage), `user.nacre.mkdir`
//!   (remote and striped mkdir), `user.nacre.lmv` and `user.nacre.lmv_default` (directory
//!   stripes), `user.nacre.migrate`, `user.nacre.fid`, `user.nacre.project`, `user.nacre.api`
//!   (the node API's socket). The JSON ones carry `"version": 1` and their setters refuse
//!   what they do not know (xattr_json.rs).
//! * groups.rs: the caller's credentials: uid and gid from the kernel's request, its
//!   supplementary groups from `/proc/TID/status` (cached 1 s per caller; root is not looked
//!   up), set as the thread's current credentials for every RPC.
//! * jobid.rs: the caller's job: the value of `jobid_var` (default `SLURM_JOB_ID`) in its
//!   environment, else `procname.uid`, as Lustre does. Reading another process's
//!   `/proc/PID/environ` takes that process's memory locks, which it may hold while waiting
//!   for this very request (a page fault on a mapping of the mount), so the read runs on a
//!   helper thread and is waited for at most 100 ms; past that the request is tagged
//!   `procname.uid` and the helper fills a per-process cache. Every MDS and OSS request
//!   carries the job id (`MdsCall.jobid`, `OssCall.jobid`) for the targets' `job_stats`.
//! * caps.rs: what the mount knows of `security.capability` on its open files, so a write
//!   does not ask the MDT each time.
//! * mount.rs: the session options (`default_permissions` stays on as a first line) and the
//!   background session thread.

pub mod attrs;
pub mod caps;
pub mod fs;
pub mod groups;
pub mod inval;
pub mod jobid;
pub mod mount;
pub mod pool;
pub mod signals;
pub mod xattr_json;

pub use fs::{NacreFs, Readdirplus};

use nacre_types::Fid;

/// The directory the kernel's inode 1 is: the file system's root, or the subtree this
/// client's nodemap gives it (set once, at mount; one mount per process).
static MOUNT_ROOT: std::sync::OnceLock<Fid> = std::sync::OnceLock::new();

/// Sets this process's mount root (first call wins).
pub fn set_mount_root(root: Fid) {
    let _ = MOUNT_ROOT.set(root);
}

fn mount_root() -> Fid {
    MOUNT_ROOT.get().copied().unwrap_or(Fid::ROOT)
}

/// The kernel's inode number for `fid`: 1 for the mount root. The file system's own root,
/// when it is not the mount root (a fileset), has a number no inode has: the kernel never
/// sees it (the MDT refuses it anyway).
pub(crate) fn ino_of(fid: Fid) -> u64 {
    let root = mount_root();
    if fid == root {
        Fid::ROOT_INO
    } else if fid == Fid::ROOT {
        u64::MAX
    } else {
        fid.to_ino()
    }
}

/// The FID of kernel inode number `ino` (inode 1: the mount root).
pub(crate) fn fid_of_ino(ino: u64) -> Option<Fid> {
    match ino {
        Fid::ROOT_INO => Some(mount_root()),
        _ => Fid::from_ino(ino).filter(|f| *f != Fid::ROOT),
    }
}
pub use mount::{mount, KernelFlags, MountOptions};
pub use xattr_json::XATTR_JSON_VERSION;

/// Virtual xattr holding a file's layout or a directory's default striping (JSON); setting it
/// on a directory (or an empty file) changes the striping.
pub const XATTR_LOV: &str = "user.nacre.lov";
/// Virtual xattr on any directory: per-target usage (JSON), for `nacre df`.
pub const XATTR_DF: &str = "user.nacre.df";
/// Virtual xattr on every inode of a mount: the path of the node API's socket
/// (nacre_node; docs/api.md), where applications reach this mount's client directly.
pub const XATTR_API: &str = "user.nacre.api";
/// Virtual xattr set on a directory to create a subdirectory on a chosen MDT (`nacre mkdir
/// -i`): JSON `{"name": "sub", "mdt": 1, "mode": 493}` (`"mdt": -1`: the MDS chooses); with
/// `"count": N` (and `"hash": "fnv_1a_64"|"all_char"`) a directory striped over N MDTs
/// from `mdt` on (`nacre mkdir -c`).
pub const XATTR_MKDIR: &str = "user.nacre.mkdir";
/// Virtual xattr on a directory: where it lives and how it is striped (JSON: `mdt`,
/// `stripe_count`, `hash`, `shards` as `[{"mdt": 1, "fid": "[..]"}]`), for `nacre
/// getdirstripe`.
pub const XATTR_LMV: &str = "user.nacre.lmv";
/// Virtual xattr set on a directory to move its subdirectory to another MDT online (`nacre
/// migrate -m`): JSON `{"name": "sub", "mdt": 1}`. Root only, as Lustre's `lfs migrate`.
pub const XATTR_MIGRATE: &str = "user.nacre.migrate";
/// Virtual xattr on a directory: its default for new subdirectories (`setdirstripe -D`),
/// JSON `{"count": 4, "start": -1, "hash": "fnv_1a_64", "max_inherit": 3}`; setting `{}`
/// removes it.
pub const XATTR_LMV_DEFAULT: &str = "user.nacre.lmv_default";
/// Virtual xattr on any inode: its FID (`[0x200000401:0x1:0x0]`), for `nacre path2fid`.
pub const XATTR_FID: &str = "user.nacre.fid";
/// Virtual xattr on any inode: its project ID, then ` inherit` for a directory that passes
/// it on (`nacre project`); set (root only) as `ID`, `ID inherit` or `ID noinherit`.
pub const XATTR_PROJECT: &str = "user.nacre.project";
