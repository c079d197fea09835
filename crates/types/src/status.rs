//! Status codes carried in reply headers, and their mapping to errno at the client edge.

use serde::{Deserialize, Serialize};

/// Outcome of a request, as carried in a reply header. `Ok` is zero; the others name errors
/// with Linux errno meaning. Unknown wire values decode as [`Status::Io`] plus a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[repr(i32)]
pub enum Status {
    /// Success.
    #[error("success")]
    Ok = 0,
    /// Operation not permitted.
    #[error("operation not permitted")]
    Perm = 1,
    /// No such file or directory.
    #[error("no such file or directory")]
    NoEnt = 2,
    /// I/O error (also: data failed its checksum).
    #[error("input/output error")]
    Io = 5,
    /// Stale handle: the object was removed.
    #[error("bad file descriptor")]
    BadF = 9,
    /// Resource temporarily unavailable.
    #[error("resource temporarily unavailable")]
    Again = 11,
    /// Permission denied.
    #[error("permission denied")]
    Access = 13,
    /// File exists.
    #[error("file exists")]
    Exist = 17,
    /// Cross-device link.
    #[error("cross-device link")]
    XDev = 18,
    /// Not a directory.
    #[error("not a directory")]
    NotDir = 20,
    /// Is a directory.
    #[error("is a directory")]
    IsDir = 21,
    /// Invalid argument.
    #[error("invalid argument")]
    Inval = 22,
    /// File too large.
    #[error("file too large")]
    FBig = 27,
    /// No space left on device.
    #[error("no space left on device")]
    NoSpc = 28,
    /// Too many links.
    #[error("too many links")]
    MLink = 31,
    /// Result out of range (buffer too small).
    #[error("numerical result out of range")]
    Range = 34,
    /// File name too long.
    #[error("file name too long")]
    NameTooLong = 36,
    /// Function not implemented.
    #[error("function not implemented")]
    NoSys = 38,
    /// Directory not empty.
    #[error("directory not empty")]
    NotEmpty = 39,
    /// No data available (missing xattr).
    #[error("no data available")]
    NoData = 61,
    /// Protocol error (malformed request).
    #[error("protocol error")]
    Proto = 71,
    /// Value too large / too big argument list.
    #[error("argument list too long")]
    TooBig = 7,
    /// Operation not supported.
    #[error("operation not supported")]
    NotSupp = 95,
    /// Connection timed out.
    #[error("connection timed out")]
    TimedOut = 110,
    /// No such device (a target not served here).
    #[error("no such device")]
    NoDev = 19,
    /// Stale file handle.
    #[error("stale file handle")]
    Stale = 116,
    /// The client was evicted or the server is in recovery; retry after reconnecting.
    #[error("operation in progress")]
    InProgress = 115,
    /// The server evicted this client (it was silent too long): its open files and saved
    /// replies there are gone; it must reconnect as a new client.
    #[error("evicted by the server")]
    Shutdown = 108,
    /// Waiting for a byte-range lock would deadlock.
    #[error("resource deadlock avoided")]
    Deadlock = 35,
    /// No more byte-range locks can be held.
    #[error("no locks available")]
    NoLock = 37,
    /// A wait was interrupted by a signal to the waiting process.
    #[error("interrupted system call")]
    Intr = 4,
    /// The client may not change anything (a read-only nodemap).
    #[error("read-only file system")]
    RoFs = 30,
    /// The server requires the file system's key and the client showed none.
    #[error("required key not available")]
    NoKey = 126,
    /// A user's, group's or project's quota is used up.
    #[error("disk quota exceeded")]
    DQuot = 122,
    /// A name is not unique where it must be (two file systems sharing a frame slot).
    #[error("name not unique on network")]
    NotUniq = 76,
    /// Too many symbolic links met walking a path.
    #[error("too many levels of symbolic links")]
    Loop = 40,
    /// A path names what cannot be removed or renamed (the root of the walk).
    #[error("device or resource busy")]
    Busy = 16,
    /// Too many open files (a session's handles).
    #[error("too many open files")]
    MFile = 24,
}

