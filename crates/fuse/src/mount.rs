//! Mounting: FUSE session options and the background session.

use crate::NacreFs;
use fuser::{Config, MountOption, SessionACL};
use nacre_client::Client;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// What the kernel enforces on the mount, as mount(8)'s options say it: `ro`, `nosuid`,
/// `nodev`, `noexec`, `sync`, `noatime` (and their opposites, the defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFlags {
    /// `ro`: nothing may be changed through the mount (`EROFS`).
    pub read_only: bool,
    /// `nosuid`: set-user-ID and set-group-ID bits do not take effect on exec.
    pub nosuid: bool,
    /// `nodev`: device nodes cannot be opened.
    pub nodev: bool,
    /// `noexec`: nothing can be executed from the mount.
    pub noexec: bool,
    /// `sync`: every write is durable before it returns.
    pub sync: bool,
    /// `noatime`: reads record no access time (the MDT records them at close, as
    /// `relatime` would, for every other mount).
    pub noatime: bool,
}

impl KernelFlags {
    /// Takes one mount(8) option if it is one of these flags (true), else leaves it
    /// (false).
    pub fn take(&mut self, option: &str) -> bool {
        let (field, on) = match option {
            "ro" => (&mut self.read_only, true),
            "rw" => (&mut self.read_only, false),
            "nosuid" => (&mut self.nosuid, true),
            "suid" => (&mut self.nosuid, false),
            "nodev" => (&mut self.nodev, true),
            "dev" => (&mut self.nodev, false),
            "noexec" => (&mut self.noexec, true),
            "exec" => (&mut self.noexec, false),
            "sync" => (&mut self.sync, true),
            "async" => (&mut self.sync, false),
            "noatime" => (&mut self.noatime, true),
            "atime" | "relatime" => (&mut self.noatime, false),
            _ => return false,
        };
        *field = on;
        true
    }

    /// Parses a comma-separated list of these flags; anything else is refused.
    pub fn parse(list: &str) -> Result<KernelFlags, String> {
        let mut f = KernelFlags::default();
        for o in list.split(',').filter(|o| !o.is_empty()) {
            if !f.take(o) {
                return Err(format!(
                    "mount option {o:?}: expected ro, rw, nosuid, suid, nodev, dev, noexec, \
                     exec, sync, async, noatime, atime or relatime"
                ));
            }
        }
        Ok(f)
    }

    /// Their FUSE mount options.
    fn mount_options(&self) -> [MountOption; 6] {
        [
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.nosuid {
                MountOption::NoSuid
            } else {
                MountOption::Suid
            },
            if self.nodev {
                MountOption::NoDev
            } else {
                MountOption::Dev
            },
            if self.noexec {
                MountOption::NoExec
            } else {
                MountOption::Exec
            },
            if self.sync {
                MountOption::Sync
            } else {
                MountOption::Async
            },
            if self.noatime {
                MountOption::NoAtime
            } else {
                MountOption::Atime
            },
        ]
    }
}

/// Mount-time settings.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// What the kernel enforces on the mount (`-o nosuid,nodev,...`).
    pub flags: KernelFlags,
    /// FUSE worker threads.
    pub threads: usize,
    /// Attribute cache timeout (0: revalidate on every stat).
    pub attr_timeout: Duration,
    /// Name cache timeout.
    pub entry_timeout: Duration,
    /// Let other users use the mount (needed for permission checks by non-root users).
    pub allow_other: bool,
    /// `jobid_var`: environment variable naming a caller's job, `procname_uid`, or `disable`
    /// (shared with the parameter of the same name, so it can change at run time).
    pub jobid_var: std::sync::Arc<parking_lot::RwLock<String>>,
    /// Kernel readahead for the mount, in KiB. FUSE offers 128 KiB at init and refuses more,
    /// so it is raised through the mount's bdi after mounting.
    pub read_ahead_kb: u32,
    /// When directories are listed with readdirplus (see [`NacreFs::with_readdirplus`]).
    pub readdirplus: crate::Readdirplus,
    /// Keep file data in the page cache across opens under read locks on the OST objects
    /// (fs/data.rs); false: the kernel drops a file's cached data at every open.
    pub data_cache: bool,
    /// Writers' handles opened for direct I/O where the kernel allows it (fs/data.rs).
    pub direct_writes: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            threads: 4,
            attr_timeout: Duration::ZERO,
            entry_timeout: Duration::ZERO,
            allow_other: true,
            flags: KernelFlags::default(),
            read_ahead_kb: 4096,
            readdirplus: crate::Readdirplus::Always,
            data_cache: true,
            direct_writes: true,
            jobid_var: std::sync::Arc::new(parking_lot::RwLock::new(
                crate::jobid::JOBID_VAR_DEFAULT.to_string(),
            )),
        }
    }
}

