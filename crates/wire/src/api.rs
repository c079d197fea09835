//! The node's client API (service 6, docs/api.md): applications on a node reach the node's
//! client — the `nacre mount` process, which holds the file system's locks, caches, key and
//! recovery state once for the node — over a Unix socket, with the frames of the network
//! (header, postcard body, bulk). The caller's identity is the kernel's (`SO_PEERCRED` and
//! the caller's groups), never a field of these messages.
//!
//! Paths are bytes, relative to the mount's root (a leading `/` is the mount's root too);
//! they never leave the file system (`..` stops at its root).

use serde::{Deserialize, Serialize};

/// Version of the API spoken; a node's client answers `Hello` with its own and refuses a
/// caller's it does not speak.
pub const API_VERSION: u32 = 1;
/// Oldest API version a node's client speaks: a `Hello` of a version in
/// `API_VERSION_MIN..=API_VERSION` opens a session; another is answered `EPROTO` with the
/// range as its body ([`ApiRange`]), and the socket stays open for another `Hello`.
pub const API_VERSION_MIN: u32 = 1;
/// The header version of every API frame, for ever: the API's own version is `Hello`'s,
/// so a network protocol change never breaks a deployed application (frames are read
/// with a check that ignores the header's version: `Header::decode_any_version`).
pub const API_HEADER_VERSION: u16 = 6;

/// The API versions a node's client speaks, as its `EPROTO` answer to a `Hello` of
/// another one states them: oldest then newest, u32 little-endian each (8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiRange {
    /// Oldest version spoken.
    pub oldest: u32,
    /// Newest version spoken.
    pub newest: u32,
}

impl ApiRange {
    /// The versions this side speaks.
    pub const OURS: ApiRange = ApiRange {
        oldest: API_VERSION_MIN,
        newest: API_VERSION,
    };

    /// True if `version` is in the range.
    pub fn has(self, version: u32) -> bool {
        (self.oldest..=self.newest).contains(&version)
    }

    /// The answer's body.
    pub fn encode(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&self.oldest.to_le_bytes());
        b[4..].copy_from_slice(&self.newest.to_le_bytes());
        b
    }

    /// The range an answer's body states; None for any other body.
    pub fn decode(body: &[u8]) -> Option<ApiRange> {
        let b: &[u8; 8] = body.try_into().ok()?;
        let r = ApiRange {
            oldest: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            newest: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        };
        (r.oldest <= r.newest).then_some(r)
    }
}

impl std::fmt::Display for ApiRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.oldest == self.newest {
            true => write!(f, "API {}", self.newest),
            false => write!(f, "API {} to {}", self.oldest, self.newest),
        }
    }
}
/// Longest path a request may name.
pub const API_PATH_BYTES_MAX: usize = 4096;
/// Most bytes one read or write moves.
pub const API_IO_BYTES_MAX: u32 = 16 << 20;
/// Most entries one `Readdir` answer carries.
pub const API_READDIR_ENTRIES_MAX: u32 = 1024;

