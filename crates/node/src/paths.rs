//! Paths of API requests, walked from the mount's root through the client's lookups (each
//! one checked by the MDT against the caller's credentials, as the kernel's walk would
//! be): `.` stays, `..` goes up and stops at the root, symbolic links met on the way are
//! followed (at most [`SYMLINKS_MAX`]), an absolute link target naming the mount's own
//! directory is followed inside it.

use nacre_client::{Client, ClientError};
use nacre_types::{Attr, Fid, FileKind, Status};
use std::path::Path;

/// Symbolic links one walk follows at most (Linux's limit: `ELOOP` past it).
pub const SYMLINKS_MAX: usize = 40;
/// Longest name of one component.
pub const NAME_BYTES_MAX: usize = 255;

/// Where a path leads: its directory, its last name (empty for the root) and what that
/// name is, if it exists.
pub struct Walked {
    /// The directory holding the last name.
    pub parent: Fid,
    /// The last name.
    pub name: Vec<u8>,
    /// Its attributes (None: no such entry).
    pub attr: Option<Attr>,
}

/// Walks paths of one mount.
pub struct Walker<'a> {
    /// The client.
    pub client: &'a Client,
    /// The mount's directory on this node (absolute link targets under it are followed).
    pub mountpoint: &'a Path,
}

fn status(s: Status) -> ClientError {
    ClientError::from(s)
}

impl Walker<'_> {
    /// Walks `path`; `follow`: a last component that is a symbolic link is followed too.
    pub fn walk(&self, path: &[u8], follow: bool) -> Result<Walked, ClientError> {
        let root = self.client.root()?;
        let mut links = 0;
        self.walk_from(root, vec![root], path, follow, &mut links)
    }

    /// Walks `path` from `dirs` (the directories walked so far, the root first).
    fn walk_from(
        &self,
        root: Fid,
        mut dirs: Vec<Fid>,
        path: &[u8],
        follow: bool,
        links: &mut usize,
    ) -> Result<Walked, ClientError> {
        if path.len() > nacre_wire::api::API_PATH_BYTES_MAX {
            return Err(status(Status::NameTooLong));
        }
        if path.starts_with(b"/") {
            dirs.truncate(1);
        }
        let parts: Vec<&[u8]> = path
            .split(|&b| b == b'/')
            .filter(|p| !p.is_empty() && *p != b".")
            .collect();
        let mut at: Option<Attr> = None;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if part.len() > NAME_BYTES_MAX {
                return Err(status(Status::NameTooLong));
            }
            if let Some(a) = &at {
                if a.kind != FileKind::Directory {
                    return Err(status(Status::NotDir));
                }
            }
            if *part == b".." {
                if dirs.len() > 1 {
                    dirs.pop();
                }
                at = None;
                if last {
                    let fid = *dirs.last().expect("the root stays");
                    return self.named_dir(root, &dirs, fid);
                }
                continue;
            }
            let parent = *dirs.last().expect("the root stays");
            let attr = match self.client.lookup(parent, part, last) {
                Ok(a) => a,
                Err(e) if last && e.errno() == libc::ENOENT => {
                    return Ok(Walked {
                        parent,
                        name: part.to_vec(),
                        attr: None,
                    })
                }
                Err(e) => return Err(e),
            };
            if attr.kind == FileKind::Symlink && (!last || follow) {
                *links += 1;
                if *links > SYMLINKS_MAX {
                    return Err(status(Status::Loop));
                }
                let target = self.client.readlink(attr.fid)?;
                let target = self.inside(&target)?;
                let rest: Vec<u8> = parts[i + 1..].join(&b"/"[..]);
                let mut joined = target;
                if !rest.is_empty() {
                    joined.push(b'/');
                    joined.extend_from_slice(&rest);
                }
                return self.walk_from(root, dirs, &joined, follow, links);
            }
            if last {
                return Ok(Walked {
                    parent,
                    name: part.to_vec(),
                    attr: Some(attr),
                });
            }
            dirs.push(attr.fid);
            at = Some(attr);
        }
        // The path named a directory walked to (the root, or one ended by `/` or `.`).
        let fid = *dirs.last().expect("the root stays");
        self.named_dir(root, &dirs, fid)
    }

    /// The walk's answer for a directory reached as a whole (`a/b/`, `.`, `..`, the root).
    fn named_dir(&self, root: Fid, dirs: &[Fid], fid: Fid) -> Result<Walked, ClientError> {
        let attr = self.client.getattr(fid)?;
        if attr.kind != FileKind::Directory {
            return Err(status(Status::NotDir));
        }
        let parent = if dirs.len() > 1 {
            dirs[dirs.len() - 2]
        } else {
            root
        };
        Ok(Walked {
            parent,
            name: Vec::new(),
            attr: Some(attr),
        })
    }

    /// A link's target as a path inside the file system: relative targets as they are,
    /// absolute ones only under the mount's directory (else `EXDEV`: outside this file
    /// system, which the node's client cannot reach).
    fn inside(&self, target: &[u8]) -> Result<Vec<u8>, ClientError> {
        if !target.starts_with(b"/") {
            return Ok(target.to_vec());
        }
        let mnt = self.mountpoint.as_os_str().as_encoded_bytes();
        let mnt = mnt.strip_suffix(b"/").unwrap_or(mnt);
        match target.strip_prefix(mnt) {
            Some(rest) if rest.is_empty() || rest.starts_with(b"/") => {
                let mut p = b"/".to_vec();
                p.extend_from_slice(rest);
                Ok(p)
            }
            _ => Err(status(Status::XDev)),
        }
    }
}