/// A running mount; [`MountHandle::unmount`] ends it.
pub struct MountHandle {
    unmounter: fuser::SessionUnmounter,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    mountpoint: std::path::PathBuf,
    dev: Option<u64>,
    inval: Arc<crate::inval::InvalStats>,
    invalidator: Arc<crate::inval::Invalidator>,
    api: Arc<std::sync::OnceLock<std::path::PathBuf>>,
}

/// How long an unmount waits for the session to end before forcing it.
pub const UNMOUNT_WAIT_MS: u64 = 10_000;

impl MountHandle {
    /// Counters of the kernel invalidations the mount's lock sink sent.
    pub fn invalidations(&self) -> Arc<crate::inval::InvalStats> {
        self.inval.clone()
    }

    /// Names the node API's socket in [`crate::XATTR_API`] (once).
    pub fn set_api_socket(&self, socket: &Path) {
        let _ = self.api.set(socket.to_path_buf());
    }

    /// Has the kernel drop its cached pages of bytes `offset..offset + len` of a file and
    /// its attributes (they changed outside the kernel: through the node API), before it
    /// returns (bounded: [`crate::inval::DATA_INVAL_WAIT_MS`]).
    pub fn data_changed(&self) -> impl Fn(nacre_types::Fid, u64, u64) + Send + Sync + 'static {
        let inval = self.invalidator.clone();
        move |fid, offset, len| {
            let range = Some((offset, len.max(1)));
            inval.forget_data(&[nacre_client::datalocks::FileDrop { fid, range }]);
        }
    }

    /// Has the kernel forget an entry and what it cached of its directory (a name made,
    /// removed or renamed outside the kernel: through the node API), before it returns
    /// (bounded as [`MountHandle::data_changed`]).
    pub fn entry_changed(&self) -> impl Fn(nacre_types::Fid, &[u8]) + Send + Sync + 'static {
        let inval = self.invalidator.clone();
        move |parent, name| {
            use std::os::unix::ffi::OsStrExt;
            let name = std::ffi::OsStr::from_bytes(name).to_os_string();
            inval.entry_changed_outside(crate::ino_of(parent), name);
        }
    }

    /// Unmounts and waits for the session to end. A busy mount is detached lazily, and a
    /// session that still does not end is aborted through the FUSE control file system, so
    /// stopping never hangs.
    pub fn unmount(mut self) -> std::io::Result<()> {
        let r = self.unmounter.unmount();
        if let Err(e) = &r {
            tracing::warn!(
                "unmount of {} failed ({e}); detaching it",
                self.mountpoint.display()
            );
            detach(&self.mountpoint);
        }
        if !self.wait(UNMOUNT_WAIT_MS) {
            if let Some(dev) = self.dev {
                let abort = format!("/sys/fs/fuse/connections/{}/abort", libc::minor(dev));
                tracing::warn!(
                    "FUSE session of {} still running; aborting it ({abort})",
                    self.mountpoint.display()
                );
                let _ = std::fs::write(&abort, "1");
            }
            detach(&self.mountpoint);
            self.wait(UNMOUNT_WAIT_MS);
        }
        if let Some(t) = self.thread.take() {
            if t.is_finished() {
                let _ = t.join();
            }
        }
        r
    }

    fn wait(&self, ms: u64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_millis(ms);
        while !self.is_finished() {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// True once the session has ended (for example after an external `fusermount3 -u`).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

/// Mounts `client` at `mountpoint`; kernel permission checks on (`default_permissions`).
pub fn mount(
    client: Arc<Client>,
    mountpoint: &Path,
    opts: &MountOptions,
) -> std::io::Result<MountHandle> {
    crate::set_mount_root(
        client
            .root()
            .map_err(|e| std::io::Error::other(e.to_string()))?,
    );
    let fsname = format!("nacre:{}", client.fsname());
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fsname),
        MountOption::Subtype("nacre".into()),
        MountOption::DefaultPermissions,
    ];
    config.mount_options.extend(opts.flags.mount_options());
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    // One descriptor per session thread (FUSE_DEV_IOC_CLONE) where the kernel takes it;
    // else the threads share one, as libfuse's older multi-threaded loop does.
    config.clone_fd = clone_fd_supported();
    let jobs = crate::jobid::JobIds::new(opts.jobid_var.clone());
    let threads = opts.threads.max(1);
    let fs = NacreFs::new(
        client.clone(),
        opts.attr_timeout,
        opts.entry_timeout,
        jobs,
        threads,
    )
    .with_readdirplus(opts.readdirplus)
    .with_direct_writes(opts.direct_writes);
    let slot = fs.invalidator_slot();
    let api = fs.api_slot();
    let open_deferred = fs.deferred_opener();
    let mut session = fuser::Session::new(fs, mountpoint, &config)?;
    // Metadata locks: the kernel caches what they cover and forgets it when they go.
    let invalidator = crate::inval::Invalidator::start(session.notifier())?;
    let _ = slot.set(invalidator.clone());
    let sink = invalidator.clone();
    client.enable_locks(Arc::new(move |revoked| {
        // A delegation given back (its creates sent already): the handles still deferred
        // from creates answered under it are opened at the MDT before the lock goes, so
        // the file lives on for them if another client unlinks it. (One lost is not: its
        // creates are sent later, or were lost with an eviction.)
        let given_back = |r: &nacre_ldlm::client::Revoked| {
            r.lock.bits & nacre_ldlm::msg::DELEGATION != 0 && !r.lost
        };
        if revoked.iter().any(given_back) {
            open_deferred();
        }
        sink.forget(revoked)
    }));
    if opts.data_cache {
        let sink = invalidator.clone();
        client.enable_data_locks(Arc::new(move |files| sink.forget_data(files)))?;
    }
    let unmounter = session.unmount_callable();
    let thread = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || session.run())?;
    // Only now: stat() of the mount point needs the session loop to answer.
    let dev = raise_readahead(mountpoint, opts.read_ahead_kb);
    Ok(MountHandle {
        unmounter,
        thread: Some(thread),
        mountpoint: mountpoint.to_path_buf(),
        dev,
        inval: invalidator.stats.clone(),
        invalidator,
        api,
    })
}

