//! Mounting: FUSE session options and the background session.

use crate::NacreFs;
use fuser::{Config, MountOption, SessionACL};
use nacre_client::Client;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Mount-time settings.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// FUSE worker threads.
    pub threads: usize,
    /// Attribute cache timeout (0: revalidate on every stat).
    pub attr_timeout: Duration,
    /// Name cache timeout.
    pub entry_timeout: Duration,
    /// Let other users use the mount (needed for permission checks by non-root users).
    pub allow_other: bool,
    /// Kernel readahead for the mount, in KiB. FUSE offers 128 KiB at init and refuses more,
    /// so it is raised through the mount's bdi after mounting.
    pub read_ahead_kb: u32,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            threads: 4,
            attr_timeout: Duration::ZERO,
            entry_timeout: Duration::ZERO,
            allow_other: true,
            read_ahead_kb: 4096,
        }
    }
}

/// A running mount; [`MountHandle::unmount`] ends it.
pub struct MountHandle {
    unmounter: fuser::SessionUnmounter,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl MountHandle {
    /// Unmounts and waits for the session to end.
    pub fn unmount(mut self) -> std::io::Result<()> {
        let r = self.unmounter.unmount();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        r
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
    let fsname = format!("nacre:{}", client.fsname());
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fsname),
        MountOption::Subtype("nacre".into()),
        MountOption::DefaultPermissions,
        MountOption::Dev,
        MountOption::Suid,
    ];
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    config.clone_fd = true;
    let fs = NacreFs::new(client, opts.attr_timeout, opts.entry_timeout);
    let mut session = fuser::Session::new(fs, mountpoint, &config)?;
    let unmounter = session.unmount_callable();
    let thread = std::thread::Builder::new()
        .name("fuse-session".into())
        .spawn(move || session.run())?;
    // Only now: stat() of the mount point needs the session loop to answer.
    raise_readahead(mountpoint, opts.read_ahead_kb);
    Ok(MountHandle {
        unmounter,
        thread: Some(thread),
    })
}

/// Sets `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb` of the mount (best effort: logged on failure).
fn raise_readahead(mountpoint: &Path, kb: u32) {
    use std::os::unix::fs::MetadataExt;
    let dev = match std::fs::metadata(mountpoint) {
        Ok(m) => m.dev(),
        Err(e) => {
            tracing::warn!("cannot stat {}: {e}", mountpoint.display());
            return;
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
}
