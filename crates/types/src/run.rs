//! Where the process serving a mount keeps its run-time files: its pid file, log and node
//! API socket are `/run/nacre/<mount point>.<ext>`, the mount point's path with every
//! character but ASCII letters and digits turned into `_`, so tools and tests find them
//! from the mount point alone.

use std::path::{Path, PathBuf};

/// The directory of mounts' run-time files.
pub const RUN_DIR: &str = "/run/nacre";

/// The run-time file with extension `ext` of the mount at `mnt` (a canonical path: the
/// caller resolves it, as this crate does no I/O).
pub fn mount_run_file(mnt: &Path, ext: &str) -> PathBuf {
    let name: String = mnt
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Path::new(RUN_DIR).join(format!("{name}.{ext}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_letters_and_digits_only() {
        let p = mount_run_file(Path::new("/no/such/mnt-1.x"), "log");
        assert_eq!(p, Path::new("/run/nacre/_no_such_mnt_1_x.log"));
    }
}