impl Status {
    /// Every status, for the decoder's lookup and for tests.
    pub const ALL: [Status; 38] = [
        Status::Busy,
        Status::MFile,
        Status::NotUniq,
        Status::Loop,
        Status::DQuot,
        Status::NoDev,
        Status::Ok,
        Status::Perm,
        Status::NoEnt,
        Status::Io,
        Status::BadF,
        Status::Again,
        Status::Access,
        Status::Exist,
        Status::XDev,
        Status::NotDir,
        Status::IsDir,
        Status::Inval,
        Status::FBig,
        Status::NoSpc,
        Status::MLink,
        Status::Range,
        Status::NameTooLong,
        Status::NoSys,
        Status::NotEmpty,
        Status::NoData,
        Status::Proto,
        Status::TooBig,
        Status::NotSupp,
        Status::TimedOut,
        Status::Stale,
        Status::InProgress,
        Status::Shutdown,
        Status::Deadlock,
        Status::NoLock,
        Status::Intr,
        Status::NoKey,
        Status::RoFs,
    ];

    /// The wire code.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Decodes a wire code; unknown codes become `Io` (never a panic).
    pub fn from_code(code: i32) -> Status {
        Status::ALL
            .iter()
            .copied()
            .find(|s| s.code() == code)
            .unwrap_or(Status::Io)
    }

    /// The errno an application sees for this status (the client edge's mapping).
    pub fn errno(self) -> i32 {
        self.code()
    }

    /// Maps an operating-system error (from a local file system) to a status.
    pub fn from_io(err: &std::io::Error) -> Status {
        match err.raw_os_error() {
            Some(code) => {
                let status = Status::from_code(code);
                if status == Status::Ok {
                    Status::Io
                } else {
                    status
                }
            }
            None => match err.kind() {
                std::io::ErrorKind::NotFound => Status::NoEnt,
                std::io::ErrorKind::PermissionDenied => Status::Access,
                std::io::ErrorKind::AlreadyExists => Status::Exist,
                std::io::ErrorKind::TimedOut => Status::TimedOut,
                _ => Status::Io,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_libc() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(s.code()), s);
        }
        assert_eq!(Status::NoEnt.errno(), libc::ENOENT);
        assert_eq!(Status::NoKey.errno(), libc::ENOKEY);
        assert_eq!(Status::NotUniq.errno(), libc::ENOTUNIQ);
        assert_eq!(Status::Loop.errno(), libc::ELOOP);
        assert_eq!(Status::Busy.errno(), libc::EBUSY);
        assert_eq!(Status::MFile.errno(), libc::EMFILE);
        assert_eq!(Status::RoFs.errno(), libc::EROFS);
        assert_eq!(Status::NoSpc.errno(), libc::ENOSPC);
        assert_eq!(Status::NotEmpty.errno(), libc::ENOTEMPTY);
        assert_eq!(Status::NoData.errno(), libc::ENODATA);
        assert_eq!(Status::NameTooLong.errno(), libc::ENAMETOOLONG);
        assert_eq!(Status::Stale.errno(), libc::ESTALE);
        assert_eq!(Status::TooBig.errno(), libc::E2BIG);
        assert_eq!(Status::NotSupp.errno(), libc::EOPNOTSUPP);
        assert_eq!(Status::InProgress.errno(), libc::EINPROGRESS);
        assert_eq!(Status::Shutdown.errno(), libc::ESHUTDOWN);
        assert_eq!(Status::Deadlock.errno(), libc::EDEADLK);
        assert_eq!(Status::NoLock.errno(), libc::ENOLCK);
        assert_eq!(Status::Intr.errno(), libc::EINTR);
    }

    #[test]
    fn unknown_code_is_io() {
        assert_eq!(Status::from_code(9999), Status::Io);
    }
}
