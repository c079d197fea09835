//! User and group names of rules resolved to numbers through the system's name service
//! (NSS: files, LDAP, SSSD... as the node running the engine is configured), once, when the
//! rules are read.

use std::ffi::CString;

/// Longest buffer the name service is given for one entry.
const NSS_BUFFER_BYTES_MAX: usize = 1 << 20;

/// Which database.
#[derive(Clone, Copy)]
pub enum Db {
    /// Users (`getpwnam_r`).
    User,
    /// Groups (`getgrnam_r`).
    Group,
}

/// The number of user or group `name`; `Ok(None)` if the name service knows no such name.
pub fn resolve(db: Db, name: &str) -> Result<Option<u32>, String> {
    let c = CString::new(name).map_err(|_| format!("'{name}': a NUL in the name"))?;
    let mut size = 4096;
    loop {
        let mut buf = vec![0u8; size];
        let (rc, found, id) = match db {
            Db::User => {
                // SAFETY: a zeroed passwd is valid storage for getpwnam_r to fill.
                let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
                let mut out: *mut libc::passwd = std::ptr::null_mut();
                // SAFETY: NUL-terminated name, storage and buffer of the sizes given.
                let rc = unsafe {
                    libc::getpwnam_r(
                        c.as_ptr(),
                        &mut pw,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        &mut out,
                    )
                };
                (rc, !out.is_null(), pw.pw_uid)
            }
            Db::Group => {
                // SAFETY: a zeroed group is valid storage for getgrnam_r to fill.
                let mut gr: libc::group = unsafe { std::mem::zeroed() };
                let mut out: *mut libc::group = std::ptr::null_mut();
                // SAFETY: as above.
                let rc = unsafe {
                    libc::getgrnam_r(
                        c.as_ptr(),
                        &mut gr,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        &mut out,
                    )
                };
                (rc, !out.is_null(), gr.gr_gid)
            }
        };
        match rc {
            0 => return Ok(found.then_some(id)),
            libc::ERANGE if size < NSS_BUFFER_BYTES_MAX => size *= 4,
            e => {
                return Err(format!(
                    "'{name}': {}",
                    std::io::Error::from_raw_os_error(e)
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves_and_a_made_up_name_does_not() {
        assert_eq!(resolve(Db::User, "root"), Ok(Some(0)));
        assert_eq!(resolve(Db::Group, "root"), Ok(Some(0)));
        assert_eq!(resolve(Db::User, "no-such-user-nacre-7q"), Ok(None));
    }
}