/// `FUSE_DEV_IOC_CLONE` (`_IOR(229, 0, u32)`): a /dev/fuse descriptor of its own for
/// another session thread.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;

/// True if this kernel (or emulator) takes `FUSE_DEV_IOC_CLONE`. Asked with a descriptor of
/// no session as the source: a kernel that knows the request refuses that source (`EPERM`
/// or `EINVAL`, by version), one that does not (before Linux 4.5; qemu-user, which passes
/// on only the ioctls it knows) answers `ENOTTY`. Without it, a session whose threads each clone the descriptor
/// ends as it starts: under qemu-aarch64 the mount came up and went at once.
pub fn clone_fd_supported() -> bool {
    use std::os::fd::AsRawFd;
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
    };
    let (Ok(new), Ok(source)) = (open(), open()) else {
        return false;
    };
    let mut fd = source.as_raw_fd() as u32;
    // SAFETY: both descriptors are open /dev/fuse files; the argument is a u32 the kernel
    // reads (the source descriptor).
    let rc = unsafe {
        libc::ioctl(
            new.as_raw_fd(),
            FUSE_DEV_IOC_CLONE as _,
            &mut fd as *mut u32,
        )
    };
    let err = std::io::Error::last_os_error().raw_os_error();
    match (rc, err) {
        (0, _) => true,
        (_, Some(e)) if e != libc::ENOTTY && e != libc::ENOSYS => true,
        (_, e) => {
            tracing::info!(
                "FUSE_DEV_IOC_CLONE refused ({}): the session threads share one descriptor",
                std::io::Error::from_raw_os_error(e.unwrap_or(0))
            );
            false
        }
    }
}

/// Lazily detaches a mount (`umount2(MNT_DETACH)`).
fn detach(mountpoint: &Path) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) {
        // SAFETY: valid NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Sets `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb` of the mount (best effort: logged on
/// failure); returns the mount's device number.
fn raise_readahead(mountpoint: &Path, kb: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = match std::fs::metadata(mountpoint) {
        Ok(m) => m.dev(),
        Err(e) => {
            tracing::warn!("cannot stat {}: {e}", mountpoint.display());
            return None;
        }
    };
    let path = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    if let Err(e) = std::fs::write(&path, kb.to_string()) {
        tracing::warn!("cannot set {path}: {e}");
    }
    Some(dev)
}

#[cfg(test)]
mod tests {
    use crate::Readdirplus;

    #[test]
    fn readdirplus_modes_are_true_auto_or_false() {
        assert_eq!("true".parse(), Ok(Readdirplus::Always));
        assert_eq!("always".parse(), Ok(Readdirplus::Always));
        assert_eq!("auto".parse(), Ok(Readdirplus::Auto));
        assert_eq!("false".parse(), Ok(Readdirplus::Off));
        assert!("sometimes".parse::<Readdirplus>().is_err());
        assert_eq!(Readdirplus::default(), Readdirplus::Always);
    }

    /// This kernel (Linux 4.5 and later) takes FUSE_DEV_IOC_CLONE; under an emulator that
    /// does not pass it on, the probe says so instead (the aarch64 run of these tests).
    #[test]
    fn the_clone_probe_answers_for_this_kernel() {
        if !std::path::Path::new("/dev/fuse").exists() {
            eprintln!("no /dev/fuse: nothing to probe");
            return;
        }
        let emulated = std::env::var_os("NACRE_UNDER_QEMU").is_some();
        assert_eq!(super::clone_fd_supported(), !emulated);
    }
}