/// A request to the node's client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiRequest {
    /// The first request on a socket: a new session (`attach: None`), or another socket of
    /// an existing one (`attach: Some((session, token))`, of the same process). Reply:
    /// [`ApiReply::Hello`].
    Hello {
        /// The caller's [`API_VERSION`].
        version: u32,
        /// The session to join.
        attach: Option<(u64, [u8; 16])>,
    },
    /// Opens (and with `O_CREAT` creates) a file; `flags` as open(2)'s. Reply:
    /// [`ApiReply::Opened`].
    Open {
        /// Path.
        path: Vec<u8>,
        /// open(2) flags.
        flags: i32,
        /// Permission bits of a created file (before the caller's umask, applied by the
        /// library).
        mode: u32,
    },
    /// Closes a handle. Reply: [`ApiReply::Done`].
    Close {
        /// Handle.
        handle: u64,
    },
    /// Reads up to `len` bytes at `offset` (the reply's bulk). Reply: [`ApiReply::Data`].
    Read {
        /// Handle.
        handle: u64,
        /// Offset.
        offset: u64,
        /// Most bytes.
        len: u32,
    },
    /// Writes the request's bulk at `offset` (at the end of file for `O_APPEND` handles).
    /// Reply: [`ApiReply::Written`].
    Write {
        /// Handle.
        handle: u64,
        /// Offset.
        offset: u64,
    },
    /// Makes the handle's file durable on its OSTs and MDT. Reply: [`ApiReply::Done`].
    Fsync {
        /// Handle.
        handle: u64,
    },
    /// Sets the size of an open file. Reply: [`ApiReply::Done`].
    Ftruncate {
        /// Handle.
        handle: u64,
        /// New size.
        size: u64,
    },
    /// Attributes of a path (`follow`: of a symbolic link's target). Reply:
    /// [`ApiReply::Stat`].
    Stat {
        /// Path.
        path: Vec<u8>,
        /// Follow a final symbolic link.
        follow: bool,
    },
    /// Attributes of an open file. Reply: [`ApiReply::Stat`].
    Fstat {
        /// Handle.
        handle: u64,
    },
    /// Entries of a directory after the name `after` (None: from the start; `.` and `..`
    /// are not listed). Reply: [`ApiReply::Entries`].
    Readdir {
        /// Path.
        path: Vec<u8>,
        /// The last name of the previous answer.
        after: Option<Vec<u8>>,
    },
    /// Makes a directory. Reply: [`ApiReply::Done`].
    Mkdir {
        /// Path.
        path: Vec<u8>,
        /// Permission bits.
        mode: u32,
    },
    /// Removes an empty directory. Reply: [`ApiReply::Done`].
    Rmdir {
        /// Path.
        path: Vec<u8>,
    },
    /// Removes a name. Reply: [`ApiReply::Done`].
    Unlink {
        /// Path.
        path: Vec<u8>,
    },
    /// Renames `from` to `to` (replacing `to`, as rename(2)). Reply: [`ApiReply::Done`].
    Rename {
        /// Old path.
        from: Vec<u8>,
        /// New path.
        to: Vec<u8>,
    },
    /// Makes `path` a hard link to `existing`. Reply: [`ApiReply::Done`].
    Link {
        /// The file linked to.
        existing: Vec<u8>,
        /// The new name.
        path: Vec<u8>,
    },
    /// Makes `path` a symbolic link holding `target`. Reply: [`ApiReply::Done`].
    Symlink {
        /// What the link holds.
        target: Vec<u8>,
        /// The new name.
        path: Vec<u8>,
    },
    /// What a symbolic link holds. Reply: [`ApiReply::Target`].
    Readlink {
        /// Path.
        path: Vec<u8>,
    },
    /// Creates `path` (a new, empty regular file) striped as asked (0 and None: the
    /// directory's or file system's default). Reply: [`ApiReply::Done`].
    SetStripe {
        /// Path.
        path: Vec<u8>,
        /// Stripe count (0: default; -1 as u32::MAX: every OST).
        count: u32,
        /// Stripe size in bytes (0: default).
        size: u64,
        /// OST pool.
        pool: Option<String>,
        /// Permission bits.
        mode: u32,
    },
    /// The layout of a regular file. Reply: [`ApiReply::Stripe`].
    GetStripe {
        /// Path.
        path: Vec<u8>,
    },
    /// Sets up a ring ([`crate::ring`]) of `entries` and `buffer_bytes`: answered
    /// [`ApiReply::SendFds`], after which the caller sends one byte carrying the ring's
    /// memfd, its submission eventfd and its completion eventfd (`SCM_RIGHTS`); then
    /// [`ApiReply::Ring`] (same xid).
    RingSetup {
        /// Entries (a power of two).
        entries: u32,
        /// Bytes of buffers.
        buffer_bytes: u64,
    },
    /// Ends a ring (its requests in flight complete first). Reply: [`ApiReply::Done`].
    RingClose {
        /// The ring.
        id: u64,
    },
    /// Makes a file the caller opened through the mount (a kernel file descriptor) a
    /// handle of its session: answered [`ApiReply::SendFds`], after which the caller sends
    /// one byte `F` carrying the descriptor (`SCM_RIGHTS`); the node's client checks it is
    /// a regular file of this mount and opens it for the access the descriptor was opened
    /// with. Reply: [`ApiReply::Opened`] (same xid). The descriptor is the proof of access
    /// (the kernel checked it at open), so LD_PRELOAD can serve descriptors' data.
    Attach,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiEntry {
    /// Name.
    pub name: Vec<u8>,
    /// Inode number (as stat(2) shows it).
    pub ino: u64,
    /// `st_mode` type bits (`S_IFREG`, `S_IFDIR`, ...).
    pub kind: u32,
}

/// Attributes, as stat(2) shows them (the inode number the mount shows too).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiStat {
    /// Inode number.
    pub ino: u64,
    /// `st_mode`: type and permission bits.
    pub mode: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access (seconds, nanoseconds).
    pub atime: (i64, u32),
    /// Last data change.
    pub mtime: (i64, u32),
    /// Last status change.
    pub ctime: (i64, u32),
    /// Device number of a device node.
    pub rdev: u32,
}

/// A file's layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiStripe {
    /// Stripe count.
    pub count: u32,
    /// Stripe size in bytes.
    pub size: u64,
    /// OST pool (empty: none).
    pub pool: String,
    /// The OST of each stripe.
    pub osts: Vec<u32>,
}

