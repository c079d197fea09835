//! The node API beside a mount (docs/api.md): applications of this node reach the mount's
//! client over a Unix socket next to its pid file, named by the mount's `user.nacre.api`.

use nacre_client::Client;
use nacre_fuse::mount::MountHandle;
use nacre_fuse::MountOptions;
use nacre_node::{Hooks, NodeApi};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The API socket of the mount at `mnt`.
pub(crate) fn socket_path(mnt: &Path) -> PathBuf {
    nacre_server::daemon::pidfile(mnt).with_extension("api.sock")
}

/// Serves the node API of `client`, mounted at `mnt` by `handle`: callers' credentials as
/// the kernel recorded them when they connected, job ids as the mount takes them for FUSE
/// callers, what their writes change dropped from the mount's page cache; counters as
/// `llite.FS.api_stats`.
pub(crate) fn start(
    client: &Arc<Client>,
    mnt: &Path,
    handle: &MountHandle,
    opts: &MountOptions,
    registry: &nacre_params::Registry,
) -> anyhow::Result<Arc<NodeApi>> {
    let jobs = nacre_fuse::jobid::JobIds::new(opts.jobid_var.clone());
    let hooks = Hooks {
        jobid: Box::new(move |pid, uid| jobs.of(pid, uid)),
        changed: Box::new(handle.data_changed()),
        entry: Box::new(handle.entry_changed()),
    };
    let socket = socket_path(mnt);
    // A test holds the start here to see that `nacre mount` returns only once it serves.
    nacre_net::fault::point("mount.api.start");
    let api = NodeApi::start(client.clone(), mnt, &socket, hooks)?;
    handle.set_api_socket(&socket);
    let a = api.clone();
    registry.add_fn(format!("llite.{}.api_stats", client.fsname()), move || {
        use std::sync::atomic::Ordering::Relaxed;
        let s = a.stats();
        let (sessions, files) = a.sessions();
        format!(
            "sessions {sessions}\nfiles_open {files}\nsockets {}\nrefused {}\nrequests {}\n\
             read_bytes {}\nwrite_bytes {}\norphaned_sessions {}\norphaned_files {}\n\
             landed_bytes {}\nsent_bytes {}\nrings_refused {}",
            s.conns.load(Relaxed),
            s.refused.load(Relaxed),
            s.requests.load(Relaxed),
            s.read_bytes.load(Relaxed),
            s.write_bytes.load(Relaxed),
            s.orphaned_sessions.load(Relaxed),
            s.orphaned_files.load(Relaxed),
            s.landed_bytes.load(Relaxed),
            s.sent_bytes.load(Relaxed),
            s.rings_refused.load(Relaxed)
        )
    });
    tracing::info!("node API at {}", socket.display());
    Ok(api)
}
