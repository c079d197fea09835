//! Where the process serving a mount keeps its run-time files: its pid file, log and node
//! API socket are `/run/nacre/<mount point>.<ext>`, the mount point's path with each `/`
//! turned into `_` and every other byte but ASCII letters and digits into `-` and its two
//! hex digits, so tools and tests find them from the mount point alone, and two mount
//! points never share a name (`/mnt/a-b` is `_mnt_a-2db`, `/mnt/a_b` is `_mnt_a-5fb`).

use std::path::{Path, PathBuf};

/// The directory of mounts' run-time files.
pub const RUN_DIR: &str = "/run/nacre";

/// The run-time file with extension `ext` of the mount at `mnt` (a canonical path: the
/// caller resolves it, as this crate does no I/O).
pub fn mount_run_file(mnt: &Path, ext: &str) -> PathBuf {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut name = String::new();
    for &b in mnt.as_os_str().as_bytes() {
        match b {
            b'/' => name.push('_'),
            b if b.is_ascii_alphanumeric() => name.push(char::from(b)),
            b => {
                let _ = write!(name, "-{b:02x}");
            }
        }
    }
    Path::new(RUN_DIR).join(format!("{name}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_letters_and_digits_and_never_collide() {
        let p = mount_run_file(Path::new("/no/such/mnt-1.x"), "log");
        assert_eq!(p, Path::new("/run/nacre/_no_such_mnt-2d1-2ex.log"));
        assert_eq!(
            mount_run_file(Path::new("/mnt/nacre"), "pid"),
            Path::new("/run/nacre/_mnt_nacre.pid")
        );
        let names: std::collections::HashSet<PathBuf> = [
            "/mnt/a-b",
            "/mnt/a_b",
            "/mnt/a/b",
            "/mnt/a.b",
            "/mnt/a-2db",
            "/mnt/a b",
        ]
        .iter()
        .map(|m| mount_run_file(Path::new(m), "api.sock"))
        .collect();
        assert_eq!(names.len(), 6, "{names:?}");
    }
}
