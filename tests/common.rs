//! Helpers shared by the integration tests.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The errno of the last failed libc call.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A path as a C string.
pub fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("path without NUL")
}

/// Runs `cmd` as user `nobody` through `runuser`; returns (success, stderr).
pub fn as_nobody(cmd: &str) -> (bool, String) {
    let out = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "sh", "-c", cmd])
        .output()
        .expect("runuser");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