/// An answer of the node's client (errors are the frame's status, a negative errno to C).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ApiReply {
    /// A session opened or joined.
    Hello {
        /// The node's [`API_VERSION`].
        version: u32,
        /// The session.
        session: u64,
        /// Its token (other sockets of the same process join with it).
        token: [u8; 16],
        /// The file system's name.
        fsname: String,
    },
    /// A file opened.
    Opened {
        /// Its handle in this session.
        handle: u64,
        /// Its attributes.
        stat: ApiStat,
    },
    /// Done.
    Done,
    /// Bytes read (in the bulk; fewer than asked at the end of file).
    Data,
    /// Bytes written.
    Written {
        /// Count.
        n: u64,
    },
    /// Attributes.
    Stat(ApiStat),
    /// Directory entries.
    Entries {
        /// Entries, in name order.
        entries: Vec<ApiEntry>,
        /// More follow (ask again after the last name).
        more: bool,
    },
    /// What a symbolic link holds.
    Target(Vec<u8>),
    /// A layout.
    Stripe(ApiStripe),
    /// Send the ring's descriptors now.
    SendFds,
    /// A ring set up.
    Ring {
        /// Its id in the session.
        id: u64,
    },
}

impl ApiRequest {
    /// Opcode (service 6).
    pub fn opcode(&self) -> u16 {
        let op = match self {
            ApiRequest::Hello { .. } => 1,
            ApiRequest::Open { .. } => 2,
            ApiRequest::Close { .. } => 3,
            ApiRequest::Read { .. } => 4,
            ApiRequest::Write { .. } => 5,
            ApiRequest::Fsync { .. } => 6,
            ApiRequest::Ftruncate { .. } => 7,
            ApiRequest::Stat { .. } => 8,
            ApiRequest::Fstat { .. } => 9,
            ApiRequest::Readdir { .. } => 10,
            ApiRequest::Mkdir { .. } => 11,
            ApiRequest::Rmdir { .. } => 12,
            ApiRequest::Unlink { .. } => 13,
            ApiRequest::Rename { .. } => 14,
            ApiRequest::Link { .. } => 15,
            ApiRequest::Symlink { .. } => 16,
            ApiRequest::Readlink { .. } => 17,
            ApiRequest::SetStripe { .. } => 18,
            ApiRequest::GetStripe { .. } => 19,
            ApiRequest::RingSetup { .. } => 20,
            ApiRequest::RingClose { .. } => 21,
            ApiRequest::Attach => 22,
        };
        0x0600 | op
    }

    /// Every path the request names, for the server's bound check.
    pub fn paths(&self) -> Vec<&[u8]> {
        match self {
            ApiRequest::Open { path, .. }
            | ApiRequest::Stat { path, .. }
            | ApiRequest::Readdir { path, .. }
            | ApiRequest::Mkdir { path, .. }
            | ApiRequest::Rmdir { path }
            | ApiRequest::Unlink { path }
            | ApiRequest::Readlink { path }
            | ApiRequest::SetStripe { path, .. }
            | ApiRequest::GetStripe { path } => vec![path],
            ApiRequest::Rename { from, to } => vec![from, to],
            ApiRequest::Link { existing, path } => vec![existing, path],
            ApiRequest::Symlink { target, path } => vec![target, path],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_body, encode_body};
    use proptest::prelude::*;

    #[test]
    fn the_api_range_answer_is_eight_bytes() {
        let r = ApiRange {
            oldest: 1,
            newest: 2,
        };
        assert_eq!(r.encode(), [1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(ApiRange::decode(&r.encode()), Some(r));
        assert_eq!(ApiRange::decode(&[]), None);
        assert_eq!(ApiRange::decode(&[2, 0, 0, 0, 1, 0, 0, 0]), None);
        assert!(ApiRange::OURS.has(API_VERSION) && !ApiRange::OURS.has(API_VERSION + 1));
        assert_eq!(r.to_string(), "API 1 to 2");
    }

    #[test]
    fn requests_round_trip_and_opcodes_are_service_6() {
        let all = [
            ApiRequest::Hello {
                version: API_VERSION,
                attach: Some((7, [1; 16])),
            },
            ApiRequest::Open {
                path: b"/a/b".to_vec(),
                flags: 0o101,
                mode: 0o644,
            },
            ApiRequest::Read {
                handle: 3,
                offset: 1 << 40,
                len: 4096,
            },
            ApiRequest::Rename {
                from: b"x".to_vec(),
                to: b"y".to_vec(),
            },
            ApiRequest::SetStripe {
                path: b"f".to_vec(),
                count: u32::MAX,
                size: 1 << 20,
                pool: Some("flash".into()),
                mode: 0o600,
            },
            ApiRequest::Attach,
        ];
        for r in all {
            assert_eq!(r.opcode() >> 8, 6);
            let back: ApiRequest = decode_body(&encode_body(&r)).unwrap();
            assert_eq!(back, r);
        }
    }

    proptest! {
        /// Decoding arbitrary bytes, or a truncated valid message, never panics.
        #[test]
        fn decode_is_total(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_body::<ApiRequest>(&bytes);
            let _ = decode_body::<ApiReply>(&bytes);
            let r = ApiRequest::Readdir { path: bytes.clone(), after: Some(vec![1, 2]) };
            let enc = encode_body(&r);
            for cut in 0..enc.len() {
                prop_assert!(decode_body::<ApiRequest>(&enc[..cut]).is_err());
            }
        }
    }
}
