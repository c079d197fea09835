//! The control channel behind `nacre ctl`: every nacre process serves its parameter
//! [`Registry`] on a unix socket `/run/nacre/ctl/PID.sock`; `nacre ctl` asks every process of
//! the node, as `lctl` reads the node's own parameter tree.
//!
//! Protocol: one JSON request line, one JSON reply line, then the connection closes.

use anyhow::Context;
use nacre_params::Registry;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Directory of the control sockets.
pub const CTL_DIR: &str = "/run/nacre/ctl";
/// Largest request line accepted.
pub const REQUEST_BYTES_MAX: u64 = 64 * 1024;
/// How long `nacre ctl` waits for one process.
pub const CTL_TIMEOUT_MS: u64 = 5_000;

/// A control request.
#[derive(Debug, Serialize, Deserialize)]
pub struct CtlRequest {
    /// "list", "get" or "set".
    pub op: String,
    /// Parameter name pattern.
    pub pattern: String,
    /// Value for "set".
    pub value: Option<String>,
}

/// A control reply.
#[derive(Debug, Serialize, Deserialize, Default)]
pub struct CtlReply {
    /// Error text, if the request failed.
    pub error: Option<String>,
    /// (name, value) pairs; values empty for "list".
    pub params: Vec<(String, String)>,
}

