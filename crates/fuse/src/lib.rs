//! The FUSE mount: translates kernel requests into [`nacre_client::Client`] calls and client
//! errors into errnos. It holds only open-file and open-directory handles.
//!
//! Caching: entries and attributes a metadata lock covers (docs/locking.md) are given to the
//! kernel with a long timeout and invalidated when the lock goes (inval.rs); the rest with
//! the mount's timeouts, zero by default. Files are opened without `keep_cache`, so the
//! kernel drops cached pages on open: close-to-open consistency of data across clients.
//!
//! Layouts and usage are exposed through virtual extended attributes (as Lustre exposes
//! `lustre.lov`): [`XATTR_LOV`] on a file or directory, [`XATTR_DF`] on any directory. They are
//! not listed by `listxattr`, so copying tools do not carry them.

pub mod attrs;
pub mod caps;
pub mod fs;
pub mod groups;
pub mod inval;
pub mod jobid;
pub mod mount;
pub mod pool;
pub mod signals;

pub use fs::NacreFs;

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