/// The running control socket of this process; removed on drop.
pub struct CtlServer {
    path: PathBuf,
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Stores a persistent parameter through this process's MGS, if it has one.
pub type Persist = Arc<dyn Fn(&str, &str) -> Option<Result<(), String>> + Send + Sync>;

/// The name of the pair a [`PoolAdmin`] answer starts with: the MGS of that file system
/// answered (its list of pools may be empty).
pub const POOL_ANSWERED: &str = "#mgs";

/// Lists or changes the OST pools of a file system through this process's MGS, if it has
/// one and manages that file system: (command `new|add|remove|destroy|spill|list`, fsname,
/// pool name or "" for every pool, argument: OST indices joined by commas for `add` and
/// `remove`, `POOL,PERCENT` or `off` for `spill`) → [`POOL_ANSWERED`], then the pools
/// afterwards as (`FS.POOL`, member indices joined by commas, then ` spill POOL PERCENT` if
/// it spills), or the reason it was refused; `None` if this MGS does not manage it.
pub type PoolAdmin = Arc<
    dyn Fn(&str, &str, &str, &str) -> Option<Result<Vec<(String, String)>, String>> + Send + Sync,
>;

/// Renders this process's OpenMetrics text (servers), for `nacre top` on the node.
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// What a process's control socket serves.
#[derive(Clone)]
pub struct CtlSources {
    /// Parameters.
    pub registry: Registry,
    /// `set_param -P` through the MGS, if this process has one.
    pub persist: Option<Persist>,
    /// `nacre pool` through the MGS, if this process has one.
    pub pools: Option<PoolAdmin>,
    /// `nacre nodemap` through the MGS, if this process has one.
    pub nodemaps: Option<crate::nodemap_admin::NodemapAdmin>,
    /// OpenMetrics text, if this process serves targets.
    pub metrics: Option<MetricsFn>,
}

/// The reply to an MGS admin operation (pools, nodemaps): its pairs, why it was refused, or
/// nothing if this process has no MGS for it.
fn admin_reply(answer: Option<Result<Vec<(String, String)>, String>>) -> CtlReply {
    match answer {
        Some(Ok(params)) => CtlReply {
            error: None,
            params,
        },
        Some(Err(e)) => CtlReply {
            error: Some(e),
            params: Vec::new(),
        },
        None => CtlReply::default(),
    }
}

fn answer(src: &CtlSources, req: CtlRequest) -> CtlReply {
    let (registry, persist) = (&src.registry, src.persist.as_ref());
    match req.op.as_str() {
        "metrics" => CtlReply {
            error: None,
            params: src
                .metrics
                .as_ref()
                .map(|m| vec![("metrics".to_string(), m())])
                .unwrap_or_default(),
        },
        "set_persistent" => {
            let value = req.value.clone().unwrap_or_default();
            match persist.and_then(|p| p(&req.pattern, &value)) {
                Some(Ok(())) => CtlReply {
                    error: None,
                    params: vec![(req.pattern, value)],
                },
                Some(Err(e)) => CtlReply {
                    error: Some(e),
                    params: Vec::new(),
                },
                None => CtlReply::default(),
            }
        }
        // pattern: "COMMAND FSNAME [POOL]"; value: the command's argument (PoolAdmin).
        "pool" => {
            let words: Vec<&str> = req.pattern.split_whitespace().collect();
            let arg = req.value.as_deref().unwrap_or("");
            let answer = match words.as_slice() {
                [cmd, fs] => src.pools.as_ref().and_then(|p| p(cmd, fs, "", arg)),
                [cmd, fs, pool] => src.pools.as_ref().and_then(|p| p(cmd, fs, pool, arg)),
                _ => Some(Err(format!("bad pool request '{}'", req.pattern))),
            };
            admin_reply(answer)
        }
        // pattern: "COMMAND [NAME]"; value: the command's argument (NodemapAdmin).
        "nodemap" => {
            let mut words = req.pattern.split_whitespace();
            let (cmd, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let arg = req.value.as_deref().unwrap_or("");
            admin_reply(src.nodemaps.as_ref().map(|n| n(cmd, name, arg)))
        }
        // pattern: "list", "add PATH", "use PATH" or "retire FSNAME ID" (key_admin).
        "key" => admin_reply(crate::key_admin::answer(&req.pattern)),
        "list" => CtlReply {
            error: None,
            params: registry
                .list(&req.pattern)
                .into_iter()
                .map(|n| (n, String::new()))
                .collect(),
        },
        "get" => CtlReply {
            error: None,
            params: registry.get(&req.pattern),
        },
        "set" => match registry.set(&req.pattern, req.value.as_deref().unwrap_or("")) {
            Ok(names) => CtlReply {
                error: None,
                params: names
                    .into_iter()
                    .map(|n| (n, req.value.clone().unwrap_or_default()))
                    .collect(),
            },
            Err(nacre_params::ParamError::NotFound(_)) => CtlReply::default(),
            Err(e) => CtlReply {
                error: Some(e.to_string()),
                params: Vec::new(),
            },
        },
        other => CtlReply {
            error: Some(format!("unknown control operation '{other}'")),
            params: Vec::new(),
        },
    }
}

/// The uid of the process at the other end of `stream` (SO_PEERCRED), as the kernel
/// recorded it when it connected.
fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of a ucred, the size given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    match rc {
        0 => Ok(cred.uid),
        _ => Err(std::io::Error::last_os_error()),
    }
}

fn serve_one(src: &CtlSources, stream: UnixStream) -> std::io::Result<()> {
    let timeout = Some(Duration::from_millis(crate::callers::CALLER_TIMEOUT_MS));
    stream.set_read_timeout(timeout)?;
    stream.set_write_timeout(timeout)?;
    let mut line = String::new();
    BufReader::new((&stream).take(REQUEST_BYTES_MAX)).read_line(&mut line)?;
    // Who asks is the kernel's answer, not the socket file's mode (a lax umask, a copied
    // socket): root, or the user this process runs as.
    let uid = peer_uid(&stream)?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let reply = match serde_json::from_str::<CtlRequest>(&line) {
        Ok(_) if uid != 0 && uid != me => {
            nacre_net::caller::refused(|| {
                format!("control socket: refused a request of uid {uid} (root only)")
            });
            CtlReply {
                error: Some(format!(
                    "the control socket answers root only (you are uid {uid})"
                )),
                params: Vec::new(),
            }
        }
        Ok(req) => answer(src, req),
        Err(e) => CtlReply {
            error: Some(format!("bad control request: {e}")),
            params: Vec::new(),
        },
    };
    let mut out = serde_json::to_vec(&reply).map_err(std::io::Error::other)?;
    out.push(b'\n');
    (&stream).write_all(&out)
}

use std::io::Read;

/// Serves `src` on this process's control socket.
pub fn serve(src: CtlSources) -> anyhow::Result<CtlServer> {
    std::fs::create_dir_all(CTL_DIR).with_context(|| format!("cannot create {CTL_DIR}"))?;
    let path = Path::new(CTL_DIR).join(format!("{}.sock", std::process::id()));
    // Made under a name `ask` passes over, listening and restricted to its owner (whatever
    // the umask; each request's sender is checked too), then renamed into place: nobody
    // sees it half made, nor takes it for a dead process's.
    let fresh = path.with_extension("sock.new");
    let _ = std::fs::remove_file(&fresh);
    let listener =
        UnixListener::bind(&fresh).with_context(|| format!("cannot bind {}", fresh.display()))?;
    std::fs::set_permissions(&fresh, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .with_context(|| format!("cannot restrict {}", fresh.display()))?;
    std::fs::rename(&fresh, &path).with_context(|| format!("cannot make {}", path.display()))?;
    crate::callers::serve_all(
        "control",
        std::iter::repeat_with(move || listener.accept().map(|(s, _)| s)),
        move |stream| serve_one(&src, stream),
    )?;
    Ok(CtlServer { path })
}

/// Sends `req` to every nacre process of this node; returns the replies with process ids.
pub fn ask_all(req: &CtlRequest) -> anyhow::Result<Vec<(u32, CtlReply)>> {
    ask(req, None)
}

/// Sends `req` to every nacre process of this node, or only to process `only`: a
/// `set_param` aimed at one process must not reach the others.
pub fn ask(req: &CtlRequest, only: Option<u32>) -> anyhow::Result<Vec<(u32, CtlReply)>> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(CTL_DIR) else {
        return Ok(out);
    };
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    for entry in dir.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if only.is_some_and(|want| want != pid) {
            continue;
        }
        let Ok(stream) = UnixStream::connect(&path) else {
            // A dead process's socket is removed; a live one's is left (it may be starting).
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        };
        let exchange = || -> std::io::Result<String> {
            stream.set_read_timeout(Some(Duration::from_millis(CTL_TIMEOUT_MS)))?;
            // MSG_NOSIGNAL: a process exiting now is skipped, not this command's death.
            nacre_net::frame::NoSigPipe(&stream).write_all(&line)?;
            let mut reply = String::new();
            BufReader::new(&stream).read_line(&mut reply)?;
            Ok(reply)
        };
        // A process that exits while we ask (its connection reset, no reply) is skipped: it
        // has no parameters any more; one that is alive but does not answer is reported.
        let reply = match exchange() {
            Ok(r) if !r.trim().is_empty() => r,
            Ok(_) => continue,
            Err(e) => {
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) {
                    eprintln!("nacre: process {pid} did not answer: {e}");
                }
                continue;
            }
        };
        let reply: CtlReply = serde_json::from_str(&reply)
            .with_context(|| format!("bad reply from process {pid}"))?;
        out.push((pid, reply));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_processs_socket_that_refuses_is_left_and_a_dead_ones_removed() {
        // A starting process's socket (bound, not yet serving) must not be taken for a dead
        // one's: removing it once made that process fail to start ("cannot restrict").
        std::fs::create_dir_all(CTL_DIR).unwrap();
        let me = std::process::id();
        let live = std::path::Path::new(CTL_DIR).join(format!("{me}.sock"));
        let dead = std::path::Path::new(CTL_DIR).join("4000000002.sock");
        for p in [&live, &dead] {
            let _ = std::fs::remove_file(p);
        }
        // Datagram sockets: a stream connection to either fails, as to one not listening.
        let _live_sock = std::os::unix::net::UnixDatagram::bind(&live).unwrap();
        let _dead_sock = std::os::unix::net::UnixDatagram::bind(&dead).unwrap();
        let req = CtlRequest {
            op: "list".into(),
            pattern: "*".into(),
            value: None,
        };
        ask(&req, Some(me)).unwrap();
        assert!(live.exists(), "a live process's socket was removed");
        ask(&req, Some(4_000_000_002)).unwrap();
        assert!(!dead.exists(), "a dead process's socket was kept");
        let _ = std::fs::remove_file(&live);
    }

    #[test]
    fn a_process_that_goes_away_while_asked_is_skipped() {
        // A control socket whose "process" closes every connection without answering, as a
        // process exiting during `nacre ctl` does (this once failed the whole command).
        std::fs::create_dir_all(CTL_DIR).unwrap();
        let path = std::path::Path::new(CTL_DIR).join("4000000001.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let closer = std::thread::spawn(move || {
            if let Ok((s, _)) = listener.accept() {
                drop(s);
            }
        });
        let req = CtlRequest {
            op: "list".into(),
            pattern: "no.such.param".into(),
            value: None,
        };
        let replies = ask_all(&req).unwrap();
        assert!(replies.iter().all(|(pid, _)| *pid != 4_000_000_001));
        closer.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
